//! CPU time spent outside the experiment while a trial was measured. Every CPU of the
//! machine is counted in a trial's cost, so a thread that is neither ours (this process
//! and everything it started) nor the kernel's network work (softirq threads, threaded
//! NAPI) adds its time to whichever row was running: the kernel's DAMON thread, a
//! kworker flushing pages, a build in another shell. A census of every thread's run time
//! (nanoseconds, `/proc/<pid>/task/<tid>/schedstat`) before and after the trials tells
//! how much ran outside, and who.
//!
//! A thread that starts and ends between the two censuses is not seen; its time still
//! shows in the machine's busy time.

use std::collections::HashMap;

/// The kernel threads whose work is the network path's, whoever's packets they carry:
/// their time belongs to the row being measured.
const NETWORK_THREADS: [&str; 2] = ["ksoftirqd/", "napi/"];

/// One thread's counters at a census.
#[derive(Clone, Debug, PartialEq)]
struct Thread {
    /// Its name (`comm`).
    name: String,
    /// Whether it is outside the experiment.
    outside: bool,
    /// Nanoseconds it has run since it started.
    runtime_ns: u64,
}

/// Every thread's run time at one instant.
#[derive(Clone, Debug, Default)]
pub struct Census {
    threads: HashMap<u32, Thread>,
}

/// What ran outside the experiment between two censuses (or over several trials,
/// [`Outside::add`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outside {
    /// CPU seconds of every thread outside the experiment.
    pub seconds: f64,
    /// The busiest of them: name and CPU seconds, busiest first (threads of one name
    /// summed).
    pub busiest: Vec<(String, f64)>,
    /// The largest share of the CPUs counted (seconds over wall × the window's CPUs: the
    /// machine's, or a lab's counted set) they took in any one trial added.
    pub worst_share: f64,
}

/// The fields of a `/proc/…/stat` line that a census needs: the command name and the
/// parent's pid.
fn name_and_parent(stat: &str) -> Option<(String, u32)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    // After the name: state, then the parent's pid.
    let parent = stat
        .get(close + 1..)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((name, parent))
}

/// The first field of a `schedstat` file: nanoseconds run.
fn runtime_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
}

/// Whether a thread named `name` whose process has `parent` is outside the experiment
/// rooted at `ours` (a set of process ids: the experiment's process tree).
fn is_outside(pid: u32, name: &str, parent: u32, ours: &[u32]) -> bool {
    let kernel_thread = pid == 2 || parent == 2;
    if kernel_thread {
        return !NETWORK_THREADS.iter().any(|n| name.starts_with(n));
    }
    !ours.contains(&pid)
}

/// The process ids of the trees rooted at `roots`: each root and every descendant, from
/// each process's parent.
fn tree_of(roots: &[u32], parents: &HashMap<u32, u32>) -> Vec<u32> {
    let mut tree = roots.to_vec();
    let mut grew = true;
    while grew {
        grew = false;
        for (&pid, parent) in parents {
            if tree.contains(parent) && !tree.contains(&pid) {
                tree.push(pid);
                grew = true;
            }
        }
    }
    tree
}

