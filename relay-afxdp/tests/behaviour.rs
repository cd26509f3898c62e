//! relay-afxdp against the relay behaviour suite (`ufrag_testkit::relay_suite`), in the netns
//! testbed (root), attached in generic (skb) and in native XDP mode, and in native mode
//! on the `xdp` crate's AF_XDP layer.

use std::process::ExitCode;

use ufrag_testkit::relay_suite::{Backend, XdpMode, run};

fn main() -> ExitCode {
    let binary = env!("CARGO_BIN_EXE_relay-afxdp");
    run(&[
        Backend::afxdp(binary, XdpMode::Skb),
        Backend::afxdp(binary, XdpMode::Native),
        // The same worker on the `xdp` crate's AF_XDP layer (`--xsk-layer xdp-crate`),
        // kept beside ours to compare: it must pass the same suite.
        Backend::afxdp(binary, XdpMode::Native)
            .with_flags("native-xdp-crate", &["--xsk-layer", "xdp-crate"]),
    ])
}
