//! `perf compare`'s flags, the checks that refuse combinations that cannot run, and the
//! setups a run takes from them.

use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;

use super::relay_host::BindMode;
use super::setups::{self, NULL, SETUPS, Setup};
use crate::bench::measure::SearchArgs;

/// Which way the load goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Direction {
    /// Client → transceiver.
    Up,
    /// Transceiver → client (the relay's return path; live frames only).
    Down,
    /// Both at once, as in a conversation (live frames only).
    Both,
}

/// The rate search's generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GeneratorKind {
    /// BPF_PROG_RUN live frames, paced in the kernel (busy-polls the tools' core).
    LiveFrames,
    /// `sendmmsg` from the sockets of the first 256 flows.
    Sockets,
}

/// `perf compare`'s options.
#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// Only these setups (comma-separated; default: those marked default in the setup
    /// table). The direct path is always measured: it is the null row.
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(setups::keys()))]
    pub only: Vec<String>,
    /// Rounds of the fixed-load phase (0: skip it); with `--max-rounds`, the pilot. The
    /// verdict's intervals each need 99.4 % coverage (95 % divided among 4 bypass × 2
    /// socket rows), which takes 9 rounds kept for every pair: 14 leave room for the
    /// host gate to leave some out.
    #[arg(long, default_value_t = 14)]
    pub rounds: usize,
    /// Go on past `--rounds` while the verdict is inconclusive, a block of half as many
    /// rounds at a time, up to this many in all (0: stop at `--rounds`). Every look at
    /// the verdict is planned before the first round, and the error rate is divided
    /// among them, so stopping when it is decided does not overstate the confidence.
    #[arg(long, default_value_t = 0)]
    pub max_rounds: usize,
    /// The fixed loads of each round, pps: a stated deployment range, the same for every
    /// row (at least four, for the line through them that gives marginal and fixed cost;
    /// five by default, so one lost load leaves a line). The slope's precision grows with
    /// the range the loads span, not with how high they reach: a trial's busy time varies
    /// by a few hundredths of a core whatever the load, and over 10k–50k the cheapest
    /// rows' lines rise by little more than that.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "20000,40000,60000,80000,100000"
    )]
    pub loads: Vec<u64>,
    /// The saving, as a share of the best socket relay's marginal cost per packet, that
    /// warrants kernel bypass: the verdict says "warranted" only when the whole interval of
    /// the per-round ratio lies below 1 − this.
    #[arg(long, default_value_t = super::verdict::DEFAULT_THRESHOLD)]
    pub threshold: f64,
    /// Latency loads of each round, pps (comma-separated; default none): after its cost
    /// trials, each setup is offered each for `--latency-trial`, every datagram's latency
    /// recorded, and the report gives each row's p50 and p99 against relay-mio's.
    #[arg(long, value_delimiter = ',')]
    pub latency_loads: Vec<u64>,
    /// Pairs of rows to compare with each other, per round (`A:B`, comma-separated; e.g.
    /// `mio-gso:mio-bundles`): the report gives A's cost over B's, beside each row's
    /// ratio to relay-mio. Both must be measured.
    #[arg(long, value_delimiter = ',', value_parser = parse_pair)]
    pub versus: Vec<(String, String)>,
    /// Length of each fixed-load trial.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub trial: Duration,
    /// The seed of the rounds' random orders (default: from the clock; the report says it).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Skip the maximum-rate search and its latency trials and forwarder-core profiles
    /// (the rounds and the whole machine's profile after them still run).
    #[arg(long)]
    pub no_search: bool,
    /// Skip the Linux perf profiles: the forwarder's core after each search (and its
    /// legs), and the whole machine after the rounds. A quicker run, whose report says
    /// where the time went nowhere.
    #[arg(long)]
    pub no_profile: bool,
    /// Maximum-rate searches per setup, in interleaved rounds (every setup once per round,
    /// each round in a fresh random order): NDR and PDR are medians over them with an
    /// interval (five give 93.8 % coverage of the range; at least one).
    #[arg(long, default_value_t = 5)]
    pub search_rounds: usize,
    /// After each search, the same setup's latency at these fractions of the PDR it found
    /// (comma-separated, each in (0, 1]; default 0.5,0.9).
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.9")]
    pub pdr_fractions: Vec<f64>,
    /// Length of each latency trial at a fraction of the PDR.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub pdr_latency_trial: Duration,
    /// Length of the final trial at each setup's median PDR after the last search round
    /// (0s: none).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub final_trial: Duration,
    /// Accepted for older commands: the searches always run in interleaved rounds.
    #[arg(long, hide = true)]
    pub interleave: bool,
    /// The rate search and the latency trial.
    #[command(flatten)]
    pub search: SearchArgs,
    /// Client flows the load is spread over, each made before the trials; up to 40,000
    /// per client address, at most 6 addresses (in lab mode as many as the agent's
    /// `--client-addresses`, the flows spread evenly over them).
    #[arg(long, default_value_t = 1_000)]
    pub flows: u32,
    /// Which way the search's load goes (the fixed-load phase is uplink only: with down or
    /// both it does not run).
    #[arg(long, value_enum, default_value_t = Direction::Up)]
    pub direction: Direction,
    /// With `--direction both`: the share of each trial's rate sent downlink.
    #[arg(long, default_value_t = 0.5)]
    pub downlink_share: f64,
    /// Clients, relay and transceiver over IPv6 (uplink only).
    #[arg(long)]
    pub ipv6: bool,
    /// The rate search's generator (in lab mode on two machines, the fixed loads' too).
    #[arg(long, value_enum, default_value_t = GeneratorKind::LiveFrames)]
    pub generator: GeneratorKind,
    /// Leave the relay interface's kernel receive work on the sender's core instead of
    /// steering it to the forwarder's core (RPS, threaded NAPI).
    #[arg(long)]
    pub no_steer: bool,
    /// The forwarder's CPU.
    #[arg(long, default_value_t = 1)]
    pub forwarder_cpu: usize,
    /// Worker counts to sweep (comma-separated): relay-mio's rows are measured with each
    /// (`mio-w2`, …) beside its one-worker row, which stays the baseline. A relay's
    /// workers are pinned to the forwarder's CPU first, then to the others. In a lab
    /// whose NIC has N > 1 RX queues relay-mio runs N workers in place of one (the
    /// verdict weighs equal cores); list 1 among the counts to keep the one-worker row.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub workers: Vec<usize>,
    /// Leave out setups whose program is not installed (each named, in the report too)
    /// instead of stopping before the first trial.
    #[arg(long)]
    pub skip_missing: bool,
    /// Lab mode: the comparison on your own hosts.
    #[command(flatten)]
    pub lab: LabArgs,
    /// Where to write the Markdown report (JSON and SVG go next to it).
    #[arg(long, default_value = "target/perf/compare.md")]
    pub out: PathBuf,
}

