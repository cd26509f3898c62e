//! Where a setup's load goes and how its flows are made before the trials: the same on
//! the netns testbed (`crate::cmd::compare::bench`) and on a lab's tools host
//! (`crate::cmd::lab::agent`); and how they are proven as a session proves its path,
//! with traffic both ways ([`prove_flows`]).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use super::{FlowPlan, Generator};

/// The first client port of the generators (each flow one port up).
pub const FIRST_CLIENT_PORT: u16 = 20_000;
/// The sink's UDP port on the transceiver host: above every client port
/// ([`FIRST_CLIENT_PORT`] and [`PORTS_PER_CLIENT_ADDR`] up), so a sink on a client
/// address (a lab's tools host, by default) never meets a flow's port.
pub const SINK_PORT: u16 = 61_000;
const _: () = assert!(SINK_PORT as u32 >= FIRST_CLIENT_PORT as u32 + PORTS_PER_CLIENT_ADDR);
/// The XDP sink passes one frame in this many to the latency socket.
pub const SAMPLE_EVERY: u32 = 8;
/// The latency rounds' sink passes every frame to the latency socket.
pub const EVERY_DATAGRAM: u32 = 1;
/// The flows (the plan's first, dealt round every client address) whose sockets send
/// the socket loads.
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
/// first [`SOCKET_FLOWS`] flows (every client address's), bound before the flows are
/// made so their ports are the flows'.
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
    let keys = ufrag_testbed::keys::keys();
    let rtp_like = rtp_like();
    for _ in 0..2 {
        super::make_flows(ns, plan, target.dst, FLOWS_MADE_PER_SECOND, |f| {
            if target.framed {
                crate::bench::probe::binding_request(&keys, sink, f)
            } else {
                rtp_like.clone()
            }
        })?;
        std::thread::sleep(SETTLE);
    }
    Ok(sockets)
}

/// How a transceiver's datagram reaches a flow's client through a setup that carries
/// returns: the return that proves a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReturnPath {
    /// In a frame to the relay's internal address naming the client and the VIP (our
    /// relays).
    Framed {
        /// The relay's internal address.
        internal: SocketAddr,
        /// The VIP the clients send to.
        vip: SocketAddr,
    },
    /// To this address at the client's port, which the setup's conntrack maps back to
    /// the client (nftables: the VIP's address).
    ToClientPort(IpAddr),
}

impl ReturnPath {
    /// Where the transceiver sends its return to `client`.
    fn to(self, client: SocketAddr) -> SocketAddr {
        match self {
            ReturnPath::Framed { internal, .. } => internal,
            ReturnPath::ToClientPort(ip) => SocketAddr::new(ip, client.port()),
        }
    }

    /// The transceiver's return to `client`: `media`, framed for our relays.
    fn payload(self, client: SocketAddr, media: &[u8]) -> Vec<u8> {
        match self {
            ReturnPath::Framed { vip, .. } => {
                // Our transceiver marks what it sends on a path that answered its probe.
                let header =
                    ufrag_common::frame::FrameHeader::new(client, vip).on_verified_path(true);
                let mut frame = vec![0u8; header.encoded_len() + media.len()];
                let at = header.emit(&mut frame).expect("room for the header");
                frame[at..].copy_from_slice(media);
                frame
            }
            ReturnPath::ToClientPort(_) => media.to_vec(),
        }
    }
}

/// Proves each of `plan`'s flows the way a session proves its path before its media
/// flows: the client sends media, the transceiver (`sink`, from namespace
/// `transceiver_ns`) sends one datagram back on the flow through the setup (`back`),
/// and the client sends media once more. Our relays prove a flow only on DTLS or media
/// both ways, and relay-afxdp's in-kernel fast path takes a flow only once it is
/// proven: without this, an uplink-only load never reaches it. The last datagram of
/// each flow is the first its fast path can carry (one per flow), and completes the
/// proof where the return reached another worker than the flow's. All of it happens
/// before the load's sinks are attached (and each trial resets its counts), so none of
/// it is counted as load; each pass is paced as [`make_flows`] paces and given
/// [`SETTLE`] to arrive.
pub fn prove_flows(
    (client_ns, transceiver_ns): (Option<&str>, Option<&str>),
    plan: &FlowPlan,
    target: Target,
    sink: SocketAddr,
    back: ReturnPath,
) -> std::io::Result<()> {
    let media = rtp_like();
    let client_media = || {
        super::make_flows(client_ns, plan, target.dst, FLOWS_MADE_PER_SECOND, |_| {
            media.clone()
        })
        .map(|()| std::thread::sleep(SETTLE))
    };
    client_media()?;
    let dst = back.to(plan.addr(0)).ip();
    super::send_raw(
        transceiver_ns,
        dst,
        plan.flows,
        FLOWS_MADE_PER_SECOND,
        |f| {
            let client = plan.addr(f);
            super::udp_packet(sink, back.to(client), &back.payload(client, &media))
        },
    )?;
    std::thread::sleep(SETTLE);
    client_media()
}

/// The first bytes of an RTP packet (version 2, payload type 111), and nothing else.
fn rtp_like() -> Vec<u8> {
    let mut rtp = vec![0u8; 12];
    rtp[..2].copy_from_slice(&[0x80, 111]);
    rtp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_return_goes_to_the_relays_internal_port_framed_or_to_the_clients_port() {
        let client: SocketAddr = "10.77.0.1:20005".parse().unwrap();
        let vip: SocketAddr = "10.77.0.2:3478".parse().unwrap();
        let internal: SocketAddr = "10.77.0.2:40000".parse().unwrap();
        let framed = ReturnPath::Framed { internal, vip };
        assert_eq!(framed.to(client), internal);
        let frame = framed.payload(client, &rtp_like());
        let (header, payload) = ufrag_common::frame::FrameHeader::parse(&frame).unwrap();
        assert_eq!((header.client, header.vip), (client, vip));
        assert_eq!(payload, rtp_like());
        let nat = ReturnPath::ToClientPort(vip.ip());
        assert_eq!(nat.to(client), "10.77.0.2:20005".parse().unwrap());
        assert_eq!(nat.payload(client, &rtp_like()), rtp_like());
    }
}
