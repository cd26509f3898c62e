//! End to end: a str0m client → relay-mio → transceiver, over real UDP on loopback.

mod support;

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
    assert!(xcvr.metric("ufrag_transceiver_audio_echoed_total") >= 45.0);

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
