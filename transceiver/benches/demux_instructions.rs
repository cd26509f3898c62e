//! Instruction counts (callgrind, via iai-callgrind) of the transceiver's per-datagram
//! demux outside str0m: which of a worker's 1000 sessions a datagram belongs to, a STUN
//! check by its server ufrag, media by its client path. Each bench routes 1000
//! datagrams (divide by 1000). Gated by `scripts/instructions.sh`.

use std::hint::black_box;
use std::net::SocketAddr;

use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use ufrag_transceiver::session_table::{ClientPath, SessionTable};

const SESSIONS: u64 = 1000;

/// A worker's session table and one datagram (with the path it came on) per session.
type Fixture = (SessionTable<()>, Vec<(Vec<u8>, ClientPath)>);

fn path(i: u64) -> ClientPath {
    ClientPath {
        client: SocketAddr::from(([198, 51, (i >> 8) as u8, i as u8], 50_000)),
        local: "203.0.113.10:3478".parse().unwrap(),
    }
}

fn ufrag(i: u64) -> String {
    format!("srv{i:029}")
}

/// A table of [`SESSIONS`] sessions, each with its ufrag and one learned path, and one
/// datagram per session: a Binding Request naming its ufrag (`stun`) or SRTP (`media`).
fn table(stun: bool) -> Fixture {
    let mut table = SessionTable::default();
    let mut datagrams = Vec::new();
    for i in 0..SESSIONS {
        table.insert(i, ufrag(i), ()).unwrap();
        table.learn_path(i, path(i));
        let datagram = if stun {
            let mut buf = [0u8; 256];
            let n = ufrag_common::stun::write_binding_request(
                &mut buf,
                &[7; 12],
                ufrag(i).as_bytes(),
                format!("cli{i}").as_bytes(),
                b"a-password-of-22-chars",
            )
            .unwrap();
            buf[..n].to_vec()
        } else {
            let mut rtp = vec![0x5a; 172];
            rtp[0] = 0x80;
            rtp
        };
        datagrams.push((datagram, path(i)));
    }
    (table, datagrams)
}

#[library_benchmark]
#[bench::stun_by_ufrag(table(true))]
#[bench::media_by_path(table(false))]
fn route_x1000((table, datagrams): Fixture) -> (u64, Fixture) {
    let mut routed = 0;
    for (datagram, path) in &datagrams {
        routed += u64::from(table.route(black_box(datagram), *path).is_ok());
    }
    (routed, (table, datagrams))
}

library_benchmark_group!(
    name = demux;
    benchmarks = route_x1000
);

main!(library_benchmark_groups = demux);
