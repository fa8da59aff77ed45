#!/usr/bin/env bash
# Hostile input to the command line (issue 13): argument errors exit 2,
# bad values are refused instead of silently replaced, and inputs that would
# recurse without bound or allocate gigabytes end in a short error. Cases
# whose unfixed behaviour allocates a lot run under a memory cap (cap_run),
# so a regression is a failed check, not a machine out of memory.
# Usage: bash tests/cli/hostile_input_test.sh <frameshard-binary> <repo-root>
set -u

BIN=${1:?usage: hostile_input_test.sh <frameshard-binary> <repo-root>}
PY=/usr/bin/python3
# shellcheck source=tests/cli/lib.sh
source "$(dirname "$0")/lib.sh"

# cap_run NAME EXPECTED_CODE ARGS...: frameshard ARGS in a child shell with
# 3 GB of address space and 20 s of CPU time.
cap_run() {
  local name=$1 expected=$2
  shift 2
  run_cmd "$name" "$expected" bash -c \
    'ulimit -v 3000000; ulimit -t 20; exec "$@"' _ "$BIN" "$@"
}

short_err() {  # NAME: stderr is one readable line, not kilobytes
  local n
  n=$(wc -c <"$TMP/$1.err")
  [ "$n" -lt 1000 ] || fail "$1: stderr is $n bytes"
}

FS=distributed.multimodal.vision.frame_sharding

# 1. Argument errors exit 2 (CLI11's own codes are 101-114); --help 0.
run_cmd usage_unknown 2 "$BIN" verify --no-such-option
run_cmd usage_missing 2 "$BIN" plan --cp
run_cmd usage_nosub 2 "$BIN"
run_cmd usage_badint 2 "$BIN" verify --nproc x
run_cmd help 0 "$BIN" plan --help

# 2. Empty and unknown values are refused, not read as unset or defaults.
for opt in --cp --alpha --partitioner --config; do
  if run_cmd "empty${opt#--}" 2 "$BIN" plan "$opt" ""; then
    expect_err "empty${opt#--}" "$opt"
  fi
done
for cmd in encode verify; do
  extra=()
  [ "$cmd" = encode ] && extra=(--model-dir "$TMP" --inputs x --out y)
  if run_cmd "${cmd}_part" 2 "$BIN" "$cmd" "${extra[@]}" --partitioner foo; then
    expect_err "${cmd}_part" '^error: --partitioner: foo not in'
  fi
  if run_cmd "${cmd}_part_empty" 2 "$BIN" "$cmd" "${extra[@]}" \
    --partitioner ""; then
    expect_err "${cmd}_part_empty" '^error: --partitioner: '
  fi
  if run_cmd "${cmd}_floor" 2 "$BIN" "$cmd" "${extra[@]}" \
    --min-local-patch-rows -1; then
    expect_err "${cmd}_floor" '--min-local-patch-rows: Value -1 not in range'
  fi
done
if run_cmd config_dir 2 "$BIN" plan --config "$TMP"; then
  expect_err config_dir "expected a readable YAML file, got $TMP"
fi
if run_cmd workload_dir 2 "$BIN" plan --workload "$TMP"; then
  expect_err workload_dir "expected a readable JSON file, got $TMP"
fi
printf 'distributed:\n  cp_size: 2\n---\ndistributed:\n  cp_size: 3\n' \
  >"$TMP/two.yaml"
if run_cmd two_docs 2 "$BIN" plan --config "$TMP/two.yaml"; then
  expect_err two_docs 'expected one YAML document, got a second document'
fi
printf '{"grid_thw": [[1, 2, 2]], "grid_thw": [[1, 4, 4]]}' >"$TMP/dup.json"
if run_cmd dup_keys 2 "$BIN" plan --workload "$TMP/dup.json"; then
  expect_err dup_keys 'a duplicate key "grid_thw"'
fi

# 3. Absurd sizes: a clear error naming the field and the limit, before any
# allocation sized by them.
for cp in 9223372036854775807 2147483648 65537; do
  if cap_run "cp_$cp" 2 plan --preset doc --cp "$cp"; then
    expect_err "cp_$cp" "distributed.cp_size: expected an integer in \[1, 65536\], got $cp"
  fi
done
if cap_run floor_huge 2 plan --preset doc "--$FS.min_local_patch_rows" \
  1099511627776; then
  expect_err floor_huge 'min_local_patch_rows: expected an integer in \[0, 1048576\]'
