//! The signaling transport: HTTP/1.1 on hyper, bounding what one connection and one
//! request may cost before [`crate::signaling`] sees it.
//!
//! | limit | value | what happens |
//! |---|---|---|
//! | concurrent connections | `--http-max-connections` (1024) | a connection beyond is closed at once (`http_refusals{reason="connection_cap"}`) |
//! | concurrent connections from one address (IPv4, or IPv6 /64) | `--http-max-connections-per-ip` (32; a `--trusted-proxy` is not capped: its connections carry many clients; with `--proxy-protocol`, the client each names is) | a connection beyond is closed at once (`address_connection_cap`), so one address cannot hold the slots another needs |
//! | requests without a valid bearer token from one client address, any route | `--requests-per-second-per-ip` (100, twice that at once) | `429` before the body is read (`request_rate`) |
//! | PROXY protocol v2 header (`--proxy-protocol`, a trusted proxy's connections only) | 1 KiB within 5 s, then the request's headers within 5 s more | the connection is closed (`bad_proxy_header`) |
//! | time to send a request's headers | 5 s | the connection is closed |
//! | header block | 16 KiB, 64 headers | the connection is closed (hyper answers 431 where it can) |
//! | body | 64 KiB | `413` |
//! | time to send a body | 10 s | `408` |
//! | a connection's whole life | 60 s | closed (keep-alive clients reconnect) |
//! | handlers running at once | 32 threads | further requests wait for one |
//!
//! Slow clients cost an idle task each, not a thread: 200 connections trickling one byte
//! a second leave POST, `/healthz` and `/readyz` answering (tested).

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Notify, Semaphore};

use crate::metrics::{HttpRefusal, TransceiverMetrics};
use crate::per_address::HeldPerAddress;
use crate::proxy_protocol::{self, ProxiedFrom};
use crate::signaling::{MAX_BODY_BYTES, SignalResponse, Signaling, text};

/// How long a client may take to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take to send a request's body.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a connection lives.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// Largest header block (hyper's read buffer) and header count.
const MAX_HEADER_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
/// Handlers running at once (each may wait up to 5 s for a worker).
const HANDLER_THREADS: usize = 32;
/// Threads driving connections.
const IO_THREADS: usize = 2;

