//! The prose of `perf compare`'s report: how each phase was measured, what the veth
//! testbed cannot show, and the evidence for the anomalies a reader would otherwise ask
//! about. Kept apart from the numbers so the report's code reads as tables.

use std::fmt::Write as _;

use super::bench::{PORTS_PER_CLIENT_ADDR, SAMPLE_EVERY, SOCKET_FLOWS};
use super::cost::{Analysis, RowCost, sessions_per_core};
use super::options::{Direction, GeneratorKind, Options};
use super::sample::Sample;
use super::setups::name_of;
use crate::bench::load::LOAD_CPU;

/// How the fixed-load phase was measured; `sender` says what sent the loads where it
/// was not the client sockets (a lab's tools host, from its environment record).
pub fn rounds_method(
    options: &Options,
    seed: u64,
    samples: &[Sample],
    sender: Option<&str>,
) -> String {
    let precision = samples
        .iter()
        .find_map(|s| s.reading.map(|r| r.at_rest.precision))
        .map_or("–", crate::bench::cpu::Precision::label);
    let loads: Vec<String> = options.loads.iter().map(|l| format!("{l}")).collect();
    let sender = sender.map_or_else(
        || {
            format!(
                "from the client sockets of the first {SOCKET_FLOWS} flows (`sendmmsg`, paced \
                 by sleeping, so the tools cost the same in every row)"
            )
        },
        |s| format!("from {s}"),
    );
    format!(
        "\n## How the cost was measured\n\n{} randomized interleaved rounds (seed {seed}): every setup \
         once per round, in a new random order, started afresh, its {} flows made and each proven \
         the way a session proves it (one datagram back through the relay), a 200 ms warm-up not \
         counted, then {} pps for {:?} each {sender}, counted and \
         dropped in XDP on the transceiver's veth. The loads are a stated deployment range, the \
         same for every row, not fractions of each row's saturation. Around each trial every CPU \
         of the machine is counted (busy = wall − idle − iowait − steal, softirq included), \
         whatever it ran for: the generator, the bridge, the relay, the sink; idle time is read \
         in {}. In each round a robust straight line (Theil–Sen: the median of the slopes between \
         every two trials, so one trial a kernel thread disturbed does not tilt it) is fitted \
         through each setup's trials (cores busy against packets per second that arrived, at \
         least {} loads): its slope is the marginal µs per packet, its intercept the cores held \
         at no load. The direct path's line in the \
         same round (the null row: the same tools, no relay) is subtracted, so what remains is \
         what the setup added. Each setup's lines go through one set of loads for the whole \
         run: those it carried (lost at most {:.1} %, and the generator kept within {:.0} % \
         of the offered rate) in more than half of its rounds; a round that did not carry \
         one of them gives it no line. Ratios are taken per round, through the loads both \
         rows' sets keep, and the verdict reads the interval of those ratios.\n",
        options.rounds,
        options.flows,
        loads.join(", "),
        options.trial,
        precision,
        super::marginal::MIN_LOADS,
        super::sample::LOSSY * 100.0,
        crate::bench::load::SHORTFALL * 100.0,
    )
}

/// The loads each setup did not carry, with why and in how many of its rounds, and what
/// that did to its lines: a load missed in most rounds leaves the setup's set (its lines,
/// and every ratio it enters, go through the others in every round); one missed in a few
/// stays, and those rounds give it no line.
pub fn loads_not_carried(analysis: &Analysis<'_>, setups: &[&str]) -> String {
    let mut listed = String::new();
    for setup in setups {
        let (misses, rounds) = analysis.misses(setup);
        for m in misses {
            let _ = writeln!(
                listed,
                "- {} at {} pps: {} in {} of {rounds} rounds; {}.",
                name_of(setup),
                m.load,
                m.why.label(),
                m.rounds,
                if m.in_set {
                    "those rounds give it no line"
                } else {
                    "left out of its lines in every round"
                }
            );
        }
    }
    if listed.is_empty() {
        return "\nEvery setup carried every load in every round the gate kept.\n".into();
    }
    format!(
        "\nLoads not carried, in the rounds where the setup and the null row passed the gate \
         (*lost*: more than {:.1} % lost; *stretched*: the generator could not keep pace, \
         sending more than {:.0} % slower than offered, so the setup ran at a rate nobody \
         offered). Each setup's lines go through one set of loads for the whole run, those \
         it carried in more than half of its rounds, so every round measures the same span; \
         a ratio goes through the loads both rows' sets keep.\n\n{listed}",
        super::sample::LOSSY * 100.0,
        crate::bench::load::SHORTFALL * 100.0,
    )
}

