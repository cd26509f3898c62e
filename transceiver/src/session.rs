//! One WebRTC session in str0m's own sans-IO shape: input goes in (`handle_receive`,
//! `handle_timeout`, `handle_model`), and `poll_output` is called until it returns a
//! timeout or the end. str0m's events become model inputs here; the worker only moves
//! bytes and schedules wake-ups.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use str0m::change::SdpOffer;
use str0m::channel::ChannelId;
use str0m::config::DtlsCert;
use str0m::media::{Frequency, MediaTime, Mid, Pt};
use str0m::net::{Protocol, Receive, TcpType, Transmit};
use str0m::{Candidate, Event, IceConnectionState, IceCreds, Input, Output, Rtc};
use ufrag_common::demux::DatagramKind;
use ufrag_common::frame::Transport;

use ufrag_common::stun::{METHOD_BINDING, StunClass, StunView, StunWriter, attr};

use crate::error::SignalError;
use crate::metrics::{DropReason, EndReason, ModelDrop};
use crate::path_check::{Destination, HeldDatagram, PathCheck, Upkeep};
use crate::per_address::Held;
use crate::playout::Playout;
use crate::session_table::ClientPath;
use crate::session_token::Owner;
use ufrag_model_protocol::messages::{
    AudioFrame, ClientTransport, ModelInput, ModelOutput, OPUS_CODEC, SessionClaims,
    SessionContext, SessionId, SessionStats,
};

/// ICE restarts one session may ask for at once ([`Session::take_restart`]).
pub const RESTART_BURST: u32 = 3;
/// Then one per this long.
pub const RESTART_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
// Each restart is minted a second after the last at the earliest, so a burst puts a hint
// at most RESTART_BURST seconds ahead of the clock: within what relays accept.
const _: () = assert!((RESTART_BURST as u64) < ufrag_common::admission::HINT_CLOCK_SKEW.as_secs());

/// The PRIORITY a probe carries (a host candidate's, RFC 8445 §5.1.2.1; the client
/// answers whatever it is).
const PROBE_PRIORITY: u32 = 2_130_706_431;

/// Name of the data channel the model talks on.
pub const EVENTS_CHANNEL: &str = "events";
/// How often a session reports its quality ([`ModelInput::SessionStats`]) by default.
pub const STATS_INTERVAL: Duration = Duration::from_secs(5);
/// The Opus payload type offered by browsers; used until media tells us otherwise.
const OPUS_PT: u8 = 111;
/// Audio packets str0m holds back behind a missing one before it hands on what follows.
/// Its default, 15 (300 ms of 20 ms Opus frames), made one lost packet silence the model
/// for 300 ms and then arrive as a burst (`perf resilience` measured a 322 ms gap after
/// one packet lost per session); a voice agent wants the audio now, and Opus conceals a
/// missing frame. One frame (20 ms) absorbs ordinary reordering; a packet later than
/// that is dropped, as a late packet is for a jitter buffer.
const AUDIO_REORDER_PACKETS: usize = 1;
/// The longest an audio frame waits for missing earlier packets (str0m's default: 1 s).
const AUDIO_REORDER_WAIT: Duration = Duration::from_millis(60);

/// One DTLS certificate for every session of this process (its fingerprint goes into
/// every answer, as a TLS server's certificate would); `None` if the crypto provider
/// cannot make one.
pub fn process_certificate() -> Option<DtlsCert> {
    str0m::crypto::from_feature_flags()
        .dtls_provider
        .generate_certificate()
}

/// What a session asks of its worker next.
#[derive(Debug)]
pub enum SessionOutput {
    /// Send this datagram (to the client; the worker frames it for the relay).
    Transmit(Transmit),
    /// Hand this to the model.
    Model(ModelInput),
    /// ICE and DTLS are up, this long after the session was created.
    Connected(Duration),
    /// Nothing more until this time, or until new input.
    Timeout(Instant),
    /// The session is over; remove it.
    Ended(EndReason),
}

/// See the module documentation. One session, driven without a socket:
///
/// ```no_run
/// use std::net::{SocketAddr, UdpSocket};
/// use std::time::Instant;
/// use str0m::IceCreds;
/// use str0m::change::SdpOffer;
/// use ufrag_transceiver::session::{Session, SessionOutput, process_certificate};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let offer = SdpOffer::from_sdp_string(&std::fs::read_to_string("offer.sdp")?)?;
/// let socket = UdpSocket::bind("0.0.0.0:40000")?;
/// let local: SocketAddr = "192.0.2.1:40000".parse()?; // the address clients reach
/// let cert = process_certificate().ok_or("no DTLS certificate")?;
/// let now = Instant::now();
/// let (mut session, answer) = Session::accept(1, offer, IceCreds::new(), local, cert, now)?;
/// println!("{answer}"); // the SDP answer, back to the client over signaling
///
/// let mut buf = [0u8; 2048];
/// loop {
///     match session.poll_output() {
///         SessionOutput::Transmit(t) => {
///             socket.send_to(&t.contents, t.destination)?;
///         }
///         SessionOutput::Model(input) => println!("for the model: {input:?}"),
///         SessionOutput::Connected(took) => println!("connected in {took:?}"),
///         SessionOutput::Ended(why) => break println!("ended: {why:?}"),
///         SessionOutput::Timeout(at) => {
///             socket.set_read_timeout(Some(at.saturating_duration_since(Instant::now()).max(
///                 std::time::Duration::from_millis(1),
///             )))?;
///             match socket.recv_from(&mut buf) {
///                 Ok((len, client)) => {
///                     let _ = session.handle_receive(Instant::now(), client, local, None, &buf[..len]);
///                 }
///                 Err(_) => session.handle_timeout(Instant::now()),
///             }
///         }
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Session {
    id: SessionId,
    rtc: Rtc,
    created: Instant,
    last_receive: Instant,
    connected: bool,
    audio: Option<(Mid, Pt)>,
    events: Option<ChannelId>,
    /// Model events written before the `events` channel opened.
    pending_events: Vec<String>,
    /// The relay that last sent this session's traffic, per transport (UDP, TCP), and
    /// the transport it last came over (relay mode). A session's UDP and TCP paths may
    /// come through different relay workers.
    relays: [Option<SocketAddr>; 2],
    last_transport: Transport,
    /// Set once the session has failed; `poll_output` reports it next.
    ended: Option<EndReason>,
    /// The server ICE password: what the client's checks are signed with.
    local_password: String,
    /// A path has been nominated (by the client, or by [`Session::nominate_checked_path`]).
    nominated: bool,
    /// The transaction of our own nomination, until str0m's answer to it (which is for
    /// no one: the client never asked) is withheld.
    own_nomination: Option<[u8; 12]>,
    /// The server ICE ufrag and the client's credentials (from the offer, or the last ICE
    /// restart): what a probe of a new client path is signed with.
    local_ufrag: String,
    remote: Option<IceCreds>,
    /// Where media may go: return routability ([`crate::path_check`]).
    paths: PathCheck,
    /// ICE restarts it may still ask for now, and when that count was last refilled
    /// ([`Session::take_restart`]).
    restarts: (u32, Instant),
    /// The client address's count of sessions waiting to connect, until this one does
    /// (or ends): signaling caps how many one address may park.
    waiting_to_connect: Option<Held>,
    /// Who the session is for, from its session token (empty without one).
    claims: SessionClaims,
    /// Whom it belongs to: the owner of the session token that made it, if one did, and
    /// its place in that owner's count of live sessions.
    owner: Option<(Owner, Held<Owner>)>,
    /// The last peer statistics (round trip, the client's reported loss, bytes sent):
    /// joined with the audio's own in each [`ModelInput::SessionStats`].
    peer_stats: Option<PeerFigures>,
    /// The model's audio waiting to be played at real time.
    playout: Playout,
    /// What the session has to tell the model (a mark reached, a clear done), next out of
    /// [`Session::poll_output`].
    notes: VecDeque<ModelInput>,
}

