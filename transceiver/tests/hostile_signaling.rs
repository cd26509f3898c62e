//! Signaling under hostile clients, against the real binary: slow clients (headers and
//! bodies trickled a byte a second) leave POST, `/healthz` and `/readyz` answering and are
//! cut off; oversized bodies get 413 (PATCH too); connections beyond the cap are closed
//! at once; one address cannot hold the connections another needs, and its request rate
//! on any route and its POST rate are bounded (429); a non-loopback address needs a
//! token; a dead worker turns readiness off while the other worker keeps serving. A
//! sign-up is priced (sessions waiting to connect per address, offer limits), and
//! behind a trusted proxy each forwarded client spends its own share.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// Slow connections opened by the slow-client test (half trickle headers, half bodies).
const SLOW_CLIENTS: usize = 200;
/// How long the slow clients keep trickling while the real requests are made.
const TRICKLE_FOR: Duration = Duration::from_secs(3);
/// The server's limits (ufrag_transceiver::http): the test waits at most this long for them.
const CUT_OFF_WAIT: Duration = Duration::from_secs(30);

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("the listener accepts");
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s
}

/// True once the server has closed `s` (end of stream or reset), after reading any
/// response it sent; `seen` collects what it sent.
fn closed_by_server(s: &mut TcpStream, seen: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn slow_clients_do_not_stop_signaling_and_are_cut_off() {
    // The slow clients and the real requests share one address here: lift its own cap,
    // so what is tested is what slow clients cost the server (a task, not a thread).
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--http-max-connections-per-ip", "1000"],
    );
    let mut headers: Vec<TcpStream> = (0..SLOW_CLIENTS / 2).map(|_| connect(xcvr.http)).collect();
    let mut bodies: Vec<TcpStream> = (0..SLOW_CLIENTS / 2)
        .map(|_| {
            let mut s = connect(xcvr.http);
            s.write_all(
                b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/sdp\r\n\
                  Content-Length: 1000\r\n\r\n",
            )
            .unwrap();
            s
        })
        .collect();
    let header_bytes = b"GET /healthz HTTP/1.1\r\nHost: x\r\n";
    let started = Instant::now();
    let mut sent = 0;
    while started.elapsed() < TRICKLE_FOR {
        for s in &mut headers {
            let _ = s.write_all(&header_bytes[sent % header_bytes.len()..][..1]);
        }
        for s in &mut bodies {
            let _ = s.write_all(b"v");
        }
        sent += 1;
        // While they trickle, the real requests are answered.
        assert_eq!(
            ufrag_testkit::http::get(None, xcvr.http, "/healthz").map(|r| r.0),
            Some(200)
        );
        assert_eq!(
            ufrag_testkit::http::get(None, xcvr.http, "/readyz").map(|r| r.0),
            Some(200)
        );
        let mut client = new_client();
        assert_eq!(client.signal(xcvr.http).status, 201, "POST is answered");
        std::thread::sleep(Duration::from_secs(1));
    }
    // The server cuts them off: headers after 5 s, bodies with 408 after 10 s.
    let deadline = Instant::now() + CUT_OFF_WAIT;
    let mut responses = vec![Vec::new(); bodies.len()];
    let mut open_headers = headers.len();
    let mut open_bodies = bodies.len();
    while (open_headers > 0 || open_bodies > 0) && Instant::now() < deadline {
        open_headers = headers
            .iter_mut()
            .filter_map(|s| (!closed_by_server(s, &mut Vec::new())).then_some(()))
            .count();
        open_bodies = bodies
            .iter_mut()
            .zip(&mut responses)
            .filter_map(|(s, seen)| (!closed_by_server(s, seen)).then_some(()))
            .count();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(open_headers, 0, "slow header senders are cut off");
    assert_eq!(open_bodies, 0, "slow body senders are cut off");
    for seen in &responses {
        let seen = String::from_utf8_lossy(seen);
        assert!(
            seen.starts_with("HTTP/1.1 408"),
            "a slow body gets 408: {seen}"
        );
    }
    assert!(xcvr.metric("ufrag_transceiver_http_refusals_total{reason=\"body_too_slow\"}") >= 1.0);
}

#[test]
fn bodies_over_64_kib_get_413_on_post_and_patch() {
    let xcvr = Transceiver::start(Some("127.0.0.1:3478".parse().unwrap()), &[]);
    let big = "a".repeat(64 * 1024 + 1);
    let post = http_request(
        xcvr.http,
        "POST",
        "/v1/sessions",
        Some(("application/sdp", &big)),
        &[],
    );
    assert_eq!(post.map(|r| r.status), Some(413));
    let patch = http_request(
        xcvr.http,
        "PATCH",
        "/v1/sessions/0000000000000100",
        Some(("application/trickle-ice-sdpfrag", &big)),
        &[],
    );
    assert_eq!(
        patch.map(|r| r.status),
        Some(413),
        "PATCH is not silently cut"
    );
    assert_eq!(
        xcvr.metric("ufrag_transceiver_http_refusals_total{reason=\"body_too_large\"}"),
        2.0
    );
}

#[test]
fn connections_beyond_the_cap_are_closed_at_once_and_counted() {
    let cap = 20;
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--http-max-connections", &cap.to_string()],
    );
    // The harness's readiness check used a connection that is closed by now; fill every
    // slot with idle connections (they send nothing).
    std::thread::sleep(Duration::from_millis(200));
    let idle: Vec<TcpStream> = (0..cap).map(|_| connect(xcvr.http)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = connect(xcvr.http);
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut buf = [0u8; 64];
    let read = extra.read(&mut buf);
    assert!(
        matches!(read, Ok(0) | Err(_))
            && !matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the connection beyond the cap is closed, not served: {read:?}"
    );
    drop(idle);
    // Slots free again: the endpoint serves.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ufrag_testkit::http::get(None, xcvr.http, "/healthz").map(|r| r.0) != Some(200) {
        assert!(Instant::now() < deadline, "slots were not freed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(xcvr.metric("ufrag_transceiver_http_refusals_total{reason=\"connection_cap\"}") >= 1.0);
}

/// `ufrag_transceiver_http_refusals_total{reason}`, read from address `from` (127.0.0.1
/// may be the one refused).
fn metric_from(from: std::net::IpAddr, xcvr: &Transceiver, reason: &str) -> f64 {
    let metrics = ufrag_testkit::http::request_from(from, xcvr.http, "GET", "/metrics", None, &[])
        .expect("metrics answer another address");
    let series = format!("ufrag_transceiver_http_refusals_total{{reason=\"{reason}\"}}");
    ufrag_testkit::http::metric_sum(&metrics.body, &series)
}

/// One address holding connections (idle
/// keep-alive, or a cheap GET now and then) cannot take the slots another address needs.
/// Before, the cap was global only: the hog's connections filled it and the other
/// address's POST was closed unanswered.
#[test]
fn one_address_holding_many_connections_does_not_stop_another_addresss_post() {
    let (total, per_address) = (16, 8);
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &[
            "--http-max-connections",
            &total.to_string(),
            "--http-max-connections-per-ip",
            &per_address.to_string(),
        ],
    );
    std::thread::sleep(Duration::from_millis(200));
    // The hog fills every slot with keep-alive connections, each with a cheap GET.
    let mut hog: Vec<TcpStream> = (0..total).map(|_| connect(xcvr.http)).collect();
    for s in &mut hog {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
    }
    // The address's first `per_address` are served and kept; the rest closed at once.
    let mut served = 0;
    for s in &mut hog {
        let mut seen = Vec::new();
        let deadline = Instant::now() + CUT_OFF_WAIT;
        while !seen.starts_with(b"HTTP/1.1 200") && !closed_by_server(s, &mut seen) {
            assert!(Instant::now() < deadline, "neither served nor closed");
        }
        served += usize::from(seen.starts_with(b"HTTP/1.1 200"));
    }
    assert_eq!(
        served, per_address,
        "the hog's address keeps its cap, no more"
    );
    let other: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let post = ufrag_testkit::http::request_from(
        other,
        xcvr.http,
        "POST",
        "/v1/sessions",
        Some(("application/sdp", "x")),
        &[],
    )
    .expect("another address is served");
    assert_eq!(post.status, 400, "the garbage offer reached signaling");
    let health = ufrag_testkit::http::request_from(other, xcvr.http, "GET", "/healthz", None, &[]);
    assert_eq!(health.map(|r| r.status), Some(200));
    drop(hog);
    let refused = metric_from(other, &xcvr, "address_connection_cap");
    assert!(refused >= (total - per_address) as f64, "{refused}");
}

