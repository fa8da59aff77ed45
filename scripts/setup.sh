#!/usr/bin/env bash
# Installs dependencies (Debian packages; the .venv with torch 2.x from PyPI),
# configures frameshard into ./build against that torch and builds what the
# main job needs: the `frameshard` command-line tool (build/frameshard ab).
# The tests, benchmarks and the in-tree Python extension are built by
# scripts/test.sh (or `cmake --build build`).
# Usage: scripts/setup.sh [extra cmake -D options...]
#   e.g. -DFRAMESHARD_PYTHON=/path/to/your/env/bin/python to build against the
#   torch of another environment (then .venv is still made for the tests).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh
bash scripts/setup-modern.sh
jobs=${FRAMESHARD_JOBS:-$(nproc)}
start=$(date +%s)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFRAMESHARD_BUILD_PYTHON=ON "$@" >/dev/null
cmake --build build -j "$jobs" --target frameshard_cli
echo "setup: build/frameshard ready in $(($(date +%s) - start)) s ($(build/frameshard --version | head -n 1))"