/// The host gate: what it reads and the thresholds.
pub fn host_gate_method() -> String {
    let t = crate::bench::host_gate::THRESHOLDS;
    format!(
        "\n## The host gate\n\nBefore each setup's trials the gate waits (up to {} s) until the host is \
         quiet after the last setup stopped (an XDP program's maps freed, a UMEM unpinned: \
         work that belongs to no trial), then watches it at rest for {} ms \
         (nothing of ours running), runs a fixed-work loop pinned to the forwarder's core (the \
         fastest of three) and the cross-core wake-up probe; during the trials it reads steal. A \
         setup's trials are left out when the host was over {:.0} % busy at rest, more than \
         {:.0} % was stolen, some task waited for a CPU over {:.0} % of the rest window (PSI), or \
         the loop ran over {:.1}× slower than the run's fastest, or threads outside the \
         experiment (neither this run's processes nor the kernel's network threads, counted in \
         nanoseconds per thread around each trial) took more than {:.0} % of the machine's CPUs \
         in any one trial; what they ran is taken off each trial's busy time either way. The \
         null row is subtracted from \
         every row of its round, so a null-row trial more than {:.0} scaled MADs (at least 15 % \
         of the median) from the null row's median at its load leaves its whole round out. No verdict is said from fewer \
         than {} kept rounds.\n",
        crate::bench::host_gate::SETTLE_LIMIT.as_secs(),
        crate::bench::host_gate::QUIET_WINDOW.as_millis(),
        t.busy_at_rest * 100.0,
        t.steal * 100.0,
        t.pressure_at_rest * 100.0,
        t.calibration_slowdown,
        t.outside * 100.0,
        super::cost::NULL_OUTLIER_MADS,
        super::verdict::MIN_KEPT_ROUNDS,
    )
}

/// The rounds left out because the null row's trial was an outlier, and why.
pub fn null_outliers(found: &[(usize, String)]) -> String {
    if found.is_empty() {
        return "\nNo null-row trial lay far from the null row's others.\n".into();
    }
    let mut out =
        String::from("\nRounds left out because their null-row trial was an outlier:\n\n");
    for (round, why) in found {
        let _ = writeln!(out, "- round {round}: {why}.");
    }
    out
}

/// The threads that ran outside the experiment during the cost trials, summed over the
/// run by name, busiest first: kernel threads such as DAMON's show here.
pub fn outside_threads(samples: &[Sample]) -> String {
    let mut by_name: Vec<(String, f64)> = vec![];
    for (name, seconds) in samples
        .iter()
        .filter_map(|s| s.outside.as_ref())
        .flat_map(|o| o.busiest.iter())
    {
        match by_name.iter_mut().find(|(n, _)| n == name) {
            Some((_, total)) => *total += seconds,
            None => by_name.push((name.clone(), *seconds)),
        }
    }
    if by_name.is_empty() {
        return String::new();
    }
    by_name.sort_by(|a, b| b.1.total_cmp(&a.1));
    let trials_seconds: f64 = samples
        .iter()
        .flat_map(|s| s.loads.iter())
        .map(|t| t.busy)
        .sum();
    let listed: Vec<String> = by_name
        .iter()
        .take(8)
        .map(|(name, s)| format!("{name} {:.0} ms", s * 1e3))
        .collect();
    format!(
        "\nThreads outside the experiment (neither this run's processes nor the kernel's \
         network threads) ran {:.0} ms in all during the cost trials, against {:.0} s of busy \
         time counted: {}.\n",
        by_name.iter().map(|b| b.1).sum::<f64>() * 1e3,
        trials_seconds,
        listed.join(", ")
    )
}

