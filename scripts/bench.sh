#!/usr/bin/env bash
# The main job: the benchmark suite. Two sizes:
#
#   scripts/bench.sh          the default (the README gives its measured runtime on a
#                             2-vCPU host): loopback forwarding, WebRTC sessions, the
#                             model bridge against the built-in echo (latency, sessions
#                             per core, profile),
#                             resilience (junk, restarts, hostile clients) and the default
#                             `ufrag-perf compare` (the verdict); prints the verdict last.
#   scripts/bench.sh --full   everything: also the instruction-count gate (CI runs it too),
#                             criterion's wall clock, flow-table memory, Quilkin (built from
#                             crates.io, about 10 minutes), the model bridge's largest
#                             load, the worker sweep, and compare
#                             downlink, with 1,200-byte datagrams, over 100k flows, over
#                             IPv6, with the model speaking, and latency; and the internal
#                             leg: bundles and GSO in compare, bundles in the transceiver.
#
# Reports go to target/perf/: loopback.md, sessions.md, model.md, resilience.md (+ .json),
# compare.md (+ .json, .svg); with --full also model-largest-load.md, compare-workers.md, compare-downlink.md,
# compare-1200b.md, compare-100k-flows.md, compare-ipv6.md, compare-model-speaks.md and
# compare-latency.md, compare-internal-leg.md (each with .json and .svg) and
# model-bundles.md. Needs root (the netns testbed; run it as root, it calls no sudo).
# Installs what it needs when missing.
#
# A step whose report has a failed row exits non-zero after one line per row
# (`ufrag-perf sessions (target/perf/sessions.md): FAILED row "…": reason`): the job
# stops there, its last line naming the step, and exits non-zero. The verdict is printed
# last only when every step passed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-deps.sh
full=
case "${1:-}" in
  --full) full=1 ;;
  "") ;;
  *) echo "usage: scripts/bench.sh [--full]" >&2; exit 2 ;;
esac
started=$(date +%s)

# step NAME COMMAND...: runs one step of the job; if it fails, the job stops with one
# line naming it (the step's own lines just above say why: its report's failed rows,
# one a line).
step() {
  local name=$1 status=0
  shift
  "$@" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "!! bench.sh: FAILED at $name, exit $status, after $(( ($(date +%s) - started) / 60 )) min; the lines just above say why" >&2
    exit "$status"
  fi
}

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
# ... and, for --full, Quilkin, the Rust UDP proxy, from crates.io (about 10 minutes to
# build on 2 vCPUs; one of its dependencies needs the CPU's AES instructions, hence native).
if [ -n "$full" ] && ! command -v quilkin >/dev/null; then
  echo "== installing quilkin 0.10.0 (cargo install, about 10 minutes)"
  RUSTFLAGS="-C target-cpu=native" cargo install -q quilkin --version 0.10.0 --locked
fi

if [ -n "$full" ]; then
  # The same instruction counts and gate as CI (installs valgrind and the iai runner).
  step "the instruction-count gate" scripts/instructions.sh
  echo "== wall clock (criterion)"
  step "criterion" cargo bench --locked -p ufrag-common --bench hot_path
  echo "== flow table memory"
  step "flow table memory" cargo run --locked --release -q -p ufrag-common --example flow_table_size 1000000
fi
echo "== loopback forwarding (perf loopback)"
step "the release build" cargo build --locked --release -q -p ufrag-relay-mio -p ufrag-relay-afxdp -p ufrag-transceiver -p ufrag-model-servers -p ufrag-perf
step "perf loopback (target/perf/loopback.md)" target/release/ufrag-perf loopback --out target/perf/loopback.md
echo "== WebRTC sessions (perf sessions)"
step "perf sessions (target/perf/sessions.md)" target/release/ufrag-perf sessions --browser-sessions 5 --out target/perf/sessions.md
echo "== the model seam: built-in echo against the WebSocket bridge (perf model)"
step "perf model (target/perf/model.md)" target/release/ufrag-perf model --steps 0 --rounds 6 --cost-rounds 4 --out target/perf/model.md
echo "== live sessions under junk, through relay restarts and beside hostile clients (perf resilience)"
step "perf resilience (target/perf/resilience.md)" target/release/ufrag-perf resilience --out target/perf/resilience.md
echo "== is kernel bypass warranted? side by side on the netns testbed (perf compare; needs root; about 38 minutes: 14 rounds, then 5 rounds of searches)"
step "perf compare (target/perf/compare.md)" target/release/ufrag-perf compare --out target/perf/compare.md
if [ -z "$full" ]; then
  echo "== bench.sh: done in $(( ($(date +%s) - started) / 60 )) min; the verdict (target/perf/compare.md):"
  sed -n '/^## Verdict/{n;n;p;q}' target/perf/compare.md
  exit 0
