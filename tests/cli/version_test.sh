#!/usr/bin/env bash
# `frameshard --version`: the build's facts (frameshard/build_info.h) that a
# bug report needs -- the version of CMakeLists.txt, the git revision of the
# checkout, the torch of the build, CUDA / NCCL / Gloo groups -- and exit 0.
# Usage: bash tests/cli/version_test.sh <frameshard binary> <repo root>
set -u
BIN=${1:?usage: version_test.sh <frameshard binary> <repo root>}
ROOT=${2:?usage: version_test.sh <frameshard binary> <repo root>}
source "$(dirname "$0")/lib.sh"

version=$(sed -n 's/^project(frameshard VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
# The torch the build used: its version.py, as cmake/FrameshardTorch.cmake reads it.
torch_dir=$("$ROOT/.venv/bin/python" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])')
torch=$(sed -n "s/^__version__ = '\([^']*\)'.*/\1/p" "$torch_dir/version.py")
rev=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

if run_cmd version 0 "$BIN" --version; then
  expect_out version "^frameshard $version \\(git ${rev}(-dirty)?\\)$"
  expect_out version "^torch: ${torch//+/\\+}$"
  expect_out version "^cuda: (yes|no)$"
  expect_out version "^nccl: (yes|no)$"
  expect_out version "^gloo groups: yes$"  # the CLI creates its groups in C++
  expect_out version "^build: Release, GNU "
  # A CUDA torch of the venv: the CUDA path is compiled.
  if [ -e "$torch_dir/lib/libtorch_cuda.so" ]; then
    expect_out version "^cuda: yes$"
  fi
fi
# --version wins over the required subcommand, and is listed in --help.
run_cmd help 0 "$BIN" --help && expect_out help "--version"
finish version_test
