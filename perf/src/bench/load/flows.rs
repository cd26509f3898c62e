//! The client flows a load is spread over, how they are made through a relay before a
//! run (one raw socket, so 100k flows need no 100k sockets; the transceiver's returns
//! that prove them go the same way), and the packets that make them: IP and UDP headers
//! built by hand, with the Internet checksum.

use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

/// The client addresses of `flows` flows, dealt round `addresses` client addresses
/// (consecutive last octets) like cards: flow `f` is on address `f % addresses`, port
/// `first_port + f / addresses`. So any first flows come from as many addresses as they
/// can: the sockets of a socket load's first flows, and each trial's live frames (which
/// begin again with the first flows), reach every address. Flow `f` is `addr(f)`; the live-frames generator
/// stamps the same address into its `f`-th frame of every cycle, so the socket that made
/// flow `f` and the frames that load it agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowPlan {
    /// The first client address (IPv4 or IPv6).
    pub first_ip: IpAddr,
    /// The first source port on every address.
    pub first_port: u16,
    /// Client addresses the flows are dealt over.
    pub addresses: u32,
    /// Flows in all.
    pub flows: u32,
}

/// Why a flow plan cannot be laid out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlowPlanError {
    /// No flows, or no ports per address.
    #[error("a flow plan needs at least one flow and one port per address")]
    Empty,
    /// The ports run past 65535.
    #[error("ports {first}..{first}+{per_addr} run past 65535")]
    Ports {
        /// The first port.
        first: u16,
        /// Ports per address.
        per_addr: u32,
    },
    /// The addresses run past the last octet 254.
    #[error("{needed} addresses from {first} run past .254")]
    Addresses {
        /// The first address.
        first: IpAddr,
        /// Addresses needed.
        needed: u32,
    },
}

impl FlowPlan {
    /// `flows` flows from `first_ip`:`first_port` on, over as few addresses as hold them
    /// at `ports_per_addr` ports each.
    pub fn new(
        first_ip: impl Into<IpAddr>,
        first_port: u16,
        ports_per_addr: u32,
        flows: u32,
    ) -> Result<Self, FlowPlanError> {
        if ports_per_addr == 0 {
            return Err(FlowPlanError::Empty);
        }
        Self::over(first_ip, first_port, flows.div_ceil(ports_per_addr), flows)
    }

    /// `flows` flows from `first_ip`:`first_port` on, dealt over `addresses` addresses
    /// (as many as there are flows, if fewer).
    pub fn over(
        first_ip: impl Into<IpAddr>,
        first_port: u16,
        addresses: u32,
        flows: u32,
    ) -> Result<Self, FlowPlanError> {
        let first_ip = first_ip.into();
        if flows == 0 || addresses == 0 || first_port == 0 {
            return Err(FlowPlanError::Empty);
        }
        let plan = FlowPlan {
            first_ip,
            first_port,
            addresses: addresses.min(flows),
            flows,
        };
        if u32::from(first_port) + plan.ports_per_addr() > 65_536 {
            return Err(FlowPlanError::Ports {
                first: first_port,
                per_addr: plan.ports_per_addr(),
            });
        }
        if u32::from(last_octet(first_ip)) + plan.addresses > 255 {
            return Err(FlowPlanError::Addresses {
                first: first_ip,
                needed: plan.addresses,
            });
        }
        Ok(plan)
    }

    /// How many client addresses the flows use.
    pub fn addresses(&self) -> u32 {
        self.addresses
    }

    /// The most ports one address holds (the first addresses' count).
    pub fn ports_per_addr(&self) -> u32 {
        self.flows.div_ceil(self.addresses)
    }

    /// The `i`-th client address: the first with its last octet `i` up.
    pub fn ip(&self, i: u32) -> IpAddr {
        match self.first_ip {
            IpAddr::V4(v4) => {
                let mut o = v4.octets();
                o[3] += i as u8;
                IpAddr::from(o)
            }
            IpAddr::V6(v6) => {
                let mut o = v6.octets();
                o[15] += i as u8;
                IpAddr::from(o)
            }
        }
    }

    /// Flow `f`'s client address (`f` < `flows`).
    pub fn addr(&self, f: u32) -> SocketAddr {
        SocketAddr::new(
            self.ip(f % self.addresses),
            self.first_port + (f / self.addresses) as u16,
        )
    }

    /// Whether the flows are IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.first_ip.is_ipv6()
    }
}

/// An address's last octet (what a plan counts its addresses up in).
pub(crate) fn last_octet(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(v4) => v4.octets()[3],
        IpAddr::V6(v6) => v6.octets()[15],
    }
}

/// Sends `datagram(f)` from each flow `f` of `plan` to `to` once, at most `per_second`
/// a second, from one raw socket of the plan's family in namespace `ns` (so no flow needs
/// a socket of its own and 100k flows fit the open-file limit; the client addresses must
/// be on the namespace's interface, so that whatever answers reaches a real host).
pub fn make_flows(
    ns: Option<&str>,
    plan: &FlowPlan,
    to: SocketAddr,
    per_second: u32,
    datagram: impl Fn(u32) -> Vec<u8>,
) -> std::io::Result<()> {
    send_raw(ns, to.ip(), plan.flows, per_second, |f| {
        udp_packet(plan.addr(f), to, &datagram(f))
    })
}

