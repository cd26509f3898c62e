//! Where each piece of work runs on the testbed, so that a core's busy time is one
//! thing's cost: the relay core pays everything the relay path costs (its receive
//! processing, as a NIC queue whose interrupt is affine to it would make it, and its
//! own work), the tools core pays the generator, the bridge (the wire) and the sink.
//!
//! - Receive Packet Steering on the relay's interface sends the kernel's receive work
//!   for it (IP, UDP, nftables, the socket queue) to the relay core.
//! - Threaded NAPI on the relay's interface, its threads pinned to the relay core, moves
//!   native XDP (and AF_XDP's copy into the UMEM) there too ([`pin_napi_threads`], once
//!   the relay's XDP program is attached).
//! - RPS on the bridge's end of the relay's veth sends what the relay transmits back to
//!   the tools core: the bridge forward and the sink are not the relay's cost.

use std::io;
use std::process::Command;

use ufrag_testbed::Testbed;

/// What [`steer`] set, for the environment record.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// One line per knob: what it is and whether it took.
    pub notes: Vec<String>,
}

fn sh_in(ns: Option<&str>, script: &str) -> io::Result<()> {
    crate::bench::shell::run(
        crate::bench::shell::in_ns(ns, "sh", &["-c", script]),
        script,
    )
}

fn mask(cpu: usize) -> String {
    format!("{:x}", 1u64 << cpu)
}

/// Steers the relay's receive work to `relay_cpu` and the wire's to `tools_cpu`.
pub fn steer(bed: &Testbed, relay_cpu: usize, tools_cpu: usize) -> Placement {
    let mut p = Placement::default();
    let relay_if = &bed.relay.ifname;
    let mut note = |what: String, r: io::Result<()>| {
        p.notes.push(match r {
            Ok(()) => what,
            Err(e) => format!("{what}: FAILED ({e})"),
        });
    };
    note(
        format!("RPS of the relay's interface → CPU {relay_cpu}"),
        sh_in(
            Some(&bed.relay.ns),
            &format!(
                "for q in /sys/class/net/{relay_if}/queues/rx-*; do echo {} > $q/rps_cpus; done",
                mask(relay_cpu)
            ),
        ),
    );
    let (br_ns, br_if) = bed.bridge_side(&bed.relay);
    note(
        format!("RPS of the bridge's end of the relay's veth → CPU {tools_cpu}"),
        sh_in(
            Some(&br_ns),
            &format!(
                "for q in /sys/class/net/{br_if}/queues/rx-*; do echo {} > $q/rps_cpus; done",
                mask(tools_cpu)
            ),
        ),
    );
    p
}

/// Turns on threaded NAPI for `host`'s interface and pins its NAPI threads (named
/// `napi/<ifname>-<id>`) to `cpu`; how many it pinned. A veth has NAPI only while it has
/// an XDP program (or GRO), so this is for after the relay has attached one; without
/// NAPI it pins nothing.
pub fn pin_napi_threads(ns: Option<&str>, ifname: &str, cpu: usize) -> usize {
    if sh_in(ns, &format!("echo 1 > /sys/class/net/{ifname}/threaded")).is_err() {
        return 0;
    }
    let prefix = format!("napi/{ifname}");
    let prefix = &prefix[..prefix.len().min(15)];
    let mut pinned = 0;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for entry in procs.flatten() {
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        if !comm.trim().starts_with(prefix) {
            continue;
        }
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let ok = Command::new("taskset")
            .args(["-p", "-c", &cpu.to_string(), &pid.to_string()])
            .output()
            .is_ok_and(|o| o.status.success());
        pinned += usize::from(ok);
    }
    pinned
}
