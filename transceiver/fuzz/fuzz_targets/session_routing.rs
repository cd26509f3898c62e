//! Fuzz target: the transceiver's session table on any sequence of operations and
//! datagrams: sessions inserted, removed and rekeyed, paths learnt and admitted, and
//! arbitrary datagrams routed (the STUN attribute walk that finds a USERNAME, and the
//! path look-up). Never panics, and a datagram routes only to a live session: STUN with a
//! USERNAME to the one whose server ufrag it names, anything else to a path that session
//! holds.
#![no_main]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use ufrag_transceiver::session_table::{ClientPath, SessionTable};
use ufrag_common::stun::StunView;

/// The server ufrag of session `n` (a few fixed ones, so that fuzz bytes can name them).
fn ufrag(n: u8) -> String {
    format!("server-ufrag-{}", n % 4)
}

fn path(n: u8) -> ClientPath {
    ClientPath {
        client: SocketAddr::from(([198, 51, 100, n % 8], 5000 + u16::from(n % 3))),
        local: SocketAddr::from(([203, 0, 113, 1], 3478)),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut table: SessionTable<u8> = SessionTable::default();
    // What the table should hold: each live session's server ufrag.
    let mut ufrags: std::collections::HashMap<u64, String> = Default::default();
    let t0 = Instant::now();
    let mut rest = data;
    while let [op, a, b, len, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (payload, next) = tail.split_at(len);
        rest = next;
        let id = u64::from(*a % 6);
        let now = t0 + Duration::from_millis(u64::from(*b) * 100);
        match op % 6 {
            0 => {
                if table.insert(id, ufrag(*b), *a).is_ok() {
                    ufrags.insert(id, ufrag(*b));
                }
            }
            1 => {
                assert_eq!(table.remove(id).is_some(), ufrags.remove(&id).is_some());
            }
            2 => {
                if table.rekey(id, ufrag(*b)) {
                    ufrags.insert(id, ufrag(*b));
                }
            }
            3 => table.learn_path(id, path(*b)),
            4 => {
                let _ = table.admit_path(id, path(*b), now, |s| *s % 2 == 0);
            }
            _ => {
                let from = path(*b);
                let Ok(routed) = table.route(payload, from) else {
                    continue;
                };
                let live = ufrags.get(&routed).expect("routed to no live session");
                let named = StunView::parse(payload)
                    .ok()
                    .and_then(|view| view.ufrags().ok())
                    .map(|ufrags| ufrags.server);
                match named {
                    Some(named) => {
                        assert_eq!(named, live.as_bytes(), "routed to another's ufrag");
                    }
                    None => assert!(
                        table.paths(routed).contains(&from),
                        "routed by a path the session does not hold"
                    ),
                }
            }
        }
    }
});
