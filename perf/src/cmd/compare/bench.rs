//! The bench `perf compare` measures on by default: the netns testbed with its addresses,
//! interfaces and client flows (made, and proven with traffic both ways, before the
//! trials), and the loads that drive a setup on it (the live-frames generator for the
//! rate search, client sockets for fixed loads).

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;

use ufrag_testbed::Testbed;

use super::bed::Bed;
use super::options::{Direction, GeneratorKind, Options};
use super::relay_host::{BindMode, RelayHost};
use super::setups::{Replies, Setup};
use crate::bench::load::{FlowPlan, Generator, Load, Sink};
use crate::forwarders::xdp::{
    Counted, Iface, NEVER_SAMPLED, PeerPass, ReplyFrames, Sender, Stamps, XdpGenerator, XdpLoad,
    XdpSink, template_frame,
};

pub use crate::bench::load::target::{
    EVERY_DATAGRAM, FIRST_CLIENT_PORT, PORTS_PER_CLIENT_ADDR, ReturnPath, SAMPLE_EVERY, SETTLE,
    SINK_PORT, SOCKET_FLOWS, Target, make_flows, prove_flows,
};

/// The testbed and everything a setup's start and load need from it.
#[derive(Debug)]
pub struct Bench {
    /// The namespaces and veths.
    pub bed: Testbed,
    /// The relay's namespace as the setups see it.
    pub relay: RelayHost,
    /// Clients, relay and transceiver over IPv6.
    pub ipv6: bool,
    /// The client flows.
    pub plan: FlowPlan,
    /// The client's and transceiver's interfaces.
    pub client_if: Iface,
    /// See `client_if`.
    pub xcv_if: Iface,
    /// The bridge ports of the client and the transceiver (the live-frames generator
    /// needs an XDP program on its veth's peer).
    pub client_peer: Iface,
    /// See `client_peer`.
    pub xcv_peer: Iface,
    /// The clock every latency stamp counts from.
    pub epoch: Instant,
    /// An `XDP_PASS` program on the relay's bridge port, for every setup alike: native
    /// `XDP_TX` frames (the in-kernel rewrite, the fast path, Quilkin's XDP mode) reach
    /// the bridge only through one, and with it every setup's transmitted frames take
    /// the same path into the bridge (veth's XDP receive), not only theirs.
    _relay_peer: PeerPass,
}

impl Bench {
    /// Builds the testbed with `flows` client flows (on extra client addresses from .100
    /// when they do not fit on one).
    pub fn up(ipv6: bool, flows: u32, forwarder_cpu: usize) -> Result<Bench, String> {
        let bed = Testbed::up().map_err(|e| format!("the testbed needs root: {e}"))?;
        let iface = |ns: &str, name: &str| {
            Iface::lookup(ns, name).map_err(|e| format!("interface {ns}/{name}: {e}"))
        };
        let client_if = iface(&bed.client.ns, &bed.client.ifname)?;
        let relay_if = iface(&bed.relay.ns, &bed.relay.ifname)?;
        let xcv_if = iface(&bed.transceiver.ns, &bed.transceiver.ifname)?;
        let (ns, name) = bed.bridge_side(&bed.client);
        let client_peer = iface(&ns, &name)?;
        let (ns, name) = bed.bridge_side(&bed.transceiver);
        let xcv_peer = iface(&ns, &name)?;
        let (ns, name) = bed.bridge_side(&bed.relay);
        let relay_peer = PeerPass::attach(&iface(&ns, &name)?)
            .map_err(|e| format!("XDP on the relay's bridge port: {e}"))?;
        let first_ip = if flows <= PORTS_PER_CLIENT_ADDR {
            bed.client.ip(ipv6)
        } else {
            Ipv4Addr::new(10, 77, 0, 100).into()
        };
        let plan = FlowPlan::new(first_ip, FIRST_CLIENT_PORT, PORTS_PER_CLIENT_ADDR, flows)
            .map_err(|e| format!("--flows {flows}: {e}"))?;
        if plan.addresses() > 6 {
            return Err(format!("--flows {flows}: at most 6 client addresses"));
        }
        if ipv6 && plan.addresses() > 1 {
            return Err(format!(
                "--ipv6: at most {PORTS_PER_CLIENT_ADDR} flows (one client address)"
            ));
        }
        if plan.first_ip != bed.client.ip(ipv6) {
            for i in 0..plan.addresses() {
                let std::net::IpAddr::V4(extra) = plan.ip(i) else {
                    unreachable!("IPv6 plans have one address")
                };
                bed.add_client_address(extra)
                    .map_err(|e| format!("add a client address: {e}"))?;
            }
        }
        let exe_dir = std::env::current_exe()
            .map_err(|e| format!("own path: {e}"))?
            .parent()
            .ok_or("perf's directory")?
            .to_path_buf();
        let relay = RelayHost {
            iface: relay_if,
            vip: SocketAddr::new(bed.relay.ip(ipv6), 3478),
            internal: SocketAddr::new(bed.relay.ip(ipv6), 40_000),
            metrics: SocketAddr::from(([127, 0, 0, 1], 9100)),
            sink_addr: SocketAddr::new(bed.transceiver.ip(ipv6), SINK_PORT),
            sink_mac: xcv_if.mac,
            transceiver_net: if ipv6 { "fd77::/64" } else { "10.77.0.0/24" }.to_string(),
            exe_dir,
            relay_cpus: relay_cpus(
                forwarder_cpu,
                crate::bench::load::LOAD_CPU,
                crate::bench::environment::online_cpus(),
            ),
            flows,
            bind_mode: BindMode::Copy,
            afxdp_workers: 1,
            steering: None,
            counted: None,
        };
        Ok(Bench {
            bed,
            relay,
            ipv6,
            plan,
            client_if,
            xcv_if,
            client_peer,
            xcv_peer,
            epoch: Instant::now(),
            _relay_peer: relay_peer,
        })
    }

