#!/usr/bin/env bash
# The project's test command (README): every test, the benches in test mode, and a short
# fuzz run of every target. Installs what a fresh machine lacks. Exits non-zero on any
# failure.
#
#   scripts/test.sh              # full run
#   FUZZ_SECONDS=0 scripts/test.sh   # skip fuzzing (says so loudly)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build-deps.sh

# The route-cache tests run a real redis-server.
if ! command -v redis-server >/dev/null; then
  echo "== installing redis-server"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

# The alert rules are checked and unit-tested with promtool (Debian's prometheus).
if ! command -v promtool >/dev/null; then
  echo "== installing prometheus (for promtool)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

# The AF_XDP tests ping the relay while it runs.
if ! command -v ping >/dev/null; then
  echo "== installing iputils-ping"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iputils-ping >/dev/null
fi

# The fast path's tests read its map back with bpftool, field by field.
if ! command -v bpftool >/dev/null; then
  echo "== installing bpftool"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftool >/dev/null
fi

# The fast path's IPv6 test turns TX checksum offload off on the testbed's veths.
if ! command -v ethtool >/dev/null; then
  echo "== installing ethtool"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ethtool >/dev/null
fi

# perf compare profiles every CPU with Linux perf after its rounds (and tests that it did).
if [ ! -x /usr/bin/perf ]; then
  echo "== installing linux-perf"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
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
# pip_venv DIR PACKAGE VERSION: a venv in target/DIR holding PACKAGE==VERSION, made when
# missing or holding another version.
pip_venv() {
  local dir="target/$1" package=$2 version=$3
  if ! "$dir/bin/pip" show "$package" 2>/dev/null | grep -qx "Version: $version"; then
    echo "== installing $package $version in $dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q "$package==$version"
  fi
}
pip_venv interop-venv aiortc 1.16.0
export UFRAG_AIORTC_PYTHON="$PWD/target/interop-venv/bin/python"
# The model protocol page's Python (minting session tokens) runs with PyJWT from PyPI, and
# the Python reference backend (examples/python-backend) with its pinned websockets.
pip_venv model-venv PyJWT 2.10.1
pip_venv model-venv websockets "$(sed -n 's/^websockets==//p' examples/python-backend/requirements.txt)"
export UFRAG_MODEL_PYTHON="$PWD/target/model-venv/bin/python"
# The Kubernetes manifests are validated offline with kubernetes-validate from PyPI.
pip_venv deploy-venv kubernetes-validate 1.37.0
export UFRAG_K8S_PYTHON="$PWD/target/deploy-venv/bin/python"

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# From here on every suite runs even when an earlier one fails: a failure is recorded,
# the closing summary always prints the real counts, and the exit code is non-zero.
set +e
failed_suites=()
# Runs one suite ("$1" names it, the rest is the command), its output teed into the log.
suite() {
  local name=$1
  shift
  echo "== $name"
  "$@" 2>&1 | tee -a "$log"
  local status=${PIPESTATUS[0]}
  if [ "$status" -ne 0 ]; then
    echo "!! SUITE FAILED: $name (exit $status)" | tee -a "$log" >&2
    failed_suites+=("$name")
  fi
}

suite "the closing summary fails on a failure (self-check)" scripts/test-summary-selftest.sh

# The workspace tests include the relay behaviour suite for every backend and place
# (relay-mio: loopback and testbed; relay-afxdp: skb and native XDP in the testbed);
# a case a backend cannot run is reported as ignored with its reason ("!! SKIPPED").
# --no-fail-fast: a failing test binary does not keep the others from running.
suite "cargo test (workspace, locked)" cargo test --workspace --locked --no-fail-fast
# The workspace run above builds ufrag-common with `runtime` (the binaries unify it in);
# the sans-IO core must build and pass its own tests without it.
suite "ufrag-common without the runtime feature (the sans-IO core alone)" \
  cargo test --locked -p ufrag-common
suite "criterion benches in test mode (each runs once)" \
  cargo test --locked -p ufrag-common --bench hot_path
suite "every bench builds" cargo build --locked --workspace --benches

fuzz_seconds=${FUZZ_SECONDS:-15}
if [ "$fuzz_seconds" -gt 0 ]; then
  suite "fuzz: every target for ${fuzz_seconds}s" common/fuzz/run.sh "$fuzz_seconds"
else
  echo "!! FUZZING SKIPPED (FUZZ_SECONDS=0): the fuzz targets did not run" >&2
fi

# Every child a test starts is owned (ufrag_testkit::OwnedChild: killed on drop and on the
# death of the thread that started it). Check that none of our binaries outlived the run.
survivors=$(for p in /proc/[0-9]*; do
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  case "$exe" in "$PWD"/target/*) echo "  pid ${p#/proc/}: $exe";; esac
done)
if [ -n "$survivors" ]; then
  echo "!! processes started by the tests are still running:" >&2
  echo "$survivors" >&2
  failed_suites+=("no test process survives the run")
else
  echo "== no test process survived the run"
fi

# One closing line for the whole run, summed over every test binary above (their
# "test result:" lines, passing or failing), with every failed and skipped test named.
scripts/test-summary.sh "$log" "${failed_suites[@]}"
