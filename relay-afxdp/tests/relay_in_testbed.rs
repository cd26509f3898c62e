//! relay-afxdp end to end on the netns testbed (root only; CI runs as root): a client
//! makes a flow with a Binding Request and sends RTP-like datagrams; relay-afxdp forwards
//! them framed to a (fake, echoing) transceiver and the replies back to the client, in
//! skb and native XDP mode and in wakeup and busy-poll mode. Metrics come from the same
//! `/metrics` as relay-mio's; SIGKILL leaves no XDP program behind.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use perf::testbed::{Host, Testbed};

fn built(relative: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join(relative);
    assert!(
        p.exists(),
        "{} missing: build the workspace (cargo test --workspace does)",
        p.display()
    );
    p
}

fn require_root() {
    let uid = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Uid:")
                .map(|v| v.split_whitespace().next().unwrap().to_string())
        })
        .unwrap();
    assert_eq!(uid, "0", "AF_XDP needs root; CI runs as root");
}

/// GET a path of the relay's metrics endpoint inside its namespace.
fn http_get(host: &Host, path: &str) -> String {
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/9100 && printf 'GET {path} HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"
    );
    let out = host.command("bash").args(["-c", &script]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn metric(host: &Host, series: &str) -> f64 {
    http_get(host, "/metrics")
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

fn run(xdp_mode: &str, poll: &str) {
    require_root();
    let bed = Testbed::up().unwrap();
    let vip = format!("{}:3478", bed.relay.addr);
    let transceiver = format!("{}:41000", bed.transceiver.addr);
    let mut relay = bed
        .relay
        .command(env!("CARGO_BIN_EXE_relay-afxdp"))
        .args([
            "--interface",
            &bed.relay.ifname,
            "--xdp-mode",
            xdp_mode,
            "--poll",
            poll,
        ])
        .args([
            "--vip",
            &vip,
            "--internal-addr",
            &format!("{}:40000", bed.relay.addr),
        ])
        .args([
            "--allow-transceiver-net",
            "10.77.0.0/24",
            "--workers",
            "1",
            "--cpus",
            "1",
        ])
        .args(["--metrics-addr", "127.0.0.1:9100"])
        .env(
            "UFRAG_RELAY_HINT_KEYS",
            "1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !http_get(&bed.relay, "/readyz").contains("200") {
        if let Some(status) = relay.try_wait().unwrap() {
            let out = relay.wait_with_output().unwrap();
            panic!(
                "relay-afxdp exited {status}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "relay-afxdp never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut fake = bed
        .transceiver
        .command(built("perf").to_str().unwrap())
        .args(["fake-transceiver", "--bind", &transceiver, "--idle", "5s"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let probe = bed
        .client
        .command(built("perf").to_str().unwrap())
        .args([
            "relay-probe",
            "--vip",
            &vip,
            "--transceiver",
            &transceiver,
            "--count",
            "200",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&probe.stdout).trim().to_string();
    if said != "received 200/200" {
        let m = http_get(&bed.relay, "/metrics");
        eprintln!(
            "{}",
            m.lines()
                .filter(|l| !l.starts_with('#') && !l.ends_with(" 0"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let snmp = bed
            .client
            .command("cat")
            .arg("/proc/net/snmp")
            .output()
            .unwrap();
        eprintln!(
            "client snmp:\n{}",
            String::from_utf8_lossy(&snmp.stdout)
                .lines()
                .filter(|l| l.starts_with("Udp"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let links = Command::new("ip")
            .args(["-n", &bed.client.ns, "-s", "link"])
            .output()
            .unwrap();
        eprintln!("{}", String::from_utf8_lossy(&links.stdout));
    }

    // Garbage to the VIP is dropped and counted, as in relay-mio.
    let garbage = bed
        .client
        .command("bash")
        .args([
            "-c",
            &format!(
                "printf '\\xee\\xee\\xee\\xee' > /dev/udp/{}/3478",
                bed.relay.addr
            ),
        ])
        .status()
        .unwrap();
    assert!(garbage.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(
        &bed.relay,
        "ufrag_relay_drops_total{worker=\"0\",reason=\"unclassified\"}",
    ) < 1.0
    {
        assert!(Instant::now() < deadline, "garbage never counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    let unresolved = metric(
        &bed.relay,
        "ufrag_relay_drops_total{worker=\"0\",reason=\"neighbour_unresolved\"}",
    );
    let forwarded_in = metric(
        &bed.relay,
        "ufrag_relay_packets_total{worker=\"0\",direction=\"in\"}",
    );
    let forwarded_out = metric(
        &bed.relay,
        "ufrag_relay_packets_total{worker=\"0\",direction=\"out\"}",
    );
    assert!(http_get(&bed.relay, "/metrics").contains("backend=\"afxdp\""));

    let _ = relay.kill();
    let _ = relay.wait();
    let _ = fake.kill();
    let _ = fake.wait();
    assert_eq!(
        said, "received 200/200",
        "probe through relay-afxdp ({xdp_mode}, {poll})"
    );
    // The first datagram towards a next hop the kernel has not resolved yet (here the
    // Binding Request towards the transceiver) is dropped and counted while the kernel
    // resolves it; every other datagram is forwarded, and counted, both ways.
    assert!(unresolved <= 1.0, "neighbour_unresolved {unresolved}");
    assert_eq!(forwarded_in + unresolved, 201.0, "in");
    assert_eq!(forwarded_out, 200.0 + (1.0 - unresolved), "out");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = Command::new("ip")
            .args([
                "-n",
                &bed.relay.ns,
                "link",
                "show",
                "dev",
                &bed.relay.ifname,
            ])
            .output()
            .unwrap();
        if !String::from_utf8_lossy(&out.stdout).contains("prog/xdp") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "XDP program left attached after SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn forwards_a_flow_both_ways_in_skb_mode_with_wakeups() {
    run("skb", "wakeup");
}

#[test]
fn forwards_a_flow_both_ways_in_native_mode_with_busy_polling() {
    run("native", "busy");
}
