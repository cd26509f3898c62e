//! The monitoring against the real thing: Debian's Prometheus scrapes both relay tiers
//! (a global relay and the cluster relay behind it, in this process) and two
//! transceivers (children) every second, with the alert rules of
//! `deploy/monitoring/alerts.yaml`, after one session through both relays. Each target
//! carries the `namespace` label the Prometheus Operator gives a pod of the shipped
//! manifests (`ufrag`, the global tier `ufrag-global`; which namespaces the shipped
//! PodMonitor watches is `deploy/kubernetes/check.py --monitoring`'s to check). Every query
//! of the Grafana dashboard (`deploy/monitoring/dashboard.json`) returns data with its
//! variables at "All", and every relay query returns data for each tier alone; a
//! transceiver whose worker dies fires `UfragTransceiverWorkerFailed` and
//! `UfragTransceiverNotReady` for it alone. The rules' holds (`for:`) are cut to 2 s in
//! the copy Prometheus loads here; `promtool test rules` covers the holds themselves.
//! Both binaries answer a scrape in the same format, and `promtool check metrics` finds
//! nothing to lint in either.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// A private Prometheus: its directory and process, both gone on drop.
struct Prometheus {
    _child: ufrag_testkit::OwnedChild,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn repository(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

impl Prometheus {
    /// Scrapes `targets` (job name, namespace, address) every second with the shipped
    /// alert rules.
    fn start(targets: &[(&str, &str, SocketAddr)]) -> Prometheus {
        let ip = unique_ip();
        let addr = SocketAddr::from((ip, free_tcp_port(ip)));
        let dir =
            std::env::temp_dir().join(format!("ufrag-prometheus-{}-{ip}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let rules = std::fs::read_to_string(repository("deploy/monitoring/alerts.yaml")).unwrap();
        let rules: String = rules
            .lines()
            .map(|l| match l.trim_start().strip_prefix("for: ") {
                Some(_) => "        for: 2s".to_string(),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(dir.join("rules.yaml"), rules).unwrap();
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - rules.yaml\nscrape_configs:\n",
        );
        for (job, namespace, target) in targets {
            config.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n        \
                 labels:\n          namespace: {namespace}\n"
            ));
        }
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let mut command = Command::new("prometheus");
        command
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = ufrag_testkit::OwnedChild::spawn(&mut command)
            .expect("prometheus must be installed (scripts/test.sh installs Debian's prometheus)");
        let prometheus = Prometheus {
            _child: child,
            addr,
            dir,
        };
        wait_for("Prometheus to be ready", 30, || {
            http_request(addr, "GET", "/-/ready", None, &[]).is_some_and(|r| r.status == 200)
        });
        prometheus
    }

    /// The result vector of an instant query (empty when none, or on an error).
    fn query(&self, promql: &str) -> Vec<serde_json::Value> {
        let path = format!("/api/v1/query?query={}", percent_encoded(promql));
        let Some(answer) = http_request(self.addr, "GET", &path, None, &[]) else {
            return Vec::new();
        };
        let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap_or_default();
        json["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The alerts firing now, as (name, instance).
    fn firing(&self) -> Vec<(String, String)> {
        let Some(answer) = http_request(self.addr, "GET", "/api/v1/alerts", None, &[]) else {
            return Vec::new();
        };
        let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap_or_default();
        json["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["state"] == "firing")
            .map(|a| {
                let label = |name: &str| a["labels"][name].as_str().unwrap_or_default().to_string();
                (label("alertname"), label("instance"))
            })
            .collect()
    }
}

/// `text` percent-encoded for a query string.
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `done` every 100 ms; fails naming `what` after `seconds`.
fn wait_for(what: &str, seconds: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        assert!(Instant::now() < deadline, "waited {seconds} s for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every PromQL expression of the shipped dashboard, as written (with `$cluster` and
/// `$namespace`).
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(repository("deploy/monitoring/dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().expect("an expr").to_string())
        .collect()
}

/// `query` with the dashboard's variables set: `$cluster` to every cluster (the scrapes
/// here carry no cluster label, as a single Prometheus's do not) and `$namespace` to the
/// regular expression `namespace`.
fn with_variables(query: &str, namespace: &str) -> String {
    query
        .replace("$cluster", ".*")
        .replace("$namespace", namespace)
}

/// Polls `query` for up to 15 s; whether it returned data.
fn returns_data(prometheus: &Prometheus, query: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    while prometheus.query(query).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
    }
    !prometheus.query(query).is_empty()
}

#[test]
fn a_real_prometheus_answers_every_dashboard_query_and_fires_on_a_dead_worker() {
    let (relay, global) = TestRelay::global_and_cluster();
    let healthy = Transceiver::start(Some(global.vip), &["--cluster-id", "1"]);
    let mut broken = Transceiver::spawn(
        Some(global.vip),
        &["--workers", "2", "--cluster-id", "1"],
        &[("UFRAG_TRANSCEIVER_FAULT", "panic-worker-0")],
    );
    // A little load: one session through both relays, talked to and ended.
    let mut client = new_client();
    assert_eq!(client.signal(healthy.http).status, 201);
    let client = converse_with_echo(client, "through the global and the cluster relay", 10, 8);
    let location = client.location.clone().expect("a Location");
    let deleted = http_request(healthy.http, "DELETE", &location, None, &[]).unwrap();
    assert_eq!(deleted.status, 204);

    let prometheus = Prometheus::start(&[
        ("relay", "ufrag", relay.metrics),
        ("global-relay", "ufrag-global", global.metrics),
        ("transceiver", "ufrag", healthy.http),
        ("transceiver-broken", "ufrag", broken.http),
    ]);
    wait_for("four targets up", 30, || {
        prometheus
            .query("sum(up)")
            .first()
            .and_then(|r| r["value"][1].as_str().map(str::to_string))
            == Some("4".to_string())
    });
    // Every dashboard query returns data once two scrapes make rates: with its variables
    // at "All", and each relay query for each tier alone.
    let queries = dashboard_queries();
    assert!(
        queries
            .iter()
            .all(|q| q.contains("namespace=~\"$namespace\"") && q.contains("cluster=~\"$cluster\"")),
        "every dashboard query is filtered by the cluster and namespace variables: {queries:#?}"
    );
    let mut empty = Vec::new();
    for query in &queries {
        let mut namespaces = vec![".*"];
        if query.contains("ufrag_relay_") {
            namespaces.extend(["ufrag", "ufrag-global"]);
        }
        for namespace in namespaces {
            let query = with_variables(query, namespace);
            if !returns_data(&prometheus, &query) {
                empty.push(query);
            }
        }
    }
    assert!(
        empty.is_empty(),
        "dashboard queries with no data: {empty:#?}"
    );
    // The global tier is told apart: its relay's flows are its own.
    let global_flows = prometheus.query(&with_variables(
        "sum(ufrag_relay_flows_created_total{namespace=~\"$namespace\"})",
        "ufrag-global",
    ));
    assert_eq!(
        global_flows.first().and_then(|r| r["value"][1].as_str()),
        Some("1"),
        "the global relay made the client's one flow: {global_flows:?}"
    );

    // The dead worker: both alerts fire for the broken transceiver, none for the healthy.
    let broken_instance = broken.http.to_string();
    let wanted = ["UfragTransceiverWorkerFailed", "UfragTransceiverNotReady"];
    let fired = |firing: &[(String, String)]| {
        wanted
            .iter()
            .all(|name| firing.contains(&(name.to_string(), broken_instance.clone())))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut firing = prometheus.firing();
    while !fired(&firing) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        firing = prometheus.firing();
    }
    assert!(
        fired(&firing),
        "{wanted:?} fire for {broken_instance} within 30 s; firing: {firing:?}"
    );
    let healthy_instance = healthy.http.to_string();
    assert!(
        !firing
            .iter()
            .any(|(_, instance)| *instance == healthy_instance
                || *instance == relay.metrics.to_string()
                || *instance == global.metrics.to_string()),
        "only the broken transceiver alerts: {firing:?}"
    );
    broken.child.stop();
}

/// The `Accept` header Prometheus sends with each scrape.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `text` through `promtool check metrics` (the 0.0.4 text): what it complains about.
fn lint(text: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool must be installed (scripts/test.sh installs Debian's prometheus)");
    child
        .stdin
        .take()
        .expect("a stdin")
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn both_binaries_answer_a_scrape_alike_and_promtool_finds_nothing_to_lint() {
    let relay = TestRelay::start(&[]);
    let xcvr = Transceiver::start(Some(relay.vip), &[]);
    for (what, addr) in [("relay", relay.metrics), ("transceiver", xcvr.http)] {
        let scrape = |accept: Option<&str>| {
            let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
            let answer = http_request(addr, "GET", "/metrics", None, &headers)
                .unwrap_or_else(|| panic!("{what} answers /metrics"));
            assert_eq!(answer.status, 200, "{what}");
            let content_type = answer
                .headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
                .map(|(_, value)| value.clone())
                .unwrap_or_default();
            (content_type, answer.body)
        };
        let (content_type, body) = scrape(Some(PROMETHEUS_ACCEPT));
        assert_eq!(
            content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8",
            "{what}: OpenMetrics for Prometheus"
        );
        assert_eq!(
            body.lines().last(),
            Some("# EOF"),
            "{what}: OpenMetrics ends so"
        );
        let (content_type, body) = scrape(None);
        assert_eq!(
            content_type, "text/plain; version=0.0.4; charset=utf-8",
            "{what}: the 0.0.4 text for a plain GET"
        );
        assert!(!body.contains("# EOF"), "{what}");
        let (clean, said) = lint(&body);
        assert!(
            clean && said.trim().is_empty(),
            "{what}: promtool check metrics:\n{said}"
        );
    }
}
