//! The Redis route cache against a real `redis-server`: a restarted relay restores a flow
//! from the first SRTP-like packet (relay-mio sends that packet on once the route is
//! back; relay-afxdp drops it); without Redis the next STUN restores it; Redis dying
//! mid-run does not stop forwarding, and the relay reconnects when it is back; media
//! without a flow asks Redis within bounds.

use std::time::Duration;

use super::Backend;
use super::harness::*;

fn setup_with(net: &Net, redis: Option<&RedisServer>) -> RelaySetup {
    let mut extra = vec![];
    if let Some(r) = redis {
        extra.extend(["--redis-url".to_string(), r.url()]);
    }
    RelaySetup {
        extra,
        ..RelaySetup::on(net.clone())
    }
}

/// A relay with Redis and one flow proven both ways, its route written to Redis.
struct CachedFlow {
    redis: RedisServer,
    setup: RelaySetup,
    transceiver: Endpoint,
    client: Endpoint,
    relay: RelayProcess,
}

fn a_cached_flow(b: &Backend) -> CachedFlow {
    let net = b.net();
    let redis = net.redis();
    let setup = setup_with(&net, Some(&redis));
    let (transceiver, client) = (net.transceiver(), net.client());
    let relay = RelayProcess::start(&setup);
    client.send(relay.vip(), &binding_request_for(transceiver.addr(), 0, 1));
    assert!(transceiver.recv_frame().is_some());
    prove_flow(&relay, &transceiver, &client);
    redis.wait_for_flow(client.addr(), relay.vip());
    CachedFlow {
        redis,
        setup,
        transceiver,
        client,
        relay,
    }
}

pub fn a_restarted_relay_restores_the_flow_from_the_first_srtp_packet(b: &Backend) {
    let net = b.net();
    let redis = net.redis();
    let setup = setup_with(&net, Some(&redis));
    let transceiver = net.transceiver();
    let client = net.client();
    let relay = RelayProcess::start(&setup);
    client.send(relay.vip(), &binding_request_for(transceiver.addr(), 0, 1));
    assert!(transceiver.recv_frame().is_some());
    // A flow that carried only STUN is not cached (spoofed STUN must not fill Redis)…
    std::thread::sleep(Duration::from_millis(300));
    let key = format!("ufrag-relay:flow:{}|{}", client.addr(), relay.vip());
    assert_eq!(redis.get(&key), None, "a STUN-only flow was cached");
    // …nor one that carried media from the client only (a spoofer can send that blind)…
    client.send(relay.vip(), &rtp(0));
    assert!(transceiver.recv_frame().is_some());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        redis.get(&key),
        None,
        "a flow proven by the client alone was cached"
    );
    // …media both ways has it recorded.
    prove_flow(&relay, &transceiver, &client);
    let value = redis.wait_for_flow(client.addr(), relay.vip());
    assert!(
        value.starts_with(&format!("{}|-|1|", transceiver.addr())),
        "route recorded: transceiver, no return relay, then key id 1 and the MAC: {value}"
    );
    drop(relay); // SIGKILL: the flow table is gone

    let relay = RelayProcess::start(&setup);
    // The first SRTP packet finds no flow; the cache is asked. relay-mio keeps a copy of
    // the packet and sends it on when the route comes back; AF_XDP rewrites frames in
    // place and cannot keep one, so relay-afxdp drops it.
    client.send(relay.vip(), &rtp(1));
    relay.wait_for("cache hit", |r| {
        r.total("ufrag_relay_cache_hits_total", "") == 1.0
    });
    if b.xdp.is_none() {
        let (h, payload, _) = transceiver.recv_frame().expect("the parked packet goes on");
        assert_eq!((h.client, payload), (client.addr(), rtp(1)));
        assert_eq!(relay.drops("no_flow_cache_lookup"), 0.0);
    } else {
        assert_eq!(relay.drops("no_flow_cache_lookup"), 1.0);
        assert!(
            transceiver.nothing_arrives(),
            "relay-afxdp drops the triggering packet"
        );
    }
    // …and the flow is back: no STUN needed.
    client.send(relay.vip(), &rtp(2));
    let (h, payload, _) = transceiver.recv_frame().expect("flow restored from redis");
    assert_eq!((h.client, payload), (client.addr(), rtp(2)));
    // The return path works too.
    transceiver.send_frame(relay.internal_of(0), client.addr(), relay.vip(), &rtp(3));
    assert_eq!(client.recv().expect("reply").0, rtp(3));
}

