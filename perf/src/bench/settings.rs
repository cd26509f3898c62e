//! The settings a lab compares between runs, read where the kernel and `ethtool` show them:
//! for a NIC its channels, RSS hash fields and indirection table, interrupt coalescing,
//! ring sizes, the CPUs its interrupts may land on and its queues' RPS/XPS masks; for the
//! host its CPU governors and frequency, C-state limits, SMT, irqbalance and the kernel's
//! command line; and the hashes of the binaries that ran. A setting that cannot be read is
//! recorded as such, not guessed. [`differences`] says what changed between two records.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use ufrag_common::wire::hex;

/// `ethtool args…`'s output, or why not.
fn ethtool(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ethtool")
        .args(args)
        .output()
        .map_err(|e| format!("not read (ethtool: {e})"))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.lines().next().unwrap_or("failed").trim();
        return Err(format!("not read ({why})"));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A setting read by `parse` from `ethtool args…`, or the reason it could not be.
fn read(args: &[&str], parse: fn(&str) -> Value) -> Value {
    ethtool(args).map_or_else(|why| json!(why), |text| parse(&text))
}

/// What a lab records of NIC `name`.
pub fn nic(name: &str) -> Value {
    json!({
        "channels": read(&["-l", name], channels),
        "rss_hash_udp4": read(&["-n", name, "rx-flow-hash", "udp4"], hash_fields),
        "rss_indirection": read(&["-x", name], indirection),
        "coalescing": read(&["-c", name], coalescing),
        "rings": read(&["-g", name], rings),
        "irq_affinity": irq_affinity(name),
        "rps_xps": queue_masks(name),
    })
}

/// What a lab records of this host.
pub fn host() -> Value {
    let cpu_files = |file: &str| -> BTreeMap<String, usize> {
        let mut seen = BTreeMap::new();
        let cpus = std::fs::read_dir("/sys/devices/system/cpu")
            .into_iter()
            .flatten()
            .flatten();
        let cpus = cpus.filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("cpu")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
        for cpu in cpus {
            let path = cpu.path().join(file);
            let value =
                std::fs::read_to_string(path).map_or("not read".into(), |v| v.trim().into());
            *seen.entry(value).or_insert(0) += 1;
        }
        seen
    };
    let sys = |path: &str| {
        std::fs::read_to_string(path).map_or("not read".into(), |v| v.trim().to_string())
    };
    let mhz: Vec<u64> = cpu_files("cpufreq/scaling_cur_freq")
        .keys()
        .filter_map(|k| k.parse::<u64>().ok())
        .map(|khz| khz / 1000)
        .collect();
    json!({
        "governors": cpu_files("cpufreq/scaling_governor"),
        "frequency_mhz": match (mhz.iter().min(), mhz.iter().max()) {
            (Some(low), Some(high)) => json!(format!("{low}–{high} MHz")),
            _ => json!("not read"),
        },
        "cpuidle_driver": sys("/sys/devices/system/cpu/cpuidle/current_driver"),
        "max_cstate": sys("/sys/module/intel_idle/parameters/max_cstate"),
        "cstates_disabled": disabled_cstates(),
        "cpu_dma_latency_us": cpu_dma_latency(),
        "smt": format!(
            "{} (active {})",
            sys("/sys/devices/system/cpu/smt/control"),
            sys("/sys/devices/system/cpu/smt/active")
        ),
        // A process of this PID namespace: from a container, irqbalance on the host is
        // not seen.
        "irqbalance": if process_running("irqbalance") { "running" } else { "not running here" },
        "kernel_cmdline": redacted_cmdline(&sys("/proc/cmdline")),
    })
}

/// The binaries beside this one that a run starts, each with its SHA-256 (missing ones
/// left out), and the version line this build prints.
pub fn binaries() -> Value {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_default();
    let mut hashes = serde_json::Map::new();
    for name in ["ufrag-perf", "relay-mio", "relay-afxdp", "transceiver"] {
        if let Ok(bytes) = std::fs::read(dir.join(name)) {
            hashes.insert(name.into(), json!(hex(&Sha256::digest(&bytes))));
        }
    }
    json!({ "version": ufrag_version::VERSION, "sha256": hashes })
}

/// Whether a process whose command name is `comm` runs on this host.
fn process_running(comm: &str) -> bool {
    std::fs::read_dir("/proc").is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == comm))
    })
}

