//! A socket with the batch of datagrams queued for it (the worker's VIP and internal
//! sockets, and the TCP side's way to the transceivers), and what a socket's turn left.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};

use ufrag_common::execute::{Tally, Ticket, Transmit};
use ufrag_common::frame::MAX_HEADER_LEN;
use ufrag_common::metrics::DropReason;
use ufrag_udp::{PushError, SendBatch};

/// One socket and the batch of datagrams queued for it.
#[derive(Debug)]
pub(crate) struct Outbox {
    socket: mio::net::UdpSocket,
    batch: SendBatch<Ticket>,
}

impl Outbox {
    pub(crate) fn new(socket: mio::net::UdpSocket, ipv6: bool) -> Self {
        Outbox {
            socket,
            batch: SendBatch::new(ipv6),
        }
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Queues `head` + `body` for `to`, sending the batch first when it is full.
    pub(crate) fn queue(
        &mut self,
        to: SocketAddr,
        head: &[u8],
        body: &[u8],
        ticket: Ticket,
        tally: &mut Tally<'_>,
    ) {
        if self.batch.is_full() {
            self.flush(tally);
        }
        if let Err((ticket, error)) = self.batch.push(to, head, body, ticket) {
            let reason = match error {
                PushError::TooLarge => DropReason::TooLarge,
                PushError::Full | PushError::WrongFamily => DropReason::SendFailed,
            };
            tally.failed(ticket, reason);
        }
    }

    /// Queues `tx`: its frame header (if any), then `body`.
    pub(crate) fn queue_transmit(&mut self, body: &[u8], tx: Transmit, tally: &mut Tally<'_>) {
        let mut head = [0u8; MAX_HEADER_LEN];
        let head_len = tx.emit_header(&mut head);
        self.queue(tx.to, &head[..head_len], body, tx.ticket, tally);
    }

    pub(crate) fn flush(&mut self, tally: &mut Tally<'_>) {
        if self.batch.is_empty() {
            return;
        }
        let fd = self.fd();
        self.batch.flush(fd, |ticket, sent| {
            if sent {
                tally.sent(ticket);
            } else {
                tally.failed(ticket, DropReason::SendFailed);
            }
        });
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