impl Census {
    /// Every thread on the machine now, sorted into the experiment (the process trees
    /// rooted at `roots` and the kernel's network threads) and the rest. Unreadable
    /// entries (a thread that just ended) are skipped.
    pub fn take(roots: &[u32]) -> Census {
        let Ok(proc) = std::fs::read_dir("/proc") else {
            return Census::default();
        };
        let pids: Vec<u32> = proc
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        let mut parents = HashMap::new();
        let mut names = HashMap::new();
        for &pid in &pids {
            if let Some((name, parent)) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| name_and_parent(&s))
            {
                parents.insert(pid, parent);
                names.insert(pid, name);
            }
        }
        let ours = tree_of(roots, &parents);
        let mut threads = HashMap::new();
        for (&pid, &parent) in &parents {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.flatten() {
                let Some(tid) = task
                    .file_name()
                    .to_str()
                    .and_then(|t| t.parse::<u32>().ok())
                else {
                    continue;
                };
                let path = task.path();
                let Some(runtime) = std::fs::read_to_string(path.join("schedstat"))
                    .ok()
                    .and_then(|s| runtime_ns(&s))
                else {
                    continue;
                };
                let name = std::fs::read_to_string(path.join("comm"))
                    .map(|c| c.trim().to_string())
                    .unwrap_or_else(|_| names.get(&pid).cloned().unwrap_or_default());
                let outside = is_outside(pid, &name, parent, &ours);
                threads.insert(
                    tid,
                    Thread {
                        name,
                        outside,
                        runtime_ns: runtime,
                    },
                );
            }
        }
        Census { threads }
    }

    /// What ran outside the experiment from this census until `later`: threads seen in
    /// both, by how much their run time grew, and threads seen only in `later` by all
    /// of theirs.
    pub fn until(&self, later: &Census) -> Outside {
        let mut by_name: HashMap<&str, u64> = HashMap::new();
        for (tid, now) in &later.threads {
            if !now.outside {
                continue;
            }
            // A kworker renames itself for each job it runs (`kworker/1:1-events`), so a
            // thread is known by its id; an id whose run time went backwards was reused
            // by a new thread, all of whose time is new.
            let before = self.threads.get(tid).map_or(0, |t| t.runtime_ns);
            let ran = if now.runtime_ns >= before {
                now.runtime_ns - before
            } else {
                now.runtime_ns
            };
            if ran > 0 {
                *by_name.entry(now.name.as_str()).or_default() += ran;
            }
        }
        let mut busiest: Vec<(String, f64)> = by_name
            .into_iter()
            .map(|(name, ns)| (name.to_string(), ns as f64 / 1e9))
            .collect();
        busiest.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Outside {
            seconds: busiest.iter().map(|b| b.1).sum(),
            busiest,
            worst_share: 0.0,
        }
    }
}

impl Outside {
    /// Adds one trial's: what ran outside over `window`, the trial's own window.
    pub fn add(&mut self, trial: &Outside, window: &crate::bench::cpu::Spent) {
        self.seconds += trial.seconds;
        for (name, seconds) in &trial.busiest {
            match self.busiest.iter_mut().find(|(n, _)| n == name) {
                Some((_, total)) => *total += seconds,
                None => self.busiest.push((name.clone(), *seconds)),
            }
        }
        self.busiest
            .sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let capacity = window.wall * window.cpus.max(1) as f64;
        self.worst_share = self.worst_share.max(trial.seconds / capacity.max(1e-9));
    }

