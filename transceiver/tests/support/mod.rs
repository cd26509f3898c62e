//! End-to-end harness: an in-process relay-mio (real sockets, real worker threads) and
//! the transceiver binary as a child process; the str0m client peer and the HTTP client
//! come from `testkit` (`webrtc_client`, `http`).
#![allow(dead_code, unreachable_pub)]

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};

use ufrag_testkit::OwnedChild;

use ufrag_common::config::{HINT_KEYS_ENV, RelayArgs, RelayConfig};
use ufrag_common::runtime::host::Host;
use ufrag_relay_mio::relay::{Relay, Running};

pub use ufrag_testkit::addr::{free_tcp_port, unique_ip};
pub use ufrag_testkit::keys::KEYS;
#[allow(unused_imports)] // not every test file needs redis
pub use ufrag_testkit::redis::RedisServer;

/// A relay-mio running in this process.
pub struct TestRelay {
    pub relay: Option<Running>,
    pub vip: SocketAddr,
    pub internal: SocketAddr,
    pub metrics: SocketAddr,
}

impl TestRelay {
    /// The global relay tier in front of cluster 1's relay: the cluster's relay takes
    /// frames only from the global relay, which forwards every flow whose hint names
    /// cluster 1 to it. (cluster relay, global relay)
    pub fn global_and_cluster() -> (TestRelay, TestRelay) {
        let (global_ip, cluster_ip) = (unique_ip(), unique_ip());
        let cluster = TestRelay::start_on(
            cluster_ip,
            &[
                "--cluster-id",
                "1",
                "--allow-global-relay-net",
                &format!("{global_ip}/32"),
            ],
        );
        let global = TestRelay::start_on(
            global_ip,
            &[
                "--cluster-id",
                "0",
                "--cluster-relay",
                &format!("1={}", cluster.internal),
            ],
        );
        (cluster, global)
    }

    pub fn start(extra: &[&str]) -> TestRelay {
        let ip = unique_ip();
        Self::start_on(ip, extra)
    }

    pub fn start_on(ip: Ipv4Addr, extra: &[&str]) -> TestRelay {
        Self::start_keyed(ip, extra, Some(KEYS))
    }

    /// With the hint keys of `env_keys` (as `UFRAG_RELAY_HINT_KEYS` would carry them), or
    /// none (`extra` names a key file).
    pub fn start_keyed(ip: Ipv4Addr, extra: &[&str], env_keys: Option<&str>) -> TestRelay {
        let vip = SocketAddr::from((ip, 3478));
        let internal = SocketAddr::from((ip, 40_000));
        let metrics = SocketAddr::from((ip, free_tcp_port(ip)));
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            relay: RelayArgs,
        }
        let mut argv = vec![
            "relay".to_string(),
            "--vip".into(),
            vip.to_string(),
            "--internal-addr".into(),
            internal.to_string(),
            "--workers".into(),
            "1".into(),
            "--cpus".into(),
            "0".into(),
            "--allow-transceiver-net".into(),
            "127.0.0.0/8".into(),
            "--metrics-addr".into(),
            metrics.to_string(),
        ];
        argv.extend(extra.iter().map(|s| s.to_string()));
        let args = <Cli as clap::Parser>::parse_from(argv).relay;
        let host = match env_keys {
            Some(keys) => Host::files_only().with_env(HINT_KEYS_ENV, keys),
            None => Host::files_only(),
        };
        let config = RelayConfig::load(&args, &host, &[0, 1]).unwrap();
        let relay = Relay::start(&config).unwrap();
        TestRelay {
            relay: Some(relay),
            vip,
            internal,
            metrics,
        }
    }

    pub fn stop(&mut self) {
        if let Some(r) = self.relay.take() {
            r.join().unwrap();
        }
    }
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The transceiver binary.
pub struct Transceiver {
    pub child: OwnedChild,
    pub http: SocketAddr,
    pub worker: SocketAddr,
    log: std::path::PathBuf,
}

impl Transceiver {
    /// Relay mode, advertising `vip`.
    pub fn start(vip: Option<SocketAddr>, extra: &[&str]) -> Transceiver {
        Self::start_with_env(vip, extra, &[])
    }

