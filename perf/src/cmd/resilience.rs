//! `perf resilience`: live echo sessions through relay-mio beside a junk flood at its
//! public port, and through a kill -9 and restart, with and without the Redis cache.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::children::{loopback_ip, start_relay_with, start_transceiver};

/// Live echo sessions through relay-mio next to a junk flood at its public port, and
/// through a kill -9 and restart of the relay, with and without the Redis route cache.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Live sessions.
    #[arg(long, default_value_t = 50)]
    pub sessions: usize,
    /// How long they talk in each run.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub talk: Duration,
    /// Junk datagrams per second, as a multiple of the live sessions' audio rate.
    #[arg(long, default_value_t = 10)]
    pub junk_factor: u64,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "target/perf/resilience.md")]
    pub out: std::path::PathBuf,
}

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    let Options {
        sessions,
        talk,
        junk_factor,
        out,
    } = options;
    resilience(sessions, talk, junk_factor, &out);
    0
}

/// The relay's drop counters by reason, summed over workers.
fn relay_drops(metrics: SocketAddr) -> std::collections::BTreeMap<String, f64> {
    let text = testkit::http::get(None, metrics, "/metrics").map_or(String::new(), |r| r.1);
    testkit::http::metric_by_label(&text, "ufrag_relay_drops_total", "reason")
}

