//! One transceiver worker: one UDP socket (mio), the framing to and from the relay, and
//! the glue between its [`SessionTable`] of [`Session`]s and the model backend. The
//! sessions and the table are sans-IO; this is the only part that touches a socket.
//!
//! Socket I/O is batched: datagrams are read with `recvmmsg` up to
//! [`ufrag_udp::BATCH`] at a time, and what the sessions send is queued and leaves with
//! `sendmmsg` after each received batch and each turn of the loop (or when full), so a busy worker
//! pays one receive and one send syscall per batch instead of one per datagram.
//!
//! In relay mode every datagram arrives as a frame from an allowed relay network (or
//! several frames in one bundle, [`ufrag_common::bundle`], each then handled as a datagram
//! of its own) and every reply goes back, framed, to the relay the client's traffic came
//! from. In direct mode
//! (for comparison) the socket talks to clients itself.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use ipnet::IpNet;
use mio::{Events, Interest, Poll, Token, Waker};
use str0m::IceCreds;
use str0m::config::DtlsCert;
use str0m::net::Protocol;
use ufrag_common::bundle::{self, Bundle, BundleError, Bundler};
use ufrag_common::config::BundlePolicy;
use ufrag_common::demux::DatagramKind;
use ufrag_common::frame::{FrameHeader, MAX_HEADER_LEN, Transport};
use ufrag_common::hint::key_id_of;
use ufrag_common::runtime::keys::SharedKeys;
use ufrag_common::stun::StunView;
use ufrag_udp::{RecvBatch, SendBatch};

use crate::error::SignalError;
use crate::metrics::{DropReason, EndReason, TransceiverMetrics};
use crate::model::{ModelBackend, ModelLink};
use crate::path_check::{Destination, Upkeep};
use crate::random::random_bytes;
use crate::session::{Advertised, Applied, Session, SessionOutput, SessionTuning, protocol_of};
use crate::session_table::{ClientPath, PathRefused, SessionTable, Unrouted};
use crate::session_token::Owner;
use crate::setup::{NewSession, SessionMint};
use ufrag_model_protocol::messages::{ModelInput, ModelOutput, SessionId};

const SOCKET: Token = Token(0);
const WAKE: Token = Token(1);
/// How often sessions are checked for the connect and idle timeouts.
const HOUSEKEEPING: Duration = Duration::from_millis(250);
/// The longest the loop sleeps without a due timer.
const MAX_SLEEP: Duration = Duration::from_millis(100);
/// A session that has received nothing for this long no longer holds its paths against
/// another session's checks (a live one receives media or consent checks far more often).
const PATH_HOLDER_IDLE: Duration = Duration::from_secs(5);

/// Room for a probe: a client ufrag of up to 256 characters (RFC 8839) and ours.
const PROBE_BUFFER: usize = 640;

/// The frame transport of a str0m transmit: TCP for ICE-TCP, UDP for everything else.
fn transport_of(proto: str0m::net::Protocol) -> Transport {
    match proto {
        str0m::net::Protocol::Udp => Transport::Udp,
        _ => Transport::Tcp,
    }
}

/// With the `fault-injection` feature only (the `transceiver-faults` test binary):
/// `panic-worker-N` makes worker N panic at its first housekeeping, so tests can show
/// what a dying worker does to readiness.
pub const FAULT_ENV: &str = "UFRAG_TRANSCEIVER_FAULT";

/// Why an ICE restart was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartRefused {
    /// No such session (or its new ufrag was taken: the client may try again).
    NoSuchSession,
    /// The session asked for restarts faster than its budget
    /// ([`crate::session::Session::take_restart`]).
    TooFast,
}

