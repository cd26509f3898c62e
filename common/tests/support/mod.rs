//! Test egresses for the executor: one that sends everything, and one whose every
//! transmit follows a plan (send now, fail now, queue then send, queue then fail), so
//! tests can drive the counting contract through each path.
// `from_client`/`from_internal` mirror the `Forwarder` calls the tests were written against.
#![allow(dead_code, unreachable_pub, clippy::wrong_self_convention)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Instant;

use ufrag_common::forward::ForwardPolicy;
use ufrag_common::frame::FrameHeader;
use ufrag_common::hint::{HintKey, HintKeys, RoutingHint, unix_seconds};
use ufrag_common::stun;

use ufrag_common::execute::{Egress, Executor, RouteCacheRequest, Source, Tally, Ticket, Transmit};
use ufrag_common::flow::{FlowKey, FlowTable};
use ufrag_common::forward::{FlowState, Forwarder, Route, Verdict};
use ufrag_common::frame::MAX_HEADER_LEN;
use ufrag_common::metrics::WorkerCounters;
use ufrag_common::reasons::DropReason;

/// What the egress does with one transmit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Sent at once.
    Send,
    /// Refused at once (a full buffer, say).
    FailNow,
    /// Queued; sent at the next flush.
    QueueThenSend,
    /// Queued; refused at the next flush (sendmmsg's EAGAIN).
    QueueThenFail,
}

/// A datagram the egress sent: where to, from which socket, and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    pub to: SocketAddr,
    pub from: Source,
    pub bytes: Vec<u8>,
}

/// An egress that follows a plan of fates (cycled; empty means always `Send`) and
/// accepts route-cache requests while `cache_open`.
#[derive(Debug, Default)]
pub struct PlannedEgress {
    pub plan: Vec<Fate>,
    next: usize,
    queued: Vec<(Ticket, bool)>,
    /// Log what was sent (off where allocation is counted).
    pub log: bool,
    pub sent: Vec<Sent>,
    pub cache_closed: bool,
    pub cache_requests: Vec<RouteCacheRequest>,
    pub released: u64,
}

impl PlannedEgress {
    /// Sends everything and logs it.
    pub fn logging() -> Self {
        PlannedEgress {
            log: true,
            ..Self::default()
        }
    }

    /// Follows `plan`, logs nothing, never allocates after `with_capacity` room.
    pub fn planned(plan: Vec<Fate>) -> Self {
        PlannedEgress {
            plan,
            queued: Vec::with_capacity(1024),
            ..Self::default()
        }
    }

    /// Datagrams queued and not yet settled.
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    fn next_fate(&mut self) -> Fate {
        let fate = self.plan.get(self.next % self.plan.len().max(1)).copied();
        self.next += 1;
        fate.unwrap_or(Fate::Send)
    }
}

impl Egress for PlannedEgress {
    type Received<'r> = &'r [u8];

    fn transmit(&mut self, received: &[u8], tx: Transmit, tally: &mut Tally<'_>) {
        let Some(body) = received.get(tx.payload_at..) else {
            return tally.failed(tx.ticket, DropReason::TooLarge);
        };
        if self.log {
            let mut head = [0u8; MAX_HEADER_LEN];
            let n = tx.emit_header(&mut head);
            let mut bytes = head[..n].to_vec();
            bytes.extend_from_slice(body);
            self.sent.push(Sent {
                to: tx.to,
                from: tx.from,
                bytes,
            });
        }
        match self.next_fate() {
            Fate::Send => tally.sent(tx.ticket),
            Fate::FailNow => tally.failed(tx.ticket, DropReason::SendFailed),
            Fate::QueueThenSend => self.queued.push((tx.ticket, true)),
            Fate::QueueThenFail => self.queued.push((tx.ticket, false)),
        }
    }

    fn flush(&mut self, tally: &mut Tally<'_>) {
        for (ticket, ok) in self.queued.drain(..) {
            if ok {
                tally.sent(ticket);
            } else {
                tally.failed(ticket, DropReason::SendFailed);
            }
        }
    }

    fn route_cache(&mut self, request: RouteCacheRequest) -> bool {
        if self.log {
            self.cache_requests.push(request);
        }
        !self.cache_closed
    }

    fn release(&mut self, _received: &[u8]) {
        self.released += 1;
    }
}

/// A [`PlannedEgress`] that can send a copy of a datagram later, as a socket backend
/// can: datagrams that wait for a route lookup are parked.
#[derive(Debug, Default)]
pub struct ParkingEgress(pub PlannedEgress);

impl Egress for ParkingEgress {
    type Received<'r> = &'r [u8];

    fn transmit(&mut self, received: &[u8], tx: Transmit, tally: &mut Tally<'_>) {
        self.0.transmit(received, tx, tally);
    }

    fn flush(&mut self, tally: &mut Tally<'_>) {
        self.0.flush(tally);
    }

    fn route_cache(&mut self, request: RouteCacheRequest) -> bool {
        self.0.route_cache(request)
    }

    fn release(&mut self, received: &[u8]) {
        self.0.release(received);
    }

    fn bytes_of<'r>(received: Self::Received<'r>) -> Option<&'r [u8]> {
        Some(received)
    }

    fn from_bytes<'r>(bytes: &'r [u8]) -> Option<Self::Received<'r>> {
        Some(bytes)
    }
}

/// A forwarder started at `t0`, its hint clock the wall clock now: the tests mint their
/// hints by the wall clock too.
pub fn started_forwarder(
    policy: ForwardPolicy,
    table: FlowTable<FlowState>,
    t0: Instant,
) -> Forwarder {
    let now_unix_s = unix_seconds(std::time::SystemTime::now());
    Forwarder::new(policy, table, t0, now_unix_s)
}

