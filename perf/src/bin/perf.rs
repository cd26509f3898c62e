//! `perf`: the benchmark runner. `perf loopback` measures relay-mio with 1 and 2 workers
//! against a bare recvmmsg/sendmmsg forwarder on loopback; `perf compare` puts the direct
//! path, the bare forwarder, relay-mio and relay-afxdp side by side on the netns testbed;
//! `perf sessions` measures WebRTC sessions. Each writes a Markdown report (and JSON lines).
//! Hidden subcommands are the testbed's tools (fake transceiver, relay probe).

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use perf::bare::BareForwarder;
use perf::load::{FlowPlan, Generator, Sink, cpu_seconds, max_loss_free};
use perf::report::{Row, Run};
use testkit::OwnedChild;
use testkit::http::wait_ready;
use ufrag_common::hint::{HintKey, HintKeys};

#[derive(Debug, Parser)]
#[command(name = "perf", about = "ufrag-relay benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

/// How each setup is measured: the rate search and the fixed-load latency trial.
#[derive(Clone, Copy, Debug, clap::Args)]
struct Search {
    /// Length of each trial.
    #[arg(long, default_value = "2s", value_parser = humantime_duration)]
    trial: Duration,
    /// First rate of the search, packets per second.
    #[arg(long, default_value_t = 20_000)]
    start_pps: u64,
    /// Highest rate tried.
    #[arg(long, default_value_t = 4_000_000)]
    max_pps: u64,
    /// The fixed load at which latency is reported.
    #[arg(long, default_value_t = 20_000)]
    fixed_pps: u64,
    /// Length of the latency trial at --fixed-pps (longer: more samples in the tail).
    #[arg(long, default_value = "10s", value_parser = humantime_duration)]
    latency_trial: Duration,
    /// UDP payload bytes of every generated datagram (200: a voice packet; 1200: video).
    #[arg(long, default_value_t = perf::load::DATAGRAM_LEN)]
    size: usize,
    /// Searches per setup (median and spread are over these).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// The search stops when the highest loss-free and the lowest lossy rate are this
    /// close (a fraction of the former).
    #[arg(long, default_value_t = 0.02)]
    precision: f64,
}

/// How long a started relay or transceiver may take to become ready.
const READY: Duration = Duration::from_secs(10);

/// How long a trial waits for stragglers before reading the sink.
const SETTLE: Duration = Duration::from_millis(300);

#[derive(Debug, Subcommand)]
enum Cmd {
    /// relay-mio (1 and 2 workers) against a bare mmsg forwarder on loopback.
    Loopback {
        #[command(flatten)]
        search: Search,
        /// Where to write the Markdown report (JSON goes next to it, .json).
        #[arg(long, default_value = "target/perf/loopback.md")]
        out: std::path::PathBuf,
    },
    /// Side by side on the netns testbed (root): the direct path, a bare mmsg forwarder,
    /// relay-mio and relay-afxdp in each mode; max loss-free rate, CPU per packet, latency.
    Compare {
        #[command(flatten)]
        search: Search,
        /// Only these setups (comma-separated names: direct, naive, bare, nftables, nginx,
        /// quilkin, quilkin-xdp, xdp-relay, mio, mio-busy, afxdp-skb-wakeup, afxdp-skb-busy, afxdp-native-wakeup,
        /// afxdp-native-busy, afxdp-crate-native-wakeup, afxdp-crate-native-busy, afxdp-fast-skb,
        /// afxdp-fast-native); default all.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Client flows (source address and port pairs) the load is spread over, each made
        /// before the search; up to 40,000 per client address, at most 6 addresses.
        #[arg(long, default_value_t = 1_000)]
        flows: u32,
        /// `up` (client → transceiver), `down` (transceiver → client: the setups that
        /// carry replies; live-frames only) or `both` (half the rate each way at once, as
        /// in a conversation; the setups that carry replies; live-frames only).
        #[arg(long, default_value = "up")]
        direction: String,
        /// With `--direction both`: the share of each trial's rate sent downlink (0.5: a
        /// conversation; 0.8: the model speaking while the user listens).
        #[arg(long, default_value_t = 0.5)]
        downlink_share: f64,
        /// Clients, relay and transceiver over IPv6 (uplink only; the setups that speak
        /// it: direct, naive, bare, nftables, our relays; up to 40,000 flows).
        #[arg(long, default_value_t = false)]
        ipv6: bool,
        /// The generator: `live-frames` (BPF_PROG_RUN live frames, paced in the kernel;
        /// it busy-polls the tools' core) or `sockets` (sendmmsg from the sockets of the first 256
        /// flows).
        #[arg(long, default_value = "live-frames")]
        generator: String,
        /// Leave the relay interface's kernel receive work where veth puts it (on the
        /// sender's core) instead of steering it to the forwarder's core (RPS, threaded
        /// NAPI): higher maxima, but the forwarder's core then misses part of its cost.
        #[arg(long, default_value_t = false)]
        no_steer: bool,
        /// The forwarder's CPU. 0 puts it beside the load tools, with no hop between cores
        /// (what a wake-up costs shows in the latency); its search then shares CPU 0 with
        /// the busy-polling generator and means little.
        #[arg(long, default_value_t = FORWARDER_CPU)]
        forwarder_cpu: usize,
        /// Search in rounds: every setup once per round, started afresh, `--repeats`
        /// rounds, instead of all of one setup's searches in a row; drift in a shared
        /// host's speed then falls on every row alike. The latency trial and the profile
        /// are taken in the last round.
        #[arg(long, default_value_t = false)]
        interleave: bool,
        /// Where to write the Markdown report (JSON goes next to it, .json).
        #[arg(long, default_value = "target/perf/compare.md")]
        out: std::path::PathBuf,
    },
    /// A lab's load generator on a real interface (root): paced live frames from
    /// `--src` (and the `--flows` source ports above it) to `--dst` via `--dst-mac`, sent
    /// with BPF_PROG_RUN from the interface; prints what it sent. Run `perf sink` on the
    /// receiving host.
    Gen {
        /// The interface to send from.
        #[arg(long)]
        interface: String,
        /// Its network namespace (default: this process's).
        #[arg(long)]
        netns: Option<String>,
        /// A veth interface's peer (`NS/NAME` or `NAME`), which needs an XDP program for
        /// XDP frames to arrive; not for a NIC.
        #[arg(long)]
        veth_peer: Option<String>,
        /// The first flow's source address (IPv4).
        #[arg(long)]
        src: std::net::SocketAddrV4,
        /// Where the datagrams go (the relay's VIP, or the sink for the direct path).
        #[arg(long)]
        dst: std::net::SocketAddrV4,
        /// The next hop's MAC (aa:bb:cc:dd:ee:ff): the frames are raw, nothing resolves it.
        #[arg(long)]
        dst_mac: String,
        /// Flows: source ports `--src`'s port and up.
        #[arg(long, default_value_t = 1)]
        flows: u32,
        /// UDP payload bytes.
        #[arg(long, default_value_t = perf::load::DATAGRAM_LEN)]
        size: usize,
        /// Datagrams per second.
        #[arg(long)]
        rate: u64,
        /// How long to send.
        #[arg(long, default_value = "10s", value_parser = humantime_duration)]
        duration: Duration,
    },
    /// A lab's counting sink on a real interface (root): counts UDP frames to `--port` in
    /// XDP (and drops them), printing the rate each second and the total at the end.
    Sink {
        /// The interface to count on.
        #[arg(long)]
        interface: String,
        /// Its network namespace (default: this process's).
        #[arg(long)]
        netns: Option<String>,
        /// The UDP destination port counted.
        #[arg(long)]
        port: u16,
        /// How long to count.
        #[arg(long, default_value = "15s", value_parser = humantime_duration)]
        duration: Duration,
    },
    /// Testbed tool: echo every relay frame back to its sender (a fake transceiver).
    #[command(hide = true)]
    FakeTransceiver {
        #[arg(long)]
        bind: SocketAddr,
        #[arg(long, default_value_t = 100_000)]
        max: u64,
        #[arg(long, default_value = "3s", value_parser = humantime_duration)]
        idle: Duration,
    },
    /// Testbed tool: make a flow through a relay and count echoed datagrams; exits 1 on loss.
    #[command(hide = true)]
    RelayProbe {
        #[arg(long)]
        vip: SocketAddr,
        #[arg(long)]
        transceiver: SocketAddr,
        #[arg(long, default_value_t = 100)]
        count: u64,
        /// Which session the probe's Binding Request names (its ufrag and transaction):
        /// two probes of one relay need two, or the second is refused as a replay.
        #[arg(long, default_value_t = 7)]
        session: u8,
    },
    /// One WebRTC session (a str0m client) against a running deployment's signaling
    /// endpoint: POST, ICE and DTLS, a ping over `events`, audio echoed, DELETE. Exits 0
    /// and prints the setup times, or fails naming the step that did not happen.
    Session {
        /// The transceiver's signaling address.
        #[arg(long)]
        http: SocketAddr,
        /// The client's local address (its socket binds an ephemeral port on it).
        #[arg(long, default_value = "127.0.0.1")]
        local: Ipv4Addr,
        /// How long to wait for the endpoint to answer /readyz first.
        #[arg(long, default_value = "20s", value_parser = humantime_duration)]
        wait_ready: Duration,
        /// Audio packets sent (20 ms apart); at least 80 % must come back.
        #[arg(long, default_value_t = 25)]
        packets: u32,
    },
    /// WebRTC sessions (str0m clients) through relay-mio to the transceiver, and direct:
    /// setup times, and concurrent echo sessions one worker carries.
    Sessions {
        /// Sessions measured for setup time, one after the other.
        #[arg(long, default_value_t = 50)]
        setups: usize,
        /// Session counts tried for capacity, until audio loss reaches 1 %.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "200,400,600,800,1000,1200,1400,1600"
        )]
        steps: Vec<usize>,
        /// How long every client talks in each capacity step.
        #[arg(long, default_value = "5s", value_parser = humantime_duration)]
        talk: Duration,
        /// Threads the capacity steps' clients are spread over (each with its own poll).
        #[arg(long, default_value_t = 1)]
        client_threads: usize,
        /// How the capacity steps' clients talk: `recorded` (each plays back a talk str0m
        /// recorded from it; a `send_to` per datagram) or `live` (str0m per packet).
        #[arg(long, value_enum, default_value_t = perf::sessions::Talkers::Recorded)]
        talkers: perf::sessions::Talkers,
        /// ICE-TCP connections opened, bound and loaded to measure the relay worker's TCP
        /// listener (0: skip).
        #[arg(long, default_value_t = 1000)]
        tcp_connections: usize,
        /// How long every ICE-TCP connection sends in that measurement.
        #[arg(long, default_value = "3s", value_parser = humantime_duration)]
        tcp_blast: Duration,
        /// Chromium sessions per path (one after the other; 0: none).
        #[arg(long, default_value_t = 10)]
        browser_sessions: usize,
        /// How long each Chromium session talks (pings every 50 ms, from the start).
        #[arg(long, default_value = "10s", value_parser = humantime_duration)]
        browser_talk: Duration,
        /// Where to write the Markdown report.
        #[arg(long, default_value = "target/perf/sessions.md")]
        out: std::path::PathBuf,
    },
    /// Live echo sessions through relay-mio next to a junk flood at its public port, and
    /// through a kill -9 and restart of the relay, with and without the Redis route cache.
    Resilience {
        /// Live sessions.
        #[arg(long, default_value_t = 50)]
        sessions: usize,
        /// How long they talk in each run.
        #[arg(long, default_value = "10s", value_parser = humantime_duration)]
        talk: Duration,
        /// Junk datagrams per second, as a multiple of the live sessions' audio rate.
        #[arg(long, default_value_t = 10)]
        junk_factor: u64,
        /// Where to write the Markdown report.
        #[arg(long, default_value = "target/perf/resilience.md")]
        out: std::path::PathBuf,
    },
    /// The CI gate: the hot-path benches' callgrind instruction counts (iai-callgrind
    /// summaries) against the committed baseline; exits 1 when one rose more than 2 %.
    /// Run through `scripts/instructions.sh`, which runs the benches first.
    Gate {
        /// Where the benches wrote their `summary.json` files.
        #[arg(long, default_value = "target/iai")]
        summaries: std::path::PathBuf,
        /// The committed baseline.
        #[arg(long, default_value = "common/benches/instructions.baseline")]
        baseline: std::path::PathBuf,
        /// Write this run's counts as the new baseline instead of gating.
        #[arg(long)]
        accept: bool,
    },
}

