//! The relay's counters: what each worker counts, and the metric families they are exposed
//! as. Writing them out on `/metrics` is the runtime's job (`runtime::exposition`); the
//! reasons they are counted under are in [`crate::reasons`].
//!
//! A worker counts into a plain [`WorkerCounters`] it owns (no atomics, no locks on the
//! packet path) and copies it into its [`SharedCounters`] every so often with
//! [`SharedCounters::publish`] (single writer, relaxed stores). The scrape side reads the
//! shared copies through [`RelayMetrics`].
//!
//! | metric                                       | type    | labels               |
//! |----------------------------------------------|---------|----------------------|
//! | `ufrag_relay_received_datagrams_total`       | counter | worker, port         |
//! | `ufrag_relay_received_bytes_total`           | counter | worker, port         |
//! | `ufrag_relay_forwarded_datagrams_total`      | counter | worker, direction    |
//! | `ufrag_relay_forwarded_bytes_total`          | counter | worker, direction    |
//! | `ufrag_relay_dropped_datagrams_total`        | counter | worker, reason       |
//! | `ufrag_relay_dropped_bytes_total`            | counter | worker, reason       |
//! | `ufrag_relay_flows_active`                   | gauge   | worker               |
//! | `ufrag_relay_flows_created_total`            | counter | worker               |
//! | `ufrag_relay_flows_expired_total`            | counter | worker               |
//! | `ufrag_relay_flows_refused_total`            | counter | worker               |
//! | `ufrag_relay_flows_shed_total`               | counter | worker               |
//! | `ufrag_relay_flows_over_prefix_cap_total`    | counter | worker               |
//! | `ufrag_relay_replay_filter_overwrites_total` | counter | worker               |
//! | `ufrag_relay_cache_hits_total`               | counter | worker               |
//! | `ufrag_relay_cache_misses_total`             | counter | worker               |
//! | `ufrag_relay_cache_errors_total`             | counter | worker, reason       |
//! | `ufrag_relay_bundles_received_total`         | counter | worker               |
//! | `ufrag_relay_bundles_sent_total`             | counter | worker               |
//! | `ufrag_relay_gso_sends_total`                | counter | worker               |
//! | `ufrag_relay_ready`                          | gauge   |                      |
//! | `ufrag_relay_worker_failures_total`          | counter |                      |
//! | `ufrag_relay_hint_key_info`                  | gauge   | key_id               |
//! | `ufrag_relay_hint_key_reloads_total`         | counter | result               |
//! | `ufrag_relay_http_refused_total`             | counter | reason               |
//! | `ufrag_relay_build_info`                     | gauge   | backend, version     |
//!
//! With ICE-TCP on, the first six families and the flow families come again as
//! `ufrag_relay_tcp_*`, counting RFC 4571 messages (`…_received_messages_total`,
//! `…_forwarded_messages_total`, `…_dropped_messages_total`) instead of datagrams. A
//! datagram is one UDP payload wherever it is counted; a packet is only ever an RTP or
//! RTCP packet (the transceiver's word for its media, never the relay's).
//!
//! `direction` is `in` (client → transceiver) or `out` (transceiver → client); `reason`
//! is one of [`DropReason::label`] (drops) or [`CacheError::label`] (cache errors); `port` is where a datagram arrived: `vip` or
//! `internal`.
//!
//! **The counting contract** (kept by [`crate::execute::Executor`], checked by a property
//! test): every datagram received ends in exactly one counter, forwarded `in`, forwarded
//! `out`, or one drop reason, in datagrams and in bytes alike. Bytes are always the
//! datagram's size as received (UDP payload, frame header included for frames), so that
//! once no send is in flight, `received == forwarded(in) + forwarded(out) + dropped` holds
//! for datagrams and for bytes, per worker and in total.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::reasons::{CacheError, Direction, DropReason, HttpRefusal, Port, TcpCloseReason};

