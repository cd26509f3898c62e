//! The return paths every worker of one relay process may take: a fixed-size, lock-free
//! set of the live flows' (client, VIP, next hop) with a last-seen stamp each, so that a
//! return frame that lands on a worker other than its flow's owner is still sent.
//!
//! # Why
//!
//! relay-mio gives each worker its own internal port, and the kernel hands a
//! transceiver's reply to the socket bound to that port: returns always reach the
//! flow's owner. relay-afxdp reads whole queues: the NIC's RSS hash puts a transceiver's
//! replies on any queue, so any worker must be able to decide any return frame. The
//! frame header names the client and the VIP; this set says whether that (client, VIP)
//! is a live flow whose next hop is the frame's source, which is the check the owner's
//! flow table makes. A frame for anything else is still refused (`return_no_flow`): the
//! relay never sends from its VIP to an address that has no flow.
//!
//! # Structure and concurrency
//!
//! - One array of slots, at most half full (`next_power_of_two(2 × flows)`), each two
//!   `AtomicU64`: a tag (a 64-bit SipHash of client, VIP and next hop under a random key
//!   chosen per process, so collisions cannot be aimed at) and a stamp (milliseconds since
//!   the set was made, shifted left 8 bits, with the index of the flow's global relay in
//!   the low 7 bits, 0 for none, and above them a bit set once a reader took a return of
//!   DTLS or media: the transceiver's half of the flow's proof, which the owner reads).
//! - Only a flow's owner publishes and withdraws its entry (so one flow has at most one
//!   entry); any worker reads. Publishing claims an empty or withdrawn slot with a compare-and-swap to a *reserved* tag, writes
//!   the stamp, then releases the real tag, so a reader never sees a tag with another
//!   flow's stamp. Withdrawing swaps the tag for a tombstone. Probes are linear and
//!   bounded ([`MAX_PROBE`]): a flow that finds no slot within them is not published
//!   (counted by the caller) and its returns are taken by its owner alone.
//! - A reader that takes a return refreshes the stamp (a compare-and-swap that keeps the
//!   global-relay bits, at most once per [`REFRESH_EVERY`]): the owner reads it before it
//!   expires a flow, so traffic towards the client keeps a flow alive whichever worker
//!   carries it, without a lock.
//! - Global relays' addresses live in a small append-only register ([`VIA_SLOTS`]); a flow
//!   through a global relay that does not fit there is not published.

use core::hash::BuildHasher;
use core::net::SocketAddr;
use std::hash::RandomState;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::flow::FlowKey;

const EMPTY: u64 = 0;
const TOMBSTONE: u64 = 1;
const RESERVED: u64 = 2;
/// Tags below this are the markers above; a hash that lands there is raised to it.
const FIRST_TAG: u64 = 3;
const LOW_BITS: u32 = 8;
const VIA_MASK: u64 = 0x7F;
const MEDIA_BIT: u64 = 0x80;
const _: () = assert!(VIA_SLOTS as u64 <= VIA_MASK);

/// Slots looked at from a flow's home slot before a publish gives up or a lookup says
/// "not here".
pub const MAX_PROBE: usize = 32;
/// Distinct global relays whose flows can be published.
pub const VIA_SLOTS: usize = 64;
/// A reader refreshes a stamp at most this often (stamps need no finer grain than the
/// flow table's own expiry precision).
pub const REFRESH_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug, Default)]
struct Slot {
    tag: AtomicU64,
    stamp: AtomicU64,
}

/// Where a return frame taken from the set goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedReturn {
    /// To the client, from the VIP the frame names.
    ToClient,
    /// The whole frame back to the global relay the flow came through.
    ViaRelay(SocketAddr),
}

/// The live flows' return paths, shared by every worker of one relay (see the module doc).
#[derive(Debug)]
pub struct SharedReturns {
    slots: Box<[Slot]>,
    mask: usize,
    hasher: RandomState,
    vias: Box<[OnceLock<SocketAddr>]>,
    epoch: Instant,
}

impl SharedReturns {
    /// A set with room for `flows` live flows over all workers, its clock starting at
    /// `epoch`.
    pub fn new(flows: usize, epoch: Instant) -> Self {
        let len = flows.saturating_mul(2).max(64).next_power_of_two();
        SharedReturns {
            slots: (0..len).map(|_| Slot::default()).collect(),
            mask: len - 1,
            hasher: RandomState::new(),
            vias: (0..VIA_SLOTS).map(|_| OnceLock::new()).collect(),
            epoch,
        }
    }

