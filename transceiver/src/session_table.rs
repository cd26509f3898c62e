//! The sans-IO session table of one worker: sessions by id, by server ICE ufrag (how a
//! STUN request finds its session) and by client path (how DTLS, SRTP and SCTP find
//! theirs), and one timer heap so that only due sessions are woken. O(1) per datagram;
//! no socket, no clock of its own: the worker passes `now`.
//!
//! A session has as many paths as the client has addresses that passed an authenticated
//! ICE check (browsers check from every local address, IPv4 and IPv6, Wi-Fi and VPN,
//! and may send media on any valid pair), up to [`MAX_PATHS`]. The worker teaches a
//! path when the session answers on it: an ICE-lite agent answers only authenticated
//! checks, so an unauthenticated datagram can never add a path.
//!
//! Someone holding a session's credentials can still sign checks from spoofed
//! addresses. So before such a check reaches str0m the worker asks [`SessionTable::admit_path`]:
//! a session adopts at most [`MAX_PATHS`] new addresses at once and one more per
//! [`PATH_REFILL`] after that, and it never takes a path another session holds while
//! that session still receives (a live session's media cannot be aimed elsewhere).

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ufrag_common::demux::DatagramKind;
use ufrag_common::flow::FlowKey;
use ufrag_common::stun::StunView;

use ufrag_model_protocol::messages::SessionId;

/// The path a client's datagrams take: its address and the address it sent to (the VIP
/// in relay mode, the worker's socket in direct mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientPath {
    /// The client's address.
    pub client: SocketAddr,
    /// The address it sent to.
    pub local: SocketAddr,
}

impl std::hash::Hash for ClientPath {
    /// One write of the packed address pair, as the relay's flow table hashes its keys:
    /// the derived `Hash` made a hasher call per field and enum tag, and routing a
    /// media datagram cost 572 instructions (`demux_instructions`).
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write(&FlowKey::new(self.client, self.local).hash_bytes());
    }
}

/// Why a datagram found no session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unrouted {
    /// STUN whose USERNAME names no server ufrag of this table (or no USERNAME at all).
    UnknownUfrag,
    /// Anything else from a path no session has used.
    UnknownPath,
}

/// Paths one session may hold; learning one more forgets the least recently learnt.
pub const MAX_PATHS: usize = 8;
/// A session regains room for one new path this often (RFC 7675's consent interval).
pub const PATH_REFILL: Duration = Duration::from_secs(5);

/// Why a check from a path its session does not hold is not handed to the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathRefused {
    /// The session adopted its share of new addresses for now.
    Budget,
    /// Another session holds the path and still receives on it.
    Taken,
}

/// New paths a session may still adopt: [`MAX_PATHS`] at first, one more per
/// [`PATH_REFILL`].
#[derive(Clone, Copy, Debug)]
struct PathBudget {
    left: usize,
    refilled_at: Option<Instant>,
}

impl PathBudget {
    fn refill(&mut self, now: Instant) {
        let since = *self.refilled_at.get_or_insert(now);
        let periods = now.saturating_duration_since(since).as_nanos() / PATH_REFILL.as_nanos();
        if periods > 0 {
            let periods = usize::try_from(periods).unwrap_or(MAX_PATHS);
            self.left = (self.left + periods).min(MAX_PATHS);
            self.refilled_at = Some(now);
        }
    }
}

#[derive(Debug)]
struct Slot<S> {
    session: S,
    ufrag: String,
    /// Oldest first.
    paths: Vec<ClientPath>,
    budget: PathBudget,
    next_timeout: Option<Instant>,
}

/// See the module documentation. `S` is the session (the worker's is
/// [`crate::session::Session`]; tests use anything).
#[derive(Debug)]
pub struct SessionTable<S> {
    slots: HashMap<SessionId, Slot<S>>,
    by_ufrag: HashMap<String, SessionId>,
    by_path: HashMap<ClientPath, SessionId>,
    /// `(when, session)`; an entry whose time is not the session's `next_timeout` any
    /// more is stale and skipped.
    timers: BinaryHeap<Reverse<(Instant, SessionId)>>,
}

