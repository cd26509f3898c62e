//! The network bridge to an external model backend: one WebSocket connection per worker
//! (`ws://` or `wss://`), speaking [`ufrag_model_protocol::wire`]'s protocol, run on a thread of
//! its own so that the worker's media loop never waits on the backend.
//!
//! # Why one connection per worker
//!
//! A worker holds up to a thousand sessions; a connection each would cost the backend a
//! thousand TLS handshakes, a thousand sockets and a thousand reconnects when it
//! restarts. One connection per worker carries every session of that worker (each
//! message names its session), costs one handshake, and keeps the worker's sessions in
//! the order the worker saw them. What one slow session costs the others is bounded by
//! the per-session queue below.
//!
//! # What never blocks the worker
//!
//! [`ModelBackend::handle`] puts the message on a bounded queue under a short lock;
//! [`ModelBackend::flush`], once per pass of the worker's loop, notifies the bridge
//! thread if the pass queued anything and no notification is pending, and the bridge
//! sends all that is queued with one flush of the connection. [`ModelBackend::poll`]
//! takes what the backend sent from a bounded channel. The bridge thread wakes the
//! worker (its mio `Waker`) only when no wake-up is already pending, so a burst from the
//! backend costs one wake-up, not one each. Nothing the worker calls does I/O.
//!
//! # Bounds, and what happens at each
//!
//! - **A slow backend**: at most [`SESSION_AUDIO_QUEUE`] audio frames wait per session
//!   and [`CONNECTION_QUEUE`] messages per connection; beyond, the oldest audio frame
//!   goes (`ufrag_transceiver_model_dropped_messages_total{reason="queue_full"}`): a voice agent
//!   wants the newest audio. Control messages and events are never dropped for audio,
//!   and audio waits apart from them, in a queue per session: dropping a session's
//!   oldest frame, or the oldest overall, walks past nothing (O(1), amortized).
//! - **A backend that stops reading**: once the transceiver stops, each write still in
//!   flight, the sessions' last messages and the close get [`SHUTDOWN_WRITE`] each, then
//!   the connection is dropped: it cannot hold the shutdown.
//! - **A flooding backend**: at most [`INBOUND_QUEUE`] messages wait for the worker;
//!   beyond, the newest is dropped (`reason="backend_flood"`), and a message longer than
//!   [`ufrag_model_protocol::wire::MAX_MESSAGE_LEN`] closes the connection.
//! - **A malformed message**: refused and counted by its [`ufrag_model_protocol::wire::DecodeError`] label
//!   (`ufrag_transceiver_model_refused_messages_total`); the connection stays up.
//!
//! # Reading while writing
//!
//! Every write to the backend reads the backend while it waits. A backend that answers
//! what it reads (an echo, a speaking model) blocks on its own writes once we stop
//! reading; were our writes to wait without reading, both sides would wait on full
//! buffers for ever, and every frame after that would be dropped as `queue_full`. PCM's
//! larger messages fill both directions at a few hundred sessions.
//!
//! # PCM audio
//!
//! A backend whose hello chose PCM16 ([`ufrag_model_protocol::audio::AudioFormat`]) gets each client packet
//! decoded on the bridge thread, and its PCM is cut into 20 ms frames and encoded there
//! before the worker sees it: the worker and the session play Opus either way, and the
//! codecs' CPU is spent off the media loop. Each session's decoder and encoder are made
//! when it is announced to the backend and dropped with its end
//! ([`crate::pcm::PcmSessions`]); a packet libopus cannot decode is dropped
//! (`reason="codec_error"`).
//!
//! # The backend down, and back
//!
//! The bridge connects at start and is not ready until the backend answered the hello:
//! the worker takes no session, `/readyz` answers 503 and so does a POST. When the
//! connection drops, the bridge reconnects with exponential backoff (100 ms doubling to
//! 5 s) and full jitter; meanwhile audio and events are dropped and counted
//! (`reason="disconnected"`), and each live session is told on its `events` channel
//! (`{"type":"model.unavailable"}`). Live sessions **resume**: after the new hello the
//! backend gets `session.started` with `"resumed":true` for each, and each session hears
//! `{"type":"model.available"}`. A session that ends meanwhile is ended at the backend
//! only if the backend knew it (exactly one `session.ended` per `session.started`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::metrics::{ModelDrop, TransceiverMetrics};
use crate::model::{ModelBackend, ModelLink};
use crate::pcm::PcmSessions;
use ufrag_model_protocol::audio::AudioFormat;
use ufrag_model_protocol::messages::{
    AudioFrame, ModelInput, ModelOutput, SessionContext, SessionId,
};
use ufrag_model_protocol::wire::{self, FromBackend, PROTOCOL, WireMessage};

