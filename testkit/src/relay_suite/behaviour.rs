//! The relay behaviour cases: a running relay binary driven over UDP, with fake
//! transceivers and STUN built the way browsers send it, written against the flags and
//! metrics both backends share (the [`Backend`] picks the binary and the place).
//!
//! What happens to each kind of bad input is stated by the test that sends it: which drop
//! reason counts it, and that nothing reaches the transceiver or the client.

use std::net::SocketAddr;
use std::time::Duration;

use super::Backend;
use super::harness::*;
use ufrag_common::frame::FrameHeader;
use ufrag_common::hint::{HintKey, HintKeys};

/// A relay, a transceiver and a client, with a flow already made by a Binding Request.
struct Session {
    relay: RelayProcess,
    transceiver: Endpoint,
    client: Endpoint,
}

fn established(setup: &RelaySetup) -> Session {
    let relay = RelayProcess::start(setup);
    let transceiver = relay.net().transceiver();
    let client = relay.net().client();
    let stun = binding_request_for(transceiver.addr(), 0, 1);
    client.send(relay.vip(), &stun);
    let (header, payload, from) = transceiver.recv_frame().expect("Binding Request forwarded");
    assert_eq!(header, FrameHeader::new(client.addr(), relay.vip()));
    assert_eq!(payload, stun);
    assert_eq!(
        from.ip(),
        relay.internal.ip(),
        "frames come from the worker's internal socket"
    );
    Session {
        relay,
        transceiver,
        client,
    }
}

/// `n` clients, each of which has sent a Binding Request for a session on `transceiver`.
fn clients_with_flows(relay: &RelayProcess, transceiver: &Endpoint, n: u8) -> Vec<Endpoint> {
    let clients: Vec<Endpoint> = (0..n).map(|_| relay.net().client()).collect();
    for (i, c) in clients.iter().enumerate() {
        c.send(
            relay.vip(),
            &binding_request_for(transceiver.addr(), 0, i as u8),
        );
    }
    clients
}

pub fn a_valid_binding_request_creates_a_flow_that_dtls_and_rtp_reuse(b: &Backend) {
    let s = established(&b.setup());
    for datagram in [dtls(), rtp(1), rtp(2)] {
        s.client.send(s.relay.vip(), &datagram);
        let (header, payload, _) = s.transceiver.recv_frame().expect("forwarded on the flow");
        assert_eq!(header.client, s.client.addr());
        assert_eq!(payload, datagram, "forwarded opaquely");
    }
    s.relay.wait_for("counters", |r| {
        r.total("ufrag_relay_forwarded_datagrams_total", "direction=\"in\"") == 4.0
    });
    assert_eq!(s.relay.total("ufrag_relay_flows_created_total", ""), 1.0);
    assert_eq!(s.relay.total("ufrag_relay_flows_active", ""), 1.0);
}

pub fn the_return_path_reaches_the_right_client_from_the_vip_it_used(b: &Backend) {
    let relay = RelayProcess::start(&RelaySetup {
        vips: 2,
        ..b.setup()
    });
    let transceiver = relay.net().transceiver();
    let (a, b) = (relay.net().client(), relay.net().client());
    a.send(
        relay.vips[0],
        &binding_request_for(transceiver.addr(), 0, 1),
    );
    b.send(
        relay.vips[1],
        &binding_request_for(transceiver.addr(), 0, 2),
    );
    let mut seen = vec![];
    for _ in 0..2 {
        let (h, _, from) = transceiver.recv_frame().expect("both forwarded");
        seen.push((h, from));
    }
    for (h, from) in seen {
        let answer = rtp(7);
        transceiver.send_frame(from, h.client, h.vip, &answer);
        let client = if h.client == a.addr() { &a } else { &b };
        let (got, source) = client.recv().expect("the client gets the reply");
        assert_eq!(got, answer, "header stripped, payload untouched");
        assert_eq!(source, h.vip, "sent from the VIP the client used");
    }
    assert!(
        a.nothing_arrives() && b.nothing_arrives(),
        "one datagram out per datagram in"
    );
    relay.wait_for("out counters", |r| {
        r.total("ufrag_relay_forwarded_datagrams_total", "direction=\"out\"") == 2.0
    });
}

