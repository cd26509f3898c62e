//! The network-namespace testbed shared by tests and benchmarks: a one-armed relay
//! behind a bridge, the layout closest to production.
//!
//! ```text
//!   ns <id>-cli (client)        ns <id>-rly (relay)        ns <id>-xcv (transceiver)
//!     10.77.0.1                   10.77.0.2                  10.77.0.3
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
use std::net::Ipv4Addr;
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
    /// Its address.
    pub addr: Ipv4Addr,
}

impl Host {
    /// A command that runs `program` inside this host's namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, program]);
        c
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
    bridge_ns: String,
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
        };
        let mut bed = Testbed {
            client: host("cli", 1),
            relay: host("rly", 2),
            transceiver: host("xcv", 3),
            bridge_ns: format!("{id}-br"),
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
        ip(&["-n", &bridge, "link", "set", "lo", "up"])?;
        for h in [
            self.client.clone(),
            self.relay.clone(),
            self.transceiver.clone(),
        ] {
            ip(&["netns", "add", &h.ns])?;
            self.namespaces.push(h.ns.clone());
            let peer = format!("{}b", h.ifname);
            ip(&[
                "link", "add", &h.ifname, "netns", &h.ns, "type", "veth", "peer", "name", &peer,
                "netns", &bridge,
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
            ip(&["-n", &h.ns, "link", "set", &h.ifname, "up"])?;
            ip(&["-n", &h.ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
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
