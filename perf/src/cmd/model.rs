//! `ufrag-perf model`: what the network bridge to a model backend costs. The built-in
//! echo against the same echo behind `--model ws://` (the reference `model-echo` on
//! loopback), in interleaved rounds: the round trip the bridge adds to an `events`
//! message (the path audio takes too), the sessions one core carries (CPU per session of
//! every transceiver thread at a fixed load, below 1 % loss), the largest load one
//! worker holds, and where the time goes. `--baseline` adds another build of the
//! transceiver over the bridge to the same rounds, so a change is shown beside the old.
//! `--bundles` asks the same of the internal leg instead: the built-in echo behind
//! relay-mio, single frames against bundles both ways. `--pcm FORMAT` prices PCM16 audio
//! against Opus passthrough: the echo over the bridge twice, one backend choosing Opus,
//! the other PCM (the transceiver decodes and encodes every frame), and what the codec
//! adds to the audio's path (its time per frame, the encoder's lookahead).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use ufrag_testbed::OwnedChild;

use super::children::{
    SESSIONS_CLIENT_CPU, TRANSCEIVER_CPU, TransceiverChild, loopback_ip, sibling_binary,
    start_relay_with, start_transceiver, start_transceiver_from, write_report,
};
use ufrag_model_protocol::audio::AudioFormat;

use crate::bench::cpu::cpu_seconds;
use crate::bench::rounds::{Order, Rounds};
use crate::bench::sessions::{LoadPlan, Talkers, load_step, setup_times};
use crate::bench::stats::{Interval, median_interval};

/// The confidence of the intervals in the report.
const CONFIDENCE: f64 = 0.95;

/// What a run compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Question {
    /// The built-in echo against the echo over the WebSocket bridge (direct mode).
    Bridge,
    /// Behind relay-mio: single frames against bundles both ways (the built-in echo).
    Bundles,
    /// Over the bridge: PCM16 in this format against Opus passthrough.
    Pcm(AudioFormat),
}

impl Question {
    /// The subject's sessions per core over the reference's that the goal asks for: the
    /// bridge should keep 80 % of the built-in's; bundles should give 120 % of single
    /// frames'. PCM has no goal: the report prices it.
    fn goal_ratio(self) -> Option<f64> {
        match self {
            Question::Bridge => Some(0.8),
            Question::Bundles => Some(1.2),
            Question::Pcm(_) => None,
        }
    }

    /// How the verdict names the subject and the reference.
    fn words(self) -> (&'static str, &'static str) {
        match self {
            Question::Bridge => ("Over the bridge", "the built-in's"),
            Question::Bundles => ("With bundles both ways", "single frames'"),
            Question::Pcm(_) => ("With PCM16", "Opus passthrough's"),
        }
    }
}

/// The built-in echo against the same echo over the WebSocket bridge.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Rounds of the latency comparison (each: every setup, the order rotating).
    #[arg(long, default_value_t = 8)]
    pub rounds: usize,
    /// Sessions per setup per round for latency (each sends 10 pings after its first echo).
    #[arg(long, default_value_t = 20)]
    pub sessions_per_round: usize,
    /// Rounds of the cost comparison (each: every setup at `--cost-sessions`, the order
    /// rotating).
    #[arg(long, default_value_t = 6)]
    pub cost_rounds: usize,
    /// Concurrent sessions of the cost comparison: a load every setup holds.
    #[arg(long, default_value_t = 300)]
    pub cost_sessions: usize,
    /// Session counts tried for the largest load held (one run, every setup at each, until
    /// each loses 1 %); `0`: not tried.
    #[arg(long, value_delimiter = ',', default_value = "400,500,600,700,800,900")]
    pub steps: Vec<usize>,
    /// How long every client talks in each load step.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub talk: Duration,
    /// Sessions at which each setup's transceiver is profiled once more (Linux perf on
    /// every thread of its process, for the report's appendix); 0: no profile.
    #[arg(long, default_value_t = 300)]
    pub profile_at: usize,
    /// Another build of the transceiver (e.g. the last commit's), run over the bridge as
    /// a third setup in the same rounds: a change shown beside the old.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// The internal leg instead of the model seam: two transceivers with the built-in
    /// echo, each behind its own relay-mio (one worker, on the clients' CPU); one pair
    /// sends single frames, the other bundles both ways (`--bundle-to` on both).
    #[arg(long, conflicts_with = "baseline")]
    pub bundles: bool,
    /// PCM16 against Opus passthrough instead: the echo over the bridge twice, one
    /// `model-echo` choosing Opus, the other this format (`pcm16/16000`, `pcm16/24000` or
    /// `pcm16/48000`), so the transceiver decodes every client packet and encodes every
    /// frame it plays; and the codec's time per frame.
    #[arg(long, conflicts_with_all = ["baseline", "bundles"], value_parser = parse_pcm)]
    pub pcm: Option<AudioFormat>,
    /// Where to write the Markdown report (JSON beside it).
    #[arg(long, default_value = "target/perf/model.md")]
    pub out: PathBuf,
}

