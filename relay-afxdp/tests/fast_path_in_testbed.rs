//! The in-kernel fast path end to end on the netns testbed (root only; CI runs as root):
//! relay-afxdp with `--fast-path xdp` forwards a probe's flow and a real WebRTC session
//! (a str0m client, ICE, DTLS, SRTP, the data channel) both ways, and the kernel, not a
//! worker, carries most of their datagrams; in skb and native XDP mode, IPv4 and IPv6.
//!
//! Two things veth needs that a NIC does not, set up here and said where they are:
//! native `XDP_TX` on veth is received by the peer only when the peer runs an XDP
//! program of its own, and frames from a local socket over veth carry only a
//! partial UDP checksum, which the fast path would pass on wrong into an IPv6 output (see
//! `ufrag_relay_afxdp::fast_path`): the IPv6 case turns TX checksum offload off on the sending
//! hosts, so their frames carry complete checksums, as on a wire.

use std::net::SocketAddr;
use std::process::Command;

use ufrag_testkit::testbed::tools::{
    echoed_session, probe_through_relay_in, relay_metric, require_root, start_relay,
    start_relay_in, start_transceiver,
};
use ufrag_testkit::testbed::{Host, Testbed};

fn ethtool(ns: &str, args: &[&str]) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ethtool"])
        .args(args)
        .output()
        .expect("ethtool is installed (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "ethtool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Lets the relay's veth peer receive native `XDP_TX` frames: veth hands them only to a
/// peer that runs an XDP program itself (here one that passes everything); a NIC sends
/// them on the wire. Detached when the returned link is dropped.
#[must_use = "the program stays attached only while the link lives"]
fn let_the_bridge_take_xdp_tx(bed: &Testbed) -> std::os::fd::OwnedFd {
    use ufrag_bpf::sys;
    let (ns, peer) = bed.bridge_side(&bed.relay);
    let prog = ufrag_bpf::object::pass_program().expect("a pass program");
    let ifindex = ufrag_testkit::testbed::tools::ifindex_in(&ns, &peer);
    ufrag_testkit::netns::in_netns(Some(&ns), move || {
        sys::link_create_xdp(&prog, ifindex, sys::XDP_FLAGS_DRV_MODE)
    })
    .expect("into the bridge's namespace")
    .expect("attached to the relay's peer")
}

/// Complete UDP checksums on `host`'s frames, as on a wire (no TX checksum offload).
fn complete_checksums_from(host: &Host) {
    ethtool(&host.ns, &["-K", &host.ifname, "tx", "off"]);
}

fn fast(bed: &Testbed, direction: &str) -> f64 {
    relay_metric(
        bed,
        &format!("ufrag_relay_fast_path_forwarded_datagrams_total{{direction=\"{direction}\"}}"),
    )
}

fn by_workers(bed: &Testbed, direction: &str) -> f64 {
    relay_metric(
        bed,
        &format!("ufrag_relay_forwarded_datagrams_total{{worker=\"0\",direction=\"{direction}\"}}"),
    )
}

fn probe(xdp_mode: &str, ipv6: bool) {
    require_root();
    let bed = Testbed::up().unwrap();
    let _peer_pass = let_the_bridge_take_xdp_tx(&bed);
    if ipv6 {
        complete_checksums_from(&bed.client);
        complete_checksums_from(&bed.transceiver);
    }
    let ifname = bed.relay.ifname.clone();
    let mut relay = start_relay_in(
        &bed,
        ipv6,
        "relay-afxdp",
        "1",
        &[
            "--interface",
            &ifname,
            "--xdp-mode",
            xdp_mode,
            "--fast-path",
            "xdp",
        ],
    );
    let said = probe_through_relay_in(&bed, ipv6, 200);
    let (fast_in, fast_out) = (fast(&bed, "in"), fast(&bed, "out"));
    let (workers_in, workers_out) = (by_workers(&bed, "in"), by_workers(&bed, "out"));
    let unresolved = relay_metric(
        &bed,
        "ufrag_relay_dropped_datagrams_total{worker=\"0\",reason=\"neighbour_unresolved\"}",
    );
    let not_installed = relay_metric(&bed, "ufrag_relay_fast_path_flows_not_installed_total");
    let _ = relay.kill();
    let _ = relay.wait();
    let what = format!("{xdp_mode}, IPv6 {ipv6}");
    assert_eq!(said, "received 200/200", "{what}");
    assert_eq!(not_installed, 0.0, "{what}");
    // Every datagram was carried once, by a worker or by the kernel: the Binding Request
    // and the datagrams before the flow proved itself by the workers, the rest by the
    // kernel, which took most of them.
    assert_eq!(workers_in + fast_in + unresolved, 201.0, "{what}: in");
    assert_eq!(workers_out + fast_out, 201.0 - unresolved, "{what}: out");
    assert!(
        fast_in >= 150.0,
        "{what}: the kernel carried {fast_in} of 200 in"
    );
    assert!(
        fast_out >= 150.0,
        "{what}: the kernel carried {fast_out} of 200 out"
    );
}

#[test]
fn a_flow_goes_through_the_kernel_in_skb_mode() {
    probe("skb", false);
}

#[test]
fn a_flow_goes_through_the_kernel_in_native_mode() {
    probe("native", false);
}

#[test]
fn an_ipv6_flow_goes_through_the_kernel_in_native_mode() {
    probe("native", true);
}

#[test]
fn a_webrtc_session_crosses_the_fast_path() {
    require_root();
    let bed = Testbed::up().unwrap();
    let _peer_pass = let_the_bridge_take_xdp_tx(&bed);
    let ifname = bed.relay.ifname.clone();
    let mut relay = start_relay(
        &bed,
        "relay-afxdp",
        "1",
        &[
            "--interface",
            &ifname,
            "--xdp-mode",
            "native",
            "--fast-path",
            "xdp",
        ],
    );
    let vip = SocketAddr::from((bed.relay.addr, 3478));
    let (mut xcvr, http) = start_transceiver(&bed, vip, &[]);
    echoed_session(&bed, http, vip, "through relay-afxdp's fast path");
    let (fast_in, fast_out) = (fast(&bed, "in"), fast(&bed, "out"));
    let stun_left = relay_metric(
        &bed,
        "ufrag_relay_fast_path_left_datagrams_total{reason=\"stun\"}",
    );
    for child in [&mut relay, &mut xcvr] {
        let _ = child.kill();
        let _ = child.wait();
    }
    // DTLS after its first record, SRTP, SRTCP and SCTP went through the kernel; the
    // ICE checks went to the worker.
    assert!(fast_in >= 20.0, "the kernel carried {fast_in} datagrams in");
    assert!(
        fast_out >= 20.0,
        "the kernel carried {fast_out} datagrams out"
    );
    assert!(stun_left >= 1.0, "consent checks go to the worker");
}

/// A relay killed and started again refills the fast path from the route cache: the
/// client's first SRTP-like datagram after the restart restores the flow from Redis (and
/// is dropped: AF_XDP rewrites in place and keeps no copy), the next ones go through the
/// kernel, both ways, with no STUN.
#[test]
fn a_restarted_relay_refills_the_fast_path_from_the_route_cache() {
    use ufrag_testkit::relay_suite::harness::{
        RelayProcess, RelaySetup, binding_request_for, prove_flow, rtp,
    };
    use ufrag_testkit::relay_suite::{Backend, XdpMode};
    require_root();
    let backend = Backend::afxdp(env!("CARGO_BIN_EXE_relay-afxdp"), XdpMode::Skb);
    let net = backend.net();
    let redis = net.redis();
    let setup = RelaySetup {
        extra: vec![
            "--redis-url".into(),
            redis.url(),
            "--fast-path".into(),
            "xdp".into(),
        ],
        ..RelaySetup::on(net.clone())
    };
    let transceiver = net.transceiver();
    let client = net.client();
    let relay = RelayProcess::start(&setup);
    client.send(relay.vip(), &binding_request_for(transceiver.addr(), 0, 1));
    assert!(transceiver.recv_frame().is_some(), "the Binding Request");
    prove_flow(&relay, &transceiver, &client);
    redis.wait_for_flow(client.addr(), relay.vip());
    drop(relay); // SIGKILL: the flow table and the program's maps are gone

    let relay = RelayProcess::start(&setup);
    client.send(relay.vip(), &rtp(1));
    relay.wait_for("cache hit", |r| {
        r.total("ufrag_relay_cache_hits_total", "") == 1.0
    });
    for seq in 2..12 {
        client.send(relay.vip(), &rtp(seq));
        let (h, payload, from) = transceiver.recv_frame().expect("restored from Redis");
        assert_eq!((h.client, payload.clone()), (client.addr(), rtp(seq)));
        transceiver.send_frame(from, client.addr(), relay.vip(), &payload);
        assert_eq!(client.recv().expect("the reply").0, rtp(seq));
    }
    let fast = |direction: &str| {
        relay.total(
            "ufrag_relay_fast_path_forwarded_datagrams_total",
            &format!("direction=\"{direction}\""),
        )
    };
    assert_eq!(
        fast("in"),
        10.0,
        "the kernel carried every datagram after the restore"
    );
    assert_eq!(fast("out"), 10.0, "and every reply");
}
