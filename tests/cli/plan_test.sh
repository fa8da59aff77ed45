#!/usr/bin/env bash
# `frameshard plan` end to end: JSON shape and quality, workload files,
# manifests (--manifest, text-only samples included), SVG, config
# precedence, dotted overrides and error exits.
# Usage: bash tests/cli/plan_test.sh <frameshard binary> <repo root>
set -u
BIN=${1:?usage: plan_test.sh <frameshard binary> <repo root>}
ROOT=${2:?usage: plan_test.sh <frameshard binary> <repo root>}
PY=/usr/bin/python3
FS=distributed.multimodal.vision.frame_sharding
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

pass() { echo "ok   - $1"; }
fail() {
  echo "FAIL - $1"
  failures=$((failures + 1))
}

# check NAME PYTHON_EXPR: evaluates EXPR with `j` = the JSON in $TMP/out.json.
check() {
  local name=$1 expr=$2
  if "$PY" -c '
import json, sys
j = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2])
if not ok:
    print("  expression false:", sys.argv[2], file=sys.stderr)
sys.exit(0 if ok else 1)' "$TMP/out.json" "$expr"; then
    pass "$name"
  else
    fail "$name"
  fi
}

# plan_json NAME ARGS...: runs plan --json into $TMP/out.json; fails on a
# non-zero exit or output that is not one JSON object.
plan_json() {
  local name=$1
  shift
  if "$BIN" plan "$@" --json >"$TMP/out.json" 2>"$TMP/err.txt" &&
    "$PY" -c 'import json,sys; assert isinstance(json.load(open(sys.argv[1])), dict)' \
      "$TMP/out.json" 2>/dev/null; then
    pass "$name: exit 0, one JSON object"
    return 0
  fi
  fail "$name: exit 0, one JSON object"
  cat "$TMP/err.txt"
  return 1
}

# expect_error NAME NEEDLE ARGS...: exit code 2, "error:" and NEEDLE on stderr.
expect_error() {
  local name=$1 needle=$2
  shift 2
  "$BIN" plan "$@" >"$TMP/out.txt" 2>"$TMP/err.txt"
  local rc=$?
  if [[ $rc -eq 2 ]] && grep -q '^error: ' "$TMP/err.txt" &&
    grep -qF -- "$needle" "$TMP/err.txt"; then
    pass "$name: exit 2 naming '$needle'"
  else
    fail "$name: expected exit 2 naming '$needle', got exit $rc"
    cat "$TMP/err.txt"
  fi
}

# ---------------------------------------------------------------- presets
if plan_json "mixed cp 4" --preset mixed --cp 4; then
  check "mixed: sharded with a reason" \
    'j["path"] == "sharded" and j["reason"] != ""'
  check "mixed: K+1 cuts from 0 to units, non-decreasing" \
    'len(j["cuts"]) == 5 and j["cuts"][0] == 0 and j["cuts"][-1] == j["units"] and j["cuts"] == sorted(j["cuts"])'
  check "mixed: per-rank costs, max, mean and imbalance agree" \
    'len(j["rank_costs"]) == 4 and abs(j["max_cost"] - max(j["rank_costs"])) <= 1e-9 * j["max_cost"] and abs(j["mean_cost"] * 4 - sum(j["rank_costs"])) <= 1e-9 * sum(j["rank_costs"]) and abs(j["imbalance"] - j["max_cost"] / j["mean_cost"]) < 1e-9'
  check "mixed: ranks carry dummy_frames and pad_frames" \
    'len(j["ranks"]) == 4 and all("dummy_frames" in r and "pad_frames" in r for r in j["ranks"])'
  check "mixed: units, tokens and patch rows add up over ranks" \
    'sum(r["units"] for r in j["ranks"]) == j["units"] and sum(r["tokens"] for r in j["ranks"]) == j["tokens"] and j["tokens"] > 0'
  check "mixed: fingerprint is a hex string" \
    'isinstance(j["fingerprint"], str) and int(j["fingerprint"], 16) >= 0'
  check "mixed: comparison has every partitioner" \
    'sorted(c["partitioner"] for c in j["comparison"]) == ["count", "greedy", "lpt", "optimal"]'
  check "mixed: optimal imbalance <= every other contiguous partitioner's" \
    'all(j["imbalance"] <= c["imbalance"] * (1 + 1e-12) for c in j["comparison"] if c["contiguous"])'
  check "mixed: only lpt is non-contiguous, within Graham's 4/3 of the contiguous optimum" \
    '[c["partitioner"] for c in j["comparison"] if not c["contiguous"]] == ["lpt"] and all(c["max_cost"] <= (4.0 / 3.0) * j["max_cost"] for c in j["comparison"] if not c["contiguous"])'
  check "mixed: ratio_to_optimal is max_cost / optimal max_cost" \
    'all(abs(c["ratio_to_optimal"] - c["max_cost"] / j["max_cost"]) < 1e-9 for c in j["comparison"])'
  fp_seed0=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["fingerprint"])' "$TMP/out.json")
