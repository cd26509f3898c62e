//! relay-afxdp's neighbour refresher against the kernel (root only; CI runs as root): a
//! neighbour entry made in the relay's namespace reaches the worker's view because
//! rtnetlink announced it. The periodic re-read is set to an hour, so nothing else could
//! have brought it; a miss asked about first exercises the resolution request too.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::{Duration, Instant};

use ufrag_relay_afxdp::neighbours::Neighbours;
use ufrag_testkit::testbed::Testbed;
use ufrag_testkit::testbed::tools::{ifindex_in, require_root};

#[test]
fn a_neighbour_the_kernel_announces_reaches_the_view_without_a_periodic_reread() {
    require_root();
    let bed = Testbed::up().expect("testbed");
    let (ns, ifname) = (bed.relay.ns.clone(), bed.relay.ifname.clone());
    let index = ifindex_in(&ns, &ifname);
    let target = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 200));
    let mac = [2, 0, 0, 0, 0, 0xc8];
    let (asked, seen) = ufrag_testkit::netns::in_netns(Some(&ns.clone()), move || {
        let mut neighbours =
            Neighbours::refreshed_every(index, Duration::from_secs(3600)).expect("netlink");
        // On the link but unknown: a miss, handed to the refresher to resolve.
        let asked = neighbours.mac_for(target);
        let status = Command::new("ip")
            .args(["-n", &ns, "neigh", "replace", "10.77.0.200"])
            .args([
                "lladdr",
                "02:00:00:00:00:c8",
                "dev",
                &ifname,
                "nud",
                "permanent",
            ])
            .status()
            .expect("ip runs");
        assert!(status.success(), "ip neigh replace");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = None;
        while seen.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            neighbours.refresh();
            seen = neighbours.mac_for(target);
        }
        (asked, seen)
    })
    .expect("the relay's namespace");
    assert_eq!(asked, None, "unknown at first");
    assert_eq!(
        seen,
        Some(mac),
        "announced by the kernel, adopted by the worker"
    );
}
