#!/usr/bin/env bash
# `frameshard analyze --emit-grids` against transformers' Qwen-VL processors
# on random sizes (tests/python/test_media_resize.py), with the modern-tier
# venv's pytest (scripts/setup-modern.sh; fast when it is already there).
# Usage: bash tests/cli/media_resize_test.sh <frameshard binary> <repo root>
set -euo pipefail
# BIN, ROOT, VENV, TMP; the venv made sure of.
source "$(dirname "$0")/venv_env.sh" "$0" "$@"
cd "$ROOT"
FRAMESHARD_BIN=$BIN "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  --basetemp "$TMP/pytest" tests/python/test_media_resize.py
