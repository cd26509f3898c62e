//! The runbook: what an operator does about each reason the transceiver counts (a drop,
//! a refused signaling request, a session's end, a model message lost or refused), in
//! exhaustive matches so a new reason does not build without its entry; and
//! [`render`], which writes `docs/runbook.md` from these, the relay's
//! (`ufrag_common::runbook`) and every reason's own documentation. A test fails when the
//! committed page differs from what the code says.

use ufrag_common::runbook::{Cause, Entry};

use crate::metrics::{DropReason, EndReason, HttpRefusal, ModelDrop};
use crate::model_wire::DecodeError;

const fn entry(cause: Cause, action: &'static str) -> Entry {
    Entry { cause, action }
}

const FRAME_MALFORMED: Entry = entry(
    Cause::Fault,
    "A datagram on the worker's port that is not a valid frame from a relay. Relays only \
     send valid frames: look for another sender on the port, or a relay of another \
     version.",
);

/// The runbook entry for a transceiver drop (`ufrag_transceiver_drops_total{reason}`).
pub const fn drop(reason: DropReason) -> Entry {
    use DropReason::*;
    match reason {
        FrameSourceNotAllowed => entry(
            Cause::Misconfiguration,
            "A frame from outside `--allow-relay-net`: a relay on a network the \
             transceiver was not told about (hostNetwork relays send from the nodes' \
             addresses). Add the network if it is yours.",
        ),
        FrameTooShort | FrameNotAFrame | FrameUnknownVersion | FrameReservedBits
        | FrameEmptyPayload => FRAME_MALFORMED,
        NoSession => entry(
            Cause::Benign,
            "Traffic for a session that has ended (the tail of a call), or a check for a \
             ufrag this worker never minted. A steady rise with no ended sessions: relays \
             routing to the wrong worker (check `--bind` against the hints).",
        ),
        PathBudget | PathTaken => entry(
            Cause::Hostile,
            "A check from a new client address beyond what one session may adopt, or for \
             a path another session holds: path hijacking attempts, bounded by design. A \
             few from clients roaming between networks.",
        ),
        Truncated => entry(
            Cause::Hostile,
            "A datagram larger than the receive buffer: not WebRTC media. Nothing to do.",
        ),
        Unparsable | RtcRefused => entry(
            Cause::Benign,
            "str0m could not use a datagram: late packets of a closed DTLS association, or \
             a broken client. Many from one session: look at that client.",
        ),
        NoRelay => entry(
            Cause::Benign,
            "Media for a session no relay has carried yet (the client has not connected): \
             the first answers of a session racing its first check. Steady: clients that \
             never reach the relay (UDP blocked; see ICE-TCP).",
        ),
        TooLarge => entry(
            Cause::Fault,
            "An outgoing datagram too large to frame: a model or DTLS record beyond the \
             internal MTU. Report it with the session's log lines.",
        ),
        SendFailed => entry(
            Cause::Fault,
            "The socket refused a send (buffer full, unreachable relay). Bursts: raise \
             `net.core.wmem_max`; steady: the route to the relays.",
        ),
    }
}

/// The runbook entry for a signaling refusal (`ufrag_transceiver_http_refusals_total`).
pub const fn http_refusal(reason: HttpRefusal) -> Entry {
    use HttpRefusal::*;
    match reason {
        ConnectionCap => entry(
            Cause::Overload,
            "Every signaling connection slot was taken (`--http-max-connections`): a \
             flood, or more real clients than one transceiver holds. Add transceivers or \
             raise the cap.",
        ),
        AddressConnectionCap | RequestRate | PostRate => entry(
            Cause::Hostile,
            "One client address spent its share (connections, requests or session POSTs): \
             a flood bounded by design. Many real clients behind one address (a corporate \
             NAT, an Ingress without the client's address): raise the per-IP limits or \
             pass the real address.",
        ),
        BodyTooLarge => entry(
            Cause::Hostile,
            "A body larger than any SDP offer: nothing to do.",
        ),
        BodyTooSlow | BadHeaders => entry(
            Cause::Hostile,
            "A request that trickled or sent oversized headers: slow-loris and scanners, \
             closed by design.",
        ),
    }
}

/// The runbook entry for a session's end (`ufrag_transceiver_sessions_ended_total`).
pub const fn session_end(reason: EndReason) -> Entry {
    use EndReason::*;
    match reason {
        Shutdown | Deleted | Closed | ModelEnded => entry(
            Cause::Benign,
            "A normal end: the transceiver stopped, the client or the model ended it.",
        ),
        Idle | IceDisconnected => entry(
            Cause::Benign,
            "The client went away without saying so (a closed tab, a lost network). A \
             jump across many sessions at once: a relay or the path to it failed.",
        ),
        ConnectTimeout => entry(
            Cause::Misconfiguration,
            "A session answered but never connected: the client cannot reach the relay's \
             VIP (UDP blocked, a wrong `--advertise`), or the relay drops its checks (see \
             the relay's `hint_*` and `stun_bad_integrity` drops). A rising share is the \
             first sign of a broken path.",
        ),
        RtcError => entry(
            Cause::Fault,
            "str0m reported an error (DTLS, SRTP). Look at the session's log line for the \
             error.",
        ),
    }
}