/// A worker's decision and execution against a [`PlannedEgress`], with the
/// `Forwarder`-shaped calls the forwarding tests use.
#[derive(Debug)]
pub struct TestRelay {
    pub executor: Executor,
    pub egress: PlannedEgress,
}

impl TestRelay {
    pub fn new(forwarder: Forwarder, egress: PlannedEgress) -> Self {
        TestRelay {
            executor: Executor::new(forwarder, std::time::Instant::now()),
            egress,
        }
    }

    pub fn from_client(
        &mut self,
        datagram: &[u8],
        client: SocketAddr,
        vip: SocketAddr,
        now: Instant,
    ) -> Verdict {
        let decision = self.executor.decide_client(datagram, client, vip, now);
        self.executor
            .carry_out(decision, datagram, &mut self.egress)
    }

    pub fn from_internal(&mut self, frame: &[u8], source: SocketAddr, now: Instant) -> Verdict {
        let decision = self.executor.decide_internal(frame, source, now);
        self.executor.carry_out(decision, frame, &mut self.egress)
    }

    pub fn restore(&mut self, key: &FlowKey, route: Route, now: Instant) -> bool {
        self.executor.restore(key, route, now)
    }

    pub fn expire(&mut self, now: Instant, budget: usize) -> usize {
        self.executor.expire(now, budget)
    }

    pub fn end_flow(&mut self, key: &FlowKey) -> bool {
        self.executor.end_flow(key)
    }

    pub fn flush(&mut self) {
        self.executor.flush(&mut self.egress);
    }

    pub fn counters(&mut self) -> &WorkerCounters {
        self.executor.counters()
    }

    pub fn table(&self) -> &FlowTable<FlowState> {
        self.executor.forwarder().table()
    }

    pub fn policy(&self) -> &ForwardPolicy {
        self.executor.forwarder().policy()
    }
}

// Keys, addresses and datagrams the forwarding tests share.

pub const SECRET: &[u8] = &[0x42; 32];
pub const CLUSTER: u16 = 1;

pub fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub fn keys() -> HintKeys {
    HintKeys::new(HintKey::new(1, SECRET).unwrap(), None).unwrap()
}

pub fn policy() -> ForwardPolicy {
    ForwardPolicy {
        vips: vec![a("203.0.113.10:3478")],
        allowed_transceiver_networks: vec!["10.0.0.0/8".parse().unwrap()],
        global_relay_networks: vec![],
        cluster_id: CLUSTER,
        clusters: BTreeMap::new(),
        hint_keys: keys(),
        route_cache: false,
        admission: Default::default(),
        shared_replays: None,
    }
}

pub const VIP: &str = "203.0.113.10:3478";
pub const CLIENT: &str = "198.51.100.7:50000";
pub const TRANSCEIVER: &str = "10.0.0.2:40000";

/// A browser-shaped Binding Request for a session on `transceiver` in `cluster`, the
/// session named by `random`, with transaction id `[random; 12]`.
pub fn binding_request(transceiver: &str, cluster: u16, random: u8) -> Vec<u8> {
    signed_binding_request(transceiver, cluster, random, &[random; 12])
}

/// [`binding_request`] with its own transaction id: what a holder of the session's
/// credentials can sign as often as it likes.
pub fn binding_request_with_transaction(
    transceiver: &str,
    cluster: u16,
    random: u8,
    transaction: u16,
) -> Vec<u8> {
    let mut id = [0xa5; 12];
    id[..2].copy_from_slice(&transaction.to_be_bytes());
    signed_binding_request(transceiver, cluster, random, &id)
}

/// When this test process's hints were minted: once, so that one `random` names one
/// session however long the process runs.
pub fn minted() -> u32 {
    static MINTED: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MINTED.get_or_init(|| unix_seconds(std::time::SystemTime::now()))
}

fn signed_binding_request(
    transceiver: &str,
    cluster: u16,
    random: u8,
    transaction_id: &[u8; 12],
) -> Vec<u8> {
    minted_binding_request(transceiver, cluster, random, minted(), transaction_id)
}

/// [`binding_request`] whose hint was minted at `minted_unix_s`, with its own
/// transaction id.
pub fn minted_binding_request(
    transceiver: &str,
    cluster: u16,
    random: u8,
    minted_unix_s: u32,
    transaction_id: &[u8; 12],
) -> Vec<u8> {
    let keys = keys();
    let ufrag = keys.encode(
        &RoutingHint {
            cluster,
            transceiver: a(transceiver),
        },
        minted_unix_s,
        [random; 5],
    );
    let password = keys.ice_password(1, ufrag.as_bytes()).unwrap();
    let mut buf = [0u8; 256];
    let n = stun::write_binding_request(
        &mut buf,
        transaction_id,
        ufrag.as_bytes(),
        b"cli1",
        password.as_bytes(),
    )
    .unwrap();
    buf[..n].to_vec()
}

pub const RTP: [u8; 12] = [0x80, 111, 0, 1, 0, 0, 0, 1, 1, 2, 3, 4];
pub const DTLS: [u8; 13] = [22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// A return frame as the transceiver sends it on a path that answered its probe.
pub fn frame(client: &str, vip: &str, payload: &[u8]) -> Vec<u8> {
    frame_marked(client, vip, payload, true)
}

/// A return frame with the verified-path bit as given.
pub fn frame_marked(client: &str, vip: &str, payload: &[u8], verified_path: bool) -> Vec<u8> {
    let h = FrameHeader::new(a(client), a(vip)).on_verified_path(verified_path);
    let mut f = vec![0u8; h.encoded_len()];
    h.emit(&mut f).unwrap();
    f.extend_from_slice(payload);
    f
}
