//! `ufrag-perf load`: a load test against a running deployment, pointed at its sessions
//! URL as a team points `lk perf load-test` at staging. One pilot session first (so a
//! mistyped URL, a refused token or an unreachable relay is one line, not N failures),
//! then the load ([`crate::bench::sessions::load_test`]), then a Markdown and JSON report: setup
//! time percentiles, failures by reason, audio and pong loss, ping round trips, the
//! tester's own load, and the deltas of the server's `/metrics` when it can be read
//! ([`report`], [`scrape`]).

pub mod report;
pub mod scrape;

use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs as _, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ufrag_testbed::http::Endpoint;
use ufrag_transceiver::session_token::TokenAlgorithm;

use crate::bench::sessions::load_test::{self, Credentials, Outcome, Plan, Progress, Target};
use scrape::{Scrape, ScrapeTarget};

/// Load-test a running deployment: `--sessions` str0m clients sign up at `--rate` per
/// second on its sessions URL, connect through its relay, and talk (an Opus frame every
/// 20 ms, a ping every second over `events`); once every one talks (or has failed),
/// they talk on together for `--duration`; then each is deleted. A pilot session goes
/// first: a mistyped URL, a refused token or an unreachable relay stops the run with
/// one line (exit 2). Exits 1 when a session failed or one that completed was not
/// deleted, 0 when every one got through.
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
    /// How long all the sessions talk together, from when the last one started talking.
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
/// The sign-up rates accepted (per second).
const RATES: std::ops::RangeInclusive<f64> = 0.01..=10_000.0;
/// The most sessions one run makes.
const MAX_SESSIONS: usize = 100_000;
/// The most client threads.
const MAX_THREADS: usize = 64;
/// The longest hold.
const MAX_HOLD: Duration = Duration::from_secs(24 * 3600);
/// The longest connect timeout.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    let (target, credentials, plan) = match prepare(&options) {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("ufrag-perf load: {e}");
            return 2;
        }
    };
    let pilot = match load_test::pilot(&target, &credentials, &plan) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ufrag-perf load: {e}");
            return 2;
        }
    };
    crate::say!(
        "load: the pilot session connected through {} in {:.0} ms; now {} sessions at {}/s, \
         then {:?} together",
        pilot.relay,
        pilot.connected.as_secs_f64() * 1e3,
        plan.sessions,
        plan.rate,
        plan.hold
    );
    let scrapes = scrape::targets(&target, &options.metrics, options.ca_file.as_deref());
    let before = scrape::read_all(&scrapes);
    let (outcome, during) = run_with_progress(&target, &credentials, &plan, &scrapes);
    let after = scrape::read_all(&scrapes);
    let report = report::Report {
        target: &target,
        plan: &plan,
        pilot: &pilot,
        outcome: &outcome,
        hold_cpu: during.hold_cpu,
        readings: (before, during.metrics, after),
    };
    let markdown = report.markdown();
    print!("{markdown}");
    let json = serde_json::to_string_pretty(&report.json()).unwrap_or_default();
    let written = std::fs::write(&options.out, markdown)
        .and_then(|()| std::fs::write(options.out.with_extension("json"), json));
    if let Err(e) = written {
        eprintln!(
            "ufrag-perf load: cannot write the report to {}: {e}",
            options.out.display()
        );
        return 2;
    }
    eprintln!("report: {}", options.out.display());
    let sessions = &outcome.sessions;
    let failed = sessions.iter().filter(|s| s.failure.is_some()).count();
    // A session that got through but was not deleted may still hold the deployment.
    let undeleted = sessions
        .iter()
        .filter(|s| s.failure.is_none() && s.deleted != Some(204))
        .count();
    let shown = options.out.display();
    if failed > 0 {
        eprintln!(
            "ufrag-perf load: {failed} of {} sessions failed (report: {shown})",
            plan.sessions
        );
    }
    if undeleted > 0 {
        eprintln!(
            "ufrag-perf load: {undeleted} sessions that completed were not deleted (no 204; \
             report: {shown})"
        );
    }
    i32::from(failed + undeleted > 0)
}

