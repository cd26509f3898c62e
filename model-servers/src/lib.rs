//! Reference model servers: backends speaking the model protocol
//! ([`ufrag_model_protocol::wire`]) that a team can run as they are or read as the shape of
//! its own. [`Voice::Echo`] plays each user's audio back, answers `ping` events with
//! `pong`, and greets each new session with `session.created`, as the built-in echo does;
//! [`Voice::Speaks`] answers each utterance with a phrase of its own (synthesized speech),
//! so a client can tell the model's voice from an echo of its own.
//!
//! A [`Backend`] serves on a thread of its own and can be watched and disturbed from
//! outside (what the transceiver told it, reading paused, a message sent to every
//! connection, stopped): the transceiver's tests drive a slow, flooding, malformed or
//! dead backend through these.

#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use ufrag_model_protocol::audio::AudioFormat;
use ufrag_model_protocol::bearer::BearerToken;
use ufrag_model_protocol::messages::{AudioFrame, ModelOutput, SessionContext, SessionId, ping_id};
use ufrag_model_protocol::wire::{self, PROTOCOL, ToBackend, WireMessage};

pub mod ogg;

/// What the backend does with a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Voice {
    /// Plays the user's audio back at once; pongs pings; greets new sessions.
    Echo,
    /// Never plays the user's audio back: after each [`UTTERANCE_FRAMES`] of the user's
    /// audio it answers with its own phrase (synthesized speech, [`phrase`]), paced at
    /// 20 ms, then says `{"type":"model.said","frames":N}` on `events`. Pongs pings and
    /// greets new sessions too.
    Speaks,
}

/// The user's audio frames (20 ms each) that make one utterance for [`Voice::Speaks`].
pub const UTTERANCE_FRAMES: u32 = 50;

/// The phrase [`Voice::Speaks`] says: the Opus packets of `voice/phrase.opus` (espeak-ng,
/// encoded by opusenc; `voice/make-phrase.sh` makes it).
pub fn phrase() -> &'static [Vec<u8>] {
    static PHRASE: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    PHRASE.get_or_init(|| {
        ogg::opus_packets(include_bytes!("../voice/phrase.opus"))
            .expect("the committed phrase is Ogg Opus (its unit test reads it)")
    })
}

/// One session's state in [`Voice::Speaks`].
#[derive(Debug, Default)]
struct Speaker {
    /// The user's frames heard since the last answer began.
    heard: u32,
    /// The next packet of the phrase to send, while answering.
    saying: Option<usize>,
    seq: u16,
    timestamp: u32,
}

/// How a backend serves.
#[derive(Clone, Debug)]
pub struct Options {
    /// What it does with sessions.
    pub voice: Voice,
    /// The bearer token a transceiver must send; `None`: any may connect.
    pub token: Option<String>,
    /// The kernel's receive buffer for each connection (`None`: the kernel's default). A
    /// small one makes a backend that stops reading push back on the transceiver at once.
    pub receive_buffer: Option<usize>,
    /// Serve `wss://` with this certificate chain and key (PEM); `None`: plain `ws://`.
    pub tls: Option<TlsIdentity>,
    /// Connections open at once; one more is closed at accept and counted as refused.
    pub max_connections: usize,
    /// A connection's TLS and WebSocket handshakes must be done within this, or it is
    /// closed and counted as refused.
    pub handshake_timeout: std::time::Duration,
    /// The audio its hello chooses ([`Voice::Echo`] only: [`Voice::Speaks`] says Opus
    /// packets, so it always chooses Opus). With PCM the echo plays back the PCM it got,
    /// which the transceiver encodes again.
    pub audio: AudioFormat,
}

/// Connections a backend keeps open at once by default: a transceiver opens one per
/// worker, so this serves dozens of transceivers.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a connection's handshakes may take by default.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A server certificate chain and its private key, in PEM.
#[derive(Clone)]
pub struct TlsIdentity {
    /// The certificate chain, leaf first.
    pub cert_pem: Vec<u8>,
    /// The private key.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsIdentity { .. }")
    }
}

impl TlsIdentity {
    fn acceptor(&self) -> std::io::Result<tokio_rustls::TlsAcceptor> {
        use rustls_pki_types::pem::PemObject as _;
        let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
        let chain = rustls_pki_types::CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("the certificate: {e}")))?;
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(&self.key_pem)
            .map_err(|e| invalid(format!("the key: {e}")))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| invalid(e.to_string()))?;
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

