//! Where a core, the whole machine or a process spends its time: `perf record` (Linux
//! perf, Debian's `linux-perf`, sampling the CPU clock: no hardware counters needed) on
//! the forwarder's core, on every CPU, or on every thread of one process while a trial
//! runs, reduced to the busiest symbols, each thread's share and the share spent in the
//! kernel (all of busy samples: the idle loop's are counted apart), for the appendices of
//! `ufrag-perf compare`'s and `ufrag-perf model`'s reports.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where Debian's `linux-perf` installs the tool (our own binary is also called `perf`).
pub const LINUX_PERF: &str = "/usr/bin/perf";

/// One sample per this many nanoseconds of CPU time (a fixed period, not a frequency
/// that perf adjusts: so a thread's samples count its CPU time).
const PERIOD_NS: u32 = 500_000;

/// Symbols shown per profile.
const TOP: usize = 12;

/// One symbol's share of the busy samples on the profiled core.
#[derive(Clone, Debug, PartialEq)]
pub struct Hot {
    /// Percent of the core's busy samples.
    pub percent: f64,
    /// Samples: each is 0.5 ms of CPU time.
    pub samples: u64,
    /// The thread's name (`relay-w0`, `nginx`, `ksoftirqd/1`, …).
    pub comm: String,
    /// The binary or `[kernel.kallsyms]`.
    pub dso: String,
    /// The function, as perf resolved it.
    pub symbol: String,
    /// True for kernel code.
    pub kernel: bool,
}

/// The functions an idle CPU's task (`swapper/N`) waits in, across the kernel's idle
/// drivers (halt, mwait, ACPI, haltpoll, polling) and governors: a sample there is idle
/// time, not work. Interrupts and softirqs that ran on an idle CPU sample in their own
/// functions (`handle_softirqs`, …) and stay work.
const IDLE_LOOP: [&str; 27] = [
    "pv_native_safe_halt",
    "native_safe_halt",
    "acpi_safe_halt",
    "default_idle",
    "default_idle_call",
    "default_enter_idle",
    "arch_cpu_idle",
    "amd_e400_idle",
    "mwait_idle",
    "io_idle",
    "cpu_idle_poll",
    "cpuidle_enter_state",
    "cpuidle_enter",
    "cpuidle_idle_call",
    "call_cpuidle",
    "do_idle",
    "acpi_idle_enter",
    "acpi_idle_do_entry",
    "acpi_processor_ffh_cstate_enter",
    "intel_idle",
    "intel_idle_irq",
    "intel_idle_ibrs",
    "intel_idle_xstate",
    "poll_idle",
    "menu_select",
    "teo_select",
    "haltpoll_select",
];

impl Hot {
    /// Whether this is the idle task waiting for work (a compiler's suffix, such as
    /// `.isra.0`, ignored).
    fn idle_loop(&self) -> bool {
        let name = self.symbol.split('.').next().unwrap_or_default();
        self.comm.starts_with("swapper") && IDLE_LOOP.contains(&name)
    }
}

/// A core's profile over one trial.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    /// The busiest symbols, busiest first.
    pub top: Vec<Hot>,
    /// Percent of the busy samples in the kernel (system calls, softirq, XDP).
    pub kernel_percent: f64,
    /// Each thread's percent of the busy samples and its kernel part, busiest first.
    pub threads: Vec<ThreadShare>,
    /// How long the recording ran, in seconds.
    pub seconds: f64,
    /// Samples in the idle loop, left out of every share.
    pub idle_samples: u64,
}

impl Profile {
    /// Samples of work (the idle loop's left out).
    pub fn busy_samples(&self) -> u64 {
        self.threads.iter().map(|t| t.samples).sum()
    }

    /// The share of all samples that were work: how busy the sampled CPUs were.
    pub fn busy_share(&self) -> f64 {
        let busy = self.busy_samples();
        busy as f64 / (busy + self.idle_samples).max(1) as f64
    }
}

/// One thread's share of a profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadShare {
    /// The thread's name.
    pub comm: String,
    /// Percent of the busy samples.
    pub percent: f64,
    /// Of which in the kernel.
    pub kernel_percent: f64,
    /// Its samples: each is 0.5 ms of CPU time.
    pub samples: u64,
    /// Of which in the kernel.
    pub kernel_samples: u64,
}

/// `CLOCK_MONOTONIC` now, in seconds: the clock [`Recording::start_machine`] stamps
/// its samples with.
pub fn monotonic_seconds() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

/// The CPU seconds `samples` stand for.
pub fn samples_seconds(samples: u64) -> f64 {
    samples as f64 * f64::from(PERIOD_NS) / 1e9
}

/// Percent of one core that `samples` are over `seconds`.
pub fn core_percent(samples: u64, seconds: f64) -> f64 {
    samples_seconds(samples) / seconds * 100.0
}

