//! relay-afxdp's worker on a real AF_XDP socket in the netns testbed (root only; CI runs
//! as root), forwarding a flow both ways under a counting allocator: after a warm-up
//! flow, the worker thread allocates nothing per packet (rings, parse, decide, rewrite,
//! checksums, counters, ticks), nor when its next hops' MACs are gone (frames held, the
//! refresher asked, the new view adopted). The relay runs in process, in this test binary started
//! again inside the relay's namespace.

use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Parser;
use ufrag_common::config::{RelayArgs, RelayConfig};
use ufrag_relay_afxdp::relay::{AfXdpOptions, Relay};
use ufrag_testkit::alloc::{self, CountingAllocator};
use ufrag_testkit::child::OwnedChild;
use ufrag_testkit::testbed::Testbed;
use ufrag_testkit::testbed::tools::{
    KEYS, METRICS, probe_session_through_relay_in, probe_through_relay_in, require_root, vip,
};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// The relay's flags and the AF_XDP options, as the binary parses them.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    relay: RelayArgs,
    #[command(flatten)]
    afxdp: AfXdpOptions,
}

/// Where the parent tells the child what to do, and the child answers: `arm` (count from
/// now), `report` (stop counting, write `count`, stop the relay).
const CONTROL_DIR_ENV: &str = "UFRAG_AFXDP_ALLOC_CONTROL";

/// The control directory, removed however the test ends.
struct ControlDir(std::path::PathBuf);

