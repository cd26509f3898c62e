//! Next-hop MAC addresses from the kernel: the IPv4 neighbour table (`/proc/net/arp`) and
//! the routing table (`/proc/net/route`, for the gateway of off-link destinations), both
//! re-read every tick, never hard-coded. A destination with no MAC yet is counted by the
//! caller, and the kernel is asked to resolve it by sending it an empty datagram from an
//! ordinary socket (the kernel ARPs for it); requests are rate-limited per address.
//!
//! A miss re-reads the table at most once per millisecond, so a neighbour the kernel has
//! just learnt (from the client's own ARP request, say) is found at once.
//!
//! IPv4 only for now: IPv6 neighbours (netlink) are not read yet.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// One interface's view of its neighbours.
#[derive(Debug)]
pub struct Neighbours {
    ifname: String,
    macs: HashMap<Ipv4Addr, [u8; 6]>,
    /// Connected networks (network, mask) and the default gateway of this interface.
    on_link: Vec<(u32, u32)>,
    gateway: Option<Ipv4Addr>,
    asked: HashMap<Ipv4Addr, Instant>,
    resolver: Option<UdpSocket>,
    refreshed: Instant,
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    (parts.next().is_none() && out != [0; 6]).then_some(out)
}

/// Parses `/proc/net/arp` text: complete entries (flags 0x2) of `ifname`.
pub fn parse_arp(text: &str, ifname: &str) -> HashMap<Ipv4Addr, [u8; 6]> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(2)?.trim_start_matches("0x"), 16).ok()?;
            if f.get(5)? != &ifname || flags & 0x2 == 0 {
                return None;
            }
            Some((f.first()?.parse().ok()?, parse_mac(f.get(3)?)?))
        })
        .collect()
}

/// Parses `/proc/net/route` text for `ifname`: connected networks and the default gateway.
pub fn parse_routes(text: &str, ifname: &str) -> (Vec<(u32, u32)>, Option<Ipv4Addr>) {
    let mut on_link = vec![];
    let mut gateway = None;
    for l in text.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 8 || f[0] != ifname {
            continue;
        }
        // Addresses are little-endian hex of the network-order bytes.
        let hex = |s: &str| {
            u32::from_str_radix(s, 16)
                .ok()
                .map(|v| u32::from_be_bytes(v.to_le_bytes()))
        };
        let (Some(dest), Some(gw), Some(mask)) = (hex(f[1]), hex(f[2]), hex(f[7])) else {
            continue;
        };
        if gw == 0 {
            on_link.push((dest, mask));
        } else if dest == 0 && mask == 0 {
            gateway = Some(Ipv4Addr::from(gw));
        }
    }
    (on_link, gateway)
}

impl Neighbours {
    /// The neighbours of `ifname`, read now.
    pub fn new(ifname: &str) -> Self {
        let mut n = Neighbours {
            ifname: ifname.to_string(),
            macs: HashMap::new(),
            on_link: vec![],
            gateway: None,
            asked: HashMap::new(),
            resolver: UdpSocket::bind(("0.0.0.0", 0)).ok(),
            refreshed: Instant::now(),
        };
        n.refresh();
        n
    }

    /// Re-reads the kernel's tables (once per tick, never per packet).
    pub fn refresh(&mut self) {
        self.refreshed = Instant::now();
        if let Ok(text) = std::fs::read_to_string("/proc/net/arp") {
            self.macs = parse_arp(&text, &self.ifname);
        }
        if let Ok(text) = std::fs::read_to_string("/proc/net/route") {
            (self.on_link, self.gateway) = parse_routes(&text, &self.ifname);
        }
    }

    /// The IPv4 next hop for `dst`: itself when on-link, else the default gateway.
    pub fn next_hop(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        let d = u32::from(dst);
        if self.on_link.iter().any(|(net, mask)| d & mask == *net) {
            Some(dst)
        } else {
            self.gateway
        }
    }

    /// The MAC to send to `dst` through, or `None` (and a resolution request).
    pub fn mac_for(&mut self, dst: IpAddr, now: Instant) -> Option<[u8; 6]> {
        let IpAddr::V4(v4) = dst.to_canonical() else {
            return None;
        };
        let hop = self.next_hop(v4)?;
        if let Some(mac) = self.macs.get(&hop) {
            return Some(*mac);
        }
        // A new neighbour (the kernel may have learnt it since the last tick): re-read the
        // table, at most once per millisecond, so only the very first packets can miss.
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
            if let Some(s) = &self.resolver {
                let _ = s.send_to(&[], SocketAddr::from((hop, 9)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arp_entries_of_the_interface_that_are_complete() {
        let text = "IP address       HW type     Flags       HW address            Mask     Device\n\
                    10.77.0.1        0x1         0x2         02:aa:bb:cc:dd:01     *        veth0\n\
                    10.77.0.3        0x1         0x0         00:00:00:00:00:00     *        veth0\n\
                    10.9.0.1         0x1         0x2         02:aa:bb:cc:dd:09     *        eth1\n";
        let m = parse_arp(text, "veth0");
        assert_eq!(m.len(), 1);
        assert_eq!(
            m[&"10.77.0.1".parse().unwrap()],
            [2, 0xaa, 0xbb, 0xcc, 0xdd, 1]
        );
    }

    #[test]
    fn routes_give_connected_networks_and_the_gateway() {
        let text = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n\
                    veth0\t00004D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                    veth0\t00000000\t01004D0A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
        let (on_link, gw) = parse_routes(text, "veth0");
        assert_eq!(
            on_link,
            vec![(u32::from(Ipv4Addr::new(10, 77, 0, 0)), 0xffff_ff00)]
        );
        assert_eq!(gw, Some(Ipv4Addr::new(10, 77, 0, 1)));
    }
}
