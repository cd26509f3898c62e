//! Signaling: each bad input gets its status code; CORS; capacity; bearer token; session
//! tokens (each refusal's status and count, single use); frames
//! from outside the relay networks are dropped and counted; the page's JavaScript parses.

mod support;

use support::*;
use ufrag_common::frame::FrameHeader;

#[test]
fn each_bad_signaling_input_gets_its_status_code() {
    let xcvr = Transceiver::start(Some("127.0.0.1:3478".parse().unwrap()), &[]);
    let post = |ct: &str, body: &str| {
        http_request(xcvr.http, "POST", "/v1/sessions", Some((ct, body)), &[]).unwrap()
    };

    let garbage = post("application/sdp", "this is not SDP");
    assert_eq!(garbage.status, 400);
    assert!(
        garbage.body.starts_with("malformed SDP offer"),
        "{}",
        garbage.body
    );
    assert_eq!(garbage.body.lines().count(), 1, "one-line reason");

    let no_audio = post("application/sdp", &offer_without_audio());
    assert_eq!(
        (no_audio.status, no_audio.body.trim()),
        (400, "the offer has no audio")
    );

    let client = new_client();
    let pcmu_only = client.offer.replace("opus/48000/2", "PCMU/8000");
    let no_opus = post("application/sdp", &pcmu_only);
    assert_eq!(no_opus.status, 400, "{}", no_opus.body);
    assert!(no_opus.body.contains("Opus"), "{}", no_opus.body);

    assert_eq!(post("application/json", &client.offer).status, 415);
    assert_eq!(
        http_request(
            xcvr.http,
            "DELETE",
            "/v1/sessions/00000000000000ff",
            None,
            &[]
        )
        .unwrap()
        .status,
        404
    );
    assert_eq!(
        http_request(xcvr.http, "DELETE", "/v1/sessions/not-hex", None, &[])
            .unwrap()
            .status,
        404
    );
    assert_eq!(
        http_request(xcvr.http, "GET", "/v1/sessions", None, &[])
            .unwrap()
            .status,
        405
    );
    assert_eq!(
        http_request(xcvr.http, "GET", "/nowhere", None, &[])
            .unwrap()
            .status,
        404
    );

    let preflight = http_request(
        xcvr.http,
        "OPTIONS",
        "/v1/sessions",
        None,
        &[("Origin", "https://app.example")],
    )
    .unwrap();
    assert_eq!(preflight.status, 204);
    assert_eq!(preflight.header("Access-Control-Allow-Origin"), Some("*"));
    assert!(
        preflight
            .header("Access-Control-Allow-Methods")
            .unwrap()
            .contains("POST")
    );
    assert!(
        preflight
            .header("Access-Control-Expose-Headers")
            .unwrap()
            .contains("Location")
    );
    // Metrics and health are not for other origins.
    for path in ["/metrics", "/readyz", "/healthz"] {
        let r = http_request(
            xcvr.http,
            "GET",
            path,
            None,
            &[("Origin", "https://evil.example")],
        )
        .unwrap();
        assert_eq!(r.header("Access-Control-Allow-Origin"), None, "{path}");
    }
    assert_eq!(
        xcvr.metric("ufrag_transceiver_sessions_created_total"),
        0.0,
        "no bad input made a session"
    );
}

#[test]
fn at_capacity_signaling_answers_503_with_retry_after() {
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--max-sessions-per-worker", "1"],
    );
    let mut first = new_client();
    assert_eq!(first.signal(xcvr.http).status, 201);
    let mut second = new_client();
    let r = second.signal(xcvr.http);
    assert_eq!(r.status, 503);
    assert!(r.header("Retry-After").is_some());
    // Deleting the first frees the slot.
    let location = first.location.clone().unwrap();
    assert_eq!(
        http_request(xcvr.http, "DELETE", &location, None, &[])
            .unwrap()
            .status,
        204
    );
    assert_eq!(new_client().signal(xcvr.http).status, 201);
}