fn humantime_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n.parse().map_err(|_| format!("bad duration {s}"))?;
    match unit {
        "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        _ => Err(format!("bad duration {s}: use s or ms")),
    }
}

const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const CLIENTS: usize = 32;

fn loopback_ip(last: u8) -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(
        127,
        200 + (pid % 50) as u8,
        ((pid / 50) % 250) as u8 + 1,
        last,
    )
}

/// A relay started by the suite: killed on drop, and by the kernel if perf dies.
struct RelayChild(OwnedChild);

fn start_relay(
    workers: usize,
    vip: SocketAddr,
    internal: SocketAddr,
    metrics: SocketAddr,
) -> RelayChild {
    start_relay_with(workers, vip, internal, metrics, &[])
}

/// [`start_relay`] with extra flags.
fn start_relay_with(
    workers: usize,
    vip: SocketAddr,
    internal: SocketAddr,
    metrics: SocketAddr,
    extra: &[String],
) -> RelayChild {
    let exe = std::env::current_exe().expect("own path");
    let relay = exe.with_file_name("relay-mio");
    assert!(
        relay.exists(),
        "{} missing: cargo build --release -p relay-mio",
        relay.display()
    );
    let mut command = Command::new(relay);
    command
        .args([
            "--vip",
            &vip.to_string(),
            "--internal-addr",
            &internal.to_string(),
        ])
        .args([
            "--workers",
            &workers.to_string(),
            "--cpus",
            if workers == 1 { "1" } else { "0-1" },
        ])
        .args([
            "--allow-transceiver-net",
            "127.0.0.0/8",
            "--metrics-addr",
            &metrics.to_string(),
        ])
        // Every load client is one host: its hundreds of sessions, set up at once, are
        // not an attack, so the per-prefix rate of new flows is lifted.
        .args(["--new-flows-per-prefix", "1000000"])
        .args(extra)
        .env("UFRAG_RELAY_HINT_KEYS", format!("1:{KEY_HEX}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    let mut child = RelayChild(OwnedChild::spawn(&mut command).expect("relay-mio starts"));
    wait_ready(None, metrics, "relay-mio", READY, || child.0.exit_report());
    child
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Loopback { search, out } => loopback(&search, &out),
        Cmd::Sessions {
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
        } => sessions(
            setups,
            &steps,
            (talk, client_threads, talkers),
            (tcp_connections, tcp_blast),
            (browser_sessions, browser_talk),
            &out,
        ),
        Cmd::Compare {
            search,
            only,
            flows,
            direction,
            downlink_share,
            ipv6,
            generator,
            no_steer,
            forwarder_cpu,
            interleave,
            out,
        } => compare(
            &search,
            (&only, interleave),
            (flows, &direction, downlink_share, ipv6),
            &generator,
            (!no_steer, forwarder_cpu),
            &out,
        ),
        Cmd::Resilience {
            sessions,
            talk,
            junk_factor,
            out,
        } => resilience(sessions, talk, junk_factor, &out),
        Cmd::Gate {
            summaries,
            baseline,
            accept,
        } => std::process::exit(gate(&summaries, &baseline, accept)),
        Cmd::Gen {
            interface,
            netns,
            veth_peer,
            src,
            dst,
            dst_mac,
            flows,
            size,
            rate,
            duration,
        } => {
            use perf::xdp::{Iface, XdpGenerator, template_frame};
            let from = Iface::lookup_in(netns.as_deref(), &interface).expect("--interface");
            let peer = veth_peer.map(|p| match p.split_once('/') {
                Some((ns, name)) => Iface::lookup(ns, name).expect("--veth-peer"),
                None => Iface::lookup_in(None, &p).expect("--veth-peer"),
            });
            let mac = perf::xdp::parse_mac(&dst_mac).expect("--dst-mac aa:bb:cc:dd:ee:ff");
            let plan = FlowPlan::new(*src.ip(), src.port(), flows, flows).expect("--src, --flows");
            let frame = template_frame(from.mac, mac, src, dst, size);
            let generator = XdpGenerator::new(from, peer.as_ref(), frame, &plan, Instant::now())
                .expect("the generator loads (root, XDP)");
            let (sent, seconds) = generator.send(rate, duration).expect("send");
            println!(
                "sent {sent} in {seconds:.3} s ({:.0} pps)",
                sent as f64 / seconds.max(1e-9)
            );
        }
        Cmd::Sink {
            interface,
            netns,
            port,
            duration,
        } => {
            use perf::xdp::{Counted, Iface, NEVER_SAMPLED, XdpSink};
            let on = Iface::lookup_in(netns.as_deref(), &interface).expect("--interface");
            let sink =
                XdpSink::attach(&on, Counted::ToPort(port), NEVER_SAMPLED).expect("the sink loads");
            println!("counting UDP to port {port} on {interface} for {duration:?}");
            let start = Instant::now();
            let mut last = 0;
            while start.elapsed() < duration {
                std::thread::sleep(
                    Duration::from_secs(1).min(duration.saturating_sub(start.elapsed())),
                );
                let now = sink.received();
                println!(
                    "{:>6.1} s  {:>10} pps",
                    start.elapsed().as_secs_f64(),
                    now - last
                );
                last = now;
            }
            println!("received {}", sink.received());
        }
        Cmd::Session {
            http,
            local,
            wait_ready: wait,
            packets,
        } => {
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
                std::process::exit(1);
            }
            let echoed = (packets as usize * 4).div_ceil(5);
            let client = testkit::webrtc_client::converse_with_echo(
                client,
                &http.to_string(),
                packets,
                echoed,
            );
            let location = client.location.clone().expect("a Location on 201");
            let deleted = testkit::http::request(http, "DELETE", &location, None, &[])
                .map_or(0, |r| r.status);
            let ms = |t: Option<Instant>| t.map_or(f64::NAN, |t| (t - started).as_secs_f64() * 1e3);
            println!(
                "session {location}: connected {:.1} ms, first echo {:.1} ms after the POST; \
                 {} of {packets} audio packets echoed; DELETE {deleted}",
                ms(client.connected_at),
                ms(client.first_audio_at),
                client.audio_received,
            );
            if deleted != 204 {
                std::process::exit(1);
            }
        }
        Cmd::FakeTransceiver { bind, max, idle } => {
            let echoed =
                perf::probe::fake_transceiver(bind, max, idle).expect("fake transceiver runs");
            println!("echoed {echoed}");
        }
        Cmd::RelayProbe {
            vip,
            transceiver,
            count,
            session,
        } => {
            let keys = HintKeys::new(
                HintKey::new(1, &(0u8..32).collect::<Vec<_>>()).unwrap(),
                None,
            )
            .unwrap();
            let r = perf::probe::relay_probe(&keys, vip, transceiver, (count, session))
                .expect("probe runs");
            println!("received {}/{}", r.received, r.sent);
            if r.received != r.sent {
                std::process::exit(1);
            }
        }
    }
}

