//! The runbook: what an operator does about each reason the transceiver counts (a drop,
//! a refused signaling request, a session's end, a model message lost or refused), in
//! exhaustive matches so a new reason does not build without its entry; the alerts
//! ([`ALERTS`]), each rule written once with its entry; [`render`], which writes
//! `docs/runbook.md` from these, the relay's (`ufrag_common::runbook`) and every reason's
//! own documentation; and [`render_alert_rules`], which writes the Prometheus rule file.
//! A test fails when either committed file differs from what the code says.

use ufrag_common::runbook::{Cause, Entry};

use crate::metrics::{DropReason, EndReason, HttpRefusal, ModelDrop};
use crate::session_token::TokenRefusal;
use ufrag_model_protocol::wire::DecodeError;

const fn entry(cause: Cause, action: &'static str) -> Entry {
    Entry { cause, action }
}

const FRAME_MALFORMED: Entry = entry(
    Cause::Fault,
    "A datagram on the worker's port that is not a valid frame from a relay. Relays only \
     send valid frames: look for another sender on the port, or a relay of another \
     version.",
);

/// The runbook entry for a transceiver drop (`ufrag_transceiver_dropped_datagrams_total{reason}`).
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
        | FrameEmptyPayload | FrameBadBundle => FRAME_MALFORMED,
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
        PathHoldFull => entry(
            Cause::Benign,
            "DTLS or media for a client path that has not answered its probe, beyond the 8 \
             datagrams a session holds for it: dropped. Expected from a client that went \
             away (its path lost consent; its session ends at the idle timeout) and from \
             one whose probe answers are lost. Many while sessions live: clients that \
             nominate addresses they do not receive on (forged nominations), or a network \
             that drops the probes (check that clients answer Binding Requests).",
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
        OwnerSessionCap => entry(
            Cause::Hostile,
            "One user (a session token's `sub`) asked for more live sessions than \
             `--max-sessions-per-owner` (4): a token replayed, or a page that opens \
             sessions and never ends them. A user who really needs more tabs: raise it.",
        ),
        AddressConnectionCap | RequestRate | PostRate | UnconnectedCap => entry(
            Cause::Hostile,
            "One client address spent its share (connections, requests, session POSTs or \
             sessions waiting to connect): a flood bounded by design. Many real clients \
             behind one address: a corporate NAT (raise the per-IP limits), or an Ingress \
             whose address signaling sees instead of the client's (list it in \
             `--trusted-proxy`).",
        ),
        OfferLimits => entry(
            Cause::Hostile,
            "An offer with more media sections or candidates than any voice client sends: \
             nothing to do, unless a real client needs more (its 400 names the limit).",
        ),
        BodyTooLarge => entry(
            Cause::Hostile,
            "A body larger than any SDP offer: nothing to do.",
        ),
        BadProxyHeader => entry(
            Cause::Misconfiguration,
            "A trusted proxy's connection did not begin with a PROXY protocol v2 header: \
             the load balancer does not send it (turn v2 on there, e.g. HAProxy \
             `send-proxy-v2`, or drop `--proxy-protocol`; an Ingress sends \
             X-Forwarded-For instead), sends version 1, or a listed address is not that \
             proxy.",
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
/// (`ufrag_transceiver_model_dropped_messages_total`).
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
            "The backend sends faster than the worker takes: its newest messages go. \
             Speech sent ahead of real time waits in the session's playout buffer, but \
             thousands of messages at once are more than that: look at the backend.",
        ),
        PlayoutFull => entry(
            Cause::Fault,
            "The backend sent more speech ahead of playback than `--playout-buffer` holds \
             (10 s): the newest frames were dropped, so the user hears a cut. Send speech \
             at most that far ahead (an `audio.mark` says how far playback has come), or \
             raise the buffer.",
        ),
        MarksFull => entry(
            Cause::Fault,
            "The backend set more than 64 marks ahead of playback: the newest was dropped \
             and will never be reported. Mark sentences, not frames.",
        ),
        UnknownSession => entry(
            Cause::Fault,
            "A backend speaking PCM named a session it was not told of, or one that had \
             ended: its audio, mark or clear was dropped. A few at a session's end are a \
             race; a steady rate is a backend keeping sessions it should have let go.",
        ),
        CodecError => entry(
            Cause::Fault,
            "A backend speaking PCM: libopus could not decode a client's audio packet (a \
             broken or hostile client), or could not encode the backend's PCM. The frame \
             was dropped; the session lives. A steady rate from one client is that \
             client's doing.",
        ),
    }
}

