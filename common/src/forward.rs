//! The forwarding decision both relay backends make for every datagram: a pure function
//! of the datagram, the flow table, the configuration and a time the caller passes in.
//!
//! [`Forwarder::from_client`] decides a datagram that arrived on a public VIP,
//! [`Forwarder::from_internal`] one that arrived on the worker's internal port. Each
//! returns a [`Verdict`]; a drop names exactly one [`DropReason`]. The forwarder counts
//! nothing: [`crate::execute::Executor`] carries the verdict out through the backend's
//! egress and counts each datagram once, when its fate is known.
//!
//! # From a client (on a VIP)
//!
//! 1. First byte (RFC 7983): neither STUN, DTLS nor RTP/RTCP → drop `unclassified`.
//! 2. Flow hit → [`Verdict::Forward`] to the flow's next hop, framed with the client
//!    address and VIP. Once DTLS or media has passed both ways (the transceiver's marked
//!    as sent on a path that answered its probe: [`crate::frame`]), the flow is *proven*,
//!    and proving it asks the backend to write its route to the route cache (`record`; refreshed every
//!    third of the idle timeout while it carries traffic, so the cache entry outlives
//!    the flow only while the flow lives). A flow that carried only STUN is never
//!    cached. A Binding Request on a hit is forwarded too; if the flow has been idle for
//!    [`REROUTE_MIN_IDLE`] (a consent interval) and the request's hint now routes
//!    elsewhere (a new session reusing the client's address) and authenticates fully,
//!    the flow follows it. A live flow never moves on one request.
//! 3. Flow miss, STUN: it must be a Binding Request whose server ufrag is an authentic
//!    hint ([`HintKeys::authenticate`]), whose MESSAGE-INTEGRITY verifies under the
//!    derived password, and whose FINGERPRINT (when present) matches. If the hint's
//!    cluster is ours, its transceiver must lie in the allowed networks; otherwise the
//!    next hop is that cluster's relay (global mode). Then admission
//!    ([`crate::admission`]) must allow it: not a replay of a transaction that already
//!    made a flow from another address, fewer than `max_flows_per_session` live flows
//!    for its server ufrag, and a token from its source prefix's and the worker's
//!    buckets. In a full table, an expired flow or one that carried only STUN for
//!    [`SHED_MIN_IDLE`] makes room, or a proven one whose transceiver has sent it nothing
//!    for [`SERVER_SILENT_SHED`] (its session is over), among the least recently used; a
//!    proven flow its transceiver still serves is never evicted. Then the flow
//!    is created and the datagram forwarded.
//!
//! 4. Flow miss, DTLS or RTP/RTCP: with a route cache, [`Verdict::LookupRoute`] (the
//!    datagram itself is dropped and counted as `no_flow_cache_lookup`) within the
//!    lookup bounds ([`crate::route_lookups`]: a rate per source prefix and worker,
//!    `no_flow_lookup_rate` beyond, no token spent again while the flow's question is
//!    out, and no question for a flow the cache did not know a moment ago,
//!    `no_flow_recent_miss`); without one, drop `no_flow`. A non-STUN
//!    datagram is never forwarded without a flow.
//!
//! # What one session can cost
//!
//! An attacker holding one session's credentials (or one captured request) gets: one
//! flow per captured request in the whole relay (copies are replays, whichever worker
//! they reach), at most `max_flows_per_session` flows per worker for requests it signs
//! itself, each flow forwarding its datagrams to the session's own transceiver, which
//! answers one datagram per request (no amplification). Flows its transceiver never
//! sends DTLS or media on stay unproven however much the attacker sends on them: when
//! the table is full, the oldest of them gives way to each newly admitted flow (first in,
//! first out, however busy), they are never written to Redis, and they cannot take over a
//! live flow. So a flow has the time the table takes to turn over to prove itself:
//! capacity over the rate flows are admitted at, at most `new_flows_per_worker` (52 s at
//! the defaults, 262,144 flows and 5,000 per second); a session's path proves itself in a
//! few round trips, a spoofer's blind traffic never does. (Protecting young unproven flows
//! instead, and refusing newcomers while they are young, let an attacker that refills the
//! table faster than that age keep every newcomer out, as `ufrag-perf resilience` showed
//! against a small table.) Hints expire for new flows, so ufrags
//! collected from past sessions buy nothing. What many sessions or spoofed sources can
//! cost is bounded by the prefix and worker rates.
//!
//! # From the internal side (on the worker's internal port)
//!
//! - From a global relay (`--allow-global-relay-net`, which take precedence over the
//!   transceiver networks): a framed client datagram; decided as in "from a client",
//!   with the flow remembering to return through that relay.
//! - From a transceiver (`--allow-transceiver-net`) or a cluster relay (a configured
//!   cluster relay address): a return frame. Its client must have a flow whose next hop
//!   is this very source; then the datagram goes to the client from the VIP the frame
//!   names ([`Verdict::Return`], VIP must be ours), or, for a flow that came through a
//!   global relay, the whole frame goes back to it unchanged ([`Verdict::Relay`]).
//! - From anywhere else: drop `frame_source_not_allowed`, before parsing anything.
//!
//! A backend whose return frames may reach any worker (relay-afxdp: the NIC spreads a
//! transceiver's replies over its queues) gives every worker's forwarder the same
//! [`SharedReturns`] ([`Forwarder::with_shared_returns`]): each owner publishes its
//! flows' return paths there and withdraws them when the flows leave its table, and a
//! return frame whose flow this worker does not hold is checked against that set
//! instead, with the same rule (a live flow whose next hop is the frame's source). Such
//! returns refresh the flow's stamp in the set, which its owner reads before it expires
//! the flow, so traffic towards the client keeps a flow alive on whichever worker it
//! lands. A return of DTLS or media taken that way is marked in the set, where the owner
//! reads it as its transceiver's half of the flow's proof.
//!
//! A backend that carries proven flows outside the forwarder (relay-afxdp's in-kernel
//! fast path) gives it a [`FlowMirror`] ([`Forwarder::with_mirror`]): told when a flow
//! has proved itself (DTLS or media both ways, or a route restored from the cache: the
//! same moment a route is worth caching) and when it leaves the table or moves
//! to another transceiver, and asked when it last carried the flow, which counts as the
//! flow's use for expiry and for the consent interval that guards a reroute.
//!
//! A forwarder serves one transport ([`Forwarder::serving`]): UDP flows, or the TCP
//! connections of ICE-TCP clients, whose messages are decided exactly as datagrams are
//! (the same hint, MESSAGE-INTEGRITY and admission checks on the first) and whose frames
//! carry the TCP bit. A return frame of the other transport is dropped. A TCP flow ends
//! with its connection ([`Forwarder::end_flow`]).
//!
//! The relay never answers a client itself and never sends a client more than one
//! datagram per datagram received from its flow's transceiver.