impl ControlDir {
    fn create(test_name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("afxdp-alloc-{}-{test_name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        ControlDir(dir)
    }
}

impl Drop for ControlDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The parent: builds the testbed, runs the relay in a child test process inside the
/// relay's namespace (`ip netns exec`, so `/sys` shows the namespace's interfaces), and
/// drives a warm-up flow, then a counted one, through it.
#[test]
fn the_afxdp_worker_does_not_allocate_per_packet() {
    counted_run("the_afxdp_worker_does_not_allocate_per_packet", &[]);
}

/// The same worker on the `xdp` crate's AF_XDP layer (`--xsk-layer xdp-crate`): the
/// adapter's packet table and slabs are sized at open, so it allocates nothing either.
#[test]
fn the_afxdp_worker_on_the_xdp_crate_does_not_allocate_per_packet() {
    counted_run(
        "the_afxdp_worker_on_the_xdp_crate_does_not_allocate_per_packet",
        &["--xsk-layer", "xdp-crate"],
    );
}

/// The same with the in-kernel fast path: the worker writes each proven flow's entries
/// and reads their stamps at expiry, without allocating (skb mode: `XDP_TX` needs no
/// program on the veth peer there).
#[test]
fn the_afxdp_worker_with_the_fast_path_does_not_allocate() {
    counted_run(
        "the_afxdp_worker_with_the_fast_path_does_not_allocate",
        &["--fast-path", "xdp"],
    );
}

fn counted_run(test_name: &str, flags: &[&str]) {
    if std::env::var_os(CONTROL_DIR_ENV).is_some() {
        return relay_in_namespace();
    }
    require_root();
    let bed = Testbed::up().unwrap();
    let control = ControlDir::create(test_name);
    let control = &control.0;
    let internal = std::net::SocketAddr::new(bed.relay.ip(false), 40000).to_string();
    let vip = vip(&bed, false).to_string();
    let exe = std::env::current_exe().unwrap();
    let mut command = bed.relay.command(exe.to_str().unwrap());
    command
        .args(["--exact", test_name, "--nocapture"])
        .env(CONTROL_DIR_ENV, control)
        .env(
            "UFRAG_AFXDP_ALLOC_ARGS",
            format!("{vip} {internal} {} {}", bed.relay.ifname, flags.join(" ")).trim_end(),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = OwnedChild::spawn(&mut command).unwrap();
    let metrics = METRICS.parse().unwrap();
    ufrag_testkit::http::wait_ready(
        Some(&bed.relay.ns),
        metrics,
        "relay-afxdp",
        Duration::from_secs(20),
        || child.exit_report(),
    );

    // Warm-up: the first flow fills the neighbour cache and sizes every buffer.
    let warm = probe_through_relay_in(&bed, false, 200);
    assert!(warm.contains("received 200/200"), "warm-up probe: {warm}");
    std::fs::write(control.join("arm"), "").unwrap();
    let said = probe_session_through_relay_in(&bed, false, 500, 8);
    // A miss: the relay's namespace forgets every neighbour, so the next flow's first
    // frames wait while the refresher has the kernel resolve their next hops again.
    let flushed = std::process::Command::new("ip")
        .args([
            "-n",
            &bed.relay.ns,
            "neigh",
            "flush",
            "dev",
            &bed.relay.ifname,
        ])
        .status()
        .unwrap();
    assert!(flushed.success(), "ip neigh flush");
    let transceiver = bed.transceiver.addr.to_string();
    let entry = || {
        let out = std::process::Command::new("ip")
            .args(["-n", &bed.relay.ns, "neigh", "show", &transceiver])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(entry(), "", "the relay's kernel forgot the transceiver");
    let after_miss = probe_session_through_relay_in(&bed, false, 100, 9);
    // Only the relay's refresher asks the relay's kernel to resolve the transceiver (the
    // kernel sees none of the steered traffic): an entry again means the miss happened.
    let resolved = entry();
    assert!(
        resolved.contains("lladdr"),
        "the miss was resolved: `{resolved}`"
    );
    std::fs::write(control.join("report"), "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let count = loop {
        if let Ok(text) = std::fs::read_to_string(control.join("count"))
            && text.ends_with('\n')
        {
            break text;
        }
        if let Some(why) = child.exit_report() {
            panic!("the relay process ended without a count: {why}");
        }
        assert!(Instant::now() < deadline, "no allocation count within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(said.contains("received 500/500"), "counted probe: {said}");
    assert!(
        after_miss.contains("received 100/100"),
        "probe after the miss: {after_miss}"
    );
    let allocations: u64 = count.trim().parse().unwrap();
    assert_eq!(
        allocations, 0,
        "relay-afxdp's worker (flags {flags:?}) allocated {allocations} times while forwarding 500 datagrams \
         each way, then 100 more after a neighbour miss"
    );
}

/// The child: relay-afxdp in process, its worker threads' allocations counted between
/// `arm` and `report`.
fn relay_in_namespace() {
    let control = std::path::PathBuf::from(std::env::var_os(CONTROL_DIR_ENV).unwrap());
    let args = std::env::var("UFRAG_AFXDP_ALLOC_ARGS").unwrap();
    let mut args = args.split(' ');
    let [vip, internal, ifname] = [(); 3].map(|()| args.next().expect("three fixed arguments"));
    let cli = Cli::try_parse_from(
        [
            "relay-afxdp",
            "--vip",
            vip,
            "--internal-addr",
            internal,
            "--allow-transceiver-net",
            "10.77.0.0/24",
            "--workers",
            "1",
            "--cpus",
            "1",
            "--metrics-addr",
            METRICS,
            "--interface",
            ifname,
        ]
        .into_iter()
        .chain(args),
    )
    .expect("the flags parse");
    let config = RelayConfig::load(
        &cli.relay,
        &ufrag_common::runtime::host::Host::files_only()
            .with_env(ufrag_common::config::HINT_KEYS_ENV, KEYS),
        &ufrag_common::runtime::lifecycle::allowed_cpus(),
    )
    .expect("the config loads");
    alloc::count_threads_named("relay-w");
    let running = Relay::start(&config, &cli.afxdp).expect("relay-afxdp starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !control.join("arm").exists() {
        assert!(Instant::now() < deadline, "never armed");
        std::thread::sleep(Duration::from_millis(5));
    }
    alloc::arm();
    while !control.join("report").exists() {
        assert!(Instant::now() < deadline, "never asked for the count");
        std::thread::sleep(Duration::from_millis(5));
    }
    let count = alloc::disarm();
    running.join().expect("the workers stop cleanly");
    std::fs::write(control.join("count"), format!("{count}\n")).unwrap();
}
