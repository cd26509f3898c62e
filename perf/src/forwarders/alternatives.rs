//! The forwarders a user would pick instead of ours, run in the relay's namespace of the
//! testbed: nftables DNAT+SNAT (the kernel's own forwarding), the nginx stream UDP
//! proxy (Debian's nginx with libnginx-mod-stream) and Quilkin (the Rust UDP proxy, from
//! crates.io). Each is torn down on drop.

use std::io::{self, Write as _};
use std::net::{SocketAddr, SocketAddrV4};
use std::process::Stdio;

use ufrag_testbed::OwnedChild;

use crate::bench::shell::{in_ns, run};

/// nftables DNAT + SNAT in the relay's namespace: `vip` → `to`, replies' source the VIP.
#[derive(Debug)]
pub struct Nftables {
    ns: Option<String>,
    ipv6: bool,
}

const NFT_TABLE: &str = "perf_relay";

impl Nftables {
    /// Turns on forwarding (one-armed: no ICMP redirects), keeps unreplied UDP flows for
    /// 15 minutes (as long as the relays keep theirs in `perf compare`, instead of 30 s),
    /// and loads the NAT table, for IPv4 or IPv6 by the addresses' family.
    pub fn start(ns: Option<&str>, vip: SocketAddr, to: SocketAddr) -> io::Result<Self> {
        let ipv6 = vip.is_ipv6();
        let forwarding = if ipv6 {
            "sysctl -qw net.ipv6.conf.all.forwarding=1"
        } else {
            "sysctl -qw net.ipv4.ip_forward=1 && \
             for f in /proc/sys/net/ipv4/conf/*/send_redirects; do echo 0 > $f; done"
        };
        run(
            in_ns(
                ns,
                "sh",
                &[
                    "-c",
                    &format!(
                        "{forwarding} && modprobe -q nf_conntrack 2>/dev/null; \
                         sysctl -qw net.netfilter.nf_conntrack_udp_timeout=900"
                    ),
                ],
            ),
            "forwarding on",
        )?;
        let (family, ip) = if ipv6 { ("ip6", "ip6") } else { ("ip", "ip") };
        // `to` as nft writes a NAT target: [addr]:port for IPv6.
        let target = match to {
            SocketAddr::V4(t) => t.to_string(),
            SocketAddr::V6(t) => format!("[{}]:{}", t.ip(), t.port()),
        };
        let rules = format!(
            "table {family} {NFT_TABLE} {{\n\
               chain pre {{ type nat hook prerouting priority dstnat; \
                 {ip} daddr {} udp dport {} dnat to {target}; }}\n\
               chain post {{ type nat hook postrouting priority srcnat; \
                 {ip} daddr {} udp dport {} snat to {}; }}\n\
             }}\n",
            vip.ip(),
            vip.port(),
            to.ip(),
            to.port(),
            vip.ip()
        );
        let mut nft = in_ns(ns, "nft", &["-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        nft.stdin
            .take()
            .expect("piped stdin")
            .write_all(rules.as_bytes())?;
        let out = nft.wait_with_output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "nft: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(Nftables {
            ns: ns.map(str::to_string),
            ipv6,
        })
    }
}

impl Drop for Nftables {
    fn drop(&mut self) {
        let (family, forwarding) = if self.ipv6 {
            ("ip6", "net.ipv6.conf.all.forwarding=0")
        } else {
            ("ip", "net.ipv4.ip_forward=0")
        };
        let _ = run(
            in_ns(
                self.ns.as_deref(),
                "nft",
                &["delete", "table", family, NFT_TABLE],
            ),
            "nft delete",
        );
        let _ = run(
            in_ns(self.ns.as_deref(), "sysctl", &["-qw", forwarding]),
            "forwarding off",
        );
    }
}

/// The nginx stream proxy, one worker pinned to a core, UDP sessions reused (its
/// default, and its fastest mode).
#[derive(Debug)]
pub struct Nginx {
    _child: OwnedChild,
    dir: std::path::PathBuf,
}

/// Where Debian's libnginx-mod-stream puts the module.
const STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