/// A running `perf record`: started with its events and target, stopped with
/// [`PerfRecord::stop`], which leaves the data file for `perf report` or `perf script`.
/// The file goes when this does.
#[derive(Debug)]
pub struct PerfRecord {
    child: std::process::Child,
    data: PathBuf,
    started: std::time::Instant,
}

impl PerfRecord {
    /// Starts `perf record` with `args` (events and target) into a file under `dir`;
    /// `None` when Linux perf is missing or will not start.
    pub fn start(args: &[&str], dir: &Path, name: &str) -> Option<PerfRecord> {
        if !Path::new(LINUX_PERF).exists() {
            return None;
        }
        let data = dir.join(format!("{name}.perf.data"));
        let child = Command::new(LINUX_PERF)
            .args(["record", "-q"])
            .args(args)
            .arg("-o")
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // perf needs a moment to open its events before the trial starts.
        std::thread::sleep(std::time::Duration::from_millis(300));
        Some(PerfRecord {
            child,
            data,
            started: std::time::Instant::now(),
        })
    }

    /// Stops the recording (SIGINT, as perf expects): the data file and the seconds it
    /// recorded.
    pub fn stop(&mut self) -> (&Path, f64) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let seconds = self.started.elapsed().as_secs_f64();
        let _ = self.child.wait();
        (&self.data, seconds)
    }
}

impl Drop for PerfRecord {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.data);
    }
}

/// A running CPU-clock sampling of one core, every CPU or one process;
/// [`Recording::stop`] stops it (so a measured window can end there), and
/// [`Recording::finish`] stops it if need be and reduces it.
#[derive(Debug)]
pub struct Recording {
    record: PerfRecord,
    /// Seconds recorded, once stopped.
    seconds: Option<f64>,
}

impl Recording {
    /// Starts sampling `cpu` into a file under `dir`; `None` when Linux perf is missing
    /// or will not start.
    pub fn start(cpu: usize, dir: &Path, name: &str) -> Option<Recording> {
        Self::start_on(&["-C", &cpu.to_string()], dir, name)
    }

    /// Starts sampling every CPU of the machine, time-stamping samples with
    /// `CLOCK_MONOTONIC` ([`monotonic_seconds`]), so [`Recording::finish_by_cpu`] can
    /// keep only a window's.
    pub fn start_machine(dir: &Path, name: &str) -> Option<Recording> {
        Self::start_on(&["-a", "-k", "CLOCK_MONOTONIC"], dir, name)
    }

    /// Starts sampling every thread of process `pid`, wherever it runs.
    pub fn start_process(pid: u32, dir: &Path, name: &str) -> Option<Recording> {
        Self::start_on(&["-p", &pid.to_string()], dir, name)
    }

    fn start_on(target: &[&str], dir: &Path, name: &str) -> Option<Recording> {
        let period = PERIOD_NS.to_string();
        let mut args = vec!["-e", "cpu-clock", "-c", &period];
        args.extend_from_slice(target);
        Some(Recording {
            record: PerfRecord::start(&args, dir, name)?,
            seconds: None,
        })
    }

    /// Stops sampling now; the data waits for [`Recording::finish`].
    pub fn stop(&mut self) {
        if self.seconds.is_none() {
            self.seconds = Some(self.record.stop().1);
        }
    }

    /// Stops if need be: the data file and the seconds recorded.
    fn stopped(&mut self) -> (PathBuf, f64) {
        self.stop();
        (self.record.data.clone(), self.seconds.unwrap_or(0.0))
    }

    /// Stops the recording and reduces it.
    pub fn finish(mut self) -> Option<Profile> {
        let (data, seconds) = self.stopped();
        let text = perf_report_lines(&data, "comm,dso,sym", &[])?;
        Some(Profile {
            seconds,
            ..parse_report(&text)
        })
    }

    /// Stops the recording and reduces the samples taken between `window`'s two
    /// [`monotonic_seconds`] readings CPU by CPU (for [`Recording::start_machine`]): each
    /// CPU's profile, by CPU number.
    pub fn finish_by_cpu(mut self, window: (f64, f64)) -> Option<Vec<(usize, Profile)>> {
        let (data, _) = self.stopped();
        let seconds = window.1 - window.0;
        let time = format!("--time={:.6},{:.6}", window.0, window.1);
        let text = perf_report_lines(&data, "cpu,comm,dso,sym", &[&time])?;
        Some(
            split_by_cpu(&text)
                .into_iter()
                .map(|(cpu, lines)| {
                    let profile = Profile {
                        seconds,
                        ..parse_report(&lines)
                    };
                    (cpu, profile)
                })
                .collect(),
        )
    }
}

