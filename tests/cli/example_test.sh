#!/usr/bin/env bash
# The installed package: `cmake --install` the build tree that holds the
# frameshard binary into a fresh prefix, build examples/two_rank_encode
# against it with find_package(frameshard), run it and check its report.
# Takes a minute or two (one LibTorch translation unit to compile).
# Usage: bash tests/cli/example_test.sh <frameshard-binary> <repo-root>
set -eu

BIN=${1:?usage: example_test.sh <frameshard-binary> <repo-root>}
ROOT=${2:?usage: example_test.sh <frameshard-binary> <repo-root>}
BUILD=$(cd "$(dirname "$BIN")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

step() { echo "== $*"; }

step "install $BUILD -> $TMP/prefix"
cmake --install "$BUILD" --prefix "$TMP/prefix" >"$TMP/install.log"
for f in lib/cmake/frameshard/frameshardConfig.cmake \
         include/frameshard/runtime/encode.h include/frameshard/tower.h \
         include/frameshard/build_config.h include/frameshard/models/toy_tower.h \
         bin/frameshard; do
  [ -e "$TMP/prefix/$f" ] || { echo "FAIL: $f not installed" >&2; exit 1; }
done

# Paths under $TMP differ per run: let ccache treat them as relative.
export CCACHE_BASEDIR="$TMP"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
step "configure the example against the prefix"
cmake -S "$ROOT/examples/two_rank_encode" -B "$TMP/build" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TMP/prefix" \
  "${launcher[@]}" >"$TMP/configure.log" 2>&1 ||
  { cat "$TMP/configure.log" >&2; echo "FAIL: configure" >&2; exit 1; }
step "build"
cmake --build "$TMP/build" -j2 >"$TMP/build.log" 2>&1 ||
  { tail -40 "$TMP/build.log" >&2; echo "FAIL: build" >&2; exit 1; }

step "run"
set +e
"$TMP/build/two_rank_encode" >"$TMP/run.out" 2>&1
code=$?
set -e
cat "$TMP/run.out"
[ "$code" -eq 0 ] || { echo "FAIL: two_rank_encode exited $code" >&2; exit 1; }
grep -Eq '^plan: sharded' "$TMP/run.out" || { echo "FAIL: no sharded plan" >&2; exit 1; }
grep -Eq '^  rank 0: [1-9][0-9]* units' "$TMP/run.out" || { echo "FAIL: no rank 0 row" >&2; exit 1; }
grep -Eq '^  rank 1: [1-9][0-9]* units' "$TMP/run.out" || { echo "FAIL: no rank 1 row" >&2; exit 1; }
grep -Eq '^outputs: embeddings \[66, 48\], deepstack \[66, 48\]$' "$TMP/run.out" ||
  { echo "FAIL: output shapes" >&2; exit 1; }
/usr/bin/python3 - "$TMP/run.out" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
diff = float(re.search(r"max abs diff vs replicated: (\S+)", text).group(1))
assert diff <= 1e-12, diff
assert text.rstrip().endswith("PASS")
EOF

step "the installed CLI runs verify"
"$TMP/prefix/bin/frameshard" verify --nproc 2 --dtype float64 >"$TMP/verify.out" 2>&1 ||
  { cat "$TMP/verify.out" >&2; echo "FAIL: installed frameshard verify" >&2; exit 1; }
grep -q '^PASS$' "$TMP/verify.out" || { echo "FAIL: installed verify: no PASS" >&2; exit 1; }
echo "example_test: all checks passed"
