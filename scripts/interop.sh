#!/usr/bin/env bash
# Interop check by hand (not part of scripts/test.sh yet; issue 10 makes it a test):
# WebRTC clients we did not write — headless Chromium (Debian) and aiortc (PyPI) — each
# send Opus audio and ping over the `events` channel every 50 ms for 5 s, through
# relay-mio to the transceiver, on loopback. Prints pongs, RTT and echoed audio, then the
# relay's received/forwarded counters. Installs chromium and an aiortc venv when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
venv=target/interop-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q aiortc
fi
cargo build --locked -q -p relay-mio -p transceiver
UFRAG_RELAY_HINT_KEYS=1:$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export UFRAG_RELAY_HINT_KEYS
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
target/debug/relay-mio --vip 127.0.0.1:13478 --internal-addr 127.0.0.1:40100 \
  --allow-transceiver-net 127.0.0.0/8 --workers 1 --cpus 0 --metrics-addr 127.0.0.1:19100 \
  2>"$work/relay.log" & pids+=($!)
target/debug/transceiver --http-addr 127.0.0.1:18080 --bind 127.0.0.1:41100 \
  --advertise 127.0.0.1:13478 --allow-relay-net 127.0.0.0/8 2>"$work/transceiver.log" & pids+=($!)
for _ in $(seq 50); do curl -sf 127.0.0.1:18080/readyz >/dev/null && break; sleep 0.1; done

echo "== aiortc $("$venv/bin/python" -c 'import aiortc; print(aiortc.__version__)')"
timeout 60 "$venv/bin/python" scripts/interop/aiortc_echo.py http://127.0.0.1:18080/v1/sessions 5

echo "== $(chromium --version)"
timeout 60 python3 scripts/interop/collect_result.py > "$work/result.json" & server=$!
sleep 0.5
timeout 45 chromium --headless=new --no-sandbox --disable-gpu --use-fake-ui-for-media-stream \
  --use-fake-device-for-media-stream --user-data-dir="$work/profile" \
  http://127.0.0.1:18999/chromium_echo.html >"$work/chromium.log" 2>&1 & pids+=($!)
wait "$server"
cat "$work/result.json"
grep -q '"pongs":100' "$work/result.json"

echo "== relay counters (received = forwarded + dropped)"
curl -s 127.0.0.1:19100/metrics | grep -E '^ufrag_relay_(received_packets|packets|flows_created)_total|drops_total.* [1-9]'
