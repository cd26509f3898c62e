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
        Self::start_with(addr, ns, &[])
    }

    /// Like [`RedisServer::start_on`], with more `redis-server` flags.
    pub fn start_with(addr: SocketAddr, ns: Option<&str>, extra: &[&str]) -> RedisServer {
        let dir = private_dir("redis", addr);
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
            .args(extra)
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

    /// Starts with TLS only (no plaintext port) on a free port of `ip`: its certificate
    /// from `pki`, clients must show one `pki`'s CA signed (`tls-auth-clients yes`), and
    /// every command needs `password`. Reach it at [`RedisServer::tls_url`].
    pub fn start_tls(ip: Ipv4Addr, pki: &crate::tls::TestPki, password: &str) -> RedisServer {
        let addr = SocketAddr::from((ip, free_tcp_port(ip)));
        let file = |name: &str| pki.file(name).to_string_lossy().into_owned();
        let tls_port = addr.port().to_string();
        let (cert, key, ca) = (file("server.pem"), file("server.key"), file("ca.pem"));
        Self::start_with(
            addr,
            None,
            &[
                "--port",
                "0",
                "--tls-port",
                &tls_port,
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-auth-clients",
                "yes",
                "--requirepass",
                password,
            ],
        )
    }

    /// Its `rediss://` URL (a server from [`RedisServer::start_tls`]).
    pub fn tls_url(&self) -> String {
        format!("rediss://{}", self.addr)
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
        self.command(&["GET", key])
    }

    /// Runs one command; its reply as text (a bulk or simple string, or an integer), or
    /// `None` for a nil or error reply, or when unreachable.
    pub fn command(&self, args: &[&str]) -> Option<String> {
        resp_command(self.connect()?, args)
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

/// A fresh directory of this process for the server `kind` on `addr`, its own even when
/// servers of parallel tests share an address (each in its testbed's namespace): one
/// test's cleanup must never remove the directory another's server is starting in.
fn private_dir(kind: &str, addr: SocketAddr) -> std::path::PathBuf {
    static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "{kind}-{}-{}-{}-{n}",
        std::process::id(),
        addr.ip(),
        addr.port()
    ));
    std::fs::create_dir_all(&dir).expect("a directory for redis");
    dir
}

/// A command in RESP: an array of bulk strings.
fn resp_request(args: &[&str]) -> Vec<u8> {
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    request.into_bytes()
}

/// One command over a raw RESP connection: the reply as text (bulk or simple string,
/// integer); `None` for nil, an error or a broken connection.
fn resp_command(mut s: TcpStream, args: &[&str]) -> Option<String> {
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(&resp_request(args)).ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
        let text = std::str::from_utf8(&reply).ok()?;
        let Some((head, rest)) = text.split_once("\r\n") else {
            continue;
        };
        match head.split_at(1) {
            ("+" | ":", value) => return Some(value.to_string()),
            ("-", _) => return None,
            ("$", len) => {
                let len = usize::try_from(len.parse::<i64>().ok()?).ok()?;
                if rest.len() >= len {
                    return Some(rest[..len].to_string());
                }
            }
            _ => return None,
        }
    }
}

/// A private Redis Cluster for one test: `masters` `redis-server`s in cluster mode on
/// free ports of loopback address `ip`, their 16384 slots shared out by `redis-cli
/// --cluster create` (no replicas); the servers go with it.
#[derive(Debug)]
pub struct RedisCluster {
    /// Its nodes, each a master of a third (or so) of the slots.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, joins them, and waits until every node says `cluster_state:ok`.
    pub fn start(ip: Ipv4Addr, masters: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..masters)
            .map(|i| {
                // Each node's cluster bus listens 10000 ports up.
                let port = std::iter::repeat_with(|| free_tcp_port(ip))
                    .find(|&p| p < 55_000)
                    .expect("a free port");
                let addr = SocketAddr::from((ip, port));
                let config = format!("nodes-{}-{port}-{i}.conf", std::process::id());
                // Nodes on a loopback address other than 127.0.0.1 must say which: their
                // bus connections leave from 127.0.0.1, and a peer would call back there.
                let ip_text = ip.to_string();
                RedisServer::start_with(
                    addr,
                    None,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &config,
                        "--cluster-announce-ip",
                        &ip_text,
                    ],
                )
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| n.addr.to_string()).collect();
        // Bounded: redis-cli waits for the nodes to join without end.
        let created = Command::new("timeout")
            .args(["30", "redis-cli", "--cluster"])
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed (with redis-server)");
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let deadline = Instant::now() + WAIT;
        while !nodes.iter().all(|n| {
            n.command(&["CLUSTER", "INFO"])
                .is_some_and(|info| info.contains("cluster_state:ok"))
        }) {
            assert!(Instant::now() < deadline, "the cluster never became ok");
            std::thread::sleep(Duration::from_millis(50));
        }
        RedisCluster { nodes }
    }

    /// The nodes' URLs, for `--redis-cluster-node`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Keys held by each node (`DBSIZE`).
    pub fn keys_per_node(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| {
                n.command(&["DBSIZE"])
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            })
            .collect()
    }

    /// `GET key` from whichever node holds it.
    pub fn get(&self, key: &str) -> Option<String> {
        self.nodes.iter().find_map(|n| n.get(key))
    }
}

/// A private Redis Sentinel for one test, on a free port of loopback address `ip`,
/// watching the master named `master` at `master_addr` alone (quorum 1), quick to
/// declare it down (500 ms); killed, and its directory removed, on drop.
#[derive(Debug)]
pub struct RedisSentinel {
    child: Option<OwnedChild>,
    /// Where it listens.
    pub addr: SocketAddr,
    dir: std::path::PathBuf,
}

impl RedisSentinel {
    /// Starts it and waits until it answers.
    pub fn start(ip: Ipv4Addr, master: &str, master_addr: SocketAddr) -> RedisSentinel {
        let addr = SocketAddr::from((ip, free_tcp_port(ip)));
        let dir = private_dir("redis-sentinel", addr);
        // The sentinel rewrites its file as it learns: it must be its own, and writable.
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "bind {ip}\nport {}\nprotected-mode no\ndir {}\n\
                 sentinel monitor {master} {} {} 1\n\
                 sentinel down-after-milliseconds {master} 500\n\
                 sentinel failover-timeout {master} 3000\n",
                addr.port(),
                dir.display(),
                master_addr.ip(),
                master_addr.port()
            ),
        )
        .expect("the sentinel's config");
        let mut command = Command::new("redis-server");
        command
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = OwnedChild::spawn(&mut command)
            .expect("redis-server must be installed (scripts/test.sh installs it)");
        let sentinel = RedisSentinel {
            child: Some(child),
            addr,
            dir,
        };
        let deadline = Instant::now() + WAIT;
        while sentinel.master_port(master).is_none() {
            assert!(
                Instant::now() < deadline,
                "the sentinel did not start on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        sentinel
    }

    /// Its URL, for `--redis-sentinel`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The port of the server it names as `master` now.
    pub fn master_port(&self, master: &str) -> Option<u16> {
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(&resp_request(&[
            "SENTINEL",
            "get-master-addr-by-name",
            master,
        ]))
        .ok()?;
        // *2 $<n> ip $<n> port: the port is the last line.
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.strip_prefix("*2\r\n")?
            .lines()
            .nth(3)
            .and_then(|port| port.trim().parse().ok())
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        self.child.take(); // killed before its directory goes
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
