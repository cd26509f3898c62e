//! The environment record of a report: the machine, the kernel, the interfaces and how
//! the work was placed, so that two reports can be compared knowing what differed.

use std::fmt::Write as _;
use std::process::Command;

use serde_json::{Value, json};
use ufrag_testbed::Testbed;

use crate::bench::placement::Placement;

fn read(path: &str) -> String {
    std::fs::read_to_string(path).map_or_else(|_| "unknown".into(), |s| s.trim().to_string())
}

fn first_line_of(program: &str, args: &[&str]) -> String {
    Command::new(program).args(args).output().map_or_else(
        |_| "not installed".into(),
        |o| {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        },
    )
}

/// The machine this process runs on: CPU, kernel, governor, and the wake-up round trip
/// between `tools_cpu` and `forwarder_cpu` (and on `tools_cpu` alone).
pub fn machine(tools_cpu: usize, forwarder_cpu: usize) -> Value {
    let wake = |a, b| {
        crate::bench::wake::round_trip(a, b, crate::bench::wake::ROUND_TRIPS)
            .map_or(Value::Null, |w| w.json())
    };
    let mut record = host();
    record["binaries"] = crate::bench::settings::binaries();
    record["wake_up_round_trip"] = json!({
        "cross_core": wake(tools_cpu, forwarder_cpu),
        "same_core": wake(tools_cpu, tools_cpu),
    });
    record
}

/// The machine this process runs on: CPU model, online CPUs, kernel, governor.
pub fn host() -> Value {
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown".into(), |(_, m)| m.trim().to_string());
    json!({
        "cpu_model": model,
        // Online CPUs, not this thread's affinity (perf pins itself to the tools' core).
        "vcpus": cpu_count(&read("/sys/devices/system/cpu/online")),
        "kernel": read("/proc/sys/kernel/osrelease"),
        "governor": read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "host_settings": crate::bench::settings::host(),
    })
}

/// What a testbed run ran on; `(tools_cpu, forwarder_cpu)` are the cores whose wake-up
/// round trip it reads (across them, and on the tools' core alone) for the record.
pub fn record(
    bed: &Testbed,
    placement: &Placement,
    live_frames: bool,
    (tools_cpu, forwarder_cpu): (usize, usize),
) -> Value {
    let driver = Command::new("ip")
        .args([
            "-n",
            &bed.relay.ns,
            "-d",
            "link",
            "show",
            "dev",
            &bed.relay.ifname,
        ])
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).to_string();
            if text.contains("veth") {
                "veth"
            } else {
                "unknown"
            }
            .to_string()
        })
        .unwrap_or_else(|_| "unknown".into());
    let mut record = machine(tools_cpu, forwarder_cpu);
    let testbed = json!({
        "interfaces": format!("{} veth pairs on a Linux bridge", bed.namespaces().len() - 1),
        "driver": driver,
        "af_xdp": "copy mode (veth has no zero-copy); native XDP on veth copies each skb into an xdp_buff",
        "placement": placement.notes,
        "tools": {
            "fixed_loads": "sendmmsg from the client's sockets, paced in 0.5 ms slices (the cost rounds)",
            "generator": if live_frames {
                "BPF_PROG_RUN live frames (XDP_TX on the client's veth), paced in the program (the maximum-rate search)"
            } else {
                "sendmmsg from the client's sockets (the maximum-rate search)"
            },
            "sink": "XDP per-CPU counter on the transceiver's veth, 1 in 8 passed to a socket for latency",
            "nginx": first_line_of("nginx", &["-v"]),
            "nft": first_line_of("nft", &["--version"]),
        },
    });
    if let (Some(all), Value::Object(more)) = (record.as_object_mut(), testbed) {
        all.extend(more);
    }
    record
}

