//! The BPF load tools on the real testbed (root only: CI runs as root; without root these
//! tests fail loudly rather than skip): every frame the live-frames generator sends on
//! the direct path is counted by the XDP sink, exactly; one in `sample_every` reaches the
//! socket sink with a plausible one-way latency; other traffic passes the sink untouched.

use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use perf::load::Sink;
use perf::xdp::{Iface, XdpGenerator, XdpSink};
use testkit::testbed::Testbed;
use testkit::testbed::tools::require_root;

#[test]
fn generated_frames_are_counted_exactly_and_sampled_for_latency() {
    require_root();
    let bed = Testbed::up().expect("testbed");
    let epoch = Instant::now();
    let client = Iface::lookup(&bed.client.ns, &bed.client.ifname).expect("client veth");
    let (br_ns, br_if) = bed.bridge_side(&bed.client);
    let peer = Iface::lookup(&br_ns, &br_if).expect("bridge port");
    let xcv = Iface::lookup(&bed.transceiver.ns, &bed.transceiver.ifname).expect("xcv veth");
    let dst = SocketAddrV4::new(bed.transceiver.addr, 41_000);
    let socket_sink =
        Sink::start_in(Some(&bed.transceiver.ns), SocketAddr::V4(dst), false, epoch).expect("sink");
    let mut sink = XdpSink::attach(&xcv, dst.port(), 16).expect("XDP sink");
    // The client must know the transceiver's MAC: the testbed has no ARP for raw frames.
    let generator = XdpGenerator::new(
        client,
        &peer,
        xcv.mac,
        SocketAddrV4::new(bed.client.addr, 20_000),
        8,
        dst,
        epoch,
    )
    .expect("generator");

    sink.reset();
    socket_sink.reset();
    let (sent, secs) = generator
        .send(50_000, Duration::from_millis(400))
        .expect("send");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sent, 20_000, "the generator sends what it was asked to");
    assert_eq!(sink.received(), sent, "every frame counted once");
    let sampled = socket_sink.received();
    assert!(
        (sent / 16 - 5..=sent / 16 + 5).contains(&sampled),
        "one in 16 passed to the socket: {sampled} of {sent}"
    );
    eprintln!("sent {sent} in {secs:.3} s; sampled {sampled}");

    // Traffic for another port passes the XDP sink: a socket on 41001 receives it.
    let probe = Sink::start_in(
        Some(&bed.transceiver.ns),
        SocketAddr::from((bed.transceiver.addr, 41_001)),
        false,
        epoch,
    )
    .expect("second sink");
    let gen_other = XdpGenerator::new(
        Iface::lookup(&bed.client.ns, &bed.client.ifname).unwrap(),
        &Iface::lookup(&br_ns, &br_if).unwrap(),
        xcv.mac,
        SocketAddrV4::new(bed.client.addr, 21_000),
        1,
        SocketAddrV4::new(bed.transceiver.addr, 41_001),
        epoch,
    );
    // One XDP program per interface: the bridge port already has the first generator's.
    assert!(
        gen_other.is_err(),
        "a second XDP program on the same port is refused"
    );
    drop(generator);
    let gen_other = gen_other
        .or_else(|_| {
            XdpGenerator::new(
                Iface::lookup(&bed.client.ns, &bed.client.ifname).unwrap(),
                &Iface::lookup(&br_ns, &br_if).unwrap(),
                xcv.mac,
                SocketAddrV4::new(bed.client.addr, 21_000),
                1,
                SocketAddrV4::new(bed.transceiver.addr, 41_001),
                epoch,
            )
        })
        .expect("generator after the first is gone");
    sink.reset();
    gen_other.send(10_000, Duration::from_millis(100)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sink.received(), 0, "not the sink's port: not counted");
    assert_eq!(probe.received(), 1_000, "passed to the kernel untouched");
}

/// Live-frame pages come back recycled, not reset: a frame NATed and routed by the relay
/// host returned with the relay's MAC and the transceiver's address in it, the bridge
/// learnt the relay's MAC on the client's port, and 95 % of the next frames never reached
/// the relay. The generator now writes every header byte of every frame.
#[test]
fn frames_forwarded_by_the_kernel_are_all_counted_when_their_pages_come_back() {
    require_root();
    let bed = Testbed::up().expect("testbed");
    let epoch = Instant::now();
    let client = Iface::lookup(&bed.client.ns, &bed.client.ifname).expect("client veth");
    let (br_ns, br_if) = bed.bridge_side(&bed.client);
    let peer = Iface::lookup(&br_ns, &br_if).expect("bridge port");
    let relay = Iface::lookup(&bed.relay.ns, &bed.relay.ifname).expect("relay veth");
    let xcv = Iface::lookup(&bed.transceiver.ns, &bed.transceiver.ifname).expect("xcv veth");
    let dst = SocketAddrV4::new(bed.transceiver.addr, 41_000);
    let vip = SocketAddrV4::new(bed.relay.addr, 3478);
    let _nat = perf::alternatives::Nftables::start(&bed.relay.ns, vip, dst)
        .expect("nftables (scripts/test.sh installs nft)");
    let mut sink = XdpSink::attach(&xcv, dst.port(), 1_000_000).expect("XDP sink");
    let generator = XdpGenerator::new(
        client,
        &peer,
        relay.mac,
        SocketAddrV4::new(bed.client.addr, 20_000),
        32,
        vip,
        epoch,
    )
    .expect("generator");
    for rate in [1_000u64, 20_000] {
        sink.reset();
        let (sent, _) = generator
            .send(rate, Duration::from_millis(500))
            .expect("send");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            sink.received(),
            sent,
            "at {rate} pps: every frame NATed and counted"
        );
    }
}
