//! CPU accounting from `/proc`: what a core, the whole machine, a process or a thread
//! spent, and a snapshot of every CPU's counters whose difference is a trial's cost.
//!
//! Busy time is wall time minus idle, iowait and steal. The kernel keeps each CPU's idle
//! and iowait time in nanoseconds (it stops the idle clock on every interrupt, so softirq
//! work on an otherwise idle CPU counts as busy), but `/proc/stat` prints them in USER_HZ
//! ticks of 10 ms. A [`Snapshot`] reads them in nanoseconds from `/proc/timer_list`
//! (root only) on a thread pinned to each CPU: a CPU running the reader is not idle, so
//! its idle time is complete up to that instant. Without `/proc/timer_list` it falls back
//! to `/proc/stat`, and [`Spent::precision`] says which was used. Steal is read from
//! `/proc/stat` either way.

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
    /// Idle + iowait seconds summed over the CPUs (`/proc/stat`, 10 ms ticks).
    idle: f64,
    /// Steal seconds summed over the CPUs.
    steal: f64,
    cpus: usize,
    /// `/proc/pressure/cpu`'s `some` total, µs (`None` without PSI).
    pressure_us: Option<u64>,
    /// Each CPU's idle clock in nanoseconds, read on that CPU (`None` when
    /// `/proc/timer_list` could not be read for every CPU).
    idle_ns: Option<Vec<CpuIdle>>,
}

/// One CPU's idle clock, read on that CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CpuIdle {
    /// The CPU.
    cpu: usize,
    /// The kernel's monotonic clock when it was read, ns.
    now_ns: u64,
    /// Idle plus iowait time since boot, ns.
    idle_ns: u64,
}

/// How precisely busy time was counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// Each CPU's idle clock in nanoseconds (`/proc/timer_list`).
    Nanoseconds,
    /// `/proc/stat`'s 10 ms ticks.
    Ticks,
}

impl Precision {
    /// How the report says it.
    pub fn label(self) -> &'static str {
        match self {
            Precision::Nanoseconds => "nanoseconds (each CPU's idle clock, /proc/timer_list)",
            Precision::Ticks => "10 ms ticks (/proc/stat; /proc/timer_list unreadable)",
        }
    }
}