/// The runbook entry for a model message not delivered
/// (`ufrag_transceiver_model_dropped_total`).
pub const fn model_drop(reason: ModelDrop) -> Entry {
    use ModelDrop::*;
    match reason {
        Disconnected => entry(
            Cause::Fault,
            "The model backend was not connected: sessions hear nothing. See \
             `ufrag_transceiver_model_connected` and the bridge's reconnect log lines.",
        ),
        QueueFull => entry(
            Cause::Overload,
            "The backend reads more slowly than sessions speak: the oldest audio goes. \
             Scale the backend, or give each transceiver fewer sessions.",
        ),
        BackendFlood => entry(
            Cause::Fault,
            "The backend sends faster than the worker takes: its newest messages go. A \
             backend pacing its audio at 20 ms never does this: look at the backend.",
        ),
    }
}

/// The runbook entry for a refused model message (`ufrag_transceiver_model_errors_total`).
pub const fn model_error(reason: DecodeError) -> Entry {
    entry(
        Cause::Fault,
        match reason {
            DecodeError::NotJson
            | DecodeError::UnknownType
            | DecodeError::BadField
            | DecodeError::BadSession
            | DecodeError::BadReason
            | DecodeError::BadAudio => {
                "The backend does not speak `ufrag-model.v1` as written in \
                 `transceiver::model_wire`: fix the backend; the message was dropped and the \
                 connection kept."
            }
            DecodeError::EventTooLarge | DecodeError::AudioTooLarge => {
                "The backend sent an event or audio frame beyond the protocol's bounds: \
                 split it in the backend."
            }
        },
    )
}

/// One section of the page: a metric, its reasons' labels and docs, and their entries.
fn section(
    out: &mut String,
    title: &str,
    metric: &str,
    reasons: &[(&'static str, &'static str, Entry)],
) {
    out.push_str(&format!("\n## {title}\n\n`{metric}`\n\n"));
    out.push_str("| reason | what it means | cause | what to do |\n|---|---|---|---|\n");
    for (label, doc, entry) in reasons {
        let meaning = doc
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ")
            .replace("[`", "`")
            .replace("`]", "`")
            .replace('|', "\\|");
        out.push_str(&format!(
            "| `{label}` | {meaning} | {} | {} |\n",
            entry.cause.label(),
            entry.action.replace('|', "\\|")
        ));
    }
}

/// `docs/runbook.md`, as the code says it.
pub fn render() -> String {
    use ufrag_common::metrics::{DropReason as RelayDrop, TcpCloseReason};
    use ufrag_common::runbook as relay;
    let mut out = String::from(
        "# Runbook: every reason a count rises\n\n\
         Generated from the code (`ufrag_common::runbook`, `transceiver::runbook` and each \
         reason's documentation) by `UFRAG_WRITE_RUNBOOK=1 cargo test -p transceiver --test \
         runbook`; the test command fails when this page and the code disagree. Causes: \
         **benign** (a steady trickle is normal life), **hostile** (counted and dropped by \
         design: act on a spike), **misconfiguration** (fix a setting), **overload** (a \
         bound was reached: capacity, or an attack that large), **fault** (should not \
         happen: a bug or a failing host).\n",
    );
    section(
        &mut out,
        "Relay: dropped datagrams",
        "ufrag_relay_drops_total{worker, reason}",
        &RelayDrop::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), relay::relay_drop(*r)))
            .collect::<Vec<_>>(),
    );
    section(
        &mut out,
        "Relay: ICE-TCP connections closed",
        "ufrag_relay_tcp_connections_closed_total{worker, reason}",
        &TcpCloseReason::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), relay::tcp_close(*r)))
            .collect::<Vec<_>>(),
    );
    section(
        &mut out,
        "Transceiver: dropped datagrams",
        "ufrag_transceiver_drops_total{reason}",
        &DropReason::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), drop(*r)))
            .collect::<Vec<_>>(),
    );
    section(
        &mut out,
        "Transceiver: signaling refusals",
        "ufrag_transceiver_http_refusals_total{reason}",
        &HttpRefusal::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), http_refusal(*r)))
            .collect::<Vec<_>>(),
    );
    section(
        &mut out,
        "Transceiver: sessions ended",
        "ufrag_transceiver_sessions_ended_total{reason}",
        &EndReason::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), session_end(*r)))
            .collect::<Vec<_>>(),
    );
    section(
        &mut out,
        "Transceiver: model messages not delivered",
        "ufrag_transceiver_model_dropped_total{reason}",
        &ModelDrop::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), model_drop(*r)))
            .collect::<Vec<_>>(),
    );
    section(
        &mut out,
        "Transceiver: model messages refused",
        "ufrag_transceiver_model_errors_total{reason}",
        &DecodeError::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), model_error(*r)))
            .collect::<Vec<_>>(),
    );
    out
}