fi

# Contiguous partitioners are never better than optimal on any preset.
for preset in doc multi video mixed; do
  for k in 2 8; do
    if plan_json "$preset cp $k seed 3" --preset "$preset" --cp "$k" --seed 3; then
      check "$preset cp $k: optimal <= greedy and count" \
        'all(j["max_cost"] <= c["max_cost"] * (1 + 1e-12) for c in j["comparison"] if c["partitioner"] != "lpt")'
    fi
  done
done

if plan_json "mixed seed 0 again" --preset mixed --cp 4 &&
  [[ "$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["fingerprint"])' "$TMP/out.json")" == "${fp_seed0:-x}" ]]; then
  pass "same preset and seed give the same fingerprint"
else
  fail "same preset and seed give the same fingerprint"
fi
plan_json "mixed seed 1" --preset mixed --cp 4 --seed 1 &&
  check "another seed gives another plan" "j[\"fingerprint\"] != \"${fp_seed0:-x}\""

# ------------------------------------------------------------ human output
if "$BIN" plan --preset mixed --cp 4 >"$TMP/human.txt" 2>"$TMP/err.txt"; then
  if grep -q '^rank  units  patch rows' "$TMP/human.txt" &&
    [[ $(grep -cE '^ +[0-3]  ' "$TMP/human.txt") -eq 4 ]] &&
    grep -qE '^optimal \* ' "$TMP/human.txt" &&
    grep -qE '^greedy ' "$TMP/human.txt" && grep -qE '^count ' "$TMP/human.txt" &&
    grep -qE '^lpt ' "$TMP/human.txt" && grep -q '^path         sharded' "$TMP/human.txt"; then
    pass "human output: header, 4 rank rows, every partitioner"
  else
    fail "human output: header, 4 rank rows, every partitioner"
    cat "$TMP/human.txt"
  fi
else
  fail "human output exits 0"
fi

# ---------------------------------------------------------- workload files
ENTRIES="$ROOT/examples/workloads/prior_art_entries.json"
# prior-art.md 1.4: greedy cuts [0,3,6] (336, 1168); the optimum is [0,4,6].
if plan_json "prior-art entries, optimal" --workload "$ENTRIES" --cp 2 --alpha 0; then
  check "entries: optimal cuts [0,4,6], loads [912,592]" \
    'j["cuts"] == [0, 4, 6] and j["rank_costs"] == [912, 592] and j["units"] == 6'
  check "entries: greedy is 1168/912 of optimal" \
    '[abs(c["ratio_to_optimal"] - 1168 / 912) < 1e-9 for c in j["comparison"] if c["partitioner"] == "greedy"] == [True]'
  check "entries: cost model is alpha=0" 'j["cost_model"] == "alpha=0"'
fi
plan_json "prior-art entries, greedy" --workload "$ENTRIES" --cp 2 --alpha 0 --partitioner greedy &&
  check "entries: greedy cuts [0,3,6], loads [336,1168]" \
    'j["cuts"] == [0, 3, 6] and j["rank_costs"] == [336, 1168] and j["partitioner"] == "greedy"'
plan_json "prior-art entries, lpt" --workload "$ENTRIES" --cp 2 --partitioner lpt &&
  check "entries: lpt reports an assignment, no cuts" \
    '"cuts" not in j and len(j["assignment"]) == 6 and set(j["assignment"]) == {0, 1}'
plan_json "prior-art entries, cp 8" --workload "$ENTRIES" --cp 8 &&
  check "entries on 8 ranks: two dummy ranks, each one dummy frame" \
    '[r["dummy_frames"] for r in j["ranks"]] == [0] * 6 + [1, 1] and len(j["cuts"]) == 9'
plan_json "images and video" --workload "$ROOT/examples/workloads/images_and_video.json" --cp 2 &&
  check "images and video: 130 units, 16384 tokens" \
    'j["units"] == 130 and j["tokens"] == 16384'

