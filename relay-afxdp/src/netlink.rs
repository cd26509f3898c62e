//! The kernel's neighbour and routing tables over rtnetlink, IPv4 and IPv6 alike: one
//! dump request each (`RTM_GETNEIGH`, `RTM_GETROUTE`), answered by the kernel in
//! multipart messages that are parsed here without trusting any length, and a socket
//! subscribed to the kernel's notifications of changes to them ([`ChangeSocket`]).
//! Socket I/O goes through `socket2` and `rustix`, so this module needs no unsafe code;
//! parsing is pure and tested on hand-built messages.

use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

/// A netlink message header's length.
pub(crate) const NLMSG_HDR_LEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// A request's flag.
pub(crate) const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
/// `struct ndmsg` and `struct rtmsg` are both 12 bytes.
const BODY_LEN: usize = 12;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_TABLE: u16 = 15;
const RT_TABLE_MAIN: u32 = 254;
const RT_TABLE_LOCAL: u32 = 255;
const RTN_UNICAST: u8 = 1;
const RTN_LOCAL: u8 = 2;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// Neighbour states whose link-layer address is usable: REACHABLE, STALE, DELAY, PROBE,
/// NOARP, PERMANENT (not INCOMPLETE or FAILED). A STALE entry is still right to send to;
/// the kernel re-confirms it when its own traffic uses it.
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;

/// A neighbour: an address on a link and its MAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// The interface it is on.
    pub ifindex: u32,
    /// Its IP address.
    pub ip: IpAddr,
    /// Its Ethernet address.
    pub mac: [u8; 6],
}

/// A unicast route of the main table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The destination network.
    pub dst: IpAddr,
    /// Its prefix length.
    pub prefix_len: u8,
    /// The gateway, or `None` for a network on the link.
    pub gateway: Option<IpAddr>,
    /// The outgoing interface.
    pub ifindex: u32,
}

/// An address of this host and the interface that holds it: the local table's route to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalAddress {
    /// The address.
    pub ip: IpAddr,
    /// The interface it is on.
    pub ifindex: u32,
}

/// An rtnetlink socket for dump requests.
#[derive(Debug)]
pub struct RouteSocket {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl RouteSocket {
    /// Opens the socket (no privilege needed to read the tables).
    pub fn open() -> io::Result<Self> {
        let socket = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::RAW,
            Some(Protocol::from(libc::NETLINK_ROUTE)),
        )?;
        // A dump of a small table takes microseconds; never stall a worker on it.
        socket.set_read_timeout(Some(Duration::from_millis(100)))?;
        Ok(RouteSocket {
            socket,
            seq: 0,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Every usable neighbour entry, of every interface and family.
    pub fn neighbours(&mut self) -> io::Result<Vec<Neighbour>> {
        let mut out = vec![];
        self.dump(RTM_GETNEIGH, RTM_NEWNEIGH, |body| {
            out.extend(parse_neighbour(body));
        })?;
        Ok(out)
    }

    /// Every unicast route of the main table, of every family.
    pub fn routes(&mut self) -> io::Result<Vec<Route>> {
        let mut out = vec![];
        self.dump(RTM_GETROUTE, RTM_NEWROUTE, |body| {
            out.extend(parse_route(body))
        })?;
        Ok(out)
    }

    /// Every address of this host with the interface that holds it (the local table's
    /// `RTN_LOCAL` routes), of every family.
    pub fn local_addresses(&mut self) -> io::Result<Vec<LocalAddress>> {
        let mut out = vec![];
        self.dump(RTM_GETROUTE, RTM_NEWROUTE, |body| {
            out.extend(parse_local_address(body))
        })?;
        Ok(out)
    }

    fn dump(&mut self, request: u16, reply: u16, mut each: impl FnMut(&[u8])) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        self.socket.send(&dump_request(request, seq))?;
        loop {
            let n = (&self.socket).read(&mut self.buf)?;
            match walk(&self.buf[..n], seq, reply, &mut each)? {
                Walk::Done => return Ok(()),
                Walk::More => {}
            }
        }
    }
}

/// The rtnetlink multicast groups of neighbour and route changes (`RTMGRP_NEIGH`,
/// `RTMGRP_IPV4_ROUTE`, `RTMGRP_IPV6_ROUTE`), as the bind address's group mask.
const CHANGE_GROUPS: u32 = 0x4 | 0x40 | 0x400;

/// A netlink socket subscribed to the kernel's notifications of neighbour and route
/// changes, of every interface and family. What changed is not parsed: the tables are
/// small, and the listener re-reads them whole ([`RouteSocket`]).
#[derive(Debug)]
pub struct ChangeSocket {
    socket: Socket,
    buf: Vec<u8>,
}

impl ChangeSocket {
    /// Opens the socket and joins the groups (no privilege needed). Bound with `rustix`,
    /// whose netlink address type makes the bind safe.
    pub fn open() -> io::Result<Self> {
        use rustix::net::{AddressFamily, SocketType, netlink};
        // No protocol is NETLINK_ROUTE (0), which rustix's non-zero `Protocol` cannot name.
        let fd = rustix::net::socket(AddressFamily::NETLINK, SocketType::RAW, None)?;
        rustix::net::bind(&fd, &netlink::SocketAddrNetlink::new(0, CHANGE_GROUPS))?;
        Ok(ChangeSocket {
            socket: Socket::from(fd),
            buf: vec![0; 64 * 1024],
        })
    }

