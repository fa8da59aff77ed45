#!/usr/bin/env bash
# GRPO groups and frame_sharding.dedup end to end: `frameshard ab` on the
# grpo preset (each prompt sampled data.group_size times) with dedup, its
# distinct/total frames and rows in the JSON and the text, the same losses
# as the replicated arm; AReaL's rank-local dedup (sharding off, dedup on)
# as ab's second arm; `plan` and `analyze` on the grpo preset, with and
# without dedup; a bad group key.
# Usage: bash tests/cli/grpo_test.sh <frameshard-binary> <repo-root>
set -u

BIN=${1:?usage: grpo_test.sh <frameshard-binary> <repo-root>}
PY=/usr/bin/python3
# shellcheck source=tests/cli/lib.sh
source "$(dirname "$0")/lib.sh"
FS=distributed.multimodal.vision.frame_sharding

# Groups of 4, small frames: a prompt is about 40 frame units of 4 rows.
GRPO=(--data.preset grpo --data.group_size 4 --data.scale 24
  --data.text_tokens 4)

# 1. ab with dedup: the sharded arm's towers run a quarter of the rows, the
#    losses are the replicated arm's.
if run_cmd ab 0 "$BIN" ab "${GRPO[@]}" --train.steps 2 --json --plot "" \
    --$FS.dedup true; then
  "$PY" - "$TMP/ab.out" <<'PYEOF' || fail "ab: JSON checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["loss_max_abs_diff"] <= 1e-5, j["loss_max_abs_diff"]
rep, sh = j["replicated"], j["sharded"]
assert rep["dedup"] is False and sh["dedup"] is True, (rep["dedup"], sh["dedup"])
assert sh["name"] == "sharded" and sh["plan_path"] == "sharded", sh["name"]
for k in ("frames_total", "frames_distinct", "rows_total", "rows_distinct",
          "hash_seconds"):
    assert len(sh[k]) == 2 and len(rep[k]) == 2, k
for t, d in zip(sh["frames_total"], sh["frames_distinct"]):
    assert t == 4 * d and d >= 17, (t, d)
assert sh["rows_total"] == rep["rows_total"], (sh["rows_total"], rep["rows_total"])
assert rep["rows_distinct"] == rep["rows_total"], rep["rows_distinct"]
assert sum(sh["tower_rows_per_rank"]) == sh["rows_distinct"][-1], sh
assert rep["tower_rows_per_rank"][0] == rep["rows_total"][-1], rep
assert sh["distinct_rows_ratio"] == 0.25 and rep["distinct_rows_ratio"] == 1
assert all(h > 0 for h in sh["hash_seconds"]) and rep["mean_hash_seconds"] == 0
PYEOF
fi

# 2. The text of one arm: the progress line and the summary's counts.
if run_cmd train_text 0 "$BIN" train "${GRPO[@]}" --train.steps 1 --$FS.dedup true; then
  expect_out train_text '^\[#+\] step 1/1 train .* frames [0-9]+/[0-9]+ distinct$'
  expect_out train_text '^  frames +[0-9]+/[0-9]+ \(0\.250\) distinct per step, rows [0-9]+/[0-9]+ \(0\.250\)$'
  expect_out train_text '^  hash time +[0-9.]+ s'
fi

# 3. Sharding off, dedup on: ab's second arm is AReaL's rank-local dedup;
#    each rank's tower runs its replica's distinct rows.
if run_cmd rank_local 0 "$BIN" ab "${GRPO[@]}" --train.steps 1 --plot "" \
    --$FS.enabled false --$FS.dedup true; then
  expect_out rank_local '^ +replicated +rank-local +ratio$'
  expect_out rank_local '^  rows distinct +[0-9]+/([0-9]+) +[0-9]+/[0-9]+ +0\.250$'
  expect_out rank_local 'vision path: replicated arm replicated, rank-local arm replicated \(dedup\)'
fi

# 4. plan: the grpo preset's repeats, planned over every use or, with
#    dedup, over the distinct units.
if run_cmd plan 0 "$BIN" plan --preset grpo --cp 2; then
  expect_out plan '^dedup +frames [0-9,]+/[0-9,]+ distinct, rows .*planned over every use'
fi
if run_cmd plan_dedup 0 "$BIN" plan --preset grpo --cp 2 --json --$FS.dedup true; then
  "$PY" - "$TMP/plan_dedup.out" <<'PYEOF' || fail "plan_dedup: JSON checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
d = j["dedup"]
assert d["planned_distinct"] is True, d
assert d["frames_total"] == 8 * d["frames_distinct"], d
assert d["rows_total"] == 8 * d["rows_distinct"], d
assert j["units"] == d["frames_distinct"] and j["patch_rows"] == d["rows_distinct"], j
PYEOF
fi

# 5. analyze: presets instead of a manifest; the distinct counts.
if run_cmd analyze 0 "$BIN" analyze --preset grpo --batches 2 --cp 2 --cp 4 \
    --json --$FS.dedup true; then
  "$PY" - "$TMP/analyze.out" <<'PYEOF' || fail "analyze: JSON checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["preset"] == "grpo" and j["batches"] == 2 and j["dedup"] is True, j
assert j["frame_units"] == 8 * j["distinct_frame_units"], j
assert j["patch_rows"] == 8 * j["distinct_patch_rows"], j
assert [r["cp"] for r in j["rows"]] == [2, 4], j["rows"]
PYEOF
fi
if run_cmd analyze_text 0 "$BIN" analyze --preset grpo --batches 1 --cp 2; then
  expect_out analyze_text '^analyze preset grpo, seeds 0 to 0: 1 batches'
  expect_out analyze_text '^  distinct: [0-9]+/[0-9]+ frame units, .*planned over every use'
fi
run_cmd analyze_none 2 "$BIN" analyze --cp 2
expect_err analyze_none 'one of a MANIFEST and --preset is required'

# 6. A bad group key names it.
run_cmd bad_order 2 "$BIN" train --data.group_order shuffled
expect_err bad_order 'data.group_order: expected one of spread, contiguous, got shuffled'

finish grpo_test
