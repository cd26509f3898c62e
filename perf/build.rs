//! Compiles the load tools' XDP programs in `bpf/` with clang.

fn main() {
    ufrag_bpf::build::compile_xdp(std::path::Path::new("bpf/tools.bpf.c"));
}
