//! The in-kernel fast path's decisions and rewrites, checked with BPF_PROG_TEST_RUN on
//! crafted frames (both directions, IPv4 and IPv6): each output is compared byte for
//! byte with the frame user space would have sent, and each frame the path must not take
//! is shown to leave untouched for AF_XDP, counted under its reason. Two differential
//! tests run generated datagrams through both the program and the user-space
//! `Forwarder`: the path takes exactly what user space forwards, byte for byte. Needs root
//! (CAP_BPF); CI runs as root, and without it these tests fail loudly rather than skip.

use std::net::SocketAddr;
use std::sync::Arc;

use ufrag_common::demux::DatagramKind;
use ufrag_common::flow::FlowKey;
use ufrag_common::flow::FlowTable;
use ufrag_common::forward::{ForwardPolicy, Forwarder, Route, Verdict};
use ufrag_common::frame::FrameHeader;
use ufrag_common::hint::{HintKey, HintKeys};
use ufrag_common::reasons::DropReason;
use ufrag_common::wire::udp_checksum;
use ufrag_relay_afxdp::fast_path::{FastFlow, FastPathMaps, FastStats};
use ufrag_relay_afxdp::packet::{headers_len, write_udp};
use ufrag_relay_afxdp::program::action;
use ufrag_relay_afxdp::steering::Steering;

const RELAY_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const TRANSCEIVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 3];

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const VIP4: &str = "10.77.0.2:3478";
const INTERNAL4: &str = "10.77.0.2:40000";
const TRANSCEIVER4: &str = "10.77.0.3:41000";
const CLIENT4: &str = "10.77.0.1:50000";
const VIP6: &str = "[fd77::2]:3478";
const INTERNAL6: &str = "[fd77::2]:40000";
const TRANSCEIVER6: &str = "[fd77::3]:41000";
const CLIENT6: &str = "[fd77::1]:50001";

const RTP: [u8; 24] = [
    0x80, 111, 0, 7, 0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
];

/// An Ethernet frame carrying `payload` from `src` to `dst`, with correct checksums.
fn udp_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
) -> Vec<u8> {
    let at = headers_len(&dst);
    let mut f = vec![0u8; at + payload.len()];
    f[at..].copy_from_slice(payload);
    write_udp(&mut f, src_mac, dst_mac, src, dst, payload.len()).expect("one family");
    f
}

/// A frame as the relay sends it to the transceiver.
fn framed(client: &str, vip: &str, payload: &[u8]) -> Vec<u8> {
    frame_marked(client, vip, payload, false)
}

/// A return frame as the transceiver sends it on a path that answered its probe.
fn returned(client: &str, vip: &str, payload: &[u8]) -> Vec<u8> {
    frame_marked(client, vip, payload, true)
}

fn frame_marked(client: &str, vip: &str, payload: &[u8], verified_path: bool) -> Vec<u8> {
    let h = FrameHeader::new(a(client), a(vip)).on_verified_path(verified_path);
    let mut f = vec![0u8; h.encoded_len()];
    h.emit(&mut f).unwrap();
    f.extend_from_slice(payload);
    f
}

struct Bench {
    maps: Arc<FastPathMaps>,
    steering: Steering,
    buf: Vec<u8>,
}

impl Bench {
    fn new() -> Bench {
        ufrag_testkit::testbed::tools::require_root();
        let steering = Steering::load_with(
            &[a(VIP4), a(VIP6)],
            &[a(INTERNAL4), a(INTERNAL6)],
            1,
            Some(32),
        )
        .expect("the verifier accepts the program with the fast path");
        let maps = steering
            .fast_path()
            .expect("loaded with the fast path")
            .clone();
        let buf = maps.value_buffer().unwrap();
        Bench {
            maps,
            steering,
            buf,
        }
    }

    /// Installs `flow` with both ends on the link, their MACs known.
    fn install(&mut self, flow: &FastFlow) {
        self.maps
            .set_next_hop(flow.transceiver.ip(), TRANSCEIVER_MAC)
            .unwrap();
        self.maps
            .set_next_hop(flow.key.client.ip(), CLIENT_MAC)
            .unwrap();
        self.install_without_macs(flow);
    }