/// The runbook entry for a refused model message (`ufrag_transceiver_model_refused_messages_total`).
pub const fn model_error(reason: DecodeError) -> Entry {
    entry(
        Cause::Fault,
        match reason {
            DecodeError::NotJson
            | DecodeError::UnknownType
            | DecodeError::BadField
            | DecodeError::BadSession
            | DecodeError::BadReason
            | DecodeError::BadAudio
            | DecodeError::BadMark
            | DecodeError::BadPcm
            | DecodeError::UnknownAudioFormat => {
                "The backend does not speak `ufrag-model.v1` as written in \
                 docs/model-protocol.md: fix the backend; the message was dropped and the \
                 connection kept."
            }
            DecodeError::EventTooLarge | DecodeError::AudioTooLarge => {
                "The backend sent an event or audio frame beyond the protocol's bounds: \
                 split it in the backend."
            }
        },
    )
}

/// The runbook entry for a refused session token
/// (`ufrag_transceiver_session_token_refusals_total`).
pub const fn session_token_refusal(reason: TokenRefusal) -> Entry {
    use TokenRefusal::*;
    match reason {
        Missing => entry(
            Cause::Misconfiguration,
            "A sign-up without `Authorization: Bearer`: the page did not get (or pass) a \
             token from the app's server. Many from one address: a scanner.",
        ),
        Malformed => entry(
            Cause::Hostile,
            "A credential that is not a JWT (three base64url parts with JSON claims and an \
             integer `exp`): a scanner, or, where the fleet's bearer token is also set, a \
             server presenting a wrong bearer token (it lands here). Many from one of your \
             own servers: check its UFRAG_TRANSCEIVER_TOKEN.",
        ),
        BadSignature => entry(
            Cause::Hostile,
            "A token this transceiver's key did not sign: forged, or minted with another \
             key or algorithm. A rise right after a key change: the app's server and the \
             transceivers disagree on the key (`--session-token-key-file`).",
        ),
        Expired | NotYetValid => entry(
            Cause::Benign,
            "A token used outside its life (the page waited, or retried late). Many: the \
             clocks of the app's server and the transceivers disagree by more than 10 s \
             (check NTP), or tokens are minted too long before use.",
        ),
        LifetimeTooLong => entry(
            Cause::Misconfiguration,
            "The app's server mints tokens that live longer than \
             `--session-token-max-lifetime`: shorten their `exp`.",
        ),
        BadClaims => entry(
            Cause::Misconfiguration,
            "A claim over its limit (`sub` 256 bytes, `route` 64, `metadata` a 4 KiB \
             object, `jti` 128), or no `jti` with single use on: fix what the app's server \
             puts in tokens.",
        ),
        WrongAudience => entry(
            Cause::Misconfiguration,
            "A token minted for another service: the app's server must set `aud` to this \
             fleet's `--session-token-audience`.",
        ),
        Reused => entry(
            Cause::Hostile,
            "A single-use token presented again (a replay, or a page that retried a POST \
             that had succeeded, or that retried after a 503 `worker did not answer`). \
             Pages should mint a new token per attempt.",
        ),
        ReplayMemoryFull => entry(
            Cause::Overload,
            "More unexpired single-use tokens than the transceiver remembers (262,144): \
             sign-ups beyond about 437 a second at a 10-minute lifetime. Shorten the \
             tokens' lifetime, or spread sign-ups over more transceivers.",
        ),
    }
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
    use ufrag_common::reasons::{CacheError, DropReason as RelayDrop, TcpCloseReason};
    use ufrag_common::runbook as relay;
    let mut out = String::from(
        "# Runbook: every reason a count rises\n\n\
         Generated from the code (`ufrag_common::runbook`, `ufrag_transceiver::runbook` and each \
         reason's documentation) by `UFRAG_WRITE_RUNBOOK=1 cargo test -p ufrag-transceiver --test \
         runbook`; the test command fails when this page and the code disagree. Causes: \
         **benign** (a steady trickle is normal life), **hostile** (counted and dropped by \
         design: act on a spike), **misconfiguration** (fix a setting), **overload** (a \
         bound was reached: capacity, or an attack that large), **fault** (should not \
         happen: a bug or a failing host).\n",
    );
    section(
        &mut out,
        "Relay: dropped datagrams",
        "ufrag_relay_dropped_datagrams_total{worker, reason}",
        &RelayDrop::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), relay::relay_drop(*r)))
            .collect::<Vec<_>>(),
    );
    section(
        &mut out,
        "Relay: route-cache errors",
        "ufrag_relay_cache_errors_total{worker, reason}",
        &CacheError::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), relay::cache_error(*r)))
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
        "ufrag_transceiver_dropped_datagrams_total{reason}",
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
        "Transceiver: session tokens refused",
        "ufrag_transceiver_session_token_refusals_total{reason}",
        &TokenRefusal::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), session_token_refusal(*r)))
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
        "ufrag_transceiver_model_dropped_messages_total{reason}",
        &ModelDrop::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), model_drop(*r)))
            .collect::<Vec<_>>(),
    );
    section(
        &mut out,
        "Transceiver: model messages refused",
        "ufrag_transceiver_model_refused_messages_total{reason}",
        &DecodeError::ALL
            .iter()
            .map(|r| (r.label(), r.doc(), model_error(*r)))
            .collect::<Vec<_>>(),
    );
    alerts_section(&mut out);
    out
}