/// `A:B`, two setup keys.
fn parse_pair(text: &str) -> Result<(String, String), String> {
    let (a, b) = text
        .split_once(':')
        .ok_or_else(|| format!("{text}: two setups as A:B"))?;
    for key in [a, b] {
        if !setups::keys().contains(&key) {
            return Err(format!(
                "{key}: not a setup ({})",
                setups::keys().join(", ")
            ));
        }
    }
    Ok((a.to_string(), b.to_string()))
}

impl Options {
    /// Rounds added at each look after the pilot.
    pub fn block(&self) -> usize {
        (self.rounds / 2).max(2)
    }

    /// The looks at the verdict a run plans: after the pilot, then after each block up
    /// to `--max-rounds`.
    pub fn looks(&self) -> usize {
        1 + self
            .max_rounds
            .saturating_sub(self.rounds)
            .div_ceil(self.block())
    }

    /// Refuses option combinations that cannot run, naming why.
    pub fn check(&self) -> Result<(), String> {
        let share = self.downlink_share;
        if !(share > 0.0 && share < 1.0) {
            return Err(format!(
                "--downlink-share {share}: a fraction between 0 and 1"
            ));
        }
        if self.direction != Direction::Both && share != 0.5 {
            return Err("--downlink-share goes with --direction both".into());
        }
        let downlink = self.direction != Direction::Up;
        if self.ipv6 && downlink {
            return Err("--ipv6 measures the uplink only".into());
        }
        if downlink && self.generator != GeneratorKind::LiveFrames {
            return Err("--direction down or both needs --generator live-frames".into());
        }
        if self.rounds > 0 {
            let mut distinct = self.loads.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() < super::marginal::MIN_LOADS || distinct.contains(&0) {
                return Err(format!(
                    "--loads: at least {} different rates above 0 pps (a line is fitted through them)",
                    super::marginal::MIN_LOADS
                ));
            }
        }
        if self.max_rounds != 0 && self.max_rounds < self.rounds {
            return Err(format!(
                "--max-rounds {}: at least --rounds ({})",
                self.max_rounds, self.rounds
            ));
        }
        if !(self.threshold > 0.0 && self.threshold < 1.0) {
            return Err(format!(
                "--threshold {}: a share between 0 and 1",
                self.threshold
            ));
        }
        if !self.latency_loads.is_empty() && (self.rounds == 0 || self.direction != Direction::Up) {
            return Err(
                "--latency-loads runs in the fixed-load rounds: uplink, --rounds 1 or more".into(),
            );
        }
        if self.latency_loads.contains(&0) {
            return Err("--latency-loads: each above 0 pps".into());
        }
        if !self.versus.is_empty() {
            if self.rounds == 0 || self.direction != Direction::Up {
                return Err(
                    "--versus compares the fixed-load rounds: uplink, --rounds 1 or more".into(),
                );
            }
            let (run, _) = self.setups(1);
            for key in self.versus.iter().flat_map(|(a, b)| [a, b]) {
                if !run.iter().any(|s| s.key == key) {
                    return Err(format!(
                        "--versus {key}: not measured in this run (add it to --only)"
                    ));
                }
            }
        }
        if self.search.repeats != 1 {
            return Err(format!(
                "--repeats {}: compare searches in interleaved rounds (--search-rounds {})",
                self.search.repeats, self.search.repeats
            ));
        }
        if self.search_rounds == 0 {
            return Err("--search-rounds: at least 1 (--no-search skips the search)".into());
        }
        if let Some(f) = self
            .pdr_fractions
            .iter()
            .find(|f| !(**f > 0.0 && **f <= 1.0))
        {
            return Err(format!(
                "--pdr-fractions {f}: each a share of the PDR in (0, 1]"
            ));
        }
        if self.rounds == 0 && self.no_search {
            return Err("--rounds 0 with --no-search measures nothing".into());
        }
        if downlink && self.no_search {
            return Err(
                "--direction down or both with --no-search measures nothing (the fixed-load \
                 rounds are uplink only)"
                    .into(),
            );
        }
        let cpus = crate::bench::environment::online_cpus();
        if let Some(w) = self.workers.iter().find(|w| **w == 0 || **w > cpus) {
            return Err(format!(
                "--workers {w}: between 1 and this host's {cpus} CPUs"
            ));
        }
        self.lab.check(self)
    }

