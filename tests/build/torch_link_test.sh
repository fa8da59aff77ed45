#!/usr/bin/env bash
# One torch per process: every LibTorch library the built programs load
# (libtorch*, libc10*) resolves inside the torch the build was configured
# with (FRAMESHARD_TORCH_PREFIX), never to another copy such as Debian's
# libtorch-dev in /usr/lib. A program that mixes two torches aborts at
# start-up (c10 DispatchKeySet internal assert), so also run one.
# Usage: bash tests/build/torch_link_test.sh <torch prefix> <program>...
set -eu
PREFIX=${1:?usage: torch_link_test.sh <torch prefix> <program>...}
shift
PREFIX=$(realpath "$PREFIX")
fail=0
for prog in "$@"; do
  libs=$(ldd "$prog" | awk '/lib(torch|c10)[^ ]*\.so/ {print $1 " " $3}')
  [ -n "$libs" ] || { echo "FAIL: $prog loads no libtorch/libc10" >&2; fail=1; continue; }
  while read -r name path; do
    real=$(realpath "$path" 2>/dev/null || echo "not found")
    case "$real" in
    "$PREFIX"/*) ;;
    *) echo "FAIL: $prog loads $name from $real, not from $PREFIX" >&2; fail=1 ;;
    esac
  done <<<"$libs"
  echo "ok: $(basename "$prog"): $(wc -l <<<"$libs") torch libraries, all in $PREFIX"
done
"$1" --help >/dev/null || { echo "FAIL: $1 --help did not run" >&2; fail=1; }
[ "$fail" -eq 0 ] && echo "torch_link_test: all checks passed"
exit "$fail"
