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
        crate::netns::command_in(Some(&self.ns), program)
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