/// The counters one worker owns and bumps on its packet path: plain integers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCounters {
    /// Datagrams received, by [`Port`] index.
    pub received_datagrams: [u64; 2],
    /// Bytes received (datagram sizes as received), by [`Port`] index.
    pub received_bytes: [u64; 2],
    /// Datagrams forwarded, by [`Direction`] index.
    pub forwarded_datagrams: [u64; 2],
    /// Bytes forwarded (datagram sizes as received), by [`Direction`] index.
    pub forwarded_bytes: [u64; 2],
    /// Drops, by [`DropReason::index`].
    pub dropped_datagrams: [u64; DropReason::COUNT],
    /// Bytes dropped (datagram sizes as received), by [`DropReason::index`].
    pub dropped_bytes: [u64; DropReason::COUNT],
    /// Flows in the worker's table now.
    pub flows_active: u64,
    /// Flows created.
    pub flows_created: u64,
    /// Flows expired.
    pub flows_expired: u64,
    /// Flow inserts refused (table full).
    pub flows_refused: u64,
    pub flows_shed: u64,
    /// Route-cache lookups that found a route.
    pub cache_hits: u64,
    /// Route-cache lookups that found nothing.
    pub cache_misses: u64,
    /// Route-cache operations that failed, by [`CacheError::index`].
    pub cache_errors: [u64; CacheError::COUNT],
    /// Return frames for flows another worker owns, taken from the shared return paths.
    pub shared_returns: u64,
    /// Flows whose return path found no room in the shared return paths.
    pub flows_unshared: u64,
    /// Flows kept unproven because their client's prefix held its cap of proven flows.
    pub flows_over_prefix_cap: u64,
    /// First requests recorded in the replay filter over a transaction still in its window.
    pub replay_overwrites: u64,
    /// Bundles of frames received on the internal port and opened (their frames are
    /// counted as datagrams).
    pub bundles_received: u64,
    /// Bundles of frames sent on the internal port (two frames or more each).
    pub bundles_sent: u64,
    /// Sends on the internal port that carried several datagrams as GSO segments.
    pub gso_sends: u64,
}

impl Default for WorkerCounters {
    fn default() -> Self {
        WorkerCounters {
            received_datagrams: [0; 2],
            received_bytes: [0; 2],
            forwarded_datagrams: [0; 2],
            forwarded_bytes: [0; 2],
            dropped_datagrams: [0; DropReason::COUNT],
            dropped_bytes: [0; DropReason::COUNT],
            flows_active: 0,
            flows_created: 0,
            flows_expired: 0,
            flows_refused: 0,
            flows_shed: 0,
            cache_hits: 0,
            cache_misses: 0,
            cache_errors: [0; CacheError::COUNT],
            shared_returns: 0,
            flows_unshared: 0,
            flows_over_prefix_cap: 0,
            replay_overwrites: 0,
            bundles_received: 0,
            bundles_sent: 0,
            gso_sends: 0,
        }
    }
}

impl WorkerCounters {
    /// Counts one received datagram of `bytes` bytes.
    #[inline]
    pub fn received(&mut self, port: Port, bytes: usize) {
        self.received_datagrams[port as usize] += 1;
        self.received_bytes[port as usize] += bytes as u64;
    }

    /// Counts one forwarded datagram of `bytes` bytes (as received).
    #[inline]
    pub fn forwarded(&mut self, direction: Direction, bytes: usize) {
        self.forwarded_many(direction, 1, bytes as u64);
    }

    /// Counts one dropped datagram of `bytes` bytes (as received).
    #[inline]
    pub fn dropped(&mut self, reason: impl Into<DropReason>, bytes: usize) {
        self.dropped_many(reason, 1, bytes as u64);
    }

    /// Counts `datagrams` forwarded datagrams of `bytes` bytes in all (as received).
    #[inline]
    pub fn forwarded_many(&mut self, direction: Direction, datagrams: u64, bytes: u64) {
        self.forwarded_datagrams[direction as usize] += datagrams;
        self.forwarded_bytes[direction as usize] += bytes;
    }