    fn install_without_macs(&mut self, flow: &FastFlow) {
        let hops = (flow.transceiver.ip(), flow.key.client.ip());
        assert!(
            self.maps
                .install(flow, RELAY_MAC, hops, &mut self.buf)
                .expect("written")
        );
    }

    fn run(&self, frame: &[u8]) -> (u32, Vec<u8>) {
        self.steering.run(frame).expect("test run")
    }

    /// A frame the fast path must leave to AF_XDP, untouched, counted by `counter`.
    fn left_to_user_space(&self, frame: &[u8], counter: fn(&FastStats) -> u64, why: &str) {
        let before = self.maps.stats().unwrap();
        let (verdict, out) = self.run(frame);
        // No AF_XDP socket in a test run: the redirect falls back to XDP_PASS.
        assert_eq!(verdict, action::PASS, "{why}: to AF_XDP");
        assert_eq!(out, frame, "{why}: untouched");
        let after = self.maps.stats().unwrap();
        assert_eq!(counter(&after) - counter(&before), 1, "{why}: counted");
        assert_eq!(after.forward, before.forward, "{why}");
        assert_eq!(after.back, before.back, "{why}");
    }
}

fn flow(client: &str, vip: &str, transceiver: &str, internal: &str) -> FastFlow {
    FastFlow {
        key: FlowKey::new(a(client), a(vip)),
        transceiver: a(transceiver),
        internal: a(internal),
    }
}

/// The frame user space sends for `payload`, but with the UDP checksum an IPv4 output
/// of the fast path carries (none).
fn expected(src_mac: [u8; 6], dst_mac: [u8; 6], src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
    let mut f = udp_frame(src_mac, dst_mac, a(src), a(dst), payload);
    if a(dst).is_ipv4() {
        f[40..42].fill(0);
    }
    f
}

fn assert_valid_udp_checksum(frame: &[u8], src: &str, dst: &str) {
    let at = headers_len(&a(dst)) - 8;
    let mut udp = frame[at..].to_vec();
    let sent = u16::from_be_bytes([udp[6], udp[7]]);
    udp[6..8].fill(0);
    assert_eq!(
        sent,
        udp_checksum(a(src).ip(), a(dst).ip(), &udp),
        "UDP checksum"
    );
}

/// `frame` with four NOP option bytes in its IPv4 header (lengths and checksum fixed).
fn with_ipv4_options(frame: &[u8]) -> Vec<u8> {
    let mut f = frame[..34].to_vec();
    f.extend_from_slice(&[1, 1, 1, 1]);
    f.extend_from_slice(&frame[34..]);
    f[14] = 0x46;
    let total = u16::from_be_bytes([f[16], f[17]]) + 4;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f[24..26].fill(0);
    let sum = ufrag_common::wire::internet_checksum(&f[14..38]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    f
}

#[test]
fn an_ipv4_flow_is_carried_both_ways_as_user_space_would_send_it() {
    let mut b = Bench::new();
    let f = flow(CLIENT4, VIP4, TRANSCEIVER4, INTERNAL4);
    b.install(&f);
    let (verdict, out) = b.run(&udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT4), a(VIP4), &RTP));
    assert_eq!(verdict, action::TX);
    assert_eq!(
        out,
        expected(
            RELAY_MAC,
            TRANSCEIVER_MAC,
            INTERNAL4,
            TRANSCEIVER4,
            &framed(CLIENT4, VIP4, &RTP)
        ),
        "framed towards the transceiver from the internal address"
    );
    let reply = udp_frame(
        TRANSCEIVER_MAC,
        RELAY_MAC,
        a(TRANSCEIVER4),
        a(INTERNAL4),
        &returned(CLIENT4, VIP4, &RTP),
    );
    let (verdict, out) = b.run(&reply);
    assert_eq!(verdict, action::TX);
    assert_eq!(
        out,
        expected(RELAY_MAC, CLIENT_MAC, VIP4, CLIENT4, &RTP),
        "to the client from the VIP"
    );
    let stats = b.maps.stats().unwrap();
    // Packets and bytes as sent: framed towards the transceiver, bare to the client.
    let (forward_bytes, return_bytes) = ((42 + 16 + RTP.len()) as u64, (42 + RTP.len()) as u64);
    assert_eq!(stats.forward, (1, forward_bytes));
    assert_eq!(stats.back, (1, return_bytes));
    let (packets, bytes, last) = b.maps.flow_counters(&f, &mut b.buf);
    assert_eq!(packets, 2);
    assert_eq!(bytes, forward_bytes + return_bytes);
    assert!(last.is_some(), "stamped");
}

