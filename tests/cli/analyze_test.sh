#!/usr/bin/env bash
# `frameshard analyze` end to end on the example manifests: the table, the
# JSON object, the plot, the policy from a dotted override, --emit-grids,
# text-only samples (and batches of them, without media) and errors naming
# the line and field.
# Usage: bash tests/cli/analyze_test.sh <frameshard binary> <repo root>
set -u
BIN=${1:?usage: analyze_test.sh <frameshard binary> <repo root>}
ROOT=${2:?usage: analyze_test.sh <frameshard binary> <repo root>}
source "$(dirname "$0")/lib.sh"
FS=distributed.multimodal.vision.frame_sharding
M=$ROOT/examples/manifests

if run_cmd table 0 "$BIN" analyze "$M/infovqa.jsonl" --family qwen2-vl \
  --cp 2 --cp 4 --plot "$TMP/a.svg"; then
  expect_out table "48 samples \(48 images, 0 videos\) in 48 batches of 1"
  expect_out table "cp +method +sharded +speedup +\+gather +imbalance +gather_MB"
  expect_out table "^ +2 optimal +[0-9]+% +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$"
  expect_out table "^ +4 lpt "
  expect_out table "wrote .*a.svg"
  grep -q '<polyline' "$TMP/a.svg" || fail "table: the plot has no lines"
fi

if run_cmd json 0 "$BIN" analyze "$M/llava_video.jsonl" --json --cp 2 \
  --$FS.policy auto; then
  /usr/bin/python3 - "$TMP/json.out" <<'PY' || fail "json: shape"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["videos"] == 48 and j["policy"] == "auto", j
row = j["rows"][0]
assert row["cp"] == 2 and set(row["partitioners"]) >= {"optimal", "lpt"}
m = row["partitioners"]["optimal"]
assert 0 <= m["shard_share"] <= 1 and m["speedup"] >= 1 and m["imbalance"] >= 1
PY
fi

# A slow gather makes the auto policy shard fewer batches.
run_cmd fast 0 "$BIN" analyze "$M/mantis.jsonl" --json --cp 8 \
  --$FS.policy auto --$FS.gather_bandwidth_gbps 1000
run_cmd slow 0 "$BIN" analyze "$M/mantis.jsonl" --json --cp 8 \
  --$FS.policy auto --$FS.gather_bandwidth_gbps 0.01
/usr/bin/python3 - "$TMP/fast.out" "$TMP/slow.out" <<'PY' || fail "auto: bandwidth"
import json, sys
share = [json.load(open(p))["rows"][0]["partitioners"]["optimal"]["shard_share"] for p in sys.argv[1:]]
assert share[0] > share[1], share
PY

if run_cmd grids 0 "$BIN" analyze "$M/mantis.jsonl" --emit-grids; then
  expect_out grids '^\{"grid_thw":\[\[1,[0-9]+,[0-9]+\]'
fi

# Text-only samples ("grid_thw": [], as the mesh recipe's training manifest
# has them): counted, and a batch of them has no media and no nan.
R=$ROOT/examples/recipes
if run_cmd text_only 0 "$BIN" analyze "$R/pages_or_text.jsonl" --cp 2; then
  expect_out text_only "2 samples \(0 images, 0 videos, 3 grid_thw rows, 1 text-only\) in 2 batches of 1"
  expect_out text_only "1 of 2 batches without media \(text-only samples\)"
  expect_out text_only "^ +2 optimal +50% +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$"
  grep -qiw nan "$TMP/text_only.out" && fail "text_only: nan in the table"
fi
if run_cmd text_only_json 0 "$BIN" analyze "$R/pages_or_text.jsonl" --json \
  --cp 2 --samples-per-batch 2; then
  /usr/bin/python3 - "$TMP/text_only_json.out" <<'PY' || fail "text_only_json: shape"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["samples"] == 2 and j["text_only_samples"] == 1 and j["grid_rows"] == 3, j
assert j["batches"] == 1 and j["batches_without_media"] == 0, j
PY
fi
printf '{"grid_thw": [], "text_tokens": 512}\n{"id": "chat", "text_tokens": 40}\n' >"$TMP/text.jsonl"
if run_cmd all_text 0 "$BIN" analyze "$TMP/text.jsonl" --json --cp 2 --cp 4 \
  --plot "$TMP/text.svg"; then
  /usr/bin/python3 - "$TMP/all_text.out" <<'PY' || fail "all_text: no media, ones"
import json, math, sys
j = json.load(open(sys.argv[1]))
assert j["text_only_samples"] == 2 and j["batches_without_media"] == 2, j
assert j["frame_units"] == 0, j
for row in j["rows"]:
    for m in row["partitioners"].values():
        assert all(math.isfinite(v) for v in m.values()), m
        assert m["speedup"] == 1 and m["imbalance"] == 1 and m["shard_share"] == 0, m
PY
  grep -qiw nan "$TMP/text.svg" && fail "all_text: nan in the plot"
fi
run_cmd all_text_table 0 "$BIN" analyze "$TMP/text.jsonl" --cp 2 &&
  expect_out all_text_table "no media in any batch \(text-only samples\)"
if run_cmd text_grids 0 "$BIN" analyze "$R/pages_or_text.jsonl" --emit-grids; then
  expect_out text_grids '^\{"grid_thw":\[\],"text_tokens":\[512\]\}$'
fi

printf '{"images": [[480, 640]]}\n{"videos": [{"frames": 10, "fps": "30", "height": 4, "width": 4}]}\n' >"$TMP/bad.jsonl"
run_cmd bad 2 "$BIN" analyze "$TMP/bad.jsonl" &&
  expect_err bad "load_media_manifest: .*bad.jsonl:2: videos\[0\].fps: expected a number > 0, got \"30\""
printf '{"id": "x"}\n' >"$TMP/empty.jsonl"
run_cmd empty_line 2 "$BIN" analyze "$TMP/empty.jsonl" &&
  expect_err empty_line "empty.jsonl:1: expected media \(images, videos or grid_thw; \[\] for a text-only sample\) or text_tokens"
run_cmd bad_policy 2 "$BIN" analyze "$M/mantis.jsonl" --$FS.policy always &&
  expect_err bad_policy "$FS.policy: expected threshold or auto, got always"

finish analyze_test