#[test]
fn a_configured_bearer_token_is_required() {
    let xcvr = Transceiver::start_with_env(
        Some("127.0.0.1:3478".parse().unwrap()),
        &[],
        &[("UFRAG_TRANSCEIVER_TOKEN", "s3cret")],
    );
    let client = new_client();
    let body = Some(("application/sdp", client.offer.as_str()));
    assert_eq!(
        http_request(xcvr.http, "POST", "/v1/sessions", body, &[])
            .unwrap()
            .status,
        401
    );
    assert_eq!(
        http_request(
            xcvr.http,
            "POST",
            "/v1/sessions",
            body,
            &[("Authorization", "Bearer nope")]
        )
        .unwrap()
        .status,
        401
    );
    let ok = http_request(
        xcvr.http,
        "POST",
        "/v1/sessions",
        body,
        &[("Authorization", "Bearer s3cret")],
    )
    .unwrap();
    assert_eq!(ok.status, 201);
    let location = ok.header("Location").unwrap().to_string();
    assert_eq!(
        http_request(xcvr.http, "DELETE", &location, None, &[])
            .unwrap()
            .status,
        401
    );
    assert_eq!(
        http_request(
            xcvr.http,
            "DELETE",
            &location,
            None,
            &[("Authorization", "Bearer s3cret")]
        )
        .unwrap()
        .status,
        204
    );
}

