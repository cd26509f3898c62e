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
//! - A fixed array of `AtomicU64`, sized at start from what the relay may admit in one window
//!   (`workers × new_flows_per_worker × window`, a power of two, within
//!   [`MIN_SLOTS`]..=[`MAX_SLOTS`]), in buckets of [`BUCKET`] slots (one cache line).
//! - A slot holds a 48-bit fingerprint of the transaction id (a keyed hash: collisions cannot
//!   be aimed at) and a 16-bit stamp (seconds, wrapping; the window is validated to be well
//!   under 2^16 s; an entry stamped up to a minute ahead of a worker's clock, by a worker
//!   that read the clock later, is fresh). Zero is empty. A request whose transaction created
//!   a flow is refused whatever its source: its own retransmission finds its flow and never
//!   gets here (an earlier version let "the same flow" through by 16 bits of a flow hash, and
//!   one replay in 65,536 got a second flow).
//! - Each transaction has two candidate buckets (the second differs from the first by a mix
//!   of its fingerprint, as in a cuckoo filter): it is written into the first while that has
//!   two free slots or more, else into the emptier (two choices where it matters: full
//!   buckets stay rare up to a full filter). [`ReplayFilter::seen`] reads both;
//!   [`ReplayFilter::claim`] writes the transaction into the first empty or stale slot of its
//!   bucket with a compare-and-swap, then reads the rest of both: two workers claiming the
//!   same transaction at once race for the same first free slot, and the loser finds the
//!   winner's entry. Had they chosen different buckets (only when the first is crowded),
//!   whoever sees the other's entry takes its own back (sequentially consistent, so at least
//!   one does): the copy is admitted at most once, and if both see, neither is, until the
//!   client's retransmission.
//! - If every slot of both is fresh (the relay admitted more than the filter holds: at the
//!   default rate and hint age, 6 workers or more admit more than [`MAX_SLOTS`] hold, and
//!   only at their whole rate for a whole hint age), the oldest entry is overwritten and
//!   counted (`ufrag_relay_replay_filter_overwrites_total`): that transaction could then be
//!   replayed once more, making at most one more flow within its session's cap, unproven.
//!   Refusing the new request instead would let a flood of authentic first requests (anyone
//!   with sessions can make them) refuse every new session for a whole hint age.
//! - No lock, no allocation after construction, O([`BUCKET`]) per call.

use core::hash::BuildHasher;
use std::hash::RandomState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Slots per bucket: one 64-byte cache line.
pub const BUCKET: usize = 8;
/// How far ahead of a worker's clock another worker may stamp an entry (their batches
/// read the clock at different moments) and have it still count as fresh.
const AHEAD: Duration = Duration::from_secs(64);
/// Free slots the first of a transaction's buckets keeps before the second is chosen.
const SPARE: usize = 2;
/// The smallest filter.
pub const MIN_SLOTS: usize = 1 << 12;
/// The largest filter (128 MiB); a relay that could admit more in one window overwrites
/// its oldest entries (counted).
pub const MAX_SLOTS: usize = 1 << 24;
/// The longest window a 16-bit stamp tells apart from an entry one wrap older, with room.
pub const MAX_WINDOW: Duration = Duration::from_secs(1 << 15);

const STAMP_BITS: u32 = 16;
const STAMP_MASK: u64 = (1 << STAMP_BITS) - 1;

/// A request's transaction was seen creating a flow within the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replayed;

