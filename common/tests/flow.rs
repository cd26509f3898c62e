//! The flow table: behaviour, capacity, expiry, and a model-based property test against a
//! plain `HashMap` with explicit timestamps (the slow, obvious reference).

use core::net::SocketAddr;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use ufrag_common::flow::{CapacityError, FlowKey, FlowTable, InsertError, Inserted};

const IDLE: Duration = Duration::from_secs(30);

fn key(i: u16) -> FlowKey {
    FlowKey::new(
        SocketAddr::from(([198, 51, 100, (i % 250) as u8], 10_000 + i)),
        SocketAddr::from(([203, 0, 113, 10], 3478)),
    )
}

fn secs(t0: Instant, s: u64) -> Instant {
    t0 + Duration::from_secs(s)
}

#[test]
fn insert_lookup_update_remove() {
    let t0 = Instant::now();
    let mut table = FlowTable::<u32>::new(4, IDLE, t0).unwrap();
    assert!(table.is_empty());
    assert_eq!(table.insert(&key(1), 100, t0), Ok(Inserted::Created));
    assert_eq!(table.len(), 1);
    let flow = table.lookup(&key(1), t0).unwrap();
    assert_eq!(flow.value, 100);
    flow.record_in(200);
    flow.record_out(50);
    assert!(table.lookup(&key(2), t0).is_none());
    assert_eq!(table.insert(&key(1), 101, t0), Ok(Inserted::Updated));
    let flow = table.peek(&key(1)).unwrap();
    assert_eq!(flow.value, 101);
    assert_eq!(flow.stats.packets_in, 1, "update keeps the counters");
    assert_eq!(flow.stats.bytes_in, 200);
    assert_eq!(flow.stats.bytes_out, 50);
    assert_eq!(table.remove(&key(1)).unwrap().value, 101);
    assert!(table.peek(&key(1)).is_none());
    assert!(table.remove(&key(1)).is_none());
    let c = table.counters();
    assert_eq!((c.created, c.removed, c.expired, c.refused), (1, 1, 0, 0));
}

#[test]
fn same_client_on_two_vips_is_two_flows_and_ipv4_mapped_is_the_same_client() {
    let t0 = Instant::now();
    let mut table = FlowTable::<u8>::new(4, IDLE, t0).unwrap();
    let client: SocketAddr = "198.51.100.1:5000".parse().unwrap();
    let vip_a: SocketAddr = "203.0.113.10:3478".parse().unwrap();
    let vip_b: SocketAddr = "203.0.113.11:3478".parse().unwrap();
    table.insert(&FlowKey::new(client, vip_a), 1, t0).unwrap();
    table.insert(&FlowKey::new(client, vip_b), 2, t0).unwrap();
    assert_eq!(table.len(), 2);
    let mapped: SocketAddr = "[::ffff:198.51.100.1]:5000".parse().unwrap();
    assert_eq!(table.peek(&FlowKey::new(mapped, vip_a)).unwrap().value, 1);
}

#[test]
fn full_table_refuses_new_flows_and_keeps_live_ones() {
    let t0 = Instant::now();
    let mut table = FlowTable::<u16>::new(3, IDLE, t0).unwrap();
    for i in 0..3 {
        table.insert(&key(i), i, t0).unwrap();
    }
    assert_eq!(
        table.insert(&key(9), 9, secs(t0, 10)),
        Err(InsertError::TableFull)
    );
    assert_eq!(table.counters().refused, 1);
    for i in 0..3 {
        assert_eq!(
            table.lookup(&key(i), secs(t0, 10)).unwrap().value,
            i,
            "live flow kept"
        );
    }
    // Updating an existing flow is not a new flow: allowed when full.
    assert_eq!(
        table.insert(&key(1), 11, secs(t0, 10)),
        Ok(Inserted::Updated)
    );
}

#[test]
fn full_table_reclaims_only_an_expired_flow() {
    let t0 = Instant::now();
    let mut table = FlowTable::<u16>::new(2, IDLE, t0).unwrap();
    table.insert(&key(0), 0, t0).unwrap();
    table.insert(&key(1), 1, secs(t0, 20)).unwrap();
    // key(0) idle for 30 s at t=30: its slot is reused, key(1) (idle 10 s) stays.
    assert_eq!(
        table.insert(&key(2), 2, secs(t0, 30)),
        Ok(Inserted::Created)
    );
    assert!(table.peek(&key(0)).is_none());
    assert!(table.peek(&key(1)).is_some());
    assert_eq!(table.counters().expired, 1);
    assert_eq!(
        table.insert(&key(3), 3, secs(t0, 31)),
        Err(InsertError::TableFull)
    );
}

#[test]
fn idle_expiry_and_traffic_keeps_a_flow_alive() {
    let t0 = Instant::now();
    let mut table = FlowTable::<u16>::new(8, IDLE, t0).unwrap();
    table.insert(&key(0), 0, t0).unwrap();
    table.insert(&key(1), 1, t0).unwrap();
    table.lookup(&key(1), secs(t0, 20)).unwrap();
    assert_eq!(
        table.expire(t0 + IDLE - Duration::from_millis(1), 100),
        0,
        "not yet"
    );
    let (expired_key, flow) = table.pop_expired(t0 + IDLE).unwrap();
    assert_eq!((expired_key, flow.value), (key(0), 0));
    assert!(
        table.pop_expired(t0 + IDLE).is_none(),
        "key(1) was seen at t=20"
    );
    assert_eq!(table.expire(secs(t0, 50), 100), 1);
    assert!(table.is_empty());
    assert_eq!(table.counters().expired, 2);
}

