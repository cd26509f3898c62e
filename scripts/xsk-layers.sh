#!/usr/bin/env bash
# Our AF_XDP layer against the xdp crate's under the same relay-afxdp worker, in
# interleaved single searches (ours, crate, ours, crate, …) so that drift in a shared
# VM's speed falls on both alike. Needs root and a release build
# (cargo build --release -p perf -p relay-afxdp -p relay-mio). Usage: scripts/xsk-layers.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
out=target/perf/xsk-layers
mkdir -p "$out"
echo "round | layer | max loss-free pps | limit | forwarder µs/pkt"
for round in $(seq 1 "$rounds"); do
  for key in afxdp-native-wakeup afxdp-crate-native-wakeup; do
    target/release/perf compare --repeats 1 --only "$key" --out "$out/$key-$round.md" >"$out/$key-$round.log" 2>&1
    echo "$round | $key | $(grep '^| relay-afxdp' "$out/$key-$round.md" | head -1 | cut -d'|' -f3-5)"
  done
done