/// Audio frames one session may have waiting for the backend (1 s of 20 ms frames).
pub const SESSION_AUDIO_QUEUE: usize = 50;
/// Messages one connection may have waiting for the backend.
pub const CONNECTION_QUEUE: usize = 4096;
/// Messages from the backend waiting for the worker.
pub const INBOUND_QUEUE: usize = 4096;
/// The longest the bridge waits for a connection and the backend's hello.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The first wait before a reconnect; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait before a reconnect.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The kernel's send buffer towards the backend (it doubles what is asked): about 1,300
/// audio messages, half a second of a worker's full load.
pub const SEND_BUFFER: u32 = 64 * 1024;
/// How often an idle bridge looks at its stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);
/// Once the bridge is told to stop, how long each write still in flight, the last
/// messages (the sessions' `session.ended`) and the close may take: a backend that
/// stopped reading cannot hold the transceiver's shutdown longer than three of these.
pub const SHUTDOWN_WRITE: Duration = Duration::from_secs(1);

/// Where the backend is, and how to prove who we are.
#[derive(Clone)]
pub struct BridgeConfig {
    /// `ws://host:port/path` or `wss://…`.
    pub url: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub token: Option<String>,
    /// Extra trust anchors for `wss://` (PEM), beside the web's roots.
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for BridgeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeConfig")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// Checks a backend URL before anything starts: `ws://` or `wss://` with a host.
pub fn check_url(url: &str) -> Result<(), String> {
    let request = url
        .into_client_request()
        .map_err(|e| format!("`{url}` is not a WebSocket URL: {e}"))?;
    match request.uri().scheme_str() {
        Some("ws" | "wss") if request.uri().host().is_some() => Ok(()),
        _ => Err(format!(
            "`{url}`: the backend's URL is ws://HOST… or wss://HOST…"
        )),
    }
}

/// A message waiting for the backend.
#[derive(Debug)]
enum Outbound {
    Started(SessionId, Arc<SessionContext>),
    Ended {
        session: SessionId,
        reason: &'static str,
    },
    Audio(SessionId, AudioFrame),
    Event(WireMessage),
}

/// The queue to the backend and what the backend knows of the sessions. Audio waits
/// apart from control messages and events, in a queue per session, each message numbered
/// in arrival order: dropping a session's oldest frame takes the front of its own queue,
/// and dropping the oldest frame overall follows the audio's arrival order, so neither
/// walks past other messages (a queue full of events, or of other sessions' audio,
/// costs a frame nothing), and the backend still gets everything in arrival order.
#[derive(Debug, Default)]
struct Queue {
    /// Control messages and events, with their arrival numbers.
    control: VecDeque<(u64, Outbound)>,
    /// Each session's audio frames, oldest first, with their arrival numbers.
    audio: HashMap<SessionId, VecDeque<(u64, AudioFrame)>>,
    /// Every audio frame's arrival number and session, oldest first. An entry whose frame
    /// has left its session's queue is stale and skipped; stale entries are swept out
    /// once they outnumber the frames waiting.
    audio_order: VecDeque<(u64, SessionId)>,
    /// Audio frames waiting, in all sessions.
    audio_len: usize,
    /// The next arrival number.
    arrivals: u64,
    /// Sessions started at the worker and not ended: resumed after a reconnect.
    live: HashMap<SessionId, Arc<SessionContext>>,
    /// Sessions the current connection was told of (their `session.started` sent or
    /// queued): only these get a `session.ended`.
    announced: HashSet<SessionId>,
    connected: bool,
}

impl Queue {
    /// Messages waiting, audio and control.
    fn len(&self) -> usize {
        self.control.len() + self.audio_len
    }

    /// Audio frames of `session` waiting.
    fn audio_of(&self, session: SessionId) -> usize {
        self.audio.get(&session).map_or(0, VecDeque::len)
    }

    /// Queues `message` behind everything waiting.
    fn push(&mut self, message: Outbound) {
        let arrival = self.arrivals;
        self.arrivals += 1;
        match message {
            Outbound::Audio(session, frame) => {
                self.audio
                    .entry(session)
                    .or_default()
                    .push_back((arrival, frame));
                self.audio_order.push_back((arrival, session));
                self.audio_len += 1;
            }
            _ => self.control.push_back((arrival, message)),
        }
    }

    /// Empties the queue (a connection begins or ends).
    fn clear(&mut self) {
        self.control.clear();
        self.audio.clear();
        self.audio_order.clear();
        self.audio_len = 0;
    }

    /// Takes `session`'s oldest frame if it arrived as `arrival` (else that entry of the
    /// arrival order is stale).
    fn take_audio_if(&mut self, session: SessionId, arrival: u64) -> Option<AudioFrame> {
        let frames = self.audio.get_mut(&session)?;
        if frames.front().is_none_or(|(first, _)| *first != arrival) {
            return None;
        }
        let (_, frame) = frames.pop_front()?;
        if frames.is_empty() {
            self.audio.remove(&session);
        }
        self.audio_len -= 1;
        Some(frame)
    }