/// Where a lab counted only some of the relay host's CPUs: which, their busy time beside
/// the whole host's, and (loudly) each setup's network work that landed on a CPU it did
/// not count; nothing where every CPU was counted.
pub fn counted_cpus(samples: &[Sample], environment: &serde_json::Value) -> String {
    let counted: f64 = samples
        .iter()
        .filter(|s| s.host_busy.is_some())
        .flat_map(|s| s.loads.iter())
        .map(|t| t.busy)
        .sum();
    let host: f64 = samples.iter().filter_map(|s| s.host_busy).sum();
    if host == 0.0 {
        return String::new();
    }
    let mut out = format!(
        "\n### The CPUs counted\n\nThe cost counts the relay host's CPUs {} only: the relays' \
         (`--relay-cpus`) and those the interface's interrupts land on. Over every cost \
         trial they were busy {counted:.2} s, the whole host {host:.2} s. Threads outside \
         the experiment are judged by the host gate but not taken off (the census cannot \
         say on which CPU they ran).\n",
        environment["counted_cpus"].as_str().unwrap_or("?"),
    );
    let by_setup = summed_by_setup(samples, |s| {
        (!s.elsewhere.is_empty()).then(|| s.elsewhere.clone())
    });
    for (key, found) in &by_setup {
        let mut cpus = crate::bench::counted::ByCpu::new();
        crate::bench::counted::add(&mut cpus, found);
        let named: Vec<String> = cpus
            .iter()
            .map(|(cpu, (softirqs, interrupts))| {
                format!("CPU {cpu} {softirqs} receive softirqs and {interrupts} interrupts")
            })
            .collect();
        let _ = writeln!(
            out,
            "\n**Network work outside the counted CPUs** in {}'s trials (work its cost \
             misses; put the NIC's interrupts on the relay's cores): {}.",
            name_of(key),
            named.join("; ")
        );
    }
    out
}

/// How each setup's cost trials spread over the relay interface's RX queues, summed over
/// the rounds, with a loud line for each setup whose load did not spread (a NIC hashing
/// UDP on addresses only, one client address); nothing with one queue.
pub fn queue_spread(samples: &[Sample], queues: usize, flows: u32) -> String {
    let by_setup = summed_by_setup(samples, |s| s.queues.clone());
    if by_setup.is_empty() {
        return if queues > 1 && !samples.is_empty() {
            format!(
                "\n**Not counted per RX queue**: `ethtool -S` on the relay's interface names no \
                 per-queue packet counter this suite reads, so whether the load spread over its \
                 {queues} queues is not known.\n"
            )
        } else {
            String::new()
        };
    }
    let mut out = format!(
        "\n### How the load spread over the RX queues\n\nPackets each of the relay \
         interface's RX queues received during each setup's cost trials (`ethtool -S`), \
         summed over the rounds. A queue with more than twice its share, or less than half of \
         it, means the NIC's RSS did not spread the flows: one queue's core did the receive \
         work of many, and relay-afxdp's workers on the other queues measured little (set \
         `ethtool -N IF rx-flow-hash udp4 sdfn`, and `udp6` for IPv6, to hash the ports too). The spread is judged \
         over at least {} flows a queue and {} packets a queue ({flows} flows sent here).\n\n\
         | setup | packets per queue | shares | spread |\n|---|---|---|---|\n",
        crate::bench::spread::JUDGED_FLOWS,
        crate::bench::spread::JUDGED,
    );
    for (key, spread) in &by_setup {
        let packets: Vec<String> = spread.packets.iter().map(u64::to_string).collect();
        let shares: Vec<String> = spread
            .shares()
            .iter()
            .map(|s| format!("{:.0} %", s * 100.0))
            .collect();
        let (shares, spread) = match (shares.is_empty(), spread.skew(flows)) {
            // The direct path bypasses the relay's interface; a driver may count a path
            // (veth without NAPI) nowhere per queue.
            (true, _) => ("none counted".to_string(), "–".to_string()),
            (false, None) => (shares.join(" / "), "even".to_string()),
            (false, Some(why)) => (shares.join(" / "), format!("**did not spread**: {why}")),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {shares} | {spread} |",
            name_of(key),
            packets.join(" / "),
        );
    }
    out
}

