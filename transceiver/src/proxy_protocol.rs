//! The PROXY protocol, version 2: how a TCP load balancer that does not speak HTTP (a
//! cloud network load balancer, an Ingress controller with the PROXY protocol on) says
//! whom a connection comes from, in a binary header before the connection's own first
//! byte. Signaling reads it only with `--proxy-protocol`, and only on connections from a
//! trusted proxy (`--trusted-proxy`), which must then send it: the address it names is
//! the client for every per-address limit of that connection, and `X-Forwarded-For` is not
//! read. A connection from a trusted proxy without a valid header is closed and counted
//! (`bad_proxy_header`); a stranger cannot send one that is believed.
//!
//! Read here: the 12-byte signature, version 2, the PROXY command (a client's connection)
//! or LOCAL (the proxy's own, e.g. a health check: the proxy is the client), TCP over
//! IPv4 or IPv6, and the source address. UNSPEC, UDP and UNIX sockets mean the
//! connection's own addresses, as the spec asks. TLVs after the addresses are skipped; a header longer than [`MAX_HEADER`] is
//! refused. Version 1 (text) is not accepted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::AsyncReadExt;

/// What every version 2 header starts with.
pub const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The fixed part: signature, version and command, family, length.
pub const FIXED_LEN: usize = 16;
/// The longest header read (addresses and TLVs included); a longer one is refused.
pub const MAX_HEADER: usize = 1024;

/// Whom a connection comes from, as its proxy said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxiedFrom {
    /// A client's connection, from this address.
    Client(SocketAddr),
    /// The proxy's own connection (LOCAL, UNSPEC, or a family that is not TCP).
    Proxy,
}

/// Why a header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Not the version 2 signature (no header, or version 1).
    Signature,
    /// A version other than 2.
    Version,
    /// A command other than LOCAL or PROXY.
    Command,
    /// An address family or transport the protocol does not define.
    Family,
    /// Longer than [`MAX_HEADER`], or too short for its addresses.
    Length,
    /// The connection ended or stalled before the whole header came.
    Incomplete,
}

/// The length of the whole header, from its [`FIXED_LEN`] first bytes.
pub fn header_len(fixed: &[u8; FIXED_LEN]) -> Result<usize, HeaderError> {
    if fixed[..12] != SIGNATURE {
        return Err(HeaderError::Signature);
    }
    if fixed[12] >> 4 != 2 {
        return Err(HeaderError::Version);
    }
    let len = FIXED_LEN + usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    if len > MAX_HEADER {
        return Err(HeaderError::Length);
    }
    Ok(len)
}

/// Whom the whole `header` (of [`header_len`] bytes) says the connection comes from.
pub fn parse(header: &[u8]) -> Result<ProxiedFrom, HeaderError> {
    let fixed: &[u8; FIXED_LEN] = header
        .get(..FIXED_LEN)
        .and_then(|fixed| fixed.try_into().ok())
        .ok_or(HeaderError::Length)?;
    if header_len(fixed)? != header.len() {
        return Err(HeaderError::Length);
    }
    let addresses = &header[FIXED_LEN..];
    match fixed[12] & 0x0f {
        0x0 => return Ok(ProxiedFrom::Proxy), // LOCAL: the addresses are not read
        0x1 => {}                             // PROXY
        _ => return Err(HeaderError::Command),
    }
    let source = match fixed[13] {
        0x00 => return Ok(ProxiedFrom::Proxy), // UNSPEC: the connection's own
        0x11 => {
            let a = addresses.get(..12).ok_or(HeaderError::Length)?;
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            SocketAddr::new(IpAddr::V4(ip), u16::from_be_bytes([a[8], a[9]]))
        }
        0x21 => {
            let a = addresses.get(..36).ok_or(HeaderError::Length)?;
            let octets: [u8; 16] = a[..16].try_into().map_err(|_| HeaderError::Length)?;
            let ip = Ipv6Addr::from(octets);
            SocketAddr::new(IpAddr::V6(ip), u16::from_be_bytes([a[32], a[33]]))
        }
        // UDP or a UNIX socket: valid, but nothing this server takes as a client's
        // address; the spec says to use the connection's own, as for UNSPEC.
        0x12 | 0x22 | 0x31 | 0x32 => return Ok(ProxiedFrom::Proxy),
        _ => return Err(HeaderError::Family),
    };
    Ok(ProxiedFrom::Client(source))
}

/// Reads the header from the start of `stream` within `deadline`, taking no byte of
/// what follows it.
pub async fn read(
    stream: &mut tokio::net::TcpStream,
    deadline: Duration,
) -> Result<ProxiedFrom, HeaderError> {
    let reading = async {
        let mut header = [0u8; MAX_HEADER];
        let fixed = &mut header[..FIXED_LEN];
        stream
            .read_exact(fixed)
            .await
            .map_err(|_| HeaderError::Incomplete)?;
        let fixed: &[u8; FIXED_LEN] = (&*fixed).try_into().map_err(|_| HeaderError::Length)?;
        let len = header_len(fixed)?;
        stream
            .read_exact(&mut header[FIXED_LEN..len])
            .await
            .map_err(|_| HeaderError::Incomplete)?;
        parse(&header[..len])
    };
    tokio::time::timeout(deadline, reading)
        .await
        .unwrap_or(Err(HeaderError::Incomplete))
}

