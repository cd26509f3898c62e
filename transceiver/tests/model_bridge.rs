//! The model seam over the network: a str0m client → relay-mio → the transceiver →
//! `--model ws://…` → the reference echo backend (`ufrag-model-servers`) → back, and what
//! happens when that backend is down at start, dies mid-session, is slow, floods, sends
//! what it should not, or ends a session itself.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::*;
use ufrag_model_protocol::wire::{self, WireMessage};
use ufrag_model_servers::{Backend, Options, TlsIdentity, Voice};

/// How long a condition that depends on the bridge may take (reconnects back off up to
/// 5 s with jitter).
const BRIDGE_WAIT: Duration = Duration::from_secs(20);

/// A loopback address and free port for a backend that may not be running yet.
fn backend_addr() -> SocketAddr {
    let ip = unique_ip();
    SocketAddr::from((ip, free_tcp_port(ip)))
}

fn start_backend(addr: SocketAddr, options: Options) -> Backend {
    Backend::start(addr, options).expect("the backend listens")
}

/// Polls `condition` every 20 ms until it holds or `BRIDGE_WAIT` passes.
fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + BRIDGE_WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Steps `client` while waiting for `condition` on it.
fn step_until(client: &mut Client, what: &str, condition: impl Fn(&Client) -> bool) {
    let deadline = Instant::now() + BRIDGE_WAIT;
    while !condition(client) {
        client.step();
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The session id in a session's Location (`/v1/sessions/<16 hex>`).
fn session_of(client: &Client) -> String {
    let location = client.location.clone().expect("signaled");
    location.rsplit('/').next().unwrap().to_string()
}

/// Sends `frames` audio frames paced at 20 ms, stepping the client.
fn talk(client: &mut Client, frames: u32) {
    let start = Instant::now();
    for i in 0..frames {
        while start.elapsed() < Duration::from_millis(20 * u64::from(i)) {
            client.step();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(client.send_audio());
    }
}

/// DELETEs `client`'s session: 204.
fn delete(xcvr: &Transceiver, client: &Client) {
    let location = client.location.clone().expect("signaled");
    let deleted = http_request(xcvr.http, "DELETE", &location, None, &[]).unwrap();
    assert_eq!(deleted.status, 204);
}

fn status(xcvr: &Transceiver, path: &str) -> u16 {
    http_request(xcvr.http, "GET", path, None, &[])
        .map(|r| r.status)
        .unwrap_or(0)
}

#[test]
fn a_session_talks_to_an_external_backend_through_the_relay_and_ends_there_once() {
    let backend = start_backend(backend_addr(), Options::echo());
    let relay = TestRelay::start(&[]);
    let xcvr = Transceiver::start(Some(relay.vip), &["--model", &backend.url()]);
    assert_eq!(xcvr.metric("ufrag_transceiver_model_connections"), 1.0);

    let mut client = new_client();
    let r = client.signal(xcvr.http);
    assert_eq!(r.status, 201, "{}", r.body);
    // session.created comes from the backend, the pong too, and 45 of 50 frames back.
    let client = converse_with_echo(client, "through the backend", 50, 45);
    let session = session_of(&client);
    delete(&xcvr, &client);
    eventually("the backend hears the end", || {
        backend.log().iter().any(|l| l.starts_with("ended"))
    });
    assert_eq!(
        backend.log(),
        [
            "hello worker=0".to_string(),
            format!("started {session}"),
            format!("ended {session} deleted"),
        ],
        "one hello, one start, one end"
    );
    assert_eq!(
        backend.malformed(),
        0,
        "everything the transceiver sent was readable"
    );
    assert_eq!(
        xcvr.metric("ufrag_transceiver_model_refused_messages_total"),
        0.0,
        "and everything the backend sent"
    );
}

#[test]
fn a_speaking_backend_answers_an_utterance_with_its_own_voice_not_an_echo() {
    let backend = start_backend(
        backend_addr(),
        Options {
            voice: Voice::Speaks,
            ..Options::echo()
        },
    );
    let relay = TestRelay::start(&[]);
    let xcvr = Transceiver::start(Some(relay.vip), &["--model", &backend.url()]);
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    step_until(&mut client, "connected, events open", |c| {
        c.connected_at.is_some() && c.channel_open
    });
    // One utterance (a little more than the backend waits for), then silence.
    talk(&mut client, ufrag_model_servers::UTTERANCE_FRAMES + 10);
    step_until(&mut client, "model.said", |c| {
        c.messages.iter().any(|m| m.contains("model.said"))
    });
    let phrase = ufrag_model_servers::phrase();
    step_until(&mut client, "the phrase's audio", |c| {
        c.audio_received * 10 >= phrase.len() * 9
    });
    // Every packet that came back is one of the phrase's, in order, and none is the
    // client's own (80 bytes of 0xF8).
    let own = vec![0xF8u8; 80];
    assert!(client.audio_payloads.iter().all(|p| p != &own), "no echo");
    let mut next = 0;
    for received in &client.audio_payloads {
        let at = phrase[next..]
            .iter()
            .position(|p| p == received)
            .unwrap_or_else(|| panic!("a packet not in the phrase (after {next})"));
        next += at + 1;
    }
    assert_eq!(backend.said_frames(), phrase.len() as u64);
    assert!(
        client.messages.contains(&format!(
            r#"{{"type":"model.said","frames":{}}}"#,
            phrase.len()
        )),
        "{:?}",
        client.messages
    );
}

#[test]
fn a_backend_down_at_start_keeps_readiness_off_and_refuses_sessions_until_it_comes() {
    let addr = backend_addr();
    let mut xcvr = Transceiver::spawn(None, &["--model", &format!("ws://{addr}/")], &[]);
    eventually("the transceiver is live", || {
        status(&xcvr, "/healthz") == 200
    });
    assert_eq!(status(&xcvr, "/readyz"), 503, "not ready without its model");
    let mut client = new_client();
    let r = client.signal(xcvr.http);
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.body.contains("model backend is unavailable"),
        "{}",
        r.body
    );
    assert!(r.header("Retry-After").is_some());
    assert!(xcvr.metric("ufrag_transceiver_model_connects_total{result=\"failed\"}") >= 1.0);

    let backend = start_backend(addr, Options::echo());
    xcvr.wait_ready();
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    converse_with_echo(client, "once the backend came", 25, 20);
    assert_eq!(backend.log()[0], "hello worker=0");
}

#[test]
fn live_sessions_resume_when_the_backend_dies_and_comes_back() {
    let addr = backend_addr();
    let backend = start_backend(addr, Options::echo());
    let xcvr = Transceiver::start(None, &["--model", &format!("ws://{addr}/")]);
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    let mut client = converse_with_echo(client, "before the backend dies", 25, 20);
    let session = session_of(&client);

    backend.stop();
    step_until(&mut client, "model.unavailable on events", |c| {
        c.messages.iter().any(|m| m.contains("model.unavailable"))
    });
    assert_eq!(
        status(&xcvr, "/readyz"),
        503,
        "not ready while the model is away"
    );
    assert_eq!(
        xcvr.metric("ufrag_transceiver_model_disconnects_total"),
        1.0
    );

    let backend = start_backend(addr, Options::echo());
    step_until(&mut client, "model.available on events", |c| {
        c.messages.iter().any(|m| m.contains("model.available"))
    });
    assert_eq!(
        backend.log(),
        ["hello worker=0".to_string(), format!("resumed {session}")],
        "the new connection is told the session exists"
    );
    let before = client.audio_received;
    talk(&mut client, 25);
    step_until(&mut client, "echoes from the new connection", |c| {
        c.audio_received >= before + 20
    });
    assert_eq!(status(&xcvr, "/readyz"), 200);

    delete(&xcvr, &client);
    eventually("the end reaches the new connection", || {
        backend.log().len() == 3
    });
    assert_eq!(backend.log()[2], format!("ended {session} deleted"));
}

/// Sends 3,000 frames, one a millisecond (str0m refuses faster writes): more than the
/// kernel's buffers (about 1,300 messages: the bridge's small send buffer, the backend's
/// 4 KiB receive buffer) and the session's queue of 50 hold while nobody reads; returns
/// once the transceiver has dropped audio at its full queue.
fn fill_the_queue_to_a_backend_that_reads_nothing(client: &mut Client, xcvr: &Transceiver) {
    let start = Instant::now();
    let mut sent = 0;
    for i in 0..3000u64 {
        while start.elapsed() < Duration::from_millis(i) {
            client.step();
            std::thread::sleep(Duration::from_micros(200));
        }
        sent += usize::from(client.send_audio());
    }
    assert!(sent >= 2500, "the client sent {sent} frames");
    eventually("audio dropped at the full queue", || {
        xcvr.metric("ufrag_transceiver_model_dropped_messages_total{reason=\"queue_full\"}") > 0.0
    });
}

#[test]
fn a_slow_backend_costs_a_bounded_queue_and_the_oldest_audio_is_dropped() {
    let backend = start_backend(
        backend_addr(),
        Options {
            receive_buffer: Some(4096),
            ..Options::echo()
        },
    );
    let xcvr = Transceiver::start(None, &["--model", &backend.url()]);
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    let mut client = converse_with_echo(client, "before the backend slows", 10, 8);

    backend.set_reading(false);
    fill_the_queue_to_a_backend_that_reads_nothing(&mut client, &xcvr);
    assert_eq!(xcvr.metric("ufrag_transceiver_sessions_active"), 1.0);

    backend.set_reading(true);
    let before = client.audio_received;
    talk(&mut client, 25);
    step_until(&mut client, "echoes once the backend reads again", |c| {
        c.audio_received > before
    });
    assert_eq!(
        xcvr.metric("ufrag_transceiver_model_disconnects_total"),
        0.0
    );
}

#[test]
fn a_backend_that_stops_reading_cannot_hold_the_transceivers_shutdown() {
    let backend = start_backend(
        backend_addr(),
        Options {
            receive_buffer: Some(4096),
            ..Options::echo()
        },
    );
    let mut xcvr = Transceiver::start(None, &["--model", &backend.url(), "--drain-time", "0s"]);
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    let mut client = converse_with_echo(client, "before the backend stops reading", 10, 8);
    backend.set_reading(false);
    fill_the_queue_to_a_backend_that_reads_nothing(&mut client, &xcvr);
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &xcvr.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    // The bridge's writes get SHUTDOWN_WRITE each (three at most) once told to stop;
    // without that bound the process never exits. The wait is a liveness bound only.
    let deadline = Instant::now() + BRIDGE_WAIT;
    let status = loop {
        if let Some(status) = xcvr.child.try_wait().expect("the transceiver's status") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the transceiver did not exit while its backend read nothing"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "it exits 0");
}

#[test]
fn malformed_and_oversized_backend_messages_are_counted_and_the_session_lives() {
    let addr = backend_addr();
    let backend = start_backend(addr, Options::echo());
    let xcvr = Transceiver::start(None, &["--model", &backend.url()]);
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    let mut client = converse_with_echo(client, "before the junk", 10, 8);
    let session = session_of(&client);

    let junk = [
        (WireMessage::Text("not json".into()), "not_json"),
        (
            WireMessage::Text(r#"{"type":"dance"}"#.into()),
            "unknown_type",
        ),
        (
            WireMessage::Text(r#"{"type":"event","session":"nope","data":"x"}"#.into()),
            "bad_session",
        ),
        (WireMessage::Binary(vec![7; 20]), "bad_audio"),
        (
            WireMessage::Text(format!(
                r#"{{"type":"session.end","session":"{session}","reason":"Not Allowed"}}"#
            )),
            "bad_reason",
        ),
    ];
    for (message, _) in &junk {
        backend.send_to_all(message.clone());
    }
    for (_, reason) in &junk {
        eventually(reason, || {
            xcvr.metric(&format!(
                "ufrag_transceiver_model_refused_messages_total{{reason=\"{reason}\"}}"
            )) == 1.0
        });
    }
    // An event for another session goes nowhere; one for this session arrives.
    backend.send_to_all(wire::event(0x0123, r#"{"type":"stray"}"#));
    let own = u64::from_str_radix(&session, 16).unwrap();
    backend.send_to_all(wire::event(own, r#"{"type":"hello.from.model"}"#));
    step_until(&mut client, "the model's own event", |c| {
        c.messages.iter().any(|m| m.contains("hello.from.model"))
    });
    assert!(!client.messages.iter().any(|m| m.contains("stray")));

    // A message beyond the limit closes the connection; the bridge reconnects and the
    // session resumes.
    backend.send_to_all(WireMessage::Binary(vec![1; wire::MAX_MESSAGE_LEN + 1]));
    step_until(&mut client, "model.available after the reconnect", |c| {
        c.messages.iter().any(|m| m.contains("model.available"))
    });
    assert_eq!(
        xcvr.metric("ufrag_transceiver_model_disconnects_total"),
        1.0
    );
    assert_eq!(xcvr.metric("ufrag_transceiver_sessions_active"), 1.0);
    assert!(client.send_text(r#"{"type":"ping","id":99}"#));
    step_until(&mut client, "a pong after all that", |c| {
        c.messages.iter().any(|m| m == r#"{"type":"pong","id":99}"#)
    });
}

#[test]
fn the_backend_ends_a_session_and_an_idle_one_ends_at_the_backend_exactly_once() {
    let backend = start_backend(backend_addr(), Options::echo());
    let xcvr = Transceiver::start(None, &["--model", &backend.url(), "--idle-timeout", "2s"]);

    // The backend ends the first session.
    let mut first = new_client();
    assert_eq!(first.signal(xcvr.http).status, 201);
    let first = converse_with_echo(first, "the first session", 5, 3);
    let ended = session_of(&first);
    backend.send_to_all(WireMessage::Text(format!(
        r#"{{"type":"session.end","session":"{ended}","reason":"goodbye"}}"#
    )));
    eventually("the transceiver ends it", || {
        xcvr.metric("ufrag_transceiver_sessions_ended_total{reason=\"model_ended\"}") == 1.0
    });

    // The second goes quiet and ends idle.
    let mut second = new_client();
    assert_eq!(second.signal(xcvr.http).status, 201);
    let second = converse_with_echo(second, "the second session", 5, 3);
    let idle = session_of(&second);
    drop(second);
    eventually("the idle session ends", || {
        xcvr.metric("ufrag_transceiver_sessions_ended_total{reason=\"idle\"}") == 1.0
    });
    eventually("the backend hears of it", || {
        backend
            .log()
            .iter()
            .any(|l| l.starts_with(&format!("ended {idle}")))
    });
    let ends_of = |session: &str| {
        backend
            .log()
            .iter()
            .filter(|l| l.starts_with(&format!("ended {session}")))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(ends_of(&ended), [format!("ended {ended} model_ended")]);
    assert_eq!(ends_of(&idle), [format!("ended {idle} idle")]);
}

#[test]
fn a_wrong_token_is_refused_by_the_backend_and_the_transceiver_stays_unready() {
    let backend = start_backend(
        backend_addr(),
        Options {
            token: Some("the-right-token".into()),
            ..Options::echo()
        },
    );
    let wrong = Transceiver::spawn(
        None,
        &["--model", &backend.url()],
        &[("UFRAG_MODEL_TOKEN", "a-wrong-token")],
    );
    // The bridge connects before signaling listens: wait for both.
    eventually("the backend refuses it, the transceiver is live", || {
        backend.refused() >= 1 && status(&wrong, "/healthz") == 200
    });
    assert_eq!(status(&wrong, "/readyz"), 503);
    drop(wrong);

    let mut right = Transceiver::spawn(
        None,
        &["--model", &backend.url()],
        &[("UFRAG_MODEL_TOKEN", "the-right-token")],
    );
    right.wait_ready();
    let mut client = new_client();
    assert_eq!(client.signal(right.http).status, 201);
    converse_with_echo(client, "with the right token", 10, 8);
}

#[test]
fn a_wss_backend_is_trusted_through_the_ca_file_and_refused_without_it() {
    let addr = backend_addr();
    let certified = rcgen::generate_simple_self_signed(vec![addr.ip().to_string()]).unwrap();
    let cert_pem = certified.cert.pem();
    let backend = start_backend(
        addr,
        Options {
            tls: Some(TlsIdentity {
                cert_pem: cert_pem.clone().into_bytes(),
                key_pem: certified.signing_key.serialize_pem().into_bytes(),
            }),
            ..Options::echo()
        },
    );
    assert!(backend.url().starts_with("wss://"));

    // Not a certificate the web's roots vouch for: refused, not ready.
    let untrusting = Transceiver::spawn(None, &["--model", &backend.url()], &[]);
    eventually("a failed TLS connect", || {
        status(&untrusting, "/healthz") == 200
            && untrusting.metric("ufrag_transceiver_model_connects_total{result=\"failed\"}") >= 1.0
    });
    assert_eq!(status(&untrusting, "/readyz"), 503);
    drop(untrusting);

    let ca = std::env::temp_dir().join(format!(
        "model-ca-{}-{}.pem",
        std::process::id(),
        addr.port()
    ));
    std::fs::write(&ca, &cert_pem).unwrap();
    let xcvr = Transceiver::start(
        None,
        &[
            "--model",
            &backend.url(),
            "--model-ca-file",
            ca.to_str().unwrap(),
        ],
    );
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    converse_with_echo(client, "over wss", 10, 8);
    std::fs::remove_file(&ca).unwrap();
}

#[test]
fn bad_model_options_exit_2_naming_the_field() {
    for (args, field) in [
        (vec!["--model", "http://127.0.0.1:9/"], "`model`"),
        (
            vec!["--model", "echo", "--model-ca-file", "/etc/hostname"],
            "`model_token_file`, `model_ca_file`",
        ),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_transceiver"))
            .args(["--direct", "--bind", "127.0.0.1:0"])
            .args(&args)
            .env("UFRAG_RELAY_HINT_KEYS", KEYS)
            .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(field), "{args:?}: {stderr}");
    }
    // There is no flag for the token itself.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_transceiver"))
        .args(["--direct", "--bind", "127.0.0.1:0", "--model-token", "x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

/// The reference backend had no connection
/// cap and no handshake deadline, so silent TCP connections held memory and tasks for
/// ever. Now one beyond the cap is closed at accept, and one that has not finished its
/// handshakes within the deadline is closed; both are counted as refused.
#[test]
fn a_backend_closes_connections_beyond_its_cap_and_those_that_never_handshake() {
    use std::io::Read;
    use std::net::TcpStream;
    let backend = start_backend(
        backend_addr(),
        Options {
            max_connections: 2,
            handshake_timeout: Duration::from_secs(2),
            ..Options::echo()
        },
    );
    let addr: SocketAddr = backend
        .url()
        .trim_start_matches("ws://")
        .trim_end_matches('/')
        .parse()
        .expect("a ws:// URL of an address");
    let silent: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    eventually("both silent connections are open", || {
        backend.open_connections() == 2
    });
    let mut third = TcpStream::connect(addr).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        third.read(&mut byte).map_err(|e| e.kind()),
        Ok(0),
        "closed at accept"
    );
    for mut stream in silent {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(
            stream.read(&mut byte).map_err(|e| e.kind()),
            Ok(0),
            "closed after the handshake deadline"
        );
    }
    eventually("all three refused, none open", || {
        backend.refused() == 3 && backend.open_connections() == 0
    });
}

/// The Python reference backend (`examples/python-backend`, on PyPI's websockets) chooses
/// PCM16 at 16 kHz in its hello: it hears the client's Opus as 320-sample frames, and its
/// 1.01 s of a 440 Hz tone, sent at once in 100 ms chunks, reaches the client as 51 Opus
/// frames (the last half a frame padded when the mark after it flushes it) that decode to
/// that tone, and the mark is reached.
#[test]
fn a_python_backend_in_pcm16_hears_the_client_and_is_heard_as_opus() {
    use ufrag_model_protocol::audio::PcmRate;
    use ufrag_transceiver::pcm::{SessionPcm, tone_hz};
    let mut backend = PythonBackend::start(&["--audio", "pcm16/16000", "--speak", "1.01"]);
    let relay = TestRelay::start(&[]);
    let xcvr = Transceiver::start(Some(relay.vip), &["--model", &backend.url]);
    let hello = backend.wait_for("hello", BRIDGE_WAIT);
    assert_eq!(hello["audio"], "pcm16/16000");
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    step_until(&mut client, "connected, events open", |c| {
        c.connected_at.is_some() && c.channel_open
    });
    assert_eq!(backend.wait_for("said", BRIDGE_WAIT)["frames"], 51);
    // The client talks meanwhile (a second of 20 ms frames), and hears the tone.
    talk(&mut client, 50);
    step_until(&mut client, "the backend's speech", |c| {
        c.audio_received >= 51
    });
    assert_eq!(backend.wait_for("mark_played", BRIDGE_WAIT)["name"], "said");
    assert_eq!(client.audio_received, 51, "one Opus frame per 20 ms of PCM");
    let mut listener = SessionPcm::new(PcmRate::Khz48).unwrap();
    let mut heard = Vec::new();
    for packet in &client.audio_payloads {
        let samples = listener
            .decode(packet)
            .expect("the transceiver's Opus decodes");
        assert_eq!(samples.len(), 960, "20 ms at 48 kHz");
        heard.extend_from_slice(samples);
    }
    // The codec's lookahead delays the start: judge the second half.
    let hz = tone_hz(&heard[heard.len() / 2..], 48_000);
    assert!((430.0..450.0).contains(&hz), "the client heard {hz} Hz");
    delete(&xcvr, &client);
    let ended = backend.wait_for("ended", BRIDGE_WAIT);
    assert!(
        ended["heard_frames"].as_u64().unwrap() >= 45,
        "the backend heard the client's second: {ended}"
    );
    assert_eq!(
        ended["heard_sizes"],
        serde_json::json!([320]),
        "20 ms at 16 kHz"
    );
    assert_eq!(
        xcvr.metric("ufrag_transceiver_model_dropped_messages_total{reason=\"codec_error\"}"),
        0.0
    );
    assert_eq!(
        xcvr.metric("ufrag_transceiver_model_refused_messages_total"),
        0.0
    );
}
