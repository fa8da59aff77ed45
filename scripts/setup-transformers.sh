#!/usr/bin/env bash
# Makes ./.venv-tf-VERSION: the modern tier's venv (scripts/setup-modern.sh:
# the same python, torch 2.15.0, nvidia wheels, numpy, pytest, peft, ...) with
# transformers==VERSION instead of the pinned release, for the transformers
# release matrix (scripts/test-transformers-releases.sh). uv links every wheel
# from its cache, so torch is not downloaded again. Measured on 2 cores: a new
# venv about 15 s whether the release's wheel is cached or not (its download is
# under a second; python -m venv about 5 s and the import check of torch and
# transformers about 8 s are the rest), about 80 MB of disk that is not a hard
# link into uv's cache; a venv already made 0.3-0.5 s (it prints the versions).
#
# Usage: scripts/setup-transformers.sh VERSION
#   FRAMESHARD_TF_VENV  venv directory (default: <repo>/.venv-tf-VERSION; FRAMESHARD_VENV,
#                       the main venv of setup-modern.sh and package_test.sh, is not used)
# Prints the venv's directory as the last line of its output.
#
# frameshard is not installed into it: the matrix runs the main .venv's
# installed package (its frameshard._C is built against the same torch) through
# PYTHONPATH, see test-transformers-releases.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?usage: setup-transformers.sh VERSION (e.g. 5.18.0)}
case "$version" in
[0-9]*.[0-9]*) ;;
*)
  echo "setup-transformers: expected a release such as 5.18.0, got '$version'" >&2
  exit 2
  ;;
esac
venv=${FRAMESHARD_TF_VENV:-$root/.venv-tf-$version}
FRAMESHARD_VENV=$venv FRAMESHARD_TRANSFORMERS=$version bash "$root/scripts/setup-modern.sh" >&2
echo "$venv"