# -------------------------------------------------------------------- svg
if "$BIN" plan --preset video --cp 4 --svg "$TMP/plan.svg" >/dev/null 2>"$TMP/err.txt" &&
  grep -q '<svg' "$TMP/plan.svg" && grep -q '</svg>' "$TMP/plan.svg" &&
  [[ $(grep -c '<rect x=' "$TMP/plan.svg") -eq 16 ]]; then
  pass "--svg writes an SVG with one bar per rank per partitioner"
else
  fail "--svg writes an SVG with one bar per rank per partitioner"
fi

# ---------------------------------------------------- policy and overrides
if plan_json "enabled false override" --preset mixed --cp 4 "--$FS.enabled" false; then
  check "disabled: path replicated, reason disabled" \
    'j["path"] == "replicated" and "disabled" in j["reason"]'
  check "disabled: partition still reported for K = 4" \
    'len(j["cuts"]) == 5 and len(j["rank_costs"]) == 4 and len(j["ranks"]) == 4'
fi
plan_json "key=value override form" --preset mixed "--$FS.enabled=false" &&
  check "--key=value form applies" 'j["path"] == "replicated"'
plan_json "thresholds keep a small workload replicated" \
  --workload "$ENTRIES" --cp 2 "--$FS.min_frames" 100 &&
  check "small workload: replicated below both thresholds" \
    'j["path"] == "replicated" and "min_tokens" in j["reason"]'
plan_json "policy auto" --workload "$ENTRIES" --cp 2 "--$FS.policy" auto &&
  check "policy auto: its own fields, not the thresholds it ignores" \
    'j["policy"]["kind"] == "auto" and "gather_bandwidth_gbps" in j["policy"] and "min_tokens" not in j["policy"]'
plan_json "policy threshold" --workload "$ENTRIES" --cp 2 &&
  check "policy threshold: its thresholds" \
    'j["policy"]["kind"] == "threshold" and j["policy"]["min_tokens"] == 2048 and "gather_row_bytes" not in j["policy"]'
if out=$("$BIN" plan --workload "$ENTRIES" --cp 2 "--$FS.policy" auto 2>&1) &&
  grep -q "^policy .*auto (saving > gather" <<<"$out" && ! grep -q "min_tokens" <<<"$out"; then
  pass "policy auto: the text names the auto rule, not min_tokens"
else
  echo "$out" | head -n 8
  fail "policy auto: the text names the auto rule, not min_tokens"
fi
plan_json "min_local_patch_rows 0" --workload "$ENTRIES" --cp 2 "--$FS.min_local_patch_rows" 0 &&
  check "floor off: no pad frames" 'all(r["pad_frames"] == 0 for r in j["ranks"])'

# Precedence: defaults < config < overrides < explicit options.
CONFIG="$ROOT/configs/frame_sharding.yaml"
plan_json "config file" --config "$CONFIG" --preset video &&
  check "config: cp 4, sharded" 'j["cp"] == 4 and j["path"] == "sharded"'
plan_json "config + override" --config "$CONFIG" --distributed.cp_size 2 "--$FS.partitioner" greedy &&
  check "override beats config" 'j["cp"] == 2 and j["partitioner"] == "greedy"'
plan_json "config + override + options" --config "$CONFIG" --distributed.cp_size 2 \
  "--$FS.partitioner" greedy --cp 8 --partitioner count --alpha 0 &&
  check "explicit options beat overrides" \
    'j["cp"] == 8 and j["partitioner"] == "count" and j["cost_model"] == "alpha=0"'
printf 'distributed:\n  cp_size: 2\n' >"$TMP/plain.yaml"
plan_json "config without enabled" --config "$TMP/plain.yaml" --preset mixed &&
  check "a config that does not enable sharding plans replicated" \
    'j["cp"] == 2 and j["path"] == "replicated" and len(j["cuts"]) == 3'
plan_json "no config" --preset multi &&
  check "no config: cp 4 and enabled by default" 'j["cp"] == 4 and j["path"] == "sharded"'

# ------------------------------------------------------------ split frames
plan_json "doc with split frames" --preset doc --cp 8 --split-frames &&
  check "split: max/mean near 1 against the frames' mean, far below unsplit" \
    '(j["split"] and j["max_cost"] / j["frames_mean_cost"] < 1.10 and
      j["unsplit_max_cost"] / j["frames_mean_cost"] > 2)' &&
  check "split: non-empty pieces, rows and tokens add up" '(
