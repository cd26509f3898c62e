//! The one table of `perf compare`'s setups: each one's key (what `--only` takes), its
//! name in the report, what it needs installed, where the load goes, how it starts and
//! (by dropping what [`Setup::start`] returns) how it stops. Adding a setup is one entry
//! here and, for a new kind, one arm in [`Setup::start`].

use std::net::{SocketAddr, SocketAddrV4};

use ufrag_testbed::OwnedChild;
use ufrag_testbed::launch::{RelayLaunch, Stderr};

use super::relay_host::{BindMode, RelayHost};
use crate::bench::load::target::{ReturnPath, Target};
use crate::bench::load::{Load, Trial};

/// How the transceiver's replies reach a setup's clients (`--direction down`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replies {
    /// Straight to the client (the direct path).
    Direct,
    /// To the VIP at the client's port, which conntrack undoes (nftables).
    ToTheVip,
    /// In a frame to the relay's internal port naming the client (our relays).
    Framed,
}

/// Why a setup is left out of a downlink or conversation search.
pub const NO_DOWNLINK: &str = "carries no downlink the generator can address";

/// An IPv4 address of a v4-only setup or the downlink's frames.
pub fn v4(a: SocketAddr) -> SocketAddrV4 {
    match a {
        SocketAddr::V4(v4) => v4,
        SocketAddr::V6(_) => unreachable!("IPv6 runs uplink only, without v4-only setups"),
    }
}

/// What runs in the relay's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Nothing: the load goes straight to the sink (the null row).
    Direct,
    /// One thread, `recv_from`/`send_to`.
    Naive,
    /// `recvmmsg`/`sendmmsg` with no routing work.
    Bare,
    /// The kernel's NAT.
    Nftables,
    /// nginx's stream proxy, one worker.
    Nginx,
    /// Quilkin, in its UDP or XDP mode.
    Quilkin {
        /// XDP mode.
        xdp: bool,
    },
    /// A rewrite-and-`XDP_TX` program: the in-kernel reference.
    XdpRelay,
    /// A count-and-`XDP_DROP` program on the relay's interface, counted there: what the
    /// NIC and kernel receive at most (a calibration, not a forwarder).
    XdpDrop,
    /// One of ours.
    Relay {
        /// Its binary, next to `perf`.
        binary: &'static str,
        /// Its flags beyond the common ones.
        flags: &'static [&'static str],
        /// relay-afxdp's attach mode (`skb` or `native`); `None` for relay-mio.
        xdp_mode: Option<&'static str>,
    },
}

/// One setup.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// What `--only` calls it.
    pub key: &'static str,
    /// What the report calls it.
    pub name: &'static str,
    /// What it is.
    pub kind: Kind,
    /// In a default run.
    pub default: bool,
    /// Its workers (our relays; 1 for everything else).
    pub workers: usize,
}

const fn relay(
    key: &'static str,
    name: &'static str,
    binary: &'static str,
    flags: &'static [&'static str],
    xdp_mode: Option<&'static str>,
    default: bool,
) -> Setup {
    Setup {
        key,
        name,
        kind: Kind::Relay {
            binary,
            flags,
            xdp_mode,
        },
        default,
        workers: 1,
    }
}

const fn other(key: &'static str, name: &'static str, kind: Kind, default: bool) -> Setup {
    Setup {
        key,
        name,
        kind,
        default,
        workers: 1,
    }
}

