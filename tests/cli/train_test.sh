#!/usr/bin/env bash
# `frameshard train` and `frameshard ab`: the two-arm parity of the training
# job over two local rank processes (losses of both arms within 1e-5 at
# every step, float32), its JSON and plot, the launch under torchrun, and the
# errors of bad arguments, recipes and manifests.
# Usage: bash tests/cli/train_test.sh <frameshard-binary> <repo-root>
set -u

BIN=${1:?usage: train_test.sh <frameshard-binary> <repo-root>}
ROOT=${2:?usage: train_test.sh <frameshard-binary> <repo-root>}
PY=/usr/bin/python3
# shellcheck source=tests/cli/lib.sh
source "$(dirname "$0")/lib.sh"

# A smaller batch than the embedded default so that CI stays quick; the
# model and everything else are the default's.
SMALL=(--data.scale 12 --train.steps 4)

# 1. The A/B: both arms, JSON with the ratios and per-arm series; the
#    losses agree within 1e-5 at every step (float32).
if run_cmd ab 0 "$BIN" ab "${SMALL[@]}" --json --plot "$TMP/ab.svg"; then
  "$PY" - "$TMP/ab.out" <<'PYEOF' || fail "ab: JSON checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
for arm in ("replicated", "sharded"):
    a = j[arm]
    for k in ("step_seconds", "vision_seconds", "peak_bytes", "losses"):
        assert len(a[k]) == 4, (arm, k, a[k])
    assert all(b > 0 for b in a["peak_bytes"]), a["peak_bytes"]
assert j["replicated"]["plan_path"] == "replicated", j["replicated"]["plan_path"]
assert j["sharded"]["plan_path"] == "sharded", j["sharded"]["plan_path"]
assert j["loss_max_abs_diff"] <= 1e-5, j["loss_max_abs_diff"]
for k in ("vision_time_ratio", "step_time_ratio", "peak_bytes_ratio",
          "vision_peak_bytes_ratio"):
    assert 0 < j[k] < 5, (k, j[k])
# Each sharded rank's tower ran on part of the rows only.
rep = j["replicated"]["tower_rows_per_rank"]
sh = j["sharded"]["tower_rows_per_rank"]
assert sum(sh) == rep[0] and max(sh) < rep[0], (rep, sh)
losses = j["sharded"]["losses"]
assert losses[-1] < losses[0], losses
PYEOF
  grep -q "<svg" "$TMP/ab.svg" || fail "ab: no SVG written"
  grep -q "sharded" "$TMP/ab.svg" || fail "ab: the SVG lacks the sharded series"
fi

# 1b. gather: owner: each visual row goes only to the rank that uses it;
#     the same losses, about half the all-gather's bytes at CP=2.
if run_cmd ab_owner 0 "$BIN" ab "${SMALL[@]}" --json --plot "" \
    --distributed.multimodal.vision.frame_sharding.gather owner; then
  "$PY" - "$TMP/ab_owner.out" <<'PYEOF' || fail "ab_owner: JSON checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["loss_max_abs_diff"] <= 1e-5, j["loss_max_abs_diff"]
assert j["replicated"]["visual_bytes_ratio"] == 0, j["replicated"]
r = j["sharded"]["visual_bytes_ratio"]
assert 0.3 < r < 0.75, r
steps = j["sharded"]["visual_bytes_received"]
assert len(steps) == 4 and all(len(s) == 2 and min(s) > 0 for s in steps), steps
PYEOF
fi

# 2. The text report: progress lines and the summary table.
if run_cmd ab_text 0 "$BIN" ab "${SMALL[@]}" --train.steps 2 --plot ""; then
  expect_out ab_text '^\[#+-*\] step 2/2 sharded'
  expect_out ab_text '^  vision time +[0-9.]+ s +[0-9.]+ s +[0-9.]+$'
  expect_out ab_text 'largest per-step loss difference'
fi

# 3. train on one arm, the recipe's; sharding off by a dotted override.
if run_cmd train_off 0 "$BIN" train "${SMALL[@]}" --train.steps 2 \
    --distributed.multimodal.vision.frame_sharding.enabled false; then
  expect_out train_off 'vision path replicated'
fi

