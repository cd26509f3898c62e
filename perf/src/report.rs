//! The report: one row per setup, as Markdown for people and JSON lines for machines.

use std::fmt::Write as _;

use crate::load::Trial;

/// One measured setup.
#[derive(Clone, Debug)]
pub struct Row {
    /// Setup name.
    pub setup: String,
    /// The best loss-free trial.
    pub best: Trial,
    /// CPU seconds per forwarded packet of the forwarding threads at the best rate, µs.
    pub cpu_us_per_packet: f64,
    /// Busy CPU time of the whole machine (every core, kernel included) per packet at the
    /// best rate, µs.
    pub machine_us_per_packet: f64,
    /// The trial at the fixed moderate load.
    pub fixed: Trial,
    /// Every trial of the search, in order.
    pub search: Vec<Trial>,
}

/// Renders the table.
pub fn markdown(rows: &[Row], fixed_pps: u64, command: &str) -> String {
    markdown_titled(
        "Loopback forwarding: relay-mio against a bare mmsg forwarder",
        rows,
        fixed_pps,
        command,
    )
}

/// Renders the table under `title`.
pub fn markdown_titled(title: &str, rows: &[Row], fixed_pps: u64, command: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {title}\n");
    let _ = writeln!(out, "Command: `{command}`  ");
    let _ = writeln!(
        out,
        "200-byte datagrams, 32 client flows, client → transceiver direction; loss-free = loss < 0.1 %. \
         The generator and the sink run pinned to CPU 0; the bare forwarder and a 1-worker relay \
         on CPU 1; a 2-worker relay on CPUs 0 and 1 (sharing CPU 0 with the load tools). \
         `gen-bound`: the generator could not reach the offered rate, so the machine, not the \
         forwarder, set the limit. \"max loss-free pps\" is the achieved send rate of the best \
         loss-free trial.\n"
    );
    let _ = writeln!(
        out,
        "| setup | max loss-free pps | loss there | CPU µs/pkt (forwarder) | machine CPU µs/pkt | gen-bound | p50 / p99 / p99.9 µs at {fixed_pps} pps |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|:---:|---|");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} % | {} | {:.2} | {} | {:.0} / {:.0} / {:.0} |",
            r.setup,
            r.best.sent_pps,
            r.best.loss() * 100.0,
            if r.cpu_us_per_packet > 0.0 {
                format!("{:.2}", r.cpu_us_per_packet)
            } else {
                "–".into()
            },
            r.machine_us_per_packet,
            if r.best.generator_bound() {
                "yes"
            } else {
                "no"
            },
            r.fixed.latency_us[0],
            r.fixed.latency_us[1],
            r.fixed.latency_us[2],
        );
    }
    let _ = writeln!(out, "\n## Search trials\n");
    let _ = writeln!(
        out,
        "| setup | offered pps | achieved pps | sent | received | loss |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    for r in rows {
        for t in &r.search {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.3} % |",
                r.setup,
                t.offered_pps,
                t.sent_pps,
                t.sent,
                t.received,
                t.loss() * 100.0
            );
        }
    }
    out
}

/// One JSON object per row (no dependency on a JSON crate: the fields are numbers and a
/// plain name).
pub fn json_lines(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows {
        let _ = writeln!(
            out,
            "{{\"setup\":\"{}\",\"max_loss_free_pps\":{},\"loss\":{:.6},\"cpu_us_per_packet\":{:.3},\"machine_us_per_packet\":{:.3},\"generator_bound\":{},\"p50_us\":{:.1},\"p99_us\":{:.1},\"p999_us\":{:.1}}}",
            r.setup,
            r.best.sent_pps,
            r.best.loss(),
            r.cpu_us_per_packet,
            r.machine_us_per_packet,
            r.best.generator_bound(),
            r.fixed.latency_us[0],
            r.fixed.latency_us[1],
            r.fixed.latency_us[2],
        );
    }
    out
}
