//! relay-afxdp against the relay behaviour suite (`testkit::relay_suite`), in the netns
//! testbed (root), attached in generic (skb) and in native XDP mode.

use std::process::ExitCode;

use testkit::relay_suite::{Backend, XdpMode, run};

fn main() -> ExitCode {
    let binary = env!("CARGO_BIN_EXE_relay-afxdp");
    run(&[
        Backend::afxdp(binary, XdpMode::Skb),
        Backend::afxdp(binary, XdpMode::Native),
    ])
}
