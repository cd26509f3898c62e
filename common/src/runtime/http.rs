//! The relay's HTTP endpoints on the metrics address: `/metrics` (OpenMetrics or Prometheus
//! text, as the scraper's `Accept` asks: [`Exposition`]),
//! `/healthz` (200 while the process serves), `/readyz` (200 when accepting new flows, 503
//! while starting or draining). One small thread; nothing here touches the packet path.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::metrics::{Exposition, RelayMetrics};

/// The running HTTP server.
pub struct HttpEndpoints {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl std::fmt::Debug for HttpEndpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpEndpoints")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes())
        .expect("static header names and values are valid")
}

impl HttpEndpoints {
    /// Binds `addr` and serves until [`HttpEndpoints::stop`].
    pub fn start(addr: SocketAddr, metrics: Arc<RelayMetrics>) -> std::io::Result<Self> {
        let server = Arc::new(tiny_http::Server::http(addr).map_err(std::io::Error::other)?);
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| std::io::Error::other("metrics server is not on an IP address"))?;
        let serving = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("http".into())
            .spawn(move || {
                for request in serving.incoming_requests() {
                    let path = request.url().split('?').next().unwrap_or("").to_string();
                    let response = match (request.method(), path.as_str()) {
                        (tiny_http::Method::Get, "/metrics") => {
                            let accept = request
                                .headers()
                                .iter()
                                .find(|h| h.field.equiv("Accept"))
                                .map(|h| h.value.as_str());
                            let format = Exposition::for_accept(accept);
                            tiny_http::Response::from_string(metrics.render(format))
                                .with_header(header("Content-Type", format.content_type()))
                        }
                        (tiny_http::Method::Get, "/healthz") => {
                            tiny_http::Response::from_string("ok\n")
                        }
                        (tiny_http::Method::Get, "/readyz") if metrics.is_ready() => {
                            tiny_http::Response::from_string("ready\n")
                        }
                        (tiny_http::Method::Get, "/readyz") => {
                            tiny_http::Response::from_string("not ready\n").with_status_code(503)
                        }
                        (tiny_http::Method::Get, _) => {
                            tiny_http::Response::from_string("not found\n").with_status_code(404)
                        }
                        _ => tiny_http::Response::from_string("method not allowed\n")
                            .with_status_code(405),
                    };
                    let _ = request.respond(response);
                }
            })?;
        Ok(HttpEndpoints {
            server,
            thread: Some(thread),
            addr: bound,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and joins the thread.
    pub fn stop(mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