/// Every route has a per-address request rate: a client polling a cheap GET
/// gets 429 beyond it, and another address is not affected.
#[test]
fn one_address_requesting_too_fast_gets_429_on_any_route() {
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--requests-per-second-per-ip", "5"],
    );
    // Twice the rate at once (the harness's own readiness checks may have spent some).
    let statuses: Vec<u16> = (0..20)
        .map(|_| {
            http_request(xcvr.http, "GET", "/healthz", None, &[])
                .unwrap()
                .status
        })
        .collect();
    assert!(statuses.contains(&200), "{statuses:?}");
    assert!(statuses.ends_with(&[429, 429, 429]), "{statuses:?}");
    let other: std::net::IpAddr = "127.0.0.3".parse().unwrap();
    let health = ufrag_testkit::http::request_from(other, xcvr.http, "GET", "/healthz", None, &[]);
    assert_eq!(health.map(|r| r.status), Some(200));
    assert!(metric_from(other, &xcvr, "request_rate") >= 3.0);
}

#[test]
fn one_address_posting_too_fast_gets_429() {
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--posts-per-second-per-ip", "2"],
    );
    // Twice the rate at once, then 429 (the offers are garbage: the rate counts POSTs,
    // before any work on the body).
    let statuses: Vec<u16> = (0..6)
        .map(|_| {
            http_request(
                xcvr.http,
                "POST",
                "/v1/sessions",
                Some(("application/sdp", "x")),
                &[],
            )
            .unwrap()
            .status
        })
        .collect();
    assert_eq!(statuses[..4], [400, 400, 400, 400], "{statuses:?}");
    assert!(statuses[4..].iter().all(|s| *s == 429), "{statuses:?}");
    assert!(xcvr.metric("ufrag_transceiver_http_refusals_total{reason=\"post_rate\"}") >= 2.0);
}

