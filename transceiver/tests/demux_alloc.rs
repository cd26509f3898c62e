//! Zero allocation on the transceiver worker's per-datagram path outside str0m, asserted
//! with a counting allocator: receive a batch (recvmmsg), unframe it, route it to its
//! session (a STUN check by ufrag, media by path), admit and learn a known path, the
//! session's wake-up scheduled and popped, the reply framed and sent (sendmmsg).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use ufrag_common::frame::{FrameHeader, MAX_HEADER_LEN};
use ufrag_testkit::alloc::{self, CountingAllocator};
use ufrag_transceiver::session_table::{ClientPath, SessionTable};
use ufrag_udp::{RecvBatch, SendBatch};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const SESSIONS: u64 = 64;

fn path(i: u64) -> ClientPath {
    ClientPath {
        client: SocketAddr::from(([198, 51, 100, i as u8], 50_000)),
        local: "203.0.113.10:3478".parse().unwrap(),
    }
}

fn ufrag(i: u64) -> String {
    format!("srv{i:029}")
}

#[test]
fn the_per_datagram_path_outside_str0m_does_not_allocate() {
    // Setup may allocate: the table, the sockets, the batches, the datagrams.
    let mut table: SessionTable<()> = SessionTable::default();
    for i in 0..SESSIONS {
        table.insert(i, ufrag(i), ()).unwrap();
        table.learn_path(i, path(i));
    }
    let relay = UdpSocket::bind("127.0.0.1:0").unwrap();
    let worker = UdpSocket::bind("127.0.0.1:0").unwrap();
    worker.set_nonblocking(true).unwrap();
    let worker_addr = worker.local_addr().unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let mut incoming = RecvBatch::new();
    let mut outgoing: SendBatch = SendBatch::new(false);
    let frames: Vec<Vec<u8>> = (0..SESSIONS)
        .flat_map(|i| {
            let mut check = [0u8; 256];
            let n = ufrag_common::stun::write_binding_request(
                &mut check,
                &[7; 12],
                ufrag(i).as_bytes(),
                b"cli0",
                b"a-password-of-22-chars",
            )
            .unwrap();
            let mut rtp = vec![0x5a; 172];
            rtp[0] = 0x80;
            [check[..n].to_vec(), rtp].map(|payload| {
                let header = FrameHeader::new(path(i).client, path(i).local);
                let mut frame = vec![0u8; MAX_HEADER_LEN + payload.len()];
                let h = header.emit(&mut frame).unwrap();
                frame[h..h + payload.len()].copy_from_slice(&payload);
                frame.truncate(h + payload.len());
                frame
            })
        })
        .collect();
    let t0 = Instant::now();
    alloc::count_this_thread();

    let mut routed = 0u64;
    let mut sent = 0u64;
    let mut round = |count: bool| {
        for frame in &frames {
            relay.send_to(frame, worker_addr).unwrap();
        }
        alloc::arm();
        let mut received = 0;
        while received < frames.len() {
            let n = incoming.recv(worker.as_raw_fd()).unwrap();
            for datagram in (0..n).filter_map(|i| incoming.get(i)) {
                received += 1;
                let (header, payload) = FrameHeader::parse(datagram.data).unwrap();
                let path = ClientPath {
                    client: header.client,
                    local: header.vip,
                };
                let id = table.route(payload, path).unwrap();
                table.admit_path(id, path, t0, |_| false).unwrap();
                table.learn_path(id, path);
                let now = t0 + Duration::from_millis(received as u64);
                table.schedule(id, now);
                assert_eq!(table.pop_due(now), Some(id));
                let mut reply = [0u8; MAX_HEADER_LEN];
                let h = FrameHeader::new(path.client, path.local)
                    .emit(&mut reply)
                    .unwrap();
                if outgoing.is_full() {
                    outgoing.flush(worker.as_raw_fd(), |(), ok| sent += u64::from(ok));
                }
                outgoing.push(relay_addr, &reply[..h], payload, ()).unwrap();
                routed += 1;
            }
            outgoing.flush(worker.as_raw_fd(), |(), ok| sent += u64::from(ok));
        }
        let allocated = alloc::disarm();
        if count {
            assert_eq!(
                allocated,
                0,
                "the per-datagram path allocated {allocated} times for {} datagrams",
                frames.len()
            );
        }
        // Drain what the worker sent back, outside the counted part.
        relay.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 2048];
        while relay.recv_from(&mut buf).is_ok() {}
    };
    round(false); // warm-up: the timer heap and the batches reach their working size
    round(true);
    round(true);
    assert_eq!(routed, 3 * frames.len() as u64);
    assert!(sent > 0, "the replies went out");
}
