//! `perf compare`: is kernel bypass warranted for this relay? Every setup side by side on
//! a [`bed::Bed`] (the netns testbed, or with `--lab` a lab's two hosts: [`lab`] here and
//! the agent of [`crate::cmd::lab`] on the tools host), in two phases:
//!
//! 1. **Cost at fixed loads** (the primary metric, [`rounds`]): randomized interleaved
//!    rounds; in each, every setup offered the same fixed loads below saturation, every
//!    CPU's busy time counted (a lab's `--relay-cpus` and interrupt CPUs only), the null
//!    row's (the direct path's) subtracted
//!    ([`cost`]); the host gate ([`crate::bench::host_gate`]) leaves out trials taken while the
//!    host misbehaved; medians with distribution-free intervals and a verdict that is
//!    said only when its interval clears it ([`verdict`]); with `--latency-loads`, each
//!    setup's latency at low loads in the same rounds ([`latency`]). After the rounds,
//!    each setup once more with every CPU profiled at one load ([`machine_profile`]).
//! 2. **The maximum rate and the latency under it** (co-primary, [`search_phase`],
//!    [`max_rate`]): CSIT-style NDR and PDR searches in interleaved rounds, a final trial
//!    at each row's median PDR, the latency at fractions of each search's PDR, and a
//!    profile of the forwarder's core; each row's rate beside what the hardware does
//!    alone ([`calibration`]).
//!
//! [`setups`] is the one table of what can be compared, started on a
//! [`relay_host::RelayHost`]; [`mod@bench`] the testbed and its loads; [`options`] the flags;
//! [`sample`] what one setup's trials in one round measured (with [`carried`], what the
//! fast path carried); [`report`] writes the Markdown, JSON and SVG.

pub mod bed;
pub mod bench;
pub mod calibration;
pub mod carried;
pub mod cost;
pub mod fast_path;
pub mod lab;
pub mod latency;
pub mod machine_profile;
pub mod marginal;
pub mod max_rate;
pub mod notes;
pub mod options;
pub mod relay_host;
pub mod report;
pub mod rounds;
pub mod sample;
pub mod search_phase;
pub mod setups;
pub mod verdict;

use bed::Bed;
use bench::Bench;
pub use options::{Direction, GeneratorKind, Options};

/// Leaves out, named, the setups whose downlink the generator cannot address when the
/// flows come from `client_addresses` addresses (lab mode learns how many from the
/// agent, after the setups were chosen for one).
fn downlink_from(
    client_addresses: u32,
    options: &Options,
    setups: &mut Vec<&'static setups::Setup>,
    left_out: &mut Vec<(String, String)>,
) {
    if options.direction == Direction::Up {
        return;
    }
    setups.retain(|s| {
        let carries = s.carries_downlink(client_addresses);
        if !carries {
            left_out.push((
                s.name.to_string(),
                format!(
                    "{} from {client_addresses} client addresses",
                    setups::NO_DOWNLINK
                ),
            ));
        }
        carries
    });
}

