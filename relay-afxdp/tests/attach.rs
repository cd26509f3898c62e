//! The steering program and the AF_XDP socket layer on a real interface of the netns
//! testbed (root only; CI runs as root): attached through a BPF link in generic (skb) and
//! native mode, the program leaves ARP and the kernel's UDP alone and, with no AF_XDP
//! socket bound, even relay traffic falls back to the kernel (relay-mio keeps working
//! behind it); SIGKILL removes it; a second attachment is refused and reported instead of
//! fought. With a socket bound, steered datagrams are rewritten in place and sent back.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use ufrag_testkit::OwnedChild;

use ufrag_testkit::cargo_build::{bin, example};
use ufrag_testkit::testbed::Testbed;
use ufrag_testkit::testbed::tools::{
    probe_through_relay, relay_link_shown, require_root, start_relay, wait_until_no_xdp,
};

/// Starts steer_hold in the relay namespace and waits for "attached".
fn hold(bed: &Testbed, mode: &str) -> Result<OwnedChild, String> {
    let mut command = bed
        .relay
        .command(example("ufrag-relay-afxdp", "steer_hold").to_str().unwrap());
    command
        .args([
            bed.relay.ifname.as_str(),
            mode,
            &format!("{}:3478", bed.relay.ip(false)),
            &format!("{}:40000", bed.relay.ip(false)),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = OwnedChild::spawn(&mut command).unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.trim() == "attached" {
        Ok(child)
    } else {
        let mut err = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
        }
        Err(err)
    }
}

fn check_mode(mode: &str, shown_as: &str) {
    require_root();
    let bed = Testbed::up().unwrap();
    let mut holder = hold(&bed, mode).expect("attaches");
    assert!(
        relay_link_shown(&bed).contains(shown_as),
        "{}",
        relay_link_shown(&bed)
    );

    // ARP and the kernel's own UDP keep working: relay-mio forwards through the interface.
    let mut relay = start_relay(&bed, "relay-mio", "0", &[]);
    let said = probe_through_relay(&bed, 100);
    let _ = relay.kill();
    let _ = relay.wait();
    assert_eq!(said, "received 100/100");

    // A second program is refused and reported, not swapped in.
    let second = hold(&bed, mode).expect_err("a second attachment is refused");
    assert!(second.contains("already has an XDP program"), "{second}");

    // SIGKILL: the kernel removes the link with the process.
    holder.kill().unwrap();
    holder.wait().unwrap();
    wait_until_no_xdp(&bed, "program still attached after SIGKILL");
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
    // Built before xsk_echo starts: it waits only so long for the probe.
    let perf = bin("ufrag-perf");
    let bed = Testbed::up().unwrap();
    let mut command = bed
        .relay
        .command(example("ufrag-relay-afxdp", "xsk_echo").to_str().unwrap());
    command
        .args([
            bed.relay.ifname.as_str(),
            mode,
            &format!("{}:3478", bed.relay.ip(false)),
            "101",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut echo = OwnedChild::spawn(&mut command).unwrap();
    let mut out = BufReader::new(echo.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "xsk_echo failed to start");
    // The probe sends a STUN-shaped first datagram and 100 more; an echo returns them all.
    let vip = format!("{}:3478", bed.relay.addr);
    let probe = bed
        .client
        .command(perf.to_str().unwrap())
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
