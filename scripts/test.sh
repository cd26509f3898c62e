#!/usr/bin/env bash
# The project's test command (README): every test, the benches in test mode, and a short
# fuzz run of every target. Installs what a fresh machine lacks. Exits non-zero on any
# failure.
#
#   scripts/test.sh              # full run
#   FUZZ_SECONDS=0 scripts/test.sh   # skip fuzzing (says so loudly)
set -euo pipefail
cd "$(dirname "$0")/.."

# The route-cache tests run a real redis-server.
if ! command -v redis-server >/dev/null; then
  echo "== installing redis-server"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

# The AF_XDP tests ping the relay while it runs.
if ! command -v ping >/dev/null; then
  echo "== installing iputils-ping"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iputils-ping >/dev/null
fi

# The transceiver's page test syntax-checks its JavaScript with node.
if ! command -v node >/dev/null; then
  echo "== installing nodejs"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "== cargo test (workspace, locked)"
cargo test --workspace --locked 2>&1 | tee "$log"

echo "== the relay behaviour suite inside the netns testbed (root): relay-mio, then relay-afxdp"
RELAY_TESTBED=1 cargo test --locked -p relay-mio --test behaviour --test route_cache 2>&1 | tee -a "$log"
for mode in skb native; do
  echo "== relay-afxdp ($mode XDP) against the same suite"
  skip=()
  if [ "$mode" = skb ]; then
    # Generic XDP on veth sees every frame as RX queue 0 (veth does not record the RX
    # queue), so only queue 0's AF_XDP socket can receive. Native mode spreads flows.
    echo "!! SKIPPED for relay-afxdp in skb mode: two_workers_are_both_used_and_each_pinned_to_its_own_core:" \
         "generic XDP on veth reports RX queue 0 for every frame, so a second queue's AF_XDP socket gets nothing" \
         "(the same test runs and passes in native mode below)" >&2
    skip=(--skip two_workers_are_both_used_and_each_pinned_to_its_own_core)
  fi
  RELAY_UNDER_TEST="$PWD/target/debug/relay-afxdp" RELAY_TESTBED=1 RELAY_XDP_MODE=$mode \
    cargo test --locked -p relay-mio --test behaviour --test route_cache -- "${skip[@]}" 2>&1 | tee -a "$log"
done

echo "== benches in test mode (each criterion bench runs once; iai bench must compile)"
cargo test --locked -p ufrag-common --bench hot_path
cargo build --locked -p ufrag-common --benches

fuzz_seconds=${FUZZ_SECONDS:-15}
if [ "$fuzz_seconds" -gt 0 ]; then
  echo "== fuzz: every target for ${fuzz_seconds}s"
  common/fuzz/run.sh "$fuzz_seconds"
else
  echo "!! FUZZING SKIPPED (FUZZ_SECONDS=0): the fuzz targets did not run" >&2
fi
# Every child a test starts is owned (testkit::OwnedChild: killed on drop and on the
# death of the thread that started it). Check that none of our binaries outlived the run.
survivors=$(for p in /proc/[0-9]*; do
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  case "$exe" in "$PWD"/target/*) echo "  pid ${p#/proc/}: $exe";; esac
done)
if [ -n "$survivors" ]; then
  echo "!! processes started by the tests are still running:" >&2
  echo "$survivors" >&2
  exit 1
fi
echo "== no test process survived the run"

# One closing line for the whole run, summed over every test binary above.
passed=$(grep -Eo 'test result: ok\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
echo "== all tests passed; fuzzing: ${fuzz_seconds}s per target"
echo "tests: ${passed} passed, ${failed} failed"