/// The target, the credentials and the plan from the options; an error is one line.
fn prepare(options: &Options) -> Result<(Target, Credentials, Plan), String> {
    if !(1..=MAX_SESSIONS).contains(&options.sessions) {
        return Err(format!("--sessions must be 1 to {MAX_SESSIONS}"));
    }
    if !RATES.contains(&options.rate) {
        return Err(format!(
            "--rate must be {} to {} sign-ups a second",
            RATES.start(),
            RATES.end()
        ));
    }
    let (endpoint, path) = split_url(&options.url).map_err(|e| format!("--url {e}"))?;
    let path = path.unwrap_or_else(|| "/v1/sessions".into());
    let tls = ufrag_testbed::http::tls_client(options.ca_file.as_deref())?;
    let credentials = match &options.mint_key_file {
        Some(file) => Credentials::Minted {
            algorithm: options.mint_algorithm,
            key: std::fs::read(file)
                .map_err(|e| format!("--mint-key-file {}: {e}", file.display()))?,
            audience: options.mint_audience.clone(),
            run: run_id(),
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
    if local.is_unspecified() || local.is_multicast() || local.is_broadcast() {
        return Err(format!(
            "--local {local}: the clients need a unicast address of this host"
        ));
    }
    check_open_files(options.sessions)?;
    if options.duration > MAX_HOLD {
        return Err(format!("--duration is at most {MAX_HOLD:?}"));
    }
    if options.connect_timeout.is_zero() || options.connect_timeout > MAX_CONNECT_TIMEOUT {
        return Err(format!(
            "--connect-timeout must be above 0 and at most {MAX_CONNECT_TIMEOUT:?}"
        ));
    }
    // A report that cannot be written is said now, not after the load.
    if options.out.is_dir() {
        return Err(format!(
            "--out {}: a directory; name a file",
            options.out.display()
        ));
    }
    if let Some(dir) = options.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("--out {}: {e}", dir.display()))?;
    }
    let threads = options
        .threads
        .unwrap_or_else(|| crate::bench::environment::online_cpus().min(4));
    if !(1..=MAX_THREADS).contains(&threads) {
        return Err(format!("--threads must be 1 to {MAX_THREADS}"));
    }
    let plan = Plan {
        sessions: options.sessions,
        rate: options.rate,
        hold: options.duration,
        threads,
        local,
        connect_timeout: options.connect_timeout,
        ping_every: PING_EVERY,
    };
    let target = Target {
        endpoint,
        path,
        tls,
    };
    Ok((target, credentials, plan))
}

/// Tells this run's minted users and token ids from any other run's.
fn run_id() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

/// Every session holds a socket for the whole run: the process's descriptor limit must
/// allow them all.
fn check_open_files(sessions: usize) -> Result<(), String> {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<u64>().ok());
    let needed = sessions as u64 + load_test::SPARE_FILES;
    match soft {
        Some(soft) if soft < needed => Err(format!(
            "--sessions {sessions} needs {needed} open files, and `ulimit -n` is {soft}: \
             raise it (ulimit -n {needed}) or run fewer sessions"
        )),
        _ => Ok(()),
    }
}