    /// Waits up to `timeout` for notifications and reads every one pending. True if the
    /// tables may have changed: a notification came, or the kernel says some were lost
    /// (`ENOBUFS`: its queue to this socket overflowed).
    pub fn wait(&mut self, timeout: Duration) -> bool {
        if self
            .socket
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .is_err()
        {
            return false;
        }
        if !self.read_one() {
            return false;
        }
        // What else is queued is read at once: one re-read covers a burst.
        if self.socket.set_nonblocking(true).is_ok() {
            while self.read_one() {}
            let _ = self.socket.set_nonblocking(false);
        }
        true
    }

    /// Reads one notification: true if one came or some were lost (`ENOBUFS`), false on
    /// a timeout, an empty queue or an error.
    fn read_one(&mut self) -> bool {
        match (&self.socket).read(&mut self.buf) {
            Ok(n) => n > 0,
            Err(e) => e.raw_os_error() == Some(libc::ENOBUFS),
        }
    }
}

/// A dump request: header and a zeroed body (family `AF_UNSPEC`: every family).
fn dump_request(kind: u16, seq: u32) -> [u8; NLMSG_HDR_LEN + BODY_LEN] {
    let mut m = [0u8; NLMSG_HDR_LEN + BODY_LEN];
    m[0..4].copy_from_slice(&((NLMSG_HDR_LEN + BODY_LEN) as u32).to_ne_bytes());
    m[4..6].copy_from_slice(&kind.to_ne_bytes());
    m[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    m
}

/// Whether a dump continues in the next read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    More,
    Done,
}

/// Walks the messages in one read: calls `each` with the body of every `reply` message of
/// sequence `seq`; stops at `NLMSG_DONE`; turns `NLMSG_ERROR` into an error. Messages of
/// other sequences (a late answer to an earlier request) are skipped.
pub(crate) fn walk(
    mut data: &[u8],
    seq: u32,
    reply: u16,
    each: &mut impl FnMut(&[u8]),
) -> io::Result<Walk> {
    while data.len() >= NLMSG_HDR_LEN {
        let len = u32_at(data, 0) as usize;
        if len < NLMSG_HDR_LEN || len > data.len() {
            return Err(io::Error::other("truncated netlink message"));
        }
        let kind = u16::from_ne_bytes([data[4], data[5]]);
        let body = &data[NLMSG_HDR_LEN..len];
        if u32_at(data, 8) == seq {
            match kind {
                NLMSG_DONE => return Ok(Walk::Done),
                NLMSG_ERROR => {
                    let errno = body
                        .get(..4)
                        .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                    if errno != 0 {
                        return Err(io::Error::from_raw_os_error(-errno));
                    }
                    return Ok(Walk::Done);
                }
                k if k == reply => each(body),
                _ => {}
            }
        }
        data = data.get(align(len)..).unwrap_or(&[]);
    }
    Ok(Walk::More)
}

/// A netlink length rounded up to the 4-byte alignment of messages and attributes.
pub(crate) fn align(len: usize) -> usize {
    (len + 3) & !3
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The attributes in `data`: (type, payload) pairs; a malformed one ends them.
pub(crate) fn attributes(data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff; // without NLA_F_* bits
        if len < 4 || len > rest.len() {
            return None;
        }
        let payload = &rest[4..len];
        rest = rest.get(align(len)..).unwrap_or(&[]);
        Some((kind, payload))
    })
}

fn ip_from(family: u8, bytes: &[u8]) -> Option<IpAddr> {
    match family {
        AF_INET => Some(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?).into()),
        AF_INET6 => Some(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?).into()),
        _ => None,
    }
}