# 3b. cost_alpha online: steps 1-2 plan with FLOPs, then with the fit of
#     the run's own tower times (each step prints the predicted and the
#     measured slowest tower, a switch the model put in force, the summary
#     the fit in force); --write-cost writes that fit as a calibration file
#     a next run reads as cost_alpha: FILE.
ALPHA=--distributed.multimodal.vision.frame_sharding.cost_alpha
if run_cmd online 0 "$BIN" train "${SMALL[@]}" "$ALPHA" online \
    --write-cost "$TMP/fit.txt"; then
  expect_out online 'tower [0-9.e+-]+ s predicted, [0-9.e+-]+ s measured$'
  expect_out online '^  cost model -> online: a=.*\(switched: '
  expect_out online '^  cost model +online: a=.* switch(es)? over 4 calls\)$'
  grep -Eq '^quadratic:[0-9.e+-]+,[0-9.e+-]+,[0-9.e+-]+$' "$TMP/fit.txt" ||
    fail "online: --write-cost wrote no quadratic"
  if run_cmd online_file 0 "$BIN" train "${SMALL[@]}" --train.steps 1 --json \
      "$ALPHA" "$TMP/fit.txt"; then
    grep -q "\"calibrated $TMP/fit.txt (quadratic a=" "$TMP/online_file.out" ||
      fail "online_file: the run did not plan with the written fit"
  fi
fi
run_cmd write_cost_auto 2 "$BIN" train --write-cost "$TMP/none.txt"
expect_err write_cost_auto 'cost_alpha online with --write-cost, got auto'
run_cmd write_cost_early 2 "$BIN" train "${SMALL[@]}" --train.steps 1 \
  "$ALPHA" online --write-cost "$TMP/none.txt"
expect_err write_cost_early 'expected a fit in force after 1 calls to write --write-cost'

# 4. DP x CP: two replicas of CP 2 (4 ranks; CP subgroups) train like two
#    replicas of CP 1: the same losses (each replica has its own batch).
if run_cmd dp2cp2 0 "$BIN" train "${SMALL[@]}" --train.steps 2 --json \
    --distributed.dp_size 2 --distributed.cp_size 2 &&
  run_cmd dp2cp1 0 "$BIN" train "${SMALL[@]}" --train.steps 2 --json \
    --distributed.dp_size 2 --distributed.cp_size 1; then
  "$PY" - "$TMP/dp2cp2.out" "$TMP/dp2cp1.out" <<'PYEOF' || fail "dp: losses differ"
import json, sys
a = json.load(open(sys.argv[1]))
b = json.load(open(sys.argv[2]))
assert a["plan_path"] == "sharded" and b["plan_path"] == "replicated"
assert len(a["peak_bytes_per_rank"]) == 4, a["peak_bytes_per_rank"]
d = max(abs(x - y) for x, y in zip(a["losses"], b["losses"]))
assert d <= 1e-5, (a["losses"], b["losses"])
PYEOF
fi

# 4b. mesh_dims [dp, cp] (examples/recipes/mesh_dp2_cp1_multi.yaml): the
#     sharded arm pools both replicas' frames over both ranks; the losses
#     are the replicated arm's (here the CP-only job: CP 1), and the tower
#     rows are the same in all, in other shares.
MESH_RECIPE=$ROOT/examples/recipes/mesh_dp2_cp1_multi.yaml
if run_cmd mesh_ab 0 "$BIN" ab "$MESH_RECIPE" --data.scale 12 --train.steps 3 \
    --json --plot ""; then
  "$PY" - "$TMP/mesh_ab.out" <<'PYEOF' || fail "mesh_ab: JSON checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["loss_max_abs_diff"] <= 1e-5, j["loss_max_abs_diff"]
rep, sh = j["replicated"], j["sharded"]
assert rep["plan_path"] == "replicated" and sh["plan_path"] == "sharded", j
assert rep["cp"] == 1 and len(sh["vision_cpu_seconds_per_rank"][0]) == 2, sh
r, s = rep["tower_rows_per_rank"], sh["tower_rows_per_rank"]
assert sum(s) == sum(r) and r != s and max(s) <= max(r), (r, s)
assert all(x > 0 for x in sh["vision_cpu_seconds"]), sh["vision_cpu_seconds"]
assert sh["mean_replica_gap_seconds"] >= 0 and "vision_cpu_time_ratio" in j, j
PYEOF
fi