    /// Counts `datagrams` dropped datagrams of `bytes` bytes in all (as received).
    #[inline]
    pub fn dropped_many(&mut self, reason: impl Into<DropReason>, datagrams: u64, bytes: u64) {
        let i = reason.into().index();
        self.dropped_datagrams[i] += datagrams;
        self.dropped_bytes[i] += bytes;
    }

    /// Datagrams received but neither forwarded nor dropped yet, in datagrams and bytes:
    /// those a backend still holds for sending. Zero whenever no send is in flight; a
    /// value that stays non-zero (or a negative one, shown as `None`) is a counting bug.
    pub fn in_flight(&self) -> Option<(u64, u64)> {
        let settled_datagrams = self
            .forwarded_datagrams
            .iter()
            .chain(&self.dropped_datagrams)
            .sum::<u64>();
        let settled_bytes = self
            .forwarded_bytes
            .iter()
            .chain(&self.dropped_bytes)
            .sum::<u64>();
        Some((
            self.received_datagrams
                .iter()
                .sum::<u64>()
                .checked_sub(settled_datagrams)?,
            self.received_bytes
                .iter()
                .sum::<u64>()
                .checked_sub(settled_bytes)?,
        ))
    }

    /// The drop count of one reason.
    pub fn drops_of(&self, reason: DropReason) -> u64 {
        self.dropped_datagrams[reason.index()]
    }

    /// Counts `count` route-cache failures for one reason.
    #[inline]
    pub fn cache_failed(&mut self, reason: CacheError, count: u64) {
        self.cache_errors[reason.index()] += count;
    }

    /// Route-cache failures, every reason together.
    pub fn cache_errors_total(&self) -> u64 {
        self.cache_errors.iter().sum()
    }
}

/// A worker's counters as the scrape side sees them: one writer (the worker), any
/// number of readers.
#[derive(Debug)]
pub struct SharedCounters {
    received_datagrams: [AtomicU64; 2],
    received_bytes: [AtomicU64; 2],
    forwarded_datagrams: [AtomicU64; 2],
    forwarded_bytes: [AtomicU64; 2],
    dropped_datagrams: [AtomicU64; DropReason::COUNT],
    dropped_bytes: [AtomicU64; DropReason::COUNT],
    flows_active: AtomicU64,
    flows_created: AtomicU64,
    flows_expired: AtomicU64,
    flows_refused: AtomicU64,
    flows_shed: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    cache_errors: [AtomicU64; CacheError::COUNT],
    shared_returns: AtomicU64,
    flows_unshared: AtomicU64,
    flows_over_prefix_cap: AtomicU64,
    replay_overwrites: AtomicU64,
    bundles_received: AtomicU64,
    bundles_sent: AtomicU64,
    gso_sends: AtomicU64,
}

impl Default for SharedCounters {
    fn default() -> Self {
        SharedCounters {
            received_datagrams: Default::default(),
            received_bytes: Default::default(),
            forwarded_datagrams: Default::default(),
            forwarded_bytes: Default::default(),
            dropped_datagrams: core::array::from_fn(|_| AtomicU64::new(0)),
            dropped_bytes: core::array::from_fn(|_| AtomicU64::new(0)),
            flows_active: AtomicU64::new(0),
            flows_created: AtomicU64::new(0),
            flows_expired: AtomicU64::new(0),
            flows_refused: AtomicU64::new(0),
            flows_shed: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            cache_misses: AtomicU64::new(0),
            cache_errors: core::array::from_fn(|_| AtomicU64::new(0)),
            shared_returns: AtomicU64::new(0),
            flows_unshared: AtomicU64::new(0),
            flows_over_prefix_cap: AtomicU64::new(0),
            replay_overwrites: AtomicU64::new(0),
            bundles_received: AtomicU64::new(0),
            bundles_sent: AtomicU64::new(0),
            gso_sends: AtomicU64::new(0),
        }
    }
}