/// A request from the signaling side.
#[derive(Debug)]
pub enum Command {
    /// Take a session signaling has built (see [`crate::setup`]); answer whether it
    /// was taken.
    Create {
        /// The session id chosen by signaling.
        id: SessionId,
        /// The session, its ufrag and answer.
        new: Box<NewSession>,
        /// Where the outcome goes.
        reply: Sender<Result<(), SignalError>>,
    },
    /// ICE restart (RFC 9725 §4.3): the client's new credentials in, a new server ufrag
    /// (routing to this same worker) and password out.
    Restart {
        /// The session.
        id: SessionId,
        /// Who asks: the owner of the session token presented (`None`: the bearer token,
        /// or no authentication configured). Another owner's session is not found.
        caller: Option<Owner>,
        /// The client's new ufrag and password.
        remote: IceCreds,
        /// Random bits for the new routing hint, if the old ufrag is no hint (a hint's
        /// session bytes are kept).
        random: [u8; ufrag_common::hint::RANDOM_LEN],
        /// The new credentials, or why not.
        reply: Sender<Result<IceCreds, RestartRefused>>,
    },
    /// End a session; answers whether it existed.
    Delete {
        /// The session.
        id: SessionId,
        /// Who asks, as for [`Command::Restart`].
        caller: Option<Owner>,
        /// Where the answer goes.
        reply: Sender<bool>,
    },
}

/// How a worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Worker number.
    pub index: usize,
    /// Address the worker's socket binds.
    pub bind: SocketAddr,
    /// The UDP candidate advertised: the relay VIP, or `bind` in direct mode.
    pub advertise: SocketAddr,
    /// The relay's TCP VIP, advertised as a passive ICE-TCP candidate (relay mode only).
    pub advertise_tcp: Option<SocketAddr>,
    /// Direct mode: clients talk to this socket without a relay.
    pub direct: bool,
    /// Networks relays send frames from.
    pub allowed_relays: Vec<IpNet>,
    /// The relays that read bundles, and the internal MTU.
    pub bundles: BundlePolicy,
    /// Hint keys (the current one mints ufrags; passwords are derived), as they change.
    pub keys: SharedKeys,
    /// The cluster written into hints.
    pub cluster: u16,
    /// The process's DTLS certificate, shared by every session.
    pub dtls_cert: DtlsCert,
    /// Sessions this worker may hold.
    pub max_sessions: usize,
    /// How sessions are run (their quality reports, their playout buffer).
    pub tuning: SessionTuning,
    /// A session that has not connected by then is ended.
    pub connect_timeout: Duration,
    /// A session that has received nothing for this long is ended.
    pub idle_timeout: Duration,
}

/// The shared, lock-free view of a worker the signaling side reads.
#[derive(Debug)]
pub struct WorkerLoad {
    /// Sessions the worker holds.
    pub sessions: AtomicUsize,
    /// False once the worker's thread has stopped (a panic or an I/O error): signaling
    /// sends it nothing more, and readiness turns off.
    pub alive: AtomicBool,
    /// Whether its model backend can take sessions (an external one is connected):
    /// signaling sends it none while false, and readiness is off.
    pub model_ready: Arc<AtomicBool>,
}

/// A running worker's handle.
#[derive(Debug, Clone)]
pub struct WorkerHandle {
    /// Commands in.
    pub commands: Sender<Command>,
    /// Wakes the worker after a command.
    pub waker: Arc<Waker>,
    /// Its load.
    pub load: Arc<WorkerLoad>,
    /// Its socket address.
    pub addr: SocketAddr,
    /// What signaling needs to build this worker's sessions.
    pub mint: Arc<SessionMint>,
}

