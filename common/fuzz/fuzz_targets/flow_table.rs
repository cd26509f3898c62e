//! Fuzz target: any sequence of flow-table operations agrees with an independent model
//! (a map of key → value and last use), and never panics. The model is never copied from
//! the table: every flow the table drops must be one the model says had expired.
//!
//! The table's recency list moves a flow at most once per epoch (1/32 of the idle
//! timeout), so expiry is exact only to within that slack: a flow idle for the timeout
//! *may* be gone, one idle for the timeout plus the slack *must* be reclaimable.
#![no_main]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use ufrag_common::flow::{FlowKey, FlowTable, InsertError};

const CAPACITY: usize = 8;
const IDLE: Duration = Duration::from_millis(100);
/// Two epochs of the recency list, rounded up to whole milliseconds.
const SLACK: Duration = Duration::from_millis(8);

#[derive(Clone, Copy)]
struct Modelled {
    value: u8,
    last_used: Instant,
}

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let mut table = FlowTable::<u8>::new(CAPACITY, IDLE, t0).unwrap();
    let mut model: HashMap<FlowKey, Modelled> = HashMap::new();
    let mut now = t0;
    let vip = SocketAddr::from(([203, 0, 113, 1], 3478));
    let idle = |m: &Modelled, now: Instant| now.saturating_duration_since(m.last_used);
    for chunk in data.chunks_exact(2) {
        let key = FlowKey::new(SocketAddr::from(([10, 0, 0, chunk[1] % 16], 1000)), vip);
        match chunk[0] % 5 {
            0 => {
                let existed = model.contains_key(&key);
                let full = model.len() == CAPACITY;
                let any_expired = model.values().any(|m| idle(m, now) >= IDLE);
                let surely_expired = model.values().any(|m| idle(m, now) >= IDLE + SLACK);
                let before: Vec<FlowKey> = model.keys().copied().collect();
                match table.insert(&key, chunk[1], now) {
                    Ok(_) => {
                        if !existed && full {
                            assert!(any_expired, "a live flow was evicted");
                            // Exactly one expired flow made room.
                            let gone: Vec<FlowKey> = before
                                .into_iter()
                                .filter(|k| table.peek(k).is_none())
                                .collect();
                            assert_eq!(gone.len(), 1, "one flow makes room");
                            let reclaimed = model.remove(&gone[0]).unwrap();
                            assert!(idle(&reclaimed, now) >= IDLE, "it had expired");
                        }
                        model.insert(
                            key,
                            Modelled {
                                value: chunk[1],
                                last_used: now,
                            },
                        );
                    }
                    Err(InsertError::TableFull) => {
                        assert!(!existed && full, "refused with room or for an update");
                        assert!(!surely_expired, "refused while a flow had long expired");
                    }
                }
            }
            1 => {
                let found = table.lookup(&key, now).map(|f| f.value);
                assert_eq!(found, model.get(&key).map(|m| m.value));
                if let Some(m) = model.get_mut(&key) {
                    m.last_used = now;
                }
            }
            2 => assert_eq!(
                table.remove(&key).map(|f| f.value),
                model.remove(&key).map(|m| m.value)
            ),
            3 => now += Duration::from_millis(u64::from(chunk[1])),
            _ => {
                while let Some((k, flow)) = table.pop_expired(now) {
                    let m = model.remove(&k).expect("an expired flow the model holds");
                    assert_eq!(flow.value, m.value);
                    assert!(idle(&m, now) >= IDLE, "expired before its time");
                }
                assert!(
                    model.values().all(|m| idle(m, now) < IDLE + SLACK),
                    "a long-expired flow was not expired"
                );
            }
        }
        assert_eq!(table.len(), model.len());
        for (k, m) in &model {
            assert_eq!(
                table.peek(k).map(|f| f.value),
                Some(m.value),
                "a flow was lost"
            );
        }
    }
});
