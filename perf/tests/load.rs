//! `ufrag-perf load` against a deployment on loopback: relay-mio in front of a
//! transceiver (the built-in echo) that requires a bearer token, both with their
//! deployed limits. A small load gets through and its report says so, with the server's
//! own `/metrics` deltas; a mistyped URL, a refused token and an unreachable relay each
//! stop the run with one line (exit 2) before any load is made.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use ufrag_testkit::OwnedChild;

const TOKEN: &str = "load-test-token-0123456789abcdef";

/// relay-mio and a transceiver behind it, on a loopback address of their own.
struct Deployment {
    ip: Ipv4Addr,
    signaling: SocketAddr,
    relay_metrics: SocketAddr,
    _relay: Option<OwnedChild>,
    _transceiver: OwnedChild,
}

impl Deployment {
    /// With `relay` false, the transceiver advertises a relay address nothing serves;
    /// with a `session_token_key`, it takes session tokens signed with it beside the
    /// bearer token.
    fn start(relay: bool, session_token_key: Option<&Path>) -> Deployment {
        let ip = ufrag_testkit::addr::unique_ip();
        let at = |port: u16| SocketAddr::from((ip, port));
        let (vip, internal, relay_metrics) = (at(3478), at(40000), at(9590));
        let signaling = at(ufrag_testkit::addr::free_tcp_port(ip));
        let relay = relay.then(|| {
            let mut cmd = Command::new(ufrag_testkit::cargo_build::bin("relay-mio"));
            cmd.args(["--vip", &vip.to_string(), "--internal-addr"])
                .arg(internal.to_string())
                .args(["--allow-transceiver-net", "127.0.0.0/8", "--workers", "1"])
                .args(["--metrics-addr", &relay_metrics.to_string()])
                .env("UFRAG_RELAY_HINT_KEYS", ufrag_testkit::keys::KEYS)
                .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null());
            let mut child = OwnedChild::spawn(&mut cmd).expect("relay-mio starts");
            ufrag_testkit::http::wait_ready(None, relay_metrics, "relay-mio", READY, || {
                child.exit_report()
            });
            child
        });
        let mut cmd = Command::new(ufrag_testkit::cargo_build::bin("transceiver"));
        cmd.args(["--http-addr", &signaling.to_string(), "--bind"])
            .arg(at(41000).to_string())
            .args(["--advertise", &vip.to_string()])
            .args(["--allow-relay-net", "127.0.0.0/8"])
            .env("UFRAG_RELAY_HINT_KEYS", ufrag_testkit::keys::KEYS)
            .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
            .env("UFRAG_TRANSCEIVER_TOKEN", TOKEN)
            .stdout(Stdio::null());
        if let Some(key) = session_token_key {
            cmd.arg("--session-token-key-file").arg(key);
        }
        cmd.env("RUST_LOG", "warn");
        let mut transceiver = OwnedChild::spawn(&mut cmd).expect("the transceiver starts");
        ufrag_testkit::http::wait_ready(None, signaling, "transceiver", READY, || {
            transceiver.exit_report()
        });
        Deployment {
            ip,
            signaling,
            relay_metrics,
            _relay: relay,
            _transceiver: transceiver,
        }
    }
}

const READY: std::time::Duration = std::time::Duration::from_secs(20);

/// A scratch directory with the token in a 0600 file.
fn scratch(name: &str, token: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ufrag-load-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    (dir, file)
}

/// `ufrag-perf load` with the token in `token_file`.
fn load(url: &str, token_file: &Path, local: Ipv4Addr, extra: &[&str]) -> Output {
    load_with(url, ("--token-file", token_file), local, extra)
}

/// `ufrag-perf load` with its credentials given by `(flag, file)`.
fn load_with(url: &str, (flag, file): (&str, &Path), local: Ipv4Addr, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ufrag-perf"))
        .args(["load", "--url", url, flag])
        .arg(file)
        .args(["--local", &local.to_string()])
        .args(extra)
        .env_remove("UFRAG_TRANSCEIVER_TOKEN")
        .output()
        .expect("ufrag-perf runs")
}

/// The run stopped before the load with exactly one line on stderr, which contains `what`.
fn one_line_error(run: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line:\n{stderr}");
    assert!(stderr.starts_with("ufrag-perf load: "), "{stderr}");
    assert!(stderr.contains(what), "{what} in: {stderr}");
}

