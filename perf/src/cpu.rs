//! CPU accounting from `/proc`: what a core, the whole machine, a process or a thread
//! spent, and a snapshot of every CPU's counters whose difference is a trial's cost.
//!
//! Busy time is wall time minus idle, iowait and steal (`/proc/stat`): those three are
//! exact under NO_HZ (the kernel accounts idle time when it stops the tick), while the
//! user/system/softirq columns are sampled by the tick and miss softirq work done between
//! ticks of an otherwise idle CPU. `/proc/stat` counts in USER_HZ (10 ms): each reading
//! is within 10 ms per CPU, so a trial's cost is only as good as its length allows.

use std::time::Instant;

/// USER_HZ on Linux: `/proc/stat` and `/proc/…/stat` count in hundredths of a second.
const USER_HZ: f64 = 100.0;

/// Seconds since boot (CLOCK_BOOTTIME: the wall clock `/proc/stat` counts idle time in).
fn boot_seconds() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

/// The numeric columns of a `/proc/stat` cpu line (user nice system idle iowait irq
/// softirq steal …), in seconds; `None` for a short line.
fn columns(line: &str) -> Option<Vec<f64>> {
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse::<f64>().ok())
        .map(|ticks| ticks / USER_HZ)
        .collect();
    (v.len() >= 8).then_some(v)
}

/// Idle, iowait and steal seconds of a `/proc/stat` cpu line: the time it was not busy.
fn not_busy_seconds(line: &str) -> f64 {
    columns(line).map_or(0.0, |v| v[3] + v[4] + v[7])
}

/// The per-CPU lines of `/proc/stat` (`cpu0`, `cpu1`, …; not the `cpu` total).
fn cpu_lines(stat: &str) -> impl Iterator<Item = &str> {
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
}

/// Busy seconds of CPU `cpu` since boot (wall time minus its idle, iowait and steal),
/// softirq work included: what a core spent, whoever it ran for. Only differences of two
/// readings mean anything.
pub fn cpu_busy_seconds(cpu: usize) -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let name = format!("cpu{cpu}");
    cpu_lines(&stat)
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .map_or(0.0, |line| boot_seconds() - not_busy_seconds(line))
}

/// Busy seconds of the whole machine since boot (every online CPU's wall time minus its
/// idle, iowait and steal).
pub fn machine_busy_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let lines: Vec<&str> = cpu_lines(&stat).collect();
    lines.len() as f64 * boot_seconds() - lines.iter().map(|l| not_busy_seconds(l)).sum::<f64>()
}

/// Every CPU's counters at one instant: the start or end of a measured window.
#[derive(Clone, Debug)]
pub struct Snapshot {
    at: Instant,
    /// Idle + iowait seconds summed over the CPUs.
    idle: f64,
    /// Steal seconds summed over the CPUs.
    steal: f64,
    cpus: usize,
    /// `/proc/pressure/cpu`'s `some` total, µs (`None` without PSI).
    pressure_us: Option<u64>,
}

/// What the machine spent between two snapshots.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spent {
    /// Wall seconds between the snapshots.
    pub wall: f64,
    /// Busy CPU seconds over every CPU (wall × CPUs − idle − iowait − steal).
    pub busy: f64,
    /// Steal seconds over every CPU: time the hypervisor gave another guest.
    pub steal: f64,
    /// The share of the wall time some runnable task waited for a CPU (PSI `some`).
    pub pressure: Option<f64>,
    /// CPUs counted.
    pub cpus: usize,
}

impl Spent {
    /// The share of every CPU's wall time that was stolen.
    pub fn steal_share(&self) -> f64 {
        self.steal / (self.wall * self.cpus.max(1) as f64).max(1e-9)
    }

    /// The share of every CPU's wall time that was busy.
    pub fn busy_share(&self) -> f64 {
        self.busy / (self.wall * self.cpus.max(1) as f64).max(1e-9)
    }
}

impl Snapshot {
    /// Reads `/proc/stat` and `/proc/pressure/cpu` now.
    pub fn now() -> Snapshot {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let pressure_us = std::fs::read_to_string("/proc/pressure/cpu")
            .ok()
            .and_then(|t| pressure_some_total_us(&t));
        Snapshot::parse(&stat, pressure_us, Instant::now())
    }

    /// A snapshot from `/proc/stat`'s text.
    fn parse(stat: &str, pressure_us: Option<u64>, at: Instant) -> Snapshot {
        let (mut idle, mut steal, mut cpus) = (0.0, 0.0, 0);
        for v in cpu_lines(stat).filter_map(columns) {
            idle += v[3] + v[4];
            steal += v[7];
            cpus += 1;
        }
        Snapshot {
            at,
            idle,
            steal,
            cpus,
            pressure_us,
        }
    }