/// How a session is run: set per transceiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionTuning {
    /// How often the session reports its quality ([`ModelInput::SessionStats`]).
    pub stats_interval: Duration,
    /// How much of the model's speech the session holds ahead of playback.
    pub playout_buffer: Duration,
}

impl Default for SessionTuning {
    fn default() -> Self {
        SessionTuning {
            stats_interval: STATS_INTERVAL,
            playout_buffer: crate::playout::DEFAULT_BUFFER,
        }
    }
}

/// What became of something the model sent a session ([`Session::handle_model`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// An audio frame, queued for playback (or played at once).
    AudioQueued,
    /// An audio frame or a mark the session had no room for: dropped, counted.
    Refused(ModelDrop),
    /// Anything else (an event, a clear, a mark).
    Done,
}

/// What a session keeps of str0m's peer statistics until the audio's arrive.
#[derive(Clone, Copy, Debug)]
struct PeerFigures {
    rtt: Option<Duration>,
    loss_out: Option<f32>,
    bytes_out: u64,
}

/// The host candidates a session advertises: the relay's UDP VIP (or the worker itself
/// in direct mode), and its TCP VIP for ICE-TCP when the relay serves one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advertised {
    /// The UDP candidate.
    pub udp: SocketAddr,
    /// The passive TCP candidate, if any.
    pub tcp: Option<SocketAddr>,
}

impl From<SocketAddr> for Advertised {
    fn from(udp: SocketAddr) -> Self {
        Advertised { udp, tcp: None }
    }
}

/// str0m's name for a transport.
pub fn protocol_of(transport: Transport) -> Protocol {
    match transport {
        Transport::Udp => Protocol::Udp,
        Transport::Tcp => Protocol::Tcp,
    }
}

fn transport_index(transport: Transport) -> usize {
    match transport {
        Transport::Udp => 0,
        Transport::Tcp => 1,
    }
}

impl Session {
    /// A session answering `offer` as ICE lite with `local` credentials, the host
    /// candidates `advertise` (UDP, and passive TCP when given, which str0m ranks below
    /// UDP), and the DTLS certificate `dtls_cert`: the session and its SDP answer. Only
    /// Opus audio is accepted.
    pub fn accept(
        id: SessionId,
        offer: SdpOffer,
        local: IceCreds,
        advertise: impl Into<Advertised>,
        dtls_cert: DtlsCert,
        now: Instant,
    ) -> Result<(Session, String), SignalError> {
        let tuning = SessionTuning::default();
        Self::accept_tuned(id, offer, local, advertise, dtls_cert, now, tuning)
    }

    /// [`Session::accept`] with `tuning`: how often it reports its quality, and how much
    /// of the model's speech it holds ahead of playback.
    pub fn accept_tuned(
        id: SessionId,
        offer: SdpOffer,
        local: IceCreds,
        advertise: impl Into<Advertised>,
        dtls_cert: DtlsCert,
        now: Instant,
        tuning: SessionTuning,
    ) -> Result<(Session, String), SignalError> {
        let advertise: Advertised = advertise.into();
        let local_password = local.pass.clone();
        let local_ufrag = local.ufrag.clone();
        let remote = offer
            .session
            .ice_creds()
            .or_else(|| offer.media_lines.iter().find_map(|m| m.ice_creds()));
        let mut rtc = Rtc::builder()
            .set_ice_lite(true)
            .set_local_ice_credentials(local)
            .set_dtls_cert(dtls_cert)
            .set_reordering_size_audio(AUDIO_REORDER_PACKETS)
            .set_reordering_timeout_audio(Some(AUDIO_REORDER_WAIT))
            .set_stats_interval(Some(tuning.stats_interval))
            .clear_codecs()
            .enable_opus(true, false)
            .build(now);
        let candidate = Candidate::host(advertise.udp, "udp").map_err(|e| {
            SignalError::BadOffer(format!("cannot advertise {}: {e}", advertise.udp))
        })?;
        rtc.add_local_candidate(candidate);
        if let Some(tcp) = advertise.tcp {
            let candidate = Candidate::builder()
                .tcp()
                .host(tcp)
                .tcptype(TcpType::Passive)
                .build()
                .map_err(|e| SignalError::BadOffer(format!("cannot advertise tcp {tcp}: {e}")))?;
            rtc.add_local_candidate(candidate);
        }
        let answer = rtc
            .sdp_api()
            .accept_offer(offer)
            .map_err(|e| SignalError::BadOffer(format!("offer not accepted: {e}")))?
            .to_sdp_string();
        let answer = crate::sdp::complete_candidates(&answer);
        if !answer.contains("opus/48000") {
            return Err(SignalError::BadOffer(
                "no usable audio codec: Opus is required".into(),
            ));
        }
        let session = Session {
            id,
            rtc,
            created: now,
            last_receive: now,
            connected: false,
            audio: None,
            events: None,
            pending_events: Vec::new(),
            relays: [None; 2],
            last_transport: Transport::Udp,
            ended: None,
            local_password,
            nominated: false,
            own_nomination: None,
            local_ufrag,
            remote,
            paths: PathCheck::default(),
            restarts: (RESTART_BURST, now),
            waiting_to_connect: None,
            claims: SessionClaims::default(),
            owner: None,
            peer_stats: None,
            playout: Playout::new(tuning.playout_buffer),
            notes: VecDeque::new(),
        };
        Ok((session, answer))
    }

    /// The relay the session's traffic last came through (relay mode).
    pub fn relay(&self) -> Option<SocketAddr> {
        self.relay_for(self.last_transport)
    }

    /// The relay the session's traffic over `transport` last came through.
    pub fn relay_for(&self, transport: Transport) -> Option<SocketAddr> {
        self.relays[transport_index(transport)]
    }

