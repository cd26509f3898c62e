//! The relay's HTTP endpoints on the metrics address: `/metrics` (OpenMetrics or Prometheus
//! text, as the scraper's `Accept` asks: [`Exposition`]),
//! `/healthz` (200 while the process serves), `/readyz` (200 when accepting new flows, 503
//! while starting or draining). Nothing here touches the packet path.
//!
//! The address may be reachable by strangers (a relay on the host network), so what one
//! connection may cost is bounded: one request and one answer per connection, a head of
//! at most [`MAX_HEAD`] bytes, [`REQUEST_DEADLINE`] to send it and take the answer, and
//! at most [`MAX_PER_SOURCE`] open from one address (one more is closed at once). At
//! [`MAX_CONNECTIONS`] open, a new connection cuts the one open longest: a real request
//! is answered within milliseconds, so slow clients cannot keep the kubelet's probes or
//! the scraper out, however many addresses they hold. Each is counted
//! (`ufrag_relay_http_refused_total`). A connection costs one short-lived thread.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::metrics::{Exposition, HttpRefusal, RelayMetrics};

/// Connections served at once; one more cuts the connection open longest.
pub const MAX_CONNECTIONS: usize = 32;
/// Connections served at once from one address; one more is closed at accept.
pub const MAX_PER_SOURCE: usize = 4;
/// How long a connection has to send its request head and take its answer.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// The longest request head read (request line and headers); a longer one gets 431.
pub const MAX_HEAD: usize = 8 * 1024;

/// The running HTTP server.
pub struct HttpEndpoints {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HttpEndpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpEndpoints")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl HttpEndpoints {
    /// Binds `addr` and serves until [`HttpEndpoints::stop`].
    pub fn start(addr: SocketAddr, metrics: Arc<RelayMetrics>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let bound = listener.local_addr()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let accepting = Arc::clone(&stopping);
        let thread = std::thread::Builder::new()
            .name("http".into())
            .spawn(move || accept_connections(&listener, &accepting, &metrics))?;
        Ok(HttpEndpoints {
            addr: bound,
            stopping,
            thread: Some(thread),
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and joins the accepting thread (connections being served finish
    /// within [`REQUEST_DEADLINE`] on their own).
    pub fn stop(mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // The accepting thread wakes on one more connection: our own.
        let wake = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, self.addr.port()).into(),
            IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, self.addr.port()).into(),
            _ => self.addr,
        };
        let woken = TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok();
        if let Some(thread) = self.thread.take()
            && woken
        {
            let _ = thread.join();
        }
    }
}

/// Accepts until `stopping`: each connection within its address's cap is served on a
/// thread of its own (at the connection cap, cutting the connection open longest); any
/// other is closed at once. Both are counted.
fn accept_connections(listener: &TcpListener, stopping: &AtomicBool, metrics: &Arc<RelayMetrics>) {
    let slots = Arc::new(ConnectionSlots::default());
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else {
            // Out of descriptors, or a connection reset before accept: wait out a burst
            // rather than spin on it.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let slot = match ConnectionSlots::claim(&slots, &stream) {
            Ok((slot, cut_oldest)) => {
                if cut_oldest {
                    metrics.http_refused(HttpRefusal::OldestCut);
                }
                slot
            }
            Err(refusal) => {
                metrics.http_refused(refusal);
                continue;
            }
        };
        let serving = Arc::clone(metrics);
        let spawned = std::thread::Builder::new()
            .name("http-conn".into())
            .spawn(move || {
                serve_connection(stream, &serving);
                drop(slot);
            });
        if spawned.is_err() {
            // The stream and its slot went with the closure that never ran.
            metrics.http_refused(HttpRefusal::Unserved);
        }
    }
}

/// The connections being served, oldest first, and how many from each address.
#[derive(Default)]
struct ConnectionSlots {
    open: Mutex<OpenConnections>,
}

#[derive(Default)]
struct OpenConnections {
    next_id: u64,
    /// Each connection's id, address and a handle to cut it by, oldest first.
    by_age: VecDeque<(u64, IpAddr, TcpStream)>,
    per_source: HashMap<IpAddr, usize>,
}

impl OpenConnections {
    /// Forgets connection `id` (if still here): its address's count goes down.
    fn remove(&mut self, id: u64) {
        let Some(at) = self.by_age.iter().position(|(open, ..)| *open == id) else {
            return;
        };
        if let Some((_, source, _)) = self.by_age.remove(at) {
            self.release(source);
        }
    }

