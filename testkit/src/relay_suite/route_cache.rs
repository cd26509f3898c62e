//! The Redis route cache against a real `redis-server`: a restarted relay restores a flow
//! from the first SRTP-like packet (relay-mio sends that packet on once the route is
//! back; relay-afxdp drops it); without Redis the next STUN restores it; Redis dying
//! mid-run does not stop forwarding, and the relay reconnects when it is back.

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
    assert_eq!(
        value,
        format!("{}|-", transceiver.addr()),
        "route recorded: transceiver, no return relay"
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
