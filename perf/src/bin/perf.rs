//! `perf`: the benchmark runner. `perf loopback` measures relay-mio with 1 and 2 workers
//! against a bare recvmmsg/sendmmsg forwarder, side by side, in one run, on loopback.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use perf::bare::BareForwarder;
use perf::load::{Generator, Sink, cpu_seconds, max_loss_free};
use perf::report::{Row, json_lines, markdown};
use ufrag_common::hint::{HintKey, HintKeys, RoutingHint};
use ufrag_common::stun;

#[derive(Debug, Parser)]
#[command(name = "perf", about = "ufrag-relay benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// relay-mio (1 and 2 workers) against a bare mmsg forwarder on loopback.
    Loopback {
        /// Length of each trial.
        #[arg(long, default_value = "2s", value_parser = humantime_duration)]
        trial: Duration,
        /// First rate of the search, packets per second.
        #[arg(long, default_value_t = 20_000)]
        start_pps: u64,
        /// Highest rate tried.
        #[arg(long, default_value_t = 1_000_000)]
        max_pps: u64,
        /// The fixed load at which latency is reported.
        #[arg(long, default_value_t = 20_000)]
        fixed_pps: u64,
        /// Where to write the Markdown report (JSON lines go next to it, .jsonl).
        #[arg(long, default_value = "target/perf/loopback.md")]
        out: std::path::PathBuf,
    },
}

fn humantime_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n.parse().map_err(|_| format!("bad duration {s}"))?;
    match unit {
        "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        _ => Err(format!("bad duration {s}: use s or ms")),
    }
}

const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const CLIENTS: usize = 32;

fn loopback_ip(last: u8) -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(
        127,
        200 + (pid % 50) as u8,
        ((pid / 50) % 250) as u8 + 1,
        last,
    )
}

struct RelayChild(Child);

impl Drop for RelayChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
    let mut t = String::new();
    s.read_to_string(&mut t).ok()?;
    t.split_whitespace().nth(1)?.parse().ok()
}

