#!/usr/bin/env bash
# What scripts/gpu-check.sh needs on the lent GPU machine that it lacks, fetched
# here (Debian bookworm with its mirror and PyPI) to be carried there (no
# network on it; at most 64 MiB travel with the working tree):
#   .gpu-deps/  the Debian development packages of the C++ build (yaml-cpp,
#               CLI11, nlohmann-json, GoogleTest, Google Benchmark, and gloo's
#               headers for the C++ Gloo groups, which PyPI's torch lacks), as
#               .debs that gpu-check.sh unpacks aside (measured 1.9 MB);
#   .whl/       the wheels of the Python package's build for that machine's
#               Python 3.12 (pyproject.toml's build-system pins: scikit-build-core,
#               nlohmann-json, cmeel-yaml-cpp, and what they require there that
#               its image lacks: cmeel, importlib-resources; measured 1.2 MB).
# Both folders are git-ignored: name them in the device call's `carry`.
# Usage: bash scripts/gpu-deps.sh        (FRAMESHARD_PYTHON: the pip to download with)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${FRAMESHARD_PYTHON:-$root/.venv/bin/python}
mkdir -p "$root/.gpu-deps" "$root/.whl"
cd "$root/.gpu-deps"
apt-get download libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev nlohmann-json3-dev \
  libgtest-dev libgmock-dev googletest libbenchmark-dev libbenchmark1debian libgloo-dev
wheels=(scikit-build-core==1.1.2 nlohmann-json==3.12.0 cmeel-yaml-cpp==0.8.0 cmeel==0.62.0
  importlib-resources==7.1.0)
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$root/.whl" "${wheels[@]}"
ls -la "$root/.gpu-deps" "$root/.whl"
du -sh "$root/.gpu-deps" "$root/.whl"
