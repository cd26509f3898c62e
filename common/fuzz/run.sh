#!/usr/bin/env bash
# Builds every fuzz target (common/fuzz: the relay's parsers, bundles, RFC 4571 splitting, flow
# table and per-datagram entry; transceiver/fuzz: the signaling input path, session
# routing and the model protocol's messages) and runs each for SECONDS (default 15) on a scratch copy of its committed
# seed corpus, so the committed corpus never
# changes under CI.
#
# cargo-fuzz needs -Z flags (sanitizers); RUSTC_BOOTSTRAP=1 lets the stable toolchain
# accept them. A crash leaves its input in <crate>/fuzz/artifacts/<target>/ and fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-15}
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz --version 0.13.2
export RUSTC_BOOTSTRAP=1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for dir in common/fuzz transceiver/fuzz; do
  cd "$root/$dir"
  cargo fuzz build -O
  for target in $(cargo fuzz list); do
    cp -r "corpus/$target" "$scratch/$target"
    echo "fuzz: $dir/$target for ${seconds}s"
    if ! cargo fuzz run -O "$target" "$scratch/$target" -- -max_total_time="$seconds" \
        >"$scratch/$target.log" 2>&1; then
      tail -n 40 "$scratch/$target.log" >&2
      echo "fuzz: $target failed; the input is in $dir/artifacts/$target" >&2
      exit 1
    fi
    grep -E '^Done' "$scratch/$target.log"
  done
done