/// One alert: its rule (for Prometheus) and its runbook entry, written once so the two
/// cannot drift. [`render_alert_rules`] writes `deploy/monitoring/alerts.yaml`.
#[derive(Clone, Copy, Debug)]
pub struct Alert {
    /// The alert's name (its runbook anchor is the name in lower case).
    pub name: &'static str,
    /// The PromQL expression: a series per firing instance (and reason).
    pub expr: &'static str,
    /// How long it holds before it fires (`0m`: at once).
    pub hold: &'static str,
    /// `page` (someone now) or `ticket` (someone today).
    pub severity: &'static str,
    /// One line: what is wrong.
    pub summary: &'static str,
    /// What an operator does.
    pub action: &'static str,
}

/// Every alert, in the order the page lists them.
pub const ALERTS: &[Alert] = &[
    Alert {
        name: "UfragRelayNotReady",
        expr: "ufrag_relay_ready == 0",
        hold: "1m",
        severity: "page",
        summary: "A relay answers /readyz with 503: it takes no new flows.",
        action: "A relay is not ready while it starts, drains (SIGTERM) or has lost a \
                 worker. Longer than a minute outside a rollout: look for \
                 UfragRelayWorkerFailed and the relay's log; restart the pod. Its existing \
                 flows keep forwarding while it drains.",
    },
    Alert {
        name: "UfragRelayWorkerFailed",
        expr: "ufrag_relay_worker_failures_total > 0",
        hold: "0m",
        severity: "page",
        summary: "A relay worker stopped (a panic or an I/O error); its flows are lost.",
        action: "A dead worker stays dead until the process restarts, so this fires until \
                 then; readiness is off on that relay. Save its log (the worker's error or \
                 panic is there), restart it, and report the panic: it is a bug.",
    },
    Alert {
        name: "UfragTransceiverNotReady",
        expr: "ufrag_transceiver_ready == 0",
        hold: "1m",
        severity: "page",
        summary: "A transceiver answers /readyz with 503: it takes no new sessions.",
        action: "Not ready while it starts or drains, when a worker failed, or while its \
                 model backend is not connected (`ufrag_transceiver_model_connections`). \
                 Check the model backend first, then the log.",
    },
    Alert {
        name: "UfragTransceiverWorkerFailed",
        expr: "ufrag_transceiver_worker_failures_total > 0",
        hold: "0m",
        severity: "page",
        summary: "A transceiver worker stopped; its sessions ended.",
        action: "Save the log (the worker's error or panic), restart the pod, report the \
                 panic.",
    },
    Alert {
        name: "UfragHintKeyReloadRefused",
        expr: "increase(ufrag_relay_hint_key_reloads_total{result=\"refused\"}[15m]) > 0 \
               or increase(ufrag_transceiver_hint_key_reloads_total{result=\"refused\"}[15m]) > 0",
        hold: "0m",
        severity: "ticket",
        summary: "A changed hint key file was refused; the keys in use stay.",
        action: "The file is readable by others or by another group, or does not parse. \
                 Fix it (mode 0600, or 0440 with the pod's fsGroup; `<id>:<hex>` per line) \
                 before the rotation goes on: a relay and a transceiver with different \
                 keys refuse each other's sessions (`hint_unknown_key`).",
    },
    Alert {
        name: "UfragRouteCacheErrors",
        expr: "sum by (instance, reason) (rate(ufrag_relay_cache_errors_total[5m])) > 1",
        hold: "5m",
        severity: "ticket",
        summary: "A relay's route cache fails: Redis is down, slow or refuses it (the \
                  reason label says which; see Relay: route-cache errors).",
        action: "Forwarding is not affected; a relay restarted now loses its flows until \
                 their next STUN check. The reason's entry above says where to look: \
                 Redis (up, memory, `maxmemory`), the password and TLS files, the network \
                 policy.",
    },
    Alert {
        name: "UfragRelayTableFull",
        expr: "sum by (instance) (rate(ufrag_relay_dropped_datagrams_total{reason=\"table_full\"}[5m])) > 0",
        hold: "2m",
        severity: "page",
        summary: "A relay's flow table is full: new sessions through it fail.",
        action: "See `table_full` in the drops below: add relays or raise \
                 `flows_per_worker`; if `flows_active` jumped without more sessions, it is \
                 an attack the admission limits did not bound: look at the drops by reason.",
    },
    Alert {
        name: "UfragRelayDropSpike",
        expr: "sum by (instance, reason) (rate(ufrag_relay_dropped_datagrams_total[5m])) > 100 \
               and sum by (instance, reason) (rate(ufrag_relay_dropped_datagrams_total[5m])) \
               > 10 * (sum by (instance, reason) (rate(ufrag_relay_dropped_datagrams_total[1h] offset 10m)) \
               or sum by (instance, reason) (rate(ufrag_relay_dropped_datagrams_total[5m])) * 0)",
        hold: "5m",
        severity: "ticket",
        summary: "A relay drops ten times more for one reason than in the hour before \
                  (and over 100 a second).",
        action: "Look the reason up in the relay's drops below: hostile reasons are an \
                 attack the limits bound (block its source upstream if it costs \
                 bandwidth); misconfiguration and fault reasons are yours to fix.",
    },
    Alert {
        name: "UfragTransceiverDropSpike",
        expr: "sum by (instance, reason) (rate(ufrag_transceiver_dropped_datagrams_total[5m])) > 100 \
               and sum by (instance, reason) (rate(ufrag_transceiver_dropped_datagrams_total[5m])) \
               > 10 * (sum by (instance, reason) (rate(ufrag_transceiver_dropped_datagrams_total[1h] offset 10m)) \
               or sum by (instance, reason) (rate(ufrag_transceiver_dropped_datagrams_total[5m])) * 0)",
        hold: "5m",
        severity: "ticket",
        summary: "A transceiver drops ten times more for one reason than in the hour \
                  before (and over 100 a second).",
        action: "Look the reason up in the transceiver's drops below.",
    },
    Alert {
        name: "UfragSignalingErrors",
        expr: "sum by (instance) (rate(ufrag_transceiver_http_responses_total{code=\"5xx\"}[5m])) \
               > 0.05 * sum by (instance) (rate(ufrag_transceiver_http_responses_total[5m]))",
        hold: "5m",
        severity: "page",
        summary: "Over 5 % of a transceiver's signaling answers are 5xx: sessions fail to \
                  start.",
        action: "503: the transceiver is full (`max_sessions_per_worker`) or draining: add \
                 transceivers. 500: a handler failed: save the log and report it.",
    },
    Alert {
        name: "UfragSessionsLosingAudio",
        expr: "sum by (instance) (rate(ufrag_transceiver_session_loss_in_ratio_count[10m])) > 0 \
               and (1 - sum by (instance) (rate(ufrag_transceiver_session_loss_in_ratio_bucket{le=\"0.05\"}[10m])) \
               / sum by (instance) (rate(ufrag_transceiver_session_loss_in_ratio_count[10m]))) > 0.1",
        hold: "10m",
        severity: "ticket",
        summary: "Over a tenth of a transceiver's session reports show more than 5 % of the \
                  users' audio lost on its way in: those sessions sound bad to the model.",
        action: "The loss is on the way from the users to the transceiver. Lost at the \
                 relays? Compare `ufrag_relay_dropped_datagrams_total` and the relays' \
                 `Udp: RcvbufErrors` (netstat -su) over the same window. Lost on the internal \
                 leg? The transceiver's own drops. Neither: the users' networks (a region, \
                 an ISP, mobile clients), which `session.stats` tells the model per session.",
    },
];

