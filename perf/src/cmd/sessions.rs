//! `perf sessions`: WebRTC sessions (str0m clients, Chromium) through relay-mio to the
//! transceiver, and direct: setup times, concurrent sessions per worker, ICE-TCP.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::children::{
    SESSIONS_CLIENT_CPU, TRANSCEIVER_CPU, loopback_ip, start_relay_with, start_transceiver,
    write_report,
};
use crate::bench::cpu::cpu_seconds;

/// WebRTC sessions (str0m clients) through relay-mio to the transceiver, and direct:
/// setup times, and concurrent echo sessions one worker carries.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Sessions measured for setup time, one after the other.
    #[arg(long, default_value_t = 50)]
    pub setups: usize,
    /// Session counts tried for capacity, until audio loss reaches 1 %.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "200,400,600,800,1000,1200,1400,1600"
    )]
    pub steps: Vec<usize>,
    /// How long every client talks in each capacity step.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub talk: Duration,
    /// Threads the capacity steps' clients are spread over (each with its own poll).
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// How the capacity steps' clients talk: `recorded` (each plays back a talk str0m
    /// recorded from it; a `send_to` per datagram) or `live` (str0m per packet).
    #[arg(long, value_enum, default_value_t = crate::bench::sessions::Talkers::Recorded)]
    pub talkers: crate::bench::sessions::Talkers,
    /// ICE-TCP connections opened, bound and loaded to measure the relay worker's TCP
    /// listener (0: skip).
    #[arg(long, default_value_t = 1000)]
    pub tcp_connections: usize,
    /// How long every ICE-TCP connection sends in that measurement.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub tcp_blast: Duration,
    /// Chromium sessions per path (one after the other; 0: none).
    #[arg(long, default_value_t = 10)]
    pub browser_sessions: usize,
    /// How long each Chromium session talks (pings every 50 ms, from the start).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub browser_talk: Duration,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "target/perf/sessions.md")]
    pub out: std::path::PathBuf,
}

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    let Options {
        setups,
        steps,
        talk,
        client_threads,
        talkers,
        tcp_connections,
        tcp_blast,
        browser_sessions,
        browser_talk,
        out,
    } = options;
    let report = sessions(
        setups,
        &steps,
        (talk, client_threads, talkers),
        (tcp_connections, tcp_blast),
        (browser_sessions, browser_talk),
        &out,
    );
    crate::bench::sessions::failed_rows::exit_code("sessions", &out, &report)
}

/// The relay's ICE-TCP limits this run needs for its own load, where they exceed the
/// defaults production keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IceTcpLimits {
    /// ICE-TCP connections the run opens from its one load address: the setup row's
    /// sessions, then the listener measurement's connections.
    pub connections: usize,
    /// New connections per second (and burst) from one source prefix, per worker.
    pub accepts_per_prefix: u32,
    /// New connections per second (and burst) in one worker.
    pub accepts_per_worker: u32,
    /// Open connections one worker holds.
    pub connections_per_worker: usize,
}

/// The most open connections the relay lets one worker hold (it refuses more at start).
const MOST_TCP_CONNECTIONS_PER_WORKER: usize = 65_536;

impl IceTcpLimits {
    /// What a run of `tcp_setups` setup sessions over ICE-TCP and a listener measurement
    /// of `listener_connections` connections needs. Both come from one /24, so they
    /// share one prefix's accept bucket, and that bucket's burst is its rate: the
    /// listener opens its connections back to back (faster than any refill) and a
    /// refused one is not retried, so the rate must cover every connection the run
    /// opens at once. Twice that, so the keyed hash putting another prefix in the same
    /// bucket, or the setup row's connections not yet refilled, cannot refuse one.
    pub fn for_load(tcp_setups: usize, listener_connections: usize) -> IceTcpLimits {
        let defaults = ufrag_common::config::TcpPolicy::default();
        let connections = tcp_setups.saturating_add(listener_connections);
        let with_headroom = connections.saturating_mul(2);
        let rate = u32::try_from(with_headroom).unwrap_or(u32::MAX);
        let accepts_per_prefix = rate.max(defaults.accepts_per_prefix);
        IceTcpLimits {
            connections,
            accepts_per_prefix,
            accepts_per_worker: accepts_per_prefix.max(defaults.accepts_per_worker),
            connections_per_worker: with_headroom.clamp(
                defaults.connections_per_worker,
                MOST_TCP_CONNECTIONS_PER_WORKER,
            ),
        }
    }

