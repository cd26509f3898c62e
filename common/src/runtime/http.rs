//! The relay's HTTP endpoints on the metrics address: `/metrics` (OpenMetrics or Prometheus
//! text, as the scraper's `Accept` asks: [`Exposition`]),
//! `/healthz` (200 while the process serves), `/readyz` (200 when accepting new flows, 503
//! while starting or draining). Nothing here touches the packet path.
//!
//! The address may be reachable by strangers (a relay on the host network), so what one
//! connection may cost is bounded: one request and one answer per connection, a head of
//! at most [`MAX_HEAD`] bytes, [`REQUEST_DEADLINE`] to send it and take the answer, and
//! [`CONNECTIONS_PER_SOURCE_PER_SECOND`] new connections a second from one address (an
//! IPv6 /64 counts as one; beyond, closed at once). At [`MAX_PER_SOURCE`] open from one
//! address, or [`MAX_CONNECTIONS`] in all, a new connection cuts an older one: of that
//! address, or of anyone, one still sending its request first (a request being answered
//! is left to finish), else the oldest. A real request is answered within
//! milliseconds, so idle connections from any number of addresses cannot keep the
//! kubelet's probes or the scraper out, nor can a neighbour holding idle connections
//! from the kubelet's own address. Each refusal and cut is counted
//! (`ufrag_relay_http_refused_total`). Connections are served by at most
//! [`MAX_CONNECTIONS`] threads, each connection for at most [`REQUEST_DEADLINE`] from accept.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::metrics::RelayMetrics;
use crate::reasons::HttpRefusal;
use crate::runtime::exposition::Exposition;

/// Connections served at once; one more cuts the connection open longest.
pub const MAX_CONNECTIONS: usize = 32;
/// Connections served at once from one address; one more cuts one of them.
pub const MAX_PER_SOURCE: usize = 4;
/// New connections a second from one address (and as many at once); beyond, closed at
/// accept. Far above what a scraper, the kubelet and an operator make together (the
/// tests poll faster than 20 a second), so it only bounds one address churning
/// connections: at most this many threads a second.
pub const CONNECTIONS_PER_SOURCE_PER_SECOND: u32 = 1_000;
/// Addresses whose connection rate is remembered; past it, every address starts afresh
/// (a flood from that many addresses is bounded by the caps alone).
const TRACKED_SOURCES: usize = 4_096;
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

    /// Stops accepting and joins the accepting thread, which a connection of our own
    /// wakes (connections being served finish within [`REQUEST_DEADLINE`] on their own).
    /// If that connection cannot be made (a full backlog), the thread is left to end with
    /// the process and the port stays bound until then.
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

/// Accepts until `stopping`: each connection within its address's rate gets a place (at
/// a cap, cutting an older connection) and is handed to the [`ServingThreads`]; any other
/// is closed at once. Both are counted.
fn accept_connections(listener: &TcpListener, stopping: &AtomicBool, metrics: &Arc<RelayMetrics>) {
    let slots = Arc::new(ConnectionSlots::default());
    let serving = Arc::new(ServingThreads::default());
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            serving.stop();
            return;
        }
        let Ok(stream) = stream else {
            // Out of descriptors, or a connection reset before accept: wait out a burst
            // rather than spin on it.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let accepted_at = Instant::now();
        match ConnectionSlots::claim(&slots, &stream, accepted_at) {
            Ok((slot, cut)) => {
                if let Some(cut) = cut {
                    metrics.http_refused(cut);
                }
                ServingThreads::serve(
                    &serving,
                    Accepted {
                        stream,
                        slot,
                        deadline: accepted_at + REQUEST_DEADLINE,
                    },
                    metrics,
                );
            }
            Err(refusal) => metrics.http_refused(refusal),
        }
    }
}

/// A connection with its place, waiting for a serving thread.
struct Accepted {
    stream: TcpStream,
    slot: ConnectionSlot,
    /// When its request must be in and answered: [`REQUEST_DEADLINE`] after accept.
    deadline: Instant,
}

