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

/// Reads datagrams from `socket` until `count` arrived or 5 s passed; each with its source.
fn receive(socket: &std::net::UdpSocket, count: usize) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut recv = RecvBatch::new();
    let mut got = vec![];
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < count && Instant::now() < deadline {
        let n = recv.recv(socket.as_raw_fd()).unwrap();
        for i in 0..n {
            let d = recv.get(i).unwrap();
            assert!(!d.truncated);
            got.push((d.source, d.data.to_vec()));
        }
        if n == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    got
}

/// With GSO, a batch's runs to one destination of one length leave as one send each,
/// the kernel cuts them back into the datagrams queued, and every token still comes back
/// once, in order. Runs end at a new destination, a longer datagram, or after a shorter
/// one; a datagram longer than the longest segment goes alone.
#[test]
fn a_segmenting_batch_sends_each_run_once_and_every_datagram_arrives_alone() {
    let sender = loopback();
    let (a, b) = (loopback(), loopback());
    let (to_a, to_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let mut batch: SendBatch<u32> = SendBatch::segmenting(false, 1000);
    // Runs: a ×5 of 100 bytes and one of 40 (one send); b ×3 of 100 (one send); a ×2 of
    // 100 again (one send); a ×1 of 300 (longer than the run's: its own send); a ×2 of
    // 1200 (past the longest segment: a send each).
    let plan: Vec<(SocketAddr, usize)> = std::iter::repeat_n((to_a, 100), 5)
        .chain([(to_a, 40)])
        .chain(std::iter::repeat_n((to_b, 100), 3))
        .chain(std::iter::repeat_n((to_a, 100), 2))
        .chain([(to_a, 300)])
        .chain(std::iter::repeat_n((to_a, 1200), 2))
        .collect();
    for (token, (to, len)) in plan.iter().enumerate() {
        batch
            .push(*to, &[token as u8], &vec![7; len - 1], token as u32)
            .unwrap();
    }
    let mut settled = vec![];
    let flushed = batch.flush(sender.as_raw_fd(), |t, ok| settled.push((t, ok)));
    assert_eq!(
        settled,
        (0..plan.len() as u32)
            .map(|t| (t, true))
            .collect::<Vec<_>>()
    );
    let bytes: usize = plan.iter().map(|p| p.1).sum();
    assert_eq!(
        (flushed.sent, flushed.failed, flushed.bytes, flushed.sends),
        (14, 0, bytes, 6)
    );
    assert_eq!(batch.segmented_sends(), 3, "three runs of several");
    let at_a = receive(&a, 11);
    let at_b = receive(&b, 3);
    let tokens = |got: &[(SocketAddr, Vec<u8>)]| -> Vec<(u8, usize)> {
        got.iter().map(|(_, d)| (d[0], d.len())).collect()
    };
    assert_eq!(
        tokens(&at_a),
        [
            (0, 100),
            (1, 100),
            (2, 100),
            (3, 100),
            (4, 100),
            (5, 40),
            (9, 100),
            (10, 100),
            (11, 300),
            (12, 1200),
            (13, 1200)
        ]
    );
    assert_eq!(tokens(&at_b), [(6, 100), (7, 100), (8, 100)]);
    assert!(
        at_a.iter()
            .chain(&at_b)
            .all(|(from, _)| *from == sender.local_addr().unwrap())
    );
}

/// A plain batch makes one send per datagram; `push_flushing` sends a full batch first
/// (settling each of its datagrams) and then queues.
#[test]
fn push_flushing_sends_a_full_batch_before_it_queues() {
    let sender = loopback();
    let receiver = loopback();
    let to = receiver.local_addr().unwrap();
    let mut batch: SendBatch<usize> = SendBatch::new(false);
    let mut settled = vec![];
    for token in 0..=ufrag_udp::BATCH {
        batch
            .push_flushing(sender.as_raw_fd(), (to, &[], &[1; 10]), token, |t, ok| {
                settled.push((t, ok));
            })
            .unwrap();
    }
    assert_eq!(settled.len(), ufrag_udp::BATCH, "the full batch went first");
    assert!(settled.iter().enumerate().all(|(i, s)| *s == (i, true)));
    let flushed = batch.flush(sender.as_raw_fd(), |t, ok| settled.push((t, ok)));
    assert_eq!((flushed.sent, flushed.sends), (1, 1));
    assert_eq!(settled.last(), Some(&(ufrag_udp::BATCH, true)));
    assert_eq!(
        receive(&receiver, ufrag_udp::BATCH + 1).len(),
        ufrag_udp::BATCH + 1
    );
    assert_eq!(
        batch.push_flushing(sender.as_raw_fd(), (to, &[1], &[0; BUF_LEN]), 7, |_, _| {}),
        Err((7, PushError::TooLarge))
    );
}

/// GSO on an IPv6 socket: a run to [::1] leaves as one send and arrives one by one; an
/// empty datagram after it joins no run (it would be no segment at all) and arrives too.
#[test]
fn a_segmenting_batch_sends_runs_over_ipv6_too() {
    let bind = || bind_udp("[::1]:0".parse().unwrap(), false).unwrap();
    let (sender, receiver) = (bind(), bind());
    let to = receiver.local_addr().unwrap();
    let mut batch: SendBatch<u8> = SendBatch::segmenting(true, 1000);
    for token in 0..5u8 {
        batch.push(to, &[token], &[9; 99], token).unwrap();
    }
    batch.push(to, &[], &[], 5).unwrap();
    let flushed = batch.flush(sender.as_raw_fd(), |_, ok| assert!(ok));
    assert_eq!((flushed.sent, flushed.sends), (6, 2));
    assert_eq!(batch.segmented_sends(), 1);
    let got = receive(&receiver, 6);
    let lens: Vec<usize> = got.iter().map(|(_, d)| d.len()).collect();
    assert_eq!(lens, [100, 100, 100, 100, 100, 0]);
    let firsts: Vec<u8> = got[..5].iter().map(|(_, d)| d[0]).collect();
    assert_eq!(firsts, [0, 1, 2, 3, 4]);
}
