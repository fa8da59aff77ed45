# Shared by the CLI test scripts (tests/cli/*_test.sh): a temporary
# directory, a failure count, running a command into $TMP/NAME.{out,err},
# and grep checks on what it printed. Source it; then `finish NAME` exits.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# run_cmd NAME EXPECTED_CODE CMD... : runs CMD, stdout in $TMP/NAME.out and
# stderr in $TMP/NAME.err; a different exit code is a failure (with the tail
# of both shown). Returns 0 when the code was the expected one.
run_cmd() {
  local name=$1 expected=$2
  shift 2
  local start=$SECONDS
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  local code=$?
  echo "$name: $* -> exit $code ($((SECONDS - start)) s)"
  if [ "$code" != "$expected" ]; then
    fail "$name: expected exit $expected, got $code"
    sed 's/^/  | /' "$TMP/$name.out" "$TMP/$name.err" | tail -30 >&2
    return 1
  fi
  return 0
}

expect_out() {  # NAME PATTERN
  grep -Eq -- "$2" "$TMP/$1.out" || fail "$1: stdout lacks /$2/"
}
expect_err() {  # NAME PATTERN
  grep -Eq -- "$2" "$TMP/$1.err" || fail "$1: stderr lacks /$2/"
}

finish() {  # SCRIPT_NAME
  if [ "$failures" -ne 0 ]; then
    echo "$1: $failures check(s) failed" >&2
    exit 1
  fi
  echo "$1: all checks passed"
}
