//! Instruction counts (callgrind, via iai-callgrind) of relay-afxdp's per-frame work
//! outside the rings: parse a received Ethernet/IP/UDP frame, plan its in-place
//! rewrite, write the new headers with both checksums complete. Gated by
//! `scripts/instructions.sh`.

use std::hint::black_box;
use std::net::SocketAddr;

use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use ufrag_common::frame::MAX_HEADER_LEN;
use ufrag_relay_afxdp::packet::{Rewrite, headers_len, parse_udp, plan, write_udp};

const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const RELAY_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// An Opus-sized SRTP payload.
const PAYLOAD_LEN: usize = 172;

/// A received frame (client → VIP) in a chunk with headroom for the frame header, as
/// the UMEM hands it over, and the transceiver it goes to.
fn received(client: &str, vip: &str, transceiver: &str) -> (Vec<u8>, SocketAddr) {
    let (client, vip): (SocketAddr, SocketAddr) = (client.parse().unwrap(), vip.parse().unwrap());
    let headroom = 256;
    let mut chunk = vec![0x5a; 2048];
    let at = headroom + headers_len(&vip);
    chunk[at] = 0x80;
    let frame = &mut chunk[headroom..];
    write_udp(frame, CLIENT_MAC, RELAY_MAC, client, vip, PAYLOAD_LEN).unwrap();
    (chunk, transceiver.parse().unwrap())
}

fn from_ipv4_client() -> (Vec<u8>, SocketAddr) {
    received("198.51.100.7:50000", "203.0.113.10:3478", "10.0.0.2:40000")
}

fn from_ipv6_client() -> (Vec<u8>, SocketAddr) {
    received(
        "[2001:db8::7]:50000",
        "[2001:db8::10]:3478",
        "[fd00::2]:40000",
    )
}

// Client → transceiver: parse, plan room for the frame header in front of the payload,
// write the new headers (and checksums) there.
#[library_benchmark]
#[bench::ipv4(from_ipv4_client())]
#[bench::ipv6(from_ipv6_client())]
fn parse_plan_rewrite((mut chunk, transceiver): (Vec<u8>, SocketAddr)) -> (usize, Vec<u8>) {
    let headroom = 256;
    let frame = parse_udp(black_box(&chunk[headroom..])).unwrap();
    let plan = plan(Rewrite {
        payload_at: headroom + frame.payload_at,
        payload_len: frame.payload_len,
        skip: 0,
        frame_header_len: MAX_HEADER_LEN,
        to: transceiver,
    })
    .unwrap();
    let relay = if transceiver.is_ipv4() {
        SocketAddr::from(([10, 0, 0, 1], 40_000))
    } else {
        SocketAddr::from(([0xfd00, 0, 0, 0, 0, 0, 0, 1], 40_000))
    };
    let len = write_udp(
        &mut chunk[plan.start..],
        RELAY_MAC,
        CLIENT_MAC,
        relay,
        transceiver,
        plan.udp_payload_len,
    )
    .unwrap();
    (len, chunk)
}

library_benchmark_group!(
    name = rewrite;
    benchmarks = parse_plan_rewrite
);

main!(library_benchmark_groups = rewrite);