/// Runs the junk and restart experiments and writes the report to `out`.
pub fn resilience(n: usize, talk: Duration, junk_factor: u64, out: &std::path::Path) {
    use crate::resilience::{JUNK_KINDS, LiveRun, gap_ms, junk_flood, talk_while};
    use std::fmt::Write as _;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let redis = testkit::redis::RedisServer::start_at(loopback_ip(95));
    let vip = SocketAddr::from((loopback_ip(90), 3478));
    let internal = SocketAddr::from((loopback_ip(91), 40_000));
    let metrics = SocketAddr::from((loopback_ip(91), 9100));
    let with_redis = vec!["--redis-url".to_string(), redis.url()];
    let mut relay = start_relay_with(1, vip, internal, metrics, &with_redis);
    let http = SocketAddr::from((loopback_ip(92), 8080));
    let worker = SocketAddr::from((loopback_ip(92), 41_000));
    let _transceiver = start_transceiver(http, worker, Some(vip), &[]);
    let clients = loopback_ip(93);
    let lead = talk / 4;
    let live_pps = n as u64 * 50;
    let mut report = String::new();
    let _ = writeln!(
        report,
        "# Live sessions under junk and through relay restarts\n\nCommand: `{command}`  \n\
         {n} str0m echo sessions (one Opus-sized packet each way every 20 ms, {live_pps} pps \
         of live audio into the relay) through relay-mio (1 worker, Redis route cache) to \
         one transceiver worker, on loopback; each run talks for {talk:?}, and what happens \
         starts {lead:?} in. Clients, relay, transceiver, Redis and the junk sender share \
         the machine's 2 vCPUs.\n"
    );
    let row = |report: &mut String, name: &str, run: &LiveRun, extra: &str| {
        let _ = writeln!(
            report,
            "| {name} | {}/{} | {} | {} | {:.3} % | {:.0} / {:.0} / {:.0} | {:.0} / {:.0} | {extra} |",
            run.connected,
            run.sessions,
            run.sent,
            run.received,
            100.0 * run.loss(),
            gap_ms(&run.gaps, 0.5),
            gap_ms(&run.gaps, 0.99),
            gap_ms(&run.gaps, 1.0),
            gap_ms(&run.delivered_gaps, 0.5),
            gap_ms(&run.delivered_gaps, 1.0),
        );
    };
    let _ = writeln!(
        report,
        "## Junk at the public port\n\nThe junk cycles through: {}. Goal: the live \
         sessions lose < 0.1 % more than without junk.\n",
        JUNK_KINDS.join("; ")
    );
    let _ = writeln!(
        report,
        "| run | connected | audio sent | echoed | loss | longest gap on the wire per session p50 / p99 / max ms | as str0m delivered p50 / max ms | junk |"
    );
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---|---|---|");
    eprintln!("resilience: baseline…");
    let (baseline, ()) = talk_while(http, clients, n, talk, lead, || ());
    row(&mut report, "no junk", &baseline, "none");
    eprintln!("resilience: junk flood…");
    let keys = testkit::keys::keys();
    // An authentic request for a session nobody holds (the transceiver knows no such
    // ufrag): the first copy makes a flow, every other copy is a replay.
    let valid = crate::probe::binding_request(&keys, worker, 201);
    let before = relay_drops(metrics);
    let misses = || testkit::http::metric(None, metrics, "ufrag_relay_cache_misses_total");
    let misses_before = misses();
    let rate = junk_factor * live_pps;
    let (junked, sent) = talk_while(http, clients, n, talk, lead, || {
        junk_flood(vip, loopback_ip(94), 64, rate, talk / 2, &valid).unwrap_or(0)
    });
    let after = relay_drops(metrics);
    let lookups_answered = misses() - misses_before;
    let mut by_reason: Vec<(String, f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    by_reason.sort_by(|a, b| b.1.total_cmp(&a.1));
    let reasons = by_reason
        .iter()
        .map(|(k, v)| format!("`{k}` {v:.0}"))
        .collect::<Vec<_>>()
        .join(", ");
    row(
        &mut report,
        &format!("junk at {junk_factor}× the live rate"),
        &junked,
        &format!(
            "{sent} datagrams at {rate} pps for {:?}; relay drops: {reasons}; Redis \
             lookups answered (misses): {lookups_answered:.0}",
            talk / 2
        ),
    );
    let _ = writeln!(
        report,
        "\nExtra loss with junk: **{:.3} %** (goal < 0.1 %).\n",
        100.0 * (junked.loss() - baseline.loss()).max(0.0)
    );

    let _ = writeln!(
        report,
        "## kill -9 of relay-mio, restarted at once\n\nThe relay is killed with SIGKILL \
         and started again with the same flags. With Redis, the first SRTP packet of each \
         flow restores it from the cache (that packet is dropped); without, a flow comes \
         back with the client's next STUN check. Goal with Redis: gap ≤ 50 ms.\n"
    );
    let _ = writeln!(
        report,
        "| run | connected | audio sent | echoed | loss | longest gap on the wire per session p50 / p99 / max ms | as str0m delivered p50 / max ms | restart → ready | new relay's cache and drops |"
    );
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---|---|---|---|");
    for (name, flags) in [
        ("with Redis", with_redis.clone()),
        ("without Redis", vec![]),
    ] {
        eprintln!("resilience: restart {name}…");
        // The relay the sessions start on has the same flags as the one after the kill.
        relay.0.stop();
        relay = start_relay_with(1, vip, internal, metrics, &flags);
        let (run, ready) = talk_while(http, clients, n, talk, lead, || {
            relay.0.stop();
            let killed = Instant::now();
            relay = start_relay_with(1, vip, internal, metrics, &flags);
            killed.elapsed()
        });
        let counter = |name: &str| testkit::http::metric(None, metrics, name);
        let drops = relay_drops(metrics)
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|(k, v)| format!("`{k}` {v:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        row(
            &mut report,
            name,
            &run,
            &format!(
                "{:.0} ms | hits {:.0}, misses {:.0}, errors {:.0}; {drops}",
                ready.as_secs_f64() * 1e3,
                counter("ufrag_relay_cache_hits_total"),
                counter("ufrag_relay_cache_misses_total"),
                counter("ufrag_relay_cache_errors_total"),
            ),
        );
    }
    let _ = writeln!(
        report,
        "\nA gap is the longest time between two echoed RTP packets of one session over \
         the whole run (20 ms when nothing was lost): on the wire, as they reached the \
         client's socket, and as str0m delivered them (its receive buffer holds the packets \
         behind a lost one for a while, so one lost packet shows there as a longer gap). \"restart → ready\" is from SIGKILL to the \
         new relay answering `/readyz`, measured by this tool's 20 ms polling."
    );
    if let Some(dir) = out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(out, &report).expect("write the report");
    println!("{report}");
    eprintln!("report: {}", out.display());
}
