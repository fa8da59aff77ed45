#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test suite: unit, dist, cli.
# Usage: scripts/test.sh [extra cmake -D options...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh "$@"
cd build
ctest --output-on-failure -j "${FRAMESHARD_TEST_JOBS:-2}"