use core::net::SocketAddr;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::IpNet;

use crate::admission::{Admission, AdmissionPolicy, FlowRequest, SessionTag};
use crate::demux::DatagramKind;
use crate::flow::{FlowKey, FlowTable, InsertError, Inserted};
use crate::frame::{FrameHeader, Transport};
use crate::hint::{HintKeys, HintShape};
use crate::proven_prefixes::ProvenPrefixes;
use crate::reasons::DropReason;
use crate::replay::ReplayFilter;
use crate::returns::{SharedReturn, SharedReturns};
use crate::route_lookups::{Lookup, RouteLookups};
use crate::stun::StunView;

/// Where a flow goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    /// Frames for this flow go here: the transceiver, or another cluster's relay.
    pub next_hop: SocketAddr,
    /// For a flow that arrived through a global relay: return frames go back to it.
    pub return_via: Option<SocketAddr>,
}

/// What the flow table holds for each flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowState {
    /// Where the flow goes.
    pub route: Route,
    /// When the route was last written to the route cache, in seconds since the
    /// forwarder started; `None` until it is first written.
    pub recorded_at_s: Option<u32>,
    /// When the flow was made (or moved to its route), in seconds since the forwarder
    /// started.
    pub created_at_s: u32,
    /// The session whose Binding Request created the flow (0 for a flow restored from
    /// the route cache, which counts for no session).
    pub session: SessionTag,
    /// The client sent DTLS or media on this flow (a spoofer can, blind).
    pub client_media: bool,
    /// The transceiver sent DTLS or media on this flow, marked as sent on a path that
    /// answered its probe: something at the client address receives.
    pub server_media: bool,
    /// When the transceiver last sent a frame on this flow marked as sent on a verified
    /// path, in whole seconds on the flow table's clock ([`FlowTable::clock_ms`]; when the
    /// flow was made, until then): [`SERVER_SILENT_SHED`].
    pub server_seen_at_s: u32,
    /// DTLS or media passed both ways while the client's prefix held its cap of proven
    /// flows ([`crate::proven_prefixes`]): the flow stays unproven.
    pub over_prefix_cap: bool,
}

impl FlowState {
    /// A new flow on `route` for `session`, made at `created_at_s` (`table_s` on the flow
    /// table's clock): nothing proven yet.
    fn unproven(route: Route, session: SessionTag, created_at_s: u32, table_s: u32) -> Self {
        FlowState {
            route,
            recorded_at_s: None,
            created_at_s,
            session,
            client_media: false,
            server_media: false,
            server_seen_at_s: table_s,
            over_prefix_cap: false,
        }
    }

    /// DTLS or media has passed both ways: a session's path, not just a STUN exchange
    /// or a spoofer's blind bytes (and its client's prefix had room for one more proven
    /// flow). Only such flows are cached, mirrored and kept from shedding while their
    /// transceiver serves them ([`SERVER_SILENT_SHED`]).
    pub fn proven(&self) -> bool {
        self.client_media && self.server_media && !self.over_prefix_cap
    }
}

/// Whole seconds of a flow table clock reading in milliseconds.
fn table_seconds(clock_ms: u64) -> u32 {
    u32::try_from(clock_ms / 1000).unwrap_or(u32::MAX)
}

/// A flow that has been idle this long may follow its client to another session's
/// transceiver (RFC 7675's consent interval: a live session sends consent checks and
/// media more often than this, so a spoofed request cannot take its flow).
pub const REROUTE_MIN_IDLE: Duration = Duration::from_secs(5);
/// When the table is full, an unproven flow that has been idle this long may be shed to
/// make room.
pub const SHED_MIN_IDLE: Duration = Duration::from_secs(1);
/// When the table is full, a proven flow on which the transceiver has sent nothing marked
/// as on a verified path for this long may be shed too: its session has ended or lost
/// consent (a live session's transceiver sends media, or a consent probe about every
/// 5 s, RFC 7675), so only its client side keeps it alive. Like an idle unproven flow, it
/// is found only among the least recently used flows the table looks at when it needs
/// room, so a client that keeps its flow busier than the table's quietest flows is not
/// reached this way; and relay-afxdp's fast path, which carries both directions out of
/// the forwarder's sight and stamps them alike, keeps such a flow while either side
/// sends.
pub const SERVER_SILENT_SHED: Duration = Duration::from_secs(30);
/// How many of the least recently used flows are looked at for one to shed.
pub const SHED_SCAN: usize = 16;

/// The parts of an authentic first Binding Request that admission needs.
#[derive(Clone, Copy, Debug)]
struct FirstRequest<'d> {
    /// The session it names: its hint's destination and session bytes, the same through
    /// the session's ICE restarts.
    session: SessionTag,
    transaction_id: &'d [u8; 12],
}

/// Who sent a frame to the internal port, as far as forwarding cares.
#[derive(Clone, Copy, Debug)]
struct FrameSender {
    /// From a global relay's network: it carries a client's datagram in.
    from_global: bool,
    /// From a configured cluster relay's exact address: it returns frames.
    from_cluster_relay: bool,
}

/// What the backend must do with a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send `header` followed by `datagram[payload_at..]` to `to`.
    Forward {
        /// The transceiver or next relay.
        to: SocketAddr,
        /// The frame header to prepend.
        header: FrameHeader,
        /// Where the client's datagram starts in what was received: 0 from a client,
        /// after the frame header for a frame from a global relay.
        payload_at: usize,
        /// Write this route to the route cache: the flow was just created, or its cache
        /// entry is due for a refresh (every third of the idle timeout while it lives).
        record: Option<Route>,
    },
    /// Send `frame[payload_at..]` to `client` from `vip`.
    Return {
        /// The client.
        client: SocketAddr,
        /// The VIP to send from.
        vip: SocketAddr,
        /// Where the client's datagram starts in the frame.
        payload_at: usize,
    },
    /// Send the whole frame, unchanged, to `to` (a global relay).
    Relay {
        /// The global relay.
        to: SocketAddr,
    },
    /// No flow for a DTLS/RTP datagram: look `key` up in the route cache and
    /// [`Forwarder::restore`] the flow when the answer comes. The datagram waits for the
    /// answer where the backend can keep a copy, else it is dropped.
    LookupRoute {
        /// The flow to look up.
        key: FlowKey,
        /// A question about it is already out: wait for that answer, ask nothing.
        question_out: bool,
    },
    /// Drop the datagram for this reason.
    Drop(DropReason),
}

