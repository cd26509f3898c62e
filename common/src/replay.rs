//! The replay filter one relay's workers share: a Binding Request that created a flow
//! creates no other from another address, whichever worker the copy reaches, for as long
//! as its hint could create flows at all.
//!
//! # Why one filter per relay
//!
//! SO_REUSEPORT hashes a copy of a captured request sent from another source port to
//! another worker; a filter per worker admits it once per worker. The window is the
//! hint's remaining life: a request names a hint that makes new flows only until
//! `hint_max_age` after it was minted (plus the allowed clock skew), so remembering a
//! transaction that long covers every replay that could succeed.
//!
//! # Structure and concurrency
//!
//! - A fixed array of `AtomicU64`, sized at start from what the relay may admit in one
//!   window (`workers × new_flows_per_worker × window`, a power of two, within
//!   [`MIN_SLOTS`]..=[`MAX_SLOTS`]), in buckets of [`BUCKET`] slots (one cache line).
//! - A slot holds a 48-bit fingerprint of the transaction id (a keyed hash: collisions
//!   cannot be aimed at) and a 16-bit stamp (seconds, wrapping; the window is validated to
//!   be well under 2^16 s). Zero is empty. A request whose transaction created a flow is
//!   refused whatever its source: its own retransmission finds its flow and never gets
//!   here (an earlier version let "the same flow" through by 16 bits of a flow hash, and
//!   one replay in 65,536 got a second flow).
//! - [`ReplayFilter::seen`] reads a bucket; [`ReplayFilter::claim`] writes the
//!   transaction into the first empty or stale slot with a compare-and-swap, then reads
//!   the rest of the bucket: two workers claiming the same transaction at once race for
//!   the same first free slot, and the loser finds the winner's entry. If every slot of a
//!   bucket is fresh (the relay admitted more than it was sized for, or the filter is at
//!   [`MAX_SLOTS`]), the request is refused ([`NotClaimed::Full`], counted): forgetting
//!   an entry to make room would let that transaction be replayed once more. At the
//!   default admission rate the filter reaches [`MAX_SLOTS`] with 6 workers, and a bucket
//!   fills only when the relay admits near its whole rate for a whole window.
//! - No lock, no allocation after construction, O([`BUCKET`]) per call.

use core::hash::BuildHasher;
use std::hash::RandomState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Slots per bucket: one 64-byte cache line.
pub const BUCKET: usize = 8;
/// The smallest filter.
pub const MIN_SLOTS: usize = 1 << 12;
/// The largest filter (128 MiB); a relay that admits more in one window than it holds
/// refuses the requests whose bucket is full (counted) rather than forget a transaction.
pub const MAX_SLOTS: usize = 1 << 24;
/// The longest window a 16-bit stamp tells apart from an entry one wrap older, with room.
pub const MAX_WINDOW: Duration = Duration::from_secs(1 << 15);

const STAMP_BITS: u32 = 16;
const STAMP_MASK: u64 = (1 << STAMP_BITS) - 1;

/// A request's transaction was seen creating a flow within the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replayed;

/// Why [`ReplayFilter::claim`] recorded nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotClaimed {
    /// The transaction created a flow within the window.
    Replayed,
    /// Every slot of its bucket holds another transaction still within the window: it
    /// cannot be remembered, so it may not create a flow.
    Full,
}

/// The shared filter (see the module doc).
#[derive(Debug)]
pub struct ReplayFilter {
    slots: Box<[AtomicU64]>,
    bucket_mask: usize,
    hasher: RandomState,
    window_s: u64,
    epoch: Instant,
    full: AtomicU64,
}

impl ReplayFilter {
    /// A filter remembering each transaction for `window`, sized for `workers` workers
    /// admitting `new_flows_per_worker` flows per second each, its clock starting at `epoch`.
    pub fn new(
        workers: usize,
        new_flows_per_worker: u32,
        window: Duration,
        epoch: Instant,
    ) -> Self {
        let window = window.min(MAX_WINDOW);
        let admitted = (workers.max(1) as u64)
            .saturating_mul(u64::from(new_flows_per_worker))
            .saturating_mul(window.as_secs().max(1));
        let len = usize::try_from(admitted)
            .unwrap_or(MAX_SLOTS)
            .clamp(MIN_SLOTS, MAX_SLOTS)
            .next_power_of_two();
        ReplayFilter {
            slots: (0..len).map(|_| AtomicU64::new(0)).collect(),
            bucket_mask: len / BUCKET - 1,
            hasher: RandomState::new(),
            window_s: window.as_secs().max(1),
            epoch,
            full: AtomicU64::new(0),
        }
    }