#[test]
fn a_non_loopback_address_without_a_token_is_refused_unless_allowed() {
    let out = Command::new(env!("CARGO_BIN_EXE_transceiver"))
        .args([
            "--http-addr",
            "0.0.0.0:0",
            "--bind",
            "127.0.0.1:0",
            "--direct",
        ])
        .env("UFRAG_RELAY_HINT_KEYS", KEYS)
        .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
        .env_remove("UFRAG_TRANSCEIVER_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`http_addr`") && stderr.contains("--allow-unauthenticated"),
        "{stderr}"
    );
}

#[test]
fn a_dead_worker_turns_readiness_off_and_the_other_keeps_serving() {
    let xcvr = Transceiver::start_with_env(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--workers", "2"],
        &[("UFRAG_TRANSCEIVER_FAULT", "panic-worker-0")],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while ufrag_testkit::http::get(None, xcvr.http, "/readyz").map(|r| r.0) != Some(503) {
        assert!(
            Instant::now() < deadline,
            "readiness stayed on with a dead worker"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(xcvr.metric("ufrag_transceiver_worker_failures_total"), 1.0);
    assert_eq!(
        ufrag_testkit::http::get(None, xcvr.http, "/healthz").map(|r| r.0),
        Some(200)
    );
    // New sessions go to the live worker (its index is the id's low byte).
    for _ in 0..4 {
        let mut client = new_client();
        let r = client.signal(xcvr.http);
        assert_eq!(r.status, 201, "{}", r.body);
        let location = r.header("location").expect("a Location");
        assert!(location.ends_with("01"), "{location}");
    }
}

#[test]
fn workers_run_on_the_cpus_listed_and_a_bad_list_is_refused() {
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--workers", "2", "--cpus", "0"],
    );
    let tasks = format!("/proc/{}/task", xcvr.child.id());
    let mut pinned = Vec::new();
    for task in std::fs::read_dir(&tasks).unwrap().flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        if field("Name:").is_some_and(|n| n.starts_with("xcvr-w")) {
            pinned.push(field("Cpus_allowed_list:").unwrap_or_default());
        }
    }
    assert_eq!(
        pinned,
        ["0", "0"],
        "both workers on CPU 0 (the list repeats)"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_transceiver"))
        .args(["--bind", "127.0.0.1:0", "--direct", "--cpus", "0,,1"])
        .env("UFRAG_RELAY_HINT_KEYS", KEYS)
        .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`cpus`"), "{stderr}");
}

/// `/metrics` can be served off the public signaling port: with `--metrics-addr`, the public port answers 404 for it and the
/// operations listener serves metrics and health only.
#[test]
fn metrics_can_leave_the_public_signaling_port() {
    let ip = unique_ip();
    let operations = SocketAddr::from((ip, free_tcp_port(ip)));
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--metrics-addr", &operations.to_string()],
    );
    let public = http_request(xcvr.http, "GET", "/metrics", None, &[]).unwrap();
    assert_eq!(public.status, 404, "the public port shows no metrics");
    let scraped = http_request(operations, "GET", "/metrics", None, &[]).unwrap();
    assert_eq!(scraped.status, 200);
    assert!(scraped.body.contains("ufrag_transceiver_sessions_active"));
    let health = http_request(operations, "GET", "/readyz", None, &[]).unwrap();
    assert_eq!(health.status, 200);
    let post = http_request(
        operations,
        "POST",
        "/v1/sessions",
        Some(("application/sdp", "x")),
        &[],
    )
    .unwrap();
    assert_eq!(post.status, 404, "no signaling on the operations listener");
    let page = http_request(xcvr.http, "GET", "/healthz", None, &[]).unwrap();
    assert_eq!(page.status, 200, "health stays on the public port too");
}

/// ICE restarts mint no new identities (one
/// session's PATCHes made 72 flows at a relay whose per-session cap is 8 per worker): each
/// restart's ufrag keeps the session's hint bytes, so a relay counts every flow of the
/// session as one session's; a session gets 3 restarts at once, then one per 5 s (429
/// beyond, counted) (the next test: PATCHes spend the sign-up rate).
#[test]
fn ice_restarts_keep_the_sessions_identity_and_have_a_budget() {
    use ufrag_common::hint::HintKeys;
    let xcvr = Transceiver::start(Some("127.0.0.1:3478".parse().unwrap()), &[]);
    let mut client = new_client();
    let created = client.signal(xcvr.http);
    assert_eq!(created.status, 201, "{}", created.body);
    let location = client.location.clone().unwrap();
    let ufrag_of = |sdp: &str| {
        sdp.lines()
            .find_map(|l| l.strip_prefix("a=ice-ufrag:"))
            .unwrap()
            .trim()
            .to_string()
    };
    let keys = HintKeys::parse(KEYS).unwrap();
    let any = ["127.0.0.0/8".parse().unwrap()];
    let first = keys
        .verify(ufrag_of(&created.body).as_bytes(), &any)
        .unwrap();
    let restart = |n: u32| {
        let fragment = format!("a=ice-ufrag:cl{n:02}\r\na=ice-pwd:{}\r\n", "p".repeat(24));
        http_request(
            xcvr.http,
            "PATCH",
            &location,
            Some(("application/trickle-ice-sdpfrag", &fragment)),
            &[],
        )
        .expect("an answer")
    };
    let mut minted = first.minted_unix_s;
    let mut seen = vec![ufrag_of(&created.body)];
    for n in 0..3 {
        let r = restart(n);
        assert_eq!(r.status, 200, "restart {n}: {}", r.body);
        let ufrag = ufrag_of(&r.body);
        assert!(!seen.contains(&ufrag), "restart {n} gave a new ufrag");
        let hint = keys.verify(ufrag.as_bytes(), &any).unwrap();
        assert_eq!(
            hint.session, first.session,
            "restart {n} keeps the session's bytes"
        );
        assert_eq!(hint.hint, first.hint, "and its worker");
        assert!(hint.minted_unix_s > minted, "minted after the last");
        minted = hint.minted_unix_s;
        seen.push(ufrag);
    }
    let refused = restart(3);
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused.body.contains("ICE restarts too fast"),
        "{}",
        refused.body
    );
    assert_eq!(refused.header("Retry-After"), Some("5"));
    assert_eq!(xcvr.metric("ufrag_transceiver_ice_restarts_total"), 3.0);
    assert_eq!(
        xcvr.metric("ufrag_transceiver_ice_restarts_refused_total"),
        1.0
    );
}