/// Six sessions signing up at 10 a second, then talking together for `hold`, with
/// `credential` and `extra` flags: the run's output, and its report in Markdown and JSON.
fn six_sessions(
    url: &str,
    credential: (&str, &Path),
    local: Ipv4Addr,
    hold: &str,
    out: &Path,
    extra: &[&str],
) -> (Output, String, serde_json::Value) {
    let out_arg = out.to_str().unwrap();
    let plan = [
        "--sessions",
        "6",
        "--rate",
        "10",
        "--duration",
        hold,
        "--out",
        out_arg,
    ];
    let run = load_with(url, credential, local, &[&plan[..], extra].concat());
    let report = std::fs::read_to_string(out).unwrap_or_default();
    let json = std::fs::read_to_string(out.with_extension("json")).unwrap_or_default();
    (run, report, serde_json::from_str(&json).unwrap_or_default())
}

/// The series of a report's reading `scrape` whose names start with `name`.
fn series(json: &serde_json::Value, scrape: usize, name: &str) -> Vec<serde_json::Value> {
    let changes = json["metrics"][scrape]["changes"].as_array().cloned();
    changes
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["series"].as_str().is_some_and(|s| s.starts_with(name)))
        .collect()
}

/// How much those series changed over the load, together.
fn change(json: &serde_json::Value, scrape: usize, name: &str) -> f64 {
    series(json, scrape, name)
        .iter()
        .map(|c| c["after"].as_f64().unwrap() - c["before"].as_f64().unwrap())
        .sum()
}