pub fn each_bad_first_packet_is_dropped_counted_and_not_forwarded(b: &Backend) {
    let relay = RelayProcess::start(&b.setup());
    let transceiver = relay.net().transceiver();
    let good = binding_request_for(transceiver.addr(), 0, 1);

    let forged = binding_request_with(
        &HintKeys::new(HintKey::new(1, &[9; 32]).unwrap(), None).unwrap(),
        transceiver.addr(),
        0,
        2,
    );
    let unknown_key = binding_request_with(
        &HintKeys::new(
            HintKey::new(5, &(0u8..32).collect::<Vec<_>>()).unwrap(),
            None,
        )
        .unwrap(),
        transceiver.addr(),
        0,
        3,
    );
    let disallowed: SocketAddr = "10.9.9.9:40000".parse().unwrap();
    let mut bad_integrity = good.clone();
    let n = bad_integrity.len();
    bad_integrity[n - 20] ^= 1;

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "hint MAC forged under another secret",
            forged,
            "hint_bad_mac",
        ),
        (
            "hint under an unknown key id",
            unknown_key,
            "hint_unknown_key",
        ),
        (
            "hint naming a destination outside the allowed networks",
            binding_request_for(disallowed, 0, 4),
            "hint_destination_not_allowed",
        ),
        (
            "MESSAGE-INTEGRITY that fails under the derived password",
            bad_integrity,
            "stun_bad_integrity",
        ),
        (
            "truncated STUN",
            good[..30].to_vec(),
            "stun_length_mismatch",
        ),
        (
            "STUN shorter than its header",
            good[..10].to_vec(),
            "stun_too_short",
        ),
        ("garbage first byte", vec![0xEE; 64], "unclassified"),
        ("empty datagram", vec![], "unclassified"),
    ];
    for (i, (what, datagram, reason)) in cases.iter().enumerate() {
        // A fresh client per case, so that no flow from an earlier case is reused.
        let client = relay.net().client();
        client.send(relay.vip(), datagram);
        relay.wait_for(what, |r| r.drops(reason) >= 1.0);
        client.send(relay.vip(), &rtp(i as u16));
        relay.wait_for("the follow-up RTP dropped too", |r| {
            r.drops("no_flow") >= (i + 1) as f64
        });
    }
    assert!(
        transceiver.nothing_arrives(),
        "nothing reached the transceiver"
    );
    assert_eq!(relay.total("ufrag_relay_flows_created_total", ""), 0.0);
}

pub fn non_stun_without_a_flow_is_never_forwarded(b: &Backend) {
    let relay = RelayProcess::start(&b.setup());
    let transceiver = relay.net().transceiver();
    let client = relay.net().client();
    for seq in 0..20 {
        client.send(relay.vip(), &rtp(seq));
        client.send(relay.vip(), &dtls());
    }
    relay.wait_for("40 no_flow drops", |r| r.drops("no_flow") == 40.0);
    assert!(transceiver.nothing_arrives());
    assert!(
        client.nothing_arrives(),
        "the relay never answers a client itself"
    );
}

pub fn return_frames_without_a_flow_or_from_elsewhere_are_dropped(b: &Backend) {
    let s = established(&b.setup());
    let internal = s.relay.internal_of(0);
    let stranger: SocketAddr = SocketAddr::from((unique_ip(), 5555));
    s.transceiver
        .send_frame(internal, stranger, s.relay.vip(), &rtp(1));
    s.relay
        .wait_for("return_no_flow", |r| r.drops("return_no_flow") == 1.0);
    // A raw datagram to the internal port is not a frame.
    s.transceiver.send(internal, &rtp(2));
    s.relay
        .wait_for("frame_not_a_frame", |r| r.drops("frame_not_a_frame") == 1.0);
    // A second transceiver (allowed network) cannot answer for the first one's client.
    let other = s.relay.net().transceiver();
    other.send_frame(internal, s.client.addr(), s.relay.vip(), &rtp(3));
    s.relay.wait_for("return_wrong_source", |r| {
        r.drops("return_wrong_source") == 1.0
    });
    assert!(s.client.nothing_arrives(), "no reply reached anyone");
    assert!(stranger.port() > 0);
}

