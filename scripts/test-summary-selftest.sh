#!/usr/bin/env bash
# Checks scripts/test-summary.sh on logs in cargo test's own format: a clean run passes
# with the right counts, and a failed test, a failed suite (a build error prints no
# "test result:" line) and a failing binary among passing ones each make it fail.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
errors=0
# expect NAME WANT-EXIT WANT-LINE LOG [FAILED-SUITE ...]
expect() {
  local name=$1 want_exit=$2 want_line=$3 log=$4
  shift 4
  local out status
  out=$(scripts/test-summary.sh "$log" "$@" 2>"$dir/stderr")
  status=$?
  if [ "$status" -ne "$want_exit" ] || [ "$out" != "$want_line" ]; then
    echo "FAIL $name: exit $status (want $want_exit), line '$out' (want '$want_line')" >&2
    errors=$((errors + 1))
  else
    echo "ok $name"
  fi
}
cat >"$dir/clean" <<'LOG'
test flow::tests::insert ... ok
test relay_suite::two_workers ... ignored, generic XDP on veth sees one queue
test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s
LOG
cat "$dir/clean" >"$dir/one-failed"
cat >>"$dir/one-failed" <<'LOG'
test sessions::echo ... FAILED

failures:

---- sessions::echo stdout ----

thread 'sessions::echo' (4242) panicked at perf/tests/sessions.rs:12:5:
the echo came back empty

failures:
    sessions::echo

test result: FAILED. 4 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 2.00s
LOG
expect "a clean run" 0 "tests: 15 passed, 0 failed, 1 skipped; suites failed: 0" "$dir/clean"
cat "$dir/clean" >"$dir/skipped-at-run-time"
echo ".!! SKIPPED at run time: xdp_tools::generated: this kernel refuses live frames" \
  >>"$dir/skipped-at-run-time"
expect "a test that skipped at run time" 0 \
  "tests: 14 passed, 0 failed, 2 skipped; suites failed: 0" "$dir/skipped-at-run-time"
expect "a failed test among passing binaries" 1 \
  "tests: 19 passed, 1 failed, 1 skipped; suites failed: 0" "$dir/one-failed"
expect "a suite that failed before any test ran" 1 \
  "tests: 15 passed, 0 failed, 1 skipped; suites failed: 1" "$dir/clean" "fuzz: every target"
if ! grep -q "sessions::echo" <(scripts/test-summary.sh "$dir/one-failed" 2>&1); then
  echo "FAIL the failed test is not named" >&2
  errors=$((errors + 1))
fi
if ! grep -q "the echo came back empty" <(scripts/test-summary.sh "$dir/one-failed" 2>&1); then
  echo "FAIL the failed test's panic message is not shown" >&2
  errors=$((errors + 1))
fi
if ! grep -q "relay_suite::two_workers: generic XDP" <(scripts/test-summary.sh "$dir/clean" 2>&1); then
  echo "FAIL the skipped test is not named with its reason" >&2
  errors=$((errors + 1))
fi
[ "$errors" -eq 0 ] && echo "test summary: all checks passed"