    fn release(&mut self, source: IpAddr) {
        if let Some(count) = self.per_source.get_mut(&source) {
            *count -= 1;
            if *count == 0 {
                self.per_source.remove(&source);
            }
        }
    }
}

/// One connection's place among [`ConnectionSlots`]; given back when dropped.
struct ConnectionSlot {
    slots: Arc<ConnectionSlots>,
    id: u64,
}

impl ConnectionSlots {
    /// A place for `stream`, and whether the connection open longest was cut to make it;
    /// or the refusal if its address already has [`MAX_PER_SOURCE`] open.
    fn claim(slots: &Arc<Self>, stream: &TcpStream) -> Result<(ConnectionSlot, bool), HttpRefusal> {
        let source = stream.peer_addr().map_err(|_| HttpRefusal::Unserved)?.ip();
        let handle = stream.try_clone().map_err(|_| HttpRefusal::Unserved)?;
        let mut open = slots.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.per_source.get(&source).copied().unwrap_or(0) >= MAX_PER_SOURCE {
            return Err(HttpRefusal::SourceCap);
        }
        let mut cut_oldest = false;
        if open.by_age.len() >= MAX_CONNECTIONS
            && let Some((_, oldest_source, oldest)) = open.by_age.pop_front()
        {
            // Its thread's read or write fails at once and the thread ends.
            let _ = oldest.shutdown(Shutdown::Both);
            open.release(oldest_source);
            cut_oldest = true;
        }
        let id = open.next_id;
        open.next_id += 1;
        open.by_age.push_back((id, source, handle));
        *open.per_source.entry(source).or_default() += 1;
        Ok((
            ConnectionSlot {
                slots: Arc::clone(slots),
                id,
            },
            cut_oldest,
        ))
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = (self.slots.open.lock()).unwrap_or_else(PoisonError::into_inner);
        open.remove(self.id);
    }
}

/// Reads one request and answers it, all within [`REQUEST_DEADLINE`].
fn serve_connection(mut stream: TcpStream, metrics: &Arc<RelayMetrics>) {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut head = [0u8; MAX_HEAD];
    let answer = match read_head(&mut stream, &mut head, deadline) {
        Ok(len) => match parse_request(&head[..len]) {
            Some(request) => answer(&request, metrics),
            None => {
                metrics.http_refused(HttpRefusal::BadRequest);
                Answer::text(400, "bad request\n")
            }
        },
        Err(HeadError::TooLarge) => {
            metrics.http_refused(HttpRefusal::BadRequest);
            Answer::text(431, "request head too large\n")
        }
        Err(HeadError::Deadline) => {
            metrics.http_refused(HttpRefusal::Deadline);
            return;
        }
        Err(HeadError::Closed) => return,
    };
    if write_answer(&mut stream, &answer, deadline).is_err() {
        metrics.http_refused(HttpRefusal::Deadline);
    }
}

/// Why no request head was read.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    /// [`MAX_HEAD`] bytes came without the blank line that ends a head.
    TooLarge,
    /// The deadline passed first.
    Deadline,
    /// The client closed the connection or it failed.
    Closed,
}

/// Reads into `buf` until the blank line that ends a request head: the head's length.
fn read_head(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<usize, HeadError> {
    let mut filled = 0;
    loop {
        if let Some(end) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(end + 4);
        }
        if filled == buf.len() {
            return Err(HeadError::TooLarge);
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(HeadError::Deadline);
        }
        stream
            .set_read_timeout(Some(remaining))
            .map_err(|_| HeadError::Closed)?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(HeadError::Closed),
            Ok(n) => filled += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::Deadline);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err(HeadError::Closed),
        }
    }
}

/// The parts of a request the endpoints read.
#[derive(Debug, PartialEq, Eq)]
struct Request<'a> {
    method: &'a str,
    /// The path, without a query.
    path: &'a str,
    /// The `Accept` header's value, if any.
    accept: Option<&'a str>,
}

/// Parses an HTTP/1.x request head; `None` if it is not one.
fn parse_request(head: &[u8]) -> Option<Request<'_>> {
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let (method, target, version) = (
        request_line.next()?,
        request_line.next()?,
        request_line.next()?,
    );
    if request_line.next().is_some() || !version.starts_with("HTTP/1.") || method.is_empty() {
        return None;
    }
    let path = target.split('?').next().unwrap_or_default();
    let accept = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("accept"))
        .map(|(_, value)| value.trim());
    Some(Request {
        method,
        path,
        accept,
    })
}

