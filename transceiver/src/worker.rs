//! One transceiver worker: one UDP socket, the str0m `Rtc` of every session assigned to
//! it, O(1) demultiplexing (server ufrag → session for STUN, client address → session for
//! everything else), per-session timers in a heap (only due sessions are woken), and the
//! model backend.
//!
//! In relay mode every datagram arrives as a frame from an allowed relay network and every
//! reply goes back, framed, to the relay the client's traffic came from. In direct mode
//! (for comparison) the socket talks to clients itself.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use ipnet::IpNet;
use mio::{Events, Interest, Poll, Token, Waker};
use str0m::change::SdpOffer;
use str0m::channel::ChannelId;
use str0m::media::{Frequency, MediaTime, Mid, Pt};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, IceConnectionState, IceCreds, Input, Output, Rtc};
use ufrag_common::demux::DatagramKind;
use ufrag_common::frame::{FrameHeader, MAX_HEADER_LEN};
use ufrag_common::hint::{HintKeys, RoutingHint};
use ufrag_common::stun::StunView;

use crate::metrics::TransceiverMetrics;
use crate::model::{AudioFrame, ModelBackend, ModelInput, ModelOutput, SessionId};

const SOCKET: Token = Token(0);
const WAKE: Token = Token(1);
/// Name of the data channel the model talks on.
pub const EVENTS_CHANNEL: &str = "events";

/// Why signaling failed, as the HTTP layer reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalError {
    /// The offer is unusable (400): one-line reason.
    BadOffer(String),
    /// No room for another session (503).
    Full,
}

/// A request from the signaling side.
#[derive(Debug)]
pub enum Command {
    /// Create a session from an SDP offer; answer with its id and SDP answer.
    Create {
        /// The session id chosen by signaling.
        id: SessionId,
        /// The offer.
        offer: SdpOffer,
        /// Random bits for the routing hint.
        random: [u8; 6],
        /// Where the answer goes.
        reply: Sender<Result<String, SignalError>>,
    },
    /// ICE restart (RFC 9725 §4.3): the client's new credentials in, a new server ufrag
    /// (routing to this same worker) and password out.
    Restart {
        /// The session.
        id: SessionId,
        /// The client's new ufrag and password.
        remote: IceCreds,
        /// Random bits for the new routing hint.
        random: [u8; 6],
        /// `None` for an unknown session.
        reply: Sender<Option<IceCreds>>,
    },
    /// End a session; answers whether it existed.
    Delete {
        /// The session.
        id: SessionId,
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
    /// The single ICE candidate advertised: the relay VIP, or `bind` in direct mode.
    pub advertise: SocketAddr,
    /// Direct mode: clients talk to this socket without a relay.
    pub direct: bool,
    /// Networks relays send frames from.
    pub allowed_relays: Vec<IpNet>,
    /// Hint keys (the current one mints ufrags; passwords are derived).
    pub keys: HintKeys,
    /// The cluster written into hints.
    pub cluster: u16,
    /// Sessions this worker may hold.
    pub max_sessions: usize,
    /// A session that has not connected by then is ended.
    pub connect_timeout: Duration,
    /// A session that has received nothing for this long is ended.
    pub idle_timeout: Duration,
}

/// The address hints name for this worker: where relays must send its frames.
impl WorkerConfig {
    fn hint_target(&self) -> SocketAddr {
        self.bind
    }
}

struct Session {
    rtc: Rtc,
    ufrag: String,
    /// The (client, VIP) pair of the nominated path once known.
    client: Option<(SocketAddr, SocketAddr)>,
    /// The relay that last sent this session's traffic.
    relay: Option<SocketAddr>,
    next_timeout: Instant,
    started: bool,
    audio: Option<(Mid, Pt)>,
    events: Option<ChannelId>,
    pending_events: Vec<String>,
    created: Instant,
    last_receive: Instant,
}

/// The shared, lock-free view of a worker the signaling side reads.
#[derive(Debug, Default)]
pub struct WorkerLoad {
    /// Sessions the worker holds.
    pub sessions: AtomicUsize,
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
}

/// One worker; see the module documentation.
pub struct Worker {
    cfg: WorkerConfig,
    socket: mio::net::UdpSocket,
    poll: Poll,
    commands: Receiver<Command>,
    load: Arc<WorkerLoad>,
    sessions: HashMap<SessionId, Session>,
    by_ufrag: HashMap<String, SessionId>,
    by_client: HashMap<(SocketAddr, SocketAddr), SessionId>,
    timers: BinaryHeap<Reverse<(Instant, SessionId)>>,
    model: Box<dyn ModelBackend>,
    metrics: Arc<TransceiverMetrics>,
    outputs: Vec<ModelOutput>,
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
        let std_socket = UdpSocket::bind(cfg.bind)?;
        std_socket.set_nonblocking(true)?;
        let addr = std_socket.local_addr()?;
        let mut socket = mio::net::UdpSocket::from_std(std_socket);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut socket, SOCKET, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let (tx, rx) = crossbeam_channel::bounded(1024);
        let load = Arc::new(WorkerLoad::default());
        let mut cfg = cfg;
        cfg.bind = addr;
        if cfg.direct {
            cfg.advertise = addr;
        }
        let handle = WorkerHandle {
            commands: tx,
            waker,
            load: Arc::clone(&load),
            addr,
        };
        Ok((
            Worker {
                cfg,
                socket,
                poll,
                commands: rx,
                load,
                sessions: HashMap::new(),
                by_ufrag: HashMap::new(),
                by_client: HashMap::new(),
                timers: BinaryHeap::new(),
                model,
                metrics,
                outputs: Vec::new(),
            },
            handle,
        ))
    }

