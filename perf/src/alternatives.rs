//! The forwarders a user would pick instead of ours, run in the relay's namespace of the
//! testbed: nftables DNAT+SNAT (the kernel's own forwarding) and the nginx stream UDP
//! proxy (Debian's nginx with libnginx-mod-stream). Each is torn down on drop.

use std::io::{self, Write as _};
use std::net::SocketAddrV4;
use std::process::{Command, Stdio};

use testkit::OwnedChild;

/// Runs `command`; its stderr becomes the error when it fails.
pub(crate) fn run(mut command: Command, what: &str) -> io::Result<()> {
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
/// namespace's own /sys).
pub(crate) fn in_ns(ns: &str, program: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]).args(args);
    c
}

/// nftables DNAT + SNAT in the relay's namespace: `vip` → `to`, replies' source the VIP.
#[derive(Debug)]
pub struct Nftables {
    ns: String,
}

const NFT_TABLE: &str = "perf_relay";

impl Nftables {
    /// Turns on forwarding (one-armed: no ICMP redirects) and loads the NAT table.
    pub fn start(ns: &str, vip: SocketAddrV4, to: SocketAddrV4) -> io::Result<Self> {
        run(
            in_ns(
                ns,
                "sh",
                &[
                    "-c",
                    "sysctl -qw net.ipv4.ip_forward=1 && \
                     for f in /proc/sys/net/ipv4/conf/*/send_redirects; do echo 0 > $f; done",
                ],
            ),
            "forwarding on",
        )?;
        let rules = format!(
            "table ip {NFT_TABLE} {{\n\
               chain pre {{ type nat hook prerouting priority dstnat; \
                 ip daddr {} udp dport {} dnat to {}:{}; }}\n\
               chain post {{ type nat hook postrouting priority srcnat; \
                 ip daddr {} udp dport {} snat to {}; }}\n\
             }}\n",
            vip.ip(),
            vip.port(),
            to.ip(),
            to.port(),
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
        Ok(Nftables { ns: ns.to_string() })
    }
}

impl Drop for Nftables {
    fn drop(&mut self) {
        let _ = run(
            in_ns(&self.ns, "nft", &["delete", "table", "ip", NFT_TABLE]),
            "nft delete",
        );
        let _ = run(
            in_ns(&self.ns, "sysctl", &["-qw", "net.ipv4.ip_forward=0"]),
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
    /// Proxies UDP from `listen` to `to` in namespace `ns`, pinned to `cpu`.
    pub fn start(ns: &str, listen: SocketAddrV4, to: SocketAddrV4, cpu: usize) -> io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("perf-nginx-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "load_module {STREAM_MODULE};\n\
                 daemon off;\nmaster_process off;\nworker_processes 1;\n\
                 pid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
                 events {{ worker_connections 4096; }}\n\
                 stream {{ server {{ listen {listen} udp reuseport; proxy_pass {to}; proxy_timeout 30s; }} }}\n",
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
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let ss = in_ns(ns, "ss", &["-uln"]).output()?;
            if String::from_utf8_lossy(&ss.stdout).contains(&listen.to_string()) {
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "nginx did not bind {listen}: {:?}",
                    child.exit_report()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(Nginx { _child: child, dir })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