/// Each setup's `part` of its samples (those that have one), summed, in the order the
/// setups first appear.
fn summed_by_setup<T: Summed>(
    samples: &[Sample],
    part: impl Fn(&Sample) -> Option<T>,
) -> Vec<(&str, T)> {
    let mut by_setup: Vec<(&str, T)> = vec![];
    for s in samples {
        let Some(this) = part(s) else { continue };
        match by_setup.iter_mut().find(|(k, _)| *k == s.setup) {
            Some((_, sum)) => sum.sum(this),
            None => by_setup.push((&s.setup, this)),
        }
    }
    by_setup
}

/// What [`summed_by_setup`] adds up.
trait Summed {
    /// Adds `other` to this.
    fn sum(&mut self, other: Self);
}

impl Summed for crate::bench::spread::Spread {
    fn sum(&mut self, other: Self) {
        self.add(&other);
    }
}

impl Summed for Vec<crate::bench::counted::Elsewhere> {
    fn sum(&mut self, other: Self) {
        self.extend(other);
    }
}

/// Each row in a sentence: marginal cost, fixed cores, sessions per core, and its ratio
/// to `baseline`'s.
pub fn row_summary(rows: &[RowCost], baseline: &str) -> String {
    let mut out = String::new();
    for r in rows {
        let (Some(marginal), Some(fixed)) = (r.marginal, r.fixed_cores) else {
            let _ = writeln!(
                out,
                "- {}: no round kept (host gate, a load of its set not carried, or fewer than {} \
                 loads in its set).",
                name_of(&r.setup),
                super::marginal::MIN_LOADS
            );
            continue;
        };
        let _ = writeln!(
            out,
            "- {}: **{:.2} µs** per more packet [{:.2}–{:.2}], {:.3} cores at no load: about \
             **{:.0} voice sessions per core**{}.",
            name_of(&r.setup),
            marginal.median,
            marginal.low,
            marginal.high,
            fixed.median,
            sessions_per_core(marginal.median),
            r.ratio_to_baseline
                .filter(|_| r.setup != baseline)
                .map_or(String::new(), |x| format!(", {:.2}× relay-mio's", x.median)),
        );
    }
    out
}

/// The host gate's readings, one row per setup and round, disturbed ones first.
pub fn host_gate_table(samples: &[Sample]) -> String {
    if samples.is_empty() {
        return String::new();
    }
    let kept = samples.iter().filter(|s| s.clean()).count();
    let mut out = format!(
        "\n{kept} of {} setup trials passed the gate.\n\n| round | place | setup | at rest busy / steal / pressure | calibration µs | wake-up round trip | left out because |\n|---:|---:|---|---|---:|---|---|\n",
        samples.len()
    );
    let mut ordered: Vec<&Sample> = samples.iter().collect();
    ordered.sort_by_key(|s| (s.clean(), s.round, s.position));
    for s in ordered {
        let (rest, calibration, wake) =
            s.reading
                .as_ref()
                .map_or(("–".into(), "–".into(), "–".into()), |r| {
                    (
                        format!(
                            "{:.1} % / {:.1} % / {}",
                            r.at_rest.busy_share() * 100.0,
                            r.at_rest.steal_share() * 100.0,
                            r.at_rest
                                .pressure
                                .map_or("–".into(), |p| format!("{:.1} %", p * 100.0))
                        ),
                        r.calibration_us.map_or("–".into(), |c| format!("{c:.0}")),
                        r.wake.map_or("–".into(), |w| w.label()),
                    )
                });
        let why: Vec<String> = s.disturbances.iter().map(|d| d.label()).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {rest} | {calibration} | {wake} | {} |",
            s.round,
            s.position,
            name_of(&s.setup),
            if why.is_empty() {
                "–".to_string()
            } else {
                why.join("; ")
            }
        );
    }
    out
}

