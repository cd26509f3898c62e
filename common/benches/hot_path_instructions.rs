//! Instruction counts (callgrind, via iai-callgrind) of the same per-packet functions as
//! `hot_path.rs`: repeatable on a shared machine, so CI can gate on them.
//! Run: `cargo bench -p ufrag-common --bench hot_path_instructions`
//! (needs valgrind and `iai-callgrind-runner` 0.16.1 on PATH).
//!
//! Parse benches do one operation; flow-table benches do [`OPS`] operations on a table
//! built in setup (not counted), so divide their counts by [`OPS`].

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use ufrag_common::demux::DatagramKind;
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
fn stun_view_and_username(fp: FirstPacket) -> usize {
    let view = StunView::parse(black_box(&fp.request)).unwrap();
    view.ufrags().unwrap().server.len()
}

#[library_benchmark]
#[bench::request(first_packet())]
fn hint_decode_verify(fp: FirstPacket) -> SocketAddr {
    fp.keys
        .verify(black_box(&fp.server_ufrag), &fp.allowed)
        .unwrap()
        .hint
        .transceiver
}

#[library_benchmark]
#[bench::request(first_packet())]
fn ice_password_derive(fp: FirstPacket) -> u8 {
    fp.keys
        .ice_password(1, black_box(&fp.server_ufrag))
        .unwrap()
        .as_bytes()[0]
}

#[library_benchmark]
#[bench::request(first_packet())]
fn integrity_check(fp: FirstPacket) -> bool {
    let view = StunView::parse(&fp.request).unwrap();
    black_box(view)
        .verify_integrity(fp.password.as_bytes())
        .is_ok()
}

#[library_benchmark]
#[bench::request(first_packet())]
fn first_packet_full(fp: FirstPacket) -> SocketAddr {
    let view = StunView::parse(black_box(&fp.request)).unwrap();
    let server = view.ufrags().unwrap().server;
    let verified = fp.keys.verify(server, &fp.allowed).unwrap();
    let pwd = fp.keys.ice_password(verified.key_id, server).unwrap();
    view.verify_integrity(pwd.as_bytes()).unwrap();
    verified.hint.transceiver
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
fn flow_lookup_hit_x1000((mut table, t0): (BenchTable, Instant)) -> usize {
    let n = table.len() as u32;
    let mut hits = 0;
    for i in 0..u64::from(OPS) {
        hits += usize::from(table.lookup(&flow_key(scattered(i, n)), t0).is_some());
    }
    hits
}

#[library_benchmark]
#[bench::flows_1k(full_table(1_000))]
#[bench::flows_1m(full_table(1_000_000))]
fn flow_lookup_miss_x1000((mut table, t0): (BenchTable, Instant)) -> usize {
    let mut misses = 0;
    for i in 0..OPS {
        misses += usize::from(table.lookup(&missing_key(i), t0).is_none());
    }
    misses
}

fn table_with_room(n: u32) -> (BenchTable, Instant) {
    let (mut table, t0) = full_table(n);
    table.remove(&flow_key(0));
    (table, t0)
}

#[library_benchmark]
#[bench::flows_1k(table_with_room(1_000))]
#[bench::flows_1m(table_with_room(1_000_000))]
fn flow_insert_then_remove_x1000((mut table, t0): (BenchTable, Instant)) -> usize {
    for i in 0..OPS {
        table.insert(&missing_key(i), VIP, t0).unwrap();
        table.remove(&missing_key(i));
    }
    table.len()
}

#[library_benchmark]
#[bench::flows_1k(full_table(1_000))]
#[bench::flows_1m(full_table(1_000_000))]
fn flow_expire_one_then_insert_x1000((mut table, t0): (BenchTable, Instant)) -> usize {
    let later = t0 + IDLE;
    let n = table.len() as u32;
    for i in 0..OPS {
        let (key, _) = table.pop_expired(later).unwrap();
        table.insert(&flow_key(n + i), key.client, t0).unwrap();
    }
    table.len()
}

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

main!(library_benchmark_groups = parse, flow_table);
