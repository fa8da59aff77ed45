#!/usr/bin/env bash
# Builds and runs the C++ tests under sanitizers (CI's sanitize and tsan
# tiers). Measured runs: docs/reliability.md, Sanitizers.
#
# Usage: scripts/sanitize.sh MODE [extra cmake -D options...]
#   core-asan     ASan + UBSan, the torch-free unit tests (build-asan-core;
#                 no venv needed)
#   ci-asan       ASan + UBSan, the torch-free unit tests and the runtime's
#                 multi-rank tests (frameshard_dist_tests: every rank a
#                 thread, Gloo on loopback) against .venv's LibTorch
#                 (build-asan; CI's sanitize tier)
#   ci-tsan       ThreadSanitizer, the runtime's multi-rank tests (build-tsan;
#                 CI's tsan tier)
#   asan          ASan + UBSan, every C++ test program: unit, models, the
#                 runtime's and the towers' multi-rank tests (build-asan; by
#                 hand: its build adds the models layer and its tests)
#   tsan          ThreadSanitizer, every program that starts threads: the
#                 two-thread split-frame models test and both multi-rank
#                 programs (build-tsan; by hand)
# FRAMESHARD_SANITIZE_FILTER narrows the multi-rank tests (a gtest filter).
#
# LibTorch, Gloo, yaml-cpp and GTest are prebuilt and uninstrumented: ASan
# still checks every access our code makes (and the interceptors see their
# frees), but not the bugs inside them; TSan sees only our code's accesses.
# Run-time options, with their reasons:
#   ASAN_OPTIONS detect_leaks=1 (leaks fail the run) everywhere,
#     strict_string_checks=1 for the torch-free tests; measured clean (torch's
#     static registries stay reachable, so LSan does not report them).
#   UBSAN_OPTIONS print_stacktrace=1 (UB aborts: -fno-sanitize-recover).
#   TSAN_OPTIONS: see tsan_env below.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mode=${1:?usage: scripts/sanitize.sh core-asan|ci-asan|ci-tsan|asan|tsan [cmake -D options...]}
shift
jobs=${FRAMESHARD_JOBS:-$(nproc)}
filter=${FRAMESHARD_SANITIZE_FILTER:-*}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# -O1 -g1: a sanitizer build's time goes into compiling against torch's
# headers; measured on src/runtime/encode.cpp under TSan, 18.9 s of CPU at
# RelWithDebInfo's -O2 -g, 10.9 s at -O1 -g1 (line tables kept: reports
# still name file and line).
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  -DFRAMESHARD_BUILD_TOOLS=OFF -DFRAMESHARD_BUILD_BENCHMARKS=OFF -DFRAMESHARD_WERROR=ON)

# run NAME PROGRAM ARGS...: one test program, announced.
run() {
  echo "sanitize: $mode $1"
  shift
  "$@" --gtest_brief=1
}

# The soak is left out under ASan: its resident-set bound (32 MB growth)
# does not hold there, because ASan's quarantine keeps freed memory back by
# design (measured: +93 MB over the 50 steps); it runs uninstrumented in the
# dist tier, and under TSan.
asan_build() {
  dir=build-asan
  cmake -S . -B "$dir" "${common[@]}" -DFRAMESHARD_SANITIZE=address,undefined "$@" >/dev/null
}

tsan_build() {
  dir=build-tsan
  # Test discovery at ctest time, not after the link: the build must not run a
  # TSan binary before the ASLR check of tsan_env.
  cmake -S . -B "$dir" "${common[@]}" -DFRAMESHARD_SANITIZE=thread \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST "$@" >/dev/null
}