/// The parts of the configuration a forwarding decision reads.
#[derive(Clone, Debug)]
pub struct ForwardPolicy {
    /// Public VIPs this relay serves.
    pub vips: Vec<SocketAddr>,
    /// Networks transceivers live in.
    pub allowed_transceiver_networks: Vec<IpNet>,
    /// Networks global relays send frames from.
    pub global_relay_networks: Vec<IpNet>,
    /// This relay's cluster.
    pub cluster_id: u16,
    /// Other clusters' relays.
    pub clusters: BTreeMap<u16, SocketAddr>,
    /// The accepted hint keys.
    pub hint_keys: HintKeys,
    /// Whether a route cache is configured.
    pub route_cache: bool,
    /// What one session, source prefix and worker may cost in new flows.
    pub admission: AdmissionPolicy,
    /// The relay's replay filter, shared by all its workers' forwarders; `None`: each
    /// forwarder keeps its own (one worker).
    pub shared_replays: Option<Arc<ReplayFilter>>,
}

fn contains(networks: &[IpNet], addr: SocketAddr) -> bool {
    let ip = addr.ip().to_canonical();
    networks.iter().any(|n| n.contains(&ip))
}

/// One worker's forwarding state: policy and flow table.
///
/// It decides; it never sends (the backend's [`crate::execute::Executor`] carries a
/// [`Verdict`] out). A relay for one VIP whose transceivers live in 10.0.0.0/8:
///
/// ```no_run
/// use std::collections::BTreeMap;
/// use std::time::{Duration, Instant};
/// use ufrag_common::flow::FlowTable;
/// use ufrag_common::forward::{ForwardPolicy, Forwarder, Verdict};
/// use ufrag_common::hint::{HintKey, HintKeys};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let secret = std::fs::read("/run/secrets/hint-key")?; // the transceivers' key
/// let policy = ForwardPolicy {
///     vips: vec!["203.0.113.10:3478".parse()?],
///     allowed_transceiver_networks: vec!["10.0.0.0/8".parse()?],
///     global_relay_networks: vec![],
///     cluster_id: 1,
///     clusters: BTreeMap::new(),
///     hint_keys: HintKeys::new(HintKey::new(1, &secret)?, None)?,
///     route_cache: false,
///     admission: Default::default(),
///     shared_replays: None,
/// };
/// let now = Instant::now();
/// let table = FlowTable::new(65_536, Duration::from_secs(30), now)?;
/// let mut forwarder = Forwarder::new(policy, table, now, ufrag_common::hint::unix_seconds(std::time::SystemTime::now()));
///
/// let datagram = [0u8; 20]; // as received from the client
/// let verdict = forwarder.from_client(
///     &datagram,
///     "198.51.100.7:50000".parse()?,
///     "203.0.113.10:3478".parse()?,
///     now,
/// );
/// match verdict {
///     Verdict::Forward { to, .. } => println!("to the transceiver at {to}"),
///     Verdict::Drop(reason) => println!("dropped: {}", reason.label()),
///     other => println!("{other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Forwarder {
    policy: ForwardPolicy,
    table: FlowTable<FlowState>,
    admission: Admission,
    started: Instant,
    refresh_every_s: u32,
    returns: Option<Arc<SharedReturns>>,
    mirror: Option<Box<dyn FlowMirror>>,
    counters: ForwarderCounters,
    transport: Transport,
    /// Unproven flows in the order they were made, with when: when the table is full, the
    /// oldest gives way first to a flow just admitted. Entries of flows since proven or
    /// gone are skipped when reached. Never longer than the table's capacity.
    unproven: VecDeque<(FlowKey, u32)>,
    /// A write to the route cache that no verdict carries
    /// ([`Forwarder::take_pending_cache_write`]): a flow's route (it proved itself on a
    /// return frame), or `None` to remove it (its session ended).
    pending_cache_write: Option<(FlowKey, Option<Route>)>,
    /// What asking the route cache may cost; `None` without a route cache. Boxed: only
    /// datagrams without a flow reach it.
    lookups: Option<Box<RouteLookups>>,
    /// Proven flows per client prefix, and their cap. Boxed: only a flow proving itself
    /// or a proven one leaving reaches it.
    proven_prefixes: Box<ProvenPrefixes>,
}

/// A copy of the proven flows kept outside the forwarder, which carries some of their
/// datagrams itself (see the module doc). Its calls happen on the worker thread.
pub trait FlowMirror: core::fmt::Debug + Send {
    /// `key` is a proven flow going by `route` now (proved, or restored).
    fn proven(&mut self, key: &FlowKey, route: Route, now: Instant);
    /// `key`, which went by `route`, has left the table or moved elsewhere.
    fn gone(&mut self, key: &FlowKey, route: Route);
    /// When the mirror last carried a datagram of `key` going by `route`, if ever.
    fn last_seen(&mut self, key: &FlowKey, route: Route, now: Instant) -> Option<Instant>;
    /// Called on every expiry pass (the worker's tick): keeps what the mirror derives from
    /// outside the forwarder (next hops' MACs) current.
    fn maintain(&mut self) {}
}

/// What the forwarder counts itself (the flow table counts the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwarderCounters {
    /// Return frames for flows another worker owns, taken from the [`SharedReturns`].
    pub shared_returns: u64,
    /// Flows whose return path found no room in the [`SharedReturns`]: only their owner
    /// takes their returns.
    pub flows_unshared: u64,
    /// Flows that proved themselves while their client's prefix held its cap of proven
    /// flows: kept unproven ([`crate::proven_prefixes`]).
    pub flows_over_prefix_cap: u64,
    /// First requests recorded in the replay filter over another transaction still
    /// within the window ([`crate::replay::Claimed::Overwrote`]).
    pub replay_overwrites: u64,
}

/// Why a route from the route cache was not installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreRefused {
    /// The cached next hop is neither an allowed transceiver nor a cluster relay, or its
    /// return path is not in the global relays' networks.
    DestinationNotAllowed,
    /// The flow table is full of live flows.
    TableFull,
}