pub fn without_redis_a_restarted_relay_waits_for_the_next_stun(b: &Backend) {
    let net = b.net();
    let setup = setup_with(&net, None);
    let transceiver = net.transceiver();
    let client = net.client();
    let relay = RelayProcess::start(&setup);
    client.send(relay.vip(), &binding_request_for(transceiver.addr(), 0, 1));
    assert!(transceiver.recv_frame().is_some());
    drop(relay);

    let relay = RelayProcess::start(&setup);
    client.send(relay.vip(), &rtp(1));
    relay.wait_for("no_flow", |r| r.drops("no_flow") == 1.0);
    assert!(transceiver.nothing_arrives());
    // The next consent check (STUN) recreates the flow.
    client.send(relay.vip(), &binding_request_for(transceiver.addr(), 0, 1));
    assert!(transceiver.recv_frame().is_some());
    client.send(relay.vip(), &rtp(2));
    assert_eq!(transceiver.recv_frame().unwrap().1, rtp(2));
    assert_eq!(relay.total("ufrag_relay_cache_hits_total", ""), 0.0);
}

/// A route written to Redis by something that
/// holds no hint key (any pod that can reach Redis) is not followed. The forged value
/// points the client's flow at another address in the transceivers' network; the
/// restarted relay counts it `unauthenticated`, restores nothing, and sends the client's
/// media nowhere. Before, the relay followed any route into the allowed networks.
pub fn a_route_forged_in_redis_is_not_followed(b: &Backend) {
    let CachedFlow {
        redis,
        setup,
        transceiver,
        client,
        relay,
    } = a_cached_flow(b);
    let vip = relay.vip();
    drop(relay);
    // Another port of the transceivers' address: inside the allowed network.
    let elsewhere = std::net::SocketAddr::new(transceiver.addr().ip(), 9);
    let key = format!("ufrag-relay:flow:{}|{vip}", client.addr());
    for forged in [
        format!("{elsewhere}|-|1|{}", "00".repeat(16)),
        format!("{elsewhere}|-"),
    ] {
        assert_eq!(
            redis.command(&["SET", &key, &forged]).as_deref(),
            Some("OK")
        );
        let relay = RelayProcess::start(&setup);
        client.send(relay.vip(), &rtp(1));
        relay.wait_for("the lookup answered", |r| {
            r.total("ufrag_relay_cache_misses_total", "") == 1.0
        });
        assert_eq!(relay.total("ufrag_relay_cache_hits_total", ""), 0.0);
        let unauthenticated = relay.total(
            "ufrag_relay_cache_errors_total",
            "reason=\"unauthenticated\"",
        );
        // A MAC that does not verify is counted; a value of no relay's shape is a miss.
        let mac_given = forged.matches('|').count() == 3;
        assert_eq!(unauthenticated, f64::from(u8::from(mac_given)), "{forged}");
        client.send(relay.vip(), &rtp(2));
        assert!(transceiver.nothing_arrives(), "no flow was restored");
    }
}

/// When a session ends, its relay frees the flow
/// and removes its route from Redis, so the client's late media (a browser keeps sending
/// for a while after the app ends the call) cannot restore it. Before, the notice did not
/// exist, and a freed flow's route would have brought it back as proven.
pub fn an_ended_sessions_route_leaves_redis_with_its_flow(b: &Backend) {
    let CachedFlow {
        redis,
        setup: _setup,
        transceiver,
        client,
        relay,
    } = a_cached_flow(b);
    transceiver.send_session_ended(relay.internal_of(0), client.addr(), relay.vip());
    relay.wait_for("the notice taken", |r| r.drops("session_ended") == 1.0);
    let key = format!("ufrag-relay:flow:{}|{}", client.addr(), relay.vip());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while redis.get(&key).is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the route stayed in redis"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    client.send(relay.vip(), &rtp(9));
    relay.wait_for("the lookup's miss", |r| {
        r.total("ufrag_relay_cache_misses_total", "") == 1.0
    });
    assert!(transceiver.nothing_arrives(), "the flow stayed freed");
}

