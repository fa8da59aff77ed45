#!/usr/bin/env bash
# Failure injection through the CLI's own launcher (issue 13): a rank of
# `frameshard verify --nproc 3` is made to fail by FRAMESHARD_FAULT
# (src/runtime/fault.h) at start-up, in the tower, before the consensus and
# before the gather, by SIGKILL, an exit, an exception or a hang; to disagree
# with its peers on the grid, dtype, partitioner or group size; or to delete
# the store. Last, a torchrun-style launch whose store host dies. Every case
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

# Ranks whose inputs disagree (FRAMESHARD_FAULT=<rank>:input:<what>, carried
# out by verify's workers): another grid, dtype or partitioner on one rank is
# caught by the consensus before any output moves, and every rank reports it.
fault input_grid 1:input:grid 20 'error: \[verify rank 0\].*ranks disagree on the plan' --timeout-ms 10000
expect_err input_grid 'error: \[verify rank 2\].*ranks disagree on the plan'
fault input_config 2:input:config 20 'error: \[verify rank 1\].*ranks disagree on the plan' --timeout-ms 10000
fault input_dtype 0:input:dtype 20 'error: \[verify rank 2\].*ranks disagree on the output dtype' --timeout-ms 10000
# A rank that forms a group one larger than its peers': the size check at
# the store says so at once, instead of a wait for a rank that never comes.
fault input_world 1:input:world 20 'expected every rank to form a group of the same size, got' --timeout-ms 10000

# The store disappears: rank 2 deletes the file store once a peer created it
# (as a /tmp cleaner would). The ranks cannot meet; every one that waits
# says where and for how long, within the 3 s timeout plus the grace.
fault store_remove 2:store:remove 20 'expected all 3 ranks to join through the file store .* within 3000 ms' --timeout-ms 3000

# The TCP store of a torchrun-style launch disappears with its host: rank 0
# is killed before it serves the store; rank 1 (a separate process, as under
# torchrun) fails within its 3 s timeout naming the address, not after 120 s.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$TMP/tcp.tmp"
start=$SECONDS
for r in 0 1; do
  TMPDIR=$TMP/tcp.tmp RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$PORT FRAMESHARD_FAULT=0:start:kill \
    "$BIN" train --data.scale 12 --train.steps 2 --train.timeout_ms 3000 \
    >"$TMP/tcp$r.out" 2>"$TMP/tcp$r.err" &
  eval "pid$r=\$!"
done
{ wait "$pid0"; } 2>/dev/null
rc0=$?
wait "$pid1"
rc1=$?
took=$((SECONDS - start))
[ "$rc0" -eq 137 ] || fail "tcp_store: rank 0 exited $rc0, expected 137 (SIGKILL)"
[ "$rc1" -ne 0 ] || fail "tcp_store: rank 1 succeeded without its store"
grep -q "expected all 2 ranks to join through the store at 127.0.0.1:$PORT (hosted by rank 0) within 3000 ms" "$TMP/tcp1.err" ||
  { fail "tcp_store: rank 1's error does not name the store:"; sed 's/^/  | /' "$TMP/tcp1.err" >&2; }
[ "$took" -le 20 ] || fail "tcp_store: took $took s, expected at most 20 s"

finish fault_test