/// What the veth testbed cannot show, so no reader carries a veth figure to a NIC.
pub const VETH_LIMITS: &str = "\n## What this testbed cannot show\n\n\
- **AF_XDP is copy mode on veth.** veth has no zero-copy AF_XDP: every frame is copied into \
  and out of the UMEM. On a NIC with zero-copy (`--bind-mode zerocopy`) relay-afxdp skips both \
  copies; these rows overstate its cost.\n\
- **Native XDP on veth rebuilds each skb.** A frame arriving on a veth with a native XDP \
  program was already an skb; veth turns it into an `xdp_buff` (copying it when the skb is \
  shared or lacks headroom) and, on `XDP_PASS`, builds a new skb. Generic (skb) mode skips \
  that round trip, so on veth it can be the cheaper mode — the reverse of a NIC, whose driver \
  runs native XDP on the DMA buffer before any skb exists.\n\
- **Every hop between cores is an interrupt through the hypervisor.** The relay's receive work \
  is steered to its core (RPS) and the bridge's share of its sends back to the tools' core; on \
  this VM each such inter-processor interrupt is an exit to the hypervisor (`native_write_msr` \
  in the profiles). A NIC queue whose interrupt is affine to the relay's core pays none.\n\
- **Two vCPUs.** One worker per setup, one core for the tools: scaling across cores is not \
  measured here.\n";

/// What a lab run measures, and how it differs from the testbed's method described above.
pub const LAB_MODE: &str = "\n## Lab mode: what differs from the testbed\n\n\
- **Two hosts.** The setups ran on the relay host's interface named in the command; the agent \
  on the tools host (`ufrag-perf agent`) made the flows and ran the generator and the sink. \
  Where the method above says the client's or transceiver's veth, read the tools host's \
  interfaces (see *Environment*).\n\
- **Only the relay host's CPUs are counted.** Every trial's busy time is the relay host's; \
  the tools host's work is in no row. The null row's traffic stays on the tools host (it is \
  sent to the sink's own address), so its cost is the relay host at rest over the same \
  trials, and subtracting it leaves what each setup cost the relay host.\n\
- **The loads come from the tools host.** With live frames (the default generator), the \
  search and, when the tools host is another machine, the fixed loads are paced in the \
  tools host's kernel (*Environment* says which sent the fixed loads, and from which \
  flows); \
  every trial records offered, sent and received, and one whose generator fell short is \
  left out of the lines, listed as stretched.\n\
- **The flows come from the agent's client addresses** (`ufrag-perf agent --client-addresses`; \
  how many is in *Environment*), dealt round them, so every load's first flows come from \
  every address: where the NIC hashes on addresses alone, only several addresses spread \
  the load over its queues.\n\
- **The flows are proven both ways** before the trials, as on the testbed (our relays, and \
  nftables when the flows come from one client address): the agent sends one datagram back \
  on each through the setup, so relay-afxdp's fast path takes them.\n\
- **The downlink** (`--direction down|both`, the search only) is sent by the agent from its \
  sink interface and counted arriving at its client interface; both ways at once need the \
  sink on a second interface, and put the downlink's generator on the agent's second \
  `--cpus` when it has one. The direct path's row stays the tools host's own loopback \
  (client sockets to the sink, at the sockets' ceiling) in every direction: in a downlink \
  search it is not a downlink.\n\
- **The NIC is the lab's.** Interrupt affinity and RSS are as the lab set them; lab mode \
  steers nothing. The queue count, the AF_XDP bind mode and the relays' CPUs are in \
  *Environment*; relay-afxdp runs one worker per RX queue.\n\
- **Setups the driver refused** (zero-copy, native XDP) were started once before the first \
  trial and left out, named below with the refusal.\n";