    /// Takes everything waiting, in arrival order.
    fn take_in_order(&mut self) -> Vec<Outbound> {
        let mut audio = Vec::with_capacity(self.audio_len);
        while let Some((arrival, session)) = self.audio_order.pop_front() {
            if let Some(frame) = self.take_audio_if(session, arrival) {
                audio.push((arrival, Outbound::Audio(session, frame)));
            }
        }
        let mut out = Vec::with_capacity(self.len() + audio.len());
        let (mut control, mut audio) = (
            self.control.drain(..).peekable(),
            audio.into_iter().peekable(),
        );
        loop {
            let from_control = match (control.peek(), audio.peek()) {
                (Some((c, _)), Some((a, _))) => c < a,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let next = if from_control {
                control.next()
            } else {
                audio.next()
            };
            out.extend(next.map(|(_, message)| message));
        }
        drop(control);
        self.clear();
        out
    }

    /// Drops the oldest audio frame, of `session` if given, else of any session: the
    /// front of the session's queue, or the first live entry of the arrival order.
    fn drop_oldest_audio(&mut self, session: Option<SessionId>) -> bool {
        let dropped = match session {
            Some(session) => {
                let oldest = self
                    .audio
                    .get(&session)
                    .and_then(|f| f.front())
                    .map(|f| f.0);
                oldest.and_then(|arrival| self.take_audio_if(session, arrival))
            }
            None => loop {
                let Some((arrival, session)) = self.audio_order.pop_front() else {
                    break None;
                };
                if let Some(frame) = self.take_audio_if(session, arrival) {
                    break Some(frame);
                }
            },
        };
        self.sweep_stale_order();
        dropped.is_some()
    }

    /// Drops the arrival order's stale entries once they outnumber the frames waiting
    /// (so the order never holds more than about twice the audio).
    fn sweep_stale_order(&mut self) {
        if self.audio_order.len() <= 2 * self.audio_len + 64 {
            return;
        }
        let audio = &self.audio;
        self.audio_order.retain(|(arrival, session)| {
            audio.get(session).is_some_and(|frames| {
                frames
                    .binary_search_by_key(arrival, |(queued, _)| *queued)
                    .is_ok()
            })
        });
    }
}

/// What the worker and the bridge thread share.
struct Shared {
    queue: Mutex<Queue>,
    notify: tokio::sync::Notify,
    stop: AtomicBool,
    inbound_tx: crossbeam_channel::Sender<FromBackend>,
    /// Set by the bridge when it wakes the worker, cleared by the worker before it
    /// drains `inbound`: a message sent while it is set is drained by that pass.
    worker_woken: AtomicBool,
    /// The same the other way: set by the worker when it notifies the bridge, cleared by
    /// the bridge before it drains `queue`.
    bridge_woken: AtomicBool,
    link: Mutex<Option<ModelLink>>,
    metrics: Arc<TransceiverMetrics>,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock leaves a queue that is still consistent
        // (every change is one push or pop): keep using it.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn link(&self) -> Option<ModelLink> {
        self.link.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Hands `message` to the worker and wakes it unless a wake-up is pending; a full
    /// channel drops it, counted.
    fn to_worker(&self, message: FromBackend) {
        if self.inbound_tx.try_send(message).is_err() {
            self.metrics.model_dropped(ModelDrop::BackendFlood);
        }
        // AcqRel pairs with the worker's swap in `poll`: either the worker's drain sees
        // this message, or this swap sees the flag cleared and wakes it.
        if !self.worker_woken.swap(true, Ordering::AcqRel)
            && let Some(link) = self.link()
        {
            (link.wake)();
        }
    }

    /// The gauge first: whoever sees the worker ready sees it counted as connected.
    fn set_connected(&self, connected: bool) {
        self.metrics.model_connected(connected);
        if let Some(link) = self.link() {
            link.ready.store(connected, Ordering::Relaxed);
        }
    }
}

/// The bridge as the worker sees it: a [`ModelBackend`].
pub struct WsBridge {
    shared: Arc<Shared>,
    inbound: crossbeam_channel::Receiver<FromBackend>,
    /// The worker queued something since its last `flush`.
    queued: bool,
    thread: Option<JoinHandle<()>>,
    worker: usize,
    config: Option<BridgeConfig>,
}

impl std::fmt::Debug for WsBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsBridge")
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

impl WsBridge {
    /// A bridge for worker `worker`; it connects once the worker attaches it.
    pub fn new(config: BridgeConfig, worker: usize, metrics: Arc<TransceiverMetrics>) -> Self {
        let (inbound_tx, inbound) = crossbeam_channel::bounded(INBOUND_QUEUE);
        WsBridge {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                notify: tokio::sync::Notify::new(),
                stop: AtomicBool::new(false),
                inbound_tx,
                worker_woken: AtomicBool::new(false),
                bridge_woken: AtomicBool::new(false),
                link: Mutex::new(None),
                metrics,
            }),
            inbound,
            queued: false,
            thread: None,
            worker,
            config: Some(config),
        }
    }

