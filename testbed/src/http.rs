//! The one HTTP client of the tests and tools: a bounded HTTP/1.1 request with
//! `Connection: close` (from inside a namespace when asked), its response, and a wait
//! until an endpoint answers 200; and the same to a deployment's [`Endpoint`], by host
//! name and over HTTPS (rustls: the web's roots and a CA file of the user's).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::netns::in_netns;

/// How long a connection attempt may take.
const CONNECT_WAIT: Duration = Duration::from_millis(500);
/// How long the whole answer may take (WHIP answers wait for ICE gathering).
const READ_WAIT: Duration = Duration::from_secs(10);
/// How long a connection attempt to a deployment (over a real network) may take: longer
/// than the kernel's first SYN retransmission (1 s), so one lost SYN is not a failure.
const DEPLOYMENT_CONNECT_WAIT: Duration = Duration::from_secs(3);
/// The largest answer read (a busy server's Prometheus exposition fits); a larger one
/// is no answer.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// An HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers in order.
    pub headers: Vec<(String, String)>,
    /// Body as text.
    pub body: String,
}

impl HttpResponse {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `method path` to `addr` with an optional `(content type, body)` and extra headers;
/// `None` when nothing answers in time or the answer is not HTTP.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
    extra_headers: &[(&str, &str)],
) -> Option<HttpResponse> {
    request_in(None, addr, method, path, body, extra_headers)
}

/// [`request`] from inside network namespace `ns` when given.
pub fn request_in(
    ns: Option<&str>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
    extra_headers: &[(&str, &str)],
) -> Option<HttpResponse> {
    let s = in_netns(ns, move || TcpStream::connect_timeout(&addr, CONNECT_WAIT))
        .ok()?
        .ok()?;
    s.set_read_timeout(Some(READ_WAIT)).ok()?;
    exchange(s, &addr.to_string(), method, path, body, extra_headers)
}

/// Where a deployment's signaling answers: `https://HOST[:PORT]`, `http://HOST[:PORT]`, or
/// `HOST:PORT` (plain HTTP), HOST a name or an address (IPv6 in brackets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// HTTPS.
    pub tls: bool,
    /// The host as written (a name, or an address; IPv6 without brackets).
    pub host: String,
    /// The port (default 443 for https, 80 for http).
    pub port: u16,
}

impl std::str::FromStr for Endpoint {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let (tls, rest) = match text.split_once("://") {
            Some(("https", rest)) => (true, rest),
            Some(("http", rest)) => (false, rest),
            Some((scheme, _)) => return Err(format!("`{text}`: {scheme}:// is not http or https")),
            None => (false, text),
        };
        let authority = rest.trim_end_matches('/');
        if authority.contains('/') {
            return Err(format!("`{text}`: give the endpoint without a path"));
        }
        let default_port = if tls { 443 } else { 80 };
        let port_of = |p: &str| p.parse().map_err(|_| format!("`{text}`: bad port `{p}`"));
        let (host, port) = match authority.strip_prefix('[') {
            Some(bracketed) => {
                let (host, after) = bracketed
                    .split_once(']')
                    .ok_or_else(|| format!("`{text}`: an unclosed ["))?;
                match after.strip_prefix(':') {
                    Some(port) => (host, port_of(port)?),
                    None if after.is_empty() => (host, default_port),
                    None => return Err(format!("`{text}`: `{after}` after the address")),
                }
            }
            None => match authority.rsplit_once(':') {
                Some((host, port)) => (host, port_of(port)?),
                None => (authority, default_port),
            },
        };
        if host.is_empty() {
            return Err(format!("`{text}`: no host"));
        }
        Ok(Endpoint {
            tls,
            host: host.to_string(),
            port,
        })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        match self.host.contains(':') {
            true => write!(f, "{scheme}://[{}]:{}", self.host, self.port),
            false => write!(f, "{scheme}://{}:{}", self.host, self.port),
        }
    }
}