    /// What was spent from `self` until `later`.
    pub fn until(&self, later: &Snapshot) -> Spent {
        let wall = later.at.saturating_duration_since(self.at).as_secs_f64();
        let idle = later.idle - self.idle;
        let steal = later.steal - self.steal;
        let cpus = later.cpus.max(self.cpus);
        let pressure = match (self.pressure_us, later.pressure_us) {
            (Some(a), Some(b)) if wall > 0.0 => Some(b.saturating_sub(a) as f64 / 1e6 / wall),
            _ => None,
        };
        Spent {
            wall,
            busy: (wall * cpus as f64 - idle - steal).max(0.0),
            steal: steal.max(0.0),
            pressure,
            cpus,
        }
    }
}

/// The `some … total=N` of `/proc/pressure/cpu`, µs.
fn pressure_some_total_us(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with("some "))?
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// User + system CPU seconds from a `/proc/…/stat` file (0 if unreadable).
fn stat_cpu_seconds(path: &std::path::Path) -> f64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the ")" of the command name: utime is the 12th, stime the 13th.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (num(11) + num(12)) / USER_HZ
}

/// The calling thread's CPU seconds so far (for threads that are gone before anyone
/// else could read them).
pub fn thread_cpu_seconds() -> f64 {
    stat_cpu_seconds(std::path::Path::new("/proc/thread-self/stat"))
}

/// Counts CPU time (user + system) of a process, or of its threads whose name starts
/// with `thread_prefix`, in seconds (from /proc).
pub fn cpu_seconds(pid: u32, thread_prefix: Option<&str>) -> f64 {
    let read = |path: std::path::PathBuf| stat_cpu_seconds(&path);
    match thread_prefix {
        None => read(format!("/proc/{pid}/stat").into()),
        Some(prefix) => std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks
                    .flatten()
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim().starts_with(prefix))
                    })
                    .map(|t| read(t.path().join("stat")))
                    .sum()
            })
            .unwrap_or(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn not_busy_is_idle_iowait_and_steal() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let line = "cpu0 10 0 20 300 5 1 2 7 0 0";
        assert!((not_busy_seconds(line) - 3.12).abs() < 1e-9);
        assert_eq!(
            not_busy_seconds("cpu0 1 2"),
            0.0,
            "a short line counts nothing"
        );
        let (a, b) = (cpu_busy_seconds(0), cpu_busy_seconds(0));
        assert!(
            b >= a - 0.011,
            "busy time does not run backwards: {a} then {b}"
        );
    }

    #[test]
    fn a_window_counts_every_cpu_and_leaves_out_the_total_line() {
        let t0 = Instant::now();
        let before = "cpu  1 1 1 1 1 1 1 1 0 0\n\
                      cpu0 100 0 100 1000 10 0 0 5 0 0\n\
                      cpu1 100 0 100 1000 10 0 0 5 0 0\nintr 1\n";
        // Two seconds later: CPU 0 idle 150 of 200 ticks and stolen 10; CPU 1 idle 200.
        let after = "cpu  9 9 9 9 9 9 9 9 0 0\n\
                     cpu0 120 0 120 1150 10 0 0 15 0 0\n\
                     cpu1 100 0 100 1200 10 0 0 5 0 0\n";
        let a = Snapshot::parse(before, Some(1_000_000), t0);
        let b = Snapshot::parse(after, Some(1_500_000), t0 + Duration::from_secs(2));
        let spent = a.until(&b);
        assert_eq!(spent.cpus, 2);
        assert!((spent.wall - 2.0).abs() < 1e-9);
        // 4 CPU-seconds of wall, 3.5 idle, 0.1 stolen: 0.4 busy.
        assert!((spent.busy - 0.4).abs() < 1e-9, "{spent:?}");
        assert!((spent.steal_share() - 0.025).abs() < 1e-9);
        assert!((spent.busy_share() - 0.1).abs() < 1e-9);
        assert_eq!(spent.pressure, Some(0.25));
    }

    #[test]
    fn the_pressure_total_is_read_from_the_some_line() {
        let text = "some avg10=0.00 avg60=0.00 avg300=0.24 total=3164871\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(pressure_some_total_us(text), Some(3_164_871));
        assert_eq!(pressure_some_total_us("full total=1\n"), None);
    }

    #[test]
    fn a_real_window_is_not_negative() {
        let a = Snapshot::now();
        std::thread::sleep(Duration::from_millis(20));
        let spent = a.until(&Snapshot::now());
        assert!(spent.cpus >= 1);
        assert!(spent.busy >= 0.0 && spent.steal >= 0.0);
        assert!(spent.wall >= 0.02);
    }
}
