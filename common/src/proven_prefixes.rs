//! How many proven flows each client prefix holds in one worker's table, and the cap that
//! keeps one prefix from holding more than its share of the flows that are never shed for
//! a newcomer.
//!
//! A flow proves itself only when something at its client address receives (the
//! transceiver's DTLS or media reached it on a path that answered a probe), so filling a
//! table with proven flows takes addresses that really receive, and real sessions for
//! each. This bounds what one prefix of such addresses (/24 and /56 by default, the
//! prefixes admission rates by) can hold to [`PROVEN_SHARE`] of the table, at least
//! [`MIN_PROVEN_PER_PREFIX`]: generous for a carrier's NAT, whose users share a prefix. A
//! flow that proves itself over the cap keeps working: it stays unproven (it may be shed
//! for a newcomer when the table is full, and is not written to the route cache).
//!
//! Counts are kept per hashed prefix in a fixed array (no allocation, O(1)): two prefixes
//! that share a slot share a cap. The hash is keyed at start, so a collision cannot be
//! aimed, and what it costs the other prefix is only that its flows over the shared cap
//! stay sheddable.

use core::hash::BuildHasher;
use std::hash::RandomState;
use std::net::IpAddr;

/// The share of the table one prefix's proven flows may take: one sixteenth.
pub const PROVEN_SHARE: usize = 16;
/// The cap for any table, however small.
pub const MIN_PROVEN_PER_PREFIX: u32 = 64;
/// Prefix slots counted.
const SLOTS: usize = 1 << 16;

/// Proven flows per client prefix in one table (see the module doc).
#[derive(Debug)]
pub struct ProvenPrefixes {
    cap: u32,
    prefix_len_v4: u8,
    prefix_len_v6: u8,
    hasher: RandomState,
    counts: Box<[u32]>,
}

impl ProvenPrefixes {
    /// The counts for a table of `capacity` flows, prefixes of `(v4, v6)` lengths.
    pub fn new(capacity: usize, (prefix_len_v4, prefix_len_v6): (u8, u8)) -> Self {
        let share = u32::try_from(capacity / PROVEN_SHARE).unwrap_or(u32::MAX);
        ProvenPrefixes {
            cap: share.max(MIN_PROVEN_PER_PREFIX),
            prefix_len_v4,
            prefix_len_v6,
            hasher: RandomState::new(),
            counts: vec![0; SLOTS].into_boxed_slice(),
        }
    }

    /// The most proven flows one prefix may hold.
    pub fn cap(&self) -> u32 {
        self.cap
    }

    /// A flow from `client` proved itself: true (and counted) if its prefix holds fewer
    /// than the cap; false if the flow must stay unproven.
    pub fn prove(&mut self, client: IpAddr) -> bool {
        let slot = self.slot(client);
        let count = &mut self.counts[slot];
        if *count >= self.cap {
            return false;
        }
        *count += 1;
        true
    }

    /// A proven flow from `client` left the table.
    pub fn forget(&mut self, client: IpAddr) {
        let slot = self.slot(client);
        self.counts[slot] = self.counts[slot].saturating_sub(1);
    }

    /// Proven flows `client`'s prefix holds (with any prefix sharing its slot).
    pub fn held(&self, client: IpAddr) -> u32 {
        self.counts[self.slot(client)]
    }

    fn slot(&self, client: IpAddr) -> usize {
        let prefix = crate::wire::source_prefix(client, self.prefix_len_v4, self.prefix_len_v6);
        self.hasher.hash_one(prefix) as usize & (SLOTS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_prefix_proves_up_to_its_share_and_regains_room_as_flows_leave() {
        let mut proven = ProvenPrefixes::new(16 * 100, (24, 56));
        assert_eq!(proven.cap(), 100);
        for host in 0..100 {
            assert!(proven.prove(ip(&format!("198.51.100.{host}"))));
        }
        assert!(!proven.prove(ip("198.51.100.200")), "the /24 is at its cap");
        assert!(proven.prove(ip("203.0.113.1")), "another /24 has its own");
        proven.forget(ip("198.51.100.7"));
        assert_eq!(proven.held(ip("198.51.100.1")), 99);
        assert!(proven.prove(ip("198.51.100.200")));
    }

    #[test]
    fn a_small_table_still_lets_a_prefix_prove_the_minimum_and_v6_counts_by_56() {
        let mut proven = ProvenPrefixes::new(128, (24, 56));
        assert_eq!(proven.cap(), MIN_PROVEN_PER_PREFIX);
        for n in 0..MIN_PROVEN_PER_PREFIX {
            assert!(proven.prove(ip(&format!("2001:db8:0:{n:x}::1"))));
        }
        assert!(!proven.prove(ip("2001:db8:0:ff::1")), "the same /56");
        assert!(proven.prove(ip("2001:db8:0:100::1")), "the next /56");
    }
}