/// Each idle state disabled on some CPU (`cpuN/cpuidle/stateM/disable` = 1), by name, with
/// how many CPUs have it off.
fn disabled_cstates() -> BTreeMap<String, usize> {
    let mut off = BTreeMap::new();
    let cpus = std::fs::read_dir("/sys/devices/system/cpu")
        .into_iter()
        .flatten()
        .flatten();
    for cpu in cpus {
        let states = std::fs::read_dir(cpu.path().join("cpuidle"))
            .into_iter()
            .flatten()
            .flatten();
        for state in states {
            let disabled = std::fs::read_to_string(state.path().join("disable"))
                .is_ok_and(|d| d.trim() == "1");
            let name = std::fs::read_to_string(state.path().join("name"));
            if let (true, Ok(name)) = (disabled, name) {
                *off.entry(name.trim().to_string()).or_insert(0) += 1;
            }
        }
    }
    off
}

/// The PM QoS CPU latency limit in µs (`/dev/cpu_dma_latency`, which tuned's
/// latency-performance profile holds), or why it was not read.
fn cpu_dma_latency() -> Value {
    let mut bytes = [0u8; 4];
    let read = std::fs::File::open("/dev/cpu_dma_latency")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    match read {
        Ok(()) => json!(i32::from_ne_bytes(bytes)),
        Err(e) => json!(format!("not read ({e})")),
    }
}

