//! Where a setup's load goes and how its flows are made before the trials: the same on
//! the netns testbed (`crate::compare::bench`) and on a lab's tools host
//! (`crate::lab::agent`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{FlowPlan, Generator};

/// The first client port of the generators (each flow one port up).
pub const FIRST_CLIENT_PORT: u16 = 20_000;
/// The sink's UDP port on the transceiver host.
pub const SINK_PORT: u16 = 41_000;
/// The XDP sink passes one frame in this many to the latency socket.
pub const SAMPLE_EVERY: u32 = 8;
/// The latency rounds' sink passes every frame to the latency socket.
pub const EVERY_DATAGRAM: u32 = 1;
/// The flows (the plan's first) whose sockets send the socket loads.
pub const SOCKET_FLOWS: u32 = 256;
/// How fast flows are made before the trials (datagrams a second).
const FLOWS_MADE_PER_SECOND: u32 = 20_000;
/// Source ports per client address.
pub const PORTS_PER_CLIENT_ADDR: u32 = 40_000;
/// How long a trial waits for stragglers before reading the sink.
pub const SETTLE: Duration = Duration::from_millis(100);

/// Where a setup's load goes.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The datagrams' destination.
    pub dst: SocketAddr,
    /// The next hop's MAC.
    pub dst_mac: [u8; 6],
    /// Whether it speaks our relay↔transceiver frames (flows made by Binding Requests).
    pub framed: bool,
}

/// Makes a setup's flows (`keeps_flows`) from namespace `ns`: one Binding Request per
/// flow for our relays (a session each, naming `sink` as the transceiver), one datagram
/// for the rest, all sent twice (the first datagram towards a next hop AF_XDP has not
/// resolved is dropped), paced so no buffer overflows. Returns the client sockets of the
/// first [`SOCKET_FLOWS`] flows, bound before the flows are made so their ports are the
/// flows'.
pub fn make_flows(
    ns: Option<&str>,
    plan: &FlowPlan,
    keeps_flows: bool,
    target: Target,
    sink: SocketAddr,
    epoch: Instant,
) -> std::io::Result<Generator> {
    let sockets = Generator::for_flows(ns, plan, SOCKET_FLOWS, epoch)?;
    if !keeps_flows {
        return Ok(sockets);
    }
    let keys = testkit::keys::keys();
    let mut rtp_like = vec![0u8; 12];
    rtp_like[..2].copy_from_slice(&[0x80, 111]);
    for _ in 0..2 {
        super::make_flows(ns, plan, target.dst, FLOWS_MADE_PER_SECOND, |f| {
            if target.framed {
                crate::probe::binding_request(&keys, sink, f)
            } else {
                rtp_like.clone()
            }
        })?;
        std::thread::sleep(SETTLE);
    }
    Ok(sockets)
}
