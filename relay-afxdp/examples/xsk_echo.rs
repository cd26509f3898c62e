//! Test tool for the AF_XDP socket layer (not the relay): steer UDP to `ip:port` on
//! `ifname` queue 0 into an AF_XDP socket (copy mode), and send every such datagram back
//! to its sender by rewriting the same UMEM frame in place (MACs, addresses and ports
//! swapped, both checksums recomputed). Prints `ready`, then `echoed N` when `count`
//! datagrams were echoed or `idle` passed without one.
//!
//! `xsk_echo <ifname> <skb|native> <ip:port> <count> [queue]`

use std::time::{Duration, Instant};

use ufrag_relay_afxdp::packet::{headers_len, parse_udp, write_udp};
use ufrag_relay_afxdp::steering::{AttachMode, Steering};
use ufrag_relay_afxdp::xsk::{RxFrame, UmemSocket, XdpSocket, XskConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ifname = &args[1];
    let mode = if args[2] == "native" {
        AttachMode::Native
    } else {
        AttachMode::Skb
    };
    let dest: std::net::SocketAddr = args[3].parse().expect("ip:port");
    let count: u64 = args[4].parse().expect("count");
    let queue: u32 = args.get(5).map_or(0, |q| q.parse().expect("queue"));
    let ifindex: u32 = std::fs::read_to_string(format!("/sys/class/net/{ifname}/ifindex"))
        .expect("interface exists")
        .trim()
        .parse()
        .expect("ifindex");
    let steering = Steering::load(&[dest], queue + 1).expect("program loads");
    let mut sock =
        XdpSocket::open(ifindex, queue, XskConfig::default()).expect("AF_XDP socket binds");
    steering
        .register_socket(queue, sock.fd())
        .expect("xskmap update");
    let _link = steering.attach(ifindex, mode).expect("attach");
    println!("ready");
    let mut rx = [RxFrame { addr: 0, len: 0 }; 64];
    let mut echoed = 0u64;
    let mut last = Instant::now();
    while echoed < count && last.elapsed() < Duration::from_secs(5) {
        sock.maintain();
        let n = sock.receive(&mut rx);
        if n == 0 {
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        last = Instant::now();
        for f in &rx[..n] {
            let frame = sock.frame_mut(f.addr, f.len as usize);
            let Some(u) = parse_udp(frame) else {
                sock.recycle(f.addr);
                continue;
            };
            if u.payload_at != headers_len(&u.src) {
                sock.recycle(f.addr); // IPv4 options: not handled by this tool
                continue;
            }
            let Some(len) = write_udp(frame, u.dst_mac, u.src_mac, u.dst, u.src, u.payload_len)
            else {
                sock.recycle(f.addr);
                continue;
            };
            if sock.transmit(f.addr, len as u32) {
                echoed += 1;
            } else {
                sock.recycle(f.addr);
            }
        }
        sock.flush_tx();
    }
    println!("echoed {echoed}");
}