/// A PCM format for `--pcm`.
fn parse_pcm(label: &str) -> Result<AudioFormat, String> {
    match AudioFormat::parse(label) {
        Some(format @ AudioFormat::Pcm16(_)) => Ok(format),
        _ => Err("pcm16/16000, pcm16/24000 or pcm16/48000".into()),
    }
}

/// One setup: its name and its transceiver's signaling address.
struct Setup {
    name: String,
    http: SocketAddr,
    /// Its media socket (clients, in direct mode; the relay's frames, behind one).
    media: SocketAddr,
    /// Its model runs over the bridge to this `model-echo` (whose CPU is its).
    backend_pid: Option<u32>,
    child: TransceiverChild,
    /// The relay in front of it (`--bundles`) and its metrics address, stopped with it.
    relay: Option<(super::children::RelayChild, SocketAddr)>,
}

/// The reference backend choosing `audio`, started next to `ufrag-perf` (killed on
/// drop).
fn start_model_echo(listen: SocketAddr, audio: AudioFormat) -> OwnedChild {
    let mut command = Command::new(sibling_binary("model-echo", "ufrag-model-servers"));
    command
        .args(["--listen", &listen.to_string(), "--audio", audio.label()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = OwnedChild::spawn(&mut command).expect("model-echo starts");
    // It binds before it prints; the transceiver retries until it answers anyway.
    std::thread::sleep(Duration::from_millis(200));
    child
}

/// `median [low–high]` with `decimals`, or a dash.
fn interval_with(i: Option<Interval>, decimals: usize) -> String {
    i.map_or("–".into(), |i| {
        format!(
            "{:.decimals$} [{:.decimals$}–{:.decimals$}]",
            i.median, i.low, i.high
        )
    })
}

fn interval_text(i: Option<Interval>) -> String {
    interval_with(i, 3)
}

/// The pairs compared, `(subject, reference, what the difference is called)`.
fn comparisons(question: Question, setups: usize) -> Vec<(usize, usize, &'static str)> {
    match question {
        Question::Bundles => return vec![(1, 0, "bundles against single frames")],
        Question::Pcm(_) => return vec![(1, 0, "PCM16 against Opus passthrough")],
        Question::Bridge => {}
    }
    let mut pairs = vec![(1, 0, "the bridge against the built-in")];
    if setups > 2 {
        pairs.push((2, 0, "the baseline's bridge against the built-in"));
        pairs.push((1, 2, "this build's bridge against the baseline's"));
    }
    pairs
}

/// One load step of `plan.sessions` on `setup`: its result and the CPU shares (percent
/// of a core) of the transceiver (all threads) and of the backend.
fn load(
    setup: &Setup,
    ips: &[Ipv4Addr],
    sessions: usize,
    talk: Duration,
) -> (crate::bench::sessions::LoadStep, f64, f64) {
    let pid = setup.child.0.id();
    let backend = setup.backend_pid;
    let counters = || {
        [
            cpu_seconds(pid, None),
            backend.map_or(0.0, |pid| cpu_seconds(pid, None)),
        ]
    };
    let plan = LoadPlan {
        sessions,
        talk,
        threads: 1,
        talkers: Talkers::Recorded,
        cpu: Some(SESSIONS_CLIENT_CPU),
    };
    let (step, [before, after]) = load_step(setup.http, ips, plan, counters);
    let share = |k: usize| (after[k] - before[k]) / step.talk_seconds * 100.0;
    (step, share(0), share(1))
}

/// The backend's CPU cell: a dash for the built-in echo, which has none.
fn backend_cell(setup: &Setup, cpu_percent: f64) -> String {
    if setup.backend_pid.is_none() {
        "–".into()
    } else {
        format!("{cpu_percent:.0} %")
    }
}

fn held(step: &crate::bench::sessions::LoadStep) -> bool {
    step.connected == step.sessions && step.loss() < 0.01
}

/// The appendix: each setup's transceiver profiled (every thread) while `sessions`
/// clients talk.
fn profiles(setups: &[Setup], ips: &[Ipv4Addr], sessions: usize, talk: Duration) -> String {
    let mut out = format!(
        "\n## Appendix: where each transceiver's time goes at {sessions} sessions\n\nOne more \
         load step per setup while Linux perf samples every thread of its transceiver's \
         process (`cpu-clock`, {talk:?} of talk); shares are of the process's busy samples. \
         Over the same talk the worker's core is traced (system calls, context switches, \
         softirqs) and its time split by leg, per media datagram (in or out).\n"
    );
    let dir = std::env::temp_dir();
    for setup in setups {
        eprintln!("profile: {sessions} sessions, {}…", setup.name);
        let pid = setup.child.0.id();
        let name = format!("ufrag-perf-model-{}-{pid}", std::process::id());
        // Called at the talk's start (starts recording) and at its end (stops it). The
        // worker's core is traced leg by leg over the same talk.
        let mut started = false;
        let mut recording = None;
        let mut profile = None;
        let mut leg_recording = None;
        let mut legs = None;
        let plan = LoadPlan {
            sessions,
            talk,
            threads: 1,
            talkers: Talkers::Recorded,
            cpu: Some(SESSIONS_CLIENT_CPU),
        };
        let (step, _) = load_step(setup.http, ips, plan, || {
            if !started {
                started = true;
                recording = crate::bench::profile::Recording::start_process(pid, &dir, &name);
                leg_recording =
                    crate::bench::legs::LegRecording::start(TRANSCEIVER_CPU, &dir, &name);
            } else {
                profile = recording
                    .take()
                    .and_then(crate::bench::profile::Recording::finish);
                legs = leg_recording.take().and_then(|r| r.finish(setup.media));
            }
        });
        let title = format!(
            "{}: {} of {sessions} connected, {:.2} % loss",
            setup.name,
            step.connected,
            step.loss() * 100.0
        );
        match profile {
            Some(p) => out.push_str(&crate::bench::profile::process_markdown(&title, &p)),
            None => out.push_str(&format!(
                "\n### {title}\n\nNo profile: {} is missing or would not record.\n",
                crate::bench::profile::LINUX_PERF
            )),
        }
        if let Some(legs) = legs {
            // Every audio packet crosses the media socket twice: in, and echoed out.
            out.push_str(&crate::bench::legs::markdown(
                &format!(
                    "{}: the worker's core (CPU {TRANSCEIVER_CPU}) by leg",
                    setup.name
                ),
                (step.sent + step.received) as u64,
                &legs,
                ["clients (media)", "the model and signaling"],
            ));
        }
    }
    out
}

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    if let Some(baseline) = options.baseline.as_ref().filter(|b| !b.exists()) {
        eprintln!(
            "ufrag-perf model: --baseline {} does not exist",
            baseline.display()
        );
        return 2;
    }
    let backend_addr = SocketAddr::from((loopback_ip(90), 9000));
    let model = start_model_echo(backend_addr, AudioFormat::Opus);
    let question = match (options.bundles, options.pcm) {
        (true, _) => Question::Bundles,
        (false, Some(format)) => Question::Pcm(format),
        (false, None) => Question::Bridge,
    };
    // The PCM backend, beside the Opus one.
    let pcm_addr = SocketAddr::from((loopback_ip(90), 9001));
    let pcm_model = options.pcm.map(|format| start_model_echo(pcm_addr, format));
    let setups = match question {
        Question::Bridge => bridge_setups(&options, backend_addr, model.id()),
        Question::Bundles => bundle_setups(),
        Question::Pcm(format) => pcm_setups(
            format,
            (backend_addr, model.id()),
            (pcm_addr, pcm_model.as_ref().map_or(0, |m| m.id())),
        ),
    };
    let n = setups.len();

    let mut report = String::new();
    let intro = match question {
        Question::Bridge => format!(
            "# The model seam: the built-in echo against the same echo over the WebSocket bridge\n\n\
             Command: `{command}`\n\n\
             {n} transceivers in direct mode, each with one worker pinned to CPU {TRANSCEIVER_CPU}; \
             one echoes in its worker, the other{} sends every message over one WebSocket to \
             `model-echo` on loopback (its bridge thread unpinned), which echoes it back. str0m \
             clients on CPU {SESSIONS_CLIENT_CPU}. Every comparison runs the setups in the same \
             rounds, the order rotating.\n",
            if n > 2 { "s" } else { "" }
        ),
        Question::Pcm(format) => format!(
            "# The model seam: PCM16 against Opus passthrough\n\n\
             Command: `{command}`\n\n\
             Two transceivers in direct mode, each with one worker pinned to CPU \
             {TRANSCEIVER_CPU}, each sending every message over one WebSocket to its own \
             `model-echo` on loopback (its bridge thread unpinned), which echoes it back. One \
             backend's hello chooses `opus`: the client's packets pass through untouched. The \
             other's chooses `{}`: the bridge thread decodes every client packet to PCM and \
             encodes every 20 ms of the PCM echoed back (libopus, 32 kbit/s). str0m clients on \
             CPU {SESSIONS_CLIENT_CPU}. Every comparison runs the setups in the same rounds, the \
             order rotating.\n",
            format.label()
        ),
        Question::Bundles => format!(
            "# The internal leg: single frames against bundles both ways\n\n\
             Command: `{command}`\n\n\
             Two transceivers with the built-in echo, each with one worker pinned to CPU \
             {TRANSCEIVER_CPU}, each behind its own relay-mio (one worker, on CPU \
             {SESSIONS_CLIENT_CPU} with the str0m clients). One pair sends single frames; the \
             other bundles both ways (`--bundle-to` on the relay and the transceiver, MTU \
             1500): what one receive batch has for the other side leaves in one datagram. \
             Every comparison runs the setups in the same rounds, the order rotating.\n"
        ),
    };
    report.push_str(&intro);

    let mut failures = vec![];
    if options.rounds > 0 {
        report.push_str(&latency_rounds(question, &setups, &options, &mut failures));
    }
    if let Question::Pcm(format) = question {
        report.push_str(&codec_cost(format));
    }
    let ips: Vec<Ipv4Addr> = (110..120).map(loopback_ip).collect();
    if options.cost_rounds > 0 {
        report.push_str(&cost_rounds(question, &setups, &ips, &options));
    }
    if options.steps.iter().any(|&s| s > 0) {
        report.push_str(&largest_load(&setups, &ips, &options));
    }
    if options.profile_at > 0 {
        report.push_str(&profiles(&setups, &ips, options.profile_at, options.talk));
    }
    if question == Question::Bundles {
        report.push_str(&relay_counts(&setups));
    }
    drop(setups);
    drop(model);
    drop(pcm_model);
    write_report(
        &options.out,
        &report,
        Some(super::children::tables_json(&report).to_string()),
    );
    // Every failed round is a `- failed:` line of the report, so the report's own failed
    // rows name them; a failure kept but not written still fails the run.
    crate::bench::sessions::failed_rows::exit_code("model", &options.out, &report)
        .max(i32::from(!failures.is_empty()))
}

/// The model seam's setups: the built-in echo and the echo over the bridge to
/// `backend` (process `backend_pid`), in direct mode, and `--baseline`'s build (checked
/// to exist) over the bridge.
fn bridge_setups(options: &Options, backend: SocketAddr, backend_pid: u32) -> Vec<Setup> {
    let url = format!("ws://{backend}/");
    let this_build = sibling_binary("transceiver", "ufrag-transceiver");
    let mut plans: Vec<(String, PathBuf, bool)> = vec![
        ("built-in echo".into(), this_build.clone(), false),
        ("echo over the WebSocket bridge".into(), this_build, true),
    ];
    if let Some(baseline) = &options.baseline {
        plans.push((
            format!("echo over the bridge, baseline `{}`", baseline.display()),
            baseline.clone(),
            true,
        ));
    }
    plans
        .into_iter()
        .enumerate()
        .map(|(i, (name, binary, bridged))| {
            let ip = loopback_ip(91 + i as u8);
            let http = SocketAddr::from((ip, 8080));
            let media = SocketAddr::from((ip, 41_000));
            let extra: Vec<&str> = if bridged {
                vec!["--model", url.as_str()]
            } else {
                vec![]
            };
            Setup {
                name,
                http,
                media,
                backend_pid: bridged.then_some(backend_pid),
                child: start_transceiver_from(&binary, http, media, None, &extra),
                relay: None,
            }
        })
        .collect()
}

/// PCM's setups: the echo over the bridge to the Opus backend, then to the `format`
/// backend; each backend is `(address, process)`.
fn pcm_setups(format: AudioFormat, opus: (SocketAddr, u32), pcm: (SocketAddr, u32)) -> Vec<Setup> {
    let binary = sibling_binary("transceiver", "ufrag-transceiver");
    [
        ("echo over the bridge, Opus passthrough".to_string(), opus),
        (format!("echo over the bridge, `{}`", format.label()), pcm),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (name, (backend, pid)))| {
        let ip = loopback_ip(96 + i as u8);
        let http = SocketAddr::from((ip, 8080));
        let media = SocketAddr::from((ip, 41_000));
        let url = format!("ws://{backend}/");
        Setup {
            name,
            http,
            media,
            backend_pid: Some(pid),
            child: start_transceiver_from(&binary, http, media, None, &["--model", &url]),
            relay: None,
        }
    })
    .collect()
}

