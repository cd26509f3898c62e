//! The one HTTP client of the tests and tools: a bounded HTTP/1.1 request with
//! `Connection: close` (from inside a namespace when asked), its response, and a wait
//! until an endpoint answers 200.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::netns::in_netns;

/// How long a connection attempt may take.
const CONNECT_WAIT: Duration = Duration::from_millis(500);
/// How long the whole answer may take (WHIP answers wait for ICE gathering).
const READ_WAIT: Duration = Duration::from_secs(10);

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
    exchange(s, addr, method, path, body, extra_headers)
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
    exchange(socket.into(), addr, method, path, body, extra_headers)
}

/// Sends one request on `s` and reads the whole answer.
fn exchange(
    mut s: TcpStream,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
    extra_headers: &[(&str, &str)],
) -> Option<HttpResponse> {
    s.set_read_timeout(Some(READ_WAIT)).ok()?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
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
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
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
    Some(HttpResponse {
        status,
        headers,
        body: body.to_string(),
    })
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
    fn a_response_splits_into_status_headers_and_body() {
        let r = parse_response("HTTP/1.1 201 Created\r\nLocation: /s/1\r\nX: y\r\n\r\nv=0\r\n")
            .unwrap();
        assert_eq!(r.status, 201);
        assert_eq!(r.header("location"), Some("/s/1"));
        assert_eq!(r.body, "v=0\r\n");
        assert!(parse_response("not http").is_none());
    }

    #[test]
    fn a_metric_sums_the_series_that_start_with_its_prefix() {
        let text = "# HELP x_total X.\nx_total{w=\"0\"} 2\nx_total{w=\"1\"} 3.5\nx_other 9\n";
        assert_eq!(metric_sum(text, "x_total"), 5.5);
        assert_eq!(metric_sum(text, "x_total{w=\"1\""), 3.5);
        assert_eq!(metric_sum(text, "y"), 0.0);
    }
}
