//! `perf resilience`: live echo sessions through relay-mio beside a junk flood at its
//! public port, through a kill -9 and restart with and without the Redis cache, and
//! signing up while each hostile client's attack runs.

pub mod hostile;
pub mod trials;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::children::{
    loopback_ip, start_relay_as_deployed, start_relay_with, start_transceiver,
    start_transceiver_as_deployed,
};
use crate::cmd::resilience::hostile::{Attack, AttackTally, Sources, Target, run_attack};
use crate::cmd::resilience::trials::{LiveRun, gap_ms, sessions_during};
use ufrag_common::reasons::DropReason;

/// The parts of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Section {
    /// Junk at the public port beside connected sessions.
    Junk,
    /// kill -9 of the relay, with and without Redis.
    Restart,
    /// New sessions signing up while each attack runs.
    Hostile,
}

/// Live echo sessions through relay-mio next to a junk flood at its public port, through
/// a kill -9 and restart of the relay with and without the Redis route cache, and signing
/// up while hostile clients attack.
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
    /// The sections to run (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "junk,restart,hostile")]
    pub sections: Vec<Section>,
    /// The attacks of the hostile section (comma-separated; the calm run is always
    /// made first and last).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "auth-failures,replay,squatting,ice-tcp-slots,signaling-connections,signup-flood,blind-proof,path-steering,restart-minting"
    )]
    pub attacks: Vec<Attack>,
    /// One attacker's datagrams per second (its TCP attacks: a tenth of it in
    /// connections or requests per second).
    #[arg(long, default_value_t = 20_000)]
    pub attack_rate: u64,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "target/perf/resilience.md")]
    pub out: std::path::PathBuf,
}

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    let report = resilience(&options);
    crate::bench::sessions::failed_rows::exit_code("resilience", &options.out, &report)
}

/// A row's "connected" cell: `connected/sessions`, or a failed row when its sessions
/// were to connect before anything happened (no junk yet, no kill yet, no attack) and
/// one did not: the row would then compare its event with a setup that was already
/// broken, not measure the event.
fn connected_cell(run: &LiveRun, every_one_must_connect: bool) -> String {
    if every_one_must_connect && run.connected < run.sessions {
        format!(
            "failed: {}/{} sessions connected before anything happened",
            run.connected, run.sessions
        )
    } else {
        format!("{}/{}", run.connected, run.sessions)
    }
}

/// The relay's drop counters by reason, summed over workers, but for consumed notices.
fn relay_drops(metrics: SocketAddr) -> BTreeMap<String, f64> {
    let text = ufrag_testbed::http::get(None, metrics, "/metrics").map_or(String::new(), |r| r.1);
    let mut drops = ufrag_testbed::http::metric_by_label(
        &text,
        "ufrag_relay_dropped_datagrams_total",
        "reason",
    );
    // A transceiver's notice that a session ended is consumed, not refused (and one for
    // a flow already gone is late, not hostile): the sessions' own ends, not what an
    // attack cost.
    drops.remove(DropReason::SessionEnded.label());
    drops.remove(DropReason::SessionEndNoFlow.label());
    drops
}

