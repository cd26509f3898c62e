#!/usr/bin/env bash
# The main job, until the relays land: the hot-path benchmarks of `common`.
#   1. instruction counts (callgrind via iai-callgrind): repeatable, what CI will gate on;
#   2. wall-clock ns/op (criterion): for the perf lab, noisy on a shared machine;
#   3. flow-table memory per flow and for 1M flows.
# Installs valgrind and iai-callgrind-runner when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null; then
  apt-get update -qq && apt-get install -y -qq valgrind
fi
runner_version=0.16.1 # must equal the iai-callgrind version in Cargo.lock
if [ "$(iai-callgrind-runner --version 2>/dev/null | awk '{print $2}')" != "$runner_version" ]; then
  cargo install --locked iai-callgrind-runner --version "$runner_version"
fi

echo "== instruction counts (iai-callgrind)"
cargo bench --locked -p ufrag-common --bench hot_path_instructions
echo "== wall clock (criterion)"
cargo bench --locked -p ufrag-common --bench hot_path
echo "== flow table memory"
cargo run --locked --release -q -p ufrag-common --example flow_table_size 1000000
