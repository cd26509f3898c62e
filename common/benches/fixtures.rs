//! Inputs shared by the wall-clock (criterion) and instruction-count (iai-callgrind)
#![allow(dead_code)] // each bench file uses a different subset of the fixtures
//! benchmarks, so both measure exactly the same work.

use std::hash::{BuildHasherDefault, DefaultHasher};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ipnet::IpNet;
use ufrag_common::flow::{FlowKey, FlowTable};
use ufrag_common::hint::{HintKey, HintKeys, IcePassword, RoutingHint};
use ufrag_common::stun;

/// A 172-byte SRTP-like datagram (20 ms of Opus plus headers).
pub(crate) const RTP: [u8; 172] = {
    let mut p = [0x5a; 172];
    p[0] = 0x80;
    p[1] = 111;
    p
};

pub(crate) const VIP: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 10)),
    3478,
);

/// Everything the first-packet path needs: keys, allowed networks, a browser-shaped
/// Binding Request carrying a routing hint, and its password.
pub(crate) struct FirstPacket {
    pub(crate) keys: HintKeys,
    pub(crate) allowed: Vec<IpNet>,
    pub(crate) request: Vec<u8>,
    pub(crate) server_ufrag: Vec<u8>,
    pub(crate) password: IcePassword,
}

pub(crate) fn first_packet() -> FirstPacket {
    let keys = HintKeys::new(HintKey::new(1, &[0x42; 32]).unwrap(), None).unwrap();
    let hint = RoutingHint {
        cluster: 1,
        transceiver: "10.0.0.2:40000".parse().unwrap(),
    };
    let ufrag = keys.encode(
        &hint,
        ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
        [1, 2, 3, 4, 5],
    );
    let password = keys.ice_password(1, ufrag.as_bytes()).unwrap();
    let mut buf = [0u8; 512];
    let len = stun::write_binding_request(
        &mut buf,
        b"benchtxid001",
        ufrag.as_bytes(),
        b"Zx9q",
        password.as_bytes(),
    )
    .unwrap();
    FirstPacket {
        keys,
        allowed: vec!["10.0.0.0/8".parse().unwrap()],
        request: buf[..len].to_vec(),
        server_ufrag: ufrag.as_bytes().to_vec(),
        password,
    }
}

/// The key of flow `i`: distinct client addresses spread over 10.0.0.0/8 and ports.
pub(crate) fn flow_key(i: u32) -> FlowKey {
    let ip = 0x0a00_0000 | (i >> 4);
    let port = 10_000 + (i & 0xf) as u16;
    FlowKey::new(SocketAddr::from((ip.to_be_bytes(), port)), VIP)
}

/// A key that is never in a table built by [`full_table`].
pub(crate) fn missing_key(i: u32) -> FlowKey {
    FlowKey::new(SocketAddr::from(([192, 0, 2, (i & 0xff) as u8], 7)), VIP)
}

pub(crate) const IDLE: Duration = Duration::from_secs(30);

/// SipHash-1-3 like production's `RandomState`, but with fixed keys, so that the index
/// layout, and with it the instruction count, is the same on every run.
pub(crate) type FixedSipHash = BuildHasherDefault<DefaultHasher>;
pub(crate) type BenchTable = FlowTable<SocketAddr, FixedSipHash>;

/// A table of `n` flows (capacity `n`), all last seen at the returned epoch.
pub(crate) fn full_table(n: u32) -> (BenchTable, Instant) {
    let t0 = Instant::now();
    let mut table = FlowTable::with_hasher(n as usize, IDLE, t0, FixedSipHash::default()).unwrap();
    let dest: SocketAddr = "10.0.0.2:40000".parse().unwrap();
    for i in 0..n {
        table.insert(&flow_key(i), dest, t0).unwrap();
    }
    (table, t0)
}

/// Visits 0..n in a scattered order (a stride coprime with n), defeating the cache the
/// way a million independent clients would.
pub(crate) fn scattered(i: u64, n: u32) -> u32 {
    ((i.wrapping_mul(2_654_435_761)) % u64::from(n)) as u32
}

/// The client of the forwarder benches and where its session lives.
pub(crate) const CLIENT: &str = "198.51.100.7:50000";
pub(crate) const TRANSCEIVER: &str = "10.0.0.2:40000";

/// [`CLIENT`] as an address, built without parsing text (a const, not counted work).
pub(crate) fn client() -> SocketAddr {
    SocketAddr::from(([198, 51, 100, 7], 50_000))
}

/// [`TRANSCEIVER`] as an address.
pub(crate) fn transceiver() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 2], 40_000))
}
/// Another cluster's relay, for global mode.
pub(crate) const CLUSTER_RELAY: &str = "192.0.2.50:40000";

/// A DTLS record header and 80 bytes of handshake, as a client's flight starts.
pub(crate) const DTLS: [u8; 93] = {
    let mut p = [0x33; 93];
    p[0] = 0x16;
    p[1] = 0xfe;
    p[2] = 0xfd;
    p
};

/// The forwarding policy of a relay in cluster `cluster_id` that knows cluster 1's
/// relay (so a hint for cluster 1 is forwarded there when `cluster_id` is not 1).
pub(crate) fn policy(cluster_id: u16) -> ufrag_common::forward::ForwardPolicy {
    ufrag_common::forward::ForwardPolicy {
        vips: vec![VIP],
        allowed_transceiver_networks: vec!["10.0.0.0/8".parse().unwrap()],
        global_relay_networks: vec![],
        cluster_id,
        clusters: [(1, CLUSTER_RELAY.parse().unwrap())].into_iter().collect(),
        hint_keys: first_packet().keys,
        route_cache: false,
        admission: Default::default(),
        shared_replays: None,
    }
}

/// A forwarder (1024 flows) in `cluster_id` that has not seen the client yet, with the
/// client's first Binding Request.
pub(crate) fn fresh_forwarder(
    cluster_id: u16,
) -> (ufrag_common::forward::Forwarder, Vec<u8>, Instant) {
    let t0 = Instant::now();
    let table = FlowTable::new(1024, IDLE, t0).unwrap();
    let forwarder = ufrag_common::forward::Forwarder::new(
        policy(cluster_id),
        table,
        t0,
        ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
    );
    (forwarder, first_packet().request, t0)
}

/// A forwarder in our own cluster whose flow for the client carried its first request, a
/// DTLS datagram and media back from the transceiver (proven), and one more client
/// datagram (its route recorded, when there is a cache): what every later datagram of the
/// session meets.
pub(crate) fn established_forwarder() -> (ufrag_common::forward::Forwarder, Instant) {
    let (mut forwarder, request, t0) = fresh_forwarder(1);
    let (client, vip) = (CLIENT.parse().unwrap(), VIP);
    forwarder.from_client(&request, client, vip, t0);
    forwarder.from_client(&DTLS, client, vip, t0);
    forwarder.from_internal(&return_frame(), transceiver(), t0);
    forwarder.from_client(&DTLS, client, vip, t0);
    (forwarder, t0)
}

/// A frame from the transceiver carrying an SRTP datagram back to the client.
pub(crate) fn return_frame() -> Vec<u8> {
    let header =
        ufrag_common::frame::FrameHeader::new(CLIENT.parse().unwrap(), VIP).on_verified_path(true);
    let mut frame = vec![0u8; ufrag_common::frame::MAX_HEADER_LEN + RTP.len()];
    let n = header.emit(&mut frame).unwrap();
    frame[n..n + RTP.len()].copy_from_slice(&RTP);
    frame.truncate(n + RTP.len());
    frame
}