/// `perf report`'s lines for `data` (with `extra` options), sorted by `keys`, one per
/// entry, fields split by `|`; `None` when perf failed or found no samples (so a broken
/// recording is not read as an idle one).
fn perf_report_lines(data: &Path, keys: &str, extra: &[&str]) -> Option<String> {
    let out = Command::new(LINUX_PERF)
        .args(["report", "--stdio", "--no-children", "-q", "-n", "-t", "|"])
        .args(extra)
        .args(["--sort", keys, "-i"])
        .arg(data)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !text.trim().is_empty()).then_some(text)
}

/// `perf report --sort cpu,comm,dso,sym` lines (` 1.50% | 3 |001|comm|dso|[k] sym`)
/// grouped by CPU, each group as `--sort comm,dso,sym` lines, by CPU number.
fn split_by_cpu(text: &str) -> Vec<(usize, String)> {
    let mut by_cpu: Vec<(usize, String)> = vec![];
    for line in text.lines() {
        let mut fields = line.splitn(4, '|');
        let (Some(percent), Some(samples), Some(cpu), Some(rest)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Ok(cpu) = cpu.trim().parse::<usize>() else {
            continue;
        };
        let at = match by_cpu.iter().position(|(c, _)| *c == cpu) {
            Some(at) => at,
            None => {
                by_cpu.push((cpu, String::new()));
                by_cpu.len() - 1
            }
        };
        let _ = writeln!(by_cpu[at].1, "{percent}|{samples}|{rest}");
    }
    by_cpu.sort_by_key(|(cpu, _)| *cpu);
    by_cpu
}

/// Reduces `perf report -q -n -t '|' --sort comm,dso,sym` output (one line per symbol:
/// ` 12.50% | 25   |comm|dso|[k] symbol`) to the top symbols, each thread's share and
/// the kernel's, all as shares of the busy samples: the idle loop's are left out.
pub fn parse_report(text: &str) -> Profile {
    let mut all: Vec<Hot> = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(5, '|');
            let percent = fields.next()?.trim().strip_suffix('%')?.parse().ok()?;
            let samples = fields.next()?.trim().parse().ok()?;
            let comm = fields.next()?.trim().to_string();
            let dso = fields.next()?.trim().to_string();
            let rest = fields.next()?.trim();
            let (kind, symbol) = rest.split_once(' ').unwrap_or((rest, ""));
            Some(Hot {
                percent,
                samples,
                comm,
                dso,
                symbol: symbol.trim().to_string(),
                kernel: kind == "[k]",
            })
        })
        .collect();
    let idle_samples = all
        .iter()
        .filter(|h| h.idle_loop())
        .map(|h| h.samples)
        .sum();
    all.retain(|hot| !hot.idle_loop());
    // perf's percentages count the idle loop's samples; these are of the busy ones.
    let busy: u64 = all.iter().map(|h| h.samples).sum();
    for hot in &mut all {
        hot.percent = hot.samples as f64 * 100.0 / busy.max(1) as f64;
    }
    all.sort_by(|a, b| b.percent.total_cmp(&a.percent));
    let kernel_percent = all.iter().filter(|h| h.kernel).map(|h| h.percent).sum();
    let mut threads: Vec<ThreadShare> = vec![];
    for hot in &all {
        let at = match threads.iter().position(|t| t.comm == hot.comm) {
            Some(at) => at,
            None => {
                threads.push(ThreadShare {
                    comm: hot.comm.clone(),
                    ..ThreadShare::default()
                });
                threads.len() - 1
            }
        };
        threads[at].percent += hot.percent;
        threads[at].samples += hot.samples;
        if hot.kernel {
            threads[at].kernel_percent += hot.percent;
            threads[at].kernel_samples += hot.samples;
        }
    }
    threads.sort_by(|a, b| b.percent.total_cmp(&a.percent));
    all.truncate(TOP);
    Profile {
        top: all,
        kernel_percent,
        threads,
        seconds: 0.0,
        idle_samples,
    }
}

/// The appendix section of one setup's profile (Markdown).
pub fn markdown(setup: &str, rate_pps: u64, profile: &Profile) -> String {
    format!(
        "\n### {setup} at {rate_pps} pps\n\nThe core was busy in {:.0} % of its samples; in the \
         kernel: {:.0} % of the busy ones.\n\n{}",
        profile.busy_share() * 100.0,
        profile.kernel_percent,
        symbols_table(profile)
    )
}

