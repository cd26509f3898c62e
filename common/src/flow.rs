//! The flow table: a fixed-capacity map from (client address, VIP) to where the flow goes,
//! with per-flow counters and idle expiry, O(1) in every operation and allocation-free
//! after construction.
//!
//! # Structure
//!
//! - **Slots**: one preallocated array of entries (key, value, counters, last-seen time,
//!   LRU links). Free slots form a singly linked free list.
//! - **Index**: an open-addressing hash index with linear probing, at most half full
//!   (`buckets = next_power_of_two(2 × capacity)`), one `u64` per bucket holding 32 bits
//!   of the key's hash (the probe start and a filter) and the slot number. Deletion is
//!   backward-shift, so there are no tombstones and probe lengths never degrade.
//!   Hashing is SipHash keyed at random per table ([`std::hash::RandomState`]): clients
//!   choose their ports, so the index must not be predictable.
//! - **Recency list**: a doubly linked list through the slots, ordered by the *epoch* in
//!   which each flow was last moved to the head; an epoch is 1/32 of the idle timeout. A
//!   lookup records the exact last-seen time, but moves the flow to the head only when
//!   the epoch has changed since its last move: at most once per epoch per flow, instead
//!   of on every packet (each move touches two neighbours' cache lines; at 50 packets/s a
//!   voice flow moves about once in 50 packets at a 30 s timeout). Expiry pops from the
//!   tail, checking the exact last-seen time, O(1) per expired flow. A flow therefore
//!   expires once it has been idle for the timeout, and at the latest one epoch later
//!   (timeout × 33/32).
//!
//! Time is passed in (`now: Instant`) and never read here. When the table is full, a new
//! flow reclaims the least recently used slot only if that flow has already expired;
//! otherwise the insert is refused and counted. A live flow is never evicted.

use core::hash::BuildHasher;
use core::net::SocketAddr;
use std::hash::RandomState;
use std::time::{Duration, Instant};

const NIL: u32 = u32::MAX;
const EMPTY: u64 = 0;

/// The identity of a flow: the client's address and the VIP:port it sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// The client's public address.
    pub client: SocketAddr,
    /// The relay's public VIP:port the client used.
    pub vip: SocketAddr,
}

impl FlowKey {
    /// A flow key; IPv4-mapped IPv6 addresses are treated as the IPv4 address.
    pub fn new(client: SocketAddr, vip: SocketAddr) -> Self {
        FlowKey { client, vip }
    }

    /// The key as the 36 bytes the flow table hashes (IPv4 as IPv4-mapped IPv6): what
    /// another table keyed by an address pair can hash in one write too.
    pub fn hash_bytes(&self) -> [u8; 36] {
        self.pack().bytes()
    }

    fn pack(&self) -> PackedKey {
        PackedKey {
            client_ip: crate::wire::ip16(self.client.ip()),
            vip_ip: crate::wire::ip16(self.vip.ip()),
            client_port: self.client.port(),
            vip_port: self.vip.port(),
        }
    }
}

/// The key as stored: 36 bytes, IPv4 as IPv4-mapped IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PackedKey {
    client_ip: [u8; 16],
    vip_ip: [u8; 16],
    client_port: u16,
    vip_port: u16,
}

impl core::hash::Hash for PackedKey {
    /// One 36-byte write: a derived `Hash` would make six hasher calls (fields plus
    /// length prefixes), which costs more than the SipHash rounds themselves.
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        state.write(&self.bytes());
    }
}

impl PackedKey {
    /// The key as 36 bytes: both addresses (IPv4 mapped), then both ports.
    fn bytes(&self) -> [u8; 36] {
        let mut bytes = [0u8; 36];
        bytes[..16].copy_from_slice(&self.client_ip);
        bytes[16..32].copy_from_slice(&self.vip_ip);
        bytes[32..34].copy_from_slice(&self.client_port.to_ne_bytes());
        bytes[34..].copy_from_slice(&self.vip_port.to_ne_bytes());
        bytes
    }