impl Forwarder {
    /// A forwarder with its own flow table, started at `now`, when the wall clock read
    /// `now_unix_s` (seconds since the Unix epoch: what a hint's age is judged against).
    pub fn new(
        policy: ForwardPolicy,
        table: FlowTable<FlowState>,
        now: Instant,
        now_unix_s: u32,
    ) -> Self {
        let refresh_every_s = u32::try_from(table.idle_timeout().as_secs() / 3)
            .unwrap_or(u32::MAX)
            .max(1);
        let admission = Admission::new(
            policy.admission,
            table.capacity(),
            policy.shared_replays.clone(),
            now,
            now_unix_s,
        );
        let table_capacity = table.capacity();
        let unproven = VecDeque::with_capacity(table_capacity);
        let prefix_lens = (
            policy.admission.prefix_len_v4,
            policy.admission.prefix_len_v6,
        );
        let lookups = policy
            .route_cache
            .then(|| Box::new(RouteLookups::new(prefix_lens, now)));
        Forwarder {
            policy,
            table,
            admission,
            started: now,
            refresh_every_s,
            returns: None,
            mirror: None,
            counters: ForwarderCounters::default(),
            transport: Transport::Udp,
            unproven,
            pending_cache_write: None,
            lookups,
            proven_prefixes: Box::new(ProvenPrefixes::new(table_capacity, prefix_lens)),
        }
    }

