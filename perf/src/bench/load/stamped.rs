//! The sink's receive loop with the kernel's receive time of each datagram
//! (`SO_TIMESTAMPNS`): a latency read this way ends when the datagram reached the
//! socket, not when the sink's thread next ran, so a busy-polling generator on the
//! sink's core (the live-frames generator) delays the thread but not the latencies.

use std::io::IoSliceMut;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use mio::{Events, Interest, Poll, Token};
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, setsockopt, sockopt,
};
use nix::sys::time::TimeSpec;

/// Datagrams read per `recvmmsg`.
const BATCH: usize = 32;
/// The largest datagram read whole.
const MAX_DATAGRAM: usize = 2048;

/// Until `stopping` is set: waits (at most 20 ms) for `socket` to be readable, then reads
/// it a batch at a time until it has nothing, handing each datagram to `each` with the
/// time it reached the socket, in nanoseconds since `epoch` (the same clock as the
/// generators' stamps; the read time when the kernel gave none). The kernel turns
/// receive stamping on in deferred work when the first such socket asks, so datagrams of
/// the first moments after may carry their read time: the sinks start long before a
/// trial.
pub(super) fn receive_stamped(
    socket: UdpSocket,
    stopping: &AtomicBool,
    epoch: Instant,
    mut each: impl FnMut(&[u8], u64),
) {
    // Without the option every datagram is stamped with its read time instead.
    let _ = setsockopt(&socket, sockopt::ReceiveTimestampns, &true);
    let mut socket = mio::net::UdpSocket::from_std(socket);
    let mut poll = Poll::new().expect("epoll");
    poll.registry()
        .register(&mut socket, Token(0), Interest::READABLE)
        .expect("register");
    let mut events = Events::with_capacity(8);
    let mut buffers = vec![[0u8; MAX_DATAGRAM]; BATCH];
    let mut headers =
        MultiHeaders::<SockaddrStorage>::preallocate(BATCH, Some(nix::cmsg_space!(TimeSpec)));
    let mut read = Vec::with_capacity(BATCH);
    let fd = socket.as_raw_fd();
    while !stopping.load(Ordering::Relaxed) {
        let _ = poll.poll(&mut events, Some(Duration::from_millis(20)));
        loop {
            read.clear();
            {
                let mut slices: Vec<[IoSliceMut<'_>; 1]> = buffers
                    .iter_mut()
                    .map(|b| [IoSliceMut::new(&mut b[..])])
                    .collect();
                let Ok(results) = recvmmsg(
                    fd,
                    &mut headers,
                    slices.iter_mut(),
                    MsgFlags::MSG_DONTWAIT,
                    None,
                ) else {
                    break;
                };
                for message in results {
                    let stamp = message.cmsgs().ok().and_then(|mut all| {
                        all.find_map(|c| match c {
                            ControlMessageOwned::ScmTimestampns(at) => Some(at),
                            _ => None,
                        })
                    });
                    read.push((message.bytes, stamp));
                }
            }
            if read.is_empty() {
                break;
            }
            let realtime_at_epoch = realtime_at(epoch);
            for (i, (len, stamp)) in read.iter().enumerate() {
                let arrived = match stamp {
                    Some(at) => timespec_ns(at).saturating_sub(realtime_at_epoch),
                    None => since(epoch),
                };
                each(&buffers[i][..(*len).min(MAX_DATAGRAM)], arrived);
            }
        }
    }
}

/// CLOCK_REALTIME at `epoch`, in nanoseconds: the real-time clock read between two
/// readings of the monotonic one, the closest of three tries (a preemption between the
/// readings would otherwise shift every latency of the batch).
fn realtime_at(epoch: Instant) -> u64 {
    (0..3)
        .map(|_| {
            let before = since(epoch);
            let real = realtime_ns();
            let after = since(epoch);
            let bracket = after.saturating_sub(before);
            (bracket, real.saturating_sub(before + bracket / 2))
        })
        .min_by_key(|(bracket, _)| *bracket)
        .map_or(0, |(_, at_epoch)| at_epoch)
}

/// Nanoseconds since `epoch`.
fn since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// CLOCK_REALTIME now, in nanoseconds (the clock of `SO_TIMESTAMPNS`).
fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn timespec_ns(at: &TimeSpec) -> u64 {
    let seconds = u64::try_from(at.tv_sec()).unwrap_or(0);
    let nanos = u64::try_from(at.tv_nsec()).unwrap_or(0);
    seconds.saturating_mul(1_000_000_000).saturating_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Datagrams sent while the sink's thread cannot run (here: before it starts) keep
    /// the time they arrived, not the time they were read.
    #[test]
    fn a_datagram_read_late_keeps_its_arrival_time() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        setsockopt(&socket, sockopt::ReceiveTimestampns, &true).unwrap();
        // The kernel turns receive stamping on for the first such socket in deferred
        // work: a datagram arriving before it runs is stamped when read.
        std::thread::sleep(Duration::from_millis(100));
        let to = socket.local_addr().unwrap();
        let epoch = Instant::now();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent_at = since(epoch);
        sender.send_to(b"x", to).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let stopping = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stop, got) = (Arc::clone(&stopping), Arc::clone(&seen));
        let reader = std::thread::spawn(move || {
            receive_stamped(socket, &stop, epoch, |d, at| {
                got.lock().unwrap().push((d.to_vec(), at));
            });
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        stopping.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "the datagram arrived");
        let (data, arrived) = &seen[0];
        assert_eq!(data, b"x");
        let waited = arrived.saturating_sub(sent_at);
        assert!(
            waited < 100_000_000,
            "arrived {waited} ns after it was sent: the read time (200 ms later), not the arrival"
        );
    }
}