/// The kernel command line with the values of parameters that may carry a secret or a
/// private URL (`…url…`, `…token…`, `…key…`, `…pass…`, `…secret…`, `ds=`) replaced.
pub fn redacted_cmdline(cmdline: &str) -> String {
    let secret = |name: &str| {
        let name = name.to_lowercase();
        name == "ds"
            || ["url", "token", "key", "pass", "secret"]
                .iter()
                .any(|s| name.contains(s))
    };
    cmdline
        .split_whitespace()
        .map(|word| match word.split_once('=') {
            Some((name, _)) if secret(name) => format!("{name}=<redacted>"),
            _ => word.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each of `name`'s interrupts by its action name (stable across reboots, unlike the
/// number) with the CPUs it may land on and those it does (`smp_affinity_list`,
/// `effective_affinity_list`). The interrupts are the device's MSI vectors
/// (`/sys/class/net/IF/device/msi_irqs`, or its parent's for virtio), else the
/// `/proc/interrupts` lines that name the interface; none found says so.
pub fn irq_affinity(name: &str) -> Value {
    let interrupts = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    let irqs = interface_irqs(name, &interrupts);
    if irqs.is_empty() {
        return json!(format!(
            "none found (no MSI vectors under /sys/class/net/{name}/device, no \
             /proc/interrupts line names {name})"
        ));
    }
    let read = |irq: u32, file: &str| irq_setting(irq, file).unwrap_or_else(|| "not read".into());
    let by_action: serde_json::Map<String, Value> = irqs
        .into_iter()
        .map(|irq| {
            let action = action_of(&interrupts, irq).unwrap_or_else(|| format!("irq {irq}"));
            let cpus = format!(
                "{} (effective {})",
                read(irq, "smp_affinity_list"),
                read(irq, "effective_affinity_list")
            );
            (action, json!(cpus))
        })
        .collect();
    json!(by_action)
}

/// Interface `name`'s RPS mask for each RX queue and XPS mask for each TX queue, by
/// `rx-N rps_cpus` / `tx-N xps_cpus` (hexadecimal CPU masks; `0` is off). A kernel
/// without RPS/XPS, or a queue the kernel will not show one for, has none.
pub fn queue_masks(name: &str) -> BTreeMap<String, String> {
    let queues = format!("/sys/class/net/{name}/queues");
    let mut masks = BTreeMap::new();
    for entry in std::fs::read_dir(&queues).into_iter().flatten().flatten() {
        let queue = entry.file_name().to_string_lossy().into_owned();
        let file = if queue.starts_with("rx-") {
            "rps_cpus"
        } else {
            "xps_cpus"
        };
        if let Ok(mask) = std::fs::read_to_string(format!("{queues}/{queue}/{file}")) {
            masks.insert(format!("{queue} {file}"), mask.trim().to_string());
        }
    }
    masks
}

/// Interrupt `irq`'s `/proc/irq/N/{file}` (`smp_affinity_list`, `effective_affinity_list`),
/// trimmed; `None` when it cannot be read.
pub fn irq_setting(irq: u32, file: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/irq/{irq}/{file}"))
        .ok()
        .map(|text| text.trim().to_string())
}

/// Interface `name`'s interrupts, in order: its device's MSI vectors
/// (`/sys/class/net/IF/device/msi_irqs`, or its parent's for virtio), else the lines of
/// `interrupts` (a `/proc/interrupts` text) that name it; none for a virtual device.
pub fn interface_irqs(name: &str, interrupts: &str) -> Vec<u32> {
    let device = format!("/sys/class/net/{name}/device");
    let msi_of = |dir: String| -> Vec<u32> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
            .collect()
    };
    let mut irqs = msi_of(format!("{device}/msi_irqs"));
    if irqs.is_empty() {
        irqs = msi_of(format!("{device}/../msi_irqs"));
    }
    if irqs.is_empty() {
        irqs = irqs_of(interrupts, name);
    }
    irqs.sort_unstable();
    irqs
}

/// The numbered interrupts in a `/proc/interrupts` text whose action names `name` as one
/// of its `-`/`@`-separated parts (`IF-0`, `IF-TxRx-0`, `ice-IF-TxRx-0`, `IF@pci…`).
pub fn irqs_of(interrupts: &str, name: &str) -> Vec<u32> {
    interrupts
        .lines()
        .filter_map(|line| {
            let (irq, rest) = line.trim_start().split_once(':')?;
            let irq: u32 = irq.parse().ok()?;
            let last = rest.split_whitespace().last()?;
            last.split(['-', '@'])
                .any(|part| part == name)
                .then_some(irq)
        })
        .collect()
}

/// The action name (the last word) of interrupt `irq` in a `/proc/interrupts` text.
fn action_of(interrupts: &str, irq: u32) -> Option<String> {
    interrupts.lines().find_map(|line| {
        let (number, rest) = line.trim_start().split_once(':')?;
        if number.parse::<u32>().ok()? != irq {
            return None;
        }
        rest.split_whitespace().last().map(str::to_string)
    })
}

/// The `Current hardware settings:` section of `ethtool -l` or `-g`: each of `keys`
/// (lowercase) it lists, with its value.
fn current(text: &str, keys: &[&str]) -> Value {
    let section = text
        .split("Current hardware settings:")
        .nth(1)
        .unwrap_or("");
    let mut out = serde_json::Map::new();
    for line in section.lines() {
        if let Some((k, v)) = line.split_once(':') {
            let k = k.trim().to_lowercase();
            if keys.contains(&k.as_str()) {
                out.insert(k, json!(v.trim()));
            }
        }
    }
    json!(out)
}

/// `ethtool -l`: the current channel counts.
pub fn channels(text: &str) -> Value {
    current(text, &["rx", "tx", "other", "combined"])
}

/// `ethtool -n … rx-flow-hash udp4`: the fields UDP over IPv4 is hashed on, and whether
/// the ports are among them (without them every flow of one address pair lands on one
/// queue).
pub fn hash_fields(text: &str) -> Value {
    let fields: Vec<String> = text
        .lines()
        .skip_while(|l| !l.contains("Hash flow key"))
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let ports = fields.iter().any(|f| f.contains("L4 bytes"));
    json!({ "fields": fields, "includes_ports": ports })
}

/// `ethtool -x`: how many entries of the RSS indirection table point at each queue.
pub fn indirection(text: &str) -> Value {
    let mut per_queue: BTreeMap<u32, u32> = BTreeMap::new();
    for line in text.lines() {
        let Some((index, queues)) = line.trim().split_once(':') else {
            continue;
        };
        if index.trim().parse::<u32>().is_err() {
            continue;
        }
        for queue in queues.split_whitespace() {
            if let Ok(q) = queue.parse::<u32>() {
                *per_queue.entry(q).or_insert(0) += 1;
            }
        }
    }
    let per_queue: serde_json::Map<String, Value> = per_queue
        .into_iter()
        .map(|(q, n)| (q.to_string(), json!(n)))
        .collect();
    json!({ "entries_per_queue": per_queue })
}

/// `ethtool -c`: the coalescing settings that change a packet's latency and cost.
pub fn coalescing(text: &str) -> Value {
    let mut out = serde_json::Map::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Adaptive RX:") {
            let mut words = rest.split_whitespace();
            out.insert("adaptive_rx".into(), json!(words.next().unwrap_or("")));
            if let Some(tx) = words.nth(1) {
                out.insert("adaptive_tx".into(), json!(tx));
            }
            continue;
        }
        if let Some((k, v)) = line.split_once(':')
            && ["rx-usecs", "rx-frames", "tx-usecs", "tx-frames"].contains(&k.trim())
        {
            out.insert(k.trim().replace('-', "_"), json!(v.trim()));
        }
    }
    json!(out)
}

