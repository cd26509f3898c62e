//! Many sessions, direct mode, and a session that survives a relay restart via Redis.

mod support;

use std::time::{Duration, Instant};

use support::*;

/// Sends `packets` of audio from every client at 20 ms pacing.
fn talk(clients: &mut [Client], packets: u64) {
    let start = Instant::now();
    for i in 0..packets {
        while start.elapsed() < Duration::from_millis(20 * i) {
            for c in clients.iter_mut() {
                c.step();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for c in clients.iter_mut() {
            assert!(c.send_audio());
        }
    }
}

#[test]
fn fifty_concurrent_sessions_through_one_relay_and_one_worker_are_all_echoed() {
    let relay = TestRelay::start(&[]);
    let xcvr = Transceiver::start(Some(relay.vip), &["--workers", "1"]);
    let mut clients: Vec<Client> = (0..50).map(|_| new_client()).collect();
    for c in &mut clients {
        assert_eq!(c.signal(xcvr.http).status, 201);
    }
    run_until(&mut clients, "50 sessions connected", |c| {
        c.connected_at.is_some() && c.channel_open
    });
    talk(&mut clients, 25);
    run_until(&mut clients, "every session echoed", |c| {
        c.audio_received >= 20
    });
    assert_eq!(xcvr.metric("ufrag_transceiver_sessions_active"), 50.0);
}

#[test]
fn direct_mode_advertises_the_worker_and_works_without_a_relay() {
    let xcvr = Transceiver::start(None, &[]);
    let mut client = new_client();
    let r = client.signal(xcvr.http);
    assert_eq!(r.status, 201);
    assert!(
        r.body
            .contains(&format!("{} {}", xcvr.worker.ip(), xcvr.worker.port())),
        "candidate is the worker"
    );
    let mut clients = vec![client];
    run_until(&mut clients, "connected", |c| {
        c.connected_at.is_some() && c.channel_open
    });
    talk(&mut clients, 10);
    run_until(&mut clients, "echo", |c| c.audio_received >= 8);
}

#[test]
fn a_session_survives_a_relay_restart_with_redis() {
    let redis = RedisServer::start_at(unique_ip());
    let ip = unique_ip();
    let url = redis.url();
    let mut relay = TestRelay::start_on(ip, &["--redis-url", &url]);
    let xcvr = Transceiver::start(Some(relay.vip), &[]);
    let mut clients = vec![new_client()];
    assert_eq!(clients[0].signal(xcvr.http).status, 201);
    run_until(&mut clients, "connected", |c| {
        c.connected_at.is_some() && c.channel_open
    });
    talk(&mut clients, 5);
    run_until(&mut clients, "echo before restart", |c| {
        c.audio_received >= 4
    });
    std::thread::sleep(Duration::from_millis(100)); // let the route reach Redis

    relay.stop();
    let _relay = TestRelay::start_on(ip, &["--redis-url", &url]);
    let before = clients[0].audio_received;
    // SRTP continues; the relay restores the flow from Redis on the first packet, long
    // before the client's next consent check.
    talk(&mut clients, 15);
    run_until(&mut clients, "echo after restart", |c| {
        c.audio_received >= before + 10
    });
}

#[test]
fn an_ice_restart_gives_a_new_ufrag_that_routes_to_the_same_worker() {
    use ufrag_common::hint::{HintKeys, RoutingHint};

    let ip = unique_ip();
    let mut relay = TestRelay::start_on(ip, &[]);
    let xcvr = Transceiver::start(Some(relay.vip), &[]);
    let mut clients = vec![new_client()];
    assert_eq!(clients[0].signal(xcvr.http).status, 201);
    run_until(&mut clients, "connected", |c| {
        c.connected_at.is_some() && c.channel_open
    });
    talk(&mut clients, 5);
    run_until(&mut clients, "echo before restart", |c| {
        c.audio_received >= 4
    });

    let ufrag_of = |sdp: &str| {
        sdp.lines()
            .find_map(|l| l.strip_prefix("a=ice-ufrag:"))
            .unwrap()
            .trim()
            .to_string()
    };
    let old_ufrag = ufrag_of(clients[0].answer.as_deref().unwrap());

    // The relay restarts without a route cache: the old flow is gone, and only the next
    // STUN, which after the ICE restart carries the *new* ufrag, can bring it back.
    relay.stop();
    let _relay = TestRelay::start_on(ip, &[]);
    let stun_before = clients[0].stun_sent;
    let r = clients[0].ice_restart(xcvr.http);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("Content-Type"),
        Some("application/trickle-ice-sdpfrag")
    );
    let new_ufrag = ufrag_of(&r.body);
    assert_ne!(new_ufrag, old_ufrag);
    let keys = HintKeys::parse(KEYS).unwrap();
    let any = ["127.0.0.0/8".parse().unwrap()];
    let route = |u: &str| keys.verify(u.as_bytes(), &any).unwrap().hint;
    assert_eq!(route(&new_ufrag), route(&old_ufrag), "same worker");
    assert_eq!(
        route(&new_ufrag),
        RoutingHint {
            cluster: 0,
            transceiver: xcvr.worker
        }
    );

    let before = clients[0].audio_received;
    talk(&mut clients, 15);
    run_until(
        &mut clients,
        "echo after ICE restart through a fresh relay",
        |c| c.audio_received >= before + 10,
    );
    assert!(
        clients[0].stun_sent > stun_before,
        "connectivity checks with the new ufrag"
    );
    assert_eq!(xcvr.metric("ufrag_transceiver_ice_restarts_total"), 1.0);
}

#[test]
fn a_silent_session_ends_on_idle_and_is_counted() {
    let xcvr = Transceiver::start(None, &["--idle-timeout", "700ms"]);
    let mut clients = vec![new_client()];
    assert_eq!(clients[0].signal(xcvr.http).status, 201);
    run_until(&mut clients, "connected", |c| c.connected_at.is_some());
    // The client goes silent (no consent checks, no media).
    let deadline = Instant::now() + WAIT;
    while xcvr.metric("ufrag_transceiver_sessions_ended_total{reason=\"idle\"}") < 1.0 {
        assert!(Instant::now() < deadline, "idle session never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(xcvr.metric("ufrag_transceiver_sessions_active"), 0.0);
    let location = clients[0].location.clone().unwrap();
    assert_eq!(
        http_request(xcvr.http, "DELETE", &location, None, &[])
            .unwrap()
            .status,
        404,
        "already gone"
    );
}

#[test]
fn sigterm_refuses_new_sessions_and_drains_existing_ones_then_exits_0() {
    let mut xcvr = Transceiver::start(None, &["--drain-time", "1500ms"]);
    let mut clients = vec![new_client()];
    assert_eq!(clients[0].signal(xcvr.http).status, 201);
    run_until(&mut clients, "connected", |c| c.connected_at.is_some());
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &xcvr.child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + WAIT;
    while http_request(xcvr.http, "GET", "/readyz", None, &[]).map(|r| r.status) != Some(503) {
        assert!(Instant::now() < deadline, "readyz never went 503");
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused = new_client().signal(xcvr.http);
    assert_eq!(refused.status, 503);
    assert!(refused.header("Retry-After").is_some());
    let before = clients[0].audio_received;
    talk(&mut clients, 10);
    run_until(&mut clients, "echo while draining", |c| {
        c.audio_received >= before + 5
    });
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = xcvr.child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(0));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "transceiver did not exit after the drain"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The load client `perf sessions` uses for capacity: a talk recorded from the client's
/// own str0m session, played back on its socket, echoed through the relay; an echo counts
/// only once str0m has decrypted and authenticated it.
#[test]
fn a_recorded_talk_played_back_is_echoed_and_only_authentic_echoes_count() {
    const FRAMES: usize = 50;
    let relay = TestRelay::start(&[]);
    let xcvr = Transceiver::start(Some(relay.vip), &["--workers", "1"]);
    let mut clients = vec![new_client()];
    assert_eq!(clients[0].signal(xcvr.http).status, 201);
    run_until(&mut clients, "connected", |c| {
        c.connected_at.is_some() && c.channel_open
    });
    let mut client = clients.remove(0);
    let recording = client.record_talk(Duration::from_millis(3), FRAMES);
    let audio: Vec<Duration> = recording
        .iter()
        .filter(|d| d.audio)
        .map(|d| d.offset)
        .collect();
    assert_eq!(audio.len(), FRAMES, "one audio datagram per frame");
    assert_eq!(client.audio_sent, FRAMES);
    for (k, offset) in audio.iter().enumerate() {
        // Written at its phase; str0m's pacer may hold it, but never for a whole frame.
        let written = Duration::from_millis(3 + 20 * k as u64);
        assert!(
            (written..written + Duration::from_millis(20)).contains(offset),
            "frame {k} at {offset:?}"
        );
    }
    assert!(
        recording.iter().all(|d| d.to == relay.vip),
        "all to the VIP"
    );

    let start = Instant::now();
    for d in &recording {
        while start.elapsed() < d.offset {
            client.keep_arrivals();
            std::thread::sleep(Duration::from_millis(1));
        }
        client.socket.send_to(&d.bytes, d.to).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.kept.len() < FRAMES && Instant::now() < deadline {
        client.keep_arrivals();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(client.kept.len(), FRAMES, "every frame came back");
    assert_eq!(
        client.audio_received, 0,
        "nothing is counted before it is checked"
    );
    // The last ten echoes are altered on the way: their SRTP tags no longer verify.
    for datagram in client.kept.iter_mut().rev().take(10) {
        *datagram.last_mut().unwrap() ^= 0x55;
    }
    assert_eq!(client.verify_echoes(), FRAMES);
    assert_eq!(
        client.audio_received,
        FRAMES - 10,
        "only authentic echoes count"
    );
}

/// `--log-format json`: every log line is one JSON object, and a session's lines carry
/// its id and its server ufrag (what the relays see of it), from creation to its end.
#[test]
fn json_logs_name_each_session_by_id_and_server_ufrag() {
    let xcvr = Transceiver::start(None, &["--log-format", "json"]);
    let mut clients = vec![new_client()];
    let r = clients[0].signal(xcvr.http);
    assert_eq!(r.status, 201);
    run_until(&mut clients, "connected", |c| c.connected_at.is_some());
    let location = clients[0].location.clone().unwrap();
    assert_eq!(
        http_request(xcvr.http, "DELETE", &location, None, &[])
            .unwrap()
            .status,
        204
    );
    let id = location.rsplit('/').next().unwrap().to_string();
    let ufrag = r
        .body
        .lines()
        .find_map(|l| l.trim().strip_prefix("a=ice-ufrag:"))
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(5);
    let lines: Vec<serde_json::Value> = loop {
        let text = xcvr.log_text();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        let ended = lines
            .iter()
            .any(|l| l["fields"]["message"] == "session ended");
        if ended || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let of = |message: &str| {
        lines
            .iter()
            .find(|l| l["fields"]["message"] == message)
            .unwrap_or_else(|| panic!("no `{message}` line in {lines:?}"))
            .clone()
    };
    let created = of("session created");
    assert_eq!(created["fields"]["session"], id.as_str());
    assert_eq!(created["fields"]["ufrag"], ufrag.as_str());
    assert_eq!(created["level"], "INFO");
    assert_eq!(of("session connected")["fields"]["session"], id.as_str());
    let ended = of("session ended");
    assert_eq!(ended["fields"]["session"], id.as_str());
    assert_eq!(ended["fields"]["reason"], "deleted");
}

/// The global relay tier with a real session: the client talks to the global relay's VIP;
/// the transceiver (cluster 1) writes its cluster into the hint, so the global relay
/// forwards the flow to cluster 1's relay, which accepts frames only from the global
/// relay's address and delivers them to the transceiver; replies go back the same way and
/// leave from the global VIP.
#[test]
fn a_session_through_the_global_relay_and_a_cluster_relay_is_echoed() {
    let (cluster, global) = TestRelay::global_and_cluster();
    let xcvr = Transceiver::start(Some(global.vip), &["--cluster-id", "1"]);
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    let client = converse_with_echo(client, "through the global and the cluster relay", 25, 20);
    assert!(client.audio_received >= 20);
    let flows = |relay: &TestRelay| {
        ufrag_testkit::http::metric(None, relay.metrics, "ufrag_relay_flows_created_total")
    };
    assert_eq!(
        flows(&global),
        1.0,
        "the global relay made the client's flow"
    );
    assert_eq!(flows(&cluster), 1.0, "and the cluster relay its own");
}

/// The value of the first `a=<name>:` line of `sdp`.
fn sdp_attribute<'s>(sdp: &'s str, name: &str) -> &'s str {
    let prefix = format!("a={name}:");
    sdp.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no a={name} in the SDP"))
        .trim()
}

/// The session's own client signs a check
/// with USE-CANDIDATE from another address V (a spoofed source, in the attack). str0m
/// follows the nomination; before, the model's audio then went to V (reflection with a
/// large gain). Now media stays on the path that proved it receives, V is probed, and
/// since V never answers it gets STUN only: the answer to its check and the probes.
#[test]
fn a_forged_nomination_from_another_address_gets_it_no_media() {
    use ufrag_common::stun::{StunClass, StunWriter, attr};
    let xcvr = Transceiver::start(None, &[]);
    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    let mut clients = vec![client];
    run_until(&mut clients, "connected", |c| {
        c.connected_at.is_some() && c.channel_open
    });
    talk(&mut clients, 10);
    run_until(&mut clients, "echo", |c| c.audio_received >= 8);

    // The forged nomination, signed with the server's password as the client can.
    let answer = clients[0].answer.clone().expect("signaled");
    let offer = clients[0].offer.clone();
    let username = format!(
        "{}:{}",
        sdp_attribute(&answer, "ice-ufrag"),
        sdp_attribute(&offer, "ice-ufrag")
    );
    let mut check = [0u8; 256];
    let mut writer = StunWriter::new(&mut check, 0x001, StunClass::Request, &[0x66; 12]).unwrap();
    writer
        .attribute(attr::USERNAME, username.as_bytes())
        .unwrap()
        .attribute(attr::PRIORITY, &0x7FFF_FFFFu32.to_be_bytes())
        .unwrap()
        .attribute(attr::ICE_CONTROLLING, &[1; 8])
        .unwrap()
        .attribute(attr::USE_CANDIDATE, &[])
        .unwrap()
        .integrity(sdp_attribute(&answer, "ice-pwd").as_bytes())
        .unwrap()
        .fingerprint()
        .unwrap();
    let len = writer.finish();
    let victim = std::net::UdpSocket::bind((unique_ip(), 0)).unwrap();
    victim
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    victim.send_to(&check[..len], xcvr.worker).unwrap();

    // A second of talk after it: the model's audio keeps coming to the real client.
    let before = clients[0].audio_received;
    talk(&mut clients, 50);
    run_until(&mut clients, "echo after the forged nomination", |c| {
        c.audio_received >= before + 40
    });
    let mut to_victim = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok((n, _)) = victim.recv_from(&mut buf) {
        to_victim.push(buf[..n].to_vec());
    }
    let stun = |d: &Vec<u8>| d.first().is_some_and(|b| *b < 4);
    assert!(
        to_victim.iter().all(stun),
        "V got {} datagrams, {} of them not STUN",
        to_victim.len(),
        to_victim.iter().filter(|d| !stun(d)).count()
    );
    assert!(
        (1..=8).contains(&to_victim.len()),
        "the answer to V's check and a few probes: {}",
        to_victim.len()
    );
    assert!(xcvr.metric("ufrag_transceiver_kept_on_verified_path_datagrams_total") > 0.0);
    assert!(xcvr.metric("ufrag_transceiver_path_probes") >= 1.0);
}

/// A client whose datagrams reach
/// the transceiver from a spoofed source V, where nobody receives. Before, the
/// transceiver sent its DTLS flight (about 1 KB, and every retransmission) to V as soon
/// as V's check was nominated, and the relay counted that as V's flow proven. Now DTLS
/// waits for V to answer a probe, which it never does: V gets only STUN, and no more
/// bytes than it sent.
#[test]
fn a_spoofed_source_that_never_receives_gets_no_dtls_and_no_more_bytes_than_it_sent() {
    use std::net::UdpSocket;
    let xcvr = Transceiver::start(None, &[]);
    let mut client = new_client();
    // The client talks to a proxy that passes everything on from V, and back only the
    // answers to its checks (an attacker can predict them), so that it goes on to send
    // its ClientHello from V; nothing else that reaches V is passed back.
    let proxy = UdpSocket::bind((unique_ip(), 0)).unwrap();
    let spoofed = UdpSocket::bind((unique_ip(), 0)).unwrap();
    proxy.set_nonblocking(true).unwrap();
    spoofed.set_nonblocking(true).unwrap();
    let offer = client.offer.clone();
    let mut answer = http_request(
        xcvr.http,
        "POST",
        "/v1/sessions",
        Some(("application/sdp", &offer)),
        &[],
    )
    .unwrap();
    assert_eq!(answer.status, 201);
    let worker = format!("{} {}", xcvr.worker.ip(), xcvr.worker.port());
    let via_proxy = proxy.local_addr().unwrap();
    assert!(answer.body.contains(&worker), "{}", answer.body);
    answer.body = answer
        .body
        .replace(&worker, &format!("{} {}", via_proxy.ip(), via_proxy.port()));
    client.apply_answer(&answer);

    let (mut from_spoofed, mut to_spoofed) = (0usize, Vec::<Vec<u8>>::new());
    let mut buf = [0u8; 2048];
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        client.step();
        while let Ok((n, _)) = proxy.recv_from(&mut buf) {
            from_spoofed += n;
            spoofed.send_to(&buf[..n], xcvr.worker).unwrap();
        }
        while let Ok((n, _)) = spoofed.recv_from(&mut buf) {
            to_spoofed.push(buf[..n].to_vec());
            let binding_success = buf[..n].starts_with(&[0x01, 0x01]);
            if binding_success {
                proxy.send_to(&buf[..n], client.local).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let stun = |d: &Vec<u8>| d.first().is_some_and(|b| *b < 4);
    let sent: usize = to_spoofed.iter().map(Vec::len).sum();
    assert!(
        to_spoofed.iter().all(stun),
        "V got {} datagrams, {} of them not STUN",
        to_spoofed.len(),
        to_spoofed.iter().filter(|d| !stun(d)).count()
    );
    assert!(!to_spoofed.is_empty(), "V's checks are answered");
    assert!(
        sent <= from_spoofed,
        "V was sent {sent} bytes for the {from_spoofed} it sent"
    );
    assert!(
        xcvr.metric("ufrag_transceiver_held_for_probe_datagrams_total") >= 1.0,
        "the DTLS flight waited for V to answer"
    );
    assert!(xcvr.metric("ufrag_transceiver_path_probes") >= 1.0);
    assert!(client.connected_at.is_none());
}

/// When a session ends, its transceiver tells the
/// relay (a frame with the session-ended bit and no datagram), and the relay frees the
/// session's flow at once. Before, a proven flow stayed until it went idle, or until its
/// transceiver had been silent for 30 s and the table was full.
#[test]
fn an_ended_session_frees_its_flow_at_the_relay_at_once() {
    let relay = TestRelay::start(&[]);
    let xcvr = Transceiver::start(Some(relay.vip), &[]);
    let mut clients = vec![new_client()];
    assert_eq!(clients[0].signal(xcvr.http).status, 201);
    run_until(&mut clients, "connected", |c| {
        c.connected_at.is_some() && c.channel_open
    });
    talk(&mut clients, 5);
    run_until(&mut clients, "echo", |c| c.audio_received >= 3);
    let relay_metric = |series: &str| ufrag_testkit::http::metric(None, relay.metrics, series);
    let ended = "ufrag_relay_dropped_datagrams_total{worker=\"0\",reason=\"session_ended\"}";
    assert_eq!(relay_metric("ufrag_relay_flows_active"), 1.0);
    assert_eq!(relay_metric(ended), 0.0);
    let location = clients[0].location.clone().expect("a Location");
    assert_eq!(
        http_request(xcvr.http, "DELETE", &location, None, &[])
            .unwrap()
            .status,
        204
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while relay_metric("ufrag_relay_flows_active") != 0.0 {
        assert!(
            Instant::now() < deadline,
            "the relay still holds the ended session's flow"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(relay_metric(ended), 1.0);
    assert_eq!(
        xcvr.metric("ufrag_transceiver_session_end_notices_total"),
        1.0
    );
}
