#!/usr/bin/env bash
# Counts abnormal exits of bench/torchrun_exit.py under torchrun (issue 38: a rank aborting at exit
# with `terminate called without an active exception`, torchrun exit -6 / 1).
# Usage: bash bench/exit_loop.sh N MODE    (MODE: clean | unclean)
#   runs `torchrun --standalone --nproc-per-node 2 bench/torchrun_exit.py` N times, one at a time;
#   a run is abnormal if torchrun exits non-zero or its output holds "terminate called".
#   Prints `runs N, abnormal K (exit codes: ...)` and the seconds per run.
#   EXIT_LOOP_UNTIL  stop starting runs after this time (a `date -d` string, e.g. 10:40)
#   EXIT_LOOP_LOGS   keep every run's output here (default: a temporary folder, abnormal runs'
#                    output is printed)
#   FRAMESHARD_VENV  the venv (default: <repo>/.venv); PYTHONPATH as the caller sets it
set -uo pipefail
n=${1:?usage: exit_loop.sh N clean|unclean}
mode=${2:?usage: exit_loop.sh N clean|unclean}
case "$mode" in
clean) flag=() ;;
unclean) flag=(--no-clean-exit) ;;
*)
  echo "exit_loop: MODE is clean or unclean, got '$mode'" >&2
  exit 2
  ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${FRAMESHARD_VENV:-$root/.venv}
logs=${EXIT_LOOP_LOGS:-$(mktemp -d)}
mkdir -p "$logs"
until=""
[ -n "${EXIT_LOOP_UNTIL:-}" ] && until=$(date -d "$EXIT_LOOP_UNTIL" +%s)
cd "$root" || exit 2
runs=0 abnormal=0 codes="" start=$(date +%s)
for i in $(seq "$n"); do
  if [ -n "$until" ] && [ "$(date +%s)" -ge "$until" ]; then
    echo "exit_loop: stopped at $EXIT_LOOP_UNTIL after $runs of $n runs"
    break
  fi
  log=$logs/$mode-$i.log
  OMP_NUM_THREADS=1 "$venv/bin/torchrun" --standalone --nproc-per-node 2 \
    bench/torchrun_exit.py "${flag[@]}" >"$log" 2>&1
  rc=$?
  runs=$((runs + 1))
  if [ "$rc" -ne 0 ] || grep -q "terminate called" "$log"; then
    abnormal=$((abnormal + 1))
    codes="$codes $rc"
    echo "exit_loop: run $i abnormal (torchrun exit $rc), log $log:"
    grep -E "terminate called|exitcode|Signal|Traceback|Error" "$log" | head -20
  fi
  echo "exit_loop: $mode run $i rc $rc ($(($(date +%s) - start)) s so far)"
done
secs=$(($(date +%s) - start))
echo "runs $runs, abnormal $abnormal (exit codes:${codes:- none})"
[ "$runs" -gt 0 ] && echo "mode $mode: $secs s, $((secs / runs)) s per run, logs in $logs"
