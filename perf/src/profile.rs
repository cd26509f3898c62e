//! Where a forwarder's core spends its time: `perf record` (Linux perf, Debian's
//! `linux-perf`, sampling the CPU clock: no hardware counters needed) on the forwarder's
//! core while a trial runs, reduced to the busiest symbols and the share spent in the
//! kernel, for the appendix of `perf compare`'s report.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where Debian's `linux-perf` installs the tool (our own binary is also called `perf`).
pub const LINUX_PERF: &str = "/usr/bin/perf";

/// Samples per second.
const FREQUENCY: &str = "1999";

/// Symbols shown per profile.
const TOP: usize = 12;

/// One symbol's share of the busy samples on the profiled core.
#[derive(Clone, Debug, PartialEq)]
pub struct Hot {
    /// Percent of the core's busy samples.
    pub percent: f64,
    /// The thread's name (`relay-w0`, `nginx`, `ksoftirqd/1`, …).
    pub comm: String,
    /// The binary or `[kernel.kallsyms]`.
    pub dso: String,
    /// The function, as perf resolved it.
    pub symbol: String,
    /// True for kernel code.
    pub kernel: bool,
}

/// A core's profile over one trial.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    /// The busiest symbols, busiest first.
    pub top: Vec<Hot>,
    /// Percent of the busy samples in the kernel (system calls, softirq, XDP).
    pub kernel_percent: f64,
}

/// A running `perf record` on one core; [`Recording::finish`] stops it and reads it.
#[derive(Debug)]
pub struct Recording {
    child: std::process::Child,
    data: PathBuf,
}

impl Recording {
    /// Starts sampling `cpu` into a file under `dir`; `None` when Linux perf is missing
    /// or will not start.
    pub fn start(cpu: usize, dir: &Path, name: &str) -> Option<Recording> {
        if !Path::new(LINUX_PERF).exists() {
            return None;
        }
        let data = dir.join(format!("{name}.perf.data"));
        let child = Command::new(LINUX_PERF)
            .args(["record", "-q", "-e", "cpu-clock", "-F", FREQUENCY, "-C"])
            .arg(cpu.to_string())
            .arg("-o")
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // perf needs a moment to open its events before the trial starts.
        std::thread::sleep(std::time::Duration::from_millis(300));
        Some(Recording { child, data })
    }

    /// Stops the recording (SIGINT, as perf expects) and reduces it.
    pub fn finish(mut self) -> Option<Profile> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let _ = self.child.wait();
        let out = Command::new(LINUX_PERF)
            .args(["report", "--stdio", "--no-children", "-q", "-t", "|"])
            .args(["--sort", "comm,dso,sym", "-i"])
            .arg(&self.data)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let _ = std::fs::remove_file(&self.data);
        Some(parse_report(&String::from_utf8_lossy(&out.stdout)))
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.data);
    }
}

/// Reduces `perf report -q -t '|' --sort comm,dso,sym` output (one line per symbol:
/// ` 12.50% |comm|dso|[k] symbol`) to the top symbols and the kernel's share.
pub fn parse_report(text: &str) -> Profile {
    let mut all: Vec<Hot> = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(4, '|');
            let percent = fields.next()?.trim().strip_suffix('%')?.parse().ok()?;
            let comm = fields.next()?.trim().to_string();
            let dso = fields.next()?.trim().to_string();
            let rest = fields.next()?.trim();
            let (kind, symbol) = rest.split_once(' ').unwrap_or((rest, ""));
            Some(Hot {
                percent,
                comm,
                dso,
                symbol: symbol.trim().to_string(),
                kernel: kind == "[k]",
            })
        })
        .collect();
    all.sort_by(|a, b| b.percent.total_cmp(&a.percent));
    let kernel_percent = all.iter().filter(|h| h.kernel).map(|h| h.percent).sum();
    all.truncate(TOP);
    Profile {
        top: all,
        kernel_percent,
    }
}

/// The appendix section of one setup's profile (Markdown).
pub fn markdown(setup: &str, rate_pps: u64, profile: &Profile) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "\n### {setup} at {rate_pps} pps\n\nIn the kernel: {:.0} % of the core's busy samples.\n\n\
         | share | thread | where | function |\n|---:|---|---|---|\n",
        profile.kernel_percent
    );
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
    fn a_report_gives_the_top_symbols_and_the_kernel_share() {
        let text = " 40.00% |relay-w0|[kernel.kallsyms]|[k] __udp4_lib_rcv\n\
                     10.00% |relay-w0|relay-mio|[.] ufrag_common::forward::Forwarder::from_client\n\
                     \n\
                     garbage\n\
                     30.00% |ksoftirqd/1|[kernel.kallsyms]|[k] veth_xdp_rcv\n";
        let p = parse_report(text);
        assert_eq!(p.kernel_percent, 70.0);
        assert_eq!(p.top.len(), 3);
        assert_eq!(p.top[0].symbol, "__udp4_lib_rcv");
        assert_eq!(p.top[1].comm, "ksoftirqd/1", "busiest first");
        assert!(!p.top[2].kernel);
        assert_eq!(p.top[2].dso, "relay-mio");
        let md = markdown("relay-mio", 50_000, &p);
        assert!(md.contains("In the kernel: 70 %"), "{md}");
        assert!(md.contains(
            "| 10.0 % | relay-w0 | relay-mio | `ufrag_common::forward::Forwarder::from_client` |"
        ));
    }
}