#[test]
fn bpftool_prints_a_flow_entry_field_by_field() {
    let mut b = Bench::new();
    let f = flow(CLIENT4, VIP4, TRANSCEIVER4, INTERNAL4);
    b.install(&f);
    b.run(&udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT4), a(VIP4), &RTP));
    let info = b.maps.flows_map_info().expect("fast_flows' info");
    assert_ne!(info.btf_key_type_id, 0, "the key has a BTF type");
    assert_ne!(info.btf_value_type_id, 0, "the value has a BTF type");
    // scripts/test.sh installs bpftool.
    let out = std::process::Command::new("bpftool")
        .args(["map", "dump", "id", &info.id.to_string()])
        .output()
        .expect("bpftool runs (scripts/test.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for field in [
        "\"src_port\"",
        "\"direction\"",
        "\"frame\"",
        "\"packets\": 1",
        "\"last_seen_ns\"",
        "\"next_hop\"",
        "\"headers\"",
    ] {
        assert!(text.contains(field), "{field} in:\n{text}");
    }
}

#[test]
fn ipv6_outputs_carry_the_checksum_user_space_would_compute() {
    let mut b = Bench::new();
    // An IPv6 client behind an IPv4 transceiver network, and one all IPv6.
    for (transceiver, internal) in [(TRANSCEIVER4, INTERNAL4), (TRANSCEIVER6, INTERNAL6)] {
        let f = flow(CLIENT6, VIP6, transceiver, internal);
        b.install(&f);
        let (verdict, out) = b.run(&udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT6), a(VIP6), &RTP));
        assert_eq!(verdict, action::TX, "forward to {transceiver}");
        assert_eq!(
            out,
            expected(
                RELAY_MAC,
                TRANSCEIVER_MAC,
                internal,
                transceiver,
                &framed(CLIENT6, VIP6, &RTP)
            ),
            "forward to {transceiver}"
        );
        if a(transceiver).is_ipv6() {
            assert_valid_udp_checksum(&out, internal, transceiver);
        }
        // Odd-length payloads too: the checksum covers a padded last word.
        for payload in [&RTP[..], &RTP[..13]] {
            let reply = udp_frame(
                TRANSCEIVER_MAC,
                RELAY_MAC,
                a(transceiver),
                a(internal),
                &returned(CLIENT6, VIP6, payload),
            );
            let (verdict, out) = b.run(&reply);
            assert_eq!(verdict, action::TX, "return from {transceiver}");
            assert_eq!(
                out,
                expected(RELAY_MAC, CLIENT_MAC, VIP6, CLIENT6, payload),
                "return from {transceiver}"
            );
            assert_valid_udp_checksum(&out, VIP6, CLIENT6);
        }
        b.maps.remove(&f);
    }
}

