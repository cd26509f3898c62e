//! relay-afxdp end to end on the netns testbed (root only; CI runs as root): a client
//! makes a flow with a Binding Request and sends RTP-like datagrams; relay-afxdp forwards
//! them framed to a (fake, echoing) transceiver and the replies back to the client, in
//! skb and native XDP mode, in wakeup and busy-poll mode, over IPv4 and IPv6 (next hops
//! from the kernel's ARP and neighbour-discovery tables alike). Ping (ARP + ICMP) to the
//! relay's address keeps working; metrics come from the same `/metrics` as relay-mio's;
//! SIGKILL leaves no XDP program behind. The skb-mode relays find their interface
//! themselves (`--interface auto`: the one holding the internal address), as a
//! DaemonSet's do; the native-mode ones are told it.

use std::time::{Duration, Instant};

use ufrag_testkit::testbed::Testbed;
use ufrag_testkit::testbed::tools::{
    probe_through_relay_in, relay_http, relay_metric, require_root, start_relay_in,
    wait_until_no_xdp,
};

fn run(xdp_mode: &str, poll: &str, ipv6: bool, interface: Interface) {
    require_root();
    let bed = Testbed::up().unwrap();
    let ifname = match interface {
        Interface::Named => bed.relay.ifname.clone(),
        Interface::Auto => "auto".to_string(),
    };
    let relay_ip = bed.relay.ip(ipv6).to_string();
    let mut relay = start_relay_in(
        &bed,
        ipv6,
        "relay-afxdp",
        "1",
        &[
            "--interface",
            &ifname,
            "--xdp-mode",
            xdp_mode,
            "--poll",
            poll,
        ],
    );
    let said = probe_through_relay_in(&bed, ipv6, 200);

    // ARP/ND and ICMP stay with the kernel while relay-afxdp runs: ping the relay.
    let ping = bed
        .client
        .command("ping")
        .args(["-c", "2", "-W", "2", "-i", "0.2", &relay_ip])
        .output()
        .expect("ping is installed (scripts/test.sh installs iputils-ping)");
    assert!(
        ping.status.success(),
        "ping: {}",
        String::from_utf8_lossy(&ping.stdout)
    );

    // Garbage to the VIP is dropped and counted, as in relay-mio.
    let garbage = bed
        .client
        .command("bash")
        .args([
            "-c",
            &format!("printf '\\xee\\xee\\xee\\xee' > /dev/udp/{relay_ip}/3478"),
        ])
        .status()
        .unwrap();
    assert!(garbage.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while relay_metric(
        &bed,
        "ufrag_relay_dropped_datagrams_total{worker=\"0\",reason=\"unclassified\"}",
    ) < 1.0
    {
        assert!(Instant::now() < deadline, "garbage never counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    let unresolved = relay_metric(
        &bed,
        "ufrag_relay_dropped_datagrams_total{worker=\"0\",reason=\"neighbour_unresolved\"}",
    );
    let forwarded_in = relay_metric(
        &bed,
        "ufrag_relay_forwarded_datagrams_total{worker=\"0\",direction=\"in\"}",
    );
    let forwarded_out = relay_metric(
        &bed,
        "ufrag_relay_forwarded_datagrams_total{worker=\"0\",direction=\"out\"}",
    );
    assert!(relay_http(&bed, "/metrics").contains("backend=\"afxdp\""));
    let _ = relay.kill();
    let _ = relay.wait();

    assert_eq!(
        said, "received 200/200",
        "probe through relay-afxdp ({xdp_mode}, {poll}, IPv6 {ipv6})"
    );
    // The first datagram towards a next hop the kernel has not resolved yet (here the
    // Binding Request towards the transceiver) is dropped and counted while the kernel
    // resolves it; every other datagram is forwarded, and counted, both ways.
    assert!(unresolved <= 1.0, "neighbour_unresolved {unresolved}");
    assert_eq!(forwarded_in + unresolved, 201.0, "in");
    assert_eq!(forwarded_out, 200.0 + (1.0 - unresolved), "out");
    wait_until_no_xdp(&bed, "XDP program left attached after SIGKILL");
}

/// How the relay is told its interface.
enum Interface {
    /// `--interface <the relay's veth>`.
    Named,
    /// `--interface auto`.
    Auto,
}

#[test]
fn forwards_a_flow_both_ways_in_skb_mode_with_wakeups() {
    run("skb", "wakeup", false, Interface::Auto);
}

#[test]
fn forwards_a_flow_both_ways_in_native_mode_with_busy_polling() {
    run("native", "busy", false, Interface::Named);
}

#[test]
fn forwards_an_ipv6_flow_both_ways_in_skb_mode() {
    run("skb", "wakeup", true, Interface::Auto);
}

#[test]
fn forwards_an_ipv6_flow_both_ways_in_native_mode() {
    run("native", "busy", true, Interface::Named);
}

/// Starts relay-afxdp on the testbed's relay host with one worker and `extra` flags, as a
/// refused start would be (stopped after 10 s if it is not refused): its output.
fn start_expecting_refusal(
    bed: &Testbed,
    interface: &str,
    internal: &str,
    extra: &[&str],
) -> std::process::Output {
    let binary = ufrag_testkit::cargo_build::bin("relay-afxdp");
    bed.relay
        .command("timeout")
        .args(["10", binary.to_str().unwrap()])
        .args(["--interface", interface])
        .args(["--vip", &format!("{}:3478", bed.relay.addr)])
        .args(extra)
        .args(["--internal-addr", &format!("{internal}:40000")])
        .args(["--allow-transceiver-net", "10.77.0.0/24"])
        .args(["--workers", "1", "--cpus", "0"])
        .env("UFRAG_RELAY_HINT_KEYS", ufrag_testkit::testbed::tools::KEYS)
        .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
        .output()
        .unwrap()
}

/// `--interface auto` that cannot choose is refused at start (exit 2, saying why), and
/// attaches nothing: no interface holds the internal address, or loopback does (a VIP
/// on loopback arrives on another interface, which must be named).
#[test]
fn interface_auto_is_refused_where_it_cannot_choose() {
    require_root();
    let bed = Testbed::up().unwrap();
    for (internal, why) in [
        (
            "10.77.0.99",
            "no interface holds the internal address 10.77.0.99",
        ),
        ("127.0.0.1", "the internal address 127.0.0.1 is on lo"),
    ] {
        let out = start_expecting_refusal(&bed, "auto", internal, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{internal}: {stderr}");
        assert!(stderr.contains(why), "{internal}: `{why}` in {stderr}");
    }
    wait_until_no_xdp(&bed, "a refused relay left its program attached");
}

/// A relay with fewer workers than its interface has RX queues would leave the flows the
/// NIC puts on the other queues to the kernel: it is refused at start (exit 2, naming
/// `workers`), and attaches nothing. (Two workers on two queues is the suite's two-worker
/// case.)
#[test]
fn fewer_workers_than_rx_queues_is_refused() {
    require_root();
    let bed = Testbed::up_with(ufrag_testkit::testbed::TestbedOptions {
        queues: 2,
        ..Default::default()
    })
    .unwrap();
    let internal = bed.relay.addr.to_string();
    let out = start_expecting_refusal(&bed, &bed.relay.ifname, &internal, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "1 worker on 2 queues: {stderr}");
    assert!(
        stderr.contains("`workers`") && stderr.contains("would reach no worker"),
        "1 worker on 2 queues: {stderr}"
    );
    wait_until_no_xdp(&bed, "a refused relay left its program attached");
}

/// What relay-afxdp does not do is refused at start (exit 2, naming the key and who does
/// it), and nothing is attached: ICE-TCP (it leaves TCP to the kernel; relay-mio serves
/// it), and bundles (it forwards each frame in place; relay-mio bundles).
#[test]
fn ice_tcp_bundles_and_gso_are_refused_with_the_deployment_that_serves_them() {
    require_root();
    let bed = Testbed::up().unwrap();
    let refusals = [
        (
            vec!["--tcp-vip".to_string(), format!("{}:4443", bed.relay.addr)],
            ["`tcp_vip`", "relay-mio with --tcp-vip"],
        ),
        (
            vec!["--bundle-to".to_string(), "10.77.0.0/24".to_string()],
            ["`bundle_to`", "bundles are relay-mio's"],
        ),
        (
            vec!["--internal-gso".to_string()],
            [
                "`internal_gso`",
                "GSO on the internal socket is relay-mio's",
            ],
        ),
    ];
    for (flag, says) in refusals {
        let internal = bed.relay.addr.to_string();
        let flag_args: Vec<&str> = flag.iter().map(String::as_str).collect();
        let out = start_expecting_refusal(&bed, &bed.relay.ifname, &internal, &flag_args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag:?}: {stderr}");
        assert!(
            says.iter().all(|s| stderr.contains(s)),
            "{flag:?}: {stderr}"
        );
        wait_until_no_xdp(&bed, "a refused relay left its program attached");
    }
}

/// The RX queues of the relay's interface, as the relay's namespace sees them in sysfs.
fn rx_queues(bed: &Testbed) -> usize {
    let out = bed
        .relay
        .command("ls")
        .arg(format!("/sys/class/net/{}/queues", bed.relay.ifname))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|q| q.starts_with("rx-"))
        .count()
}

/// `--set-queues` gives the interface one RX queue per worker before attaching, with
/// only the capabilities the AF_XDP overlay's pod has (uid 0 with every capability but
/// BPF, IPC_LOCK, NET_ADMIN, NET_RAW and PERFMON dropped, no new privileges: `setpriv`
/// does what the container runtime does), and the relay forwards; started again, it
/// changes nothing. (Without PERFMON the verifier refuses the steering program's packet
/// pointer arithmetic, as it would an unprivileged user's.)
#[test]
fn set_queues_gives_one_queue_per_worker_with_only_the_pods_capabilities() {
    require_root();
    let bed = Testbed::up_with(ufrag_testkit::testbed::TestbedOptions {
        queues: 2,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        rx_queues(&bed),
        2,
        "the testbed's relay interface has 2 queues"
    );
    let pod = [
        "setpriv",
        "--bounding-set=-all,+bpf,+ipc_lock,+net_admin,+net_raw,+perfmon",
        "--inh-caps=-all",
        "--no-new-privs",
        "--",
    ];
    let ifname = bed.relay.ifname.clone();
    let flags = ["--interface", &ifname, "--set-queues"];
    let mut logs = vec![];
    for start in ["first", "second"] {
        let mut relay = ufrag_testkit::testbed::tools::start_relay_under(
            &bed,
            false,
            &pod,
            "relay-afxdp",
            "1",
            &flags,
        );
        let said = probe_through_relay_in(&bed, false, 50);
        let _ = relay.kill();
        let _ = relay.wait();
        let mut stderr = String::new();
        if let Some(mut pipe) = relay.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        assert_eq!(said, "received 50/50", "{start} start: {stderr}");
        assert_eq!(rx_queues(&bed), 1, "{start} start: {stderr}");
        logs.push(stderr);
        wait_until_no_xdp(&bed, "XDP program left attached after SIGKILL");
    }
    assert!(
        logs[0].contains("RX queues set to one per worker"),
        "first start: {}",
        logs[0]
    );
    assert!(
        logs[1].contains("RX queues already one per worker"),
        "second start: {}",
        logs[1]
    );
}