/// How much each counter by label grew from `before` to `after` (those that did).
fn grown(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// Counters by label, largest first: "`label` n, …".
fn listed(counts: &BTreeMap<String, f64>) -> String {
    let mut sorted: Vec<(&String, &f64)> = counts.iter().collect();
    sorted.sort_by(|a, b| b.1.total_cmp(a.1));
    sorted
        .iter()
        .map(|(k, v)| format!("`{k}` {v:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the chosen sections and writes the report to `options.out`, with its rows as
/// JSON beside it (`.json`); returns the report.
pub fn resilience(options: &Options) -> String {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut report = format!(
        "# Live sessions under junk, attacks and relay restarts\n\nCommand: `{command}`\n\n"
    );
    let mut rows = Vec::new();
    if options.sections.contains(&Section::Junk) || options.sections.contains(&Section::Restart) {
        junk_and_restarts(options, &mut report, &mut rows);
    }
    if options.sections.contains(&Section::Hostile) {
        hostile(options, &mut report, &mut rows);
    }
    let out = &options.out;
    if let Some(dir) = out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(out, &report).expect("write the report");
    let json = serde_json::json!({ "command": command, "rows": rows });
    std::fs::write(out.with_extension("json"), json.to_string()).expect("write the JSON");
    println!("{report}");
    eprintln!("report: {}", out.display());
    report
}

/// The junk and restart sections.
fn junk_and_restarts(options: &Options, into: &mut String, rows: &mut Vec<serde_json::Value>) {
    use crate::cmd::resilience::trials::{JUNK_KINDS, junk_flood, talk_while};
    use std::fmt::Write as _;
    let (n, talk, junk_factor) = (options.sessions, options.talk, options.junk_factor);
    let redis = ufrag_testbed::redis::RedisServer::start_at(loopback_ip(95));
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
        "{n} str0m echo sessions (one Opus-sized packet each way every 20 ms, {live_pps} pps \
         of live audio into the relay) through relay-mio (1 worker, Redis route cache) to \
         one transceiver worker, on loopback; each run talks for {talk:?}, and what happens \
         starts {lead:?} in. Clients, relay, transceiver, Redis and the junk sender share \
         the machine's 2 vCPUs.\n"
    );
    let mut row = |report: &mut String, section: &str, name: &str, run: &LiveRun, extra: &str| {
        rows.push(serde_json::json!({
            "section": section,
            "row": name,
            "live": run.json(),
            "notes": extra,
        }));
        let _ = writeln!(
            report,
            "| {name} | {} | {} | {} | {:.3} % | {:.0} / {:.0} / {:.0} | {:.0} / {:.0} | {extra} |",
            // Every run here connects its sessions before its junk or its kill starts.
            connected_cell(run, true),
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
    if options.sections.contains(&Section::Junk) {
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
        row(&mut report, "junk", "no junk", &baseline, "none");
        eprintln!("resilience: junk flood…");
        let keys = ufrag_testbed::keys::keys();
        // An authentic request for a session nobody holds (the transceiver knows no such
        // ufrag): the first copy makes a flow, every other copy is a replay.
        let valid = crate::bench::probe::binding_request(&keys, worker, 201);
        let before = relay_drops(metrics);
        let misses =
            || ufrag_testbed::http::metric(None, metrics, "ufrag_relay_cache_misses_total");
        let misses_before = misses();
        let rate = junk_factor * live_pps;
        let (junked, sent) = talk_while(http, clients, n, talk, lead, || {
            junk_flood(vip, loopback_ip(94), 64, rate, talk / 2, &valid).unwrap_or(0)
        });
        let reasons = listed(&grown(&before, &relay_drops(metrics)));
        let lookups_answered = misses() - misses_before;
        row(
            &mut report,
            "junk",
            &format!("junk at {junk_factor}× the live rate"),
            &junked,
            &format!(
                "{sent} datagrams in {:?}, {}; relay drops: {reasons}; Redis lookups \
                 answered (misses): {lookups_answered:.0}",
                talk / 2,
                junk_pace(sent, rate, talk / 2)
            ),
        );
        let _ = writeln!(
            report,
            "\nExtra loss with junk: **{:.3} %** (goal < 0.1 %).\n",
            100.0 * (junked.loss() - baseline.loss()).max(0.0)
        );
    }

    if options.sections.contains(&Section::Restart) {
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
            let counter = |name: &str| ufrag_testbed::http::metric(None, metrics, name);
            let drops = listed(&grown(&BTreeMap::new(), &relay_drops(metrics)));
            row(
                &mut report,
                "restart",
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
    }
    into.push_str(&report);
}

/// A counter family's values by one label, from `/metrics` at `addr`.
fn by_label(addr: SocketAddr, family: &str, label: &str) -> BTreeMap<String, f64> {
    let text = ufrag_testbed::http::get(None, addr, "/metrics").map_or(String::new(), |r| r.1);
    ufrag_testbed::http::metric_by_label(&text, family, label)
}

/// How fast the junk went: the rate asked, or, when one sender thread could not reach
/// it, the rate it reached, saying so (the sender, not the relay, was the limit).
fn junk_pace(sent: u64, asked: u64, during: Duration) -> String {
    let reached = sent as f64 / during.as_secs_f64().max(1e-9);
    if reached >= 0.95 * asked as f64 {
        format!("{asked} pps")
    } else {
        format!("{reached:.0} pps (asked {asked}: the most this one sender reached)")
    }
}

/// The hostile section: for the calm run and each attack, a fresh relay-mio (2 workers,
/// 128 flows each, an ICE-TCP VIP, its own limits), the attack started, and `sessions`
/// new sessions signing up from their own addresses while it runs.
fn hostile(options: &Options, report: &mut String, rows: &mut Vec<serde_json::Value>) {
    use std::fmt::Write as _;
    let (n, talk, rate) = (options.sessions, options.talk, options.attack_rate);
    const RAMP: Duration = Duration::from_secs(2);
    const FLOWS_PER_WORKER: usize = 128;
    let vip = SocketAddr::from((loopback_ip(100), 3478));
    let internal = SocketAddr::from((loopback_ip(101), 40_000));
    let metrics = SocketAddr::from((loopback_ip(101), 9100));
    let http = SocketAddr::from((loopback_ip(102), 8080));
    let worker = SocketAddr::from((loopback_ip(102), 41_000));
    let operations = SocketAddr::from((loopback_ip(102), 9101));
    let operations_flag = operations.to_string();
    let _transceiver = start_transceiver_as_deployed(
        http,
        worker,
        Some(vip),
        &["--metrics-addr", &operations_flag],
    );
    let relay_flags = [
        "--flows-per-worker".to_string(),
        FLOWS_PER_WORKER.to_string(),
        "--tcp-vip".to_string(),
        vip.to_string(),
    ];
    let target = Target {
        vip,
        tcp_vip: vip,
        http,
        transceiver: worker,
        keys: ufrag_testbed::keys::keys(),
    };
    let sources = Sources::for_this_run();
    let _ = writeln!(
        report,
        "## New sessions while hostile clients attack\n\n\
         For each row a fresh relay-mio (2 workers on both vCPUs, \
         `--flows-per-worker {FLOWS_PER_WORKER}`, an ICE-TCP VIP, every other limit its \
         default) and one transceiver worker with its default signaling limits. The attack \
         starts; {RAMP:?} later {n} str0m echo sessions sign up one after the other, each \
         from its own address on its own /24, connect and talk for {talk:?}; then the \
         attack stops. One attacker sends at most {rate} datagrams per second (its TCP \
         attacks a tenth of that in connections or requests) from one thread of this \
         host, which shares the 2 vCPUs with the relay, the transceiver and the clients: \
         a real attacker host sends more, so each row is a lower bound on what an attack \
         costs, and part of what it costs here is CPU taken from the relay on the same \
         host. The attacker's own sessions' credentials are minted with the hint key (an \
         attacker gets the same by POSTing sessions and DELETEing them).\n"
    );
    let _ = writeln!(
        report,
        "| attack | what the attacker sent | connected | POSTs refused | setup p50 / p99 / max ms | loss | longest gap on the wire p50 / max ms | what the relay and the transceiver refused |"
    );
    let _ = writeln!(report, "|---|---|---:|---:|---|---:|---|---|");
    let mut order: Vec<Attack> = vec![Attack::Calm];
    order.extend(options.attacks.iter().filter(|a| **a != Attack::Calm));
    if order.len() > 1 {
        order.push(Attack::Calm);
    }
    let mut calm: Vec<LiveRun> = Vec::new();
    let mut attacked: Vec<(Attack, LiveRun)> = Vec::new();
    for (i, attack) in order.iter().copied().enumerate() {
        eprintln!(
            "resilience: hostile {}/{}: {}…",
            i + 1,
            order.len(),
            attack.label()
        );
        let mut relay = start_relay_as_deployed(2, vip, internal, metrics, &relay_flags);
        let refusals = || {
            by_label(
                operations,
                "ufrag_transceiver_http_refusals_total",
                "reason",
            )
        };
        let refused_before = refusals();
        let limit = RAMP + Duration::from_secs(25) + talk;
        let (run, tally) = sessions_during(
            http,
            n,
            |i| sources.client(i),
            talk,
            RAMP,
            |stop| run_attack(attack, &target, sources, rate, stop, limit),
        );
        // An attack tool that could not run leaves its row without an attack: failed.
        let tally = tally.map_err(|e| format!("the attack did not run: {e}"));
        let relay_refused = relay_drops(metrics);
        let tcp_closed = by_label(
            metrics,
            "ufrag_relay_tcp_connections_closed_total",
            "reason",
        );
        let shed = ufrag_testbed::http::metric(None, metrics, "ufrag_relay_flows_shed_total");
        let transceiver_refused = grown(&refused_before, &refusals());
        rows.push(serde_json::json!({
            "section": "hostile",
            "row": attack.label(),
            "attack": format!("{attack:?}"),
            "live": run.json(),
            "attacker": match &tally {
                Ok(tally) => serde_json::json!({
                    "sent": tally.sent,
                    "connections": tally.connections,
                    "accepted": tally.accepted,
                    "per_second": tally.rate(),
                    "seconds": tally.elapsed.as_secs_f64(),
                    "detail": tally.detail,
                }),
                Err(e) => serde_json::json!({ "failed": e }),
            },
            "relay_drops": grown(&BTreeMap::new(), &relay_refused),
            "ice_tcp_closes": grown(&BTreeMap::new(), &tcp_closed),
            "signaling_refusals": transceiver_refused,
            "unproven_flows_shed": shed,
        }));
        relay.0.stop();
        let sent = match (attack, &tally) {
            (_, Err(e)) => format!("failed: {e}"),
            (Attack::Calm, Ok(_)) => "–".to_string(),
            (
                _,
                Ok(AttackTally {
                    detail: Some(detail),
                    ..
                }),
            ) => detail.clone(),
            (Attack::IceTcpSlots, Ok(tally)) => format!(
                "{} connections opened and kept open by the attacker ({:.0}/s for {:.1} s)",
                tally.connections,
                tally.rate(),
                tally.elapsed.as_secs_f64()
            ),
            (Attack::SignalingConnections, Ok(tally)) => format!(
                "{} requests ({:.0}/s for {:.1} s) on {} connections",
                tally.sent,
                tally.rate(),
                tally.elapsed.as_secs_f64(),
                tally.connections
            ),
            (Attack::SignupFlood, Ok(tally)) => format!(
                "{} sign-ups ({:.0}/s for {:.1} s) from one address, {} answered with a session",
                tally.sent,
                tally.rate(),
                tally.elapsed.as_secs_f64(),
                tally.accepted
            ),
            (_, Ok(tally)) => format!(
                "{} datagrams ({:.0}/s for {:.1} s)",
                tally.sent,
                tally.rate(),
                tally.elapsed.as_secs_f64()
            ),
        };
        let mut refused = vec![];
        for (what, counts) in [
            ("relay drops", grown(&BTreeMap::new(), &relay_refused)),
            ("ICE-TCP closes", grown(&BTreeMap::new(), &tcp_closed)),
            ("signaling refusals", transceiver_refused),
        ] {
            if !counts.is_empty() {
                refused.push(format!("{what}: {}", listed(&counts)));
            }
        }
        if shed > 0.0 {
            refused.push(format!("unproven flows shed: {shed:.0}"));
        }
        let _ = writeln!(
            report,
            "| {} | {sent} | {} | {} | {:.0} / {:.0} / {:.0} | {:.3} % | {:.0} / {:.0} | {} |",
            attack.label(),
            // Under an attack, sessions that did not connect are what it cost; without one,
            // every one connects.
            connected_cell(&run, attack == Attack::Calm),
            run.refused_posts,
            gap_ms(&run.setups, 0.5),
            gap_ms(&run.setups, 0.99),
            gap_ms(&run.setups, 1.0),
            100.0 * run.loss(),
            gap_ms(&run.gaps, 0.5),
            gap_ms(&run.gaps, 1.0),
            if refused.is_empty() {
                "–".to_string()
            } else {
                refused.join("; ")
            },
        );
        match attack {
            Attack::Calm => calm.push(run),
            _ => attacked.push((attack, run)),
        }
    }
    let _ = writeln!(report, "\nWhat each attacker does:\n");
    for attack in order.iter().filter(|a| **a != Attack::Calm) {
        let _ = writeln!(report, "- **{}**: {}.", attack.label(), attack.how());
    }
    // Beside the calm runs: the worse of the two (so a drift of the host over the section
    // does not count against an attack).
    let calm_loss = calm.iter().map(LiveRun::loss).fold(0.0, f64::max);
    let calm_setup = calm
        .iter()
        .map(|r| gap_ms(&r.setups, 0.99))
        .fold(0.0, f64::max);
    let calm_setups: Vec<f64> = calm.iter().map(|r| gap_ms(&r.setups, 0.99)).collect();
    let calm_spread = calm_setups.iter().copied().fold(0.0, f64::max)
        - calm_setups.iter().copied().fold(f64::INFINITY, f64::min);
    let _ = writeln!(
        report,
        "\nBeside the worse calm run (loss {:.3} %, setup p99 {calm_setup:.0} ms; with {} \
         sessions a row's p99 is its slowest session or next to it). One run per row: the \
         two calm runs' setup p99 differ by {calm_spread:.0} ms, and a single run cannot \
         tell a larger difference from noise either, so the setup differences below are \
         inconclusive; what a row shows is whether its sessions connected and lost \
         audio.\n",
        100.0 * calm_loss,
        calm.first().map_or(0, |run| run.sessions),
    );
    for (attack, run) in &attacked {
        let _ = writeln!(
            report,
            "- {}: {}/{} connected, loss {:+.3} points, setup p99 {:+.0} ms.",
            attack.label(),
            run.connected,
            run.sessions,
            100.0 * (run.loss() - calm_loss),
            gap_ms(&run.setups, 0.99) - calm_setup,
        );
    }
    let _ = writeln!(
        report,
        "\nSetup time is from the start of the session's POST to str0m's `Connected` (ICE \
         and DTLS done). The relay's counters are the fresh relay's totals for the row \
         (the sessions' own traffic included); the signaling refusals are those during \
         the row.\n"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(connected: usize) -> LiveRun {
        LiveRun {
            sessions: 50,
            refused_posts: 0,
            connected,
            setups: vec![],
            sent: 0,
            received: 0,
            gaps: vec![],
            delivered_gaps: vec![],
        }
    }

    #[test]
    fn a_run_without_an_attack_that_did_not_connect_every_session_is_a_failed_row() {
        assert_eq!(connected_cell(&run_with(50), true), "50/50");
        // Under an attack, the sessions it kept out are the measurement.
        assert_eq!(connected_cell(&run_with(48), false), "48/50");
        let row = format!(
            "| calm (no attack) | – | {} | 0 |",
            connected_cell(&run_with(48), true)
        );
        let failed = crate::bench::sessions::failed_rows(&row);
        assert_eq!(failed.len(), 1, "{row}");
        assert_eq!(failed[0].row, "calm (no attack)");
        assert_eq!(
            failed[0].reason,
            "48/50 sessions connected before anything happened"
        );
    }
}
