//! `ufrag-perf load`: a load test against a running deployment, pointed at its sessions
//! URL as a team points `lk perf load-test` at staging. One pilot session first (so a
//! mistyped URL, a refused token or an unreachable relay is one line, not N failures),
//! then the load ([`crate::sessions::load_test`]), then a Markdown and JSON report: setup
//! time percentiles, failures by reason, audio and pong loss, ping round trips, the
//! tester's own load, and the deltas of the server's `/metrics` when it can be read.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs as _, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::http::{Endpoint, request_to};
use transceiver::session_token::TokenAlgorithm;

use crate::sessions::load_test::{
    self, Credentials, Outcome, Pilot, Plan, Progress, SessionRecord, Target,
};
use crate::sessions::quantile_ms;

/// Load-test a running deployment: `--sessions` str0m clients sign up at `--rate` per
/// second on its sessions URL, connect through its relay, and talk (an Opus frame every
/// 20 ms, a ping every second over `events`) until all of them have been up together for
/// `--duration`; then each is deleted. A pilot session goes first: a mistyped URL, a
/// refused token or an unreachable relay stops the run with one line (exit 2). Exits 1
/// when a session of the load failed, 0 when every one got through.
///
/// The token comes from --token-file or UFRAG_TRANSCEIVER_TOKEN (the same for every
/// session), or is minted per session with --mint-key-file (a user of its own each).
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Options {
    /// The sessions URL: `https://HOST[:PORT]/v1/sessions`, `http://…`, or `HOST:PORT`
    /// (then `/v1/sessions`).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Sessions in all.
    #[arg(long, default_value_t = 50)]
    pub sessions: usize,
    /// Sign-ups per second (deletes go at the same rate).
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// How long all the sessions are held together, after the last one has signed up.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// A file holding the token every session presents (mode 0600): the bearer token,
    /// or one session token; or UFRAG_TRANSCEIVER_TOKEN.
    #[arg(long, value_name = "FILE", conflicts_with = "mint_key_file")]
    pub token_file: Option<PathBuf>,
    /// Mint a session token for each session with this key (as `ufrag-token` does): the
    /// HS256 secret, or the private key (PKCS#8 PEM) for ES256 and EdDSA.
    #[arg(long, value_name = "FILE")]
    pub mint_key_file: Option<PathBuf>,
    /// The minted tokens' algorithm.
    #[arg(long, value_enum, default_value_t = TokenAlgorithm::Hs256)]
    pub mint_algorithm: TokenAlgorithm,
    /// The minted tokens' audience (the deployment's `--session-token-audience`).
    #[arg(long, default_value = "ufrag-relay", value_name = "TEXT")]
    pub mint_audience: String,
    /// Extra trust anchors (PEM) for an https URL, beside the web's roots.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// The clients' address (default: the one this host routes to the URL's host from).
    #[arg(long)]
    pub local: Option<Ipv4Addr>,
    /// Threads the clients are spread over (default: this host's CPUs, at most 4).
    #[arg(long)]
    pub threads: Option<usize>,
    /// How long ICE and DTLS may take after the answer (and the channel after them).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
    /// Also read these Prometheus endpoints before and after (e.g. the relay's
    /// `http://HOST:9590/metrics`); the signaling endpoint's own `/metrics` is always tried.
    #[arg(long, value_name = "URL")]
    pub metrics: Vec<String>,
    /// Where to write the Markdown report (JSON beside it).
    #[arg(long, default_value = "target/perf/load.md")]
    pub out: PathBuf,
}