fn store_all<const N: usize>(dst: &[AtomicU64; N], src: &[u64; N]) {
    for (d, s) in dst.iter().zip(src) {
        d.store(*s, Ordering::Relaxed);
    }
}

fn load_all<const N: usize>(src: &[AtomicU64; N]) -> [u64; N] {
    core::array::from_fn(|i| src[i].load(Ordering::Relaxed))
}

impl SharedCounters {
    /// Copies the worker's counters for scraping. Call from the owning worker only.
    pub fn publish(&self, local: &WorkerCounters) {
        store_all(&self.received_datagrams, &local.received_datagrams);
        store_all(&self.received_bytes, &local.received_bytes);
        store_all(&self.forwarded_datagrams, &local.forwarded_datagrams);
        store_all(&self.forwarded_bytes, &local.forwarded_bytes);
        store_all(&self.dropped_datagrams, &local.dropped_datagrams);
        store_all(&self.dropped_bytes, &local.dropped_bytes);
        store_all(&self.cache_errors, &local.cache_errors);
        let scalars = [
            (&self.flows_active, local.flows_active),
            (&self.flows_created, local.flows_created),
            (&self.flows_expired, local.flows_expired),
            (&self.flows_refused, local.flows_refused),
            (&self.flows_shed, local.flows_shed),
            (&self.cache_hits, local.cache_hits),
            (&self.cache_misses, local.cache_misses),
            (&self.shared_returns, local.shared_returns),
            (&self.flows_unshared, local.flows_unshared),
            (&self.flows_over_prefix_cap, local.flows_over_prefix_cap),
            (&self.replay_overwrites, local.replay_overwrites),
            (&self.bundles_received, local.bundles_received),
            (&self.bundles_sent, local.bundles_sent),
            (&self.gso_sends, local.gso_sends),
        ];
        for (d, s) in scalars {
            d.store(s, Ordering::Relaxed);
        }
    }

    /// A copy of the last published counters.
    pub fn snapshot(&self) -> WorkerCounters {
        WorkerCounters {
            received_datagrams: load_all(&self.received_datagrams),
            received_bytes: load_all(&self.received_bytes),
            forwarded_datagrams: load_all(&self.forwarded_datagrams),
            forwarded_bytes: load_all(&self.forwarded_bytes),
            dropped_datagrams: load_all(&self.dropped_datagrams),
            dropped_bytes: load_all(&self.dropped_bytes),
            flows_active: self.flows_active.load(Ordering::Relaxed),
            flows_created: self.flows_created.load(Ordering::Relaxed),
            flows_expired: self.flows_expired.load(Ordering::Relaxed),
            flows_refused: self.flows_refused.load(Ordering::Relaxed),
            flows_shed: self.flows_shed.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
            cache_misses: self.cache_misses.load(Ordering::Relaxed),
            cache_errors: load_all(&self.cache_errors),
            shared_returns: self.shared_returns.load(Ordering::Relaxed),
            flows_unshared: self.flows_unshared.load(Ordering::Relaxed),
            flows_over_prefix_cap: self.flows_over_prefix_cap.load(Ordering::Relaxed),
            replay_overwrites: self.replay_overwrites.load(Ordering::Relaxed),
            bundles_received: self.bundles_received.load(Ordering::Relaxed),
            bundles_sent: self.bundles_sent.load(Ordering::Relaxed),
            gso_sends: self.gso_sends.load(Ordering::Relaxed),
        }
    }
}