/// `ethtool -g`: the current RX and TX ring sizes.
pub fn rings(text: &str) -> Value {
    current(text, &["rx", "tx"])
}

/// A setting as report text: a string as it is, anything else as JSON.
fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// [`nic`]'s record as one line of the report, with a warning where a setting would
/// mislead the comparison (UDP hashed on addresses only; no interrupt affinity read).
pub fn nic_line(settings: &Value) -> String {
    let hash = &settings["rss_hash_udp4"];
    let rss = match hash["fields"].as_array() {
        Some(fields) => {
            let list: Vec<String> = fields.iter().map(text).collect();
            let warning = if hash["includes_ports"] == false {
                " (**ports not hashed**: every flow of one address pair lands on one queue; \
                 `ethtool -N <if> rx-flow-hash udp4 sdfn`)"
            } else {
                ""
            };
            format!("{}{warning}", list.join(", "))
        }
        None => text(hash),
    };
    format!(
        "channels {}; RSS hash for UDP/IPv4: {rss}; indirection {}; coalescing {}; rings {}; \
         interrupts (action: CPUs) {}",
        text(&settings["channels"]),
        match settings["rss_indirection"].get("entries_per_queue") {
            Some(per_queue) => text(per_queue),
            None => text(&settings["rss_indirection"]),
        },
        text(&settings["coalescing"]),
        text(&settings["rings"]),
        match settings["irq_affinity"].as_str() {
            Some(none) => format!("**{none}**: where they land is not known"),
            None => text(&settings["irq_affinity"]),
        },
    )
}

/// A per-CPU reading counted by value (`{"performance": 2}`) as `performance on 2 CPUs`.
fn per_cpu(counts: &Value) -> String {
    match counts.as_object() {
        Some(map) => map
            .iter()
            .map(|(value, n)| format!("{value} on {n} CPU(s)"))
            .collect::<Vec<_>>()
            .join(", "),
        None => text(counts),
    }
}

/// [`host`]'s record as one line of the report, with a warning when irqbalance runs (it
/// may move the NIC's interrupts in the middle of a run).
pub fn host_line(settings: &Value) -> String {
    let irqbalance = match settings["irqbalance"].as_str() {
        Some("running") => "**irqbalance running** (it may move interrupts mid-run)".into(),
        other => format!("irqbalance {}", other.unwrap_or("not read")),
    };
    format!(
        "governors {}; frequency {}; cpuidle {}, max C-state {}, disabled C-states {}, \
         PM QoS CPU latency limit {} µs; SMT {}; {irqbalance}; kernel command line `{}`",
        per_cpu(&settings["governors"]),
        text(&settings["frequency_mhz"]),
        text(&settings["cpuidle_driver"]),
        text(&settings["max_cstate"]),
        per_cpu(&settings["cstates_disabled"]),
        text(&settings["cpu_dma_latency_us"]),
        text(&settings["smt"]),
        text(&settings["kernel_cmdline"]),
    )
}