/// A PATCH that restarts ICE spends its address's sign-up rate, as a POST does (one rate
/// for everything that mints a ufrag); one that only trickles candidates spends nothing.
#[test]
fn an_ice_restart_spends_the_addresss_sign_up_rate() {
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--posts-per-second-per-ip", "1"],
    );
    let mut client = new_client();
    // The bucket refills one a second: what follows must happen within that second
    // (loopback requests, a few ms each); the failure message says how long it took.
    let started = std::time::Instant::now();
    assert_eq!(
        client.signal(xcvr.http).status,
        201,
        "the POST: 1 of a burst of 2"
    );
    let location = client.location.clone().unwrap();
    // From the client's address, where its POST came from.
    let from = client.local.ip();
    let patch = |fragment: &str| {
        ufrag_testkit::http::request_from(
            from,
            xcvr.http,
            "PATCH",
            &location,
            Some(("application/trickle-ice-sdpfrag", fragment)),
            &[],
        )
        .expect("an answer")
    };
    let trickle = "a=candidate:1 1 udp 2130706431 192.0.2.1 5000 typ host\r\n";
    for _ in 0..3 {
        assert_eq!(patch(trickle).status, 204, "a trickle spends no sign-up");
    }
    let restart = format!("a=ice-ufrag:clrs\r\na=ice-pwd:{}\r\n", "p".repeat(24));
    assert_eq!(patch(&restart).status, 200, "the restart: 2 of 2");
    let refused = patch(&restart);
    assert_eq!(
        refused.status,
        429,
        "{} ({:?} after the POST)",
        refused.body,
        started.elapsed()
    );
    assert!(
        refused.body.contains("sign-ups and ICE restarts"),
        "{}",
        refused.body
    );
    assert_eq!(xcvr.metric("ufrag_transceiver_ice_restarts_total"), 1.0);
}

