#!/usr/bin/env bash
# The main job: the benchmark suite.
#   1. instruction counts of the hot path (callgrind via iai-callgrind) against the
#      committed baseline: the gate CI runs (scripts/instructions.sh);
#   2. wall-clock ns/op of the hot path (criterion): for the perf lab;
#   3. flow-table memory per flow and for 1M flows;
#   4. loopback forwarding: relay-mio with 1 and 2 workers against a bare
#      recvmmsg/sendmmsg forwarder, in one run (report in target/perf/loopback.md);
#   5. WebRTC sessions through relay-mio and direct: setup times of str0m clients and of
#      headless Chromium (timeline, ping RTT, echo ratio), and echo capacity of one
#      transceiver worker (report in target/perf/sessions.md);
#   6. live sessions next to a junk flood and through kill -9 of the relay, with and
#      without Redis (report in target/perf/resilience.md);
#   7. side by side on the netns testbed: the direct path, what a user would pick instead
#      (naive std::net relay, bare mmsg forwarder, nftables DNAT+SNAT, nginx stream
#      proxy, Quilkin), relay-mio and relay-afxdp in each mode, each searched 3 times over
#      1,000 flows, counted by an XDP sink (report in target/perf/compare.md and .json;
#      needs root), with a profile of each forwarder's core (Linux perf); the same
#      downlink, transceiver → client (target/perf/compare-downlink.md); with 1,200-byte
#      datagrams (target/perf/compare-1200b.md); the stateful ones again over 100,000
#      flows (target/perf/compare-100k-flows.md); over IPv6 (target/perf/compare-ipv6.md);
#      both directions with 80 % downlink, as
#      while the model speaks (target/perf/compare-model-speaks.md); and the latency of sleeping and
#      busy-polling relays with no kernel work steered across cores
#      (target/perf/compare-latency.md).
# Set SKIP_MICRO=1 to run only steps 4 to 7.
# Installs what it needs when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# perf sessions runs headless Chromium on the demo page; perf resilience a redis-server.
for tool in chromium redis-server; do
  if ! command -v "$tool" >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
  fi
done
# perf compare runs the alternatives: nftables and nginx's stream module; and profiles
# each forwarder's core with Linux perf.
if ! command -v nft >/dev/null || [ ! -e /usr/lib/nginx/modules/ngx_stream_module.so ] \
  || [ ! -x /usr/bin/perf ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    nftables nginx-light libnginx-mod-stream linux-perf >/dev/null
fi
# ... and Quilkin, the Rust UDP proxy, from crates.io (about 10 minutes to build on 2
# vCPUs; one of its dependencies needs the CPU's AES instructions, hence native).
if ! command -v quilkin >/dev/null; then
  echo "== installing quilkin 0.10.0 (cargo install, about 10 minutes)"
  RUSTFLAGS="-C target-cpu=native" cargo install -q quilkin --version 0.10.0 --locked
fi

if [ -z "${SKIP_MICRO:-}" ]; then
  # The same instruction counts and gate as CI (installs valgrind and the iai runner).
  scripts/instructions.sh
  echo "== wall clock (criterion)"
  cargo bench --locked -p ufrag-common --bench hot_path
  echo "== flow table memory"
  cargo run --locked --release -q -p ufrag-common --example flow_table_size 1000000
fi
echo "== loopback forwarding (perf loopback)"
cargo build --locked --release -q -p relay-mio -p relay-afxdp -p transceiver -p perf
target/release/perf loopback --out target/perf/loopback.md
echo "== WebRTC sessions (perf sessions)"
target/release/perf sessions --out target/perf/sessions.md
echo "== live sessions under junk and through relay restarts (perf resilience)"
target/release/perf resilience --out target/perf/resilience.md
echo "== is kernel bypass warranted? side by side on the netns testbed (perf compare; needs root; about 10 minutes)"
target/release/perf compare --out target/perf/compare.md
echo "== downlink: the transceiver's replies to 1,000 clients (perf compare --direction down)"
target/release/perf compare --direction down --out target/perf/compare-downlink.md
echo "== video-sized datagrams: 1,200 bytes (perf compare --size 1200)"
target/release/perf compare --size 1200 --only direct,nftables,mio,afxdp-native-wakeup,afxdp-native-busy \
  --out target/perf/compare-1200b.md
echo "== the same with 100k flows, for the setups that keep per-flow state (perf compare --flows)"
target/release/perf compare --flows 100000 --only direct,nftables,nginx,quilkin,mio,afxdp-native-wakeup \
  --out target/perf/compare-100k-flows.md
echo "== IPv6: the setups that speak it (perf compare --ipv6)"
target/release/perf compare --ipv6 --only direct,naive,bare,nftables,mio,afxdp-skb-wakeup,afxdp-native-wakeup,afxdp-fast-native \
  --out target/perf/compare-ipv6.md
echo "== the model speaking: both directions, 80 % downlink (perf compare --direction both --downlink-share 0.8)"
target/release/perf compare --direction both --downlink-share 0.8 \
  --only direct,nftables,mio,afxdp-skb-wakeup,afxdp-native-wakeup,afxdp-fast-native \
  --out target/perf/compare-model-speaks.md
echo "== latency: sleeping against busy-polling forwarders, one cross-core hop fewer (perf compare --no-steer)"
target/release/perf compare --no-steer --rounds 0 \
  --only direct,mio,mio-busy,afxdp-skb-wakeup,afxdp-skb-busy,afxdp-native-wakeup,afxdp-native-busy \
  --out target/perf/compare-latency.md