/// The anomalies, with this run's evidence: rows that split in two, whether a row's
/// cost depends on its place in the round, native against generic XDP, and the in-kernel
/// reference against relay-afxdp.
pub fn anomalies(rows: &[RowCost]) -> String {
    let mut out = String::from("\n## Anomalies, with this run's evidence\n\n");
    let cost = |key: &str| {
        rows.iter()
            .find(|r| r.setup == key)
            .and_then(|r| r.marginal)
    };
    let bimodal: Vec<String> = rows
        .iter()
        .filter(|r| r.bimodal)
        .map(|r| name_of(&r.setup))
        .collect();
    let _ = writeln!(
        out,
        "- **Rows in two states.** {}",
        if bimodal.is_empty() {
            "No row's per-round costs split into two groups in this run.".to_string()
        } else {
            format!(
                "Split into two groups (their per-round costs are listed below): {}. Their median \
                 describes neither state; the interval says how far apart the states are.",
                bimodal.join(", ")
            )
        }
    );
    let _ = writeln!(
        out,
        "- **The order a setup ran in.** Each row's median marginal cost by its place in the round \
         (1 = first after the previous round's last setup stopped); a row whose standing moved \
         with its place would show it here:"
    );
    for r in rows.iter().filter(|r| r.by_position.len() > 1) {
        let places: Vec<String> = r
            .by_position
            .iter()
            .map(|(at, us)| format!("{at}: {us:.2}"))
            .collect();
        let _ = writeln!(out, "  - {}: {}", name_of(&r.setup), places.join(", "));
    }
    if let (Some(skb), Some(native)) = (cost("afxdp-skb-wakeup"), cost("afxdp-native-wakeup")) {
        let _ = writeln!(
            out,
            "- **Native XDP against generic on veth.** relay-afxdp wakeup costs {:.2} µs per packet in \
             skb mode and {:.2} in native mode here: native on veth {}. See *What this testbed \
             cannot show*: native XDP on veth rebuilds each skb, which a NIC does not.",
            skb.median,
            native.median,
            if native.median > skb.median {
                "pays for the skb round trip"
            } else {
                "does not cost more in this run"
            }
        );
    }
    if let Some(reference) = cost("xdp-relay") {
        let afxdp_best = ["afxdp-skb-wakeup", "afxdp-native-wakeup"]
            .iter()
            .filter_map(|k| cost(k))
            .map(|c| c.median)
            .min_by(f64::total_cmp);
        let _ = writeln!(
            out,
            "- **The in-kernel XDP reference.** It costs {:.2} µs per packet{}. Every setup in this run \
             had the same `XDP_PASS` program on the relay's bridge port (the in-kernel rewrite's \
             `XDP_TX` frames need one to arrive), so every row's transmitted frames took the same \
             veth path into the bridge; before, only the rewrite paid for it.",
            reference.median,
            afxdp_best.map_or(String::new(), |b| format!(
                " against relay-afxdp's best worker row's {b:.2}: the rewrite is {}",
                if reference.median <= b {
                    "the cheaper, as it should be (it does the same work without leaving the kernel)"
                } else {
                    "still dearer here: `XDP_TX` on veth hands each frame to the peer's NAPI ring, \
                     where native mode's skb round trip is paid again"
                }
            ))
        );
    }
    out
}