/// Frames converted each way to time the codec.
const CODEC_FRAMES: usize = 2_000;
/// Batches of [`CODEC_FRAMES`]: each gives one time per frame; the report gives their
/// median with an interval.
const CODEC_BATCHES: usize = 11;

/// What PCM adds to the audio's path in the transceiver, apart from the bridge both modes
/// share: the time libopus takes to decode a client's 20 ms packet and to encode 20 ms
/// of the backend's PCM (on this thread, unpinned), and the encoder's lookahead, which
/// every frame waits for.
fn codec_cost(format: AudioFormat) -> String {
    use ufrag_transceiver::pcm::SessionPcm;
    let AudioFormat::Pcm16(rate) = format else {
        return String::new();
    };
    let tone = ufrag_transceiver::pcm::tone(rate, 440.0, 1.0, 8000.0 / 32767.0);
    let (Ok(mut speaker), Ok(mut listener)) = (SessionPcm::new(rate), SessionPcm::new(rate)) else {
        return "\n## What PCM adds to the audio's path\n\n- failed: libopus made no codec\n"
            .into();
    };
    let mut packets = Vec::new();
    let _ = speaker.encode(&tone, &mut |f| packets.push(f.payload));
    let frame_bytes = 2 * rate.frame_samples();
    let (mut encode_us, mut decode_us) = (Vec::new(), Vec::new());
    for _ in 0..CODEC_BATCHES {
        let started = std::time::Instant::now();
        for frame in tone.chunks_exact(frame_bytes).cycle().take(CODEC_FRAMES) {
            let _ = speaker.encode(frame, &mut |f| {
                std::hint::black_box(f);
            });
        }
        encode_us.push(started.elapsed().as_secs_f64() * 1e6 / CODEC_FRAMES as f64);
        let started = std::time::Instant::now();
        for packet in packets.iter().cycle().take(CODEC_FRAMES) {
            let _ = std::hint::black_box(listener.decode(packet));
        }
        decode_us.push(started.elapsed().as_secs_f64() * 1e6 / CODEC_FRAMES as f64);
    }
    let lookahead = format!("{:.1} ms", speaker.lookahead_ms());
    format!(
        "\n## What PCM adds to the audio's path\n\n\
         Beyond the bridge both setups share, each client packet is decoded and each 20 ms of \
         the backend's PCM encoded on the bridge thread: timed here over {CODEC_BATCHES} \
         batches of {CODEC_FRAMES} frames of a 440 Hz tone at {} Hz (median µs per frame \
         [distribution-free interval, ≥ {:.0} % confidence]; this thread, unpinned). The \
         encoder also holds each frame for its lookahead before the first packet carries it \
         (libopus's own figure).\n\n\
         | step | µs per 20 ms frame |\n|---|---:|\n\
         | decode a client packet to PCM | {} |\n\
         | encode 20 ms of PCM to Opus | {} |\n\
         | the encoder's lookahead | {lookahead} |\n\n",
        rate.hz(),
        CONFIDENCE * 100.0,
        interval_with(median_interval(&decode_us, CONFIDENCE), 1),
        interval_with(median_interval(&encode_us, CONFIDENCE), 1),
    )
}

