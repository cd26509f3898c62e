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
use super::setups::{Setup, name_of};
use crate::cpu::Snapshot;
use crate::profile::{Profile, Recording};

/// The profiled trial's length: two seconds give each CPU about 4,000 samples.
pub const TRIAL: Duration = Duration::from_secs(2);

/// Threads listed per setup.
const THREADS: usize = 6;

/// Functions listed per setup.
const FUNCTIONS: usize = 8;

/// One CPU over the profiled trial.
#[derive(Clone, Debug)]
pub struct CpuTime {
    /// The CPU.
    pub cpu: usize,
    /// Its busy seconds by its idle clock: the measure the rounds count.
    pub busy: f64,
    /// Its samples, the idle loop left out: how that busy time divides.
    pub profile: Profile,
}

impl CpuTime {
    /// The share of this CPU's busy samples that `samples` are.
    fn share(&self, samples: u64) -> f64 {
        let busy: u64 = self.profile.threads.iter().map(|t| t.samples).sum();
        samples as f64 / busy.max(1) as f64
    }
}

/// One setup's machine over the profiled trial.
#[derive(Clone, Debug)]
pub struct MachineProfile {
    /// The setup's key.
    pub setup: String,
    /// The offered load, pps.
    pub rate_pps: u64,
    /// Datagrams that reached the sink.
    pub received: u64,
    /// Each CPU, by number.
    pub cpus: Vec<CpuTime>,
}

impl MachineProfile {
    /// `seconds` of CPU time per datagram that arrived, µs.
    fn per_datagram(&self, seconds: f64) -> f64 {
        seconds * 1e6 / self.received.max(1) as f64
    }

    /// `cpu`'s threads, busiest first, each as its name and its µs per datagram and
    /// those in the kernel: its share of the CPU's samples times the CPU's busy time.
    fn threads(&self, cpu: &CpuTime) -> Vec<(String, f64, f64)> {
        let us = self.per_datagram(cpu.busy);
        cpu.profile
            .threads
            .iter()
            .map(|t| {
                (
                    t.comm.clone(),
                    cpu.share(t.samples) * us,
                    cpu.share(t.kernel_samples) * us,
                )
            })
            .collect()
    }
}

/// The load profiled: the middle of the fixed loads, one every setup carries in the
/// rounds of a sound run.
pub fn rate(loads: &[u64]) -> Option<u64> {
    loads.get(loads.len() / 2).copied()
}