impl<S> Default for SessionTable<S> {
    fn default() -> Self {
        SessionTable {
            slots: HashMap::new(),
            by_ufrag: HashMap::new(),
            by_path: HashMap::new(),
            timers: BinaryHeap::new(),
        }
    }
}

impl<S> SessionTable<S> {
    /// Sessions held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when no session is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Adds `session` under `id`, reached by STUN for server ufrag `ufrag`. Refuses (and
    /// hands the session back) if the id or the ufrag is taken.
    pub fn insert(&mut self, id: SessionId, ufrag: String, session: S) -> Result<(), S> {
        if self.slots.contains_key(&id) || self.by_ufrag.contains_key(&ufrag) {
            return Err(session);
        }
        self.by_ufrag.insert(ufrag.clone(), id);
        self.slots.insert(
            id,
            Slot {
                session,
                ufrag,
                paths: Vec::new(),
                budget: PathBudget {
                    left: MAX_PATHS,
                    refilled_at: None,
                },
                next_timeout: None,
            },
        );
        Ok(())
    }

    /// Removes a session and every way to reach it; its timers go stale.
    pub fn remove(&mut self, id: SessionId) -> Option<S> {
        let slot = self.slots.remove(&id)?;
        self.by_ufrag.remove(&slot.ufrag);
        for path in &slot.paths {
            self.by_path.remove(path);
        }
        Some(slot.session)
    }

    /// The session non-STUN datagrams from `path` route to, if any.
    pub fn holder_of(&self, path: ClientPath) -> Option<SessionId> {
        self.by_path.get(&path).copied()
    }

    /// The session `id`.
    pub fn get_mut(&mut self, id: SessionId) -> Option<&mut S> {
        self.slots.get_mut(&id).map(|s| &mut s.session)
    }

    /// Every session id (for shutdown and expiry).
    pub fn ids(&self) -> Vec<SessionId> {
        self.slots.keys().copied().collect()
    }

    /// Every session, with its id.
    pub fn iter(&self) -> impl Iterator<Item = (SessionId, &S)> {
        self.slots.iter().map(|(id, slot)| (*id, &slot.session))
    }

    /// The session a datagram from `path` belongs to: STUN with a USERNAME (a request) by
    /// the server ufrag in it (the part before the colon), anything else (a response to a
    /// probe of the path among them) by the path.
    pub fn route(&self, payload: &[u8], path: ClientPath) -> Result<SessionId, Unrouted> {
        let stun = match DatagramKind::classify(payload) {
            DatagramKind::Stun => {
                Some(StunView::parse(payload).map_err(|_| Unrouted::UnknownUfrag)?)
            }
            _ => None,
        };
        self.route_parsed(stun.as_ref(), path)
    }

    /// [`SessionTable::route`] for a datagram already parsed: `stun` is its STUN view
    /// when it is STUN, `None` when it is not. STUN that does not parse must not come
    /// here (`None` would route it by its path): the caller drops it, as `route` does.
    pub fn route_parsed(
        &self,
        stun: Option<&StunView<'_>>,
        path: ClientPath,
    ) -> Result<SessionId, Unrouted> {
        if let Some(view) = stun {
            // A request names its session in USERNAME; a response has none.
            if let Ok(ufrags) = view.ufrags() {
                return std::str::from_utf8(ufrags.server)
                    .ok()
                    .and_then(|ufrag| self.by_ufrag.get(ufrag).copied())
                    .ok_or(Unrouted::UnknownUfrag);
            }
        }
        self.by_path
            .get(&path)
            .copied()
            .ok_or(Unrouted::UnknownPath)
    }