    fn queue_input(&self, input: ModelInput) {
        let metrics = &self.shared.metrics;
        let mut q = self.shared.queue();
        match input {
            ModelInput::SessionStarted { session, context } => {
                q.live.insert(session, Arc::clone(&context));
                if q.connected {
                    q.announced.insert(session);
                    q.push(Outbound::Started(session, context));
                }
            }
            ModelInput::SessionEnded { session, reason } => {
                q.live.remove(&session);
                if q.announced.remove(&session) {
                    q.push(Outbound::Ended { session, reason });
                }
            }
            ModelInput::Audio { session, frame } => {
                if !q.connected || !q.announced.contains(&session) {
                    metrics.model_dropped(ModelDrop::Disconnected);
                    return;
                }
                if q.audio_of(session) >= SESSION_AUDIO_QUEUE {
                    q.drop_oldest_audio(Some(session));
                    metrics.model_dropped(ModelDrop::QueueFull);
                }
                if q.len() >= CONNECTION_QUEUE {
                    if !q.drop_oldest_audio(None) {
                        metrics.model_dropped(ModelDrop::QueueFull);
                        return;
                    }
                    metrics.model_dropped(ModelDrop::QueueFull);
                }
                q.push(Outbound::Audio(session, frame));
            }
            ModelInput::Event { session, .. }
            | ModelInput::SessionStats { session, .. }
            | ModelInput::AudioCleared { session, .. }
            | ModelInput::MarkPlayed { session, .. } => {
                if !q.connected || !q.announced.contains(&session) {
                    metrics.model_dropped(ModelDrop::Disconnected);
                    return;
                }
                if q.len() >= CONNECTION_QUEUE && !q.drop_oldest_audio(None) {
                    metrics.model_dropped(ModelDrop::QueueFull);
                    return;
                }
                q.push(Outbound::Event(wire::encode(&input)));
            }
        }
    }
}

impl ModelBackend for WsBridge {
    fn attach(&mut self, link: ModelLink) {
        link.ready.store(false, Ordering::Relaxed);
        *self.shared.link.lock().unwrap_or_else(|e| e.into_inner()) = Some(link);
        let Some(config) = self.config.take() else {
            return;
        };
        let shared = Arc::clone(&self.shared);
        let worker = self.worker;
        let spawned = std::thread::Builder::new()
            .name(format!("xcvr-model{worker}"))
            .spawn(move || run_bridge(&shared, &config, worker));
        match spawned {
            Ok(handle) => self.thread = Some(handle),
            Err(e) => tracing::error!(worker, error = %e, "cannot start the model bridge"),
        }
    }

    fn handle(&mut self, _now: Instant, input: ModelInput, _out: &mut Vec<ModelOutput>) {
        self.queue_input(input);
        self.queued = true;
    }

    fn flush(&mut self) {
        // AcqRel pairs with the bridge's swap in `send_queued`, as in `to_worker`.
        if std::mem::take(&mut self.queued)
            && !self.shared.bridge_woken.swap(true, Ordering::AcqRel)
        {
            self.shared.notify.notify_one();
        }
    }

    fn poll(&mut self, _now: Instant, out: &mut Vec<ModelOutput>) {
        self.shared.worker_woken.swap(false, Ordering::AcqRel);
        while let Ok(message) = self.inbound.try_recv() {
            match message {
                FromBackend::Output(output) => out.push(output),
                FromBackend::EndSession { session, reason } => {
                    tracing::info!(
                        session = format!("{session:016x}"),
                        reason,
                        "the model ended a session"
                    );
                    out.push(ModelOutput::End { session });
                }
                FromBackend::Hello { .. } => {}
            }
        }
    }

    fn next_due(&self) -> Option<Instant> {
        None
    }
}

impl Drop for WsBridge {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.notify.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The bridge thread: connect, serve, reconnect with backoff, until stopped.
fn run_bridge(shared: &Arc<Shared>, config: &BridgeConfig, worker: usize) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(worker, error = %e, "model bridge: no runtime");
            return;
        }
    };
    let connector = match tls_connector(config) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(worker, error = %e, "model bridge: TLS setup");
            return;
        }
    };
    runtime.block_on(async {
        let mut failures: u32 = 0;
        let mut ever_connected = false;
        // Kept across connections, so a resumed session's frames go on numbering.
        let mut pcm: Option<PcmSessions> = None;
        while !shared.stop.load(Ordering::Relaxed) {
            match connect(config, connector.clone(), worker).await {
                Ok((ws, audio)) => {
                    shared.metrics.model_connect(true);
                    let audio_label = audio.label();
                    if ever_connected {
                        tracing::info!(worker, audio = audio_label, "model backend reconnected");
                    } else {
                        tracing::info!(worker, url = %config.url, audio = audio_label, "model backend connected");
                    }
                    failures = 0;
                    serve(shared, ws, ever_connected, audio, &mut pcm).await;
                    ever_connected = true;
                    if shared.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    tracing::warn!(worker, "model backend connection lost; reconnecting");
                }
                Err(e) => {
                    shared.metrics.model_connect(false);
                    if failures == 0 {
                        tracing::warn!(worker, url = %config.url, error = %e, "model backend unreachable; retrying");
                    }
                    failures = failures.saturating_add(1);
                }
            }
            let wait = backoff(failures, rand_unit());
            let until = tokio::time::Instant::now() + wait;
            while tokio::time::Instant::now() < until && !shared.stop.load(Ordering::Relaxed) {
                tokio::time::sleep(STOP_CHECK.min(until - tokio::time::Instant::now())).await;
            }
        }
    });
}