pub fn frames_from_outside_the_transceiver_networks_are_dropped_before_parsing(b: &Backend) {
    let net = b.net();
    let relay = RelayProcess::start(&RelaySetup {
        extra: vec![
            "--allow-transceiver-net".into(),
            format!("{}/32", net.transceiver_ip()),
        ],
        ..RelaySetup::on(net)
    });
    let outsider = relay.net().client(); // a client's address: not a transceiver network
    outsider.send_frame(
        relay.internal_of(0),
        "198.51.100.1:1".parse().unwrap(),
        relay.vip(),
        &rtp(1),
    );
    outsider.send(relay.internal_of(0), b"garbage");
    relay.wait_for("frame_source_not_allowed", |r| {
        r.drops("frame_source_not_allowed") == 2.0
    });
    let insider = relay.net().transceiver();
    insider.send_frame(
        relay.internal_of(0),
        "198.51.100.1:1".parse().unwrap(),
        relay.vip(),
        &rtp(1),
    );
    relay.wait_for("return_no_flow (source allowed)", |r| {
        r.drops("return_no_flow") == 1.0
    });
}

pub fn idle_flows_expire_and_then_need_stun_again(b: &Backend) {
    let s = established(&RelaySetup {
        extra: vec!["--idle-timeout".into(), "500ms".into()],
        ..b.setup()
    });
    s.relay.wait_for("flow expired", |r| {
        r.total("ufrag_relay_flows_expired_total", "") == 1.0
    });
    assert_eq!(s.relay.total("ufrag_relay_flows_active", ""), 0.0);
    s.client.send(s.relay.vip(), &rtp(1));
    s.relay
        .wait_for("no_flow after expiry", |r| r.drops("no_flow") == 1.0);
    assert!(s.transceiver.nothing_arrives());
    // The client's next check: the same session, a new transaction (the first one's
    // copy would be a replay).
    s.client.send(
        s.relay.vip(),
        &binding_request_with_transaction(s.transceiver.addr(), 0, 1, [0x77; 12]),
    );
    assert!(
        s.transceiver.recv_frame().is_some(),
        "the next STUN recreates the flow"
    );
}

pub fn a_full_table_refuses_new_flows_while_old_ones_keep_forwarding(b: &Backend) {
    let relay = RelayProcess::start(&RelaySetup {
        extra: vec!["--flows-per-worker".into(), "2".into()],
        ..b.setup()
    });
    let transceiver = relay.net().transceiver();
    // Two sessions' flows, proven (media both ways): a full table of them sheds nothing.
    let clients = clients_with_flows(&relay, &transceiver, 2);
    relay.wait_for("two flows", |r| {
        r.total("ufrag_relay_flows_active", "") == 2.0
    });
    assert_eq!(transceiver.count_arrivals(), 2, "two flows fit");
    for c in &clients {
        prove_flow(&relay, &transceiver, c);
    }
    let third = relay.net().client();
    third.send(relay.vip(), &binding_request_for(transceiver.addr(), 0, 2));
    // The relay's own accounting first (published every 50 ms): one refused. Only then
    // count what arrived, so a slow machine cannot fail the count.
    relay.wait_for("one table_full", |r| {
        r.drops("table_full") == 1.0 && r.total("ufrag_relay_flows_refused_total", "") == 1.0
    });
    for c in &clients {
        c.send(relay.vip(), &rtp(9));
    }
    // Two requests, two datagrams from each client while proving, and these two.
    relay.wait_for("the old flows forwarded RTP", |r| {
        r.total("ufrag_relay_forwarded_datagrams_total", "direction=\"in\"") == 8.0
    });
    assert_eq!(
        transceiver.count_arrivals(),
        2,
        "the old flows keep forwarding; the refused request is not forwarded"
    );
}

