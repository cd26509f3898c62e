//! WHIP-style signaling (RFC 9725) over HTTP, plus the operational endpoints and the demo
//! page.
//!
//! | request | answer |
//! |---|---|
//! | `POST /v1/sessions`, `Content-Type: application/sdp`, SDP offer | `201`, `Content-Type: application/sdp`, the answer, `Location: /v1/sessions/{id}` |
//! | `DELETE /v1/sessions/{id}` | `204`; `404` for an unknown id |
//! | `PATCH /v1/sessions/{id}`, `Content-Type: application/trickle-ice-sdpfrag` with the client's new `a=ice-ufrag`/`a=ice-pwd` (ICE restart, RFC 9725 §4.3) | `200`, an sdpfrag with the server's new ufrag and password (the new ufrag routes to the same worker); `204` for a fragment without credentials (an ICE-lite server needs no trickled candidates) |
//! | a malformed or unusable offer (garbage, no audio, no Opus) | `400` with a one-line reason |
//! | an offer over its limits: more than 16 media sections (`m=` lines) or 64 candidates | `400` naming the limit (`http_refusals{reason="offer_limits"}`) |
//! | a session POST without the bearer token from a client address (IPv4, or IPv6 /64) that already has `--max-unconnected-per-ip` (8) sessions not yet connected | `429` with `Retry-After` (`unconnected_cap`) |
//! | a wrong content type | `415` |
//! | every worker full, draining, or no worker's model backend connected | `503` with `Retry-After` |
//! | missing or wrong bearer token (when one is configured) | `401` |
//! | a session token refused ([`crate::session_token`]): missing, malformed, badly signed, expired, not yet valid, living too long, bad claims / for another audience, reused / too many single-use tokens remembered | `401` with `WWW-Authenticate` / `403` / `503` (`session_token_refusals{reason}`) |
//! | a session token's user (`sub`) holding `--max-sessions-per-owner` (4) live sessions | `429` (`owner_session_cap`) |
//! | PATCH or DELETE of another session token user's session | `404` |
//! | more session POSTs and PATCHes (each mints a ufrag) from one client address (IPv4, or IPv6 /64) than its rate allows | `429` with `Retry-After` |
//! | a PATCH beyond its session's ICE-restart budget (3 at once, then one per 5 s) | `429` with `Retry-After: 5` |
//! | more requests of any kind from one client address than its rate allows | `429` with `Retry-After`, before the body is read |
//! | a body over 64 KiB (POST and PATCH) | `413` |
//! | `OPTIONS` (CORS preflight) | `204` with the CORS headers |
//! | `GET /` | the demo page; `GET /metrics`, `/healthz`, `/readyz` |
//!
//! Every answer of the session API (`/v1/sessions…`) carries CORS headers so a page on
//! another origin can call it; metrics, health and the demo page carry none.
//!
//! "A client address" is the TCP peer's, or behind a `--trusted-proxy` the client it
//! forwards for ([`crate::client_address`]). The rate of requests of any kind and the
//! cap of sessions waiting to connect count only requests without a valid bearer token:
//! a caller holding the token (an app's server signing its users up, all from its one
//! address) is limited by the sign-up rate, not by them.
//!
//! This module decides; [`crate::http`] is the transport that bounds what a request may
//! cost before it gets here (connections, header size and count, body size, time).
//! A session id carries its worker's index in its low byte, so DELETE and PATCH find
//! the worker without any table that could grow.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hyper::{HeaderMap, Method};
use str0m::change::SdpOffer;
use ufrag_common::runtime::exposition::Exposition;

use crate::client_address::TrustedProxies;
use crate::error::SignalError;
use crate::metrics::{HttpRefusal, TransceiverMetrics};
use crate::per_address::{AddressRate, Held, HeldPer, HeldPerAddress};
use crate::random::random_bytes;
use crate::session_token::{self, Owner, SessionTokens, TokenRefusal, VerifiedToken};
use crate::worker::{Command, RestartRefused, WorkerHandle};
use ufrag_model_protocol::bearer::BearerToken;
use ufrag_model_protocol::messages::SessionId;

