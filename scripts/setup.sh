#!/usr/bin/env bash
# Installs dependencies (Debian packages; the .venv with torch 2.x from PyPI),
# configures and builds frameshard into ./build against that torch.
# Usage: scripts/setup.sh [extra cmake -D options...]
#   e.g. -DFRAMESHARD_PYTHON=/path/to/your/env/bin/python to build against the
#   torch of another environment (then .venv is still made for the tests).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh
bash scripts/setup-modern.sh
jobs=${FRAMESHARD_JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$jobs"