    /// Bytes the set holds (its slots).
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * core::mem::size_of::<Slot>()
    }

    fn tag(&self, key: &FlowKey, next_hop: SocketAddr) -> u64 {
        let mut bytes = [0u8; 72];
        bytes[..36].copy_from_slice(&key.hash_bytes());
        bytes[36..].copy_from_slice(&FlowKey::new(next_hop, next_hop).hash_bytes());
        self.hasher.hash_one(bytes).max(FIRST_TAG)
    }

    fn millis(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64
    }

    fn probe(&self, tag: u64) -> impl Iterator<Item = &Slot> {
        let home = tag as usize & self.mask;
        (0..MAX_PROBE.min(self.slots.len())).map(move |i| &self.slots[(home + i) & self.mask])
    }

    fn via_index(&self, via: Option<SocketAddr>) -> Option<u64> {
        let Some(via) = via else {
            return Some(0);
        };
        for (i, cell) in self.vias.iter().enumerate() {
            // Another owner may register in the same cell at the same time: read what won.
            let held = cell.get_or_init(|| via);
            if *held == via {
                return Some(i as u64 + 1);
            }
        }
        None
    }

    /// Publishes the owner's flow `key` going to `next_hop` (returning through `via`, for
    /// a flow that came through a global relay). False when it found no room: then only
    /// the owner takes its returns.
    pub fn publish(
        &self,
        key: &FlowKey,
        next_hop: SocketAddr,
        via: Option<SocketAddr>,
        now: Instant,
    ) -> bool {
        let Some(via) = self.via_index(via) else {
            return false;
        };
        let tag = self.tag(key, next_hop);
        let stamp = self.millis(now) << LOW_BITS | via;
        if let Some(slot) = self.find(tag) {
            // Published already (a restore of a flow we hold): refresh it.
            slot.stamp.store(stamp, Ordering::Relaxed);
            return true;
        }
        for slot in self.probe(tag) {
            let current = slot.tag.load(Ordering::Acquire);
            if current != EMPTY && current != TOMBSTONE {
                continue;
            }
            if slot
                .tag
                .compare_exchange(current, RESERVED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                slot.stamp.store(stamp, Ordering::Relaxed);
                slot.tag.store(tag, Ordering::Release);
                return true;
            }
        }
        false
    }

    /// Withdraws the owner's flow `key` going to `next_hop`; false if it was not there.
    pub fn withdraw(&self, key: &FlowKey, next_hop: SocketAddr) -> bool {
        let tag = self.tag(key, next_hop);
        for slot in self.probe(tag) {
            match slot.tag.load(Ordering::Acquire) {
                EMPTY => return false,
                t if t == tag => {
                    return slot
                        .tag
                        .compare_exchange(tag, TOMBSTONE, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok();
                }
                _ => {}
            }
        }
        false
    }

    fn find(&self, tag: u64) -> Option<&Slot> {
        for slot in self.probe(tag) {
            match slot.tag.load(Ordering::Acquire) {
                EMPTY => return None,
                t if t == tag => return Some(slot),
                _ => {}
            }
        }
        None
    }

    /// A return frame for `key` from `source`: where it goes if `key` is a live flow
    /// whose next hop is `source`, refreshing its stamp (and marking that the
    /// transceiver sent DTLS or media on it, for `media`); `None` otherwise.
    pub fn take_return(
        &self,
        key: &FlowKey,
        source: SocketAddr,
        media: bool,
        now: Instant,
    ) -> Option<SharedReturn> {
        let tag = self.tag(key, source);
        let slot = self.find(tag)?;
        let now_ms = self.millis(now);
        let refresh_ms = REFRESH_EVERY.as_millis() as u64;
        let mut stamp = slot.stamp.load(Ordering::Relaxed);
        let mark = if media { MEDIA_BIT } else { 0 };
        let stale = now_ms.saturating_sub(stamp >> LOW_BITS) >= refresh_ms;
        if stale || stamp & mark != mark {
            // Keeps the global-relay bits whatever they are: this never changes a route.
            let refreshed = slot
                .stamp
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    let at = (s >> LOW_BITS).max(now_ms);
                    let updated = at << LOW_BITS | (s & (VIA_MASK | MEDIA_BIT)) | mark;
                    (updated != s).then_some(updated)
                });
            stamp = refreshed.unwrap_or_else(|s| s);
        }
        // The slot may have been withdrawn and reused while we read it: then it is a miss.
        if slot.tag.load(Ordering::Acquire) != tag {
            return None;
        }
        match stamp & VIA_MASK {
            0 => Some(SharedReturn::ToClient),
            via => self
                .vias
                .get(via as usize - 1)
                .and_then(OnceLock::get)
                .map(|relay| SharedReturn::ViaRelay(*relay)),
        }
    }

    /// When a return for the owner's flow `key` going to `next_hop` was last taken by any
    /// worker (or the flow was published), if it is published.
    pub fn last_seen(&self, key: &FlowKey, next_hop: SocketAddr) -> Option<Instant> {
        let slot = self.find(self.tag(key, next_hop))?;
        let ms = slot.stamp.load(Ordering::Relaxed) >> LOW_BITS;
        Some(self.epoch + Duration::from_millis(ms))
    }

    /// Whether any worker took a return of DTLS or media for the owner's flow `key`
    /// going to `next_hop` since it was published.
    pub fn carried_media(&self, key: &FlowKey, next_hop: SocketAddr) -> bool {
        self.find(self.tag(key, next_hop))
            .is_some_and(|slot| slot.stamp.load(Ordering::Relaxed) & MEDIA_BIT != 0)
    }

    /// How many flows are published now (a scan: for tests and diagnostics, not the
    /// packet path).
    pub fn published(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.tag.load(Ordering::Relaxed) >= FIRST_TAG)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_published_flow_returns_only_from_its_next_hop_and_only_until_withdrawn() {
        let t0 = Instant::now();
        let set = SharedReturns::new(16, t0);
        let key = FlowKey::new(addr("192.0.2.7:5000"), addr("203.0.113.1:3478"));
        let hop = addr("10.0.0.3:41000");
        assert_eq!(
            set.take_return(&key, hop, false, t0),
            None,
            "nothing published yet"
        );
        assert!(set.publish(&key, hop, None, t0));
        assert_eq!(
            set.take_return(&key, hop, false, t0),
            Some(SharedReturn::ToClient)
        );
        assert_eq!(
            set.take_return(&key, addr("10.0.0.4:41000"), false, t0),
            None,
            "another transceiver may not answer for this flow"
        );
        let other_client = FlowKey::new(addr("192.0.2.7:5001"), key.vip);
        assert_eq!(set.take_return(&other_client, hop, false, t0), None);
        assert!(set.withdraw(&key, hop));
        assert!(!set.withdraw(&key, hop), "withdrawn once");
        assert_eq!(set.take_return(&key, hop, false, t0), None);
        assert_eq!(set.published(), 0);
    }

    #[test]
    fn taking_a_return_refreshes_the_stamp_the_owner_reads() {
        let t0 = Instant::now();
        let set = SharedReturns::new(16, t0);
        let key = FlowKey::new(addr("[2001:db8::7]:5000"), addr("[2001:db8::1]:3478"));
        let hop = addr("[fd00::3]:41000");
        assert!(set.publish(&key, hop, None, t0));
        assert_eq!(set.last_seen(&key, hop), Some(t0));
        let later = t0 + Duration::from_secs(10);
        set.take_return(&key, hop, false, later).unwrap();
        assert_eq!(set.last_seen(&key, hop), Some(later));
        // Within REFRESH_EVERY the stamp is not rewritten.
        set.take_return(&key, hop, false, later + REFRESH_EVERY / 2)
            .unwrap();
        assert_eq!(set.last_seen(&key, hop), Some(later));
        // An earlier time never moves it back.
        set.take_return(&key, hop, false, t0).unwrap();
        assert_eq!(set.last_seen(&key, hop), Some(later));
    }

    #[test]
    fn a_return_of_media_is_marked_for_the_owner_and_a_stun_answer_is_not() {
        let t0 = Instant::now();
        let set = SharedReturns::new(16, t0);
        let key = FlowKey::new(addr("198.51.100.7:5000"), addr("203.0.113.1:3478"));
        let hop = addr("10.0.0.3:41000");
        let via = addr("192.0.2.9:3479");
        assert!(set.publish(&key, hop, Some(via), t0));
        set.take_return(&key, hop, false, t0).unwrap();
        assert!(!set.carried_media(&key, hop));
        // Marked at once, even within REFRESH_EVERY, and the route is untouched.
        assert_eq!(
            set.take_return(&key, hop, true, t0),
            Some(SharedReturn::ViaRelay(via))
        );
        assert!(set.carried_media(&key, hop));
        set.take_return(&key, hop, false, t0 + REFRESH_EVERY)
            .unwrap();
        assert!(
            set.carried_media(&key, hop),
            "a later refresh keeps the mark"
        );
        assert_eq!(set.last_seen(&key, hop), Some(t0 + REFRESH_EVERY));
    }

    #[test]
    fn a_flow_through_a_global_relay_returns_to_that_relay() {
        let t0 = Instant::now();
        let set = SharedReturns::new(16, t0);
        let key = FlowKey::new(addr("192.0.2.7:5000"), addr("203.0.113.1:3478"));
        let hop = addr("10.0.0.3:41000");
        let global = addr("10.9.0.1:40000");
        assert!(set.publish(&key, hop, Some(global), t0));
        assert_eq!(
            set.take_return(&key, hop, false, t0 + Duration::from_secs(1)),
            Some(SharedReturn::ViaRelay(global)),
            "a refresh keeps the relay"
        );
        assert_eq!(
            set.take_return(&key, hop, false, t0 + Duration::from_secs(2)),
            Some(SharedReturn::ViaRelay(global))
        );
    }

    #[test]
    fn more_global_relays_than_the_register_holds_are_not_published() {
        let t0 = Instant::now();
        let set = SharedReturns::new(1024, t0);
        let hop = addr("10.0.0.3:41000");
        for i in 0..VIA_SLOTS {
            let key = FlowKey::new(addr(&format!("192.0.2.1:{}", 1000 + i)), hop);
            let via = addr(&format!("10.9.0.{}:40000", i + 1));
            assert!(set.publish(&key, hop, Some(via), t0), "relay {i}");
        }
        let key = FlowKey::new(addr("192.0.2.1:999"), hop);
        assert!(!set.publish(&key, hop, Some(addr("10.9.1.1:40000")), t0));
        assert!(set.publish(&key, hop, Some(addr("10.9.0.1:40000")), t0));
    }

    #[test]
    fn a_full_neighbourhood_refuses_instead_of_probing_forever() {
        let t0 = Instant::now();
        // 64 slots: publish until refused, then every published flow is still found.
        let set = SharedReturns::new(1, t0);
        let hop = addr("10.0.0.3:41000");
        let keys: Vec<FlowKey> = (0..200)
            .map(|i| FlowKey::new(addr(&format!("192.0.2.1:{}", 2000 + i)), hop))
            .collect();
        let published: Vec<&FlowKey> = keys
            .iter()
            .filter(|k| set.publish(k, hop, None, t0))
            .collect();
        assert_eq!(published.len(), 64, "every slot can be used, none twice");
        assert!(
            published
                .iter()
                .all(|k| set.take_return(k, hop, false, t0).is_some())
        );
        // Withdrawn slots are reused.
        assert!(set.withdraw(published[0], hop));
        let refused = keys.iter().find(|k| !published.contains(k)).unwrap();
        let mut reused = false;
        for k in keys.iter().filter(|k| !published.contains(k)) {
            if set.publish(k, hop, None, t0) {
                reused = true;
                break;
            }
        }
        assert!(
            reused,
            "a tombstone takes a new flow ({refused:?} and others tried)"
        );
    }

    #[test]
    fn workers_publishing_and_reading_at_once_never_see_a_wrong_route() {
        let t0 = Instant::now();
        let set = std::sync::Arc::new(SharedReturns::new(4096, t0));
        let hop = addr("10.0.0.3:41000");
        let global = addr("10.9.0.1:40000");
        let owners: Vec<_> = (0..2u16)
            .map(|w| {
                let set = set.clone();
                std::thread::spawn(move || {
                    for round in 0..200u16 {
                        for i in 0..64u16 {
                            let key = FlowKey::new(
                                SocketAddr::new([192, 0, 2, w as u8].into(), 1000 + i),
                                addr("203.0.113.1:3478"),
                            );
                            // Worker 1's flows come through the global relay.
                            let via = (w == 1).then_some(global);
                            assert!(set.publish(&key, hop, via, t0));
                            if round % 2 == 1 {
                                assert!(set.withdraw(&key, hop));
                            }
                        }
                    }
                })
            })
            .collect();
        let reader = {
            let set = set.clone();
            std::thread::spawn(move || {
                let mut taken = 0u64;
                for _ in 0..20_000 {
                    for w in 0..2u8 {
                        let key = FlowKey::new(
                            SocketAddr::new([192, 0, 2, w].into(), 1000),
                            addr("203.0.113.1:3478"),
                        );
                        if let Some(route) = set.take_return(&key, hop, false, Instant::now()) {
                            taken += 1;
                            let want = if w == 1 {
                                SharedReturn::ViaRelay(global)
                            } else {
                                SharedReturn::ToClient
                            };
                            assert_eq!(route, want, "worker {w}'s flow");
                        }
                    }
                }
                taken
            })
        };
        for o in owners {
            o.join().unwrap();
        }
        reader.join().unwrap();
        assert_eq!(
            set.published(),
            0,
            "every flow was withdrawn in the last round"
        );
    }
}
