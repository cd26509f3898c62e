//! Next-hop MAC addresses from the kernel, IPv4 and IPv6: the neighbour table and the
//! main routing table of the relay's interface, read over rtnetlink ([`crate::netlink`])
//! every tick, never hard-coded. The next hop of a destination is the gateway of its
//! longest-prefix route, or the destination itself when on the link. A next hop with no
//! MAC yet is counted by the caller, and the kernel is asked to resolve it (ARP or
//! neighbour discovery) by sending it an empty datagram from an ordinary socket;
//! requests are rate-limited per address.
//!
//! A miss re-reads the tables at most once per millisecond, so a neighbour the kernel has
//! just learnt (from the client's own ARP request, say) is found at once.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::time::{Duration, Instant};

use crate::netlink::{Neighbour, Route, RouteSocket, contains};

/// One interface's view of its neighbours.
#[derive(Debug)]
pub struct Neighbours {
    ifindex: u32,
    netlink: Option<RouteSocket>,
    macs: HashMap<IpAddr, [u8; 6]>,
    /// This interface's routes, longest prefix first.
    routes: Vec<Route>,
    asked: HashMap<IpAddr, Instant>,
    resolver_v4: Option<UdpSocket>,
    resolver_v6: Option<UdpSocket>,
    refreshed: Instant,
}

