#!/usr/bin/env bash
# Lints and format-checks the Python files with a pinned ruff (configured in
# pyproject.toml: [tool.ruff]). ruff runs from its own small venv, ./.venv-lint
# (git-ignored; no torch), so the CI lint tier runs it before the modern-tier
# .venv exists. Idempotent: when .venv-lint already holds the pinned ruff it
# only runs it (measured: about 0.2 s for the whole tree); a fresh .venv-lint
# about 15 s on 2 cores (python -m venv, then one wheel of about 11 MB from PyPI).
#
# Usage: scripts/ruff.sh [--fix | PATH...]
#   no arguments  `ruff check` and `ruff format --check` over the Python
#                 paths below; fails on any finding
#   --fix         `ruff check --fix` then `ruff format` over the same paths
#   PATH...       check those paths only
#   FRAMESHARD_LINT_VENV  the venv (default: <repo>/.venv-lint)
#   FRAMESHARD_PYTHON     interpreter for the venv (default: python3; any
#                         python >= 3.8, Debian's included: ruff is a binary)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ruff_version=0.17.6
venv=${FRAMESHARD_LINT_VENV:-$root/.venv-lint}
ruff=$venv/bin/ruff

# The Python of the repository. scripts/*.py and tools/*.py have none yet:
# they join the list (and the check) as soon as one is added.
paths=(python/frameshard tests/python tests/docs bench/*.py examples/python)
for glob in scripts/*.py tools/*.py; do
  [ -e "$glob" ] && paths+=("$glob")
done

if [ "$("$ruff" --version 2>/dev/null | cut -d' ' -f2)" != "$ruff_version" ]; then
  # Two callers at once would install into the same venv: serialise them.
  exec 9>"${TMPDIR:-/tmp}/frameshard-ruff-$(printf '%s' "$venv" | sha256sum | cut -c1-16).lock"
  flock 9
  if [ "$("$ruff" --version 2>/dev/null | cut -d' ' -f2)" != "$ruff_version" ]; then
    [ -x "$venv/bin/python" ] || "${FRAMESHARD_PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "ruff==$ruff_version"
  fi
  flock -u 9
fi

if [ "${1:-}" = "--fix" ]; then
  "$ruff" check --fix "${paths[@]}"
  "$ruff" format "${paths[@]}"
  exit 0
fi
[ $# -gt 0 ] && paths=("$@")
rc=0
"$ruff" check "${paths[@]}" || rc=1
"$ruff" format --check "${paths[@]}" || rc=1
[ "$rc" -eq 0 ] && echo "ruff: ${paths[*]} clean (ruff $ruff_version)"
exit "$rc"
