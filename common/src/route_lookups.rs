//! What asking the route cache may cost. A DTLS or RTP datagram from a client without a
//! flow makes the relay ask Redis for the flow's route (after a restart, the flow is
//! there). Sources are spoofable and every such datagram would be one Redis GET, so the
//! questions are bounded: a rate per source prefix and per worker (the fair
//! [`ArrivalRates`] that admission uses: a flood from many prefixes spends the worker's
//! rate and still leaves a fresh prefix its share), and a short memory of the flows
//! asked about: one whose question is still out ([`PENDING_MEMORY`]: its next packets
//! wait with the first, [`crate::execute`] asks once per flow, and they spend no token,
//! so after a restart each flow spends one however fast it sends) and one the cache did
//! not know ([`MISS_MEMORY`]), so one client repeating itself asks once.
//! Established flows never get here; no allocation after construction.

use core::hash::BuildHasher;
use std::hash::RandomState;
use std::time::{Duration, Instant};

use crate::admission::{ArrivalRates, RateSpent};
use crate::flow::FlowKey;
use crate::reasons::DropReason;

/// Route-cache lookups per second from one source prefix (and its burst): a relay
/// restart behind a corporate NAT restores this many of its users' flows a second; the
/// rest reconnect with their next consent check (about every 5 s) as any flow would.
pub const LOOKUPS_PER_PREFIX: u32 = 50;
/// Route-cache lookups per second in one worker (and its burst).
pub const LOOKUPS_PER_WORKER: u32 = 2_000;
/// How long a flow the cache did not know is not asked about again.
pub const MISS_MEMORY: Duration = Duration::from_secs(2);
/// How long a flow whose question is out is not asked about again: far longer than Redis
/// takes to answer, so a question lost with a slow or restarting Redis is asked again.
pub const PENDING_MEMORY: Duration = Duration::from_millis(100);
/// Flows whose miss is remembered at once (a direct-mapped array: a newer miss
/// replaces an older one in its slot, which at worst asks once more).
const MISS_SLOTS: usize = 4_096;

/// What a datagram without a flow does about its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Ask the cache.
    Ask,
    /// A question about its flow is out: wait for the answer.
    Wait,
}

/// A flow asked about: its tag (its keyed hash, 0 for none), until when (ms since the
/// start) it is not asked about again, and whether because its question is still out
/// (else the cache did not know it).
#[derive(Clone, Copy, Debug, Default)]
struct Asked {
    tag: u64,
    until_ms: u64,
    pending: bool,
}

/// One worker's bounds on route-cache lookups.
#[derive(Debug)]
pub struct RouteLookups {
    rates: ArrivalRates,
    hasher: RandomState,
    /// Per slot: the flow asked about ([`Asked`]).
    asked: Box<[Asked]>,
    started: Instant,
}

impl RouteLookups {
    /// Bounds for sources grouped by `prefix_lens` (IPv4, IPv6), the clock starting at
    /// `now`.
    pub fn new(prefix_lens: (u8, u8), now: Instant) -> Self {
        RouteLookups {
            rates: ArrivalRates::new(LOOKUPS_PER_PREFIX, LOOKUPS_PER_WORKER, prefix_lens, now),
            hasher: RandomState::new(),
            asked: vec![Asked::default(); MISS_SLOTS].into_boxed_slice(),
            started: now,
        }
    }

    /// Whether `key`'s route may be asked for at `now` (or waited for: its question is
    /// still out, which costs nothing more): not a recent miss, and a token from its
    /// prefix's and the worker's rates. The reason to drop the datagram if not.
    pub fn ask(&mut self, key: &FlowKey, now: Instant) -> Result<Lookup, DropReason> {
        let (slot, tag) = self.slot(key);
        let now_ms = self.ms(now);
        let asked = self.asked[slot];
        if asked.tag == tag && now_ms < asked.until_ms {
            return match asked.pending {
                true => Ok(Lookup::Wait),
                false => Err(DropReason::NoFlowRecentMiss),
            };
        }
        match self.rates.take(key.client.ip(), now) {
            Ok(()) => {
                self.remember(slot, tag, now_ms, PENDING_MEMORY, true);
                Ok(Lookup::Ask)
            }
            Err(RateSpent::Prefix | RateSpent::Worker) => Err(DropReason::NoFlowLookupRate),
        }
    }

    /// The cache did not know `key`'s flow at `now`: it is not asked about again for
    /// [`MISS_MEMORY`].
    pub fn missed(&mut self, key: &FlowKey, now: Instant) {
        let (slot, tag) = self.slot(key);
        let now_ms = self.ms(now);
        self.remember(slot, tag, now_ms, MISS_MEMORY, false);
    }

    /// Forgets that `key`'s flow was asked about (its question never left).
    pub fn forget(&mut self, key: &FlowKey) {
        let (slot, tag) = self.slot(key);
        if self.asked[slot].tag == tag {
            self.asked[slot] = Asked::default();
        }
    }

