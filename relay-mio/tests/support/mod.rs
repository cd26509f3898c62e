//! What the worker-level tests share: a hint key, a forwarding policy and a worker spec
//! with one VIP and one internal socket; each test changes only what it is about.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use ufrag_common::config::{PollMode, TcpPolicy};
use ufrag_common::forward::ForwardPolicy;
use ufrag_common::hint::{HintKey, HintKeys};
use ufrag_relay_mio::worker::WorkerSpec;

/// The hint key every test signs its Binding Requests with (id 1, bytes 0..32).
pub fn keys() -> HintKeys {
    let secret: Vec<u8> = (0u8..32).collect();
    HintKeys::new(HintKey::new(1, &secret).unwrap(), None).unwrap()
}

/// Forwarding on `vip` to transceivers in `transceivers`, signed by [`keys`]; no route
/// cache, no global tier, default admission.
pub fn policy(vip: SocketAddr, transceivers: &[&str]) -> ForwardPolicy {
    ForwardPolicy {
        vips: vec![vip],
        allowed_transceiver_networks: transceivers.iter().map(|n| n.parse().unwrap()).collect(),
        global_relay_networks: vec![],
        cluster_id: 0,
        clusters: Default::default(),
        hint_keys: keys(),
        route_cache: false,
        admission: Default::default(),
        shared_replays: None,
    }
}

/// Worker 0 on CPU 0 serving `policy` on its VIP and `internal`: 1,024 flows, 30 s idle,
/// sleeping in epoll, no ICE-TCP, no bundles.
pub fn spec(internal: SocketAddr, policy: ForwardPolicy) -> WorkerSpec {
    WorkerSpec {
        index: 0,
        cpu: 0,
        vips: policy.vips.clone(),
        internal,
        policy,
        flows: 1024,
        idle_timeout: Duration::from_secs(30),
        poll_mode: PollMode::Wakeup,
        tcp: TcpPolicy::default(),
        tcp_metrics: None,
        bundles: Default::default(),
    }
}
