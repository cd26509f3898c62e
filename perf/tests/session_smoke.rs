//! `ufrag-perf session`, the deployment smoke test, as a user behind an Ingress runs it:
//! by host name (`localhost`), over HTTPS (a TLS-terminating front standing in for the
//! Ingress, its certificate from a private CA given with `--ca-file`), with the bearer
//! token the transceiver requires (`--token-file`, mode 0600). Without the token the POST
//! is refused (401) and said; without the CA the TLS handshake fails and is said.
//! And `ufrag-perf sessions`, small: its ICE-TCP rows hold with more connections from one
//! address than the relay's default accept rate lets through (the run raises it and says
//! so), and a row that fails (Chromium kept off `PATH`) makes it exit non-zero with one
//! line naming the report, the row and the reason.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ufrag_testkit::OwnedChild;
use ufrag_testkit::tls::TestPki;

const TOKEN: &str = "smoke-test-token-0123456789";

/// A TLS-terminating front for `backend` on a free loopback port, one connection at a
/// time (each request is `Connection: close`), until dropped.
struct TlsFront {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl TlsFront {
    fn start(pki: &TestPki, backend: SocketAddr) -> TlsFront {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_file_iter(pki.file("server.pem"))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let key = PrivateKeyDer::from_pem_file(pki.file("server.key")).unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        // A failed handshake (a client that does not trust us) is that
                        // client's error to report; the front goes on.
                        let _ = relay_one(stream, &config, backend);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        TlsFront { addr, stop }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads one request over TLS, sends it to `backend` in plain HTTP, returns its answer.
fn relay_one(
    stream: TcpStream,
    config: &Arc<rustls::ServerConfig>,
    backend: SocketAddr,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let connection =
        rustls::ServerConnection::new(Arc::clone(config)).map_err(std::io::Error::other)?;
    let mut tls = BufReader::new(rustls::StreamOwned::new(connection, stream));
    let mut head = Vec::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        tls.read_line(&mut line)?;
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        head.extend_from_slice(line.as_bytes());
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut body = vec![0; length];
    tls.read_exact(&mut body)?;
    let mut plain = TcpStream::connect(backend)?;
    plain.write_all(&head)?;
    plain.write_all(&body)?;
    let mut answer = Vec::new();
    plain.read_to_end(&mut answer)?;
    let tls = tls.get_mut();
    tls.write_all(&answer)?;
    tls.conn.send_close_notify();
    tls.flush()
}

fn session(front: &TlsFront, extra: &[&str], token_file: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ufrag-perf"));
    cmd.args([
        "session",
        "--http",
        &format!("https://localhost:{}", front.addr.port()),
    ])
    .args(["--packets", "10"])
    .args(extra)
    .env_remove("UFRAG_TRANSCEIVER_TOKEN");
    if let Some(file) = token_file {
        cmd.arg("--token-file").arg(file);
    }
    cmd.output().expect("ufrag-perf runs")
}

#[test]
fn a_session_by_host_name_over_https_with_the_bearer_token() {
    let transceiver_bin = ufrag_testkit::cargo_build::bin("transceiver");
    let http = SocketAddr::from((
        [127, 0, 0, 1],
        ufrag_testkit::addr::free_tcp_port([127, 0, 0, 1].into()),
    ));
    let mut transceiver = Command::new(&transceiver_bin);
    transceiver
        .args([
            "--http-addr",
            &http.to_string(),
            "--bind",
            "127.0.0.1:0",
            "--direct",
        ])
        .env("UFRAG_RELAY_HINT_KEYS", ufrag_testkit::keys::KEYS)
        .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
        .env("UFRAG_TRANSCEIVER_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _transceiver = OwnedChild::spawn(&mut transceiver).expect("the transceiver starts");
    let pki = TestPki::new("session-smoke", [127, 0, 0, 1].into());
    let front = TlsFront::start(&pki, http);
    let ca = pki.file("ca.pem");
    let ca = ca.to_str().unwrap();
    let token_file = pki.dir().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    let ok = session(
        &front,
        &["--ca-file", ca, "--wait-ready", "10s"],
        Some(&token_file),
    );
    let said = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(said.contains("audio packets echoed; DELETE 204"), "{said}");

    let no_token = session(&front, &["--ca-file", ca], None);
    assert_eq!(no_token.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&no_token.stderr);
    assert!(stderr.contains("POST answered 401"), "{stderr}");

    let untrusted = session(&front, &["--wait-ready", "0s"], Some(&token_file));
    // (Asking /readyz would fail the same way, and wait for nothing.)
    assert_eq!(untrusted.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(
        stderr.contains("no HTTP answer (TLS or the connection failed)"),
        "{stderr}"
    );

    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open_token = session(&front, &["--ca-file", ca], Some(&token_file));
    let stderr = String::from_utf8_lossy(&open_token.stderr);
    assert!(stderr.contains("chmod 600"), "{stderr}");
}

#[test]
fn a_failed_sessions_row_fails_the_run_with_one_line_naming_it() {
    // `ufrag-perf sessions` runs the relay and the transceiver found next to it.
    ufrag_testkit::cargo_build::bin("relay-mio");
    ufrag_testkit::cargo_build::bin("transceiver");
    let dir = std::env::temp_dir().join(format!("ufrag-sessions-failed-{}", std::process::id()));
    let out = dir.join("sessions.md");
    let run = Command::new(env!("CARGO_BIN_EXE_ufrag-perf"))
        // More ICE-TCP connections from one address than the relay's default accept rate
        // (8 a second, and as many at once) lets through: they must all hold.
        .args(["sessions", "--setups", "12", "--tcp-connections", "20"])
        .args(["--tcp-blast", "1s", "--steps", "2", "--talk", "1s"])
        .args(["--browser-sessions", "1", "--browser-talk", "1s", "--out"])
        .arg(&out)
        // No Chromium on this PATH: both Chromium rows fail, whatever the host has.
        .env("PATH", dir.join("no-programs-here"))
        .output()
        .expect("ufrag-perf runs");
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}\n{report}");
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("FAILED row"))
        .collect();
    let prefix = format!("ufrag-perf sessions ({}): FAILED row", out.display());
    assert_eq!(
        failed.len(),
        2,
        "only the Chromium rows fail:\n{stderr}\n{report}"
    );
    for (line, row) in failed.iter().zip(["through relay-mio", "direct"]) {
        assert!(
            line.starts_with(&format!(
                "{prefix} \"{row}\" in \"Headless Chromium on the demo page\": "
            )),
            "{line}"
        );
        assert!(
            line.contains("chromium"),
            "the reason names what is missing: {line}"
        );
    }
    // The failed rows come last, after the report's own last line.
    assert!(
        stderr.trim_end().ends_with(failed[1]),
        "the failed rows are the last lines:\n{stderr}"
    );
    assert!(
        report.contains(
            "This run raised the relay's per-prefix TCP accept rate to 64/s (default 8/s) \
             because its 32 ICE-TCP clients"
        ),
        "{report}"
    );
    assert!(
        report.contains("| through relay-mio over ICE-TCP | 12 |"),
        "{report}"
    );
    assert!(
        report.contains("| 20 | "),
        "every listener connection bound:\n{report}"
    );
}