    fn unpack(&self) -> FlowKey {
        FlowKey {
            client: SocketAddr::new(crate::wire::from_ip16(self.client_ip), self.client_port),
            vip: SocketAddr::new(crate::wire::from_ip16(self.vip_ip), self.vip_port),
        }
    }
}

/// Per-flow packet and byte counters. "In" is client → transceiver, "out" the reverse.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Datagrams forwarded from the client.
    pub packets_in: u64,
    /// Bytes forwarded from the client (datagram payload, without frame header).
    pub bytes_in: u64,
    /// Datagrams returned to the client.
    pub packets_out: u64,
    /// Bytes returned to the client.
    pub bytes_out: u64,
}

/// One flow: where it goes and what it carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow<V> {
    /// The caller's routing value (for a relay: the transceiver or next relay).
    pub value: V,
    /// Counters, updated by the caller.
    pub stats: FlowStats,
}

impl<V> Flow<V> {
    /// Counts one datagram of `bytes` from the client.
    #[inline]
    pub fn record_in(&mut self, bytes: usize) {
        self.stats.packets_in += 1;
        self.stats.bytes_in += bytes as u64;
    }

    /// Counts one datagram of `bytes` to the client.
    #[inline]
    pub fn record_out(&mut self, bytes: usize) {
        self.stats.packets_out += 1;
        self.stats.bytes_out += bytes as u64;
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot<V> {
    flow: Flow<V>,
    key: PackedKey,
    /// Milliseconds since the table's start.
    last_seen: u64,
    /// The recency epoch in which the slot last moved to the list head.
    moved_in_epoch: u32,
    /// Towards the head (more recent); NIL at the head.
    prev: u32,
    /// Towards the tail (less recent); NIL at the tail. Free list link for free slots.
    next: u32,
}

/// Table-wide counters, monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableCounters {
    /// Flows inserted.
    pub created: u64,
    /// Flows removed because they were idle for the timeout.
    pub expired: u64,
    /// Inserts refused because the table was full of live flows.
    pub refused: u64,
    /// Flows removed explicitly.
    pub removed: u64,
    /// Live flows removed by [`FlowTable::shed_where`] to make room.
    pub shed: u64,
}

/// What an insert did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// A new flow was created.
    Created,
    /// The flow existed; its value was replaced and its counters kept.
    Updated,
}

/// An insert that could not be done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// Every slot holds a live flow. Counted in [`TableCounters::refused`].
    TableFull,
}

/// An invalid table size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapacityError {
    /// Capacity must be at least 1.
    #[error("flow capacity must be at least 1")]
    Zero,
    /// Capacity must fit the 32-bit slot numbers (and the index must fit memory).
    #[error("flow capacity must be at most {}", MAX_CAPACITY)]
    TooLarge,
}

/// The largest supported capacity (2^30 flows).
pub const MAX_CAPACITY: usize = 1 << 30;

/// A fixed-capacity flow table. See the module documentation.
///
/// `S` builds the index hasher: [`RandomState`] (keyed SipHash-1-3, the default) in
/// production; a fixed-key hasher only where repeatable layouts matter (instruction-count
/// benchmarks).
#[derive(Debug)]
pub struct FlowTable<V, S = RandomState> {
    slots: Vec<Slot<V>>,
    buckets: Box<[u64]>,
    mask: usize,
    hasher: S,
    len: usize,
    /// Slots never used yet start at `fresh`; freed slots go to `free`.
    fresh: u32,
    free: u32,
    head: u32,
    tail: u32,
    epoch: Instant,
    idle_ms: u64,
    /// Length of a recency epoch in milliseconds: idle timeout / 32, at least 1.
    epoch_ms: u64,
    counters: TableCounters,
}

impl<V: Copy> FlowTable<V> {
    /// Allocates a table for `capacity` flows that expire after `idle_timeout` without
    /// traffic. `now` is the table's epoch; all later times must not be earlier.
    pub fn new(
        capacity: usize,
        idle_timeout: Duration,
        now: Instant,
    ) -> Result<Self, CapacityError> {
        Self::with_hasher(capacity, idle_timeout, now, RandomState::new())
    }
}

