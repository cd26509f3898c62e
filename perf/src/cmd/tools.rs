//! `perf session` (one WebRTC session against a running deployment, its smoke test) and
//! the testbed's hidden tools: a fake transceiver and a relay probe.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ufrag_testbed::http::{Endpoint, HttpResponse, request_to, tls_client};

/// The environment variable that may hold the signaling bearer token (the transceiver's).
const TOKEN_ENV: &str = "UFRAG_TRANSCEIVER_TOKEN";

/// One WebRTC session (a str0m client) against a running deployment's signaling
/// endpoint: POST, ICE and DTLS, a ping over `events`, audio echoed, DELETE. Exits 0
/// and prints the setup times, or fails naming the step that did not happen.
///
/// The bearer token comes from --token-file or UFRAG_TRANSCEIVER_TOKEN, never a flag.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct SessionOptions {
    /// The signaling endpoint: `https://HOST[:PORT]` (an Ingress), `http://HOST:PORT`, or
    /// `IP:PORT`; HOST may be a name.
    #[arg(long, value_name = "URL")]
    pub http: Endpoint,
    /// A file holding the signaling bearer token (mode 0600); or UFRAG_TRANSCEIVER_TOKEN.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Extra trust anchors (PEM) for an https endpoint, beside the web's roots.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// The client's local address (its socket binds an ephemeral port on it).
    #[arg(long, default_value = "127.0.0.1")]
    pub local: Ipv4Addr,
    /// How long to wait for the endpoint to answer /readyz first (0s: do not ask; an
    /// Ingress may not route it).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub wait_ready: Duration,
    /// Audio packets sent (20 ms apart); at least 80 % must come back.
    #[arg(long, default_value_t = 25)]
    pub packets: u32,
}

/// Testbed tool: echo every relay frame back to its sender (a fake transceiver).
#[derive(Debug, clap::Args)]
pub struct FakeTransceiverOptions {
    #[arg(long)]
    pub bind: SocketAddr,
    #[arg(long, default_value_t = 100_000)]
    pub max: u64,
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub idle: Duration,
}

/// Testbed tool: make a flow through a relay and count echoed datagrams; exits 1 on loss.
#[derive(Debug, clap::Args)]
pub struct RelayProbeOptions {
    #[arg(long)]
    pub vip: SocketAddr,
    #[arg(long)]
    pub transceiver: SocketAddr,
    #[arg(long, default_value_t = 100)]
    pub count: u64,
    /// Which session the probe's Binding Request names (its ufrag and transaction):
    /// two probes of one relay need two, or the second is refused as a replay.
    #[arg(long, default_value_t = 7)]
    pub session: u8,
}

/// Runs it; the process's exit code.
pub fn session(options: SessionOptions) -> i32 {
    match run_session(options) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ufrag-perf session: {e}");
            1
        }
    }
}

/// The bearer token from `file` (refused when others may read it) or the environment.
pub(crate) fn bearer_token(file: Option<&std::path::Path>) -> Result<Option<String>, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let env = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
    let Some(path) = file else { return Ok(env) };
    if env.is_some() {
        return Err(format!(
            "--token-file and {TOKEN_ENV} are both set; use one"
        ));
    }
    let shown = path.display();
    let mode = std::fs::metadata(path)
        .map_err(|e| format!("--token-file {shown}: {e}"))?
        .permissions()
        .mode();
    if mode & 0o007 != 0 {
        return Err(format!(
            "--token-file {shown} has mode {:04o}: chmod 600",
            mode & 0o777
        ));
    }
    let token = std::fs::read_to_string(path).map_err(|e| format!("--token-file {shown}: {e}"))?;
    Ok(Some(token.trim().to_string()).filter(|t| !t.is_empty()))
}

fn run_session(options: SessionOptions) -> Result<i32, String> {
    let SessionOptions {
        http,
        token_file,
        ca_file,
        local,
        wait_ready: wait,
        packets,
    } = options;
    let token = bearer_token(token_file.as_deref())?;
    let tls = tls_client(ca_file.as_deref())?;
    let authorization = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = authorization
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    let call =
        |method: &str, path: &str, body: Option<(&str, &str)>| -> Result<HttpResponse, String> {
            request_to(&http, &tls, method, path, body, &headers)
        };
    if !wait.is_zero() {
        let deadline = Instant::now() + wait;
        loop {
            match call("GET", "/readyz", None) {
                Ok(r) if r.status == 200 => break,
                answer if Instant::now() >= deadline => {
                    let said = answer.map_or_else(|e| e, |r| format!("answered {}", r.status));
                    return Err(format!("{http}/readyz not ready within {wait:?}: {said}"));
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    let mut client = ufrag_testbed::webrtc_client::Client::new_on(local);
    let started = Instant::now();
    let offer = client.offer().to_string();
    let answer = call("POST", "/v1/sessions", Some(("application/sdp", &offer)))?;
    if answer.status != 201 {
        return Err(format!(
            "POST answered {} {}",
            answer.status,
            answer.body.trim()
        ));
    }
    client.apply_answer(&answer);
    let echoed = (packets as usize * 4).div_ceil(5);
    let client = ufrag_testbed::webrtc_client::converse_with_echo(
        client,
        &http.to_string(),
        packets,
        echoed,
    );
    let location = client.location.clone().ok_or("a 201 without a Location")?;
    let deleted = call("DELETE", &location, None).map_or(0, |r| r.status);
    let ms = |t: Option<Instant>| t.map_or(f64::NAN, |t| (t - started).as_secs_f64() * 1e3);
    println!(
        "session {location}: connected {:.1} ms, first echo {:.1} ms after the POST; \
     {} of {packets} audio packets echoed; DELETE {deleted}",
        ms(client.connected_at),
        ms(client.first_audio_at),
        client.audio_received,
    );
    Ok(i32::from(deleted != 204))
}

/// Runs it; the process's exit code.
pub fn fake_transceiver(options: FakeTransceiverOptions) -> i32 {
    let FakeTransceiverOptions { bind, max, idle } = options;
    let echoed =
        crate::bench::probe::fake_transceiver(bind, max, idle).expect("fake transceiver runs");
    println!("echoed {echoed}");
    0
}

/// Runs it; the process's exit code.
pub fn relay_probe(options: RelayProbeOptions) -> i32 {
    let RelayProbeOptions {
        vip,
        transceiver,
        count,
        session,
    } = options;
    let keys = ufrag_testbed::keys::keys();
    let r = crate::bench::probe::relay_probe(&keys, vip, transceiver, (count, session))
        .expect("probe runs");
    println!("received {}/{}", r.received, r.sent);
    i32::from(r.received != r.sent)
}
