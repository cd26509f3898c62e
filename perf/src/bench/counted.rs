//! The CPUs a lab's cost counts, and the network work that landed outside them. On a lab
//! host of many cores, the relay's cost would drown in the idle time of the cores it does
//! not use, so a lab counts the relay's cores (`--relay-cpus`) and the cores its
//! interface's interrupts land on (their effective affinity), the same set for every
//! row (the null row's subtraction needs it). Receive softirqs (`NET_RX` in
//! `/proc/softirqs`) and the interface's interrupts (`/proc/interrupts`) are counted per
//! CPU around each trial: what ran on a CPU outside the set is work the cost missed, and
//! the report flags it. `NET_RX` counts every device's receive softirqs (the kernel does
//! not split them), the interrupts only the interface's.

use std::collections::{BTreeMap, BTreeSet};

/// A kernel CPU list (`0-3,8,10-11`) as CPU numbers; `None` if any part is not one.
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = vec![];
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last): (usize, usize) = (first.parse().ok()?, last.parse().ok()?);
                if last < first {
                    return None;
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// The CPUs interface `name`'s interrupts land on now (each one's
/// `effective_affinity_list`); none for a virtual device.
pub fn interrupt_cpus(name: &str) -> BTreeSet<usize> {
    let interrupts = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    crate::bench::settings::interface_irqs(name, &interrupts)
        .into_iter()
        .filter_map(|irq| crate::bench::settings::irq_setting(irq, "effective_affinity_list"))
        .filter_map(|list| parse_cpu_list(&list))
        .flatten()
        .collect()
}

/// CPUs as the kernel's comma-separated list (without ranges).
pub fn cpu_list(cpus: &BTreeSet<usize>) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The CPUs a lab counts: the relay's and where its interface's interrupts land.
pub fn lab_set(relay_cpus: &[usize], interface: &str) -> BTreeSet<usize> {
    relay_cpus
        .iter()
        .copied()
        .chain(interrupt_cpus(interface))
        .collect()
}

/// Network work per CPU at one instant: receive softirqs and the interface's interrupts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkWork {
    /// `NET_RX` softirqs raised on each CPU since boot (every device's), by CPU.
    pub softirqs: BTreeMap<usize, u64>,
    /// The interface's interrupts on each CPU since boot, all its vectors summed, by CPU.
    pub interrupts: BTreeMap<usize, u64>,
}

/// The CPU numbers a `/proc/softirqs` or `/proc/interrupts` header names, in column
/// order (`CPU0 CPU2 …`: an offline CPU has no column in the latter).
fn header_cpus(text: &str) -> Vec<usize> {
    text.lines().next().map_or(vec![], |header| {
        header
            .split_whitespace()
            .filter_map(|c| c.strip_prefix("CPU")?.parse().ok())
            .collect()
    })
}

