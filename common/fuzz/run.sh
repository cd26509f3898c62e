#!/usr/bin/env bash
# Builds every fuzz target (common/fuzz: the relay's parsers, bundles, RFC 4571 splitting, flow
# table and per-datagram entry; transceiver/fuzz: the signaling input path, session
# routing and the model protocol's messages) and runs each for SECONDS (default 15) on a
# scratch copy of its committed seed corpus, so the committed corpus never changes under
# CI. libFuzzer runs one thread, so the targets run as many at once as there are CPUs:
# each still has a core for its SECONDS.
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
dirs=(common/fuzz transceiver/fuzz)
targets=()
for dir in "${dirs[@]}"; do
  (cd "$root/$dir" && cargo fuzz build -O)
  for target in $(cd "$root/$dir" && cargo fuzz list); do targets+=("$dir/$target"); done
done

# fuzz_one DIR/TARGET: runs one target on its scratch corpus; its log and exit status
# land in the scratch directory under the target's name.
fuzz_one() {
  local dir=${1%/*} target=${1##*/}
  local at="$scratch/${dir//\//-}-$target"
  cp -r "$root/$dir/corpus/$target" "$at.corpus"
  local status=0
  (cd "$root/$dir" && cargo fuzz run -O "$target" "$at.corpus" -- -max_total_time="$seconds") \
    >"$at.log" 2>&1 || status=$?
  echo "$status" >"$at.status"
}

at_once=$(nproc)
echo "fuzz: ${#targets[@]} targets for ${seconds}s each, $at_once at once"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$at_once" ]; then
    wait -n || true # a target's own status is in its file
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait

failed=0
for t in "${targets[@]}"; do
  dir=${t%/*} target=${t##*/}
  at="$scratch/${dir//\//-}-$target"
  if [ "$(cat "$at.status" 2>/dev/null || echo missing)" != 0 ]; then
    tail -n 40 "$at.log" >&2
    echo "fuzz: $t failed; the input is in $dir/artifacts/$target" >&2
    failed=1
  else
    echo "fuzz: $t for ${seconds}s: $(grep -E '^Done' "$at.log")"
  fi
done
exit "$failed"
