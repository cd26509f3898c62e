//! What the loopback subcommands start and share: relay-mio and the transceiver as child
//! processes (killed on drop, and by the kernel if perf dies), per-run loopback
//! addresses, and writing a report.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use ufrag_testbed::OwnedChild;
use ufrag_testbed::launch::{RelayLaunch, Stderr, TransceiverLaunch};

/// How long a started relay or transceiver may take to become ready.
pub const READY: Duration = Duration::from_secs(10);

/// How long a trial waits for stragglers before reading the sink.
pub const SETTLE: Duration = Duration::from_millis(300);

/// The transceiver's worker runs here, alone: relay-mio's worker (CPU 1) and the
/// session load clients ([`SESSIONS_CLIENT_CPU`]) share the other vCPU.
pub const TRANSCEIVER_CPU: usize = 0;
/// Where `perf sessions` runs its capacity clients.
pub const SESSIONS_CLIENT_CPU: usize = 1;

/// A relay started by the suite: killed on drop, and by the kernel if perf dies.
#[derive(Debug)]
pub struct RelayChild(pub OwnedChild);

/// A transceiver started by the suite: killed on drop, and by the kernel if perf dies.
#[derive(Debug)]
pub struct TransceiverChild(pub OwnedChild);

/// The binary `name` next to `ufrag-perf`, built by cargo package `package`; panics
/// with the build command when it is missing.
pub fn sibling_binary(name: &str, package: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe()
        .expect("own path")
        .with_file_name(name);
    assert!(
        exe.exists(),
        "{} missing: cargo build --release -p {package}",
        exe.display()
    );
    exe
}

pub fn loopback_ip(last: u8) -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(
        127,
        200 + (pid % 50) as u8,
        ((pid / 50) % 250) as u8 + 1,
        last,
    )
}

pub fn start_relay(
    workers: usize,
    vip: SocketAddr,
    internal: SocketAddr,
    metrics: SocketAddr,
) -> RelayChild {
    start_relay_with(workers, vip, internal, metrics, &[])
}

/// [`start_relay`] with extra flags.
pub fn start_relay_with(
    workers: usize,
    vip: SocketAddr,
    internal: SocketAddr,
    metrics: SocketAddr,
    extra: &[String],
) -> RelayChild {
    // Every load client is one host: its hundreds of sessions, set up at once, are not
    // an attack, so the per-prefix rate of new flows is lifted.
    let mut flags = vec!["--new-flows-per-prefix".to_string(), "1000000".to_string()];
    flags.extend_from_slice(extra);
    start_relay_as_deployed(workers, vip, internal, metrics, &flags)
}

/// relay-mio with its own limits (none lifted for the load clients), and `extra` flags.
pub fn start_relay_as_deployed(
    workers: usize,
    vip: SocketAddr,
    internal: SocketAddr,
    metrics: SocketAddr,
    extra: &[String],
) -> RelayChild {
    let launch = RelayLaunch {
        binary: sibling_binary("relay-mio", "ufrag-relay-mio"),
        ns: None,
        wrapper: vec![],
        vip,
        internal,
        transceiver_net: "127.0.0.0/8".into(),
        workers,
        cpus: if workers == 1 { "1" } else { "0-1" }.into(),
        metrics,
        flags: extra.to_vec(),
        log_filter: Some("warn".into()),
    };
    match launch.start(Stderr::Inherited, READY) {
        Ok(child) => RelayChild(child),
        Err(e) => panic!("{e}"),
    }
}

pub fn start_transceiver(
    http: SocketAddr,
    bind: SocketAddr,
    advertise: Option<SocketAddr>,
    extra: &[&str],
) -> TransceiverChild {
    start_transceiver_from(
        &sibling_binary("transceiver", "ufrag-transceiver"),
        http,
        bind,
        advertise,
        extra,
    )
}

/// [`start_transceiver`] with another build of the transceiver: an A/B baseline.
pub fn start_transceiver_from(
    binary: &std::path::Path,
    http: SocketAddr,
    bind: SocketAddr,
    advertise: Option<SocketAddr>,
    extra: &[&str],
) -> TransceiverChild {
    // The load clients are one address: lift its caps.
    let mut flags = vec![
        "--posts-per-second-per-ip",
        "1000000",
        "--requests-per-second-per-ip",
        "1000000",
        "--http-max-connections-per-ip",
        "100000",
        "--max-unconnected-per-ip",
        "100000",
    ];
    flags.extend_from_slice(extra);
    spawn_transceiver(binary, http, bind, advertise, &flags)
}