/// A sign-up is priced. One address holds at most
/// `--max-unconnected-per-ip` sessions answered and not yet connected (each costs a
/// str0m `Rtc` and a slot until the connect timeout): beyond, 429. Another address is
/// not affected, and the address regains room as its sessions connect or end. Before,
/// one address could park sessions up to its POST rate times the connect timeout.
#[test]
fn an_address_parks_at_most_its_unconnected_sessions_and_regains_room_as_they_connect() {
    // A connect timeout longer than the test, so only connects and ends free slots.
    let xcvr = Transceiver::start(
        None,
        &["--max-unconnected-per-ip", "2", "--connect-timeout", "60s"],
    );
    let ip = unique_ip();
    let mut parked: Vec<Client> = (0..3).map(|_| Client::new_on(ip)).collect();
    assert_eq!(parked[0].signal(xcvr.http).status, 201);
    assert_eq!(parked[1].signal(xcvr.http).status, 201);
    let refused = parked[2].signal(xcvr.http);
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused.body.contains("waiting to connect") && refused.header("Retry-After").is_some(),
        "{refused:?}"
    );
    assert_eq!(
        new_client().signal(xcvr.http).status,
        201,
        "another address has its own count"
    );
    // The first connects: its address regains a slot.
    let mut first = vec![parked.remove(0)];
    run_until(&mut first, "the first session connected", |c| {
        c.connected_at.is_some()
    });
    assert_eq!(
        parked[1].signal(xcvr.http).status,
        201,
        "room after a connect"
    );
    // Both slots are held again; a DELETE frees one.
    let mut fourth = Client::new_on(ip);
    assert_eq!(fourth.signal(xcvr.http).status, 429);
    let location = parked[0].location.clone().expect("a Location");
    assert_eq!(
        http_request(xcvr.http, "DELETE", &location, None, &[])
            .unwrap()
            .status,
        204
    );
    let mut fifth = Client::new_on(ip);
    assert_eq!(fifth.signal(xcvr.http).status, 201, "room after an end");
    assert_eq!(
        xcvr.metric("ufrag_transceiver_http_refusals_total{reason=\"unconnected_cap\"}"),
        2.0
    );
}