/// Largest accepted request body (an offer or a trickle fragment).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// How long signaling waits for a worker.
const WORKER_TIMEOUT: Duration = Duration::from_secs(5);
/// The most workers a transceiver may have: a session id names its worker in one byte.
pub const MAX_WORKERS: usize = 256;
/// The most media sections (`m=` lines) an offer may have: a voice session needs two
/// (audio and the data channel); a caller with video a few more.
pub const MAX_MEDIA_SECTIONS: usize = 16;
/// The most candidates an offer may carry (`a=candidate` lines, every section counted):
/// a host with many interfaces offers a few dozen; each costs the session's ICE agent.
pub const MAX_CANDIDATES: usize = 64;

/// What one client address may cost signaling ([`crate::per_address`]), and whom to
/// believe about the client's address ([`crate::client_address`]).
#[derive(Clone, Debug)]
pub struct SignalingLimits {
    /// Session POSTs and ICE restarts per second, twice that at once.
    pub posts_per_second: f64,
    /// Requests of any kind without a valid bearer token per second, twice that at once.
    pub requests_per_second: f64,
    /// Sessions answered but not yet connected, at once.
    pub unconnected: u32,
    /// Live sessions of one session-token owner, at once.
    pub sessions_per_owner: u32,
    /// Proxies whose `X-Forwarded-For` (or PROXY protocol header) is believed.
    pub trusted_proxies: TrustedProxies,
    /// The trusted proxies' connections begin with a PROXY protocol v2 header
    /// ([`crate::proxy_protocol`]).
    pub proxy_protocol: bool,
}

/// A response as signaling writes it; the transport turns it into HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalResponse {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: Vec<(&'static str, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl SignalResponse {
    fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        SignalResponse {
            status,
            headers: vec![("Content-Type", content_type.to_string())],
            body: body.into(),
        }
    }

    fn with(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// The first header called `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A plain-text answer with one line.
pub fn text(status: u16, body: &str) -> SignalResponse {
    SignalResponse::new(status, "text/plain; charset=utf-8", format!("{body}\n"))
}

fn with_cors(r: SignalResponse) -> SignalResponse {
    r.with("Access-Control-Allow-Origin", "*")
        .with(
            "Access-Control-Allow-Methods",
            "GET, POST, PATCH, DELETE, OPTIONS",
        )
        .with(
            "Access-Control-Allow-Headers",
            "Content-Type, Authorization",
        )
        .with("Access-Control-Expose-Headers", "Location")
}

/// The signaling state shared by the HTTP handlers.
#[derive(Debug)]
pub struct Signaling {
    workers: Vec<WorkerHandle>,
    token: Option<BearerToken>,
    /// Per-session credentials minted by the app's server ([`crate::session_token`]).
    session_tokens: Option<SessionTokens>,
    metrics: Arc<TransceiverMetrics>,
    accepting: AtomicBool,
    http_alive: AtomicBool,
    post_rate: AddressRate,
    request_rate: AddressRate,
    /// Sessions answered and not yet connected, per client address.
    unconnected: Arc<HeldPerAddress>,
    /// Live sessions per session-token owner.
    owned: Arc<HeldPer<Owner>>,
    trusted_proxies: TrustedProxies,
    proxy_protocol: bool,
}

/// Checks an offer before any worker sees it: within [`MAX_MEDIA_SECTIONS`] and
/// [`MAX_CANDIDATES`] (counted before the parse, which they would make costly), parses,
/// has audio, offers Opus. The error is one line; [`OfferRefusal::Limits`] names the limit.
pub fn check_offer(body: &str) -> Result<SdpOffer, OfferRefusal> {
    let sections = body.lines().filter(|l| l.starts_with("m=")).count();
    if sections > MAX_MEDIA_SECTIONS {
        return Err(OfferRefusal::Limits(format!(
            "the offer has {sections} media sections: at most {MAX_MEDIA_SECTIONS} are accepted"
        )));
    }
    let candidates = body
        .lines()
        .filter(|l| l.trim_start().starts_with("a=candidate"))
        .count();
    if candidates > MAX_CANDIDATES {
        return Err(OfferRefusal::Limits(format!(
            "the offer has {candidates} candidates: at most {MAX_CANDIDATES} are accepted"
        )));
    }
    check_offer_content(body).map_err(OfferRefusal::Unusable)
}

/// Whether [`Signaling`] made the session it was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placed {
    /// The worker took it.
    Created,
    /// Surely not made: refused before or by the worker.
    Refused,
    /// The worker did not answer in time: it may yet take it.
    Unknown,
}