/// A response: status, content type and body.
struct Answer {
    status: u16,
    content_type: &'static str,
    body: String,
}

impl Answer {
    fn text(status: u16, body: &str) -> Self {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.to_string(),
        }
    }
}

/// What each endpoint answers.
fn answer(request: &Request<'_>, metrics: &Arc<RelayMetrics>) -> Answer {
    match (request.method, request.path) {
        ("GET", "/metrics") => {
            let format = Exposition::for_accept(request.accept);
            Answer {
                status: 200,
                content_type: format.content_type(),
                body: metrics.render(format),
            }
        }
        ("GET", "/healthz") => Answer::text(200, "ok\n"),
        ("GET", "/readyz") if metrics.is_ready() => Answer::text(200, "ready\n"),
        ("GET", "/readyz") => Answer::text(503, "not ready\n"),
        ("GET", _) => Answer::text(404, "not found\n"),
        _ => Answer::text(405, "method not allowed\n"),
    }
}

/// Writes `answer` and closes, giving up at `deadline`.
fn write_answer(stream: &mut TcpStream, answer: &Answer, deadline: Instant) -> std::io::Result<()> {
    let reason = match answer.status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        answer.status,
        answer.content_type,
        answer.body.len()
    );
    for part in [head.as_bytes(), answer.body.as_bytes()] {
        let mut rest = part;
        while !rest.is_empty() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            stream.set_write_timeout(Some(remaining))?;
            match stream.write(rest) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_parses_to_its_method_path_and_accept() {
        let head = b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\naccept: text/plain\r\n\r\n";
        assert_eq!(
            parse_request(head),
            Some(Request {
                method: "GET",
                path: "/metrics",
                accept: Some("text/plain"),
            })
        );
    }

    #[test]
    fn what_is_not_an_http_1_request_head_is_refused() {
        for head in [
            &b"GET /metrics\r\n\r\n"[..],
            b"GET /metrics HTTP/2\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1 extra\r\n\r\n",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(parse_request(head), None, "{head:?}");
        }
    }

    #[test]
    fn slots_are_capped_per_source_and_the_oldest_gives_way_at_the_cap() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let slots = Arc::new(ConnectionSlots::default());
        // Connections from one address (the test's): its cap, then refusals.
        let mut clients = Vec::new();
        let mut claim = || {
            clients.push(TcpStream::connect(addr).unwrap());
            let (accepted, _) = listener.accept().unwrap();
            ConnectionSlots::claim(&slots, &accepted).map(|(slot, cut)| (slot, cut, accepted))
        };
        let held: Vec<_> = (0..MAX_PER_SOURCE)
            .map(|_| claim().expect("within the cap"))
            .collect();
        assert!(held.iter().all(|(_, cut, _)| !cut));
        assert!(matches!(claim(), Err(HttpRefusal::SourceCap)));
        drop(held);
        assert!(slots.open.lock().unwrap().per_source.is_empty());
        assert!(claim().is_ok(), "a slot given back is free again");
    }

    #[test]
    fn at_the_connection_cap_the_oldest_is_cut() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let slots = Arc::new(ConnectionSlots::default());
        let mut open = OpenConnections::default();
        // Fill the table from other addresses without sockets of their own: the oldest
        // entry holds a real connection, to see it cut.
        let oldest_client = TcpStream::connect(addr).unwrap();
        let (oldest_accepted, _) = listener.accept().unwrap();
        for i in 0..MAX_CONNECTIONS {
            let source = IpAddr::from(Ipv4Addr::new(198, 51, 100, i as u8));
            let handle = oldest_accepted.try_clone().unwrap();
            open.by_age.push_back((i as u64, source, handle));
            *open.per_source.entry(source).or_default() += 1;
        }
        open.next_id = MAX_CONNECTIONS as u64;
        *slots.open.lock().unwrap() = open;
        let _client = TcpStream::connect(addr).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let (slot, cut) = ConnectionSlots::claim(&slots, &accepted).expect("a place");
        assert!(cut, "the oldest gave way");
        let mut byte = [0u8; 1];
        let mut oldest_client = oldest_client;
        assert_eq!(
            oldest_client.read(&mut byte).unwrap(),
            0,
            "the oldest is closed"
        );
        let table = slots.open.lock().unwrap();
        assert_eq!(table.by_age.len(), MAX_CONNECTIONS);
        assert!(
            !table
                .per_source
                .contains_key(&IpAddr::from(Ipv4Addr::new(198, 51, 100, 0)))
        );
        drop(table);
        drop(slot);
    }
}
