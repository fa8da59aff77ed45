#!/usr/bin/env bash
# Runs a command with Debian's C++ dependencies of frameshard hidden, as on a
# machine that has only torch, a compiler and CMake: inside a private mount
# namespace (unshare -m, needs root) every file and every package-owned
# directory of libyaml-cpp-dev, libyaml-cpp0.7, nlohmann-json3-dev,
# libgloo-dev and libgloo0 is covered by an empty directory or /dev/null.
# Nothing changes outside the command. tests/python/package_test.sh builds
# the Python package this way, so the pip build is shown to need nothing of
# them.
#   bash scripts/without-debian-deps.sh <command> [args...]
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: without-debian-deps.sh <command> [args...]" >&2; exit 2; }
packages="libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libgloo-dev libgloo0"

if [ "${FRAMESHARD_DEPS_HIDDEN:-}" != 1 ]; then
  unshare -m --propagation private true 2>/dev/null || {
    echo "without-debian-deps: expected to create a mount namespace (unshare -m, as root), got a refusal" >&2
    exit 2
  }
  FRAMESHARD_DEPS_HIDDEN=1 exec unshare -m --propagation private bash "$0" "$@"
fi

# Inside the namespace: cover what the packages own.
empty=$(mktemp -d)
hidden=()
covered() {
  local p=$1 h
  for h in "${hidden[@]+"${hidden[@]}"}"; do
    case "$p" in "$h"/*) return 0 ;; esac
  done
  return 1
}
for pkg in $packages; do
  dpkg -s "$pkg" >/dev/null 2>&1 || continue
  while IFS= read -r path; do
    [ -e "$path" ] || [ -L "$path" ] || continue
    covered "$path" && continue
    if [ -d "$path" ] && [ ! -L "$path" ]; then
      # A directory only this package owns (not /usr/include itself).
      owners=$(dpkg -S "$path" 2>/dev/null | sed 's/: .*//' | tr ', ' '\n\n' | grep -c . || true)
      if [ "$owners" = 1 ]; then
        mount --bind "$empty" "$path"
        hidden+=("$path")
      fi
    else
      mount --bind /dev/null "$path"
    fi
  done < <(dpkg -L "$pkg" | grep -v '^/usr/share/doc\|^/usr/share/man\|^/\.$')
done
for probe in /usr/include/yaml-cpp/yaml.h /usr/include/nlohmann/json.hpp /usr/include/gloo/config.h; do
  if [ -s "$probe" ]; then
    echo "without-debian-deps: expected $probe hidden, got it readable" >&2
    exit 2
  fi
done
echo "without-debian-deps: hid ${#hidden[@]} directories of: $packages" >&2
exec "$@"