/// The wait before reconnect attempt `failures` (0: the first, after a lost connection):
/// "full jitter", a uniform share `unit` ∈ [0, 1) of the doubled backoff, never below
/// a tenth of [`FIRST_BACKOFF`].
pub fn backoff(failures: u32, unit: f64) -> Duration {
    let doubled = FIRST_BACKOFF.saturating_mul(1u32 << failures.min(16));
    let cap = doubled.min(MAX_BACKOFF);
    cap.mul_f64(unit.clamp(0.0, 1.0)).max(FIRST_BACKOFF / 10)
}

fn rand_unit() -> f64 {
    let bytes: [u8; 8] = crate::random::random_bytes();
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;
/// The connection's writing half.
type WsSink = futures_util::stream::SplitSink<Ws, Message>;
/// The connection's reading half.
type WsStream = futures_util::stream::SplitStream<Ws>;

fn tls_connector(config: &BridgeConfig) -> Result<Option<tokio_tungstenite::Connector>, String> {
    if !config.url.starts_with("wss://") {
        return Ok(None);
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(pem) = &config.ca_pem {
        for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(pem) {
            let cert: rustls_pki_types::CertificateDer<'static> =
                cert.map_err(|e| format!("the backend CA file: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("the backend CA file: {e}"))?;
        }
    }
    // The provider named, not the process default: which one the default is depends on
    // the features every crate in the build enabled.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Some(tokio_tungstenite::Connector::Rustls(Arc::new(tls))))
}

/// Connects, sends the hello, and waits for the backend's: within [`CONNECT_TIMEOUT`].
async fn connect(
    config: &BridgeConfig,
    connector: Option<tokio_tungstenite::Connector>,
    worker: usize,
) -> Result<(Ws, AudioFormat), String> {
    let mut request = config
        .url
        .as_str()
        .into_client_request()
        .map_err(|e| e.to_string())?;
    let headers = request.headers_mut();
    headers.insert(
        "Sec-WebSocket-Protocol",
        PROTOCOL
            .parse()
            .map_err(|_| "protocol header".to_string())?,
    );
    if let Some(token) = &config.token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| "the token is not a valid header value".to_string())?;
        headers.insert("Authorization", value);
    }
    let ws_config = WebSocketConfig::default()
        .max_message_size(Some(wire::MAX_MESSAGE_LEN))
        .max_frame_size(Some(wire::MAX_MESSAGE_LEN));
    let handshake = async {
        let stream = open_tcp(&request).await?;
        let (mut ws, _response) = tokio_tungstenite::client_async_tls_with_config(
            request,
            stream,
            Some(ws_config),
            connector,
        )
        .await
        .map_err(|e| e.to_string())?;
        ws.send(into_message(wire::hello(worker)))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => {
                    return match wire::decode(&WireMessage::Text(text.to_string())) {
                        Ok(FromBackend::Hello { protocol, audio }) if protocol == PROTOCOL => {
                            Ok((ws, audio))
                        }
                        Ok(FromBackend::Hello { protocol, .. }) => {
                            Err(format!("the backend speaks `{protocol}`, not `{PROTOCOL}`"))
                        }
                        Err(wire::DecodeError::UnknownAudioFormat) => Err(format!(
                            "the backend's hello asks for audio other than {}",
                            AudioFormat::OFFERED.map(AudioFormat::label).join(", ")
                        )),
                        _ => Err("the backend's first message is not a hello".into()),
                    };
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(other)) => {
                    return Err(format!(
                        "the backend's first message is not a hello: {other:?}"
                    ));
                }
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("the backend closed before its hello".into()),
            }
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, handshake)
        .await
        .map_err(|_| format!("no hello within {CONNECT_TIMEOUT:?}"))?
}

/// A TCP connection to the request's host, with Nagle off and a small send buffer:
/// audio waiting in the kernel is audio arriving late, so what a slow backend has not
/// read waits in the bridge's bounded queue instead, where the oldest can be dropped.
async fn open_tcp(
    request: &tokio_tungstenite::tungstenite::handshake::client::Request,
) -> Result<tokio::net::TcpStream, String> {
    let uri = request.uri();
    let host = uri.host().ok_or("no host in the URL")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("wss") {
            443
        } else {
            80
        });
    let mut last = format!("{host}:{port} resolves to no address");
    for addr in tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("{host}: {e}"))?
    {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        }
        .map_err(|e| e.to_string())?;
        socket
            .set_send_buffer_size(SEND_BUFFER)
            .map_err(|e| e.to_string())?;
        match socket.connect(addr).await {
            Ok(stream) => {
                stream.set_nodelay(true).map_err(|e| e.to_string())?;
                return Ok(stream);
            }
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    Err(last)
}

/// A write on the connection.
enum Write {
    /// Queue a message; a flush sends it.
    Feed(WireMessage),
    /// Send what is queued.
    Flush,
    /// Close the connection.
    Close,
}

