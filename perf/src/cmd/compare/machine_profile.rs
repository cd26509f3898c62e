//! Where the whole machine's time goes for each setup at one load: after the rounds,
//! each setup is started once more, offered the middle fixed load by the rounds' own
//! generator, and every CPU is sampled by Linux perf over one trial. Each CPU's busy
//! time, each thread's and the busiest functions are given per datagram, so a row of the
//! cost table can be read against where its cost lands: a bypass row that costs more
//! than the in-kernel reference shows on which CPU and in which functions. One trial,
//! not the rounds: it explains the figures, it does not enter them.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::bed::Bed;
use super::sample::LoadTrial;
use super::setups::{Setup, name_of};
use crate::bench::cpu::Snapshot;
use crate::bench::profile::{
    Profile, Recording, monotonic_seconds, samples_seconds, symbols_table,
};

/// Threads listed per CPU.
const THREADS: usize = 6;

/// One CPU over the profiled trial.
#[derive(Clone, Debug)]
pub struct CpuTime {
    /// The CPU.
    pub cpu: usize,
    /// Its busy seconds by its idle clock (the clock the rounds read; perf's own
    /// sampling interrupts are in it).
    pub busy: f64,
    /// Its samples, the idle loop counted apart: how that busy time divides.
    pub profile: Profile,
}

/// One thread's part of one CPU, per datagram.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadCost {
    /// The thread's name.
    pub name: String,
    /// µs of the CPU per datagram.
    pub us: f64,
    /// Of which in the kernel.
    pub kernel_us: f64,
}

/// One setup's machine over the profiled trial.
#[derive(Clone, Debug)]
pub struct MachineProfile {
    /// The setup's key.
    pub setup: String,
    /// The profiled trial, as the rounds count one (busy: every CPU's).
    pub trial: LoadTrial,
    /// Seconds the hypervisor stole over the window, every CPU.
    pub steal: f64,
    /// Each CPU, by number.
    pub cpus: Vec<CpuTime>,
    /// CPUs perf sampled that the idle clocks did not read (not shown).
    pub unmatched: Vec<usize>,
}

impl MachineProfile {
    /// `seconds` of CPU time per datagram that arrived, µs (`None` when none did).
    fn per_datagram(&self, seconds: f64) -> Option<f64> {
        (self.trial.received > 0).then(|| seconds * 1e6 / self.trial.received as f64)
    }

    /// `cpu`'s threads, busiest first, each its share of the CPU's busy samples times
    /// the CPU's busy time.
    fn threads(&self, cpu: &CpuTime) -> Vec<ThreadCost> {
        let Some(us) = self.per_datagram(cpu.busy) else {
            return vec![];
        };
        cpu.profile
            .threads
            .iter()
            .map(|t| ThreadCost {
                name: t.comm.clone(),
                us: t.percent / 100.0 * us,
                kernel_us: t.kernel_percent / 100.0 * us,
            })
            .collect()
    }
}

/// Every setup's profile, and the setups that could not be profiled, with why.
#[derive(Clone, Debug, Default)]
pub struct Profiled {
    /// The setups profiled, in the run's order.
    pub rows: Vec<MachineProfile>,
    /// The setups not profiled, with why.
    pub skipped: Vec<(String, String)>,
    /// Why no setup was profiled, when the run could not profile at all.
    pub not_run: Option<String>,
}

/// The load profiled: the middle of the fixed loads by value (of an even number, the
/// upper of the two middle ones).
pub fn rate(loads: &[u64]) -> Option<u64> {
    let mut sorted = loads.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied()
}

/// Pairs each CPU's idle-clock busy time with its samples: the CPUs, and those perf
/// sampled that the idle clocks did not read. A CPU perf has no samples of shows its
/// busy time undivided.
pub fn match_cpus(
    busy: Vec<(usize, f64)>,
    mut sampled: Vec<(usize, Profile)>,
) -> (Vec<CpuTime>, Vec<usize>) {
    let cpus = busy
        .into_iter()
        .map(|(cpu, busy)| CpuTime {
            cpu,
            busy,
            profile: sampled
                .iter()
                .position(|(c, _)| *c == cpu)
                .map(|at| sampled.remove(at).1)
                .unwrap_or_default(),
        })
        .collect();
    (cpus, sampled.into_iter().map(|(cpu, _)| cpu).collect())
}

/// How each setup is profiled.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// The load, pps.
    pub rate: u64,
    /// The profiled trial's length (twice a cost trial: the default 1 s trials give
    /// each CPU about 4,000 samples).
    pub trial: Duration,
    /// UDP payload bytes.
    pub size: usize,
}

impl Plan {
    /// At the middle of `loads`, twice `trial` long; `None` without loads.
    pub fn new(loads: &[u64], trial: Duration, size: usize) -> Option<Plan> {
        Some(Plan {
            rate: rate(loads)?,
            trial: trial * 2,
            size,
        })
    }
}