/// Every setup, in the report's order.
pub const SETUPS: &[Setup] = &[
    other("direct", "direct path (no relay)", Kind::Direct, true),
    other("naive", "naive recv_from/send_to relay", Kind::Naive, true),
    other("bare", "bare mmsg forwarder", Kind::Bare, true),
    other(
        "nftables",
        "nftables DNAT+SNAT (kernel)",
        Kind::Nftables,
        true,
    ),
    other("nginx", "nginx stream proxy, 1 worker", Kind::Nginx, false),
    other(
        "quilkin",
        "Quilkin 0.10 UDP proxy, 1 worker",
        Kind::Quilkin { xdp: false },
        false,
    ),
    other(
        "quilkin-xdp",
        "Quilkin 0.10 UDP proxy, XDP mode",
        Kind::Quilkin { xdp: true },
        false,
    ),
    other(
        "xdp-relay",
        "in-kernel XDP rewrite relay",
        Kind::XdpRelay,
        true,
    ),
    other(
        "xdp-drop",
        "XDP_DROP on the relay's interface (calibration)",
        Kind::XdpDrop,
        false,
    ),
    relay("mio", "relay-mio", "relay-mio", &[], None, true),
    relay(
        "mio-bundles",
        "relay-mio, bundles to the transceiver",
        "relay-mio",
        &["--bundle-to", "0.0.0.0/0", "--bundle-to", "::/0"],
        None,
        true,
    ),
    relay(
        "mio-gso",
        "relay-mio, GSO to the transceiver",
        "relay-mio",
        &["--internal-gso"],
        None,
        false,
    ),
    relay(
        "mio-busy",
        "relay-mio busy",
        "relay-mio",
        &["--poll", "busy"],
        None,
        false,
    ),
    relay(
        "afxdp-skb-wakeup",
        "relay-afxdp skb wakeup",
        "relay-afxdp",
        &["--poll", "wakeup"],
        Some("skb"),
        true,
    ),
    relay(
        "afxdp-skb-busy",
        "relay-afxdp skb busy",
        "relay-afxdp",
        &["--poll", "busy"],
        Some("skb"),
        false,
    ),
    relay(
        "afxdp-native-wakeup",
        "relay-afxdp native wakeup",
        "relay-afxdp",
        &["--poll", "wakeup"],
        Some("native"),
        true,
    ),
    relay(
        "afxdp-native-busy",
        "relay-afxdp native busy",
        "relay-afxdp",
        &["--poll", "busy"],
        Some("native"),
        false,
    ),
    relay(
        "afxdp-crate-native-wakeup",
        "relay-afxdp on the xdp crate native wakeup",
        "relay-afxdp",
        &["--poll", "wakeup", "--xsk-layer", "xdp-crate"],
        Some("native"),
        false,
    ),
    relay(
        "afxdp-crate-native-busy",
        "relay-afxdp on the xdp crate native busy",
        "relay-afxdp",
        &["--poll", "busy", "--xsk-layer", "xdp-crate"],
        Some("native"),
        false,
    ),
    relay(
        "afxdp-fast-skb",
        "relay-afxdp fast path skb",
        "relay-afxdp",
        &["--fast-path", "xdp"],
        Some("skb"),
        true,
    ),
    relay(
        "afxdp-fast-native",
        "relay-afxdp fast path native",
        "relay-afxdp",
        &["--fast-path", "xdp"],
        Some("native"),
        true,
    ),
];

/// The null row's key: its cost is subtracted from every row's.
pub const NULL: &str = "direct";
/// The baseline every ratio is taken against.
pub const BASELINE: &str = "mio";

/// Every key, for `--only`'s parser.
pub fn keys() -> Vec<&'static str> {
    SETUPS.iter().map(|s| s.key).collect()
}

/// The setup called `key`: one of the table's, or a worker-count variant made by
/// [`Setup::with_workers`].
pub fn by_key(key: &str) -> Option<&'static Setup> {
    SETUPS.iter().find(|s| s.key == key).or_else(|| {
        let made = VARIANTS.lock().unwrap_or_else(|e| e.into_inner());
        made.iter().copied().find(|s| s.key == key)
    })
}

/// The worker-count variants made in this process, each made once and kept for the run.
static VARIANTS: std::sync::Mutex<Vec<&'static Setup>> = std::sync::Mutex::new(Vec::new());

/// The key of `key`'s variant with `workers` workers.
pub fn variant_key(key: &str, workers: usize) -> String {
    format!("{key}-w{workers}")
}

/// The report's name for `key` (the key itself if unknown).
pub fn name_of(key: &str) -> String {
    by_key(key).map_or(key.to_string(), |s| s.name.to_string())
}

/// The keys of the kernel-bypass rows the verdict picks its best from: relay-afxdp on
/// its own AF_XDP layer, with and without the in-kernel fast path (every bypass the
/// project ships; the `xdp` crate's layer is there to compare layers, not to ship).
pub fn bypass_keys() -> Vec<&'static str> {
    SETUPS
        .iter()
        .filter(|s| {
            ["afxdp-skb", "afxdp-native", "afxdp-fast"]
                .iter()
                .any(|prefix| s.key.starts_with(prefix))
        })
        .map(|s| s.key)
        .collect()
}

/// How long a started relay may take to become ready.
const READY: std::time::Duration = std::time::Duration::from_secs(10);