/// The transceiver with its own signaling limits (none lifted), and `extra` flags.
pub fn start_transceiver_as_deployed(
    http: SocketAddr,
    bind: SocketAddr,
    advertise: Option<SocketAddr>,
    extra: &[&str],
) -> TransceiverChild {
    spawn_transceiver(
        &sibling_binary("transceiver", "ufrag-transceiver"),
        http,
        bind,
        advertise,
        extra,
    )
}

/// `binary` with one worker pinned to [`TRANSCEIVER_CPU`], in direct mode or behind a
/// relay at `advertise`, with `extra` flags; waits until it is ready.
fn spawn_transceiver(
    binary: &std::path::Path,
    http: SocketAddr,
    bind: SocketAddr,
    advertise: Option<SocketAddr>,
    extra: &[&str],
) -> TransceiverChild {
    let mut flags: Vec<String> = ["--workers", "1", "--max-sessions-per-worker", "5000"]
        .map(String::from)
        .to_vec();
    flags.extend(["--cpus".into(), TRANSCEIVER_CPU.to_string()]);
    match advertise {
        Some(vip) => flags.extend([
            "--advertise".into(),
            vip.to_string(),
            "--allow-relay-net".into(),
            "127.0.0.0/8".into(),
        ]),
        None => flags.push("--direct".into()),
    }
    flags.extend(extra.iter().map(|f| f.to_string()));
    let launch = TransceiverLaunch {
        binary: binary.to_path_buf(),
        ns: None,
        http,
        bind,
        ready_from: None,
        flags,
        log_filter: Some("warn".into()),
    };
    match launch.start(Stderr::Inherited, READY) {
        Ok(child) => TransceiverChild(child),
        Err(e) => panic!("{e}"),
    }
}

/// Prints the Markdown report and writes it to `out`, with `json` beside it (`.json`)
/// when given.
pub fn write_report(out: &std::path::Path, report: &str, json: Option<String>) {
    print!("{report}");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).expect("report directory");
    }
    std::fs::write(out, report).expect("write report");
    if let Some(json) = json {
        std::fs::write(out.with_extension("json"), json).expect("write json");
    }
    eprintln!("report: {}", out.display());
}

/// The Markdown report's tables as JSON, for a report whose rows are only written as
/// tables: `{"tables": [{"section", "columns", "rows": [{column: cell}]}]}`, each under
/// the `#` heading it follows; a cell that is a plain number is a JSON number.
pub fn tables_json(markdown: &str) -> serde_json::Value {
    let cells = |line: &str| -> Vec<String> {
        let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
        inner.split('|').map(|c| c.trim().to_string()).collect()
    };
    let mut tables = vec![];
    let mut section = String::new();
    let mut lines = markdown.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(heading) = line.strip_prefix('#') {
            section = heading.trim_start_matches('#').trim().to_string();
            continue;
        }
        let is_rule = |l: &str| l.starts_with("|-") || l.starts_with("|:");
        if !(line.starts_with('|') && lines.peek().is_some_and(|next| is_rule(next))) {
            continue;
        }
        let columns = cells(line);
        lines.next();
        let mut rows = vec![];
        while let Some(row) = lines.next_if(|l| l.starts_with('|')) {
            let object: serde_json::Map<String, serde_json::Value> = columns
                .iter()
                .zip(cells(row))
                .map(|(column, cell)| {
                    let value = cell
                        .parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                        .map_or(serde_json::Value::String(cell), serde_json::Value::Number);
                    (column.clone(), value)
                })
                .collect();
            rows.push(serde_json::Value::Object(object));
        }
        tables.push(serde_json::json!({ "section": section, "columns": columns, "rows": rows }));
    }
    serde_json::json!({ "tables": tables })
}

#[cfg(test)]
mod tests {
    use super::tables_json;

    #[test]
    fn a_reports_tables_become_rows_under_their_heading() {
        let md = "# Report\n\ntext | not a table\n\n## Setup times\n\n| path | sessions | p50 ms |\n|---|---:|---|\n| relayed | 20 | 12 / 18 |\n| direct | 20 | 9 / 11 |\n\nafter\n";
        let json = tables_json(md);
        let tables = json["tables"].as_array().unwrap();
        assert_eq!(tables.len(), 1);
        assert_eq!(tables[0]["section"], "Setup times");
        assert_eq!(tables[0]["rows"][0]["path"], "relayed");
        assert_eq!(tables[0]["rows"][0]["sessions"], 20.0);
        assert_eq!(tables[0]["rows"][1]["p50 ms"], "9 / 11");
    }
}
