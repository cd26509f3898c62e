//! What an operator does about each reason a relay counts a drop, a route-cache error or a
//! TCP close under:
//! one entry per reason, in exhaustive matches, so a new reason does not build without
//! its entry. `docs/runbook.md` is generated from these, the transceiver's
//! (`ufrag_transceiver::runbook`) and each reason's own documentation, and a test fails when
//! the committed page differs from what the code says.

use crate::reasons::{CacheError, DropReason, TcpCloseReason};

/// Where a count under a reason usually comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Normal life of sessions and clients: expect a steady trickle.
    Benign,
    /// Scanners, spoofers and broken clients on the public port: counted and dropped by
    /// design; act only on a spike.
    Hostile,
    /// The relay, the transceivers or the keys disagree: a configuration to fix.
    Misconfiguration,
    /// A bound was reached: capacity, or an attack large enough to fill it.
    Overload,
    /// Something that should not happen: a bug or a failing host.
    Fault,
}

impl Cause {
    /// The word the runbook prints.
    pub const fn label(self) -> &'static str {
        match self {
            Cause::Benign => "benign",
            Cause::Hostile => "hostile",
            Cause::Misconfiguration => "misconfiguration",
            Cause::Overload => "overload",
            Cause::Fault => "fault",
        }
    }
}

/// One reason's runbook entry: where counts come from and what to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Where counts usually come from.
    pub cause: Cause,
    /// What an operator looks at or changes.
    pub action: &'static str,
}

const fn entry(cause: Cause, action: &'static str) -> Entry {
    Entry { cause, action }
}

const STUN_MALFORMED: Entry = entry(
    Cause::Hostile,
    "A datagram that is not well-formed STUN reached the public port: scanners and broken \
     clients. Nothing to do for a trickle; a spike from one prefix is an attack the rate \
     limits already bound (see `auth_rate_limit`); block the prefix upstream if it costs \
     bandwidth.",
);

const HINT_FORGED: Entry = entry(
    Cause::Hostile,
    "A Binding Request whose server ufrag is not a hint this fleet minted: guessed or \
     forged. Nothing to do for a trickle. If it follows a key or version change, check \
     that every transceiver runs a build and key file the relays accept.",
);

const FRAME_MALFORMED: Entry = entry(
    Cause::Fault,
    "Something on the internal network sent the relay a datagram that is not a valid \
     frame. The transceivers only send valid ones: look for another service or a scanner \
     on the internal port, or a transceiver of an incompatible version.",
);