/// What a started setup holds; dropping it stops the setup.
#[allow(dead_code)] // held for their Drop
#[derive(Debug)]
pub enum Running {
    /// The direct path.
    Nothing,
    /// The naive forwarder.
    Naive(crate::forwarders::bare::NaiveForwarder),
    /// The bare forwarder.
    Bare(crate::forwarders::bare::BareForwarder),
    /// The NAT table.
    Nftables(crate::forwarders::alternatives::Nftables),
    /// nginx.
    Nginx(crate::forwarders::alternatives::Nginx),
    /// Quilkin.
    Quilkin(crate::forwarders::alternatives::Quilkin),
    /// The XDP rewrite.
    XdpRelay(crate::forwarders::xdp::XdpRelay),
    /// The XDP drop, and its count.
    XdpDrop(std::rc::Rc<crate::forwarders::xdp::XdpSink>),
    /// One of our relays.
    Relay(OwnedChild),
}

impl Running {
    /// `load` as this setup is measured by it: the `XDP_DROP` calibration counts what
    /// arrived on the relay's interface (nothing reaches the sink); everything else as it
    /// is.
    pub fn counted(&self, load: Box<dyn Load>) -> Box<dyn Load> {
        match self {
            Running::XdpDrop(sink) => Box::new(CountedAtRelay {
                load,
                sink: std::rc::Rc::clone(sink),
            }),
            _ => load,
        }
    }
}

/// A load whose arrivals are counted on the relay's interface (the `XDP_DROP`
/// calibration's program), not at the sink.
struct CountedAtRelay {
    load: Box<dyn Load>,
    sink: std::rc::Rc<crate::forwarders::xdp::XdpSink>,
}

impl CountedAtRelay {
    /// `run`'s trial with what the relay's interface counted meanwhile as its arrivals.
    fn count(&mut self, run: impl FnOnce(&mut dyn Load) -> Trial) -> Trial {
        let before = self.sink.received();
        let mut trial = run(self.load.as_mut());
        trial.received = self.sink.received().saturating_sub(before);
        trial
    }
}

impl Load for CountedAtRelay {
    fn trial(&mut self, rate_pps: u64, duration: std::time::Duration) -> Trial {
        self.count(|load| load.trial(rate_pps, duration))
    }

    fn latency_trial(&mut self, rate_pps: u64, duration: std::time::Duration) -> Trial {
        self.count(|load| load.latency_trial(rate_pps, duration))
    }
}