/// A ping over `events` this often.
const PING_EVERY: Duration = Duration::from_secs(1);
/// The share of a core above which a driver thread may have been the limit.
const BUSY_DRIVER: f64 = 0.85;
/// The `/metrics` series the Markdown report lists at most (the JSON has them all).
const SHOWN_SERIES: usize = 60;

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    match prepare(&options) {
        Err(e) => {
            eprintln!("ufrag-perf load: {e}");
            2
        }
        Ok((target, credentials, plan)) => {
            let pilot = match load_test::pilot(&target, &credentials, &plan) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("ufrag-perf load: {e}");
                    return 2;
                }
            };
            crate::say!(
                "load: the pilot session connected through {} in {:.0} ms; {} sessions at \
                 {}/s, held {:?}",
                pilot.relay,
                ms(pilot.connected),
                plan.sessions,
                options.rate,
                plan.hold
            );
            let scrapes = scrape_targets(&target, &options.metrics, &options.ca_file);
            let before: Vec<Scrape> = scrapes.iter().map(Scrape::read).collect();
            let outcome = run_with_progress(&target, &credentials, &plan);
            let after: Vec<Scrape> = scrapes.iter().map(Scrape::read).collect();
            let report = Report {
                target: &target,
                plan: &plan,
                pilot: &pilot,
                outcome: &outcome,
                metrics: before.into_iter().zip(after).collect(),
            };
            super::children::write_report(
                &options.out,
                &report.markdown(),
                Some(serde_json::to_string_pretty(&report.json()).unwrap_or_default()),
            );
            let failed = outcome
                .sessions
                .iter()
                .filter(|s| s.failure.is_some())
                .count();
            if failed > 0 {
                eprintln!(
                    "ufrag-perf load: {failed} of {} sessions failed (report: {})",
                    plan.sessions,
                    options.out.display()
                );
            }
            i32::from(failed > 0)
        }
    }
}

/// The target, the credentials and the plan from the options; an error is one line.
fn prepare(options: &Options) -> Result<(Target, Credentials, Plan), String> {
    if options.sessions == 0 {
        return Err("--sessions must be at least 1".into());
    }
    if !(options.rate.is_finite() && options.rate > 0.0) {
        return Err("--rate must be a positive number of sign-ups per second".into());
    }
    let (endpoint, path) = parse_url(&options.url)?;
    let tls = testkit::http::tls_client(options.ca_file.as_deref())?;
    let credentials = match &options.mint_key_file {
        Some(file) => Credentials::Minted {
            algorithm: options.mint_algorithm,
            key: std::fs::read(file)
                .map_err(|e| format!("--mint-key-file {}: {e}", file.display()))?,
            audience: options.mint_audience.clone(),
            run: format!("{}", std::process::id()),
        },
        None => match super::tools::bearer_token(options.token_file.as_deref())? {
            Some(token) => Credentials::Fixed(token),
            None => Credentials::None,
        },
    };
    // A key that cannot sign is said now, not once per session.
    credentials.authorization(0)?;
    let local = match options.local {
        Some(ip) => ip,
        None => local_address_toward(&endpoint)?,
    };
    let threads = options
        .threads
        .unwrap_or_else(|| crate::environment::online_cpus().min(4))
        .max(1);
    let plan = Plan {
        sessions: options.sessions,
        rate: options.rate,
        hold: options.duration,
        threads,
        local,
        connect_timeout: options.connect_timeout,
        ping_every: PING_EVERY,
    };
    Ok((
        Target {
            endpoint,
            path,
            tls,
        },
        credentials,
        plan,
    ))
}

/// `https://HOST[:PORT]/path`, `http://…` or `HOST:PORT[/path]`: the endpoint and the
/// path (`/v1/sessions` when none is given).
fn parse_url(text: &str) -> Result<(Endpoint, String), String> {
    let after_scheme = text.find("://").map_or(0, |i| i + 3);
    let (origin, path) = match text[after_scheme..].find('/') {
        Some(i) => text.split_at(after_scheme + i),
        None => (text, ""),
    };
    let endpoint: Endpoint = origin.parse().map_err(|e| format!("--url {e}"))?;
    let path = match path.trim_end_matches('/') {
        "" => "/v1/sessions".to_string(),
        path => path.to_string(),
    };
    Ok((endpoint, path))
}