    /// The setups to run: `--only`'s (with the null row), or the defaults; those the
    /// direction or family cannot run are left out and named.
    pub fn setups(&self, client_addresses: u32) -> (Vec<&'static Setup>, Vec<(String, String)>) {
        let wanted = |s: &Setup| {
            if self.only.is_empty() {
                s.default
            } else {
                s.key == NULL || self.only.iter().any(|o| o == s.key)
            }
        };
        let mut left_out = vec![];
        let setups = SETUPS
            .iter()
            .filter(|s| wanted(s))
            .filter(|s| {
                let why = if self.ipv6 && !s.speaks_ipv6() {
                    Some("IPv4 only here")
                } else if self.direction != Direction::Up && !s.carries_downlink(client_addresses) {
                    Some(super::setups::NO_DOWNLINK)
                } else {
                    None
                };
                if let Some(why) = why {
                    left_out.push((s.name.to_string(), why.to_string()));
                }
                why.is_none()
            })
            .collect::<Vec<&'static Setup>>();
        // The worker sweep: each sweepable row again with every other worker count.
        let mut swept = vec![];
        for setup in setups {
            swept.push(setup);
            for &workers in self.workers.iter().filter(|w| **w != setup.workers) {
                if setup.sweeps_workers() {
                    swept.push(setup.with_workers(workers));
                } else if matches!(setup.kind, setups::Kind::Relay { .. }) {
                    left_out.push((
                        format!("{}, {workers} workers", setup.name),
                        if self.lab.lab.is_some() {
                            "runs one worker per RX queue (set them with --queues)"
                        } else {
                            "needs one RX queue per worker; the veth testbed has one"
                        }
                        .to_string(),
                    ));
                }
            }
        }
        (swept, left_out)
    }
}