/// The internal leg's setups: the built-in echo behind relay-mio, single frames, then
/// bundles both ways.
fn bundle_setups() -> Vec<Setup> {
    [("single frames", false), ("bundles both ways", true)]
        .into_iter()
        .enumerate()
        .map(|(i, (name, bundles))| {
            let ip = loopback_ip(94 + i as u8);
            let (vip, internal) = (SocketAddr::from((ip, 3478)), SocketAddr::from((ip, 40_000)));
            let metrics = SocketAddr::from((ip, 9590));
            let bundle_to = ["--bundle-to".to_string(), "127.0.0.0/8".to_string()];
            let relay_flags: &[String] = if bundles { &bundle_to } else { &[] };
            let relay = start_relay_with(1, vip, internal, metrics, relay_flags);
            let http = SocketAddr::from((ip, 8080));
            let media = SocketAddr::from((ip, 41_000));
            let extra: Vec<&str> = if bundles {
                vec!["--bundle-to", "127.0.0.0/8"]
            } else {
                vec![]
            };
            Setup {
                name: format!("behind relay-mio, {name}"),
                http,
                media,
                backend_pid: None,
                child: start_transceiver(http, media, Some(vip), &extra),
                relay: Some((relay, metrics)),
            }
        })
        .collect()
}

/// What each setup's relay counted over the whole run: datagrams forwarded each way,
/// and bundles sent and received (the evidence that one pair bundled and the other did
/// not).
fn relay_counts(setups: &[Setup]) -> String {
    let mut out = String::from(
        "\n## What the relays counted over the run\n\n\
         | setup | forwarded in | forwarded out | bundles sent | bundles received |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for setup in setups {
        let Some((_, metrics)) = &setup.relay else {
            continue;
        };
        let body =
            ufrag_testbed::http::get(None, *metrics, "/metrics").map_or(String::new(), |r| r.1);
        let count = |series: &str| ufrag_testbed::http::metric_sum(&body, series);
        out.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
            setup.name,
            count("ufrag_relay_forwarded_datagrams_total{worker=\"0\",direction=\"in\"}"),
            count("ufrag_relay_forwarded_datagrams_total{worker=\"0\",direction=\"out\"}"),
            count("ufrag_relay_bundles_sent_total"),
            count("ufrag_relay_bundles_received_total"),
        ));
    }
    out
}