    /// An XDP program on the relay's bridge port, which native `XDP_TX` frames need.
    pub fn relay_peer_pass(&self) -> PeerPass {
        let (ns, ifname) = self.bed.bridge_side(&self.bed.relay);
        let peer = Iface::lookup(&ns, &ifname).expect("the relay's bridge port");
        PeerPass::attach(&peer).expect("XDP on the bridge port")
    }

    /// Makes `setup`'s flows ([`make_flows`]) from the client's namespace and proves them
    /// ([`prove_flows`]) where it carries returns; warns when one of our relays holds
    /// fewer than all.
    pub fn make_flows(&self, setup: &Setup, target: Target) -> Generator {
        let client = Some(self.bed.client.ns.as_str());
        let sockets = make_flows(
            client,
            &self.plan,
            setup.keeps_flows(),
            target,
            self.relay.sink_addr,
            self.epoch,
        )
        .expect("the client sockets and the datagrams that make the flows");
        if let Some(back) = setup.return_path(&self.relay, target, self.plan.addresses()) {
            prove_flows(
                (client, Some(self.bed.transceiver.ns.as_str())),
                &self.plan,
                target,
                self.relay.sink_addr,
                back,
            )
            .expect("the datagrams that prove the flows");
        }
        if target.framed {
            warn_if_flows_missing(&self.relay, setup.name);
        }
        sockets
    }

    /// The fixed-load load: `sockets` send to `target` from the client's namespace,
    /// paced by sleeping (so their cost is proportional to the rate, and the same in
    /// every row), counted in XDP on the transceiver's veth with nothing passed up.
    pub fn socket_load(&self, sockets: Generator, target: Target, size: usize) -> XdpLoad {
        let idle = Sink::start_in(
            Some(&self.bed.transceiver.ns),
            SocketAddr::new(self.relay.sink_addr.ip(), 0),
            false,
            self.epoch,
        )
        .expect("an idle latency socket");
        XdpLoad {
            generator: Sender::Sockets(sockets.with_payload_len(size), target.dst),
            latency_generator: None,
            sink: XdpSink::attach(&self.xcv_if, Counted::ToPort(SINK_PORT), NEVER_SAMPLED)
                .expect("XDP sink"),
            sampler: idle,
            settle: SETTLE,
        }
    }

    /// The uplink's live-frames load (or, without `live_frames`, the sockets' load),
    /// counted in XDP on the transceiver's veth, one in [`SAMPLE_EVERY`] passed to a
    /// socket for latency; `sockets` send the latency trial.
    pub fn uplink_load(
        &self,
        sockets: Generator,
        target: Target,
        size: usize,
        live_frames: bool,
    ) -> XdpLoad {
        let sockets = Sender::Sockets(sockets.with_payload_len(size), target.dst);
        let (generator, latency_generator) = if live_frames {
            let frames = XdpGenerator::new(
                self.client_if.clone(),
                Some(&self.client_peer),
                template_frame(
                    self.client_if.mac,
                    target.dst_mac,
                    self.plan.addr(0),
                    target.dst,
                    size,
                ),
                &self.plan,
                self.epoch,
            )
            .expect("XDP generator");
            (Sender::LiveFrames(frames), Some(sockets))
        } else {
            (sockets, None)
        };
        self.sampled_load(generator, latency_generator, target, SAMPLE_EVERY)
    }

    /// `generator`'s load (`latency_generator` sends the latency trial, if another),
    /// counted in XDP on the transceiver's veth, one in `sample_every` passed to a socket
    /// for latency.
    fn sampled_load(
        &self,
        generator: Sender,
        latency_generator: Option<Sender>,
        target: Target,
        sample_every: u32,
    ) -> XdpLoad {
        XdpLoad {
            generator,
            latency_generator,
            sink: XdpSink::attach(&self.xcv_if, Counted::ToPort(SINK_PORT), sample_every)
                .expect("XDP sink"),
            sampler: Sink::start_in(
                Some(&self.bed.transceiver.ns),
                self.relay.sink_addr,
                target.framed,
                self.epoch,
            )
            .expect("latency socket"),
            settle: SETTLE,
        }
    }

