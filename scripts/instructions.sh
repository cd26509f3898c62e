#!/usr/bin/env bash
# The instruction-count gate (CI runs it after the test command): runs the hot-path
# benches under callgrind (iai-callgrind), prints bench, baseline, now and change for
# each, and fails when one costs more than 2 % (ufrag_perf::gate::TOLERANCE) above or below the
# committed baseline (common/benches/instructions.baseline: an improvement must be
# accepted, so the baseline follows it), has no baseline, did not run, or when the
# baseline was counted by another compiler than this run's (it records `rustc
# --version`). Then it checks that the gate can fail: against a copy of the baseline 5 %
# cheaper than this run, and one 5 % dearer, the gate must refuse.
#
#   scripts/instructions.sh            # gate
#   scripts/instructions.sh --accept   # write this run's counts as the baseline; commit the diff
#
# Installs valgrind and iai-callgrind-runner when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-deps.sh
if ! command -v valgrind >/dev/null; then
  echo "== installing valgrind"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi
runner_version=0.16.1 # must equal the iai-callgrind version in Cargo.lock
if ! cargo install --list | grep -q "^iai-callgrind-runner v$runner_version:"; then
  echo "== installing iai-callgrind-runner $runner_version"
  cargo install --locked -q iai-callgrind-runner --version "$runner_version"
fi

# Every instruction-count bench: the relay's parsers, forwarder and flow table
# (ufrag-common), relay-afxdp's frame rewrite, the transceiver's demux and one
# established session's echo path (str0m included).
benches=(ufrag-common:hot_path_instructions ufrag-relay-afxdp:rewrite_instructions
  ufrag-transceiver:demux_instructions ufrag-transceiver:session_echo_instructions)
summaries=target/iai
rm -rf "$summaries" # a bench that no longer runs must not be read from an old summary
mkdir -p target # a fresh clone has none yet: the bench log goes there
for bench in "${benches[@]}"; do
  echo "== instruction counts: ${bench/:/ }"
  cargo bench --locked -q -p "${bench%%:*}" --bench "${bench#*:}" -- --save-summary=json \
    >target/iai-bench.log 2>&1 || { cat target/iai-bench.log; exit 1; }
done
gate() { cargo run --locked -q -p ufrag-perf --bin ufrag-perf -- gate --summaries "$summaries" "$@"; }
if [ "${1:-}" = "--accept" ]; then
  gate --accept
  exit 0
fi
echo "== instruction-count gate"
gate

echo "== the gate refuses a regression (self-check against a baseline 5 % cheaper)"
doctored=$(mktemp)
trap 'rm -f "$doctored"' EXIT
awk '/^#/ {print; next} {printf "%s %d\n", $1, $2 * 0.95}' common/benches/instructions.baseline >"$doctored"
if gate --baseline "$doctored" >/dev/null; then
  echo "!! the gate passed a 5 % regression: it cannot fail" >&2
  exit 1
fi
echo "== the gate refused it, as it must"
echo "== the gate refuses an improvement nobody accepted (self-check against a baseline 5 % dearer)"
awk '/^#/ {print; next} {printf "%s %d\n", $1, $2 * 1.05}' common/benches/instructions.baseline >"$doctored"
if gate --baseline "$doctored" >/dev/null; then
  echo "!! the gate passed an unaccepted 5 % improvement" >&2
  exit 1
fi
echo "== the gate refused it, as it must"