/// A `RTM_NEWNEIGH` body: the entry if it is IPv4/IPv6, usable, and has an Ethernet MAC.
fn parse_neighbour(body: &[u8]) -> Option<Neighbour> {
    let head = body.get(..BODY_LEN)?;
    let family = head[0];
    let ifindex = u32::try_from(i32::from_ne_bytes([head[4], head[5], head[6], head[7]])).ok()?;
    let state = u16::from_ne_bytes([head[8], head[9]]);
    if state & NUD_USABLE == 0 {
        return None;
    }
    let (mut ip, mut mac) = (None, None);
    for (kind, payload) in attributes(body.get(BODY_LEN..).unwrap_or(&[])) {
        match kind {
            NDA_DST => ip = ip_from(family, payload),
            NDA_LLADDR => mac = <[u8; 6]>::try_from(payload).ok(),
            _ => {}
        }
    }
    let mac = mac.filter(|m| *m != [0; 6])?;
    Some(Neighbour {
        ifindex,
        ip: ip?,
        mac,
    })
}

/// What a `RTM_NEWROUTE` body says, for IPv4 and IPv6 routes.
struct RouteFields {
    family: u8,
    prefix_len: u8,
    kind: u8,
    table: u32,
    dst: Option<IpAddr>,
    gateway: Option<IpAddr>,
    ifindex: Option<u32>,
}

/// The fields of a `RTM_NEWROUTE` body; `None` for another family or a short body.
fn route_fields(body: &[u8]) -> Option<RouteFields> {
    let head = body.get(..BODY_LEN)?;
    let family = head[0];
    if !matches!(family, AF_INET | AF_INET6) {
        return None;
    }
    let mut fields = RouteFields {
        family,
        prefix_len: head[1],
        kind: head[7],
        table: u32::from(head[4]),
        dst: None,
        gateway: None,
        ifindex: None,
    };
    for (kind, payload) in attributes(body.get(BODY_LEN..).unwrap_or(&[])) {
        match kind {
            RTA_DST => fields.dst = ip_from(family, payload),
            RTA_GATEWAY => fields.gateway = ip_from(family, payload),
            RTA_OIF => fields.ifindex = payload.try_into().ok().map(u32::from_ne_bytes),
            RTA_TABLE => {
                if let Ok(t) = payload.try_into() {
                    fields.table = u32::from_ne_bytes(t);
                }
            }
            _ => {}
        }
    }
    Some(fields)
}