/// The round trip of an `events` message: per round, each setup's sessions ping 10
/// times each; each setup's p50 and p99, and the per-round differences. A round that
/// failed goes to `failures`.
fn latency_rounds(
    question: Question,
    setups: &[Setup],
    options: &Options,
    failures: &mut Vec<String>,
) -> String {
    use std::fmt::Write as _;
    let n = setups.len();
    let mut out = String::new();
    // Latency: per round, each setup's sessions ping 10 times each; the round's p50 and
    // p99 per setup, and the per-round differences.
    eprintln!("latency: {} rounds…", options.rounds);
    let mut per_setup: Vec<Vec<(f64, f64)>> = vec![vec![]; n];
    for turn in Rounds::new(1, options.rounds, n, Order::Rotating) {
        let (round, at) = (turn.round, turn.setup);
        let setup = &setups[at];
        match setup_times(
            setup.http,
            loopback_ip(100),
            options.sessions_per_round,
            Duration::from_secs(10),
        ) {
            Ok(times) => {
                let mut rtts: Vec<Duration> =
                    times.iter().flat_map(|t| t.rtts.iter().copied()).collect();
                let p50 = crate::bench::sessions::quantile_ms(&mut rtts, 0.5);
                let p99 = crate::bench::sessions::quantile_ms(&mut rtts, 0.99);
                per_setup[at].push((p50, p99));
            }
            Err(e) => failures.push(format!("round {round}, {}: {e}", setup.name)),
        }
    }
    let _ = writeln!(
        out,
        "## Round trip of an `events` message\n\n{} rounds, each setup {} sessions a round (one \
         after the other, each 10 pings after its first echo, each ping sent when the last pong \
         came back). Per round, each setup's p50 and p99 ping RTT; below, their medians over the \
         rounds with a distribution-free interval (≥ {:.0} % confidence). {}\n",
        options.rounds,
        options.sessions_per_round,
        CONFIDENCE * 100.0,
        match question {
            Question::Bridge => {
                "An `events` message takes the audio's path through the bridge (the same \
                 queue, the same connection), so the difference is what the bridge adds to a \
                 round trip of audio too."
            }
            Question::Bundles => {
                "An `events` message takes the audio's path through the relay and back, at a \
                 load where a batch seldom holds two frames for one peer: the difference is \
                 what bundles add at low load."
            }
            Question::Pcm(_) => {
                "An `events` message takes the bridge's path in both setups but not the \
                 codec's: the difference shows that the two bridges are alike; what the codec \
                 adds to audio is the next section."
            }
        }
    );
    let _ = writeln!(
        out,
        "| setup | rounds | ping RTT p50 ms | ping RTT p99 ms |\n|---|---:|---:|---:|"
    );
    for (at, setup) in setups.iter().enumerate() {
        let p50: Vec<f64> = per_setup[at].iter().map(|r| r.0).collect();
        let p99: Vec<f64> = per_setup[at].iter().map(|r| r.1).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            setup.name,
            p50.len(),
            interval_text(median_interval(&p50, CONFIDENCE)),
            interval_text(median_interval(&p99, CONFIDENCE)),
        );
    }
    let mut p99_change = None;
    for (subject, reference, what) in comparisons(question, n) {
        let paired = per_setup[subject].len().min(per_setup[reference].len());
        let diff = |pick: fn(&(f64, f64)) -> f64| -> Vec<f64> {
            (0..paired)
                .map(|r| pick(&per_setup[subject][r]) - pick(&per_setup[reference][r]))
                .collect()
        };
        let (p50, p99) = (
            median_interval(&diff(|r| r.0), CONFIDENCE),
            median_interval(&diff(|r| r.1), CONFIDENCE),
        );
        if (subject, reference) == (1, 0) {
            p99_change = p99;
        }
        let _ = writeln!(
            out,
            "| **difference: {what}** (per round) | {paired} | {} | {} |",
            interval_text(p50),
            interval_text(p99),
        );
    }
    let verdict = match question {
        Question::Bridge => bridge_latency_verdict(p99_change),
        Question::Bundles => bundles_latency_verdict(p99_change),
        Question::Pcm(_) => pcm_events_verdict(p99_change),
    };
    let _ = writeln!(out, "\n{verdict}\n");
    for f in failures.iter() {
        let _ = writeln!(out, "- failed: {f}");
    }
    out
}