/// Does `write` while reading the backend: a write that waits for the kernel's buffer
/// waits for the backend to read, and a backend that answers what it reads (an echo)
/// waits for us to read in turn; reading meanwhile keeps both moving. False when the
/// write failed or the connection ended.
async fn write_while_reading(
    shared: &Arc<Shared>,
    sink: &mut WsSink,
    stream: &mut WsStream,
    mut pcm: Option<&mut PcmSessions>,
    write: Write,
) -> bool {
    let mut writing = std::pin::pin!(async {
        match write {
            Write::Feed(message) => sink.feed(into_message(message)).await,
            Write::Flush => sink.flush().await,
            Write::Close => sink.close().await,
        }
    });
    loop {
        tokio::select! {
            done = &mut writing => return done.is_ok(),
            incoming = stream.next() => {
                if !read(shared, incoming, pcm.as_deref_mut()) {
                    return false;
                }
            }
        }
    }
}

/// Takes one message from the backend: false when the connection ended.
fn read(
    shared: &Arc<Shared>,
    incoming: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
    pcm: Option<&mut PcmSessions>,
) -> bool {
    match incoming {
        Some(Ok(Message::Text(text))) => {
            receive(shared, &WireMessage::Text(text.to_string()), pcm);
            true
        }
        Some(Ok(Message::Binary(bytes))) => {
            receive(shared, &WireMessage::Binary(bytes.to_vec()), pcm);
            true
        }
        Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => true,
        Some(Ok(Message::Close(_))) | None => false,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "model backend connection failed");
            false
        }
    }
}

fn into_message(message: WireMessage) -> Message {
    match message {
        WireMessage::Text(text) => Message::text(text),
        WireMessage::Binary(bytes) => Message::binary(bytes),
    }
}

/// Serves one connection, whose backend chose `audio`, until it fails or the bridge
/// stops; `resumed`: the live sessions are announced again as resumed. `pcm`: the
/// sessions' conversions from the last connection, kept (for the live sessions) if this
/// one chose the same format.
async fn serve(
    shared: &Arc<Shared>,
    ws: Ws,
    resumed: bool,
    audio: AudioFormat,
    pcm: &mut Option<PcmSessions>,
) {
    let (mut sink, mut stream) = ws.split();
    let (sink, stream) = (&mut sink, &mut stream);
    if pcm.as_ref().map(PcmSessions::format) != Some(audio) {
        *pcm = PcmSessions::for_format(audio);
    }
    let live: Vec<(SessionId, Arc<SessionContext>)> = {
        let mut q = shared.queue();
        q.connected = true;
        q.clear();
        q.announced = q.live.keys().copied().collect();
        q.live.iter().map(|(s, c)| (*s, Arc::clone(c))).collect()
    };
    if let Some(pcm) = pcm.as_mut() {
        let keep: HashSet<SessionId> = live.iter().map(|(s, _)| *s).collect();
        pcm.retain(|session| keep.contains(&session));
    }
    shared.set_connected(true);
    let mut ok = true;
    for (session, context) in &live {
        let session = *session;
        start_pcm(shared, pcm.as_mut(), session);
        let started = Write::Feed(wire::session_started(session, context, resumed));
        ok = unless_stopped(
            shared,
            write_while_reading(shared, sink, stream, pcm.as_mut(), started),
        )
        .await;
        if !ok {
            break;
        }
        if resumed {
            shared.to_worker(FromBackend::Output(ModelOutput::Event {
                session,
                json: r#"{"type":"model.available"}"#.into(),
            }));
        }
    }
    ok = ok
        && unless_stopped(
            shared,
            write_while_reading(shared, sink, stream, pcm.as_mut(), Write::Flush),
        )
        .await;
    while ok && !shared.stop.load(Ordering::Relaxed) {
        tokio::select! {
            () = shared.notify.notified() => {
                ok = unless_stopped(shared, send_queued(shared, sink, stream, pcm.as_mut())).await;
            }
            incoming = stream.next() => ok = read(shared, incoming, pcm.as_mut()),
            () = tokio::time::sleep(STOP_CHECK) => {}
        }
    }
    if ok && shared.stop.load(Ordering::Relaxed) {
        // The worker's last pass ended its sessions: the backend hears of it, if it reads.
        let last = send_queued(shared, sink, stream, pcm.as_mut());
        let _ = tokio::time::timeout(SHUTDOWN_WRITE, last).await;
    }
    let live: Vec<SessionId> = {
        let mut q = shared.queue();
        q.connected = false;
        q.clear();
        q.announced.clear();
        q.live.keys().copied().collect()
    };
    shared.set_connected(false);
    if !shared.stop.load(Ordering::Relaxed) {
        shared.metrics.model_disconnected();
        for session in live {
            shared.to_worker(FromBackend::Output(ModelOutput::Event {
                session,
                json: r#"{"type":"model.unavailable"}"#.into(),
            }));
        }
    } else {
        let close = write_while_reading(shared, sink, stream, pcm.as_mut(), Write::Close);
        let _ = tokio::time::timeout(SHUTDOWN_WRITE, close).await;
    }
}

/// `writes`' outcome; if the bridge is told to stop while they are in flight, they get
/// [`SHUTDOWN_WRITE`] more, then count as failed (the connection is dropped half-written).
async fn unless_stopped(shared: &Shared, writes: impl std::future::Future<Output = bool>) -> bool {
    let mut writes = std::pin::pin!(writes);
    tokio::select! {
        ok = &mut writes => return ok,
        () = stopping(shared) => {}
    }
    tokio::time::timeout(SHUTDOWN_WRITE, writes)
        .await
        .unwrap_or(false)
}

