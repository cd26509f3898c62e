//! The global relay tier as a topology on the netns testbed (root only; CI runs as root):
//! a str0m client in the client namespace, the global relay on the second relay host
//! (10.77.0.4), cluster 1's relay on the first (10.77.0.2), the transceiver of cluster 1
//! behind it. The transceiver advertises the global VIP and writes its cluster into the
//! hint; the global relay forwards the flow to cluster 1's relay, which accepts frames only
//! from the global relay's address; ICE, DTLS, SRTP and the data channel cross both
//! relays, each over the bridge, and the echo comes back from the global VIP.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use ufrag_testkit::OwnedChild;
use ufrag_testkit::cargo_build::bin;
use ufrag_testkit::testbed::tools::{
    KEYS, METRICS, echoed_session, relay_metric, require_root, start_relay, start_transceiver,
};
use ufrag_testkit::testbed::{Host, Testbed, TestbedOptions};

/// relay-mio as the global relay on `host`: cluster 0, cluster 1's relay at `cluster`.
fn start_global_relay(host: &Host, cluster: SocketAddr) -> OwnedChild {
    let mut command = host.command(bin("relay-mio").to_str().unwrap());
    command
        .args(["--vip", &format!("{}:3478", host.addr)])
        .args(["--internal-addr", &format!("{}:40000", host.addr)])
        .args(["--allow-transceiver-net", "10.77.0.0/24"])
        .args(["--workers", "1", "--cpus", "0", "--metrics-addr", METRICS])
        .args([
            "--cluster-id",
            "0",
            "--cluster-relay",
            &format!("1={cluster}"),
        ])
        .env("UFRAG_RELAY_HINT_KEYS", KEYS)
        .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = OwnedChild::spawn(&mut command).expect("the global relay starts");
    let metrics: SocketAddr = METRICS.parse().unwrap();
    ufrag_testkit::http::wait_ready(
        Some(&host.ns),
        metrics,
        "global relay",
        Duration::from_secs(10),
        || child.exit_report(),
    );
    child
}

#[test]
fn a_session_crosses_the_global_relay_and_the_cluster_relay_between_namespaces() {
    require_root();
    let bed = Testbed::up_with(TestbedOptions {
        second_relay: true,
        ..TestbedOptions::default()
    })
    .unwrap();
    let global_host = bed.relay2.clone().expect("the second relay host");
    let mut cluster = start_relay(
        &bed,
        "relay-mio",
        "1",
        &[
            "--cluster-id",
            "1",
            "--allow-global-relay-net",
            &format!("{}/32", global_host.addr),
        ],
    );
    let mut global = start_global_relay(&global_host, SocketAddr::from((bed.relay.addr, 40_000)));
    let global_vip = SocketAddr::from((global_host.addr, 3478));
    let (mut xcvr, http) = start_transceiver(&bed, global_vip, &["--cluster-id", "1"]);

    echoed_session(
        &bed,
        http,
        global_vip,
        "through the global and the cluster relay",
    );

    let metrics: SocketAddr = METRICS.parse().unwrap();
    let global_flows = ufrag_testkit::http::metric(
        Some(&global_host.ns),
        metrics,
        "ufrag_relay_flows_created_total",
    );
    assert_eq!(global_flows, 1.0, "the global relay made the client's flow");
    assert_eq!(
        relay_metric(&bed, "ufrag_relay_flows_created_total"),
        1.0,
        "and the cluster relay its own"
    );
    for child in [&mut global, &mut cluster, &mut xcvr] {
        let _ = child.kill();
        let _ = child.wait();
    }
}