impl Nginx {
    /// Proxies UDP from `listen` to `to` in namespace `ns`, pinned to `cpu`, with room
    /// for `flows` client sessions (each holds an upstream socket).
    pub fn start(
        ns: Option<&str>,
        listen: SocketAddrV4,
        to: SocketAddrV4,
        cpu: usize,
        flows: u32,
    ) -> io::Result<Self> {
        let connections = 2 * flows + 1024;
        let dir = std::env::temp_dir().join(format!("perf-nginx-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "load_module {STREAM_MODULE};\n\
                 daemon off;\nmaster_process off;\nworker_processes 1;\n\
                 worker_rlimit_nofile {connections};\n\
                 pid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
                 events {{ worker_connections {connections}; }}\n\
                 stream {{ server {{ listen {listen} udp reuseport; proxy_pass {to}; proxy_timeout 15m; }} }}\n",
                dir = dir.display()
            ),
        )?;
        let mut command = in_ns(
            ns,
            "taskset",
            &[
                "-c",
                &cpu.to_string(),
                "nginx",
                "-c",
                conf.to_str().expect("utf-8 path"),
                "-p",
            ],
        );
        command
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = OwnedChild::spawn(&mut command)?;
        // Ready when the UDP socket is bound (nginx has no readiness endpoint of its own).
        wait_bound(ns, &listen.to_string(), "nginx", &mut child)?;
        Ok(Nginx { _child: child, dir })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits up to 10 s until `ready()` says yes (checked every 50 ms); then an error that
/// says what `what` did not become, with `child`'s exit report.
fn wait_for(
    what: &str,
    child: &mut OwnedChild,
    mut ready: impl FnMut() -> io::Result<bool>,
) -> io::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ready()? {
        if std::time::Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "{what} (after 10 s): {:?}",
                child.exit_report()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}

/// Waits until `ss -uln` in `ns` lists a UDP socket on `local` (as ss prints it, e.g.
/// `10.77.0.2:4002` or `*:4003`), or fails with `child`'s exit report.
fn wait_bound(ns: Option<&str>, local: &str, what: &str, child: &mut OwnedChild) -> io::Result<()> {
    wait_for(&format!("{what} did not bind {local}"), child, || {
        let ss = in_ns(ns, "ss", &["-Huln"]).output()?;
        Ok(String::from_utf8_lossy(&ss.stdout)
            .lines()
            .any(|l| l.split_whitespace().nth(3) == Some(local)))
    })
}

/// Quilkin 0.10 (`cargo install quilkin`, found on `PATH`), one UDP worker pinned to a
/// core, forwarding everything on its port to one static endpoint (no filters). It binds
/// the port on every address (`[::]`, dual stack); its admin server gets a port of its
/// own on loopback. Its release builds drop datagrams from loopback sources, which is
/// why the testbed's clients use namespace addresses.
#[derive(Debug)]
pub struct Quilkin {
    _child: OwnedChild,
    ns: Option<String>,
}

/// Quilkin's admin (metrics, readiness) address in the relay's namespace.
const QUILKIN_ADMIN: &str = "127.0.0.1:8010";

impl Quilkin {
    /// Proxies UDP from `listen`'s port to `to` in namespace `ns`, pinned to `cpu`; with
    /// `xdp`, in its XDP mode on that interface (its AF_XDP sockets on every queue; it
    /// needs the namespace's local port range to end at 60999).
    pub fn start(
        ns: Option<&str>,
        listen: SocketAddrV4,
        to: SocketAddrV4,
        cpu: usize,
        xdp: Option<&str>,
    ) -> io::Result<Self> {
        let port = listen.port().to_string();
        let endpoint = to.to_string();
        let mut xdp_args = vec![];
        if let Some(interface) = xdp {
            run(
                in_ns(
                    ns,
                    "sysctl",
                    &["-qw", "net.ipv4.ip_local_port_range=32768 60999"],
                ),
                "local port range",
            )?;
            xdp_args = vec![
                "--service.udp.xdp".to_string(),
                "--service.udp.xdp.network-interface".to_string(),
                interface.to_string(),
            ];
        }
        let mut command = in_ns(
            ns,
            "taskset",
            &[
                "-c",
                &cpu.to_string(),
                "quilkin",
                "--service.udp",
                "--service.udp.port",
                &port,
                "--service.udp.workers",
                "1",
                "--provider.static.endpoints",
                &endpoint,
                "--admin.address",
                QUILKIN_ADMIN,
            ],
        );
        command
            .args(&xdp_args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = OwnedChild::spawn(&mut command)?;
        if xdp.is_some() {
            // In XDP mode no socket is bound: ready when its admin says so.
            wait_ready_http(ns, QUILKIN_ADMIN, "/ready", "quilkin", &mut child)?;
        } else {
            wait_bound(ns, &format!("*:{port}"), "quilkin", &mut child)?;
        }
        Ok(Quilkin {
            _child: child,
            ns: ns.map(str::to_string),
        })
    }

    /// The drops Quilkin counted (`quilkin_packets_dropped_total`), by reason.
    pub fn drops(&self) -> std::collections::BTreeMap<String, f64> {
        let admin = QUILKIN_ADMIN.parse().expect("an address");
        let text = ufrag_testbed::http::get(self.ns.as_deref(), admin, "/metrics")
            .map_or(String::new(), |r| r.1);
        ufrag_testbed::http::metric_by_label(&text, "quilkin_packets_dropped_total", "reason")
    }
}

/// Waits until `GET path` on `addr` in `ns` answers 200, or fails with `child`'s exit
/// report.
fn wait_ready_http(
    ns: Option<&str>,
    addr: &str,
    path: &str,
    what: &str,
    child: &mut OwnedChild,
) -> io::Result<()> {
    let addr = addr.parse().expect("an address");
    wait_for(&format!("{what} not ready at {addr}{path}"), child, || {
        Ok(ufrag_testbed::http::get(ns, addr, path).is_some_and(|(status, _)| status == 200))
    })
}
