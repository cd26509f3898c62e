//! A long run stopped by hand or by a CI timeout deletes its testbed first: no destructor
//! runs on a signal, so a handler thread does it.

use std::process::Command;

/// On SIGINT, SIGTERM or SIGHUP, deletes `namespaces` (and with them every veth, XDP
/// program and nftables rule in them), then exits with 128 + the signal. The relays and
/// tools the run started die with it (`PR_SET_PDEATHSIG`).
pub fn delete_on_interrupt(namespaces: &[String]) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let namespaces = namespaces.to_vec();
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("WARNING: no signal handler ({e}): an interrupted run leaves its testbed");
            return;
        }
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            eprintln!("signal {signal}: deleting the testbed's namespaces, then exiting");
            for ns in namespaces.iter().rev() {
                let _ = Command::new("ip").args(["netns", "del", ns]).status();
            }
            std::process::exit(128 + signal);
        }
    });
}