/// Runs `perf compare`; the process's exit code.
pub fn run(options: &Options) -> i32 {
    if let Err(e) = options.check() {
        eprintln!("perf compare: {e}");
        return 2;
    }
    let mut options = options.clone();
    let generator_note = refused_generator(&mut options);
    let options = &options;
    let client_addresses = options.flows.div_ceil(bench::PORTS_PER_CLIENT_ADDR);
    let (mut setups, mut left_out) = options.setups(client_addresses);
    left_out.extend(generator_note);
    if let Err(e) = preflight(options, &mut setups, &mut left_out) {
        eprintln!("perf compare: {e}");
        return 2;
    }
    let seed = options
        .seed
        .unwrap_or_else(crate::bench::rounds::clock_seed);
    let (bed, environment): (Box<dyn Bed>, serde_json::Value) = if options.lab.lab.is_some() {
        match lab::Lab::up(options) {
            Ok(lab) => {
                downlink_from(lab.addresses_used(), options, &mut setups, &mut left_out);
                let environment = lab.environment(options);
                (Box::new(lab), environment)
            }
            Err(e) => {
                eprintln!("perf compare: {e}");
                return 2;
            }
        }
    } else {
        match testbed(options) {
            Ok(up) => up,
            Err(e) => {
                eprintln!("perf compare: {e}");
                return 2;
            }
        }
    };
    let bench = &*bed;
    starts_once(bench.relay(), &mut setups, &mut left_out);
    equal_cores(bench.relay(), options, &mut setups, &mut left_out);
    let cores_per_side = bench.relay().afxdp_workers;
    let cores: Vec<(String, String)> = setups
        .iter()
        .map(|s| (s.key.to_string(), s.cores_on(bench.relay())))
        .collect();
    // The report so far, rewritten as rounds and phases finish.
    let write = |samples: &[sample::Sample],
                 machine: &machine_profile::Profiled,
                 searched: &search_phase::Searched,
                 partial: Option<String>| {
        report::write(
            options,
            &report::Measured {
                setups: &setups,
                left_out: &left_out,
                samples,
                machine,
                searched,
                seed,
                environment: &environment,
                cores: &cores,
                cores_per_side,
                partial,
            },
        )
    };
    let not_searched = search_phase::Searched::default();
    let not_profiled = machine_profile::Profiled::default();
    let search_left = if options.no_search {
        ""
    } else {
        "; the maximum-rate search has not run yet"
    };
    let samples = if options.rounds > 0 && options.direction == Direction::Up {
        let mut plan = rounds::Plan {
            rounds: options.rounds,
            loads: options.loads.clone(),
            trial: options.trial,
            latency_loads: options.latency_loads.clone(),
            latency_trial: options.search.latency_trial,
            size: options.search.size,
            seed,
        };
        let mut samples = vec![];
        let (mut first, most) = (1, options.rounds.max(options.max_rounds));
        loop {
            rounds::run(
                bench,
                &setups,
                &plan,
                first,
                &mut samples,
                &mut |samples, done| {
                    let of = if most > options.rounds {
                        format!("at most {most}")
                    } else {
                        most.to_string()
                    };
                    let progress = format!("{done} of {of} rounds done{search_left}");
                    if let Err(e) = write(samples, &not_profiled, &not_searched, Some(progress)) {
                        crate::say!("perf compare: writing the partial report: {e}");
                    }
                },
            );
            first += plan.rounds;
            let analysis = cost::Analysis::new(&samples, setups::NULL);
            let verdict = report::verdict_of(options, &setups, cores_per_side, &analysis);
            let decided = !matches!(verdict.kind(), "inconclusive" | "withheld");
            if decided || first > most {
                break;
            }
            plan.rounds = options.block().min(most + 1 - first);
            crate::say!(
                "perf compare: {} after {} rounds; {} more (at most {most} in all)",
                verdict.kind(),
                first - 1,
                plan.rounds
            );
        }
        samples
    } else {
        vec![]
    };
    // Where each row's cost lands on the relay host (this machine, in a lab too).
    let machine = if samples.is_empty() {
        machine_profile::Profiled::default()
    } else if options.no_profile {
        machine_profile::Profiled {
            not_run: Some("`--no-profile`".into()),
            ..Default::default()
        }
    } else {
        let dir = options.out.parent().unwrap_or(std::path::Path::new("."));
        machine_profile::Plan::new(&options.loads, options.trial, options.search.size)
            .map(|plan| machine_profile::run(bench, &setups, &plan, dir))
            .unwrap_or_default()
    };
    let searched = if options.no_search {
        search_phase::Searched::default()
    } else {
        let rounds_done = if samples.is_empty() {
            String::new()
        } else {
            "all rounds done; ".to_string()
        };
        search_phase::run(
            bench,
            &setups,
            options,
            (!options.no_steer, seed),
            &mut |searched, done, steps| {
                let progress =
                    format!("{rounds_done}the maximum-rate search: {done} of {steps} setups done");
                if let Err(e) = write(&samples, &machine, searched, Some(progress)) {
                    crate::say!("perf compare: writing the partial report: {e}");
                }
            },
        )
    };
    drop(bed);
    let written = write(&samples, &machine, &searched, None);
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("perf compare: writing the report: {e}");
            1
        }
    }
}

/// Everything the run needs, checked before anything starts: root, and each setup's
/// program. A missing program stops the run with the command that installs it, or, with
/// `--skip-missing`, leaves its setup out with a loud note (in the report too). Linux
/// `perf`, which only profiles, is warned about.
fn preflight(
    options: &Options,
    setups: &mut Vec<&'static setups::Setup>,
    left_out: &mut Vec<(String, String)>,
) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("needs root (it builds network namespaces): run it with sudo".into());
    }
    let live_frames = !options.no_search && options.generator == GeneratorKind::LiveFrames;
    if live_frames && let Some(release) = kernel_older_than((5, 18)) {
        return Err(format!(
            "--generator live-frames needs BPF_PROG_RUN live frames (Linux 5.18 or later); \
             this kernel is {release}: use --generator sockets"
        ));
    }
    if options.lab.lab.is_some() {
        ufrag_testbed::browser::installed("ethtool", "apt-get install ethtool")
            .map_err(|e| format!("lab mode reads and sets the NIC with ethtool: {e}"))?;
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_default();
    let missing: Vec<(&'static str, String)> = setups
        .iter()
        .filter_map(|s| Some((s.key, s.missing(&exe_dir)?)))
        .collect();
    if !missing.is_empty() && !options.skip_missing {
        let named: Vec<&str> = missing.iter().map(|(_, why)| why.as_str()).collect();
        return Err(format!(
            "not installed, so not run (install, drop them from --only, or --skip-missing): {}",
            named.join("; ")
        ));
    }
    for (key, why) in &missing {
        eprintln!("!! SKIPPED {why}");
        left_out.push((
            setups::name_of(key),
            "not installed (--skip-missing)".into(),
        ));
    }
    setups.retain(|s| !missing.iter().any(|(key, _)| *key == s.key));
    if !std::path::Path::new(crate::bench::profile::LINUX_PERF).exists() {
        // The rounds' machine profile and the search's core profiles need it.
        eprintln!(
            "!! no profiles: {} missing (apt-get install linux-perf)",
            crate::bench::profile::LINUX_PERF
        );
    }
    Ok(())
}

/// This kernel's release if it is older than `(major, minor)` (an unreadable release is
/// taken as new enough: the first trial then names what fails).
/// When the search would use the live-frames generator and this kernel refuses it, the
/// sockets generator instead, said loudly and noted in the report.
fn refused_generator(options: &mut Options) -> Option<(String, String)> {
    if options.no_search
        || options.generator != GeneratorKind::LiveFrames
        || options.lab.lab.is_some()
    {
        return None;
    }
    let why = crate::forwarders::xdp::live_frames_refused()?;
    eprintln!("!! {why}: the maximum-rate search uses the sockets generator instead");
    options.generator = GeneratorKind::Sockets;
    Some((
        "the live-frames generator".into(),
        format!("{why}; the search used the sockets generator, whose own ceiling is lower"),
    ))
}

fn kernel_older_than(wanted: (u32, u32)) -> Option<String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let release = release.trim().to_string();
    let mut parts = release.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    let version = (parts.next()??, parts.next()??);
    (version < wanted).then_some(release)
}