/// A TLS client configuration trusting the web's roots and the PEM certificates in
/// `ca_file`, if given.
pub fn tls_client(ca_file: Option<&std::path::Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = ca_file {
        use rustls::pki_types::pem::PemObject as _;
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        for cert in certs {
            let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// `method path` to `endpoint` (each address its name resolves to, in order, until one
/// connects), over TLS with `tls` when it is https. An error says what failed.
pub fn request_to(
    endpoint: &Endpoint,
    tls: &Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
    extra_headers: &[(&str, &str)],
) -> Result<HttpResponse, String> {
    let addrs: Vec<SocketAddr> = (endpoint.host.as_str(), endpoint.port)
        .to_socket_addrs()
        .map_err(|e| format!("{}: cannot resolve: {e}", endpoint.host))?
        .collect();
    let stream = addrs
        .iter()
        .find_map(|addr| TcpStream::connect_timeout(addr, DEPLOYMENT_CONNECT_WAIT).ok())
        .ok_or_else(|| format!("{endpoint}: nothing answers at {addrs:?}"))?;
    // One deadline for the whole exchange, TLS handshake included.
    let stream = DeadlineStream {
        stream,
        deadline: Instant::now() + READ_WAIT,
    };
    let host = match (endpoint.host.contains(':'), endpoint.port) {
        (true, port) => format!("[{}]:{port}", endpoint.host),
        (false, port) => format!("{}:{port}", endpoint.host),
    };
    let answer = if endpoint.tls {
        let name = rustls::pki_types::ServerName::try_from(endpoint.host.clone())
            .map_err(|e| format!("{}: {e}", endpoint.host))?;
        let connection = rustls::ClientConnection::new(Arc::clone(tls), name)
            .map_err(|e| format!("{endpoint}: {e}"))?;
        let tls_stream = rustls::StreamOwned::new(connection, stream);
        exchange(tls_stream, &host, method, path, body, extra_headers)
    } else {
        exchange(stream, &host, method, path, body, extra_headers)
    };
    answer.ok_or_else(|| {
        format!("{endpoint}: {method} {path}: no HTTP answer (TLS or the connection failed)")
    })
}

/// A connection whose every read and write waits at most until one deadline: a server
/// that drips its TLS handshake or its answer cannot hold the caller past it.
struct DeadlineStream {
    stream: TcpStream,
    deadline: Instant,
}

impl DeadlineStream {
    /// The time left, set as the socket's timeout for `io`; an error once it is spent.
    fn arm(
        &self,
        set: impl Fn(&TcpStream, Option<Duration>) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        set(&self.stream, Some(left))
    }
}

impl Read for DeadlineStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.arm(TcpStream::set_read_timeout)?;
        self.stream.read(buf)
    }
}

impl Write for DeadlineStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.arm(TcpStream::set_write_timeout)?;
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// [`request`] from the local address `source` (a loopback address other than
/// 127.0.0.1 plays another client).
pub fn request_from(
    source: IpAddr,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
    extra_headers: &[(&str, &str)],
) -> Option<HttpResponse> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .ok()?;
    socket.bind(&SocketAddr::new(source, 0).into()).ok()?;
    socket.connect_timeout(&addr.into(), CONNECT_WAIT).ok()?;
    socket.set_read_timeout(Some(READ_WAIT)).ok()?;
    exchange(
        TcpStream::from(socket),
        &addr.to_string(),
        method,
        path,
        body,
        extra_headers,
    )
}

/// Sends one request on `s` (a connection to `host`, with its read timeout set) and reads
/// the whole answer.
fn exchange(
    mut s: impl Read + Write,
    host: &str,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
    extra_headers: &[(&str, &str)],
) -> Option<HttpResponse> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in extra_headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    match body {
        Some((content_type, b)) => req.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )),
        None => req.push_str("Content-Length: 0\r\n\r\n"),
    }
    s.write_all(req.as_bytes()).ok()?;
    s.flush().ok()?;
    // Bounded in size and in time: a server that drips its answer (each read within the
    // socket's timeout) is cut off at the deadline.
    let deadline = Instant::now() + READ_WAIT;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if Instant::now() > deadline || raw.len() > MAX_ANSWER_BYTES {
            return None;
        }
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A TLS server that closes without close_notify: the answer is whole when
            // HTTP says so (`Connection: close`, and the length the parse checks).
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => break,
            Err(_) => return None,
        }
    }
    parse_response(&String::from_utf8_lossy(&raw))
}

/// `GET path` from `addr`, inside namespace `ns` when given: `(status, body)`.
pub fn get(ns: Option<&str>, addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    request_in(ns, addr, "GET", path, None, &[]).map(|r| (r.status, r.body))
}

/// The sum of the Prometheus text-format series in `text` whose line starts with
/// `series_prefix` (a name, or a name and the start of its labels).
pub fn metric_sum(text: &str, series_prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series_prefix))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// The series `name` in `text`, summed by the value of its label `label` (e.g. drops by
/// `reason`, over workers); a series without the label counts under "?".
pub fn metric_by_label(
    text: &str,
    name: &str,
    label: &str,
) -> std::collections::BTreeMap<String, f64> {
    let key = format!("{label}=\"");
    let mut sums = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('{'))
    }) {
        let value = line
            .split(key.as_str())
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?");
        let count: f64 = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0);
        *sums.entry(value.to_string()).or_insert(0.0) += count;
    }
    sums
}