/// Returns once the bridge is told to stop (looked at every [`STOP_CHECK`]).
async fn stopping(shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(STOP_CHECK).await;
    }
}

/// Sends what is queued, then flushes: false when the connection failed. With `pcm`,
/// each client packet goes as the PCM it decodes to.
///
/// Every write reads the backend while it waits ([`write_while_reading`]). One batch per
/// call, flushed: what the worker queues meanwhile notifies the bridge again. A bridge
/// that cannot keep up (PCM's codec on a busy host) then sheds the oldest audio at the
/// bounded queue, counted, where draining until empty would never flush while the worker
/// kept it busy.
async fn send_queued(
    shared: &Arc<Shared>,
    sink: &mut WsSink,
    stream: &mut WsStream,
    mut pcm: Option<&mut PcmSessions>,
) -> bool {
    shared.bridge_woken.swap(false, Ordering::AcqRel);
    let batch: Vec<Outbound> = shared.queue().take_in_order();
    for message in batch {
        let wire = match message {
            Outbound::Started(session, context) => {
                start_pcm(shared, pcm.as_deref_mut(), session);
                wire::session_started(session, &context, false)
            }
            Outbound::Ended { session, reason } => {
                if let Some(pcm) = pcm.as_deref_mut() {
                    pcm.end(session);
                }
                wire::encode(&ModelInput::SessionEnded { session, reason })
            }
            Outbound::Audio(session, frame) => match pcm.as_deref_mut() {
                None => wire::audio(session, &frame),
                Some(pcm) => match pcm.get(session).map(|s| s.decode(&frame.payload)) {
                    Some(Ok(samples)) => {
                        wire::pcm_audio(session, frame.seq, frame.timestamp, samples)
                    }
                    Some(Err(_)) => {
                        shared.metrics.model_dropped(ModelDrop::CodecError);
                        continue;
                    }
                    None => {
                        // Its conversion could not be made (counted then): counted again.
                        shared.metrics.model_dropped(ModelDrop::CodecError);
                        continue;
                    }
                },
            },
            Outbound::Event(wire) => wire,
        };
        let write = Write::Feed(wire);
        if !write_while_reading(shared, sink, stream, pcm.as_deref_mut(), write).await {
            return false;
        }
    }
    write_while_reading(shared, sink, stream, pcm, Write::Flush).await
}

/// Makes `session`'s PCM conversion, if the connection speaks PCM; a conversion libopus
/// cannot make leaves the session's audio dropped and counted as it comes.
fn start_pcm(shared: &Shared, pcm: Option<&mut PcmSessions>, session: SessionId) {
    if let Some(Err(e)) = pcm.map(|pcm| pcm.start(session)) {
        shared.metrics.model_dropped(ModelDrop::CodecError);
        tracing::warn!(session = format!("{session:016x}"), error = %e, "no PCM conversion");
    }
}

