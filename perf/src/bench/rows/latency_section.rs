//! The latency section: each row's CDF at the fixed load, and what a wake-up costs,
//! priced from the same forwarder sleeping and busy-polling.

use std::fmt::Write as _;

use super::Row;
use crate::bench::load::CDF_QUANTILES;

/// The latency trial in full: each row's CDF and sample count, and what a wake-up costs,
/// computed from rows measured both sleeping and busy-polling.
pub fn latency_section(rows: &[Row], fixed_pps: u64) -> String {
    let measured: Vec<&Row> = rows
        .iter()
        .filter(|r| r.fixed.latency.samples > 0)
        .collect();
    if measured.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n## Latency at {fixed_pps} pps\n\nOne-way, sender's socket to the sink's socket, of the \
         datagrams the sink sampled, in µs at each quantile (\"max\" is the worst sample; a tail \
         quantile from few samples is a handful of datagrams).\n\n| setup | samples |"
    );
    for q in CDF_QUANTILES {
        out.push_str(&format!(" {} |", quantile_name(q)));
    }
    out.push_str(&format!(
        "\n|---|---:|{}\n",
        "---:|".repeat(CDF_QUANTILES.len())
    ));
    for r in &measured {
        let _ = write!(out, "| {} | {} |", r.setup, r.fixed.latency.samples);
        for us in r.fixed.latency.cdf_us {
            let _ = write!(out, " {us:.0} |");
        }
        out.push('\n');
    }
    let pairs = wake_up_costs(rows);
    if !pairs.is_empty() {
        out.push_str(
            "\nWhere the latency comes from: the same forwarder sleeping between datagrams and \
             busy-polling. A sleeping worker is woken for each datagram that finds it idle (at this \
             rate, most): an inter-processor interrupt to its core and, on a VM, the hypervisor \
             scheduling that vCPU again. ",
        );
        let said: Vec<String> = pairs
            .iter()
            .map(|(sleeping, busy)| {
                let (a, b) = (sleeping.fixed.latency, busy.fixed.latency);
                format!(
                    "{}: median {:.0} µs sleeping, {:.0} µs busy-polling (a wake-up costs about {:.0} µs), \
                     p99 {:.0} against {:.0}",
                    sleeping.setup,
                    a.p50(),
                    b.p50(),
                    a.p50() - b.p50(),
                    a.p99(),
                    b.p99()
                )
            })
            .collect();
        out.push_str(&said.join("; "));
        out.push_str(".\n");
    }
    out
}

/// A quantile's column name: p50, p99.9, max.
fn quantile_name(q: f64) -> String {
    if q >= 1.0 {
        "max".into()
    } else {
        format!("p{}", q * 100.0)
    }
}

/// Rows measured both ways: (sleeping, busy-polling) pairs of the same forwarder, by name
/// ("relay-mio" and "relay-mio busy"; "… wakeup" and "… busy"), both with latency.
fn wake_up_costs(rows: &[Row]) -> Vec<(&Row, &Row)> {
    let with_latency = |r: &&Row| r.fixed.latency.samples > 0;
    rows.iter()
        .filter(|r| r.busy_polls)
        .filter(with_latency)
        .filter_map(|busy| {
            let sleeping_names = [
                busy.setup.replace(" busy", ""),
                busy.setup.replace(" busy", " wakeup"),
            ];
            rows.iter()
                .filter(with_latency)
                .find(|r| !r.busy_polls && sleeping_names.contains(&r.setup))
                .map(|sleeping| (sleeping, busy))
        })
        .collect()
}
