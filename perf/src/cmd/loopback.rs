//! `perf loopback`: relay-mio with one and two workers against a bare mmsg forwarder,
//! on loopback.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::children::{SETTLE, loopback_ip, start_relay, write_report};
use crate::bench::cpu::cpu_seconds;
use crate::bench::load::{Generator, Sink};
use crate::forwarders::bare::BareForwarder;

/// Client sockets of the loopback load.
const CLIENTS: usize = 32;

/// relay-mio (1 and 2 workers) against a bare mmsg forwarder on loopback.
#[derive(Debug, clap::Args)]
pub struct Options {
    #[command(flatten)]
    pub search: crate::bench::measure::SearchArgs,
    /// Where to write the Markdown report (JSON goes next to it, .json).
    #[arg(long, default_value = "target/perf/loopback.md")]
    pub out: std::path::PathBuf,
}

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    let Options { search, out } = options;
    let report = loopback(&search, &out);
    crate::bench::sessions::failed_rows::exit_code("loopback", &out, &report)
}

/// Why `row` failed, if it did: it measured nothing a figure could stand on. A row that
/// forwarded nothing at its fixed load, or whose every search found no rate within the
/// partial-drop goal (even far below the first rate), is a broken setup, not a slow one.
fn row_failure(
    row: &crate::bench::rows::Row,
    search: &crate::bench::measure::SearchArgs,
) -> Option<String> {
    if row.fixed.sent > 0 && row.fixed.received == 0 {
        return Some(format!(
            "forwarded nothing at its fixed load: {} datagrams sent at {} pps, none received",
            row.fixed.sent, search.fixed_pps
        ));
    }
    if row.runs.iter().all(|run| run.search.pdr.is_none()) {
        return Some(format!(
            "no search found a rate with at most {} % loss, from {} pps down",
            crate::bench::search::PDR_LOSS * 100.0,
            search.start_pps
        ));
    }
    None
}

/// The report's closing table of failed rows ([`row_failure`]); empty when none failed.
fn failed_rows_table(
    rows: &[crate::bench::rows::Row],
    search: &crate::bench::measure::SearchArgs,
) -> String {
    let failed: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            Some(format!(
                "| {} | failed: {} |\n",
                row.setup,
                row_failure(row, search)?
            ))
        })
        .collect();
    if failed.is_empty() {
        return String::new();
    }
    format!(
        "\n## Rows that measured nothing\n\n| setup | result |\n|---|---|\n{}",
        failed.concat()
    )
}