/// A backlog larger than one turn of the worker (relay-mio: 16 batches of 64) is drained
/// with no further traffic to wake the worker. On this kernel (6.18) a UDP socket wakes
/// its edge-triggered epoll waiters only when its queue goes from empty to not empty, so
/// a worker that slept with data queued would never wake again under load (every new
/// datagram is dropped): perf saw exactly that after an overload trial.
pub fn a_backlog_beyond_one_turn_is_drained_without_new_traffic(b: &Backend) {
    const BACKLOG: u16 = 1500;
    let s = established(&b.setup());
    s.relay.signal("STOP");
    for seq in 0..BACKLOG {
        s.client.send(s.relay.vip(), &rtp(seq));
    }
    s.relay.signal("CONT");
    s.relay.wait_for("the whole backlog forwarded", |r| {
        r.total("ufrag_relay_forwarded_datagrams_total", "direction=\"in\"")
            == f64::from(BACKLOG) + 1.0
    });
    // Still awake: the next datagram goes through (after whatever of the backlog the
    // fake transceiver's own buffer kept).
    s.transceiver.count_arrivals();
    s.client.send(s.relay.vip(), &rtp(BACKLOG));
    let (_, payload, _) = s.transceiver.recv_frame().expect("forwarding goes on");
    assert_eq!(payload, rtp(BACKLOG));
}

pub fn two_workers_are_both_used_and_each_pinned_to_its_own_core(b: &Backend) {
    let relay = RelayProcess::start(&RelaySetup {
        workers: 2,
        ..RelaySetup::on(b.net_with_queues(2))
    });
    let transceiver = relay.net().transceiver();
    // SO_REUSEPORT spreads clients by address hash: 32 clients reach both workers.
    let _clients = clients_with_flows(&relay, &transceiver, 32);
    relay.wait_for("32 forwarded", |r| {
        r.total("ufrag_relay_forwarded_datagrams_total", "direction=\"in\"") == 32.0
    });
    assert_eq!(transceiver.count_arrivals(), 32);
    relay.wait_for("both workers forwarded", |r| {
        let m = r.metrics();
        (0..2).all(|w| {
            m.get(&format!(
                "ufrag_relay_forwarded_datagrams_total{{worker=\"{w}\",direction=\"in\"}}"
            ))
            .copied()
            .unwrap_or(0.0)
                > 0.0
        })
    });
    // Each worker thread is pinned to exactly one CPU, and they differ.
    let mut cpus = vec![];
    for task in std::fs::read_dir(format!("/proc/{}/task", relay.pid())).unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap();
        if comm.trim().starts_with("relay-w") {
            let status = std::fs::read_to_string(dir.join("status")).unwrap();
            let allowed = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .unwrap();
            cpus.push(allowed.split_whitespace().nth(1).unwrap().to_string());
        }
    }
    cpus.sort();
    assert_eq!(
        cpus,
        vec!["0".to_string(), "1".to_string()],
        "worker affinities"
    );
}

/// Both directions through two workers. Eight transceiver sockets answer each frame to
/// the internal address it came from: sixteen return 5-tuples, which the NIC (relay-afxdp)
/// spreads over both queues regardless of which worker owns the flow, so returns for one
/// worker's flows land on the other's queue. Every client must get its reply, from the VIP
/// it used; relay-afxdp must have sent some of them from the shared return paths, while
/// relay-mio, whose kernel hands each reply to the owner's own internal socket, never does.
pub fn two_workers_return_every_reply_whichever_queue_it_lands_on(b: &Backend) {
    let relay = RelayProcess::start(&RelaySetup {
        workers: 2,
        ..RelaySetup::on(b.net_with_queues(2))
    });
    let transceivers: Vec<Endpoint> = (0..8).map(|_| relay.net().transceiver()).collect();
    let clients: Vec<Endpoint> = (0..32).map(|_| relay.net().client()).collect();
    for (i, c) in clients.iter().enumerate() {
        let t = &transceivers[i % transceivers.len()];
        c.send(relay.vip(), &binding_request_for(t.addr(), 0, i as u8));
    }
    // Four clients per transceiver socket.
    for t in &transceivers {
        for _ in 0..clients.len() / transceivers.len() {
            let (header, _, from) = t
                .recv_frame()
                .expect("every Binding Request reaches its transceiver");
            let reply = format!("reply to {}", header.client);
            t.send_frame(from, header.client, header.vip, reply.as_bytes());
        }
    }
    for c in &clients {
        let (data, from) = c.recv().expect("the reply came back through the relay");
        assert_eq!(from, relay.vip(), "sent from the VIP the client used");
        assert_eq!(data, format!("reply to {}", c.addr()).into_bytes());
    }
    relay.wait_for("32 returned", |r| {
        r.total("ufrag_relay_forwarded_datagrams_total", "direction=\"out\"") == 32.0
    });
    let shared = relay.total("ufrag_relay_shared_returns_total", "");
    if b.xdp.is_some() {
        assert!(
            shared > 0.0,
            "no reply landed on the other worker's queue: the case proved nothing"
        );
    } else {
        assert_eq!(
            shared, 0.0,
            "relay-mio's replies reach their owner's socket"
        );
    }
    assert_eq!(relay.drops("return_no_flow"), 0.0);
}