all(p["end"] > p["begin"] for r in j["ranks"] for p in r["pieces"]) and
sum(r["patch_rows"] for r in j["ranks"]) == j["patch_rows"] and
sum(j["gather_counts"]) == j["tokens"])' &&
  check "split: exchange rows are summed over ranks" \
    'j["exchange_rows"] == sum(r["exchange_rows"] for r in j["ranks"]) > 0' &&
  check "split: each cut frame's pieces tile [0, of) in rank order" '(
{p["unit"] for r in j["ranks"] for p in r["pieces"]} and
all((lambda ps: ps[0]["begin"] == 0 and ps[-1]["end"] == ps[0]["of"] and
                all(a["end"] == b["begin"] for a, b in zip(ps, ps[1:])))(
        [p for r in j["ranks"] for p in r["pieces"] if p["unit"] == u])
    for u in {p["unit"] for r in j["ranks"] for p in r["pieces"]}))'
plan_json "split by dotted override" --preset doc --cp 8 "--$FS.split_frames" true &&
  check "the override splits like the flag" 'j["split"] and j["split_frames"]'
plan_json "split off" --preset doc --cp 8 &&
  check "split off: no pieces, no exchange" \
    '(not j["split"] and j["exchange_rows"] == 0 and
      all(r["pieces"] == [] for r in j["ranks"]))'
if "$BIN" plan --preset doc --cp 4 --split-frames >"$TMP/split.txt" 2>&1 &&
  grep -q '^      piece  unit 0 rows \[0, ' "$TMP/split.txt" &&
  grep -q '^split        max/mean ' "$TMP/split.txt" &&
  grep -q '^exchange     ' "$TMP/split.txt"; then
  pass "split: the text report lists pieces, max/mean and the exchange"
else
  fail "split: the text report lists pieces, max/mean and the exchange"
  cat "$TMP/split.txt"
fi

# ------------------------------------------------------------------ errors
expect_error "split with another partitioner" "$FS.split_frames: expected false with partitioner" \
  --preset doc --partitioner lpt --split-frames
expect_error "bad override value" "$FS.min_tokens" --preset mixed "--$FS.min_tokens" true
expect_error "unknown override key" "$FS.enable" --preset mixed "--$FS.enable" true
expect_error "override without a value" "expected a value after" --preset mixed "--$FS.enabled"
expect_error "unknown plain option" "--frobnicate" --preset mixed --frobnicate 3
expect_error "bad --alpha" "cost_alpha" --preset mixed --alpha AUTO
expect_error "bad --cp" "cp_size" --preset mixed --cp 0
expect_error "bad --partitioner" "partitioner" --preset mixed --partitioner best
expect_error "unknown preset" "movie" --preset movie
expect_error "missing config" "$TMP/none.yaml" --config "$TMP/none.yaml"
printf 'distributed:\n  multimodal:\n    vision:\n      frame_sharding:\n        mesh_dims: [cp, tp]\n' >"$TMP/bad.yaml"
expect_error "bad config" "$FS.mesh_dims" --config "$TMP/bad.yaml"
echo '{"grid_thw": [[1, 3, 4]]}' >"$TMP/odd.json"
expect_error "bad workload grid" "grid_thw" --workload "$TMP/odd.json"
echo '{"grid_thw": [[1, 4, 4]], "spatial_merge_size": 0}' >"$TMP/merge.json"
expect_error "bad workload field" "spatial_merge_size" --workload "$TMP/merge.json"
echo '{"grid_thw": [[1, 4, 4]], "frames": 3}' >"$TMP/key.json"
expect_error "unknown workload key" "frames" --workload "$TMP/key.json"
expect_error "missing workload" "$TMP/none.json" --workload "$TMP/none.json"
# ---------------------------------------------------------------- manifests
# plan --manifest: samples of a training or dataset manifest as one batch;
# the mesh recipe's pages_or_text.jsonl has a text-only sample (grid_thw []).
PAGES="$ROOT/examples/recipes/pages_or_text.jsonl"
if plan_json "manifest sample 0" --manifest "$PAGES" --cp 2; then
  check "manifest sample 0: its 3 pages, sharded" \
    'j["media"] == 3 and j["units"] == 3 and not j["no_media"] and j["path"] == "sharded"'
  check "manifest sample 0: the manifest object" \
    'j["manifest"] == {"path": "'"$PAGES"'", "family": "qwen3-vl", "first_sample": 0, "samples": 1, "manifest_samples": 2, "text_only_samples": 0, "text_tokens": 64}'
fi
if plan_json "manifest text-only sample" --manifest "$PAGES" --sample 1 --cp 4; then
  check "text-only sample: replicated, no media, finite zero loads" \
    'j["path"] == "replicated" and j["no_media"] and j["media"] == 0 and j["units"] == 0 and j["imbalance"] == 1 and j["rank_costs"] == [0, 0, 0, 0] and all(r["share"] == 0 for r in j["ranks"])'
  check "text-only sample: counted in the manifest object" \
    'j["manifest"]["text_only_samples"] == 1 and j["manifest"]["text_tokens"] == 512'
