#!/usr/bin/env bash
# The transformers release matrix: runs a pytest selection of the installed frameshard package
# with other transformers releases, without rebuilding it. For each VERSION:
#   1. scripts/setup-transformers.sh VERSION makes ./.venv-tf-VERSION (git-ignored): .venv's
#      pinned set (torch 2.15.0 and its nvidia wheels, numpy, pytest, peft...) with
#      transformers==VERSION, linked from uv's cache (measured on 2 cores: a new venv about
#      15 s, one already made 0.3-0.5 s);
#   2. pytest runs under that venv's python with PYTHONPATH starting at a directory that holds
#      only a symlink `frameshard` -> the package installed in .venv (tests/python/package_test.sh
#      install, ctest's python.install): the same torch build, so frameshard._C loads (its RPATH
#      names .venv's torch and yaml-cpp; torch's libraries are already loaded by `import torch`).
# Every release runs, then a summary; exits 1 when any failed.
#
# Usage: scripts/test-transformers-releases.sh [VERSION...] [-- PYTEST ARGS...]
#   VERSION...            releases (default: $FRAMESHARD_TF_RELEASES, else 5.17.0, the oldest
#                         supported, 5.18.0, NeMo Automodel's pin, and 5.25.0, the newest
#                         checked; .venv's own 5.24.0 is the python tier's)
#   -- PYTEST ARGS        the pytest selection (files, -k, -x ...; default:
#                         $FRAMESHARD_TF_TESTS, else tests/python/test_releases.py)
#   FRAMESHARD_VENV       the venv whose installed frameshard is tested (default: <repo>/.venv)
#   FRAMESHARD_TF_RELEASES, FRAMESHARD_TF_TESTS  as above (space-separated)
# Example: scripts/test-transformers-releases.sh 5.18.0 -- tests/python/test_families.py -k glm
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MAIN=${FRAMESHARD_VENV:-$ROOT/.venv}
DEFAULT_RELEASES="5.17.0 5.18.0 5.25.0"

versions=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  versions+=("$1")
  shift
done
[ "${1:-}" = "--" ] && shift
tests=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  read -r -a versions <<<"${FRAMESHARD_TF_RELEASES:-$DEFAULT_RELEASES}"
fi
if [ ${#tests[@]} -eq 0 ]; then
  read -r -a tests <<<"${FRAMESHARD_TF_TESTS:-tests/python/test_releases.py}"
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The installed package (not python/frameshard of the tree: no _C there). From $TMP, so the
# working directory cannot shadow it.
pkg=$(cd "$TMP" && "$MAIN/bin/python" -c 'import os, frameshard; print(os.path.dirname(frameshard.__file__))') || {
  echo "test-transformers-releases: no frameshard installed in $MAIN (run" \
    "tests/python/package_test.sh $ROOT install, or ctest -R python.install)" >&2
  exit 1
}
case "$pkg" in
"$MAIN"/lib/*/site-packages/frameshard) ;;
*)
  echo "test-transformers-releases: expected frameshard installed in $MAIN's site-packages, found $pkg" >&2
  exit 1
  ;;
esac
main_torch=$("$MAIN/bin/python" -c 'from importlib.metadata import version; print(version("torch"))')
mkdir -p "$TMP/path"
ln -s "$pkg" "$TMP/path/frameshard"

summary=()
failed=0
for v in "${versions[@]}"; do
  echo "test-transformers-releases: ===== transformers $v ====="
  start=$(date +%s)
  if ! venv=$(bash "$ROOT/scripts/setup-transformers.sh" "$v" | tail -n 1); then
    summary+=("$v: setup FAILED")
    failed=1
    continue
  fi
  setup_s=$(($(date +%s) - start))
  torch_v=$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("torch"))')
  if [ "$torch_v" != "$main_torch" ]; then
    echo "test-transformers-releases: $venv has torch $torch_v, $MAIN $main_torch: _C would not load" >&2
    summary+=("$v: torch mismatch ($torch_v)")
    failed=1
    continue
  fi
  rc=0
  (
    cd "$ROOT"
    export PYTHONPATH=$TMP/path${PYTHONPATH:+:$PYTHONPATH}
    # Which package and release the tests see (a stale python/frameshard on the path would show here).
    "$venv/bin/python" -c 'import frameshard, transformers
print("test-transformers-releases: frameshard %s (%s), transformers %s" % (
    frameshard.__version__, frameshard.__file__, transformers.__version__))'
    "$venv/bin/python" -m pytest -q -s -p no:cacheprovider --basetemp "$TMP/pytest-$v" "${tests[@]}"
  ) || rc=$?
  took=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then
    summary+=("$v: passed (setup ${setup_s} s, total ${took} s)")
  else
    summary+=("$v: FAILED, pytest exit $rc (setup ${setup_s} s, total ${took} s)")
    failed=1
  fi
done
echo "test-transformers-releases: ${tests[*]}"
for line in "${summary[@]}"; do
  echo "test-transformers-releases:   transformers $line"
done
exit "$failed"