/// Session tokens: the app's server mints one per user (here with `ufrag-token`, the
/// documented helper); each bad token gets its documented status and reason, counted; a
/// single-use token is spent only on a session made; a user acts only on their own
/// sessions; and the server-to-server bearer token still works beside them.
#[test]
fn session_tokens_admit_their_user_once_and_each_refusal_is_counted() {
    use ufrag_model_protocol::messages::SessionClaims;
    use ufrag_transceiver::session_token::{TokenAlgorithm, TokenRequest, mint};
    let (secret, flags) = session_token_secret("signaling");
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend([
        "--max-sessions-per-worker",
        "1",
        "--max-sessions-per-owner",
        "1",
    ]);
    let xcvr = Transceiver::start_with_env(
        Some("127.0.0.1:3478".parse().unwrap()),
        &flags,
        &[("UFRAG_TRANSCEIVER_TOKEN", "s3cret")],
    );
    let client = new_client();
    let post = |offer: &str, bearer: Option<&str>| {
        let auth = bearer.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        http_request(
            xcvr.http,
            "POST",
            "/v1/sessions",
            Some(("application/sdp", offer)),
            &headers,
        )
        .unwrap()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let key = std::fs::read(&secret).unwrap();
    let minted = |audience: &str, issued_at_s: u64, key: &[u8]| {
        let request = TokenRequest {
            audience: audience.into(),
            issued_at_s,
            lifetime_s: 60,
            id: format!("{audience}-{issued_at_s}"),
            claims: SessionClaims::default(),
        };
        mint(TokenAlgorithm::Hs256, key, &request).unwrap()
    };
    let cases = [
        (None, 401, "missing"),
        (Some("not-a-token".to_string()), 401, "malformed"),
        (
            Some(minted(
                TOKEN_AUDIENCE,
                now,
                b"some-other-secret-some-other-secret!",
            )),
            401,
            "bad_signature",
        ),
        (
            Some(minted(TOKEN_AUDIENCE, now - 3600, &key)),
            401,
            "expired",
        ),
        (
            Some(minted("another-app", now, &key)),
            403,
            "wrong_audience",
        ),
    ];
    for (token, status, reason) in &cases {
        let refused = post(&client.offer, token.as_deref());
        assert_eq!(refused.status, *status, "{reason}: {}", refused.body);
        let www = refused.header("WWW-Authenticate").map(str::to_string);
        match *status {
            401 if *reason == "missing" => assert_eq!(www.as_deref(), Some("Bearer")),
            401 => assert!(
                www.as_deref()
                    .is_some_and(|w| w.contains(&format!("error_description=\"{reason}\""))),
                "{reason}: {www:?}"
            ),
            _ => assert_eq!(www, None, "{reason}"),
        }
    }

    let token = mint_with_helper(&secret, &["--subject", "alice"]);
    let bearer = format!("Bearer {token}");
    let delete = |location: &str, authorization: &str| {
        http_request(
            xcvr.http,
            "DELETE",
            location,
            None,
            &[("Authorization", authorization)],
        )
        .unwrap()
        .status
    };
    // An offer refused for its own fault does not spend a single-use token …
    assert_eq!(post("this is not SDP", Some(&token)).status, 400);
    // … nor does a transceiver too full to take the session (one session per worker,
    // taken here by the app's server with the bearer token).
    let server_session = post(&new_client().offer, Some("s3cret"));
    assert_eq!(server_session.status, 201, "{}", server_session.body);
    assert_eq!(post(&client.offer, Some(&token)).status, 503);
    let server_location = server_session.header("Location").unwrap().to_string();
    assert_eq!(delete(&server_location, "Bearer s3cret"), 204);
    let admitted = post(&client.offer, Some(&token));
    assert_eq!(admitted.status, 201, "{}", admitted.body);
    let reused = post(&new_client().offer, Some(&token));
    assert_eq!(
        (reused.status, reused.body.trim()),
        (403, "session token refused: already used")
    );
    // Another user's token finds no such session; alice's own (this one, or a fresh one
    // once it expires) ends it.
    let location = admitted.header("Location").unwrap().to_string();
    let mallory = mint_with_helper(&secret, &["--subject", "mallory"]);
    assert_eq!(delete(&location, &format!("Bearer {mallory}")), 404);
    // One live session per user here: alice's second token waits for her first to end.
    let second = mint_with_helper(&secret, &["--subject", "alice"]);
    let capped = post(&new_client().offer, Some(&second));
    assert_eq!(
        (capped.status, capped.body.trim()),
        (429, "too many live sessions for this user")
    );
    assert_eq!(delete(&location, &bearer), 204);
    let after_end = post(&new_client().offer, Some(&second));
    assert_eq!(after_end.status, 201, "{}", after_end.body);

    let counted = |reason: &str| {
        xcvr.metric(&format!(
            "ufrag_transceiver_session_token_refusals_total{{reason=\"{reason}\"}}"
        ))
    };
    for (_, _, reason) in &cases {
        assert_eq!(counted(reason), 1.0, "{reason}");
    }
    assert_eq!(counted("reused"), 1.0);
    assert_eq!(
        xcvr.metric("ufrag_transceiver_http_refusals_total{reason=\"owner_session_cap\"}"),
        1.0
    );
    assert_eq!(
        xcvr.metric("ufrag_transceiver_session_tokens_accepted_total"),
        2.0
    );
    let _ = std::fs::remove_file(secret);
}

/// The Python that docs/model-protocol.md gives an app's server mints tokens the
/// transceiver admits, with their claims: the page's example is run as written, with
/// PyJWT from PyPI (`$UFRAG_MODEL_PYTHON` or `target/model-venv/bin/python`, made by
/// scripts/test.sh; missing, the test fails saying so).
#[test]
fn the_documented_python_mints_tokens_the_transceiver_admits() {
    use ufrag_transceiver::session_token::{SessionTokens, TokenAlgorithm, TokenRules};
    let python = model_python();
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/model-protocol.md"
    ))
    .unwrap();
    let example = page
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a Python example in docs/model-protocol.md");
    let secret = "a-shared-secret-of-at-least-32-bytes!";
    let script = format!(
        "{example}\nprint(session_token({secret:?}, \"py-user\", route=\"agent/py\", \
         metadata={{\"plan\": \"pro\"}}))\n"
    );
    let out = std::process::Command::new(&python)
        .args(["-c", &script])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap();
    let verifier = SessionTokens::new(
        secret.as_bytes(),
        TokenRules {
            algorithm: TokenAlgorithm::Hs256,
            audience: "ufrag-relay".into(),
            max_lifetime_s: 600,
            single_use: true,
        },
    )
    .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = verifier
        .admit(token.trim(), now)
        .expect("the token is admitted");
    assert_eq!(claims.subject.as_deref(), Some("py-user"));
    assert_eq!(claims.route.as_deref(), Some("agent/py"));
    assert_eq!(claims.metadata, Some(serde_json::json!({"plan": "pro"})));
}

