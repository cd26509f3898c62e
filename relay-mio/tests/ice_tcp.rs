//! ICE over TCP through relay-mio, on real TCP connections and a fake transceiver.
//!
//! A connection's first RFC 4571 message, an authentic Binding Request, routes it to the
//! hint's transceiver; every message then reaches the transceiver in a frame with the TCP
//! bit, and the transceiver's TCP-bit frames come back on the connection, however TCP
//! splits or joins the bytes. What each kind of bad input costs, and how each close is
//! counted: a first message that is not an authentic Binding Request closes the
//! connection; so do an oversized length prefix and silence past the handshake timeout;
//! connections past the per-prefix and per-worker caps, or faster than a prefix's accept
//! rate, are refused at accept (a legitimate client binds during a flood); a bad
//! message on a bound connection is dropped and the session lives on; a client that does
//! not read loses messages (counted) and never stalls another connection; a frame of the
//! wrong transport never reaches a client. A relay with a TCP VIP and no UDP VIP (the
//! deployment beside relay-afxdp) serves ICE-TCP alone.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use ufrag_common::frame::{FrameHeader, Transport};
use ufrag_testkit::relay_suite::harness::{
    Endpoint, RelayProcess, RelaySetup, WAIT, binding_request_for, rtp, unique_ip,
};
use ufrag_testkit::relay_suite::{Backend, Place};

const TCP_PORT: u16 = 4443;

fn backend() -> Backend {
    Backend::mio(env!("CARGO_BIN_EXE_relay-mio"), Place::Loopback)
}

/// A relay serving TCP on port [`TCP_PORT`] of its address, with `flags` added.
fn relay_with(flags: &[&str]) -> (RelayProcess, SocketAddr, Endpoint) {
    relay_serving(1, flags)
}

/// [`relay_with`] with `udp_vips` UDP VIPs (0: a relay that serves only ICE-TCP).
fn relay_serving(udp_vips: usize, flags: &[&str]) -> (RelayProcess, SocketAddr, Endpoint) {
    let net = backend().net();
    let tcp_vip = SocketAddr::from((net.relay_ip(0), TCP_PORT));
    let mut extra = vec!["--tcp-vip".to_string(), tcp_vip.to_string()];
    extra.extend(flags.iter().map(|f| f.to_string()));
    let setup = RelaySetup {
        extra,
        vips: udp_vips,
        ..RelaySetup::on(net.clone())
    };
    let transceiver = net.transceiver();
    (RelayProcess::start(&setup), tcp_vip, transceiver)
}

/// A TCP connection from `ip` to `to`, reads bounded by [`WAIT`]; `receive_buffer` sets
/// SO_RCVBUF first (a small one makes a slow reader quickly).
fn connect_from(ip: Ipv4Addr, to: SocketAddr, receive_buffer: Option<usize>) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    if let Some(size) = receive_buffer {
        socket.set_recv_buffer_size(size).unwrap();
    }
    socket.bind(&SocketAddr::from((ip, 0)).into()).unwrap();
    socket.connect(&to.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream
}

/// `message` with its RFC 4571 length prefix.
fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = (message.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(message);
    out
}

fn read_message(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).ok()?;
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut message).ok()?;
    Some(message)
}

/// Whether the relay closed `stream` (end of stream or reset) within [`WAIT`].
fn closed_by_relay(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
    }
}

/// Sends `payload` from the fake transceiver framed for `client` via `vip` over
/// `transport` to the relay's worker 0.
fn reply(
    transceiver: &Endpoint,
    relay: &RelayProcess,
    transport: Transport,
    client: SocketAddr,
    vip: SocketAddr,
    payload: &[u8],
) {
    let h = FrameHeader::over(transport, client, vip).on_verified_path(true);
    let mut f = vec![0u8; h.encoded_len()];
    h.emit(&mut f).unwrap();
    f.extend_from_slice(payload);
    transceiver.send(relay.internal_of(0), &f);
}

fn tcp_total(relay: &RelayProcess, name: &str, label: &str) -> f64 {
    relay.total(&format!("ufrag_relay_tcp_{name}"), label)
}