# tsan_env PROGRAM: TSAN_OPTIONS, and in `prefix` how to start a TSan program
# here.
tsan_env() {
  # halt_on_error: the first race fails the run. second_deadlock_stack: a
  # lock-order report shows both acquisitions.
  # ignore_noninstrumented_modules: the intercepted calls (free, memcpy,
  # memset, mutexes, condition variables) that uninstrumented libraries make
  # (LibTorch, Gloo inside it, libgomp) are neither checked nor taken as
  # synchronisation. Those libraries order their threads with atomics TSan
  # cannot see (intrusive_ptr refcounts, Work's completion state), so without
  # it every collective reported a Gloo worker's free of a tensor after the
  # rank's last read (measured: 178 reports over the dist tests, all with a
  # LibTorch frame calling the interceptor; none in our code). Every access our
  # code makes is still checked, including code LibTorch calls back (autograd
  # functions): a planted race between two rank threads (a std::vector<bool>
  # written per rank) is reported with it. What it gives up: a race between a
  # rank's code and a Gloo worker (a buffer touched before wait()). Measured
  # clean with it, and without pinning torch's intra-op OpenMP threads (whose
  # own fork/join, inside libgomp, was the first false report).
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$root/scripts/tsan.supp"
  # TSan's shadow memory layout needs the address space it expects; with a
  # high mmap ASLR entropy (vm.mmap_rnd_bits above 28, e.g. 32 on recent
  # kernels) gcc 12's runtime stops with "FATAL: ThreadSanitizer: unexpected
  # memory mapping". Then run without ASLR (setarch -R), for this process only.
  prefix=()
  local probe
  if ! probe=$("$1" --gtest_list_tests 2>&1 >/dev/null); then
    if grep -q "unexpected memory mapping" <<<"$probe" && command -v setarch >/dev/null; then
      echo "sanitize: TSan needs ASLR off here (vm.mmap_rnd_bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null)): setarch -R"
      prefix=(setarch "$(uname -m)" -R)
    else
      printf '%s\n' "$probe" >&2
      exit 1
    fi
  fi
}

case "$mode" in
core-asan)
  dir=build-asan-core
  cmake -S . -B "$dir" "${common[@]}" -DFRAMESHARD_SANITIZE=address,undefined \
    -DFRAMESHARD_BUILD_RUNTIME=OFF "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" --target frameshard_unit_tests
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
    run frameshard_unit_tests "$dir/tests/frameshard_unit_tests"
  ;;
ci-asan)
  asan_build "$@"
  cmake --build "$dir" -j "$jobs" --target frameshard_unit_tests frameshard_dist_tests
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
    run frameshard_unit_tests "$dir/tests/frameshard_unit_tests"
  ASAN_OPTIONS=detect_leaks=1 run frameshard_dist_tests \
    "$dir/tests/frameshard_dist_tests" --gtest_filter="$filter"
  ;;
asan)
  asan_build "$@"
  cmake --build "$dir" -j "$jobs" --target frameshard_unit_tests \
    frameshard_models_tests frameshard_dist_tests frameshard_dist_tower_tests
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
    run frameshard_unit_tests "$dir/tests/frameshard_unit_tests"
  export ASAN_OPTIONS=detect_leaks=1
  run frameshard_models_tests "$dir/tests/frameshard_models_tests"
  run frameshard_dist_tests "$dir/tests/frameshard_dist_tests" --gtest_filter="$filter"
  run "frameshard_dist_tower_tests (not the soak)" \
    "$dir/tests/frameshard_dist_tower_tests" --gtest_filter="$filter:-Soak.*"
  ;;
ci-tsan)
  tsan_build "$@"
  cmake --build "$dir" -j "$jobs" --target frameshard_dist_tests
  tsan_env "$dir/tests/frameshard_dist_tests"
  run frameshard_dist_tests "${prefix[@]}" "$dir/tests/frameshard_dist_tests" \
    --gtest_filter="$filter"
  ;;
tsan)
  # Only what starts threads: the multi-rank programs (every rank a thread)
  # and the models test that runs split-frame pieces on two threads. The
  # torch-free unit tests start none.
  tsan_build "$@"
  cmake --build "$dir" -j "$jobs" --target frameshard_models_tests \
    frameshard_dist_tests frameshard_dist_tower_tests
  tsan_env "$dir/tests/frameshard_dist_tests"
  run "frameshard_models_tests (split-frame pieces on two threads)" "${prefix[@]}" \
    "$dir/tests/frameshard_models_tests" --gtest_filter='*PiecesOnTwoThreads*'
  run frameshard_dist_tests "${prefix[@]}" "$dir/tests/frameshard_dist_tests" \
    --gtest_filter="$filter"
  run frameshard_dist_tower_tests "${prefix[@]}" "$dir/tests/frameshard_dist_tower_tests" \
    --gtest_filter="$filter"
  ;;
*)
  echo "sanitize: expected core-asan, ci-asan, ci-tsan, asan or tsan, got '$mode'" >&2
  exit 2
  ;;
esac