/// How the secondary phase was measured.
pub fn search_method(options: &Options, addresses: u32, vcpus: &serde_json::Value) -> String {
    let lab = options.lab.lab.is_some();
    let generator = match (options.direction, options.generator) {
        (Direction::Both, _) if lab => format!(
            "Both directions at once, {:.0} % of each trial's rate downlink: the agent's \
             live-frames generators on its client and sink interfaces (their CPUs in \
             *Environment*), each way counted in XDP on the interface it arrives at; latency \
             sampled on the uplink; the direct path's row is the tools host's loopback",
            options.downlink_share * 100.0
        ),
        (Direction::Down, _) if lab => "The agent transmits prebuilt replies from its sink \
             interface in live frames (its CPU in *Environment*): to our relays a frame to the \
             internal port naming the client, to nftables a datagram to the VIP at the client's \
             port; counted in XDP on its client interface. The direct path's row is the tools \
             host's loopback, not a downlink"
            .to_string(),
        (Direction::Both, _) => format!(
            "Both directions at once, {:.0} % of each trial's rate downlink: a live-frames \
             generator on each end, both busy-polling CPU {LOAD_CPU} (so the tools core's busy \
             share is not shown); latency sampled on the uplink",
            options.downlink_share * 100.0
        ),
        (Direction::Down, _) => format!(
            "The generator transmits prebuilt replies from the transceiver's veth in live frames \
             (busy-polling CPU {LOAD_CPU}): to our relays a frame to the internal port naming the \
             client, to nftables a datagram to the VIP at the client's port, on the direct path a \
             datagram to the client; counted in XDP on the client's veth"
        ),
        (Direction::Up, GeneratorKind::LiveFrames) => format!(
            "The generator transmits prebuilt frames from the client's veth with one BPF_PROG_RUN \
             in live-frames mode, paced against the kernel clock (it busy-polls CPU {LOAD_CPU}, so \
             the tools core's busy share is not shown); the sink counts in XDP on the transceiver's \
             veth and passes one in {SAMPLE_EVERY} to a socket for latency"
        ),
        (Direction::Up, GeneratorKind::Sockets) => format!(
            "The generator sends with sendmmsg from the sockets of the first {SOCKET_FLOWS} \
             flows, paced in 0.5 ms slices"
        ),
    };
    let placement = if lab {
        "its NIC's interrupts and kernel receive work are where the lab put them (lab mode \
         steers nothing), so \"forwarder µs/pkt\" counts what ran on that core"
    } else if options.no_steer {
        "its kernel receive work is not steered (veth runs it on the sender's CPU), so \
         \"forwarder µs/pkt\" counts what the forwarder does from its socket or XDP program on"
    } else {
        "its kernel receive work is steered there too (RPS and threaded NAPI), so \"forwarder \
         µs/pkt\" is all of the relay path's cost on that core"
    };
    let cpu = options.forwarder_cpu;
    let hops = if lab {
        "set by the lab's interrupt placement (the tools run on the tools host)".to_string()
    } else if cpu == LOAD_CPU {
        "none: the forwarder shares the tools' core".to_string()
    } else if !options.no_steer {
        format!(
            "two for every forwarder, busy-polling or not (RPS to CPU {cpu}, and back to CPU \
             {LOAD_CPU} for the bridge's share of what the forwarder sends); none on the direct path"
        )
    } else {
        "two for a forwarder that sleeps (its own wake-up, then the sink's), one for a \
         busy-polling one (the sink's wake-up); none on the direct path"
            .to_string()
    };
    let interleaved = format!(
        " The searches ran in {} interleaved rounds: every setup once per round, each round \
         in its own random order, started afresh; the final trial, the fixed-load latency \
         trial and the profile come from the last round.",
        options.search_rounds.max(1)
    );
    let topology = if lab {
        "the lab's relay host and tools host (see *Environment*; where this section says \
         the client's or the transceiver's veth, read the tools host's interfaces)"
    } else {
        "a one-armed relay behind a Linux bridge (client, relay and transceiver namespaces, \
         each a veth to a bridge namespace)"
    };
    format!(
        "\n## How the maximum rate was measured\n\nTopology: {topology}. The \
         load is spread over {} client flows ({addresses} client address(es), up to \
         {PORTS_PER_CLIENT_ADDR} ports each), every one made before the search. {generator}. Every \
         forwarder runs on CPU {cpu}; {placement}. One worker per setup on this host's {vcpus} \
         vCPUs.{interleaved}\n\nCross-core hops in a datagram's path in the latency trial (the \
         sender and the sink run on CPU {LOAD_CPU}; each hop is an inter-processor interrupt, on a \
         VM a trip through the hypervisor): {hops}. `--no-steer` leaves a busy-polling forwarder \
         one hop; `--forwarder-cpu {LOAD_CPU}` none.\n",
        options.flows,
    )
}
