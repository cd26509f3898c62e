//! Instruction counts (callgrind, via iai-callgrind) of the same per-packet functions as
//! `hot_path.rs`: repeatable on a shared machine, so CI can gate on them.
//! Run: `cargo bench -p ufrag-common --bench hot_path_instructions`
//! (needs valgrind and `iai-callgrind-runner` 0.16.1 on PATH).
//!
//! Parse benches do one operation; flow-table benches do [`OPS`] operations on a table
//! built in setup (not counted), so divide their counts by [`OPS`]. Every bench that
//! takes a fixture hands it back, so that freeing it is not counted as its work.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use ufrag_common::demux::DatagramKind;
use ufrag_common::forward::{Forwarder, Verdict};
use ufrag_common::frame::{FrameHeader, MAX_HEADER_LEN};
use ufrag_common::stun::StunView;

#[path = "fixtures.rs"]
mod fixtures;
use fixtures::*;

const OPS: u32 = 1000;

#[library_benchmark]
fn classify() -> DatagramKind {
    DatagramKind::classify(black_box(&RTP))
}

#[library_benchmark]
#[bench::request(first_packet())]
fn stun_view_and_username(fp: FirstPacket) -> (usize, FirstPacket) {
    let view = StunView::parse(black_box(&fp.request)).unwrap();
    let len = view.ufrags().unwrap().server.len();
    (len, fp)
}

#[library_benchmark]
#[bench::request(first_packet())]
fn hint_decode_verify(fp: FirstPacket) -> (SocketAddr, FirstPacket) {
    let verified = fp.keys.verify(black_box(&fp.server_ufrag), &fp.allowed);
    (verified.unwrap().hint.transceiver, fp)
}

#[library_benchmark]
#[bench::request(first_packet())]
fn ice_password_derive(fp: FirstPacket) -> (u8, FirstPacket) {
    let first = fp
        .keys
        .ice_password(1, black_box(&fp.server_ufrag))
        .unwrap()
        .as_bytes()[0];
    (first, fp)
}

#[library_benchmark]
#[bench::request(first_packet())]
fn integrity_check(fp: FirstPacket) -> (bool, FirstPacket) {
    let view = StunView::parse(&fp.request).unwrap();
    let ok = black_box(view)
        .verify_integrity(fp.password.as_bytes())
        .is_ok();
    (ok, fp)
}

#[library_benchmark]
#[bench::request(first_packet())]
fn first_packet_full(fp: FirstPacket) -> (SocketAddr, FirstPacket) {
    let view = StunView::parse(black_box(&fp.request)).unwrap();
    let server = view.ufrags().unwrap().server;
    let verified = fp.keys.verify(server, &fp.allowed).unwrap();
    let pwd = fp.keys.ice_password(verified.key_id, server).unwrap();
    view.verify_integrity(pwd.as_bytes()).unwrap();
    (verified.hint.transceiver, fp)
}

#[library_benchmark]
fn frame_emit_and_parse() -> SocketAddr {
    let header = FrameHeader::new("198.51.100.7:50000".parse().unwrap(), VIP);
    let mut frame = [0u8; MAX_HEADER_LEN + RTP.len()];
    let n = black_box(&header).emit(&mut frame).unwrap();
    frame[n..n + RTP.len()].copy_from_slice(&RTP);
    FrameHeader::parse(black_box(&frame[..n + RTP.len()]))
        .unwrap()
        .0
        .client
}

#[library_benchmark]
#[bench::flows_1k(full_table(1_000))]
#[bench::flows_1m(full_table(1_000_000))]
fn flow_lookup_hit_x1000((mut table, t0): (BenchTable, Instant)) -> (usize, BenchTable) {
    let n = table.len() as u32;
    let mut hits = 0;
    for i in 0..u64::from(OPS) {
        hits += usize::from(table.lookup(&flow_key(scattered(i, n)), t0).is_some());
    }
    (hits, table)
}

#[library_benchmark]
#[bench::flows_1k(full_table(1_000))]
#[bench::flows_1m(full_table(1_000_000))]
fn flow_lookup_miss_x1000((mut table, t0): (BenchTable, Instant)) -> (usize, BenchTable) {
    let mut misses = 0;
    for i in 0..OPS {
        misses += usize::from(table.lookup(&missing_key(i), t0).is_none());
    }
    (misses, table)
}