/// Hands what the backend sent to the worker. With `pcm`, its audio is cut into 20 ms
/// frames and encoded first; a clear drops the samples short of a frame, and a mark
/// sends them first, padded, so it falls after everything sent before it.
fn receive(shared: &Arc<Shared>, message: &WireMessage, pcm: Option<&mut PcmSessions>) {
    let audio = pcm.as_ref().map_or(AudioFormat::Opus, |p| p.format());
    let decoded = match wire::decode_with(message, audio) {
        Ok(FromBackend::Hello { .. }) => return,
        Ok(decoded) => decoded,
        Err(e) => return shared.metrics.model_error(e),
    };
    let Some(pcm) = pcm else {
        return shared.to_worker(decoded);
    };
    let session = match &decoded {
        FromBackend::Output(
            ModelOutput::Audio { session, .. }
            | ModelOutput::Clear { session }
            | ModelOutput::Mark { session, .. },
        ) => *session,
        _ => return shared.to_worker(decoded),
    };
    let Some(converter) = pcm.get(session) else {
        // A session this connection was not told of, or one that ended.
        return shared.metrics.model_dropped(ModelDrop::UnknownSession);
    };
    let mut emit =
        |frame| shared.to_worker(FromBackend::Output(ModelOutput::Audio { session, frame }));
    let converted = match &decoded {
        FromBackend::Output(ModelOutput::Audio { frame, .. }) => {
            // Encoding costs what sending costs many times over: not for frames the
            // worker would drop.
            if shared.inbound_tx.is_full() {
                return shared.metrics.model_dropped(ModelDrop::BackendFlood);
            }
            if converter.encode(&frame.payload, &mut emit).is_err() {
                shared.metrics.model_dropped(ModelDrop::CodecError);
            }
            return; // its frames went to the worker as each was encoded
        }
        FromBackend::Output(ModelOutput::Clear { .. }) => converter.clear(),
        _ => converter.flush(&mut emit),
    };
    if converted.is_err() {
        shared.metrics.model_dropped(ModelDrop::CodecError);
    }
    shared.to_worker(decoded);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_with_full_jitter() {
        assert_eq!(backoff(0, 1.0), FIRST_BACKOFF);
        assert_eq!(backoff(3, 1.0), FIRST_BACKOFF * 8);
        assert_eq!(backoff(30, 1.0), MAX_BACKOFF);
        assert_eq!(backoff(30, 0.5), MAX_BACKOFF / 2);
        assert_eq!(backoff(30, 0.0), FIRST_BACKOFF / 10, "never a busy loop");
    }

    #[test]
    fn urls_are_checked_before_anything_starts() {
        assert!(check_url("ws://127.0.0.1:9000/model").is_ok());
        assert!(check_url("wss://model.internal/v1").is_ok());
        assert!(check_url("http://127.0.0.1:9000").is_err());
        assert!(check_url("model").is_err());
    }

    /// An audio frame whose payload is `n`.
    fn frame(n: u8) -> AudioFrame {
        AudioFrame {
            seq: 0,
            timestamp: 0,
            payload: vec![n],
        }
    }

    fn queue_with(live: &[SessionId]) -> Queue {
        let mut q = Queue {
            connected: true,
            ..Queue::default()
        };
        let context = Arc::new(SessionContext::anonymous_udp());
        q.live
            .extend(live.iter().map(|&s| (s, Arc::clone(&context))));
        q.announced.extend(live);
        q
    }

    #[test]
    fn the_oldest_audio_goes_first_and_control_messages_stay() {
        let mut q = queue_with(&[1, 2]);
        q.push(Outbound::Started(
            2,
            Arc::new(SessionContext::anonymous_udp()),
        ));
        for (session, n) in [(1, 0u8), (2, 1), (1, 2)] {
            q.push(Outbound::Audio(session, frame(n)));
        }
        q.push(Outbound::Event(WireMessage::Text("e".into())));
        assert!(q.drop_oldest_audio(Some(1)));
        assert_eq!(q.audio_of(1), 1);
        let order: Vec<String> = q
            .take_in_order()
            .iter()
            .map(|m| match m {
                Outbound::Started(s, _) => format!("started {s}"),
                Outbound::Audio(s, f) => format!("audio {s} {}", f.payload[0]),
                Outbound::Event(_) => "event".into(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(order, ["started 2", "audio 2 1", "audio 1 2", "event"]);
        assert!(q.audio.is_empty());
        assert_eq!(q.len(), 0);
        for n in 0..2u8 {
            q.push(Outbound::Audio(1, frame(n)));
        }
        assert!(q.drop_oldest_audio(None));
        assert!(q.drop_oldest_audio(None));
        assert!(!q.drop_oldest_audio(None), "no audio left to drop");
        assert!(q.audio.is_empty());
    }

    #[test]
    fn a_sessions_oldest_frame_is_dropped_without_walking_other_sessions_audio() {
        let mut q = queue_with(&[1, 2]);
        // A queue full of session 2's audio, then session 1's.
        for n in 0..CONNECTION_QUEUE - 2 {
            q.push(Outbound::Audio(2, frame(n as u8)));
        }
        for n in [10u8, 11] {
            q.push(Outbound::Audio(1, frame(n)));
        }
        // Session 1's oldest is the front of its own queue.
        assert_eq!(
            q.audio[&1].front().map(|f| f.0),
            Some(CONNECTION_QUEUE as u64 - 2)
        );
        assert!(q.drop_oldest_audio(Some(1)));
        assert_eq!((q.audio_of(1), q.audio_of(2)), (1, CONNECTION_QUEUE - 2));
        // Many such drops leave stale entries in the arrival order; they are swept.
        for n in 0..10_000u32 {
            q.push(Outbound::Audio(1, frame(n as u8)));
            assert!(q.drop_oldest_audio(Some(1)));
        }
        assert!(
            q.audio_order.len() <= 2 * q.len() + 64,
            "{}",
            q.audio_order.len()
        );
        // The order still gives the oldest overall, then everything in arrival order.
        assert!(q.drop_oldest_audio(None));
        assert_eq!(q.audio_of(2), CONNECTION_QUEUE - 3);
        let out = q.take_in_order();
        assert_eq!(out.len(), CONNECTION_QUEUE - 2);
        assert!(matches!(&out[0], Outbound::Audio(2, f) if f.payload[0] == 1));
        assert!(matches!(out.last(), Some(Outbound::Audio(1, _))));
    }

    #[test]
    fn dropping_audio_behind_a_queue_full_of_events_walks_past_none() {
        let mut q = queue_with(&[1]);
        for _ in 0..CONNECTION_QUEUE - 1 {
            q.push(Outbound::Event(WireMessage::Text("e".into())));
        }
        q.push(Outbound::Audio(1, frame(7)));
        assert_eq!(q.len(), CONNECTION_QUEUE);
        // The oldest audio is at the front of its own queue, behind no event.
        assert_eq!(
            q.audio_order.front(),
            Some(&(CONNECTION_QUEUE as u64 - 1, 1))
        );
        assert!(q.drop_oldest_audio(None));
        assert_eq!(q.control.len(), CONNECTION_QUEUE - 1, "no event dropped");
        assert!(!q.drop_oldest_audio(None));
    }
}