    /// Serves clients on `transport` (UDP unless told): frames towards transceivers carry
    /// it, and a return frame for the other transport is dropped as
    /// `frame_wrong_transport`. A relay serving both keeps one forwarder for each, so a
    /// TCP connection and a UDP flow that share an address pair stay apart.
    pub fn serving(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// The transport this forwarder serves.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Shares this worker's flows' return paths with the other workers through
    /// `returns`, and takes theirs (see the module doc). Give every worker the same set.
    pub fn with_shared_returns(mut self, returns: Arc<SharedReturns>) -> Self {
        self.returns = Some(returns);
        self
    }

    /// Tells `mirror` of every flow that proves itself and of every proven flow that
    /// leaves or moves (see the module doc).
    pub fn with_mirror(mut self, mirror: Box<dyn FlowMirror>) -> Self {
        self.mirror = Some(mirror);
        self
    }

    /// When the mirror last carried `key`'s datagrams, if there is a mirror and it has.
    fn mirrored_at(&mut self, key: &FlowKey, route: Route, now: Instant) -> Option<Instant> {
        self.mirror.as_mut()?.last_seen(key, route, now)
    }

    /// The route-cache write the last return frame asked for, if any (the executor asks
    /// after every decision): the route of a flow that proved itself, or `None` to remove
    /// the route of a flow whose session ended (so the client's late media cannot
    /// restore it).
    pub fn take_pending_cache_write(&mut self) -> Option<(FlowKey, Option<Route>)> {
        self.pending_cache_write.take()
    }

    /// What the forwarder has counted.
    pub fn counters(&self) -> ForwarderCounters {
        ForwarderCounters {
            replay_overwrites: self.admission.replay_overwrites(),
            ..self.counters
        }
    }

    /// Makes a flow just put into the table known to the other workers.
    fn share(&mut self, key: &FlowKey, route: Route, now: Instant) {
        if let Some(returns) = &self.returns
            && !returns.publish(key, route.next_hop, route.return_via, now)
        {
            self.counters.flows_unshared += 1;
        }
    }

    /// Forgets a flow that has left the table (or moved elsewhere): its shared return
    /// path, and the mirror's copy if it was proven.
    fn unshare(&mut self, key: &FlowKey, route: Route, proven: bool) {
        if let Some(returns) = &self.returns {
            returns.withdraw(key, route.next_hop);
        }
        if !proven {
            return;
        }
        self.proven_prefixes.forget(key.client.ip());
        if let Some(mirror) = &mut self.mirror {
            mirror.gone(key, route);
        }
    }

    /// `flow`'s proof is in: counts it for its client's prefix, or (the prefix at its
    /// cap) marks it to stay unproven. Whether it is proven now.
    #[cold]
    fn count_proof(
        proven_prefixes: &mut ProvenPrefixes,
        counters: &mut ForwarderCounters,
        key: &FlowKey,
        flow: &mut FlowState,
    ) -> bool {
        if proven_prefixes.prove(key.client.ip()) {
            return true;
        }
        flow.over_prefix_cap = true;
        counters.flows_over_prefix_cap += 1;
        false
    }

    /// Removes and returns the least recently used flow if it has been idle for the
    /// timeout, withdrawing its shared return path. A flow that looks idle here but whose
    /// returns another worker took within the timeout is kept (moved to the head of the
    /// recency list) instead; at most `keep_budget` of those are kept per call, after
    /// which this gives up for now.
    fn pop_idle(&mut self, now: Instant, keep_budget: &mut usize) -> Option<(FlowKey, FlowState)> {
        loop {
            let key = self.table.oldest_expired(now)?;
            let route = self.table.peek(&key)?.value.route;
            let timeout = self.table.idle_timeout();
            let mirrored_at = self.mirrored_at(&key, route, now);
            let returned_at = self
                .returns
                .as_ref()
                .and_then(|returns| returns.last_seen(&key, route.next_hop))
                .max(mirrored_at)
                .filter(|seen| now.saturating_duration_since(*seen) < timeout);
            let Some(returned_at) = returned_at else {
                let (key, flow) = self.table.pop_expired(now)?;
                self.unshare(&key, flow.value.route, flow.value.proven());
                return Some((key, flow.value));
            };
            if *keep_budget == 0 {
                return None;
            }
            *keep_budget -= 1;
            // Seen then, not now: it expires one timeout after it was last carried.
            self.table.lookup(&key, returned_at);
        }
    }

    fn seconds(&self, now: Instant) -> u32 {
        u32::try_from(now.saturating_duration_since(self.started).as_secs()).unwrap_or(u32::MAX)
    }

    /// `now` in whole seconds on the flow table's clock.
    fn table_seconds(&self, now: Instant) -> u32 {
        table_seconds(self.table.clock_ms(now))
    }

    /// Verifies first packets under `keys` from now on (a key rotation); flows already
    /// made are not touched.
    pub fn set_hint_keys(&mut self, keys: HintKeys) {
        self.policy.hint_keys = keys;
    }

    /// The flow table.
    pub fn table(&self) -> &FlowTable<FlowState> {
        &self.table
    }

    /// The policy.
    pub fn policy(&self) -> &ForwardPolicy {
        &self.policy
    }

    /// The admission state (live flows per session).
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Decides a datagram that arrived from `client` on public `vip`.
    pub fn from_client(
        &mut self,
        datagram: &[u8],
        client: SocketAddr,
        vip: SocketAddr,
        now: Instant,
    ) -> Verdict {
        self.decide_client(datagram, 0, client, vip, None, now)
    }

    fn decide_client(
        &mut self,
        received: &[u8],
        payload_at: usize,
        client: SocketAddr,
        vip: SocketAddr,
        return_via: Option<SocketAddr>,
        now: Instant,
    ) -> Verdict {
        let datagram = &received[payload_at..];
        let kind = DatagramKind::classify(datagram);
        if kind == DatagramKind::Other {
            return Verdict::Drop(DropReason::Unclassified);
        }
        let key = FlowKey::new(client, vip);
        let header = FrameHeader::over(self.transport, client, vip);
        let seconds = self.seconds(now);
        let refresh_every_s = self.refresh_every_s;
        let route_cache = self.policy.route_cache;
        // Only a STUN datagram may move its flow, and only an idle one: read the idle
        // time before the lookup marks the flow used.
        let idle_before = match kind {
            DatagramKind::Stun => self.table.idle_for(&key, now),
            _ => None,
        };
        if let Some(flow) = self.table.lookup(&key, now) {
            flow.record_in(datagram.len());
            let was_proven = flow.value.proven();
            if !was_proven {
                flow.value.client_media |= kind != DatagramKind::Stun;
                // The transceiver's half, when another worker took its returns.
                let next_hop = flow.value.route.next_hop;
                let returned_media = flow.value.client_media
                    && !flow.value.server_media
                    && (self.returns.as_ref())
                        .is_some_and(|returns| returns.carried_media(&key, next_hop));
                flow.value.server_media |= returned_media;
                // Both halves just came in: the proof is counted, or refused by the cap.
                if flow.value.proven() {
                    Self::count_proof(
                        &mut self.proven_prefixes,
                        &mut self.counters,
                        &key,
                        &mut flow.value,
                    );
                }
            }
            let mut record = None;
            if route_cache
                && flow.value.proven()
                && flow
                    .value
                    .recorded_at_s
                    .is_none_or(|at| seconds.wrapping_sub(at) >= refresh_every_s)
            {
                // A session's path: worth caching, and refreshed while it lives.
                flow.value.recorded_at_s = Some(seconds);
                record = Some(flow.value.route);
            }
            let state = flow.value;
            if !was_proven
                && state.proven()
                && let Some(mirror) = &mut self.mirror
            {
                mirror.proven(&key, state.route, now);
            }
            let mut to = state.route.next_hop;
            let idle_since = |since: Option<Instant>| {
                since.is_none_or(|at| now.saturating_duration_since(at) >= REROUTE_MIN_IDLE)
            };
            // Idle here, in the mirror, and in the returns other workers took for it.
            if idle_before.is_some_and(|idle| idle >= REROUTE_MIN_IDLE)
                && idle_since(self.mirrored_at(&key, state.route, now))
                && idle_since(
                    (self.returns.as_ref())
                        .and_then(|returns| returns.last_seen(&key, state.route.next_hop)),
                )
            {
                to = self.follow_rerouted_session(datagram, &key, state, return_via, now);
            }
            return Verdict::Forward {
                to,
                header,
                payload_at,
                record,
            };
        }
        if kind != DatagramKind::Stun {
            return match &mut self.lookups {
                Some(lookups) => match lookups.ask(&key, now) {
                    Ok(lookup) => Verdict::LookupRoute {
                        key,
                        question_out: lookup == Lookup::Wait,
                    },
                    Err(reason) => Verdict::Drop(reason),
                },
                None => Verdict::Drop(DropReason::NoFlow),
            };
        }
        self.first_packet(
            datagram,
            (key, client, header, payload_at),
            return_via,
            (seconds, now),
        )
    }

    /// A STUN datagram with no flow: a first request, checked, admitted and given a flow,
    /// or dropped under its reason. Out of line: the established flows' path above is the
    /// hot one.
    #[inline(never)]
    fn first_packet(
        &mut self,
        datagram: &[u8],
        (key, client, header, payload_at): (FlowKey, SocketAddr, FrameHeader, usize),
        return_via: Option<SocketAddr>,
        (seconds, now): (u32, Instant),
    ) -> Verdict {
        // Junk spends no attempt: only a well-formed Binding Request whose server ufrag
        // has a hint's shape under a key we hold may ask for the HMACs.
        let (view, shape) = match self.first_request_view(datagram) {
            Ok(checked) => checked,
            Err(reason) => return Verdict::Drop(reason),
        };
        if let Err(reason) = self.admission.attempt(client.ip(), now) {
            return Verdict::Drop(reason);
        }
        let (route, request) = match self.authenticate_first_request(&view, &shape, return_via, now)
        {
            Ok(admitted) => admitted,
            Err(reason) => return Verdict::Drop(reason),
        };
        self.make_room(now);
        let full = self.table.len() == self.table.capacity();
        if full && self.oldest_unproven().is_none() {
            // Nothing could go (every flow proven, or kept alive by another worker):
            // refused here, before any rate token is spent, and so that the table never
            // reclaims a slot behind our back.
            self.table.refuse();
            return Verdict::Drop(DropReason::TableFull);
        }
        let request = FlowRequest {
            session: request.session,
            source: client,
            transaction_id: request.transaction_id,
        };
        if let Err(reason) = self.admission.check(&request, now) {
            return Verdict::Drop(reason);
        }
        // Admitted: only now may a busy unproven flow give way to it.
        if full {
            self.shed_oldest_unproven();
        }
        let state = FlowState::unproven(route, request.session, seconds, self.table_seconds(now));
        match self.table.insert(&key, state, now) {
            Ok(_) => self.admission.admitted(&request),
            Err(InsertError::TableFull) => return Verdict::Drop(DropReason::TableFull),
        }
        self.track_unproven(key, seconds);
        self.share(&key, route, now);
        if let Some(flow) = self.table.lookup(&key, now) {
            flow.record_in(datagram.len());
        }
        // Not cached yet: only a proven flow is written to the cache.
        Verdict::Forward {
            to: route.next_hop,
            header,
            payload_at,
            record: None,
        }
    }

    /// Frees a slot when the table is full, where that costs no live flow: an expired
    /// flow first, else an unproven one idle for [`SHED_MIN_IDLE`] among the least
    /// recently used. Every removal here leaves its session's count. If nothing could go,
    /// the caller may shed the oldest unproven flow ([`Forwarder::shed_oldest_unproven`])
    /// for a flow it admits, or refuses it.
    fn make_room(&mut self, now: Instant) {
        if self.table.len() < self.table.capacity() {
            return;
        }
        let mut keep_budget = SHED_SCAN;
        let seconds = self.table_seconds(now);
        let removed = self.pop_idle(now, &mut keep_budget).or_else(|| {
            let (mirror, returns) = (&mut self.mirror, &self.returns);
            let (key, flow) = self.table.shed_where(now, SHED_SCAN, |key, flow, idle| {
                if !flow.value.proven() {
                    return idle >= SHED_MIN_IDLE;
                }
                let silent_s = seconds.saturating_sub(flow.value.server_seen_at_s);
                if u64::from(silent_s) < SERVER_SILENT_SHED.as_secs() {
                    return false;
                }
                // Traffic this forwarder does not see: what the fast path carried (either
                // way) and returns other workers took count as the transceiver's.
                let route = flow.value.route;
                let seen_elsewhere = (mirror.as_mut())
                    .and_then(|mirror| mirror.last_seen(key, route, now))
                    .max((returns.as_ref()).and_then(|r| r.last_seen(key, route.next_hop)));
                seen_elsewhere
                    .is_none_or(|at| now.saturating_duration_since(at) >= SERVER_SILENT_SHED)
            })?;
            self.unshare(&key, flow.value.route, flow.value.proven());
            Some((key, flow.value))
        });
        if let Some((_, flow)) = removed {
            self.admission.left(flow.session);
        }
    }

    /// Remembers that the unproven flow `key` was made at `created_at_s`, for
    /// [`Forwarder::shed_oldest_unproven`]. The oldest entry is forgotten when the queue
    /// holds as many as the table (it never grows).
    fn track_unproven(&mut self, key: FlowKey, created_at_s: u32) {
        if self.unproven.len() == self.unproven.capacity() {
            self.unproven.pop_front();
        }
        self.unproven.push_back((key, created_at_s));
    }

    /// The oldest flow in the table still unproven, if any; entries of flows since
    /// proven or gone are dropped on the way. Amortized O(1): each entry is looked at
    /// once.
    fn oldest_unproven(&mut self) -> Option<FlowKey> {
        while let Some(&(key, created_at_s)) = self.unproven.front() {
            let same_unproven_flow = self
                .table
                .peek(&key)
                .is_some_and(|f| !f.value.proven() && f.value.created_at_s == created_at_s);
            if same_unproven_flow {
                return Some(key);
            }
            self.unproven.pop_front();
        }
        None
    }

    /// Removes the oldest unproven flow, however busy, to make room for a flow just
    /// admitted; it leaves its session's count. Returns whether one went.
    fn shed_oldest_unproven(&mut self) -> bool {
        let Some(key) = self.oldest_unproven() else {
            return false;
        };
        self.unproven.pop_front();
        let Some(flow) = self.table.shed(&key) else {
            return false;
        };
        self.unshare(&key, flow.value.route, false);
        self.admission.left(flow.value.session);
        true
    }

    /// A first packet's syntax, checked before it may spend an authentication attempt
    /// (no HMAC): a STUN message with the magic cookie and a whole length, a Binding
    /// Request, a USERNAME with both ufrags, and a server ufrag with a hint's length,
    /// alphabet, version and a key id this relay holds.
    fn first_request_view<'d>(
        &self,
        datagram: &'d [u8],
    ) -> Result<(StunView<'d>, HintShape), DropReason> {
        let view = StunView::parse(datagram)?;
        if !view.is_binding_request() {
            return Err(DropReason::NotBindingRequest);
        }
        let shape = self.policy.hint_keys.recognise(view.ufrags()?.server)?;
        Ok((view, shape))
    }