/// The verdict on the subject's sessions per core over the reference's, against the
/// question's goal.
fn ratio_verdict(question: Question, interval: Option<Interval>) -> String {
    let (subject, reference) = question.words();
    let Some(goal) = question.goal_ratio().map(|g| g * 100.0) else {
        return match interval {
            Some(i) => format!(
                "{subject} one core carries {:.0} % of {reference} sessions (interval \
                 {:.0}–{:.0} %).",
                i.median * 100.0,
                i.low * 100.0,
                i.high * 100.0
            ),
            None => "No round was priced for both setups.".into(),
        };
    };
    let carries = |i: Interval| {
        format!(
            "{subject} one core carries {:.0} % of {reference} sessions (interval {:.0}–{:.0} %)",
            i.median * 100.0,
            i.low * 100.0,
            i.high * 100.0
        )
    };
    match interval {
        Some(i) if i.low * 100.0 >= goal => {
            format!("{}: the ≥ {goal:.0} % goal holds.", carries(i))
        }
        Some(i) if i.high * 100.0 < goal => {
            format!("{}: below the ≥ {goal:.0} % goal.", carries(i))
        }
        Some(i) => format!(
            "Inconclusive against the ≥ {goal:.0} % goal: the ratio lies in {:.0}–{:.0} %.",
            i.low * 100.0,
            i.high * 100.0
        ),
        None => "No round was priced for both setups.".into(),
    }
}

/// What the bridge adds to the p99 round trip, against the 1 ms goal.
fn bridge_latency_verdict(added_p99: Option<Interval>) -> String {
    match added_p99 {
        Some(i) if i.high <= 1.0 => format!(
            "The bridge adds at most {:.3} ms to the p99 round trip (the interval's upper end), \
             within the 1 ms goal.",
            i.high
        ),
        Some(i) if i.low > 1.0 => format!(
            "The bridge adds at least {:.3} ms to the p99 round trip: above the 1 ms goal.",
            i.low
        ),
        Some(i) => format!(
            "Inconclusive against the 1 ms goal: the added p99 lies in [{:.3}, {:.3}] ms.",
            i.low, i.high
        ),
        None => "No rounds completed.".into(),
    }
}

/// The events round trip with PCM against Opus: the same path, so no difference is
/// expected.
fn pcm_events_verdict(change_p99: Option<Interval>) -> String {
    match change_p99 {
        Some(i) => format!(
            "With PCM the p99 round trip of an `events` message changes by [{:.3}, {:.3}] ms \
             (the codec is not on its path).",
            i.low, i.high
        ),
        None => "No rounds completed.".into(),
    }
}

