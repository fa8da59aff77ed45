# Sourced by the cli tests that run pytest in the modern-tier venv, after `set -euo pipefail`:
#   source "$(dirname "$0")/venv_env.sh" "$0" "$@"   # the test's <frameshard binary> <repo root>
# sets BIN and ROOT (absolute paths), VENV (FRAMESHARD_VENV or ROOT/.venv) and TMP (removed at
# exit), and makes sure of the venv (scripts/setup-modern.sh; fast when it is already there).
_name=$(basename "$1")
BIN=${2:?usage: $_name <frameshard binary> <repo root>}
ROOT=${3:?usage: $_name <frameshard binary> <repo root>}
ROOT=$(cd "$ROOT" && pwd)
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
VENV=${FRAMESHARD_VENV:-$ROOT/.venv}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
bash "$ROOT/scripts/setup-modern.sh"
