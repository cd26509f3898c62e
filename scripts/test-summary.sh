#!/usr/bin/env bash
# The closing summary of scripts/test.sh, from the log of its suites: the passed, failed
# and skipped (ignored) tests summed over every "test result:" line, each failed test by
# name with its panic message, each skipped test by name, and the suites that failed
# (names after the log). Exits 1 when any test or suite failed. Its own test:
# scripts/test-summary-selftest.sh.
#
#   scripts/test-summary.sh LOG [FAILED-SUITE ...]
set -uo pipefail
log=$1
shift
sum() { grep -Eo "test result: (ok|FAILED)\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored" "$log" |
  awk -v f="$1" '{s += $f} END {print s + 0}'; }
# A test that found at run time it cannot run here (a kernel that refuses what it
# tests) returns early and says "!! SKIPPED at run time: NAME: why" on stderr: counted
# as skipped, not passed.
# (The line may follow the harness's progress on the same line: matched anywhere.)
at_run_time=$(grep -o '!! SKIPPED at run time: [^:]*' "$log" | sort -u | wc -l)
passed=$(( $(sum 4) - at_run_time ))
failed=$(sum 6)
ignored=$(( $(sum 8) + at_run_time ))
if [ "$failed" -gt 0 ]; then
  echo "!! failed tests:" >&2
  grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/  \1/' | sort -u >&2
  # Why each failed: its panic and the lines after it, cut short (an assertion may
  # print a whole report), so that the end of a long log still says what broke.
  grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | sort -u |
    while IFS= read -r name; do
      echo "!! why $name failed:" >&2
      # Rust prints the thread's id since 1.92: "thread 'NAME' (1234) panicked at".
      grep -A 6 -E "^thread '${name//./\\.}'( \([0-9]+\))? panicked" "$log" | head -n 14 |
        cut -c1-400 | sed 's/^/    /' >&2
    done
fi
if [ "$ignored" -gt 0 ]; then
  echo "!! ${ignored} skipped (not passed):" >&2
  grep -E '^test .* \.\.\. ignored' "$log" | sed -E 's/^test (.*) \.\.\. ignored(, )?/  \1: /' | sort -u >&2
  grep -ho '!! SKIPPED.*' "$log" | sort -u >&2
fi
if [ "$#" -gt 0 ]; then
  echo "!! failed suites:" >&2
  printf '  %s\n' "$@" >&2
fi
echo "tests: ${passed} passed, ${failed} failed, ${ignored} skipped; suites failed: $#"
[ "$failed" -eq 0 ] && [ "$#" -eq 0 ]