    /// The relay flags that set them (each only where it differs from the default).
    pub fn relay_flags(&self) -> Vec<String> {
        let defaults = ufrag_common::config::TcpPolicy::default();
        let mut flags = vec![];
        if self.accepts_per_prefix != defaults.accepts_per_prefix {
            flags.extend([
                "--tcp-accepts-per-prefix".into(),
                self.accepts_per_prefix.to_string(),
            ]);
        }
        if self.accepts_per_worker != defaults.accepts_per_worker {
            flags.extend([
                "--tcp-accepts-per-worker".into(),
                self.accepts_per_worker.to_string(),
            ]);
        }
        if self.connections_per_worker != defaults.connections_per_worker {
            flags.extend([
                "--tcp-connections-per-worker".into(),
                self.connections_per_worker.to_string(),
            ]);
        }
        flags
    }

    /// What the report says about them: which limits this run raised and why, or that
    /// it kept the defaults.
    pub fn sentence(&self, tcp_setups: usize, listener_connections: usize) -> String {
        let defaults = ufrag_common::config::TcpPolicy::default();
        let mut raised = vec![];
        if self.accepts_per_prefix != defaults.accepts_per_prefix {
            raised.push(format!(
                "per-prefix TCP accept rate to {}/s (default {}/s)",
                self.accepts_per_prefix, defaults.accepts_per_prefix
            ));
        }
        if self.accepts_per_worker != defaults.accepts_per_worker {
            raised.push(format!(
                "per-worker TCP accept rate to {}/s (default {}/s)",
                self.accepts_per_worker, defaults.accepts_per_worker
            ));
        }
        if self.connections_per_worker != defaults.connections_per_worker {
            raised.push(format!(
                "open ICE-TCP connections per worker to {} (default {})",
                self.connections_per_worker, defaults.connections_per_worker
            ));
        }
        // Lifted whatever the load (the relay flags in `sessions`), for the same reason.
        let also = "It also lifts the cap on open ICE-TCP connections from one prefix and \
                    the per-worker rate of new flows: its load clients are one host.";
        if raised.is_empty() {
            return format!(
                "This run kept the relay's ICE-TCP accept rates at their defaults: its {} \
                 ICE-TCP connections fit in them. {also}",
                self.connections
            );
        }
        let listed = match raised.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        };
        let opened = match (tcp_setups, listener_connections) {
            (_, 0) => format!("{tcp_setups} setup sessions"),
            (0, _) => format!("{listener_connections} listener connections opened back to back"),
            _ => format!(
                "{tcp_setups} setup sessions, then {listener_connections} listener \
                 connections opened back to back"
            ),
        };
        format!(
            "This run raised the relay's {listed} because its {} ICE-TCP clients ({opened}) \
             share one address; production keeps the defaults. {also}",
            self.connections
        )
    }
}

/// The relay's ICE-TCP closes by reason so far, from its metrics at `metrics`
/// (" (the relay's ICE-TCP closes so far: `prefix_rate` 992)"), to say why connections
/// went unanswered; empty when it closed none.
fn relay_tcp_closes(metrics: SocketAddr) -> String {
    let text = ufrag_testbed::http::get(None, metrics, "/metrics").map_or(String::new(), |r| r.1);
    let closes = ufrag_testbed::http::metric_by_label(
        &text,
        "ufrag_relay_tcp_connections_closed_total",
        "reason",
    );
    let listed: Vec<String> = closes
        .iter()
        .filter(|(_, count)| **count > 0.0)
        .map(|(reason, count)| format!("`{reason}` {count:.0}"))
        .collect();
    if listed.is_empty() {
        String::new()
    } else {
        format!(
            " (the relay's ICE-TCP closes so far: {})",
            listed.join(", ")
        )
    }
}

/// The failure of a capacity run in which no step held, naming the smallest step;
/// `None` when one held (or none was tried).
fn no_step_held(best: usize, smallest: Option<(usize, usize, f64)>) -> Option<String> {
    let (sessions, connected, loss) = smallest?;
    (best == 0).then(|| {
        format!(
            "failed: no step held: the smallest, {sessions} sessions, connected {connected} \
             and lost {:.2} % of its audio",
            loss * 100.0
        )
    })
}