    /// Remembers in `slot` (a newer flow replaces an older one) the flow `tag` for `memory`.
    fn remember(&mut self, slot: usize, tag: u64, now_ms: u64, memory: Duration, pending: bool) {
        self.asked[slot] = Asked {
            tag,
            until_ms: now_ms.saturating_add(memory.as_millis() as u64),
            pending,
        };
    }

    /// `key`'s slot and its tag (never 0, which marks an empty slot).
    fn slot(&self, key: &FlowKey) -> (usize, u64) {
        let hash = self.hasher.hash_one(key);
        (hash as usize & (MISS_SLOTS - 1), hash.max(1))
    }

    fn ms(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.started).as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::SocketAddr;

    fn key(client: &str) -> FlowKey {
        FlowKey::new(client.parse().unwrap(), "203.0.113.1:3478".parse().unwrap())
    }

    #[test]
    fn a_miss_is_not_asked_again_until_its_memory_lapses() {
        let t0 = Instant::now();
        let mut lookups = RouteLookups::new((24, 56), t0);
        let k = key("198.51.100.7:5000");
        assert_eq!(lookups.ask(&k, t0), Ok(Lookup::Ask));
        lookups.missed(&k, t0);
        let soon = t0 + MISS_MEMORY / 2;
        assert_eq!(lookups.ask(&k, soon), Err(DropReason::NoFlowRecentMiss));
        assert_eq!(
            lookups.ask(&key("198.51.100.7:5001"), soon),
            Ok(Lookup::Ask),
            "another port of the same client is another flow"
        );
        assert_eq!(lookups.ask(&k, t0 + MISS_MEMORY), Ok(Lookup::Ask));
    }

    #[test]
    fn a_flow_whose_question_is_out_spends_no_more_tokens() {
        let t0 = Instant::now();
        let mut lookups = RouteLookups::new((24, 56), t0);
        let k = key("198.51.100.7:5000");
        assert_eq!(lookups.ask(&k, t0), Ok(Lookup::Ask));
        // Its next packets while Redis answers wait with the first (the executor asks
        // once per flow), and the prefix's burst is not spent by them.
        for ms in 1..100 {
            let at = t0 + Duration::from_millis(ms);
            assert_eq!(lookups.ask(&k, at), Ok(Lookup::Wait));
        }
        let others = (1..LOOKUPS_PER_PREFIX as u16)
            .filter(|port| {
                lookups
                    .ask(&key(&format!("198.51.100.8:{port}")), t0)
                    .is_ok()
            })
            .count();
        assert_eq!(
            others,
            LOOKUPS_PER_PREFIX as usize - 1,
            "the burst was spent once"
        );
        // An answer that never came: asked again once the question is stale.
        assert_eq!(
            lookups.ask(&k, t0 + PENDING_MEMORY + MISS_MEMORY),
            Ok(Lookup::Ask)
        );
    }

    #[test]
    fn one_prefix_asks_at_its_rate_and_leaves_another_prefix_its_own() {
        let t0 = Instant::now();
        let mut lookups = RouteLookups::new((24, 56), t0);
        let asked = (0..200u16)
            .filter(|port| {
                let client = SocketAddr::from(([198, 51, 100, 7], 1000 + port));
                lookups
                    .ask(
                        &FlowKey::new(client, "203.0.113.1:3478".parse().unwrap()),
                        t0,
                    )
                    .is_ok()
            })
            .count();
        assert_eq!(
            asked, LOOKUPS_PER_PREFIX as usize,
            "the prefix's burst, no more"
        );
        assert_eq!(
            lookups.ask(&key("198.51.100.200:9"), t0),
            Err(DropReason::NoFlowLookupRate),
            "the same /24"
        );
        assert_eq!(
            lookups.ask(&key("192.0.2.1:9"), t0),
            Ok(Lookup::Ask),
            "another /24"
        );
        assert_eq!(
            lookups.ask(&key("198.51.100.7:1000"), t0 + Duration::from_millis(100)),
            Ok(Lookup::Ask),
            "a tenth of a second refills five"
        );
    }

    #[test]
    fn a_flood_from_many_prefixes_asks_about_the_workers_rate() {
        let t0 = Instant::now();
        let mut lookups = RouteLookups::new((24, 56), t0);
        let asked = (0..20_000u32)
            .filter(|i| {
                let client = SocketAddr::from(((i << 8).to_be_bytes(), 7));
                lookups
                    .ask(
                        &FlowKey::new(client, "203.0.113.1:3478".parse().unwrap()),
                        t0,
                    )
                    .is_ok()
            })
            .count();
        assert!(
            asked <= LOOKUPS_PER_WORKER as usize,
            "{asked} lookups in one instant"
        );
    }
}
