//! WHIP-style signaling (RFC 9725) over HTTP, plus the operational endpoints and the demo
//! page.
//!
//! | request | answer |
//! |---|---|
//! | `POST /v1/sessions`, `Content-Type: application/sdp`, SDP offer | `201`, `Content-Type: application/sdp`, the answer, `Location: /v1/sessions/{id}` |
//! | `DELETE /v1/sessions/{id}` | `204`; `404` for an unknown id |
//! | `PATCH /v1/sessions/{id}`, `Content-Type: application/trickle-ice-sdpfrag` with the client's new `a=ice-ufrag`/`a=ice-pwd` (ICE restart, RFC 9725 §4.3) | `200`, an sdpfrag with the server's new ufrag and password (the new ufrag routes to the same worker); `204` for a fragment without credentials (an ICE-lite server needs no trickled candidates) |
//! | a malformed or unusable offer (garbage, no audio, no Opus) | `400` with a one-line reason |
//! | a wrong content type | `415` |
//! | every worker full, or draining | `503` with `Retry-After` |
//! | missing or wrong bearer token (when one is configured) | `401` |
//! | `OPTIONS` (CORS preflight) | `204` with the CORS headers |
//! | `GET /` | the demo page; `GET /metrics`, `/healthz`, `/readyz` |
//!
//! Every answer of the session API (`/v1/sessions…`) carries CORS headers so a page on
//! another origin can call it; metrics, health and the demo page carry none.

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use str0m::change::SdpOffer;
use subtle::ConstantTimeEq;

use crate::metrics::TransceiverMetrics;
use crate::model::SessionId;
use crate::worker::{Command, SignalError, WorkerHandle};

/// Largest accepted offer.
pub const MAX_OFFER_BYTES: usize = 64 * 1024;
/// How long signaling waits for a worker.
const WORKER_TIMEOUT: Duration = Duration::from_secs(5);

/// The signaling state shared by the HTTP threads.
#[derive(Debug)]
pub struct Signaling {
    workers: Vec<WorkerHandle>,
    token: Option<String>,
    metrics: Arc<TransceiverMetrics>,
    accepting: AtomicBool,
    owners: Mutex<HashMap<SessionId, usize>>,
}

/// Random bytes from the kernel (signaling only, never per packet).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    let mut f = std::fs::File::open("/dev/urandom").expect("/dev/urandom exists");
    f.read_exact(&mut out).expect("/dev/urandom reads");
    out
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("valid header")
}

type Response = tiny_http::Response<std::io::Cursor<Vec<u8>>>;

fn text(status: u16, body: &str) -> Response {
    tiny_http::Response::from_string(format!("{body}\n"))
        .with_status_code(status)
        .with_header(header("Content-Type", "text/plain; charset=utf-8"))
}

fn with_cors(r: Response) -> Response {
    r.with_header(header("Access-Control-Allow-Origin", "*"))
        .with_header(header(
            "Access-Control-Allow-Methods",
            "GET, POST, PATCH, DELETE, OPTIONS",
        ))
        .with_header(header(
            "Access-Control-Allow-Headers",
            "Content-Type, Authorization",
        ))
        .with_header(header("Access-Control-Expose-Headers", "Location"))
}