/// The per-CPU counts of the `/proc/softirqs` row called `row` (`NET_RX:`), by CPU number.
pub fn softirq_row(text: &str, row: &str) -> BTreeMap<usize, u64> {
    let cpus = header_cpus(text);
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(row))
        .map(|counts| {
            cpus.iter()
                .copied()
                .zip(counts.split_whitespace().filter_map(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// The per-CPU counts of interrupts `irqs` in a `/proc/interrupts` text, summed, by CPU
/// number (its header names the CPUs of its columns).
pub fn interrupt_counts(text: &str, irqs: &[u32]) -> BTreeMap<usize, u64> {
    let cpus = header_cpus(text);
    let mut sums: BTreeMap<usize, u64> = cpus.iter().map(|&c| (c, 0)).collect();
    for line in text.lines().skip(1) {
        let Some((irq, rest)) = line.trim_start().split_once(':') else {
            continue;
        };
        if !irq.parse().is_ok_and(|n: u32| irqs.contains(&n)) {
            continue;
        }
        let counts = rest.split_whitespace().map_while(|n| n.parse::<u64>().ok());
        for (cpu, n) in cpus.iter().zip(counts) {
            *sums.entry(*cpu).or_default() += n;
        }
    }
    sums
}

impl NetworkWork {
    /// Now, for interface `name`.
    pub fn read(name: &str) -> NetworkWork {
        let interrupts = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
        let irqs = crate::bench::settings::interface_irqs(name, &interrupts);
        NetworkWork {
            softirqs: softirq_row(
                &std::fs::read_to_string("/proc/softirqs").unwrap_or_default(),
                "NET_RX:",
            ),
            interrupts: interrupt_counts(&interrupts, &irqs),
        }
    }

    /// What landed on CPUs outside `counted` from `self` until `later`: each such CPU
    /// with its receive softirqs and interrupts, busiest first, CPUs with neither left
    /// out.
    pub fn elsewhere(&self, later: &NetworkWork, counted: &BTreeSet<usize>) -> Vec<Elsewhere> {
        let delta = |a: &BTreeMap<usize, u64>, b: &BTreeMap<usize, u64>, cpu: usize| {
            b.get(&cpu)
                .copied()
                .unwrap_or(0)
                .saturating_sub(a.get(&cpu).copied().unwrap_or(0))
        };
        let cpus: BTreeSet<usize> = later
            .softirqs
            .keys()
            .chain(later.interrupts.keys())
            .copied()
            .collect();
        let mut found: Vec<Elsewhere> = cpus
            .into_iter()
            .filter(|cpu| !counted.contains(cpu))
            .map(|cpu| Elsewhere {
                cpu,
                softirqs: delta(&self.softirqs, &later.softirqs, cpu),
                interrupts: delta(&self.interrupts, &later.interrupts, cpu),
            })
            .filter(|e| e.softirqs + e.interrupts > 0)
            .collect();
        found.sort_by_key(|e| std::cmp::Reverse(e.softirqs + e.interrupts));
        found
    }
}

/// Network work that ran on a CPU the cost did not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elsewhere {
    /// The CPU.
    pub cpu: usize,
    /// `NET_RX` softirqs raised on it.
    pub softirqs: u64,
    /// The interface's interrupts it took.
    pub interrupts: u64,
}

impl Elsewhere {
    /// As the report says it.
    pub fn label(&self) -> String {
        format!(
            "CPU {}: {} receive softirqs, {} interrupts",
            self.cpu, self.softirqs, self.interrupts
        )
    }
}

/// Receive softirqs and interrupts by CPU, summed over several windows.
pub type ByCpu = BTreeMap<usize, (u64, u64)>;

/// Sums each CPU's counts over several windows (a setup's trials in every round).
pub fn add(into: &mut ByCpu, found: &[Elsewhere]) {
    for e in found {
        let sum = into.entry(e.cpu).or_default();
        sum.0 += e.softirqs;
        sum.1 += e.interrupts;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn softirqs_and_interrupts_are_read_per_cpu() {
        let softirqs = "                    CPU0       CPU1\n          HI:          0          1\n      \
                        NET_TX:          5          6\n      NET_RX:       1000        20\n";
        assert_eq!(
            softirq_row(softirqs, "NET_RX:"),
            BTreeMap::from([(0, 1000), (1, 20)])
        );
        // CPU 1 offline: no column of its own, so the third column is CPU 2's.
        let interrupts = "           CPU0       CPU2       CPU3\n  \
                          44:        10          0          5  IR-PCI-MSIX-0000:3b:00.0    0-edge      ens1f0-TxRx-0\n  \
                          45:         1          2          3  IR-PCI-MSIX-0000:3b:00.0    1-edge      ens1f0-TxRx-1\n \
                          NMI:          0          0          0   Non-maskable interrupts\n";
        assert_eq!(
            interrupt_counts(interrupts, &[44, 45]),
            BTreeMap::from([(0, 11), (2, 2), (3, 8)])
        );
        assert_eq!(
            interrupt_counts(interrupts, &[]),
            BTreeMap::from([(0, 0), (2, 0), (3, 0)])
        );
    }

    #[test]
    fn work_outside_the_counted_cpus_is_named_busiest_first() {
        let per_cpu = |counts: [u64; 4]| counts.into_iter().enumerate().collect();
        let before = NetworkWork {
            softirqs: per_cpu([100, 100, 100, 100]),
            interrupts: per_cpu([0, 0, 0, 0]),
        };
        let after = NetworkWork {
            softirqs: per_cpu([900, 100, 130, 500]),
            interrupts: per_cpu([50, 0, 0, 7]),
        };
        let counted = BTreeSet::from([0, 1]);
        let found = before.elsewhere(&after, &counted);
        assert_eq!(
            found,
            vec![
                Elsewhere {
                    cpu: 3,
                    softirqs: 400,
                    interrupts: 7
                },
                Elsewhere {
                    cpu: 2,
                    softirqs: 30,
                    interrupts: 0
                },
            ]
        );
        assert_eq!(
            found[0].label(),
            "CPU 3: 400 receive softirqs, 7 interrupts"
        );
        assert!(
            before
                .elsewhere(&after, &BTreeSet::from([0, 1, 2, 3]))
                .is_empty()
        );
    }
}
