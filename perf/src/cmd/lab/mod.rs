//! `perf gen` and `perf sink`: a lab's load generator and counting sink on real
//! interfaces, for measuring a relay host from a tools host.
//!
//! Lab mode's tools host and its control channel: `perf compare --lab` runs on the relay
//! host (the device under test; its side is [`crate::cmd::compare::lab`]) and starts the
//! setups there on the NIC the user names; the agent ([`agent`], `ufrag-perf agent`) runs on
//! the tools host, makes the flows and runs the generator and the sink, and answers over
//! one TCP connection ([`protocol`]) to whoever proves the shared token ([`token`]).

pub mod agent;
pub mod protocol;
pub mod token;

use std::time::{Duration, Instant};

use crate::bench::load::FlowPlan;

/// A lab's load generator on a real interface (root): paced live frames from
/// `--src` (and the `--flows` source ports above it) to `--dst` via `--dst-mac`, sent
/// with BPF_PROG_RUN from the interface; prints what it sent. Run `perf sink` on the
/// receiving host.
#[derive(Debug, clap::Args)]
pub struct GenOptions {
    /// The interface to send from.
    #[arg(long)]
    pub interface: String,
    /// Its network namespace (default: this process's).
    #[arg(long)]
    pub netns: Option<String>,
    /// A veth interface's peer (`NS/NAME` or `NAME`), which needs an XDP program for
    /// XDP frames to arrive; not for a NIC.
    #[arg(long)]
    pub veth_peer: Option<String>,
    /// The first flow's source address (IPv4).
    #[arg(long)]
    pub src: std::net::SocketAddrV4,
    /// Where the datagrams go (the relay's VIP, or the sink for the direct path).
    #[arg(long)]
    pub dst: std::net::SocketAddrV4,
    /// The next hop's MAC (aa:bb:cc:dd:ee:ff): the frames are raw, nothing resolves it.
    #[arg(long)]
    pub dst_mac: String,
    /// Flows: source ports `--src`'s port and up.
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
    /// UDP payload bytes.
    #[arg(long, default_value_t = crate::bench::load::DATAGRAM_LEN)]
    pub size: usize,
    /// Datagrams per second.
    #[arg(long)]
    pub rate: u64,
    /// How long to send.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
}

/// A lab's counting sink on a real interface (root): counts UDP frames to `--port` in
/// XDP (and drops them), printing the rate each second and the total at the end.
#[derive(Debug, clap::Args)]
pub struct SinkOptions {
    /// The interface to count on.
    #[arg(long)]
    pub interface: String,
    /// Its network namespace (default: this process's).
    #[arg(long)]
    pub netns: Option<String>,
    /// The UDP destination port counted.
    #[arg(long)]
    pub port: u16,
    /// How long to count.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
}

/// Runs it; the process's exit code.
pub fn generate(options: GenOptions) -> i32 {
    let GenOptions {
        interface,
        netns,
        veth_peer,
        src,
        dst,
        dst_mac,
        flows,
        size,
        rate,
        duration,
    } = options;
    use crate::forwarders::xdp::{Iface, XdpGenerator, template_frame};
    let from = Iface::lookup_in(netns.as_deref(), &interface).expect("--interface");
    let peer = veth_peer.map(|p| match p.split_once('/') {
        Some((ns, name)) => Iface::lookup(ns, name).expect("--veth-peer"),
        None => Iface::lookup_in(None, &p).expect("--veth-peer"),
    });
    let mac = crate::forwarders::xdp::parse_mac(&dst_mac).expect("--dst-mac aa:bb:cc:dd:ee:ff");
    let plan = FlowPlan::new(*src.ip(), src.port(), flows, flows).expect("--src, --flows");
    let frame = template_frame(from.mac, mac, src, dst, size);
    let generator = XdpGenerator::new(from, peer.as_ref(), frame, &plan, Instant::now())
        .expect("the generator loads (root, XDP)");
    let (sent, seconds) = generator.send(rate, duration).expect("send");
    println!(
        "sent {sent} in {seconds:.3} s ({:.0} pps)",
        sent as f64 / seconds.max(1e-9)
    );
    0
}

/// Runs it; the process's exit code.
pub fn sink(options: SinkOptions) -> i32 {
    let SinkOptions {
        interface,
        netns,
        port,
        duration,
    } = options;
    use crate::forwarders::xdp::{Counted, Iface, NEVER_SAMPLED, XdpSink};
    let on = Iface::lookup_in(netns.as_deref(), &interface).expect("--interface");
    let sink = XdpSink::attach(&on, Counted::ToPort(port), NEVER_SAMPLED).expect("the sink loads");
    println!("counting UDP to port {port} on {interface} for {duration:?}");
    let start = Instant::now();
    let mut last = 0;
    while start.elapsed() < duration {
        std::thread::sleep(Duration::from_secs(1).min(duration.saturating_sub(start.elapsed())));
        let now = sink.received();
        println!(
            "{:>6.1} s  {:>10} pps",
            start.elapsed().as_secs_f64(),
            now - last
        );
        last = now;
    }
    println!("received {}", sink.received());
    0
}