/// Where the generated rules point each alert's `runbook_url` (before its `#anchor`):
/// `docs/runbook.md` as published. `deploy/monitoring`'s kustomization replaces it with its
/// one `runbook-base` setting, so a team points the links at its own copy (its fork on its
/// Git host, its wiki) in one place.
pub const RUNBOOK_BASE: &str = "https://example.invalid/ufrag-relay/docs/runbook.md";

/// An alert's runbook link: [`RUNBOOK_BASE`] and the anchor of its section.
pub fn runbook_url(alert: &Alert) -> String {
    format!("{RUNBOOK_BASE}#{}", alert.name.to_lowercase())
}

/// `deploy/monitoring/alerts.yaml`: the Prometheus rule file of [`ALERTS`], each with its
/// severity, summary and runbook link.
pub fn render_alert_rules() -> String {
    let mut out = String::from(
        "# Generated from ufrag_transceiver::runbook::ALERTS by `UFRAG_WRITE_RUNBOOK=1 cargo test -p \
         ufrag-transceiver --test runbook`;\n# tested by alerts.test.yaml (`promtool test rules`). Each \
         runbook_url links a section of\n# docs/runbook.md under one base: point it at your copy \
         (the Operator's prometheus-rule.yaml\n# takes it from `runbook-base` in \
         deploy/monitoring/kustomization.yaml).\ngroups:\n  - name: ufrag-relay\n    rules:\n",
    );
    for alert in ALERTS {
        out.push_str(&format!(
            "      - alert: {}\n        expr: {}\n        for: {}\n        labels:\n          \
             severity: {}\n        annotations:\n          summary: {}\n          \
             runbook_url: {}\n",
            alert.name,
            yaml_string(alert.expr),
            alert.hold,
            alert.severity,
            yaml_string(alert.summary),
            runbook_url(alert),
        ));
    }
    out
}

