//! Measures the XDP program built from `bpf/relay.bpf.c` against the assembled one it
//! replaces, side by side in one run: the instructions the kernel keeps after
//! verification, the JIT's bytes, the instructions the verifier walked, and the run
//! time per frame of each kind (`BPF_PROG_TEST_RUN`, one frame per call, the two
//! programs in interleaved rounds).
//!
//! `program_cost [rounds] [runs-per-round]` (root: it loads programs). Prints Markdown.

use std::net::SocketAddr;
use std::sync::Arc;

use relay_afxdp::assembled;
use relay_afxdp::fast_path::{FastFlow, FastPathMaps};
use relay_afxdp::packet::{headers_len, write_udp};
use relay_afxdp::steering::Steering;
use ufrag_common::flow::FlowKey;
use ufrag_common::frame::FrameHeader;

const RELAY_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const TRANSCEIVER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 3];
const RTP: [u8; 160] = [0x80; 160];

fn a(s: &str) -> SocketAddr {
    s.parse().expect("an address")
}

fn udp_frame(src_mac: [u8; 6], dst_mac: [u8; 6], src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
    let (src, dst) = (a(src), a(dst));
    let at = headers_len(&dst);
    let mut frame = vec![0u8; at + payload.len()];
    frame[at..].copy_from_slice(payload);
    write_udp(&mut frame, src_mac, dst_mac, src, dst, payload.len()).expect("one family");
    frame
}

fn returned(client: &str, vip: &str) -> Vec<u8> {
    let header = FrameHeader::new(a(client), a(vip)).on_verified_path(true);
    let mut out = vec![0u8; header.encoded_len()];
    header.emit(&mut out).expect("sized");
    out.extend_from_slice(&RTP);
    out
}

struct Flow {
    client: &'static str,
    vip: &'static str,
    transceiver: &'static str,
    internal: &'static str,
}

const V4: Flow = Flow {
    client: "10.77.0.1:50000",
    vip: "10.77.0.2:3478",
    transceiver: "10.77.0.3:41000",
    internal: "10.77.0.2:40000",
};
const V6: Flow = Flow {
    client: "[fd77::1]:50001",
    vip: "[fd77::2]:3478",
    transceiver: "[fd77::3]:41000",
    internal: "[fd77::2]:40000",
};

fn load(assembled: bool) -> Steering {
    let vips = [a(V4.vip), a(V6.vip)];
    let internals = [a(V4.internal), a(V6.internal)];
    let steering = if assembled {
        assembled::load(&vips, &internals, 1, Some(64))
    } else {
        Steering::load_with(&vips, &internals, 1, Some(64))
    }
    .expect("the program loads (as root)");
    let maps: &Arc<FastPathMaps> = steering.fast_path().expect("with the fast path");
    let mut buf = maps.value_buffer().expect("buffer");
    for f in [V4, V6] {
        let flow = FastFlow {
            key: FlowKey {
                client: a(f.client),
                vip: a(f.vip),
            },
            transceiver: a(f.transceiver),
            internal: a(f.internal),
        };
        maps.set_next_hop(flow.transceiver.ip(), TRANSCEIVER_MAC)
            .expect("next hop");
        maps.set_next_hop(flow.key.client.ip(), CLIENT_MAC)
            .expect("next hop");
        let hops = (flow.transceiver.ip(), flow.key.client.ip());
        assert!(
            maps.install(&flow, RELAY_MAC, hops, &mut buf)
                .expect("installed")
        );
    }
    steering
}

/// Mean and half-width of a 95 % interval (Student's t) of `xs`.
fn interval(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    // t(0.975) for the usual round counts; 2.0 beyond 60 degrees of freedom.
    let t = match xs.len() - 1 {
        0..=9 => 2.262,
        10..=19 => 2.093,
        20..=29 => 2.045,
        30..=59 => 2.009,
        _ => 2.0,
    };
    (mean, t * (var / n).sqrt())
}