#[test]
fn a_small_load_gets_through_relay_mio_and_the_report_says_what_each_step_took() {
    let (dir, token_file) = scratch("ok", TOKEN);
    let (key_dir, signing_key) = scratch("ok-key", "load-test-signing-secret-0123456789abcdef");
    let deployment = Deployment::start(true, Some(&signing_key));
    let out = dir.join("load.md");
    let url = format!("http://{}/v1/sessions", deployment.signaling);
    let relay_metrics = format!("http://{}/metrics", deployment.relay_metrics);
    let metrics = ["--metrics", relay_metrics.as_str()];
    let bearer = ("--token-file", token_file.as_path());
    let (run, report, json) = six_sessions(&url, bearer, deployment.ip, "2s", &out, &metrics);
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}\n{report}");
    assert_eq!(json["sessions"]["asked"], 6, "{report}");
    assert_eq!(json["sessions"]["completed"], 6, "{report}");
    assert_eq!(json["sessions"]["failed"], 0, "{report}");
    assert_eq!(json["sessions"]["created"], 6, "{report}");
    assert_eq!(
        json["sessions"]["deleted"],
        serde_json::json!([{"status": "204", "sessions": 6}]),
        "{report}"
    );
    assert_eq!(json["failures"].as_array().map(Vec::len), Some(0));
    for step in ["answered", "connected", "channel_open", "first_audio"] {
        assert_eq!(json["setup_ms"][step]["sessions"], 6, "{step}: {report}");
        let p50 = json["setup_ms"][step]["p50"].as_f64().unwrap();
        assert!(p50 > 0.0, "{step}: {report}");
    }
    // Every session talked: the echo returned its audio and every ping was answered.
    let sent = json["audio"]["sent"].as_u64().unwrap();
    let received = json["audio"]["received"].as_u64().unwrap();
    assert!(received > 0 && received <= sent, "{report}");
    // Every session talked through the whole hold (2 s: 100 frames each, sent or
    // counted as skipped); three quarters of that leaves room for a slow host's wake-ups.
    let skipped = json["audio"]["skipped_by_the_tester"].as_u64().unwrap();
    assert!(sent + skipped >= 6 * 75, "{report}");
    assert_eq!(
        json["audio"]["sequence_gaps"], 0,
        "loopback loses nothing: {report}"
    );
    let pings = json["pings"]["sent"].as_u64().unwrap();
    assert!(pings >= 6, "{report}");
    assert_eq!(json["pings"]["answered"].as_u64(), Some(pings), "{report}");
    assert!(
        json["tester"]["hold_cpu"]["tester_cores"]
            .as_f64()
            .is_some(),
        "{report}"
    );
    // The servers' own counts of what the load did (the pilot's before the first
    // reading), and the six sessions live together in the middle of the hold.
    assert_eq!(
        change(&json, 0, "ufrag_transceiver_sessions_created_total"),
        6.0,
        "{report}"
    );
    let active = series(&json, 0, "ufrag_transceiver_sessions_active");
    assert_eq!(active.len(), 1, "{report}");
    assert_eq!(active[0]["during"].as_f64(), Some(6.0), "{report}");
    // (The relay publishes its workers' counters a moment late: the pilot's flow may
    // land after the first reading.)
    let flows = change(&json, 1, "ufrag_relay_flows_created_total");
    assert!((6.0..=7.0).contains(&flows), "{report}");
    assert!(
        report.contains("## Failures by reason\n\nNone."),
        "{report}"
    );
    assert!(report.contains("| ICE + DTLS connected | 6 |"), "{report}");

    // Tokens minted per session, as the app's server mints them: each its own user, so
    // the deployment's per-user cap (4 live sessions) does not hold the load back.
    let minted_out = key_dir.join("minted.md");
    let mint = ("--mint-key-file", signing_key.as_path());
    let (minted, _, json) = six_sessions(&url, mint, deployment.ip, "1s", &minted_out, &[]);
    let stderr = String::from_utf8_lossy(&minted.stderr);
    assert_eq!(minted.status.code(), Some(0), "{stderr}\n{json:#}");
    assert_eq!(json["sessions"]["completed"], 6, "{json:#}");
    assert_eq!(
        json["sessions"]["deleted"],
        serde_json::json!([{"status": "204", "sessions": 6}]),
        "{json:#}"
    );
    let accepted = change(&json, 0, "ufrag_transceiver_session_tokens_accepted_total");
    assert_eq!(
        accepted, 6.0,
        "every session signed up with its own token: {json:#}"
    );

    // One session token for all: the deployment holds one user to 4 live sessions, so
    // 2 of 6 are refused; the others still talk through the hold, and the run exits 1.
    let one_user = {
        let key = std::fs::read(&signing_key).unwrap();
        let request = ufrag_transceiver::session_token::TokenRequest {
            audience: "ufrag-relay".into(),
            issued_at_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            lifetime_s: 300,
            id: "one-user-token".into(),
            claims: ufrag_model_protocol::messages::SessionClaims {
                subject: Some("one-user".into()),
                ..Default::default()
            },
        };
        let hs256 = ufrag_transceiver::session_token::TokenAlgorithm::Hs256;
        ufrag_transceiver::session_token::mint(hs256, &key, &request).unwrap()
    };
    let (user_dir, user_token) = scratch("one-user", &one_user);
    let capped_out = user_dir.join("capped.md");
    let one_token = ("--token-file", user_token.as_path());
    let (capped, _, json) = six_sessions(&url, one_token, deployment.ip, "1s", &capped_out, &[]);
    let _ = std::fs::remove_dir_all(&user_dir);
    let _ = std::fs::remove_dir_all(&key_dir);
    let stderr = String::from_utf8_lossy(&capped.stderr);
    assert_eq!(capped.status.code(), Some(1), "{stderr}\n{json:#}");
    assert!(
        stderr.contains("ufrag-perf load: 2 of 6 sessions failed"),
        "{stderr}"
    );
    assert_eq!(
        json["failures"],
        serde_json::json!([{
            "reason": "POST answered 429: too many live sessions for this user",
            "sessions": 2
        }]),
        "{json:#}"
    );
    assert_eq!(json["sessions"]["completed"], 4, "{json:#}");
    assert!(json["hold_started_seconds"].as_f64().is_some(), "{json:#}");
}

#[test]
fn a_mistyped_url_a_refused_token_and_an_unreachable_relay_are_one_line_each() {
    let deployment = Deployment::start(false, None);
    let (dir, token_file) = scratch("errors", TOKEN);
    let (_, wrong_token) = scratch("errors-wrong", "not-the-token-0123456789abcdef");
    let base = format!("http://{}", deployment.signaling);
    let ip = deployment.ip;

    let typo = load(&format!("{base}/v1/sesions"), &token_file, ip, &[]);
    one_line_error(&typo, "answered 404: no sessions endpoint at /v1/sesions");
    let scheme = load(
        &format!("htp://{}/v1/sessions", deployment.signaling),
        &token_file,
        ip,
        &[],
    );
    one_line_error(&scheme, "htp:// is not http or https");

    let refused = load(&format!("{base}/v1/sessions"), &wrong_token, ip, &[]);
    one_line_error(&refused, "answered 401: the token was refused");

    let unreachable = load(
        &format!("{base}/v1/sessions"),
        &token_file,
        ip,
        &["--connect-timeout", "2s"],
    );
    one_line_error(
        &unreachable,
        &format!(
            "ICE and DTLS did not connect within 2s: the relay at {ip}:3478/udp is unreachable"
        ),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(wrong_token.parent().unwrap());
}
