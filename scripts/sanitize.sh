#!/usr/bin/env bash
# Builds and runs the C++ tests under sanitizers (CI's sanitize and tsan
# tiers). Measured runs: docs/reliability.md, Sanitizers.
#
# Usage: scripts/sanitize.sh core-asan|asan|tsan [extra cmake -D options...]
#   core-asan  ASan + UBSan, torch-free unit tests only (build-asan-core; no
#              venv needed; CI's sanitize tier)
#   asan       ASan + UBSan: the unit (core and models) and multi-rank dist
#              tests against .venv's LibTorch (build-asan; a manual run: its
#              cold build, about 53 min here, does not fit CI's budget)
#   tsan       ThreadSanitizer: the multi-rank dist tests (every rank a thread)
#              and the two-thread split-frame models test (build-tsan);
#              FRAMESHARD_TSAN_FILTER narrows the dist tests (gtest filter)
#
# LibTorch, Gloo, yaml-cpp and GTest are prebuilt and uninstrumented: ASan
# still checks every access our code makes (and the interceptors see their
# frees), but not the bugs inside them; TSan sees only our code's accesses
# (and the pthread/mutex calls it intercepts). Run-time options, with their
# reasons:
#   ASAN_OPTIONS detect_leaks=1 (leaks fail the run) for the unit and models
#     tests, strict_string_checks=1 for the torch-free ones; measured clean
#     with the leak check on (torch's static registries stay reachable, so
#     LSan does not report them). The dist tests: see the asan case below.
#   UBSAN_OPTIONS print_stacktrace=1 (UB aborts: -fno-sanitize-recover).
#   TSAN_OPTIONS halt_on_error=1, second_deadlock_stack=1 (tsan case).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
kind=${1:?usage: scripts/sanitize.sh core-asan|asan|tsan [cmake -D options...]}
shift
jobs=${FRAMESHARD_JOBS:-$(nproc)}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DFRAMESHARD_BUILD_TOOLS=OFF
  -DFRAMESHARD_BUILD_BENCHMARKS=OFF -DFRAMESHARD_WERROR=ON)
case "$kind" in
core-asan)
  dir=build-asan-core
  cmake -S . -B "$dir" "${common[@]}" -DFRAMESHARD_SANITIZE=address,undefined \
    -DFRAMESHARD_BUILD_RUNTIME=OFF "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" --target frameshard_unit_tests
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
    "$dir/tests/frameshard_unit_tests" --gtest_brief=1
  ;;
asan)
  dir=build-asan
  cmake -S . -B "$dir" "${common[@]}" -DFRAMESHARD_SANITIZE=address,undefined "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" --target frameshard_unit_tests \
    frameshard_models_tests frameshard_dist_tests
  echo "sanitize: asan frameshard_unit_tests"
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
    "$dir/tests/frameshard_unit_tests" --gtest_brief=1
  echo "sanitize: asan frameshard_models_tests"
  ASAN_OPTIONS=detect_leaks=1 "$dir/tests/frameshard_models_tests" --gtest_brief=1
  # Not the soak: its resident-set bound (32 MB growth) does not hold under
  # ASan, whose quarantine keeps freed memory back by design (measured: +93 MB
  # over the 50 steps); the soak runs uninstrumented in the dist tier.
  echo "sanitize: asan frameshard_dist_tests"
  ASAN_OPTIONS=detect_leaks=0 "$dir/tests/frameshard_dist_tests" --gtest_brief=1 \
    --gtest_filter='-Soak.*'

  ;;
tsan)
  # Only what the threads run through: the multi-rank tests (every rank a
  # thread, Gloo on loopback) and the models tests (two threads exchanging
  # split-frame pieces). The torch-free unit tests start no thread.
  dir=build-tsan
  # Test discovery at ctest time, not after the link: the build must not run a
  # TSan binary before the ASLR check below.
  cmake -S . -B "$dir" "${common[@]}" -DFRAMESHARD_SANITIZE=thread \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" --target frameshard_models_tests frameshard_dist_tests
  # halt_on_error: the first race fails the run. second_deadlock_stack: a
  # lock-order report shows both acquisitions. The suppressions file covers
  # only races inside uninstrumented third-party code (reason per entry).
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp"
  # torch's intra-op OpenMP threads synchronise inside libgomp, which is not
  # instrumented: TSan reported its own fork/join as a race (a memset in
  # cpu_flash_attention on a buffer the caller allocated, measured). The
  # threads under test are the ranks, not torch's intra-op pool.
  export OMP_NUM_THREADS=1
  # TSan's shadow memory layout needs the address space it expects; with a
  # high mmap ASLR entropy (vm.mmap_rnd_bits above 28, e.g. 32 on recent
  # kernels) gcc 12's runtime stops with "FATAL: ThreadSanitizer: unexpected
  # memory mapping". Then run without ASLR (setarch -R), for this process only.
  prefix=()
  if ! probe=$("$dir/tests/frameshard_dist_tests" --gtest_list_tests 2>&1 >/dev/null); then
    if grep -q "unexpected memory mapping" <<<"$probe" && command -v setarch >/dev/null; then
      echo "sanitize: TSan needs ASLR off here (vm.mmap_rnd_bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null)): setarch -R"
      prefix=(setarch "$(uname -m)" -R)
    else
      printf '%s\n' "$probe" >&2
      exit 1
    fi
  fi
  echo "sanitize: tsan frameshard_models_tests (split-frame pieces on two threads)"
  "${prefix[@]}" "$dir/tests/frameshard_models_tests" --gtest_brief=1 \
    --gtest_filter='*PiecesOnTwoThreads*'
  echo "sanitize: tsan frameshard_dist_tests"
  "${prefix[@]}" "$dir/tests/frameshard_dist_tests" --gtest_brief=1 \
    --gtest_filter="${FRAMESHARD_TSAN_FILTER:-*}"
  ;;
*)
  echo "sanitize: expected core-asan, asan or tsan, got '$kind'" >&2
  exit 2
  ;;
esac