/// What differs between two environment records, one line per setting: `key: was → now`,
/// a setting only one has named as added or gone. Readings that differ from run to run
/// by nature (the wake-up round trip, the CPU frequency) are left out.
pub fn differences(previous: &Value, now: &Value) -> Vec<String> {
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    flatten("", previous, &mut a);
    flatten("", now, &mut b);
    let volatile = |k: &str| k.contains("wake_up_round_trip") || k.contains("frequency_mhz");
    let mut out = vec![];
    for (key, was) in &a {
        if volatile(key) {
            continue;
        }
        match b.get(key) {
            Some(is) if is != was => out.push(format!("{key}: {was} → {is}")),
            Some(_) => {}
            None => out.push(format!("{key}: {was} → (not recorded)")),
        }
    }
    for (key, is) in &b {
        if !a.contains_key(key) && !volatile(key) {
            out.push(format!("{key}: (not recorded) → {is}"));
        }
    }
    out
}

/// Every leaf of `value` by its dotted path (a list is one leaf).
fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // What ethtool 6.1 prints for an mlx5 NIC.
    const CHANNELS: &str = "Channel parameters for ens1f0np0:\nPre-set maximums:\nRX:\t\tn/a\nTX:\t\tn/a\nOther:\t\t512\nCombined:\t63\nCurrent hardware settings:\nRX:\t\tn/a\nTX:\t\tn/a\nOther:\t\t0\nCombined:\t8\n";
    const HASH: &str =
        "UDP over IPV4 flows use these fields for computing Hash flow key:\nIP SA\nIP DA\n\n";
    const HASH_PORTS: &str = "UDP over IPV4 flows use these fields for computing Hash flow key:\nIP SA\nIP DA\nL4 bytes 0 & 1 [TCP/UDP src port]\nL4 bytes 2 & 3 [TCP/UDP dst port]\n\n";
    const INDIRECTION: &str = "RX flow hash indirection table for ens1f0np0 with 4 RX ring(s):\n    0:      0     1     2     3     0     1     2     3\n    8:      0     1     2     3     0     1     2     3\nRSS hash key:\n7c:2a:f0\nRSS hash function:\n    toeplitz: on\n";
    const COALESCE: &str = "Coalesce parameters for ens1f0np0:\nAdaptive RX: on  TX: off\nstats-block-usecs: n/a\nrx-usecs: 8\nrx-frames: 128\ntx-usecs: 16\ntx-frames: 32\n";
    const RINGS: &str = "Ring parameters for ens1f0np0:\nPre-set maximums:\nRX:\t\t8192\nTX:\t\t8192\nCurrent hardware settings:\nRX:\t\t1024\nTX:\t\t1024\n";
    // ixgbe/bnxt name a vector after the interface, ice and i40e put the driver first,
    // mlx5 names its completion vectors after the device (found through msi_irqs instead).
    const INTERRUPTS: &str = "           CPU0       CPU1\n 24:          0          0  PCI-MSIX-0000:3b:00.0   0-edge      mlx5_async0@pci:0000:3b:00.0\n 25:       1234          0  PCI-MSIX-0000:3b:00.0   1-edge      eth2-TxRx-0\n 26:          0       5678  PCI-MSIX-0000:3b:00.0   2-edge      eth2-TxRx-1\n 27:          9          9  PCI-MSIX-0000:3c:00.0   1-edge      eth21-0\n 28:          9          9  PCI-MSIX-0000:5e:00.0   1-edge      ice-ens1f0-TxRx-0\n 29:          9          9  PCI-MSIX-0000:5e:00.0   1-edge      mlx5_comp0@pci:0000:5e:00.0\nNMI:          0          0   Non-maskable interrupts\n";

    #[test]
    fn ethtool_s_settings_are_read_as_the_report_keeps_them() {
        assert_eq!(
            channels(CHANNELS),
            json!({"rx": "n/a", "tx": "n/a", "other": "0", "combined": "8"})
        );
        assert_eq!(hash_fields(HASH)["includes_ports"], false);
        assert_eq!(hash_fields(HASH)["fields"], json!(["IP SA", "IP DA"]));
        assert_eq!(hash_fields(HASH_PORTS)["includes_ports"], true);
        assert_eq!(
            indirection(INDIRECTION),
            json!({"entries_per_queue": {"0": 4, "1": 4, "2": 4, "3": 4}})
        );
        assert_eq!(
            coalescing(COALESCE),
            json!({"adaptive_rx": "on", "adaptive_tx": "off", "rx_usecs": "8", "rx_frames": "128", "tx_usecs": "16", "tx_frames": "32"})
        );
        assert_eq!(rings(RINGS), json!({"rx": "1024", "tx": "1024"}));
    }

    #[test]
    fn a_nic_s_interrupts_are_its_own_lines_only() {
        assert_eq!(irqs_of(INTERRUPTS, "eth2"), [25, 26]);
        assert_eq!(irqs_of(INTERRUPTS, "eth21"), [27]);
        assert_eq!(irqs_of(INTERRUPTS, "ens1f0"), [28]);
        assert!(irqs_of(INTERRUPTS, "eth0").is_empty());
        assert_eq!(
            action_of(INTERRUPTS, 29).as_deref(),
            Some("mlx5_comp0@pci:0000:5e:00.0")
        );
        let none = irq_affinity("ufrag-no-such-interface");
        assert!(
            none.as_str().is_some_and(|s| s.starts_with("none found")),
            "{none}"
        );
        assert!(nic_line(&json!({"irq_affinity": none})).contains("**none found"));
    }

    #[test]
    fn a_secret_on_the_kernel_command_line_is_not_recorded() {
        let line = "quiet ignition.config.url=https://x/y ds=nocloud;s=http://a/ isolcpus=2-5";
        assert_eq!(
            redacted_cmdline(line),
            "quiet ignition.config.url=<redacted> ds=<redacted> isolcpus=2-5"
        );
    }

    #[test]
    fn differences_name_each_changed_setting_and_leave_out_what_varies_by_nature() {
        let previous = json!({"kernel": "6.1", "nic": {"rss_hash_udp4": {"includes_ports": false}},
            "wake_up_round_trip": {"p50_us": 5}, "host_settings": {"irqbalance": "running"}});
        let now = json!({"kernel": "6.1", "nic": {"rss_hash_udp4": {"includes_ports": true}},
            "wake_up_round_trip": {"p50_us": 9}, "smt": "on"});
        assert_eq!(
            differences(&previous, &now),
            [
                "host_settings.irqbalance: running → (not recorded)",
                "nic.rss_hash_udp4.includes_ports: false → true",
                "smt: (not recorded) → on",
            ]
        );
        assert!(differences(&now, &now).is_empty());
    }

    #[test]
    fn the_report_line_warns_of_a_hash_without_ports_and_of_irqbalance() {
        let settings = json!({"rss_hash_udp4": hash_fields(HASH), "channels": channels(CHANNELS)});
        let line = nic_line(&settings);
        assert!(
            line.contains("IP SA, IP DA (**ports not hashed**"),
            "{line}"
        );
        let hashed = json!({"rss_hash_udp4": hash_fields(HASH_PORTS)});
        assert!(!nic_line(&hashed).contains("not hashed"));
        assert!(host_line(&json!({"irqbalance": "running"})).contains("**irqbalance running**"));
        let governors = host_line(&json!({"governors": {"performance": 2, "powersave": 1}}));
        assert!(governors.contains("governors performance on 2 CPU(s), powersave on 1 CPU(s);"));
        assert!(
            host_line(&json!({"irqbalance": "not running"})).contains("irqbalance not running")
        );
    }

    #[test]
    fn a_setting_ethtool_cannot_read_says_so() {
        let veth = read(&["-x", "ufrag-no-such-interface"], indirection);
        assert!(
            veth.as_str().is_some_and(|s| s.starts_with("not read")),
            "{veth}"
        );
    }
}
