//! The BPF load tools on the real testbed (root only: CI runs as root; without root these
//! tests fail loudly rather than skip): every frame the live-frames generator sends on
//! the direct path is counted by the XDP sink, exactly; one in `sample_every` reaches the
//! socket sink with a plausible one-way latency; other traffic passes the sink untouched.

use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use ufrag_perf::bench::load::checksum;
use ufrag_perf::bench::load::{DATAGRAM_LEN, FlowPlan, Sink};
use ufrag_perf::forwarders::xdp::{
    Counted, Iface, NEVER_SAMPLED, Stamps, XdpGenerator, XdpSink, framed_template, template_frame,
};
use ufrag_testkit::testbed::Testbed;
use ufrag_testkit::testbed::tools::require_root;

/// A testbed and the interfaces the BPF tools use: the client's veth (the generator's),
/// its bridge end (which needs a program for XDP frames to reach it), the relay's and
/// the transceiver's (the sink's).
struct Tools {
    bed: Testbed,
    client: Iface,
    peer: Iface,
    relay: Iface,
    xcv: Iface,
}

fn tools() -> Tools {
    require_root();
    let bed = Testbed::up().expect("testbed");
    let lookup = |h: &ufrag_testkit::testbed::Host| Iface::lookup(&h.ns, &h.ifname).expect("veth");
    let (br_ns, br_if) = bed.bridge_side(&bed.client);
    Tools {
        client: lookup(&bed.client),
        peer: Iface::lookup(&br_ns, &br_if).expect("bridge port"),
        relay: lookup(&bed.relay),
        xcv: lookup(&bed.transceiver),
        bed,
    }
}

/// The IPv4 address of an IPv4 plan's flow.
fn v4(a: SocketAddr) -> SocketAddrV4 {
    match a {
        SocketAddr::V4(v4) => v4,
        SocketAddr::V6(v6) => panic!("{v6}: an IPv4 plan"),
    }
}

#[test]
fn generated_frames_are_counted_exactly_and_sampled_for_latency() {
    if ufrag_perf::forwarders::xdp::skip_without_live_frames(
        "generated_frames_are_counted_exactly_and_sampled_for_latency",
    ) {
        return;
    }
    let Tools {
        bed,
        client,
        peer,
        xcv,
        ..
    } = tools();
    let epoch = Instant::now();
    let dst = SocketAddrV4::new(bed.transceiver.addr, 41_000);
    let socket_sink =
        Sink::start_in(Some(&bed.transceiver.ns), SocketAddr::V4(dst), false, epoch).expect("sink");
    let mut sink = XdpSink::attach(&xcv, Counted::ToPort(dst.port()), 16).expect("XDP sink");
    let client_mac = client.mac;
    let frame_to = |port: u16, to: SocketAddrV4| {
        // The client must know the transceiver's MAC: raw frames do no ARP.
        template_frame(
            client_mac,
            xcv.mac,
            SocketAddrV4::new(bed.client.addr, port),
            to,
            DATAGRAM_LEN,
        )
    };
    let plan = |port: u16, flows: u32| FlowPlan::new(bed.client.addr, port, flows, flows).unwrap();
    let generator = XdpGenerator::new(
        client.clone(),
        Some(&peer),
        frame_to(20_000, dst),
        &plan(20_000, 8),
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

    // One XDP program per interface: the bridge port has the first generator's.
    let other = SocketAddrV4::new(bed.transceiver.addr, 41_001);
    assert!(
        XdpGenerator::new(
            client.clone(),
            Some(&peer),
            frame_to(21_000, other),
            &plan(21_000, 1),
            epoch
        )
        .is_err(),
        "a second generator on the same veth is refused"
    );
    drop(generator);
    // Traffic for another port passes the XDP sink to the kernel untouched.
    let probe = Sink::start_in(
        Some(&bed.transceiver.ns),
        SocketAddr::V4(other),
        false,
        epoch,
    )
    .expect("second sink");
    let generator = XdpGenerator::new(
        client,
        Some(&peer),
        frame_to(21_000, other),
        &plan(21_000, 1),
        epoch,
    )
    .expect("generator after the first is gone");
    sink.reset();
    generator.send(10_000, Duration::from_millis(100)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sink.received(), 0, "not the sink's port: not counted");
    assert_eq!(probe.received(), 1_000, "passed to the kernel untouched");
}

/// The same over IPv6, where UDP must carry a checksum: every frame the program stamps
/// (its flow's port, the count and the time) sums to zero over the pseudo-header, and the
/// sampled frames reach the socket, which the kernel allows only with a valid checksum.
#[test]
fn ipv6_frames_carry_valid_udp_checksums_and_are_counted_exactly() {
    if ufrag_perf::forwarders::xdp::skip_without_live_frames(
        "ipv6_frames_carry_valid_udp_checksums_and_are_counted_exactly",
    ) {
        return;
    }
    let Tools {
        bed,
        client,
        peer,
        xcv,
        ..
    } = tools();
    let epoch = Instant::now();
    let dst = SocketAddr::new(bed.transceiver.addr6.into(), 41_000);
    let socket_sink = Sink::start_in(Some(&bed.transceiver.ns), dst, false, epoch).expect("sink");
    let mut sink = XdpSink::attach(&xcv, Counted::ToPort(dst.port()), 16).expect("XDP sink");
    let plan = FlowPlan::new(bed.client.addr6, 20_000, 8, 8).unwrap();
    let frame = template_frame(client.mac, xcv.mac, plan.addr(0), dst, DATAGRAM_LEN);
    let generator = XdpGenerator::new(client, Some(&peer), frame, &plan, epoch).expect("generator");

    sink.reset();
    socket_sink.reset();
    let (sent, _) = generator
        .send(50_000, Duration::from_millis(400))
        .expect("send");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sent, 20_000);
    assert_eq!(sink.received(), sent, "every frame counted once");
    let sampled = socket_sink.received();
    assert!(
        (sent / 16 - 5..=sent / 16 + 5).contains(&sampled),
        "one in 16 reached the socket, checksum and all: {sampled} of {sent}"
    );
}