pub fn global_relay_to_cluster_relay_to_transceiver_and_back(b: &Backend) {
    let net = b.net();
    let transceiver = net.transceiver();
    let global_ip = net.relay_ip(1);
    // Cluster 1's relay accepts frames only from the global relay's address.
    let cluster = RelayProcess::start(&RelaySetup {
        extra: vec![
            "--cluster-id".into(),
            "1".into(),
            "--allow-global-relay-net".into(),
            format!("{global_ip}/32"),
        ],
        ..RelaySetup::on(net.clone())
    });
    let global = RelayProcess::start(&RelaySetup {
        extra: vec![
            "--cluster-id".into(),
            "0".into(),
            "--cluster-relay".into(),
            format!("1={}", cluster.internal_of(0)),
        ],
        host: 1,
        ..RelaySetup::on(net.clone())
    });
    let client = net.client();
    let stun = binding_request_for(transceiver.addr(), 1, 1);
    client.send(global.vip(), &stun);
    let (h, payload, from) = transceiver
        .recv_frame()
        .expect("reached the transceiver through both relays");
    assert_eq!(
        h.client,
        client.addr(),
        "the client's address travels along"
    );
    assert_eq!(h.vip, global.vip());
    assert_eq!(payload, stun);
    assert_eq!(from, cluster.internal_of(0));
    client.send(global.vip(), &rtp(1));
    assert_eq!(transceiver.recv_frame().unwrap().1, rtp(1));

    transceiver.send_frame(from, h.client, h.vip, &rtp(2));
    let (reply, source) = client.recv().expect("reply back through both relays");
    assert_eq!(reply, rtp(2));
    assert_eq!(source, global.vip());
}

pub fn a_cluster_relay_refuses_frames_from_non_global_relays(b: &Backend) {
    let net = b.net();
    let cluster = RelayProcess::start(&RelaySetup {
        extra: vec![
            "--cluster-id".into(),
            "1".into(),
            "--allow-global-relay-net".into(),
            format!("{}/32", net.unused_ip()),
        ],
        ..RelaySetup::on(net)
    });
    let transceiver = cluster.net().transceiver();
    // From an allowed transceiver network, a frame is a *return* frame, not a client's:
    // no flow → dropped, never forwarded to the transceiver the hint names.
    let pretender = cluster.net().transceiver();
    pretender.send_frame(
        cluster.internal_of(0),
        "198.51.100.9:9".parse().unwrap(),
        cluster.vip(),
        &binding_request_for(transceiver.addr(), 1, 1),
    );
    cluster.wait_for("return_no_flow", |r| r.drops("return_no_flow") == 1.0);
    assert!(transceiver.nothing_arrives());
}

