//! `ufrag-perf`: the benchmark runner, a dispatcher. Each subcommand's options and work live in
//! the library: `compare` in `ufrag_perf::cmd::compare`, the others in `ufrag_perf::cmd`.

use clap::{Parser, Subcommand};
use ufrag_perf::cmd;

#[derive(Debug, Parser)]
#[command(name = "ufrag-perf", version = ufrag_version::VERSION, about = "ufrag-relay benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Is kernel bypass warranted? Every setup side by side on the netns testbed, or with
    /// `--lab` on your relay host and tools host (root):
    /// CPU cost per packet at fixed loads in randomized rounds (the verdict), then the
    /// maximum rate (NDR/PDR), latency and a profile.
    Compare(Box<ufrag_perf::cmd::compare::Options>),
    /// relay-mio (1 and 2 workers) against a bare mmsg forwarder on loopback.
    Loopback(cmd::loopback::Options),
    /// WebRTC sessions (str0m clients) through relay-mio to the transceiver, and direct:
    /// setup times, and concurrent echo sessions one worker carries.
    Sessions(cmd::sessions::Options),
    /// The model seam: the built-in echo against the same echo over the WebSocket bridge
    /// (`--model ws://`), in interleaved rounds: the round trip the bridge adds, and the
    /// sessions one transceiver worker carries.
    Model(cmd::model::Options),
    /// Live echo sessions through relay-mio next to a junk flood at its public port,
    /// through a kill -9 and restart of the relay (with and without the Redis route
    /// cache), and signing up while hostile clients attack.
    Resilience(cmd::resilience::Options),
    /// Which rows and ratios moved between two compare reports (A.json B.json: two
    /// commits), with intervals: exits 1 when a row got costlier beyond the tolerance or
    /// the verdict's kind changed, 2 on a report it cannot read.
    Diff(cmd::diff::Options),
    /// Several compare reports of one command as repeated runs: the spread between runs
    /// beside each run's intervals, where they disagree, and whether they agree on the
    /// verdict (exit 1 when not).
    Runs(cmd::runs::Options),
    /// The CI gate: the hot-path benches' callgrind instruction counts against the
    /// committed baseline (run through `scripts/instructions.sh`).
    Gate(cmd::gate::Options),
    /// Lab mode's tools host: runs the generator and the sink for `compare --lab` (root).
    Agent(ufrag_perf::cmd::lab::agent::AgentOptions),
    /// A lab's load generator on a real interface (root).
    Gen(cmd::lab::GenOptions),
    /// A lab's counting sink on a real interface (root).
    Sink(cmd::lab::SinkOptions),
    /// One WebRTC session against a running deployment's signaling endpoint.
    Session(cmd::tools::SessionOptions),
    /// Load-test a running deployment: N str0m sessions sign up at a rate on its sessions
    /// URL, connect through its relay and talk; setup times, failures by reason, audio
    /// and pong loss, round trips, and the server's /metrics deltas.
    Load(cmd::load::Options),
    /// Testbed tool: echo every relay frame back to its sender (a fake transceiver).
    #[command(hide = true)]
    FakeTransceiver(cmd::tools::FakeTransceiverOptions),
    /// Testbed tool: make a flow through a relay and count echoed datagrams.
    #[command(hide = true)]
    RelayProbe(cmd::tools::RelayProbeOptions),
}

fn main() {
    let code = match Cli::parse().command {
        Cmd::Compare(options) => ufrag_perf::cmd::compare::run(&options),
        Cmd::Loopback(options) => cmd::loopback::run(options),
        Cmd::Sessions(options) => cmd::sessions::run(options),
        Cmd::Model(options) => cmd::model::run(options),
        Cmd::Resilience(options) => cmd::resilience::run(options),
        Cmd::Diff(options) => cmd::diff::run(options),
        Cmd::Runs(options) => cmd::runs::run(options),
        Cmd::Gate(options) => cmd::gate::run(options),
        Cmd::Agent(options) => ufrag_perf::cmd::lab::agent::run(options),
        Cmd::Gen(options) => cmd::lab::generate(options),
        Cmd::Sink(options) => cmd::lab::sink(options),
        Cmd::Session(options) => cmd::tools::session(options),
        Cmd::Load(options) => cmd::load::run(options),
        Cmd::FakeTransceiver(options) => cmd::tools::fake_transceiver(options),
        Cmd::RelayProbe(options) => cmd::tools::relay_probe(options),
    };
    std::process::exit(code);
}
