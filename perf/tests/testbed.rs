//! The network-namespace testbed, for real (root only: CI runs as root; without root
//! these tests fail loudly rather than skip): it builds, relay-mio runs inside it
//! unchanged and forwards a flow client → relay → transceiver and back, and nothing is
//! left behind afterwards.

use std::process::Command;

use ufrag_testkit::testbed::Testbed;
use ufrag_testkit::testbed::tools::{probe_through_relay, require_root, start_relay};

fn netns_list() -> String {
    String::from_utf8(
        Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
}

#[test]
fn the_testbed_builds_and_leaves_nothing_behind() {
    require_root();
    let names = {
        let bed = Testbed::up().expect("testbed builds");
        let listed = netns_list();
        for ns in bed.namespaces() {
            assert!(listed.contains(ns.as_str()), "{ns} exists");
        }
        let addr = Command::new("ip")
            .args(["-n", &bed.relay.ns, "-br", "addr"])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&addr.stdout).contains("10.77.0.2/24"));
        bed.namespaces().to_vec()
    };
    let listed = netns_list();
    for ns in names {
        assert!(!listed.contains(ns.as_str()), "{ns} was removed");
    }
}

#[test]
fn relay_mio_runs_unchanged_inside_the_testbed() {
    require_root();
    let bed = Testbed::up().expect("testbed builds");
    let mut relay = start_relay(&bed, "relay-mio", "0", &[]);
    let said = probe_through_relay(&bed, 200);
    let _ = relay.kill();
    let _ = relay.wait();
    assert_eq!(said, "received 200/200");
}