impl Neighbours {
    /// The neighbours of interface `ifindex`, read now. Fails only if no netlink socket
    /// can be opened.
    pub fn new(ifindex: u32) -> std::io::Result<Self> {
        let mut n = Neighbours {
            ifindex,
            netlink: Some(RouteSocket::open()?),
            macs: HashMap::new(),
            routes: vec![],
            asked: HashMap::new(),
            resolver_v4: UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok(),
            resolver_v6: UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)).ok(),
            refreshed: Instant::now(),
        };
        n.refresh();
        Ok(n)
    }

    /// A fixed view (for tests): these neighbours and routes, never re-read.
    pub fn fixed(ifindex: u32, neighbours: &[Neighbour], routes: &[Route]) -> Self {
        let mut n = Neighbours {
            ifindex,
            netlink: None,
            macs: HashMap::new(),
            routes: vec![],
            asked: HashMap::new(),
            resolver_v4: None,
            resolver_v6: None,
            refreshed: Instant::now(),
        };
        n.install(neighbours, routes);
        n
    }

    fn install(&mut self, neighbours: &[Neighbour], routes: &[Route]) {
        self.macs = neighbours
            .iter()
            .filter(|n| n.ifindex == self.ifindex)
            .map(|n| (n.ip, n.mac))
            .collect();
        self.routes = routes
            .iter()
            .filter(|r| r.ifindex == self.ifindex)
            .copied()
            .collect();
        self.routes.sort_by_key(|r| std::cmp::Reverse(r.prefix_len));
    }

    /// Re-reads the kernel's tables (once per tick, never per packet). A failed read
    /// keeps the previous view.
    pub fn refresh(&mut self) {
        self.refreshed = Instant::now();
        let Some(netlink) = &mut self.netlink else {
            return;
        };
        if let (Ok(neighbours), Ok(routes)) = (netlink.neighbours(), netlink.routes()) {
            self.install(&neighbours, &routes);
        }
    }

    /// The next hop for `dst`: the gateway of its longest-prefix route on this interface,
    /// or `dst` itself for a route on the link; `None` when no route leads out here.
    pub fn next_hop(&self, dst: IpAddr) -> Option<IpAddr> {
        let dst = dst.to_canonical();
        let route = self
            .routes
            .iter()
            .find(|r| contains(r.dst, r.prefix_len, dst))?;
        Some(route.gateway.unwrap_or(dst))
    }

    /// The MAC to send to `dst` through, or `None` (and a resolution request).
    pub fn mac_for(&mut self, dst: IpAddr, now: Instant) -> Option<[u8; 6]> {
        let hop = self.next_hop(dst)?;
        if let Some(mac) = self.macs.get(&hop) {
            return Some(*mac);
        }
        // A new neighbour (the kernel may have learnt it since the last tick): re-read the
        // tables, at most once per millisecond, so only the very first packets can miss.
        if now.saturating_duration_since(self.refreshed) >= Duration::from_millis(1) {
            self.refresh();
            if let Some(mac) = self.macs.get(&hop) {
                return Some(*mac);
            }
        }
        let due = self
            .asked
            .get(&hop)
            .is_none_or(|t| now.duration_since(*t) > Duration::from_millis(200));
        if due {
            self.asked.insert(hop, now);
            self.ask_kernel_to_resolve(hop);
        }
        None
    }

    /// An empty datagram to the discard port makes the kernel resolve `hop` (link-local
    /// IPv6 next hops are scoped to this interface).
    fn ask_kernel_to_resolve(&self, hop: IpAddr) {
        let _ = match hop {
            IpAddr::V4(v4) => self
                .resolver_v4
                .as_ref()
                .map(|s| s.send_to(&[], SocketAddr::from((v4, 9)))),
            IpAddr::V6(v6) => {
                let scope = if v6.is_unicast_link_local() {
                    self.ifindex
                } else {
                    0
                };
                self.resolver_v6
                    .as_ref()
                    .map(|s| s.send_to(&[], SocketAddrV6::new(v6, 9, 0, scope)))
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0xaa, 0xbb, 0xcc, 0xdd, 1];
    const GW_MAC: [u8; 6] = [2, 0xaa, 0xbb, 0xcc, 0xdd, 0xfe];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn view() -> Neighbours {
        let route = |dst: &str, prefix_len, gateway: Option<&str>, ifindex| Route {
            dst: ip(dst),
            prefix_len,
            gateway: gateway.map(ip),
            ifindex,
        };
        Neighbours::fixed(
            7,
            &[
                Neighbour {
                    ifindex: 7,
                    ip: ip("10.77.0.1"),
                    mac: MAC,
                },
                Neighbour {
                    ifindex: 7,
                    ip: ip("fd77::1"),
                    mac: MAC,
                },
                Neighbour {
                    ifindex: 7,
                    ip: ip("fe80::1"),
                    mac: GW_MAC,
                },
                Neighbour {
                    ifindex: 8,
                    ip: ip("10.77.0.3"),
                    mac: MAC,
                },
            ],
            &[
                route("0.0.0.0", 0, Some("10.77.0.254"), 7),
                route("10.77.0.0", 24, None, 7),
                route("::", 0, Some("fe80::1"), 7),
                route("fd77::", 64, None, 7),
                route("10.9.0.0", 16, None, 8),
            ],
        )
    }

    #[test]
    fn on_link_destinations_are_their_own_next_hop() {
        let n = view();
        assert_eq!(n.next_hop(ip("10.77.0.1")), Some(ip("10.77.0.1")));
        assert_eq!(n.next_hop(ip("fd77::1")), Some(ip("fd77::1")));
        // A v4-mapped address is the IPv4 address.
        assert_eq!(n.next_hop(ip("::ffff:10.77.0.1")), Some(ip("10.77.0.1")));
    }

    #[test]
    fn off_link_destinations_go_through_the_longest_prefix_gateway() {
        let n = view();
        assert_eq!(n.next_hop(ip("192.0.2.1")), Some(ip("10.77.0.254")));
        assert_eq!(n.next_hop(ip("2001:db8::1")), Some(ip("fe80::1")));
        // Another interface's network is not ours: our default route takes it.
        assert_eq!(n.next_hop(ip("10.9.0.1")), Some(ip("10.77.0.254")));
    }

    #[test]
    fn macs_come_from_the_table_of_this_interface_only() {
        let mut n = view();
        let now = Instant::now();
        assert_eq!(n.mac_for(ip("10.77.0.1"), now), Some(MAC));
        assert_eq!(n.mac_for(ip("fd77::1"), now), Some(MAC));
        assert_eq!(n.mac_for(ip("2001:db8::1"), now), Some(GW_MAC));
        // Unknown: on our link but not (yet) in the table; the default gateway has no MAC.
        assert_eq!(n.mac_for(ip("10.77.0.3"), now), None);
        assert_eq!(n.mac_for(ip("192.0.2.1"), now), None);
    }

    #[test]
    fn no_route_no_next_hop() {
        let n = Neighbours::fixed(7, &[], &[]);
        assert_eq!(n.next_hop(ip("10.77.0.1")), None);
    }
}