    /// Where to say that this session ended (relay mode): the relay its verified path's
    /// traffic came through, the path and its transport. That path's flow is the one a
    /// relay keeps (proven flows are never shed while served); flows of paths never
    /// verified are unproven and give way to newcomers anyway.
    pub fn end_notice(&self) -> Option<(SocketAddr, ClientPath, Transport)> {
        let (path, transport) = self.paths.verified_over()?;
        Some((self.relay_for(transport)?, path, transport))
    }

    /// A UDP datagram from `client` to `local` (via `relay` in relay mode).
    pub fn handle_receive(
        &mut self,
        now: Instant,
        client: SocketAddr,
        local: SocketAddr,
        relay: Option<SocketAddr>,
        payload: &[u8],
    ) -> Result<(), DropReason> {
        self.handle_receive_over(Transport::Udp, now, client, local, relay, payload)
    }

    /// A datagram, or an ICE-TCP message, from `client` to `local` (via `relay`).
    pub fn handle_receive_over(
        &mut self,
        transport: Transport,
        now: Instant,
        client: SocketAddr,
        local: SocketAddr,
        relay: Option<SocketAddr>,
        payload: &[u8],
    ) -> Result<(), DropReason> {
        let stun = match DatagramKind::classify(payload) {
            DatagramKind::Stun => StunView::parse(payload).ok(),
            _ => None,
        };
        let path = ClientPath { client, local };
        self.handle_receive_parsed(transport, now, path, relay, payload, stun.as_ref())
    }

    /// [`Session::handle_receive_over`] for a datagram whose STUN view the caller has
    /// parsed already: `stun` is that view when `payload` is STUN that parses, `None`
    /// otherwise. The worker parses each datagram once, to route it, and passes it here.
    pub fn handle_receive_parsed(
        &mut self,
        transport: Transport,
        now: Instant,
        path: ClientPath,
        relay: Option<SocketAddr>,
        payload: &[u8],
        stun: Option<&StunView<'_>>,
    ) -> Result<(), DropReason> {
        let ClientPath { client, local } = path;
        let receive = Receive::new(protocol_of(transport), client, local, payload)
            .map_err(|_| DropReason::Unparsable)?;
        self.rtc
            .handle_input(Input::Receive(now, receive))
            .map_err(|e| {
                tracing::debug!(error = %e, "input refused");
                DropReason::RtcRefused
            })?;
        if !self.may_change_state(payload, stun) {
            // Unauthenticated STUN (anyone who saw the ufrags can send it): str0m ignores
            // it, and it moves nothing here either: relay, idle timer, nomination.
            return Ok(());
        }
        if relay.is_some() {
            self.relays[transport_index(transport)] = relay;
            self.last_transport = transport;
        }
        self.last_receive = now;
        self.paths
            .heard(ClientPath { client, local }, payload.len());
        // TCP is the last resort: a TCP path is used once the client nominates it, never
        // ahead of it, so a client with UDP keeps its UDP pair.
        if !self.nominated
            && transport == Transport::Udp
            && let Some(check) = stun
        {
            self.nominate_checked_path(now, client, local, check);
        }
        Ok(())
    }

    /// Whether `payload` may change the session's state: anything but STUN (str0m
    /// authenticates DTLS and SRTP itself), and STUN (`stun`, its view; `None` when it
    /// does not parse) only as a Binding Request signed with the server password.
    fn may_change_state(&self, payload: &[u8], stun: Option<&StunView<'_>>) -> bool {
        if DatagramKind::classify(payload) != DatagramKind::Stun {
            return true;
        }
        stun.is_some_and(|check| {
            check.is_binding_request()
                && check
                    .verify_integrity(self.local_password.as_bytes())
                    .is_ok()
        })
    }

    /// Makes the path of the first authenticated check the send path at once (called only
    /// for input that [`Session::may_change_state`] let through). ICE-lite
    /// servers in production send on the path of the first valid check; str0m's lite
    /// agent waits for the client's USE-CANDIDATE, which Chromium sends one check
    /// interval (about 50 ms) later, and holds its DTLS flight until then. So the
    /// client's first valid Binding Request goes to str0m once more, as a transaction of
    /// our own with USE-CANDIDATE added and signed again with the server password. The
    /// client nominates as it likes later on, and str0m follows it. str0m's answer to our
    /// own transaction is withheld ([`Session::poll_output`]): one answer per check, so
    /// a spoofed source is sent no more than it sent.
    fn nominate_checked_path(
        &mut self,
        now: Instant,
        client: SocketAddr,
        local: SocketAddr,
        check: &StunView<'_>,
    ) {
        if !check.is_binding_request() {
            return;
        }
        if check.attribute(attr::USE_CANDIDATE).is_some() {
            self.nominated = true; // the client has nominated itself
            return;
        }
        // Its MESSAGE-INTEGRITY was verified by `may_change_state` before this is called.
        let mut buf = [0u8; 512];
        let Some(len) = nomination_of(check, self.local_password.as_bytes(), &mut buf) else {
            return;
        };
        let Ok(receive) = Receive::new(Protocol::Udp, client, local, &buf[..len]) else {
            return;
        };
        if self.rtc.handle_input(Input::Receive(now, receive)).is_ok() {
            self.nominated = true;
            self.own_nomination = StunView::parse(&buf[..len])
                .ok()
                .map(|ours| *ours.transaction_id());
        }
    }

    /// Where a datagram str0m sends to `path` over `transport` goes ([`PathCheck::route`]):
    /// a datagram held for a path that has not answered yet is copied and kept.
    pub fn route_transmit(
        &mut self,
        path: ClientPath,
        transport: Transport,
        contents: &[u8],
    ) -> Destination {
        let stun = DatagramKind::classify(contents) == DatagramKind::Stun;
        self.paths.route(path, transport, contents, stun)
    }

    /// Writes into `buf` a probe of `path` if one may go now: a consent probe of the
    /// verified path when [`Session::path_upkeep`] asked for it, or a probe of an
    /// unverified path that its credit pays for ([`PathCheck::may_probe`]), under a
    /// transaction id from `random` (drawn only then). A probe is a Binding Request signed
    /// with the client's ICE password (USERNAME `client:server`, ICE-CONTROLLED, as the
    /// controlled agent). `None` if none may go, or without the client's credentials or
    /// room.
    pub fn write_probe(
        &mut self,
        path: ClientPath,
        now: Instant,
        buf: &mut [u8],
        random: impl FnOnce() -> [u8; 12],
    ) -> Option<usize> {
        let remote = self.remote.as_ref()?;
        let username_len = remote.ufrag.len() + 1 + self.local_ufrag.len();
        let len = probe_len(username_len);
        let consent = self.paths.verified() == Some(path);
        if !consent && !self.paths.may_probe(path, len, now) {
            return None;
        }
        let transaction_id = random();
        let username = format!("{}:{}", remote.ufrag, self.local_ufrag);
        let mut writer =
            StunWriter::new(buf, METHOD_BINDING, StunClass::Request, &transaction_id).ok()?;
        writer
            .attribute(attr::USERNAME, username.as_bytes())
            .ok()?
            .attribute(attr::PRIORITY, &PROBE_PRIORITY.to_be_bytes())
            .ok()?
            .attribute(attr::ICE_CONTROLLED, &transaction_id[..8])
            .ok()?
            .integrity(remote.pass.as_bytes())
            .ok()?
            .fingerprint()
            .ok()?;
        let written = writer.finish();
        debug_assert_eq!(written, len, "probe_len matches what is written");
        self.paths.probed(path, transaction_id, written, now);
        Some(written)
    }

