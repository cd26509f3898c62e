#!/usr/bin/env bash
# Runs the README's quick start as a user would paste it: the shell block between
# `<!-- quickstart -->` and `<!-- /quickstart -->`, from the repository's root, in one
# shell (so the exported key reaches both binaries), then stops what it started.
# Fails when the block fails (the session's echo check, the metrics grep) or is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-deps.sh
block=$(mktemp)
trap 'rm -f "$block"' EXIT
awk '/^<!-- quickstart -->$/ {on = 1; next} /^<!-- \/quickstart -->$/ {on = 0} on' README.md |
  sed -e '/^```/d' >"$block"
if ! [ -s "$block" ]; then
  echo "!! README.md has no quick start block between <!-- quickstart --> markers" >&2
  exit 1
fi
for port in 3478 8080 9000 9590 40000 41000; do
  if ss -Hlnu "sport = :$port" | grep -q . || ss -Hlnt "sport = :$port" | grep -q .; then
    echo "!! port $port is taken on this host; the quick start needs it" >&2
    exit 1
  fi
done
echo "== the README's quick start, as pasted:"
sed 's/^/   | /' "$block"
stop_started() {
  local pids
  pids=$(jobs -p)
  if [ -n "$pids" ]; then
    kill $pids 2>/dev/null || true
    wait $pids 2>/dev/null || true
  fi
  rm -f "$block"
}
trap stop_started EXIT
# shellcheck disable=SC1090
source "$block"
echo "== the quick start passed"
