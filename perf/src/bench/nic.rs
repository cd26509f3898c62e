//! A lab interface as the report records it and as lab mode sets it: its addresses,
//! its driver, firmware and queues and its offloads (`ethtool`), and its queue count
//! (`ethtool -L`, put back when the run ends).

use std::net::IpAddr;
use std::process::Command;

use serde_json::{Value, json};

/// The offloads the record keeps: those that change what a forwarder's packets cost.
const OFFLOADS: &[&str] = &[
    "rx-checksumming",
    "tx-checksumming",
    "generic-receive-offload",
    "large-receive-offload",
    "rx-gro-hw",
    "rx-udp-gro-forwarding",
    "tx-udp-segmentation",
    "ntuple-filters",
    "receive-hashing",
];

fn output(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The address flags that make an address no use as a flow's: not yet or never usable
/// (duplicate address detection), on its way out, or a privacy address that changes.
const UNUSABLE: &[&str] = &["tentative", "dadfailed", "deprecated", "temporary"];

/// `name`'s usable addresses of global scope (no loopback or link-local ones, none
/// flagged tentative, DAD-failed, deprecated or temporary), in the order `ip addr`
/// lists them.
pub fn addresses(name: &str) -> Result<Vec<IpAddr>, String> {
    let text = output(
        "ip",
        &["-j", "addr", "show", "dev", name, "scope", "global"],
    )?;
    let parsed: Value = serde_json::from_str(&text).map_err(|e| format!("ip -j: {e}"))?;
    Ok(usable_addresses(&parsed[0]["addr_info"]))
}

/// The usable addresses of an `ip -j addr` interface's `addr_info`.
fn usable_addresses(addr_info: &Value) -> Vec<IpAddr> {
    addr_info
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|i| !UNUSABLE.iter().any(|flag| i[*flag] == true))
                .filter_map(|i| i["local"].as_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The first of `addresses` of the family (`ipv6`): for IPv4 the first `ip addr` lists
/// (the primary), for IPv6 the lowest (`ip addr` lists IPv6 addresses newest first, so
/// its order would change with every address added).
pub fn first_of(addresses: &[IpAddr], ipv6: bool) -> Option<IpAddr> {
    let mut family = addresses.iter().copied().filter(|a| a.is_ipv6() == ipv6);
    if ipv6 { family.min() } else { family.next() }
}

/// `name`'s first global address of the family (`ipv6`).
pub fn first_address(name: &str, ipv6: bool) -> Result<IpAddr, String> {
    first_of(&addresses(name)?, ipv6).ok_or_else(|| {
        format!(
            "{name} has no {} address",
            if ipv6 { "global IPv6" } else { "IPv4" }
        )
    })
}

/// `name: value` lines as pairs.
fn fields(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
}

/// The RX queues the kernel shows for `name`.
pub fn rx_queues(name: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{name}/queues")).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
            .count()
    })
}

/// What the record says of `name`: driver, firmware, bus, RX queues, speed, MTU and the
/// offloads of `OFFLOADS`; a field ethtool cannot read is left out.
pub fn facts(name: &str) -> Value {
    let mut record = json!({ "interface": name, "rx_queues": rx_queues(name) });
    if let Ok(info) = output("ethtool", &["-i", name]) {
        for (k, v) in fields(&info) {
            if matches!(k, "driver" | "version" | "firmware-version" | "bus-info") && !v.is_empty()
            {
                record[k] = json!(v);
            }
        }
    }
    if let Ok(features) = output("ethtool", &["-k", name]) {
        let on: Vec<String> = fields(&features)
            .filter(|(k, _)| OFFLOADS.contains(k))
            .map(|(k, v)| format!("{k} {}", v.split_whitespace().next().unwrap_or(v)))
            .collect();
        record["offloads"] = json!(on);
    }
    let sys = |f: &str| std::fs::read_to_string(format!("/sys/class/net/{name}/{f}")).ok();
    if let Some(speed) = sys("speed").and_then(|s| s.trim().parse::<i64>().ok())
        && speed > 0
    {
        record["speed_mbps"] = json!(speed);
    }
    if let Some(mtu) = sys("mtu") {
        record["mtu"] = json!(mtu.trim());
    }
    record["settings"] = crate::bench::settings::nic(name);
    record
}

