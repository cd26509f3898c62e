//! A socket with the batch of datagrams queued for it (the worker's VIP and internal
//! sockets, and the TCP side's way to the transceivers), and what a socket's turn left.
//! On the internal socket, frames for transceivers that read bundles are gathered by
//! peer ([`Bundler`]) and join the batch as one datagram each when it is flushed; with
//! `--internal-gso`, runs of equal-size datagrams to one peer leave as one GSO send.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};

use ufrag_common::bundle::{Bundler, max_bundle_len};
use ufrag_common::config::BundlePolicy;
use ufrag_common::execute::{Tally, Tickets, Transmit};
use ufrag_common::frame::MAX_HEADER_LEN;
use ufrag_common::reasons::DropReason;
use ufrag_udp::{BUF_LEN, SendBatch};

/// One socket and the batch of datagrams queued for it.
#[derive(Debug)]
pub(crate) struct Outbox {
    socket: mio::net::UdpSocket,
    batch: SendBatch<Tickets>,
    /// The peers that read bundles and the frames gathered for them (the internal
    /// socket, when bundles are configured).
    bundles: Option<(BundlePolicy, Bundler<Tickets>)>,
    /// The batch's GSO sends already counted.
    gso_sends_counted: u64,
}

impl Outbox {
    /// An outbox that sends every datagram alone.
    pub(crate) fn new(socket: mio::net::UdpSocket, ipv6: bool) -> Self {
        Outbox {
            socket,
            batch: SendBatch::new(ipv6),
            bundles: None,
            gso_sends_counted: 0,
        }
    }

    /// An outbox that bundles frames for the peers `policy` names (none: like `new`),
    /// and sends runs of equal-size datagrams as one GSO send when it says so (a datagram
    /// longer than the internal MTU allows goes alone).
    pub(crate) fn bundling(socket: mio::net::UdpSocket, ipv6: bool, policy: BundlePolicy) -> Self {
        let mut outbox = Outbox::new(socket, ipv6);
        if policy.gso {
            // The IPv6 bound serves both families: a segment never passes the MTU.
            let max_segment = max_bundle_len(policy.mtu, false);
            outbox.batch = SendBatch::segmenting(ipv6, max_segment);
        }
        if !policy.to.is_empty() {
            let bundler = Bundler::new(policy.mtu, BUF_LEN);
            outbox.bundles = Some((policy, bundler));
        }
        outbox
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Queues `tx`: its frame header (if any), then `body`; into its peer's bundle when
    /// the peer reads bundles.
    pub(crate) fn queue_transmit(&mut self, body: &[u8], tx: Transmit, tally: &mut Tally<'_>) {
        let fd = self.fd();
        if let (Some(header), Some((policy, bundler))) = (&tx.header, &mut self.bundles)
            && policy.bundles_to(tx.to)
        {
            let batch = &mut self.batch;
            let mut emit = |to: SocketAddr, head: &[u8], body: &[u8], tickets: Tickets| {
                queue(batch, fd, (to, head, body), tickets, tally);
            };
            bundler.push(tx.to, header, body, Tickets::from(tx.ticket), &mut emit);
            return;
        }
        let mut head = [0u8; MAX_HEADER_LEN];
        let head_len = tx.emit_header(&mut head);
        let tickets = Tickets::from(tx.ticket);
        queue(
            &mut self.batch,
            fd,
            (tx.to, &head[..head_len], body),
            tickets,
            tally,
        );
    }

    /// Closes the open bundles into the batch, sends the batch, and settles every ticket.
    pub(crate) fn flush(&mut self, tally: &mut Tally<'_>) {
        let fd = self.fd();
        if let Some((_, bundler)) = &mut self.bundles
            && !bundler.is_empty()
        {
            let batch = &mut self.batch;
            let mut emit = |to: SocketAddr, head: &[u8], body: &[u8], tickets: Tickets| {
                queue(batch, fd, (to, head, body), tickets, tally);
            };
            bundler.close_all(&mut emit);
        }
        self.batch
            .flush(fd, |tickets, sent| settle(tally, tickets, sent));
        let gso_sends = self.batch.segmented_sends();
        if gso_sends > self.gso_sends_counted {
            tally.gso_sends(gso_sends - self.gso_sends_counted);
            self.gso_sends_counted = gso_sends;
        }
    }
}

/// Queues `head` + `body` for `to` in `batch`, sending the batch first when it is full;
/// a datagram that cannot be queued has its tickets failed.
fn queue(
    batch: &mut SendBatch<Tickets>,
    fd: RawFd,
    (to, head, body): (SocketAddr, &[u8], &[u8]),
    tickets: Tickets,
    tally: &mut Tally<'_>,
) {
    let pushed = batch.push_flushing(fd, (to, head, body), tickets, |t, sent| {
        settle(tally, t, sent);
    });
    if let Err((tickets, error)) = pushed {
        tally.failed_all(tickets, DropReason::from(error));
    }
}

/// Counts a sent datagram's tickets as forwarded, or a failed one's as send failures.
fn settle(tally: &mut Tally<'_>, tickets: Tickets, sent: bool) {
    if sent {
        tally.sent_all(tickets);
    } else {
        tally.failed_all(tickets, DropReason::SendFailed);
    }
}

/// Whether a socket's turn emptied it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// It would block (or failed): wait for its next wakeup.
    Empty,
    /// The turn ended with data likely left: revisit it without sleeping.
    Partly,
}
