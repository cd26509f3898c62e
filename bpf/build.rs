//! Compiles the toolkit's own XDP program (`bpf/pass.bpf.c`) with the helper the other
//! crates' build scripts use.

// The helper is public for the other crates; here it is only this script's.
#[allow(unreachable_pub)]
#[path = "src/build.rs"]
mod build;

fn main() {
    build::compile_xdp(std::path::Path::new("bpf/pass.bpf.c"));
}
