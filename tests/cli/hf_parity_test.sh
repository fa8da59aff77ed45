#!/usr/bin/env bash
# `frameshard encode` against Hugging Face transformers for every Qwen-VL
# family: sets up the modern-tier venv (scripts/setup-modern.sh; fast when it
# is already there), builds tiny random checkpoints, inputs and reference
# outputs (tests/python/make_hf_fixtures.py), then runs
# tests/python/test_hf_parity.py with the venv's pytest.
# Usage: bash tests/cli/hf_parity_test.sh <frameshard binary> <repo root>
set -euo pipefail
# BIN, ROOT, VENV, TMP; the venv made sure of.
source "$(dirname "$0")/venv_env.sh" "$0" "$@"
"$VENV/bin/python" "$ROOT/tests/python/make_hf_fixtures.py" --out "$TMP/fixtures"
cd "$ROOT"
FRAMESHARD_BIN=$BIN FRAMESHARD_HF_FIXTURES=$TMP/fixtures \
  "$VENV/bin/python" -m pytest -q -s -p no:cacheprovider \
  --basetemp "$TMP/pytest" tests/python/test_hf_parity.py