/// Item 6: an offer over its limits (candidates, media sections) is refused with a 400
/// that names the limit, counted, before the SDP is parsed.
#[test]
fn an_offer_with_too_many_candidates_gets_a_400_naming_the_limit() {
    let xcvr = Transceiver::start(Some("127.0.0.1:3478".parse().unwrap()), &[]);
    let client = new_client();
    let extra: String = (0..65)
        .map(|i| format!("a=candidate:{i} 1 udp 2130706431 192.0.2.{i} 9 typ host\r\n"))
        .collect();
    let offer = client
        .offer
        .replacen("a=mid:", &format!("{extra}a=mid:"), 1);
    let r = http_request(
        xcvr.http,
        "POST",
        "/v1/sessions",
        Some(("application/sdp", &offer)),
        &[],
    )
    .unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.contains("candidates: at most 64 are accepted"),
        "{}",
        r.body
    );
    assert_eq!(
        xcvr.metric("ufrag_transceiver_http_refusals_total{reason=\"offer_limits\"}"),
        1.0
    );
}

/// POSTs a garbage offer from `from` with `X-Forwarded-For: forwarded`; its status (400
/// when the rate let it through, 429 when not).
fn post_forwarded(xcvr: &Transceiver, from: &str, forwarded: &str) -> u16 {
    ufrag_testkit::http::request_from(
        from.parse().unwrap(),
        xcvr.http,
        "POST",
        "/v1/sessions",
        Some(("application/sdp", "x")),
        &[("X-Forwarded-For", forwarded)],
    )
    .expect("signaling answers")
    .status
}

/// Item 5: behind a `--trusted-proxy` (an Ingress), the per-address limits count the
/// client its `X-Forwarded-For` names: one client spending its POST rate leaves another
/// behind the same proxy its own, and a client cannot escape by writing the header
/// itself. From an untrusted peer the header is never read. Before, every client behind
/// the Ingress spent the Ingress's one share.
#[test]
fn behind_a_trusted_proxy_each_forwarded_client_spends_its_own_rate() {
    // `connect` (and the default source of a loopback connection) is 127.0.0.1.
    let proxy = "127.0.0.1".to_string();
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &[
            "--posts-per-second-per-ip",
            "1",
            "--trusted-proxy",
            &proxy,
            "--http-max-connections-per-ip",
            "2",
        ],
    );
    // Twice the rate at once (the offers are garbage: 400 means the rate let it by).
    let a: Vec<u16> = (0..3)
        .map(|_| post_forwarded(&xcvr, &proxy, "198.51.100.1"))
        .collect();
    assert_eq!(a, [400, 400, 429], "client A spends its own bucket");
    assert_eq!(
        post_forwarded(&xcvr, &proxy, "198.51.100.2"),
        400,
        "client B behind the same proxy has its own"
    );
    // A client that writes the header itself is still the entry the proxy appended.
    assert_eq!(
        post_forwarded(&xcvr, &proxy, "198.51.100.77, 198.51.100.1"),
        429
    );
    // An untrusted peer is itself, whatever it writes.
    let untrusted = unique_ip().to_string();
    let b: Vec<u16> = (0..3)
        .map(|i| post_forwarded(&xcvr, &untrusted, &format!("203.0.113.{i}")))
        .collect();
    assert_eq!(b, [400, 400, 429], "an untrusted peer's header is not read");
    // The proxy's connections carry many clients: the per-address connection cap (2)
    // does not apply to it. Four kept-alive connections are each served.
    let mut held: Vec<TcpStream> = (0..4).map(|_| connect(xcvr.http)).collect();
    for s in &mut held {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.3\r\n\r\n")
            .unwrap();
    }
    for s in &mut held {
        let mut seen = Vec::new();
        let deadline = Instant::now() + CUT_OFF_WAIT;
        while !seen.starts_with(b"HTTP/1.1 200") {
            assert!(
                !closed_by_server(s, &mut seen),
                "a proxy connection was closed"
            );
            assert!(Instant::now() < deadline, "not served");
        }
    }
}