impl<V: Copy, S: BuildHasher> FlowTable<V, S> {
    /// Like [`FlowTable::new`], with the index hasher given.
    pub fn with_hasher(
        capacity: usize,
        idle_timeout: Duration,
        now: Instant,
        hasher: S,
    ) -> Result<Self, CapacityError> {
        if capacity == 0 {
            return Err(CapacityError::Zero);
        }
        if capacity > MAX_CAPACITY {
            return Err(CapacityError::TooLarge);
        }
        let buckets = (capacity * 2).next_power_of_two().max(16);
        Ok(FlowTable {
            slots: Vec::with_capacity(capacity),
            buckets: vec![EMPTY; buckets].into_boxed_slice(),
            mask: buckets - 1,
            hasher,
            len: 0,
            fresh: 0,
            free: NIL,
            head: NIL,
            tail: NIL,
            epoch: now,
            idle_ms: u64::try_from(idle_timeout.as_millis()).unwrap_or(u64::MAX),
            epoch_ms: u64::try_from(idle_timeout.as_millis() / 32)
                .unwrap_or(u64::MAX)
                .max(1),
            counters: TableCounters::default(),
        })
    }

    /// The idle timeout.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_ms)
    }

    /// The number of flows the table can hold.
    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// The number of flows in the table (including expired ones not yet reclaimed).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the table holds no flow.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Monotonic table counters.
    pub fn counters(&self) -> TableCounters {
        self.counters
    }

    /// Bytes of one slot, for capacity planning.
    pub const fn slot_size() -> usize {
        core::mem::size_of::<Slot<V>>()
    }

    /// Bytes this table holds: all slots and the index, allocated at construction.
    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * Self::slot_size() + self.buckets.len() * core::mem::size_of::<u64>()
    }

    fn ticks(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    fn hash(&self, key: &PackedKey) -> u32 {
        // Truncation intended: the low 32 bits pick the probe start and serve as a filter.
        self.hasher.hash_one(key) as u32
    }

    fn bucket_home(&self, bucket: u64) -> usize {
        (bucket >> 32) as usize & self.mask
    }

    /// Finds the bucket index holding `key`.
    fn find(&self, key: &PackedKey, hash: u32) -> Option<usize> {
        let mut at = hash as usize & self.mask;
        loop {
            let bucket = self.buckets[at];
            if bucket == EMPTY {
                return None;
            }
            if (bucket >> 32) as u32 == hash {
                let slot = (bucket as u32 - 1) as usize;
                if self.slots[slot].key == *key {
                    return Some(at);
                }
            }
            at = (at + 1) & self.mask;
        }
    }

    fn slot_of(&self, bucket_at: usize) -> u32 {
        self.buckets[bucket_at] as u32 - 1
    }

    /// Looks up a flow without touching its recency.
    pub fn peek(&self, key: &FlowKey) -> Option<&Flow<V>> {
        let key = key.pack();
        let at = self.find(&key, self.hash(&key))?;
        Some(&self.slots[self.slot_of(at) as usize].flow)
    }

    /// Looks up a flow and marks it used at `now`. The caller updates its counters.
    /// A flow that has idled past the timeout but was not expired yet is still returned:
    /// expiry happens in [`FlowTable::expire`] or when its slot is needed.
    #[inline]
    pub fn lookup(&mut self, key: &FlowKey, now: Instant) -> Option<&mut Flow<V>> {
        self.lookup_ticked(key, now).map(|(flow, _)| flow)
    }

    /// [`FlowTable::lookup`], also returning `now` on the table's clock
    /// ([`FlowTable::clock_ms`]), which the lookup reads anyway.
    #[inline]
    pub fn lookup_ticked(&mut self, key: &FlowKey, now: Instant) -> Option<(&mut Flow<V>, u64)> {
        let key = key.pack();
        let at = self.find(&key, self.hash(&key))?;
        let slot = self.slot_of(at);
        let now = self.ticks(now);
        self.touch(slot, now);
        Some((&mut self.slots[slot as usize].flow, now))
    }

    /// `now` on the table's clock: milliseconds since the table was made.
    pub fn clock_ms(&self, now: Instant) -> u64 {
        self.ticks(now)
    }

    /// Inserts a flow, or replaces the value of an existing one (keeping its counters),
    /// and marks it used at `now`. When the table is full, the least recently used flow
    /// is reclaimed only if it has expired; otherwise the insert is refused and counted.
    pub fn insert(
        &mut self,
        key: &FlowKey,
        value: V,
        now: Instant,
    ) -> Result<Inserted, InsertError> {
        let packed = key.pack();
        let hash = self.hash(&packed);
        let now_ms = self.ticks(now);
        if let Some(at) = self.find(&packed, hash) {
            let slot = self.slot_of(at);
            self.slots[slot as usize].flow.value = value;
            self.touch(slot, now_ms);
            return Ok(Inserted::Updated);
        }
        if self.len == self.capacity() && self.pop_expired_at(now_ms).is_none() {
            self.counters.refused += 1;
            return Err(InsertError::TableFull);
        }
        let entry = Slot {
            flow: Flow {
                value,
                stats: FlowStats::default(),
            },
            key: packed,
            last_seen: now_ms,
            moved_in_epoch: self.recency_epoch(now_ms),
            prev: NIL,
            next: NIL,
        };
        let slot = if self.free != NIL {
            let slot = self.free;
            self.free = self.slots[slot as usize].next;
            self.slots[slot as usize] = entry;
            slot
        } else {
            let slot = self.fresh;
            self.fresh += 1;
            // Within the capacity reserved at construction: never reallocates.
            self.slots.push(entry);
            slot
        };
        self.link_head(slot);
        let mut at = hash as usize & self.mask;
        while self.buckets[at] != EMPTY {
            at = (at + 1) & self.mask;
        }
        self.buckets[at] = u64::from(hash) << 32 | u64::from(slot + 1);
        self.len += 1;
        self.counters.created += 1;
        Ok(Inserted::Created)
    }

    /// Removes a flow, returning it.
    pub fn remove(&mut self, key: &FlowKey) -> Option<Flow<V>> {
        let packed = key.pack();
        let at = self.find(&packed, self.hash(&packed))?;
        let flow = self.release(at);
        self.counters.removed += 1;
        Some(flow)
    }

    /// How long the flow has been idle at `now`, without marking it used.
    pub fn idle_for(&self, key: &FlowKey, now: Instant) -> Option<Duration> {
        let key = key.pack();
        let at = self.find(&key, self.hash(&key))?;
        let last_seen = self.slots[self.slot_of(at) as usize].last_seen;
        Some(Duration::from_millis(
            self.ticks(now).saturating_sub(last_seen),
        ))
    }

    /// Removes the least recently used flow among the `scan` least recently used for
    /// which `shed(key, flow, idle at now)` holds, and returns it; counted in
    /// [`TableCounters::shed`]. O(`scan`).
    pub fn shed_where(
        &mut self,
        now: Instant,
        scan: usize,
        mut shed: impl FnMut(&FlowKey, &Flow<V>, Duration) -> bool,
    ) -> Option<(FlowKey, Flow<V>)> {
        let now_ms = self.ticks(now);
        let mut slot = self.tail;
        for _ in 0..scan {
            if slot == NIL {
                return None;
            }
            let entry = &self.slots[slot as usize];
            let idle = Duration::from_millis(now_ms.saturating_sub(entry.last_seen));
            if shed(&entry.key.unpack(), &entry.flow, idle) {
                let key = entry.key;
                let at = self
                    .find(&key, self.hash(&key))
                    .expect("every linked slot is indexed");
                let flow = self.release(at);
                self.counters.shed += 1;
                return Some((key.unpack(), flow));
            }
            slot = entry.prev;
        }
        None
    }

    /// Removes a flow its caller chose to give way to a new one, counted in
    /// [`TableCounters::shed`].
    pub fn shed(&mut self, key: &FlowKey) -> Option<Flow<V>> {
        let packed = key.pack();
        let at = self.find(&packed, self.hash(&packed))?;
        let flow = self.release(at);
        self.counters.shed += 1;
        Some(flow)
    }

    /// Counts an insert its caller refused for lack of room (in
    /// [`TableCounters::refused`], beside the ones the table refuses itself).
    pub fn refuse(&mut self) {
        self.counters.refused += 1;
    }

    /// The least recently used flow's key, if it has been idle for the timeout at `now`:
    /// what [`FlowTable::pop_expired`] would remove next.
    pub fn oldest_expired(&self, now: Instant) -> Option<FlowKey> {
        let tail = self.slots.get(self.tail as usize)?;
        (self.ticks(now).saturating_sub(tail.last_seen) >= self.idle_ms).then(|| tail.key.unpack())
    }

    /// Removes the least recently used flow if it has been idle for the timeout at `now`,
    /// returning its key and last state. Call in a loop (bounded by the caller) to expire.
    pub fn pop_expired(&mut self, now: Instant) -> Option<(FlowKey, Flow<V>)> {
        let now = self.ticks(now);
        self.pop_expired_at(now)
    }

    /// Expires up to `budget` idle flows; returns how many.
    pub fn expire(&mut self, now: Instant, budget: usize) -> usize {
        let now = self.ticks(now);
        let mut expired = 0;
        while expired < budget && self.pop_expired_at(now).is_some() {
            expired += 1;
        }
        expired
    }

    fn pop_expired_at(&mut self, now_ms: u64) -> Option<(FlowKey, Flow<V>)> {
        if self.tail == NIL {
            return None;
        }
        let tail = &self.slots[self.tail as usize];
        if now_ms.saturating_sub(tail.last_seen) < self.idle_ms {
            return None;
        }
        let key = tail.key;
        let at = self
            .find(&key, self.hash(&key))
            .expect("every linked slot is indexed");
        let flow = self.release(at);
        self.counters.expired += 1;
        Some((key.unpack(), flow))
    }

    /// Unlinks and frees the slot at bucket `at`, then closes the gap in the index.
    fn release(&mut self, at: usize) -> Flow<V> {
        let slot = self.slot_of(at);
        self.unlink(slot);
        let flow = self.slots[slot as usize].flow;
        self.slots[slot as usize].next = self.free;
        self.free = slot;
        self.len -= 1;

        // Backward-shift deletion: move later members of the probe run into the hole
        // when their home bucket is at or before it (cyclically).
        let mut hole = at;
        let mut probe = (at + 1) & self.mask;
        loop {
            let bucket = self.buckets[probe];
            if bucket == EMPTY {
                break;
            }
            let home = self.bucket_home(bucket);
            let dist_probe = probe.wrapping_sub(home) & self.mask;
            let dist_hole = hole.wrapping_sub(home) & self.mask;
            if dist_hole <= dist_probe {
                self.buckets[hole] = bucket;
                hole = probe;
            }
            probe = (probe + 1) & self.mask;
        }
        self.buckets[hole] = EMPTY;
        flow
    }

    fn recency_epoch(&self, now_ms: u64) -> u32 {
        // Wraps after 2^32 epochs (≥ 49 days at the smallest epoch): only equality is used.
        (now_ms / self.epoch_ms) as u32
    }

    fn touch(&mut self, slot: u32, now_ms: u64) {
        let epoch = self.recency_epoch(now_ms);
        let entry = &mut self.slots[slot as usize];
        entry.last_seen = now_ms;
        if entry.moved_in_epoch == epoch {
            return;
        }
        entry.moved_in_epoch = epoch;
        if self.head != slot {
            self.unlink(slot);
            self.link_head(slot);
        }
    }

    fn unlink(&mut self, slot: u32) {
        let Slot { prev, next, .. } = self.slots[slot as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    fn link_head(&mut self, slot: u32) {
        let old_head = self.head;
        {
            let s = &mut self.slots[slot as usize];
            s.prev = NIL;
            s.next = old_head;
        }
        if old_head == NIL {
            self.tail = slot;
        } else {
            self.slots[old_head as usize].prev = slot;
        }
        self.head = slot;
    }
}