fn table_with_room(n: u32) -> (BenchTable, Instant) {
    let (mut table, t0) = full_table(n);
    table.remove(&flow_key(0));
    (table, t0)
}

#[library_benchmark]
#[bench::flows_1k(table_with_room(1_000))]
#[bench::flows_1m(table_with_room(1_000_000))]
fn flow_insert_then_remove_x1000((mut table, t0): (BenchTable, Instant)) -> (usize, BenchTable) {
    for i in 0..OPS {
        table.insert(&missing_key(i), VIP, t0).unwrap();
        table.remove(&missing_key(i));
    }
    (table.len(), table)
}

#[library_benchmark]
#[bench::flows_1k(full_table(1_000))]
#[bench::flows_1m(full_table(1_000_000))]
fn flow_expire_one_then_insert_x1000(
    (mut table, t0): (BenchTable, Instant),
) -> (usize, BenchTable) {
    let later = t0 + IDLE;
    let n = table.len() as u32;
    for i in 0..OPS {
        let (key, _) = table.pop_expired(later).unwrap();
        table.insert(&flow_key(n + i), key.client, t0).unwrap();
    }
    (table.len(), table)
}

// The whole first-packet decision as a relay worker makes it: classify, STUN view, hint
// verify, password derivation, MESSAGE-INTEGRITY, admission and the flow insert. Each
// forward bench hands its forwarder back, so dropping it is not counted.
#[library_benchmark]
#[bench::own_cluster(fresh_forwarder(1))]
#[bench::global_mode(fresh_forwarder(2))]
fn forward_first_binding_request(
    (mut fwd, request, t0): (Forwarder, Vec<u8>, Instant),
) -> (bool, Forwarder) {
    let verdict = fwd.from_client(black_box(&request), client(), VIP, t0);
    (matches!(verdict, Verdict::Forward { .. }), fwd)
}

// An established flow's DTLS datagram, client to transceiver.
#[library_benchmark]
#[bench::flow(established_forwarder())]
fn forward_established_dtls((mut fwd, t0): (Forwarder, Instant)) -> (bool, Forwarder) {
    let verdict = fwd.from_client(black_box(&DTLS), client(), VIP, t0);
    (matches!(verdict, Verdict::Forward { .. }), fwd)
}

// An established flow's SRTP datagram, client to transceiver.
#[library_benchmark]
#[bench::flow(established_forwarder())]
fn forward_established_srtp((mut fwd, t0): (Forwarder, Instant)) -> (bool, Forwarder) {
    let verdict = fwd.from_client(black_box(&RTP), client(), VIP, t0);
    (matches!(verdict, Verdict::Forward { .. }), fwd)
}

fn established_with_return_frame() -> (Forwarder, Vec<u8>, Instant) {
    let (fwd, t0) = established_forwarder();
    (fwd, return_frame(), t0)
}

// The return path: a transceiver's frame checked against its flow, back to the client.
#[library_benchmark]
#[bench::flow(established_with_return_frame())]
fn forward_return_path(
    (mut fwd, frame, t0): (Forwarder, Vec<u8>, Instant),
) -> (bool, Forwarder, Vec<u8>) {
    let verdict = fwd.from_internal(black_box(&frame), transceiver(), t0);
    (matches!(verdict, Verdict::Return { .. }), fwd, frame)
}

library_benchmark_group!(
    name = forward;
    benchmarks = forward_first_binding_request, forward_established_dtls,
        forward_established_srtp, forward_return_path
);

library_benchmark_group!(
    name = parse;
    benchmarks = classify, stun_view_and_username, hint_decode_verify, ice_password_derive,
        integrity_check, first_packet_full, frame_emit_and_parse
);

library_benchmark_group!(
    name = flow_table;
    benchmarks = flow_lookup_hit_x1000, flow_lookup_miss_x1000, flow_insert_then_remove_x1000,
        flow_expire_one_then_insert_x1000
);

main!(library_benchmark_groups = parse, forward, flow_table);
