//! `perf loopback`: relay-mio with one and two workers against a bare mmsg forwarder,
//! on loopback.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::children::{SETTLE, loopback_ip, start_relay, write_report};
use crate::bare::BareForwarder;
use crate::cpu::cpu_seconds;
use crate::load::{Generator, Sink};

/// Client sockets of the loopback load.
const CLIENTS: usize = 32;

/// relay-mio (1 and 2 workers) against a bare mmsg forwarder on loopback.
#[derive(Debug, clap::Args)]
pub struct Options {
    #[command(flatten)]
    pub search: crate::measure::SearchArgs,
    /// Where to write the Markdown report (JSON goes next to it, .json).
    #[arg(long, default_value = "target/perf/loopback.md")]
    pub out: std::path::PathBuf,
}

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    let Options { search, out } = options;
    loopback(&search, &out);
    0
}

/// Measures the three rows and writes the report to `out`.
pub fn loopback(search: &crate::measure::SearchArgs, out: &std::path::Path) {
    use crate::load::SocketLoad;
    crate::load::pin_to_load_cpu();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let epoch = Instant::now();
    let keys = testkit::keys::keys();
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
        rows.push(crate::measure::row(
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
                crate::probe::binding_request(&keys, transceiver, i as u32)
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
        rows.push(crate::measure::row(
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
    let report = crate::report::markdown(
        (
            "Loopback forwarding: relay-mio against a bare mmsg forwarder",
            &traffic,
        ),
        &rows,
        search.fixed_pps,
        &command,
        notes,
    );
    write_report(
        out,
        &report,
        Some(crate::report::json(&rows, &serde_json::json!({})).to_string()),
    );
}