/// The shared filter (see the module doc).
#[derive(Debug)]
pub struct ReplayFilter {
    slots: Box<[AtomicU64]>,
    bucket_mask: usize,
    hasher: RandomState,
    window_s: u64,
    epoch: Instant,
    overwritten: AtomicU64,
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
            overwritten: AtomicU64::new(0),
        }
    }

    /// Bytes the filter holds.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * core::mem::size_of::<AtomicU64>()
    }

    /// Fresh entries overwritten because their bucket was full: transactions that could
    /// be replayed once more. Non-zero means the filter is too small for the admission rate.
    pub fn overwritten(&self) -> u64 {
        self.overwritten.load(Ordering::Relaxed)
    }

    /// The transaction's two candidate buckets and its fingerprint.
    fn buckets(&self, transaction_id: &[u8; 12]) -> ([&[AtomicU64]; 2], u64) {
        let hash = self.hasher.hash_one(transaction_id);
        // The top 48 bits, never zero (zero marks an empty slot).
        let fingerprint = (hash >> STAMP_BITS).max(1);
        // The first bucket from the low bits; the second differs from it by a mix of the
        // whole fingerprint (as in a cuckoo filter), so sharing a second bucket says
        // nothing about two fingerprints' bits.
        let first = hash as usize & self.bucket_mask;
        let second = first
            ^ (fingerprint.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & self.bucket_mask;
        let bucket = |index: usize| &self.slots[index * BUCKET..(index + 1) * BUCKET];
        ([bucket(first), bucket(second)], fingerprint)
    }

    fn stamp(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_secs() & STAMP_MASK
    }

    /// How old `entry` is at `now_stamp`; an entry stamped up to [`AHEAD`] ahead (by a
    /// worker whose clock read a second later) is new, not a wrap old.
    fn age_s(&self, entry: u64, now_stamp: u64) -> u64 {
        let age = now_stamp.wrapping_sub(entry & STAMP_MASK) & STAMP_MASK;
        if age > STAMP_MASK - AHEAD.as_secs() {
            return 0;
        }
        age
    }

    fn fresh(&self, entry: u64, now_stamp: u64) -> bool {
        entry != 0 && self.age_s(entry, now_stamp) < self.window_s
    }

    /// Whether `entry` is a fresh record of `fingerprint`.
    fn holds(&self, entry: u64, fingerprint: u64, now_stamp: u64) -> bool {
        self.fresh(entry, now_stamp) && entry >> STAMP_BITS == fingerprint
    }

    /// Whether a slot of `bucket` other than `mine` holds `fingerprint`.
    fn held_in(
        &self,
        bucket: &[AtomicU64],
        fingerprint: u64,
        now_stamp: u64,
        mine: Option<&AtomicU64>,
    ) -> bool {
        bucket.iter().any(|slot| {
            !mine.is_some_and(|m| core::ptr::eq(m, slot))
                && self.holds(slot.load(Ordering::SeqCst), fingerprint, now_stamp)
        })
    }

    /// Whether `transaction_id` created a flow within the window. Reads only.
    pub fn seen(&self, transaction_id: &[u8; 12], now: Instant) -> Result<(), Replayed> {
        let (buckets, fingerprint) = self.buckets(transaction_id);
        let now_stamp = self.stamp(now);
        if buckets
            .iter()
            .any(|bucket| self.held_in(bucket, fingerprint, now_stamp, None))
        {
            return Err(Replayed);
        }
        Ok(())
    }

    /// Records that `transaction_id` creates a flow now, in the emptier of its two
    /// buckets, unless it was recorded first (then nothing is recorded and the request
    /// is a replay). With both buckets full of fresh entries, the oldest of them is
    /// overwritten ([`Claimed::Overwrote`]).
    pub fn claim(&self, transaction_id: &[u8; 12], now: Instant) -> Result<Claimed, Replayed> {
        let (buckets, fingerprint) = self.buckets(transaction_id);
        let now_stamp = self.stamp(now);
        let ours = fingerprint << STAMP_BITS | now_stamp;
        let fresh_in = |bucket: &[AtomicU64]| {
            (bucket.iter())
                .filter(|slot| self.fresh(slot.load(Ordering::Relaxed), now_stamp))
                .count()
        };
        // The first bucket while it has room to spare (so concurrent claims of one
        // transaction nearly always meet in one bucket), else the emptier.
        let [first, second] = buckets;
        let crowded = fresh_in(first) + SPARE > BUCKET;
        let (emptier, fuller) = if crowded && fresh_in(second) < fresh_in(first) {
            (second, first)
        } else {
            (first, second)
        };
        let claimed = match self.claim_in(emptier, ours, fingerprint, now_stamp)? {
            Some(slot) => Some(slot),
            None => self.claim_in(fuller, ours, fingerprint, now_stamp)?,
        };
        let (mine, claim) = match claimed {
            Some(slot) => (slot, Claimed::Recorded),
            // Both buckets are fresh and other transactions': the oldest entry goes.
            None => (
                self.overwrite_oldest([emptier, fuller], ours, now_stamp)
                    .ok_or(Replayed)?,
                Claimed::Overwrote,
            ),
        };
        // Another worker may have claimed it in the other bucket (or over another old
        // entry) at the same moment: whoever sees the other's entry takes its own back
        // (both may).
        if self.held_in(emptier, fingerprint, now_stamp, Some(mine))
            || self.held_in(fuller, fingerprint, now_stamp, Some(mine))
        {
            let _ = mine.compare_exchange(ours, 0, Ordering::SeqCst, Ordering::Relaxed);
            return Err(Replayed);
        }
        if claim == Claimed::Overwrote {
            self.overwritten.fetch_add(1, Ordering::Relaxed);
        }
        Ok(claim)
    }

    /// Writes `ours` over the oldest entry of `buckets` with a compare-and-swap from what
    /// was read (another worker writing there first makes it look again, a few times at
    /// most): the slot, or `None` if the slots kept changing under it.
    fn overwrite_oldest<'s>(
        &self,
        buckets: [&'s [AtomicU64]; 2],
        ours: u64,
        now_stamp: u64,
    ) -> Option<&'s AtomicU64> {
        for _ in 0..4 {
            let (oldest, entry) = (buckets[0].iter().chain(buckets[1]))
                .map(|slot| (slot, slot.load(Ordering::SeqCst)))
                .max_by_key(|(_, entry)| self.age_s(*entry, now_stamp))?;
            if oldest
                .compare_exchange(entry, ours, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Some(oldest);
            }
        }
        None
    }

    /// Writes `ours` into the first empty or stale slot of `bucket` with a
    /// compare-and-swap, then reads the rest of it: the slot, `None` if every slot is
    /// fresh, or a replay if a slot holds `fingerprint` (ours taken back). Two workers
    /// claiming the same transaction in one bucket race for the same first free slot,
    /// and the loser finds the winner's entry.
    fn claim_in<'s>(
        &self,
        bucket: &'s [AtomicU64],
        ours: u64,
        fingerprint: u64,
        now_stamp: u64,
    ) -> Result<Option<&'s AtomicU64>, Replayed> {
        let mut claimed: Option<&AtomicU64> = None;
        for slot in bucket {
            let mut entry = slot.load(Ordering::SeqCst);
            loop {
                if self.holds(entry, fingerprint, now_stamp) {
                    if let Some(mine) = claimed {
                        // Someone claimed it before us: take ours back.
                        let _ = mine.compare_exchange(ours, 0, Ordering::SeqCst, Ordering::Relaxed);
                    }
                    return Err(Replayed);
                }
                if claimed.is_some() || self.fresh(entry, now_stamp) {
                    break;
                }
                match slot.compare_exchange(entry, ours, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => {
                        claimed = Some(slot);
                        break;
                    }
                    // Another worker wrote here first: judge what it wrote.
                    Err(actual) => entry = actual,
                }
            }
        }
        Ok(claimed)
    }
}

