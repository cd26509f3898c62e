#!/usr/bin/env bash
# Our AF_XDP layer against the xdp crate's under the same relay-afxdp worker, in
# randomized interleaved rounds of `perf compare` (so drift in a shared VM's speed falls
# on both alike), priced per packet at fixed loads with relay-mio as the baseline. Needs
# root and a release build (cargo build --release -p ufrag-perf -p ufrag-relay-afxdp -p ufrag-relay-mio).
# Usage: scripts/xsk-layers.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
out=target/perf/xsk-layers.md
target/release/ufrag-perf compare --only mio,afxdp-native-wakeup,afxdp-crate-native-wakeup \
  --rounds "$rounds" --no-search --out "$out" >/dev/null
grep -E '^\| (setup|relay-)' "$out" | head -4
echo "report: $out"