fi
plan_json "manifest both samples, qwen2-vl" --manifest "$PAGES" --samples 2 --family qwen2-vl &&
  check "both samples: the pages, one text-only, the family's cost model" \
    'j["media"] == 3 and j["manifest"]["text_only_samples"] == 1 and "qwen2-vl" in j["cost_model"]'
plan_json "dataset manifest" --manifest "$ROOT/examples/manifests/mantis.jsonl" --sample 2 --samples 3 &&
  check "dataset manifest: images resized into media" 'j["media"] > 3 and not j["no_media"]'
if "$BIN" plan --manifest "$PAGES" --sample 1 >"$TMP/text.txt" 2>"$TMP/err.txt" &&
  grep -q '^path         replicated' "$TMP/text.txt" &&
  grep -q 'no media in this batch (text-only samples)' "$TMP/text.txt" &&
  grep -q 'manifest samples 1 to 1 of 2, 1 text-only, qwen3-vl processor' "$TMP/text.txt" &&
  ! grep -qiw nan "$TMP/text.txt"; then
  pass "text-only sample, human output: replicated, no media"
else
  fail "text-only sample, human output: replicated, no media"
  cat "$TMP/text.txt" "$TMP/err.txt"
fi
expect_error "manifest beyond its end" "--sample 1 --samples 2: expected samples within the manifest's 2 (indices 0 to 1), got indices 1 to 2" \
  --manifest "$PAGES" --sample 1 --samples 2
expect_error "manifest and preset" "excludes" --manifest "$PAGES" --preset mixed
expect_error "manifest and workload" "excludes" --manifest "$PAGES" --workload "$ENTRIES"
expect_error "family without manifest" "--family requires --manifest" --family qwen2-vl
echo '{"grid_thw": [[1, 3, 4]]}' >"$TMP/odd.jsonl"
expect_error "bad manifest line" "odd.jsonl:1: grid_thw[0]: expected [t, h, w]" --manifest "$TMP/odd.jsonl"

# ---------------------------------------------------------------- the mesh
# plan --dp: replicas' batches over the dp x cp mesh; with policy auto each
# step weighs the pooled plan against the CP-only one (issue 37).
AUTO=(--distributed.multimodal.vision.frame_sharding.policy auto)
if plan_json "mesh straggler" --dp 2 --cp 1 --manifest "$PAGES" "${AUTO[@]}"; then
  check "mesh straggler: pooled, the text-only replica's rank encodes pages" \
    'j["mode"] == "mesh" and j["weighed"] and j["gain"] > 0.3 and j["ranks"][1]["from_replicas"] == [0]'
  check "mesh straggler: both predictions, the mesh's cheaper" \
    'j["mesh_seconds"] < j["cp_only_seconds"] and j["route_bytes"]["cp_only"] == 0 and j["route_bytes"]["mesh"] > 0'
fi
if plan_json "mesh equal replicas" --dp 2 --cp 2 --workload "$ENTRIES" "${AUTO[@]}"; then
  check "mesh equal replicas: CP-only, each replica on its own ranks" \
    'j["mode"] == "cp-only" and all(r["from_replicas"] in ([r["replica"]], []) for r in j["ranks"])'
fi
plan_json "mesh threshold" --dp 2 --cp 2 --workload "$ENTRIES" &&
  check "mesh threshold: always pooled, not weighed" 'j["mode"] == "mesh" and not j["weighed"]'
if "$BIN" plan --dp 2 --cp 1 --manifest "$PAGES" "${AUTO[@]}" >"$TMP/mesh.txt" 2>"$TMP/err.txt" &&
  grep -q '^step runs: mesh -- mesh: .* (gain 0\.[0-9]* >= mesh_min_gain 0\.05)' "$TMP/mesh.txt"; then
  pass "mesh, human output: the choice and its reason"
else
  fail "mesh, human output: the choice and its reason"
  cat "$TMP/mesh.txt" "$TMP/err.txt"
fi
expect_error "mesh min gain out of range" "mesh_min_gain: expected a number in [0, 1)" \
  --dp 2 --distributed.multimodal.vision.frame_sharding.mesh_min_gain 1

if "$BIN" plan --preset mixed --workload "$ENTRIES" >/dev/null 2>&1; then
  fail "--workload and --preset together are rejected"
else
  pass "--workload and --preset together are rejected"
fi

echo
if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