/// The `now at` clock and `cpu`'s idle plus iowait time from `/proc/timer_list`'s text.
fn idle_of(timer_list: &str, cpu: usize) -> Option<CpuIdle> {
    let number = |line: &str| -> Option<u64> {
        line.split(':')
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let now_ns = timer_list
        .lines()
        .find_map(|l| l.strip_prefix("now at "))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let header = format!("cpu: {cpu}");
    let mut lines = timer_list.lines().skip_while(|l| l.trim_end() != header);
    lines.next()?;
    let (mut idle, mut iowait) = (None, None);
    for line in lines.take_while(|l| !l.starts_with("cpu: ")) {
        let field = line.trim_start();
        if field.starts_with(".idle_sleeptime") {
            idle = number(field);
        } else if field.starts_with(".iowait_sleeptime") {
            iowait = number(field);
        }
    }
    Some(CpuIdle {
        cpu,
        now_ns,
        idle_ns: idle? + iowait?,
    })
}

/// Every online CPU's idle clock, each read by a thread pinned to it; `None` if any CPU
/// could not be pinned to or read.
fn idle_clocks(cpus: &[usize]) -> Option<Vec<CpuIdle>> {
    std::thread::scope(|scope| {
        let readers: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                scope.spawn(move || {
                    if !ufrag_common::runtime::lifecycle::pin_current_thread(cpu) {
                        return None;
                    }
                    idle_of(&std::fs::read_to_string("/proc/timer_list").ok()?, cpu)
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().ok().flatten())
            .collect()
    })
}

/// The CPU numbers of `/proc/stat`'s per-CPU lines.
fn cpu_numbers(stat: &str) -> Vec<usize> {
    cpu_lines(stat)
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .strip_prefix("cpu")?
                .parse()
                .ok()
        })
        .collect()
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
    /// How precisely `busy` was counted.
    pub precision: Precision,
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
    /// Reads every CPU's idle clock, `/proc/stat` and `/proc/pressure/cpu` now.
    pub fn now() -> Snapshot {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let idle_ns = idle_clocks(&cpu_numbers(&stat));
        let pressure_us = std::fs::read_to_string("/proc/pressure/cpu")
            .ok()
            .and_then(|t| pressure_some_total_us(&t));
        Snapshot {
            idle_ns,
            ..Snapshot::parse(&stat, pressure_us, Instant::now())
        }
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
            idle_ns: None,
        }
    }

    /// Busy CPU seconds from `self` until `later` by each CPU's idle clock, when both
    /// read the same CPUs: each CPU's own wall time between its two readings less its
    /// idle time.
    fn busy_by_idle_clocks(&self, later: &Snapshot) -> Option<f64> {
        Some(self.busy_by_cpu(later)?.iter().map(|(_, busy)| busy).sum())
    }

    /// Each CPU's busy seconds from `self` until `later` by its idle clock, by CPU
    /// number (`None` when either snapshot could not read every CPU's idle clock).
    pub fn busy_by_cpu(&self, later: &Snapshot) -> Option<Vec<(usize, f64)>> {
        let (a, b) = (self.idle_ns.as_ref()?, later.idle_ns.as_ref()?);
        if a.len() != b.len() || a.iter().zip(b).any(|(x, y)| x.cpu != y.cpu) {
            return None;
        }
        Some(
            a.iter()
                .zip(b)
                .map(|(x, y)| {
                    let wall = y.now_ns.saturating_sub(x.now_ns);
                    let idle = y.idle_ns.saturating_sub(x.idle_ns);
                    (x.cpu, wall.saturating_sub(idle) as f64 / 1e9)
                })
                .collect(),
        )
    }

    /// What was spent from `self` until `later`.
    pub fn until(&self, later: &Snapshot) -> Spent {
        let wall = later.at.saturating_duration_since(self.at).as_secs_f64();
        let idle = later.idle - self.idle;
        let steal = (later.steal - self.steal).max(0.0);
        let cpus = later.cpus.max(self.cpus);
        let pressure = match (self.pressure_us, later.pressure_us) {
            (Some(a), Some(b)) if wall > 0.0 => Some(b.saturating_sub(a) as f64 / 1e6 / wall),
            _ => None,
        };
        let (busy, precision) = match self.busy_by_idle_clocks(later) {
            // Steal is in 10 ms ticks: taken off nanoseconds it would only add its
            // rounding. Trials with steal are left out by the host gate instead.
            Some(busy) => (busy, Precision::Nanoseconds),
            None => (
                (wall * cpus as f64 - idle - steal).max(0.0),
                Precision::Ticks,
            ),
        };
        Spent {
            wall,
            busy,
            steal,
            pressure,
            cpus,
            precision,
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

    /// A `/proc/timer_list` cut down to the lines [`idle_of`] reads.
    const TIMER_LIST: &str = "Timer List Version: v0.10\nHRTIMER_MAX_CLOCK_BASES: 8\n\
        now at 115537934304 nsecs\n\ncpu: 0\n clock 0:\n  .base:       00000000a99b790a\n\
        active timers:\n  .idle_sleeptime : 60195441281 nsecs\n  .iowait_sleeptime: 342504939 nsecs\n\
        cpu: 1\n  .idle_sleeptime : 49190350640 nsecs\n  .iowait_sleeptime: 3162548750 nsecs\n\
        \nTick Device: mode:     1\n";

    #[test]
    fn each_cpus_idle_clock_is_read_from_its_own_section() {
        let zero = idle_of(TIMER_LIST, 0).unwrap();
        assert_eq!(zero.now_ns, 115_537_934_304);
        assert_eq!(zero.idle_ns, 60_195_441_281 + 342_504_939);
        let one = idle_of(TIMER_LIST, 1).unwrap();
        assert_eq!((one.cpu, one.idle_ns), (1, 49_190_350_640 + 3_162_548_750));
        assert_eq!(idle_of(TIMER_LIST, 2), None, "no such CPU");
        assert_eq!(idle_of("cpu: 0\n", 0), None, "no clock");
    }

    #[test]
    fn busy_by_idle_clocks_is_each_cpus_wall_less_its_idle() {
        let t0 = Instant::now();
        let stat = "cpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n";
        let clock = |cpu, now_ns, idle_ns| CpuIdle {
            cpu,
            now_ns,
            idle_ns,
        };
        let a = Snapshot {
            idle_ns: Some(vec![clock(0, 1_000, 0), clock(1, 2_000, 0)]),
            ..Snapshot::parse(stat, None, t0)
        };
        // CPU 0: 1 ms of wall, 0.25 ms idle; CPU 1: 1 ms of wall, all idle.
        let b = Snapshot {
            idle_ns: Some(vec![
                clock(0, 1_001_000, 250_000),
                clock(1, 1_002_000, 1_000_000),
            ]),
            ..Snapshot::parse(stat, None, t0 + Duration::from_millis(1))
        };
        let spent = a.until(&b);
        assert_eq!(spent.precision, Precision::Nanoseconds);
        assert!((spent.busy - 0.000_75).abs() < 1e-12, "{spent:?}");
        let ticks = Snapshot::parse(stat, None, t0).until(&b);
        assert_eq!(ticks.precision, Precision::Ticks, "one side without clocks");
    }

    #[test]
    fn a_real_snapshot_reads_every_cpus_idle_clock_as_root() {
        let snapshot = Snapshot::now();
        if !nix::unistd::geteuid().is_root() {
            eprintln!("!! SKIPPED the idle clocks: /proc/timer_list needs root");
            return;
        }
        let clocks = snapshot.idle_ns.as_ref().expect("every CPU's idle clock");
        assert_eq!(clocks.len(), crate::bench::environment::online_cpus());
        std::thread::sleep(Duration::from_millis(20));
        let spent = snapshot.until(&Snapshot::now());
        assert_eq!(spent.precision, Precision::Nanoseconds);
        assert!(spent.busy >= 0.0 && spent.busy <= spent.wall * spent.cpus as f64 + 0.01);
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
