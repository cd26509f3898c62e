//! A private `redis-server` for one test: on a given address, on loopback or inside a
//! namespace of the testbed, without persistence; killed (and its directory removed)
//! on drop. Read with a raw RESP `GET`, so the kit needs no Redis client library.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::addr::free_tcp_port;
use crate::child::OwnedChild;
use crate::netns::in_netns;

/// How long a start or a wait may take before the test fails.
const WAIT: Duration = Duration::from_secs(10);

/// A running private `redis-server`.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<OwnedChild>,
    /// Where it listens.
    pub addr: SocketAddr,
    ns: Option<String>,
    dir: std::path::PathBuf,
}

impl RedisServer {
    /// Starts on a free port of loopback address `ip`.
    pub fn start_at(ip: Ipv4Addr) -> RedisServer {
        Self::start_on(SocketAddr::from((ip, free_tcp_port(ip))), None)
    }

    /// Starts on `addr`, inside namespace `ns` when given; waits until it answers.
    pub fn start_on(addr: SocketAddr, ns: Option<&str>) -> RedisServer {
        let dir = std::env::temp_dir().join(format!(
            "redis-{}-{}-{}",
            std::process::id(),
            addr.ip(),
            addr.port()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for redis");
        let mut command = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "redis-server"]);
                c
            }
            None => Command::new("redis-server"),
        };
        command
            .args(["--bind", &addr.ip().to_string()])
            .args(["--port", &addr.port().to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = OwnedChild::spawn(&mut command)
            .expect("redis-server must be installed (scripts/test.sh installs it)");
        let server = RedisServer {
            child: Some(child),
            addr,
            ns: ns.map(str::to_string),
            dir,
        };
        let deadline = Instant::now() + WAIT;
        while server.connect().is_none() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn connect(&self) -> Option<TcpStream> {
        let addr = self.addr;
        in_netns(self.ns.as_deref(), move || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200))
        })
        .ok()?
        .ok()
    }

    /// Its URL, for `--redis-url`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// `GET key`; `None` when absent or unreachable.
    pub fn get(&self, key: &str) -> Option<String> {
        resp_get(self.connect()?, key)
    }

    /// Waits (bounded) until the relay has recorded the flow of `client` on `vip`, and
    /// returns the recorded route.
    pub fn wait_for_flow(&self, client: SocketAddr, vip: SocketAddr) -> String {
        let key = format!("ufrag-relay:flow:{client}|{vip}");
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(v) = self.get(&key) {
                return v;
            }
            assert!(Instant::now() < deadline, "{key} never appeared in redis");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills it now (the relay sees Redis die); `start_on` the same address revives it.
    pub fn kill(&mut self) {
        self.child.take();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `GET key` over a raw RESP connection.
fn resp_get(mut s: TcpStream, key: &str) -> Option<String> {
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).ok()?;
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let (len, rest) = text.strip_prefix('$')?.split_once("\r\n")?;
    let len: usize = usize::try_from(len.parse::<i64>().ok()?).ok()?;
    rest.get(..len).map(str::to_string)
}
