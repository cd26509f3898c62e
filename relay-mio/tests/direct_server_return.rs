//! Direct server return with ECMP, on real namespaces: the pattern of
//! docs/deployment.md's "How the public VIP reaches the relays", and what the relays must
//! do for it.
//!
//! ```text
//!   client 10.77.0.1 ──► router (the bridge's namespace, 10.77.0.254)
//!                          VIP 10.77.9.9/32: ECMP, L4 hash, next hops relay A and B
//!   relay A 10.77.0.2 ─┐   each holds the VIP on loopback and binds it (--vip)
//!   relay B 10.77.0.4 ─┤   answers leave from the VIP straight to the client,
//!                      │   never back through the router
//!   transceiver + Redis 10.77.0.3
//! ```
//!
//! Clients make flows (a Binding Request each, then media both ways, which records the
//! flow in Redis); the router spreads them over both relays. Relay A is then drained
//! (SIGTERM: `/readyz` turns 503 while it still forwards), the router withdraws it as a
//! balancer's health check or a BGP speaker would, and every client keeps talking: relay B
//! restores A's flows from Redis at their next datagram. A is restarted and put back;
//! the flows that hash to it again are restored there. No datagram of any phase is lost,
//! every answer reaches its client from the VIP, and the router forwards the clients'
//! datagrams only (its forwarding counter), never an answer. Needs root (CI runs as root).

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ufrag_testkit::child::OwnedChild;
use ufrag_testkit::keys::KEYS;
use ufrag_testkit::redis::RedisServer;
use ufrag_testkit::relay_suite::harness::{Endpoint, binding_request_for, rtp};
use ufrag_testkit::testbed::{Testbed, TestbedOptions};

const VIP: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(10, 77, 9, 9)), 3478);
const ROUTER: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 254);
const METRICS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 9590);
/// Client flows: with an L4 hash over two next hops, all on one relay has odds 2^-23.
const CLIENTS: usize = 24;