/// The running HTTP server.
#[derive(Debug)]
pub struct HttpServer {
    shutdown: Arc<Notify>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl HttpServer {
    /// Binds `addr` and serves `surface` of `signaling` with at most `caps` connections.
    pub fn start(
        addr: SocketAddr,
        signaling: Arc<Signaling>,
        caps: ConnectionCaps,
        surface: Surface,
    ) -> io::Result<HttpServer> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(IO_THREADS)
            .max_blocking_threads(HANDLER_THREADS)
            .thread_name("http")
            .enable_all()
            .build()?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind(addr))?;
        let addr = listener.local_addr()?;
        let shutdown = Arc::new(Notify::new());
        let stop = Arc::clone(&shutdown);
        let thread = std::thread::Builder::new()
            .name("http-accept".into())
            .spawn(move || {
                let served = Arc::clone(&signaling);
                runtime.block_on(accept_loop(listener, served, caps, surface, stop));
                // However the loop ended, the endpoint no longer serves.
                signaling.http_died();
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        Ok(HttpServer {
            shutdown,
            thread: Some(thread),
            addr,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes connections, and waits for the server thread.
    pub fn stop(mut self) {
        self.shutdown.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// Signaling, the demo page, health, and `/metrics` unless it has its own listener.
    Public {
        /// `/metrics` is served here too.
        metrics: bool,
        /// The demo page (`/`, `/app.js`) is served here (`--demo-page`).
        demo_page: bool,
    },
    /// `/metrics`, `/healthz` and `/readyz` only (`--metrics-addr`): the public
    /// signaling port need not show them.
    Operations,
}

impl Surface {
    /// Whether a request for `path` is served here.
    fn serves(self, path: &str) -> bool {
        let operations = matches!(path, "/metrics" | "/healthz" | "/readyz");
        match self {
            Surface::Public { metrics, demo_page } => {
                let page = matches!(path, "/" | "/app.js");
                (metrics || path != "/metrics") && (demo_page || !page)
            }
            Surface::Operations => operations,
        }
    }
}

/// How many signaling connections may be open at once.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionCaps {
    /// In all.
    pub total: usize,
    /// From one client address (IPv4, or IPv6 /64).
    pub per_address: u32,
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    signaling: Arc<Signaling>,
    caps: ConnectionCaps,
    surface: Surface,
    shutdown: Arc<Notify>,
) {
    let slots = Arc::new(Semaphore::new(caps.total));
    let per_address = HeldPerAddress::new(caps.per_address);
    loop {
        let accepted = tokio::select! {
            () = shutdown.notified() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // A trusted proxy's connections carry many clients: each is limited by its own
        // address once its requests (or its PROXY header) say which it is.
        let held = if signaling.is_trusted_proxy(peer.ip()) {
            None
        } else {
            let Some(held) = per_address.open(peer.ip()) else {
                signaling
                    .metrics()
                    .http_refused(HttpRefusal::AddressConnectionCap);
                drop(stream);
                continue;
            };
            Some(held)
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            signaling.metrics().http_refused(HttpRefusal::ConnectionCap);
            drop(stream);
            continue;
        };
        let signaling = Arc::clone(&signaling);
        let per_address = Arc::clone(&per_address);
        let proxy_header =
            matches!(surface, Surface::Public { .. }) && signaling.expects_proxy_header(peer.ip());
        tokio::spawn(async move {
            let mut stream = stream;
            let (from, held) = if proxy_header {
                // The header names the client, whose share of connections this one
                // takes; the proxy's own connections (health checks) are not capped.
                let client = match proxy_protocol::read(&mut stream, HEADER_TIMEOUT).await {
                    Ok(ProxiedFrom::Client(client)) => client.ip(),
                    Ok(ProxiedFrom::Proxy) => peer.ip(),
                    Err(_) => {
                        signaling
                            .metrics()
                            .http_refused(HttpRefusal::BadProxyHeader);
                        return;
                    }
                };
                let held = match client == peer.ip() {
                    true => None,
                    false => match per_address.open(client) {
                        Some(held) => Some(held),
                        None => {
                            signaling
                                .metrics()
                                .http_refused(HttpRefusal::AddressConnectionCap);
                            return;
                        }
                    },
                };
                (RequestsFrom::Named(client), held)
            } else {
                (RequestsFrom::Peer(peer.ip()), held)
            };
            let handler = Arc::clone(&signaling);
            let service =
                service_fn(move |request| respond(request, from, surface, Arc::clone(&handler)));
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES)
                .max_headers(MAX_HEADERS)
                .serve_connection(TokioIo::new(stream), service);
            if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_LIFETIME, connection).await
                && (e.is_parse() || e.is_parse_too_large() || e.is_timeout())
            {
                signaling.metrics().http_refused(HttpRefusal::BadHeaders);
            }
            drop((slot, held));
        });
    }
}

/// Whom a connection's requests come from.
#[derive(Clone, Copy, Debug)]
enum RequestsFrom {
    /// The TCP peer, or (a trusted proxy) whom its `X-Forwarded-For` names.
    Peer(IpAddr),
    /// The client its trusted proxy's PROXY protocol header named.
    Named(IpAddr),
}

/// Reads the body within its limits, then lets signaling answer on a handler thread.
async fn respond(
    request: Request<Incoming>,
    from: RequestsFrom,
    surface: Surface,
    signaling: Arc<Signaling>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let client = match from {
        RequestsFrom::Peer(peer) => signaling.client_address(peer, request.headers()),
        RequestsFrom::Named(client) => client,
    };
    if let Some(refusal) = signaling.refuse_over_rate(client, request.headers()) {
        return Ok(into_hyper(refusal, signaling.metrics()));
    }
    if !surface.serves(request.uri().path()) {
        return Ok(into_hyper(text(404, "not found"), signaling.metrics()));
    }
    let (parts, body) = request.into_parts();
    let collected =
        tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_BODY_BYTES).collect()).await;
    let answer = match collected {
        Err(_) => {
            signaling.metrics().http_refused(HttpRefusal::BodyTooSlow);
            text(408, "the body did not arrive in time")
        }
        Ok(Err(e)) if e.is::<LengthLimitError>() => {
            signaling.metrics().http_refused(HttpRefusal::BodyTooLarge);
            text(413, "body too large (64 KiB at most)")
        }
        Ok(Err(_)) => text(400, "the body could not be read"),
        Ok(Ok(body)) => {
            let body = body.to_bytes();
            let handling = Arc::clone(&signaling);
            tokio::task::spawn_blocking(move || {
                handling.handle(
                    client,
                    &parts.method,
                    parts.uri.path(),
                    &parts.headers,
                    &body,
                )
            })
            .await
            .unwrap_or_else(|_| text(500, "the handler failed"))
        }
    };
    Ok(into_hyper(answer, signaling.metrics()))
}

/// The answer as hyper sends it, counted by its status class.
fn into_hyper(answer: SignalResponse, metrics: &TransceiverMetrics) -> Response<Full<Bytes>> {
    metrics.http_response(answer.status);
    let mut response = Response::new(Full::new(Bytes::from(answer.body)));
    *response.status_mut() = hyper::StatusCode::from_u16(answer.status)
        .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in answer.headers {
        if let Ok(value) = hyper::header::HeaderValue::from_str(&value) {
            response.headers_mut().append(name, value);
        }
    }
    response
}