/// [`metric_sum`] over the `/metrics` of `addr` (inside namespace `ns` when given);
/// 0 when nothing answers.
pub fn metric(ns: Option<&str>, addr: SocketAddr, series_prefix: &str) -> f64 {
    get(ns, addr, "/metrics").map_or(0.0, |(_, text)| metric_sum(&text, series_prefix))
}

fn parse_response(text: &str) -> Option<HttpResponse> {
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let mut response = HttpResponse {
        status,
        headers,
        body: body.to_string(),
    };
    if response
        .header("Transfer-Encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        response.body = dechunked(body)?;
    }
    Some(response)
}

/// A `Transfer-Encoding: chunked` body, joined (a large answer from Go's net/http, e.g.
/// Prometheus's API); `None` when the chunks are malformed.
fn dechunked(mut body: &str) -> Option<String> {
    let mut joined = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(joined);
        }
        joined.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// Waits until `GET /readyz` on `addr` answers 200, at most `limit`; panics naming
/// `what` otherwise, or as soon as `exited` reports why the process is gone.
pub fn wait_ready(
    ns: Option<&str>,
    addr: SocketAddr,
    what: &str,
    limit: Duration,
    mut exited: impl FnMut() -> Option<String>,
) {
    let deadline = Instant::now() + limit;
    while get(ns, addr, "/readyz").map(|(status, _)| status) != Some(200) {
        if let Some(why) = exited() {
            panic!("{what} exited before it was ready: {why}");
        }
        assert!(
            Instant::now() < deadline,
            "{what} was not ready on {addr} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_summed_by_one_label() {
        let text = "x_total{worker=\"0\",reason=\"a\"} 2\nx_total{worker=\"1\",reason=\"a\"} 3\n\
                    x_total{reason=\"b\"} 1\nx_totals{reason=\"a\"} 9\nx_total 4\n";
        let sums = metric_by_label(text, "x_total", "reason");
        assert_eq!(sums.get("a"), Some(&5.0));
        assert_eq!(sums.get("b"), Some(&1.0));
        assert_eq!(
            sums.len(),
            2,
            "another series and an unlabelled line are not counted: {sums:?}"
        );
    }

    #[test]
    fn an_endpoint_is_a_url_or_host_and_port() {
        let parse = |t: &str| t.parse::<Endpoint>();
        let e = |tls, host: &str, port| Endpoint {
            tls,
            host: host.into(),
            port,
        };
        assert_eq!(parse("127.0.0.1:8080"), Ok(e(false, "127.0.0.1", 8080)));
        assert_eq!(
            parse("http://xcvr.local:8080/"),
            Ok(e(false, "xcvr.local", 8080))
        );
        assert_eq!(
            parse("https://signaling.example.com"),
            Ok(e(true, "signaling.example.com", 443))
        );
        assert_eq!(parse("https://[::1]:8443"), Ok(e(true, "::1", 8443)));
        assert_eq!(parse("http://[fd00::1]"), Ok(e(false, "fd00::1", 80)));
        assert_eq!(
            parse("https://[::1]:8443").unwrap().to_string(),
            "https://[::1]:8443"
        );
        assert!(parse("ftp://x:1").unwrap_err().contains("ftp"));
        assert!(parse("https://x/v1/sessions").unwrap_err().contains("path"));
        assert!(parse("x:port").unwrap_err().contains("bad port"));
        assert!(parse("https://").unwrap_err().contains("no host"));
    }

    #[test]
    fn a_response_splits_into_status_headers_and_body() {
        let r = parse_response("HTTP/1.1 201 Created\r\nLocation: /s/1\r\nX: y\r\n\r\nv=0\r\n")
            .unwrap();
        assert_eq!(r.status, 201);
        assert_eq!(r.header("location"), Some("/s/1"));
        assert_eq!(r.body, "v=0\r\n");
        assert!(parse_response("not http").is_none());
        let chunked = parse_response(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(chunked.body, "{\"a\":1}");
        assert!(
            parse_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_none()
        );
    }

    #[test]
    fn a_metric_sums_the_series_that_start_with_its_prefix() {
        let text = "# HELP x_total X.\nx_total{w=\"0\"} 2\nx_total{w=\"1\"} 3.5\nx_other 9\n";
        assert_eq!(metric_sum(text, "x_total"), 5.5);
        assert_eq!(metric_sum(text, "x_total{w=\"1\""), 3.5);
        assert_eq!(metric_sum(text, "y"), 0.0);
    }
}