#[test]
fn stun_unknown_flows_and_strangers_go_to_user_space_untouched() {
    let mut b = Bench::new();
    let f = flow(CLIENT4, VIP4, TRANSCEIVER4, INTERNAL4);
    b.install(&f);
    let mut stun = vec![0x00, 0x01, 0, 0, 0x21, 0x12, 0xa4, 0x42];
    stun.extend_from_slice(&[7; 12]);
    b.left_to_user_space(
        &udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT4), a(VIP4), &stun),
        |s| s.stun,
        "a consent check on a fast flow",
    );
    b.left_to_user_space(
        &udp_frame(CLIENT_MAC, RELAY_MAC, a("10.77.0.1:50009"), a(VIP4), &RTP),
        |s| s.miss,
        "another client port",
    );
    b.left_to_user_space(
        &udp_frame(
            TRANSCEIVER_MAC,
            RELAY_MAC,
            a("10.77.0.3:41001"),
            a(INTERNAL4),
            &returned(CLIENT4, VIP4, &RTP),
        ),
        |s| s.miss,
        "a return from another transceiver socket",
    );
    b.left_to_user_space(
        &udp_frame(
            TRANSCEIVER_MAC,
            RELAY_MAC,
            a(TRANSCEIVER4),
            a(INTERNAL4),
            &returned("10.77.0.9:50000", VIP4, &RTP),
        ),
        |s| s.miss,
        "a return naming a client with no flow",
    );
    b.left_to_user_space(
        &udp_frame(
            TRANSCEIVER_MAC,
            RELAY_MAC,
            a(TRANSCEIVER4),
            a(INTERNAL4),
            &framed(CLIENT4, VIP4, &RTP),
        ),
        |s| s.miss,
        "a return not marked as sent on a verified path",
    );
    b.left_to_user_space(
        &udp_frame(
            TRANSCEIVER_MAC,
            RELAY_MAC,
            a(TRANSCEIVER4),
            a(INTERNAL4),
            &RTP,
        ),
        |s| s.unfit,
        "a return without a frame header",
    );
    b.left_to_user_space(
        &udp_frame(
            TRANSCEIVER_MAC,
            RELAY_MAC,
            a(TRANSCEIVER4),
            a(INTERNAL4),
            &returned(CLIENT4, VIP4, &[]),
        ),
        |s| s.unfit,
        "a frame header with no datagram",
    );
    // Ethernet padding beyond the IP length, and an IPv4 header with options.
    let mut padded = udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT4), a(VIP4), &RTP);
    padded.extend_from_slice(&[0; 6]);
    b.left_to_user_space(&padded, |s| s.unfit, "trailing bytes");
    b.left_to_user_space(
        &with_ipv4_options(&udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT4), a(VIP4), &RTP)),
        |s| s.unfit,
        "IPv4 options",
    );
    // Removed: the next datagram is user space's again.
    b.maps.remove(&f);
    b.left_to_user_space(
        &udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT4), a(VIP4), &RTP),
        |s| s.miss,
        "a removed flow",
    );
}

#[test]
fn an_ipv6_output_without_an_incoming_checksum_is_left_to_user_space() {
    let mut b = Bench::new();
    // An IPv4 client behind an IPv6 transceiver network: its datagram may carry no UDP
    // checksum, which leaves nothing to update.
    let f = flow(CLIENT4, VIP4, TRANSCEIVER6, INTERNAL6);
    b.install(&f);
    let mut frame = udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT4), a(VIP4), &RTP);
    frame[40..42].fill(0);
    b.left_to_user_space(&frame, |s| s.unfit, "IPv4 datagram without a checksum");
    let with_checksum = udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT4), a(VIP4), &RTP);
    let (verdict, out) = b.run(&with_checksum);
    assert_eq!(verdict, action::TX);
    assert_valid_udp_checksum(&out, INTERNAL6, TRANSCEIVER6);
}

#[test]
fn a_next_hop_without_a_mac_waits_for_user_space_and_a_new_mac_is_followed_at_once() {
    let mut b = Bench::new();
    let f = flow(CLIENT4, VIP4, TRANSCEIVER4, INTERNAL4);
    b.install_without_macs(&f);
    let datagram = udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT4), a(VIP4), &RTP);
    b.left_to_user_space(
        &datagram,
        |s| s.no_mac,
        "the transceiver's MAC not known yet",
    );
    // Known: forwarded with it. Changed (the transceiver's host replaced): one write, and
    // the flow follows without being touched.
    for mac in [TRANSCEIVER_MAC, [0x02, 0, 0, 0, 0, 0x33]] {
        b.maps.set_next_hop(a(TRANSCEIVER4).ip(), mac).unwrap();
        let (verdict, out) = b.run(&datagram);
        assert_eq!(verdict, action::TX);
        assert_eq!(&out[..6], &mac, "to the next hop's MAC now");
        assert_eq!(
            &out[6..],
            &expected(
                RELAY_MAC,
                mac,
                INTERNAL4,
                TRANSCEIVER4,
                &framed(CLIENT4, VIP4, &RTP)
            )[6..]
        );
    }
}