    /// Whether the STUN message `view` from `path` over `transport` is the success
    /// response to one of this session's probes (then `path` is verified, and the
    /// response is not for str0m).
    pub fn probe_answered(
        &mut self,
        path: ClientPath,
        transport: Transport,
        view: &StunView<'_>,
        now: Instant,
    ) -> bool {
        if view.class() != StunClass::SuccessResponse || view.method() != METHOD_BINDING {
            return false;
        }
        let signed_by_client = self
            .remote
            .as_ref()
            .is_some_and(|remote| view.verify_integrity(remote.pass.as_bytes()).is_ok());
        signed_by_client
            && self
                .paths
                .answered(path, transport, view.transaction_id(), now)
    }

    /// What was held for `path` until it answered its probe, now that it has.
    pub fn take_held(&mut self, path: ClientPath) -> Vec<HeldDatagram> {
        self.paths.take_held(path)
    }

    /// What the session's paths need at `now`: a consent probe, or the news that the
    /// verified path lost consent ([`PathCheck::upkeep`]).
    pub fn path_upkeep(&mut self, now: Instant) -> Upkeep {
        self.paths.upkeep(now)
    }

    /// How long the session has received nothing, at `now`.
    pub fn idle_at(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_receive)
    }

    /// Time has passed: str0m's timers (ICE, DTLS retransmits, RTCP) run.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Frames due are written first: the timeout then sends them.
        self.play_due(now);
        if self.rtc.handle_input(Input::Timeout(now)).is_err() {
            self.ended = Some(EndReason::RtcError);
        }
    }

    /// Something the model sent this session: audio to play (queued, and played at
    /// real time), an event to write, a clear or a mark.
    pub fn handle_model(&mut self, now: Instant, output: ModelOutput) -> Applied {
        let session = self.id;
        let applied = match output {
            // Before the client's audio track is known there is nowhere to play it.
            ModelOutput::Audio { .. } if self.audio.is_none() => Applied::Done,
            ModelOutput::Audio { frame, .. } => match self.playout.push(now, frame) {
                Ok(()) => Applied::AudioQueued,
                Err(_) => Applied::Refused(ModelDrop::PlayoutFull),
            },
            ModelOutput::Event { json, .. } => {
                match self.events.and_then(|cid| self.rtc.channel(cid)) {
                    Some(mut channel) => {
                        let _ = channel.write(false, json.as_bytes());
                    }
                    None => self.pending_events.push(json),
                }
                Applied::Done
            }
            ModelOutput::Clear { .. } => {
                let cleared = self.playout.clear();
                self.notes.push_back(ModelInput::AudioCleared {
                    session,
                    frames: u32::try_from(cleared.frames).unwrap_or(u32::MAX),
                    marks: cleared.marks,
                });
                Applied::Done
            }
            ModelOutput::Mark { name, .. } => match self.playout.mark(name) {
                Ok(()) => Applied::Done,
                Err(_) => Applied::Refused(ModelDrop::MarksFull),
            },
            // The worker ends the session itself.
            ModelOutput::End { .. } => Applied::Done,
        };
        self.play_due(now);
        applied
    }

    /// Writes the model's frames due by `now`, and notes the marks they reach.
    fn play_due(&mut self, now: Instant) {
        while let Some(frame) = self.playout.due(now) {
            if let Some((mid, pt)) = self.audio
                && let Some(writer) = self.rtc.writer(mid)
            {
                let time = MediaTime::new(u64::from(frame.timestamp), Frequency::FORTY_EIGHT_KHZ);
                let _ = writer.write(pt, now, time, frame.payload);
            }
        }
        while let Some(name) = self.playout.reached_mark() {
            let session = self.id;
            self.notes
                .push_back(ModelInput::MarkPlayed { session, name });
        }
    }

    /// Whether the session may have an ICE restart at `now`, taking one if so: at most
    /// [`RESTART_BURST`] at once, then one per [`RESTART_EVERY`]. A restart mints a new
    /// server ufrag, a relay's only way to tell a new first request from an old one, so
    /// its rate is what one signed-up client can ask of the relays.
    pub fn take_restart(&mut self, now: Instant) -> bool {
        let (left, since) = self.restarts;
        let earned = now.saturating_duration_since(since).as_secs() / RESTART_EVERY.as_secs();
        let earned = u32::try_from(earned).unwrap_or(u32::MAX);
        if earned > 0 {
            let left = left.saturating_add(earned).min(RESTART_BURST);
            // A full budget starts its wait now; otherwise the part of a period not yet
            // earned is kept.
            let since = if left == RESTART_BURST {
                now
            } else {
                since + RESTART_EVERY * earned
            };
            self.restarts = (left, since);
        }
        if self.restarts.0 == 0 {
            return false;
        }
        self.restarts.0 -= 1;
        true
    }

    /// Gives back a restart [`Session::take_restart`] took, for one that did not happen.
    pub fn refund_restart(&mut self) {
        self.restarts.0 = (self.restarts.0 + 1).min(RESTART_BURST);
    }

    /// The server ufrag now.
    pub fn local_ufrag(&self) -> &str {
        &self.local_ufrag
    }

    /// New ICE credentials on both sides (an ICE restart).
    pub fn restart_ice(&mut self, local: IceCreds, remote: IceCreds) {
        self.local_password.clone_from(&local.pass);
        self.local_ufrag.clone_from(&local.ufrag);
        self.remote = Some(remote.clone());
        self.nominated = false;
        let mut api = self.rtc.direct_api();
        api.set_local_ice_credentials(local);
        api.set_remote_ice_credentials(remote);
    }

    /// Records who the session is for (its session token's claims).
    pub fn set_claims(&mut self, claims: SessionClaims) {
        self.claims = claims;
    }

    /// Records whom the session belongs to (the owner of the token that made it), and
    /// holds its place in that owner's count of live sessions until it ends.
    pub fn set_owner(&mut self, owner: Owner, slot: Held<Owner>) {
        self.owner = Some((owner, slot));
    }

    /// Whether `caller` may restart or end the session: the bearer token or an open
    /// door (`None`) may act on any; a session token's owner only on its own.
    pub fn belongs_to(&self, caller: Option<&Owner>) -> bool {
        match caller {
            None => true,
            Some(caller) => self
                .owner
                .as_ref()
                .is_some_and(|(owner, _)| owner == caller),
        }
    }

    /// What the model learns when the session starts: its claims, the codec, and the
    /// transport and relay of the client's verified path (or of its last traffic).
    pub fn context(&self) -> SessionContext {
        let transport = self
            .paths
            .verified_over()
            .map_or(self.last_transport, |(_, transport)| transport);
        SessionContext {
            claims: self.claims.clone(),
            codec: OPUS_CODEC.to_string(),
            transport: match transport {
                Transport::Udp => ClientTransport::Udp,
                Transport::Tcp => ClientTransport::Tcp,
            },
            relay: self.relay_for(transport),
        }
    }

    /// Counts this session against its client address's sessions waiting to connect
    /// until it connects or ends.
    pub fn hold_until_connected(&mut self, waiting: Held) {
        self.waiting_to_connect = Some(waiting);
    }

    /// Why the session should end at `now` for lack of progress, if it should: not
    /// connected within `connect_timeout`, or nothing received within `idle_timeout`.
    pub fn expiry(
        &self,
        now: Instant,
        connect_timeout: Duration,
        idle_timeout: Duration,
    ) -> Option<EndReason> {
        if !self.connected && now.duration_since(self.created) > connect_timeout {
            Some(EndReason::ConnectTimeout)
        } else if now.duration_since(self.last_receive) > idle_timeout {
            Some(EndReason::Idle)
        } else {
            None
        }
    }

    /// Closes the session (DTLS close alert, SCTP shutdown are not waited for).
    pub fn disconnect(&mut self) {
        self.rtc.disconnect();
    }

    /// The next thing the worker must do for this session. Call until it returns
    /// [`SessionOutput::Timeout`] or [`SessionOutput::Ended`].
    pub fn poll_output(&mut self) -> SessionOutput {
        loop {
            if let Some(reason) = self.ended {
                return SessionOutput::Ended(reason);
            }
            if let Some(note) = self.notes.pop_front() {
                return SessionOutput::Model(note);
            }
            let output = match self.rtc.poll_output() {
                Ok(output) => output,
                Err(e) => {
                    tracing::debug!(error = %e, "session failed");
                    self.ended = Some(EndReason::RtcError);
                    continue;
                }
            };
            match output {
                Output::Transmit(t) if self.answers_own_nomination(&t.contents) => {
                    // One answer per check reaches the client, not two.
                    self.own_nomination = None;
                }
                Output::Transmit(t) => return SessionOutput::Transmit(t),
                Output::Timeout(t) => {
                    if !self.rtc.is_alive() {
                        self.ended = Some(EndReason::Closed);
                        continue;
                    }
                    let upkeep = self.paths.next_upkeep().unwrap_or(t);
                    let playout = self.playout.next_due().unwrap_or(t);
                    return SessionOutput::Timeout(t.min(upkeep).min(playout));
                }
                Output::Event(event) => {
                    if let Some(out) = self.on_event(event) {
                        return out;
                    }
                }
            }
        }
    }

    /// Whether `contents` is str0m's answer to our own nomination's transaction.
    fn answers_own_nomination(&self, contents: &[u8]) -> bool {
        self.own_nomination.is_some_and(|ours| {
            StunView::parse(contents).is_ok_and(|view| {
                view.class() == StunClass::SuccessResponse && *view.transaction_id() == ours
            })
        })
    }

    /// Turns one str0m event into what the worker must do, if anything.
    fn on_event(&mut self, event: Event) -> Option<SessionOutput> {
        let session = self.id;
        match event {
            Event::Connected => {
                self.connected = true;
                self.waiting_to_connect = None;
                let since = self.last_receive.saturating_duration_since(self.created);
                Some(SessionOutput::Connected(since))
            }
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                self.ended = Some(EndReason::IceDisconnected);
                None
            }
            Event::MediaAdded(m) => {
                self.audio = self.audio.or(Some((m.mid, Pt::from(OPUS_PT))));
                None
            }
            Event::MediaData(d) => {
                self.audio = Some((d.mid, d.pt));
                let frame = AudioFrame {
                    seq: **d.seq_range.end() as u16,
                    timestamp: d.time.numer() as u32,
                    payload: d.data.to_vec(),
                };
                Some(SessionOutput::Model(ModelInput::Audio { session, frame }))
            }
            Event::ChannelOpen(cid, label) if label == EVENTS_CHANNEL => {
                self.events = Some(cid);
                for json in std::mem::take(&mut self.pending_events) {
                    if let Some(mut channel) = self.rtc.channel(cid) {
                        let _ = channel.write(false, json.as_bytes());
                    }
                }
                None
            }
            // str0m reports the peer's figures, then each media's, every stats interval.
            Event::PeerStats(peer) => {
                self.peer_stats = Some(PeerFigures {
                    rtt: peer.rtt,
                    loss_out: peer.egress_loss_fraction,
                    bytes_out: peer.peer_bytes_tx,
                });
                None
            }
            // Reported from connection on: the model hears of a session when it connects.
            Event::MediaIngressStats(audio)
                if self.connected && self.audio.is_some_and(|(mid, _)| mid == audio.mid) =>
            {
                let peer = self.peer_stats?;
                let stats = SessionStats {
                    rtt: peer.rtt.or(audio.rtt),
                    loss_in: audio.loss,
                    loss_out: peer.loss_out,
                    // RTP timestamp units at 48 kHz: 1/48 ms each.
                    jitter_in: Duration::from_micros(u64::from(audio.jitter) * 1000 / 48),
                    packets_in: audio.packets,
                    bytes_in: audio.bytes,
                    bytes_out: peer.bytes_out,
                };
                Some(SessionOutput::Model(ModelInput::SessionStats {
                    session,
                    stats,
                }))
            }
            Event::ChannelData(d) if Some(d.id) == self.events && !d.binary => {
                let json = String::from_utf8(d.data).ok()?;
                Some(SessionOutput::Model(ModelInput::Event { session, json }))
            }
            _ => None,
        }
    }
}

