#!/usr/bin/env bash
# `frameshard analyze --emit-grids` against transformers' Qwen-VL processors
# on random sizes (tests/python/test_media_resize.py), with the modern-tier
# venv's pytest (scripts/setup-modern.sh; fast when it is already there).
# Usage: bash tests/cli/media_resize_test.sh <frameshard binary> <repo root>
set -euo pipefail
BIN=${1:?usage: media_resize_test.sh <frameshard binary> <repo root>}
ROOT=${2:?usage: media_resize_test.sh <frameshard binary> <repo root>}
ROOT=$(cd "$ROOT" && pwd)
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
VENV=${FRAMESHARD_VENV:-$ROOT/.venv}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

bash "$ROOT/scripts/setup-modern.sh"
cd "$ROOT"
FRAMESHARD_BIN=$BIN "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  --basetemp "$TMP/pytest" tests/python/test_media_resize.py