/// `fast_next_hops` holds only the next hops installed flows go through: a hop's MAC
/// leaves with the last flow through it (before, every neighbour ever written stayed, so
/// on-link clients that came and went filled the map), and a MAC for a hop no flow uses
/// is not written.
#[test]
fn a_next_hops_mac_leaves_with_the_last_flow_through_it() {
    let mut b = Bench::new();
    let first = flow(CLIENT4, VIP4, TRANSCEIVER4, INTERNAL4);
    let second = flow("10.77.0.4:50002", VIP4, TRANSCEIVER4, INTERNAL4);
    let other_mac = [0x02, 0, 0, 0, 0, 4];
    for (f, client_mac) in [(&first, CLIENT_MAC), (&second, other_mac)] {
        b.install_without_macs(f);
        for (hop, mac) in [
            (f.transceiver.ip(), TRANSCEIVER_MAC),
            (f.key.client.ip(), client_mac),
        ] {
            assert!(b.maps.set_next_hop_in_use(hop, mac).unwrap());
        }
    }
    assert_eq!(
        b.maps.next_hops_in_use(),
        3,
        "two clients and one transceiver"
    );
    b.maps.remove(&first);
    assert_eq!(
        b.maps.next_hop_mac(first.key.client.ip()),
        None,
        "its client's hop went"
    );
    assert_eq!(b.maps.next_hop_mac(second.key.client.ip()), Some(other_mac));
    assert_eq!(
        b.maps.next_hop_mac(first.transceiver.ip()),
        Some(TRANSCEIVER_MAC),
        "the transceiver's stays while the second flow goes through it"
    );
    b.maps.remove(&second);
    assert_eq!(b.maps.next_hops_in_use(), 0);
    for hop in [second.key.client.ip(), second.transceiver.ip()] {
        assert_eq!(
            b.maps.next_hop_mac(hop),
            None,
            "{hop} went with the last flow"
        );
    }
    assert!(
        !b.maps
            .set_next_hop_in_use(first.key.client.ip(), CLIENT_MAC)
            .unwrap(),
        "a hop no flow goes through is not written"
    );
    assert_eq!(b.maps.next_hop_mac(first.key.client.ip()), None);
}

/// A user-space forwarder holding `f`'s flow as a proven one, as the worker does when it
/// installs the flow in the fast path.
fn forwarder_holding(f: &FastFlow, now: std::time::Instant) -> Forwarder {
    let keys = HintKeys::new(HintKey::new(1, &[7; 32]).unwrap(), None).unwrap();
    let policy = ForwardPolicy {
        vips: vec![f.key.vip],
        allowed_transceiver_networks: vec!["10.77.0.0/16".parse().unwrap()],
        global_relay_networks: vec![],
        cluster_id: 0,
        clusters: Default::default(),
        hint_keys: keys,
        route_cache: false,
        admission: Default::default(),
        shared_replays: None,
    };
    let table = FlowTable::new(16, std::time::Duration::from_secs(30), now).unwrap();
    let mut forwarder = Forwarder::new(
        policy,
        table,
        now,
        ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
    );
    let route = Route {
        next_hop: f.transceiver,
        return_via: None,
    };
    forwarder.restore(&f.key, route, now).expect("restored");
    forwarder
}

/// Datagrams with every first byte, at lengths from one byte to a full audio frame, the
/// rest of each drawn from a fixed-seed generator.
fn generated_payloads() -> Vec<Vec<u8>> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u8
    };
    let mut out = Vec::new();
    for first in 0..=255u8 {
        for len in [1usize, 2, 13, 24, 172] {
            let mut payload: Vec<u8> = (0..len).map(|_| next()).collect();
            payload[0] = first;
            out.push(payload);
        }
    }
    out
}

