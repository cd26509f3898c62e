//! Batched send and receive on real loopback sockets: every queued datagram's token
//! comes back exactly once, in order, with its outcome; refused pushes return the token.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use ufrag_udp::{BUF_LEN, PushError, RecvBatch, SendBatch, bind_udp};

fn loopback() -> std::net::UdpSocket {
    bind_udp("127.0.0.1:0".parse().unwrap(), false).unwrap()
}

#[test]
fn tokens_come_back_once_in_order_and_datagrams_arrive_whole() {
    let sender = loopback();
    let receiver = loopback();
    let to = receiver.local_addr().unwrap();
    let mut batch: SendBatch<u32> = SendBatch::new(false);
    for token in 0..10u32 {
        batch
            .push(to, &[0xf1, token as u8], &[7; 100], token)
            .unwrap();
    }
    let v6: SocketAddr = "[::1]:9".parse().unwrap();
    assert_eq!(
        batch.push(v6, &[], &[1], 99),
        Err((99, PushError::WrongFamily))
    );
    assert_eq!(
        batch.push(to, &[1], &[0; BUF_LEN], 98),
        Err((98, PushError::TooLarge))
    );
    let mut settled = vec![];
    let flushed = batch.flush(sender.as_raw_fd(), |t, ok| settled.push((t, ok)));
    assert_eq!(settled, (0..10).map(|t| (t, true)).collect::<Vec<_>>());
    assert_eq!((flushed.sent, flushed.failed, flushed.bytes), (10, 0, 1020));
    assert!(batch.is_empty());

    let mut recv = RecvBatch::new();
    let mut got = vec![];
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < 10 && Instant::now() < deadline {
        let n = recv.recv(receiver.as_raw_fd()).unwrap();
        for i in 0..n {
            let d = recv.get(i).unwrap();
            assert_eq!(d.source, sender.local_addr().unwrap());
            assert!(!d.truncated);
            got.push(d.data.to_vec());
        }
        if n == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert_eq!(got.len(), 10);
    for (i, d) in got.iter().enumerate() {
        assert_eq!(d.len(), 102);
        assert_eq!(d[1], i as u8);
    }
}

#[test]
fn a_full_batch_refuses_the_next_push() {
    let mut batch: SendBatch<usize> = SendBatch::new(false);
    let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
    for i in 0..ufrag_udp::BATCH {
        batch.push(to, &[], &[0], i).unwrap();
    }
    assert!(batch.is_full());
    assert_eq!(batch.push(to, &[], &[0], 64), Err((64, PushError::Full)));
}