#[test]
fn frames_from_a_non_relay_source_are_dropped_and_counted() {
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--allow-relay-net", "127.250.0.0/16"],
    );
    let outsider = std::net::UdpSocket::bind((unique_ip(), 0)).unwrap();
    let h = FrameHeader::new(
        "198.51.100.7:5000".parse().unwrap(),
        "127.0.0.1:3478".parse().unwrap(),
    );
    let mut frame = vec![0u8; h.encoded_len()];
    h.emit(&mut frame).unwrap();
    frame.extend_from_slice(&[0x80; 40]);
    for _ in 0..3 {
        outsider.send_to(&frame, xcvr.worker).unwrap();
    }
    let deadline = std::time::Instant::now() + WAIT;
    while xcvr
        .metric("ufrag_transceiver_dropped_datagrams_total{reason=\"frame_source_not_allowed\"}")
        < 3.0
    {
        assert!(std::time::Instant::now() < deadline, "drops never counted");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // From an allowed relay network, a frame for an unknown client is counted as such.
    let relay = std::net::UdpSocket::bind(("127.250.1.1", 0)).unwrap();
    relay.send_to(&frame, xcvr.worker).unwrap();
    while xcvr.metric("ufrag_transceiver_dropped_datagrams_total{reason=\"no_session\"}") < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no_session never counted"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Bundles (several frames in one datagram) from a relay: each frame is counted and
/// handled as a datagram of its own, a bad frame inside is that frame's drop alone, and
/// a bundle that is not well-formed, or comes from outside the relay networks, is one
/// datagram dropped whole.
#[test]
fn a_bundles_frames_are_handled_one_by_one_and_a_malformed_bundle_is_dropped_whole() {
    use ufrag_common::bundle::BundleWriter;
    let xcvr = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--allow-relay-net", "127.250.0.0/16"],
    );
    let relay = std::net::UdpSocket::bind(("127.250.1.2", 0)).unwrap();
    let outsider = std::net::UdpSocket::bind((unique_ip(), 0)).unwrap();
    let h = FrameHeader::new(
        "198.51.100.7:5000".parse().unwrap(),
        "127.0.0.1:3478".parse().unwrap(),
    );
    let mut buf = [0u8; 1472];
    let mut writer = BundleWriter::new(&mut buf);
    for _ in 0..3 {
        writer.push(&h, &[0x80; 40]).unwrap();
    }
    let good = writer.finish().unwrap().to_vec();
    // The second frame's version made unknown: it alone is dropped as such.
    let mut bad_inside = good.clone();
    let second_frame = 4 + (2 + h.encoded_len() + 40) + 2;
    bad_inside[second_frame] = 0xF7;
    // A count the bytes do not hold.
    let mut malformed = good.clone();
    malformed[1] = 4;
    let drops = |reason: &str| {
        xcvr.metric(&format!(
            "ufrag_transceiver_dropped_datagrams_total{{reason=\"{reason}\"}}"
        ))
    };
    let datagrams_in = || xcvr.metric("ufrag_transceiver_datagrams_total{direction=\"in\"}");
    let before = datagrams_in();
    relay.send_to(&good, xcvr.worker).unwrap();
    relay.send_to(&bad_inside, xcvr.worker).unwrap();
    relay.send_to(&malformed, xcvr.worker).unwrap();
    outsider.send_to(&good, xcvr.worker).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    // 3 + 3 frames, one malformed bundle, one from outside: each counted in, then
    // dropped (a datagram is counted in before its drop, so wait for the drops).
    let reasons = [
        "no_session",
        "frame_unknown_version",
        "frame_bad_bundle",
        "frame_source_not_allowed",
    ];
    while reasons.iter().map(|r| drops(r)).sum::<f64>() < 8.0 {
        assert!(std::time::Instant::now() < deadline, "not all counted");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(datagrams_in() - before, 8.0);
    assert_eq!(
        drops("no_session"),
        5.0,
        "each good frame for an unknown client"
    );
    assert_eq!(drops("frame_unknown_version"), 1.0);
    assert_eq!(drops("frame_bad_bundle"), 1.0);
    assert_eq!(drops("frame_source_not_allowed"), 1.0);
}

#[test]
fn the_demo_page_is_served_and_its_javascript_parses() {
    let xcvr = Transceiver::start(Some("127.0.0.1:3478".parse().unwrap()), &[]);
    let page = http_request(xcvr.http, "GET", "/", None, &[]).unwrap();
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<button id=\"talk\">Talk</button>"));
    let js = http_request(xcvr.http, "GET", "/app.js", None, &[]).unwrap();
    assert_eq!(js.status, 200);
    for needle in [
        "getUserMedia",
        "createDataChannel(\"events\")",
        "/v1/sessions",
        "getStats",
        "DELETE",
    ] {
        assert!(js.body.contains(needle), "app.js uses {needle}");
    }
    let path = std::env::temp_dir().join(format!("app-{}.js", std::process::id()));
    std::fs::write(&path, &js.body).unwrap();
    let out = std::process::Command::new("node")
        .arg("--check")
        .arg(&path)
        .output()
        .expect(
            "node is needed to syntax-check the page's JavaScript (scripts/test.sh installs it)",
        );
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "node --check: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