    /// Runs until `stop` is set and, if `drain` was asked, until the sessions are gone.
    pub fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut events = Events::with_capacity(64);
        let mut buf = vec![0u8; 2048];
        let mut housekeeping = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                let ids: Vec<SessionId> = self.sessions.keys().copied().collect();
                for id in ids {
                    self.end(id, "shutdown");
                }
                return Ok(());
            }
            let now = Instant::now();
            let mut deadline = now + Duration::from_millis(100);
            if let Some(Reverse((t, _))) = self.timers.peek() {
                deadline = deadline.min(*t);
            }
            if let Some(t) = self.model.next_due() {
                deadline = deadline.min(t);
            }
            let timeout = deadline.saturating_duration_since(now);
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                match event.token() {
                    SOCKET => self.receive_all(&mut buf),
                    WAKE => self.handle_commands(),
                    _ => {}
                }
            }
            let now = Instant::now();
            self.fire_timers(now);
            self.model.poll(now, &mut self.outputs);
            self.apply_model_outputs(now);
            if now.duration_since(housekeeping) >= Duration::from_millis(250) {
                housekeeping = now;
                self.expire_sessions(now);
            }
        }
    }

    fn handle_commands(&mut self) {
        while let Ok(cmd) = self.commands.try_recv() {
            match cmd {
                Command::Create {
                    id,
                    offer,
                    random,
                    reply,
                } => {
                    let result = self.create(id, offer, random);
                    let _ = reply.send(result);
                }
                Command::Restart {
                    id,
                    remote,
                    random,
                    reply,
                } => {
                    let _ = reply.send(self.restart_ice(id, remote, random));
                }
                Command::Delete { id, reply } => {
                    let existed = self.sessions.contains_key(&id);
                    if existed {
                        self.end(id, "deleted");
                    }
                    let _ = reply.send(existed);
                }
            }
        }
    }

    /// Mints a server ufrag (routing hint to this worker) and its derived password.
    fn mint_credentials(&self, random: [u8; 6]) -> IceCreds {
        let target = RoutingHint {
            cluster: self.cfg.cluster,
            transceiver: self.cfg.hint_target(),
        };
        let ufrag = self.cfg.keys.encode(&target, random);
        let pass = self
            .cfg
            .keys
            .ice_password(self.cfg.keys.current().id(), ufrag.as_bytes())
            .expect("the current key derives passwords");
        IceCreds {
            ufrag: ufrag.as_str().to_string(),
            pass: pass.as_str().to_string(),
        }
    }

    fn restart_ice(
        &mut self,
        id: SessionId,
        remote: IceCreds,
        random: [u8; 6],
    ) -> Option<IceCreds> {
        let local = self.mint_credentials(random);
        let session = self.sessions.get_mut(&id)?;
        let mut api = session.rtc.direct_api();
        api.set_local_ice_credentials(local.clone());
        api.set_remote_ice_credentials(remote);
        self.by_ufrag.remove(&session.ufrag);
        session.ufrag = local.ufrag.clone();
        self.by_ufrag.insert(local.ufrag.clone(), id);
        self.metrics.ice_restart();
        self.drive(id, Instant::now());
        Some(local)
    }

    fn create(
        &mut self,
        id: SessionId,
        offer: SdpOffer,
        random: [u8; 6],
    ) -> Result<String, SignalError> {
        if self.sessions.len() >= self.cfg.max_sessions {
            return Err(SignalError::Full);
        }
        let now = Instant::now();
        let creds = self.mint_credentials(random);
        let mut rtc = Rtc::builder()
            .set_ice_lite(true)
            .set_local_ice_credentials(creds.clone())
            .clear_codecs()
            .enable_opus(true, false)
            .build(now);
        let candidate = Candidate::host(self.cfg.advertise, "udp").map_err(|e| {
            SignalError::BadOffer(format!("cannot advertise {}: {e}", self.cfg.advertise))
        })?;
        rtc.add_local_candidate(candidate);
        let answer = rtc
            .sdp_api()
            .accept_offer(offer)
            .map_err(|e| SignalError::BadOffer(format!("offer not accepted: {e}")))?;
        let answer = answer.to_sdp_string();
        if !answer.contains("opus/48000") {
            return Err(SignalError::BadOffer(
                "no usable audio codec: Opus is required".into(),
            ));
        }
        let session = Session {
            rtc,
            ufrag: creds.ufrag,
            client: None,
            relay: None,
            next_timeout: now,
            started: false,
            audio: None,
            events: None,
            pending_events: Vec::new(),
            created: now,
            last_receive: now,
        };
        self.by_ufrag.insert(session.ufrag.clone(), id);
        self.sessions.insert(id, session);
        self.load
            .sessions
            .store(self.sessions.len(), Ordering::Relaxed);
        self.metrics.session_created();
        self.drive(id, now);
        Ok(answer)
    }

    fn end(&mut self, id: SessionId, reason: &'static str) {
        let Some(mut session) = self.sessions.remove(&id) else {
            return;
        };
        session.rtc.disconnect();
        self.by_ufrag.remove(&session.ufrag);
        if let Some(key) = session.client {
            self.by_client.remove(&key);
        }
        self.load
            .sessions
            .store(self.sessions.len(), Ordering::Relaxed);
        self.metrics.session_ended(reason);
        self.model.handle(
            Instant::now(),
            ModelInput::SessionEnded {
                session: id,
                reason,
            },
            &mut self.outputs,
        );
        tracing::debug!(session = format!("{id:016x}"), reason, "session ended");
    }

    fn receive_all(&mut self, buf: &mut [u8]) {
        loop {
            let (n, source) = match self.socket.recv_from(buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "receive failed");
                    return;
                }
            };
            let now = Instant::now();
            let datagram = &buf[..n];
            let (client, local, relay, payload) = if self.cfg.direct {
                (source, self.cfg.bind, None, datagram)
            } else {
                if !contains(&self.cfg.allowed_relays, source) {
                    self.metrics.dropped("frame_source_not_allowed");
                    continue;
                }
                match FrameHeader::parse(datagram) {
                    Ok((h, p)) => (h.client, h.vip, Some(source), p),
                    Err(e) => {
                        self.metrics.dropped(e.as_str());
                        continue;
                    }
                }
            };
            self.metrics.datagram_in();
            let id = if DatagramKind::classify(payload) == DatagramKind::Stun {
                StunView::parse(payload)
                    .ok()
                    .and_then(|v| v.ufrags().ok())
                    .and_then(|u| std::str::from_utf8(u.server).ok())
                    .and_then(|u| self.by_ufrag.get(u).copied())
            } else {
                self.by_client.get(&(client, local)).copied()
            };
            let Some(id) = id else {
                self.metrics.dropped("no_session");
                continue;
            };
            let Some(session) = self.sessions.get_mut(&id) else {
                self.metrics.dropped("no_session");
                continue;
            };
            let Ok(receive) = Receive::new(Protocol::Udp, client, local, payload) else {
                self.metrics.dropped("unparsable");
                continue;
            };
            if session.client != Some((client, local)) {
                if let Some(old) = session.client.replace((client, local)) {
                    self.by_client.remove(&old);
                }
                self.by_client.insert((client, local), id);
            }
            if relay.is_some() {
                session.relay = relay;
            }
            session.last_receive = now;
            if let Err(e) = session.rtc.handle_input(Input::Receive(now, receive)) {
                tracing::debug!(error = %e, "input refused");
                self.metrics.dropped("rtc_refused");
                continue;
            }
            self.drive(id, now);
        }
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some(Reverse((t, id))) = self.timers.peek().copied() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(session) = self.sessions.get_mut(&id) else {
                continue;
            };
            if session.next_timeout > now {
                continue; // a stale entry: the session was rescheduled later
            }
            if session.rtc.handle_input(Input::Timeout(now)).is_err() {
                self.end(id, "rtc_error");
                continue;
            }
            self.drive(id, now);
        }
    }

    /// Drains the session's outputs: transmits go out, events go to the model, and the
    /// next timeout is scheduled.
    fn drive(&mut self, id: SessionId, now: Instant) {
        let mut frame = [0u8; 2048 + MAX_HEADER_LEN];
        let mut ended = None;
        {
            let Some(session) = self.sessions.get_mut(&id) else {
                return;
            };
            loop {
                match session.rtc.poll_output() {
                    Ok(Output::Transmit(t)) => {
                        let (to, bytes) = if self.cfg.direct {
                            (t.destination, &t.contents[..])
                        } else {
                            let Some(relay) = session.relay else {
                                continue;
                            };
                            let header = FrameHeader::new(t.destination, t.source);
                            let n = header.emit(&mut frame).unwrap_or(0);
                            let len = n + t.contents.len();
                            if len > frame.len() {
                                continue;
                            }
                            frame[n..len].copy_from_slice(&t.contents);
                            (relay, &frame[..len])
                        };
                        match self.socket.send_to(bytes, to) {
                            Ok(_) => self.metrics.datagram_out(),
                            Err(_) => self.metrics.dropped("send_failed"),
                        }
                    }
                    Ok(Output::Timeout(t)) => {
                        session.next_timeout = t;
                        self.timers.push(Reverse((t, id)));
                        break;
                    }
                    Ok(Output::Event(event)) => match event {
                        Event::Connected => {
                            session.started = true;
                            self.metrics
                                .session_connected(now.duration_since(session.created));
                            self.model.handle(
                                now,
                                ModelInput::SessionStarted { session: id },
                                &mut self.outputs,
                            );
                        }
                        Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                            ended = Some("ice_disconnected");
                        }
                        Event::MediaAdded(m) => {
                            session.audio = session.audio.or(Some((m.mid, Pt::from(111u8))));
                        }
                        Event::MediaData(d) => {
                            session.audio = Some((d.mid, d.pt));
                            let frame = AudioFrame {
                                seq: **d.seq_range.end() as u16,
                                timestamp: d.time.numer() as u32,
                                payload: d.data.to_vec(),
                            };
                            self.model.handle(
                                now,
                                ModelInput::Audio { session: id, frame },
                                &mut self.outputs,
                            );
                        }
                        Event::ChannelOpen(cid, label) if label == EVENTS_CHANNEL => {
                            session.events = Some(cid);
                            for json in std::mem::take(&mut session.pending_events) {
                                if let Some(mut ch) = session.rtc.channel(cid) {
                                    let _ = ch.write(false, json.as_bytes());
                                }
                            }
                        }
                        Event::ChannelData(d) if Some(d.id) == session.events && !d.binary => {
                            if let Ok(json) = String::from_utf8(d.data) {
                                self.model.handle(
                                    now,
                                    ModelInput::Event { session: id, json },
                                    &mut self.outputs,
                                );
                            }
                        }
                        _ => {}
                    },
                    Err(e) => {
                        tracing::debug!(error = %e, "session failed");
                        ended = Some("rtc_error");
                        break;
                    }
                }
            }
            if !session.rtc.is_alive() && ended.is_none() {
                ended = Some("closed");
            }
        }
        if let Some(reason) = ended {
            self.end(id, reason);
        }
        self.apply_model_outputs(now);
    }

    fn apply_model_outputs(&mut self, now: Instant) {
        while !self.outputs.is_empty() {
            let outputs = std::mem::take(&mut self.outputs);
            let mut touched = Vec::new();
            for out in outputs {
                match out {
                    ModelOutput::Audio { session, frame } => {
                        let Some(s) = self.sessions.get_mut(&session) else {
                            continue;
                        };
                        let Some((mid, pt)) = s.audio else { continue };
                        let Some(writer) = s.rtc.writer(mid) else {
                            continue;
                        };
                        let time =
                            MediaTime::new(u64::from(frame.timestamp), Frequency::FORTY_EIGHT_KHZ);
                        if writer.write(pt, now, time, frame.payload).is_ok() {
                            self.metrics.audio_echoed();
                        }
                        touched.push(session);
                    }
                    ModelOutput::Event { session, json } => {
                        let Some(s) = self.sessions.get_mut(&session) else {
                            continue;
                        };
                        match s.events.and_then(|cid| s.rtc.channel(cid)) {
                            Some(mut ch) => {
                                let _ = ch.write(false, json.as_bytes());
                            }
                            None => s.pending_events.push(json),
                        }
                        touched.push(session);
                    }
                }
            }
            touched.sort_unstable();
            touched.dedup();
            for id in touched {
                self.drive(id, now);
            }
        }
    }

    fn expire_sessions(&mut self, now: Instant) {
        let expired: Vec<(SessionId, &'static str)> = self
            .sessions
            .iter()
            .filter_map(|(id, s)| {
                if !s.started && now.duration_since(s.created) > self.cfg.connect_timeout {
                    Some((*id, "connect_timeout"))
                } else if now.duration_since(s.last_receive) > self.cfg.idle_timeout {
                    Some((*id, "idle"))
                } else {
                    None
                }
            })
            .collect();
        for (id, reason) in expired {
            self.end(id, reason);
        }
    }
}