fi
echo "== the model seam: the largest load one worker holds, built-in echo against the bridge (perf model --steps)"
step "perf model (target/perf/model-largest-load.md)" target/release/ufrag-perf model --rounds 0 --cost-rounds 0 --profile-at 0 --out target/perf/model-largest-load.md
echo "== scaling across workers: relay-mio with 1 and 2 workers (perf compare --workers)"
step "perf compare (target/perf/compare-workers.md)" target/release/ufrag-perf compare --only direct,mio --workers 1,2 --out target/perf/compare-workers.md
echo "== downlink: the transceiver's replies to 1,000 clients (perf compare --direction down)"
step "perf compare (target/perf/compare-downlink.md)" target/release/ufrag-perf compare --direction down --out target/perf/compare-downlink.md
echo "== video-sized datagrams: 1,200 bytes (perf compare --size 1200)"
step "perf compare (target/perf/compare-1200b.md)" target/release/ufrag-perf compare --size 1200 --only direct,nftables,mio,afxdp-native-wakeup,afxdp-native-busy \
  --out target/perf/compare-1200b.md
echo "== the same with 100k flows, for the setups that keep per-flow state (perf compare --flows)"
step "perf compare (target/perf/compare-100k-flows.md)" target/release/ufrag-perf compare --flows 100000 --only direct,nftables,nginx,quilkin,mio,afxdp-native-wakeup \
  --out target/perf/compare-100k-flows.md
echo "== IPv6: the setups that speak it (perf compare --ipv6)"
step "perf compare (target/perf/compare-ipv6.md)" target/release/ufrag-perf compare --ipv6 --only direct,naive,bare,nftables,mio,afxdp-skb-wakeup,afxdp-native-wakeup,afxdp-fast-native \
  --out target/perf/compare-ipv6.md
echo "== the model speaking: both directions, 80 % downlink (perf compare --direction both --downlink-share 0.8)"
step "perf compare (target/perf/compare-model-speaks.md)" target/release/ufrag-perf compare --direction both --downlink-share 0.8 \
  --only direct,nftables,mio,afxdp-skb-wakeup,afxdp-native-wakeup,afxdp-fast-native \
  --out target/perf/compare-model-speaks.md
echo "== latency: sleeping against busy-polling forwarders, one cross-core hop fewer (perf compare --no-steer)"
step "perf compare (target/perf/compare-latency.md)" target/release/ufrag-perf compare --no-steer --rounds 0 \
  --only direct,mio,mio-busy,afxdp-skb-wakeup,afxdp-skb-busy,afxdp-native-wakeup,afxdp-native-busy \
  --out target/perf/compare-latency.md
echo "== the internal leg: bundles and GSO against single frames, with latency at low loads (perf compare --versus)"
step "perf compare (target/perf/compare-internal-leg.md)" target/release/ufrag-perf compare --only naive,mio,mio-bundles,mio-gso --versus mio-gso:mio-bundles \
  --latency-loads 1000,20000 --latency-trial 3s --out target/perf/compare-internal-leg.md
echo "== the internal leg in the transceiver: single frames against bundles both ways (perf model --bundles)"
step "perf model (target/perf/model-bundles.md)" target/release/ufrag-perf model --bundles --steps 0 --cost-rounds 12 --out target/perf/model-bundles.md
echo "== bench.sh --full: done in $(( ($(date +%s) - started) / 60 )) min; the verdict (target/perf/compare.md):"
sed -n '/^## Verdict/{n;n;p;q}' target/perf/compare.md
