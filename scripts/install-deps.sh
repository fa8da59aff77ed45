#!/usr/bin/env bash
# Installs the Debian bookworm packages frameshard builds and tests with.
# LibTorch is not among them: frameshard builds against the torch 2.x of a
# Python environment (scripts/setup-modern.sh makes .venv; see
# cmake/FrameshardTorch.cmake). Debian's libtorch-dev 1.13 is neither needed
# nor used; where it is installed, the build pins every torch path to the
# venv's and fails rather than mix the two.
# Idempotent: skips apt entirely when everything is already installed.
set -euo pipefail
pkgs=(
  build-essential cmake ccache clang-format clang-tidy clang libclang-rt-14-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev  # gloo headers: the PyPI torch wheel ships its c10d headers but not gloo's
  python3-venv # scripts/ruff.sh's .venv-lint (Debian's python3 has no venv module without it)
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
