//! relay-mio against the relay behaviour suite (`ufrag_testkit::relay_suite`): on loopback, and
//! in the netns testbed (root).

use std::process::ExitCode;

use ufrag_testkit::relay_suite::{Backend, Place, run};

fn main() -> ExitCode {
    let binary = env!("CARGO_BIN_EXE_relay-mio");
    run(&[
        Backend::mio(binary, Place::Loopback),
        Backend::mio(binary, Place::Testbed),
    ])
}
