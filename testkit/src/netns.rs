//! Running a closure inside a named network namespace (`ip netns add` names, under
//! `/var/run/netns`). Sockets created there stay in that namespace, wherever they are
//! used afterwards, so one benchmark process can hold a generator in the client's
//! namespace and a sink in the transceiver's and share one clock between them.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

/// Runs `f` on a fresh thread that first enters namespace `ns` (`None`: the current one).
pub fn in_netns<T: Send + 'static>(
    ns: Option<&str>,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let Some(ns) = ns else { return Ok(f()) };
    let file = std::fs::File::open(format!("/var/run/netns/{ns}"))?;
    std::thread::spawn(move || -> io::Result<T> {
        // SAFETY: setns on a descriptor we own, affecting only this new thread, which
        // does nothing but run `f` and exit.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(f())
    })
    .join()
    .map_err(|_| io::Error::other("namespace thread panicked"))?
}
