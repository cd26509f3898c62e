//! The steering program on a real interface of the netns testbed (root only; CI runs as
//! root): attached through a BPF link in generic (skb) and native mode, it leaves ARP and
//! the kernel's UDP alone and, with no AF_XDP socket bound yet, even relay traffic falls
//! back to the kernel (relay-mio keeps working behind it); SIGKILL removes it; a second
//! attachment is refused and reported instead of fought.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use perf::testbed::Testbed;

fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn built(relative: &str) -> PathBuf {
    let p = target_dir().join(relative);
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
    assert_eq!(uid, "0", "attaching XDP needs root; CI runs as root");
}

/// Starts steer_hold in the relay namespace and waits for "attached".
fn hold(bed: &Testbed, mode: &str) -> Result<Child, String> {
    let mut child = bed
        .relay
        .command(built("examples/steer_hold").to_str().unwrap())
        .args([bed.relay.ifname.as_str(), mode, "3478", "40000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.trim() == "attached" {
        Ok(child)
    } else {
        let out = child.wait_with_output().unwrap();
        Err(String::from_utf8_lossy(&out.stderr).to_string())
    }
}

fn xdp_shown(bed: &Testbed) -> String {
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
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// relay-mio in the relay namespace, a fake transceiver, and a probe from the client.
fn probe_through_relay(bed: &Testbed) -> String {
    let vip = format!("{}:3478", bed.relay.addr);
    let transceiver = format!("{}:41000", bed.transceiver.addr);
    let mut relay = bed
        .relay
        .command(built("relay-mio").to_str().unwrap())
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
        .command(built("perf").to_str().unwrap())
        .args(["fake-transceiver", "--bind", &transceiver, "--idle", "5s"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
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
            "100",
        ])
        .output()
        .unwrap();
    for c in [&mut relay, &mut fake] {
        let _ = c.kill();
        let _ = c.wait();
    }
    String::from_utf8_lossy(&probe.stdout).trim().to_string()
}

fn check_mode(mode: &str, shown_as: &str) {
    require_root();
    let bed = Testbed::up().unwrap();
    let mut holder = hold(&bed, mode).expect("attaches");
    assert!(xdp_shown(&bed).contains(shown_as), "{}", xdp_shown(&bed));

    // ARP and the kernel's own UDP keep working: relay-mio forwards through the interface.
    assert_eq!(probe_through_relay(&bed), "received 100/100");

    // A second program is refused and reported, not swapped in.
    let second = hold(&bed, mode).expect_err("a second attachment is refused");
    assert!(second.contains("already has an XDP program"), "{second}");

    // SIGKILL: the kernel removes the link with the process.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while xdp_shown(&bed).contains(shown_as) {
        assert!(
            Instant::now() < deadline,
            "program still attached after SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn skb_mode_attaches_passes_the_kernel_its_traffic_and_goes_away_on_sigkill() {
    check_mode("skb", "xdpgeneric");
}

#[test]
fn native_mode_attaches_passes_the_kernel_its_traffic_and_goes_away_on_sigkill() {
    check_mode("native", "xdp");
}

/// The AF_XDP socket layer on the testbed: datagrams to the steered port reach the
/// socket, are rewritten in place in the UMEM and transmitted back to the client.
fn check_af_xdp_echo(mode: &str) {
    require_root();
    let bed = Testbed::up().unwrap();
    let mut echo = bed
        .relay
        .command(built("examples/xsk_echo").to_str().unwrap())
        .args([bed.relay.ifname.as_str(), mode, "3478", "101"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(echo.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "xsk_echo failed to start");
    // The probe sends a STUN-shaped first datagram and 100 more; an echo server returns all.
    let vip = format!("{}:3478", bed.relay.addr);
    let probe = bed
        .client
        .command(built("perf").to_str().unwrap())
        .args([
            "relay-probe",
            "--vip",
            &vip,
            "--transceiver",
            "10.77.0.3:1",
            "--count",
            "100",
        ])
        .output()
        .unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    let _ = echo.kill();
    let _ = echo.wait();
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout).trim(),
        "received 100/100"
    );
    assert_eq!(line.trim(), "echoed 101");
}

#[test]
fn af_xdp_socket_receives_and_transmits_in_place_in_skb_mode() {
    check_af_xdp_echo("skb");
}

#[test]
fn af_xdp_socket_receives_and_transmits_in_place_in_native_mode() {
    check_af_xdp_echo("native");
}