/// The IPv4 address this host sends from toward `endpoint`'s host (no packet is sent).
fn local_address_toward(endpoint: &Endpoint) -> Result<Ipv4Addr, String> {
    let remote = (endpoint.host.as_str(), endpoint.port)
        .to_socket_addrs()
        .map_err(|e| format!("--url {endpoint}: cannot resolve {}: {e}", endpoint.host))?
        .find(|a| a.is_ipv4())
        .ok_or_else(|| format!("--url {endpoint}: no IPv4 address (the clients are IPv4)"))?;
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| e.to_string())?;
    socket
        .connect(remote)
        .map_err(|e| format!("no route to {remote}: {e}"))?;
    match socket.local_addr().map_err(|e| e.to_string())?.ip() {
        IpAddr::V4(ip) => Ok(ip),
        IpAddr::V6(ip) => Err(format!("routed from IPv6 {ip}; give --local")),
    }
}

/// Runs the load on a thread of its own while this one shows its progress: a bar on a
/// terminal, a line every five seconds elsewhere.
fn run_with_progress(target: &Target, credentials: &Credentials, plan: &Plan) -> Outcome {
    let progress = Progress::default();
    std::thread::scope(|scope| {
        let load = scope.spawn(|| load_test::run(target, credentials, plan, &progress));
        let phase = crate::progress::Phase::start("sessions", plan.sessions);
        let mut last_line = Instant::now();
        while !load.is_finished() {
            std::thread::sleep(Duration::from_millis(250));
            let (up, talking, failed, finished) = (
                progress.signed_up.load(Ordering::Relaxed),
                progress.talking.load(Ordering::Relaxed),
                progress.failed.load(Ordering::Relaxed),
                progress.finished.load(Ordering::Relaxed),
            );
            let now = format!("{up} signed up, {talking} talking, {failed} failed");
            // The bar moves as sessions start talking (or fail) and stays through the hold.
            phase.step(talking + finished, &now);
            if last_line.elapsed() >= Duration::from_secs(5)
                && !std::io::IsTerminal::is_terminal(&std::io::stderr())
            {
                crate::say!("load: {now}, {finished} of {} finished", plan.sessions);
                last_line = Instant::now();
            }
        }
        load.join().expect("the load runs")
    })
}

/// A Prometheus endpoint the report reads before and after.
#[derive(Clone, Debug)]
struct ScrapeTarget {
    endpoint: Endpoint,
    path: String,
    tls: std::sync::Arc<rustls::ClientConfig>,
}

/// The signaling endpoint's `/metrics` and the `--metrics` URLs.
fn scrape_targets(
    target: &Target,
    extra: &[String],
    ca_file: &Option<PathBuf>,
) -> Vec<ScrapeTarget> {
    let mut targets = vec![ScrapeTarget {
        endpoint: target.endpoint.clone(),
        path: "/metrics".into(),
        tls: target.tls.clone(),
    }];
    for url in extra {
        match parse_url(url) {
            Ok((endpoint, path)) => {
                let path = if path == "/v1/sessions" {
                    "/metrics".into()
                } else {
                    path
                };
                let tls = testkit::http::tls_client(ca_file.as_deref())
                    .unwrap_or_else(|_| target.tls.clone());
                targets.push(ScrapeTarget {
                    endpoint,
                    path,
                    tls,
                });
            }
            Err(e) => crate::say!("load: --metrics {url}: {e}; not read"),
        }
    }
    targets
}

/// One reading of a Prometheus endpoint: its series, or why it could not be read.
#[derive(Clone, Debug)]
struct Scrape {
    url: String,
    series: Result<Vec<(String, f64)>, String>,
}

impl Scrape {
    fn read(target: &ScrapeTarget) -> Scrape {
        let url = format!("{}{}", target.endpoint, target.path);
        let series = request_to(
            &target.endpoint,
            &target.tls,
            "GET",
            &target.path,
            None,
            &[],
        )
        .and_then(|r| match r.status {
            200 => Ok(parse_exposition(&r.body)),
            status => Err(format!("answered {status}")),
        });
        Scrape { url, series }
    }
}

