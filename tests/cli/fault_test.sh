#!/usr/bin/env bash
# Failure injection through the CLI's own launcher (issue 13): a rank of
# `frameshard verify --nproc 3` is made to fail by FRAMESHARD_FAULT
# (src/runtime/fault.h) at start-up, in the tower, before the consensus and
# before the gather, by SIGKILL, an exit, an exception or a hang. Every case
# must end with exit code 2 and a clear error naming the rank, well within
# the collective timeout (the parent stops the survivors once a rank died),
# leave no worker process behind, and print whole stderr lines each naming
# its rank (the parent relays the workers' stderr line by line).
# Usage: bash tests/cli/fault_test.sh <frameshard-binary> <repo-root>
set -u

BIN=${1:?usage: fault_test.sh <frameshard-binary> <repo-root>}
# shellcheck source=tests/cli/lib.sh
source "$(dirname "$0")/lib.sh"

# fault NAME FAULT MAX_SECONDS ERR_PATTERN [VERIFY_ARGS...]: runs verify with
# FRAMESHARD_FAULT=FAULT; the workers' temporary directories (the store
# path is in their command line) are under $TMP/NAME, to look for orphans.
fault() {
  local name=$1 spec=$2 max=$3 pattern=$4
  shift 4
  mkdir -p "$TMP/$name.tmp"
  local start=$SECONDS
  if TMPDIR=$TMP/$name.tmp FRAMESHARD_FAULT=$spec run_cmd "$name" 2 \
    "$BIN" verify --nproc 3 --dtype float64 "$@"; then
    expect_err "$name" "$pattern"
  fi
  local took=$((SECONDS - start))
  [ "$took" -le "$max" ] || fail "$name: took $took s, expected at most $max s"
  sleep 0.2
  if pgrep -f "$TMP/$name.tmp" >/dev/null; then
    fail "$name: worker processes left behind:"
    pgrep -af "$TMP/$name.tmp" >&2
    kill -9 $(pgrep -f "$TMP/$name.tmp") 2>/dev/null
  fi
  # Whole lines: each is the parent's own "error: verify: ..." or a
  # worker's line naming its rank once (two ranks' lines never merge).
  if grep -Ev '^(error: verify: |error: \[verify rank [0-9]\] |\[verify rank [0-9]\] )' \
    "$TMP/$name.err" | grep -q .; then
    fail "$name: stderr lines without their rank:"
    sed 's/^/  | /' "$TMP/$name.err" >&2
  fi
  if grep -Eq 'rank [0-9]\].*\[verify rank [0-9]\]' "$TMP/$name.err"; then
    fail "$name: two ranks' output on one line"
  fi
}

# A rank that dies at start-up, before joining the store: with the default
# 60 s timeout the survivors would wait for it a whole minute.
fault start_exit 1:start:exit 20 'rank 1 exited with code 3'
fault start_kill 2:start:kill 20 'rank 2 was killed by signal 9'
# Killed inside the tower, before the consensus, before the gather.
fault tower_kill 1:tower:kill 20 'rank 1 was killed by signal 9' --timeout-ms 10000
fault consensus_kill 0:consensus:kill 20 'rank 0 was killed by signal 9' --timeout-ms 10000
fault gather_kill 2:gather:kill 20 'rank 2 was killed by signal 9' --timeout-ms 10000
# A rank that raises before the collective: the consensus reports its error
# on every rank (each survivor prints it).
fault tower_raise 1:tower:raise 20 'error: \[verify rank 0\].*injected failure' --timeout-ms 10000
expect_err tower_raise 'error: \[verify rank 2\].*injected failure'
# One that raises or quits between the consensus and the gather.
fault gather_raise 1:gather:raise 20 'error: \[verify rank 1\].*injected failure' --timeout-ms 10000
fault consensus_exit 2:consensus:exit 20 'rank 2 exited with code 3' --timeout-ms 10000
# A hung rank: its peers time out (4 s), then the parent kills it.
fault gather_hang 1:gather:hang 25 'rank 1 still running .* failed; killing it' --timeout-ms 4000
# A worker's own stderr line comes through the parent with its rank.
fault inject_exit '' 20 'rank 2 exited with code 3' --inject-fault exit
expect_err inject_exit '^\[verify rank 2\] verify: rank 2 exits \(--inject-fault exit\)$'
# A malformed FRAMESHARD_FAULT is an error, not ignored.
fault malformed 1:lunch:kill 20 'expected FRAMESHARD_FAULT=<rank>:'

finish fault_test
