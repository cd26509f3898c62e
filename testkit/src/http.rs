//! The one HTTP client of the tests and tools: a bounded HTTP/1.0 GET (from inside a
//! namespace when asked), and a wait until an endpoint answers 200.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::netns::in_netns;

/// `GET path` from `addr`, inside namespace `ns` when given: `(status, body)`, or `None`
/// when nothing answers within a few hundred milliseconds.
pub fn get(ns: Option<&str>, addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = in_netns(ns, move || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(300))
    })
    .ok()?
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Waits until `GET /readyz` on `addr` answers 200, at most `limit`; panics naming
/// `what` otherwise, or as soon as `exited` reports why the process is gone.
pub fn wait_ready(
    ns: Option<&str>,
    addr: SocketAddr,
    what: &str,
    limit: Duration,
    mut exited: impl FnMut() -> Option<String>,
) {
    let deadline = Instant::now() + limit;
    while get(ns, addr, "/readyz").map(|(status, _)| status) != Some(200) {
        if let Some(why) = exited() {
            panic!("{what} exited before it was ready: {why}");
        }
        assert!(
            Instant::now() < deadline,
            "{what} was not ready on {addr} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
