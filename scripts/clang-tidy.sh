#!/usr/bin/env bash
# Runs clang-tidy (Debian's 14, checks in .clang-tidy, warnings are errors)
# over the torch-free core's and io layer's sources, with the compile
# commands of a torch-free configure in build-lint/ (configured here; nothing
# is built).
# Usage: scripts/clang-tidy.sh [files...]   (default: src/core/*.cpp src/io/*.cpp)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cmake -S . -B build-lint -DFRAMESHARD_BUILD_RUNTIME=OFF -DFRAMESHARD_BUILD_TOOLS=OFF \
  -DFRAMESHARD_BUILD_TESTS=OFF -DFRAMESHARD_BUILD_BENCHMARKS=OFF >/dev/null
# The one generated header the core includes (build_info.cpp's git revision).
cmake --build build-lint --target frameshard_git_revision >/dev/null
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(src/core/*.cpp src/io/*.cpp)
printf '%s\n' "${files[@]}" |
  xargs -P "${FRAMESHARD_JOBS:-$(nproc)}" -n 1 clang-tidy -p build-lint --quiet 2>/dev/null
echo "clang-tidy: ${#files[@]} files clean"