fi
"$PY" -c 'import json; print(json.dumps({"grid_thw": [[1048576, 2, 2]] * 100}))' \
  >"$TMP/units.json"
if cap_run units 2 plan --workload "$TMP/units.json"; then
  expect_err units 'expected at most 1048576 frame units'
fi

# 4. Deep nesting, huge keys, numbers out of range: short errors naming the
# file.
"$PY" -c 'print("{\"grid_thw\": " + "[" * 100000 + "]" * 100000 + "}")' \
  >"$TMP/deep.json"
if cap_run deep 2 plan --workload "$TMP/deep.json"; then
  expect_err deep "nesting deeper than 64 levels.*deep.json"
  short_err deep
fi
"$PY" -c 'print("{\"" + "k" * (1 << 20) + "\": 1}")' >"$TMP/key.json"
if run_cmd bigkey 2 "$BIN" plan --workload "$TMP/key.json"; then
  short_err bigkey
fi
printf '{"grid_thw": [[1e400, 2, 2]]}' >"$TMP/inf.json"
if run_cmd e400 2 "$BIN" plan --workload "$TMP/inf.json"; then
  expect_err e400 'frameshard::workload: .*inf.json'
fi

# 5. YAML aliases: refused before anything recurses or expands.
printf 'distributed: &d\n  cp_size: *d\n' >"$TMP/self.yaml"
if cap_run alias_self 2 plan --config "$TMP/self.yaml"; then
  expect_err alias_self 'expected YAML without anchors or aliases'
fi
if cap_run alias_override 2 plan "--$FS.mesh_dims" '&a [*a]'; then
  expect_err alias_override 'expected YAML without anchors or aliases'
fi
"$PY" - "$TMP/laughs.yaml" <<'EOF'
import sys
lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
for i in range(1, 10):
    prev = ", ".join([f"*l{i - 1}"] * 9)
    lines.append(f"l{i}: &l{i} [{prev}]")
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF
if cap_run laughs 2 plan --config "$TMP/laughs.yaml"; then
  expect_err laughs 'expected YAML without anchors or aliases'
  short_err laughs
fi

# 6. verify with fewer tokens than ranks (the rank-loss helper's arange;
# fixed in src/parity by 2606401, kept here as the reproducer's test).
printf '{"grid_thw": [[1, 2, 2]]}' >"$TMP/one.json"
if run_cmd one_token 0 "$BIN" verify --nproc 3 --workload "$TMP/one.json"; then
  expect_out one_token '^PASS$'
fi

# 7. encode: IN is checked against config.json before any model loads; a
# bare vision config with one input feature is enough.
mkdir -p "$TMP/model"
printf '{"model_type": "qwen2_vl_vision", "in_channels": 1, "patch_size": 1, "temporal_patch_size": 1}' \
  >"$TMP/model/config.json"
inputs() {  # PATH ROWS GRID_JSON: a safetensors with pixel_values, grid_thw
  "$PY" - "$@" <<'EOF'
import json, struct, sys
path, rows, grid = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
g = b"".join(struct.pack("<q", v) for row in grid for v in row)
px = b"\0" * (4 * rows)
h = {"pixel_values": {"dtype": "F32", "shape": [rows, 1],
                      "data_offsets": [0, len(px)]},
     "grid_thw": {"dtype": "I64", "shape": [len(grid), 3],
                  "data_offsets": [len(px), len(px) + len(g)]}}
t = json.dumps(h).encode()
open(path, "wb").write(struct.pack("<Q", len(t)) + t + px + g)
EOF
}
inputs "$TMP/empty.safetensors" 0 '[]'
if run_cmd empty_grid 2 "$BIN" encode --model-dir "$TMP/model" \
  --inputs "$TMP/empty.safetensors" --out "$TMP/o.safetensors"; then
  expect_err empty_grid 'expected an integer grid_thw \[n, 3\] with n >= 1'
fi
inputs "$TMP/frames.safetensors" 16 '[[67108864, 2, 2]]'
if cap_run many_frames 2 encode --model-dir "$TMP/model" \
  --inputs "$TMP/frames.safetensors" --out "$TMP/o.safetensors"; then
  expect_err many_frames 'expected at most 1048576 frame units'
fi

finish hostile_input_test