/// How many GETs `redis` has served (its `INFO commandstats`).
fn get_calls(redis: &RedisServer) -> u64 {
    let stats = redis.command(&["INFO", "commandstats"]).unwrap_or_default();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Media without a flow asks Redis within bounds.
/// A client repeating itself asks once, then is told "not again yet" for 2 s
/// (`no_flow_recent_miss`); media sprayed from 200 source ports of one prefix asks at
/// most the prefix's burst (`no_flow_lookup_rate`). Before, every such datagram was one
/// Redis GET.
pub fn media_without_a_flow_asks_the_route_cache_within_its_bounds(b: &Backend) {
    let net = b.net();
    let redis = net.redis();
    let setup = setup_with(&net, Some(&redis));
    let relay = RelayProcess::start(&setup);
    let before = get_calls(&redis);
    let client = net.client();
    client.send(relay.vip(), &rtp(0));
    relay.wait_for("the cache's miss", |r| {
        r.total("ufrag_relay_cache_misses_total", "") == 1.0
    });
    for seq in 1..=20 {
        client.send(relay.vip(), &rtp(seq));
    }
    relay.wait_for("20 datagrams told not again yet", |r| {
        r.drops("no_flow_recent_miss") == 20.0
    });
    assert_eq!(get_calls(&redis) - before, 1, "one question for one flow");
    let sprayers: Vec<Endpoint> = (0..200).map(|_| net.client()).collect();
    for sprayer in &sprayers {
        sprayer.send(relay.vip(), &rtp(0));
    }
    relay.wait_for("every sprayed datagram decided", |r| {
        r.drops("no_flow_lookup_rate") + r.total("ufrag_relay_cache_misses_total", "") >= 200.0
    });
    let asked = get_calls(&redis) - before - 1;
    let refused = relay.drops("no_flow_lookup_rate");
    // The prefix's burst (50), and what it refilled while the spray went out (50/s).
    assert!(
        (50..=60).contains(&asked) && refused >= 140.0,
        "{asked} GETs, {refused} refused"
    );
}

pub fn redis_dying_mid_run_does_not_stop_forwarding_and_the_relay_reconnects(b: &Backend) {
    let net = b.net();
    let mut redis = net.redis();
    let redis_addr = redis.addr;
    let setup = setup_with(&net, Some(&redis));
    let transceiver = net.transceiver();
    let client = net.client();
    let relay = RelayProcess::start(&setup);
    client.send(relay.vip(), &binding_request_for(transceiver.addr(), 0, 1));
    assert!(transceiver.recv_frame().is_some());

    redis.kill();
    // One at a time, so what is measured is the relay, not the fake transceiver's
    // receive buffer on a busy machine (AF_XDP copy-mode frames have a large truesize).
    for seq in 0..50 {
        client.send(relay.vip(), &rtp(seq));
        let (_, payload, _) = transceiver
            .recv_frame()
            .expect("existing flows keep forwarding with redis down");
        assert_eq!(payload, rtp(seq));
    }
    // New flows are still made from STUN; recording them once proven fails and is
    // counted.
    let second = net.client();
    second.send(relay.vip(), &binding_request_for(transceiver.addr(), 0, 2));
    assert!(transceiver.recv_frame().is_some(), "new flows still work");
    prove_flow(&relay, &transceiver, &second);
    relay.wait_for("cache errors counted", |r| {
        r.total("ufrag_relay_cache_errors_total", "") >= 1.0
    });

    // Redis comes back (empty): the relay reconnects (backoff ≤ 2 s). A flow made once it
    // has is recorded, and a restarted relay restores that flow from the cache.
    let _redis = net.redis_on(redis_addr);
    let deadline = std::time::Instant::now() + WAIT;
    let mut session = 3u8;
    let recorded = loop {
        // A new session each time (one request from a new address would be a replay).
        let attempt = net.client();
        attempt.send(
            relay.vip(),
            &binding_request_for(transceiver.addr(), 0, session),
        );
        assert!(transceiver.recv_frame().is_some());
        prove_flow(&relay, &transceiver, &attempt);
        session = session.wrapping_add(1);
        std::thread::sleep(Duration::from_millis(200));
        let key = format!("ufrag-relay:flow:{}|{}", attempt.addr(), relay.vip());
        if _redis.get(&key).is_some() {
            break attempt;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "relay never reconnected to redis"
        );
    };
    drop(relay);
    let relay = RelayProcess::start(&setup);
    recorded.send(relay.vip(), &rtp(1));
    relay.wait_for("restored after reconnect", |r| {
        r.total("ufrag_relay_cache_hits_total", "") == 1.0
    });
    recorded.send(relay.vip(), &rtp(2));
    if b.xdp.is_none() {
        // relay-mio sent the looked-up packet on once the route was back.
        assert_eq!(
            transceiver.recv_frame().expect("parked, then sent").1,
            rtp(1)
        );
    }
    assert_eq!(transceiver.recv_frame().expect("restored").1, rtp(2));
}