/// The record as a Markdown section.
pub fn markdown(env: &Value) -> String {
    let mut out = String::from("## Environment\n\n");
    let field = |k: &str| {
        env.get(k).map_or("–".into(), |v| {
            v.as_str().map_or(v.to_string(), String::from)
        })
    };
    for (label, key) in [
        ("CPU", "cpu_model"),
        ("vCPUs", "vcpus"),
        ("kernel", "kernel"),
        ("CPU governor", "governor"),
        ("interfaces", "interfaces"),
        ("driver", "driver"),
        ("AF_XDP", "af_xdp"),
    ] {
        let _ = writeln!(out, "- {label}: {}", field(key));
    }
    if let Some(settings) = env.get("host_settings").filter(|v| v.is_object()) {
        let _ = writeln!(
            out,
            "- host settings: {}",
            crate::bench::settings::host_line(settings)
        );
    }
    for (label, key) in [("relay host's NIC", "nic")] {
        if let Some(nic) = env.get(key).filter(|v| v.is_object()) {
            let _ = writeln!(out, "- {label}: {}", crate::bench::nic::summary(nic));
            if let Some(settings) = nic.get("settings").filter(|v| v.is_object()) {
                let line = crate::bench::settings::nic_line(settings);
                let _ = writeln!(out, "- {label}'s settings: {line}");
            }
        }
    }
    if let Some(binaries) = env.get("binaries").filter(|v| v.is_object()) {
        let hashes: Vec<String> = binaries["sha256"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(name, h)| {
                        format!(
                            "{name} {}",
                            &h.as_str().unwrap_or("")[..12.min(h.as_str().unwrap_or("").len())]
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "- binaries: {} (SHA-256, first 12 hex digits: {})",
            binaries["version"].as_str().unwrap_or("unknown"),
            hashes.join(", ")
        );
    }
    if let Some(tools) = env.get("tools_host").filter(|v| v.is_object()) {
        let _ = writeln!(
            out,
            "- tools host: kernel {}, {} vCPUs; clients' NIC {}; sink's NIC {}",
            tools["kernel"].as_str().unwrap_or("unknown"),
            tools["vcpus"],
            crate::bench::nic::summary(&tools["client_nic"]),
            crate::bench::nic::summary(&tools["sink_nic"])
        );
        for (label, key) in [("clients' NIC", "client_nic"), ("sink's NIC", "sink_nic")] {
            if let Some(settings) = tools[key].get("settings").filter(|v| v.is_object()) {
                let line = crate::bench::settings::nic_line(settings);
                let _ = writeln!(out, "- tools host's {label} settings: {line}");
            }
        }
        if let Some(settings) = tools.get("host_settings").filter(|v| v.is_object()) {
            let line = crate::bench::settings::host_line(settings);
            let _ = writeln!(out, "- tools host's settings: {line}");
        }
    }
    if let Some(notes) = env.get("placement").and_then(Value::as_array) {
        for n in notes {
            let _ = writeln!(out, "- placement: {}", n.as_str().unwrap_or(""));
        }
    }
    if let Some(wake) = env.get("wake_up_round_trip") {
        let label = |w: &Value| match (w["p50_us"].as_f64(), w["p99_us"].as_f64()) {
            (Some(p50), Some(p99)) => crate::bench::wake::label(p50, p99),
            _ => "not read".into(),
        };
        let _ = writeln!(
            out,
            "- wake-up round trip at the end of the run (two pinned threads waking each other): \
             across cores {}, on one core {}",
            label(&wake["cross_core"]),
            label(&wake["same_core"])
        );
    }
    if let Some(tools) = env.get("tools").and_then(Value::as_object) {
        for (k, v) in tools {
            let _ = writeln!(out, "- {k}: {}", v.as_str().unwrap_or(""));
        }
    }
    out
}

/// The host's online CPUs (not this process's affinity: perf pins itself to the tools'
/// core).
pub fn online_cpus() -> usize {
    cpu_count(&read("/sys/devices/system/cpu/online")).max(1)
}

/// The number of CPUs in a kernel CPU list such as `0-1,4`.
fn cpu_count(list: &str) -> usize {
    crate::bench::counted::parse_cpu_list(list).map_or(0, |cpus| cpus.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_shows_the_host_s_and_the_nic_s_settings_with_their_warnings() {
        let record = json!({
            "host_settings": {"irqbalance": "running", "governors": {"powersave": 2}},
            "nic": {"interface": "eth2", "settings": {"irq_affinity": "none found (…)"}},
        });
        let section = markdown(&record);
        assert!(
            section.contains("- host settings: governors powersave on 2 CPU(s)"),
            "{section}"
        );
        assert!(section.contains("**irqbalance running**"), "{section}");
        assert!(
            section.contains("- relay host's NIC's settings: "),
            "{section}"
        );
        assert!(section.contains("**none found (…)**"), "{section}");
        // This host's own record has every setting, read or said not to be.
        let here = host();
        for key in [
            "governors",
            "smt",
            "irqbalance",
            "kernel_cmdline",
            "cpu_dma_latency_us",
        ] {
            assert!(here["host_settings"].get(key).is_some(), "{key}: {here}");
        }
    }

    #[test]
    fn a_cpu_list_counts_ranges_and_singles() {
        assert_eq!(super::cpu_count("0-1\n"), 2);
        assert_eq!(super::cpu_count("0-3,8,10-11"), 7);
        assert_eq!(super::cpu_count(""), 0);
    }
}
