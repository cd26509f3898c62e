//! End to end: a str0m client → relay-mio → transceiver, over real UDP on loopback.

mod support;

use std::time::{Duration, Instant};

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

    let mut clients = vec![client];
    run_until(
        &mut clients,
        "ICE + DTLS connected, events channel open",
        |c| c.connected_at.is_some() && c.channel_open,
    );
    run_until(&mut clients, "session.created", |c| {
        c.messages.iter().any(|m| m.contains("session.created"))
    });
    assert!(clients[0].send_text(r#"{"type":"ping","id":7}"#));
    run_until(&mut clients, "pong", |c| {
        c.messages.iter().any(|m| m == r#"{"type":"pong","id":7}"#)
    });

    // 50 packets of audio (1 s), paced at 20 ms; the echo comes back.
    let start = Instant::now();
    for i in 0..50 {
        while start.elapsed() < Duration::from_millis(20 * i) {
            clients[0].step();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(clients[0].send_audio());
    }
    run_until(&mut clients, "echoed audio", |c| c.audio_received >= 45);
    assert!(xcvr.metric("ufrag_transceiver_audio_echoed_total") >= 45.0);

    let location = clients[0].location.clone().unwrap();
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
