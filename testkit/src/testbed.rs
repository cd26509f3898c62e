//! The network-namespace testbed shared by tests and benchmarks: a one-armed relay
//! behind a bridge, the layout closest to production.
//!
//! ```text
//!   ns <id>-cli (client)        ns <id>-rly (relay)        ns <id>-xcv (transceiver)
//!     10.77.0.1                   10.77.0.2                  10.77.0.3
//!     fd77::1                     fd77::2                    fd77::3
//!        │ veth                      │ veth                     │ veth
//!        └──────────── ns <id>-br: Linux bridge br0 ────────────┘
//! ```
//!
//! Every name carries the creating process's pid and a counter, so two runs (or two
//! tests) never collide; the addresses live only inside these namespaces, so no traffic
//! leaves them. [`Testbed::up`] tears down whatever it made if any step fails, `Drop`
//! tears the whole testbed down (also on panic), and [`sweep_stale`] removes testbeds
//! left by processes that died without unwinding (SIGKILL). Needs root (CAP_NET_ADMIN).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

const PREFIX: &str = "ufrag-tb-";

/// One host of the testbed.
#[derive(Clone, Debug)]
pub struct Host {
    /// Its network namespace.
    pub ns: String,
    /// Its interface towards the bridge.
    pub ifname: String,
    /// Its IPv4 address.
    pub addr: Ipv4Addr,
    /// Its IPv6 address (unique local, usable at once: no duplicate detection).
    pub addr6: Ipv6Addr,
}

impl Host {
    /// Its address of the given family.
    pub fn ip(&self, ipv6: bool) -> IpAddr {
        if ipv6 {
            self.addr6.into()
        } else {
            self.addr.into()
        }
    }

    /// A command that runs `program` inside this host's namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, program]);
        c
    }
}

/// Options for [`Testbed::up_with`].
#[derive(Clone, Copy, Debug)]
pub struct TestbedOptions {
    /// RX/TX queues of each relay interface (one AF_XDP socket per queue); other hosts
    /// have one, so that the bridge spreads flows over the relay's queues by 5-tuple hash.
    pub queues: u32,
    /// A second relay host (10.77.0.4), for global mode.
    pub second_relay: bool,
}

impl Default for TestbedOptions {
    fn default() -> Self {
        TestbedOptions {
            queues: 1,
            second_relay: false,
        }
    }
}

/// A running testbed; torn down on drop.
#[derive(Debug)]
pub struct Testbed {
    /// The unique id in every name.
    pub id: String,
    /// The client side.
    pub client: Host,
    /// The relay (one-armed: VIP and internal address on one interface).
    pub relay: Host,
    /// The transceiver side.
    pub transceiver: Host,
    /// A second relay (10.77.0.4), when asked for.
    pub relay2: Option<Host>,
    bridge_ns: String,
    queues: u32,
    namespaces: Vec<String>,
}

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Deletes testbeds whose creating process no longer exists.
pub fn sweep_stale() -> io::Result<usize> {
    let out = Command::new("ip").args(["netns", "list"]).output()?;
    let mut removed = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists()
            && ip(&["netns", "del", name]).is_ok()
        {
            removed += 1;
        }
    }
    Ok(removed)
}

impl Testbed {
    /// Builds the topology. On failure, everything made so far is removed.
    pub fn up() -> io::Result<Testbed> {
        Self::up_with(TestbedOptions::default())
    }

