//! What a stranger on relay-mio's metrics address (a relay on the host network shows it to
//! the node's network) can cost: connections held idle from one address and from many,
//! and requests that are too long or not HTTP. Each is refused or cut and counted in
//! `ufrag_relay_http_refused_total`, the threads serving connections stay bounded, and the
//! kubelet's probe and the scraper are answered throughout.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use ufrag_common::runtime::http::{MAX_CONNECTIONS, MAX_PER_SOURCE};
use ufrag_testkit::OwnedChild;
use ufrag_testkit::addr::{free_tcp_port, tcp_from, unique_ip};
use ufrag_testkit::cargo_build::bin;

/// How long a test waits for the relay to cut a connection (its request deadline is 2 s).
const CUT_WAIT: Duration = Duration::from_secs(15);

/// A relay-mio with one worker; its metrics address.
fn start_relay() -> (OwnedChild, SocketAddr) {
    let ip = unique_ip();
    let metrics = SocketAddr::from((ip, free_tcp_port(ip)));
    let mut command = Command::new(bin("relay-mio"));
    command
        .args(["--vip", &format!("{ip}:3478")])
        .args(["--internal-addr", &format!("{ip}:40000")])
        .args(["--allow-transceiver-net", "127.0.0.0/8"])
        .args(["--workers", "1", "--metrics-addr", &metrics.to_string()])
        .env("UFRAG_RELAY_HINT_KEYS", ufrag_testkit::keys::KEYS)
        .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut relay = OwnedChild::spawn(&mut command).expect("relay-mio starts");
    ufrag_testkit::http::wait_ready(None, metrics, "relay-mio", Duration::from_secs(10), || {
        relay.exit_report()
    });
    (relay, metrics)
}

/// A TCP connection to `to` from loopback address `source`, sending nothing.
fn connect_from(source: Ipv4Addr, to: SocketAddr) -> TcpStream {
    tcp_from(source.into(), to, Duration::from_secs(2)).expect("connect to the metrics address")
}

/// Whether the relay closed `stream` (end of stream or a reset) within [`CUT_WAIT`],
/// having answered nothing.
fn closed_unanswered(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(CUT_WAIT))
        .expect("set a read timeout");
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// `ufrag_relay_http_refused_total{reason}` as the relay reports it now.
fn refused(metrics: SocketAddr, reason: &str) -> f64 {
    let (status, body) =
        ufrag_testkit::http::get(None, metrics, "/metrics").expect("metrics answer");
    assert_eq!(status, 200, "the scraper is answered");
    let series = format!("ufrag_relay_http_refused_total{{reason=\"{reason}\"}}");
    ufrag_testkit::http::metric_sum(&body, &series)
}

/// Threads of process `pid` called `name`.
fn threads_named(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the relay's threads")
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim() == name)
        })
        .count()
}

/// The `n`th stranger's loopback address (`n` < 255), in a block that
/// [`unique_ip`] does not use, distinct per test process.
fn stranger(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 250, (std::process::id() % 250) as u8, n)
}

#[test]
fn one_address_holds_at_most_its_share_and_idle_connections_are_cut() {
    let (_relay, metrics) = start_relay();
    let source = stranger(1);
    let mut held: Vec<TcpStream> = (0..MAX_PER_SOURCE)
        .map(|_| connect_from(source, metrics))
        .collect();
    // One more from the same address: its oldest connection still sending gives way.
    let mut one_more = connect_from(source, metrics);
    assert!(
        closed_unanswered(&mut held[0]),
        "beyond the address's {MAX_PER_SOURCE}, its oldest idle connection is cut"
    );
    assert!(
        refused(metrics, "source_cap") >= 1.0,
        "and counted as source_cap"
    );
    assert_eq!(
        ufrag_testkit::http::get(None, metrics, "/healthz").map(|(code, _)| code),
        Some(200),
        "the probe from another address is answered while they are held"
    );
    for stream in held.iter_mut().skip(1).chain([&mut one_more]) {
        assert!(
            closed_unanswered(stream),
            "an idle connection is cut at its deadline"
        );
    }
    assert!(
        refused(metrics, "deadline") >= MAX_PER_SOURCE as f64,
        "each cut is counted as deadline"
    );
}

#[test]
fn idle_connections_from_many_addresses_do_not_keep_the_probe_out() {
    let (relay, metrics) = start_relay();
    let strangers = 3 * MAX_CONNECTIONS;
    let held: Vec<TcpStream> = (0..strangers)
        .map(|n| connect_from(stranger(10 + n as u8), metrics))
        .collect();
    // Every connection has been accepted once the probe's (made after them) is answered.
    assert_eq!(
        ufrag_testkit::http::get(None, metrics, "/healthz").map(|(code, _)| code),
        Some(200),
        "the probe is answered with {strangers} idle connections made before it"
    );
    // However many connections came and were cut, at most MAX_CONNECTIONS threads serve.
    let serving = threads_named(relay.id(), "http-conn");
    assert!(
        (1..=MAX_CONNECTIONS).contains(&serving),
        "{serving} threads serve connections, at most {MAX_CONNECTIONS}"
    );
    let cut = refused(metrics, "oldest_cut");
    let timed_out = refused(metrics, "deadline");
    assert!(cut >= 1.0, "the oldest connections gave way: {cut}");
    assert!(
        cut + timed_out >= (strangers - MAX_CONNECTIONS) as f64,
        "beyond {MAX_CONNECTIONS}, every connection was cut: {cut} oldest, {timed_out} deadline"
    );
    drop(held);
}

#[test]
fn requests_that_are_not_http_or_too_long_get_their_status() {
    let (_relay, metrics) = start_relay();
    let answer_to = |request: &[u8]| -> String {
        let mut stream = TcpStream::connect(metrics).expect("connect");
        stream.set_read_timeout(Some(CUT_WAIT)).expect("timeout");
        // The relay may answer and close before it has read all of a long request.
        let _ = stream.write_all(request);
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    };
    let status_of = |request: &[u8]| -> String {
        answer_to(request)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let long = format!(
        "GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(9000)
    );
    assert_eq!(
        status_of(long.as_bytes()),
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    assert_eq!(
        status_of(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"),
        "HTTP/1.1 400 Bad Request",
        "a TLS ClientHello is not HTTP"
    );
    let post = answer_to(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(
        post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{post}"
    );
    assert!(post.contains("\r\nAllow: GET, HEAD\r\n"), "{post}");
    assert_eq!(
        status_of(b"GET /nowhere HTTP/1.0\r\n\r\n"),
        "HTTP/1.1 404 Not Found"
    );
    let head = answer_to(b"HEAD /healthz HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("\r\nContent-Length: 3\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "HEAD gets no body: {head:?}");
    assert!(refused(metrics, "bad_request") >= 2.0);
}