/// `https://HOST[:PORT][/path]`, `http://…` or `HOST:PORT[/path]`: the endpoint, and
/// the path when one is given.
fn split_url(text: &str) -> Result<(Endpoint, Option<String>), String> {
    let after_scheme = text.find("://").map_or(0, |i| i + 3);
    let (origin, path) = match text[after_scheme..].find('/') {
        Some(i) => text.split_at(after_scheme + i),
        None => (text, ""),
    };
    let endpoint: Endpoint = origin.parse()?;
    let path = Some(path.trim_end_matches('/'))
        .filter(|p| !p.is_empty())
        .map(str::to_string);
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

/// What was read while the sessions talked together.
#[derive(Debug, Default)]
struct DuringHold {
    /// The tester's and the host's CPU over the hold.
    hold_cpu: Option<report::HoldCpu>,
    /// The server's metrics in the middle of the hold.
    metrics: Option<Vec<Scrape>>,
}

/// Runs the load on a thread of its own while this one shows its progress (a bar on a
/// terminal, a line every five seconds elsewhere) and takes the readings of the hold:
/// CPU at its start and end, the server's metrics in its middle.
fn run_with_progress(
    target: &Target,
    credentials: &Credentials,
    plan: &Plan,
    scrapes: &[ScrapeTarget],
) -> (Outcome, DuringHold) {
    let progress = Progress::default();
    let mut during = DuringHold::default();
    let outcome = std::thread::scope(|scope| {
        let load = scope.spawn(|| load_test::run(target, credentials, plan, &progress));
        let mut mid_hold = None;
        let phase = crate::bench::progress::Phase::start("sessions", plan.sessions);
        let mut last_line = Instant::now();
        let mut hold_began: Option<(Instant, crate::bench::cpu::Snapshot, f64)> = None;
        let own_cpu = || crate::bench::cpu::cpu_seconds(std::process::id(), None);
        while !load.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            let (up, talking, failed, finished) = (
                progress.signed_up.load(Ordering::Relaxed),
                progress.talking.load(Ordering::Relaxed),
                progress.failed.load(Ordering::Relaxed),
                progress.finished.load(Ordering::Relaxed),
            );
            let now = format!("{up} signed up, {talking} talking, {failed} failed");
            // The bar moves as sessions start talking (or fail) and stays through the hold.
            phase.step(talking + finished, &now);
            let on_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
            if !on_terminal && last_line.elapsed() >= Duration::from_secs(5) {
                crate::say!("load: {now}, {finished} of {} finished", plan.sessions);
                last_line = Instant::now();
            }
            let Some(started) = progress.hold_started() else {
                continue;
            };
            let (began, snapshot, cpu) = hold_began
                .get_or_insert_with(|| (started, crate::bench::cpu::Snapshot::now(), own_cpu()));
            let into_hold = began.elapsed();
            // On a thread of its own: a slow endpoint must not delay the hold's readings.
            if mid_hold.is_none() && into_hold >= plan.hold / 2 {
                mid_hold = Some(scope.spawn(|| scrape::read_all(scrapes)));
            }
            if during.hold_cpu.is_none() && into_hold >= plan.hold {
                let spent = snapshot.until(&crate::bench::cpu::Snapshot::now());
                during.hold_cpu = Some(report::HoldCpu {
                    tester_cores: (own_cpu() - *cpu) / spent.wall.max(1e-9),
                    host_busy: spent.busy_share(),
                    cpus: spent.cpus,
                });
            }
        }
        during.metrics = mid_hold.and_then(|reading| reading.join().ok());
        load.join().expect("the load runs")
    });
    (outcome, during)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gives_its_endpoint_and_path() {
        let (endpoint, path) = split_url("https://edge.example.com/v1/sessions").unwrap();
        assert_eq!(endpoint.to_string(), "https://edge.example.com:443");
        assert_eq!(path.as_deref(), Some("/v1/sessions"));
        let (endpoint, path) = split_url("127.0.0.1:8080").unwrap();
        assert_eq!(endpoint.to_string(), "http://127.0.0.1:8080");
        assert_eq!(path, None);
        let (_, path) = split_url("http://[::1]:8080/api/v1/sessions/").unwrap();
        assert_eq!(path.as_deref(), Some("/api/v1/sessions"));
    }

    #[test]
    fn a_mistyped_url_is_one_line_naming_it() {
        let e = split_url("htps://edge.example.com/v1/sessions").unwrap_err();
        assert_eq!(e, "`htps://edge.example.com`: htps:// is not http or https");
        let e = split_url("http://edge:80x/v1/sessions").unwrap_err();
        assert!(e.contains("bad port `80x`"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn two_runs_mint_for_different_users() {
        assert_ne!(run_id(), run_id());
    }
}