/// Measures the three rows and writes the report to `out`; returns it.
pub fn loopback(search: &crate::bench::measure::SearchArgs, out: &std::path::Path) -> String {
    use crate::bench::load::SocketLoad;
    crate::bench::load::pin_to_load_cpu();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let epoch = Instant::now();
    let keys = ufrag_testbed::keys::keys();
    let mut rows = vec![];

    // Setup 1: bare forwarder.
    {
        let sink = Sink::start(SocketAddr::from((loopback_ip(2), 0)), false, epoch).expect("sink");
        let fwd = BareForwarder::start(SocketAddr::from((loopback_ip(3), 4000)), sink.addr(), 1)
            .expect("bare forwarder");
        let mut generator = Generator::new(loopback_ip(4), CLIENTS, epoch).expect("generator");
        let pid = std::process::id();
        let mut load = SocketLoad {
            generator: &mut generator,
            sink: &sink,
            to: fwd.listen,
            settle: SETTLE,
        };
        rows.push(crate::bench::measure::row(
            "bare mmsg forwarder",
            &mut load,
            search,
            false,
            (|| cpu_seconds(pid, Some("bare-fwd")), 1),
        ));
    }

    // Setups 2 and 3: relay-mio with 1 and 2 workers.
    for workers in [1usize, 2] {
        let sink = Sink::start(
            SocketAddr::from((loopback_ip(10 + workers as u8), 0)),
            true,
            epoch,
        )
        .expect("sink");
        let vip = SocketAddr::from((loopback_ip(20 + workers as u8), 3478));
        let internal = SocketAddr::from((loopback_ip(30 + workers as u8), 40_000));
        let metrics = SocketAddr::from((loopback_ip(30 + workers as u8), 9100));
        let relay = start_relay(workers, vip, internal, metrics);
        let mut generator =
            Generator::new(loopback_ip(40 + workers as u8), CLIENTS, epoch).expect("generator");
        let transceiver = sink.addr();
        generator
            .send_each(vip, 20_000, |i, _| {
                crate::bench::probe::binding_request(&keys, transceiver, i as u32)
            })
            .expect("binding requests");
        std::thread::sleep(Duration::from_millis(300));
        let pid = relay.0.id();
        let mut load = SocketLoad {
            generator: &mut generator,
            sink: &sink,
            to: vip,
            settle: SETTLE,
        };
        rows.push(crate::bench::measure::row(
            &format!(
                "relay-mio, {workers} worker{}",
                if workers > 1 { "s" } else { "" }
            ),
            &mut load,
            search,
            false,
            (|| cpu_seconds(pid, Some("relay-w")), 1),
        ));
    }

    let notes = "\nOn loopback the generator (sendmmsg) and the sink (recvmmsg) run pinned to CPU 0; the bare \
                 forwarder and a 1-worker relay on CPU 1; a 2-worker relay on CPUs 0 and 1 (sharing CPU 0 with \
                 the tools). \"forwarder µs/pkt\" is the CPU time of the forwarding threads only.\n";
    let traffic = format!(
        "{}-byte datagrams, client → transceiver, {CLIENTS} flows",
        search.size
    );
    let mut report = crate::bench::rows::markdown(
        (
            "Loopback forwarding: relay-mio against a bare mmsg forwarder",
            &traffic,
        ),
        &rows,
        search.fixed_pps,
        &command,
        notes,
    );
    report.push_str(&failed_rows_table(&rows, search));
    write_report(
        out,
        &report,
        Some(crate::bench::rows::json(&rows, &serde_json::json!({})).to_string()),
    );
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::load::{Latency, Trial};
    use crate::bench::rows::{Row, Run};
    use crate::bench::search::{Limit, SearchRun};

    /// A trial that offered `sent` datagrams and carried `received`.
    fn trial(sent: u64, received: u64) -> Trial {
        Trial {
            offered_pps: sent,
            sent_pps: sent,
            sent,
            received,
            latency: Latency::default(),
        }
    }

    /// A row whose one search found `pdr` and whose fixed-load trial was `fixed`.
    fn row(setup: &str, pdr: Option<Trial>, fixed: Trial) -> Row {
        Row {
            setup: setup.into(),
            runs: vec![Run {
                search: SearchRun {
                    best: pdr,
                    pdr,
                    limit: if pdr.is_some() {
                        Limit::Loss
                    } else {
                        Limit::NoLossFree
                    },
                    trials: vec![],
                    discarded: None,
                },
                forwarder_us_per_packet: None,
                forwarder_busy: None,
                tools_busy: None,
                machine_us_per_packet: None,
                host_wake: None,
            }],
            fixed,
            busy_polls: false,
        }
    }

    fn search_args() -> crate::bench::measure::SearchArgs {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Args {
            #[command(flatten)]
            search: crate::bench::measure::SearchArgs,
        }
        Args::parse_from(["test"]).search
    }

    #[test]
    fn a_row_that_forwarded_nothing_or_found_no_rate_fails_and_the_report_says_so() {
        let search = search_args();
        let rows = [
            row(
                "bare mmsg forwarder",
                Some(trial(400_000, 400_000)),
                trial(100_000, 100_000),
            ),
            row(
                "relay-mio, 1 worker",
                Some(trial(200_000, 200_000)),
                trial(100_000, 0),
            ),
            row("relay-mio, 2 workers", None, trial(100_000, 99_000)),
        ];
        assert_eq!(row_failure(&rows[0], &search), None);
        let table = failed_rows_table(&rows, &search);
        let failed = crate::bench::sessions::failed_rows(&table);
        let named: Vec<&str> = failed.iter().map(|f| f.row.as_str()).collect();
        assert_eq!(
            named,
            ["relay-mio, 1 worker", "relay-mio, 2 workers"],
            "{table}"
        );
        assert!(
            failed[0]
                .reason
                .starts_with("forwarded nothing at its fixed load"),
            "{table}"
        );
        assert!(
            failed[1].reason.starts_with("no search found a rate"),
            "{table}"
        );
        assert_eq!(failed_rows_table(&rows[..1], &search), "");
    }
}
