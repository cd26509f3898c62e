//! The ICE-TCP listener's capacity: connections opened and bound per second, each by an
//! authentic Binding Request, then messages per second with every connection sending.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// What one relay worker's ICE-TCP listener carried ([`tcp_listener_capacity`]).
#[derive(Clone, Copy, Debug)]
pub struct TcpCapacity {
    /// Connections opened and bound.
    pub connections: usize,
    /// Connections opened and bound (each first Binding Request forwarded) per second.
    pub bound_per_second: f64,
    /// Messages forwarded to the transceiver per second while every connection sent.
    pub messages_per_second: f64,
    /// The relay worker's CPU share while they sent (100 = one core).
    pub relay_cpu: f64,
    /// How busy the load CPU (client and sink) was meanwhile (100 = the whole core):
    /// near 100, the load tools, not the relay, were the limit.
    pub load_cpu: f64,
    /// Messages still queued (in the connections' socket buffers) when the blast ended:
    /// the connections are reset then, which discards them.
    pub queued_after_blast: u64,
    /// How long after the reset the relay still forwarded messages (the measurement
    /// waits until it stops, so the next one finds the relay's worker idle).
    pub quiet_after_seconds: f64,
}

/// The relay has stopped forwarding the blast once nothing arrived for this long...
const QUIET: Duration = Duration::from_millis(500);
/// ... and the wait for that gives up after this long in all.
const QUIET_LIMIT: Duration = Duration::from_secs(60);

/// Opens `connections` ICE-TCP connections from `client_ip` to the relay's TCP VIP, binds
/// each with an authentic Binding Request (a session per connection, hinted to a sink
/// socket on `sink_ip` that counts what arrives), then has every connection send
/// 172-byte messages (32 per write) for `blast`. The client and the sink run on the load
/// CPU ([`crate::bench::load::LOAD_CPU`]); `relay_cpu_seconds` reads the relay worker's CPU.
pub fn tcp_listener_capacity(
    tcp_vip: SocketAddr,
    client_ip: Ipv4Addr,
    sink_ip: Ipv4Addr,
    connections: usize,
    blast: Duration,
    relay_cpu_seconds: impl Fn() -> f64 + Sync,
) -> Result<TcpCapacity, String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                crate::bench::load::pin_to_load_cpu();
                tcp_capacity_on_this_thread(
                    tcp_vip,
                    client_ip,
                    sink_ip,
                    connections,
                    blast,
                    &relay_cpu_seconds,
                )
            })
            .join()
            .map_err(|_| "the TCP load thread panicked".to_string())?
    })
}

