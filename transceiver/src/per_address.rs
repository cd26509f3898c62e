//! What one client address may cost the signaling endpoint: what it holds at once (its
//! connections, its sessions not yet connected) and its requests per second; and what
//! one session-token owner holds at once (its sessions). An address
//! is an IPv4 address or an IPv6 /64 (one subscriber's network: an attacker walking the
//! host bits of one /64 is one address).
//!
//! Both tables are bounded: a count exists only while the address holds something (so
//! never more entries than things held), and a rate table that is full of buckets still
//! spending refuses a new address rather than grow.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Addresses whose request rate is remembered at once; beyond, refilled buckets are
/// forgotten, and if none has refilled a new address is refused.
pub const MAX_RATE_ENTRIES: usize = 65_536;

/// The group `ip` counts in: IPv4 as it is, IPv6 by its /64.
pub fn client_group(ip: IpAddr) -> IpAddr {
    ufrag_common::wire::source_prefix(ip, 32, 64)
}

/// A token bucket per client address: `per_second`, with a burst of twice that.
#[derive(Debug)]
pub struct AddressRate {
    per_second: f64,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl AddressRate {
    /// Buckets of `per_second` tokens per second each.
    pub fn new(per_second: f64) -> Self {
        AddressRate {
            per_second,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `peer`'s address at `now`; whether there was one.
    pub fn take(&self, peer: IpAddr, now: Instant) -> bool {
        let burst = 2.0 * self.per_second;
        let per_second = self.per_second;
        let refilled = |tokens: f64, at: Instant| {
            (tokens + now.saturating_duration_since(at).as_secs_f64() * per_second).min(burst)
        };
        let group = client_group(peer);
        let mut buckets = self.buckets.lock().expect("address rate");
        if buckets.len() >= MAX_RATE_ENTRIES && !buckets.contains_key(&group) {
            // Forget addresses whose bucket has refilled: they lose nothing.
            buckets.retain(|_, (tokens, at)| refilled(*tokens, *at) < burst);
            if buckets.len() >= MAX_RATE_ENTRIES {
                return false;
            }
        }
        let (tokens, at) = buckets.entry(group).or_insert((burst, now));
        *tokens = refilled(*tokens, *at);
        *at = now;
        if *tokens < 1.0 {
            return false;
        }
        *tokens -= 1.0;
        true
    }
}

/// Things held per key, at most `cap` each: connections and sessions waiting to connect
/// per client address ([`HeldPerAddress`]), sessions per session-token owner.
#[derive(Debug)]
pub struct HeldPer<K: Hash + Eq + Copy> {
    cap: u32,
    held: Mutex<HashMap<K, u32>>,
}

/// Things held per client address.
pub type HeldPerAddress = HeldPer<IpAddr>;

/// One thing counted against its key until this is dropped.
#[derive(Debug)]
pub struct Held<K: Hash + Eq + Copy = IpAddr> {
    table: Arc<HeldPer<K>>,
    key: K,
}

impl<K: Hash + Eq + Copy> HeldPer<K> {
    /// At most `cap` things per key.
    pub fn new(cap: u32) -> Arc<Self> {
        Arc::new(HeldPer {
            cap,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// Counts one more thing for `key`, unless it holds `cap` already.
    pub fn open_for(self: &Arc<Self>, key: K) -> Option<Held<K>> {
        let mut held = self.held.lock().expect("held per key");
        let count = held.entry(key).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(Held {
            table: Arc::clone(self),
            key,
        })
    }
}

impl HeldPer<IpAddr> {
    /// Counts one more thing for `peer`, unless its address holds `cap` already.
    pub fn open(self: &Arc<Self>, peer: IpAddr) -> Option<Held> {
        self.open_for(client_group(peer))
    }

    /// What `peer`'s address holds now.
    pub fn held_by(&self, peer: IpAddr) -> u32 {
        let held = self.held.lock().expect("held per key");
        held.get(&client_group(peer)).copied().unwrap_or(0)
    }
}

impl<K: Hash + Eq + Copy> Drop for Held<K> {
    fn drop(&mut self) {
        let mut held = self.table.held.lock().expect("held per key");
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ipv6_addresses_count_by_their_64_and_ipv4_by_the_address() {
        let group = |s: &str| client_group(s.parse().unwrap()).to_string();
        assert_eq!(group("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::");
        assert_eq!(group("2001:db8:1:2:ffff:ffff:ffff:ffff"), "2001:db8:1:2::");
        assert_eq!(group("2001:db8:1:3::1"), "2001:db8:1:3::");
        assert_eq!(group("198.51.100.7"), "198.51.100.7");
        assert_eq!(group("::ffff:198.51.100.7"), "198.51.100.7");
    }

    #[test]
    fn one_address_gets_twice_its_rate_at_once_then_its_rate() {
        let rate = AddressRate::new(5.0);
        let t0 = Instant::now();
        let peer: IpAddr = "198.51.100.7".parse().unwrap();
        let other: IpAddr = "198.51.100.8".parse().unwrap();
        assert_eq!((0..12).filter(|_| rate.take(peer, t0)).count(), 10);
        assert!(rate.take(other, t0), "another address has its own bucket");
        assert!(rate.take(peer, t0 + Duration::from_millis(200)));
        assert!(!rate.take(peer, t0 + Duration::from_millis(200)));
        // Another host of the same /64 shares its bucket.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            (0..12)
                .filter(|i| rate.take(v6(&format!("2001:db8::{i:x}")), t0))
                .count(),
            10
        );
    }

    #[test]
    fn a_full_rate_table_refuses_a_new_address_rather_than_grow() {
        let rate = AddressRate::new(1.0);
        let t0 = Instant::now();
        for i in 0..MAX_RATE_ENTRIES as u32 {
            assert!(rate.take(IpAddr::V4(i.into()), t0));
        }
        let newcomer: IpAddr = "203.0.113.1".parse().unwrap();
        assert!(!rate.take(newcomer, t0), "every bucket is still spending");
        // Once buckets have refilled, they are forgotten and the newcomer is served.
        assert!(rate.take(newcomer, t0 + Duration::from_secs(2)));
    }

    #[test]
    fn an_address_holds_at_most_its_cap_and_regains_room_as_it_lets_go() {
        let table = HeldPerAddress::new(2);
        let peer: IpAddr = "2001:db8::1".parse().unwrap();
        let neighbour: IpAddr = "2001:db8::2".parse().unwrap();
        let first = table.open(peer).unwrap();
        let _second = table.open(neighbour).unwrap();
        assert!(table.open(peer).is_none(), "the /64 holds its cap");
        assert!(table.open("198.51.100.1".parse().unwrap()).is_some());
        drop(first);
        assert_eq!(table.held_by(peer), 1);
        assert!(table.open(peer).is_some());
    }
}