/// One worker; see the module documentation.
pub struct Worker {
    cfg: WorkerConfig,
    mint: Arc<SessionMint>,
    socket: mio::net::UdpSocket,
    poll: Poll,
    commands: Receiver<Command>,
    load: Arc<WorkerLoad>,
    sessions: SessionTable<Session>,
    model: Box<dyn ModelBackend>,
    metrics: Arc<TransceiverMetrics>,
    outputs: Vec<ModelOutput>,
    /// Datagrams queued for the next `sendmmsg`, each with the frames it carries.
    outgoing: SendBatch<usize>,
    /// Frames for relays that read bundles, gathered by relay until the next flush
    /// (`None` without `--bundle-to`).
    bundler: Option<Bundler<usize>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("index", &self.cfg.index)
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

fn contains(nets: &[IpNet], addr: SocketAddr) -> bool {
    let ip = addr.ip().to_canonical();
    nets.iter().any(|n| n.contains(&ip))
}

impl Worker {
    /// Binds the socket; returns the worker and the handle signaling uses.
    pub fn bind(
        cfg: WorkerConfig,
        model: Box<dyn ModelBackend>,
        metrics: Arc<TransceiverMetrics>,
    ) -> io::Result<(Self, WorkerHandle)> {
        // Large buffers: every client of a worker sends on the same 20 ms beat, so its
        // datagrams arrive in bursts (400 sessions lost 17 % of audio in the default
        // 208 KiB receive buffer while the worker was a third busy).
        let std_socket = ufrag_udp::bind_udp(cfg.bind, false)?;
        let addr = std_socket.local_addr()?;
        let mut socket = mio::net::UdpSocket::from_std(std_socket);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut socket, SOCKET, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let (tx, rx) = crossbeam_channel::bounded(1024);
        let load = Arc::new(WorkerLoad {
            sessions: AtomicUsize::new(0),
            alive: AtomicBool::new(true),
            model_ready: Arc::new(AtomicBool::new(false)),
        });
        let mut model = model;
        let model_waker = Arc::clone(&waker);
        model.attach(ModelLink {
            wake: Arc::new(move || {
                let _ = model_waker.wake();
            }),
            ready: Arc::clone(&load.model_ready),
        });
        let mut cfg = cfg;
        cfg.bind = addr;
        if cfg.direct {
            cfg.advertise = addr;
        }
        let mint = Arc::new(SessionMint {
            keys: cfg.keys.clone(),
            cluster: cfg.cluster,
            hint_target: addr,
            advertise: Advertised {
                udp: cfg.advertise,
                tcp: cfg.advertise_tcp.filter(|_| !cfg.direct),
            },
            dtls_cert: cfg.dtls_cert.clone(),
            tuning: cfg.tuning,
        });
        let handle = WorkerHandle {
            commands: tx,
            waker,
            load: Arc::clone(&load),
            addr,
            mint: Arc::clone(&mint),
        };
        let bundler =
            (!cfg.bundles.to.is_empty()).then(|| Bundler::new(cfg.bundles.mtu, ufrag_udp::BUF_LEN));
        Ok((
            Worker {
                cfg,
                mint,
                socket,
                poll,
                commands: rx,
                load,
                sessions: SessionTable::default(),
                model,
                metrics,
                outputs: Vec::new(),
                outgoing: SendBatch::new(addr.is_ipv6()),
                bundler,
            },
            handle,
        ))
    }