/// A process's profile (Markdown): each thread's CPU (percent of one core over the
/// recording) and share, then the busiest symbols.
pub fn process_markdown(title: &str, profile: &Profile) -> String {
    let mut out = format!(
        "\n### {title}\n\nIn the kernel: {:.0} % of the process's busy samples.\n\n\
         | thread | CPU (% of a core) | of which in the kernel | share of the samples |\n\
         |---|---:|---:|---:|\n",
        profile.kernel_percent
    );
    for t in &profile.threads {
        let _ = writeln!(
            out,
            "| {} | {:.1} % | {:.1} % | {:.1} % |",
            t.comm,
            core_percent(t.samples, profile.seconds),
            core_percent(t.kernel_samples, profile.seconds),
            t.percent,
        );
    }
    out.push('\n');
    out.push_str(&symbols_table(profile));
    out
}

/// The busiest functions as a Markdown table, each as a share of the busy samples.
pub fn symbols_table(profile: &Profile) -> String {
    let mut out = String::from("| share | thread | where | function |\n|---:|---|---|---|\n");
    for h in &profile.top {
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_loop_is_known_by_its_functions_in_the_idle_task_only() {
        let hot = |comm: &str, symbol: &str| Hot {
            percent: 1.0,
            samples: 1,
            comm: comm.into(),
            dso: "[kernel.kallsyms]".into(),
            symbol: symbol.into(),
            kernel: true,
        };
        assert!(hot("swapper", "pv_native_safe_halt").idle_loop());
        assert!(
            hot("swapper", "intel_idle.constprop.0").idle_loop(),
            "suffix"
        );
        assert!(hot("swapper", "acpi_processor_ffh_cstate_enter").idle_loop());
        assert!(
            !hot("swapper", "handle_softirqs").idle_loop(),
            "work on an idle CPU"
        );
        assert!(
            !hot("relay-w0", "default_idle").idle_loop(),
            "not the idle task"
        );
    }

    #[test]
    fn a_machine_report_splits_by_cpu() {
        let text = " 30.00% | 600 |001|relay-fp|[kernel.kallsyms]|[k] do_xdp_generic\n\
                    10.00% | 200 |000|load|perf|[.] send\n\
                    5.00% | 100 |000|swapper|[kernel.kallsyms]|[k] handle_softirqs\n\
                    no cpu here\n";
        let split = split_by_cpu(text);
        assert_eq!(split.len(), 2);
        assert_eq!(split[0].0, 0, "by CPU number");
        let cpu0 = parse_report(&split[0].1);
        assert_eq!(cpu0.threads.len(), 2);
        assert_eq!(cpu0.threads[0].comm, "load");
        assert_eq!(cpu0.threads[0].samples, 200);
        let cpu1 = parse_report(&split[1].1);
        assert_eq!(cpu1.top[0].symbol, "do_xdp_generic");
        assert_eq!(cpu1.kernel_percent, 100.0);
    }

    #[test]
    fn a_report_gives_the_top_symbols_and_the_kernel_share_of_the_busy_samples() {
        // perf's own percentages count the idle loop (here 50 % of all samples).
        let text = " 25.00% | 5000   |relay-w0|[kernel.kallsyms]|[k] __udp4_lib_rcv\n\
                     5.00% | 1000   |relay-w0|relay-mio|[.] ufrag_common::forward::Forwarder::from_client\n\
                     \n\
                     garbage\n\
                     50.00% | 10000 |swapper|[kernel.kallsyms]|[k] pv_native_safe_halt\n\
                     20.00% | 4000   |ksoftirqd/1|[kernel.kallsyms]|[k] veth_xdp_rcv\n";
        let p = Profile {
            seconds: 2.0,
            ..parse_report(text)
        };
        assert_eq!(p.kernel_percent, 90.0, "of the 10,000 busy samples");
        assert_eq!(p.top.len(), 3, "the idle loop is not work");
        assert_eq!(p.top[0].symbol, "__udp4_lib_rcv");
        assert_eq!(p.top[0].percent, 50.0);
        assert_eq!(p.top[1].comm, "ksoftirqd/1", "busiest first");
        assert!(!p.top[2].kernel);
        assert_eq!(p.top[2].dso, "relay-mio");
        let relay = &p.threads[0];
        assert_eq!((relay.comm.as_str(), relay.percent), ("relay-w0", 60.0));
        assert_eq!(relay.kernel_percent, 50.0);
        assert_eq!(p.threads[1].comm, "ksoftirqd/1");
        assert_eq!(p.threads.len(), 2);
        let by_thread = process_markdown("one process", &p);
        // 6,000 samples of 0.5 ms over 2 s: 150 % of a core, 125 % in the kernel.
        assert!(
            by_thread.contains("| relay-w0 | 150.0 % | 125.0 % | 60.0 % |"),
            "{by_thread}"
        );
        let md = markdown("relay-mio", 50_000, &p);
        assert!(
            md.contains("busy in 50 % of its samples; in the kernel: 90 % of the busy ones"),
            "{md}"
        );
        assert!(md.contains(
            "| 10.0 % | relay-w0 | relay-mio | `ufrag_common::forward::Forwarder::from_client` |"
        ));
    }
}
