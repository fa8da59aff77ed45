#!/usr/bin/env bash
# The Python package as a user gets it: sets up the modern-tier venv (scripts/setup-modern.sh;
# fast when it is already there), installs the package into it with the README's line
# (`pip install --no-build-isolation .`: builds frameshard._C against the venv's torch, with
# warnings as errors), runs tests/python/test_package.py with the venv's pytest, then the
# README's two-process training-step example under torchrun.
# Usage: bash tests/python/package_test.sh <repo root>
set -euo pipefail
ROOT=${1:?usage: package_test.sh <repo root>}
ROOT=$(cd "$ROOT" && pwd)
VENV=${FRAMESHARD_VENV:-$ROOT/.venv}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

bash "$ROOT/scripts/setup-modern.sh"
start=$(date +%s)
CMAKE_BUILD_PARALLEL_LEVEL=${FRAMESHARD_JOBS:-2} "$VENV/bin/python" -m pip install -q \
  --no-build-isolation -C cmake.define.FRAMESHARD_WERROR=ON "$ROOT"
echo "package_test: pip install . took $(($(date +%s) - start)) s"

cd "$ROOT"
"$VENV/bin/python" -m pytest -q -s -p no:cacheprovider --basetemp "$TMP/pytest" \
  tests/python/test_package.py
"$VENV/bin/torchrun" --standalone --nproc-per-node 2 examples/python/hf_train_step.py