/// The one's-complement sum of an IPv6 frame's pseudo-header and UDP segment is 0xffff
/// (its checksum is right) exactly when this is true.
fn udp6_checksum_right(f: &[u8]) -> bool {
    let udp = &f[14 + 40..];
    let mut pseudo = f[14 + 8..14 + 40].to_vec();
    pseudo.extend_from_slice(&(udp.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    pseudo.extend_from_slice(udp);
    checksum(&pseudo) == 0
}

/// What the generator writes into an IPv6 frame, run by BPF_PROG_TEST_RUN (no live
/// frames needed): each flow's address and port, and a UDP checksum kept right for all
/// it stamped (port, address, count and time).
#[test]
fn ipv6_frames_are_stamped_with_each_flow_and_a_right_udp_checksum() {
    let Tools {
        bed, client, peer, ..
    } = tools();
    let dst = SocketAddr::new(bed.transceiver.addr6.into(), 41_000);
    // Three ports per address: eight flows on three addresses.
    let plan = FlowPlan::new(bed.client.addr6, 20_000, 3, 8).unwrap();
    let frame = template_frame(client.mac, [2; 6], plan.addr(0), dst, DATAGRAM_LEN);
    let generator =
        XdpGenerator::new(client, Some(&peer), frame, &plan, Instant::now()).expect("generator");
    let stamped = generator.stamp(17).expect("BPF_PROG_TEST_RUN");
    for (n, f) in stamped.iter().enumerate() {
        assert_eq!(
            Stamps::SOURCE_V6.flow_of(f),
            plan.addr((n as u32 + 1) % 8),
            "frame {n}: its flow"
        );
        assert!(
            udp6_checksum_right(f),
            "frame {n}: the UDP checksum is right"
        );
        let count = u16::from_be_bytes([f[62 + 2], f[62 + 3]]);
        assert_eq!(count, n as u16 + 1, "frame {n}: its count");
    }
}

/// Live-frame pages come back recycled, not reset: a frame NATed and routed by the relay
/// host returned with the relay's MAC and the transceiver's address in it, the bridge
/// learnt the relay's MAC on the client's port, and 95 % of the next frames never reached
/// the relay. The generator now writes every header byte of every frame.
/// Many flows: the generator deals the plan's flows round its addresses, as the plan
/// does, and every frame's IPv4 header still sums to zero after its source changed.
#[test]
fn the_generator_stamps_each_flow_of_a_plan_over_several_addresses() {
    let Tools {
        bed, client, peer, ..
    } = tools();
    let first = std::net::Ipv4Addr::new(10, 77, 0, 120);
    let plan = FlowPlan::new(first, 30_000, 3, 7).unwrap();
    let dst = SocketAddrV4::new(bed.transceiver.addr, 41_000);
    let frame = template_frame(client.mac, [2; 6], plan.addr(0), dst, DATAGRAM_LEN);
    assert!(
        XdpGenerator::new(
            client.clone(),
            Some(&peer),
            template_frame(client.mac, [2; 6], plan.addr(1), dst, DATAGRAM_LEN),
            &plan,
            Instant::now()
        )
        .is_err(),
        "a template that is not the plan's first flow is refused"
    );
    let generator =
        XdpGenerator::new(client, Some(&peer), frame, &plan, Instant::now()).expect("generator");
    let frames = generator.stamp(15).expect("test runs");
    let sources: Vec<SocketAddr> = frames.iter().map(|f| Stamps::SOURCE.flow_of(f)).collect();
    // Frame n (from 1) is flow n % 7.
    let expected: Vec<SocketAddr> = (1..=15).map(|n| plan.addr(n % 7)).collect();
    assert_eq!(sources, expected);
    for f in &frames {
        assert_eq!(checksum(&f[14..34]), 0, "the IPv4 header sums to 0: {f:?}");
    }
}

#[test]
fn frames_forwarded_by_the_kernel_are_all_counted_when_their_pages_come_back() {
    if ufrag_perf::forwarders::xdp::skip_without_live_frames(
        "frames_forwarded_by_the_kernel_are_all_counted_when_their_pages_come_back",
    ) {
        return;
    }
    let Tools {
        bed,
        client,
        peer,
        relay,
        xcv,
    } = tools();
    let epoch = Instant::now();
    let dst = SocketAddrV4::new(bed.transceiver.addr, 41_000);
    let vip = SocketAddrV4::new(bed.relay.addr, 3478);
    let _nat = ufrag_perf::forwarders::alternatives::Nftables::start(
        Some(&bed.relay.ns),
        vip.into(),
        dst.into(),
    )
    .expect("nftables (scripts/test.sh installs nft)");
    let mut sink = XdpSink::attach(&xcv, Counted::ToPort(dst.port()), 1_000_000).expect("XDP sink");
    let frame = template_frame(
        client.mac,
        relay.mac,
        SocketAddrV4::new(bed.client.addr, 20_000),
        vip,
        DATAGRAM_LEN,
    );
    let plan = FlowPlan::new(bed.client.addr, 20_000, 32, 32).unwrap();
    let generator = XdpGenerator::new(client, Some(&peer), frame, &plan, epoch).expect("generator");
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

#[test]
fn the_reference_xdp_relay_rewrites_datagrams_to_the_vip_and_passes_the_rest() {
    require_root();
    use ufrag_perf::forwarders::xdp::{Rewrite, XdpRelay};
    let rewrite = Rewrite {
        vip: "10.77.0.2:3478".parse().unwrap(),
        relay_mac: [2, 0, 0, 0, 0, 2],
        to: "10.77.0.3:41000".parse().unwrap(),
        to_mac: [2, 0, 0, 0, 0, 3],
    };
    let client_mac = [2, 0, 0, 0, 0, 1];
    let frame = template_frame(
        client_mac,
        rewrite.relay_mac,
        "10.77.0.1:20005".parse::<SocketAddrV4>().unwrap(),
        rewrite.vip,
        DATAGRAM_LEN,
    );
    let (verdict, out) = XdpRelay::run_once(&rewrite, &frame).expect("BPF_PROG_TEST_RUN");
    assert_eq!(verdict, 3, "XDP_TX");
    assert_eq!(&out[0..6], &rewrite.to_mac, "to the next hop");
    assert_eq!(&out[6..12], &rewrite.relay_mac, "from the relay");
    assert_eq!(out[22], 64, "TTL");
    assert_eq!(&out[26..30], &[10, 77, 0, 2], "source: the VIP");
    assert_eq!(
        &out[30..34],
        &[10, 77, 0, 3],
        "destination: the transceiver"
    );
    assert_eq!(
        ufrag_perf::bench::load::checksum(&out[14..34]),
        0,
        "a valid IPv4 checksum"
    );
    assert_eq!(
        &out[34..36],
        &20_005u16.to_be_bytes(),
        "the client's port stays"
    );
    assert_eq!(&out[36..38], &41_000u16.to_be_bytes());
    assert_eq!(&out[40..42], &[0, 0], "no UDP checksum");
    assert_eq!(&out[42..], &frame[42..], "the payload untouched");

    let other_port = template_frame(
        client_mac,
        rewrite.relay_mac,
        "10.77.0.1:20005".parse::<SocketAddrV4>().unwrap(),
        "10.77.0.2:3479".parse::<SocketAddrV4>().unwrap(),
        DATAGRAM_LEN,
    );
    let (verdict, out) = XdpRelay::run_once(&rewrite, &other_port).expect("run");
    assert_eq!((verdict, out), (2, other_port), "XDP_PASS, unchanged");
}

/// Downlink: frames a transceiver sends through relay-mio towards many clients (each
/// flow written into the relay frame header by the generator) all reach the client's
/// veth, counted there by their source port (the VIP's).
/// The 20 flows [`relay_mio_with_flows`] made: their plan, the VIP they use and the
/// transceiver their sessions name.
struct RelayFlows {
    plan: FlowPlan,
    vip: SocketAddrV4,
    transceiver: SocketAddrV4,
}

impl RelayFlows {
    /// The transceiver's bridge port, which needs an XDP program for the downlink
    /// generator's frames to reach it.
    fn xcv_peer(&self, bed: &Testbed) -> Iface {
        let (ns, ifname) = bed.bridge_side(&bed.transceiver);
        Iface::lookup(&ns, &ifname).expect("the transceiver's bridge port")
    }

    /// A transceiver's reply to the first flow: a frame to the relay's internal port
    /// naming the client (the generator stamps each flow in turn).
    fn reply_frame(&self, bed: &Testbed, xcv: &Iface, relay: &Iface) -> Vec<u8> {
        framed_template(
            (xcv.mac, relay.mac),
            (self.transceiver, SocketAddrV4::new(bed.relay.addr, 40_000)),
            (v4(self.plan.addr(0)), self.vip),
            DATAGRAM_LEN,
        )
    }
}

/// relay-mio on the testbed with 20 flows made, each by a Binding Request of its own
/// session (sessions from `seed` on: two relays' tests need distinct ones).
fn relay_mio_with_flows(bed: &Testbed, seed: u32) -> (ufrag_testkit::OwnedChild, RelayFlows) {
    use ufrag_testkit::testbed::tools::{relay_metric, start_relay};
    let relay_process = start_relay(bed, "relay-mio", "1", &[]);
    let keys = ufrag_testkit::keys::keys();
    let plan = FlowPlan::new(bed.client.addr, 30_000, 40_000, 20).unwrap();
    let vip = SocketAddrV4::new(bed.relay.addr, 3478);
    let transceiver = SocketAddrV4::new(bed.transceiver.addr, 41_000);
    ufrag_perf::bench::load::make_flows(Some(&bed.client.ns), &plan, vip.into(), 1_000, |f| {
        ufrag_perf::bench::probe::binding_request(&keys, transceiver.into(), seed + f)
    })
    .expect("flows made");
    let deadline = Instant::now() + Duration::from_secs(5);
    while relay_metric(bed, "ufrag_relay_flows_active") < 20.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(relay_metric(bed, "ufrag_relay_flows_active"), 20.0);
    let flows = RelayFlows {
        plan,
        vip,
        transceiver,
    };
    (relay_process, flows)
}

#[test]
fn downlink_frames_through_relay_mio_reach_every_flow_and_are_all_counted() {
    if ufrag_perf::forwarders::xdp::skip_without_live_frames(
        "downlink_frames_through_relay_mio_reach_every_flow_and_are_all_counted",
    ) {
        return;
    }
    use ufrag_common::frame::FrameHeader;
    let Tools {
        bed,
        client,
        relay,
        xcv,
        ..
    } = tools();
    let (mut relay_process, flows) = relay_mio_with_flows(&bed, 1_000);
    let xcv_peer = flows.xcv_peer(&bed);
    let reply = flows.reply_frame(&bed, &xcv, &relay);
    let plan = flows.plan;

    let stamps = (&plan, Stamps::FRAMED_CLIENT);
    let generator = XdpGenerator::stamping(xcv, Some(&xcv_peer), reply, stamps, Instant::now())
        .expect("generator");
    for (n, f) in generator.stamp(25).expect("test runs").iter().enumerate() {
        let header = FrameHeader::parse(&f[42..]).expect("a frame header").0;
        let flow = plan.addr((n as u32 + 1) % 20);
        assert_eq!(header.client, flow, "frame {n}");
        assert_eq!(f[42 + 16], 0x80, "the datagram follows the header");
    }
    let mut sink = XdpSink::attach(&client, Counted::FromPort(3478), NEVER_SAMPLED).expect("sink");
    sink.reset();
    let (sent, _) = generator
        .send(10_000, Duration::from_millis(300))
        .expect("send");
    std::thread::sleep(Duration::from_millis(300));
    let forwarded = ufrag_testkit::http::metric_by_label(
        &ufrag_testkit::testbed::tools::relay_http(&bed, "/metrics"),
        "ufrag_relay_forwarded_datagrams_total",
        "direction",
    )
    .get("out")
    .copied()
    .unwrap_or(0.0);
    let _ = relay_process.kill();
    assert_eq!(sent, 3_000);
    assert_eq!(sink.received(), sent, "every frame reached its client");
    assert_eq!(
        forwarded, sent as f64,
        "and the relay counted each as forwarded out"
    );
}

/// A perf lab's two hosts, stood for by two namespaces: `perf sink` on the receiving
/// host's interface counts exactly what `perf gen` on the sending host's sent.
#[test]
fn perf_gen_and_perf_sink_measure_between_two_hosts() {
    if ufrag_perf::forwarders::xdp::skip_without_live_frames(
        "perf_gen_and_perf_sink_measure_between_two_hosts",
    ) {
        return;
    }
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let Tools { bed, xcv, .. } = tools();
    let perf = env!("CARGO_BIN_EXE_ufrag-perf");
    let mut sink = Command::new(perf)
        .args(["sink", "--netns", &bed.transceiver.ns, "--interface"])
        .args([
            &bed.transceiver.ifname,
            "--port",
            "41000",
            "--duration",
            "3s",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("perf sink starts");
    let mut lines = BufReader::new(sink.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line").expect("text");
    assert!(first.starts_with("counting UDP to port 41000"), "{first}");
    let (br_ns, br_if) = bed.bridge_side(&bed.client);
    let mac: Vec<String> = xcv.mac.iter().map(|b| format!("{b:02x}")).collect();
    let generator = Command::new(perf)
        .args([
            "gen",
            "--netns",
            &bed.client.ns,
            "--interface",
            &bed.client.ifname,
        ])
        .args(["--veth-peer", &format!("{br_ns}/{br_if}")])
        .args([
            "--src",
            &format!("{}:20000", bed.client.addr),
            "--flows",
            "16",
        ])
        .args(["--dst", &format!("{}:41000", bed.transceiver.addr)])
        .args([
            "--dst-mac",
            &mac.join(":"),
            "--rate",
            "20000",
            "--duration",
            "1s",
        ])
        .output()
        .expect("perf gen runs");
    let said = String::from_utf8_lossy(&generator.stdout);
    assert!(generator.status.success(), "perf gen: {said}");
    let sent: u64 = said
        .strip_prefix("sent ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("perf gen said {said:?}"));
    assert_eq!(sent, 20_000, "{said}");
    let last = lines
        .map_while(Result::ok)
        .last()
        .expect("perf sink's last line");
    assert!(sink.wait().expect("perf sink ends").success());
    assert_eq!(last, format!("received {sent}"), "every frame counted once");
}

/// `perf compare --direction both`: one trial offers half its rate each way through
/// relay-mio at once, and counts both ways; each way's own sink saw its half. Then, with
/// `--downlink-share 0.8` (the model speaking), four fifths go downlink.
#[test]
fn a_conversation_trial_through_relay_mio_carries_and_counts_both_ways() {
    if ufrag_perf::forwarders::xdp::skip_without_live_frames(
        "a_conversation_trial_through_relay_mio_carries_and_counts_both_ways",
    ) {
        return;
    }
    use ufrag_perf::bench::load::Load;
    use ufrag_perf::forwarders::xdp::{Conversation, Sender, XdpLoad};
    let Tools {
        bed,
        client,
        peer,
        relay,
        xcv,
    } = tools();
    let (mut relay_process, flows) = relay_mio_with_flows(&bed, 2_000);
    let xcv_peer = flows.xcv_peer(&bed);
    let reply = flows.reply_frame(&bed, &xcv, &relay);
    let RelayFlows {
        plan,
        vip,
        transceiver,
    } = flows;

    let epoch = Instant::now();
    let up = XdpLoad {
        generator: Sender::LiveFrames(
            XdpGenerator::new(
                client.clone(),
                Some(&peer),
                template_frame(client.mac, relay.mac, plan.addr(0), vip, DATAGRAM_LEN),
                &plan,
                epoch,
            )
            .expect("uplink generator"),
        ),
        latency_generator: None,
        sink: XdpSink::attach(&xcv, Counted::ToPort(41_000), 4).expect("uplink sink"),
        sampler: Sink::start_in(Some(&bed.transceiver.ns), transceiver.into(), true, epoch)
            .expect("latency socket"),
        settle: Duration::from_millis(300),
    };
    let down = XdpLoad {
        generator: Sender::LiveFrames(
            XdpGenerator::stamping(
                xcv,
                Some(&xcv_peer),
                reply,
                (&plan, Stamps::FRAMED_CLIENT),
                epoch,
            )
            .expect("downlink generator"),
        ),
        latency_generator: None,
        sink: XdpSink::attach(&client, Counted::FromPort(3478), NEVER_SAMPLED)
            .expect("downlink sink"),
        sampler: Sink::start_in(
            Some(&bed.client.ns),
            SocketAddr::from((bed.client.addr, 0)),
            false,
            epoch,
        )
        .expect("an idle socket"),
        settle: Duration::from_millis(300),
    };
    let mut conversation = Conversation {
        up,
        down,
        downlink_share: 0.5,
    };
    let trial = conversation.trial(20_000, Duration::from_millis(300));
    let each_way = (
        conversation.up.sink.received(),
        conversation.down.sink.received(),
    );
    conversation.downlink_share = 0.8;
    let model_speaks = conversation.trial(20_000, Duration::from_millis(300));
    let _ = relay_process.kill();
    assert_eq!(model_speaks.sent, 6_000);
    assert_eq!(model_speaks.received, 6_000, "every datagram arrived");
    assert_eq!(conversation.up.sink.received(), 1_200, "a fifth uplink");
    assert_eq!(
        conversation.down.sink.received(),
        4_800,
        "four fifths downlink"
    );
    assert_eq!(trial.offered_pps, 20_000);
    assert_eq!(trial.sent, 6_000, "3,000 each way");
    assert_eq!(trial.received, trial.sent, "every datagram arrived");
    assert_eq!(each_way, (3_000, 3_000), "half uplink, half downlink");
    assert!(
        trial.latency.samples > 0 && trial.latency.p50() > 0.0,
        "the uplink was sampled for latency"
    );
}

/// A relay's bundle is counted as the frames it carries, by the XDP sink and by the
/// socket sink behind it (which records each frame's latency); a plain frame as one.
#[test]
fn a_bundle_is_counted_as_its_frames() {
    use ufrag_common::bundle::BundleWriter;
    use ufrag_common::frame::FrameHeader;

    let Tools { bed, xcv, .. } = tools();
    let epoch = Instant::now();
    let dst = SocketAddr::from((bed.transceiver.addr, 41_002));
    let socket_sink = Sink::start_in(Some(&bed.transceiver.ns), dst, true, epoch).expect("sink");
    let mut sink = XdpSink::attach(&xcv, Counted::ToPort(dst.port()), 1).expect("XDP sink");
    let relay = ufrag_perf::bench::load::bind_in(
        Some(&bed.client.ns),
        SocketAddr::from((bed.client.addr, 0)),
    )
    .expect("a socket in the client's namespace");
    let header = FrameHeader::new(
        "198.51.100.7:5000".parse().unwrap(),
        "203.0.113.1:3478".parse().unwrap(),
    );
    let stamped = || {
        let mut datagram = [0x80u8; 40];
        let now = epoch.elapsed().as_nanos() as u64;
        datagram[4..12].copy_from_slice(&now.to_be_bytes());
        datagram
    };
    sink.reset();
    socket_sink.reset();
    for _ in 0..10 {
        let mut buf = [0u8; 1472];
        let mut writer = BundleWriter::new(&mut buf);
        for _ in 0..5 {
            writer.push(&header, &stamped()).unwrap();
        }
        relay.send_to(writer.finish().unwrap(), dst).unwrap();
    }
    for _ in 0..7 {
        let mut frame = vec![0u8; header.encoded_len()];
        header.emit(&mut frame).unwrap();
        frame.extend_from_slice(&stamped());
        relay.send_to(&frame, dst).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        sink.received(),
        10 * 5 + 7,
        "bundles counted by their frames"
    );
    assert_eq!(
        socket_sink.received(),
        10 * 5 + 7,
        "and read frame by frame"
    );
}