/// Measures setup times, capacity steps, ICE-TCP and Chromium, and writes the report;
/// returns it.
pub fn sessions(
    setups: usize,
    steps: &[usize],
    (talk, client_threads, talkers): (Duration, usize, crate::bench::sessions::Talkers),
    (tcp_connections, tcp_blast): (usize, Duration),
    (browsers, browser_talk): (usize, Duration),
    out: &std::path::Path,
) -> String {
    use crate::bench::sessions::{LoadPlan, browser_session, load_step, quantile_ms, setup_times};
    use std::fmt::Write as _;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let limit = Duration::from_secs(10);
    let mut report = String::new();
    let _ = writeln!(
        report,
        "# WebRTC sessions: setup time and echo capacity\n\nCommand: `{command}`  "
    );
    let _ = writeln!(
        report,
        "str0m clients (full ICE, Opus, `events` channel) on loopback; one transceiver worker \
         alone on CPU {TRANSCEIVER_CPU}; relay-mio (1 worker) and the capacity clients on CPU \
         {SESSIONS_CLIENT_CPU}. The ICE-TCP row's clients have one candidate, active TCP, \
         on a connection to the relay's TCP VIP opened before the POST (a client whose \
         network blocks UDP); its TCP handshake is not in the figures. After its first echo \
         each session sends {} pings over `events`, each when the last pong is back: the ping \
         RTT quantiles are over all of them.\n",
        crate::bench::sessions::PINGS
    );
    let tcp_limits = IceTcpLimits::for_load(setups, tcp_connections);
    let _ = writeln!(report, "{}\n", tcp_limits.sentence(setups, tcp_connections));
    let _ = writeln!(
        report,
        "| path | sessions | connected p50 / p99 ms | first echo p50 / p99 ms | ping RTT p50 / p99 ms |"
    );
    let _ = writeln!(report, "|---|---:|---|---|---|");

    let vip = SocketAddr::from((loopback_ip(50), 3478));
    // ICE over TCP on the same relay: the row for clients whose networks block UDP.
    let tcp_vip = SocketAddr::from((loopback_ip(50), 4443));
    let relay_metrics = SocketAddr::from((loopback_ip(51), 9100));
    let mut relay_flags = [
        "--tcp-vip",
        &tcp_vip.to_string(),
        // One load host opens the listener's connections: lift the per-source caps.
        "--tcp-connections-per-prefix",
        "1000000",
        "--new-flows-per-worker",
        "1000000",
    ]
    .map(String::from)
    .to_vec();
    // ... and the accept rates its connections need (the report says so).
    relay_flags.extend(tcp_limits.relay_flags());
    let _relay = start_relay_with(
        1,
        vip,
        SocketAddr::from((loopback_ip(51), 40_000)),
        relay_metrics,
        &relay_flags,
    );
    let relayed_http = SocketAddr::from((loopback_ip(52), 8080));
    let direct_http = SocketAddr::from((loopback_ip(53), 8080));
    let relayed = start_transceiver(
        relayed_http,
        SocketAddr::from((loopback_ip(52), 41_000)),
        Some(vip),
        &["--advertise-tcp", &tcp_vip.to_string()],
    );
    let direct = start_transceiver(
        direct_http,
        SocketAddr::from((loopback_ip(53), 41_000)),
        None,
        &[],
    );
    // The global relay tier: the client talks to the global relay, which forwards the
    // flow to cluster 1's relay (it accepts frames only from the global relay), which
    // delivers it to a transceiver of cluster 1.
    let (global_ip, cluster_internal) =
        (loopback_ip(56), SocketAddr::from((loopback_ip(55), 40_000)));
    let _cluster_relay = start_relay_with(
        1,
        SocketAddr::from((loopback_ip(54), 3478)),
        cluster_internal,
        SocketAddr::from((loopback_ip(55), 9100)),
        &[
            "--cluster-id",
            "1",
            "--allow-global-relay-net",
            &format!("{global_ip}/32"),
        ]
        .map(String::from),
    );
    let global_vip = SocketAddr::from((global_ip, 3478));
    let _global_relay = start_relay_with(
        1,
        global_vip,
        SocketAddr::from((global_ip, 40_000)),
        SocketAddr::from((global_ip, 9100)),
        &[
            "--cluster-id",
            "0",
            "--cluster-relay",
            &format!("1={cluster_internal}"),
        ]
        .map(String::from),
    );
    let tier_http = SocketAddr::from((loopback_ip(57), 8080));
    let _tier = start_transceiver(
        tier_http,
        SocketAddr::from((loopback_ip(57), 41_000)),
        Some(global_vip),
        &["--cluster-id", "1"],
    );
    for (name, http, over_tcp) in [
        ("through relay-mio", relayed_http, false),
        ("through relay-mio over ICE-TCP", relayed_http, true),
        (
            "through the global relay, then cluster 1's relay",
            tier_http,
            false,
        ),
        ("direct", direct_http, false),
    ] {
        eprintln!("setup times {name}…");
        let times = if over_tcp {
            crate::bench::sessions::setup_times_over_tcp(
                http,
                loopback_ip(60),
                tcp_vip,
                setups,
                limit,
            )
        } else {
            setup_times(http, loopback_ip(60), setups, limit)
        };
        match times {
            Ok(times) => {
                let mut connected: Vec<Duration> = times.iter().map(|t| t.connected).collect();
                let mut echo: Vec<Duration> = times.iter().map(|t| t.first_echo).collect();
                let mut rtts: Vec<Duration> =
                    times.iter().flat_map(|t| t.rtts.iter().copied()).collect();
                let _ = writeln!(
                    report,
                    "| {name} | {} | {:.1} / {:.1} | {:.1} / {:.1} | {:.2} / {:.2} |",
                    times.len(),
                    quantile_ms(&mut connected, 0.5),
                    quantile_ms(&mut connected, 0.99),
                    quantile_ms(&mut echo, 0.5),
                    quantile_ms(&mut echo, 0.99),
                    quantile_ms(&mut rtts, 0.5),
                    quantile_ms(&mut rtts, 0.99)
                );
            }
            Err(e) => {
                let closes = if over_tcp {
                    relay_tcp_closes(relay_metrics)
                } else {
                    String::new()
                };
                let _ = writeln!(report, "| {name} | failed: {e}{closes} | | | |");
            }
        }
    }
    if tcp_connections > 0 {
        eprintln!("ICE-TCP listener: {tcp_connections} connections…");
        let relay_pid = _relay.0.id();
        let _ = writeln!(
            report,
            "\n## The ICE-TCP listener of one relay-mio worker\n\n{tcp_connections} connections \
             opened one after the other from one address, each bound by an authentic Binding \
             Request (its own session), then every connection sending 172-byte messages, 32 per \
             write, for {tcp_blast:?}; a socket counts what reaches the transceiver's address. \
             The client and that socket run on CPU {}, the relay worker alone on CPU \
             {SESSIONS_CLIENT_CPU}.\n",
            crate::bench::load::LOAD_CPU
        );
        match crate::bench::sessions::tcp_listener_capacity(
            tcp_vip,
            loopback_ip(61),
            loopback_ip(62),
            tcp_connections,
            tcp_blast,
            || cpu_seconds(relay_pid, Some("relay-w")),
        ) {
            Ok(c) => {
                let _ = writeln!(
                    report,
                    "| connections | opened and bound per s | messages per s | relay worker CPU | load CPU busy (client and sink) |\n|---:|---:|---:|---:|---:|\n| {} | {:.0} | {:.0} | {:.0} % | {:.0} % |",
                    c.connections,
                    c.bound_per_second,
                    c.messages_per_second,
                    c.relay_cpu,
                    c.load_cpu
                );
                let limit = if c.load_cpu >= 90.0 {
                    "the load CPU was busy: the client and the sink, not the relay, were the \
                     limit; the relay's capacity is at least this"
                } else if c.relay_cpu >= 90.0 {
                    "the relay worker used its core: this is its capacity"
                } else {
                    "neither core was saturated: the limit lies elsewhere (the loopback TCP \
                     path, the sockets' buffers)"
                };
                let _ = writeln!(report, "\nLimit: {limit}.");
                let _ = writeln!(
                    report,
                    "\nWhen the blast ended, {} messages were still queued in the connections' \
                     buffers (not counted): the connections were reset, which discards them, \
                     and the relay stopped forwarding {:.1} s later; the next measurement \
                     started only then, with the relay's worker idle.",
                    c.queued_after_blast, c.quiet_after_seconds
                );
            }
            Err(e) => {
                let _ = writeln!(report, "failed: {e}{}", relay_tcp_closes(relay_metrics));
            }
        }
    }
    let _ = writeln!(
        report,
        "\n## Headless Chromium on the demo page\n\n{browsers} sessions per path, one after the \
         other, each talking {browser_talk:?} with the fake microphone and a ping every 50 ms over \
         `events` from the moment it opens; medians over the sessions (RTT percentiles are each \
         session's own, the first second included).\n"
    );
    let _ = writeln!(
        report,
        "| path | sessions | POST → answer applied ms | POST → ICE ms | POST → DTLS ms | transceiver: created → DTLS ms (mean) | POST → first echo ms | ping RTT p50 / p99 ms | echoed |"
    );
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---:|---:|---|---:|");
    for (name, http) in [("through relay-mio", relayed_http), ("direct", direct_http)] {
        if browsers == 0 {
            break;
        }
        eprintln!("chromium sessions {name}…");
        let connect_seconds = |suffix: &str| {
            ufrag_testbed::http::metric(
                None,
                http,
                &format!("ufrag_transceiver_connect_seconds_{suffix}"),
            )
        };
        let (sum_before, count_before) = (connect_seconds("sum"), connect_seconds("count"));
        let runs: Result<Vec<_>, String> = (0..browsers)
            .map(|_| browser_session(http, browser_talk))
            .collect();
        let server_connect_ms = 1e3 * (connect_seconds("sum") - sum_before)
            / (connect_seconds("count") - count_before).max(1.0);
        match runs {
            Ok(runs) => {
                let of = |f: fn(&crate::bench::sessions::BrowserRun) -> f64| {
                    crate::bench::stats::median(&runs.iter().map(f).collect::<Vec<_>>())
                        .unwrap_or(0.0)
                };
                let _ = writeln!(
                    report,
                    "| {name} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.0} | {:.1} / {:.1} | {:.3} |",
                    runs.len(),
                    of(|r| r.answer_ms),
                    of(|r| r.ice_ms),
                    of(|r| r.dtls_ms),
                    server_connect_ms,
                    of(|r| r.first_echo_ms),
                    of(|r| r.rtt_p50_ms),
                    of(|r| r.rtt_p99_ms),
                    of(|r| r.echoed),
                );
            }
            Err(e) => {
                let _ = writeln!(report, "| {name} | failed: {e} | | | | | | | |");
            }
        }
    }
    drop(direct);

    let _ = writeln!(
        report,
        "\n## Concurrent echo sessions on one transceiver worker (through relay-mio)\n"
    );
    let _ = writeln!(
        report,
        "Each client sends one Opus-sized packet every 20 ms for {talk:?}; loss is the share of \
         audio packets whose echo never came back.\n"
    );
    let _ = writeln!(
        report,
        "{}\n",
        match talkers {
            crate::bench::sessions::Talkers::Recorded => {
                "Talkers: **recorded**. After connecting, each str0m client's talk is recorded \
                 from the client itself (its str0m session runs on a clock moved forward in \
                 memory: SRTP audio, SRTCP reports and consent checks, as str0m makes them), \
                 then played back on its socket at the recorded offsets, a `send_to` per \
                 datagram, so the load client costs far less than the transceiver it loads. \
                 An echo counts only once the client's str0m session, after the talk, has \
                 decrypted, authenticated and delivered it as audio."
            }
            crate::bench::sessions::Talkers::Live => {
                "Talkers: **live**. Each str0m client runs its session as it talks (SRTP, \
                 pacing and timers per packet): the load client costs about what the \
                 transceiver does."
            }
        }
    );
    let _ = writeln!(
        report,
        "| sessions | connected | audio sent | echoes received | loss | transceiver worker CPU | relay worker CPU | load client CPU ({client_threads} thread(s), sum) | machine busy |"
    );
    let _ = writeln!(report, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut client_bound = false;
    let mut machine_bound = false;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let ips: Vec<Ipv4Addr> = (70..80).map(loopback_ip).collect();
    let mut best = 0;
    // The first step's sessions, connected and loss: what to name if no step held.
    let mut smallest = None;
    // A step of no sessions measures nothing: not a step.
    for &n in steps.iter().filter(|&&n| n > 0) {
        eprintln!("capacity: {n} sessions…");
        let counters = || {
            [
                cpu_seconds(relayed.0.id(), Some("xcvr-w")),
                cpu_seconds(_relay.0.id(), Some("relay-w")),
                crate::bench::cpu::machine_busy_seconds(),
            ]
        };
        let plan = LoadPlan {
            sessions: n,
            talk,
            threads: client_threads,
            talkers,
            cpu: Some(SESSIONS_CLIENT_CPU),
        };
        let (step, [before, after]) = load_step(relayed_http, &ips, plan, counters);
        let share = |i: usize| (after[i] - before[i]) / step.talk_seconds * 100.0;
        let (xcvr_cpu, relay_cpu) = (share(0), share(1));
        let machine = share(2) / cpus;
        let client_cpu = step.client_cpu_seconds / step.talk_seconds * 100.0;
        client_bound = client_cpu >= 90.0 * client_threads as f64 && xcvr_cpu < 90.0;
        machine_bound = machine >= 90.0 && xcvr_cpu < 90.0;
        let _ = writeln!(
            report,
            "| {} | {} | {} | {} | {:.2} % | {xcvr_cpu:.0} % | {relay_cpu:.0} % | {client_cpu:.0} % | {machine:.0} % |",
            step.sessions,
            step.connected,
            step.sent,
            step.received,
            step.loss() * 100.0
        );
        smallest.get_or_insert((n, step.connected, step.loss()));
        if step.connected == n && step.loss() < 0.01 {
            best = n;
        } else {
            break;
        }
    }
    let _ = writeln!(
        report,
        "\nLargest step with every session connected and < 1 % loss: **{best} sessions**."
    );
    if let Some(failure) = no_step_held(best, smallest) {
        let _ = writeln!(report, "\n{failure}");
    }
    if client_bound {
        let _ = writeln!(
            report,
            "\n**The load client was the limit** at the last step (its threads near 100 % \
             while the transceiver worker was not): this is a floor of the worker's capacity, \
             not its measure."
        );
    }
    if machine_bound {
        let _ = writeln!(
            report,
            "\n**The machine was the limit** at the last step: all its CPUs near busy (workers, \
             clients and the kernel's loopback traffic share them) while the transceiver worker \
             was not: it could not get the CPU it needed."
        );
    }
    let _ = writeln!(
        report,
        "\nCPU shares are taken over the {talk:?} the clients send audio (all sessions \
         connected), not over signaling and connecting."
    );
    drop(relayed);
    // Its tables as JSON beside it.
    write_report(
        out,
        &report,
        Some(super::children::tables_json(&report).to_string()),
    );
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_load_raises_both_accept_rates_past_what_it_opens_at_once() {
        let limits = IceTcpLimits::for_load(50, 1000);
        assert_eq!(limits.connections, 1050);
        // The bucket's burst is its rate: it must hold every connection the run opens.
        assert!(limits.accepts_per_prefix as usize >= limits.connections);
        assert!(limits.accepts_per_worker as usize >= limits.connections);
        assert_eq!(limits.connections_per_worker, 4096);
        assert_eq!(
            limits.relay_flags(),
            [
                "--tcp-accepts-per-prefix",
                "2100",
                "--tcp-accepts-per-worker",
                "2100"
            ]
        );
        let sentence = limits.sentence(50, 1000);
        assert!(
            sentence.contains(
                "raised the relay's per-prefix TCP accept rate to 2100/s (default 8/s) and \
                 per-worker TCP accept rate to 2100/s (default 1000/s) because its 1050 \
                 ICE-TCP clients"
            ),
            "{sentence}"
        );
        assert!(
            sentence.contains("production keeps the defaults"),
            "{sentence}"
        );
    }

    #[test]
    fn a_load_within_the_defaults_keeps_them_and_says_so() {
        let limits = IceTcpLimits::for_load(2, 1);
        assert_eq!(limits.relay_flags(), Vec::<String>::new());
        assert!(
            limits.sentence(2, 1).starts_with("This run kept"),
            "{}",
            limits.sentence(2, 1)
        );
    }

    #[test]
    fn a_larger_listener_run_also_raises_the_open_connections_within_the_relays_bound() {
        let limits = IceTcpLimits::for_load(50, 3000);
        assert_eq!(limits.connections_per_worker, 6100);
        assert!(limits.relay_flags().contains(&"6100".to_string()));
        let huge = IceTcpLimits::for_load(0, usize::MAX);
        assert_eq!(huge.accepts_per_prefix, u32::MAX);
        assert_eq!(huge.connections_per_worker, MOST_TCP_CONNECTIONS_PER_WORKER);
    }

    #[test]
    fn a_capacity_run_with_no_step_held_is_a_failed_row() {
        let failure = no_step_held(0, Some((200, 150, 0.25))).expect("no step held");
        let report = format!("## Concurrent echo sessions\n\n{failure}\n");
        let failed = crate::bench::sessions::failed_rows(&report);
        assert_eq!(failed.len(), 1, "{report}");
        assert_eq!(
            failed[0].reason,
            "no step held: the smallest, 200 sessions, connected 150 and lost 25.00 % of its audio"
        );
        assert_eq!(no_step_held(200, Some((200, 200, 0.0))), None);
        assert_eq!(no_step_held(0, None), None);
    }
}
