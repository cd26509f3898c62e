//! The worker's mio tokens, typed: one enum names every socket a worker polls, and the
//! numbering (which range of `Token` is which) lives only here.

use mio::Token;

/// UDP VIP sockets take the tokens below this one (one per VIP).
const LISTENERS: usize = 1 << 24;
/// TCP listeners take the tokens from [`LISTENERS`] to here (one per TCP VIP); TCP
/// connections from here (one per slot) up to the route cache's.
const CONNECTIONS: usize = 1 << 25;
/// The route cache's waker.
const ROUTE_CACHE: usize = usize::MAX - 2;
/// The internal socket.
const INTERNAL: usize = usize::MAX - 1;

/// What woke a worker: one of its sockets, or the route cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The UDP socket of VIP `i`.
    Vip(usize),
    /// The internal socket (frames from transceivers).
    Internal,
    /// The route cache has answers.
    RouteCache,
    /// The TCP listener of TCP VIP `i`.
    TcpListener(usize),
    /// The TCP connection in slot `i`.
    TcpConnection(usize),
}

impl Wake {
    /// Its token.
    pub(crate) fn token(self) -> Token {
        Token(match self {
            Wake::Vip(i) => i,
            Wake::Internal => INTERNAL,
            Wake::RouteCache => ROUTE_CACHE,
            Wake::TcpListener(i) => LISTENERS + i,
            Wake::TcpConnection(slot) => CONNECTIONS + slot,
        })
    }

    /// What `token` names (`None`: a token no socket of ours has; a VIP, listener or
    /// slot index past the range it may take).
    pub(crate) fn of(Token(t): Token) -> Option<Wake> {
        Some(match t {
            INTERNAL => Wake::Internal,
            ROUTE_CACHE => Wake::RouteCache,
            t if t < LISTENERS => Wake::Vip(t),
            t if t < CONNECTIONS => Wake::TcpListener(t - LISTENERS),
            t if t < ROUTE_CACHE => Wake::TcpConnection(t - CONNECTIONS),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_socket_reads_back_from_its_token() {
        for wake in [
            Wake::Vip(0),
            Wake::Vip(LISTENERS - 1),
            Wake::Internal,
            Wake::RouteCache,
            Wake::TcpListener(0),
            Wake::TcpListener(CONNECTIONS - LISTENERS - 1),
            Wake::TcpConnection(0),
            Wake::TcpConnection(1_000_000),
        ] {
            assert_eq!(Wake::of(wake.token()), Some(wake), "{wake:?}");
        }
        assert_eq!(Wake::of(Token(usize::MAX)), None);
    }
}