    /// Replies from the transceiver's veth in live frames: to our relays' internal port
    /// in a frame naming the client, to nftables at the VIP ([`ReplyFrames::through`]),
    /// on the direct path to the client's port; counted on the client's veth by their
    /// source port; no latency sample.
    pub fn downlink_load(&self, setup: &Setup, size: usize) -> XdpLoad {
        let target = setup.target(&self.relay);
        let replies = match setup.replies() {
            Replies::Direct => ReplyFrames {
                frame: template_frame(
                    self.xcv_if.mac,
                    self.client_if.mac,
                    self.relay.sink_addr,
                    self.plan.addr(0),
                    size,
                ),
                plan: self.plan,
                stamps: Stamps::DESTINATION,
                from_port: SINK_PORT,
            },
            Replies::ToTheVip | Replies::Framed => {
                let back = setup
                    .return_path(&self.relay, target, self.plan.addresses())
                    .expect("a setup that carries the downlink");
                ReplyFrames::through(
                    back,
                    (self.xcv_if.mac, self.relay.iface.mac),
                    self.relay.sink_addr,
                    &self.plan,
                    target.dst.port(),
                    size,
                )
                .expect("the downlink's frames")
            }
        };
        let ReplyFrames {
            frame,
            plan,
            stamps,
            from_port,
        } = replies;
        let frames = XdpGenerator::stamping(
            self.xcv_if.clone(),
            Some(&self.xcv_peer),
            frame,
            (&plan, stamps),
            self.epoch,
        )
        .expect("XDP generator");
        let nothing = Sink::start_in(
            Some(&self.bed.client.ns),
            SocketAddr::from((self.bed.client.addr, 0)),
            false,
            self.epoch,
        )
        .expect("an idle latency socket");
        XdpLoad {
            generator: Sender::LiveFrames(frames),
            latency_generator: None,
            sink: XdpSink::attach(&self.client_if, Counted::FromPort(from_port), NEVER_SAMPLED)
                .expect("XDP sink"),
            sampler: nothing,
            settle: SETTLE,
        }
    }
}

/// Warns when one of our relays on `relay`'s host holds fewer flows than were made.
pub fn warn_if_flows_missing(relay: &RelayHost, name: &str) {
    let active = ufrag_testbed::http::get(relay.ns(), relay.metrics, "/metrics").map_or(0.0, |r| {
        ufrag_testbed::http::metric_sum(&r.1, "ufrag_relay_flows_active")
    });
    if active < f64::from(relay.flows) {
        crate::say!("  WARNING: {name} holds {active} of {} flows", relay.flows);
    }
}

/// The CPUs a relay's workers take on the testbed: `forwarder` first, then the others
/// in order, `tools` last (the load tools share it only when a sweep asks for every CPU).
fn relay_cpus(forwarder: usize, tools: usize, cpus: usize) -> Vec<usize> {
    let others = (0..cpus).filter(|c| *c != forwarder && *c != tools);
    std::iter::once(forwarder)
        .chain(others)
        .chain((tools != forwarder).then_some(tools))
        .collect()
}

impl Bed for Bench {
    fn relay(&self) -> &RelayHost {
        &self.relay
    }

    fn fixed_load(&self, setup: &Setup, size: usize) -> Box<dyn Load> {
        let target = setup.target(&self.relay);
        let sockets = self.make_flows(setup, target);
        Box::new(self.socket_load(sockets, target, size))
    }

    fn latency_load(&self, setup: &Setup, size: usize) -> Box<dyn Load> {
        let target = setup.target(&self.relay);
        let sockets = self.make_flows(setup, target);
        let sockets = Sender::Sockets(sockets.with_payload_len(size), target.dst);
        Box::new(self.sampled_load(sockets, None, target, EVERY_DATAGRAM))
    }

    fn search_load(&self, setup: &Setup, options: &Options) -> Box<dyn Load> {
        let target = setup.target(&self.relay);
        let sockets = self.make_flows(setup, target);
        let size = options.search.size;
        let live = options.generator == GeneratorKind::LiveFrames;
        match options.direction {
            Direction::Up => Box::new(self.uplink_load(sockets, target, size, live)),
            Direction::Down => Box::new(self.downlink_load(setup, size)),
            Direction::Both => Box::new(crate::forwarders::xdp::Conversation {
                up: self.uplink_load(sockets, target, size, live),
                down: self.downlink_load(setup, size),
                downlink_share: options.downlink_share,
            }),
        }
    }

    fn place_after_start(&self) -> Option<String> {
        let cpu = self.relay.forwarder_cpu();
        let napi = crate::bench::placement::pin_napi_threads(
            Some(&self.bed.relay.ns),
            &self.bed.relay.ifname,
            cpu,
        );
        (napi > 0)
            .then(|| format!("{napi} NAPI thread(s) of the relay's interface pinned to CPU {cpu}"))
    }
}

#[cfg(test)]
mod relay_cpu_tests {
    use super::relay_cpus;

    #[test]
    fn workers_take_the_forwarders_core_first_and_the_tools_core_last() {
        assert_eq!(relay_cpus(1, 0, 2), [1, 0]);
        assert_eq!(relay_cpus(2, 0, 8), [2, 1, 3, 4, 5, 6, 7, 0]);
        assert_eq!(relay_cpus(0, 0, 1), [0]);
    }
}
