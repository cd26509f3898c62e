//! `ufrag-perf model`: what the network bridge to a model backend costs. The built-in
//! echo against the same echo behind `--model ws://` (the reference `model-echo` on
//! loopback), in interleaved rounds: the round trip the bridge adds to an `events`
//! message (the path audio takes too), and the concurrent sessions one transceiver
//! worker carries below 1 % audio loss.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::Duration;

use testkit::OwnedChild;

use super::children::{
    SESSIONS_CLIENT_CPU, TRANSCEIVER_CPU, TransceiverChild, loopback_ip, sibling_binary,
    start_transceiver, write_report,
};
use crate::cpu::cpu_seconds;
use crate::sessions::{LoadPlan, Talkers, load_step, setup_times};
use crate::stats::{Interval, median_interval};

/// The confidence of the intervals in the report.
const CONFIDENCE: f64 = 0.95;

/// The built-in echo against the same echo over the WebSocket bridge.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Rounds of the latency comparison (each: both setups, in alternating order).
    #[arg(long, default_value_t = 8)]
    pub rounds: usize,
    /// Sessions per setup per round for latency (each sends 10 pings after its first echo).
    #[arg(long, default_value_t = 5)]
    pub sessions_per_round: usize,
    /// Session counts tried for capacity, both setups at each, until both lose 1 %.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "200,400,600,800,1000,1200,1400"
    )]
    pub steps: Vec<usize>,
    /// How long every client talks in each capacity step.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub talk: Duration,
    /// Where to write the Markdown report (JSON beside it).
    #[arg(long, default_value = "target/perf/model.md")]
    pub out: std::path::PathBuf,
}

/// One setup: its name and its transceiver's signaling address.
struct Setup {
    name: &'static str,
    http: SocketAddr,
    child: TransceiverChild,
}