/// `deploy/monitoring/prometheus-rule.yaml`: the same rule groups as
/// [`render_alert_rules`], as a Prometheus Operator `PrometheusRule`.
pub fn render_prometheus_rule() -> String {
    let rules = render_alert_rules();
    let mut out = String::from(
        "# Generated with alerts.yaml (the same rules) from ufrag_transceiver::runbook::ALERTS, for \
         the Prometheus Operator.\napiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\n\
         metadata:\n  name: ufrag-relay\n  namespace: ufrag\n  labels:\n    \
         app.kubernetes.io/part-of: ufrag-relay\nspec:\n",
    );
    for line in rules.lines().filter(|l| !l.starts_with('#')) {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

/// `text` as a double-quoted YAML string.
fn yaml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The page's section on the alerts: one heading (the runbook link's anchor) each.
fn alerts_section(out: &mut String) {
    out.push_str(
        "\n## Alerts\n\n`deploy/monitoring/alerts.yaml`, generated from the same list; each \
         alert's `runbook_url` points here.\n",
    );
    for alert in ALERTS {
        let when = match alert.hold {
            "0m" => "fires at once".to_string(),
            hold => format!("fires once it has held for {hold}"),
        };
        out.push_str(&format!(
            "\n### {}\n\n{} Severity **{}**; {when}.\n\n{}\n\n```promql\n{}\n```\n",
            alert.name, alert.summary, alert.severity, alert.action, alert.expr
        ));
    }
}