/// Why an offer was refused, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OfferRefusal {
    /// Over [`MAX_MEDIA_SECTIONS`] or [`MAX_CANDIDATES`].
    Limits(String),
    /// Malformed, or without audio or Opus.
    Unusable(String),
}

impl OfferRefusal {
    /// The one-line reason.
    pub fn reason(&self) -> &str {
        match self {
            OfferRefusal::Limits(r) | OfferRefusal::Unusable(r) => r,
        }
    }
}

/// Parses the offer and checks it has audio and offers Opus.
fn check_offer_content(body: &str) -> Result<SdpOffer, String> {
    let offer = SdpOffer::from_sdp_string(body).map_err(|e| {
        // The parser's message can span lines; the API promises one line.
        let first = e.to_string();
        let first = first.lines().next().unwrap_or("").trim();
        format!(
            "malformed SDP offer: {}",
            first.chars().take(160).collect::<String>()
        )
    })?;
    if !body.lines().any(|l| l.starts_with("m=audio")) {
        return Err("the offer has no audio".into());
    }
    if !body.to_ascii_lowercase().contains("opus/48000") {
        return Err("no usable audio codec: Opus is required".into());
    }
    Ok(offer)
}

/// The client's new ICE credentials in a trickle-ice-sdpfrag (an ICE restart), if it
/// carries both `a=ice-ufrag` and `a=ice-pwd`.
pub fn trickle_credentials(fragment: &str) -> Option<str0m::IceCreds> {
    let value = |key: &str| {
        fragment
            .lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .map(|v| v.trim().to_string())
    };
    Some(str0m::IceCreds {
        ufrag: value("a=ice-ufrag:")?,
        pass: value("a=ice-pwd:")?,
    })
}

/// The id of a new session on worker `worker`: random, with the worker in the low byte.
fn session_id(worker: usize) -> SessionId {
    (u64::from_be_bytes(random_bytes()) & !0xff) | worker as u64
}

/// The worker a session id names, and the id; `None` for a malformed id.
fn parse_session_id(text: &str, workers: usize) -> Option<(SessionId, usize)> {
    if text.len() != 16 {
        return None;
    }
    let id = u64::from_str_radix(text, 16).ok()?;
    let worker = (id & 0xff) as usize;
    (worker < workers).then_some((id, worker))
}

/// The wall clock in Unix seconds, as session tokens count time.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

impl Signaling {
    /// Signaling over these workers (at most [`MAX_WORKERS`]), with an optional bearer
    /// token, a rate of session POSTs and a rate of requests of any kind per client
    /// address ([`crate::per_address`]).
    pub fn new(
        workers: Vec<WorkerHandle>,
        token: Option<String>,
        session_tokens: Option<SessionTokens>,
        metrics: Arc<TransceiverMetrics>,
        limits: SignalingLimits,
    ) -> Self {
        assert!(workers.len() <= MAX_WORKERS, "checked at start");
        Signaling {
            workers,
            token: token.as_deref().map(BearerToken::new),
            session_tokens,
            metrics,
            accepting: AtomicBool::new(true),
            http_alive: AtomicBool::new(true),
            post_rate: AddressRate::new(limits.posts_per_second),
            request_rate: AddressRate::new(limits.requests_per_second),
            unconnected: HeldPerAddress::new(limits.unconnected),
            owned: HeldPer::new(limits.sessions_per_owner),
            trusted_proxies: limits.trusted_proxies,
            proxy_protocol: limits.proxy_protocol,
        }
    }

    /// The client a request from the TCP peer `peer` comes from
    /// ([`crate::client_address`]).
    pub fn client_address(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        self.trusted_proxies.client(peer, headers)
    }