pub fn sigterm_turns_readiness_off_keeps_forwarding_during_drain_then_exits_0(b: &Backend) {
    let mut s = established(&RelaySetup {
        extra: vec!["--drain-time".into(), "1500ms".into()],
        ..b.setup()
    });
    s.relay.terminate();
    let deadline = std::time::Instant::now() + WAIT;
    while s.relay.http("/readyz").map(|(code, _)| code) != Some(503) {
        assert!(
            std::time::Instant::now() < deadline,
            "readyz never went 503"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s.relay.http("/healthz").map(|(c, _)| c), Some(200));
    s.client.send(s.relay.vip(), &rtp(5));
    assert_eq!(
        s.transceiver
            .recv_frame()
            .expect("still forwarding while draining")
            .1,
        rtp(5)
    );
    assert_eq!(s.relay.wait_exit(), Some(0));
}

pub fn a_bad_config_exits_non_zero_naming_the_field(b: &Backend) {
    let keys = format!("1:{KEY_HEX}");
    let stderr = refused_config(b, "127.0.0.1:3478", &["--idle-timeout", "5ms"], Some(&keys));
    assert!(stderr.contains("`idle_timeout`"), "{stderr}");

    let stderr = refused_config(b, "127.0.0.1:3478", &[], None);
    assert!(stderr.contains("`hint_keys_file`"), "{stderr}");

    // The tests' own key (counting bytes) or one repeated byte: anyone could forge ICE
    // checks with it, so only a test may start with it.
    for example in [keys.clone(), format!("2:{}", "22".repeat(32))] {
        let stderr = refused_config_as(b, "127.0.0.1:3478", &[], Some(&example), false);
        assert!(
            stderr.contains("`hint_keys`") && stderr.contains("is an example secret"),
            "{stderr}"
        );
    }

    // A wildcard VIP cannot work (the frame carries the VIP, replies leave from it).
    let stderr = refused_config(b, "0.0.0.0:3478", &[], Some(&keys));
    assert!(
        stderr.contains("`vip`") && stderr.contains("wildcard"),
        "{stderr}"
    );
}

pub fn startup_errors_are_json_when_the_logs_are(b: &Backend) {
    let keys = format!("1:{KEY_HEX}");
    for json in ["--log-format=json", "--log-format"] {
        let mut extra = vec![json, "--idle-timeout", "5ms"];
        if json == "--log-format" {
            extra.insert(1, "json");
        }
        let stderr = refused_config(b, "127.0.0.1:3478", &extra, Some(&keys));
        let message = crate::json_log::the_error(&stderr);
        assert!(message.contains("`idle_timeout`"), "{message}");
    }
    // A usage error (a value clap refuses) too, before the flags are understood at all.
    let stderr = refused_config(
        b,
        "127.0.0.1:3478",
        &["--log-format", "json", "--workers", "many"],
        Some(&keys),
    );
    let message = crate::json_log::the_error(&stderr);
    assert!(
        message.contains("--workers") && message.contains("many"),
        "{message}"
    );
    // Without JSON logs, the same error stays a line for people.
    let stderr = refused_config(b, "127.0.0.1:3478", &["--workers", "many"], Some(&keys));
    assert!(
        serde_json::from_str::<serde_json::Value>(stderr.trim()).is_err(),
        "{stderr}"
    );
    assert!(stderr.contains("--workers"), "{stderr}");
}

/// The example config file `deploy/config/NAME`.
pub fn example_config(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/config")
        .join(name)
}

pub fn the_example_config_loads_and_prints_back_to_itself(b: &Backend) {
    let keys = format!("1:{KEY_HEX}");
    let print = |config: &std::path::Path, extra: &[&str]| {
        let out = std::process::Command::new(&b.binary)
            .args(b.outside_testbed_args())
            .arg("--config")
            .arg(config)
            .arg("--print-config")
            .args(extra)
            .env("UFRAG_RELAY_HINT_KEYS", &keys)
            .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        String::from_utf8(out.stdout).unwrap()
    };
    let printed = print(&example_config("relay.toml"), &[]);
    for line in [
        "vip = [\"203.0.113.10:3478\"]",
        "internal_addr = \"10.0.0.5:40000\"",
        "allow_transceiver_net = [\"10.0.0.0/8\"]",
        "cluster_id = 1",
        "hint_max_age = \"10m\"",
        "tcp_vip = [\"203.0.113.10:443\"]",
        // A default the file leaves out is filled in.
        "flows_per_worker = 262144",
    ] {
        assert!(printed.lines().any(|l| l == line), "{line} in\n{printed}");
    }
    assert!(!printed.contains(KEY_HEX), "the hint key is never printed");
    // What it prints loads back to the same configuration.
    let binary = b
        .binary
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("relay");
    let dir = std::env::temp_dir().join(format!(
        "ufrag-print-config-{}-{binary}-{}",
        std::process::id(),
        b.label()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("printed.toml");
    std::fs::write(&copy, &printed).unwrap();
    let again = print(&copy, &[]);
    assert_eq!(again, printed);
    // A flag beats the file's key.
    let flagged = print(&example_config("relay.toml"), &["--cluster-id", "7"]);
    assert!(flagged.lines().any(|l| l == "cluster_id = 7"), "{flagged}");
    // A file with a key the relay once had, one it never had, and no file at all: each
    // refused with exit code 2, naming the file and the key.
    let old = dir.join("old.toml");
    std::fs::write(&old, "vips = [\"203.0.113.10:3478\"]\n").unwrap();
    let typo = dir.join("typo.toml");
    std::fs::write(&typo, "flows_per_wroker = 8\n").unwrap();
    let missing = dir.join("missing.toml");
    for (file, expected) in [
        (&old, "`vips`: renamed `vip`"),
        (&typo, "`flows_per_wroker`: not a key"),
        (&missing, "cannot read it"),
    ] {
        let out = std::process::Command::new(&b.binary)
            .args(b.outside_testbed_args())
            .arg("--config")
            .arg(file)
            .arg("--print-config")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", file.display());
        assert!(
            stderr.contains(expected) && stderr.contains(&*file.to_string_lossy()),
            "{expected}: {stderr}"
        );
    }
    // `--help` answers whatever the file named by the variable holds; an empty variable
    // names no file; `-cFILE` names one.
    let run = |args: &[&str], env: &std::ffi::OsStr| {
        std::process::Command::new(&b.binary)
            .args(b.outside_testbed_args())
            .args(args)
            .env("UFRAG_RELAY_CONFIG", env)
            .env("UFRAG_RELAY_HINT_KEYS", &keys)
            .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
            .output()
            .unwrap()
    };
    let help = run(&["--help"], old.as_os_str());
    assert_eq!(help.status.code(), Some(0), "{help:?}");
    let flags = [
        "--vip",
        "203.0.113.10:3478",
        "--internal-addr",
        "10.0.0.5:40000",
        "--allow-transceiver-net",
        "10.0.0.0/8",
        "--print-config",
    ];
    let unset = run(&flags, std::ffi::OsStr::new(""));
    assert!(unset.status.success(), "{unset:?}");
    let attached = format!("-c{}", example_config("relay.toml").display());
    let attached = run(&[&attached, "--print-config"], std::ffi::OsStr::new(""));
    assert_eq!(String::from_utf8_lossy(&attached.stdout), printed);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs the backend outside any testbed with `vip`, otherwise valid flags plus `extra`
/// and the hint keys (none when `None`); asserts that it refuses to start with exit
/// code 2 and returns its stderr.
fn refused_config(b: &Backend, vip: &str, extra: &[&str], hint_keys: Option<&str>) -> String {
    refused_config_as(b, vip, extra, hint_keys, true)
}

/// [`refused_config`], with the tests' permission for example secrets only when
/// `allow_examples`.
fn refused_config_as(
    b: &Backend,
    vip: &str,
    extra: &[&str],
    hint_keys: Option<&str>,
    allow_examples: bool,
) -> String {
    let mut cmd = std::process::Command::new(&b.binary);
    cmd.args(b.outside_testbed_args())
        .args([
            "--vip",
            vip,
            "--internal-addr",
            "127.0.0.1:40000",
            "--allow-transceiver-net",
            "127.0.0.0/8",
        ])
        .args(extra);
    match allow_examples {
        true => cmd.env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1"),
        false => cmd.env_remove("UFRAG_ALLOW_EXAMPLE_SECRETS"),
    };
    match hint_keys {
        Some(keys) => cmd.env("UFRAG_RELAY_HINT_KEYS", keys),
        None => cmd.env_remove("UFRAG_RELAY_HINT_KEYS"),
    };
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

pub fn a_dead_worker_turns_readiness_off_and_is_counted(b: &Backend) {
    // The same relay with fault injection compiled in (its own binary has none).
    let binary_name = b
        .binary
        .file_name()
        .and_then(|n| n.to_str())
        .expect("the relay's name");
    let faults = Backend {
        binary: crate::cargo_build::faults_bin(binary_name),
        ..b.clone()
    };
    let relay = RelayProcess::start(&RelaySetup {
        env: vec![(
            ufrag_common::runtime::lifecycle::FAULT_ENV.into(),
            "panic-worker-0".into(),
        )],
        ..faults.setup()
    });
    relay.wait_for("the failure counted", |r| {
        r.metrics().get("ufrag_relay_worker_failures_total") == Some(&1.0)
    });
    assert_eq!(relay.http("/readyz").map(|r| r.0), Some(503));
    assert_eq!(relay.http("/healthz").map(|r| r.0), Some(200));
    assert_eq!(relay.metrics().get("ufrag_relay_ready"), Some(&0.0));
}

/// The relay's own binary has no fault injection: asked for a fault, it stays ready and
/// no worker fails (the fault would fire 300 ms after readiness; this waits a second).
pub fn the_shipped_binary_ignores_a_fault_request(b: &Backend) {
    let relay = RelayProcess::start(&RelaySetup {
        env: vec![(
            ufrag_common::runtime::lifecycle::FAULT_ENV.into(),
            "panic-worker-0".into(),
        )],
        ..b.setup()
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(relay.http("/readyz").map(|r| r.0), Some(200));
    assert_eq!(
        relay.metrics().get("ufrag_relay_worker_failures_total"),
        Some(&0.0)
    );
}

pub fn help_explains_the_flags(b: &Backend) {
    let out = std::process::Command::new(&b.binary)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--vip",
        "--internal-addr",
        "--allow-transceiver-net",
        "--hint-keys-file",
        "--redis-url",
        "--drain-time",
        "UFRAG_RELAY_HINT_KEYS",
    ] {
        assert!(help.contains(flag), "--help mentions {flag}");
    }
}

pub fn json_logs_are_one_object_per_line(b: &Backend) {
    let relay = RelayProcess::start(&RelaySetup {
        extra: vec!["--log-format".into(), "json".into()],
        ..b.setup()
    });
    let text = relay.log_text();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let ready = lines.iter().find(|l| {
        l["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("ready"))
    });
    let ready = ready.unwrap_or_else(|| panic!("no ready line in {text}"));
    assert_eq!(ready["level"], "INFO");
    assert!(ready["timestamp"].is_string(), "{ready}");
}

/// The voluntary context switches of the relay's first worker thread (`relay-w0`): each is
/// a sleep in the kernel.
fn worker_sleeps(relay: &RelayProcess) -> u64 {
    for task in std::fs::read_dir(format!("/proc/{}/task", relay.pid())).unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() == "relay-w0" {
            let status = std::fs::read_to_string(dir.join("status")).unwrap();
            return status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("voluntary_ctxt_switches in the thread's status");
        }
    }
    panic!("no relay-w0 thread");
}

/// How often an idle worker went to sleep over one second with no traffic, after it
/// forwarded one session's request and RTP (in both poll modes).
fn idle_sleeps_after_forwarding(b: &Backend, mode: &str) -> u64 {
    let s = established(&RelaySetup {
        extra: vec!["--poll".into(), mode.into()],
        ..b.setup()
    });
    s.client.send(s.relay.vip(), &rtp(1));
    let (_, payload, _) = s.transceiver.recv_frame().expect("RTP forwarded");
    assert_eq!(payload, rtp(1), "{mode}: forwarded opaquely");
    let before = worker_sleeps(&s.relay);
    std::thread::sleep(Duration::from_secs(1));
    worker_sleeps(&s.relay) - before
}

pub fn a_busy_polling_worker_forwards_and_never_sleeps(b: &Backend) {
    // Sleeping, an idle worker wakes for its 50 ms tick: about 20 sleeps a second.
    let wakeup = idle_sleeps_after_forwarding(b, "wakeup");
    assert!(wakeup >= 5, "an idle --poll wakeup worker sleeps: {wakeup}");
    // Spinning, it never blocks (a preemption is not voluntary).
    let busy = idle_sleeps_after_forwarding(b, "busy");
    assert!(busy <= 2, "a --poll busy worker slept {busy} times in 1 s");
}