fn tcp_capacity_on_this_thread(
    tcp_vip: SocketAddr,
    client_ip: Ipv4Addr,
    sink_ip: Ipv4Addr,
    connections: usize,
    blast: Duration,
    relay_cpu_seconds: &dyn Fn() -> f64,
) -> Result<TcpCapacity, String> {
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let sink = std::net::UdpSocket::bind((sink_ip, 0)).map_err(|e| e.to_string())?;
    let _ = socket2::SockRef::from(&sink).set_recv_buffer_size(8 << 20);
    sink.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| e.to_string())?;
    let sink_addr = sink.local_addr().map_err(|e| e.to_string())?;
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let counter = {
        let (received, stop) = (Arc::clone(&received), Arc::clone(&stop));
        std::thread::spawn(move || {
            crate::bench::load::pin_to_load_cpu();
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if sink.recv_from(&mut buf).is_ok() {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    // Waits until no message has arrived for `quiet`, or for `limit` in all.
    let wait_until_quiet = |quiet: Duration, limit: Duration| {
        let deadline = Instant::now() + limit;
        let (mut last, mut last_progress) = (received.load(Ordering::Relaxed), Instant::now());
        while last_progress.elapsed() < quiet && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            let now_received = received.load(Ordering::Relaxed);
            if now_received > last {
                (last, last_progress) = (now_received, Instant::now());
            }
        }
    };
    let wait_for = |count: u64, limit: Duration| {
        let deadline = Instant::now() + limit;
        while received.load(Ordering::Relaxed) < count {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    };
    let keys = ufrag_testbed::keys::keys();
    let started = Instant::now();
    let mut streams = Vec::with_capacity(connections);
    for i in 0..connections {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .map_err(|e| e.to_string())?;
        socket
            .bind(&SocketAddr::from((client_ip, 0)).into())
            .map_err(|e| format!("connection {i}: {e}"))?;
        socket
            .connect(&tcp_vip.into())
            .map_err(|e| format!("connection {i}: {e}"))?;
        let mut stream: std::net::TcpStream = socket.into();
        let random = (i as u64).to_be_bytes();
        let ufrag = keys.encode(
            &ufrag_common::hint::RoutingHint {
                cluster: 0,
                transceiver: sink_addr,
            },
            ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
            [random[3], random[4], random[5], random[6], random[7]],
        );
        let password = keys
            .ice_password(keys.current().id(), ufrag.as_bytes())
            .ok_or("the test keys derive passwords")?;
        let mut transaction = [0xa5u8; 12];
        transaction[..8].copy_from_slice(&random);
        let mut request = [0u8; 512];
        let n = ufrag_common::stun::write_binding_request(
            &mut request[2..],
            &transaction,
            ufrag.as_bytes(),
            b"perf",
            password.as_bytes(),
        )
        .map_err(|e| format!("{e:?}"))?;
        request[..2].copy_from_slice(&(n as u16).to_be_bytes());
        stream
            .write_all(&request[..2 + n])
            .map_err(|e| format!("connection {i}: {e}"))?;
        streams.push(stream);
    }
    if !wait_for(connections as u64, Duration::from_secs(30)) {
        stop.store(true, Ordering::Relaxed);
        let _ = counter.join();
        return Err(format!(
            "{} of {connections} connections bound within 30 s",
            received.load(Ordering::Relaxed)
        ));
    }
    let bound_per_second = connections as f64 / started.elapsed().as_secs_f64();

    let mut batch = Vec::with_capacity(32 * 174);
    for _ in 0..32 {
        batch.extend_from_slice(&172u16.to_be_bytes());
        batch.extend_from_slice(&[0x80u8; 172]);
    }
    let before = received.load(Ordering::Relaxed);
    let load_busy = || crate::bench::cpu::cpu_busy_seconds(crate::bench::load::LOAD_CPU);
    let (relay_before, load_before) = (relay_cpu_seconds(), load_busy());
    let blast_started = Instant::now();
    let mut sent = 0u64;
    'blast: loop {
        for stream in &mut streams {
            if blast_started.elapsed() >= blast {
                break 'blast;
            }
            stream.write_all(&batch).map_err(|e| e.to_string())?;
            sent += 32;
        }
    }
    let seconds = blast_started.elapsed().as_secs_f64();
    let counted = received.load(Ordering::Relaxed) - before;
    let (relay_after, load_after) = (relay_cpu_seconds(), load_busy());
    // What was still queued when the blast ended (far more than the blast carried, in
    // the connections' growing buffers) is no part of the figures. Closed normally, the
    // connections would still deliver it all, and the relay's worker would forward it
    // for a long while into the next measurement (to a sink gone, each message answered
    // by an ICMP error): reset instead, which discards it, and wait until the relay has
    // stopped forwarding before the next one starts.
    let queued_after_blast = (before + sent).saturating_sub(received.load(Ordering::Relaxed));
    for stream in &streams {
        let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
    }
    drop(streams);
    let reset_at = Instant::now();
    wait_until_quiet(QUIET, QUIET_LIMIT);
    let quiet_after_seconds = reset_at.elapsed().saturating_sub(QUIET).as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = counter.join();
    Ok(TcpCapacity {
        connections,
        bound_per_second,
        messages_per_second: counted as f64 / seconds,
        relay_cpu: (relay_after - relay_before) / seconds * 100.0,
        load_cpu: (load_after - load_before) / seconds * 100.0,
        queued_after_blast,
        quiet_after_seconds,
    })
}