    /// Records that session `id` uses `path` (it answered an authenticated check there,
    /// or sends media there): non-STUN datagrams from `path` route to it from now on. A
    /// session holds at most [`MAX_PATHS`]; a path another session held moves to `id`.
    pub fn learn_path(&mut self, id: SessionId, path: ClientPath) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        if let Some(at) = slot.paths.iter().position(|p| *p == path) {
            // Known: make it the most recent.
            let known = slot.paths.remove(at);
            slot.paths.push(known);
            return;
        }
        if slot.paths.len() == MAX_PATHS {
            let oldest = slot.paths.remove(0);
            self.by_path.remove(&oldest);
        }
        slot.budget.left = slot.budget.left.saturating_sub(1);
        slot.paths.push(path);
        if let Some(previous) = self.by_path.insert(path, id)
            && previous != id
            && let Some(other) = self.slots.get_mut(&previous)
        {
            other.paths.retain(|p| *p != path);
        }
    }

    /// Whether a check for session `id` from `path` may reach the session at `now`: yes
    /// for a path it holds; for a new one, while its budget lasts and unless another
    /// session holds the path and `holder_is_idle` says that session is still live.
    pub fn admit_path(
        &mut self,
        id: SessionId,
        path: ClientPath,
        now: Instant,
        holder_is_idle: impl Fn(&S) -> bool,
    ) -> Result<(), PathRefused> {
        let Some(slot) = self.slots.get(&id) else {
            return Ok(());
        };
        if slot.paths.contains(&path) {
            return Ok(());
        }
        if let Some(holder) = self.by_path.get(&path)
            && *holder != id
            && let Some(other) = self.slots.get(holder)
            && !holder_is_idle(&other.session)
        {
            return Err(PathRefused::Taken);
        }
        let budget = &mut self.slots.get_mut(&id).expect("looked up above").budget;
        budget.refill(now);
        if budget.left == 0 {
            return Err(PathRefused::Budget);
        }
        Ok(())
    }

    /// The paths session `id` holds, oldest first.
    pub fn paths(&self, id: SessionId) -> &[ClientPath] {
        self.slots.get(&id).map_or(&[], |slot| &slot.paths)
    }

    /// Session `id`'s server ufrag now.
    pub fn ufrag_of(&self, id: SessionId) -> Option<&str> {
        self.slots.get(&id).map(|slot| slot.ufrag.as_str())
    }

    /// Gives session `id` a new server ufrag (ICE restart): STUN for the old one no
    /// longer reaches it. False if there is no such session or the ufrag is taken.
    pub fn rekey(&mut self, id: SessionId, ufrag: String) -> bool {
        let Some(slot) = self.slots.get_mut(&id) else {
            return false;
        };
        match self.by_ufrag.entry(ufrag.clone()) {
            Entry::Occupied(_) => false,
            Entry::Vacant(vacant) => {
                vacant.insert(id);
                self.by_ufrag.remove(&slot.ufrag);
                slot.ufrag = ufrag;
                true
            }
        }
    }

    /// Wakes session `id` at `at` (replacing its previous wake-up).
    pub fn schedule(&mut self, id: SessionId, at: Instant) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        if slot.next_timeout != Some(at) {
            slot.next_timeout = Some(at);
            self.timers.push(Reverse((at, id)));
        }
    }

    /// The earliest wake-up (possibly a stale one: waking early is harmless).
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _))| *at)
    }

    /// The next session whose wake-up is due at `now`, skipping stale entries; each due
    /// wake-up is returned once.
    pub fn pop_due(&mut self, now: Instant) -> Option<SessionId> {
        while let Some(Reverse((at, id))) = self.timers.peek().copied() {
            if at > now {
                return None;
            }
            self.timers.pop();
            if let Some(slot) = self.slots.get_mut(&id)
                && slot.next_timeout == Some(at)
            {
                slot.next_timeout = None;
                return Some(id);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ufrag_common::stun::write_binding_request;

    use super::*;

    fn path(client_port: u16) -> ClientPath {
        ClientPath {
            client: SocketAddr::from(([198, 51, 100, 7], client_port)),
            local: SocketAddr::from(([203, 0, 113, 1], 3478)),
        }
    }

    fn stun_for(server_ufrag: &str) -> Vec<u8> {
        let mut buf = [0u8; 512];
        let n = write_binding_request(&mut buf, &[7; 12], server_ufrag.as_bytes(), b"cli1", b"pw")
            .unwrap();
        buf[..n].to_vec()
    }

    const SRTP: &[u8] = &[0x80, 111, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xAB];

    fn table() -> SessionTable<&'static str> {
        let mut t = SessionTable::default();
        t.insert(1, "ufragOne".into(), "one").unwrap();
        t.insert(2, "ufragTwo".into(), "two").unwrap();
        t
    }

    #[test]
    fn stun_routes_by_server_ufrag_and_the_rest_by_learnt_path() {
        let mut t = table();
        assert_eq!(t.route(&stun_for("ufragTwo"), path(1)), Ok(2));
        assert_eq!(
            t.route(&stun_for("nobody"), path(1)),
            Err(Unrouted::UnknownUfrag)
        );
        // STUN by its first byte, but not a STUN message: no ufrag to route by.
        assert_eq!(t.route(&[0, 1, 0, 0], path(1)), Err(Unrouted::UnknownUfrag));
        assert_eq!(t.route(SRTP, path(1)), Err(Unrouted::UnknownPath));
        t.learn_path(2, path(1));
        assert_eq!(t.route(SRTP, path(1)), Ok(2));
        assert_eq!(t.route(SRTP, path(9)), Err(Unrouted::UnknownPath));
    }

    /// A browser with several addresses checks from each and may send media from any:
    /// every answered path routes (a table that kept one path per session stalled such
    /// a browser's media).
    #[test]
    fn every_learnt_path_routes_to_its_session() {
        let mut t = table();
        t.learn_path(1, path(1)); // Wi-Fi
        t.learn_path(1, path(2)); // VPN
        assert_eq!(t.route(SRTP, path(1)), Ok(1));
        assert_eq!(t.route(SRTP, path(2)), Ok(1));
        assert_eq!(t.paths(1), [path(1), path(2)]);
        t.learn_path(1, path(1));
        assert_eq!(t.paths(1), [path(2), path(1)], "most recent last");
    }

    #[test]
    fn paths_are_bounded_per_session_and_a_taken_path_moves() {
        let mut t = table();
        for port in 0..MAX_PATHS as u16 + 3 {
            t.learn_path(1, path(100 + port));
        }
        assert_eq!(t.paths(1).len(), MAX_PATHS);
        for forgotten in 100..103 {
            assert_eq!(t.route(SRTP, path(forgotten)), Err(Unrouted::UnknownPath));
        }
        assert_eq!(t.route(SRTP, path(103)), Ok(1));
        t.learn_path(2, path(103)); // now another session's path
        assert_eq!(t.route(SRTP, path(103)), Ok(2));
        assert!(!t.paths(1).contains(&path(103)));
        t.remove(1); // removing the previous holder keeps the new holder's path
        assert_eq!(t.route(SRTP, path(103)), Ok(2));
    }

    #[test]
    fn a_session_adopts_max_paths_new_addresses_then_one_per_refill_interval() {
        let mut t = table();
        let t0 = Instant::now();
        let never_idle = |_: &&str| false;
        for port in 0..MAX_PATHS as u16 {
            assert_eq!(t.admit_path(1, path(200 + port), t0, never_idle), Ok(()));
            t.learn_path(1, path(200 + port));
        }
        assert_eq!(
            t.admit_path(1, path(300), t0, never_idle),
            Err(PathRefused::Budget)
        );
        // Known paths are always fine; the other session has its own budget.
        assert_eq!(t.admit_path(1, path(200), t0, never_idle), Ok(()));
        assert_eq!(t.admit_path(2, path(300), t0, never_idle), Ok(()));
        // One more per interval.
        let later = t0 + PATH_REFILL;
        assert_eq!(t.admit_path(1, path(300), later, never_idle), Ok(()));
        t.learn_path(1, path(300));
        assert_eq!(
            t.admit_path(1, path(301), later, never_idle),
            Err(PathRefused::Budget)
        );
    }

    #[test]
    fn a_path_of_a_live_session_is_not_taken_by_another_but_an_idle_ones_is() {
        let mut t = table();
        let t0 = Instant::now();
        t.learn_path(1, path(7));
        assert_eq!(
            t.admit_path(2, path(7), t0, |holder| *holder != "one"),
            Err(PathRefused::Taken),
            "session one is live"
        );
        assert_eq!(t.admit_path(2, path(7), t0, |_| true), Ok(()));
    }

    #[test]
    fn remove_forgets_every_way_in() {
        let mut t = table();
        t.learn_path(1, path(1));
        assert_eq!(t.remove(1), Some("one"));
        assert_eq!(t.remove(1), None);
        assert_eq!(
            t.route(&stun_for("ufragOne"), path(1)),
            Err(Unrouted::UnknownUfrag)
        );
        assert_eq!(t.route(SRTP, path(1)), Err(Unrouted::UnknownPath));
        assert_eq!(t.len(), 1);
        // The ufrag and id are free again.
        assert!(t.insert(1, "ufragOne".into(), "again").is_ok());
    }

    #[test]
    fn taken_ids_and_ufrags_are_refused() {
        let mut t = table();
        assert_eq!(t.insert(1, "fresh".into(), "x"), Err("x"));
        assert_eq!(t.insert(3, "ufragOne".into(), "y"), Err("y"));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn rekey_moves_stun_to_the_new_ufrag_only() {
        let mut t = table();
        assert!(t.rekey(1, "ufragNew".into()));
        assert_eq!(t.route(&stun_for("ufragNew"), path(1)), Ok(1));
        assert_eq!(
            t.route(&stun_for("ufragOne"), path(1)),
            Err(Unrouted::UnknownUfrag)
        );
        assert!(!t.rekey(1, "ufragTwo".into()), "taken by session 2");
        assert!(!t.rekey(9, "other".into()), "no such session");
        assert_eq!(t.route(&stun_for("ufragNew"), path(1)), Ok(1));
    }

    #[test]
    fn only_due_sessions_wake_once_each_and_rescheduling_makes_old_entries_stale() {
        let mut t = table();
        let now = Instant::now();
        let ms = Duration::from_millis;
        t.schedule(1, now + ms(10));
        t.schedule(2, now + ms(20));
        t.schedule(1, now + ms(30)); // moved later: the 10 ms entry is stale
        assert_eq!(t.next_wakeup(), Some(now + ms(10)));
        assert_eq!(
            t.pop_due(now + ms(15)),
            None,
            "the stale entry wakes no one"
        );
        assert_eq!(t.pop_due(now + ms(25)), Some(2));
        assert_eq!(t.pop_due(now + ms(25)), None, "once");
        assert_eq!(t.pop_due(now + ms(30)), Some(1));
        t.schedule(2, now + ms(40));
        t.remove(2);
        assert_eq!(
            t.pop_due(now + ms(50)),
            None,
            "a removed session never wakes"
        );
        assert_eq!(t.next_wakeup(), None);
    }

    #[test]
    fn scheduling_the_same_time_twice_queues_one_entry() {
        let mut t = table();
        let at = Instant::now();
        t.schedule(1, at);
        t.schedule(1, at);
        assert_eq!(t.pop_due(at), Some(1));
        assert_eq!(t.pop_due(at), None);
        assert_eq!(t.next_wakeup(), None);
    }
}
