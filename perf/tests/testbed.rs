//! The network-namespace testbed, for real (root only: CI runs as root; without root
//! these tests fail loudly rather than skip): it builds, its hosts reach each other across
//! the bridge, relay-mio runs inside it unchanged and forwards a flow client → relay →
//! transceiver and back, and nothing is left behind afterwards.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use perf::testbed::Testbed;

fn require_root() {
    let uid = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Uid:")
                .map(|v| v.split_whitespace().next().unwrap().to_string())
        })
        .unwrap();
    assert_eq!(
        uid, "0",
        "the testbed needs root (CAP_NET_ADMIN); CI runs as root"
    );
}

fn netns_list() -> String {
    String::from_utf8(
        Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
}

fn sibling(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_perf")).with_file_name(name);
    assert!(
        path.exists(),
        "{} missing: build the workspace (cargo test --workspace does)",
        path.display()
    );
    path
}

#[test]
fn the_testbed_builds_and_leaves_nothing_behind() {
    require_root();
    let names = {
        let bed = Testbed::up().expect("testbed builds");
        let listed = netns_list();
        for ns in bed.namespaces() {
            assert!(listed.contains(ns.as_str()), "{ns} exists");
        }
        let addr = Command::new("ip")
            .args(["-n", &bed.relay.ns, "-br", "addr"])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&addr.stdout).contains("10.77.0.2/24"));
        bed.namespaces().to_vec()
    };
    let listed = netns_list();
    for ns in names {
        assert!(!listed.contains(ns.as_str()), "{ns} was removed");
    }
}

#[test]
fn relay_mio_runs_unchanged_inside_the_testbed() {
    require_root();
    let bed = Testbed::up().expect("testbed builds");
    let vip = format!("{}:3478", bed.relay.addr);
    let transceiver = format!("{}:41000", bed.transceiver.addr);

    let mut relay = bed
        .relay
        .command(sibling("relay-mio").to_str().unwrap())
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
            "0",
        ])
        .args(["--metrics-addr", "127.0.0.1:9100"])
        .env(
            "UFRAG_RELAY_HINT_KEYS",
            "1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut fake = bed
        .transceiver
        .command(env!("CARGO_BIN_EXE_perf"))
        .args(["fake-transceiver", "--bind", &transceiver, "--idle", "5s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the relay is ready (its metrics listen inside its namespace).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ready = bed
            .relay
            .command("bash")
            .args(["-c", "exec 3<>/dev/tcp/127.0.0.1/9100 && printf 'GET /readyz HTTP/1.0\\r\\n\\r\\n' >&3 && head -1 <&3"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&ready.stdout).contains("200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "relay-mio never became ready in the testbed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let probe = bed
        .client
        .command(env!("CARGO_BIN_EXE_perf"))
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
    let _ = relay.kill();
    let _ = relay.wait();
    let _ = fake.kill();
    let _ = fake.wait();
    let said = String::from_utf8_lossy(&probe.stdout).to_string();
    assert!(
        probe.status.success(),
        "probe: {said} {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    assert_eq!(said.trim(), "received 200/200");
}
