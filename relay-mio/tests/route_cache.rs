//! The route cache's helper against real Redis servers: one server, a three-master Redis
//! Cluster, and a master watched by a Sentinel through a failover.
//!
//! In bursts, records and lookups queued together go to the store in pipelines (up to
//! `PIPELINE` per round trip; a cluster's split by node), and each lookup is answered
//! with its own flow's route, in order with the records before it in the same queue, with
//! no failure counted; a lookup of a flow never recorded is a miss. A worker that stops
//! reading its answers costs the helper nothing: what finds its answer queue full is
//! counted as a failure. A cluster spreads the
//! flows over all its masters. Through a Sentinel failover, the helper counts failures
//! while the master is gone, then finds the promoted replica: flows recorded before the
//! failover are still found, and new ones are written to the new master.

use std::time::{Duration, Instant};

use ufrag_common::config::{HINT_KEYS_ENV, RedisAccess, RelayArgs, RelayConfig, RouteStore};
use ufrag_common::execute::RouteCacheRequest;
use ufrag_common::flow::FlowKey;
use ufrag_common::forward::Route;
use ufrag_common::reasons::CacheError;
use ufrag_common::runtime::cache::{ANSWER_QUEUE, CacheAnswer, PIPELINE, RouteCache};
use ufrag_common::runtime::host::Host;
use ufrag_testkit::addr::unique_ip;
use ufrag_testkit::keys::KEYS;
use ufrag_testkit::redis::{RedisCluster, RedisSentinel, RedisServer};
use ufrag_testkit::tls::TestPki;

fn key(i: u32) -> FlowKey {
    FlowKey::new(
        std::net::SocketAddr::from(([198, 51, (i >> 8) as u8, i as u8], 5000)),
        "203.0.113.1:3478".parse().unwrap(),
    )
}

fn route(i: u32) -> Route {
    Route {
        next_hop: std::net::SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 41_000)),
        return_via: None,
    }
}

#[test]
fn a_burst_of_records_and_lookups_is_answered_flow_by_flow() {
    let redis = RedisServer::start_at(unique_ip());
    burst(&RouteStore::Server(redis.url()), &RedisAccess::default());
}

#[test]
fn a_redis_cluster_answers_flow_by_flow_and_holds_flows_on_every_master() {
    let cluster = RedisCluster::start(unique_ip(), 3);
    // One seed is enough: the client learns the slots and the other masters from it.
    burst(
        &RouteStore::Cluster(vec![cluster.urls()[0].clone()]),
        &RedisAccess::default(),
    );
    let held = cluster.keys_per_node();
    assert_eq!(held.iter().sum::<u64>(), u64::from(PIPELINE as u32 * 8));
    assert!(
        held.iter().all(|&n| n > 0),
        "keys on every master: {held:?}"
    );
    let value = cluster
        .get(&ufrag_common::runtime::cache::redis_key(&key(7)))
        .expect("flow 7 recorded");
    assert!(
        value.starts_with("10.0.0.7:41000|-|1|"),
        "the route, then its key id and MAC: {value}"
    );
}

/// A route cache on `store`, reached as `access` says, with a 30 s TTL and one worker's
/// client (whose wake-up does nothing: the tests poll).
fn one_worker_cache(
    store: &RouteStore,
    access: &RedisAccess,
) -> (RouteCache, Vec<ufrag_common::runtime::cache::CacheClient>) {
    RouteCache::start(
        store,
        access,
        Duration::from_secs(30),
        vec![Box::new(|| {})],
        ufrag_common::runtime::keys::SharedKeys::fixed(ufrag_testkit::keys::keys()),
    )
    .unwrap()
}

