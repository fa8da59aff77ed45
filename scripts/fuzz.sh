#!/usr/bin/env bash
# Runs every libFuzzer harness of a FRAMESHARD_FUZZ=ON build for a while each
# (CI's fuzz-smoke tier; longer runs for docs/reliability.md) and prints one
# line per target: executions, corpus size, result.
#
# Usage: scripts/fuzz.sh <fuzz-build-dir> [seconds-per-target] [target...]
#   e.g. scripts/fuzz.sh build-fuzz 20            (every target, 20 s each)
#        scripts/fuzz.sh build-fuzz 300 plan      (one target, 5 min)
#   FRAMESHARD_FUZZ_WORK  where new corpus entries and crash artifacts go
#                         (default: a temporary folder, removed when clean);
#                         the checked-in seeds (tests/fuzz/corpus/<target>)
#                         are read, never written.
#   FRAMESHARD_FUZZ_JOBS  targets run at once (default: nproc; each fuzzer is
#                         one process on one core, so CI's 8 targets take 4
#                         rounds on 2 cores instead of 8)
# Exit status 1 when any target finds a crash, a leak, a timeout (10 s per
# input) or an input needing over 2 GB, after running all of them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: scripts/fuzz.sh <fuzz-build-dir> [seconds] [target...]}
seconds=${2:-20}
shift $(($# < 2 ? $# : 2))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for exe in "$build"/tests/fuzz/*_fuzz; do
    [ -x "$exe" ] && targets+=("$(basename "$exe" _fuzz)")
  done
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz: no *_fuzz programs in $build/tests/fuzz" >&2; exit 1; }
work=${FRAMESHARD_FUZZ_WORK:-$(mktemp -d)}
jobs=${FRAMESHARD_FUZZ_JOBS:-$(nproc)}

# fuzz_one TARGET: runs it, writes its report line to $work/TARGET/line and
# its exit code to $work/TARGET/rc.
fuzz_one() {
  local t=$1 log start rc=0 execs found result
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  log=$work/$t/log
  start=$(date +%s)
  # The first corpus folder receives new inputs; the seeds are only read.
  "$build/tests/fuzz/${t}_fuzz" "$work/$t/corpus" "$root/tests/fuzz/corpus/$t" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/$t/artifacts/" -print_final_stats=1 \
    >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  found=$(ls "$work/$t/corpus" | wc -l)
  if [ "$rc" -eq 0 ]; then
    result=clean
  else
    result="FAILED (exit $rc; $(ls "$work/$t/artifacts" | tr '\n' ' '))"
  fi
  printf 'fuzz: %-17s %4s s  %10s execs  %5s new corpus files  %s\n' \
    "$t" "$(($(date +%s) - start))" "${execs:-?}" "$found" "$result" >"$work/$t/line"
  echo "$rc" >"$work/$t/rc"
}

running=0
for t in "${targets[@]}"; do
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

failed=()
for t in "${targets[@]}"; do
  cat "$work/$t/line"
  if [ "$(cat "$work/$t/rc")" != 0 ]; then
    failed+=("$t")
    grep -E "ERROR|SUMMARY|==[0-9]+==|terminate|what\(\)" "$work/$t/log" | head -20 >&2 || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]}; logs and artifacts in $work" >&2
  exit 1
fi
[ -n "${FRAMESHARD_FUZZ_WORK:-}" ] || rm -rf "$work"
