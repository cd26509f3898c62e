//! The bare forwarder: receives datagrams on one socket and sends each, unchanged, to one
//! fixed destination with the same batched `recvmmsg`/`sendmmsg` the relay uses. No
//! parsing, no flow table, no frame header: the floor any relay's cost is compared with.
//! [`NaiveForwarder`] does the same one datagram per `recv_from`/`send_to`, as a first
//! relay written with `std::net` would.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ufrag_udp::SendBatch;

/// A thread pinned to a core, inside the forwarder's network namespace (so that, like
/// a forwarder of its own process, its sockets are its namespace's in `/proc/<tid>/net`,
/// where the split by leg looks them up), that runs until dropped (its loop checks the
/// flag).
#[derive(Debug)]
struct PinnedLoop {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl PinnedLoop {
    fn spawn(
        ns: Option<&str>,
        name: &str,
        cpu: usize,
        body: impl FnOnce(&AtomicBool) + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = ufrag_testbed::netns::spawn_in(ns, name, move || {
            let _ = core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
            body(&stopping);
        })?;
        Ok(PinnedLoop {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for PinnedLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A running bare forwarder.
#[derive(Debug)]
pub struct BareForwarder {
    /// Where it listens.
    pub listen: SocketAddr,
    _loop: PinnedLoop,
}

impl BareForwarder {
    /// Starts forwarding from `listen` to `to` on its own thread, pinned to `cpu`.
    pub fn start(listen: SocketAddr, to: SocketAddr, cpu: usize) -> std::io::Result<Self> {
        Self::start_in(None, listen, to, cpu)
    }

    /// Like [`BareForwarder::start`], with the socket in network namespace `ns`.
    pub fn start_in(
        ns: Option<&str>,
        listen: SocketAddr,
        to: SocketAddr,
        cpu: usize,
    ) -> std::io::Result<Self> {
        let (socket, inside) = listen_and_inside(ns, listen)?;
        let pinned = PinnedLoop::spawn(ns, "bare-fwd", cpu, move |stopping| {
            let mut send = SendBatch::new(to.is_ipv6());
            crate::bench::load::receive_batches(socket, stopping, |recv, n, _| {
                for d in (0..n).filter_map(|i| recv.get(i)) {
                    let _ = send.push(to, &[], d.data, ());
                }
                send.flush(inside.as_raw_fd(), |(), _| {});
            });
        })?;
        Ok(BareForwarder {
            listen,
            _loop: pinned,
        })
    }
}

/// A forwarder with one `recv_from` and one `send_to` per datagram (std::net, blocking).
#[derive(Debug)]
pub struct NaiveForwarder {
    /// Where it listens.
    pub listen: SocketAddr,
    _loop: PinnedLoop,
}

impl NaiveForwarder {
    /// Starts forwarding from `listen` (in namespace `ns`) to `to` on its own thread
    /// pinned to `cpu`, named `naive-fwd`.
    pub fn start_in(
        ns: Option<&str>,
        listen: SocketAddr,
        to: SocketAddr,
        cpu: usize,
    ) -> std::io::Result<Self> {
        let (socket, inside) = listen_and_inside(ns, listen)?;
        // Blocking, as std::net's sockets are: it sleeps in recv_from when idle (the
        // timeout only lets it see the stop flag). bind_in's sockets are non-blocking, and
        // with them this loop spun at 100 % of its core at any load.
        socket.set_nonblocking(false)?;
        socket.set_read_timeout(Some(Duration::from_millis(20)))?;
        inside.set_nonblocking(false)?;
        let pinned = PinnedLoop::spawn(ns, "naive-fwd", cpu, move |stopping| {
            let mut buf = [0u8; 2048];
            while !stopping.load(Ordering::Relaxed) {
                if let Ok((n, _)) = socket.recv_from(&mut buf) {
                    let _ = inside.send_to(&buf[..n], to);
                }
            }
        })?;
        Ok(NaiveForwarder {
            listen,
            _loop: pinned,
        })
    }
}

/// A forwarder's two sockets in namespace `ns`: the one clients send to, on `listen`, and
/// one on the same address with a port of its own that sends inside, as a relay's
/// internal socket does (so a split by leg tells the two sides apart by port).
fn listen_and_inside(
    ns: Option<&str>,
    listen: SocketAddr,
) -> std::io::Result<(std::net::UdpSocket, std::net::UdpSocket)> {
    let socket = crate::bench::load::bind_in(ns, listen)?;
    let inside = crate::bench::load::bind_in(ns, SocketAddr::new(listen.ip(), 0))?;
    Ok((socket, inside))
}