/// One line of [`facts`] for the report.
pub fn summary(facts: &Value) -> String {
    let text = |k: &str| facts[k].as_str().unwrap_or("unknown").to_string();
    let mut line = format!(
        "{} ({} driver, firmware {}, {} RX queue(s)",
        text("interface"),
        text("driver"),
        facts["firmware-version"].as_str().unwrap_or("none"),
        facts["rx_queues"]
    );
    if let Some(speed) = facts["speed_mbps"].as_i64() {
        line.push_str(&format!(", {speed} Mb/s"));
    }
    line.push(')');
    if let Some(offloads) = facts["offloads"].as_array() {
        let list: Vec<&str> = offloads.iter().filter_map(Value::as_str).collect();
        line.push_str(&format!("; offloads: {}", list.join(", ")));
    }
    line
}

/// `name`'s queue count set for the run, put back when dropped.
#[derive(Debug)]
pub struct Queues {
    name: String,
    before: usize,
    combined: bool,
}

impl Queues {
    /// Sets `name`'s queues to `count`: combined channels (NICs), or as many RX and TX
    /// queues where the driver has no combined ones (veth).
    pub fn set(name: &str, count: usize) -> Result<Queues, String> {
        let before = rx_queues(name);
        let n = count.to_string();
        let combined = output("ethtool", &["-L", name, "combined", &n]);
        let combined = match combined {
            Ok(_) => true,
            Err(first) => {
                output("ethtool", &["-L", name, "rx", &n, "tx", &n])
                    .map_err(|e| format!("--queues {count}: {first}; {e}"))?;
                false
            }
        };
        Ok(Queues {
            name: name.to_string(),
            before,
            combined,
        })
    }
}

/// How long putting the queues back may wait for the last setup's XDP program to go: a
/// driver refuses fewer queues while one is attached (veth: fewer RX queues than its
/// peer's TX queues), and a relay that just exited may still be detaching its own.
const PUT_BACK: std::time::Duration = std::time::Duration::from_secs(5);

impl Drop for Queues {
    fn drop(&mut self) {
        let n = self.before.to_string();
        let args: Vec<&str> = if self.combined {
            vec!["-L", &self.name, "combined", &n]
        } else {
            vec!["-L", &self.name, "rx", &n, "tx", &n]
        };
        let deadline = std::time::Instant::now() + PUT_BACK;
        loop {
            match output("ethtool", &args) {
                Ok(_) => return,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => {
                    eprintln!("perf compare: putting {}'s queues back: {e}", self.name);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_not_yet_usable_or_on_its_way_out_is_no_clients() {
        // As `ip -j addr show dev d0 scope global` gave them (a secondary IPv4 address is
        // usable; an IPv6 address still in duplicate address detection is not).
        let info = json!([
            {"family": "inet", "local": "10.1.0.2", "prefixlen": 24, "scope": "global"},
            {"family": "inet", "local": "10.1.0.3", "prefixlen": 24, "secondary": true},
            {"family": "inet6", "local": "fd01::3", "prefixlen": 64, "nodad": true},
            {"family": "inet6", "local": "fd01::2", "prefixlen": 64, "tentative": true},
            {"family": "inet6", "local": "2001:db8::9", "temporary": true, "dynamic": true},
            {"family": "inet6", "local": "fd01::4", "deprecated": true},
            {"family": "inet6", "local": "fd01::5", "dadfailed": true},
            {}
        ]);
        let usable: Vec<IpAddr> = ["10.1.0.2", "10.1.0.3", "fd01::3"]
            .map(|a| a.parse().unwrap())
            .to_vec();
        assert_eq!(usable_addresses(&info), usable);
        assert_eq!(first_of(&usable, true), Some("fd01::3".parse().unwrap()));
        assert_eq!(first_of(&usable, false), Some("10.1.0.2".parse().unwrap()));
    }
}