/// A `RTM_NEWROUTE` body: the route if it is a unicast IPv4/IPv6 route of the main table
/// with one outgoing interface (multipath routes are not followed).
fn parse_route(body: &[u8]) -> Option<Route> {
    let f = route_fields(body)?;
    if f.kind != RTN_UNICAST || f.table != RT_TABLE_MAIN {
        return None;
    }
    let unspecified = if f.family == AF_INET {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    Some(Route {
        dst: f.dst.unwrap_or(unspecified),
        prefix_len: f.prefix_len,
        gateway: f.gateway,
        ifindex: f.ifindex?,
    })
}

/// A `RTM_NEWROUTE` body: the host address it names if it is a local-table `RTN_LOCAL`
/// route to one address (what the kernel adds for each address an interface holds).
fn parse_local_address(body: &[u8]) -> Option<LocalAddress> {
    let f = route_fields(body)?;
    let host_bits = if f.family == AF_INET { 32 } else { 128 };
    if f.kind != RTN_LOCAL || f.table != RT_TABLE_LOCAL || f.prefix_len != host_bits {
        return None;
    }
    Some(LocalAddress {
        ip: f.dst?,
        ifindex: f.ifindex?,
    })
}

/// True when `ip` is inside `net/prefix_len` (same family).
pub fn contains(net: IpAddr, prefix_len: u8, ip: IpAddr) -> bool {
    let (net, ip, bits) = match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => (
            u128::from(u32::from(n)) << 96,
            u128::from(u32::from(i)) << 96,
            32,
        ),
        (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
        _ => return false,
    };
    let len = u32::from(prefix_len).min(bits);
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    net & mask == ip & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut a = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(payload);
        a.resize(align(a.len()), 0);
        a
    }

    fn message(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut m = ((NLMSG_HDR_LEN + body.len()) as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        m.resize(align(m.len()), 0);
        m
    }

    fn ndmsg(family: u8, ifindex: i32, state: u16) -> Vec<u8> {
        let mut b = vec![family, 0, 0, 0];
        b.extend_from_slice(&ifindex.to_ne_bytes());
        b.extend_from_slice(&state.to_ne_bytes());
        b.extend_from_slice(&[0, 1]);
        b
    }

    fn rtmsg(family: u8, prefix_len: u8, table: u8, kind: u8) -> Vec<u8> {
        let mut b = vec![family, prefix_len, 0, 0, table, 3, 0, kind];
        b.extend_from_slice(&0u32.to_ne_bytes());
        b
    }

    const MAC: [u8; 6] = [2, 0xaa, 0xbb, 0xcc, 0xdd, 1];

    #[test]
    fn neighbours_of_both_families_and_only_usable_ones() {
        let v6: Ipv6Addr = "fd77::1".parse().unwrap();
        let mut v4 = ndmsg(AF_INET, 7, 0x02);
        v4.extend(attr(NDA_DST, &[10, 77, 0, 1]));
        v4.extend(attr(NDA_LLADDR, &MAC));
        let mut six = ndmsg(AF_INET6, 7, 0x04);
        six.extend(attr(NDA_DST, &v6.octets()));
        six.extend(attr(NDA_LLADDR, &MAC));
        let mut incomplete = ndmsg(AF_INET, 7, 0x01);
        incomplete.extend(attr(NDA_DST, &[10, 77, 0, 3]));
        let mut stream = message(RTM_NEWNEIGH, 5, &v4);
        stream.extend(message(RTM_NEWNEIGH, 5, &six));
        stream.extend(message(RTM_NEWNEIGH, 5, &incomplete));
        stream.extend(message(RTM_NEWNEIGH, 4, &v4)); // another request's answer
        let mut got = vec![];
        let w = walk(&stream, 5, RTM_NEWNEIGH, &mut |b: &[u8]| {
            got.extend(parse_neighbour(b))
        })
        .unwrap();
        assert_eq!(w, Walk::More);
        assert_eq!(
            got,
            vec![
                Neighbour {
                    ifindex: 7,
                    ip: Ipv4Addr::new(10, 77, 0, 1).into(),
                    mac: MAC
                },
                Neighbour {
                    ifindex: 7,
                    ip: v6.into(),
                    mac: MAC
                },
            ]
        );
        let done = message(NLMSG_DONE, 5, &0i32.to_ne_bytes());
        assert_eq!(
            walk(&done, 5, RTM_NEWNEIGH, &mut |_: &[u8]| {}).unwrap(),
            Walk::Done
        );
    }

    #[test]
    fn routes_of_the_main_table_with_gateway_and_interface() {
        let mut on_link = rtmsg(AF_INET, 24, 254, RTN_UNICAST);
        on_link.extend(attr(RTA_DST, &[10, 77, 0, 0]));
        on_link.extend(attr(RTA_OIF, &7u32.to_ne_bytes()));
        let mut default6 = rtmsg(AF_INET6, 0, 254, RTN_UNICAST);
        default6.extend(attr(
            RTA_GATEWAY,
            &"fe80::1".parse::<Ipv6Addr>().unwrap().octets(),
        ));
        default6.extend(attr(RTA_OIF, &7u32.to_ne_bytes()));
        let mut local = rtmsg(AF_INET, 32, 255, 2); // local table, RTN_LOCAL
        local.extend(attr(RTA_DST, &[10, 77, 0, 2]));
        local.extend(attr(RTA_OIF, &7u32.to_ne_bytes()));
        let routes: Vec<Route> = [on_link, default6, local]
            .iter()
            .filter_map(|b| parse_route(b))
            .collect();
        assert_eq!(
            routes,
            vec![
                Route {
                    dst: Ipv4Addr::new(10, 77, 0, 0).into(),
                    prefix_len: 24,
                    gateway: None,
                    ifindex: 7
                },
                Route {
                    dst: Ipv6Addr::UNSPECIFIED.into(),
                    prefix_len: 0,
                    gateway: Some("fe80::1".parse().unwrap()),
                    ifindex: 7
                },
            ]
        );
    }

    #[test]
    fn errors_and_malformed_input_never_panic() {
        let err = message(NLMSG_ERROR, 9, &(-libc::EPERM).to_ne_bytes());
        let e = walk(&err, 9, RTM_NEWNEIGH, &mut |_: &[u8]| {}).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        let mut lying = message(RTM_NEWNEIGH, 9, &ndmsg(AF_INET, 1, 2));
        lying[0] = 200; // claims more than there is
        assert!(walk(&lying, 9, RTM_NEWNEIGH, &mut |_: &[u8]| {}).is_err());
        // Attributes that overrun, or a body too short, yield nothing.
        let mut body = ndmsg(AF_INET, 1, 2);
        body.extend_from_slice(&[60, 0, 1, 0, 10, 77]);
        assert_eq!(parse_neighbour(&body), None);
        assert_eq!(parse_neighbour(&[0; 5]), None);
        assert_eq!(parse_route(&[0; 3]), None);
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            let _ = walk(&junk, 0, RTM_NEWNEIGH, &mut |b: &[u8]| {
                let _ = parse_neighbour(b);
            });
            let _ = parse_route(&junk);
        }
    }

    #[test]
    fn prefixes_match_by_family() {
        let net: IpAddr = "fd77::".parse().unwrap();
        assert!(contains(net, 64, "fd77::3".parse().unwrap()));
        assert!(!contains(net, 64, "fd78::3".parse().unwrap()));
        assert!(contains(
            Ipv4Addr::UNSPECIFIED.into(),
            0,
            "8.8.8.8".parse().unwrap()
        ));
        assert!(!contains(
            Ipv4Addr::UNSPECIFIED.into(),
            0,
            "::1".parse().unwrap()
        ));
        assert!(contains(
            "10.77.0.0".parse().unwrap(),
            24,
            "10.77.0.9".parse().unwrap()
        ));
        assert!(!contains(
            "10.77.0.0".parse().unwrap(),
            24,
            "10.78.0.9".parse().unwrap()
        ));
    }

    #[test]
    fn local_addresses_come_from_the_local_table_only() {
        let mut local = rtmsg(AF_INET, 32, 255, RTN_LOCAL);
        local.extend(attr(RTA_DST, &[10, 77, 0, 2]));
        local.extend(attr(RTA_OIF, &7u32.to_ne_bytes()));
        let mut local6 = rtmsg(AF_INET6, 128, 255, RTN_LOCAL);
        local6.extend(attr(
            RTA_DST,
            &"fd77::2".parse::<Ipv6Addr>().unwrap().octets(),
        ));
        local6.extend(attr(RTA_OIF, &7u32.to_ne_bytes()));
        // The main table's route to the network, and a local route without an interface.
        let mut on_link = rtmsg(AF_INET, 24, 254, RTN_UNICAST);
        on_link.extend(attr(RTA_DST, &[10, 77, 0, 0]));
        on_link.extend(attr(RTA_OIF, &7u32.to_ne_bytes()));
        let mut no_oif = rtmsg(AF_INET, 32, 255, RTN_LOCAL);
        no_oif.extend(attr(RTA_DST, &[10, 77, 0, 9]));
        let found: Vec<LocalAddress> = [local, local6, on_link, no_oif]
            .iter()
            .filter_map(|b| parse_local_address(b))
            .collect();
        assert_eq!(
            found,
            vec![
                LocalAddress {
                    ip: Ipv4Addr::new(10, 77, 0, 2).into(),
                    ifindex: 7
                },
                LocalAddress {
                    ip: "fd77::2".parse().unwrap(),
                    ifindex: 7
                },
            ]
        );
    }

    #[test]
    fn the_kernel_answers_both_dumps() {
        // Readable without privilege; loopback always has a route in the local table and
        // the call must simply succeed and parse.
        let mut s = RouteSocket::open().unwrap();
        s.neighbours().unwrap();
        s.routes().unwrap();
        let local = s.local_addresses().unwrap();
        assert!(
            local
                .iter()
                .any(|a| a.ip == IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "127.0.0.1 is on loopback: {local:?}"
        );
    }
}