/// Profiles each of `setups` by `plan`, keeping perf's data under `dir` only while it
/// is read; without Linux perf, says so once and profiles none.
pub fn run(bench: &dyn Bed, setups: &[&'static Setup], plan: &Plan, dir: &Path) -> Profiled {
    let mut profiled = Profiled::default();
    if !Path::new(crate::bench::profile::LINUX_PERF).exists() {
        let why = format!(
            "{} missing (apt-get install linux-perf)",
            crate::bench::profile::LINUX_PERF
        );
        crate::say!("perf compare: no machine profiles: {why}");
        profiled.not_run = Some(why);
        return profiled;
    }
    for setup in setups {
        match profile_one(bench, setup, plan, dir) {
            Ok(row) => profiled.rows.push(row),
            Err(why) => {
                crate::say!("  not profiled: {why}");
                profiled.skipped.push((setup.key.to_string(), why));
            }
        }
    }
    profiled
}

/// One setup's machine over one trial by `plan`.
fn profile_one(
    bench: &dyn Bed,
    setup: &Setup,
    plan: &Plan,
    dir: &Path,
) -> Result<MachineProfile, String> {
    let rate = plan.rate;
    crate::say!("profile: {} at {rate} pps, every CPU", setup.name);
    let running = setup.start(bench.relay())?;
    let mut load = running.counted(bench.fixed_load(setup, plan.size));
    let _ = load.trial(rate, Duration::from_millis(200));
    let mut recording = Recording::start_machine(dir, "compare-machine")
        .ok_or_else(|| format!("{} did not start", crate::bench::profile::LINUX_PERF))?;
    // The busy time and the samples cover the trial alone: perf's start and stop, and
    // its reduction, lie outside.
    let (before, from) = (Snapshot::now(), monotonic_seconds());
    let trial = load.trial(rate, plan.trial);
    let (after, to) = (Snapshot::now(), monotonic_seconds());
    recording.stop();
    drop(load);
    drop(running);
    let spent = before.until(&after);
    let busy = before
        .busy_by_cpu(&after)
        .ok_or("the CPUs' idle clocks could not be read")?;
    let sampled = recording
        .finish_by_cpu((from, to))
        .ok_or("perf recorded no samples in the trial")?;
    let (cpus, unmatched) = match_cpus(busy, sampled);
    Ok(MachineProfile {
        setup: setup.key.to_string(),
        trial: LoadTrial {
            offered_pps: rate,
            sent: trial.sent,
            received: trial.received,
            busy: spent.busy,
            wall: spent.wall,
            sent_pps: Some(trial.sent_pps),
        },
        steal: spent.steal,
        cpus,
        unmatched,
    })
}

/// `us` to two decimals, "–" for none.
fn us_label(us: Option<f64>) -> String {
    us.map_or("–".into(), |us| format!("{us:.2}"))
}

/// `threads` as "name 1.23", the first `n`.
fn busiest(threads: &[ThreadCost], n: usize) -> String {
    let named: Vec<String> = threads
        .iter()
        .take(n)
        .map(|t| format!("{} {:.2}", t.name, t.us))
        .collect();
    if named.is_empty() {
        "–".into()
    } else {
        named.join(", ")
    }
}

/// What was wrong with a profiled trial, if anything, as a clause.
fn caveat(p: &MachineProfile) -> String {
    let mut out = vec![];
    if let Some(why) = p.trial.not_carried() {
        out.push(format!(
            "the load was not carried ({}: sent {} at {} pps, received {})",
            why.label(),
            p.trial.sent,
            p.trial.sent_pps.unwrap_or(0),
            p.trial.received
        ));
    }
    let cpus = p.cpus.len().max(1) as f64;
    if p.steal > 0.01 * p.trial.wall * cpus {
        out.push(format!(
            "the hypervisor stole {:.0} ms, counted as busy",
            p.steal * 1e3
        ));
    }
    if !p.unmatched.is_empty() {
        out.push(format!(
            "CPUs {:?} were sampled but their idle clocks not read: not shown",
            p.unmatched
        ));
    }
    out.join("; ")
}

/// The report's section: per setup, each CPU's busy µs per datagram and its busiest
/// threads, then each CPU's threads and functions.
pub fn markdown(profiled: &Profiled) -> String {
    let mut out = String::new();
    if let Some(why) = &profiled.not_run {
        let _ = writeln!(out, "\nNo machine profile in this run: {why}.");
    }
    let Some(first) = profiled.rows.first() else {
        for (setup, why) in &profiled.skipped {
            let _ = writeln!(out, "\n{} was not profiled: {why}.", name_of(setup));
        }
        return out;
    };
    let cpus: Vec<usize> = first.cpus.iter().map(|c| c.cpu).collect();
    let _ = write!(
        out,
        "\n### Where the whole machine's time goes, at {} pps\n\nAfter the rounds, each \
         setup once more, offered {} pps by the rounds' generator over a {:.1} s trial (twice \
         a cost trial, its settling included), every CPU sampled by Linux perf (a sample \
         each 0.5 ms of CPU time, kept only within the trial; the idle loop left out). Each \
         CPU's busy time is its idle clock's over the trial, the clock the rounds read \
         (perf's sampling interrupts are in it), in µs per datagram that arrived; a thread's \
         is its share of that CPU's busy samples times that. The tools are included, and \
         nothing outside the experiment is taken off: the direct path's row is the tools \
         and the machine's own. One trial, not the rounds: it shows where a row's cost at \
         this load lands, fixed cost included; it does not measure the cost. Each CPU's \
         busy samples are counted beside it (a share from n samples is good to about \
         ±1/√n). A softirq's work is charged to whichever thread it interrupted \
         (`swapper`: an idle CPU).\n\n| setup | whole machine |{}\n|---|---:|{}\n",
        first.trial.offered_pps,
        first.trial.offered_pps,
        first.trial.wall,
        cpus.iter()
            .map(|c| format!(" CPU {c} | CPU {c}'s busiest threads |"))
            .collect::<String>(),
        "---:|---|".repeat(cpus.len()),
    );
    for p in &profiled.rows {
        let total: f64 = p.cpus.iter().map(|c| c.busy).sum();
        let per_cpu: String = p
            .cpus
            .iter()
            .map(|c| {
                format!(
                    " {} | {} |",
                    us_label(p.per_datagram(c.busy)),
                    busiest(&p.threads(c), 3)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} |{per_cpu}",
            name_of(&p.setup),
            us_label(p.per_datagram(total)),
        );
    }
    for (setup, why) in &profiled.skipped {
        let _ = writeln!(out, "\n{} was not profiled: {why}.", name_of(setup));
    }
    for p in &profiled.rows {
        let _ = writeln!(
            out,
            "\n#### {}: the whole machine at {} pps ({} of {} datagrams arrived)",
            name_of(&p.setup),
            p.trial.offered_pps,
            p.trial.received,
            p.trial.sent
        );
        let trouble = caveat(p);
        if !trouble.is_empty() {
            let _ = writeln!(out, "\n**Read with care**: {trouble}.");
        }
        for c in &p.cpus {
            let sampled = samples_seconds(c.profile.busy_samples());
            let _ = writeln!(
                out,
                "\nCPU {}: {} µs per datagram ({:.0} ms busy by its idle clock, {:.0} ms in {} \
                 busy samples), {} of it in the kernel.{}\n\n\
                 | thread | µs per datagram | of which in the kernel |\n|---|---:|---:|",
                c.cpu,
                us_label(p.per_datagram(c.busy)),
                c.busy * 1e3,
                sampled * 1e3,
                c.profile.busy_samples(),
                if c.profile.busy_samples() == 0 {
                    "–".to_string()
                } else {
                    format!("{:.0} %", c.profile.kernel_percent)
                },
                if (sampled - c.busy).abs() > 0.25 * c.busy.max(sampled) {
                    " The samples and the idle clock disagree by more than a quarter \
                     (sampling a CPU that sleeps and wakes often is uneven on a VM): take the \
                     split below as rough."
                } else {
                    ""
                }
            );
            for t in p.threads(c).iter().take(THREADS) {
                let _ = writeln!(out, "| {} | {:.2} | {:.2} |", t.name, t.us, t.kernel_us);
            }
            out.push('\n');
            out.push_str(&symbols_table(&c.profile));
        }
    }
    out
}

/// For the JSON report: each setup's trial, and µs per datagram by CPU and by thread.
pub fn json(profiled: &Profiled) -> serde_json::Value {
    serde_json::json!({
        "rows": profiled.rows.iter().map(|p| serde_json::json!({
            "setup": p.setup,
            "rate_pps": p.trial.offered_pps,
            "sent": p.trial.sent,
            "sent_pps": p.trial.sent_pps,
            "received": p.trial.received,
            "not_carried": p.trial.not_carried().map(super::sample::NotCarried::label),
            "steal_seconds": p.steal,
            "cpus": p.cpus.iter().map(|c| serde_json::json!({
                "cpu": c.cpu,
                "busy_seconds": c.busy,
                "busy_samples": c.profile.busy_samples(),
                "us_per_datagram": p.per_datagram(c.busy),
                "kernel_percent": c.profile.kernel_percent,
                "threads": p.threads(c).iter().take(THREADS).map(|t| serde_json::json!({
                    "thread": t.name, "us": t.us, "kernel_us": t.kernel_us,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "skipped": profiled.skipped.iter().map(|(setup, why)| serde_json::json!({
            "setup": setup, "why": why,
        })).collect::<Vec<_>>(),
        "not_run": profiled.not_run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::profile::parse_report;

    #[test]
    fn the_middle_load_by_value_is_profiled() {
        assert_eq!(
            rate(&[20_000, 40_000, 60_000, 80_000, 100_000]),
            Some(60_000)
        );
        assert_eq!(
            rate(&[100_000, 20_000, 60_000, 40_000, 80_000]),
            Some(60_000)
        );
        assert_eq!(rate(&[]), None);
    }

    #[test]
    fn cpus_are_matched_by_number_and_the_unmatched_named() {
        let (cpus, unmatched) = match_cpus(
            vec![(0, 0.4), (1, 0.2)],
            vec![(1, parse_report(CPU1)), (7, Profile::default())],
        );
        assert_eq!(cpus.len(), 2);
        assert_eq!(cpus[1].cpu, 1);
        assert_eq!(cpus[1].profile.threads[0].comm, "relay-fp");
        assert!(cpus[0].profile.threads.is_empty(), "no samples: undivided");
        assert_eq!(unmatched, [7]);
    }

    const CPU0: &str = " 30.00% | 300 |load|perf|[.] ufrag_perf::bench::load::send\n\
                        10.00% | 100 |swapper|[kernel.kallsyms]|[k] handle_softirqs\n\
                        60.00% | 600 |swapper|[kernel.kallsyms]|[k] pv_native_safe_halt\n";
    const CPU1: &str = " 80.00% | 800 |relay-fp|[kernel.kallsyms]|[k] do_xdp_generic\n";

    fn profiled(received: u64) -> MachineProfile {
        let (cpus, unmatched) = match_cpus(
            vec![(0, 0.4), (1, 0.2)],
            vec![(0, parse_report(CPU0)), (1, parse_report(CPU1))],
        );
        MachineProfile {
            setup: "afxdp-fast-skb".into(),
            trial: LoadTrial {
                offered_pps: 50_000,
                sent: 100_000,
                received,
                busy: 0.6,
                wall: 2.1,
                sent_pps: Some(50_000),
            },
            steal: 0.0,
            cpus,
            unmatched,
        }
    }

    #[test]
    fn each_cpus_busy_time_is_divided_among_its_threads_by_their_samples() {
        let p = profiled(100_000);
        let all = Profiled {
            rows: vec![p.clone()],
            skipped: vec![("nginx".into(), "did not start".into())],
            not_run: None,
        };
        let md = markdown(&all);
        // CPU 0: 0.4 s over 100,000 datagrams is 4 µs, three quarters of its busy
        // samples the generator's (the idle loop is not work).
        assert!(
            md.contains(
                "| relay-afxdp fast path skb | 6.00 | 4.00 | load 3.00, swapper 1.00 | 2.00 | relay-fp 2.00 |"
            ),
            "{md}"
        );
        assert!(md.contains("| swapper | 1.00 | 1.00 |"), "{md}");
        assert!(
            md.contains("(400 ms busy by its idle clock, 200 ms in 400 busy samples)"),
            "{md}"
        );
        assert!(!md.contains("pv_native_safe_halt"), "{md}");
        assert!(!md.contains("Read with care"), "{md}");
        // CPU 0: 400 ms by the clock, 200 ms sampled; CPU 1: 200 against 400.
        assert_eq!(
            md.matches("disagree by more than a quarter").count(),
            2,
            "{md}"
        );
        assert!(md.contains("was not profiled: did not start"), "{md}");
        let json = json(&all);
        assert_eq!(json["rows"][0]["cpus"][0]["threads"][0]["us"], 3.0);
        assert_eq!(json["rows"][0]["cpus"][1]["us_per_datagram"], 2.0);
        assert_eq!(json["skipped"][0]["why"], "did not start");
    }

    #[test]
    fn a_run_that_could_not_profile_says_why() {
        let none = Profiled {
            not_run: Some("/usr/bin/perf missing".into()),
            ..Profiled::default()
        };
        assert_eq!(
            markdown(&none),
            "\nNo machine profile in this run: /usr/bin/perf missing.\n"
        );
        assert_eq!(json(&none)["not_run"], "/usr/bin/perf missing");
    }

    #[test]
    fn a_trial_that_carried_nothing_shows_no_figure_and_says_why() {
        let md = markdown(&Profiled {
            rows: vec![profiled(0)],
            skipped: vec![],
            not_run: None,
        });
        assert!(
            md.contains("| relay-afxdp fast path skb | – | – | – | – | – |"),
            "{md}"
        );
        assert!(
            md.contains("**Read with care**: the load was not carried (lost"),
            "{md}"
        );
    }
}