/// The samples of a Prometheus text exposition: `(series, value)`, the series as written
/// (name and labels).
fn parse_exposition(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, rest) = match l.rfind('}') {
                Some(end) => (&l[..=end], &l[end + 1..]),
                None => l.split_once(' ')?,
            };
            let value = rest.split_whitespace().next()?.parse().ok()?;
            Some((series.trim().to_string(), value))
        })
        .collect()
}

/// The series that changed between two readings: `(series, before, after)`; a series
/// first seen after counts from 0. Histogram buckets are left out (their `_sum` and
/// `_count` stay).
fn deltas(before: &[(String, f64)], after: &[(String, f64)]) -> Vec<(String, f64, f64)> {
    let old: std::collections::HashMap<&str, f64> =
        before.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    let mut changed: Vec<(String, f64, f64)> = after
        .iter()
        .filter(|(s, _)| !s.contains("_bucket{"))
        .map(|(s, v)| (s.clone(), old.get(s.as_str()).copied().unwrap_or(0.0), *v))
        .filter(|(_, b, a)| b != a)
        .collect();
    changed.sort_by(|x, y| x.0.cmp(&y.0));
    changed
}

/// A sample as the report writes it: six significant digits at most.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        return format!("{value}");
    }
    let magnitude = value.abs().log10().floor() as i32 + 1;
    let digits = (6 - magnitude).clamp(0, 12) as usize;
    let text = format!("{value:.digits$}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Percentiles of `values`: n, p50, p90, p99, max (ms).
fn percentiles(mut values: Vec<Duration>) -> (usize, [f64; 4]) {
    let n = values.len();
    let q = |v: &mut [Duration], q| quantile_ms(v, q);
    (
        n,
        [
            q(&mut values, 0.5),
            q(&mut values, 0.9),
            q(&mut values, 0.99),
            q(&mut values, 1.0),
        ],
    )
}

/// What the report says, from the run.
struct Report<'a> {
    target: &'a Target,
    plan: &'a Plan,
    pilot: &'a Pilot,
    outcome: &'a Outcome,
    metrics: Vec<(Scrape, Scrape)>,
}

/// The setup steps the report times, and how each is read from a session.
type Step = (
    &'static str,
    &'static str,
    fn(&SessionRecord) -> Option<Duration>,
);
const STEPS: [Step; 4] = [
    ("answered", "POST answered", |s| s.answered),
    ("connected", "ICE + DTLS connected", |s| s.connected),
    ("channel_open", "events channel open", |s| s.channel_open),
    ("first_audio", "first audio back", |s| s.first_audio),
];