/// The threads that serve connections: at most [`MAX_CONNECTIONS`], started as needed and
/// kept, so a flood of connections never costs more threads, however fast they are cut.
/// At most [`MAX_CONNECTIONS`] accepted connections wait for one; the acceptor waits
/// for room beyond that (a waiting connection was cut, or its thread ends within
/// [`REQUEST_DEADLINE`]).
#[derive(Default)]
struct ServingThreads {
    state: Mutex<ServingState>,
    /// Signalled when a connection waits (or on stop).
    work: Condvar,
    /// Signalled when a waiting connection is taken.
    room: Condvar,
}

#[derive(Default)]
struct ServingState {
    waiting: VecDeque<Accepted>,
    threads: usize,
    idle: usize,
    stopping: bool,
}

impl ServingThreads {
    /// Queues `accepted` for a thread, starting one if more connections wait than threads
    /// are idle and fewer than [`MAX_CONNECTIONS`] run.
    fn serve(this: &Arc<Self>, accepted: Accepted, metrics: &Arc<RelayMetrics>) {
        let mut state = this.state.lock().unwrap_or_else(PoisonError::into_inner);
        while state.waiting.len() >= MAX_CONNECTIONS {
            state = this
                .room
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.waiting.push_back(accepted);
        // An idle thread (woken or not yet) takes one waiting connection each.
        if state.waiting.len() > state.idle && state.threads < MAX_CONNECTIONS {
            let (threads, serving_metrics) = (Arc::clone(this), Arc::clone(metrics));
            let spawned = std::thread::Builder::new()
                .name("http-conn".into())
                .spawn(move || threads.run(&serving_metrics));
            if spawned.is_ok() {
                state.threads += 1;
            } else if state.threads == 0 {
                // No thread to serve them: close them rather than let them wait.
                for _ in state.waiting.drain(..) {
                    metrics.http_refused(HttpRefusal::Unserved);
                }
            }
        }
        this.work.notify_one();
    }

    /// One serving thread: takes waiting connections until stopped.
    fn run(&self, metrics: &Arc<RelayMetrics>) {
        let _counted = CountedThread(self);
        loop {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let accepted = loop {
                if let Some(accepted) = state.waiting.pop_front() {
                    break accepted;
                }
                if state.stopping {
                    return;
                }
                state.idle += 1;
                state = self
                    .work
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                state.idle -= 1;
            };
            drop(state);
            self.room.notify_one();
            let Accepted {
                stream,
                slot,
                deadline,
            } = accepted;
            serve_connection(stream, metrics, &slot.answering, deadline);
            drop(slot);
        }
    }

    /// Lets the threads end once nothing waits.
    fn stop(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stopping = true;
        self.work.notify_all();
    }
}

/// A serving thread as [`ServingThreads`] counts it: counted out when the thread ends,
/// however it ends (a panic while serving included), so another can be started.
struct CountedThread<'a>(&'a ServingThreads);

impl Drop for CountedThread<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.threads -= 1;
    }
}

/// The connections being served, oldest first, how many from each address, and each
/// address's rate of new ones.
#[derive(Default)]
struct ConnectionSlots {
    open: Mutex<OpenConnections>,
}

/// A connection being served.
struct OpenConnection {
    id: u64,
    source: IpAddr,
    /// A handle to cut it by.
    handle: TcpStream,
    /// Set once its request head is read: it is being answered.
    answering: Arc<AtomicBool>,
}

#[derive(Default)]
struct OpenConnections {
    next_id: u64,
    by_age: VecDeque<OpenConnection>,
    per_source: HashMap<IpAddr, usize>,
    /// Per address: connection tokens left and when they were last counted.
    rates: HashMap<IpAddr, (f64, Instant)>,
}