#[test]
fn expiry_work_is_bounded_by_the_budget() {
    let t0 = Instant::now();
    let mut table = FlowTable::<u16>::new(100, IDLE, t0).unwrap();
    for i in 0..100 {
        table.insert(&key(i), i, t0).unwrap();
    }
    assert_eq!(table.expire(secs(t0, 60), 30), 30);
    assert_eq!(table.len(), 70);
    assert_eq!(table.expire(secs(t0, 60), 1000), 70);
}

#[test]
fn slots_are_reused_without_growing() {
    let t0 = Instant::now();
    let mut table = FlowTable::<u64>::new(16, IDLE, t0).unwrap();
    let bytes = table.memory_bytes();
    for round in 0..50u16 {
        for i in 0..16 {
            table.insert(&key(round * 16 + i), 0, t0).unwrap();
        }
        for i in 0..16 {
            table.remove(&key(round * 16 + i)).unwrap();
        }
    }
    assert_eq!(table.capacity(), 16);
    assert_eq!(table.memory_bytes(), bytes);
}

#[test]
fn capacity_errors() {
    let t0 = Instant::now();
    assert_eq!(
        FlowTable::<u8>::new(0, IDLE, t0).unwrap_err(),
        CapacityError::Zero
    );
    assert_eq!(
        FlowTable::<u8>::new(ufrag_common::flow::MAX_CAPACITY + 1, IDLE, t0).unwrap_err(),
        CapacityError::TooLarge
    );
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u32),
    Lookup(u16),
    Remove(u16),
    Expire,
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u16..40, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        4 => (0u16..40).prop_map(Op::Lookup),
        2 => (0u16..40).prop_map(Op::Remove),
        1 => Just(Op::Expire),
        2 => (0u16..20_000).prop_map(Op::Advance),
    ]
}

proptest! {
    /// The table behaves like a HashMap with last-seen times: same members, same values,
    /// and expiry within its documented precision: a flow is removed only once idle for
    /// the timeout, and is always removable once idle for the timeout plus one epoch
    /// (timeout / 32). A full table refuses a new flow only while no flow is that stale.
    #[test]
    fn matches_a_hashmap_model(
        ops in proptest::collection::vec(op(), 1..400),
        idle_ms in prop_oneof![Just(5_000u64), Just(64), Just(1)],
    ) {
        let t0 = Instant::now();
        let capacity = 16;
        let epoch_ms = (idle_ms / 32).max(1);
        let mut table = FlowTable::<u32>::new(capacity, Duration::from_millis(idle_ms), t0).unwrap();
        // value, last seen (ms)
        let mut model: HashMap<FlowKey, (u32, u64)> = HashMap::new();
        let mut now_ms = 0u64;
        for op in ops {
            let now = t0 + Duration::from_millis(now_ms);
            match op {
                Op::Insert(k, v) => {
                    let got = table.insert(&key(k), v, now);
                    if model.contains_key(&key(k)) {
                        prop_assert_eq!(got, Ok(Inserted::Updated));
                    } else if model.len() < capacity {
                        prop_assert_eq!(got, Ok(Inserted::Created));
                    } else if got == Ok(Inserted::Created) {
                        // Reclaimed exactly one flow, and it had expired.
                        let gone: Vec<FlowKey> = model.keys().filter(|k| table.peek(k).is_none()).copied().collect();
                        prop_assert_eq!(gone.len(), 1);
                        prop_assert!(now_ms - model[&gone[0]].1 >= idle_ms);
                        model.remove(&gone[0]);
                    } else {
                        prop_assert_eq!(got, Err(InsertError::TableFull));
                        prop_assert!(model.values().all(|(_, seen)| now_ms - seen < idle_ms + epoch_ms));
                        continue;
                    }
                    model.insert(key(k), (v, now_ms));
                }
                Op::Lookup(k) => {
                    let got = table.lookup(&key(k), now).map(|f| f.value);
                    let want = model.get_mut(&key(k)).map(|e| { e.1 = now_ms; e.0 });
                    prop_assert_eq!(got, want);
                }
                Op::Remove(k) => {
                    prop_assert_eq!(table.remove(&key(k)).map(|f| f.value), model.remove(&key(k)).map(|e| e.0));
                }
                Op::Expire => {
                    let before = model.len();
                    let expired = table.expire(now, usize::MAX);
                    let gone: Vec<FlowKey> = model.keys().filter(|k| table.peek(k).is_none()).copied().collect();
                    prop_assert_eq!(expired, gone.len());
                    for k in &gone {
                        prop_assert!(now_ms - model[k].1 >= idle_ms, "expired too early");
                        model.remove(k);
                    }
                    prop_assert!(model.values().all(|(_, seen)| now_ms - seen < idle_ms + epoch_ms), "expired too late");
                    prop_assert_eq!(before - expired, model.len());
                }
                Op::Advance(ms) => now_ms += u64::from(ms) * idle_ms / 5_000 + u64::from(ms % 3),
            }
            prop_assert_eq!(table.len(), model.len());
        }
        for (k, (v, _)) in &model {
            prop_assert_eq!(table.peek(k).map(|f| f.value), Some(*v));
        }
    }
}