/// What bundles change in the p99 round trip, against the goal of no added latency.
fn bundles_latency_verdict(change_p99: Option<Interval>) -> String {
    match change_p99 {
        Some(i) if i.low > 0.0 => format!(
            "Bundles add at least {:.3} ms to the p99 round trip: latency is added.",
            i.low
        ),
        Some(i) if i.high < 0.0 => format!(
            "Bundles take at least {:.3} ms off the p99 round trip.",
            -i.high
        ),
        Some(i) => format!(
            "Bundles change the p99 round trip by [{:.3}, {:.3}] ms: the interval holds 0, \
             so no added latency is shown (within noise; a wide interval shows little).",
            i.low, i.high
        ),
        None => "No rounds completed.".into(),
    }
}

/// Sessions per core: each round, every setup carries `--cost-sessions` for `--talk`;
/// sessions per core is the load over the transceiver's CPU (every thread). Per-round
/// ratios with their intervals.
fn cost_rounds(
    question: Question,
    setups: &[Setup],
    ips: &[Ipv4Addr],
    options: &Options,
) -> String {
    use std::fmt::Write as _;
    let n = setups.len();
    let sessions = options.cost_sessions;
    // Per setup, per round: sessions per core, or None when the step did not hold.
    let mut per_core: Vec<Vec<Option<f64>>> = vec![vec![]; n];
    let mut rows = String::new();
    for turn in Rounds::new(1, options.cost_rounds, n, Order::Rotating) {
        let (round, at) = (turn.round, turn.setup);
        let setup = &setups[at];
        eprintln!("cost: round {round}, {sessions} sessions, {}…", setup.name);
        let (step, cpu, backend) = load(setup, ips, sessions, options.talk);
        let ok = held(&step) && cpu > 0.0;
        per_core[at].push(ok.then(|| sessions as f64 / (cpu / 100.0)));
        let backend = backend_cell(setup, backend);
        let _ = writeln!(
            rows,
            "| {round} | {} | {}/{sessions} | {:.2} % | {cpu:.0} % | {backend} | {} |",
            setup.name,
            step.connected,
            step.loss() * 100.0,
            if ok {
                format!("{:.0}", sessions as f64 / (cpu / 100.0))
            } else {
                "– (did not hold)".into()
            },
        );
    }
    let mut out = format!(
        "## Sessions per core\n\n{} rounds; in each, every setup carries {sessions} sessions \
         (each client an Opus-sized packet every 20 ms for {:?}). Sessions per core is the load \
         over the transceiver's CPU, every thread counted (the worker's and, over the bridge, \
         the bridge thread's): what one core carries at this load. A step that lost 1 % or \
         more is not priced. Per-round ratios, then their medians with a distribution-free \
         interval (≥ {:.0} % confidence).\n\n\
         | round | setup | connected | loss | transceiver CPU (all threads) | model-echo CPU | sessions per core |\n\
         |---:|---|---:|---:|---:|---:|---:|\n{rows}\n\
         | setup | rounds priced | sessions per core |\n|---|---:|---:|\n",
        options.cost_rounds,
        options.talk,
        CONFIDENCE * 100.0
    );
    for (at, setup) in setups.iter().enumerate() {
        let priced: Vec<f64> = per_core[at].iter().flatten().copied().collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            setup.name,
            priced.len(),
            interval_with(median_interval(&priced, CONFIDENCE), 0)
        );
    }
    let _ = writeln!(
        out,
        "\n| ratio (per round) | rounds | median [interval] |\n|---|---:|---:|"
    );
    let mut verdict = String::new();
    for (subject, reference, what) in comparisons(question, n) {
        let ratios: Vec<f64> = per_core[subject]
            .iter()
            .zip(&per_core[reference])
            .filter_map(|(s, r)| Some((*s)? / (*r)?))
            .collect();
        let interval = median_interval(&ratios, CONFIDENCE);
        let _ = writeln!(
            out,
            "| {what} | {} | {} |",
            ratios.len(),
            interval_text(interval)
        );
        if (subject, reference) == (1, 0) {
            verdict = ratio_verdict(question, interval);
        }
    }
    let _ = writeln!(out, "\n{verdict}\n");
    out
}