/// Profiles each of `setups` at the middle of `loads` (datagrams of `size` bytes),
/// keeping perf's data under `dir` only while it is read. Empty without Linux perf.
pub fn run(
    bench: &dyn Bed,
    setups: &[&'static Setup],
    loads: &[u64],
    size: usize,
    dir: &Path,
) -> Vec<MachineProfile> {
    let Some(rate) = rate(loads) else {
        return vec![];
    };
    if !Path::new(crate::profile::LINUX_PERF).exists() {
        crate::say!(
            "perf compare: no machine profiles: {} missing",
            crate::profile::LINUX_PERF
        );
        return vec![];
    }
    let mut profiles = vec![];
    for setup in setups {
        crate::say!("profile: {} at {rate} pps, every CPU", setup.name);
        // The run's preflight started every setup once: one that fails now cannot go on.
        let running = setup.start(bench.relay()).unwrap_or_else(|e| panic!("{e}"));
        let mut load = bench.fixed_load(setup, size);
        let _ = load.trial(rate, Duration::from_millis(200));
        let Some(recording) = Recording::start_machine(dir, "compare-machine") else {
            break;
        };
        let before = Snapshot::now();
        let trial = load.trial(rate, TRIAL);
        let after = Snapshot::now();
        let by_cpu = recording.finish_by_cpu();
        drop(load);
        drop(running);
        let (Some(mut by_cpu), Some(busy)) = (by_cpu, before.busy_by_cpu(&after)) else {
            continue;
        };
        let cpus = busy
            .into_iter()
            .map(|(cpu, busy)| CpuTime {
                cpu,
                busy,
                profile: by_cpu
                    .iter()
                    .position(|(c, _)| *c == cpu)
                    .map(|at| by_cpu.swap_remove(at).1)
                    .unwrap_or_default(),
            })
            .collect();
        profiles.push(MachineProfile {
            setup: setup.key.to_string(),
            rate_pps: rate,
            received: trial.received,
            cpus,
        });
    }
    profiles
}

/// `threads` (name, µs per datagram, in the kernel) as "name 1.23", the first `n`.
fn busiest(threads: &[(String, f64, f64)], n: usize) -> String {
    let named: Vec<String> = threads
        .iter()
        .take(n)
        .map(|(name, us, _)| format!("{name} {us:.2}"))
        .collect();
    if named.is_empty() {
        "–".into()
    } else {
        named.join(", ")
    }
}

/// The report's section: per setup, each CPU's busy µs per datagram and its busiest
/// threads, then each CPU's threads and functions.
pub fn markdown(profiles: &[MachineProfile]) -> String {
    let Some(first) = profiles.first() else {
        return String::new();
    };
    let cpus: Vec<usize> = first.cpus.iter().map(|c| c.cpu).collect();
    let mut out = format!(
        "\n### Where the whole machine's time goes, at {} pps\n\nAfter the rounds, each \
         setup once more, offered {} pps by the rounds' generator for {:?}, every CPU \
         sampled by Linux perf (a sample each 0.5 ms of CPU time; the idle loop left out). \
         Each CPU's busy time is its idle clock's (what the rounds count), in µs per \
         datagram that arrived; a thread's is its share of that CPU's samples times that. \
         The tools are included: the direct path's row is what they cost. One trial, not \
         the rounds: it shows where a row's cost lands, it does not measure the cost. A \
         softirq's work is charged to whichever thread it interrupted (`swapper`: an idle \
         CPU).\n\n| setup | whole machine |{}\n|---|---:|{}\n",
        first.rate_pps,
        first.rate_pps,
        TRIAL,
        cpus.iter()
            .map(|c| format!(" CPU {c} | CPU {c}'s busiest threads |"))
            .collect::<String>(),
        "---:|---|".repeat(cpus.len()),
    );
    for p in profiles {
        let total: f64 = p.cpus.iter().map(|c| c.busy).sum();
        let per_cpu: String = p
            .cpus
            .iter()
            .map(|c| {
                format!(
                    " {:.2} | {} |",
                    p.per_datagram(c.busy),
                    busiest(&p.threads(c), 3)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {:.2} |{per_cpu}",
            name_of(&p.setup),
            p.per_datagram(total),
        );
    }
    for p in profiles {
        let _ = writeln!(
            out,
            "\n#### {}: the whole machine at {} pps ({} datagrams arrived)",
            name_of(&p.setup),
            p.rate_pps,
            p.received
        );
        for c in &p.cpus {
            let _ = write!(
                out,
                "\nCPU {}: {:.2} µs per datagram, {:.0} % of it in the kernel.\n\n\
                 | thread | µs per datagram | of which in the kernel |\n|---|---:|---:|\n",
                c.cpu,
                p.per_datagram(c.busy),
                c.profile.kernel_percent
            );
            for (name, us, kernel) in p.threads(c).iter().take(THREADS) {
                let _ = writeln!(out, "| {name} | {us:.2} | {kernel:.2} |");
            }
            out.push_str(
                "\n| share of the CPU's busy samples | thread | where | function |\n|---:|---|---|---|\n",
            );
            for h in c.profile.top.iter().take(FUNCTIONS) {
                let symbol: String = h.symbol.chars().take(90).collect();
                let _ = writeln!(
                    out,
                    "| {:.1} % | {} | {} | `{}` |",
                    h.percent,
                    h.comm,
                    if h.kernel { "kernel" } else { &h.dso },
                    symbol.replace('|', "\\|")
                );
            }
        }
    }
    out
}

/// For the JSON report: each setup's µs per datagram by CPU, and by thread on each.
pub fn json(profiles: &[MachineProfile]) -> serde_json::Value {
    serde_json::Value::Array(
        profiles
            .iter()
            .map(|p| {
                serde_json::json!({
                    "setup": p.setup,
                    "rate_pps": p.rate_pps,
                    "received": p.received,
                    "cpus": p.cpus.iter().map(|c| serde_json::json!({
                        "cpu": c.cpu,
                        "us_per_datagram": p.per_datagram(c.busy),
                        "kernel_percent": c.profile.kernel_percent,
                        "threads": p.threads(c).iter().take(THREADS).map(|(name, us, kernel)| {
                            serde_json::json!({"thread": name, "us": us, "kernel_us": kernel})
                        }).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::parse_report;

    #[test]
    fn the_middle_load_is_profiled() {
        assert_eq!(
            rate(&[20_000, 40_000, 60_000, 80_000, 100_000]),
            Some(60_000)
        );
        assert_eq!(rate(&[10_000, 20_000]), Some(20_000));
        assert_eq!(rate(&[]), None);
    }

    #[test]
    fn each_cpus_busy_time_is_divided_among_its_threads_by_their_samples() {
        let cpu0 = " 30.00% | 300 |load|perf|[.] perf::load::send\n\
                    10.00% | 100 |swapper|[kernel.kallsyms]|[k] handle_softirqs\n\
                    60.00% | 600 |swapper|[kernel.kallsyms]|[k] pv_native_safe_halt\n";
        let cpu1 = " 80.00% | 800 |relay-fp|[kernel.kallsyms]|[k] do_xdp_generic\n";
        let p = MachineProfile {
            setup: "afxdp-fast-skb".into(),
            rate_pps: 60_000,
            received: 100_000,
            cpus: vec![
                CpuTime {
                    cpu: 0,
                    busy: 0.4,
                    profile: parse_report(cpu0),
                },
                CpuTime {
                    cpu: 1,
                    busy: 0.2,
                    profile: parse_report(cpu1),
                },
            ],
        };
        let md = markdown(std::slice::from_ref(&p));
        // CPU 0: 0.4 s over 100,000 datagrams is 4 µs, three quarters of its busy
        // samples the generator's (the idle loop is not work).
        assert!(
            md.contains(
                "| relay-afxdp fast path skb | 6.00 | 4.00 | load 3.00, swapper 1.00 | 2.00 | relay-fp 2.00 |"
            ),
            "{md}"
        );
        assert!(md.contains("| swapper | 1.00 | 1.00 |"), "{md}");
        assert!(!md.contains("pv_native_safe_halt"), "{md}");
        let json = json(&[p]);
        assert_eq!(json[0]["cpus"][0]["threads"][0]["us"], 3.0);
        assert_eq!(json[0]["cpus"][1]["us_per_datagram"], 2.0);
    }
}