#[test]
fn the_fast_path_takes_exactly_the_client_datagrams_user_space_forwards_byte_for_byte() {
    let mut b = Bench::new();
    let f = flow(CLIENT4, VIP4, TRANSCEIVER4, INTERNAL4);
    b.install(&f);
    let now = std::time::Instant::now();
    let mut user_space = forwarder_holding(&f, now);
    let mut disagreements = Vec::new();
    for payload in generated_payloads() {
        let frame = udp_frame(CLIENT_MAC, RELAY_MAC, a(CLIENT4), a(VIP4), &payload);
        let (verdict, out) = b.run(&frame);
        let decided = user_space.from_client(&payload, a(CLIENT4), a(VIP4), now);
        let kind = DatagramKind::classify(&payload);
        match decided {
            // STUN on an established flow is user space's (consent, ICE restarts); every
            // other datagram it forwards, the fast path must send exactly as it would.
            Verdict::Forward {
                to,
                header,
                payload_at: 0,
                record: None,
            } if kind != DatagramKind::Stun => {
                let mut framed = vec![0u8; header.encoded_len()];
                header.emit(&mut framed).unwrap();
                framed.extend_from_slice(&payload);
                let sent = expected(
                    RELAY_MAC,
                    TRANSCEIVER_MAC,
                    INTERNAL4,
                    &to.to_string(),
                    &framed,
                );
                if (verdict, &out) != (action::TX, &sent) {
                    disagreements.push(format!(
                        "{kind:?} {:?}: user space forwards, the fast path {verdict}",
                        &payload[..payload.len().min(4)]
                    ));
                }
            }
            // What user space drops (or keeps for itself) the fast path leaves untouched.
            other => {
                if (verdict, &out) != (action::PASS, &frame) {
                    disagreements.push(format!(
                        "{kind:?} {:?}: user space {other:?}, the fast path {verdict}",
                        &payload[..payload.len().min(4)]
                    ));
                }
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} datagrams decided differently, e.g. {:#?}",
        disagreements.len(),
        generated_payloads().len(),
        &disagreements[..disagreements.len().min(6)]
    );
}

#[test]
fn a_return_the_fast_path_takes_is_one_user_space_returns_byte_for_byte() {
    let mut b = Bench::new();
    let f = flow(CLIENT4, VIP4, TRANSCEIVER4, INTERNAL4);
    b.install(&f);
    let now = std::time::Instant::now();
    let mut user_space = forwarder_holding(&f, now);
    let header_len = FrameHeader::new(a(CLIENT4), a(VIP4)).encoded_len();
    let mut taken = 0;
    for (i, payload) in generated_payloads().into_iter().enumerate() {
        let mut frame = returned(CLIENT4, VIP4, &payload);
        // Every third frame has one header byte changed: a version, flags or address
        // the fast path must not misread.
        if i % 3 == 1 {
            frame[i / 3 % header_len] ^= 1 << (i % 8);
        }
        let wire = udp_frame(
            TRANSCEIVER_MAC,
            RELAY_MAC,
            a(TRANSCEIVER4),
            a(INTERNAL4),
            &frame,
        );
        let (verdict, out) = b.run(&wire);
        let decided = user_space.from_internal(&frame, a(TRANSCEIVER4), now);
        if verdict == action::TX {
            taken += 1;
            let Verdict::Return {
                client,
                vip,
                payload_at,
            } = decided
            else {
                panic!("frame {i}: the fast path returned what user space decides as {decided:?}");
            };
            let sent = expected(
                RELAY_MAC,
                CLIENT_MAC,
                &vip.to_string(),
                &client.to_string(),
                &frame[payload_at..],
            );
            assert_eq!(out, sent, "frame {i}: byte for byte as user space");
        } else {
            assert_eq!(
                (verdict, &out),
                (action::PASS, &wire),
                "frame {i}: untouched"
            );
            // A changed flag bit may be the session-ended notice, which the fast path
            // leaves to user space, and on which user space ends the flow (and, in the
            // relay, removes it from the fast path's maps): start the next frame from the
            // same flow on both sides again.
            if decided == Verdict::Drop(DropReason::SessionEnded) {
                user_space = forwarder_holding(&f, now);
            }
        }
    }
    // Every unchanged frame is taken; the changed ones only where user space agrees.
    assert!(taken >= generated_payloads().len() * 2 / 3, "{taken} taken");
}