impl OpenConnections {
    /// Forgets connection `id` (if still here): its address's count goes down.
    fn remove(&mut self, id: u64) {
        let Some(at) = self.by_age.iter().position(|open| open.id == id) else {
            return;
        };
        if let Some(open) = self.by_age.remove(at) {
            self.release(open.source);
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

    /// Cuts one connection of those `of` picks: the oldest still sending its request,
    /// else the oldest. False if `of` picks none.
    fn cut_one(&mut self, of: impl Fn(&OpenConnection) -> bool) -> bool {
        let reading = self
            .by_age
            .iter()
            .position(|open| of(open) && !open.answering.load(Ordering::Acquire));
        let Some(at) = reading.or_else(|| self.by_age.iter().position(&of)) else {
            return false;
        };
        let Some(cut) = self.by_age.remove(at) else {
            return false;
        };
        // Its thread's read or write fails at once and the thread ends.
        let _ = cut.handle.shutdown(Shutdown::Both);
        self.release(cut.source);
        true
    }

    /// Takes a connection token of `source`'s at `now`; false when it has none left.
    fn take_token(&mut self, source: IpAddr, now: Instant) -> bool {
        if self.rates.len() >= TRACKED_SOURCES && !self.rates.contains_key(&source) {
            self.rates.clear();
        }
        let rate = f64::from(CONNECTIONS_PER_SOURCE_PER_SECOND);
        let (tokens, at) = self.rates.entry(source).or_insert((rate, now));
        *tokens = (*tokens + now.saturating_duration_since(*at).as_secs_f64() * rate).min(rate);
        *at = now;
        if *tokens < 1.0 {
            return false;
        }
        *tokens -= 1.0;
        true
    }
}

/// The address a connection counts under: an IPv4 address, or an IPv6 /64 (one host's
/// share of a network; an IPv4-mapped address as its IPv4 address).
fn source_of(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u128::MAX >> 64))),
        },
        v4 => v4,
    }
}

/// One connection's place among [`ConnectionSlots`]; given back when dropped.
struct ConnectionSlot {
    slots: Arc<ConnectionSlots>,
    id: u64,
    answering: Arc<AtomicBool>,
}

impl ConnectionSlots {
    /// A place for `stream` arriving at `now`, and why a connection was cut to make it,
    /// if one was; or the refusal (its address's connection rate is spent).
    fn claim(
        slots: &Arc<Self>,
        stream: &TcpStream,
        now: Instant,
    ) -> Result<(ConnectionSlot, Option<HttpRefusal>), HttpRefusal> {
        let source = source_of(stream.peer_addr().map_err(|_| HttpRefusal::Unserved)?.ip());
        let handle = stream.try_clone().map_err(|_| HttpRefusal::Unserved)?;
        let mut open = slots.open.lock().unwrap_or_else(PoisonError::into_inner);
        if !open.take_token(source, now) {
            return Err(HttpRefusal::SourceRate);
        }
        let cut = if open.per_source.get(&source).copied().unwrap_or(0) >= MAX_PER_SOURCE {
            open.cut_one(|o| o.source == source)
                .then_some(HttpRefusal::SourceCap)
        } else if open.by_age.len() >= MAX_CONNECTIONS {
            open.cut_one(|_| true).then_some(HttpRefusal::OldestCut)
        } else {
            None
        };
        let id = open.next_id;
        open.next_id += 1;
        let answering = Arc::new(AtomicBool::new(false));
        open.by_age.push_back(OpenConnection {
            id,
            source,
            handle,
            answering: Arc::clone(&answering),
        });
        *open.per_source.entry(source).or_default() += 1;
        Ok((
            ConnectionSlot {
                slots: Arc::clone(slots),
                id,
                answering,
            },
            cut,
        ))
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = (self.slots.open.lock()).unwrap_or_else(PoisonError::into_inner);
        open.remove(self.id);
    }
}

