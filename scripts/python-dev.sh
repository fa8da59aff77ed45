#!/usr/bin/env bash
# The Python package straight from the main build, without pip: builds the
# extension target frameshard_python in ./build (reusing the runtime objects
# the CLI and tests were built from: only python/src/bindings.cpp compiles)
# and lays out build/python-dev/frameshard, whose .py files are links into
# python/frameshard (edits show at once) next to the built _C module.
#   bash scripts/python-dev.sh            # then:
#   PYTHONPATH=build/python-dev .venv/bin/python -c 'import frameshard'
# The tests of the installed package (pip install .) are tests/python/package_test.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${FRAMESHARD_BUILD_DIR:-build}
if ! grep -q '^FRAMESHARD_BUILD_PYTHON:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  cmake -S . -B "$build" -DFRAMESHARD_BUILD_PYTHON=ON >/dev/null
fi
cmake --build "$build" -j "${FRAMESHARD_JOBS:-$(nproc)}" --target frameshard_python
dev=$build/python-dev/frameshard
mkdir -p "$dev"
find "$dev" -maxdepth 1 -type l -delete
for f in python/frameshard/*; do
  ln -sf "$root/$f" "$dev/$(basename "$f")"
done
so=$(find "$build/python" -maxdepth 1 -name '_C*.so' | head -n 1)
[ -n "$so" ] || { echo "python-dev: expected $build/python/_C*.so, got none" >&2; exit 1; }
ln -sf "$root/$so" "$dev/$(basename "$so")"
echo "python-dev: PYTHONPATH=$build/python-dev ($(basename "$so"))"