/// Checks an offer before any worker sees it: parses, has audio, offers Opus.
pub fn check_offer(body: &str) -> Result<SdpOffer, String> {
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

impl Signaling {
    /// Signaling over these workers, with an optional bearer token.
    pub fn new(
        workers: Vec<WorkerHandle>,
        token: Option<String>,
        metrics: Arc<TransceiverMetrics>,
    ) -> Self {
        Signaling {
            workers,
            token,
            metrics,
            accepting: AtomicBool::new(true),
            owners: Mutex::new(HashMap::new()),
        }
    }

    /// Stops accepting new sessions (drain).
    pub fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::Relaxed);
    }

    fn authorized(&self, request: &tiny_http::Request) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        // Constant time in the token's content: a wrong guess teaches nothing about how
        // many leading bytes were right.
        request.headers().iter().any(|h| {
            h.field.equiv("Authorization")
                && h.value
                    .as_str()
                    .strip_prefix("Bearer ")
                    .is_some_and(|presented| {
                        bool::from(presented.as_bytes().ct_eq(token.as_bytes()))
                    })
        })
    }

    /// Answers one request.
    pub fn handle(&self, request: &mut tiny_http::Request) -> Response {
        let path = request.url().split('?').next().unwrap_or("").to_string();
        let method = request.method().clone();
        use tiny_http::Method::{Delete, Get, Options, Post};
        let response = match (&method, path.as_str()) {
            (Options, _) => text(204, ""),
            (Get, "/") => tiny_http::Response::from_string(crate::page::PAGE)
                .with_header(header("Content-Type", "text/html; charset=utf-8")),
            (Get, "/app.js") => tiny_http::Response::from_string(crate::page::APP_JS)
                .with_header(header("Content-Type", "text/javascript; charset=utf-8")),
            (Get, "/healthz") => text(200, "ok"),
            (Get, "/readyz")
                if self.metrics.is_ready() && self.accepting.load(Ordering::Relaxed) =>
            {
                text(200, "ready")
            }
            (Get, "/readyz") => text(503, "not ready"),
            (Get, "/metrics") => tiny_http::Response::from_string(self.metrics.render())
                .with_header(header(
                    "Content-Type",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )),
            (Post, "/v1/sessions") => self.create(request),
            (Delete, p) if p.starts_with("/v1/sessions/") => {
                self.delete(request, &p["/v1/sessions/".len()..])
            }
            (tiny_http::Method::Patch, p) if p.starts_with("/v1/sessions/") => {
                let id = p["/v1/sessions/".len()..].to_string();
                self.patch(request, &id)
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

    fn create(&self, request: &mut tiny_http::Request) -> Response {
        if !self.authorized(request) {
            return text(401, "missing or wrong bearer token");
        }
        let content_type = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Content-Type"))
            .map(|h| h.value.as_str().to_ascii_lowercase());
        if !content_type.is_some_and(|c| c.starts_with("application/sdp")) {
            return text(415, "Content-Type must be application/sdp");
        }
        let mut body = String::new();
        let read = request
            .as_reader()
            .take(MAX_OFFER_BYTES as u64 + 1)
            .read_to_string(&mut body);
        if read.is_err() {
            return text(400, "the offer is not UTF-8 text");
        }
        if body.len() > MAX_OFFER_BYTES {
            return text(413, "offer too large");
        }
        let offer = match check_offer(&body) {
            Ok(o) => o,
            Err(reason) => return text(400, &reason),
        };
        if !self.accepting.load(Ordering::Relaxed) {
            return text(503, "draining").with_header(header("Retry-After", "5"));
        }
        // The least loaded worker takes the session.
        let Some((index, worker)) = self
            .workers
            .iter()
            .enumerate()
            .min_by_key(|(_, w)| w.load.sessions.load(Ordering::Relaxed))
        else {
            return text(503, "no workers").with_header(header("Retry-After", "5"));
        };
        let id = u64::from_be_bytes(random_bytes());
        // The costly part of a new session is built here, not on the worker.
        let new = match worker
            .mint
            .session(id, offer, random_bytes(), Instant::now())
        {
            Ok(new) => Box::new(new),
            Err(SignalError::BadOffer(reason)) => {
                return text(400, reason.lines().next().unwrap_or("bad offer"));
            }
            Err(SignalError::Full) => {
                return text(503, "at capacity").with_header(header("Retry-After", "5"));
            }
        };
        let answer = new.answer.clone();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cmd = Command::Create { id, new, reply: tx };
        if worker.commands.try_send(cmd).is_err() || worker.waker.wake().is_err() {
            return text(503, "worker busy").with_header(header("Retry-After", "1"));
        }
        match rx.recv_timeout(WORKER_TIMEOUT) {
            Ok(Ok(())) => {
                self.owners.lock().expect("owners").insert(id, index);
                tiny_http::Response::from_string(answer)
                    .with_status_code(201)
                    .with_header(header("Content-Type", "application/sdp"))
                    .with_header(header("Location", &format!("/v1/sessions/{id:016x}")))
            }
            Ok(Err(SignalError::BadOffer(reason))) => {
                text(400, reason.lines().next().unwrap_or("bad offer"))
            }
            Ok(Err(SignalError::Full)) => {
                text(503, "at capacity").with_header(header("Retry-After", "5"))
            }
            Err(_) => text(503, "worker did not answer").with_header(header("Retry-After", "1")),
        }
    }

    fn patch(&self, request: &mut tiny_http::Request, id: &str) -> Response {
        if !self.authorized(request) {
            return text(401, "missing or wrong bearer token");
        }
        let content_type = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Content-Type"))
            .map(|h| h.value.as_str().to_ascii_lowercase());
        if !content_type.is_some_and(|c| c.starts_with("application/trickle-ice-sdpfrag")) {
            return text(415, "Content-Type must be application/trickle-ice-sdpfrag");
        }
        let owner = u64::from_str_radix(id, 16).ok().and_then(|id| {
            self.owners
                .lock()
                .expect("owners")
                .get(&id)
                .map(|i| (id, *i))
        });
        let Some((id, index)) = owner else {
            return text(404, "no such session");
        };
        let mut body = String::new();
        let read = request
            .as_reader()
            .take(MAX_OFFER_BYTES as u64)
            .read_to_string(&mut body);
        if read.is_err() {
            return text(400, "the fragment is not UTF-8 text");
        }
        let value = |key: &str| {
            body.lines()
                .find_map(|l| l.trim().strip_prefix(key))
                .map(|v| v.trim().to_string())
        };
        let (Some(ufrag), Some(pass)) = (value("a=ice-ufrag:"), value("a=ice-pwd:")) else {
            return text(204, "");
        };
        let worker = &self.workers[index];
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cmd = Command::Restart {
            id,
            remote: str0m::IceCreds { ufrag, pass },
            random: random_bytes(),
            reply: tx,
        };
        if worker.commands.try_send(cmd).is_err() || worker.waker.wake().is_err() {
            return text(503, "worker busy").with_header(header("Retry-After", "1"));
        }
        match rx.recv_timeout(WORKER_TIMEOUT) {
            Ok(Some(local)) => tiny_http::Response::from_string(format!(
                "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n",
                local.ufrag, local.pass
            ))
            .with_header(header("Content-Type", "application/trickle-ice-sdpfrag")),
            Ok(None) => text(404, "no such session"),
            Err(_) => text(503, "worker did not answer"),
        }
    }

    fn delete(&self, request: &tiny_http::Request, id: &str) -> Response {
        if !self.authorized(request) {
            return text(401, "missing or wrong bearer token");
        }
        let Ok(id) = u64::from_str_radix(id, 16) else {
            return text(404, "no such session");
        };
        let Some(index) = self.owners.lock().expect("owners").remove(&id) else {
            return text(404, "no such session");
        };
        let worker = &self.workers[index];
        let (tx, rx) = crossbeam_channel::bounded(1);
        if worker
            .commands
            .try_send(Command::Delete { id, reply: tx })
            .is_err()
            || worker.waker.wake().is_err()
        {
            return text(503, "worker busy").with_header(header("Retry-After", "1"));
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
        assert!(
            check_offer("garbage")
                .unwrap_err()
                .starts_with("malformed SDP offer")
        );
    }
}