/// What an in-kernel fast path (relay-afxdp `--fast-path xdp`) carried and left to the
/// workers, read when `/metrics` is scraped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastPathTotals {
    /// Datagrams and bytes (as sent) towards transceivers.
    pub forward: (u64, u64),
    /// Datagrams and bytes (as sent) to clients.
    pub back: (u64, u64),
    /// Datagrams left to the workers: STUN, no entry, a frame it does not take, a next
    /// hop without a MAC yet.
    pub left: [u64; 4],
    /// Proven flows the workers could not hand to it (a next hop's MAC unknown, a map
    /// full, mixed address families): carried by the workers instead.
    pub flows_not_installed: u64,
}

/// The labels of [`FastPathTotals::left`].
pub const FAST_PATH_LEFT_LABELS: [&str; 4] = ["stun", "miss", "unfit", "no_mac"];

/// Reads the fast path's totals.
pub type FastPathSource = Box<dyn Fn() -> FastPathTotals + Send + Sync>;

/// One worker's ICE-TCP connection counts, updated by the worker as connections come and
/// go (never per message).
#[derive(Debug)]
pub struct TcpConnectionCounters {
    accepted: AtomicU64,
    active: AtomicU64,
    closed: [AtomicU64; TcpCloseReason::COUNT],
}