    /// Whether `peer` is a trusted proxy: its connections carry many clients, so the
    /// cap of connections per address does not apply to it.
    pub fn is_trusted_proxy(&self, peer: IpAddr) -> bool {
        self.trusted_proxies.trusts(peer)
    }

    /// Whether a connection from `peer` must begin with a PROXY protocol v2 header.
    pub fn expects_proxy_header(&self, peer: IpAddr) -> bool {
        self.proxy_protocol && self.is_trusted_proxy(peer)
    }

    /// A `429` for a request from `client` without a valid bearer token beyond its
    /// address's rate of such requests (any route), before its body is read; `None`
    /// when it may go on.
    pub fn refuse_over_rate(&self, client: IpAddr, headers: &HeaderMap) -> Option<SignalResponse> {
        if self.authenticated(headers) || self.request_rate.take(client, Instant::now()) {
            return None;
        }
        self.metrics.http_refused(HttpRefusal::RequestRate);
        Some(text(429, "too many requests from this address").with("Retry-After", "1"))
    }

    /// Stops accepting new sessions (drain).
    pub fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::Relaxed);
    }

    /// The HTTP server stopped serving: readiness turns off for good.
    pub fn http_died(&self) {
        self.http_alive.store(false, Ordering::Relaxed);
    }

    /// The metrics.
    pub fn metrics(&self) -> &TransceiverMetrics {
        &self.metrics
    }

    /// Ready: started, not draining, every worker and the HTTP server alive, and every
    /// worker's model backend able to take sessions.
    pub fn is_ready(&self) -> bool {
        self.metrics.is_ready()
            && self.accepting.load(Ordering::Relaxed)
            && self.http_alive.load(Ordering::Relaxed)
            && self.all_workers_alive()
            && self
                .workers
                .iter()
                .all(|w| w.load.model_ready.load(Ordering::Relaxed))
    }

    /// Whether no worker has stopped on its own.
    pub fn all_workers_alive(&self) -> bool {
        self.workers
            .iter()
            .all(|w| w.load.alive.load(Ordering::Relaxed))
    }

    /// Who may call: the server-to-server bearer token, or a session token that
    /// verifies; anyone when neither is configured. `Ok(None)` for the bearer token or
    /// an open door, `Ok(Some(token))` for a verified session token (not yet spent).
    fn caller(&self, headers: &HeaderMap) -> Result<Option<VerifiedToken>, SignalResponse> {
        if self.authenticated(headers) {
            return Ok(None);
        }
        if let Some(tokens) = &self.session_tokens {
            let verified = session_token::bearer(header_str(headers, "authorization"))
                .ok_or(TokenRefusal::Missing)
                .and_then(|token| tokens.verify(token, unix_now()));
            return verified
                .map(Some)
                .map_err(|refusal| self.refuse_token(refusal));
        }
        if self.token.is_some() {
            return Err(text(401, "missing or wrong bearer token"));
        }
        Ok(None)
    }

    /// The answer to a refused session token, counted by its reason.
    fn refuse_token(&self, refusal: TokenRefusal) -> SignalResponse {
        self.metrics.session_token_refused(refusal);
        let response = text(refusal.status(), refusal.explain());
        match refusal.status() {
            401 if refusal == TokenRefusal::Missing => response.with("WWW-Authenticate", "Bearer"),
            401 => response.with(
                "WWW-Authenticate",
                format!(
                    "Bearer error=\"invalid_token\", error_description=\"{}\"",
                    refusal.label()
                ),
            ),
            503 => response.with("Retry-After", "1"),
            _ => response,
        }
    }

    /// Whether the request carries the configured bearer token (never, when none is).
    fn authenticated(&self, headers: &HeaderMap) -> bool {
        // A wrong guess teaches nothing: not how much of it was right, nor the length.
        self.token
            .as_ref()
            .is_some_and(|token| token.authorizes(header_str(headers, "authorization")))
    }

    /// Answers one request from `client` ([`Signaling::client_address`]), whose body the
    /// transport has read in full (at most [`MAX_BODY_BYTES`]). May block on a worker
    /// for up to 5 s.
    pub fn handle(
        &self,
        client: IpAddr,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> SignalResponse {
        let response = match (method, path) {
            (&Method::OPTIONS, _) => text(204, ""),
            (&Method::GET, "/") => {
                SignalResponse::new(200, "text/html; charset=utf-8", crate::page::PAGE)
            }
            (&Method::GET, "/app.js") => {
                SignalResponse::new(200, "text/javascript; charset=utf-8", crate::page::APP_JS)
            }
            (&Method::GET, "/healthz") => text(200, "ok"),
            (&Method::GET, "/readyz") if self.is_ready() => text(200, "ready"),
            (&Method::GET, "/readyz") => text(503, "not ready"),
            (&Method::GET, "/metrics") => {
                let format = Exposition::for_accept(header_str(headers, "accept"));
                SignalResponse::new(
                    200,
                    format.content_type(),
                    self.metrics.render_with_readiness(format, self.is_ready()),
                )
            }
            (&Method::POST, "/v1/sessions") => self.create(client, headers, body),
            (&Method::DELETE, p) if p.starts_with("/v1/sessions/") => {
                self.delete(headers, &p["/v1/sessions/".len()..])
            }
            (&Method::PATCH, p) if p.starts_with("/v1/sessions/") => {
                self.patch(client, headers, &p["/v1/sessions/".len()..], body)
            }
            (_, "/v1/sessions") => text(405, "method not allowed"),
            _ => text(404, "not found"),
        };
        // Only the session API is for pages of other origins; metrics, health and the
        // demo page are not.
        if path.starts_with("/v1/sessions") {
            with_cors(response)
        } else {
            response
        }
    }

    fn create(&self, client: IpAddr, headers: &HeaderMap, body: &[u8]) -> SignalResponse {
        let token = match self.caller(headers) {
            Ok(verified) => verified,
            Err(refused) => return refused,
        };
        if !self.post_rate.take(client, Instant::now()) {
            self.metrics.http_refused(HttpRefusal::PostRate);
            return text(429, "too many sessions from this address").with("Retry-After", "1");
        }
        let content_type = header_str(headers, "content-type").map(str::to_ascii_lowercase);
        if !content_type.is_some_and(|c| c.starts_with("application/sdp")) {
            return text(415, "Content-Type must be application/sdp");
        }
        let Ok(body) = std::str::from_utf8(body) else {
            return text(400, "the offer is not UTF-8 text");
        };
        let offer = match check_offer(body) {
            Ok(o) => o,
            Err(refusal) => {
                if matches!(refusal, OfferRefusal::Limits(_)) {
                    self.metrics.http_refused(HttpRefusal::OfferLimits);
                }
                return text(400, refusal.reason());
            }
        };
        if !self.accepting.load(Ordering::Relaxed) {
            return text(503, "draining").with("Retry-After", "5");
        }
        // The least loaded live worker whose model can take it takes the session.
        let Some((index, _)) = self
            .workers
            .iter()
            .enumerate()
            .filter(|(_, w)| w.load.alive.load(Ordering::Relaxed))
            .filter(|(_, w)| w.load.model_ready.load(Ordering::Relaxed))
            .min_by_key(|(_, w)| w.load.sessions.load(Ordering::Relaxed))
        else {
            let why = if self.all_workers_alive() {
                "the model backend is unavailable"
            } else {
                "no workers"
            };
            return text(503, why).with("Retry-After", "5");
        };
        // Held by the session until it connects: an address cannot park sessions. A
        // caller with the bearer token (an app's server signing its users up, all from
        // one address) is not counted: one of its users must not lock out the others.
        let waiting = if self.authenticated(headers) {
            None
        } else {
            let Some(waiting) = self.unconnected.open(client) else {
                self.metrics.http_refused(HttpRefusal::UnconnectedCap);
                return text(
                    429,
                    "too many sessions from this address waiting to connect",
                )
                .with("Retry-After", "1");
            };
            Some(waiting)
        };
        // A single-use token is spent before the worker takes the session (two POSTs with
        // one token cannot both make one), and given back when the session was surely
        // not made (a bad offer, a full transceiver), so the page may try again.
        let Some(tokens) = &self.session_tokens else {
            return self.place(index, offer, waiting, None).0;
        };
        let Some(verified) = token else {
            return self.place(index, offer, waiting, None).0;
        };
        if let Err(refusal) = tokens.spend(&verified, unix_now()) {
            return self.refuse_token(refusal);
        }
        // Held by the session for its life: a token holder (or whoever replays a token)
        // cannot fill the transceiver in one user's name.
        let Some(slot) = self.owned.open_for(verified.owner) else {
            tokens.unspend(&verified);
            self.metrics.http_refused(HttpRefusal::OwnerSessionCap);
            let refused = text(429, "too many live sessions for this user");
            return refused.with("Retry-After", "5");
        };
        let (response, placed) = self.place(index, offer, waiting, Some((&verified, slot)));
        match placed {
            Placed::Created => self.metrics.session_token_accepted(),
            Placed::Refused => tokens.unspend(&verified),
            // The worker may yet make it: the token stays spent.
            Placed::Unknown => {}
        }
        response
    }

    /// Builds the session for `offer` and hands it to worker `index`, for a caller with
    /// `token` (its claims and owner go with the session): the answer, and whether the
    /// session was made.
    fn place(
        &self,
        index: usize,
        offer: SdpOffer,
        waiting: Option<Held>,
        token: Option<(&VerifiedToken, Held<Owner>)>,
    ) -> (SignalResponse, Placed) {
        let worker = &self.workers[index];
        let id = session_id(index);
        // The costly part of a new session is built here, not on the worker.
        let new = match worker
            .mint
            .session(id, offer, random_bytes(), Instant::now())
        {
            Ok(mut new) => {
                if let Some(waiting) = waiting {
                    new.session.hold_until_connected(waiting);
                }
                if let Some((token, slot)) = token {
                    new.session.set_claims(token.claims.clone());
                    new.session.set_owner(token.owner, slot);
                }
                Box::new(new)
            }
            Err(SignalError::BadOffer(reason)) => {
                let reason = reason.lines().next().unwrap_or("bad offer");
                return (text(400, reason), Placed::Refused);
            }
            Err(SignalError::Full) => {
                return (
                    text(503, "at capacity").with("Retry-After", "5"),
                    Placed::Refused,
                );
            }
        };
        let answer = new.answer.clone();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cmd = Command::Create { id, new, reply: tx };
        if worker.commands.try_send(cmd).is_err() || worker.waker.wake().is_err() {
            let busy = text(503, "worker busy").with("Retry-After", "1");
            return (busy, Placed::Refused);
        }
        match rx.recv_timeout(WORKER_TIMEOUT) {
            Ok(Ok(())) => (
                SignalResponse::new(201, "application/sdp", answer)
                    .with("Location", format!("/v1/sessions/{id:016x}")),
                Placed::Created,
            ),
            Ok(Err(SignalError::BadOffer(reason))) => (
                text(400, reason.lines().next().unwrap_or("bad offer")),
                Placed::Refused,
            ),
            Ok(Err(SignalError::Full)) => (
                text(503, "at capacity").with("Retry-After", "5"),
                Placed::Refused,
            ),
            Err(_) => (
                text(503, "worker did not answer").with("Retry-After", "1"),
                Placed::Unknown,
            ),
        }
    }

    fn patch(&self, client: IpAddr, headers: &HeaderMap, id: &str, body: &[u8]) -> SignalResponse {
        let caller = match self.caller(headers) {
            Ok(verified) => verified.map(|v| v.owner),
            Err(refused) => return refused,
        };
        let content_type = header_str(headers, "content-type").map(str::to_ascii_lowercase);
        if !content_type.is_some_and(|c| c.starts_with("application/trickle-ice-sdpfrag")) {
            return text(415, "Content-Type must be application/trickle-ice-sdpfrag");
        }
        let Some((id, index)) = parse_session_id(id, self.workers.len()) else {
            return text(404, "no such session");
        };
        let Ok(body) = std::str::from_utf8(body) else {
            return text(400, "the fragment is not UTF-8 text");
        };
        let Some(remote) = trickle_credentials(body) else {
            return text(204, "");
        };
        // A restart mints a ufrag as a sign-up does: it spends the same rate.
        if !self.post_rate.take(client, Instant::now()) {
            self.metrics.http_refused(HttpRefusal::PostRate);
            return text(429, "too many sign-ups and ICE restarts from this address")
                .with("Retry-After", "1");
        }
        let worker = &self.workers[index];
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cmd = Command::Restart {
            id,
            caller,
            remote,
            random: random_bytes(),
            reply: tx,
        };
        if worker.commands.try_send(cmd).is_err() || worker.waker.wake().is_err() {
            return text(503, "worker busy").with("Retry-After", "1");
        }
        match rx.recv_timeout(WORKER_TIMEOUT) {
            Ok(Ok(local)) => SignalResponse::new(
                200,
                "application/trickle-ice-sdpfrag",
                format!(
                    "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n",
                    local.ufrag, local.pass
                ),
            ),
            Ok(Err(RestartRefused::NoSuchSession)) => text(404, "no such session"),
            Ok(Err(RestartRefused::TooFast)) => text(
                429,
                "ICE restarts too fast for this session: at most 3 at once, then one per 5 s",
            )
            .with("Retry-After", "5"),
            Err(_) => text(503, "worker did not answer"),
        }
    }

    fn delete(&self, headers: &HeaderMap, id: &str) -> SignalResponse {
        let caller = match self.caller(headers) {
            Ok(verified) => verified.map(|v| v.owner),
            Err(refused) => return refused,
        };
        let Some((id, index)) = parse_session_id(id, self.workers.len()) else {
            return text(404, "no such session");
        };
        let worker = &self.workers[index];
        let (tx, rx) = crossbeam_channel::bounded(1);
        if worker
            .commands
            .try_send(Command::Delete {
                id,
                caller,
                reply: tx,
            })
            .is_err()
            || worker.waker.wake().is_err()
        {
            return text(503, "worker busy").with("Retry-After", "1");
        }
        match rx.recv_timeout(WORKER_TIMEOUT) {
            Ok(true) => text(204, ""),
            Ok(false) => text(404, "no such session"),
            Err(_) => text(503, "worker did not answer"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_are_checked_before_a_worker_sees_them() {
        let refusal = check_offer("garbage").unwrap_err();
        assert!(
            matches!(&refusal, OfferRefusal::Unusable(r) if r.starts_with("malformed SDP offer")),
            "{refusal:?}"
        );
    }

    #[test]
    fn an_offer_over_its_limits_is_refused_naming_the_limit_before_the_parse() {
        let sections = "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n".repeat(MAX_MEDIA_SECTIONS + 1);
        assert_eq!(
            check_offer(&sections).unwrap_err(),
            OfferRefusal::Limits(format!(
                "the offer has {} media sections: at most 16 are accepted",
                MAX_MEDIA_SECTIONS + 1
            ))
        );
        let candidates = format!(
            "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n{}",
            "a=candidate:1 1 udp 1 192.0.2.1 9 typ host\r\n".repeat(MAX_CANDIDATES + 1)
        );
        let refusal = check_offer(&candidates).unwrap_err();
        assert!(
            matches!(&refusal, OfferRefusal::Limits(r) if r.contains("65 candidates")),
            "{refusal:?}"
        );
        // At the limits the offer goes on to the parse (which this one fails).
        let at_limit = format!(
            "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n{}",
            "a=candidate:1 1 udp 1 192.0.2.1 9 typ host\r\n".repeat(MAX_CANDIDATES)
        );
        assert!(matches!(
            check_offer(&at_limit),
            Err(OfferRefusal::Unusable(_))
        ));
    }

    #[test]
    fn a_session_id_names_its_worker_and_malformed_ids_name_none() {
        for worker in [0, 1, 7] {
            let id = session_id(worker);
            assert_eq!(
                parse_session_id(&format!("{id:016x}"), 8),
                Some((id, worker))
            );
        }
        let on_worker_9 = format!("{:016x}", session_id(9));
        assert_eq!(parse_session_id(&on_worker_9, 8), None, "no such worker");
        assert_eq!(parse_session_id("zz", 8), None);
        assert_eq!(parse_session_id("0123", 8), None);
    }
}
