//! Compiles the XDP programs in `bpf/` (steering and the fast path) with clang.

fn main() {
    ufrag_bpf::build::compile_xdp(std::path::Path::new("bpf/relay.bpf.c"));
}
