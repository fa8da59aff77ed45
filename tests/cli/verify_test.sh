#!/usr/bin/env bash
# `frameshard verify`: sharded vs replicated parity over local rank
# processes, its JSON report, its exit codes and its errors.
# Usage: bash tests/cli/verify_test.sh <frameshard-binary> <repo-root>
set -u

BIN=${1:?usage: verify_test.sh <frameshard-binary> <repo-root>}
PY=/usr/bin/python3
# shellcheck source=tests/cli/lib.sh
source "$(dirname "$0")/lib.sh"

run() {  # NAME EXPECTED_CODE VERIFY_ARGS...
  local name=$1 expected=$2
  shift 2
  run_cmd "$name" "$expected" "$BIN" verify "$@"
}

# 1. The criterion of issue 3: three ranks, the mixed preset, float64.
if run mixed64 0 --nproc 3 --preset mixed --dtype float64; then
  expect_out mixed64 '^PASS$'
  expect_out mixed64 '^plan: sharded'
  expect_out mixed64 'tolerance \(float64\): max abs diff <= 1e-12'
  expect_out mixed64 'preset mixed \(seed 0\), h and w scaled down [0-9]+x'
  # every rank appears in the plan table
  for r in 0 1 2; do
    grep -Eq "^ +$r +[0-9]+ +[0-9]+" "$TMP/mixed64.out" ||
      fail "mixed64: no plan row for rank $r"
  done
fi

# 2. --json: one object with the diffs, the plan and the bytes.
if run json 0 --nproc 3 --dtype float64 --json; then
  "$PY" - "$TMP/json.out" <<'EOF' || fail "json: report checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["pass"] is True, j["pass"]
assert j["nproc"] == 3 and j["dtype"] == "float64"
d = j["max_abs_diff"]
for k in ("embeddings", "deepstack", "gradients"):
    assert 0.0 <= d[k] <= 1e-12, (k, d[k])
assert isinstance(d["worst_gradient"], str) and d["worst_gradient"]
assert j["tolerance"] == {"kind": "absolute", "value": 1e-12,
                          "text": "max abs diff <= 1e-12"}, j["tolerance"]
grads = j["gradients"]
assert len(grads) == 38, len(grads)  # every parameter of the toy tower
names = {g["name"] for g in grads}
assert "embed.weight" in names and "deepstack_merger_fc2.bias" in names
assert all(g["pass"] and g["max_abs_ref"] > 0 for g in grads)
plan = j["plan"]
assert plan["path"] == "sharded", plan["path"]
assert plan["fingerprint"].startswith("0x") and len(plan["fingerprint"]) == 18
assert len(plan["ranks"]) == 3
assert sum(r["tokens"] for r in plan["ranks"]) == j["workload"]["tokens"]
assert sum(r["patch_rows"] for r in plan["ranks"]) == j["workload"]["patch_rows"]
# bytes: each rank sends its rows (2 outputs x 48 float64) to 2 peers
assert len(j["bytes_sent"]) == 3
for r, b in zip(plan["ranks"], j["bytes_sent"]):
    assert b == r["tokens"] * 2 * 48 * 8 * 2, (r, b)
assert all(p >= b for p, b in zip(j["padded_allgather_bytes"], j["bytes_sent"]))
EOF
fi

# 3. float32 and bfloat16 on the small built-in workload.
if run f32 0 --dtype float32; then
  expect_out f32 '^PASS$'
  expect_out f32 'tolerance \(float32\): max abs diff <= 1e-05'
fi
if run bf16 0 --nproc 3 --dtype bfloat16 --json; then
  "$PY" - "$TMP/bf16.out" <<'EOF' || fail "bf16: report checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["pass"] is True
assert j["tolerance"]["kind"] == "bf16_norm_vs_replicated_error"
for g in j["gradients"] + list(j["outputs"].values()):
    assert g["norm_diff"] <= g["bound"], g
    assert g["norm_replicated_error"] >= 0 and g["norm_exact"] > 0, g
EOF
fi

# 4. The lpt permutation, and a --config file with floor padding.
if run lpt 0 --nproc 3 --partitioner lpt --preset multi --seed 2; then
  expect_out lpt 'partitioner lpt'
  expect_out lpt '^PASS$'
fi
cat >"$TMP/cfg.yaml" <<'EOF'
distributed:
  cp_size: 4
  multimodal:
    vision:
      frame_sharding:
        enabled: true
        min_local_patch_rows: 200
        partitioner: count
EOF
if run config 0 --nproc 4 --config "$TMP/cfg.yaml" --dtype float64 --json; then
  "$PY" - "$TMP/config.out" <<'EOF' || fail "config: report checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["pass"] is True
p = j["plan"]
assert p["partitioner"] == "count" and p["min_local_patch_rows"] == 200, p
assert any(r["pad_frames"] > 0 for r in p["ranks"]), p["ranks"]
EOF
fi