    /// The busiest `n`, as `name 12.3 ms` joined by commas.
    pub fn label(&self, n: usize) -> String {
        let listed: Vec<String> = self
            .busiest
            .iter()
            .take(n)
            .map(|(name, s)| format!("{name} {:.1} ms", s * 1e3))
            .collect();
        listed.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(name: &str, outside: bool, runtime_ns: u64) -> Thread {
        Thread {
            name: name.into(),
            outside,
            runtime_ns,
        }
    }

    #[test]
    fn a_stat_line_gives_its_name_and_parent_even_with_spaces_and_parens_in_the_name() {
        assert_eq!(
            name_and_parent("82 (kdamond.0) S 2 0 0 0 -1"),
            Some(("kdamond.0".into(), 2))
        );
        assert_eq!(
            name_and_parent("7 (a (b) c) R 1 7 7"),
            Some(("a (b) c".into(), 1))
        );
        assert_eq!(name_and_parent("garbage"), None);
        assert_eq!(runtime_ns("889267 4022021 3\n"), Some(889_267));
        assert_eq!(runtime_ns(""), None);
    }

    #[test]
    fn the_experiment_is_our_tree_and_the_kernels_network_threads() {
        let ours = [100, 101];
        assert!(!is_outside(100, "ufrag-perf", 1, &ours));
        assert!(!is_outside(101, "relay-mio", 100, &ours));
        assert!(is_outside(300, "cargo", 1, &ours), "another user process");
        assert!(!is_outside(14, "ksoftirqd/0", 2, &ours));
        assert!(!is_outside(40, "napi/veth-12", 2, &ours));
        assert!(is_outside(82, "kdamond.0", 2, &ours));
        assert!(is_outside(90, "kworker/1:2", 2, &ours));
        assert!(is_outside(2, "kthreadd", 0, &ours));
    }

    #[test]
    fn a_tree_holds_every_descendant_and_nothing_else() {
        let parents: HashMap<u32, u32> = [(100, 1), (101, 100), (102, 101), (200, 1), (201, 200)]
            .into_iter()
            .collect();
        let mut tree = tree_of(&[100], &parents);
        tree.sort_unstable();
        assert_eq!(tree, vec![100, 101, 102]);
        // Two roots (a lab's agent on the same machine): both trees.
        let mut both = tree_of(&[101, 200], &parents);
        both.sort_unstable();
        assert_eq!(both, vec![101, 102, 200, 201]);
    }

    #[test]
    fn only_outside_threads_are_summed_by_name_busiest_first() {
        let before = Census {
            threads: [
                (82, thread("kdamond.0", true, 1_000_000)),
                (100, thread("ufrag-perf", false, 5_000_000)),
                (90, thread("kworker/1:2", true, 0)),
                (93, thread("kworker/0:1-events", true, 5_000_000_000)),
            ]
            .into_iter()
            .collect(),
        };
        let after = Census {
            threads: [
                (82, thread("kdamond.0", true, 21_000_000)),
                (100, thread("ufrag-perf", false, 900_000_000)),
                (90, thread("kworker/1:2", true, 2_000_000)),
                (91, thread("kworker/1:2", true, 1_000_000)), // new since
                (95, thread("sshd", true, 0)),
                // Renamed for its next job: its life's time before is not new.
                (93, thread("kworker/0:1-mm_percpu_wq", true, 5_000_000_000)),
            ]
            .into_iter()
            .collect(),
        };
        let outside = before.until(&after);
        assert!((outside.seconds - 0.023).abs() < 1e-12, "{outside:?}");
        assert_eq!(outside.busiest[0].0, "kdamond.0");
        assert_eq!(
            outside.busiest.len(),
            2,
            "sshd did not run, the renamed kworker ran nothing new"
        );
        assert_eq!(outside.label(1), "kdamond.0 20.0 ms");
    }

    #[test]
    fn trials_add_up_by_name_and_keep_their_worst_share_of_the_machine() {
        let window = crate::bench::cpu::Spent {
            wall: 1.0,
            busy: 0.5,
            steal: 0.0,
            pressure: None,
            cpus: 2,
            precision: crate::bench::cpu::Precision::Nanoseconds,
        };
        let trial = |seconds: f64| Outside {
            seconds,
            busiest: vec![("kdamond.0".into(), seconds)],
            worst_share: 0.0,
        };
        let mut all = Outside::default();
        all.add(&trial(0.02), &window);
        all.add(&trial(0.3), &window);
        assert!((all.seconds - 0.32).abs() < 1e-12);
        assert_eq!(all.busiest.len(), 1);
        assert!((all.worst_share - 0.15).abs() < 1e-12, "{all:?}");
    }

    #[test]
    fn a_real_census_counts_a_spinning_stranger_outside_and_a_child_inside() {
        let mut spinner = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("sh starts");
        // Rooted at no process: every user thread, the spinner too, is outside.
        let nobody = u32::MAX;
        let before = Census::take(&[nobody]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = Census::take(&[nobody]);
        let rooted_here = Census::take(&[std::process::id()]);
        let _ = spinner.kill();
        let _ = spinner.wait();
        assert!(
            rooted_here
                .threads
                .values()
                .any(|t| t.name == "sh" && !t.outside),
            "a child of this process is inside its tree"
        );
        let outside = before.until(&after);
        let spun = outside
            .busiest
            .iter()
            .find(|(name, _)| name == "sh")
            .unwrap_or_else(|| panic!("the spinner ran outside: {outside:?}"));
        assert!(spun.1 > 0.05, "it spun most of 300 ms: {outside:?}");
    }
}