impl Options {
    /// An echo that anyone may reach.
    pub fn echo() -> Options {
        Options {
            voice: Voice::Echo,
            token: None,
            receive_buffer: None,
            tls: None,
            max_connections: MAX_CONNECTIONS,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            audio: AudioFormat::Opus,
        }
    }
}

/// What the connections share with the [`Backend`] handle.
#[derive(Debug)]
struct State {
    /// The transceiver's control messages, in the order they came, as text.
    log: Mutex<Vec<String>>,
    reading: tokio::sync::watch::Sender<bool>,
    broadcast: tokio::sync::broadcast::Sender<WireMessage>,
    open: AtomicUsize,
    refused: AtomicU64,
    malformed: AtomicU64,
    /// Audio frames of its own it sent ([`Voice::Speaks`]).
    said: AtomicU64,
    /// The context of each session started (not resumed), the latest
    /// [`STARTED_KEPT`].
    started: Mutex<VecDeque<(SessionId, SessionContext)>>,
    /// `session.stats` reports received.
    stats_reports: AtomicU64,
}

/// How many started sessions' contexts a backend keeps for [`Backend::started`].
pub const STARTED_KEPT: usize = 1024;

impl State {
    fn note(&self, line: String) {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }
}

/// What a reference backend's binary does: serves with `options` (the token from
/// `UFRAG_MODEL_TOKEN` when set) on `listen` until killed; a bind error exits non-zero.
pub fn serve_until_killed(name: &str, listen: SocketAddr, mut options: Options) -> ExitCode {
    options.token = std::env::var("UFRAG_MODEL_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    match Backend::start(listen, options) {
        Ok(backend) => {
            eprintln!("{name}: listening on {}", backend.url());
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            eprintln!("{name}: {listen}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A running backend; stopped when dropped.
#[derive(Debug)]
pub struct Backend {
    addr: SocketAddr,
    tls: bool,
    state: Arc<State>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Backend {
    /// Listens on `addr` (port 0: any) and serves until stopped.
    pub fn start(addr: SocketAddr, options: Options) -> std::io::Result<Backend> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        if let Some(bytes) = options.receive_buffer {
            socket.set_recv_buffer_size(bytes)?;
        }
        socket.bind(&addr.into())?;
        socket.listen(128)?;
        socket.set_nonblocking(true)?;
        let listener: std::net::TcpListener = socket.into();
        let acceptor = options
            .tls
            .as_ref()
            .map(TlsIdentity::acceptor)
            .transpose()?;
        let acceptor_present = acceptor.is_some();
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            log: Mutex::new(Vec::new()),
            reading: tokio::sync::watch::channel(true).0,
            broadcast: tokio::sync::broadcast::channel(1024).0,
            open: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
            said: AtomicU64::new(0),
            started: Mutex::new(VecDeque::new()),
            stats_reports: AtomicU64::new(0),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (shutdown, stopped) = tokio::sync::oneshot::channel();
        let serving = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("model-backend".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        () = accept_all(listener, serving, options, acceptor) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime here ends every connection's task: its socket closes.
            })?;
        Ok(Backend {
            addr,
            tls: acceptor_present,
            state,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its `ws://` URL (`wss://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "wss" } else { "ws" };
        format!("{scheme}://{}/", self.addr)
    }

    /// The control messages the transceiver sent, in order: `hello worker=N`,
    /// `started SESSION`, `resumed SESSION`, `ended SESSION REASON`.
    pub fn log(&self) -> Vec<String> {
        self.state
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.state.open.load(Ordering::Relaxed)
    }

    /// Connections refused (a wrong token or protocol).
    pub fn refused(&self) -> u64 {
        self.state.refused.load(Ordering::Relaxed)
    }

    /// Messages from the transceiver it could not read.
    pub fn malformed(&self) -> u64 {
        self.state.malformed.load(Ordering::Relaxed)
    }

    /// The sessions started (not resumed) with what `session.started` said of each,
    /// oldest first (the latest [`STARTED_KEPT`]).
    pub fn started(&self) -> Vec<(SessionId, SessionContext)> {
        let started = self.state.started.lock().unwrap_or_else(|e| e.into_inner());
        started.iter().cloned().collect()
    }

    /// `session.stats` reports received, from every session.
    pub fn stats_reports(&self) -> u64 {
        self.state.stats_reports.load(Ordering::Relaxed)
    }

    /// Audio frames of its own it sent ([`Voice::Speaks`]).
    pub fn said_frames(&self) -> u64 {
        self.state.said.load(Ordering::Relaxed)
    }

    /// Stops reading (`false`) or reads again: a backend too slow for its load.
    pub fn set_reading(&self, reading: bool) {
        self.state.reading.send_replace(reading);
    }

    /// Sends `message` on every open connection, as it is.
    pub fn send_to_all(&self, message: WireMessage) {
        let _ = self.state.broadcast.send(message);
    }

    /// Stops serving: every connection closes.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.state.open.store(0, Ordering::Relaxed);
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.shut_down();
    }
}

async fn accept_all(
    listener: tokio::net::TcpListener,
    state: Arc<State>,
    options: Options,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        if state.open.load(Ordering::Relaxed) >= options.max_connections {
            // Closed at once: one peer cannot hold every slot and memory with idle sockets.
            state.refused.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        state.open.fetch_add(1, Ordering::Relaxed);
        let (state, options, acceptor) = (Arc::clone(&state), options.clone(), acceptor.clone());
        tokio::spawn(async move {
            match acceptor {
                None => serve(stream, &state, &options).await,
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(options.handshake_timeout, acceptor.accept(stream));
                    match handshake.await {
                        Ok(Ok(tls)) => serve(tls, &state, &options).await,
                        _ => {
                            state.refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            state.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Accepts the WebSocket (the token and the protocol checked), then serves it.
#[expect(
    clippy::result_large_err,
    reason = "tungstenite's handshake callback returns its own ErrorResponse"
)]
async fn serve<S>(stream: S, state: &Arc<State>, options: &Options)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let token = options.token.as_deref().map(BearerToken::new);
    let check = move |request: &Request, mut response: Response| {
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        if let Some(token) = &token
            && !token.authorizes(Some(&header("authorization")))
        {
            return Err(refusal(StatusCode::UNAUTHORIZED));
        }
        if !header("sec-websocket-protocol")
            .split(',')
            .any(|p| p.trim() == PROTOCOL)
        {
            return Err(refusal(StatusCode::BAD_REQUEST));
        }
        response
            .headers_mut()
            .insert("sec-websocket-protocol", HeaderValue::from_static(PROTOCOL));
        Ok(response)
    };
    let config = WebSocketConfig::default().max_message_size(Some(wire::MAX_MESSAGE_LEN));
    let handshake = tokio_tungstenite::accept_hdr_async_with_config(stream, check, Some(config));
    let Ok(Ok(mut ws)) = tokio::time::timeout(options.handshake_timeout, handshake).await else {
        state.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let mut reading = state.reading.subscribe();
    let mut broadcast = state.broadcast.subscribe();
    let mut speakers: HashMap<SessionId, Speaker> = HashMap::new();
    let mut frame_clock = tokio::time::interval(std::time::Duration::from_millis(20));
    frame_clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let read_now = *reading.borrow_and_update();
        let speaking = speakers.values().any(|s| s.saying.is_some());
        tokio::select! {
            _ = frame_clock.tick(), if speaking => {
                for message in speak(state, &mut speakers) {
                    if ws.feed(into_message(message)).await.is_err() {
                        return;
                    }
                }
                if ws.flush().await.is_err() {
                    return;
                }
            }
            incoming = ws.next(), if read_now => {
                let Some(Ok(message)) = incoming else { return };
                let wire = match message {
                    Message::Text(text) => WireMessage::Text(text.to_string()),
                    Message::Binary(bytes) => WireMessage::Binary(bytes.to_vec()),
                    Message::Close(_) => return,
                    _ => continue,
                };
                for answer in answer(state, options, &mut speakers, &wire) {
                    if ws.feed(into_message(answer)).await.is_err() {
                        return;
                    }
                }
                if ws.flush().await.is_err() {
                    return;
                }
            }
            changed = reading.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            sent = broadcast.recv() => {
                if let Ok(message) = sent
                    && ws.send(into_message(message)).await.is_err()
                {
                    return;
                }
            }
        }
    }
}

fn refusal(status: StatusCode) -> ErrorResponse {
    let mut response = ErrorResponse::new(None);
    *response.status_mut() = status;
    response
}

fn into_message(message: WireMessage) -> Message {
    match message {
        WireMessage::Text(text) => Message::text(text),
        WireMessage::Binary(bytes) => Message::binary(bytes),
    }
}

/// The next 20 ms of every answer being said: one packet per speaking session, and
/// `model.said` for an answer that ends.
fn speak(state: &State, speakers: &mut HashMap<SessionId, Speaker>) -> Vec<WireMessage> {
    let phrase = phrase();
    let mut out = Vec::new();
    for (&session, speaker) in speakers.iter_mut() {
        let Some(at) = speaker.saying else { continue };
        let Some(payload) = phrase.get(at) else {
            speaker.saying = None;
            out.push(wire::event(
                session,
                &format!(r#"{{"type":"model.said","frames":{}}}"#, phrase.len()),
            ));
            continue;
        };
        speaker.seq = speaker.seq.wrapping_add(1);
        speaker.timestamp = speaker.timestamp.wrapping_add(960);
        speaker.saying = Some(at + 1);
        state.said.fetch_add(1, Ordering::Relaxed);
        out.push(wire::audio(
            session,
            &AudioFrame {
                seq: speaker.seq,
                timestamp: speaker.timestamp,
                payload: payload.clone(),
            },
        ));
    }
    out
}

/// The audio a backend with `options` chooses in its hello.
fn chosen_audio(options: &Options) -> AudioFormat {
    match options.voice {
        Voice::Echo => options.audio,
        Voice::Speaks => AudioFormat::Opus,
    }
}

/// What the backend answers to one message from the transceiver.
fn answer(
    state: &State,
    options: &Options,
    speakers: &mut HashMap<SessionId, Speaker>,
    message: &WireMessage,
) -> Vec<WireMessage> {
    let voice = options.voice;
    let Ok(input) = wire::decode_input_with(message, chosen_audio(options)) else {
        state.malformed.fetch_add(1, Ordering::Relaxed);
        return vec![];
    };
    let session_text = wire::session_text;
    match input {
        ToBackend::Hello { protocol, worker } => {
            state.note(format!("hello worker={worker}"));
            if protocol == PROTOCOL {
                vec![wire::backend_hello(chosen_audio(options))]
            } else {
                vec![]
            }
        }
        ToBackend::Started {
            session,
            resumed,
            context,
        } => {
            if voice == Voice::Speaks {
                speakers.entry(session).or_default();
            }
            if resumed {
                state.note(format!("resumed {}", session_text(session)));
                return vec![];
            }
            state.note(format!("started {}", session_text(session)));
            let mut started = state.started.lock().unwrap_or_else(|e| e.into_inner());
            if started.len() == STARTED_KEPT {
                started.pop_front();
            }
            started.push_back((session, context));
            drop(started);
            vec![wire::event(session, r#"{"type":"session.created"}"#)]
        }
        ToBackend::Cleared { .. } | ToBackend::MarkPlayed { .. } => vec![],
        ToBackend::Stats { .. } => {
            state.stats_reports.fetch_add(1, Ordering::Relaxed);
            vec![]
        }
        ToBackend::Ended { session, reason } => {
            state.note(format!("ended {} {reason}", session_text(session)));
            speakers.remove(&session);
            vec![]
        }
        ToBackend::Audio { session, frame } => match voice {
            Voice::Echo => vec![wire::encode_output(
                &ModelOutput::Audio { session, frame },
                "",
            )],
            Voice::Speaks => {
                // Sessions it was not told of (a stray frame) get no state.
                if let Some(speaker) = speakers.get_mut(&session) {
                    speaker.heard += 1;
                    if speaker.heard >= UTTERANCE_FRAMES && speaker.saying.is_none() {
                        speaker.heard = 0;
                        speaker.saying = Some(0);
                    }
                }
                vec![]
            }
        },
        ToBackend::Event { session, data } => match ping_id(&data) {
            Some(id) => vec![wire::event(
                session,
                &format!(r#"{{"type":"pong","id":{id}}}"#),
            )],
            None => vec![],
        },
    }
}