    /// The full first-packet check: [`Forwarder::first_request_view`], then
    /// [`Forwarder::authenticate_first_request`].
    fn authenticate_binding_request<'d>(
        &self,
        datagram: &'d [u8],
        return_via: Option<SocketAddr>,
        now: Instant,
    ) -> Result<(Route, FirstRequest<'d>), DropReason> {
        let (view, shape) = self.first_request_view(datagram)?;
        self.authenticate_first_request(&view, &shape, return_via, now)
    }

    /// The costly part of the first-packet check, on a request of the right shape: an
    /// authentic hint young enough to make flows, MESSAGE-INTEGRITY under the derived
    /// password, FINGERPRINT if present, destination allowed (our cluster) or a known
    /// cluster relay (another cluster).
    fn authenticate_first_request<'d>(
        &self,
        view: &StunView<'d>,
        shape: &HintShape,
        return_via: Option<SocketAddr>,
        now: Instant,
    ) -> Result<(Route, FirstRequest<'d>), DropReason> {
        let server = view.ufrags()?.server;
        let keys = &self.policy.hint_keys;
        let verified = keys.authenticate_shape(shape)?;
        // Before the other two HMACs: an expired hint is refused cheaply.
        self.admission.check_hint_age(verified.minted_unix_s, now)?;
        let password = keys
            .ice_password(verified.key_id, server)
            .ok_or(DropReason::HintUnknownKey)?;
        view.verify_integrity(password.as_bytes())?;
        if view.has_fingerprint() {
            view.verify_fingerprint()?;
        }
        let next_hop = if verified.hint.cluster == self.policy.cluster_id {
            let to = verified.hint.transceiver;
            if !contains(&self.policy.allowed_transceiver_networks, to) {
                return Err(DropReason::HintDestinationNotAllowed);
            }
            to
        } else if return_via.is_some() {
            // A global relay sent this to us as the hint's cluster; never pass it on again.
            return Err(DropReason::UnknownCluster);
        } else {
            *self
                .policy
                .clusters
                .get(&verified.hint.cluster)
                .ok_or(DropReason::UnknownCluster)?
        };
        let route = Route {
            next_hop,
            return_via,
        };
        let request = FirstRequest {
            session: self.admission.session_tag(&verified),
            transaction_id: view.transaction_id(),
        };
        Ok((route, request))
    }

    /// A Binding Request on a flow idle for [`REROUTE_MIN_IDLE`] whose authentic hint
    /// routes elsewhere moves the flow: the client's address now belongs to a new
    /// session (which must prove the flow again, within its own flow cap). Returns the
    /// next hop.
    fn follow_rerouted_session(
        &mut self,
        datagram: &[u8],
        key: &FlowKey,
        state: FlowState,
        return_via: Option<SocketAddr>,
        now: Instant,
    ) -> SocketAddr {
        let route = state.route;
        let Some(hint) = StunView::parse(datagram)
            .ok()
            .and_then(|view| view.ufrags().ok())
            .and_then(|pair| self.policy.hint_keys.authenticate(pair.server).ok())
        else {
            return route.next_hop;
        };
        // Cheap check first: same destination (every consent check) → nothing to do.
        let same_cluster = hint.hint.cluster == self.policy.cluster_id;
        if same_cluster && hint.hint.transceiver == route.next_hop {
            return route.next_hop;
        }
        let Ok((new_route, request)) = self.authenticate_binding_request(datagram, return_via, now)
        else {
            return route.next_hop;
        };
        if new_route == route {
            return route.next_hop;
        }
        let request = FlowRequest {
            session: request.session,
            source: key.client,
            transaction_id: request.transaction_id,
        };
        if self.admission.check(&request, now).is_err() {
            return route.next_hop;
        }
        // An update of an existing key: never refused for lack of room.
        let seconds = self.seconds(now);
        let moved =
            FlowState::unproven(new_route, request.session, seconds, self.table_seconds(now));
        let _ = self.table.insert(key, moved, now);
        self.track_unproven(*key, seconds);
        self.unshare(key, route, state.proven());
        self.share(key, new_route, now);
        self.admission.left(state.session);
        self.admission.admitted(&request);
        new_route.next_hop
    }

    /// Whether `source` may send this relay frames at all (a transceiver, a global relay
    /// or a cluster's relay), the first check on every datagram of the internal port.
    pub fn accepts_frames_from(&self, source: SocketAddr) -> bool {
        self.frame_sender(source).is_some()
    }

    /// Who `source` is as a sender of frames; `None` when it may send none.
    fn frame_sender(&self, source: SocketAddr) -> Option<FrameSender> {
        let from_global = contains(&self.policy.global_relay_networks, source);
        let from_transceiver = contains(&self.policy.allowed_transceiver_networks, source);
        let from_cluster_relay = self.policy.clusters.values().any(|r| *r == source);
        (from_global || from_transceiver || from_cluster_relay).then_some(FrameSender {
            from_global,
            from_cluster_relay,
        })
    }

    /// Decides a datagram that arrived from `source` on the worker's internal port.
    pub fn from_internal(&mut self, frame: &[u8], source: SocketAddr, now: Instant) -> Verdict {
        let Some(FrameSender {
            from_global,
            from_cluster_relay,
        }) = self.frame_sender(source)
        else {
            return Verdict::Drop(DropReason::FrameSourceNotAllowed);
        };
        let (header, payload) = match FrameHeader::parse(frame) {
            Ok(parsed) => parsed,
            Err(e) => return Verdict::Drop(e.into()),
        };
        if header.transport != self.transport {
            return Verdict::Drop(DropReason::FrameWrongTransport);
        }
        let key = FlowKey::new(header.client, header.vip);
        if header.session_ended {
            if from_global && !from_cluster_relay {
                // A global relay carries clients' datagrams here, never a notice.
                return Verdict::Drop(DropReason::FrameSourceNotAllowed);
            }
            return self.session_ended(&key, source);
        }
        // A frame from a global relay carries a client's datagram towards a transceiver.
        // The global relays' networks are configured explicitly and take precedence over
        // the (usually wider) transceiver networks; a configured cluster relay's exact
        // address always sends return frames.
        if from_global && !from_cluster_relay {
            let payload_at = frame.len() - payload.len();
            return self.decide_client(
                frame,
                payload_at,
                header.client,
                header.vip,
                Some(source),
                now,
            );
        }
        let vip_is_ours = self.policy.vips.contains(&header.vip);
        // The transceiver's half of a proof: DTLS or media on a path that answered its
        // probe. DTLS to a path nobody has shown to receive on proves nothing.
        let proves = |payload: &[u8]| {
            header.verified_path && DatagramKind::classify(payload) != DatagramKind::Stun
        };
        let mut first_server_media = false;
        let outcome = match self.table.lookup_ticked(&key, now) {
            None => {
                let media = proves(payload);
                self.take_shared_return(&key, source, vip_is_ours, media, frame, payload, now)
            }
            Some((flow, _)) if flow.value.route.next_hop != source => {
                Err(DropReason::ReturnWrongSource)
            }
            Some((flow, clock_ms)) => {
                // The transceiver's half of the proof: its source is the flow's next hop,
                // checked above.
                first_server_media = !flow.value.server_media && proves(payload);
                if header.verified_path {
                    flow.value.server_seen_at_s = table_seconds(clock_ms);
                }
                match flow.value.route.return_via {
                    Some(global) => {
                        flow.record_out(payload.len());
                        Ok(Verdict::Relay { to: global })
                    }
                    None if !vip_is_ours => Err(DropReason::ReturnUnknownVip),
                    None => {
                        flow.record_out(payload.len());
                        Ok(Verdict::Return {
                            client: header.client,
                            vip: header.vip,
                            payload_at: frame.len() - payload.len(),
                        })
                    }
                }
            }
        };
        if first_server_media {
            self.server_media_arrived(&key, now);
        }
        outcome.unwrap_or_else(Verdict::Drop)
    }

    /// The flow's next hop says its session ended: the flow goes now (its session's count,
    /// shared return path, mirror and fast-path entries with it) instead of when it goes
    /// idle. A flow that returns through a global relay passes the notice on to it, which
    /// forgets its own flow the same way. Only the flow's next hop may say so.
    #[cold]
    fn session_ended(&mut self, key: &FlowKey, source: SocketAddr) -> Verdict {
        let Some(flow) = self.table.peek(key) else {
            return Verdict::Drop(DropReason::SessionEndNoFlow);
        };
        let (route, recorded) = (flow.value.route, flow.value.recorded_at_s.is_some());
        if route.next_hop != source {
            return Verdict::Drop(DropReason::ReturnWrongSource);
        }
        self.end_flow(key);
        if recorded {
            self.pending_cache_write = Some((*key, None));
        }
        match route.return_via {
            Some(global) => Verdict::Relay { to: global },
            None => Verdict::Drop(DropReason::SessionEnded),
        }
    }

    /// The transceiver sent DTLS or media on `key`'s flow for the first time: if the
    /// client has too, the flow is proven now (mirrored, and recorded at once: a mirror
    /// may carry the client's next datagrams past the forwarder). Once per flow, so off
    /// the per-datagram path.
    #[cold]
    fn server_media_arrived(&mut self, key: &FlowKey, now: Instant) {
        let seconds = self.seconds(now);
        let route_cache = self.policy.route_cache;
        let Some(flow) = self.table.lookup(key, now) else {
            return;
        };
        flow.value.server_media = true;
        // Proven now, unless its prefix is at its cap.
        if !flow.value.proven()
            || !Self::count_proof(
                &mut self.proven_prefixes,
                &mut self.counters,
                key,
                &mut flow.value,
            )
        {
            return;
        }
        let route = flow.value.route;
        if route_cache {
            flow.value.recorded_at_s = Some(seconds);
            self.pending_cache_write = Some((*key, Some(route)));
        }
        if let Some(mirror) = &mut self.mirror {
            mirror.proven(key, route, now);
        }
    }

    /// A return frame for a flow this worker does not hold: decided from the shared
    /// return paths (another worker's flow), by the same rule as a local one; a return
    /// of DTLS or media (`media`) is marked there for the owner.
    #[allow(clippy::too_many_arguments)]
    fn take_shared_return(
        &mut self,
        key: &FlowKey,
        source: SocketAddr,
        vip_is_ours: bool,
        media: bool,
        frame: &[u8],
        payload: &[u8],
        now: Instant,
    ) -> Result<Verdict, DropReason> {
        let returns = self.returns.as_ref().ok_or(DropReason::ReturnNoFlow)?;
        let verdict = match returns.take_return(key, source, media, now) {
            None => return Err(DropReason::ReturnNoFlow),
            Some(SharedReturn::ViaRelay(global)) => Verdict::Relay { to: global },
            Some(SharedReturn::ToClient) if !vip_is_ours => {
                return Err(DropReason::ReturnUnknownVip);
            }
            Some(SharedReturn::ToClient) => Verdict::Return {
                client: key.client,
                vip: key.vip,
                payload_at: frame.len() - payload.len(),
            },
        };
        self.counters.shared_returns += 1;
        Ok(verdict)
    }

    /// The question about `key`'s route never left (the queue to the cache was full):
    /// the flow's next datagram may ask again.
    pub fn route_question_lost(&mut self, key: &FlowKey) {
        if let Some(lookups) = &mut self.lookups {
            lookups.forget(key);
        }
    }

    /// The route cache did not know `key`'s flow: it is not asked about again for a
    /// moment ([`crate::route_lookups::MISS_MEMORY`]).
    pub fn route_missing(&mut self, key: &FlowKey, now: Instant) {
        if let Some(lookups) = &mut self.lookups {
            lookups.missed(key, now);
        }
    }

    /// Installs a route the cache returned for `key` (unless a flow appeared meanwhile).
    pub fn restore(
        &mut self,
        key: &FlowKey,
        route: Route,
        now: Instant,
    ) -> Result<(), RestoreRefused> {
        if self.table.peek(key).is_some() {
            return Ok(());
        }
        let destination_ok = contains(&self.policy.allowed_transceiver_networks, route.next_hop)
            || self.policy.clusters.values().any(|r| *r == route.next_hop);
        // A route that returns through a global relay must name one of theirs: the cache
        // is not trusted to point the relay's VIP traffic anywhere else.
        let return_ok = route
            .return_via
            .is_none_or(|via| contains(&self.policy.global_relay_networks, via));
        if !(destination_ok && return_ok) {
            return Err(RestoreRefused::DestinationNotAllowed);
        }
        self.make_room(now);
        if self.table.len() == self.table.capacity() {
            // A session's path (only proven flows are cached) outranks an unproven flow.
            self.shed_oldest_unproven();
        }
        // Only proven flows are cached, so a restored flow is proven; it counts for no
        // session (the cache holds routes, not ufrags).
        let seconds = self.seconds(now);
        let mut state = FlowState {
            recorded_at_s: Some(seconds),
            client_media: true,
            server_media: true,
            ..FlowState::unproven(route, SessionTag(0), seconds, self.table_seconds(now))
        };
        if self.table.len() == self.table.capacity() {
            self.table.refuse();
            return Err(RestoreRefused::TableFull);
        }
        let proven = Self::count_proof(
            &mut self.proven_prefixes,
            &mut self.counters,
            key,
            &mut state,
        );
        match self.table.insert(key, state, now) {
            Ok(Inserted::Created | Inserted::Updated) => {
                self.share(key, route, now);
                if !proven {
                    // Over its prefix's cap: sheddable like any unproven flow.
                    self.track_unproven(*key, seconds);
                } else if let Some(mirror) = &mut self.mirror {
                    mirror.proven(key, route, now);
                }
                Ok(())
            }
            Err(InsertError::TableFull) => {
                if proven {
                    self.proven_prefixes.forget(key.client.ip());
                }
                Err(RestoreRefused::TableFull)
            }
        }
    }

    /// Ends `key`'s flow now, whatever its idle time: its client is gone (a TCP
    /// connection closed). Its session's count drops; returns whether it was held.
    pub fn end_flow(&mut self, key: &FlowKey) -> bool {
        let Some(flow) = self.table.remove(key) else {
            return false;
        };
        self.unshare(key, flow.value.route, flow.value.proven());
        self.admission.left(flow.value.session);
        true
    }

    /// Expires up to `budget` idle flows at `now`; returns how many.
    /// Flows another worker keeps alive (see [`Forwarder::with_shared_returns`]) are kept
    /// instead, within the same budget.
    pub fn expire(&mut self, now: Instant, budget: usize) -> usize {
        if let Some(mirror) = &mut self.mirror {
            mirror.maintain();
        }
        let mut expired = 0;
        let mut keep_budget = budget;
        while expired < budget {
            let Some((_, flow)) = self.pop_idle(now, &mut keep_budget) else {
                break;
            };
            self.admission.left(flow.session);
            expired += 1;
        }
        expired
    }
}