/// Lab mode's options.
#[derive(Clone, Debug, Default, clap::Args)]
#[command(next_help_heading = "Lab mode: your relay host and tools host instead of the testbed")]
pub struct LabArgs {
    /// The agent on the tools host (`ufrag-perf agent`), HOST:PORT. Runs the comparison
    /// on this host's `--interface` instead of the netns testbed.
    #[arg(long, value_name = "HOST:PORT")]
    pub lab: Option<String>,
    /// This host's interface the load arrives on (lab mode); its first IPv4 address (with
    /// `--ipv6`, its first global IPv6 one) is the relays' address.
    #[arg(long, requires = "lab")]
    pub interface: Option<String>,
    /// Set the interface's queues for the run (`ethtool -L`; put back at the end).
    /// relay-afxdp runs one worker per RX queue.
    #[arg(long, requires = "lab")]
    pub queues: Option<usize>,
    /// relay-afxdp's AF_XDP bind mode: `zerocopy` where the driver has it (a driver that
    /// refuses leaves the AF_XDP setups out, named with the refusal).
    #[arg(long, value_enum, default_value_t = BindMode::Copy)]
    pub bind_mode: BindMode,
    /// The relays' CPUs in the order workers take them (comma-separated; default:
    /// `--forwarder-cpu`, then every other CPU).
    #[arg(long, value_delimiter = ',', requires = "lab")]
    pub relay_cpus: Vec<usize>,
    /// The token the agent was given (a file of mode 0600; or UFRAG_PERF_AGENT_TOKEN).
    #[arg(long, value_name = "FILE", requires = "lab")]
    pub lab_token_file: Option<std::path::PathBuf>,
}

impl LabArgs {
    /// Refuses what cannot run, naming why.
    pub fn check(&self, options: &Options) -> Result<(), String> {
        let Some(agent) = &self.lab else {
            return Ok(());
        };
        if self.interface.is_none() {
            return Err(format!(
                "--lab {agent}: name this host's interface (--interface)"
            ));
        }
        if options.flows > crate::cmd::lab::agent::MAX_FLOWS {
            return Err(format!(
                "--flows {}: lab mode makes at most {} ({} client addresses)",
                options.flows,
                crate::cmd::lab::agent::MAX_FLOWS,
                crate::cmd::lab::agent::MAX_CLIENT_ADDRESSES
            ));
        }
        let cpus = crate::bench::environment::online_cpus();
        if let Some(c) = self.relay_cpus.iter().find(|c| **c >= cpus) {
            return Err(format!(
                "--relay-cpus {c}: this host has CPUs 0 to {}",
                cpus - 1
            ));
        }
        if let Some(c) = self
            .relay_cpus
            .iter()
            .enumerate()
            .find_map(|(i, c)| self.relay_cpus[..i].contains(c).then_some(c))
        {
            return Err(format!(
                "--relay-cpus: CPU {c} is listed twice (each worker needs a core of its own)"
            ));
        }
        if self.queues == Some(0) {
            return Err("--queues 0: at least one".into());
        }
        Ok(())
    }
}
