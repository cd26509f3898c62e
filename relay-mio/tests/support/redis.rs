//! A private `redis-server` for tests: a unique loopback address, a free port, no
//! persistence; killed (and its directory removed) on drop.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);

fn free_tcp_port(ip: std::net::Ipv4Addr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A private `redis-server` on a free port of a unique loopback address; killed on drop.
pub struct RedisServer {
    pub child: Child,
    pub addr: SocketAddr,
    dir: std::path::PathBuf,
}

impl RedisServer {
    /// Starts on a free port of `ip` (a loopback address unique to the caller).
    pub fn start_at(ip: std::net::Ipv4Addr) -> RedisServer {
        let port = free_tcp_port(ip);
        Self::start_on(SocketAddr::from((ip, port)))
    }

    pub fn start_on(addr: SocketAddr) -> RedisServer {
        let dir =
            std::env::temp_dir().join(format!("redis-{}-{}", std::process::id(), addr.port()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args(["--bind", &addr.ip().to_string(), "--port", &addr.port().to_string(), "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed for the route-cache tests (scripts/test.sh installs it)");
        let deadline = Instant::now() + WAIT;
        while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisServer { child, addr, dir }
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// `GET key` over a raw RESP connection (no client library in the harness).
    pub fn get(&self, key: &str) -> Option<String> {
        resp_get(
            TcpStream::connect_timeout(&self.addr, Duration::from_millis(500)).ok()?,
            key,
        )
    }

    /// Waits (bounded) until the relay has recorded the flow of `client` on `vip`.
    pub fn wait_for_flow(&self, client: SocketAddr, vip: SocketAddr) -> String {
        wait_for_flow(|key| self.get(key), client, vip)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `GET key` over a raw RESP connection (no client library in the harness).
pub fn resp_get(mut s: TcpStream, key: &str) -> Option<String> {
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).ok()?;
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let (len, rest) = text.strip_prefix('$')?.split_once("\r\n")?;
    let len: i64 = len.parse().ok()?;
    (len >= 0).then(|| rest[..len as usize].to_string())
}

/// Waits (bounded) until `get` finds the relay's record of `client` on `vip`.
pub fn wait_for_flow(
    get: impl Fn(&str) -> Option<String>,
    client: SocketAddr,
    vip: SocketAddr,
) -> String {
    let key = format!("ufrag-relay:flow:{client}|{vip}");
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = get(&key) {
            return v;
        }
        assert!(Instant::now() < deadline, "{key} never appeared in redis");
        std::thread::sleep(Duration::from_millis(20));
    }
}