/// A version 2 header saying a connection comes from `source` (to `destination`), with
/// `tlv` after the addresses: what a load balancer sends (for tests and tools).
pub fn encode(source: SocketAddr, destination: SocketAddr, tlv: &[u8]) -> Vec<u8> {
    let mut header = SIGNATURE.to_vec();
    header.push(0x21); // version 2, PROXY
    let mut addresses = Vec::new();
    match (source, destination) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            header.push(0x11);
            addresses.extend_from_slice(&s.ip().octets());
            addresses.extend_from_slice(&d.ip().octets());
        }
        (s, d) => {
            header.push(0x21);
            let v6 = |a: SocketAddr| match a.ip() {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            addresses.extend_from_slice(&v6(s).octets());
            addresses.extend_from_slice(&v6(d).octets());
        }
    }
    addresses.extend_from_slice(&source.port().to_be_bytes());
    addresses.extend_from_slice(&destination.port().to_be_bytes());
    addresses.extend_from_slice(tlv);
    let len = u16::try_from(addresses.len()).unwrap_or(u16::MAX);
    header.extend_from_slice(&len.to_be_bytes());
    header.extend_from_slice(&addresses);
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_client_over_ipv4_or_ipv6_is_named_and_tlvs_are_skipped() {
        for (source, destination) in [
            (a("198.51.100.7:50000"), a("10.0.0.5:8443")),
            (a("[2001:db8::7]:50001"), a("[fd00::5]:8443")),
        ] {
            let header = encode(source, destination, &[0x04, 0, 2, 9, 9]);
            assert_eq!(
                header_len(header[..16].try_into().unwrap()),
                Ok(header.len())
            );
            assert_eq!(parse(&header), Ok(ProxiedFrom::Client(source)));
        }
    }

    #[test]
    fn local_and_unspec_mean_the_proxy_itself() {
        let mut local = encode(a("198.51.100.7:1"), a("10.0.0.5:2"), &[]);
        local[12] = 0x20;
        assert_eq!(parse(&local), Ok(ProxiedFrom::Proxy));
        let mut unspec = SIGNATURE.to_vec();
        unspec.extend_from_slice(&[0x21, 0x00, 0, 0]);
        assert_eq!(parse(&unspec), Ok(ProxiedFrom::Proxy));
        let mut udp = encode(a("198.51.100.7:1"), a("10.0.0.5:2"), &[]);
        udp[13] = 0x12;
        assert_eq!(
            parse(&udp),
            Ok(ProxiedFrom::Proxy),
            "UDP: the connection's own"
        );
    }

    #[test]
    fn each_kind_of_bad_header_is_refused_with_its_reason() {
        let good = encode(a("198.51.100.7:1"), a("10.0.0.5:2"), &[]);
        let with = |at: usize, byte: u8| {
            let mut bad = good.clone();
            bad[at] = byte;
            bad
        };
        let mut v1 = b"PROXY TCP4 198.51.100.7 10.0.0.5 1 2\r\n".to_vec();
        v1.resize(good.len(), 0);
        let mut long = good.clone();
        long[14..16].copy_from_slice(&(MAX_HEADER as u16).to_be_bytes());
        let mut short_addresses = good[..16].to_vec();
        short_addresses[14..16].copy_from_slice(&4u16.to_be_bytes());
        short_addresses.extend_from_slice(&[1, 2, 3, 4]);
        for (header, reason) in [
            (v1, HeaderError::Signature),
            (with(0, b'X'), HeaderError::Signature),
            (with(12, 0x11), HeaderError::Version),
            (with(12, 0x22), HeaderError::Command),
            (with(13, 0x13), HeaderError::Family),
            (with(13, 0x41), HeaderError::Family),
            (long, HeaderError::Length),
            (short_addresses, HeaderError::Length),
            (good[..20].to_vec(), HeaderError::Length),
        ] {
            assert_eq!(parse(&header), Err(reason), "{header:?}");
        }
    }

    #[tokio::test]
    async fn reading_takes_the_header_and_leaves_the_request() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let source = a("203.0.113.9:4242");
        let mut sent = encode(source, addr, &[0x04, 0, 1, 7]);
        sent.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let client = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.write_all(&sent).await.unwrap();
            stream
        });
        let (mut accepted, _) = listener.accept().await.unwrap();
        let from = read(&mut accepted, Duration::from_secs(5)).await;
        assert_eq!(from, Ok(ProxiedFrom::Client(source)));
        let mut rest = [0u8; 18];
        accepted.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"GET / HTTP/1.1\r\n\r\n");
        // A connection that sends nothing is given up at the deadline.
        let _idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut silent, _) = listener.accept().await.unwrap();
        let from = read(&mut silent, Duration::from_millis(50)).await;
        assert_eq!(from, Err(HeaderError::Incomplete));
        drop(client.await);
    }
}