/// Runs `program args…` in namespace `ns`; panics naming the command if it fails.
fn run_in(ns: &str, program: &str, args: &[&str]) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .output()
        .expect("ip runs");
    assert!(
        out.status.success(),
        "{program} {} in {ns}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One relay-mio holding the VIP on `host`'s loopback.
struct Relay {
    child: OwnedChild,
    ns: String,
    internal: SocketAddr,
}

impl Relay {
    fn start(host: &ufrag_testkit::testbed::Host, redis: &RedisServer) -> Relay {
        let internal = SocketAddr::from((host.addr, 40_000));
        let mut command = host.command(env!("CARGO_BIN_EXE_relay-mio"));
        command
            .args(["--vip", &VIP.to_string()])
            .args(["--internal-addr", &internal.to_string()])
            .args(["--workers", "1", "--cpus", "0"])
            .args(["--allow-transceiver-net", "10.77.0.0/24"])
            .args(["--metrics-addr", &METRICS.to_string()])
            .args(["--redis-url", &redis.url()])
            .args(["--drain-time", "5s"])
            .env("UFRAG_RELAY_HINT_KEYS", KEYS)
            .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let relay = Relay {
            child: OwnedChild::spawn(&mut command).expect("relay-mio starts"),
            ns: host.ns.clone(),
            internal,
        };
        wait_until("the relay to be ready", || relay.readyz() == Some(200));
        relay
    }

    fn readyz(&self) -> Option<u16> {
        ufrag_testkit::http::get(Some(&self.ns), METRICS, "/readyz").map(|(status, _)| status)
    }

    /// The sum of `name`'s series; fails if the relay does not answer or has no such
    /// series (so a check for zero cannot pass on a relay that is gone).
    fn metric(&self, name: &str) -> f64 {
        let (_, text) = ufrag_testkit::http::get(Some(&self.ns), METRICS, "/metrics")
            .expect("the relay answers /metrics");
        assert!(text.contains(name), "the relay exports {name}");
        ufrag_testkit::http::metric_sum(&text, name)
    }

    /// Waits (workers publish their counters every few ms) until `name` sums to `want`;
    /// fails with what it read, saying `why`.
    fn expect_metric(&self, name: &str, want: f64, why: &str) {
        settles_within(10, || self.metric(name) == want);
        assert_eq!(self.metric(name), want, "{why}: {name}");
    }

    /// SIGTERM: the relay turns not ready, drains, and exits.
    fn drain(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    fn wait_exit(&mut self) {
        let exited = settles_within(15, || self.child.try_wait().expect("try_wait").is_some());
        assert!(exited, "the drained relay exits");
    }
}

/// Polls `done` every 50 ms for up to `seconds`; whether it came true.
fn settles_within(seconds: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    assert!(settles_within(10, done), "waited 10 s for {what}");
}

/// How many datagrams the router has forwarded (`Ip: ForwDatagrams` of its namespace).
fn forwarded_by(router: &str) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", router, "cat", "/proc/net/snmp"])
        .output()
        .expect("ip runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut ip_lines = text.lines().filter(|l| l.starts_with("Ip: "));
    let (names, values) = (
        ip_lines.next().expect("Ip names"),
        ip_lines.next().expect("Ip values"),
    );
    let column = names
        .split_whitespace()
        .position(|n| n == "ForwDatagrams")
        .expect("an ForwDatagrams column");
    values
        .split_whitespace()
        .nth(column)
        .expect("a value")
        .parse()
        .expect("a number")
}

/// The router's route to the VIP: ECMP over `next_hops`.
fn route_vip(router: &str, next_hops: &[Ipv4Addr]) {
    let vip = format!("{}/32", VIP.ip());
    let mut args = vec!["route", "replace", vip.as_str()];
    let hops: Vec<String> = next_hops.iter().map(|h| h.to_string()).collect();
    for hop in &hops {
        args.extend(["nexthop", "via", hop.as_str()]);
    }
    run_in(router, "ip", &args);
}

/// Every client sends `payload`; returns which relay (internal address) delivered each
/// client's datagram to the transceiver. Fails if one is lost.
fn every_client_sends(
    clients: &[Endpoint],
    transceiver: &Endpoint,
    payload: &[u8],
) -> HashMap<SocketAddr, SocketAddr> {
    for c in clients {
        c.send(VIP, payload);
    }
    let mut via = HashMap::new();
    while via.len() < clients.len() {
        let Some((header, got, from)) = transceiver.recv_frame() else {
            let lost: Vec<_> = clients
                .iter()
                .map(Endpoint::addr)
                .filter(|a| !via.contains_key(a))
                .collect();
            panic!("datagrams from {lost:?} never reached the transceiver");
        };
        assert_eq!(got, payload);
        via.insert(header.client, from);
    }
    via
}

/// The transceiver answers each client through the relay that delivered its datagram;
/// every answer reaches its client from the VIP, not from the relay's own address.
fn every_client_is_answered(
    clients: &[Endpoint],
    transceiver: &Endpoint,
    via: &HashMap<SocketAddr, SocketAddr>,
    seq: u16,
) {
    for c in clients {
        transceiver.send_frame(via[&c.addr()], c.addr(), VIP, &rtp(seq));
    }
    for c in clients {
        let (got, from) = c
            .recv()
            .expect("the transceiver's answer reaches the client");
        assert_eq!(
            from, VIP,
            "answers leave from the VIP (direct server return)"
        );
        assert_eq!(got, rtp(seq));
    }
}

fn flows_per_relay(via: &HashMap<SocketAddr, SocketAddr>) -> BTreeMap<SocketAddr, usize> {
    let mut per = BTreeMap::new();
    for relay in via.values() {
        *per.entry(*relay).or_default() += 1;
    }
    per
}

#[test]
fn with_ecmp_and_the_vip_on_loopback_clients_keep_talking_while_a_relay_drains_and_restarts() {
    let bed = Testbed::up_with(TestbedOptions {
        queues: 1,
        second_relay: true,
    })
    .expect("the testbed needs root; CI runs as root");
    let (a_host, b_host) = (bed.relay.clone(), bed.relay2.clone().expect("asked for"));
    let (router, _) = bed.bridge_side(&bed.client);

    // The router: the bridge's namespace gets an address and forwards, hashing each
    // 5-tuple over the next hops; it sends no redirects (the answer path is direct).
    let router_cidr = format!("{ROUTER}/24");
    run_in(&router, "ip", &["addr", "add", &router_cidr, "dev", "br0"]);
    for knob in [
        "net.ipv4.ip_forward=1",
        "net.ipv4.fib_multipath_hash_policy=1",
        "net.ipv4.conf.all.send_redirects=0",
        "net.ipv4.conf.br0.send_redirects=0",
    ] {
        run_in(&router, "sysctl", &["-qw", knob]);
    }
    route_vip(&router, &[a_host.addr, b_host.addr]);
    // The client reaches the VIP through the router.
    let vip = format!("{}/32", VIP.ip());
    let router_ip = ROUTER.to_string();
    run_in(
        &bed.client.ns,
        "ip",
        &["route", "add", &vip, "via", &router_ip],
    );
    // Each relay holds the VIP on loopback and never answers ARP for it.
    for host in [&a_host, &b_host] {
        run_in(&host.ns, "ip", &["addr", "add", &vip, "dev", "lo"]);
        for knob in [
            "net.ipv4.conf.all.arp_ignore=1",
            "net.ipv4.conf.all.arp_announce=2",
        ] {
            run_in(&host.ns, "sysctl", &["-qw", knob]);
        }
    }

    let redis = RedisServer::start_on(
        SocketAddr::from((bed.transceiver.addr, 6379)),
        Some(&bed.transceiver.ns),
    );
    let mut relay_a = Relay::start(&a_host, &redis);
    let relay_b = Relay::start(&b_host, &redis);
    let transceiver = Endpoint::bind_in(Some(&bed.transceiver.ns), bed.transceiver.addr);
    let clients: Vec<Endpoint> = (0..CLIENTS)
        .map(|_| Endpoint::bind_in(Some(&bed.client.ns), bed.client.addr))
        .collect();

    // Each client's first Binding Request makes its flow on the relay the router picked;
    // media both ways proves it, and the relay records it in Redis.
    for (i, c) in clients.iter().enumerate() {
        c.send(VIP, &binding_request_for(transceiver.addr(), 0, i as u8));
        transceiver
            .recv_frame()
            .expect("the Binding Request reaches the transceiver");
    }
    let forwarded = forwarded_by(&router);
    let first = every_client_sends(&clients, &transceiver, &rtp(1));
    assert_eq!(
        forwarded_by(&router) - forwarded,
        CLIENTS as u64,
        "the router forwarded each client's datagram to a relay"
    );
    every_client_is_answered(&clients, &transceiver, &first, 2);
    assert_eq!(
        forwarded_by(&router) - forwarded,
        CLIENTS as u64,
        "the answers went straight to the clients, never back through the router"
    );
    let on = flows_per_relay(&first);
    assert_eq!(
        on.len(),
        2,
        "the router's hash spreads {CLIENTS} flows over both relays: {on:?}"
    );
    let on_a = on[&relay_a.internal];
    assert_eq!(every_client_sends(&clients, &transceiver, &rtp(3)), first);
    for c in &clients {
        redis.wait_for_flow(c.addr(), VIP);
    }

    // Drain A: it turns not ready at once and still forwards its flows.
    relay_a.drain();
    wait_until("relay A to answer /readyz 503", || {
        relay_a.readyz() == Some(503)
    });
    assert_eq!(
        every_client_sends(&clients, &transceiver, &rtp(4)),
        first,
        "a draining relay keeps forwarding its flows"
    );
    // The router withdraws A, as a health check on /readyz or a BGP speaker would.
    route_vip(&router, &[b_host.addr]);
    let moved = every_client_sends(&clients, &transceiver, &rtp(5));
    assert!(
        moved.values().all(|r| *r == relay_b.internal),
        "every flow now arrives at relay B: {:?}",
        flows_per_relay(&moved)
    );
    every_client_is_answered(&clients, &transceiver, &moved, 6);
    relay_b.expect_metric(
        "ufrag_relay_cache_hits_total",
        on_a as f64,
        &format!("relay B restored each of A's {on_a} flows from Redis"),
    );
    relay_a.expect_metric(
        "ufrag_relay_dropped_datagrams_total",
        0.0,
        "the drained relay A dropped nothing",
    );
    relay_a.wait_exit();

    // A restarts with an empty table and is put back: the flows that hash to it again
    // are restored there from Redis.
    let relay_a = Relay::start(&a_host, &redis);
    route_vip(&router, &[a_host.addr, b_host.addr]);
    let back = every_client_sends(&clients, &transceiver, &rtp(7));
    every_client_is_answered(&clients, &transceiver, &back, 8);
    assert_eq!(
        flows_per_relay(&back),
        on,
        "the same hash over the same next hops: each flow is back on its first relay"
    );
    relay_a.expect_metric(
        "ufrag_relay_cache_hits_total",
        on_a as f64,
        &format!("the restarted relay A restored its {on_a} flows from Redis"),
    );
    for (relay, name) in [(&relay_a, "the restarted A"), (&relay_b, "B")] {
        relay.expect_metric(
            "ufrag_relay_dropped_datagrams_total",
            0.0,
            &format!("relay {name} dropped nothing"),
        );
    }
}