# 5. A user's workload file: fewer frames than ranks (dummy frames).
cat >"$TMP/wl.json" <<'EOF'
{"grid_thw": [[1, 6, 4], [1, 2, 2]], "spatial_merge_size": 2,
 "temporal_patch_size": 2}
EOF
if run file 0 --nproc 3 --workload "$TMP/wl.json" --dtype float64 --json; then
  "$PY" - "$TMP/file.out" <<'EOF' || fail "file: report checks failed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["pass"] is True
assert j["workload"]["grid_thw"] == [[1, 6, 4], [1, 2, 2]]
assert [r["dummy_frames"] for r in j["plan"]["ranks"]] == [0, 0, 1]
assert j["bytes_sent"][2] == 0
EOF
fi

# 6. A difference above the tolerance exits 1 and says FAIL.
if run fault 1 --inject-fault loss; then
  expect_out fault '^FAIL$'
  expect_out fault 'EXCEEDS'
fi

# 7. A rank that dies: the others raise, the parent exits 2, nothing hangs.
start=$SECONDS
if run died 2 --nproc 3 --inject-fault exit --timeout-ms 10000; then
  expect_err died 'rank 2 exited with code 3'
  [ $((SECONDS - start)) -lt 30 ] || fail "died: took $((SECONDS - start)) s"
fi

# 8. Split frames on a Qwen tower of each family: a large frame cut across
# three ranks, float64 parity of outputs and every gradient, pieces reported;
# the toy tower refuses pieces on every rank.
SPLIT=(--distributed.multimodal.vision.frame_sharding.split_frames true
  --distributed.multimodal.vision.frame_sharding.split_exchange_cost 0)
echo '{"grid_thw": [[1, 32, 16], [1, 4, 4], [2, 8, 8]]}' >"$TMP/big.json"
for tower in qwen2-vl qwen2.5-vl qwen3-vl; do
  if run "split-$tower" 0 --nproc 3 --tower "$tower" --dtype float64 \
    --workload "$TMP/big.json" --scale 1 --json "${SPLIT[@]}"; then
    "$PY" - "$TMP/split-$tower.out" <<'EOF' || fail "split-$tower: checks"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["pass"] is True
assert j["plan"]["split"] is True, j["plan"]
pieces = [p for r in j["plan"]["ranks"] for p in r["pieces"]]
assert len(pieces) >= 2 and all(p["of"] == 512 for p in pieces), pieces
assert j["max_abs_diff"]["gradients"] <= 1e-12, j["max_abs_diff"]
EOF
  fi
done
if run split-toy 2 --nproc 2 --workload "$TMP/big.json" --scale 1 \
  "${SPLIT[@]}"; then
  expect_err split-toy 'split frames need a Qwen tower'
fi

# 8b. CP 8 (issue 37): eight rank processes, float64, the doc preset's
# largest page cut over three ranks and a neighbour over two.
if run cp8 0 --nproc 8 --tower qwen3-vl --dtype float64 --preset doc \
  --json --distributed.multimodal.vision.frame_sharding.split_frames true; then
  "$PY" - "$TMP/cp8.out" <<'EOF' || fail "cp8: checks"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["pass"] is True and j["nproc"] == 8, (j["pass"], j["nproc"])
assert j["plan"]["split"] is True, j["plan"]
assert len(j["plan"]["ranks"]) == 8
d = j["max_abs_diff"]
assert all(d[k] <= 1e-12 for k in ("embeddings", "deepstack", "gradients")), d
EOF
fi

# 9. Bad input: non-zero exit and a message naming the problem.
printf '{"grid_thw": [[1, 5, 4]]}' >"$TMP/odd.json"
if run badgrid 2 --workload "$TMP/odd.json"; then
  expect_err badgrid 'error: frameshard::.*divisible'
fi
if run missing 2 --workload "$TMP/does-not-exist.json"; then
  expect_err missing 'does-not-exist.json'
fi
if run badpreset 2 --preset nosuch; then
  expect_err badpreset 'nosuch'
fi
if run badpart 2 --partitioner fastest; then
  expect_err badpart 'fastest'
fi
if run badnproc 2 --nproc 0; then
  expect_err badnproc 'nproc'
fi
"$BIN" verify --dtype float16 >"$TMP/baddtype.out" 2>"$TMP/baddtype.err"
code=$?
[ "$code" -ne 0 ] || fail "baddtype: exit 0"
grep -q 'dtype' "$TMP/baddtype.err" || fail "baddtype: no message"
"$BIN" verify --preset doc --workload "$TMP/wl.json" >"$TMP/both.out" \
  2>"$TMP/both.err"
[ $? -ne 0 ] || fail "both: --preset with --workload accepted"
grep -q 'excludes' "$TMP/both.err" || fail "both: no message"

finish verify_test
