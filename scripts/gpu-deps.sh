#!/usr/bin/env bash
# Downloads the Debian development packages scripts/gpu-check.sh needs
# (yaml-cpp, CLI11, nlohmann-json, GoogleTest, Google Benchmark) into
# .gpu-deps/, for a GPU machine that has a compiler, CMake and a CUDA torch
# but neither these nor a package mirror. Run it here (Debian bookworm with
# its mirror); .gpu-deps/ is git-ignored and travels with the working tree.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.gpu-deps"
cd "$root/.gpu-deps"
apt-get download libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev nlohmann-json3-dev \
  libgtest-dev libgmock-dev googletest libbenchmark-dev libbenchmark1debian
ls -la "$root/.gpu-deps"