    /// Runs until `stop` is set, then ends every session.
    pub fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut events = Events::with_capacity(64);
        let mut incoming = RecvBatch::new();
        let mut housekeeping = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                for id in self.sessions.ids() {
                    self.end(id, EndReason::Shutdown);
                }
                self.model.flush();
                self.flush();
                return Ok(());
            }
            let now = Instant::now();
            let deadline = [self.sessions.next_wakeup(), self.model.next_due()]
                .into_iter()
                .flatten()
                .fold(now + MAX_SLEEP, Instant::min);
            match self
                .poll
                .poll(&mut events, Some(deadline.saturating_duration_since(now)))
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                match event.token() {
                    SOCKET => self.receive_all(&mut incoming),
                    WAKE => self.handle_commands(),
                    _ => {}
                }
            }
            let now = Instant::now();
            while let Some(id) = self.sessions.pop_due(now) {
                if let Some(session) = self.sessions.get_mut(id) {
                    session.handle_timeout(now);
                }
                self.drive(id, now);
            }
            self.model.poll(now, &mut self.outputs);
            self.apply_model_outputs(now);
            if now.duration_since(housekeeping) >= HOUSEKEEPING {
                housekeeping = now;
                #[cfg(feature = "fault-injection")]
                self.injected_fault();
                self.expire_sessions(now);
            }
            self.model.flush();
            self.flush();
        }
    }

    /// With the `fault-injection` feature (the `transceiver-faults` test binary): panics
    /// if [`FAULT_ENV`] names this worker.
    #[cfg(feature = "fault-injection")]
    fn injected_fault(&self) {
        let wanted = format!("panic-worker-{}", self.cfg.index);
        if std::env::var(FAULT_ENV).is_ok_and(|v| v == wanted) {
            panic!("fault injected: {wanted}");
        }
    }

    fn handle_commands(&mut self) {
        while let Ok(cmd) = self.commands.try_recv() {
            match cmd {
                Command::Create { id, new, reply } => {
                    let _ = reply.send(self.create(id, *new));
                }
                Command::Restart {
                    id,
                    caller,
                    remote,
                    random,
                    reply,
                } => {
                    let outcome = if self.belongs(id, caller.as_ref()) {
                        self.restart_ice(id, remote, random)
                    } else {
                        Err(RestartRefused::NoSuchSession)
                    };
                    let _ = reply.send(outcome);
                }
                Command::Delete { id, caller, reply } => {
                    let found = self.belongs(id, caller.as_ref());
                    if found {
                        self.end(id, EndReason::Deleted);
                    }
                    let _ = reply.send(found);
                }
            }
        }
    }

    /// Whether session `id` exists and `caller` may act on it.
    fn belongs(&mut self, id: SessionId, caller: Option<&Owner>) -> bool {
        self.sessions
            .get_mut(id)
            .is_some_and(|session| session.belongs_to(caller))
    }

    /// An ICE restart of session `id`, if its budget allows one now: a new server ufrag
    /// with the session's hint bytes kept ([`SessionMint::restart_credentials`]).
    fn restart_ice(
        &mut self,
        id: SessionId,
        remote: IceCreds,
        random: [u8; ufrag_common::hint::RANDOM_LEN],
    ) -> Result<IceCreds, RestartRefused> {
        let now = Instant::now();
        let session = self
            .sessions
            .get_mut(id)
            .ok_or(RestartRefused::NoSuchSession)?;
        if !session.take_restart(now) {
            self.metrics.ice_restart_refused();
            return Err(RestartRefused::TooFast);
        }
        let old = session.local_ufrag().to_string();
        let local = self.mint.restart_credentials(&old, random);
        if !self.sessions.rekey(id, local.ufrag.clone()) {
            // The new ufrag was taken: no restart happened, so none is spent.
            if let Some(session) = self.sessions.get_mut(id) {
                session.refund_restart();
            }
            return Err(RestartRefused::NoSuchSession);
        }
        self.count_hint_key(key_id_of(old.as_bytes()), -1);
        self.count_hint_key(key_id_of(local.ufrag.as_bytes()), 1);
        self.sessions
            .get_mut(id)
            .ok_or(RestartRefused::NoSuchSession)?
            .restart_ice(local.clone(), remote);
        self.metrics.ice_restart();
        self.drive(id, now);
        Ok(local)
    }

    /// Inserts a session signaling built; refused when the worker is full or the id or
    /// ufrag is taken.
    fn create(&mut self, id: SessionId, new: NewSession) -> Result<(), SignalError> {
        if self.sessions.len() >= self.cfg.max_sessions {
            return Err(SignalError::Full);
        }
        // The server ufrag is what the relays see of a session: logging both lets a log
        // pipeline follow one session across relay and transceiver.
        let ufrag = new.ufrag.clone();
        if self.sessions.insert(id, new.ufrag, new.session).is_err() {
            return Err(SignalError::BadOffer(
                "session id or ufrag collision: try again".into(),
            ));
        }
        self.count_hint_key(key_id_of(ufrag.as_bytes()), 1);
        tracing::info!(
            session = format!("{id:016x}"),
            ufrag,
            worker = self.cfg.index,
            "session created"
        );
        self.load
            .sessions
            .store(self.sessions.len(), Ordering::Relaxed);
        self.metrics.session_created();
        self.drive(id, Instant::now());
        Ok(())
    }

    /// Counts a live session's ufrag under the hint key `key` minted it with
    /// (`ufrag_transceiver_sessions_by_hint_key`): `change` is +1 or -1.
    fn count_hint_key(&self, key: Option<u8>, change: i64) {
        if let Some(key) = key {
            self.metrics.session_hint_key(key, change);
        }
    }

    fn end(&mut self, id: SessionId, reason: EndReason) {
        let key = self
            .sessions
            .ufrag_of(id)
            .and_then(|u| key_id_of(u.as_bytes()));
        // The notice frees the relay's flow for the verified path: only while that path
        // is still this session's (a path that moved to another session is its now).
        let notice = (self.sessions.get_mut(id))
            .and_then(|session| session.end_notice())
            .filter(|(_, path, _)| self.sessions.holder_of(*path) == Some(id));
        let Some(mut session) = self.sessions.remove(id) else {
            return;
        };
        self.count_hint_key(key, -1);
        session.disconnect();
        if !self.cfg.direct
            && let Some((relay, path, transport)) = notice
        {
            self.send_end_notice(relay, path, transport);
        }
        self.load
            .sessions
            .store(self.sessions.len(), Ordering::Relaxed);
        self.metrics.session_ended(reason);
        self.model.handle(
            Instant::now(),
            ModelInput::SessionEnded {
                session: id,
                reason: reason.label(),
            },
            &mut self.outputs,
        );
        tracing::info!(
            session = format!("{id:016x}"),
            reason = reason.label(),
            "session ended"
        );
    }

    /// Reads and handles datagrams, a batch at a time, until the socket has none left.
    fn receive_all(&mut self, incoming: &mut RecvBatch) {
        loop {
            let n = match incoming.recv(self.socket.as_raw_fd()) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "receive failed");
                    return;
                }
            };
            let now = Instant::now();
            for datagram in (0..n).filter_map(|i| incoming.get(i)) {
                if !datagram.truncated && !self.cfg.direct && bundle::is_bundle(datagram.data) {
                    self.receive_bundle(now, datagram.source, datagram.data);
                    continue;
                }
                self.metrics.datagram_in();
                let handled = if datagram.truncated {
                    Err(DropReason::Truncated)
                } else {
                    self.receive(now, datagram.source, datagram.data)
                };
                if let Err(reason) = handled {
                    self.metrics.dropped(reason);
                }
            }
            // The replies to this batch leave before the next is read.
            self.flush();
        }
    }

    /// A bundle from `source` (relay mode): each of its frames counted and handled as a
    /// datagram of its own. A bundle from outside the relay networks, or one that is not
    /// well-formed, is counted as one datagram and dropped whole.
    fn receive_bundle(&mut self, now: Instant, source: SocketAddr, datagram: &[u8]) {
        let frames = if contains(&self.cfg.allowed_relays, source) {
            Bundle::parse(datagram).map_err(|_: BundleError| DropReason::FrameBadBundle)
        } else {
            Err(DropReason::FrameSourceNotAllowed)
        };
        match frames {
            Ok(frames) => {
                for frame in frames {
                    self.metrics.datagram_in();
                    if let Err(reason) = self.receive(now, source, frame) {
                        self.metrics.dropped(reason);
                    }
                }
            }
            Err(reason) => {
                self.metrics.datagram_in();
                self.metrics.dropped(reason);
            }
        }
    }

    /// One datagram from `source`: unframe it (relay mode), find its session, hand it
    /// over, and carry out what the session then asks.
    fn receive(
        &mut self,
        now: Instant,
        source: SocketAddr,
        datagram: &[u8],
    ) -> Result<(), DropReason> {
        let (path, relay, payload, transport) = if self.cfg.direct {
            let path = ClientPath {
                client: source,
                local: self.cfg.bind,
            };
            (path, None, datagram, Transport::Udp)
        } else {
            if !contains(&self.cfg.allowed_relays, source) {
                return Err(DropReason::FrameSourceNotAllowed);
            }
            let (header, payload) = FrameHeader::parse(datagram)?;
            let path = ClientPath {
                client: header.client,
                local: header.vip,
            };
            (path, Some(source), payload, header.transport)
        };
        // Parsed once, here: routing, the probe check and the session all read this view
        // (str0m parses what it is handed itself).
        let stun = match DatagramKind::classify(payload) {
            DatagramKind::Stun => {
                Some(StunView::parse(payload).map_err(|_| DropReason::NoSession)?)
            }
            _ => None,
        };
        let id = self
            .sessions
            .route_parsed(stun.as_ref(), path)
            .map_err(|_: Unrouted| DropReason::NoSession)?;
        if let Some(view) = &stun {
            let session = self.sessions.get_mut(id).ok_or(DropReason::NoSession)?;
            if session.probe_answered(path, transport, view, now) {
                // The path showed it receives: what waited for it goes now, and the
                // session's media from now on.
                let relay = session.relay_for(transport).or(relay);
                for held in session.take_held(path) {
                    self.transmit(
                        relay,
                        protocol_of(held.transport),
                        path,
                        true,
                        &held.contents,
                    );
                }
                return Ok(());
            }
            let idle_for = PATH_HOLDER_IDLE;
            self.sessions
                .admit_path(id, path, now, |holder: &Session| {
                    holder.idle_at(now) >= idle_for
                })
                .map_err(|refused| match refused {
                    PathRefused::Budget => DropReason::PathBudget,
                    PathRefused::Taken => DropReason::PathTaken,
                })?;
        }
        let session = self.sessions.get_mut(id).ok_or(DropReason::NoSession)?;
        session.handle_receive_parsed(transport, now, path, relay, payload, stun.as_ref())?;
        self.drive(id, now);
        Ok(())
    }

    /// Carries out what session `id` asks until it waits for a timeout or has ended:
    /// datagrams go out, model inputs go to the model, the wake-up is scheduled.
    fn drive(&mut self, id: SessionId, now: Instant) {
        self.keep_consent(id, now);
        loop {
            let Some(session) = self.sessions.get_mut(id) else {
                return;
            };
            match session.poll_output() {
                SessionOutput::Transmit(t) => {
                    let transport = transport_of(t.proto);
                    let relay = session.relay_for(transport);
                    // The session answers only on paths that passed an authenticated
                    // check (or were nominated): datagrams from there are its own.
                    let path = ClientPath {
                        client: t.destination,
                        local: t.source,
                    };
                    let destination = session.route_transmit(path, transport, &t.contents);
                    // The verified path may be on the other transport (a UDP pair when
                    // str0m moved to a TCP one): its own relay leg and framing.
                    let verified_relay = match destination {
                        Destination::Verified(_, its_transport) => session.relay_for(its_transport),
                        _ => None,
                    };
                    let mut probe = [0u8; PROBE_BUFFER];
                    let probe_len = match destination {
                        // DTLS or media for a path that has not answered: probe it, if
                        // its credit pays for a probe (checked before any random bytes
                        // are drawn or a probe is signed: this runs per datagram).
                        Destination::Verified(..) | Destination::Held | Destination::Dropped => {
                            session.write_probe(path, now, &mut probe, random_bytes)
                        }
                        Destination::AsSent { .. } => None,
                    };
                    self.sessions.learn_path(id, path);
                    match destination {
                        Destination::AsSent { verified } => {
                            self.transmit(relay, t.proto, path, verified, &t.contents);
                        }
                        Destination::Verified(verified, its_transport) => {
                            self.metrics.kept_on_verified_path();
                            let proto = protocol_of(its_transport);
                            self.transmit(verified_relay, proto, verified, true, &t.contents);
                        }
                        Destination::Held => self.metrics.held_for_probe(),
                        Destination::Dropped => self.metrics.dropped(DropReason::PathHoldFull),
                    }
                    if let Some(len) = probe_len {
                        self.metrics.path_probe();
                        self.transmit(relay, t.proto, path, false, &probe[..len]);
                    }
                }
                SessionOutput::Model(input) => {
                    if let ModelInput::SessionStats { stats, .. } = &input {
                        self.metrics.session_quality(stats);
                    }
                    self.model.handle(now, input, &mut self.outputs);
                }
                SessionOutput::Connected(after) => {
                    self.metrics.session_connected(after);
                    tracing::info!(
                        session = format!("{id:016x}"),
                        setup_ms = after.as_secs_f64() * 1e3,
                        "session connected"
                    );
                    let context = std::sync::Arc::new(session.context());
                    self.model.handle(
                        now,
                        ModelInput::SessionStarted {
                            session: id,
                            context,
                        },
                        &mut self.outputs,
                    );
                }
                SessionOutput::Timeout(at) => {
                    self.sessions.schedule(id, at);
                    break;
                }
                SessionOutput::Ended(reason) => {
                    self.end(id, reason);
                    break;
                }
            }
        }
        self.apply_model_outputs(now);
    }

    /// Session `id`'s verified path, kept (RFC 7675): a consent probe when one is due,
    /// and the loss counted when it has answered none for too long.
    fn keep_consent(&mut self, id: SessionId, now: Instant) {
        let Some(session) = self.sessions.get_mut(id) else {
            return;
        };
        match session.path_upkeep(now) {
            Upkeep::Nothing => {}
            Upkeep::ConsentProbe(path, transport) => {
                let mut probe = [0u8; PROBE_BUFFER];
                let Some(len) = session.write_probe(path, now, &mut probe, random_bytes) else {
                    return;
                };
                let relay = session.relay_for(transport);
                self.metrics.consent_probe();
                self.transmit(relay, protocol_of(transport), path, true, &probe[..len]);
            }
            Upkeep::ConsentLost(path) => {
                self.metrics.consent_lost();
                tracing::info!(
                    session = format!("{id:016x}"),
                    client = %path.client,
                    "the client path answered no consent probe: media waits for a path that answers"
                );
            }
        }
    }

    /// Queues one of a session's datagrams for `path` over `proto`: to the client itself
    /// (direct mode), or framed to the relay its traffic came through (marked if `path`
    /// answered a probe: `verified_path`), into that relay's bundle when it reads
    /// bundles (`--bundle-to`). A full batch is sent first. One that cannot go is counted.
    fn transmit(
        &mut self,
        relay: Option<SocketAddr>,
        proto: Protocol,
        path: ClientPath,
        verified_path: bool,
        contents: &[u8],
    ) {
        let (to, frame) = if self.cfg.direct {
            (path.client, None)
        } else {
            let Some(relay) = relay else {
                return self.metrics.dropped(DropReason::NoRelay);
            };
            let frame = FrameHeader::over(transport_of(proto), path.client, path.local)
                .on_verified_path(verified_path);
            (relay, Some(frame))
        };
        let (fd, metrics) = (self.socket.as_raw_fd(), &*self.metrics);
        let outgoing = &mut self.outgoing;
        let bundler = self
            .bundler
            .as_mut()
            .filter(|_| self.cfg.bundles.bundles_to(to));
        match (frame, bundler) {
            (Some(header), Some(bundler)) => {
                let mut emit = |to: SocketAddr, head: &[u8], body: &[u8], frames: usize| {
                    queue(outgoing, fd, metrics, (to, head, body), frames);
                };
                bundler.push(to, &header, contents, 1, &mut emit);
            }
            (Some(header), None) => {
                let mut head = [0u8; MAX_HEADER_LEN];
                match header.emit(&mut head) {
                    Ok(n) => queue(outgoing, fd, metrics, (to, &head[..n], contents), 1),
                    Err(_) => metrics.dropped(DropReason::TooLarge),
                }
            }
            (None, _) => queue(outgoing, fd, metrics, (to, &[], contents), 1),
        }
    }

    /// Tells `relay` that the session on `path` ended: a frame with the session-ended bit
    /// and no datagram, so the relay frees the flow now rather than when it goes idle.
    /// Open bundles are closed first, so the session's last datagrams arrive before it.
    fn send_end_notice(&mut self, relay: SocketAddr, path: ClientPath, transport: Transport) {
        self.close_bundles();
        let (fd, metrics) = (self.socket.as_raw_fd(), &*self.metrics);
        let outgoing = &mut self.outgoing;
        let header = FrameHeader::over(transport, path.client, path.local)
            .on_verified_path(true)
            .ending_session();
        let mut head = [0u8; MAX_HEADER_LEN];
        match header.emit(&mut head) {
            Ok(n) => {
                queue(outgoing, fd, metrics, (relay, &head[..n], &[]), 1);
                metrics.end_notice_sent();
            }
            Err(_) => metrics.dropped(DropReason::TooLarge),
        }
    }

    /// Sends every queued datagram (the open bundles closed first) in as few `sendmmsg`
    /// calls as the kernel takes, and counts each frame as sent or failed.
    fn flush(&mut self) {
        self.close_bundles();
        let (fd, metrics) = (self.socket.as_raw_fd(), &*self.metrics);
        (self.outgoing).flush(fd, |frames, sent| settle(metrics, frames, sent));
    }

    /// Queues every open bundle, closed, behind what is already queued.
    fn close_bundles(&mut self) {
        let (fd, metrics) = (self.socket.as_raw_fd(), &*self.metrics);
        let outgoing = &mut self.outgoing;
        if let Some(bundler) = &mut self.bundler
            && !bundler.is_empty()
        {
            let mut emit = |to: SocketAddr, head: &[u8], body: &[u8], frames: usize| {
                queue(outgoing, fd, metrics, (to, head, body), frames);
            };
            bundler.close_all(&mut emit);
        }
    }

    /// Hands what the model produced to its sessions, then drives each session touched.
    fn apply_model_outputs(&mut self, now: Instant) {
        while !self.outputs.is_empty() {
            let mut touched = Vec::new();
            for out in std::mem::take(&mut self.outputs) {
                let id = out.session();
                if let ModelOutput::End { .. } = out {
                    self.end(id, EndReason::ModelEnded);
                    continue;
                }
                let Some(session) = self.sessions.get_mut(id) else {
                    continue;
                };
                match session.handle_model(now, out) {
                    Applied::AudioQueued => self.metrics.audio_echoed(),
                    Applied::Refused(drop) => self.metrics.model_dropped(drop),
                    Applied::Done => {}
                }
                touched.push(id);
            }
            touched.sort_unstable();
            touched.dedup();
            for id in touched {
                self.drive(id, now);
            }
        }
    }

    fn expire_sessions(&mut self, now: Instant) {
        let (connect, idle) = (self.cfg.connect_timeout, self.cfg.idle_timeout);
        let expired: Vec<(SessionId, EndReason)> = self
            .sessions
            .iter()
            .filter_map(|(id, s)| Some((id, s.expiry(now, connect, idle)?)))
            .collect();
        for (id, reason) in expired {
            self.end(id, reason);
        }
    }
}

/// Queues `head` + `body` for `to`, standing for `frames` frames, sending the batch
/// first when it is full; a datagram that cannot be queued is counted dropped, per frame.
fn queue(
    outgoing: &mut SendBatch<usize>,
    fd: RawFd,
    metrics: &TransceiverMetrics,
    (to, head, body): (SocketAddr, &[u8], &[u8]),
    frames: usize,
) {
    let pushed = outgoing.push_flushing(fd, (to, head, body), frames, |frames, sent| {
        settle(metrics, frames, sent);
    });
    if let Err((frames, e)) = pushed {
        metrics.dropped_many(DropReason::from(e), frames);
    }
}

/// Counts a sent datagram's frames as datagrams out, or a failed one's as send failures.
fn settle(metrics: &TransceiverMetrics, frames: usize, sent: bool) {
    if sent {
        metrics.datagrams_out(frames);
    } else {
        metrics.dropped_many(DropReason::SendFailed, frames);
    }
}