/// Item 5: the rate of requests of any kind is spent only by requests without the
/// bearer token: an app's server holding it (signing its users up from one address) is
/// limited by the sign-up rate, not by the rate meant for anonymous callers.
#[test]
fn requests_with_the_bearer_token_do_not_spend_the_anonymous_request_rate() {
    let xcvr = Transceiver::start_with_env(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--requests-per-second-per-ip", "2"],
        &[("UFRAG_TRANSCEIVER_TOKEN", "s3cret")],
    );
    let from = unique_ip();
    let get = |auth: &[(&str, &str)]| {
        ufrag_testkit::http::request_from(from.into(), xcvr.http, "GET", "/healthz", None, auth)
            .expect("an answer")
            .status
    };
    let with_token: Vec<u16> = (0..20)
        .map(|_| get(&[("Authorization", "Bearer s3cret")]))
        .collect();
    assert!(with_token.iter().all(|s| *s == 200), "{with_token:?}");
    let without: Vec<u16> = (0..6).map(|_| get(&[])).collect();
    assert!(without.ends_with(&[429, 429]), "{without:?}");
    let wrong: Vec<u16> = (0..2)
        .map(|_| get(&[("Authorization", "Bearer nope")]))
        .collect();
    assert_eq!(wrong, [429, 429], "a wrong token is anonymous");
}

/// POSTs a garbage offer from the trusted proxy `proxy` on a connection that begins with
/// `header` (a PROXY protocol v2 header, or anything else); the status, or `None` when
/// the connection was closed unanswered.
fn post_behind_proxy_header(xcvr: &Transceiver, proxy: &str, header: &[u8]) -> Option<u16> {
    let mut stream =
        ufrag_testkit::addr::tcp_from(proxy.parse().unwrap(), xcvr.http, CUT_OFF_WAIT).unwrap();
    stream.set_read_timeout(Some(CUT_OFF_WAIT)).unwrap();
    let mut request = header.to_vec();
    request.extend_from_slice(
        b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/sdp\r\n\
          Content-Length: 1\r\nConnection: close\r\n\r\nx",
    );
    stream.write_all(&request).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.get(9..12)?.parse().ok()
}

/// Item 5, PROXY protocol v2: with `--proxy-protocol`, a trusted proxy's connection
/// begins with a header naming its client, and each client spends its own share; an
/// `X-Forwarded-For` on such a connection is not read. A connection from the proxy
/// without a valid header is closed unanswered and counted as `bad_proxy_header`; a
/// stranger's connection is never read for a header.
#[test]
fn behind_a_proxy_protocol_proxy_each_named_client_spends_its_own_rate() {
    use ufrag_transceiver::proxy_protocol::encode;
    let proxy = unique_ip().to_string();
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &[
            "--posts-per-second-per-ip",
            "1",
            "--trusted-proxy",
            &proxy,
            "--proxy-protocol",
        ],
    );
    let named = |client: &str| encode(format!("{client}:40000").parse().unwrap(), xcvr.http, &[]);
    let a: Vec<Option<u16>> = (0..3)
        .map(|_| post_behind_proxy_header(&xcvr, &proxy, &named("198.51.100.1")))
        .collect();
    assert_eq!(
        a,
        [Some(400), Some(400), Some(429)],
        "client A spends its own bucket"
    );
    assert_eq!(
        post_behind_proxy_header(&xcvr, &proxy, &named("198.51.100.2")),
        Some(400),
        "client B behind the same proxy has its own"
    );
    // No header, or version 1's text: closed before any request is read.
    let refused = "ufrag_transceiver_http_refusals_total{reason=\"bad_proxy_header\"}";
    assert_eq!(post_behind_proxy_header(&xcvr, &proxy, b""), None);
    assert_eq!(
        post_behind_proxy_header(
            &xcvr,
            &proxy,
            b"PROXY TCP4 198.51.100.3 10.0.0.1 40000 443\r\n"
        ),
        None
    );
    assert_eq!(xcvr.metric(refused), 2.0);
    // A stranger's header is not read: it is the start of its request, which is not HTTP.
    let not_http = "ufrag_transceiver_http_refusals_total{reason=\"bad_headers\"}";
    let before = xcvr.metric(not_http);
    let stranger = unique_ip().to_string();
    let _ = post_behind_proxy_header(&xcvr, &stranger, &named("198.51.100.9"));
    assert_eq!(xcvr.metric(not_http), before + 1.0);
    assert_eq!(xcvr.metric(refused), 2.0, "a stranger is not a proxy");
}
