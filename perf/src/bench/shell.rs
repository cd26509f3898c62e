//! Running the system tools the suite drives (`ip`, `nft`, `ethtool`, `sh`), inside a
//! network namespace or in this process's own, with the tool's stderr as the error.

use std::io;
use std::process::Command;

/// Runs `command`; its stderr becomes the error when it fails.
pub fn run(mut command: Command, what: &str) -> io::Result<()> {
    let out = command.output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// `program args…` inside namespace `ns` (`ip netns exec`, which also mounts the
/// namespace's own /sys), or in this process's namespace (a lab's relay host).
pub fn in_ns(ns: Option<&str>, program: &str, args: &[&str]) -> Command {
    let mut c = ufrag_testbed::netns::command_in(ns, program);
    // A deployment's config and secrets, and the lab agent's token, are not the tools'.
    for name in ufrag_testbed::launch::DEPLOYMENT_ENV {
        c.env_remove(name);
    }
    c.args(args);
    c
}