/// The netns testbed, up, with this process on the tools' core and the relay's receive
/// work steered to the forwarder's core; and its environment record.
fn testbed(options: &Options) -> Result<(Box<dyn Bed>, serde_json::Value), String> {
    crate::bench::load::pin_to_load_cpu();
    let mut bench = Bench::up(options.ipv6, options.flows, options.forwarder_cpu)?;
    bench.relay.bind_mode = options.lab.bind_mode;
    crate::bench::interrupt::delete_on_interrupt(bench.bed.namespaces());
    let placement = if options.no_steer {
        crate::bench::placement::Placement::default()
    } else {
        crate::bench::placement::steer(
            &bench.bed,
            options.forwarder_cpu,
            crate::bench::load::LOAD_CPU,
        )
    };
    let environment = crate::bench::environment::record(
        &bench.bed,
        &placement,
        options.generator == GeneratorKind::LiveFrames,
        (crate::bench::load::LOAD_CPU, options.forwarder_cpu),
    );
    Ok((Box::new(bench), environment))
}

/// Equal cores on both sides of the verdict: where relay-afxdp runs one worker on each
/// of N > 1 RX queues (a lab's NIC), each relay-mio row runs N workers too (its
/// `--workers` variant, in its place). The one-worker row stays only when `--workers`
/// lists 1 beside other counts (its default is 1 alone).
fn equal_cores(
    relay: &relay_host::RelayHost,
    options: &Options,
    setups: &mut Vec<&'static setups::Setup>,
    left_out: &mut Vec<(String, String)>,
) {
    let queues = relay.afxdp_workers;
    let bypass = setups::bypass_keys();
    if queues < 2 || !setups.iter().any(|s| bypass.contains(&s.key)) {
        return;
    }
    let keep_one = options.workers.contains(&1) && options.workers.len() > 1;
    let mut equal = vec![];
    for &setup in setups.iter() {
        let one_worker_mio = setup.sweeps_workers() && setup.workers == 1;
        if one_worker_mio && keep_one {
            equal.push(setup);
        } else if one_worker_mio {
            left_out.push((
                setup.name.to_string(),
                format!(
                    "weighed on {queues} workers, as many as relay-afxdp's RX queues \
                     (`--workers 1,{queues}` keeps the one-worker row too)"
                ),
            ));
        }
        let row = if one_worker_mio {
            setup.with_workers(queues)
        } else {
            setup
        };
        if !equal.iter().any(|s: &&setups::Setup| s.key == row.key) {
            equal.push(row);
        }
    }
    *setups = equal;
}

/// Starts each setup that attaches to the relay's interface (AF_XDP, XDP) once before
/// the first trial: one the driver refuses (zero-copy on veth, native XDP on a driver
/// without it) is left out, named loudly with the refusal, in the report too. So is one
/// of our relays with more workers than the relay's CPUs (a lab's `--relay-cpus` shorter
/// than its queues): each worker needs a core of its own.
fn starts_once(
    relay: &relay_host::RelayHost,
    setups: &mut Vec<&'static setups::Setup>,
    left_out: &mut Vec<(String, String)>,
) {
    setups.retain(|setup| {
        let workers = setup.workers_on(relay);
        if matches!(setup.kind, setups::Kind::Relay { .. }) && workers > relay.relay_cpus.len() {
            let why = format!(
                "{workers} workers need a CPU each; the relay's CPUs are {} (`--relay-cpus`)",
                relay.worker_cpus(relay.relay_cpus.len())
            );
            eprintln!("!! LEFT OUT {}: {why}", setup.name);
            left_out.push((setup.name.to_string(), why));
            return false;
        }
        if !setup.attaches_to_interface() {
            return true;
        }
        match setup.start(relay) {
            Ok(running) => {
                drop(running);
                true
            }
            Err(why) => {
                eprintln!("!! LEFT OUT {}: {why}", setup.name);
                left_out.push((setup.name.to_string(), format!("did not start: {why}")));
                false
            }
        }
    });
}