# 4b'. DP 3 x CP 2 (six rank processes), mesh_dims [dp, cp] with policy auto:
#     losses equal the replicated arm's (each replica's vision on its own CP
#     group, as [cp] runs it), and each step records the plan it chose.
if run_cmd mesh_dp3 0 "$BIN" ab "$MESH_RECIPE" --data.scale 12 --train.steps 2 \
    --distributed.dp_size 3 --distributed.cp_size 2 --json --plot "" \
    --distributed.multimodal.vision.frame_sharding.policy auto \
    --distributed.multimodal.vision.frame_sharding.cost_alpha quadratic:0,1e-3,0; then
  "$PY" - "$TMP/mesh_dp3.out" <<'PYEOF2' || fail "mesh_dp3: JSON checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["loss_max_abs_diff"] <= 1e-5, j["loss_max_abs_diff"]
sh = j["sharded"]
assert len(sh["tower_rows_per_rank"]) == 6, sh["tower_rows_per_rank"]
assert len(sh["mesh_mode"]) == 2 and set(sh["mesh_mode"]) <= {"mesh", "cp-only"}, sh["mesh_mode"]
assert sh["mesh_steps"] + sh["cp_only_steps"] == 2, sh
assert j["replicated"]["mesh_mode"] == ["", ""], j["replicated"]["mesh_mode"]
PYEOF2
fi

# 4c. Issue 25's straggler, from the repository root with the recipe's
#     relative path (its manifest is relative to it; the spawned ranks read
#     the recipe from a temporary directory): replica 0 draws three pages,
#     replica 1 text only. CP-only, rank 1 encodes nothing; the mesh cuts the
#     middle page so both ranks encode half, and the losses stay equal
#     (scale 2: 32 x 32 pages; at 16 x 16 a row is cheaper than its K/V
#     exchange and no page is cut).
BIN_ABS=$(realpath "$BIN")
cd "$ROOT" || fail "cd $ROOT"
if run_cmd mesh_pages 0 "$BIN_ABS" ab \
    examples/recipes/mesh_dp2_cp1_pages_or_text.yaml --data.scale 2 \
    --train.steps 2 --json --plot ""; then
  "$PY" - "$TMP/mesh_pages.out" <<'PYEOF' || fail "mesh_pages: JSON checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["loss_max_abs_diff"] <= 1e-5, j["loss_max_abs_diff"]
r, s = j["replicated"]["tower_rows_per_rank"], j["sharded"]["tower_rows_per_rank"]
assert r == [3072, 0] and s == [1536, 1536], (r, s)
PYEOF
fi
cd - >/dev/null || fail "cd back"

# 5. Under torchrun --no-python: the same binary, one process per rank.
TORCHRUN=$ROOT/.venv/bin/torchrun
if [ -x "$TORCHRUN" ]; then
  if run_cmd torchrun 0 "$TORCHRUN" --no-python --standalone \
      --nproc-per-node 2 "$BIN" train "${SMALL[@]}" --train.steps 2 --json; then
    grep -q '"plan_path": "sharded"' "$TMP/torchrun.out" ||
      fail "torchrun: no sharded run reported"
  fi
elif [ -n "${CI:-}" ]; then
  fail "torchrun: $TORCHRUN missing under CI"
fi

# 6. Errors: bad arguments, recipes and manifests name the field.
run_cmd bad_key 2 "$BIN" train --model.text_layers -2
expect_err bad_key 'model.text_layers: expected'
run_cmd bad_option 2 "$BIN" ab --bogus 1
expect_err bad_option 'got unknown option --bogus'
run_cmd bad_nproc 2 "$BIN" train --nproc-per-node 3
expect_err bad_nproc 'expected --nproc-per-node to equal distributed.dp_size x cp_size = 2'
printf 'model:\n  tower: qwen9\n' >"$TMP/bad.yaml"
run_cmd bad_recipe 2 "$BIN" train "$TMP/bad.yaml"
expect_err bad_recipe 'model.tower'
printf '{"grid_thw": [[1, 27, 28]]}\n' >"$TMP/bad.jsonl"
run_cmd bad_manifest 2 "$BIN" train --data.manifest "$TMP/bad.jsonl"
expect_err bad_manifest 'bad.jsonl:1: grid_thw\[0\]'
run_cmd bad_mesh 2 "$BIN" train --distributed.multimodal.vision.frame_sharding.mesh_dims '[cp, dp]'
expect_err bad_mesh 'mesh_dims: expected \[cp\] or \[dp, cp\], got \[cp, dp\]'
run_cmd missing_recipe 2 "$BIN" ab "$TMP/none.yaml"
expect_err missing_recipe 'none.yaml'

finish train_test