fn closes(relay: &RelayProcess, reason: &str) -> f64 {
    tcp_total(
        relay,
        "connections_closed_total",
        &format!("reason=\"{reason}\""),
    )
}

/// Connects from a fresh address and binds the connection with an authentic Binding
/// Request (`seed` makes it unique); returns it and the client address the relay saw.
fn bound_connection(
    relay_vip: SocketAddr,
    transceiver: &Endpoint,
    seed: u8,
    receive_buffer: Option<usize>,
) -> (TcpStream, SocketAddr) {
    let mut client = connect_from(unique_ip(), relay_vip, receive_buffer);
    let request = binding_request_for(transceiver.addr(), 0, seed);
    client.write_all(&framed(&request)).unwrap();
    let (header, payload, _) = transceiver.recv_frame().expect("the request is forwarded");
    assert_eq!(payload, request);
    (client, header.client)
}

#[test]
fn a_tcp_client_is_routed_by_its_first_binding_request_and_hears_its_transceiver() {
    let (relay, tcp_vip, transceiver) = relay_with(&[]);
    let mut client = connect_from(unique_ip(), tcp_vip, None);
    let request = binding_request_for(transceiver.addr(), 0, 1);
    client.write_all(&framed(&request)).unwrap();

    let (header, payload, from) = transceiver.recv_frame().expect("forwarded");
    assert_eq!(header.transport, Transport::Tcp, "framed with the TCP bit");
    assert_eq!(header.client, client.local_addr().unwrap());
    assert_eq!(header.vip, tcp_vip);
    assert_eq!(payload, request, "the message, without its length prefix");
    assert_eq!(from, relay.internal_of(0));

    // The transceiver's answer comes back on the connection, framed.
    let answer = b"\x01\x01 a binding response".to_vec();
    reply(
        &transceiver,
        &relay,
        Transport::Tcp,
        header.client,
        tcp_vip,
        &answer,
    );
    assert_eq!(read_message(&mut client).as_deref(), Some(&answer[..]));

    // Two messages in one write, then one split over two writes: each arrives whole.
    let mut joined = framed(&rtp(1));
    joined.extend(framed(&rtp(2)));
    client.write_all(&joined).unwrap();
    let split = framed(&rtp(3));
    client.write_all(&split[..5]).unwrap();
    client.flush().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    client.write_all(&split[5..]).unwrap();
    for seq in 1..=3 {
        let (h, p, _) = transceiver.recv_frame().expect("media forwarded");
        assert_eq!((h.transport, p), (Transport::Tcp, rtp(seq)));
    }

    // A message no WebRTC demultiplexer knows is dropped, counted; the session lives.
    client.write_all(&framed(b"\x40 not webrtc")).unwrap();
    client.write_all(&framed(&rtp(4))).unwrap();
    assert_eq!(transceiver.recv_frame().map(|(_, p, _)| p), Some(rtp(4)));
    relay.wait_for("the unclassified message counted", |r| {
        tcp_total(r, "dropped_messages_total", "reason=\"unclassified\"") == 1.0
    });

    // Frames that must not reach this client: the UDP bit (no UDP flow has its address),
    // and the TCP bit for a client with no connection.
    reply(
        &transceiver,
        &relay,
        Transport::Udp,
        header.client,
        tcp_vip,
        &rtp(9),
    );
    let stranger = SocketAddr::from((unique_ip(), 5000));
    reply(
        &transceiver,
        &relay,
        Transport::Tcp,
        stranger,
        tcp_vip,
        &rtp(9),
    );
    relay.wait_for("both refused frames counted", |r| {
        r.drops("return_no_flow") == 1.0
            && tcp_total(r, "dropped_messages_total", "reason=\"return_no_flow\"") == 1.0
    });
    reply(
        &transceiver,
        &relay,
        Transport::Tcp,
        header.client,
        tcp_vip,
        &rtp(10),
    );
    assert_eq!(
        read_message(&mut client),
        Some(rtp(10)),
        "the next message on the connection is the next one meant for it"
    );

    relay.wait_for("the counters", |r| {
        tcp_total(r, "forwarded_messages_total", "direction=\"in\"") == 5.0
            && tcp_total(r, "forwarded_messages_total", "direction=\"out\"") == 2.0
            && tcp_total(r, "connections_active", "") == 1.0
            && tcp_total(r, "flows_active", "") == 1.0
    });
    drop(client);
    relay.wait_for("the close counted and the flow ended", |r| {
        closes(r, "peer_closed") == 1.0
            && tcp_total(r, "connections_active", "") == 0.0
            && tcp_total(r, "flows_active", "") == 0.0
    });
}

