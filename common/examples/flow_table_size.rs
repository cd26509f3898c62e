//! Prints the memory of the flow table: bytes per slot and the whole table (slots plus
//! index) at a given capacity, for the route types a relay might store.
//! Run: `cargo run --release -p ufrag-common --example flow_table_size [capacity]`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ufrag_common::flow::FlowTable;
use ufrag_common::forward::{FlowState, Route};

fn report<V: Copy>(what: &str, capacity: usize) {
    let table = FlowTable::<V>::new(capacity, Duration::from_secs(30), Instant::now())
        .expect("capacity is valid");
    let bytes = table.memory_bytes();
    println!(
        "{what:<22} slot {:>3} B   table of {capacity} flows: {bytes} B ({:.1} MiB, {:.1} B/flow incl. index)",
        FlowTable::<V>::slot_size(),
        bytes as f64 / (1024.0 * 1024.0),
        bytes as f64 / capacity as f64,
    );
}

fn main() {
    let capacity = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("capacity is a number"))
        .unwrap_or(1_000_000);
    report::<FlowState>("value = FlowState (relay)", capacity);
    report::<Route>("value = Route", capacity);
    report::<SocketAddr>("value = SocketAddr", capacity);
    report::<()>("value = ()", capacity);
}
