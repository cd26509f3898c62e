//! Wall-clock microbenchmarks (criterion) of every per-packet function in `common`.
//! Run: `cargo bench -p ufrag-common --bench hot_path`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ufrag_common::demux::DatagramKind;
use ufrag_common::flow::FlowKey;
use ufrag_common::frame::{FrameHeader, MAX_HEADER_LEN};
use ufrag_common::stun::StunView;

#[path = "fixtures.rs"]
mod fixtures;
use fixtures::*;

fn parsing(c: &mut Criterion) {
    let fp = first_packet();
    let mut g = c.benchmark_group("parse");
    g.bench_function("classify", |b| {
        b.iter(|| DatagramKind::classify(black_box(&RTP)))
    });
    g.bench_function("stun_view_and_username", |b| {
        b.iter(|| {
            let view = StunView::parse(black_box(&fp.request)).unwrap();
            view.ufrags().unwrap().server.len()
        })
    });
    g.bench_function("hint_decode_verify", |b| {
        b.iter(|| {
            fp.keys
                .verify(black_box(&fp.server_ufrag), &fp.allowed)
                .unwrap()
        })
    });
    g.bench_function("ice_password_derive", |b| {
        b.iter(|| {
            fp.keys
                .ice_password(1, black_box(&fp.server_ufrag))
                .unwrap()
        })
    });
    let view = StunView::parse(&fp.request).unwrap();
    g.bench_function("integrity_check", |b| {
        b.iter(|| {
            black_box(&view)
                .verify_integrity(fp.password.as_bytes())
                .unwrap()
        })
    });
    g.bench_function("fingerprint_check", |b| {
        b.iter(|| black_box(&view).verify_fingerprint().unwrap())
    });
    g.bench_function("first_packet_full", |b| {
        b.iter(|| {
            let view = StunView::parse(black_box(&fp.request)).unwrap();
            let server = view.ufrags().unwrap().server;
            let verified = fp.keys.verify(server, &fp.allowed).unwrap();
            let pwd = fp.keys.ice_password(verified.key_id, server).unwrap();
            view.verify_integrity(pwd.as_bytes()).unwrap();
            verified.hint.transceiver
        })
    });
    let header = FrameHeader::new("198.51.100.7:50000".parse().unwrap(), VIP);
    let mut out = [0u8; MAX_HEADER_LEN];
    g.bench_function("frame_emit", |b| {
        b.iter(|| black_box(&header).emit(&mut out).unwrap())
    });
    let mut frame = out[..header.encoded_len()].to_vec();
    frame.extend_from_slice(&RTP);
    g.bench_function("frame_parse", |b| {
        b.iter(|| FrameHeader::parse(black_box(&frame)).unwrap().0)
    });
    g.finish();
}

fn flow_table(c: &mut Criterion) {
    for (label, n) in [("1k", 1_000u32), ("1M", 1_000_000u32)] {
        let mut g = c.benchmark_group(format!("flow_{label}"));
        if n > 100_000 {
            g.sample_size(30).warm_up_time(Duration::from_secs(1));
        }
        let (mut table, t0) = full_table(n);
        let mut i = 0u64;
        g.bench_function("lookup_hit", |b| {
            b.iter(|| {
                i += 1;
                let key = flow_key(scattered(i, n));
                table.lookup(black_box(&key), t0).is_some()
            })
        });
        g.bench_function("lookup_miss", |b| {
            b.iter(|| {
                i += 1;
                table
                    .lookup(black_box(&missing_key(i as u32)), t0)
                    .is_none()
            })
        });
        // Insert a new flow and remove it again: the table stays at n - 1 + 1 flows.
        let evicted = flow_key(0);
        table.remove(&evicted);
        let dest = "10.0.0.2:40000".parse().unwrap();
        g.bench_function("insert_then_remove", |b| {
            b.iter(|| {
                i += 1;
                let key = missing_key(i as u32);
                table.insert(black_box(&key), dest, t0).unwrap();
                table.remove(&key)
            })
        });
        g.finish();
        drop(table);

        // Expiry: every flow is idle; each iteration expires the oldest and inserts a
        // flow that is itself already idle, so the table stays full and expirable.
        let mut g = c.benchmark_group(format!("flow_{label}"));
        if n > 100_000 {
            g.sample_size(30).warm_up_time(Duration::from_secs(1));
        }
        let (mut table, t0) = full_table(n);
        let later = t0 + IDLE;
        let mut next = n;
        g.bench_function("expire_one_then_insert", |b| {
            b.iter(|| {
                let (key, _) = table.pop_expired(black_box(later)).unwrap();
                next = next.wrapping_add(1);
                let fresh: FlowKey = flow_key(next);
                table.insert(&fresh, key.client, t0).unwrap()
            })
        });
        g.finish();
    }
}

criterion_group!(benches, parsing, flow_table);
criterion_main!(benches);
