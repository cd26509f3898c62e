//! Running a closure inside a named network namespace (`ip netns add` names, under
//! `/var/run/netns`). Sockets created there stay in that namespace, wherever they are
//! used afterwards, so one benchmark process can hold a generator in the client's
//! namespace and a sink in the transceiver's and share one clock between them.
use std::io;

use nix::sched::{CloneFlags, setns};

/// Spawns a thread named `name` that enters namespace `ns` (`None`: stays in the current
/// one) and runs `f`; unlike [`in_netns`] it does not wait for it. The thread fails with
/// the `setns` error if the namespace cannot be entered.
pub fn spawn_in<T: Send + 'static>(
    ns: Option<&str>,
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<io::Result<T>>> {
    let file = ns
        .map(|ns| std::fs::File::open(format!("/var/run/netns/{ns}")))
        .transpose()?;
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || -> io::Result<T> {
            if let Some(file) = file {
                setns(&file, CloneFlags::CLONE_NEWNET)?;
            }
            Ok(f())
        })
}

/// Runs `f` on a fresh thread that first enters namespace `ns` (`None`: the current one).
pub fn in_netns<T: Send + 'static>(
    ns: Option<&str>,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let Some(ns) = ns else { return Ok(f()) };
    let file = std::fs::File::open(format!("/var/run/netns/{ns}"))?;
    std::thread::spawn(move || -> io::Result<T> {
        // Only this new thread enters the namespace; it runs `f` and exits.
        setns(&file, CloneFlags::CLONE_NEWNET)?;
        Ok(f())
    })
    .join()
    .map_err(|_| io::Error::other("namespace thread panicked"))?
}

/// `program` to run inside namespace `ns` (`ip netns exec`, which also mounts the
/// namespace's own /sys), or in this process's namespace when `None`.
pub fn command_in(ns: Option<&str>, program: &str) -> std::process::Command {
    match ns {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => std::process::Command::new(program),
    }
}