fn start_relay(
    workers: usize,
    vip: SocketAddr,
    internal: SocketAddr,
    metrics: SocketAddr,
) -> RelayChild {
    let exe = std::env::current_exe().expect("own path");
    let relay = exe.with_file_name("relay-mio");
    assert!(
        relay.exists(),
        "{} missing: cargo build --release -p relay-mio",
        relay.display()
    );
    let child = Command::new(relay)
        .args([
            "--vip",
            &vip.to_string(),
            "--internal-addr",
            &internal.to_string(),
        ])
        .args([
            "--workers",
            &workers.to_string(),
            "--cpus",
            if workers == 1 { "1" } else { "0-1" },
        ])
        .args([
            "--allow-transceiver-net",
            "127.0.0.0/8",
            "--metrics-addr",
            &metrics.to_string(),
        ])
        .env("UFRAG_RELAY_HINT_KEYS", format!("1:{KEY_HEX}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("relay-mio starts");
    let child = RelayChild(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while http_status(metrics, "/readyz") != Some(200) {
        assert!(Instant::now() < deadline, "relay-mio did not become ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn main() {
    let cli = Cli::parse();
    perf::load::pin_to_load_cpu();
    let Cmd::Loopback {
        trial,
        start_pps,
        max_pps,
        fixed_pps,
        out,
    } = cli.command;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let epoch = Instant::now();
    let settle = Duration::from_millis(300);
    let keys = HintKeys::new(
        HintKey::new(1, &(0u8..32).collect::<Vec<_>>()).unwrap(),
        None,
    )
    .unwrap();
    let mut rows = vec![];

    // Setup 1: bare forwarder.
    {
        let sink = Sink::start(SocketAddr::from((loopback_ip(2), 0)), false, epoch).expect("sink");
        let fwd = BareForwarder::start(SocketAddr::from((loopback_ip(3), 4000)), sink.addr(), 1)
            .expect("bare forwarder");
        let mut generator = Generator::new(loopback_ip(4), CLIENTS, epoch).expect("generator");
        let pid = std::process::id();
        rows.push(measure(
            "bare mmsg forwarder",
            &mut generator,
            &sink,
            fwd.listen,
            trial,
            settle,
            start_pps,
            max_pps,
            fixed_pps,
            || cpu_seconds(pid, Some("bare-fwd")),
        ));
    }

    // Setups 2 and 3: relay-mio with 1 and 2 workers.
    for workers in [1usize, 2] {
        let sink = Sink::start(
            SocketAddr::from((loopback_ip(10 + workers as u8), 0)),
            true,
            epoch,
        )
        .expect("sink");
        let vip = SocketAddr::from((loopback_ip(20 + workers as u8), 3478));
        let internal = SocketAddr::from((loopback_ip(30 + workers as u8), 40_000));
        let metrics = SocketAddr::from((loopback_ip(30 + workers as u8), 9100));
        let relay = start_relay(workers, vip, internal, metrics);
        let mut generator =
            Generator::new(loopback_ip(40 + workers as u8), CLIENTS, epoch).expect("generator");
        let transceiver = sink.addr();
        generator
            .send_each(vip, |i, _| {
                let ufrag = keys.encode(
                    &RoutingHint {
                        cluster: 0,
                        transceiver,
                    },
                    [i as u8; 6],
                );
                let pwd = keys.ice_password(1, ufrag.as_bytes()).unwrap();
                let mut b = [0u8; 512];
                let n = stun::write_binding_request(
                    &mut b,
                    &[i as u8; 12],
                    ufrag.as_bytes(),
                    b"perf",
                    pwd.as_bytes(),
                )
                .unwrap();
                b[..n].to_vec()
            })
            .expect("binding requests");
        std::thread::sleep(Duration::from_millis(300));
        let pid = relay.0.id();
        rows.push(measure(
            &format!(
                "relay-mio, {workers} worker{}",
                if workers > 1 { "s" } else { "" }
            ),
            &mut generator,
            &sink,
            vip,
            trial,
            settle,
            start_pps,
            max_pps,
            fixed_pps,
            || cpu_seconds(pid, Some("relay-w")),
        ));
    }

    let report = markdown(&rows, fixed_pps, &command);
    print!("{report}");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).expect("report directory");
    }
    std::fs::write(&out, &report).expect("write report");
    std::fs::write(out.with_extension("jsonl"), json_lines(&rows)).expect("write json");
    eprintln!("report: {}", out.display());
}

#[allow(clippy::too_many_arguments)]
fn measure(
    name: &str,
    generator: &mut Generator,
    sink: &Sink,
    to: SocketAddr,
    trial: Duration,
    settle: Duration,
    start_pps: u64,
    max_pps: u64,
    fixed_pps: u64,
    cpu: impl Fn() -> f64,
) -> Row {
    eprintln!("measuring {name}…");
    let mut cpu_at = std::collections::HashMap::new();
    let (best, search) = max_loss_free(
        |rate| {
            let before = cpu();
            let t = generator.trial(to, rate, trial, settle, sink);
            cpu_at.insert(rate, (cpu() - before, t.received));
            eprintln!(
                "  {rate:>8} pps offered: sent {:>8}, received {:>8}, loss {:.3} %",
                t.sent,
                t.received,
                t.loss() * 100.0
            );
            t
        },
        start_pps,
        max_pps,
        6,
    );
    let cpu_us_per_packet = cpu_at
        .get(&best.offered_pps)
        .map_or(0.0, |(secs, received)| {
            secs * 1e6 / (*received).max(1) as f64
        });
    let fixed = generator.trial(to, fixed_pps, trial, settle, sink);
    Row {
        setup: name.to_string(),
        best,
        cpu_us_per_packet,
        fixed,
        search,
    }
}
