#!/usr/bin/env bash
# Sets up (scripts/setup.sh: dependencies and the CLI), builds the rest (the
# test programs, benchmarks, the in-tree Python extension) and runs every
# test suite: unit, lint, dist, cli, train, python.
# Usage: scripts/test.sh [extra cmake -D options...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh "$@"
cmake --build build -j "${FRAMESHARD_JOBS:-$(nproc)}"
cd build
ctest --output-on-failure -j "${FRAMESHARD_TEST_JOBS:-2}"