/// A transceiver started by the suite: killed on drop, and by the kernel if perf dies.
struct TransceiverChild(OwnedChild);

/// The transceiver's worker runs here, alone: relay-mio's worker (CPU 1) and the
/// session load clients ([`SESSIONS_CLIENT_CPU`]) share the other vCPU.
const TRANSCEIVER_CPU: usize = 0;
/// Where `perf sessions` runs its capacity clients.
const SESSIONS_CLIENT_CPU: usize = 1;

fn start_transceiver(
    http: SocketAddr,
    bind: SocketAddr,
    advertise: Option<SocketAddr>,
    extra: &[&str],
) -> TransceiverChild {
    let exe = std::env::current_exe()
        .expect("own path")
        .with_file_name("transceiver");
    assert!(
        exe.exists(),
        "{} missing: cargo build --release -p transceiver",
        exe.display()
    );
    let mut cmd = Command::new(exe);
    cmd.args([
        "--http-addr",
        &http.to_string(),
        "--bind",
        &bind.to_string(),
        "--workers",
        "1",
    ]);
    cmd.args(["--max-sessions-per-worker", "5000"]);
    cmd.args(["--cpus", &TRANSCEIVER_CPU.to_string()]);
    // The load clients are one address: lift the per-address POST rate.
    cmd.args(["--posts-per-second-per-ip", "1000000"]);
    match advertise {
        Some(vip) => cmd.args([
            "--advertise",
            &vip.to_string(),
            "--allow-relay-net",
            "127.0.0.0/8",
        ]),
        None => cmd.arg("--direct"),
    };
    cmd.args(extra);
    cmd.env("UFRAG_RELAY_HINT_KEYS", format!("1:{KEY_HEX}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    let mut child = TransceiverChild(OwnedChild::spawn(&mut cmd).expect("transceiver starts"));
    wait_ready(None, http, "transceiver", READY, || child.0.exit_report());
    child
}

fn sessions(
    setups: usize,
    steps: &[usize],
    (talk, client_threads, talkers): (Duration, usize, perf::sessions::Talkers),
    (tcp_connections, tcp_blast): (usize, Duration),
    (browsers, browser_talk): (usize, Duration),
    out: &std::path::Path,
) {
    use perf::sessions::{LoadPlan, browser_session, load_step, median, quantile_ms, setup_times};
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
        perf::sessions::PINGS
    );
    let _ = writeln!(
        report,
        "| path | sessions | connected p50 / p99 ms | first echo p50 / p99 ms | ping RTT p50 / p99 ms |"
    );
    let _ = writeln!(report, "|---|---:|---|---|---|");

    let vip = SocketAddr::from((loopback_ip(50), 3478));
    // ICE over TCP on the same relay: the row for clients whose networks block UDP.
    let tcp_vip = SocketAddr::from((loopback_ip(50), 4443));
    let _relay = start_relay_with(
        1,
        vip,
        SocketAddr::from((loopback_ip(51), 40_000)),
        SocketAddr::from((loopback_ip(51), 9100)),
        &[
            "--tcp-vip",
            &tcp_vip.to_string(),
            // One load host opens the listener's connections: lift the per-source caps.
            "--tcp-connections-per-prefix",
            "1000000",
            "--new-flows-per-worker",
            "1000000",
        ]
        .map(String::from),
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
            perf::sessions::setup_times_over_tcp(http, loopback_ip(60), tcp_vip, setups, limit)
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
                let _ = writeln!(report, "| {name} | failed: {e} | | | |");
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
            perf::load::LOAD_CPU
        );
        match perf::sessions::tcp_listener_capacity(
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
            }
            Err(e) => {
                let _ = writeln!(report, "failed: {e}");
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
            testkit::http::metric(
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
                let of = |f: fn(&perf::sessions::BrowserRun) -> f64| {
                    median(&mut runs.iter().map(f).collect::<Vec<_>>())
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
            perf::sessions::Talkers::Recorded => {
                "Talkers: **recorded**. After connecting, each str0m client's talk is recorded \
                 from the client itself (its str0m session runs on a clock moved forward in \
                 memory: SRTP audio, SRTCP reports and consent checks, as str0m makes them), \
                 then played back on its socket at the recorded offsets, a `send_to` per \
                 datagram, so the load client costs far less than the transceiver it loads. \
                 An echo counts only once the client's str0m session, after the talk, has \
                 decrypted, authenticated and delivered it as audio."
            }
            perf::sessions::Talkers::Live => {
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
    for &n in steps {
        eprintln!("capacity: {n} sessions…");
        let counters = || {
            [
                cpu_seconds(relayed.0.id(), Some("xcvr-w")),
                cpu_seconds(_relay.0.id(), Some("relay-w")),
                perf::load::machine_busy_seconds(),
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
    write_report(out, &report, None);
}

/// `perf gate`: prints the table and returns the exit code (0: passed or accepted).
fn gate(summaries: &std::path::Path, baseline: &std::path::Path, accept: bool) -> i32 {
    use perf::gate::{TOLERANCE, compare, parse_baseline, passes, read_summaries, table};
    let now = match read_summaries(summaries) {
        Ok(now) if !now.is_empty() => now,
        Ok(_) => {
            eprintln!("gate: no summary.json under {}", summaries.display());
            return 2;
        }
        Err(e) => {
            eprintln!("gate: {}: {e}", summaries.display());
            return 2;
        }
    };
    if accept {
        std::fs::write(baseline, perf::gate::render_baseline(&now)).expect("write the baseline");
        println!(
            "gate: {} benches written to {}",
            now.len(),
            baseline.display()
        );
        return 0;
    }
    let committed = match std::fs::read_to_string(baseline)
        .map_err(|e| e.to_string())
        .and_then(|text| parse_baseline(&text))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gate: {}: {e}", baseline.display());
            return 2;
        }
    };
    let rows = compare(&committed, &now, TOLERANCE);
    print!("{}", table(&rows, TOLERANCE));
    if passes(&rows) {
        println!("gate: passed ({} benches)", rows.len());
        0
    } else {
        println!(
            "gate: FAILED: a bench rose more than {:.0} %, or has no baseline, or did not run; \
             if the change is intended, accept it with `scripts/instructions.sh --accept` and \
             commit the baseline diff",
            TOLERANCE * 100.0
        );
        1
    }
}

/// Prints the Markdown report and writes it to `out`, with the rows as JSON lines next to
/// it (`.jsonl`) when there are rows.
fn write_report(out: &std::path::Path, report: &str, json: Option<String>) {
    print!("{report}");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).expect("report directory");
    }
    std::fs::write(out, report).expect("write report");
    if let Some(json) = json {
        std::fs::write(out.with_extension("json"), json).expect("write json");
    }
    eprintln!("report: {}", out.display());
}

/// The first client port of the generators (each client one port up): the socket
/// generator binds them to make the relay's flows, the XDP generator sends from them.
const FIRST_CLIENT_PORT: u16 = 20_000;
/// The sink's UDP port on the transceiver host.
const SINK_PORT: u16 = 41_000;
/// The XDP sink passes one frame in this many to the latency socket.
const SAMPLE_EVERY: u32 = 8;
/// The flows (the plan's first) whose sockets send the latency trial in live-frames mode.
const LATENCY_FLOWS: u32 = 256;
/// How fast `perf compare` makes its flows before the search (datagrams a second).
const FLOWS_MADE_PER_SECOND: u32 = 20_000;
/// The forwarder's core on the testbed by default; the tools get [`perf::load::LOAD_CPU`].
const FORWARDER_CPU: usize = 1;

/// One setup of `perf compare`: what runs in the relay's place.
enum Setup {
    Direct,
    Naive,
    Bare,
    Nftables,
    Nginx,
    Quilkin {
        xdp: bool,
    },
    XdpRelay,
    Relay {
        name: String,
        binary: &'static str,
        extra: Vec<String>,
        busy_polls: bool,
        /// Native `XDP_TX` frames leave the relay's veth: its bridge port needs an XDP
        /// program of its own to take them (a NIC sends them on the wire).
        peer_pass: bool,
    },
}

impl Setup {
    /// Whether the setup carries a transceiver's replies to clients the way `perf
    /// compare --direction down` sends them: our relays (frames to the internal port),
    /// nftables (replies to the VIP at the client's port, when the flows use one client
    /// address: else SNAT may have moved ports) and the direct path. The rest forward one
    /// way only (naive, bare, the XDP rewrite) or answer from per-session upstream ports
    /// of their own choosing (nginx, Quilkin), unknown to the generator.
    fn carries_downlink(&self, plan: &FlowPlan) -> bool {
        match self {
            Setup::Direct | Setup::Relay { .. } => true,
            Setup::Nftables => plan.addresses() == 1,
            _ => false,
        }
    }

    /// Whether `perf compare --ipv6` can run the setup: not the nginx and Quilkin
    /// configurations (written for IPv4 here) nor the in-kernel rewrite (IPv4 only).
    fn speaks_ipv6(&self) -> bool {
        !matches!(self, Setup::Nginx | Setup::Quilkin { .. } | Setup::XdpRelay)
    }

    fn name(&self) -> String {
        match self {
            Setup::Direct => "direct path (no relay)".into(),
            Setup::Naive => "naive recv_from/send_to relay".into(),
            Setup::Bare => "bare mmsg forwarder".into(),
            Setup::Nftables => "nftables DNAT+SNAT (kernel)".into(),
            Setup::Nginx => "nginx stream proxy, 1 worker".into(),
            Setup::Quilkin { xdp: false } => "Quilkin 0.10 UDP proxy, 1 worker".into(),
            Setup::Quilkin { xdp: true } => "Quilkin 0.10 UDP proxy, XDP mode".into(),
            Setup::XdpRelay => "in-kernel XDP rewrite relay".into(),
            Setup::Relay { name, .. } => name.clone(),
        }
    }
}

/// What a running setup holds until its row is measured (dropped after).
#[allow(dead_code)] // held for their Drop
enum Running {
    Nothing,
    Naive(perf::bare::NaiveForwarder),
    Bare(BareForwarder),
    Nftables(perf::alternatives::Nftables),
    Nginx(perf::alternatives::Nginx),
    Quilkin(perf::alternatives::Quilkin, Option<perf::xdp::PeerPass>),
    XdpRelay(perf::xdp::XdpRelay),
    Relay(RelayChild, Option<perf::xdp::PeerPass>),
}

/// Which way `perf compare`'s load goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    /// Client → transceiver.
    Up,
    /// Transceiver → client (the relay's return path).
    Down,
    /// Both at once, half the rate each way, as in a conversation.
    Both,
}

/// Source ports per client address in `perf compare`'s flow plans.
const PORTS_PER_CLIENT_ADDR: u32 = 40_000;

fn compare(
    search: &Search,
    (only, interleave): (&[String], bool),
    (flows, direction, downlink_share, ipv6): (u32, &str, f64, bool),
    generator: &str,
    (steer, forwarder_cpu): (bool, usize),
    out: &std::path::Path,
) {
    let live_frames = match generator {
        "sockets" => false,
        "live-frames" => true,
        other => panic!("--generator {other}: sockets or live-frames"),
    };
    let way = match direction {
        "up" => Way::Up,
        "down" => Way::Down,
        "both" => Way::Both,
        other => panic!("--direction {other}: up, down or both"),
    };
    assert!(
        (0.0..1.0).contains(&downlink_share) && downlink_share > 0.0,
        "--downlink-share {downlink_share}: a fraction between 0 and 1"
    );
    assert!(
        way == Way::Both || downlink_share == 0.5,
        "--downlink-share goes with --direction both"
    );
    let downlink = way != Way::Up;
    assert!(!(ipv6 && downlink), "--ipv6 measures the uplink only");
    assert!(
        live_frames || !downlink,
        "--direction down or both needs --generator live-frames"
    );
    use perf::xdp::{
        Counted, Iface, NEVER_SAMPLED, Stamps, XdpGenerator, XdpLoad, XdpSink, template_frame,
    };
    use testkit::testbed::Testbed;
    perf::load::pin_to_load_cpu();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let bed = Testbed::up().expect("the testbed needs root (ip netns, veth, bridge)");
    delete_on_interrupt(bed.namespaces());
    let placement = if steer {
        perf::placement::steer(&bed, forwarder_cpu, perf::load::LOAD_CPU)
    } else {
        perf::placement::Placement::default()
    };
    let epoch = Instant::now();
    let keys = HintKeys::new(
        HintKey::new(1, &(0u8..32).collect::<Vec<_>>()).unwrap(),
        None,
    )
    .unwrap();
    let sink_addr = SocketAddr::new(bed.transceiver.ip(ipv6), SINK_PORT);
    let vip = SocketAddr::new(bed.relay.ip(ipv6), 3478);
    let internal = SocketAddr::new(bed.relay.ip(ipv6), 40_000);
    let transceiver_net = if ipv6 { "fd77::/64" } else { "10.77.0.0/24" };
    // The downlink's frames and the v4-only setups take IPv4 addresses.
    let v4 = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => v4,
        SocketAddr::V6(_) => unreachable!("IPv6 runs uplink only, without v4-only setups"),
    };
    let metrics = SocketAddr::from(([127, 0, 0, 1], 9100));
    let exe_dir = std::env::current_exe()
        .expect("own path")
        .parent()
        .expect("a directory")
        .to_path_buf();
    let iface = |h: &testkit::testbed::Host| Iface::lookup(&h.ns, &h.ifname).expect("interface");
    let client_if = iface(&bed.client);
    let relay_if = iface(&bed.relay);
    let xcv_if = iface(&bed.transceiver);
    let (br_ns, br_if) = bed.bridge_side(&bed.client);
    let client_peer = Iface::lookup(&br_ns, &br_if).expect("bridge port");
    let (xcv_br_ns, xcv_br_if) = bed.bridge_side(&bed.transceiver);
    let xcv_peer = Iface::lookup(&xcv_br_ns, &xcv_br_if).expect("bridge port");
    // The client flows: on the client's own address when they fit, else on extra client
    // addresses from .100 on, added to its interface.
    let plan = if flows <= PORTS_PER_CLIENT_ADDR {
        FlowPlan::new(
            bed.client.ip(ipv6),
            FIRST_CLIENT_PORT,
            PORTS_PER_CLIENT_ADDR,
            flows,
        )
    } else {
        FlowPlan::new(
            Ipv4Addr::new(10, 77, 0, 100),
            FIRST_CLIENT_PORT,
            PORTS_PER_CLIENT_ADDR,
            flows,
        )
    }
    .unwrap_or_else(|e| panic!("--flows {flows}: {e}"));
    assert!(
        plan.addresses() <= 6,
        "--flows {flows}: at most 6 client addresses"
    );
    assert!(
        !ipv6 || plan.addresses() == 1,
        "--ipv6: at most {PORTS_PER_CLIENT_ADDR} flows (one client address)"
    );
    if plan.first_ip != bed.client.ip(ipv6) {
        for i in 0..plan.addresses() {
            let std::net::IpAddr::V4(extra) = plan.ip(i) else {
                unreachable!("IPv6 plans have one address")
            };
            bed.add_client_address(extra).expect("add a client address");
        }
    }

    let mut setups = vec![];
    for (key, setup) in [
        ("direct", Setup::Direct),
        ("naive", Setup::Naive),
        ("bare", Setup::Bare),
        ("nftables", Setup::Nftables),
        ("nginx", Setup::Nginx),
        ("quilkin", Setup::Quilkin { xdp: false }),
        ("quilkin-xdp", Setup::Quilkin { xdp: true }),
        ("xdp-relay", Setup::XdpRelay),
        (
            "mio",
            Setup::Relay {
                name: "relay-mio".into(),
                binary: "relay-mio",
                extra: vec![],
                busy_polls: false,
                peer_pass: false,
            },
        ),
        (
            "mio-busy",
            Setup::Relay {
                name: "relay-mio busy".into(),
                binary: "relay-mio",
                extra: ["--poll", "busy"].map(String::from).to_vec(),
                busy_polls: true,
                peer_pass: false,
            },
        ),
    ] {
        if wanted(key) {
            setups.push(setup);
        }
    }
    // relay-afxdp in each attach and poll mode, on the `xdp` crate's AF_XDP layer for
    // comparison, then with the in-kernel fast path (wakeup workers: they see only STUN
    // and new flows).
    let afxdp_rows: [(&str, &str, &str, &[&str]); 8] = [
        (
            "afxdp-skb-wakeup",
            "relay-afxdp skb wakeup",
            "skb",
            &["--poll", "wakeup"],
        ),
        (
            "afxdp-skb-busy",
            "relay-afxdp skb busy",
            "skb",
            &["--poll", "busy"],
        ),
        (
            "afxdp-native-wakeup",
            "relay-afxdp native wakeup",
            "native",
            &["--poll", "wakeup"],
        ),
        (
            "afxdp-native-busy",
            "relay-afxdp native busy",
            "native",
            &["--poll", "busy"],
        ),
        (
            "afxdp-crate-native-wakeup",
            "relay-afxdp on the xdp crate native wakeup",
            "native",
            &["--poll", "wakeup", "--xsk-layer", "xdp-crate"],
        ),
        (
            "afxdp-crate-native-busy",
            "relay-afxdp on the xdp crate native busy",
            "native",
            &["--poll", "busy", "--xsk-layer", "xdp-crate"],
        ),
        (
            "afxdp-fast-skb",
            "relay-afxdp fast path skb",
            "skb",
            &["--fast-path", "xdp"],
        ),
        (
            "afxdp-fast-native",
            "relay-afxdp fast path native",
            "native",
            &["--fast-path", "xdp"],
        ),
    ];
    for (key, name, xdp, flags) in afxdp_rows {
        if wanted(key) {
            let fast = flags.contains(&"--fast-path");
            let mut extra: Vec<String> = ["--interface", &bed.relay.ifname, "--xdp-mode", xdp]
                .map(String::from)
                .to_vec();
            extra.extend(flags.iter().map(|f| f.to_string()));
            setups.push(Setup::Relay {
                name: name.into(),
                binary: "relay-afxdp",
                extra,
                busy_polls: flags.contains(&"busy"),
                peer_pass: fast && xdp == "native",
            });
        }
    }

    let mut not_ipv6 = vec![];
    if ipv6 {
        setups.retain(|setup| {
            let speaks = setup.speaks_ipv6();
            if !speaks {
                not_ipv6.push(setup.name());
            }
            speaks
        });
    }
    let mut not_downlink = vec![];
    if downlink {
        setups.retain(|setup| {
            let carries = setup.carries_downlink(&plan);
            if !carries {
                not_downlink.push(setup.name());
            }
            carries
        });
    }

    let mut rows: Vec<Row> = vec![];
    let mut profiles = String::new();
    let mut quilkin_drops = None;
    let mut receive_buffer_drops: Vec<(String, u64)> = vec![];
    let rounds = if interleave { search.repeats.max(1) } else { 1 };
    let per_round = Search {
        repeats: if interleave { 1 } else { search.repeats },
        ..*search
    };
    for (round, setup) in (1..=rounds).flat_map(|round| setups.iter().map(move |s| (round, s))) {
        let last_round = round == rounds;
        let name = setup.name();
        if interleave {
            eprintln!("round {round} of {rounds}: {name}");
        }
        let to = |port: u16| SocketAddr::new(bed.relay.ip(ipv6), port);
        let (dst, dst_mac, framed) = match &setup {
            Setup::Direct => (sink_addr, xcv_if.mac, false),
            Setup::Naive => (to(4001), relay_if.mac, false),
            Setup::Bare => (to(4000), relay_if.mac, false),
            Setup::Nftables => (to(3478), relay_if.mac, false),
            Setup::Nginx => (to(4002), relay_if.mac, false),
            Setup::Quilkin { .. } => (to(4003), relay_if.mac, false),
            Setup::XdpRelay => (to(3478), relay_if.mac, false),
            Setup::Relay { .. } => (to(3478), relay_if.mac, true),
        };
        let running = match &setup {
            Setup::Direct => Running::Nothing,
            Setup::Naive => Running::Naive(
                perf::bare::NaiveForwarder::start_in(
                    Some(&bed.relay.ns),
                    dst,
                    sink_addr,
                    forwarder_cpu,
                )
                .expect("naive forwarder"),
            ),
            Setup::Bare => Running::Bare(
                BareForwarder::start_in(Some(&bed.relay.ns), dst, sink_addr, forwarder_cpu)
                    .expect("bare forwarder"),
            ),
            Setup::Nftables => Running::Nftables(
                perf::alternatives::Nftables::start(&bed.relay.ns, dst, sink_addr)
                    .expect("nftables (nft installed by scripts/bench.sh)"),
            ),
            Setup::Nginx => Running::Nginx(
                perf::alternatives::Nginx::start(
                    &bed.relay.ns,
                    v4(dst),
                    v4(sink_addr),
                    forwarder_cpu,
                    flows,
                )
                .expect("nginx (installed by scripts/bench.sh)"),
            ),
            Setup::Quilkin { xdp } => {
                let (ns, ifname) = bed.bridge_side(&bed.relay);
                let peer_pass = if *xdp {
                    let peer = Iface::lookup(&ns, &ifname).expect("the relay's bridge port");
                    Some(perf::xdp::PeerPass::attach(&peer).expect("XDP on the bridge port"))
                } else {
                    None
                };
                let quilkin = perf::alternatives::Quilkin::start(
                    &bed.relay.ns,
                    v4(dst),
                    v4(sink_addr),
                    forwarder_cpu,
                    xdp.then_some(bed.relay.ifname.as_str()),
                )
                .expect("quilkin (installed by scripts/bench.sh)");
                Running::Quilkin(quilkin, peer_pass)
            }
            Setup::XdpRelay => {
                let (ns, ifname) = bed.bridge_side(&bed.relay);
                let peer = Iface::lookup(&ns, &ifname).expect("the relay's bridge port");
                let rewrite = perf::xdp::Rewrite {
                    vip: v4(dst),
                    relay_mac: relay_if.mac,
                    to: v4(sink_addr),
                    to_mac: xcv_if.mac,
                };
                Running::XdpRelay(
                    perf::xdp::XdpRelay::attach(&relay_if, &peer, &rewrite).expect("XDP relay"),
                )
            }
            Setup::Relay {
                binary,
                extra,
                peer_pass,
                ..
            } => {
                let path = exe_dir.join(binary);
                assert!(
                    path.exists(),
                    "{} missing: cargo build --release -p {binary}",
                    path.display()
                );
                let mut command = bed.relay.command(path.to_str().unwrap());
                command
                    .args([
                        "--vip",
                        &vip.to_string(),
                        "--internal-addr",
                        &internal.to_string(),
                    ])
                    .args(["--workers", "1", "--cpus", &forwarder_cpu.to_string()])
                    .args(["--allow-transceiver-net", transceiver_net])
                    .args(["--metrics-addr", &metrics.to_string()])
                    // Every flow is made before the search and must outlive it; the
                    // admission limits meant for the internet would refuse them.
                    .args(["--idle-timeout", "15m"])
                    .args(["--new-flows-per-prefix", "1000000"])
                    .args(["--new-flows-per-worker", "1000000"])
                    .args(extra)
                    .env("UFRAG_RELAY_HINT_KEYS", format!("1:{KEY_HEX}"))
                    .env("RUST_LOG", "warn")
                    .stdout(Stdio::null());
                let mut relay = RelayChild(OwnedChild::spawn(&mut command).expect("relay starts"));
                wait_ready(Some(&bed.relay.ns), metrics, &name, READY, || {
                    relay.0.exit_report()
                });
                let peer_pass = peer_pass.then(|| {
                    let (ns, ifname) = bed.bridge_side(&bed.relay);
                    let peer = Iface::lookup(&ns, &ifname).expect("the relay's bridge port");
                    perf::xdp::PeerPass::attach(&peer).expect("XDP on the bridge port")
                });
                Running::Relay(relay, peer_pass)
            }
        };
        // Native XDP gives the relay's interface NAPI: run it threaded on the relay's core.
        let napi_threads = if steer {
            perf::placement::pin_napi_threads(&bed.relay.ns, &bed.relay.ifname, forwarder_cpu)
        } else {
            0
        };
        if napi_threads > 0 {
            eprintln!(
                "  {napi_threads} NAPI thread(s) of the relay's interface pinned to CPU {forwarder_cpu}"
            );
        }
        // The flows: one Binding Request per client address for our relays (a session
        // each), one datagram for the rest, all sent twice (the first datagram towards a
        // next hop AF_XDP has not resolved is dropped), paced so no buffer overflows.
        let flow_maker = Generator::for_flows(Some(&bed.client.ns), &plan, LATENCY_FLOWS, epoch)
            .expect("client sockets");
        if !matches!(setup, Setup::Direct) {
            let mut datagram = vec![0u8; 12];
            datagram[..2].copy_from_slice(&[0x80, 111]); // RTP-like
            for _ in 0..2 {
                perf::load::make_flows(
                    Some(&bed.client.ns),
                    &plan,
                    dst,
                    FLOWS_MADE_PER_SECOND,
                    |f| {
                        if framed {
                            perf::probe::binding_request(&keys, sink_addr, f)
                        } else {
                            datagram.clone()
                        }
                    },
                )
                .expect("the datagrams that make the flows");
                std::thread::sleep(Duration::from_millis(300));
            }
        }
        if framed {
            let active = testkit::http::get(Some(&bed.relay.ns), metrics, "/metrics")
                .map_or(0.0, |r| {
                    testkit::http::metric_sum(&r.1, "ufrag_relay_flows_active")
                });
            eprintln!("  {active} of {flows} flows made");
            if active < f64::from(flows) {
                eprintln!("  WARNING: {name} holds fewer flows than the load uses");
            }
        }
        // The sockets that made the flows send the load, or in live-frames mode the
        // latency trial.
        let sockets = perf::xdp::Sender::Sockets(flow_maker.with_payload_len(search.size), dst);
        let downlink_load = || {
            // Replies from the transceiver's veth: to the relay's internal port in a
            // frame naming the client, or (NAT, direct) to the client's port; counted on
            // the client's veth by their source port; no latency sample.
            let size = search.size;
            let (frame, plan, stamps, from_port) = match &setup {
                Setup::Direct => (
                    template_frame(xcv_if.mac, client_if.mac, sink_addr, plan.addr(0), size),
                    plan,
                    Stamps::DESTINATION,
                    SINK_PORT,
                ),
                Setup::Nftables => {
                    // The reply goes to the VIP at the client's port; conntrack undoes it.
                    let to_vip = FlowPlan {
                        first_ip: bed.relay.addr.into(),
                        ..plan
                    };
                    let frame =
                        template_frame(xcv_if.mac, relay_if.mac, sink_addr, to_vip.addr(0), size);
                    (frame, to_vip, Stamps::DESTINATION, vip.port())
                }
                _ => (
                    perf::xdp::framed_template(
                        (xcv_if.mac, relay_if.mac),
                        (v4(sink_addr), v4(to(internal.port()))),
                        (v4(plan.addr(0)), v4(to(vip.port()))),
                        size,
                    ),
                    plan,
                    Stamps::FRAMED_CLIENT,
                    vip.port(),
                ),
            };
            let frames = XdpGenerator::stamping(
                xcv_if.clone(),
                Some(&xcv_peer),
                frame,
                (&plan, stamps),
                epoch,
            )
            .expect("XDP generator");
            let sink = XdpSink::attach(&client_if, Counted::FromPort(from_port), NEVER_SAMPLED)
                .expect("XDP sink");
            let nothing = Sink::start_in(
                Some(&bed.client.ns),
                SocketAddr::from((bed.client.addr, 0)),
                false,
                epoch,
            )
            .expect("an idle latency socket");
            XdpLoad {
                generator: perf::xdp::Sender::LiveFrames(frames),
                latency_generator: None,
                sink,
                sampler: nothing,
                settle: SETTLE,
            }
        };
        let uplink_load = |sockets| {
            let (generator, latency_generator) = if live_frames {
                let frames = XdpGenerator::new(
                    client_if.clone(),
                    Some(&client_peer),
                    template_frame(client_if.mac, dst_mac, plan.addr(0), dst, search.size),
                    &plan,
                    epoch,
                )
                .expect("XDP generator");
                (perf::xdp::Sender::LiveFrames(frames), Some(sockets))
            } else {
                (sockets, None)
            };
            let sink = XdpSink::attach(&xcv_if, Counted::ToPort(SINK_PORT), SAMPLE_EVERY)
                .expect("XDP sink");
            let sampler = Sink::start_in(Some(&bed.transceiver.ns), sink_addr, framed, epoch)
                .expect("latency socket");
            XdpLoad {
                generator,
                latency_generator,
                sink,
                sampler,
                settle: SETTLE,
            }
        };
        let mut load: Box<dyn perf::load::Load> = match way {
            Way::Up => Box::new(uplink_load(sockets)),
            Way::Down => Box::new(downlink_load()),
            // The rate shared out between the ways; latency is sampled on the uplink.
            Way::Both => Box::new(perf::xdp::Conversation {
                up: uplink_load(sockets),
                down: downlink_load(),
                downlink_share,
            }),
        };
        if downlink {
            // A relay learns the client's next hop from its first replies (AF_XDP asks
            // the kernel): a short trial first, not counted.
            let _ = load.trial(1_000, Duration::from_millis(300));
        }
        let busy_polls = matches!(
            setup,
            Setup::Relay {
                busy_polls: true,
                ..
            }
        );
        let rcvbuf_before = perf::load::udp_receive_buffer_drops(Some(&bed.relay.ns));
        let runs = search_runs(
            &name,
            load.as_mut(),
            &per_round,
            || perf::load::cpu_busy_seconds(forwarder_cpu),
            forwarder_cpu,
        );
        let rcvbuf = perf::load::udp_receive_buffer_drops(Some(&bed.relay.ns)) - rcvbuf_before;
        match receive_buffer_drops.iter_mut().find(|(n, _)| *n == name) {
            Some((_, drops)) => *drops += rcvbuf,
            None => receive_buffer_drops.push((name.clone(), rcvbuf)),
        }
        let index = match rows.iter().position(|r| r.setup == name) {
            Some(index) => {
                rows[index].runs.extend(runs);
                index
            }
            None => {
                rows.push(Row {
                    setup: name.clone(),
                    runs,
                    fixed: perf::load::Trial::NONE,
                    busy_polls,
                });
                rows.len() - 1
            }
        };
        if !last_round {
            continue;
        }
        let row = &mut rows[index];
        row.fixed = load.latency_trial(search.fixed_pps, search.latency_trial);
        // Where the forwarder's core goes: one more trial at 70 % of the maximum,
        // sampled by Linux perf.
        let rate = row
            .max_pps()
            .map_or(search.fixed_pps, |m| (m.0 * 0.7) as u64)
            .max(1_000);
        let profile_dir = out.parent().unwrap_or(std::path::Path::new("."));
        match perf::profile::Recording::start(forwarder_cpu, profile_dir, "compare") {
            Some(recording) => {
                let _ = load.trial(rate, search.trial);
                if let Some(p) = recording.finish() {
                    profiles.push_str(&perf::profile::markdown(&name, rate, &p));
                }
            }
            None => eprintln!("  no profile: {} missing", perf::profile::LINUX_PERF),
        }
        if live_frames {
            // The live-frames generator busy-polls the tools' core: its busy share says
            // nothing; a tools limit shows as the generator falling short.
            for run in &mut row.runs {
                run.tools_busy = None;
            }
        }
        if let Running::Quilkin(q, _) = &running {
            let drops = q.drops();
            eprintln!("  Quilkin's own drop counters: {drops:?}");
            quilkin_drops = Some(drops);
        }
        drop(load);
        drop(running);
    }
    let environment = perf::environment::record(
        &bed,
        &placement,
        live_frames,
        (perf::load::LOAD_CPU, forwarder_cpu),
    );
    drop(bed);

    let share_text = if downlink_share == 0.5 {
        "Both directions at once, as in a conversation: each trial offers half its rate uplink and half \
         downlink"
            .to_string()
    } else {
        format!(
            "Both directions at once, {:.0} % of each trial's rate downlink and {:.0} % uplink (the model \
             speaking more than the user)",
            downlink_share * 100.0,
            (1.0 - downlink_share) * 100.0
        )
    };
    let generator_text = if way == Way::Both {
        &format!(
            "{share_text}, side by side, and counts both (the rate shown is the sum). Uplink, a BPF_PROG_RUN \
         live-frames generator on the client's veth, counted in XDP on the transceiver's veth; downlink, \
         a second one on the transceiver's veth sending replies (to our relays a frame to the internal \
         port naming the flow's client, to nftables a datagram to the VIP at the client's port, on the \
         direct path a datagram to the client), counted in XDP on the client's veth by source port. Both \
         generators busy-poll CPU 0 (so the tools core's busy share is not shown; a tools limit shows as \
         the generators falling short); latency is sampled on the uplink only"
        )
    } else if downlink {
        "The generator transmits prebuilt replies from the transceiver's veth with one BPF_PROG_RUN in \
         live-frames mode, paced by its program against the kernel clock (it busy-polls CPU 0, so the tools \
         core's busy share is not shown; a tools limit shows as the generator falling short): to our relays a \
         frame to the internal port naming the flow's client, to nftables a datagram to the VIP at the \
         client's port, on the direct path a datagram to the client; the sink counts them in XDP on the \
         client's veth by source port and drops them (no latency is sampled downlink)"
    } else if live_frames {
        "The generator transmits prebuilt frames from the client's veth with one BPF_PROG_RUN in live-frames \
         mode, paced by its program against the kernel clock (it busy-polls CPU 0, so the tools core's busy \
         share is not shown; a tools limit shows as the generator falling short)"
    } else {
        "The generator sends with sendmmsg from the sockets of the first 256 flows, paced in 0.5 ms slices"
    };
    let placement_text = if steer {
        "everything the relay's path costs in the kernel is steered there too (RPS and threaded NAPI of \
         the relay's interface), so \"forwarder µs/pkt\" is all of the relay path's cost"
    } else {
        "its kernel receive work is not steered (veth runs it on the sender's CPU: the tools' core), so \
         \"forwarder µs/pkt\" counts what the forwarder does from its socket or XDP program on; native XDP \
         and nftables run on the tools' core (use --steer to move them)"
    };
    let addresses = plan.addresses();
    let sink_text = if way == Way::Both {
        format!("; the uplink's sink passes one in {SAMPLE_EVERY} to a socket for latency")
    } else if downlink {
        String::new()
    } else {
        format!(
            "; the sink counts frames in XDP on the transceiver's veth and passes one in {SAMPLE_EVERY} to a \
             socket for latency"
        )
    };
    let mut notes = format!(
        "\n## How this was measured\n\nTopology: a one-armed relay behind a Linux bridge (client, relay and \
         transceiver namespaces, each a veth to a bridge namespace). The load is spread evenly over {flows} client \
         flows ({addresses} client address(es), up to {PORTS_PER_CLIENT_ADDR} source ports each), every one made \
         before the search: a Binding Request of its own session for our relays, one datagram for the others \
         (flows live 15 minutes in every setup that keeps them). {generator_text}{sink_text}. Every \
         forwarder runs on CPU {forwarder_cpu} and \"forwarder µs/pkt\" is that CPU's busy time (user, system and softirq) per \
         forwarded packet; {placement_text}. A busy-polling worker keeps its core 100 % busy by construction, \
         so its µs/pkt is an upper bound. One worker per setup: this host's {vcpus} vCPUs leave one core to \
         the forwarder (two workers on loopback: `perf loopback`).\n\n",
        vcpus = environment["vcpus"],
    );
    notes.push_str(&format!(
        "Where the loss happened: datagrams the relay host's kernel dropped because a socket's receive \
         buffer was full (`Udp: RcvbufErrors` in its namespace), over each setup's searches: {}. A setup \
         that loses while its core is not saturated and shows drops here does not drain its socket fast \
         enough (wake-ups, batching), not for want of CPU.\n\n",
        receive_buffer_drops
            .iter()
            .map(|(name, drops)| format!("{name}: {drops}"))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    if interleave {
        notes.push_str(&format!(
            "The searches ran in {rounds} interleaved rounds: every setup once per round, started \
             afresh, so drift in this host's speed falls on every row alike; the latency trial and the \
             profile come from the last round.\n\n"
        ));
    }
    let hops = if forwarder_cpu == perf::load::LOAD_CPU {
        "none: the forwarder shares the tools' core".to_string()
    } else if steer {
        format!(
            "two for every forwarder, busy-polling or not (RPS to CPU {forwarder_cpu}, and back to CPU {} \
             for the bridge's share of what the forwarder sends); none on the direct path",
            perf::load::LOAD_CPU
        )
    } else {
        "two for a forwarder that sleeps (its own wake-up, then the sink's), one for a busy-polling one \
         (the sink's wake-up); none on the direct path"
            .to_string()
    };
    notes.push_str(&format!(
        "Cross-core hops in a datagram's path in the latency trial (the sender and the sink run on CPU {}; \
         each hop is an inter-processor interrupt, on a VM a trip through the hypervisor): {hops}. \
         `--no-steer` leaves a busy-polling forwarder one hop; `--forwarder-cpu {}` none.\n\n",
        perf::load::LOAD_CPU,
        perf::load::LOAD_CPU
    ));
    if rows.iter().any(|r| r.setup.contains("XDP mode")) {
        notes.push_str(
            "Quilkin's XDP mode answers a datagram by swapping the Ethernet addresses of the frame it came \
             in (no neighbour lookup). Here the transceiver is on the relay's own link, so its frames to the \
             transceiver leave addressed to the client's MAC (seen with tcpdump on the client's veth: \
             10.77.0.2:617xx → 10.77.0.3:41000 to the client) and none arrive: that row has no loss-free \
             trial. It needs a router as the next hop on both sides.\n\n",
        );
    }
    if let Some(drops) = quilkin_drops {
        let listed: Vec<String> = drops.iter().map(|(r, n)| format!("{r}: {n}")).collect();
        notes.push_str(&format!(
            "Quilkin's own count of what it dropped over its whole row (`quilkin_packets_dropped_total` by \
             reason): {}.\n\n",
            if listed.is_empty() {
                "none".to_string()
            } else {
                listed.join(", ")
            }
        ));
    }
    if !not_ipv6.is_empty() {
        notes.push_str(&format!(
            "Not measured over IPv6: {} (their configurations here, and the in-kernel rewrite, are \
             IPv4 only).\n\n",
            not_ipv6.join(", ")
        ));
    }
    if !not_downlink.is_empty() {
        notes.push_str(&format!(
            "Not measured with downlink traffic: {} (they forward one way only, answer from upstream ports of their own \
             choosing, or, for nftables over several client addresses, may have moved ports in SNAT).\n\n",
            not_downlink.join(", ")
        ));
    }
    if let Some(svg) = out
        .with_extension("svg")
        .file_name()
        .and_then(|n| n.to_str())
    {
        notes.insert_str(
            0,
            &format!("\n![max loss-free pps and forwarder µs per packet]({svg})\n"),
        );
    }
    notes.push_str(&perf::environment::markdown(&environment));
    notes.push_str(&format!(
        "\n## Where the time goes\n\nCPU {forwarder_cpu} (the forwarder's core) sampled by Linux perf (`perf record -e \
         cpu-clock -C {forwarder_cpu}`, 1999 Hz) over one more trial per setup at 70 % of its maximum: the busiest \
         functions, in percent of the core's busy samples (idle is not sampled). On a VM the CPU clock's \
         samples land where interrupts are re-enabled, so softirq work shows as `handle_softirqs`; \
         `native_write_msr` is RPS's inter-processor interrupt (`net_rps_send_ipi` → `x2apic_send_IPI`, \
         seen with `perf record -g`): the placement sends the bridge's share of every packet the relay \
         transmits back to CPU 0, and on a VM each such interrupt is an exit to the hypervisor. A NIC's \
         transmit path has no such cost, so these rows overstate a real host's kernel share.\n",
    ));
    if profiles.is_empty() {
        notes.push_str(&format!(
            "\nNo profiles: {} (Debian's linux-perf) is missing.\n",
            perf::profile::LINUX_PERF
        ));
    }
    notes.push_str(&profiles);
    let (arrow, way) = match way {
        Way::Down => ("transceiver → client".to_string(), "downlink"),
        Way::Up => ("client → transceiver".to_string(), "uplink"),
        Way::Both => (
            if downlink_share == 0.5 {
                "half client → transceiver and half transceiver → client, at once".to_string()
            } else {
                format!(
                    "{:.0} % transceiver → client and {:.0} % client → transceiver, at once",
                    downlink_share * 100.0,
                    (1.0 - downlink_share) * 100.0
                )
            },
            "both directions",
        ),
    };
    let report = perf::report::markdown(
        (
            &format!(
                "Side by side on the netns testbed ({way}, {flows} flows{}): is kernel bypass warranted?",
                if ipv6 { ", IPv6" } else { "" }
            ),
            &format!("{}-byte datagrams, {arrow}", search.size),
        ),
        &rows,
        search.fixed_pps,
        &command,
        &notes,
    );
    write_report(out, &report, Some(perf::report::json(&rows, &environment)));
    std::fs::write(
        out.with_extension("svg"),
        perf::report::svg(&rows, search.fixed_pps),
    )
    .expect("write svg");
}

fn loopback(search: &Search, out: &std::path::Path) {
    use perf::load::SocketLoad;
    perf::load::pin_to_load_cpu();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let epoch = Instant::now();
    let keys = HintKeys::new(
        HintKey::new(1, &(0u8..32).collect::<Vec<_>>()).unwrap(),
        None,
    )
    .unwrap();
    let mut rows = vec![];

    // Setup 1: bare forwarder.
    {
        let sink = Sink::start(SocketAddr::from((loopback_ip(2), 0)), false, epoch).expect("sink");
        let fwd = BareForwarder::start(SocketAddr::from((loopback_ip(3), 4000)), sink.addr(), 1)
            .expect("bare forwarder");
        let mut generator = Generator::new(loopback_ip(4), CLIENTS, epoch).expect("generator");
        let pid = std::process::id();
        let mut load = SocketLoad {
            generator: &mut generator,
            sink: &sink,
            to: fwd.listen,
            settle: SETTLE,
        };
        rows.push(measure(
            "bare mmsg forwarder",
            &mut load,
            search,
            false,
            || cpu_seconds(pid, Some("bare-fwd")),
        ));
    }

    // Setups 2 and 3: relay-mio with 1 and 2 workers.
    for workers in [1usize, 2] {
        let sink = Sink::start(
            SocketAddr::from((loopback_ip(10 + workers as u8), 0)),
            true,
            epoch,
        )
        .expect("sink");
        let vip = SocketAddr::from((loopback_ip(20 + workers as u8), 3478));
        let internal = SocketAddr::from((loopback_ip(30 + workers as u8), 40_000));
        let metrics = SocketAddr::from((loopback_ip(30 + workers as u8), 9100));
        let relay = start_relay(workers, vip, internal, metrics);
        let mut generator =
            Generator::new(loopback_ip(40 + workers as u8), CLIENTS, epoch).expect("generator");
        let transceiver = sink.addr();
        generator
            .send_each(vip, FLOWS_MADE_PER_SECOND, |i, _| {
                perf::probe::binding_request(&keys, transceiver, i as u32)
            })
            .expect("binding requests");
        std::thread::sleep(Duration::from_millis(300));
        let pid = relay.0.id();
        let mut load = SocketLoad {
            generator: &mut generator,
            sink: &sink,
            to: vip,
            settle: SETTLE,
        };
        rows.push(measure(
            &format!(
                "relay-mio, {workers} worker{}",
                if workers > 1 { "s" } else { "" }
            ),
            &mut load,
            search,
            false,
            || cpu_seconds(pid, Some("relay-w")),
        ));
    }

    let notes = "\nOn loopback the generator (sendmmsg) and the sink (recvmmsg) run pinned to CPU 0; the bare \
                 forwarder and a 1-worker relay on CPU 1; a 2-worker relay on CPUs 0 and 1 (sharing CPU 0 with \
                 the tools). \"forwarder µs/pkt\" is the CPU time of the forwarding threads only.\n";
    let traffic = format!(
        "{}-byte datagrams, client → transceiver, {CLIENTS} flows",
        search.size
    );
    let report = perf::report::markdown(
        (
            "Loopback forwarding: relay-mio against a bare mmsg forwarder",
            &traffic,
        ),
        &rows,
        search.fixed_pps,
        &command,
        notes,
    );
    write_report(
        out,
        &report,
        Some(perf::report::json(&rows, &serde_json::json!({}))),
    );
}

/// Searches `load` `search.repeats` times, recording at each maximum what the forwarder
/// (`forwarder_busy`: its busy seconds so far), the tools' core and the machine spent;
/// then one trial at the fixed rate for latency.
fn measure(
    name: &str,
    load: &mut dyn perf::load::Load,
    search: &Search,
    busy_polls: bool,
    forwarder_busy: impl Fn() -> f64,
) -> Row {
    let runs = search_runs(name, load, search, forwarder_busy, FORWARDER_CPU);
    let fixed = load.latency_trial(search.fixed_pps, search.latency_trial);
    Row {
        setup: name.to_string(),
        runs,
        fixed,
        busy_polls,
    }
}

/// `search.repeats` searches for the highest loss-free rate of `load`, each with what the
/// forwarder's core, the tools' core and the machine spent per packet at its best trial,
/// and the host's wake-up round trip between the tools' core and `forwarder_cpu` read
/// just before it.
fn search_runs(
    name: &str,
    load: &mut dyn perf::load::Load,
    search: &Search,
    forwarder_busy: impl Fn() -> f64,
    forwarder_cpu: usize,
) -> Vec<Run> {
    use perf::load::{LOAD_CPU, cpu_busy_seconds, machine_busy_seconds};
    eprintln!("measuring {name}…");
    let mut runs = vec![];
    for repeat in 0..search.repeats.max(1) {
        let host_wake = perf::wake::round_trip(LOAD_CPU, forwarder_cpu, perf::wake::ROUND_TRIPS);
        if let Some(w) = host_wake {
            eprintln!("  host wake-up round trip: {}", w.label());
        }
        let mut costs = std::collections::HashMap::new();
        let run = max_loss_free(
            |rate| {
                let (f0, t0, m0) = (
                    forwarder_busy(),
                    cpu_busy_seconds(LOAD_CPU),
                    machine_busy_seconds(),
                );
                let wall = Instant::now();
                let t = load.trial(rate, search.trial);
                let wall = wall.elapsed().as_secs_f64();
                let costs_now = (
                    forwarder_busy() - f0,
                    cpu_busy_seconds(LOAD_CPU) - t0,
                    machine_busy_seconds() - m0,
                );
                costs.insert(rate, (costs_now, t.received, wall));
                eprintln!(
                    "  [{}/{}] {rate:>8} pps offered: achieved {:>8}, received {:>9}, loss {:.3} %",
                    repeat + 1,
                    search.repeats,
                    t.sent_pps,
                    t.received,
                    t.loss() * 100.0
                );
                t
            },
            search.start_pps,
            search.max_pps,
            search.precision,
        );
        let at_best = run.best.and_then(|b| costs.get(&b.offered_pps).copied());
        runs.push(Run {
            forwarder_us_per_packet: at_best
                .map(|((f, _, _), received, _)| f * 1e6 / received.max(1) as f64),
            forwarder_busy: at_best.map(|((f, _, _), _, wall)| f / wall),
            tools_busy: at_best.map(|((_, t, _), _, wall)| t / wall),
            machine_us_per_packet: at_best
                .map(|((_, _, m), received, _)| m * 1e6 / received.max(1) as f64),
            host_wake,
            search: run,
        });
    }
    runs
}

/// On SIGINT, SIGTERM or SIGHUP (a run stopped by hand or by a CI timeout), deletes
/// `namespaces` (and with them every veth, XDP program and nftables rule in them) before
/// exiting: a long run would otherwise leave its testbed behind, as no destructor runs.
/// The relays and tools it started die with it (`PR_SET_PDEATHSIG`).
fn delete_on_interrupt(namespaces: &[String]) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let namespaces = namespaces.to_vec();
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("WARNING: no signal handler ({e}): an interrupted run leaves its testbed");
            return;
        }
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            eprintln!("signal {signal}: deleting the testbed's namespaces, then exiting");
            for ns in namespaces.iter().rev() {
                let _ = Command::new("ip").args(["netns", "del", ns]).status();
            }
            std::process::exit(128 + signal);
        }
    });
}

/// The relay's drop counters by reason, summed over workers.
fn relay_drops(metrics: SocketAddr) -> std::collections::BTreeMap<String, f64> {
    let text = testkit::http::get(None, metrics, "/metrics").map_or(String::new(), |r| r.1);
    testkit::http::metric_by_label(&text, "ufrag_relay_drops_total", "reason")
}

fn resilience(n: usize, talk: Duration, junk_factor: u64, out: &std::path::Path) {
    use perf::resilience::{JUNK_KINDS, LiveRun, gap_ms, junk_flood, talk_while};
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
    let keys = HintKeys::new(
        HintKey::new(1, &(0u8..32).collect::<Vec<_>>()).unwrap(),
        None,
    )
    .unwrap();
    // An authentic request for a session nobody holds (the transceiver knows no such
    // ufrag): the first copy makes a flow, every other copy is a replay.
    let valid = perf::probe::binding_request(&keys, worker, 201);
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