    /// Builds the topology with `options`.
    pub fn up_with(options: TestbedOptions) -> io::Result<Testbed> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let _ = sweep_stale();
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("{PREFIX}{pid}-{n}");
        // Interface names are limited to 15 bytes: u + 5 pid digits + counter + role.
        let short = format!("u{}{}", pid % 100_000, n % 100);
        let host = |role: &str, last: u8| Host {
            ns: format!("{id}-{role}"),
            ifname: format!("{short}{}", &role[..1]),
            addr: Ipv4Addr::new(10, 77, 0, last),
            addr6: Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, u16::from(last)),
        };
        let mut bed = Testbed {
            client: host("cli", 1),
            relay: host("rly", 2),
            transceiver: host("xcv", 3),
            relay2: options.second_relay.then(|| {
                let mut h = host("rl2", 4);
                h.ifname = format!("{short}g");
                h
            }),
            bridge_ns: format!("{id}-br"),
            queues: options.queues.max(1),
            id,
            namespaces: Vec::new(),
        };
        match bed.build() {
            Ok(()) => Ok(bed),
            Err(e) => Err(e), // Drop removes what was made.
        }
    }

    fn build(&mut self) -> io::Result<()> {
        let bridge = self.bridge_ns.clone();
        ip(&["netns", "add", &bridge])?;
        self.namespaces.push(bridge.clone());
        ip(&["-n", &bridge, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &bridge, "link", "set", "br0", "up"])?;
        // The bridge is a switch, not a firewall: with br_netfilter built in, bridged
        // frames would otherwise take the iptables hooks, costing every setup alike.
        for family in ["iptables", "ip6tables", "arptables"] {
            let knob = format!("/proc/sys/net/bridge/bridge-nf-call-{family}");
            crate::netns::in_netns(Some(&bridge), move || {
                if std::path::Path::new(&knob).exists() {
                    std::fs::write(&knob, "0")
                } else {
                    Ok(())
                }
            })??;
        }
        ip(&["-n", &bridge, "link", "set", "lo", "up"])?;
        // Only relay hosts get several queues. A single-queue sender leaves the skb without
        // a hash or queue mapping, so the bridge port towards a relay picks its TX queue
        // (which veth makes the relay's RX queue) from the flow hash of the 5-tuple: the
        // RSS a multi-queue NIC would do. Multi-queue senders defeat that: the bridge then
        // reuses the sender's queue choice, and every flow lands on RX queue 0.
        let mut hosts = vec![
            (self.client.clone(), 1),
            (self.relay.clone(), self.queues),
            (self.transceiver.clone(), 1),
        ];
        if let Some(r2) = &self.relay2 {
            hosts.push((r2.clone(), self.queues));
        }
        for (h, queues) in hosts {
            ip(&["netns", "add", &h.ns])?;
            self.namespaces.push(h.ns.clone());
            let peer = format!("{}b", h.ifname);
            let q = queues.to_string();
            ip(&[
                "link",
                "add",
                &h.ifname,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "netns",
                &h.ns,
                "type",
                "veth",
                "peer",
                "name",
                &peer,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "netns",
                &bridge,
            ])?;
            ip(&["-n", &bridge, "link", "set", &peer, "master", "br0", "up"])?;
            ip(&[
                "-n",
                &h.ns,
                "addr",
                "add",
                &format!("{}/24", h.addr),
                "dev",
                &h.ifname,
            ])?;
            ip(&[
                "-n",
                &h.ns,
                "addr",
                "add",
                &format!("{}/64", h.addr6),
                "dev",
                &h.ifname,
                "nodad",
            ])?;
            ip(&["-n", &h.ns, "link", "set", &h.ifname, "up"])?;
            ip(&["-n", &h.ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// The bridge's end of `host`'s veth pair: (namespace, interface name). A frame
    /// transmitted on the host's interface arrives there.
    pub fn bridge_side(&self, host: &Host) -> (String, String) {
        (self.bridge_ns.clone(), format!("{}b", host.ifname))
    }

    /// Gives the client a second interface on the bridge with address `addr` (/24), as a
    /// laptop on Wi-Fi and a VPN has: a WebRTC stack gathers one host candidate per
    /// interface and checks from each. Goes with the testbed.
    pub fn add_client_interface(&self, addr: Ipv4Addr) -> io::Result<()> {
        let ifname = format!("{}2", self.client.ifname);
        let peer = format!("{ifname}b");
        ip(&[
            "link",
            "add",
            &ifname,
            "netns",
            &self.client.ns,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            &self.bridge_ns,
        ])?;
        ip(&[
            "-n",
            &self.bridge_ns,
            "link",
            "set",
            &peer,
            "master",
            "br0",
            "up",
        ])?;
        let cidr = format!("{addr}/24");
        ip(&["-n", &self.client.ns, "addr", "add", &cidr, "dev", &ifname])?;
        ip(&["-n", &self.client.ns, "link", "set", &ifname, "up"])
    }

    /// Adds `addr` (/24) to the client's interface, beside its own: more client source
    /// addresses on the same link (e.g. for more flows than one address has ports).
    pub fn add_client_address(&self, addr: Ipv4Addr) -> io::Result<()> {
        let cidr = format!("{addr}/24");
        ip(&[
            "-n",
            &self.client.ns,
            "addr",
            "add",
            &cidr,
            "dev",
            &self.client.ifname,
        ])
    }

    /// The namespaces this testbed made (for checks that nothing is left).
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        // Deleting a namespace destroys its end of every veth pair, and with it the peer.
        for ns in self.namespaces.iter().rev() {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// True when this process runs as root (the testbed needs CAP_NET_ADMIN and, for XDP,
/// CAP_BPF).
pub fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        == Some("0")
}

/// Helpers for tests and benchmarks that run binaries inside the testbed.
pub mod tools {
    use std::net::SocketAddr;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use super::Testbed;
    use crate::cargo_build::bin;
    use crate::child::OwnedChild;
    pub use crate::keys::KEYS;
    /// The relay's metrics address inside its namespace.
    pub const METRICS: &str = "127.0.0.1:9100";

    /// Fails loudly unless running as root (the testbed needs CAP_NET_ADMIN and, for
    /// XDP, CAP_BPF). CI runs as root; a test never silently skips.
    pub fn require_root() {
        assert!(
            super::is_root(),
            "this test needs root (network namespaces, XDP); CI runs as root"
        );
    }

    /// The index of interface `ifname` in namespace `ns`, from `ip -o link` (`N: name…`):
    /// `/sys/class/net` shows the process's namespace, not a thread's.
    pub fn ifindex_in(ns: &str, ifname: &str) -> u32 {
        let out = std::process::Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", "dev", ifname])
            .output()
            .expect("ip runs");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split(':')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no index for {ifname} in {ns}: {text}"))
    }

    /// What `ip link show` says of the relay's interface; an attached XDP program shows
    /// as `xdpgeneric` (skb mode) or `xdp` (native), with `prog/xdp id N`.
    pub fn relay_link_shown(bed: &Testbed) -> String {
        let out = bed
            .relay
            .command("ip")
            .args(["link", "show", "dev", &bed.relay.ifname])
            .output()
            .expect("ip runs");
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Waits (at most 5 s) until the relay's interface has no XDP program; panics with
    /// `why` if one stays.
    pub fn wait_until_no_xdp(bed: &Testbed, why: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while relay_link_shown(bed).contains("prog/xdp") {
            assert!(Instant::now() < deadline, "{why}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The relay's VIP in the given family.
    pub fn vip(bed: &Testbed, ipv6: bool) -> SocketAddr {
        SocketAddr::new(bed.relay.ip(ipv6), 3478)
    }

    /// Starts `binary` as the relay (VIP 10.77.0.2:3478, internal :40000, one worker) with
    /// `extra` flags, and waits until `/readyz` answers 200.
    pub fn start_relay(bed: &Testbed, binary: &str, cpu: &str, extra: &[&str]) -> OwnedChild {
        start_relay_in(bed, false, binary, cpu, extra)
    }

    /// Like [`start_relay`], with the VIP, internal address and transceiver network of
    /// one family (IPv6: `[fd77::2]:3478`, fd77::/64).
    pub fn start_relay_in(
        bed: &Testbed,
        ipv6: bool,
        binary: &str,
        cpu: &str,
        extra: &[&str],
    ) -> OwnedChild {
        start_relay_under(bed, ipv6, &[], binary, cpu, extra)
    }

    /// Like [`start_relay_in`], the relay started by `wrapper` (a command and its
    /// arguments, the relay's command line after them: `setpriv …` to start it with a
    /// pod's capabilities).
    pub fn start_relay_under(
        bed: &Testbed,
        ipv6: bool,
        wrapper: &[&str],
        binary: &str,
        cpu: &str,
        extra: &[&str],
    ) -> OwnedChild {
        let vip = vip(bed, ipv6).to_string();
        let internal = SocketAddr::new(bed.relay.ip(ipv6), 40000).to_string();
        let transceiver_net = if ipv6 { "fd77::/64" } else { "10.77.0.0/24" };
        let binary_path = bin(binary);
        let binary_path = binary_path.to_str().expect("UTF-8 path");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = bed.relay.command(program);
                c.args(args).arg(binary_path);
                c
            }
            None => bed.relay.command(binary_path),
        };
        command
            .args([
                "--vip",
                &vip,
                "--internal-addr",
                &internal,
                "--allow-transceiver-net",
                transceiver_net,
            ])
            .args(["--workers", "1", "--cpus", cpu, "--metrics-addr", METRICS])
            .args(extra)
            .env("UFRAG_RELAY_HINT_KEYS", KEYS)
            .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = OwnedChild::spawn(&mut command).expect("relay starts");
        let metrics: SocketAddr = METRICS.parse().expect("a socket address");
        crate::http::wait_ready(
            Some(&bed.relay.ns),
            metrics,
            binary,
            Duration::from_secs(10),
            || child.exit_report(),
        );
        child
    }

    /// GETs `path` from the relay's metrics endpoint inside its namespace: the body, or
    /// an empty string when nothing answers.
    pub fn relay_http(bed: &Testbed, path: &str) -> String {
        let addr: SocketAddr = METRICS.parse().expect("a socket address");
        crate::http::get(Some(&bed.relay.ns), addr, path)
            .map(|(_, text)| text)
            .unwrap_or_default()
    }

    /// The sum of the relay's metric series starting with `series`.
    pub fn relay_metric(bed: &Testbed, series: &str) -> f64 {
        crate::http::metric_sum(&relay_http(bed, "/metrics"), series)
    }

    /// A fake transceiver (echoing frames) in the transceiver namespace and a probe from
    /// the client making a flow through the relay and sending `count` datagrams; returns
    /// what the probe said (`received N/M`).
    pub fn probe_through_relay(bed: &Testbed, count: u64) -> String {
        probe_through_relay_in(bed, false, count)
    }

    /// Like [`probe_through_relay`], over IPv6 when `ipv6`.
    pub fn probe_through_relay_in(bed: &Testbed, ipv6: bool, count: u64) -> String {
        probe_session_through_relay_in(bed, ipv6, count, 7)
    }

    /// Like [`probe_through_relay_in`], for session `session` (a second probe of one
    /// relay must name another session: the first one's request would be a replay).
    pub fn probe_session_through_relay_in(
        bed: &Testbed,
        ipv6: bool,
        count: u64,
        session: u8,
    ) -> String {
        let vip = vip(bed, ipv6).to_string();
        let transceiver = SocketAddr::new(bed.transceiver.ip(ipv6), 41000).to_string();
        let mut command = bed
            .transceiver
            .command(bin("ufrag-perf").to_str().expect("UTF-8 path"));
        command
            .args(["fake-transceiver", "--bind", &transceiver, "--idle", "5s"])
            .stdout(Stdio::null());
        let fake = OwnedChild::spawn(&mut command).expect("fake transceiver starts");
        std::thread::sleep(Duration::from_millis(200));
        let probe = bed
            .client
            .command(bin("ufrag-perf").to_str().expect("UTF-8 path"))
            .args([
                "relay-probe",
                "--vip",
                &vip,
                "--transceiver",
                &transceiver,
                "--count",
                &count.to_string(),
                "--session",
                &session.to_string(),
            ])
            .output()
            .expect("probe runs");
        drop(fake);
        String::from_utf8_lossy(&probe.stdout).trim().to_string()
    }

    /// Starts the transceiver in its namespace (signaling on 10.77.0.3:8080, media on
    /// :41000, relays allowed from the testbed's network) advertising `vip`, with `extra`
    /// flags; waits until `/readyz` answers 200 from the client's namespace. Returns it and
    /// its signaling address.
    pub fn start_transceiver(
        bed: &Testbed,
        vip: SocketAddr,
        extra: &[&str],
    ) -> (OwnedChild, SocketAddr) {
        let http = SocketAddr::from((bed.transceiver.addr, 8080));
        let mut command = bed
            .transceiver
            .command(bin("transceiver").to_str().expect("UTF-8 path"));
        command
            .args(["--http-addr", &http.to_string()])
            .args(["--bind", &format!("{}:41000", bed.transceiver.addr)])
            // The testbed's private network; the client sends no token.
            .arg("--allow-unauthenticated")
            .args(["--advertise", &vip.to_string()])
            .args(["--allow-relay-net", "10.77.0.0/24"])
            .args(extra)
            .env("UFRAG_RELAY_HINT_KEYS", KEYS)
            .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = OwnedChild::spawn(&mut command).expect("transceiver starts");
        crate::http::wait_ready(
            Some(&bed.client.ns),
            http,
            "transceiver",
            Duration::from_secs(10),
            || child.exit_report(),
        );
        (child, http)
    }

    /// A str0m client in the client namespace signals to `http`, checks that the answer's
    /// only candidate is `vip`, talks (25 audio packets, at least 20 echoed, and the data
    /// channel) and hangs up with a DELETE; `what` names the path in failures.
    pub fn echoed_session(bed: &Testbed, http: SocketAddr, vip: SocketAddr, what: &str) {
        use crate::webrtc_client::{Client, converse_with_echo};
        let ns = bed.client.ns.clone();
        let ip = bed.client.addr;
        let socket = crate::netns::in_netns(Some(&ns), move || std::net::UdpSocket::bind((ip, 0)))
            .expect("into the client's namespace")
            .expect("a client socket");
        let mut client = Client::with_socket(socket);
        let body = client.offer.clone();
        let answer = crate::http::request_in(
            Some(&ns),
            http,
            "POST",
            "/v1/sessions",
            Some(("application/sdp", &body)),
            &[],
        )
        .expect("the transceiver answers");
        assert_eq!(answer.status, 201, "{what}: {}", answer.body);
        assert!(
            answer
                .body
                .contains(&format!("{} {}", vip.ip(), vip.port())),
            "{what}: the candidate is the VIP {vip}"
        );
        client.apply_answer(&answer);
        let client = converse_with_echo(client, what, 25, 20);
        let location = client.location.clone().expect("a session location");
        let deleted = crate::http::request_in(Some(&ns), http, "DELETE", &location, None, &[]);
        assert_eq!(deleted.map(|r| r.status), Some(204), "{what}: DELETE");
    }
}