#[test]
fn what_a_tcp_connection_may_cost_is_bounded_and_every_close_is_counted() {
    let (relay, tcp_vip, transceiver) = relay_with(&[
        "--tcp-connections-per-prefix",
        "2",
        "--tcp-connections-per-worker",
        "3",
        "--tcp-handshake-timeout",
        "500ms",
    ]);
    // Per prefix: two from one /24, the third refused at once.
    let crowd = unique_ip();
    let mut silent: Vec<TcpStream> = (0..2).map(|_| connect_from(crowd, tcp_vip, None)).collect();
    relay.wait_for("two connections open", |r| {
        tcp_total(r, "connections_active", "") == 2.0
    });
    let mut third = connect_from(crowd, tcp_vip, None);
    assert!(closed_by_relay(&mut third), "a third from the prefix");
    // Per worker: a third from elsewhere fits, a fourth does not.
    let other = Ipv4Addr::new(127, crowd.octets()[1] ^ 0x80, 7, 7);
    let mut fits = connect_from(other, tcp_vip, None);
    relay.wait_for("three connections open", |r| {
        tcp_total(r, "connections_active", "") == 3.0
    });
    let mut fourth = connect_from(Ipv4Addr::new(127, 99, 1, 1), tcp_vip, None);
    assert!(closed_by_relay(&mut fourth), "a fourth in the worker");
    assert_eq!(closes(&relay, "prefix_limit"), 1.0);
    assert_eq!(closes(&relay, "worker_limit"), 1.0);

    // Silence past the handshake timeout closes all three.
    for stream in silent.iter_mut().chain([&mut fits]) {
        assert!(
            closed_by_relay(stream),
            "closed when its handshake time ran out"
        );
    }
    relay.wait_for("three handshake timeouts", |r| {
        closes(r, "handshake_timeout") == 3.0 && tcp_total(r, "connections_active", "") == 0.0
    });

    // A first message that is not an authentic Binding Request: closed, its drop counted.
    let mut media_first = connect_from(unique_ip(), tcp_vip, None);
    media_first.write_all(&framed(&rtp(1))).unwrap();
    assert!(closed_by_relay(&mut media_first));
    let mut forged = connect_from(unique_ip(), tcp_vip, None);
    let mut request = binding_request_for(transceiver.addr(), 0, 2);
    let last = request.len() - 1;
    request[last] ^= 1; // FINGERPRINT no longer matches
    forged.write_all(&framed(&request)).unwrap();
    assert!(closed_by_relay(&mut forged));
    relay.wait_for("two refused first messages", |r| {
        closes(r, "first_message_refused") == 2.0
            && tcp_total(r, "dropped_messages_total", "reason=\"no_flow\"") == 1.0
            && tcp_total(
                r,
                "dropped_messages_total",
                "reason=\"stun_bad_fingerprint\"",
            ) == 1.0
    });

    // A length prefix past the largest message: closed before a byte of it is read.
    let mut huge = connect_from(unique_ip(), tcp_vip, None);
    huge.write_all(&[0xFF, 0xFF, 0x00]).unwrap();
    assert!(closed_by_relay(&mut huge));
    relay.wait_for("the oversized message counted", |r| {
        closes(r, "message_too_large") == 1.0
    });
    assert!(
        transceiver.nothing_arrives(),
        "nothing unauthenticated reached the transceiver"
    );
}

