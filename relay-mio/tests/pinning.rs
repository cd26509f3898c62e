//! Where relay-mio's workers run when no `--cpus` is given: on the CPUs the process may
//! run on (its affinity mask, as a pod's cpuset or `taskset` sets it), one worker each,
//! not on CPUs 0..N. Started under `taskset -c 1` (util-linux, in every Debian), its one
//! worker must be pinned to CPU 1; pinned to CPU 0, it would sit outside a pod's cpuset.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use ufrag_testkit::OwnedChild;
use ufrag_testkit::addr::{free_tcp_port, unique_ip};
use ufrag_testkit::cargo_build::bin;

/// The CPUs thread `name` of process `pid` may run on (`Cpus_allowed_list`).
fn thread_cpus(pid: u32, name: &str) -> Option<String> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            return status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string());
        }
    }
    None
}

#[test]
fn without_a_cpu_list_the_worker_is_pinned_inside_the_affinity_mask() {
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        online >= 2,
        "this test needs 2 CPUs to tell CPU 0 from CPU 1"
    );
    let ip = unique_ip();
    let metrics = SocketAddr::from((ip, free_tcp_port(ip)));
    let mut command = Command::new("taskset");
    command
        .args(["-c", "1"])
        .arg(bin("relay-mio"))
        .args(["--vip", &format!("{ip}:3478")])
        .args(["--internal-addr", &format!("{ip}:40000")])
        .args(["--allow-transceiver-net", "127.0.0.0/8"])
        .args(["--workers", "1", "--metrics-addr", &metrics.to_string()])
        .env("UFRAG_RELAY_HINT_KEYS", ufrag_testkit::keys::KEYS)
        .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut relay = OwnedChild::spawn(&mut command).expect("taskset and relay-mio start");
    ufrag_testkit::http::wait_ready(None, metrics, "relay-mio", Duration::from_secs(10), || {
        relay.exit_report()
    });
    // taskset execs the relay in place: the child's pid is the relay's.
    let cpus = thread_cpus(relay.id(), "relay-w0");
    assert_eq!(cpus.as_deref(), Some("1"), "the worker's allowed CPUs");
}
