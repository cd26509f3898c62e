#!/usr/bin/env bash
# What the workspace's build needs beyond the Rust toolchain and gcc: libopus (the
# transceiver decodes and encodes Opus for backends that take PCM) and pkg-config to
# find it, and clang with libbpf's headers (relay-afxdp's XDP programs are C, compiled
# with BTF at build time). Installs them from Debian when missing; every script that
# builds runs this.
set -euo pipefail
if ! command -v clang >/dev/null || [ ! -e /usr/include/bpf/bpf_helpers.h ]; then
  echo "== installing clang and libbpf-dev (the XDP programs)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    clang libbpf-dev linux-libc-dev >/dev/null
fi
if ! command -v pkg-config >/dev/null || ! pkg-config --exists opus; then
  echo "== installing libopus-dev and pkg-config (the transceiver's PCM audio)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    libopus-dev pkg-config >/dev/null
fi