/// How [`ReplayFilter::claim`] recorded a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// In a free or stale slot.
    Recorded,
    /// Over the oldest entry of its two full buckets: that older transaction could now
    /// be replayed once more (within its session's flow cap, as an unproven flow).
    Overwrote,
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
        assert_eq!(filter.claim(&txid(1), t0), Ok(Claimed::Recorded));
        assert_eq!(filter.seen(&txid(1), t0), Err(Replayed));
        assert_eq!(filter.claim(&txid(1), t0), Err(Replayed));
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

    /// Transactions whose first bucket is `first`'s (found by trying), `n` of them.
    fn sharing_a_first_bucket(filter: &ReplayFilter, first: &[u8; 12], n: usize) -> Vec<[u8; 12]> {
        let home = |t: &[u8; 12]| filter.buckets(t).0[0].as_ptr();
        (1..)
            .map(txid)
            .filter(|t| home(t) == home(first))
            .take(n)
            .collect()
    }

    #[test]
    fn a_crowded_first_bucket_sends_new_transactions_to_their_second() {
        let t0 = Instant::now();
        let filter = ReplayFilter::new(1, 1, Duration::from_secs(600), t0);
        let first = txid(0);
        filter.claim(&first, t0).unwrap();
        // Twice a bucket's worth share its first bucket: the later ones go to their
        // second, and nothing is overwritten.
        let mates = sharing_a_first_bucket(&filter, &first, 2 * BUCKET);
        for t in &mates {
            assert_eq!(filter.claim(t, t0), Ok(Claimed::Recorded));
        }
        assert_eq!(filter.overwritten(), 0);
        for t in mates.iter().chain([&first]) {
            assert_eq!(filter.seen(t, t0), Err(Replayed), "every one remembered");
        }
    }

    #[test]
    fn with_both_buckets_full_the_oldest_entry_is_overwritten_and_counted() {
        let t0 = Instant::now();
        let filter = ReplayFilter::new(1, 1, Duration::from_secs(600), t0);
        let first = txid(0);
        let [home, second] = filter.buckets(&first).0.map(<[AtomicU64]>::as_ptr);
        // Fill both of `first`'s buckets with other transactions, oldest first.
        let mut at = t0;
        for t in (1..).map(txid) {
            let full = |bucket: *const AtomicU64| {
                let slots = (filter.slots.iter())
                    .skip_while(|s| !core::ptr::eq(*s, bucket))
                    .take(BUCKET);
                slots.filter(|s| s.load(Ordering::Relaxed) != 0).count() == BUCKET
            };
            if full(home) && full(second) {
                break;
            }
            at += Duration::from_millis(100);
            filter.claim(&t, at).unwrap();
        }
        let before = filter.overwritten();
        assert_eq!(filter.claim(&first, at), Ok(Claimed::Overwrote));
        assert_eq!(filter.overwritten(), before + 1);
        assert_eq!(
            filter.seen(&first, at),
            Err(Replayed),
            "the newest is remembered"
        );
    }

    #[test]
    fn an_entry_stamped_a_second_ahead_of_a_workers_clock_is_fresh() {
        let t0 = Instant::now();
        let filter = ReplayFilter::new(2, 100, Duration::from_secs(60), t0);
        // One worker's batch read the clock in second 10, another's in second 9.
        let later = t0 + Duration::from_millis(10_100);
        let earlier = t0 + Duration::from_millis(9_900);
        assert_eq!(filter.claim(&txid(3), later), Ok(Claimed::Recorded));
        assert_eq!(filter.seen(&txid(3), earlier), Err(Replayed));
        assert_eq!(filter.claim(&txid(3), earlier), Err(Replayed));
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