impl Report<'_> {
    fn sessions(&self) -> &[SessionRecord] {
        &self.outcome.sessions
    }

    fn failures(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for label in self
            .sessions()
            .iter()
            .filter_map(|s| s.failure.as_ref().map(|f| f.label()))
        {
            match counts.iter_mut().find(|(l, _)| *l == label) {
                Some((_, n)) => *n += 1,
                None => counts.push((label, 1)),
            }
        }
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        counts
    }

    fn sum(&self, f: impl Fn(&SessionRecord) -> u64) -> u64 {
        self.sessions().iter().map(f).sum()
    }

    fn rtts(&self) -> Vec<Duration> {
        self.sessions()
            .iter()
            .flat_map(|s| s.rtts.iter().copied())
            .collect()
    }

    fn driver_busy(&self) -> Vec<f64> {
        self.outcome
            .drivers
            .iter()
            .map(|(cpu, wall)| cpu / wall.as_secs_f64().max(1e-9))
            .collect()
    }

    fn command() -> String {
        let args: Vec<String> = std::env::args().skip(1).collect();
        format!("ufrag-perf {}", args.join(" "))
    }

    fn markdown(&self) -> String {
        let mut out = String::new();
        let plan = self.plan;
        let failed = self
            .sessions()
            .iter()
            .filter(|s| s.failure.is_some())
            .count();
        let host = crate::environment::host();
        let _ = writeln!(out, "# Load test: {}\n", self.target.url());
        let _ = writeln!(out, "Command: `{}`\n", Self::command());
        let _ = writeln!(
            out,
            "Tester host: {}, {} vCPUs, kernel {}. Plan: {} sessions signing up at {}/s \
             (over {:.1} s) from {}, held together for {:?} after the last one; each sends \
             an Opus frame every 20 ms and a ping over `events` every {:?}, then is deleted \
             (at the same rate). The run took {:.1} s.\n",
            host["cpu_model"].as_str().unwrap_or("unknown"),
            host["vcpus"],
            host["kernel"].as_str().unwrap_or("unknown"),
            plan.sessions,
            plan.rate,
            plan.ramp().as_secs_f64(),
            plan.local,
            plan.hold,
            plan.ping_every,
            self.outcome.elapsed.as_secs_f64(),
        );
        let _ = writeln!(
            out,
            "Pilot session (before the load): answered in {:.1} ms, connected through {} in \
             {:.1} ms, ping round trip {:.1} ms.\n",
            ms(self.pilot.answered),
            self.pilot.relay,
            ms(self.pilot.connected),
            ms(self.pilot.rtt)
        );
        out.push_str("## Sessions\n\n| sessions | count |\n|---|---:|\n");
        let set_up = self
            .sessions()
            .iter()
            .filter(|s| s.channel_open.is_some())
            .count();
        let deleted = self
            .sessions()
            .iter()
            .filter(|s| s.deleted == Some(204))
            .count();
        let made = self
            .sessions()
            .iter()
            .filter(|s| s.location.is_some())
            .count();
        for (label, n) in [
            ("asked for", plan.sessions),
            ("set up (channel open)", set_up),
            ("got through their life", plan.sessions - failed),
            ("failed", failed),
            ("made and deleted (204)", deleted),
            ("made", made),
        ] {
            let _ = writeln!(out, "| {label} | {n} |");
        }
        out.push_str("\n## Failures by reason\n\n");
        let failures = self.failures();
        if failures.is_empty() {
            out.push_str("None.\n");
        } else {
            out.push_str("| reason | sessions |\n|---|---:|\n");
            for (label, n) in &failures {
                let _ = writeln!(out, "| {} | {n} |", label.replace('|', "\\|"));
            }
        }
        out.push_str(
            "\n## Setup time (ms from just before the POST)\n\n\
             | step | sessions | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|\n",
        );
        for (_, label, read) in STEPS {
            let (n, [p50, p90, p99, max]) =
                percentiles(self.sessions().iter().filter_map(read).collect());
            let _ = writeln!(
                out,
                "| {label} | {n} | {p50:.1} | {p90:.1} | {p99:.1} | {max:.1} |"
            );
        }
        let sent = self.sum(|s| s.audio_sent as u64);
        let received = self.sum(|s| s.audio_received as u64);
        let expected = self.sum(|s| s.audio_expected);
        let pings = self.sum(|s| s.pings as u64);
        let rtts = self.rtts();
        let pongs = rtts.len() as u64;
        let (_, [r50, r90, r99, rmax]) = percentiles(rtts);
        let share = |part: u64, whole: u64| match whole {
            0 => "–".to_string(),
            _ => format!("{:.2} %", 100.0 * part as f64 / whole as f64),
        };
        out.push_str("\n## Talk\n\n| measure | value |\n|---|---:|\n");
        for (label, value) in [
            ("audio frames sent".to_string(), sent.to_string()),
            ("audio packets back".to_string(), received.to_string()),
            (
                "audio back ÷ sent (an echo backend returns every frame)".into(),
                match sent {
                    0 => "–".into(),
                    _ => format!("{:.4}", received as f64 / sent as f64),
                },
            ),
            (
                "audio lost on the way back (gaps in the server's sequence numbers)".into(),
                share(expected.saturating_sub(received), expected),
            ),
            ("pings sent".into(), pings.to_string()),
            ("pongs back".into(), pongs.to_string()),
            (
                "pong loss".into(),
                share(pings.saturating_sub(pongs), pings),
            ),
            (
                "ping round trip p50 / p90 / p99 / max (ms)".into(),
                format!("{r50:.1} / {r90:.1} / {r99:.1} / {rmax:.1}"),
            ),
        ] {
            let _ = writeln!(out, "| {label} | {value} |");
        }
        out.push_str("\n## The tester\n\n");
        let busy = self.driver_busy();
        let lateness = self
            .sessions()
            .iter()
            .map(|s| s.lateness)
            .max()
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "- Client threads: {}, each busy {} of a core over the run.",
            busy.len(),
            busy.iter()
                .map(|b| format!("{:.0} %", b * 100.0))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            out,
            "- The latest sign-up started {:.1} ms after its due time.",
            ms(lateness)
        );
        if busy.iter().any(|&b| b > BUSY_DRIVER) {
            let _ = writeln!(
                out,
                "- **A client thread was busy more than {:.0} % of a core: the tester may be \
                 the limit of these figures.** Give it more `--threads`, or run it on a \
                 bigger host.",
                BUSY_DRIVER * 100.0
            );
        }
        if lateness > Duration::from_millis(500) {
            let _ = writeln!(
                out,
                "- **Sign-ups fell behind the rate by up to {:.0} ms**: signaling answered \
                 slower than the rate asks for, or the tester was short of CPU.",
                ms(lateness)
            );
        }
        out.push_str("\n## The server's metrics (changes over the load)\n");
        for (before, after) in &self.metrics {
            let _ = writeln!(out, "\n### {}\n", after.url);
            match (&before.series, &after.series) {
                (Ok(b), Ok(a)) => {
                    let changed = deltas(b, a);
                    if changed.is_empty() {
                        out.push_str("No series changed.\n");
                        continue;
                    }
                    out.push_str("| series | before | after | change |\n|---|---:|---:|---:|\n");
                    for (series, b, a) in changed.iter().take(SHOWN_SERIES) {
                        let _ = writeln!(
                            out,
                            "| `{}` | {} | {} | {} |",
                            series.replace('|', "\\|"),
                            number(*b),
                            number(*a),
                            number(a - b)
                        );
                    }
                    if changed.len() > SHOWN_SERIES {
                        let _ = writeln!(
                            out,
                            "\n{} more in the JSON report.",
                            changed.len() - SHOWN_SERIES
                        );
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    let _ = writeln!(out, "Not read: {e}.");
                }
            }
        }
        out
    }

    fn json(&self) -> Value {
        let plan = self.plan;
        let setup: serde_json::Map<String, Value> = STEPS
            .iter()
            .map(|(key, _, read)| {
                let (n, [p50, p90, p99, max]) =
                    percentiles(self.sessions().iter().filter_map(read).collect());
                (
                    key.to_string(),
                    json!({"sessions": n, "p50": p50, "p90": p90, "p99": p99, "max": max}),
                )
            })
            .collect();
        let rtts = self.rtts();
        let pongs = rtts.len();
        let (_, [r50, r90, r99, rmax]) = percentiles(rtts);
        let metrics: Vec<Value> = self
            .metrics
            .iter()
            .map(|(before, after)| match (&before.series, &after.series) {
                (Ok(b), Ok(a)) => json!({
                    "url": after.url,
                    "changes": deltas(b, a)
                        .into_iter()
                        .map(|(s, b, a)| json!({"series": s, "before": b, "after": a}))
                        .collect::<Vec<_>>(),
                }),
                (Err(e), _) | (_, Err(e)) => json!({"url": after.url, "error": e}),
            })
            .collect();
        json!({
            "url": self.target.url(),
            "command": Self::command(),
            "tester_host": crate::environment::host(),
            "plan": {
                "sessions": plan.sessions,
                "rate_per_second": plan.rate,
                "hold_seconds": plan.hold.as_secs_f64(),
                "client_threads": plan.threads,
                "local": plan.local.to_string(),
                "connect_timeout_seconds": plan.connect_timeout.as_secs_f64(),
                "ping_every_seconds": plan.ping_every.as_secs_f64(),
            },
            "elapsed_seconds": self.outcome.elapsed.as_secs_f64(),
            "pilot": {
                "answered_ms": ms(self.pilot.answered),
                "connected_ms": ms(self.pilot.connected),
                "rtt_ms": ms(self.pilot.rtt),
                "relay": self.pilot.relay,
            },
            "sessions": {
                "asked": plan.sessions,
                "set_up": self.sessions().iter().filter(|s| s.channel_open.is_some()).count(),
                "failed": self.sessions().iter().filter(|s| s.failure.is_some()).count(),
                "made": self.sessions().iter().filter(|s| s.location.is_some()).count(),
                "deleted": self.sessions().iter().filter(|s| s.deleted == Some(204)).count(),
            },
            "failures": self.failures().into_iter()
                .map(|(reason, n)| json!({"reason": reason, "sessions": n}))
                .collect::<Vec<_>>(),
            "setup_ms": setup,
            "audio": {
                "sent": self.sum(|s| s.audio_sent as u64),
                "received": self.sum(|s| s.audio_received as u64),
                "expected_by_sequence": self.sum(|s| s.audio_expected),
            },
            "pings": {
                "sent": self.sum(|s| s.pings as u64),
                "answered": pongs,
                "rtt_ms": {"p50": r50, "p90": r90, "p99": r99, "max": rmax},
            },
            "tester": {
                "client_thread_busy": self.driver_busy(),
                "latest_signup_ms": ms(self.sessions().iter().map(|s| s.lateness).max().unwrap_or_default()),
            },
            "metrics": metrics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gives_its_endpoint_and_path() {
        let (endpoint, path) = parse_url("https://edge.example.com/v1/sessions").unwrap();
        assert_eq!(endpoint.to_string(), "https://edge.example.com:443");
        assert_eq!(path, "/v1/sessions");
        let (endpoint, path) = parse_url("127.0.0.1:8080").unwrap();
        assert_eq!(endpoint.to_string(), "http://127.0.0.1:8080");
        assert_eq!(path, "/v1/sessions");
        let (_, path) = parse_url("http://[::1]:8080/api/v1/sessions/").unwrap();
        assert_eq!(path, "/api/v1/sessions");
    }

    #[test]
    fn a_mistyped_url_is_one_line_naming_it() {
        let e = parse_url("htps://edge.example.com/v1/sessions").unwrap_err();
        assert_eq!(
            e,
            "--url `htps://edge.example.com`: htps:// is not http or https"
        );
        let e = parse_url("http://edge:80x/v1/sessions").unwrap_err();
        assert!(e.contains("bad port `80x`"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn the_exposition_reads_labelled_and_bare_series() {
        let text = "# HELP x y\n# TYPE a counter\na_total 3\n\
                    b{reason=\"a b\",x=\"1\"} 2.5 1700000000\nc_bucket{le=\"1\"} 4\n\n";
        let series = parse_exposition(text);
        assert_eq!(
            series,
            vec![
                ("a_total".to_string(), 3.0),
                ("b{reason=\"a b\",x=\"1\"}".to_string(), 2.5),
                ("c_bucket{le=\"1\"}".to_string(), 4.0),
            ]
        );
        let before = vec![("a_total".to_string(), 1.0), ("b".to_string(), 2.5)];
        let changed = deltas(&before, &series);
        assert_eq!(
            changed,
            vec![
                ("a_total".to_string(), 1.0, 3.0),
                ("b{reason=\"a b\",x=\"1\"}".to_string(), 0.0, 2.5),
            ],
            "changed series only, new ones from 0, no buckets"
        );
    }

    #[test]
    fn samples_are_written_short() {
        assert_eq!(number(1272.0), "1272");
        assert_eq!(number(0.054201931999999994), "0.0542019");
        assert_eq!(number(196941.5), "196942");
        assert_eq!(number(12.25), "12.25");
        assert_eq!(number(-2.5), "-2.5");
    }

    #[test]
    fn percentiles_rank_the_values() {
        let values = (1..=100).map(Duration::from_millis).collect();
        let (n, [p50, p90, p99, max]) = percentiles(values);
        assert_eq!(n, 100);
        assert_eq!((p50, p90, p99, max), (51.0, 90.0, 99.0, 100.0));
    }
}