/// The runbook entry for a relay drop (`ufrag_relay_dropped_datagrams_total{reason}`).
pub const fn relay_drop(reason: DropReason) -> Entry {
    use DropReason::*;
    match reason {
        Unclassified => entry(
            Cause::Hostile,
            "Not STUN, DTLS or RTP on the public port: scanners, amplification probes. \
             Nothing to do unless it is most of the traffic.",
        ),
        NoFlow => entry(
            Cause::Benign,
            "Media for a client the relay has no flow for, and no route cache: after a \
             relay restart, until the client's next STUN check (a few seconds). A steady \
             rate: clients whose flows expired (`idle_timeout`) or spoofed media. Configure \
             the Redis route cache to restore flows after restarts.",
        ),
        NoFlowCacheLookup => entry(
            Cause::Benign,
            "Media without a flow while the route cache was asked: after a restart each \
             restored flow's first datagrams. If it grows with `ufrag_relay_cache_errors_total`, \
             Redis is slow or down: its errors are counted there.",
        ),
        NoFlowRecentMiss => entry(
            Cause::Benign,
            "Media without a flow whose route the cache did not know within the last 2 s: \
             a client whose flow expired, repeating itself until its next STUN check, or \
             spoofed media. Redis is asked once per flow per 2 s, not per datagram.",
        ),
        NoFlowLookupRate => entry(
            Cause::Hostile,
            "Media without a flow past the route-cache lookup rate (50/s per source prefix, \
             2,000/s per worker): spoofed media sprayed to make Redis work. Redis is spared; \
             a client whose flow was not restored reconnects with its next STUN check. \
             Steady after a restart behind one large NAT: those users restore a little \
             later.",
        ),
        NotBindingRequest => entry(
            Cause::Hostile,
            "STUN other than a Binding Request without a flow: probes (and some clients' \
             keep-alive indications after their flow expired). Nothing to do.",
        ),
        StunTooShort
        | StunNotStun
        | StunBadMagicCookie
        | StunLengthMismatch
        | StunLengthNotAligned
        | StunAttributeOverrun
        | StunTooManyAttributes
        | StunAttributeAfterFingerprint
        | StunBadIntegrityLength
        | StunBadFingerprintLength
        | StunMissingUsername
        | StunBadUsername
        | StunMissingIntegrity
        | StunMissingFingerprint
        | StunBadFingerprint => STUN_MALFORMED,
        StunBadIntegrity => entry(
            Cause::Hostile,
            "A Binding Request with an authentic hint but the wrong MESSAGE-INTEGRITY: \
             someone replaying a ufrag without its password. If it rises after a key \
             rotation, relays and transceivers derive passwords from different keys: \
             compare `hint_key_info{key_id}` across them.",
        ),
        HintBadLength | HintBadAlphabet | HintUnknownVersion | HintBadMac => HINT_FORGED,
        HintUnknownKey => entry(
            Cause::Misconfiguration,
            "A hint minted under a key this relay does not hold. During a rotation: a \
             relay without the new key (reload it), or the old key removed while sessions \
             minted under it still start (`ufrag_transceiver_sessions_by_hint_key`). \
             Otherwise forged.",
        ),
        HintDestinationNotAllowed => entry(
            Cause::Misconfiguration,
            "An authentic hint names a transceiver outside `allow_transceiver_net`: \
             a transceiver on a network the relay was not told about. Add the network, or \
             find the transceiver advertising the wrong address.",
        ),
        HintExpired => entry(
            Cause::Hostile,
            "An authentic hint older than `hint_max_age` asked for a new flow: a ufrag \
             collected from an old session. A few from real clients that took longer than \
             `hint_max_age` to connect; many: raise it only if sessions legitimately wait \
             that long.",
        ),
        UnknownCluster => entry(
            Cause::Misconfiguration,
            "A hint names a cluster this global relay has no entry for: add it with \
             `--cluster-relay ID=IP:PORT`, or find transceivers with a wrong `--cluster-id`.",
        ),
        TableFull => entry(
            Cause::Overload,
            "The flow table is full of live, proven flows: the relay is at capacity. Raise \
             `flows_per_worker` (memory) or add relays; check `flows_active` against the \
             session count you expect.",
        ),
        ReplayedRequest => entry(
            Cause::Hostile,
            "An authentic Binding Request replayed from another address: an on-path \
             attacker copying checks. Dropped by design; nothing to do.",
        ),
        SessionFlowLimit => entry(
            Cause::Hostile,
            "One session tried to hold more flows than `max_flows_per_session`: a client \
             spraying candidates, or a replay. Raise the cap only if real clients (many \
             interfaces) hit it.",
        ),
        AuthRateLimit | PrefixRateLimit => entry(
            Cause::Hostile,
            "A source prefix spent its rate of attempts: a flood from one network, bounded \
             by design. Real clients behind one large NAT can hit it: raise \
             `new_flows_per_prefix` or shorten `rate_limit_prefix_v4`/`_v6` if they do.",
        ),
        WorkerRateLimit => entry(
            Cause::Overload,
            "A worker spent its rate of new flows (`new_flows_per_worker`): a flood from \
             many prefixes, or a legitimate surge (a whole region reconnecting). Add \
             workers or relays for a surge; the limit protects established flows.",
        ),
        FrameTooShort | FrameNotAFrame | FrameUnknownVersion | FrameReservedBits
        | FrameEmptyPayload | FrameBadBundle => FRAME_MALFORMED,
        FrameSourceNotAllowed => entry(
            Cause::Misconfiguration,
            "A frame from outside `allow_transceiver_net` (or \
             `allow_global_relay_net`): a transceiver on an unlisted network, or a spoofer. Add the network \
             if it is yours.",
        ),
        ReturnNoFlow => entry(
            Cause::Benign,
            "A transceiver's reply for a client whose flow has expired or was shed: the \
             tail of ended sessions. Many: the idle timeout is shorter than the media's \
             quiet spells.",
        ),
        ReturnUnknownVip => entry(
            Cause::Misconfiguration,
            "A reply naming a VIP this relay does not serve: a transceiver advertising \
             another relay's VIP (`--advertise`). Align the transceivers' `--advertise` \
             with the relays' `--vip`.",
        ),
        ReturnWrongSource => entry(
            Cause::Hostile,
            "A reply for a flow from a transceiver other than the flow's: spoofed from \
             inside, or a session moved between transceivers. Investigate the source.",
        ),
        SessionEnded => entry(
            Cause::Benign,
            "A transceiver said a flow's session ended and the flow was freed at once: \
             one per ended session. Not a loss: the notice carries no datagram.",
        ),
        SessionEndNoFlow => entry(
            Cause::Benign,
            "A session-ended notice for a flow this worker does not hold: it had already \
             gone idle or been shed, or another worker holds it (relay-afxdp with several \
             queues; relay-mio when a session's paths reached different workers) and it \
             ages out as before. Nothing to do.",
        ),
        FrameWrongTransport => entry(
            Cause::Fault,
            "A frame's transport bit disagrees with the flow (UDP against TCP), or names TCP \
             where none is served: a transceiver and relay of different versions, or \
             `--advertise-tcp` without `--tcp-vip` on the relay.",
        ),
        TcpSendBufferFull => entry(
            Cause::Benign,
            "An ICE-TCP client reads too slowly: its messages are dropped as a network \
             would drop UDP. A few: bad client links. Many: look at the clients' networks.",
        ),
        SendFailed => entry(
            Cause::Fault,
            "The kernel refused a send (buffer full, unreachable). Bursts: raise the \
             socket buffers (`net.core.wmem_max`); steady: a route or neighbour problem on \
             the host.",
        ),
        TxBacklogFull => entry(
            Cause::Overload,
            "AF_XDP: more frames queued for sending than `--tx-backlog`: the NIC or the \
             kernel's copy path cannot keep up. Use zero-copy, or spread the load over \
             more queues.",
        ),
        TooLarge => entry(
            Cause::Hostile,
            "A datagram too large to frame within the buffers' MTU: WebRTC media is far \
             smaller, so these are floods or jumbo probes. Nothing to do.",
        ),
        NeighbourUnresolved => entry(
            Cause::Benign,
            "AF_XDP: the next hop's MAC is not known yet; the kernel is asked to resolve \
             it. A few after a start or a transceiver move; steady: the next hop does not \
             answer ARP/NDP.",
        ),
        NotForRelay => entry(
            Cause::Misconfiguration,
            "A steered frame for neither a VIP nor the worker's internal address: the XDP \
             steering map and the relay's addresses disagree. Restart the relay; report it \
             if it persists.",
        ),
    }
}