    /// Bytes the filter holds.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * core::mem::size_of::<AtomicU64>()
    }

    /// Requests refused because their bucket was full of fresh entries. Non-zero means
    /// the filter is too small for the rate the relay admitted at.
    pub fn full(&self) -> u64 {
        self.full.load(Ordering::Relaxed)
    }

    fn bucket(&self, transaction_id: &[u8; 12]) -> (&[AtomicU64], u64) {
        let hash = self.hasher.hash_one(transaction_id);
        let at = (hash as usize & self.bucket_mask) * BUCKET;
        // The top 48 bits, never zero (zero marks an empty slot).
        let fingerprint = (hash >> STAMP_BITS).max(1);
        (&self.slots[at..at + BUCKET], fingerprint)
    }

    fn stamp(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_secs() & STAMP_MASK
    }

    fn age_s(&self, entry: u64, now_stamp: u64) -> u64 {
        now_stamp.wrapping_sub(entry & STAMP_MASK) & STAMP_MASK
    }

    fn fresh(&self, entry: u64, now_stamp: u64) -> bool {
        entry != 0 && self.age_s(entry, now_stamp) < self.window_s
    }

    /// Whether `entry` is a fresh record of `fingerprint`.
    fn holds(&self, entry: u64, fingerprint: u64, now_stamp: u64) -> bool {
        self.fresh(entry, now_stamp) && entry >> STAMP_BITS == fingerprint
    }

    /// Whether `transaction_id` created a flow within the window. Reads only.
    pub fn seen(&self, transaction_id: &[u8; 12], now: Instant) -> Result<(), Replayed> {
        let (bucket, fingerprint) = self.bucket(transaction_id);
        let now_stamp = self.stamp(now);
        let held =
            |slot: &AtomicU64| self.holds(slot.load(Ordering::Acquire), fingerprint, now_stamp);
        if bucket.iter().any(held) {
            return Err(Replayed);
        }
        Ok(())
    }

    /// Records that `transaction_id` creates a flow now, unless it was recorded first
    /// (then nothing is recorded and the request is a replay) or its bucket is full.
    pub fn claim(&self, transaction_id: &[u8; 12], now: Instant) -> Result<(), NotClaimed> {
        let (bucket, fingerprint) = self.bucket(transaction_id);
        let now_stamp = self.stamp(now);
        let ours = fingerprint << STAMP_BITS | now_stamp;
        let mut claimed: Option<&AtomicU64> = None;
        for slot in bucket {
            let mut entry = slot.load(Ordering::Acquire);
            loop {
                if self.holds(entry, fingerprint, now_stamp) {
                    if let Some(mine) = claimed {
                        // Someone claimed it before us: take ours back.
                        let _ = mine.compare_exchange(ours, 0, Ordering::AcqRel, Ordering::Relaxed);
                    }
                    return Err(NotClaimed::Replayed);
                }
                if claimed.is_some() || self.fresh(entry, now_stamp) {
                    break;
                }
                match slot.compare_exchange(entry, ours, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        claimed = Some(slot);
                        break;
                    }
                    // Another worker wrote here first: judge what it wrote.
                    Err(actual) => entry = actual,
                }
            }
        }
        if claimed.is_none() {
            // Every slot is fresh and another transaction's.
            self.full.fetch_add(1, Ordering::Relaxed);
            return Err(NotClaimed::Full);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn txid(i: u32) -> [u8; 12] {
        let mut t = [7u8; 12];
        t[..4].copy_from_slice(&i.to_be_bytes());
        t
    }

    #[test]
    fn a_claimed_transaction_is_a_replay_until_the_window_ends() {
        let t0 = Instant::now();
        let filter = ReplayFilter::new(1, 100, Duration::from_secs(60), t0);
        assert_eq!(filter.seen(&txid(1), t0), Ok(()));
        assert_eq!(filter.claim(&txid(1), t0), Ok(()));
        assert_eq!(filter.seen(&txid(1), t0), Err(Replayed));
        assert_eq!(filter.claim(&txid(1), t0), Err(NotClaimed::Replayed));
        let late = t0 + Duration::from_secs(59);
        assert_eq!(filter.seen(&txid(1), late), Err(Replayed));
        let after = t0 + Duration::from_secs(60);
        assert_eq!(filter.seen(&txid(1), after), Ok(()));
        // Another transaction was never affected.
        assert_eq!(filter.seen(&txid(2), t0), Ok(()));
    }

    #[test]
    fn ten_thousand_replays_are_all_refused() {
        let t0 = Instant::now();
        let filter = ReplayFilter::new(1, 5000, Duration::from_secs(630), t0);
        filter.claim(&txid(7), t0).unwrap();
        let admitted = (0..10_000u64)
            .filter(|i| {
                let at = t0 + Duration::from_millis(*i);
                filter.seen(&txid(7), at).is_ok() && filter.claim(&txid(7), at).is_ok()
            })
            .count();
        assert_eq!(admitted, 0);
    }

    #[test]
    fn it_is_sized_from_what_the_relay_may_admit_in_one_window() {
        let t0 = Instant::now();
        let small = ReplayFilter::new(1, 10, Duration::from_secs(10), t0);
        assert_eq!(small.memory_bytes(), MIN_SLOTS * 8);
        let sized = ReplayFilter::new(4, 1000, Duration::from_secs(300), t0);
        assert_eq!(
            sized.memory_bytes(),
            (4 * 1000 * 300usize).next_power_of_two() * 8
        );
        let capped = ReplayFilter::new(64, 10_000_000, Duration::from_secs(3600), t0);
        assert_eq!(capped.memory_bytes(), MAX_SLOTS * 8);
    }

    #[test]
    fn a_full_bucket_refuses_a_new_transaction_and_forgets_none() {
        let t0 = Instant::now();
        let filter = ReplayFilter::new(1, 1, Duration::from_secs(600), t0);
        // Transactions that share the first one's bucket, found by trying.
        let home = |t: &[u8; 12]| filter.bucket(t).0.as_ptr();
        let first = txid(0);
        let mates: Vec<[u8; 12]> = (1..)
            .map(txid)
            .filter(|t| home(t) == home(&first))
            .take(BUCKET)
            .collect();
        filter.claim(&first, t0).unwrap();
        for (i, t) in mates[..BUCKET - 1].iter().enumerate() {
            filter
                .claim(t, t0 + Duration::from_secs(1 + i as u64))
                .unwrap();
        }
        let now = t0 + Duration::from_secs(BUCKET as u64 + 1);
        let one_too_many = &mates[BUCKET - 1];
        assert_eq!(filter.claim(one_too_many, now), Err(NotClaimed::Full));
        assert_eq!(filter.full(), 1);
        // Nothing was forgotten: the oldest is still a replay.
        assert_eq!(filter.seen(&first, now), Err(Replayed));
        assert_eq!(filter.claim(&first, now), Err(NotClaimed::Replayed));
        assert_eq!(filter.seen(one_too_many, now), Ok(()), "not recorded");
        // Once the oldest leaves the window, its slot takes the next.
        let later = t0 + Duration::from_secs(600);
        assert_eq!(filter.claim(one_too_many, later), Ok(()));
    }

    #[test]
    fn workers_claiming_one_transaction_at_once_admit_it_once() {
        let t0 = Instant::now();
        for round in 0..200u32 {
            let filter = Arc::new(ReplayFilter::new(2, 100, Duration::from_secs(60), t0));
            let barrier = Arc::new(std::sync::Barrier::new(4));
            let admitted: usize = (0..4)
                .map(|_| {
                    let (filter, barrier) = (Arc::clone(&filter), Arc::clone(&barrier));
                    std::thread::spawn(move || {
                        barrier.wait();
                        filter.claim(&txid(round), t0).is_ok()
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|worker| usize::from(worker.join().unwrap()))
                .sum();
            assert_eq!(admitted, 1, "round {round}");
        }
    }
}