/// The length of a probe whose USERNAME is `username_len` bytes: the STUN header, then
/// USERNAME (padded to 4), PRIORITY, ICE-CONTROLLED, MESSAGE-INTEGRITY and FINGERPRINT,
/// each with its 4-byte attribute header.
fn probe_len(username_len: usize) -> usize {
    20 + (4 + username_len.div_ceil(4) * 4) + (4 + 4) + (4 + 8) + (4 + 20) + (4 + 4)
}

/// `check` as a nomination: the same USERNAME, PRIORITY and role attribute, plus
/// USE-CANDIDATE, under a transaction id of our own, signed with `password`. `None` if
/// the check lacks an attribute a request needs or `buf` is too small.
fn nomination_of(check: &StunView<'_>, password: &[u8], buf: &mut [u8]) -> Option<usize> {
    let username = check.attribute(attr::USERNAME)?;
    let priority = check.attribute(attr::PRIORITY)?;
    let (role, tie_breaker) = [attr::ICE_CONTROLLING, attr::ICE_CONTROLLED]
        .into_iter()
        .find_map(|role| Some((role, check.attribute(role)?)))?;
    let mut transaction = *check.transaction_id();
    transaction[11] ^= 0xff; // not the client's: its answer must not settle the client's
    let mut w = StunWriter::new(buf, METHOD_BINDING, StunClass::Request, &transaction).ok()?;
    w.attribute(attr::USERNAME, username)
        .and_then(|w| w.attribute(attr::PRIORITY, priority))
        .and_then(|w| w.attribute(role, tie_breaker))
        .and_then(|w| w.attribute(attr::USE_CANDIDATE, &[]))
        .and_then(|w| w.integrity(password))
        .and_then(|w| w.fingerprint())
        .ok()?;
    Some(w.finish())
}

