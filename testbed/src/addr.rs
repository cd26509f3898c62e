//! Loopback addresses and ports for one test, so that tests run in parallel and two runs
//! (or two test binaries) never collide.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A fresh loopback address: 127.a.b.c with a and b from the process id and c counted
/// within the process.
pub fn unique_ip() -> Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    Ipv4Addr::new(
        127,
        10 + (pid % 200) as u8,
        ((pid / 200) % 250) as u8 + 1,
        (n % 250) as u8 + 1,
    )
}

/// A free TCP port on `ip` (bind 0, read, release).
pub fn free_tcp_port(ip: Ipv4Addr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free TCP port on a loopback address")
}

/// A TCP connection to `to` from local address `source` (a loopback address other than
/// 127.0.0.1 plays another client), made within `wait`.
pub fn tcp_from(source: IpAddr, to: SocketAddr, wait: Duration) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(to),
        socket2::Type::STREAM,
        None,
    )?;
    socket.bind(&SocketAddr::new(source, 0).into())?;
    socket.connect_timeout(&to.into(), wait)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn addresses_are_loopback_and_distinct() {
        let a = super::unique_ip();
        let b = super::unique_ip();
        assert!(a.is_loopback() && b.is_loopback());
        assert_ne!(a, b);
    }
}