/// Sends `packets` packets, `packet(i)` each (IP header and all, addressed to `dst`),
/// at most `per_second` a second, from one raw socket of `dst`'s family in namespace
/// `ns`: any source address of the namespace's, any port, no socket bound to it.
pub fn send_raw(
    ns: Option<&str>,
    dst: IpAddr,
    packets: u32,
    per_second: u32,
    packet: impl Fn(u32) -> Vec<u8>,
) -> std::io::Result<()> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if dst.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let raw = ufrag_testbed::netns::in_netns(ns, move || {
        // IPPROTO_RAW: the packets carry their own IP header (IP_HDRINCL, and for IPv6
        // the kernel sets it for IPPROTO_RAW alike).
        Socket::new(domain, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))
    })??;
    // Port 0: an IPv6 raw socket reads a destination port as a protocol number.
    let dest = socket2::SockAddr::from(SocketAddr::new(dst, 0));
    let start = Instant::now();
    for i in 0..packets {
        let due = start + Duration::from_secs_f64(f64::from(i) / f64::from(per_second.max(1)));
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let packet = packet(i);
        if let Err(e) = raw.send_to(&packet, &dest) {
            // A full send buffer: wait a little and try once more.
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(1));
            raw.send_to(&packet, &dest)?;
        }
    }
    Ok(())
}

/// An IP header and a UDP header in front of `payload`: [`ipv4_udp_packet`] or
/// [`ipv6_udp_packet`], by the addresses' family (which must agree).
pub fn udp_packet(from: SocketAddr, to: SocketAddr, payload: &[u8]) -> Vec<u8> {
    match (from, to) {
        (SocketAddr::V4(f), SocketAddr::V4(t)) => ipv4_udp_packet(f, t, payload),
        (SocketAddr::V6(f), SocketAddr::V6(t)) => {
            ipv6_udp_packet(*f.ip(), *t.ip(), (f.port(), t.port()), payload)
        }
        _ => panic!("{from} → {to}: one family"),
    }
}

/// An IPv6 header (hop limit 64) and a UDP header with its checksum (mandatory in IPv6,
/// over the pseudo-header) in front of `payload`.
pub fn ipv6_udp_packet(
    from: std::net::Ipv6Addr,
    to: std::net::Ipv6Addr,
    (from_port, to_port): (u16, u16),
    payload: &[u8],
) -> Vec<u8> {
    let udp_len = (8 + payload.len()) as u16;
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[17, 64]);
    p.extend_from_slice(&from.octets());
    p.extend_from_slice(&to.octets());
    p.extend_from_slice(&from_port.to_be_bytes());
    p.extend_from_slice(&to_port.to_be_bytes());
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    let sum = ufrag_common::wire::udp_checksum(from.into(), to.into(), &p[40..]);
    p[46..48].copy_from_slice(&sum.to_be_bytes());
    p
}

/// An IPv4 header (checksummed, DF, TTL 64) and a UDP header (checksum 0: none, which
/// IPv4 allows) in front of `payload`.
pub fn ipv4_udp_packet(from: SocketAddrV4, to: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let total = (20 + 8 + payload.len()) as u16;
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    p.extend_from_slice(&from.ip().octets());
    p.extend_from_slice(&to.ip().octets());
    let sum = checksum(&p);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(&from.port().to_be_bytes());
    p.extend_from_slice(&to.port().to_be_bytes());
    p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    p
}

pub use ufrag_common::wire::internet_checksum as checksum;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_flow_plan_deals_its_flows_round_its_addresses() {
        let ip = Ipv4Addr::new(10, 77, 0, 100);
        let plan = FlowPlan::new(ip, 20_000, 40_000, 100_000).unwrap();
        assert_eq!((plan.addresses(), plan.ports_per_addr()), (3, 33_334));
        let at = |octet: u8, port: u16| SocketAddr::from((Ipv4Addr::new(10, 77, 0, octet), port));
        assert_eq!(plan.addr(0), at(100, 20_000));
        assert_eq!(plan.addr(1), at(101, 20_000));
        assert_eq!(plan.addr(2), at(102, 20_000));
        assert_eq!(plan.addr(3), at(100, 20_001));
        assert_eq!(plan.addr(99_999), at(100, 53_333));
        // Every flow once: no two share an address and port.
        let all: std::collections::HashSet<SocketAddr> =
            (0..plan.flows).map(|f| plan.addr(f)).collect();
        assert_eq!(all.len(), 100_000);
        // The first flows come from every address.
        let first: std::collections::HashSet<IpAddr> = (0..3).map(|f| plan.addr(f).ip()).collect();
        assert_eq!(first.len(), 3);
        let few = FlowPlan::new(ip, 20_000, 40_000, 32).unwrap();
        assert_eq!((few.addresses(), few.ports_per_addr()), (1, 32));
        // More addresses than flows: one flow on each of as many.
        let over = FlowPlan::over(ip, 20_000, 40, 5).unwrap();
        assert_eq!((over.addresses(), over.addr(4)), (5, at(104, 20_000)));
        // IPv6 plans count up the last octet the same way.
        let v6: std::net::Ipv6Addr = "fd77::1".parse().unwrap();
        let plan6 = FlowPlan::new(v6, 20_000, 10, 15).unwrap();
        assert!(plan6.is_ipv6());
        assert_eq!(
            plan6.addr(13),
            "[fd77::2]:20006".parse::<SocketAddr>().unwrap()
        );
    }

    #[test]
    fn a_flow_plan_that_does_not_fit_is_refused() {
        let ip = Ipv4Addr::new(10, 77, 0, 250);
        assert_eq!(FlowPlan::new(ip, 20_000, 1, 0), Err(FlowPlanError::Empty));
        assert!(matches!(
            FlowPlan::new(ip, 60_000, 10_000, 10_000),
            Err(FlowPlanError::Ports { .. })
        ));
        assert!(matches!(
            FlowPlan::new(ip, 20_000, 1_000, 10_000),
            Err(FlowPlanError::Addresses { needed: 10, .. })
        ));
        assert!(FlowPlan::new(ip, 20_000, 1_000, 5_000).is_ok(), "250..=254");
    }
}
