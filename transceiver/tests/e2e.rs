//! End to end: a str0m client → relay-mio → transceiver, over real UDP on loopback, and
//! over ICE-TCP for a client whose only candidate is TCP.

mod support;

use std::net::SocketAddr;

use support::*;

#[test]
fn a_session_through_the_relay_echoes_audio_and_answers_pings_then_deletes() {
    let relay = TestRelay::start(&[]);
    let xcvr = Transceiver::start(Some(relay.vip), &[]);
    let mut client = new_client();
    let r = client.signal(xcvr.http);
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.header("Content-Type"), Some("application/sdp"));
    assert!(r.header("Location").unwrap().starts_with("/v1/sessions/"));
    assert!(r.body.contains("a=ice-lite"), "ICE-lite answer");
    assert!(
        r.body
            .contains(&format!("{} {}", relay.vip.ip(), relay.vip.port())),
        "the only candidate is the relay VIP"
    );

    // 50 packets of audio (1 s), paced at 20 ms; the echo comes back.
    let client = converse_with_echo(client, "through relay-mio", 50, 45);
    assert!(xcvr.metric("ufrag_transceiver_echoed_audio_packets_total") >= 45.0);

    let location = client.location.clone().unwrap();
    assert_eq!(
        http_request(xcvr.http, "DELETE", &location, None, &[])
            .unwrap()
            .status,
        204
    );
    assert_eq!(
        http_request(xcvr.http, "DELETE", &location, None, &[])
            .unwrap()
            .status,
        404
    );
    assert_eq!(xcvr.metric("ufrag_transceiver_sessions_active"), 0.0);
    assert_eq!(
        xcvr.metric("ufrag_transceiver_sessions_ended_total{reason=\"deleted\"}"),
        1.0
    );
}

#[test]
fn a_client_whose_network_blocks_udp_talks_over_ice_tcp_through_the_relay() {
    let ip = unique_ip();
    let tcp_vip = SocketAddr::from((ip, 4443));
    let relay = TestRelay::start_on(ip, &["--tcp-vip", &tcp_vip.to_string()]);
    let xcvr = Transceiver::start(Some(relay.vip), &["--advertise-tcp", &tcp_vip.to_string()]);
    let mut client = Client::over_tcp(unique_ip(), tcp_vip);
    let r = client.signal(xcvr.http);
    assert_eq!(r.status, 201, "{}", r.body);
    let tcp_line = r
        .body
        .lines()
        .find(|l| l.contains("tcptype passive"))
        .unwrap_or_else(|| panic!("a passive TCP candidate in the answer:\n{}", r.body));
    assert!(
        tcp_line.to_ascii_uppercase().contains(&format!(
            "{} {} TYP HOST",
            tcp_vip.ip(),
            tcp_vip.port()
        )),
        "the relay's TCP VIP: {tcp_line}"
    );
    let udp_line = r
        .body
        .lines()
        .find(|l| l.starts_with("a=candidate") && l.to_ascii_lowercase().contains(" udp "))
        .expect("the UDP candidate stays");
    let priority = |line: &str| -> u64 { line.split(' ').nth(3).unwrap().parse().unwrap() };
    assert!(
        priority(udp_line) > priority(tcp_line),
        "TCP is the last resort: {udp_line} / {tcp_line}"
    );

    let client = converse_with_echo(client, "over ICE-TCP through relay-mio", 50, 45);
    let relay_metric = |name: &str| ufrag_testkit::http::metric(None, relay.metrics, name);
    assert!(
        relay_metric("ufrag_relay_tcp_forwarded_messages_total{worker=\"0\",direction=\"in\"}")
            >= 50.0
    );
    assert!(
        relay_metric("ufrag_relay_tcp_forwarded_messages_total{worker=\"0\",direction=\"out\"}")
            >= 45.0
    );
    assert_eq!(
        relay_metric("ufrag_relay_forwarded_datagrams_total"),
        0.0,
        "nothing went over UDP"
    );
    assert_eq!(relay_metric("ufrag_relay_tcp_connections_active"), 1.0);
    drop(client);
}

/// Bundles both ways on the internal leg (relay-mio `--bundle-to`, the transceiver's
/// `--bundle-to`): a session connects and is echoed, and bundles went each way.
#[test]
fn a_session_through_a_relay_that_bundles_both_ways_is_echoed() {
    let relay = TestRelay::start(&["--bundle-to", "127.0.0.0/8"]);
    let xcvr = Transceiver::start(Some(relay.vip), &["--bundle-to", "127.0.0.0/8"]);
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    let mut client = converse_with_echo(client, "bundled both ways", 50, 45);
    let relay_metric = |name: &str| {
        let body = http_request(relay.metrics, "GET", "/metrics", None, &[])
            .unwrap()
            .body;
        ufrag_testkit::http::metric_sum(&body, name)
    };
    // Paced audio reaches the relay one datagram per wakeup on a quiet host, so there is
    // nothing to bundle toward the transceiver. Bursts of back-to-back datagrams are read
    // in one batch; a bounded number of them is sent until the relay has bundled one.
    const BURSTS: usize = 20;
    let mut bursts = 0;
    while relay_metric("ufrag_relay_bundles_sent_total") == 0.0 && bursts < BURSTS {
        assert_eq!(client.send_audio_burst(16), 16, "str0m takes the burst");
        bursts += 1;
        for _ in 0..25 {
            client.step();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    let (sent, received) = (
        relay_metric("ufrag_relay_bundles_sent_total"),
        relay_metric("ufrag_relay_bundles_received_total"),
    );
    eprintln!("bundles: relay sent {sent}, received {received}, after {bursts} bursts");
    assert!(
        sent > 0.0 && received > 0.0,
        "sent {sent}, received {received}"
    );
    assert_eq!(
        relay_metric(
            "ufrag_relay_dropped_datagrams_total{worker=\"0\",reason=\"frame_bad_bundle\"}"
        ),
        0.0
    );
}