    /// Like `start`, with extra environment variables.
    pub fn start_with_env(
        vip: Option<SocketAddr>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Transceiver {
        let mut t = Self::spawn(vip, extra, env);
        t.wait_ready();
        t
    }

    /// Starts the process and returns once it runs, ready or not.
    pub fn spawn(vip: Option<SocketAddr>, extra: &[&str], env: &[(&str, &str)]) -> Transceiver {
        let ip = unique_ip();
        let http = SocketAddr::from((ip, free_tcp_port(ip)));
        let worker = SocketAddr::from((ip, 41_000));
        // A fault to inject needs the binary that has fault injection compiled in.
        let binary = if env.iter().any(|(k, _)| *k == "UFRAG_TRANSCEIVER_FAULT") {
            ufrag_testkit::cargo_build::faults_bin("transceiver")
        } else {
            std::path::PathBuf::from(env!("CARGO_BIN_EXE_transceiver"))
        };
        let mut cmd = Command::new(binary);
        cmd.args([
            "--http-addr",
            &http.to_string(),
            "--bind",
            &worker.to_string(),
        ]);
        match vip {
            Some(vip) => cmd.args(["--advertise", &vip.to_string()]),
            None => cmd.arg("--direct"),
        };
        if vip.is_some() && !extra.contains(&"--allow-relay-net") {
            cmd.args(["--allow-relay-net", "127.0.0.0/8"]);
        }
        cmd.args(extra);
        cmd.envs(env.iter().copied());
        let log = std::env::temp_dir().join(format!("xcvr-{}-{ip}.log", std::process::id()));
        // The test keys are example secrets, which only a test may run with.
        cmd.env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1");
        if extra.contains(&"--hint-keys-file") {
            cmd.env_remove("UFRAG_RELAY_HINT_KEYS");
        } else {
            cmd.env("UFRAG_RELAY_HINT_KEYS", KEYS);
        }
        cmd.env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = OwnedChild::spawn(&mut cmd).expect("the transceiver starts");
        Transceiver {
            child,
            http,
            worker,
            log,
        }
    }

    /// Waits until `/readyz` answers 200 (panics with the log if it exits first).
    pub fn wait_ready(&mut self) {
        let log = self.log.clone();
        ufrag_testkit::http::wait_ready(None, self.http, "the transceiver", WAIT, || {
            let why = self.child.exit_report()?;
            Some(format!(
                "{why}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ))
        });
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The whole `/metrics` text (empty if it does not answer).
    pub fn metrics_text(&self) -> String {
        http_request(self.http, "GET", "/metrics", None, &[])
            .map(|r| r.body)
            .unwrap_or_default()
    }

    pub fn metric(&self, series_prefix: &str) -> f64 {
        let body = http_request(self.http, "GET", "/metrics", None, &[])
            .unwrap()
            .body;
        ufrag_testkit::http::metric_sum(&body, series_prefix)
    }
}

impl Drop for Transceiver {
    fn drop(&mut self) {
        self.child.stop();
        let _ = std::fs::remove_file(&self.log);
    }
}

pub use ufrag_testkit::http::request as http_request;
pub use ufrag_testkit::webrtc_client::*;

/// A client on a fresh loopback address.
pub fn new_client() -> Client {
    Client::new_on(unique_ip())
}

/// The audience the session-token tests configure.
pub const TOKEN_AUDIENCE: &str = "ufrag-test";

/// A fresh HS256 secret for session tokens in a file of mode 0600 (unique per call), and
/// the transceiver flags that verify tokens with it (single use, [`TOKEN_AUDIENCE`]).
pub fn session_token_secret(tag: &str) -> (std::path::PathBuf, Vec<String>) {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::temp_dir().join(format!(
        "xcvr-token-{}-{tag}-{}",
        std::process::id(),
        unique_ip()
    ));
    let secret: [u8; 24] = ufrag_transceiver::random::random_bytes();
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, format!("{hex}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let flags = [
        "--session-token-key-file",
        path.to_str().unwrap(),
        "--session-token-audience",
        TOKEN_AUDIENCE,
        "--session-token-single-use",
    ]
    .map(String::from)
    .to_vec();
    (path, flags)
}

/// A session token from the documented helper, `ufrag-token`, signed with `secret` for
/// [`TOKEN_AUDIENCE`], with `args` added (`--subject`, `--metadata`, …).
pub fn mint_with_helper(secret: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ufrag-token"))
        .arg("--key-file")
        .arg(secret)
        .args(["--audience", TOKEN_AUDIENCE])
        .args(args)
        .output()
        .expect("ufrag-token runs");
    assert!(
        out.status.success(),
        "ufrag-token: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The Python of the model virtualenv (PyJWT and websockets from PyPI, made by
/// `scripts/test.sh`): `$UFRAG_MODEL_PYTHON` or `target/model-venv/bin/python`. Missing,
/// the test fails saying so; it never skips.
pub fn model_python() -> std::path::PathBuf {
    let python = std::env::var_os("UFRAG_MODEL_PYTHON").map_or_else(
        || {
            std::path::PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../target/model-venv/bin/python"
            ))
        },
        std::path::PathBuf::from,
    );
    assert!(
        python.is_file(),
        "no model virtualenv at {}: scripts/test.sh creates it (python3 -m venv + pip install \
         PyJWT and examples/python-backend/requirements.txt)",
        python.display()
    );
    python
}

/// The Python reference backend (`examples/python-backend/backend.py`, on PyPI's
/// websockets) on a fresh loopback address, its JSON lines collected as they come.
pub struct PythonBackend {
    child: OwnedChild,
    lines: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    /// Its `ws://` URL.
    pub url: String,
}

impl PythonBackend {
    /// Starts it with `args` (beside `--listen`) and waits for it to listen.
    pub fn start(args: &[&str]) -> PythonBackend {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/python-backend/backend.py"
        );
        let mut child = OwnedChild::spawn(
            Command::new(model_python())
                .arg(script)
                .args(["--listen", &format!("{}:0", unique_ip())])
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .expect("the Python backend starts");
        let stdout = child.stdout.take().expect("piped");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let collected = std::sync::Arc::clone(&lines);
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({"event": "unparsed", "line": line}));
                collected.lock().unwrap().push(value);
            }
        });
        let mut backend = PythonBackend {
            child,
            lines,
            url: String::new(),
        };
        let listening = backend.wait_for("listening", std::time::Duration::from_secs(30));
        backend.url = listening["url"].as_str().expect("a url").to_string();
        backend
    }

    /// Every line of event `kind` so far.
    pub fn events(&self, kind: &str) -> Vec<serde_json::Value> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter(|l| l["event"] == kind)
            .cloned()
            .collect()
    }

    /// The first line of event `kind`, waiting up to `wait` for it (the backend exiting
    /// first fails, with what it wrote to stderr).
    pub fn wait_for(&mut self, kind: &str, wait: std::time::Duration) -> serde_json::Value {
        let deadline = std::time::Instant::now() + wait;
        loop {
            if let Some(line) = self.events(kind).into_iter().next() {
                return line;
            }
            if let Some(exit) = self.child.exit_report() {
                panic!("the Python backend exited before `{kind}`: {exit}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no `{kind}` from the Python backend within {wait:?}: {:?}",
                self.lines.lock().unwrap()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