/// The largest load one worker holds: one run of `--steps`, every setup at each step
/// (the order rotating), until each loses 1 %.
fn largest_load(setups: &[Setup], ips: &[Ipv4Addr], options: &Options) -> String {
    use std::fmt::Write as _;
    let n = setups.len();
    let mut out = format!(
        "## The largest load one worker holds\n\nOne run of steps {:?}: each client talks for \
         {:?}; a setup leaves the run at its first step with a session unconnected or 1 % loss. \
         The worker is pinned; the bridge thread is not, and shares the clients' CPU, so this \
         figure also prices that sharing: sessions per core above is the cost.\n\n\
         | sessions | setup | connected | loss | transceiver CPU (all threads) | model-echo CPU |\n\
         |---:|---|---:|---:|---:|---:|\n",
        options.steps, options.talk
    );
    let mut best = vec![0usize; n];
    let mut lost = vec![false; n];
    for turn in Rounds::new(1, options.steps.len(), n, Order::Rotating) {
        let (sessions, at) = (options.steps[turn.index], turn.setup);
        if !lost[at] {
            let setup = &setups[at];
            eprintln!("largest load: {sessions} sessions, {}…", setup.name);
            let (step, cpu, backend) = load(setup, ips, sessions, options.talk);
            let backend = backend_cell(setup, backend);
            let _ = writeln!(
                out,
                "| {sessions} | {} | {} | {:.2} % | {cpu:.0} % | {backend} |",
                setup.name,
                step.connected,
                step.loss() * 100.0,
            );
            if held(&step) {
                best[at] = sessions;
            } else {
                lost[at] = true;
            }
        }
        if turn.ends_round && lost.iter().all(|l| *l) {
            break;
        }
    }
    let _ = writeln!(
        out,
        "\nLargest step held (one run; the last step held, not an interpolation):\n"
    );
    for (at, setup) in setups.iter().enumerate() {
        let _ = writeln!(out, "- {}: **{}**", setup.name, best[at]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ufrag_model_protocol::audio::PcmRate;

    fn interval(low: f64, median: f64, high: f64) -> Option<Interval> {
        Some(Interval {
            median,
            low,
            high,
            confidence: CONFIDENCE,
            samples: 9,
        })
    }

    #[test]
    fn a_ratio_verdict_holds_only_when_the_whole_interval_meets_the_goal() {
        let bridge = Question::Bridge; // goal: ≥ 80 %
        assert!(ratio_verdict(bridge, interval(0.81, 0.9, 0.95)).contains("goal holds"));
        assert!(ratio_verdict(bridge, interval(0.5, 0.6, 0.79)).contains("below the ≥ 80 %"));
        let straddling = ratio_verdict(bridge, interval(0.7, 0.82, 0.9));
        assert!(straddling.starts_with("Inconclusive"), "{straddling}");
        assert!(straddling.contains("70–90 %"), "{straddling}");
        assert_eq!(
            ratio_verdict(bridge, None),
            "No round was priced for both setups."
        );
        // Bundles must carry 120 % of single frames.
        let bundles = ratio_verdict(Question::Bundles, interval(1.1, 1.3, 1.4));
        assert!(
            bundles.starts_with("Inconclusive against the ≥ 120 %"),
            "{bundles}"
        );
    }

    #[test]
    fn pcm_has_no_goal_and_is_only_priced() {
        let pcm = Question::Pcm(AudioFormat::Pcm16(PcmRate::Khz16));
        assert_eq!(pcm.goal_ratio(), None);
        let text = ratio_verdict(pcm, interval(0.4, 0.5, 0.6));
        assert_eq!(
            text,
            "With PCM16 one core carries 50 % of Opus passthrough's sessions (interval 40–60 %)."
        );
    }

    #[test]
    fn the_bridge_latency_verdict_decides_on_the_intervals_ends() {
        assert!(bridge_latency_verdict(interval(0.1, 0.4, 1.0)).contains("within the 1 ms goal"));
        assert!(bridge_latency_verdict(interval(1.01, 1.5, 2.0)).contains("above the 1 ms goal"));
        assert!(bridge_latency_verdict(interval(0.5, 0.9, 1.2)).starts_with("Inconclusive"));
        assert_eq!(bridge_latency_verdict(None), "No rounds completed.");
    }

    #[test]
    fn the_bundles_latency_verdict_says_no_added_latency_only_when_zero_is_inside() {
        assert!(bundles_latency_verdict(interval(0.01, 0.2, 0.3)).contains("latency is added"));
        assert!(bundles_latency_verdict(interval(-0.3, -0.2, -0.1)).contains("take at least"));
        let within = bundles_latency_verdict(interval(-0.1, 0.0, 0.1));
        assert!(within.contains("the interval holds 0"), "{within}");
        assert!(pcm_events_verdict(interval(-0.1, 0.0, 0.1)).contains("[-0.100, 0.100]"));
    }

    #[test]
    fn a_baseline_build_adds_two_comparisons_to_the_bridge_question() {
        assert_eq!(comparisons(Question::Bridge, 2).len(), 1);
        let with_baseline = comparisons(Question::Bridge, 3);
        assert_eq!(
            with_baseline
                .iter()
                .map(|(s, r, _)| (*s, *r))
                .collect::<Vec<_>>(),
            [(1, 0), (2, 0), (1, 2)]
        );
        assert_eq!(
            comparisons(Question::Bundles, 3),
            [(1, 0, "bundles against single frames")]
        );
    }

    #[test]
    fn only_a_pcm_format_is_a_pcm_option_and_intervals_print_with_a_dash_when_missing() {
        assert_eq!(
            parse_pcm("pcm16/24000"),
            Ok(AudioFormat::Pcm16(PcmRate::Khz24))
        );
        assert!(parse_pcm("opus").is_err());
        assert!(parse_pcm("pcm16/8000").is_err());
        assert_eq!(
            interval_with(interval(1.0, 1.25, 1.5), 2),
            "1.25 [1.00–1.50]"
        );
        assert_eq!(interval_text(None), "–");
    }
}