/// Polls `done` every 20 ms until it holds; fails naming `what` after `seconds`.
fn wait_until(what: &str, seconds: u64, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        assert!(Instant::now() < deadline, "waited {seconds} s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) for `client`'s next answer.
fn next_answer(client: &ufrag_common::runtime::cache::CacheClient) -> Option<CacheAnswer> {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if let Some(a) = client.next_answer() {
            return Some(a);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

#[test]
fn through_a_sentinel_failover_flows_recorded_before_are_found_and_new_ones_written() {
    let ip = unique_ip();
    let master = RedisServer::start_at(ip);
    let replica_addr = std::net::SocketAddr::from((ip, ufrag_testkit::addr::free_tcp_port(ip)));
    // The master lists its replica by the address it connected from (127.0.0.1 on
    // loopback), where the sentinel could not reach it: the replica says where it is.
    let replica = RedisServer::start_with(
        replica_addr,
        None,
        &[
            "--replicaof",
            &master.addr.ip().to_string(),
            &master.addr.port().to_string(),
            "--replica-announce-ip",
            &ip.to_string(),
        ],
    );
    let sentinel = RedisSentinel::start(ip, "routes", master.addr);
    let store = RouteStore::Sentinel {
        sentinels: vec![sentinel.url()],
        master: "routes".into(),
    };
    let (cache, clients) = one_worker_cache(&store, &RedisAccess::default());
    let client = &clients[0];
    let redis_key = |i| ufrag_common::runtime::cache::redis_key(&key(i));

    // Before: recorded on the master the sentinel names, and replicated.
    assert!(client.submit(RouteCacheRequest::Record {
        key: key(1),
        route: route(1)
    }));
    wait_until("flow 1 to reach the replica", 10, || {
        replica.get(&redis_key(1)).is_some()
    });
    let mut master = master;
    master.kill();

    // The sentinel promotes the replica; until the helper finds it, requests fail and
    // are counted (never a wait for the worker).
    wait_until("the sentinel to promote the replica", 20, || {
        sentinel.master_port("routes") == Some(replica_addr.port())
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let found = loop {
        assert!(
            Instant::now() < deadline,
            "the helper never found the new master"
        );
        assert!(client.submit(RouteCacheRequest::Lookup { key: key(1) }));
        if let Some(CacheAnswer { route: Some(r), .. }) = next_answer(client) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        found,
        route(1),
        "recorded before the failover, found after it"
    );
    let failures = client.take_failures();
    assert!(
        failures.iter().sum::<u64>() > 0,
        "the failures while the master was gone are counted: {failures:?}"
    );

    // After: written to the new master.
    assert!(client.submit(RouteCacheRequest::Record {
        key: key(2),
        route: route(2)
    }));
    wait_until("flow 2 to reach the new master", 10, || {
        replica.get(&redis_key(2)).is_some()
    });
    drop(clients);
    cache.stop();
}

/// Records flows and looks them up (and some never recorded) in bursts through a helper
/// on `store`, and checks every answer.
///
/// The test keeps at most [`ANSWER_QUEUE`] lookups unanswered, as a worker does by
/// draining its answers every loop: the helper answers as fast as Redis does, and had the
/// test queued every lookup before reading one, a helper that ran ahead would find the
/// answer queue full and count the rest as failures (that case has its own test below).
fn burst(store: &RouteStore, access: &RedisAccess) {
    let (cache, clients) = one_worker_cache(store, access);
    let client = &clients[0];
    // More than a few pipelines' worth, each flow recorded then looked up at once, and a
    // lookup of a flow that was never recorded after every tenth.
    let flows = (PIPELINE * 8) as u32;
    let mut queued = 0;
    let mut answers: Vec<CacheAnswer> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let drain_until = |answers: &mut Vec<CacheAnswer>, enough: &dyn Fn(usize) -> bool| {
        while !enough(answers.len()) {
            assert!(
                Instant::now() < deadline,
                "answers stopped after {} lookups",
                answers.len()
            );
            match client.next_answer() {
                Some(a) => answers.push(a),
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    };
    for i in 0..flows {
        // Room for this flow's two lookups in the answer queue.
        drain_until(&mut answers, &|answered| {
            queued + 2 - answered <= ANSWER_QUEUE
        });
        assert!(client.submit(RouteCacheRequest::Record {
            key: key(i),
            route: route(i)
        }));
        assert!(client.submit(RouteCacheRequest::Lookup { key: key(i) }));
        queued += 1;
        if i % 10 == 0 {
            assert!(client.submit(RouteCacheRequest::Lookup {
                key: key(flows + i)
            }));
            queued += 1;
        }
    }
    drain_until(&mut answers, &|answered| answered >= queued);
    assert_eq!(answers.len(), queued, "every lookup answered");
    assert_eq!(client.take_failures(), [0; CacheError::COUNT]);
    for a in &answers {
        let i = (0..2 * flows)
            .find(|&i| key(i) == a.key)
            .expect("a flow asked about");
        if i < flows {
            assert_eq!(a.route, Some(route(i)), "flow {i}: its own route");
        } else {
            assert_eq!(a.route, None, "never recorded: a miss");
        }
    }
    drop(clients);
    cache.stop();
}

/// A config file naming a TLS Redis with a password and a client certificate, all from
/// `pki`'s files.
fn tls_config_text(redis: &RedisServer, pki: &TestPki, password_file: &std::path::Path) -> String {
    format!(
        "vip = [\"127.0.0.1:3478\"]\ninternal_addr = \"127.0.0.1:40000\"\n\
         allow_transceiver_net = [\"127.0.0.0/8\"]\nredis_url = \"{}\"\n\
         redis_password_file = \"{}\"\nredis_ca_file = \"{}\"\n\
         redis_client_cert_file = \"{}\"\nredis_client_key_file = \"{}\"\n",
        redis.tls_url(),
        password_file.display(),
        pki.file("ca.pem").display(),
        pki.file("client.pem").display(),
        pki.file("client.key").display(),
    )
}

/// A password file of mode 0600 beside `pki`'s files.
fn password_file(pki: &TestPki, password: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = pki.dir().join("redis.password");
    std::fs::write(&path, format!("{password}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// A TLS-only Redis that needs `password` and a client certificate, its PKI (named for
/// `tag`), and the relay configuration that reaches it: loaded as a relay loads it, its
/// files read and checked at start.
fn tls_redis(tag: &str, password: &str) -> (TestPki, RedisServer, RelayConfig) {
    let ip = unique_ip();
    let pki = TestPki::new(tag, ip.into());
    let redis = RedisServer::start_tls(ip, &pki, password);
    let text = tls_config_text(&redis, &pki, &password_file(&pki, password));
    let args = RelayArgs::parse(Some(&text), &[]).unwrap().options;
    let config = RelayConfig::load(
        &args,
        &Host::files_only().with_env(HINT_KEYS_ENV, KEYS),
        &[0],
    )
    .unwrap();
    (pki, redis, config)
}

#[test]
fn a_redis_with_tls_a_password_and_client_certificates_answers_flow_by_flow() {
    let (_pki, _redis, config) = tls_redis("cache-tls", "route-cache-pw");
    burst(config.route_store.as_ref().unwrap(), &config.redis_access);
}

/// Records one flow and looks it up through a helper on `store` reached as `access` says,
/// and returns the failures counted, by reason (a refused connection fails every request).
fn failures_of_one_record_and_lookup(
    store: &RouteStore,
    access: &RedisAccess,
) -> [u64; CacheError::COUNT] {
    let (cache, clients) = one_worker_cache(store, access);
    let client = &clients[0];
    assert!(client.submit(RouteCacheRequest::Record {
        key: key(1),
        route: route(1)
    }));
    assert!(client.submit(RouteCacheRequest::Lookup { key: key(1) }));
    let failures = std::cell::Cell::new([0; CacheError::COUNT]);
    wait_until("both requests to fail", 10, || {
        let mut sum = failures.get();
        for (s, new) in sum.iter_mut().zip(client.take_failures()) {
            *s += new;
        }
        failures.set(sum);
        sum.iter().sum::<u64>() >= 2
    });
    assert!(
        client.next_answer().is_none(),
        "no answer from a Redis that refused us"
    );
    drop(clients);
    cache.stop();
    failures.get()
}

#[test]
fn a_wrong_password_an_untrusted_redis_or_no_client_certificate_is_counted_never_answered() {
    let (_pki, redis, good) = tls_redis("cache-tls-refused", "right-pw");
    let store = good.route_store.unwrap();
    let good = good.redis_access;
    let wrong_password = RedisAccess {
        password: Some("wrong-pw".into()),
        ..good.clone()
    };
    let other_pki = TestPki::new("cache-tls-other", unique_ip().into());
    let other_ca = ufrag_common::config::PemFile {
        path: other_pki.file("ca.pem"),
        pem: std::fs::read(other_pki.file("ca.pem")).unwrap(),
    };
    let untrusted = RedisAccess {
        ca: Some(other_ca),
        ..good.clone()
    };
    let no_client_certificate = RedisAccess {
        client: None,
        ..good.clone()
    };
    let plaintext = RouteStore::Server(format!("redis://{}", redis.addr));
    // A refused handshake fails the connection: `unreachable`. Plaintext to a TLS port
    // connects (no AUTH to refuse) and fails at the first pipeline.
    let refused_at_connect: &[CacheError] = &[CacheError::Unreachable];
    let refused_at_command: &[CacheError] = &[
        CacheError::Unreachable,
        CacheError::Timeout,
        CacheError::CommandFailed,
    ];
    for (what, store, access, reasons) in [
        (
            "a wrong password",
            &store,
            &wrong_password,
            refused_at_connect,
        ),
        (
            "a server certificate from another CA",
            &store,
            &untrusted,
            refused_at_connect,
        ),
        (
            "no client certificate",
            &store,
            &no_client_certificate,
            refused_at_connect,
        ),
        (
            "plaintext to a TLS port",
            &plaintext,
            &RedisAccess::default(),
            refused_at_command,
        ),
    ] {
        let failures = failures_of_one_record_and_lookup(store, access);
        let counted: u64 = failures.iter().sum();
        let under_its_reasons: u64 = reasons.iter().map(|r| failures[r.index()]).sum();
        assert!(counted >= 2, "{what}: {failures:?}");
        assert_eq!(
            under_its_reasons, counted,
            "{what}: every failure under {reasons:?}: {failures:?}"
        );
    }
}

#[test]
fn answers_beyond_a_full_answer_queue_are_counted_as_failures_never_waited_for() {
    let redis = RedisServer::start_at(unique_ip());
    let (cache, clients) =
        one_worker_cache(&RouteStore::Server(redis.url()), &RedisAccess::default());
    let client = &clients[0];
    // A worker that stops reading its answers: the helper never blocks on it.
    let over = 10;
    for i in 0..(ANSWER_QUEUE + over) as u32 {
        assert!(client.submit(RouteCacheRequest::Lookup { key: key(i) }));
    }
    // The overflow is the last lookups queued: once they are counted, all are handled.
    let failures = std::cell::Cell::new(0);
    wait_until("the helper to answer or fail every lookup", 20, || {
        let taken = client.take_failures();
        let others: u64 = CacheError::ALL
            .iter()
            .filter(|r| **r != CacheError::AnswerQueueFull)
            .map(|r| taken[r.index()])
            .sum();
        assert_eq!(others, 0, "only answer_queue_full: {taken:?}");
        failures.set(failures.get() + taken[CacheError::AnswerQueueFull.index()]);
        failures.get() >= over as u64
    });
    assert_eq!(
        failures.get(),
        over as u64,
        "exactly the lookups with no room, as answer_queue_full"
    );
    let mut answered = 0;
    while client.next_answer().is_some() {
        answered += 1;
    }
    assert_eq!(answered, ANSWER_QUEUE, "the queue held all it could");
    drop(clients);
    cache.stop();
}

#[test]
fn a_relay_on_a_redis_cluster_restores_every_flow_after_a_restart() {
    use ufrag_testkit::relay_suite::harness::{
        RelayProcess, RelaySetup, binding_request_for, prove_flow, rtp,
    };
    use ufrag_testkit::relay_suite::{Backend, Place};
    let backend = Backend::mio(env!("CARGO_BIN_EXE_relay-mio"), Place::Loopback);
    let net = backend.net();
    let cluster = RedisCluster::start(unique_ip(), 3);
    let setup = RelaySetup {
        extra: vec!["--redis-cluster-node".into(), cluster.urls()[1].clone()],
        ..RelaySetup::on(net.clone())
    };
    let transceiver = net.transceiver();
    let clients: Vec<_> = (0..12).map(|_| net.client()).collect();
    let relay = RelayProcess::start(&setup);
    for (i, c) in clients.iter().enumerate() {
        c.send(
            relay.vip(),
            &binding_request_for(transceiver.addr(), 0, i as u8),
        );
        assert!(transceiver.recv_frame().is_some(), "flow {i} made");
        prove_flow(&relay, &transceiver, c); // media both ways: the flow is recorded
    }
    wait_until("12 flows to reach the cluster", 10, || {
        cluster.keys_per_node().iter().sum::<u64>() >= 12
    });
    let held = cluster.keys_per_node();
    assert!(
        held.iter().filter(|&&n| n > 0).count() >= 2,
        "flows on more than one master: {held:?}"
    );
    drop(relay); // SIGKILL: the flow table is gone

    let relay = RelayProcess::start(&setup);
    for c in &clients {
        c.send(relay.vip(), &rtp(1));
    }
    let mut restored = std::collections::HashSet::new();
    for _ in &clients {
        let (h, payload, _) = transceiver
            .recv_frame()
            .expect("the first packet after the restart goes on once the route is back");
        assert_eq!(payload, rtp(1));
        restored.insert(h.client);
    }
    assert_eq!(
        restored.len(),
        clients.len(),
        "every client's flow restored"
    );
    relay.wait_for("12 cache hits", |r| {
        r.total("ufrag_relay_cache_hits_total", "") == 12.0
    });
}

/// `GET key` on a TLS-only Redis at `url` (`rediss://ip:port`), through `redis-cli` with
/// `pki`'s client certificate and `password`: `None` when absent or unreachable.
fn tls_get(url: &str, pki: &TestPki, password: &str, key: &str) -> Option<String> {
    let (host, port) = url.strip_prefix("rediss://")?.rsplit_once(':')?;
    let file = |name: &str| pki.file(name).to_string_lossy().into_owned();
    let out = std::process::Command::new("redis-cli")
        .args([
            "--tls",
            "--cacert",
            &file("ca.pem"),
            "--cert",
            &file("client.pem"),
        ])
        .args(["--key", &file("client.key"), "-h", host, "-p", port])
        .args(["--no-auth-warning", "-a", password, "GET", key])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

#[test]
fn a_relay_on_redis_over_tls_restores_its_flow_after_a_restart() {
    use ufrag_testkit::relay_suite::harness::{
        RelayProcess, RelaySetup, binding_request_for, prove_flow, rtp,
    };
    use ufrag_testkit::relay_suite::{Backend, Place};
    let backend = Backend::mio(env!("CARGO_BIN_EXE_relay-mio"), Place::Loopback);
    let net = backend.net();
    let ip = unique_ip();
    let pki = TestPki::new("relay-tls", ip.into());
    let redis = RedisServer::start_tls(ip, &pki, "relay-pw");
    let file = |name: &str| pki.file(name).to_string_lossy().into_owned();
    let setup = RelaySetup {
        extra: vec![
            "--redis-url".into(),
            redis.tls_url(),
            "--redis-password-file".into(),
            password_file(&pki, "relay-pw")
                .to_string_lossy()
                .into_owned(),
            "--redis-ca-file".into(),
            file("ca.pem"),
            "--redis-client-cert-file".into(),
            file("client.pem"),
            "--redis-client-key-file".into(),
            file("client.key"),
        ],
        ..RelaySetup::on(net.clone())
    };
    let transceiver = net.transceiver();
    let client = net.client();
    let relay = RelayProcess::start(&setup);
    client.send(relay.vip(), &binding_request_for(transceiver.addr(), 0, 1));
    assert!(transceiver.recv_frame().is_some(), "flow made");
    prove_flow(&relay, &transceiver, &client); // media both ways: the flow is recorded
    // Read back over TLS, as the relay writes it (a fixed wait failed once under load).
    let key = format!("ufrag-relay:flow:{}|{}", client.addr(), relay.vip());
    wait_until("the flow to reach Redis over TLS", 10, || {
        tls_get(&redis.tls_url(), &pki, "relay-pw", &key).is_some()
    });
    assert_eq!(relay.total("ufrag_relay_cache_errors_total", ""), 0.0);
    drop(relay); // SIGKILL: the flow table is gone

    let relay = RelayProcess::start(&setup);
    // The restarted relay may still be connecting to Redis over TLS when the first
    // datagram comes: that lookup fails (counted, and not remembered as a miss), so the
    // client's next datagram asks again. A bounded number of tries.
    let (h, payload, _) = (0..5)
        .find_map(|_| {
            client.send(relay.vip(), &rtp(1));
            transceiver.recv_frame()
        })
        .expect("a packet after the restart goes on once the route is back");
    assert_eq!((h.client, payload), (client.addr(), rtp(1)));
    relay.wait_for("a cache hit", |r| {
        r.total("ufrag_relay_cache_hits_total", "") == 1.0
    });
    assert_eq!(relay.total("ufrag_relay_cache_errors_total", ""), 0.0);
}

#[test]
fn the_redis_password_comes_from_a_file_or_the_environment_never_both() {
    let run = |flags: &[&str], env_password: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_relay-mio"));
        cmd.args([
            "--vip",
            "127.0.0.1:3478",
            "--internal-addr",
            "127.0.0.1:40000",
        ])
        .args(["--allow-transceiver-net", "127.0.0.0/8", "--print-config"])
        .args(["--redis-url", "redis://127.0.0.1:6379"])
        .args(flags)
        .env("UFRAG_RELAY_HINT_KEYS", KEYS)
        .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1");
        match env_password {
            Some(p) => cmd.env("UFRAG_REDIS_PASSWORD", p),
            None => cmd.env_remove("UFRAG_REDIS_PASSWORD"),
        };
        cmd.output().unwrap()
    };
    let from_env = run(&[], Some("env-pw-123"));
    assert!(
        from_env.status.success(),
        "{}",
        String::from_utf8_lossy(&from_env.stderr)
    );
    let printed = String::from_utf8_lossy(&from_env.stdout);
    assert!(!printed.contains("env-pw-123"), "never printed: {printed}");
    let pki = TestPki::new("password-both", unique_ip().into());
    let path = password_file(&pki, "file-pw");
    let both = run(
        &["--redis-password-file", path.to_str().unwrap()],
        Some("env-pw-123"),
    );
    assert_eq!(both.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert!(
        stderr.contains("`redis_password_file`") && stderr.contains("UFRAG_REDIS_PASSWORD"),
        "{stderr}"
    );
}
