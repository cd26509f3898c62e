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

# perf's BPF load tools are tested against the kernel's own NAT (nftables).
if ! command -v nft >/dev/null; then
  echo "== installing nftables"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null
fi

# The transceiver's page test syntax-checks its JavaScript with node.
if ! command -v node >/dev/null; then
  echo "== installing nodejs"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null
fi

# The browser tests run headless Chromium and Firefox ESR from Debian, aiortc from PyPI.
for browser in chromium firefox-esr; do
  if ! command -v "$browser" >/dev/null; then
    echo "== installing $browser"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$browser" >/dev/null
  fi
done
if ! python3 -c 'import ensurepip' 2>/dev/null; then
  echo "== installing python3-venv"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
aiortc_version=1.16.0
export UFRAG_AIORTC_PYTHON="$PWD/target/interop-venv/bin/python"
if ! "$UFRAG_AIORTC_PYTHON" -c "import aiortc; assert aiortc.__version__ == '$aiortc_version'" 2>/dev/null; then
  echo "== installing aiortc $aiortc_version in target/interop-venv"
  python3 -m venv target/interop-venv
  target/interop-venv/bin/pip install -q "aiortc==$aiortc_version"
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# The workspace tests include the relay behaviour suite for every backend and place
# (relay-mio: loopback and testbed; relay-afxdp: skb and native XDP in the testbed);
# a case a backend cannot run is reported as ignored with its reason ("!! SKIPPED").
echo "== cargo test (workspace, locked)"
cargo test --workspace --locked 2>&1 | tee "$log"

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
ignored=$(grep -Eo 'test result: ok\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored' "$log" | awk '{s+=$8} END {print s+0}')
echo "== all tests passed; fuzzing: ${fuzz_seconds}s per target"
if [ "$ignored" -gt 0 ]; then
  echo "!! ${ignored} skipped (not passed):" >&2
  grep -h '^!! SKIPPED' "$log" | sort -u >&2 || true
fi
echo "tests: ${passed} passed, ${failed} failed, ${ignored} skipped"