/// The reference backend, started next to `ufrag-perf` (killed on drop).
fn start_model_echo(listen: SocketAddr) -> OwnedChild {
    let mut command = Command::new(sibling_binary("model-echo", "ufrag-model-backends"));
    command
        .args(["--listen", &listen.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = OwnedChild::spawn(&mut command).expect("model-echo starts");
    // It binds before it prints; the transceiver retries until it answers anyway.
    std::thread::sleep(Duration::from_millis(200));
    child
}

fn interval_text(i: Option<Interval>) -> String {
    i.map_or("–".into(), |i| {
        format!("{:.3} [{:.3}–{:.3}]", i.median, i.low, i.high)
    })
}

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    use std::fmt::Write as _;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let backend_addr = SocketAddr::from((loopback_ip(90), 9000));
    let model = start_model_echo(backend_addr);
    let url = format!("ws://{backend_addr}/");
    let setups = [
        ("built-in echo", None),
        ("echo over the WebSocket bridge", Some(url.as_str())),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (name, model_url))| {
        let ip = loopback_ip(91 + i as u8);
        let http = SocketAddr::from((ip, 8080));
        let extra: Vec<&str> = model_url.map_or(vec![], |u| vec!["--model", u]);
        Setup {
            name,
            http,
            child: start_transceiver(http, SocketAddr::from((ip, 41_000)), None, &extra),
        }
    })
    .collect::<Vec<_>>();

    let mut report = String::new();
    let _ = writeln!(
        report,
        "# The model seam: the built-in echo against the same echo over the WebSocket bridge\n\n\
         Command: `{command}`\n\n\
         Two transceivers in direct mode, each with one worker pinned to CPU {TRANSCEIVER_CPU}; \
         one echoes in its worker, the other sends every message over one WebSocket to \
         `model-echo` on loopback (its bridge thread unpinned), which echoes it back. str0m \
         clients on CPU {SESSIONS_CLIENT_CPU}.\n"
    );

    // Latency: per round, each setup's sessions ping 10 times each; the round's p50 and
    // p99 per setup, and the bridged minus the built-in.
    eprintln!("latency: {} rounds…", options.rounds);
    let mut per_setup: [Vec<(f64, f64)>; 2] = [vec![], vec![]];
    let mut failures = vec![];
    for round in 0..options.rounds {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for at in order {
            let setup = &setups[at];
            match setup_times(
                setup.http,
                loopback_ip(100),
                options.sessions_per_round,
                Duration::from_secs(10),
            ) {
                Ok(times) => {
                    let mut rtts: Vec<Duration> =
                        times.iter().flat_map(|t| t.rtts.iter().copied()).collect();
                    let p50 = crate::sessions::quantile_ms(&mut rtts, 0.5);
                    let p99 = crate::sessions::quantile_ms(&mut rtts, 0.99);
                    per_setup[at].push((p50, p99));
                }
                Err(e) => failures.push(format!("round {}, {}: {e}", round + 1, setup.name)),
            }
        }
    }
    let _ = writeln!(
        report,
        "## Round trip of an `events` message\n\n{} rounds, each setup {} sessions a round (one \
         after the other, each 10 pings after its first echo, each ping sent when the last pong \
         came back), the order alternating. Per round, each setup's p50 and p99 ping RTT; below, \
         their medians over the rounds with a distribution-free interval (≥ {:.0} % confidence). \
         An `events` message takes the audio's path through the bridge (the same queue, the same \
         connection), so the difference is what the bridge adds to a round trip of audio too.\n",
        options.rounds,
        options.sessions_per_round,
        CONFIDENCE * 100.0
    );
    let _ = writeln!(
        report,
        "| setup | rounds | ping RTT p50 ms | ping RTT p99 ms |\n|---|---:|---:|---:|"
    );
    for (at, setup) in setups.iter().enumerate() {
        let p50: Vec<f64> = per_setup[at].iter().map(|r| r.0).collect();
        let p99: Vec<f64> = per_setup[at].iter().map(|r| r.1).collect();
        let _ = writeln!(
            report,
            "| {} | {} | {} | {} |",
            setup.name,
            p50.len(),
            interval_text(median_interval(&p50, CONFIDENCE)),
            interval_text(median_interval(&p99, CONFIDENCE)),
        );
    }
    let paired = per_setup[0].len().min(per_setup[1].len());
    let added = |pick: fn(&(f64, f64)) -> f64| -> Vec<f64> {
        (0..paired)
            .map(|r| pick(&per_setup[1][r]) - pick(&per_setup[0][r]))
            .collect()
    };
    let (added_p50, added_p99) = (
        median_interval(&added(|r| r.0), CONFIDENCE),
        median_interval(&added(|r| r.1), CONFIDENCE),
    );
    let _ = writeln!(
        report,
        "| **added by the bridge** (per round, bridged − built-in) | {paired} | {} | {} |\n",
        interval_text(added_p50),
        interval_text(added_p99),
    );
    let verdict = match added_p99 {
        Some(i) if i.high <= 1.0 => format!(
            "The bridge adds at most {:.3} ms to the p99 round trip (the interval's upper end), \
             within the 1 ms goal.",
            i.high
        ),
        Some(i) if i.low > 1.0 => format!(
            "The bridge adds at least {:.3} ms to the p99 round trip: above the 1 ms goal.",
            i.low
        ),
        Some(i) => format!(
            "Inconclusive against the 1 ms goal: the added p99 lies in [{:.3}, {:.3}] ms.",
            i.low, i.high
        ),
        None => "No rounds completed.".into(),
    };
    let _ = writeln!(report, "{verdict}\n");
    for f in &failures {
        let _ = writeln!(report, "- failed: {f}");
    }

    // Capacity: both setups at each step (alternating which goes first) until both lose.
    let _ = writeln!(
        report,
        "## Concurrent sessions on one transceiver worker\n\nEach client (recorded talkers: a \
         `send_to` per datagram) sends an Opus-sized packet every 20 ms for {:?}; loss is the \
         share of audio whose echo never came back. Transceiver CPU counts every thread of its \
         process (the bridge's included); the backend's is apart.\n",
        options.talk
    );
    let _ = writeln!(
        report,
        "| sessions | setup | connected | loss | transceiver CPU (all threads) | model-echo CPU |\n|---:|---|---:|---:|---:|---:|"
    );
    let ips: Vec<Ipv4Addr> = (110..120).map(loopback_ip).collect();
    let mut best = [0usize; 2];
    let mut lost = [false; 2];
    for (i, &n) in options.steps.iter().enumerate() {
        let order: [usize; 2] = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for at in order {
            if lost[at] {
                continue;
            }
            let setup = &setups[at];
            eprintln!("capacity: {n} sessions, {}…", setup.name);
            let pid = setup.child.0.id();
            let counters = || [cpu_seconds(pid, None), cpu_seconds(model.id(), None)];
            let plan = LoadPlan {
                sessions: n,
                talk: options.talk,
                threads: 1,
                talkers: Talkers::Recorded,
                cpu: Some(SESSIONS_CLIENT_CPU),
            };
            let (step, [before, after]) = load_step(setup.http, &ips, plan, counters);
            let share = |k: usize| (after[k] - before[k]) / step.talk_seconds * 100.0;
            let backend_cpu = if at == 1 {
                format!("{:.0} %", share(1))
            } else {
                "–".into()
            };
            let _ = writeln!(
                report,
                "| {n} | {} | {} | {:.2} % | {:.0} % | {backend_cpu} |",
                setup.name,
                step.connected,
                step.loss() * 100.0,
                share(0),
            );
            if step.connected == n && step.loss() < 0.01 {
                best[at] = n;
            } else {
                lost[at] = true;
            }
        }
        if lost.iter().all(|l| *l) {
            break;
        }
    }
    let ratio = if best[0] > 0 {
        best[1] as f64 / best[0] as f64
    } else {
        0.0
    };
    let _ = writeln!(
        report,
        "\nLargest step with every session connected and < 1 % loss: built-in echo **{}**, \
         over the bridge **{}** ({:.0} % of the built-in's; the goal is ≥ 80 %). One run of \
         steps {:?} apart: the figure is the last step held, not an interpolation.",
        best[0],
        best[1],
        ratio * 100.0,
        options.steps
    );
    drop(setups);
    drop(model);
    write_report(
        &options.out,
        &report,
        Some(super::children::tables_json(&report).to_string()),
    );
    i32::from(!failures.is_empty())
}