impl Setup {
    /// The key of the table's setup this one was made from (itself for the table's).
    pub fn table_key(&self) -> &'static str {
        SETUPS
            .iter()
            .find(|s| s.kind == self.kind)
            .map_or(self.key, |s| s.key)
    }

    /// Whether `--workers` can sweep it here: relay-mio (its workers share one port with
    /// SO_REUSEPORT). relay-afxdp needs an RX queue per worker, and the veth testbed has
    /// one.
    pub fn sweeps_workers(&self) -> bool {
        matches!(
            self.kind,
            Kind::Relay {
                binary: "relay-mio",
                ..
            }
        )
    }

    /// This setup with `workers` workers (`mio-w2`, "relay-mio, 2 workers"), made once
    /// per run and kept for it (the report's rows name setups for the whole run).
    pub fn with_workers(&'static self, workers: usize) -> &'static Setup {
        if workers == self.workers {
            return self;
        }
        let key = variant_key(self.key, workers);
        let mut made = VARIANTS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = made.iter().copied().find(|s| s.key == key) {
            return found;
        }
        let variant: &'static Setup = Box::leak(Box::new(Setup {
            key: Box::leak(key.into_boxed_str()),
            name: Box::leak(format!("{}, {workers} workers", self.name).into_boxed_str()),
            workers,
            default: false,
            ..*self
        }));
        made.push(variant);
        variant
    }

    /// Whether it attaches a program to the relay's interface (AF_XDP, XDP), which a
    /// driver may refuse.
    pub fn attaches_to_interface(&self) -> bool {
        matches!(
            self.kind,
            Kind::XdpRelay
                | Kind::XdpDrop
                | Kind::Quilkin { xdp: true }
                | Kind::Relay {
                    xdp_mode: Some(_),
                    ..
                }
        )
    }

    /// Whether it busy-polls (its core is 100 % busy by construction).
    pub fn busy_polls(&self) -> bool {
        matches!(self.kind, Kind::Relay { flags, .. } if flags.contains(&"busy"))
    }

    /// What it needs that is not here: a program on the PATH or a binary next to perf.
    pub fn missing(&self, exe_dir: &std::path::Path) -> Option<String> {
        let needs = |program: &str, installer: &str| {
            ufrag_testbed::browser::installed(program, installer)
                .err()
                .map(|e| format!("{}: {e}", self.key))
        };
        match self.kind {
            Kind::Nftables => needs("nft", "apt-get install nftables"),
            Kind::Nginx => needs(
                "nginx",
                "scripts/bench.sh (or apt-get install nginx-light libnginx-mod-stream)",
            ),
            Kind::Quilkin { .. } => needs("quilkin", "scripts/bench.sh --full"),
            Kind::Relay { binary, .. } => (!exe_dir.join(binary).exists()).then(|| {
                format!(
                    "{}: {binary} not built (cargo build --release -p ufrag-{binary})",
                    self.key
                )
            }),
            _ => None,
        }
    }

    /// Whether it carries a transceiver's replies to clients the way `--direction down`
    /// sends them: our relays (frames to the internal port), nftables (replies to the VIP
    /// at the client's port, when the flows use one client address: else SNAT may have
    /// moved ports) and the direct path. The rest forward one way only or answer from
    /// upstream ports of their own choosing, unknown to the generator.
    pub fn carries_downlink(&self, client_addresses: u32) -> bool {
        match self.kind {
            Kind::Direct | Kind::Relay { .. } => true,
            Kind::Nftables => client_addresses == 1,
            _ => false,
        }
    }

    /// Whether `--ipv6` can run it: not nginx and Quilkin (configured for IPv4 here) nor
    /// the in-kernel rewrite (IPv4 only).
    pub fn speaks_ipv6(&self) -> bool {
        !matches!(
            self.kind,
            Kind::Nginx | Kind::Quilkin { .. } | Kind::XdpRelay
        )
    }

    /// How a transceiver's replies reach its clients, for `--direction down`.
    pub fn replies(&self) -> Replies {
        match self.kind {
            Kind::Direct => Replies::Direct,
            Kind::Nftables => Replies::ToTheVip,
            _ => Replies::Framed,
        }
    }

    /// Whether a process of its own forwards (its system calls can be split by leg): not
    /// the direct path, nftables or the in-kernel XDP relay.
    pub fn forwards_in_a_process(&self) -> bool {
        !matches!(
            self.kind,
            Kind::Direct | Kind::Nftables | Kind::XdpRelay | Kind::XdpDrop
        )
    }

    /// The cores its forwarding may take on `relay`'s host, as the report states each
    /// row's budget: a process's workers and the CPUs they are pinned to, or, for what
    /// forwards in the kernel, the softirq of every RX queue.
    pub fn cores_on(&self, relay: &RelayHost) -> String {
        match self.kind {
            Kind::Direct => "none (no forwarder)".to_string(),
            Kind::Nftables | Kind::XdpRelay | Kind::XdpDrop => {
                format!("softirq of {} RX queue(s)", self.cores_used(relay))
            }
            _ => {
                let workers = self.workers_on(relay);
                format!("{workers} (CPU {})", relay.worker_cpus(workers))
            }
        }
    }

    /// How many cores its forwarding may take on `relay`'s host (what a rate per core
    /// divides by): a process's workers, or for what forwards in the kernel one per RX
    /// queue (each queue's softirq).
    pub fn cores_used(&self, relay: &RelayHost) -> usize {
        match self.kind {
            Kind::Nftables | Kind::XdpRelay | Kind::XdpDrop => relay.afxdp_workers,
            _ => self.workers_on(relay),
        }
    }

    /// Whether it calibrates rather than forwards (`xdp-drop`): nothing it receives
    /// reaches the sink, so it has no latency to measure.
    pub fn is_calibration(&self) -> bool {
        self.kind == Kind::XdpDrop
    }

    /// Whether its flows are made before the trials (all but the direct path).
    pub fn keeps_flows(&self) -> bool {
        self.kind != Kind::Direct
    }

    /// Where its load goes on `relay`'s host.
    pub fn target(&self, relay: &RelayHost) -> Target {
        let to = |port: u16| SocketAddr::new(relay.vip.ip(), port);
        let (dst, framed) = match self.kind {
            Kind::Direct => {
                return Target {
                    dst: relay.sink_addr,
                    dst_mac: relay.sink_mac,
                    framed: false,
                };
            }
            Kind::Naive => (to(4001), false),
            Kind::Bare => (to(4000), false),
            Kind::Nftables | Kind::XdpRelay | Kind::XdpDrop => (to(relay.vip.port()), false),
            Kind::Nginx => (to(4002), false),
            Kind::Quilkin { .. } => (to(4003), false),
            Kind::Relay { .. } => (relay.vip, true),
        };
        Target {
            dst,
            dst_mac: relay.iface.mac,
            framed,
        }
    }

    /// How the transceiver's datagrams reach `target`'s clients on `relay`'s host, for
    /// the setups that keep flows and carry returns from `client_addresses` addresses:
    /// our relays, and nftables from one address, whose flows a real session proves with
    /// traffic both ways before its media (our relays hand a flow to relay-afxdp's fast
    /// path only then). The rest forward one way only, answer from ports the generator
    /// cannot know, or (the direct path) keep no flows: `None`.
    pub fn return_path(
        &self,
        relay: &RelayHost,
        target: Target,
        client_addresses: u32,
    ) -> Option<ReturnPath> {
        if !self.carries_downlink(client_addresses) {
            return None;
        }
        match self.replies() {
            Replies::Framed => Some(ReturnPath::Framed {
                internal: relay.internal,
                vip: target.dst,
            }),
            Replies::ToTheVip => Some(ReturnPath::ToClientPort(target.dst.ip())),
            Replies::Direct => None,
        }
    }

    /// Starts it on `relay`'s host, or says why it could not (a relay that exited before
    /// it was ready: its exit and last words).
    pub fn start(&self, relay: &RelayHost) -> Result<Running, String> {
        let dst = self.target(relay).dst;
        let (ns, cpu) = (relay.ns(), relay.forwarder_cpu());
        let sink = relay.sink_addr;
        let failed = |what: &str| {
            let what = what.to_string();
            move |e: std::io::Error| format!("{what}: {e}")
        };
        Ok(match self.kind {
            Kind::Direct => Running::Nothing,
            Kind::Naive => Running::Naive(
                crate::forwarders::bare::NaiveForwarder::start_in(ns, dst, sink, cpu)
                    .map_err(failed("naive forwarder"))?,
            ),
            Kind::Bare => Running::Bare(
                crate::forwarders::bare::BareForwarder::start_in(ns, dst, sink, cpu)
                    .map_err(failed("bare forwarder"))?,
            ),
            Kind::Nftables => Running::Nftables(
                crate::forwarders::alternatives::Nftables::start(ns, dst, sink)
                    .map_err(failed("nftables"))?,
            ),
            Kind::Nginx => Running::Nginx(
                crate::forwarders::alternatives::Nginx::start(
                    ns,
                    v4(dst),
                    v4(sink),
                    cpu,
                    relay.flows,
                )
                .map_err(failed("nginx"))?,
            ),
            Kind::Quilkin { xdp } => Running::Quilkin(
                crate::forwarders::alternatives::Quilkin::start(
                    ns,
                    v4(dst),
                    v4(sink),
                    cpu,
                    xdp.then_some(relay.iface.name.as_str()),
                )
                .map_err(failed("quilkin"))?,
            ),
            Kind::XdpRelay => {
                let rewrite = crate::forwarders::xdp::Rewrite {
                    vip: v4(dst),
                    relay_mac: relay.iface.mac,
                    to: v4(sink),
                    to_mac: relay.sink_mac,
                };
                Running::XdpRelay(
                    crate::forwarders::xdp::XdpRelay::attach(&relay.iface, &rewrite)
                        .map_err(failed("XDP relay"))?,
                )
            }
            Kind::XdpDrop => Running::XdpDrop(std::rc::Rc::new(
                crate::forwarders::xdp::XdpSink::attach(
                    &relay.iface,
                    crate::forwarders::xdp::Counted::ToPort(dst.port()),
                    crate::forwarders::xdp::NEVER_SAMPLED,
                )
                .map_err(failed("XDP drop"))?,
            )),
            Kind::Relay {
                binary,
                flags,
                xdp_mode,
            } => Running::Relay(self.start_relay(relay, binary, flags, xdp_mode)?),
        })
    }

    /// Its workers on `relay`'s host: relay-afxdp one per RX queue, the rest their own.
    pub fn workers_on(&self, relay: &RelayHost) -> usize {
        match self.kind {
            Kind::Relay {
                binary: "relay-afxdp",
                ..
            } => relay.afxdp_workers.max(self.workers),
            _ => self.workers,
        }
    }

    /// Starts one of our relays on `relay`'s host, its workers on the forwarder's core
    /// and then the others ([`RelayHost::worker_cpus`]), and waits until it is ready.
    fn start_relay(
        &self,
        relay: &RelayHost,
        binary: &str,
        flags: &[&str],
        xdp_mode: Option<&str>,
    ) -> Result<OwnedChild, String> {
        let workers = self.workers_on(relay);
        // Every flow is made before the trials and must outlive them; the admission
        // limits meant for the internet would refuse them.
        let mut all: Vec<String> = [
            "--idle-timeout",
            "15m",
            "--new-flows-per-prefix",
            "1000000",
            "--new-flows-per-worker",
            "1000000",
        ]
        .map(String::from)
        .to_vec();
        // A lab's million flows may all hash to one worker: each worker holds them all.
        if relay.flows as usize > ufrag_common::config::DEFAULT_FLOWS_PER_WORKER {
            all.extend(["--flows-per-worker".to_string(), relay.flows.to_string()]);
        }
        if let Some(mode) = xdp_mode {
            all.extend(["--interface", &relay.iface.name, "--xdp-mode", mode].map(String::from));
            if relay.bind_mode == BindMode::Zerocopy {
                all.extend(["--bind-mode", "zerocopy"].map(String::from));
            }
        }
        all.extend(flags.iter().map(|f| f.to_string()));
        let launch = RelayLaunch {
            binary: relay.exe_dir.join(binary),
            ns: relay.ns().map(str::to_string),
            wrapper: vec![],
            vip: relay.vip,
            internal: relay.internal,
            transceiver_net: relay.transceiver_net.clone(),
            workers,
            cpus: relay.worker_cpus(workers),
            metrics: relay.metrics,
            flags: all,
            log_filter: Some("warn".into()),
        };
        // A relay logs under load for minutes: its stderr is kept in a file, not a pipe.
        launch
            .start(Stderr::Kept, READY)
            .map_err(|e| format!("{}: {e}", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_unique_and_the_null_and_baseline_rows_exist() {
        let mut keys = keys();
        let n = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), n, "duplicate keys");
        assert!(by_key(NULL).is_some_and(|s| s.kind == Kind::Direct && s.default));
        assert!(by_key(BASELINE).is_some_and(|s| s.default));
        assert_eq!(name_of("mio"), "relay-mio");
    }

    #[test]
    fn the_verdict_picks_among_af_xdp_rows_on_our_own_layer_only() {
        let bypass = bypass_keys();
        assert!(bypass.contains(&"afxdp-skb-wakeup") && bypass.contains(&"afxdp-native-busy"));
        assert!(bypass.contains(&"afxdp-fast-skb") && bypass.contains(&"afxdp-fast-native"));
        assert!(!bypass.iter().any(|k| k.contains("crate")));
    }

    #[test]
    fn every_bypass_the_project_ships_is_a_default_row() {
        for key in [
            "afxdp-skb-wakeup",
            "afxdp-native-wakeup",
            "afxdp-fast-skb",
            "afxdp-fast-native",
        ] {
            assert!(by_key(key).is_some_and(|s| s.default), "{key}");
        }
    }

    #[test]
    fn a_worker_variant_is_made_once_and_found_by_its_key() {
        let mio = by_key("mio").unwrap();
        assert!(std::ptr::eq(mio.with_workers(1), mio));
        let two = mio.with_workers(2);
        assert!(std::ptr::eq(mio.with_workers(2), two), "made once");
        assert_eq!((two.key, two.workers), ("mio-w2", 2));
        assert_eq!(name_of("mio-w2"), "relay-mio, 2 workers");
        assert!(std::ptr::eq(by_key("mio-w2").unwrap(), two));
        assert!(mio.sweeps_workers());
        assert!(!by_key("afxdp-native-wakeup").unwrap().sweeps_workers());
    }

    #[test]
    fn only_busy_polling_relays_say_they_busy_poll() {
        let busy: Vec<&str> = SETUPS
            .iter()
            .filter(|s| s.busy_polls())
            .map(|s| s.key)
            .collect();
        assert_eq!(
            busy,
            [
                "mio-busy",
                "afxdp-skb-busy",
                "afxdp-native-busy",
                "afxdp-crate-native-busy"
            ]
        );
    }

    #[test]
    fn a_relay_binary_that_is_not_built_is_named() {
        let mio = by_key("mio").unwrap();
        let missing = mio.missing(std::path::Path::new("/nonexistent")).unwrap();
        assert!(
            missing.contains("cargo build --release -p ufrag-relay-mio"),
            "{missing}"
        );
        assert!(
            by_key("direct")
                .unwrap()
                .missing(std::path::Path::new("/"))
                .is_none()
        );
    }
}
