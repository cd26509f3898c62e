//! `perf session` (one WebRTC session against a running deployment, its smoke test) and
//! the testbed's hidden tools: a fake transceiver and a relay probe.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use testkit::http::wait_ready;

/// One WebRTC session (a str0m client) against a running deployment's signaling
/// endpoint: POST, ICE and DTLS, a ping over `events`, audio echoed, DELETE. Exits 0
/// and prints the setup times, or fails naming the step that did not happen.
#[derive(Debug, clap::Args)]
pub struct SessionOptions {
    /// The transceiver's signaling address.
    #[arg(long)]
    pub http: SocketAddr,
    /// The client's local address (its socket binds an ephemeral port on it).
    #[arg(long, default_value = "127.0.0.1")]
    pub local: Ipv4Addr,
    /// How long to wait for the endpoint to answer /readyz first.
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
    let SessionOptions {
        http,
        local,
        wait_ready: wait,
        packets,
    } = options;
    wait_ready(None, http, "the transceiver", wait, || None);
    let mut client = testkit::webrtc_client::Client::new_on(local);
    let started = Instant::now();
    let answer = client.signal(http);
    if answer.status != 201 {
        eprintln!(
            "perf session: POST answered {} {}",
            answer.status,
            answer.body.trim()
        );
        return 1;
    }
    let echoed = (packets as usize * 4).div_ceil(5);
    let client =
        testkit::webrtc_client::converse_with_echo(client, &http.to_string(), packets, echoed);
    let location = client.location.clone().expect("a Location on 201");
    let deleted =
        testkit::http::request(http, "DELETE", &location, None, &[]).map_or(0, |r| r.status);
    let ms = |t: Option<Instant>| t.map_or(f64::NAN, |t| (t - started).as_secs_f64() * 1e3);
    println!(
        "session {location}: connected {:.1} ms, first echo {:.1} ms after the POST; \
     {} of {packets} audio packets echoed; DELETE {deleted}",
        ms(client.connected_at),
        ms(client.first_audio_at),
        client.audio_received,
    );
    i32::from(deleted != 204)
}

/// Runs it; the process's exit code.
pub fn fake_transceiver(options: FakeTransceiverOptions) -> i32 {
    let FakeTransceiverOptions { bind, max, idle } = options;
    let echoed = crate::probe::fake_transceiver(bind, max, idle).expect("fake transceiver runs");
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
    let keys = testkit::keys::keys();
    let r =
        crate::probe::relay_probe(&keys, vip, transceiver, (count, session)).expect("probe runs");
    println!("received {}/{}", r.received, r.sent);
    i32::from(r.received != r.sent)
}