#[cfg(test)]
mod tests {
    //! A [`Session`] against a str0m client peer in memory: datagrams are handed across
    //! by the test, time is the test's. No socket, no thread, no wall clock.

    use str0m::change::{SdpAnswer, SdpPendingOffer};
    use str0m::media::{Direction, MediaKind};

    use super::*;
    use crate::playout::FRAME;

    const CLIENT: SocketAddr = SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 7)),
        5000,
    );
    const VIP: SocketAddr = SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 1)),
        3478,
    );
    const RELAY: SocketAddr = SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)),
        40000,
    );

    /// A client with one Opus m-line and the `events` channel, and the session that
    /// answered it.
    struct Pair {
        client: Rtc,
        channel: ChannelId,
        audio: Mid,
        session: Session,
        now: Instant,
        /// What the session asked of the worker, apart from transmits and timeouts.
        seen: Vec<SessionOutput>,
        /// Drop the client's next RTP datagram (a packet lost on the way).
        lose_next_rtp: bool,
        /// When the client got each audio frame from the session, and its RTP timestamp.
        heard: Vec<(Instant, u64)>,
        /// When the session sent each RTP datagram.
        sent_audio: Vec<Instant>,
        /// The longest step of time one round takes.
        max_step: Duration,
    }

    /// A str0m client at [`CLIENT`] offering Opus and the `events` channel.
    fn client_offer(now: Instant) -> (Rtc, ChannelId, SdpOffer, SdpPendingOffer, Mid) {
        let mut client = Rtc::builder()
            .clear_codecs()
            .enable_opus(true, false)
            .build(now);
        client.add_local_candidate(Candidate::host(CLIENT, "udp").unwrap());
        let mut api = client.sdp_api();
        let audio = api.add_media(MediaKind::Audio, Direction::SendRecv, None, None, None);
        let channel = api.add_channel(EVENTS_CHANNEL.into());
        let (offer, pending) = api.apply().unwrap();
        (client, channel, offer, pending, audio)
    }

    fn cert() -> DtlsCert {
        process_certificate().expect("aws-lc-rs makes certificates")
    }

    fn server_credentials() -> IceCreds {
        IceCreds {
            ufrag: "serverUfrag".into(),
            pass: "serverPasswordOf22chars".into(),
        }
    }

    fn pair() -> Pair {
        let now = Instant::now();
        let (mut client, channel, offer, pending, audio) = client_offer(now);
        let (session, answer) =
            Session::accept(7, offer, server_credentials(), VIP, cert(), now).unwrap();
        let answer = SdpAnswer::from_sdp_string(&answer).unwrap();
        client.sdp_api().accept_answer(pending, answer).unwrap();
        Pair {
            client,
            channel,
            audio,
            session,
            now,
            seen: vec![],
            lose_next_rtp: false,
            heard: vec![],
            sent_audio: vec![],
            max_step: Duration::from_millis(50),
        }
    }

    impl Pair {
        /// Moves datagrams both ways and advances time to the next timeout, `rounds`
        /// times.
        fn run(&mut self, rounds: usize) {
            for _ in 0..rounds {
                let mut next = self.now + self.max_step;
                loop {
                    match self.client.poll_output().unwrap() {
                        Output::Transmit(t) => {
                            assert_eq!((t.source, t.destination), (CLIENT, VIP));
                            if is_rtp(&t.contents) && std::mem::take(&mut self.lose_next_rtp) {
                                continue;
                            }
                            self.session
                                .handle_receive(self.now, CLIENT, VIP, Some(RELAY), &t.contents)
                                .unwrap();
                        }
                        Output::Timeout(t) => {
                            next = next.min(t);
                            break;
                        }
                        Output::Event(Event::MediaData(d)) => {
                            self.heard.push((self.now, d.time.numer()));
                        }
                        Output::Event(_) => {}
                    }
                }
                loop {
                    match self.session.poll_output() {
                        SessionOutput::Transmit(t) => {
                            assert_eq!((t.source, t.destination), (VIP, CLIENT));
                            if is_rtp(&t.contents) {
                                self.sent_audio.push(self.now);
                            }
                            let receive =
                                Receive::new(Protocol::Udp, VIP, CLIENT, &t.contents).unwrap();
                            self.client
                                .handle_input(Input::Receive(self.now, receive))
                                .unwrap();
                        }
                        SessionOutput::Timeout(t) => {
                            next = next.min(t);
                            break;
                        }
                        other => self.seen.push(other),
                    }
                }
                self.now = next.max(self.now + Duration::from_millis(1));
                self.client.handle_input(Input::Timeout(self.now)).unwrap();
                self.session.handle_timeout(self.now);
            }
        }

        /// The client sends one 20 ms Opus frame, number `n`, on its audio m-line.
        fn send_audio(&mut self, n: u64) {
            let writer = self.client.writer(self.audio).expect("a writer for audio");
            let pt = writer.payload_params().next().expect("Opus").pt();
            writer
                .write(
                    pt,
                    self.now,
                    MediaTime::new(960 * n, Frequency::FORTY_EIGHT_KHZ),
                    vec![0xf8, 0xff, 0xfe],
                )
                .unwrap();
        }

        /// Audio frames the model has been given so far.
        fn audio_to_model(&self) -> usize {
            self.seen
                .iter()
                .filter(|o| matches!(o, SessionOutput::Model(ModelInput::Audio { .. })))
                .count()
        }

        fn connected(&self) -> bool {
            self.seen
                .iter()
                .any(|o| matches!(o, SessionOutput::Connected(_)))
        }
    }

    #[test]
    fn connects_in_memory_and_the_events_channel_reaches_the_model_and_back() {
        let mut p = pair();
        p.run(200);
        assert!(p.connected(), "ICE lite + DTLS connect: {:?}", p.seen);
        assert_eq!(
            p.session.relay(),
            Some(RELAY),
            "replies go to the relay it came from"
        );
        assert!(p.session.events.is_some(), "the events channel opened");

        // Client → model.
        p.client
            .channel(p.channel)
            .unwrap()
            .write(false, b"{\"ping\":1}")
            .unwrap();
        p.run(20);
        let to_model: Vec<&ModelInput> = p
            .seen
            .iter()
            .filter_map(|o| match o {
                SessionOutput::Model(m) => Some(m),
                _ => None,
            })
            .collect();
        assert_eq!(
            to_model,
            [&ModelInput::Event {
                session: 7,
                json: "{\"ping\":1}".into()
            }]
        );

        // Model → client.
        p.session.handle_model(
            p.now,
            ModelOutput::Event {
                session: 7,
                json: "{\"pong\":1}".into(),
            },
        );
        let mut got = None;
        for _ in 0..20 {
            p.run(1);
            while let Ok(Output::Event(e)) = p.client.poll_output() {
                if let Event::ChannelData(d) = e {
                    got = Some(String::from_utf8(d.data).unwrap());
                }
            }
            if got.is_some() {
                break;
            }
        }
        assert_eq!(got.as_deref(), Some("{\"pong\":1}"));
    }

    #[test]
    fn a_talking_session_reports_its_quality_every_stats_interval() {
        let mut p = connected_pair();
        let start = p.now;
        let mut frame = 0;
        while p.now < start + STATS_INTERVAL * 2 + Duration::from_millis(500) {
            p.send_audio(frame);
            frame += 1;
            p.run(1);
        }
        let reports: Vec<&SessionStats> = p
            .seen
            .iter()
            .filter_map(|o| match o {
                SessionOutput::Model(ModelInput::SessionStats { session: 7, stats }) => Some(stats),
                _ => None,
            })
            .collect();
        // One a stats interval from the session's creation: at 5 s and at 10 s.
        assert_eq!(reports.len(), 2, "{reports:?}");
        let last = reports.last().unwrap();
        assert!(last.packets_in > 0 && last.bytes_in > 0, "{last:?}");
        assert!(last.bytes_out > 0, "{last:?}");
        assert!(last.loss_in.is_none_or(|loss| loss == 0.0), "{last:?}");
        assert!(last.jitter_in < Duration::from_millis(100), "{last:?}");
        // What `session.started` would say of this session: UDP, through the relay.
        let context = p.session.context();
        assert_eq!(context.transport, ClientTransport::Udp);
        assert_eq!(context.relay, Some(RELAY));
        assert_eq!(context.codec, OPUS_CODEC);
    }

    /// A [`pair`] whose session has connected.
    fn connected_pair() -> Pair {
        let mut p = pair();
        p.run(40);
        assert!(p.connected());
        p
    }

    /// Whether a datagram is RTP (not RTCP, STUN or DTLS).
    fn is_rtp(datagram: &[u8]) -> bool {
        datagram.first().is_some_and(|b| b & 0xc0 == 0x80)
            && datagram.get(1).is_some_and(|pt| !(192..=223).contains(pt))
    }

    /// The model says `frames` (its frames by number), then sets a mark `name`.
    fn speak_then_mark(p: &mut Pair, frames: std::ops::Range<u32>, name: &str) {
        for n in frames {
            p.session.handle_model(p.now, model_frame(n));
        }
        let mark = ModelOutput::Mark {
            session: 7,
            name: name.into(),
        };
        p.session.handle_model(p.now, mark);
    }

    /// The model's frame `n` of a stream (20 ms each).
    fn model_frame(n: u32) -> ModelOutput {
        ModelOutput::Audio {
            session: 7,
            frame: AudioFrame {
                seq: n as u16,
                timestamp: 960 * n,
                payload: vec![0xf8, 0xff, 0xfe],
            },
        }
    }

    #[test]
    fn speech_sent_ten_times_faster_than_real_time_is_heard_at_real_time() {
        let mut p = connected_pair();
        // 5 s of speech (250 frames) arrives in 0.5 s: a frame every 2 ms.
        p.max_step = Duration::from_millis(2);
        let start = p.now;
        for n in 0..250 {
            let at = start + Duration::from_millis(2 * u64::from(n));
            while p.now < at {
                p.run(1);
            }
            assert_eq!(
                p.session.handle_model(p.now, model_frame(n)),
                Applied::AudioQueued
            );
        }
        while p.now < start + Duration::from_secs(6) {
            p.run(1);
        }
        assert_eq!(p.heard.len(), 250, "no loss");
        let first_timestamp = p.heard[0].1;
        for (i, (_, timestamp)) in p.heard.iter().enumerate() {
            assert_eq!(timestamp - first_timestamp, 960 * i as u64, "in order");
        }
        // Sent at its slot: the first at once, the next the least gap later, then one
        // every 20 ms from there, however the wake-ups fell.
        assert_eq!(p.sent_audio.len(), 250);
        let first = p.sent_audio[0];
        for (i, at) in p.sent_audio.iter().enumerate().skip(1) {
            let slot = first + crate::playout::MIN_GAP + FRAME * (i as u32 - 1);
            let drift = if *at > slot { *at - slot } else { slot - *at };
            assert!(
                drift <= Duration::from_millis(2),
                "frame {i} sent {drift:?} off its slot"
            );
        }
    }

    #[test]
    fn a_clear_stops_queued_speech_at_once_and_a_mark_is_reported_when_played() {
        let mut p = connected_pair();
        speak_then_mark(&mut p, 0..100, "after-100");
        // Ten frames play; then the user speaks and the model clears.
        let start = p.now;
        while p.sent_audio.len() < 10 {
            p.run(1);
        }
        let cleared_at = p.now;
        p.session
            .handle_model(cleared_at, ModelOutput::Clear { session: 7 });
        while p.now < start + Duration::from_secs(3) {
            p.run(1);
        }
        // Nothing queued is sent after the clear, and the client hears what was sent.
        let after: Vec<_> = p.sent_audio.iter().filter(|at| **at > cleared_at).collect();
        assert!(after.is_empty(), "sent after the clear: {after:?}");
        assert_eq!(p.heard.len(), p.sent_audio.len());
        let cleared = p.seen.iter().find_map(|o| match o {
            SessionOutput::Model(ModelInput::AudioCleared { frames, marks, .. }) => {
                Some((*frames, marks.clone()))
            }
            _ => None,
        });
        let (frames, marks) = cleared.expect("the model hears the clear was done");
        assert_eq!(
            frames as usize + p.heard.len(),
            100,
            "every frame heard or cleared"
        );
        assert_eq!(marks, ["after-100"], "the mark will never be reached");
        assert!(
            !p.seen
                .iter()
                .any(|o| matches!(o, SessionOutput::Model(ModelInput::MarkPlayed { .. }))),
        );
        // A mark after new speech is reported once that speech has played.
        speak_then_mark(&mut p, 200..203, "answer");
        p.run(10);
        let played = p.seen.iter().find_map(|o| match o {
            SessionOutput::Model(ModelInput::MarkPlayed { name, .. }) => Some(name.clone()),
            _ => None,
        });
        assert_eq!(played.as_deref(), Some("answer"));
    }

    #[test]
    fn a_session_that_never_connects_expires_and_an_idle_one_too() {
        let p = pair();
        let (connect, idle) = (Duration::from_secs(10), Duration::from_secs(30));
        assert_eq!(p.session.expiry(p.now, connect, idle), None);
        assert_eq!(
            p.session
                .expiry(p.now + Duration::from_secs(11), connect, idle),
            Some(EndReason::ConnectTimeout)
        );
        let mut p = pair();
        p.run(200);
        assert!(p.connected());
        let last = p.session.last_receive;
        assert_eq!(
            p.session
                .expiry(last + Duration::from_secs(29), connect, idle),
            None
        );
        assert_eq!(
            p.session
                .expiry(last + Duration::from_secs(31), connect, idle),
            Some(EndReason::Idle)
        );
    }

    #[test]
    fn the_answer_str0m_writes_is_completed_in_every_section() {
        let now = Instant::now();
        let (_client, _, offer, _, _) = client_offer(now);
        let (_, answer) =
            Session::accept(8, offer, server_credentials(), VIP, cert(), now).unwrap();
        let sections: Vec<&str> = answer.split("\r\nm=").skip(1).collect();
        assert_eq!(sections.len(), 2, "audio and the data channel: {answer}");
        for section in sections {
            assert!(section.contains("typ host"), "{section}");
            assert!(section.contains("a=end-of-candidates"), "{section}");
        }
    }

    /// The STUN answers (binding success) the session sends right after `input`,
    /// by transaction id.
    fn answers_after(session: &mut Session, input: &[u8], now: Instant) -> Vec<[u8; 12]> {
        session
            .handle_receive(now, CLIENT, VIP, Some(RELAY), input)
            .unwrap();
        let mut answers = vec![];
        while let SessionOutput::Transmit(t) = session.poll_output() {
            if let Ok(view) = StunView::parse(&t.contents) {
                answers.push(*view.transaction_id());
            }
        }
        answers
    }

    #[test]
    fn the_first_valid_check_is_nominated_at_once_and_only_a_valid_one() {
        let now = Instant::now();
        let (mut client, _, offer, _, _) = client_offer(now);
        let client_ufrag = client.direct_api().local_ice_credentials().ufrag;
        let creds = server_credentials();
        let (mut session, _) = Session::accept(9, offer, creds.clone(), VIP, cert(), now).unwrap();
        let check = |password: &[u8], txid: [u8; 12]| {
            let mut buf = [0u8; 512];
            let n = ufrag_common::stun::write_binding_request(
                &mut buf,
                &txid,
                creds.ufrag.as_bytes(),
                client_ufrag.as_bytes(),
                password,
            )
            .unwrap();
            buf[..n].to_vec()
        };
        // Signed with the wrong password: not answered, nothing nominated.
        let forged = check(b"not-the-server-password", [1; 12]);
        assert_eq!(
            answers_after(&mut session, &forged, now),
            Vec::<[u8; 12]>::new()
        );
        assert!(!session.nominated);
        // A valid check without USE-CANDIDATE: answered once, and nominated on the
        // client's behalf (str0m's answer to our own transaction is withheld: before,
        // the check got two answers, 2× toward a possibly spoofed source).
        let valid = check(creds.pass.as_bytes(), [2; 12]);
        assert_eq!(answers_after(&mut session, &valid, now), [[2; 12]]);
        assert!(session.nominated);
        // Once nominated, later checks are just answered.
        let again = check(creds.pass.as_bytes(), [3; 12]);
        assert_eq!(answers_after(&mut session, &again, now), [[3; 12]]);
    }

    /// STUN that does not authenticate (someone
    /// who saw the ufrags on the wire can send it through any relay) changes nothing: not
    /// the relay the session answers through, not its idle timer.
    #[test]
    fn unauthenticated_stun_moves_neither_the_relay_nor_the_idle_timer() {
        let t0 = Instant::now();
        let (mut client, _, offer, _, _) = client_offer(t0);
        let client_ufrag = client.direct_api().local_ice_credentials().ufrag;
        let creds = server_credentials();
        let (mut session, _) = Session::accept(9, offer, creds.clone(), VIP, cert(), t0).unwrap();
        let mut buf = [0u8; 512];
        let n = ufrag_common::stun::write_binding_request(
            &mut buf,
            &[4; 12],
            creds.ufrag.as_bytes(),
            client_ufrag.as_bytes(),
            creds.pass.as_bytes(),
        )
        .unwrap();
        session
            .handle_receive(t0, CLIENT, VIP, Some(RELAY), &buf[..n])
            .unwrap();
        assert_eq!(session.relay(), Some(RELAY));
        // Later, a forged check through another relay.
        let later = t0 + Duration::from_secs(20);
        let other_relay: SocketAddr = "10.9.9.9:40000".parse().unwrap();
        let m = ufrag_common::stun::write_binding_request(
            &mut buf,
            &[5; 12],
            creds.ufrag.as_bytes(),
            client_ufrag.as_bytes(),
            b"not-the-server-password",
        )
        .unwrap();
        session
            .handle_receive(later, CLIENT, VIP, Some(other_relay), &buf[..m])
            .unwrap();
        assert_eq!(session.relay(), Some(RELAY), "the relay did not move");
        assert_eq!(
            session.idle_at(later),
            Duration::from_secs(20),
            "nor the idle timer"
        );
    }

    /// One lost packet must not silence the model: str0m's default held 15 frames (300
    /// ms) behind a gap; the session lets one frame wait.
    #[test]
    fn one_lost_audio_packet_holds_back_at_most_one_frame() {
        let mut p = connected_pair();
        let mut frame = 0;
        let mut send = |p: &mut Pair, lose: bool| {
            p.lose_next_rtp = lose;
            p.send_audio(frame);
            frame += 1;
            // Within one 20 ms frame interval: no timeout of str0m's gets to run long.
            p.run(1);
        };
        send(&mut p, false);
        send(&mut p, false);
        let before_gap = p.audio_to_model();
        assert!(before_gap >= 1, "audio reaches the model");
        send(&mut p, true); // lost
        send(&mut p, false);
        send(&mut p, false);
        assert!(
            p.audio_to_model() > before_gap,
            "two frames after a lost one are still held back ({} → {})",
            before_gap,
            p.audio_to_model()
        );
    }

    #[test]
    fn garbage_is_refused_with_a_reason_and_the_session_survives() {
        let mut p = pair();
        assert_eq!(
            p.session
                .handle_receive(p.now, CLIENT, VIP, Some(RELAY), &[]),
            Err(DropReason::Unparsable)
        );
        assert_eq!(
            p.session.relay(),
            None,
            "a refused datagram teaches nothing"
        );
        p.run(200);
        assert!(p.connected());
    }
}