/// The runbook entry for a route-cache error (`ufrag_relay_cache_errors_total{reason}`).
/// Forwarding never waits on the cache: an error costs a restarted relay its flows until
/// their next STUN check, nothing else.
pub const fn cache_error(reason: CacheError) -> Entry {
    use CacheError::*;
    match reason {
        RequestQueueFull => entry(
            Cause::Overload,
            "New flows and refreshes arrive faster than Redis answers: the queue to the \
             cache thread is full. Look at Redis latency (`redis-cli --latency`) and CPU; \
             with a cluster, at the slowest shard.",
        ),
        Unreachable => entry(
            Cause::Misconfiguration,
            "The relay is not connected to Redis: it is down, unreachable, or refuses the \
             relay's password, client certificate or CA (the relay's log says which, once \
             per outage). Check Redis, `redis_url`, the password and TLS files, and the \
             network policy.",
        ),
        Timeout => entry(
            Cause::Overload,
            "Redis took longer than 250 ms to answer a pipeline: overloaded, swapping, or \
             a slow network to it. The relay reconnects and backs off.",
        ),
        CommandFailed => entry(
            Cause::Fault,
            "Redis answered with an error or the connection broke mid-pipeline: a restart, \
             a failover, `maxmemory` reached with a policy that refuses writes, or an ACL \
             that forbids GET/SET on `ufrag-relay:flow:*`.",
        ),
        AnswerQueueFull => entry(
            Cause::Overload,
            "A worker did not take its lookup answers in time (its answer queue was full): \
             the worker is saturated. Check its CPU and `ufrag_relay_ready`.",
        ),
        RouteNotAllowed => entry(
            Cause::Misconfiguration,
            "A cached route leads to a next hop outside today's allowed destinations: \
             Redis holds routes from an older configuration (a transceiver network that \
             was removed). They expire with their TTL; the flows resume at their next \
             STUN check.",
        ),
        Unauthenticated => entry(
            Cause::Hostile,
            "A cached route whose MAC does not verify under this relay's hint keys: \
             something that can write to Redis but holds no hint key tried to point \
             flows elsewhere (lock Redis down: a password and a policy admitting only \
             the relays), or relays with different hint keys share one Redis. A few \
             after a key rotation retired the previous key are benign.",
        ),
    }
}

/// The runbook entry for an ICE-TCP close (`ufrag_relay_tcp_connections_closed_total`).
pub const fn tcp_close(reason: TcpCloseReason) -> Entry {
    use TcpCloseReason::*;
    match reason {
        PeerClosed | IdleTimeout | FlowEnded => entry(
            Cause::Benign,
            "The normal end of an ICE-TCP connection. Nothing to do.",
        ),
        Reset => entry(
            Cause::Benign,
            "A reset or broken pipe: clients on lossy networks, or leaving abruptly. Many \
             at once: a middlebox on the path.",
        ),
        HandshakeTimeout => entry(
            Cause::Hostile,
            "A connection that never sent an authentic Binding Request in \
             `tcp_handshake_timeout`: port scanners and slow-loris. Nothing to do.",
        ),
        FirstMessageRefused => entry(
            Cause::Hostile,
            "The first message was not an admitted Binding Request (its drop reason is \
             counted too: look there).",
        ),
        MessageTooLarge => entry(
            Cause::Hostile,
            "A length prefix above any message the relay carries: not ICE-TCP. Nothing to \
             do.",
        ),
        WorkerLimit => entry(
            Cause::Overload,
            "A worker holds `tcp_connections_per_worker` connections: at capacity, or \
             held open by an attacker. Raise the cap or add relays.",
        ),
        PrefixLimit | PrefixRate => entry(
            Cause::Hostile,
            "One source prefix holds or opens too many connections: bounded by design. \
             Real clients behind one NAT can hit it: raise `tcp_connections_per_prefix` or \
             `tcp_accepts_per_prefix`.",
        ),
        WorkerRate => entry(
            Cause::Overload,
            "A worker spent its rate of new connections (`tcp_accepts_per_worker`): a \
             surge or a flood.",
        ),
        Stopping => entry(
            Cause::Benign,
            "The relay stopped (drain or restart). Nothing to do.",
        ),
    }
}
