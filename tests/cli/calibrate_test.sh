#!/usr/bin/env bash
# `frameshard calibrate` end to end on a tiny tower: the sweep, the fit
# error per size, the calibration file and the config reading it back
# (`plan --alpha FILE`, `--config` with cost_alpha: FILE), --check's tables,
# and usage errors.
# Usage: bash tests/cli/calibrate_test.sh <frameshard binary> <repo root>
set -u
BIN=${1:?usage: calibrate_test.sh <frameshard binary> <repo root>}
source "$(dirname "$0")/lib.sh"
FS=distributed.multimodal.vision.frame_sharding

if ! "$BIN" calibrate --help >/dev/null 2>&1; then
  echo "calibrate_test: the binary has no calibrate command (torch-free build)"
  exit 0
fi

CAL=$TMP/cal.txt
if run_cmd sweep 0 "$BIN" calibrate --family qwen3-vl --width 64 --depth 1 \
  --sizes 16,64,256,576 --repeats 1 --out "$CAL" --check --preset mixed \
  --cp 2 --max-patches 2048; then
  expect_out sweep "fit error per size"
  expect_out sweep "p +256 x +1 +measured +[0-9.]+ ms +fit +[-+][0-9.]+%"
  expect_out sweep "p +16 x +16 +measured"
  expect_out sweep "per call [0-9.]+ ms"
  expect_out sweep "fit error: max [0-9.]+%, rms [0-9.]+%"
  expect_out sweep "wrote .*cal.txt: quadratic a="
  expect_out sweep "cp +rank +frames +rows +predicted_ms +measured_ms +error"
  expect_out sweep "slowest rank measured: calibrated plan [0-9.]+ ms, FLOP plan"
  expect_out sweep "check summary: per-rank error max [0-9.]+%"
  grep -Eq '^quadratic:[0-9.e+-]+,[0-9.e+-]+,[0-9.e+-]+$' "$CAL" ||
    fail "sweep: $CAL lacks the quadratic:a,b,c line"
  grep -q '^# frameshard calibrate: qwen3-vl width 64 depth 1' "$CAL" ||
    fail "sweep: $CAL lacks the comment header"
fi

# The file is a cost_alpha: as --alpha, and through a config.
if run_cmd plan_alpha 0 "$BIN" plan --preset doc --cp 2 --alpha "$CAL"; then
  expect_out plan_alpha "calibrated .*cal.txt"
fi
printf 'distributed:\n  cp_size: 2\n  multimodal:\n    vision:\n      frame_sharding:\n        enabled: true\n        cost_alpha: %s\n        policy: auto\n' \
  "$CAL" >"$TMP/cfg.yaml"
if run_cmd plan_config 0 "$BIN" plan --preset doc --config "$TMP/cfg.yaml"; then
  expect_out plan_config "calibrated .*cal.txt"
  expect_out plan_config "saving .* gather"
fi

# Errors name the field, what was expected and what was given.
run_cmd missing 2 "$BIN" plan --preset doc --alpha "$TMP/none.txt" &&
  expect_err missing "cost_alpha: expected .*path of a frameshard calibrate file, got .*none.txt .*cannot be read"
echo "alpha=3" >"$TMP/bad.txt"
run_cmd bad_file 2 "$BIN" plan --preset doc --$FS.cost_alpha "$TMP/bad.txt" &&
  expect_err bad_file "$FS.cost_alpha: expected .* holding \"alpha=3\""
run_cmd bad_size 2 "$BIN" calibrate --width 64 --depth 1 --sizes 66 --out "$TMP/x.txt" &&
  expect_err bad_size "calibrate: --sizes: expected patch rows h\*w with h and w multiples of 2, got 66"
run_cmd bad_family 2 "$BIN" calibrate --family llava
# A GPU asked for where this torch sees none: the device named, not a torch stack trace.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  run_cmd no_gpu 2 "$BIN" calibrate --device cuda --width 64 --depth 1 --sizes 16 --out "$TMP/x.txt" &&
    expect_err no_gpu 'timing_tower: expected --device cpu, or cuda on a machine where this torch sees a GPU, got "cuda" \(CUDA GPUs visible: 0\)'
fi
run_cmd bad_dtype 2 "$BIN" calibrate --dtype float16 --width 64 --depth 1 --sizes 16 --out "$TMP/x.txt" &&
  expect_err bad_dtype 'calibrate: expected --dtype float32 or bfloat16, got "float16"'

finish calibrate_test
