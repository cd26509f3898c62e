#!/usr/bin/env bash
# Container images of relay-mio, relay-afxdp and the transceiver, built offline from the
# workspace (no registry pull): each is FROM scratch with the release binary, the shared
# libraries it links (found with ldd), glibc's NSS modules for name lookups (a Redis URL
# may name a host), their licence notices and ours (/usr/share/doc/ufrag-relay),
# /etc/passwd and /etc/nsswitch.conf; it runs as uid 65532. Built with
# Debian's buildah, run with Debian's podman. Then one real session goes through them: a
# relay container, a transceiver container (host network, loopback addresses of this
# run's own, the hint keys mounted read-only), and `ufrag-perf session` (a str0m client) on the
# host: POST, ICE, DTLS, ping, echoed audio, DELETE.
#
#   scripts/images.sh             # build the three images and run the session
#   scripts/images.sh --build     # build only
#
# Images: localhost/ufrag-relay/<binary>:<version>. The containers are removed however
# the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-deps.sh

missing=()
for tool in podman buildah runc; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

source scripts/lib/notices.sh
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
echo "== release binaries"
# The README's quick start builds exactly this set (CI runs it next, on this build);
# relay-afxdp on its own, so that its features do not change the set's.
cargo build --locked --release -q -p ufrag-relay-mio -p ufrag-transceiver -p ufrag-model-servers -p ufrag-perf
cargo build --locked --release -q -p ufrag-relay-afxdp

# The system libraries a dynamically linked binary needs at run time, and glibc's NSS.
libraries() {
  ldd "$1" | awk '/=> \// {print $3} /^[ \t]*\/lib/ {print $1}'
  ls /lib/x86_64-linux-gnu/libnss_files.so.2 /lib/x86_64-linux-gnu/libnss_dns.so.2 \
    /lib/x86_64-linux-gnu/libresolv.so.2 2>/dev/null || true
}

for binary in relay-mio relay-afxdp transceiver; do
  image="localhost/ufrag-relay/$binary:$version"
  root="target/images/$binary"
  rm -rf "$root"
  mkdir -p "$root/usr/local/bin" "$root/etc"
  cp "target/release/$binary" "$root/usr/local/bin/"
  libs=$(libraries "target/release/$binary" | sort -u)
  for lib in $libs; do
    cp --parents -L "$lib" "$root/"
  done
  # shellcheck disable=SC2086 # one library a word
  copy_notices "$root/usr/share/doc/ufrag-relay/system-libraries" $libs
  cp LICENSE-MIT LICENSE-APACHE "$root/usr/share/doc/ufrag-relay/"
  printf 'root:x:0:0:root:/:/nonexistent\nnonroot:x:65532:65532:nonroot:/:/nonexistent\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
  printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
  cat >"target/images/$binary.Containerfile" <<EOF
FROM scratch
COPY . /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/$binary"]
EOF
  echo "== image $image"
  buildah bud -q --layers=false -t "$image" -f "target/images/$binary.Containerfile" "$root" >/dev/null
done
podman image prune -f >/dev/null # the images these tags named before
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep ufrag-relay

if [ "${1:-}" = "--build" ]; then
  exit 0
fi

# runc, cgroupfs and explicit limits: scripts/lib/podman.sh says why.
source scripts/lib/podman.sh
run=("${podman_run[@]}")
limits=("${podman_limits[@]}")
tag=$$
net=$((RANDOM % 200 + 20))
relay_ip=127.91.$net.1
xcvr_ip=127.91.$net.2
keys=$(mktemp -d)
cleanup() {
  "${run[@]}" rm -f "ufrag-relay-$tag" "ufrag-xcvr-$tag" >/dev/null 2>&1 || true
  rm -rf "$keys"
}
trap cleanup EXIT
printf '1:%s\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$keys/hint.keys"
chown 65532:65532 "$keys/hint.keys"
chmod 0400 "$keys/hint.keys"
mount=(-v "$keys/hint.keys:/etc/ufrag/hint.keys:ro")

echo "== a session through a relay-mio container to a transceiver container"
"${run[@]}" run -d --name "ufrag-relay-$tag" --network host "${limits[@]}" "${mount[@]}" \
  "localhost/ufrag-relay/relay-mio:$version" \
  --vip "$relay_ip:3478" --internal-addr "$relay_ip:40000" --allow-transceiver-net 127.0.0.0/8 \
  --metrics-addr "$relay_ip:9100" --hint-keys-file /etc/ufrag/hint.keys --workers 1 --cpus 0 \
  --log-format json >/dev/null
"${run[@]}" run -d --name "ufrag-xcvr-$tag" --network host "${limits[@]}" "${mount[@]}" \
  "localhost/ufrag-relay/transceiver:$version" \
  --http-addr "$xcvr_ip:8080" --bind "$xcvr_ip:41000" --advertise "$relay_ip:3478" \
  --allow-relay-net 127.0.0.0/8 --hint-keys-file /etc/ufrag/hint.keys --log-format json >/dev/null
if ! target/release/ufrag-perf session --http "$xcvr_ip:8080" --local 127.91.$net.3; then
  echo "!! the session through the containers failed; their logs:" >&2
  "${run[@]}" logs "ufrag-relay-$tag" >&2 || true
  "${run[@]}" logs "ufrag-xcvr-$tag" >&2 || true
  exit 1
fi
# The transceiver advertised only the relay's VIP: the relay container made the flow.
flows=$(python3 - "$relay_ip" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://{sys.argv[1]}:9100/metrics", timeout=5).read().decode()
print(sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("ufrag_relay_flows_created_total")))
PY
)
if [ "${flows%.*}" -lt 1 ]; then
  echo "!! the relay container made no flow" >&2
  exit 1
fi
ready=$("${run[@]}" logs "ufrag-relay-$tag" 2>&1 | grep -c '"relay-mio ready"' || true)
echo "== through the relay container: $flows flow(s) created, readiness logged as JSON ($ready line)"
