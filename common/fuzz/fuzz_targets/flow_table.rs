//! Fuzz target: any sequence of flow-table operations keeps the table consistent with a
//! HashMap model (membership and values) and never panics.
#![no_main]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use ufrag_common::flow::{FlowKey, FlowTable};

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let mut table = FlowTable::<u8>::new(8, Duration::from_millis(100), t0).unwrap();
    let mut model: HashMap<FlowKey, u8> = HashMap::new();
    let mut now = t0;
    let vip = SocketAddr::from(([203, 0, 113, 1], 3478));
    for chunk in data.chunks_exact(2) {
        let key = FlowKey::new(SocketAddr::from(([10, 0, 0, chunk[1] % 16], 1000)), vip);
        match chunk[0] % 5 {
            0 => {
                if table.insert(&key, chunk[1], now).is_ok() {
                    model.insert(key, chunk[1]);
                }
            }
            1 => assert_eq!(table.lookup(&key, now).map(|f| f.value), model.get(&key).copied()),
            2 => assert_eq!(table.remove(&key).map(|f| f.value), model.remove(&key)),
            3 => now += Duration::from_millis(u64::from(chunk[1])),
            _ => {
                while let Some((k, _)) = table.pop_expired(now) {
                    assert!(model.remove(&k).is_some());
                }
            }
        }
        // Inserts into a full table may reclaim an expired flow the model still holds.
        model.retain(|k, _| table.peek(k).is_some());
        assert_eq!(table.len(), model.len());
    }
});