/// The programs compared: each round loads a fresh copy of each, so where the kernel
/// happens to place a program and its maps (which moves one copy's time by a few per
/// cent) varies between rounds and lands in the interval instead of in the verdict.
/// The second copy of the C program is the A/A control: its ratio shows the noise floor.
const VARIANTS: [(&str, bool); 3] = [("C", false), ("assembled", true), ("C, again", false)];

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("a count"))
        .collect();
    let rounds = args.first().copied().unwrap_or(30).max(3);
    let runs = args.get(1).copied().unwrap_or(20_000).max(1);

    println!("## Program size\n");
    println!("| program | instructions after verification | JIT bytes | instructions verified |");
    println!("|---|---:|---:|---:|");
    for (name, assembled) in &VARIANTS[..2] {
        let info = load(*assembled).program_info().expect("program info");
        println!(
            "| {name} | {} | {} | {} |",
            info.xlated_insns, info.jited_bytes, info.verified_insns
        );
    }

    let frames = [
        (
            "IPv4 forward (fast path: XDP_TX)",
            udp_frame(CLIENT_MAC, RELAY_MAC, V4.client, V4.vip, &RTP),
        ),
        (
            "IPv4 return (fast path: XDP_TX)",
            udp_frame(
                TRANSCEIVER_MAC,
                RELAY_MAC,
                V4.transceiver,
                V4.internal,
                &returned(V4.client, V4.vip),
            ),
        ),
        (
            "IPv6 forward (fast path: XDP_TX)",
            udp_frame(CLIENT_MAC, RELAY_MAC, V6.client, V6.vip, &RTP),
        ),
        (
            "IPv4, no entry (to AF_XDP)",
            udp_frame(CLIENT_MAC, RELAY_MAC, "10.77.0.9:50000", V4.vip, &RTP),
        ),
        (
            "IPv4, not the relay's (XDP_PASS)",
            udp_frame(CLIENT_MAC, RELAY_MAC, V4.client, "10.77.0.2:53", &RTP),
        ),
    ];
    // means[frame][variant][round]: the mean ns of one round's runs.
    let mut means = vec![[Vec::new(), Vec::new(), Vec::new()]; frames.len()];
    for round in 0..rounds {
        // A fresh load of each variant, in an order that rotates each round.
        let order: Vec<usize> = (0..VARIANTS.len())
            .map(|i| (i + round) % VARIANTS.len())
            .collect();
        let loaded: Vec<(usize, Steering)> =
            order.iter().map(|&v| (v, load(VARIANTS[v].1))).collect();
        for (f, (_, frame)) in frames.iter().enumerate() {
            for (v, steering) in &loaded {
                let mut total = 0u64;
                for _ in 0..runs {
                    total += u64::from(steering.time_runs(frame, 1).expect("a test run"));
                }
                means[f][*v].push(total as f64 / runs as f64);
            }
        }
    }
    println!(
        "\n## Run time per frame\n\n{rounds} rounds; each loads a fresh copy of every \
         program (in an order that rotates) and runs each frame {runs} times on each. A \
         run's time is the kernel's `duration` of one `BPF_PROG_TEST_RUN` (the timer's \
         overhead included); a round's figure is its mean. Ratios are per round, with a \
         95 % interval over rounds; \"C, again\" is a second copy of the same C program, \
         the A/A control.\n"
    );
    println!(
        "| frame | C ns | assembled ns | C / assembled (95 % interval) | verdict | C / C again (A/A) |"
    );
    println!("|---|---:|---:|---|---|---|");
    for (f, (name, _)) in frames.iter().enumerate() {
        let ratio = |x: usize, y: usize| -> Vec<f64> {
            means[f][x]
                .iter()
                .zip(&means[f][y])
                .map(|(a, b)| a / b)
                .collect()
        };
        let (c, _) = interval(&means[f][0]);
        let (asm, _) = interval(&means[f][1]);
        let (r, half) = interval(&ratio(0, 1));
        let (lo, hi) = (r - half, r + half);
        let verdict = if hi < 1.0 {
            "C faster"
        } else if lo > 1.0 {
            "C slower"
        } else {
            "inconclusive: the interval holds 1"
        };
        let (aa, aa_half) = interval(&ratio(0, 2));
        println!(
            "| {name} | {c:.1} | {asm:.1} | {r:.3} [{lo:.3}, {hi:.3}] | {verdict} | {aa:.3} [{:.3}, {:.3}] |",
            aa - aa_half,
            aa + aa_half
        );
    }
}