impl Default for TcpConnectionCounters {
    fn default() -> Self {
        TcpConnectionCounters {
            accepted: AtomicU64::new(0),
            active: AtomicU64::new(0),
            closed: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl TcpConnectionCounters {
    /// A connection was accepted and is open now.
    pub fn opened(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
    }

    /// An open connection was closed for `reason`.
    pub fn closed(&self, reason: TcpCloseReason) {
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.closed[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// A connection was refused at accept (closed before it was counted open).
    pub fn refused(&self, reason: TcpCloseReason) {
        self.closed[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Connections closed or refused for `reason` so far.
    pub fn closed_for(&self, reason: TcpCloseReason) -> u64 {
        self.closed[reason.index()].load(Ordering::Relaxed)
    }
}

/// One worker's ICE-TCP side as `/metrics` sees it: its messages (counted as datagrams
/// are) and its connections.
#[derive(Clone, Debug, Default)]
pub struct TcpWorkerMetrics {
    /// Messages in and out and drops, published by the worker's TCP executor.
    pub messages: Arc<SharedCounters>,
    /// Connections opened, open, and closed by reason.
    pub connections: Arc<TcpConnectionCounters>,
}

/// Everything a relay exposes on `/metrics`: every worker's shared counters, readiness,
/// and which backend this is.
pub struct RelayMetrics {
    pub(crate) backend: &'static str,
    pub(crate) workers: Vec<Arc<SharedCounters>>,
    /// One per worker when ICE-TCP is served, else empty.
    pub(crate) tcp: Vec<TcpWorkerMetrics>,
    pub(crate) ready: AtomicBool,
    pub(crate) worker_failures: AtomicU64,
    /// The id of the hint key new hints are checked against first (the current one).
    pub(crate) hint_key: AtomicU64,
    /// Key file reloads: taken, and refused.
    pub(crate) key_reloads: [AtomicU64; 2],
    /// Connections to the HTTP endpoints refused or cut, by [`HttpRefusal`].
    pub(crate) http_refused: [AtomicU64; HttpRefusal::ALL.len()],
    pub(crate) fast_path: std::sync::OnceLock<FastPathSource>,
}

impl core::fmt::Debug for RelayMetrics {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RelayMetrics")
            .field("backend", &self.backend)
            .field("workers", &self.workers.len())
            .field("fast_path", &self.fast_path.get().is_some())
            .finish_non_exhaustive()
    }
}

impl RelayMetrics {
    /// Metrics for `workers` workers of the named backend (`"mio"` or `"afxdp"`).
    pub fn new(backend: &'static str, workers: usize) -> Arc<Self> {
        Self::serving(backend, workers, false)
    }

    /// Like [`RelayMetrics::new`], with each worker's ICE-TCP side too when `tcp`.
    pub fn serving(backend: &'static str, workers: usize, tcp: bool) -> Arc<Self> {
        let tcp_workers = if tcp { workers } else { 0 };
        Arc::new(RelayMetrics {
            backend,
            workers: (0..workers).map(|_| Arc::default()).collect(),
            tcp: (0..tcp_workers)
                .map(|_| TcpWorkerMetrics::default())
                .collect(),
            ready: AtomicBool::new(false),
            worker_failures: AtomicU64::new(0),
            hint_key: AtomicU64::new(0),
            key_reloads: Default::default(),
            http_refused: Default::default(),
            fast_path: std::sync::OnceLock::new(),
        })
    }

    /// Exposes an in-kernel fast path's totals (read at each scrape). Once; later calls
    /// are ignored.
    pub fn set_fast_path(&self, source: FastPathSource) {
        let _ = self.fast_path.set(source);
    }

    /// The fast path's totals, if there is one.
    pub fn fast_path(&self) -> Option<FastPathTotals> {
        self.fast_path.get().map(|read| read())
    }

    /// The hint keys in use now have `current` as their current key id (at start and
    /// after each reload that took effect).
    pub fn hint_key_in_use(&self, current: u8) {
        self.hint_key.store(u64::from(current), Ordering::Relaxed);
    }

    /// A reload of the key file took effect (`true`) or was refused (`false`).
    pub fn hint_key_reloaded(&self, taken: bool) {
        self.key_reloads[usize::from(!taken)].fetch_add(1, Ordering::Relaxed);
    }

    /// The HTTP endpoints refused or cut a connection.
    pub fn http_refused(&self, refusal: HttpRefusal) {
        self.http_refused[refusal as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The shared counters of worker `index`, for that worker to publish into.
    pub fn worker(&self, index: usize) -> Arc<SharedCounters> {
        Arc::clone(&self.workers[index])
    }

    /// Worker `index`'s ICE-TCP counters, when TCP is served.
    pub fn tcp_worker(&self, index: usize) -> Option<&TcpWorkerMetrics> {
        self.tcp.get(index)
    }

    /// Sets readiness (false while starting and draining).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the relay is ready: started, not draining, and no worker has stopped on
    /// its own (its flows would be lost, its share of the port unserved).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && self.worker_failures.load(Ordering::Relaxed) == 0
    }

    /// A worker stopped on its own (a panic or an I/O error): readiness turns off.
    pub fn worker_failed(&self) {
        self.worker_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The sum of all workers' last published counters.
    pub fn totals(&self) -> WorkerCounters {
        let mut total = WorkerCounters::default();
        for w in &self.workers {
            let s = w.snapshot();
            for i in 0..2 {
                total.received_datagrams[i] += s.received_datagrams[i];
                total.received_bytes[i] += s.received_bytes[i];
                total.forwarded_datagrams[i] += s.forwarded_datagrams[i];
                total.forwarded_bytes[i] += s.forwarded_bytes[i];
            }
            for (t, d) in total.dropped_datagrams.iter_mut().zip(s.dropped_datagrams) {
                *t += d;
            }
            for (t, d) in total.dropped_bytes.iter_mut().zip(s.dropped_bytes) {
                *t += d;
            }
            total.flows_active += s.flows_active;
            total.flows_created += s.flows_created;
            total.flows_expired += s.flows_expired;
            total.flows_refused += s.flows_refused;
            total.flows_shed += s.flows_shed;
            total.cache_hits += s.cache_hits;
            total.cache_misses += s.cache_misses;
            for (t, e) in total.cache_errors.iter_mut().zip(s.cache_errors) {
                *t += e;
            }
            total.shared_returns += s.shared_returns;
            total.flows_unshared += s.flows_unshared;
            total.flows_over_prefix_cap += s.flows_over_prefix_cap;
            total.replay_overwrites += s.replay_overwrites;
            total.bundles_received += s.bundles_received;
            total.bundles_sent += s.bundles_sent;
            total.gso_sends += s.gso_sends;
        }
        total
    }
}
