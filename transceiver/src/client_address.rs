//! Which address a signaling request comes from: the TCP peer, unless the peer is a
//! trusted proxy (`--trusted-proxy`, e.g. the Ingress), in which case the right-most
//! `X-Forwarded-For` entry that is not itself a trusted proxy. Every per-address limit
//! ([`crate::per_address`]) keys on this address, so behind an Ingress one client spends
//! its own share rather than everyone's.
//!
//! Only the entries a trusted hop appended are believed: walking the list from the right,
//! each trusted entry vouches for the one before it, and the first untrusted entry is the
//! client. What a client writes into the header itself lies to the left of that and is
//! never read, provided every trusted address is a proxy that appends its peer: trust a
//! node address that clients' traffic also arrives from (a proxy behind SNAT) and the
//! walk goes on into what the client wrote. So list the proxies, not their network. A
//! malformed entry (or a field that is not text) ends the walk at the last trusted hop,
//! so garbage can only put the request in a proxy's share, never in another client's.

use std::net::{IpAddr, SocketAddr};

use hyper::HeaderMap;
use ipnet::IpNet;

/// The most `X-Forwarded-For` entries read per request: a chain of proxies longer than
/// this ends the walk at the last trusted hop read.
const MAX_FORWARDED_HOPS: usize = 16;

/// The networks whose connections may say, in `X-Forwarded-For`, whom they forward.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// Networks (`10.0.0.0/8`) or single addresses (`10.1.2.3`); a clear error naming
    /// the entry that is neither.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        let nets = entries
            .iter()
            .map(|entry| {
                let entry = entry.as_ref().trim();
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| format!("{entry:?} is neither a network (CIDR) nor an address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TrustedProxies { nets })
    }

    /// The entries that are networks rather than single addresses (wider than /32 or
    /// /128): each trusts whoever is in it.
    pub fn networks_wider_than_a_host(&self) -> impl Iterator<Item = &IpNet> {
        self.nets
            .iter()
            .filter(|net| net.prefix_len() < net.max_prefix_len())
    }

    /// Whether any proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// The client a request from `peer` with these headers comes from (see the module
    /// documentation).
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.trusts(client) {
            return client;
        }
        // Several header fields are one list, in order (RFC 9110 §5.3). A field that is
        // not text is an entry that names no address: the walk ends there.
        let entries: Vec<Option<&str>> = headers
            .get_all("x-forwarded-for")
            .iter()
            .flat_map(|value| match value.to_str() {
                Ok(text) => text.split(',').map(Some).collect::<Vec<_>>(),
                Err(_) => vec![None],
            })
            .collect();
        for entry in entries.iter().rev().take(MAX_FORWARDED_HOPS) {
            let Some(hop) = entry.and_then(forwarded_address) else {
                return client;
            };
            client = hop;
            if !self.trusts(hop) {
                return hop;
            }
        }
        client
    }
}

/// The address in one `X-Forwarded-For` entry: `192.0.2.1`, `2001:db8::1`, or either
/// with a port (`192.0.2.1:5000`, `[2001:db8::1]:5000`), as some proxies write them.
fn forwarded_address(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    let ip = entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|a| a.ip()))
        .ok()?;
    Some(ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append("x-forwarded-for", v.parse().unwrap());
        }
        map
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_writes() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8"]).unwrap();
        let forged = headers(&["203.0.113.9"]);
        assert_eq!(
            trusted.client(ip("198.51.100.7"), &forged),
            ip("198.51.100.7")
        );
        let none = TrustedProxies::default();
        assert_eq!(none.client(ip("10.1.1.1"), &forged), ip("10.1.1.1"));
    }

    #[test]
    fn behind_a_trusted_proxy_the_right_most_untrusted_entry_is_the_client() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8", "192.0.2.10"]).unwrap();
        // The client wrote 203.0.113.9 itself; the Ingress appended its real address.
        let h = headers(&["203.0.113.9, 198.51.100.7"]);
        assert_eq!(trusted.client(ip("10.2.3.4"), &h), ip("198.51.100.7"));
        // Two trusted hops (a cloud balancer, then the Ingress), over two header fields.
        let h = headers(&["203.0.113.9, 198.51.100.7", "192.0.2.10"]);
        assert_eq!(trusted.client(ip("10.2.3.4"), &h), ip("198.51.100.7"));
        // Ports and brackets as some proxies write them; IPv4-mapped peers.
        let h = headers(&["[2001:db8::7]:5000"]);
        assert_eq!(trusted.client(ip("::ffff:10.2.3.4"), &h), ip("2001:db8::7"));
        let h = headers(&["198.51.100.7:443"]);
        assert_eq!(trusted.client(ip("10.2.3.4"), &h), ip("198.51.100.7"));
    }

    #[test]
    fn garbage_or_no_header_leaves_the_request_in_the_last_trusted_hops_share() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8"]).unwrap();
        assert_eq!(
            trusted.client(ip("10.2.3.4"), &HeaderMap::new()),
            ip("10.2.3.4")
        );
        let h = headers(&["198.51.100.7, not-an-address"]);
        assert_eq!(trusted.client(ip("10.2.3.4"), &h), ip("10.2.3.4"));
        let h = headers(&["198.51.100.7, unknown, 10.9.9.9"]);
        assert_eq!(trusted.client(ip("10.2.3.4"), &h), ip("10.9.9.9"));
        // A field that is not text ends the walk too, wherever it lies.
        let mut h = headers(&["198.51.100.7"]);
        h.append(
            "x-forwarded-for",
            hyper::header::HeaderValue::from_bytes(b"\xff10.9.9.9").unwrap(),
        );
        assert_eq!(trusted.client(ip("10.2.3.4"), &h), ip("10.2.3.4"));
        // Every entry trusted: the left-most one read.
        let h = headers(&["10.7.7.7, 10.8.8.8"]);
        assert_eq!(trusted.client(ip("10.2.3.4"), &h), ip("10.7.7.7"));
    }

    #[test]
    fn a_long_chain_is_read_only_so_far() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8"]).unwrap();
        let mut chain = vec!["198.51.100.7".to_string()];
        chain.extend((0..40).map(|i| format!("10.0.0.{i}")));
        let h = headers(&[chain.join(",").as_str()]);
        // The walk stops after MAX_FORWARDED_HOPS entries, at a trusted hop: the request
        // counts in that proxy's share, not in the far client's.
        let client = trusted.client(ip("10.2.3.4"), &h);
        assert!(trusted.trusts(client), "{client}");
    }

    #[test]
    fn networks_are_told_apart_from_proxies() {
        let trusted =
            TrustedProxies::parse(&["10.0.0.7", "10.1.0.0/16", "2001:db8::1/128"]).unwrap();
        let wide: Vec<String> = trusted
            .networks_wider_than_a_host()
            .map(ToString::to_string)
            .collect();
        assert_eq!(wide, ["10.1.0.0/16"]);
    }

    #[test]
    fn a_bad_trusted_proxy_entry_is_named() {
        let err = TrustedProxies::parse(&["10.0.0.0/8", "ingress"]).unwrap_err();
        assert!(err.contains("\"ingress\""), "{err}");
        let t = TrustedProxies::parse(&["10.0.0.5/8"]).unwrap();
        assert!(t.trusts(ip("10.200.0.1")), "host bits are dropped");
    }
}