/// A flood of silent connections from one
/// prefix is refused at the prefix's accept rate (before, every one was accepted up to the
/// per-prefix cap and held a slot for the handshake timeout), and a legitimate client
/// from elsewhere binds while it runs.
#[test]
fn a_connection_flood_from_one_prefix_is_refused_at_its_rate_and_a_client_still_binds() {
    const FLOOD: usize = 40;
    let (relay, tcp_vip, transceiver) = relay_with(&[
        "--tcp-accepts-per-prefix",
        "4",
        "--tcp-connections-per-prefix",
        "1000",
        // Long enough that no accepted one is closed before it is counted.
        "--tcp-handshake-timeout",
        "60s",
    ]);
    let crowd = unique_ip();
    let flood: Vec<TcpStream> = (0..FLOOD)
        .map(|_| connect_from(crowd, tcp_vip, None))
        .collect();
    // The legitimate client, from another /24.
    let elsewhere = Ipv4Addr::new(127, crowd.octets()[1] ^ 0x80, 9, 9);
    let mut client = connect_from(elsewhere, tcp_vip, None);
    let request = binding_request_for(transceiver.addr(), 0, 7);
    client.write_all(&framed(&request)).unwrap();
    let (header, payload, _) = transceiver.recv_frame().expect("the client binds");
    assert_eq!((header.client.ip(), payload), (elsewhere.into(), request));
    relay.wait_for("every flood connection accepted or refused", |r| {
        tcp_total(r, "connections_active", "") + closes(r, "prefix_rate") == (FLOOD + 1) as f64
    });
    let refused = closes(&relay, "prefix_rate");
    assert!(
        refused >= (FLOOD - 8) as f64,
        "at most the burst (4) and what refilled got in: {refused} refused"
    );
    drop(flood);
}

#[test]
fn a_client_that_does_not_read_loses_messages_and_never_stalls_another() {
    let (relay, tcp_vip, transceiver) = relay_with(&[]);
    let (_slow, slow_addr) = bound_connection(tcp_vip, &transceiver, 1, Some(4096));
    let (mut reader, reader_addr) = bound_connection(tcp_vip, &transceiver, 2, None);
    // Far more than the slow client's kernel buffers and the relay's send buffer hold
    // (about 60 such messages), in chunks the relay's internal socket always has room for,
    // each read before the next is sent: every frame reaches the relay.
    let payload = vec![0x80u8; 1200];
    for chunk in 1..=20 {
        for _ in 0..50 {
            reply(
                &transceiver,
                &relay,
                Transport::Tcp,
                slow_addr,
                tcp_vip,
                &payload,
            );
        }
        relay.wait_for("the chunk read", |r| {
            tcp_total(r, "received_messages_total", "port=\"internal\"") == f64::from(chunk * 50)
        });
    }
    relay.wait_for("messages for the slow client dropped", |r| {
        tcp_total(
            r,
            "dropped_messages_total",
            "reason=\"tcp_send_buffer_full\"",
        ) > 0.0
    });
    for seq in 0..20 {
        reply(
            &transceiver,
            &relay,
            Transport::Tcp,
            reader_addr,
            tcp_vip,
            &rtp(seq),
        );
        assert_eq!(
            read_message(&mut reader),
            Some(rtp(seq)),
            "the other client hears"
        );
    }
    assert_eq!(
        tcp_total(&relay, "connections_active", ""),
        2.0,
        "the slow client is not cut off either"
    );
}

/// The deployment beside relay-afxdp (which leaves TCP to the kernel): relay-mio with a
/// TCP VIP and no UDP VIP serves ICE-TCP alone.
#[test]
fn a_relay_with_only_a_tcp_vip_serves_ice_tcp() {
    let (relay, tcp_vip, transceiver) = relay_serving(0, &[]);
    let (mut client, client_addr) = bound_connection(tcp_vip, &transceiver, 3, None);
    reply(
        &transceiver,
        &relay,
        Transport::Tcp,
        client_addr,
        tcp_vip,
        &rtp(1),
    );
    assert_eq!(read_message(&mut client), Some(rtp(1)));
    assert!(
        relay.log_text().contains("tcp_vips=[") && relay.log_text().contains("vips=[]"),
        "{}",
        relay.log_text()
    );
}
