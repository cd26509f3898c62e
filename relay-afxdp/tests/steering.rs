//! The XDP program's decisions, checked with BPF_PROG_TEST_RUN on crafted frames: no
//! interface, no traffic. Needs root (CAP_BPF); CI runs as root, and without it these
//! tests fail loudly rather than skip.

use ufrag_relay_afxdp::program::action;
use ufrag_relay_afxdp::steering::{Steering, SteeringStats};

const VIP_PORT: u16 = 3478;
const INTERNAL_PORT: u16 = 40_000;

fn eth(ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// The relay's IPv4 address in these frames (the destination [`ipv4`] writes).
const RELAY_V4: [u8; 4] = [10, 77, 0, 2];
/// The relay's IPv6 address (the destination [`ipv6`] writes).
const RELAY_V6: [u8; 16] = [0xfd; 16];

fn ipv4(protocol: u8, ihl_words: u8, frag: u16, payload: &[u8]) -> Vec<u8> {
    ipv4_to(RELAY_V4, protocol, ihl_words, frag, payload)
}

fn ipv4_to(dst: [u8; 4], protocol: u8, ihl_words: u8, frag: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(0x0800);
    let hlen = usize::from(ihl_words) * 4;
    let total = (hlen + payload.len()) as u16;
    let mut h = vec![0x40 | ihl_words, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 1]);
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, protocol, 0, 0, 10, 77, 0, 1]);
    h.extend_from_slice(&dst);
    h.resize(hlen, 1); // options, if any
    f.extend_from_slice(&h);
    f.extend_from_slice(payload);
    f
}

fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
    ipv6_to(RELAY_V6, next, payload)
}

fn ipv6_to(dst: [u8; 16], next: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(0x86DD);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[next, 64]);
    f.extend_from_slice(&[0xfe; 16]);
    f.extend_from_slice(&dst);
    f.extend_from_slice(payload);
    f
}

fn udp(dst: u16) -> Vec<u8> {
    let mut u = vec![0xc3, 0x50];
    u.extend_from_slice(&dst.to_be_bytes());
    u.extend_from_slice(&[0, 28, 0, 0]);
    u.extend_from_slice(&[0x80; 20]);
    u
}

fn steering() -> Steering {
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
        "loading XDP programs needs root (CAP_BPF); CI runs as root"
    );
    let v4 = std::net::IpAddr::from(RELAY_V4);
    let v6 = std::net::IpAddr::from(RELAY_V6);
    Steering::load(
        &[
            (v4, VIP_PORT).into(),
            (v4, INTERNAL_PORT).into(),
            (v6, VIP_PORT).into(),
        ],
        4,
    )
    .expect("the verifier accepts the program")
}

/// Runs one frame; returns (verdict, steered?) from the counters' change.
fn run(s: &Steering, frame: &[u8]) -> (u32, bool) {
    let before = s.stats().unwrap();
    let verdict = s
        .decide(frame)
        .unwrap_or_else(|e| panic!("test run of {} bytes: {e}", frame.len()));
    let after = s.stats().unwrap();
    let steered = after.steered - before.steered;
    let passed = after.passed - before.passed;
    assert_eq!(steered + passed, 1, "exactly one decision counted");
    (verdict, steered == 1)
}

#[test]
fn frames_shorter_than_ethernet_cannot_even_be_test_run() {
    // The kernel refuses them before the program (EINVAL): a NIC never delivers them.
    let s = steering();
    assert!(s.decide(&[0x02; 13]).is_err());
}

#[test]
fn relay_udp_is_steered_and_everything_else_passes() {
    let s = steering();
    let arp = {
        let mut f = eth(0x0806);
        f.extend_from_slice(&[0; 28]);
        f
    };
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        (
            "IPv4 UDP to the VIP port",
            ipv4(17, 5, 0, &udp(VIP_PORT)),
            true,
        ),
        (
            "IPv4 UDP to the internal port",
            ipv4(17, 5, 0, &udp(INTERNAL_PORT)),
            true,
        ),
        (
            "IPv4 UDP with header options",
            ipv4(17, 7, 0, &udp(VIP_PORT)),
            true,
        ),
        ("IPv6 UDP to the VIP port", ipv6(17, &udp(VIP_PORT)), true),
        ("IPv4 UDP to another port", ipv4(17, 5, 0, &udp(53)), false),
        (
            "IPv4 UDP to the VIP port on another local address",
            ipv4_to([10, 77, 0, 9], 17, 5, 0, &udp(VIP_PORT)),
            false,
        ),
        (
            "IPv6 UDP to the VIP port on another local address",
            ipv6_to([0xfc; 16], 17, &udp(VIP_PORT)),
            false,
        ),
        (
            "IPv6 UDP to the internal port (not a relay address in IPv6 here)",
            ipv6(17, &udp(INTERNAL_PORT)),
            false,
        ),
        ("IPv6 UDP to another port", ipv6(17, &udp(5353)), false),
        (
            "IPv4 TCP to the VIP port",
            ipv4(6, 5, 0, &udp(VIP_PORT)),
            false,
        ),
        ("ICMP echo", ipv4(1, 5, 0, &[8, 0, 0, 0, 0, 1, 0, 1]), false),
        ("ARP", arp, false),
        (
            "IPv4 first fragment (MF)",
            ipv4(17, 5, 0x2000, &udp(VIP_PORT)),
            false,
        ),
        (
            "IPv4 later fragment",
            ipv4(17, 5, 0x0010, &udp(VIP_PORT)),
            false,
        ),
        (
            "IPv6 with a hop-by-hop header",
            ipv6(0, &udp(VIP_PORT)),
            false,
        ),
        ("IPv4 with a bad IHL", ipv4(17, 4, 0, &udp(VIP_PORT)), false),
        ("Ethernet header only, IPv4 ethertype", eth(0x0800), false),
        (
            "IPv4 header cut short",
            ipv4(17, 5, 0, &udp(VIP_PORT))[..30].to_vec(),
            false,
        ),
        (
            "UDP header cut short",
            ipv4(17, 5, 0, &udp(VIP_PORT))[..38].to_vec(),
            false,
        ),
    ];
    for (what, frame, steer) in cases {
        let (verdict, steered) = run(&s, &frame);
        assert_eq!(steered, steer, "{what}");
        // With no AF_XDP socket on the queue, even a steered frame falls back to the kernel.
        assert_eq!(verdict, action::PASS, "{what}");
    }
    let totals: SteeringStats = s.stats().unwrap();
    assert_eq!((totals.steered, totals.passed), (4, 15));
}

#[test]
fn a_wildcard_destination_is_refused_not_steered_everywhere() {
    let err = Steering::load(&["0.0.0.0:3478".parse().unwrap()], 1).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
}