/// Reads one request and answers it, all before `deadline`; sets `answering` once the
/// request is in.
fn serve_connection(
    mut stream: TcpStream,
    metrics: &Arc<RelayMetrics>,
    answering: &AtomicBool,
    deadline: Instant,
) {
    let mut head = [0u8; MAX_HEAD];
    let read = read_head(&mut stream, &mut head, deadline);
    answering.store(true, Ordering::Release);
    let answer = match read {
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
        return;
    }
    // Closing with input unread (a body, a second request) would reset the connection
    // and could discard the answer in flight: read to the client's end or the deadline.
    let mut rest = [0u8; 1024];
    while let Some(remaining) =
        Some(deadline.saturating_duration_since(Instant::now())).filter(|left| !left.is_zero())
    {
        if stream.set_read_timeout(Some(remaining)).is_err()
            || !matches!(stream.read(&mut rest), Ok(n) if n > 0)
        {
            break;
        }
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
    let (mut filled, mut searched) = (0, 0);
    loop {
        // Only what came since the last look (and the 3 bytes before it) is searched.
        if let Some(end) = buf[searched..filled]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
        {
            return Ok(searched + end + 4);
        }
        searched = filled.saturating_sub(3);
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

/// A response: status, content type and body (not sent for HEAD).
struct Answer {
    status: u16,
    content_type: &'static str,
    body: String,
    /// A HEAD request: the head says the body's length, the body is not sent.
    head_only: bool,
}

impl Answer {
    fn text(status: u16, body: &str) -> Self {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.to_string(),
            head_only: false,
        }
    }
}

/// What each endpoint answers (HEAD as GET, without the body).
fn answer(request: &Request<'_>, metrics: &Arc<RelayMetrics>) -> Answer {
    if !matches!(request.method, "GET" | "HEAD") {
        return Answer::text(405, "method not allowed\n");
    }
    let mut answer = match request.path {
        "/metrics" => {
            let format = Exposition::for_accept(request.accept);
            Answer {
                status: 200,
                content_type: format.content_type(),
                body: metrics.render(format),
                head_only: false,
            }
        }
        "/healthz" => Answer::text(200, "ok\n"),
        "/readyz" if metrics.is_ready() => Answer::text(200, "ready\n"),
        "/readyz" => Answer::text(503, "not ready\n"),
        _ => Answer::text(404, "not found\n"),
    };
    answer.head_only = request.method == "HEAD";
    answer
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
    let allow = if answer.status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        answer.status,
        answer.content_type,
        answer.body.len()
    );
    let body = if answer.head_only {
        &[][..]
    } else {
        answer.body.as_bytes()
    };
    for part in [head.as_bytes(), body] {
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

    /// A listener and a way to make connections to it, accepted: the server's side.
    fn accepted_connections() -> (TcpListener, impl FnMut() -> (TcpStream, TcpStream)) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepting = listener.try_clone().unwrap();
        (listener, move || {
            let client = TcpStream::connect(addr).unwrap();
            let (accepted, _) = accepting.accept().unwrap();
            (client, accepted)
        })
    }

    /// Whether the server's side of `client` was shut (its read sees the end).
    fn was_cut(client: &mut TcpStream) -> bool {
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        matches!(client.read(&mut [0u8; 1]), Ok(0))
    }

    #[test]
    fn an_address_at_its_cap_gives_way_with_its_own_connection_still_sending() {
        let (_listener, mut connect) = accepted_connections();
        let slots = Arc::new(ConnectionSlots::default());
        let now = Instant::now();
        let mut held = Vec::new();
        for _ in 0..MAX_PER_SOURCE {
            let (client, accepted) = connect();
            let (slot, cut) = ConnectionSlots::claim(&slots, &accepted, now).unwrap();
            assert_eq!(cut, None, "within the address's cap");
            held.push((client, slot));
        }
        // The oldest is being answered; the second oldest is still sending its request.
        held[0].1.answering.store(true, Ordering::Release);
        let (_client, accepted) = connect();
        let (_slot, cut) = ConnectionSlots::claim(&slots, &accepted, now).unwrap();
        assert_eq!(cut, Some(HttpRefusal::SourceCap));
        assert!(was_cut(&mut held[1].0), "the one still sending gave way");
        let open = slots.open.lock().unwrap();
        assert_eq!(open.per_source.values().sum::<usize>(), MAX_PER_SOURCE);
        assert!(
            open.by_age.iter().any(|o| o.id == held[0].1.id),
            "the answered one stays"
        );
    }

    #[test]
    fn at_the_connection_cap_the_oldest_still_sending_is_cut() {
        let (_listener, mut connect) = accepted_connections();
        let slots = Arc::new(ConnectionSlots::default());
        let now = Instant::now();
        let (mut oldest_client, oldest) = connect();
        {
            // Fill the table from other addresses: clones of one real connection.
            let mut open = slots.open.lock().unwrap();
            for i in 0..MAX_CONNECTIONS {
                let source = IpAddr::from(Ipv4Addr::new(198, 51, 100, i as u8));
                open.by_age.push_back(OpenConnection {
                    id: i as u64,
                    source,
                    handle: oldest.try_clone().unwrap(),
                    answering: Arc::new(AtomicBool::new(i == 0)),
                });
                *open.per_source.entry(source).or_default() += 1;
            }
            open.next_id = MAX_CONNECTIONS as u64;
        }
        let (_client, accepted) = connect();
        let (_slot, cut) = ConnectionSlots::claim(&slots, &accepted, now).expect("a place");
        assert_eq!(cut, Some(HttpRefusal::OldestCut));
        assert!(was_cut(&mut oldest_client));
        let open = slots.open.lock().unwrap();
        assert_eq!(open.by_age.len(), MAX_CONNECTIONS);
        let first = IpAddr::from(Ipv4Addr::new(198, 51, 100, 0));
        let second = IpAddr::from(Ipv4Addr::new(198, 51, 100, 1));
        assert!(
            open.per_source.contains_key(&first),
            "the one being answered stays"
        );
        assert!(
            !open.per_source.contains_key(&second),
            "the oldest still sending went"
        );
    }

    #[test]
    fn an_address_opening_connections_too_fast_is_refused() {
        let mut open = OpenConnections::default();
        let now = Instant::now();
        let source = IpAddr::from(Ipv4Addr::new(192, 0, 2, 1));
        for _ in 0..CONNECTIONS_PER_SOURCE_PER_SECOND {
            assert!(open.take_token(source, now));
        }
        assert!(!open.take_token(source, now), "its rate is spent");
        let other = IpAddr::from(Ipv4Addr::new(192, 0, 2, 2));
        assert!(open.take_token(other, now), "another address has its own");
        let later = now + Duration::from_millis(10);
        assert!(open.take_token(source, later), "the rate refills");
    }

    #[test]
    fn a_connection_beyond_its_addresss_rate_gets_no_place() {
        let (_listener, mut connect) = accepted_connections();
        let slots = Arc::new(ConnectionSlots::default());
        let now = Instant::now();
        let (_client, accepted) = connect();
        let source = source_of(accepted.peer_addr().unwrap().ip());
        slots.open.lock().unwrap().rates.insert(source, (0.0, now));
        assert!(matches!(
            ConnectionSlots::claim(&slots, &accepted, now),
            Err(HttpRefusal::SourceRate)
        ));
        assert!(slots.open.lock().unwrap().by_age.is_empty());
    }

    #[test]
    fn an_ipv6_slash_64_counts_as_one_address() {
        let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let same: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(source_of(one), source_of(same));
        assert_ne!(source_of(one), source_of(other));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(source_of(mapped), IpAddr::from(Ipv4Addr::new(192, 0, 2, 7)));
    }

    #[test]
    fn a_head_split_anywhere_is_found_once_whole() {
        let (_listener, mut connect) = accepted_connections();
        let (mut client, mut accepted) = connect();
        let request = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n";
        let writer = std::thread::spawn(move || {
            for byte in request {
                client.write_all(&[*byte]).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            client
        });
        let mut buf = [0u8; MAX_HEAD];
        let deadline = Instant::now() + Duration::from_secs(10);
        assert_eq!(
            read_head(&mut accepted, &mut buf, deadline),
            Ok(request.len())
        );
        drop(writer.join());
    }
}
