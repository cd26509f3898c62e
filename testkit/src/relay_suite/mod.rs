//! The relay behaviour suite, written once against the flags and metrics every relay
//! backend shares, and run by each backend's own test target for each place it runs in:
//! relay-mio on loopback and in the netns testbed, relay-afxdp in the testbed in skb and
//! native XDP mode.
//!
//! A backend's known limit is stated beside the case it affects ([`CASES`]); such a case
//! is reported as ignored, with the reason printed, never as passed. Testbed cases need
//! root; without it they are reported as ignored the same loud way.
//!
//! A backend's test target is a `harness = false` test whose `main` is one call:
//! `ufrag_testkit::relay_suite::run(&[Backend::mio(env!("CARGO_BIN_EXE_relay-mio"), Place::Loopback), …])`.

pub mod admission;
pub mod behaviour;
pub mod harness;
pub mod route_cache;

use std::path::PathBuf;
use std::process::ExitCode;

use libtest_mimic::{Arguments, Trial};

use harness::{Net, RelayProcess, RelaySetup};

/// Where the suite's hosts live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Unique 127.x.y.z addresses: no root needed, tests run in parallel.
    Loopback,
    /// A fresh netns testbed per test (root).
    Testbed,
}

/// The XDP attach mode of a backend that reads packets through XDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// Generic XDP (`xdpgeneric`): after the kernel has built an skb.
    Skb,
    /// Native XDP in the driver (veth supports it).
    Native,
}

impl XdpMode {
    /// The value of the relay's `--xdp-mode` flag.
    pub fn flag(self) -> &'static str {
        match self {
            XdpMode::Skb => "skb",
            XdpMode::Native => "native",
        }
    }
}

/// A relay binary under test, and where it runs.
#[derive(Clone, Debug)]
pub struct Backend {
    pub binary: PathBuf,
    pub place: Place,
    /// `Some` for relay-afxdp: it needs an interface (the testbed's veth) and a mode.
    pub xdp: Option<XdpMode>,
    /// Flags every relay of this backend gets (before each test's own).
    pub flags: Vec<String>,
    /// The trial-name prefix, when the place and mode do not name it alone.
    pub tag: Option<&'static str>,
}

impl Backend {
    /// relay-mio (or any binary without XDP flags) at `place`.
    pub fn mio(binary: &str, place: Place) -> Backend {
        Backend {
            binary: binary.into(),
            place,
            xdp: None,
            flags: Vec::new(),
            tag: None,
        }
    }

    /// relay-afxdp in the testbed, attached in `mode`.
    pub fn afxdp(binary: &str, mode: XdpMode) -> Backend {
        Backend {
            binary: binary.into(),
            place: Place::Testbed,
            xdp: Some(mode),
            flags: Vec::new(),
            tag: None,
        }
    }

    /// The same backend with `flags` on every relay, its trials named `tag::…`.
    pub fn with_flags(mut self, tag: &'static str, flags: &[&str]) -> Backend {
        self.flags = flags.iter().map(|f| f.to_string()).collect();
        self.tag = Some(tag);
        self
    }

    /// The trial-name prefix: `loopback`, `testbed`, `skb`, `native`, or the tag.
    pub fn label(&self) -> &'static str {
        if let Some(tag) = self.tag {
            return tag;
        }
        match (self.place, self.xdp) {
            (Place::Loopback, _) => "loopback",
            (Place::Testbed, None) => "testbed",
            (Place::Testbed, Some(mode)) => mode.flag(),
        }
    }

    /// A network for one test, with one RX queue per relay interface.
    pub fn net(&self) -> Net {
        Net::new(self, 1)
    }

    /// A network for one test, with `queues` RX queues per relay interface (testbed).
    pub fn net_with_queues(&self, queues: u32) -> Net {
        Net::new(self, queues)
    }

    /// The default relay setup on a fresh network.
    pub fn setup(&self) -> RelaySetup {
        RelaySetup::on(self.net())
    }

    /// Starts a relay with the default setup on a fresh network.
    pub fn start(&self) -> RelayProcess {
        RelayProcess::start(&self.setup())
    }

    /// Flags the binary needs besides the shared ones when it runs outside the testbed
    /// (config errors, `--help`): relay-afxdp needs an interface, and `lo` will do.
    pub fn outside_testbed_args(&self) -> Vec<String> {
        match self.xdp {
            Some(_) => vec!["--interface".into(), "lo".into()],
            None => vec![],
        }
    }
}

/// A limit of some backends that makes a case meaningless for them.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    /// Which backends have it.
    pub applies: fn(&Backend) -> bool,
    /// Why, in a sentence the report prints.
    pub reason: &'static str,
}

/// One case of the suite.
#[derive(Debug)]
pub struct Case {
    pub name: &'static str,
    pub run: fn(&Backend),
    /// A backend limit stated beside the case it affects.
    pub limit: Option<Limit>,
}

const fn case(name: &'static str, run: fn(&Backend)) -> Case {
    Case {
        name,
        run,
        limit: None,
    }
}

/// Generic XDP on veth records every frame as received on RX queue 0, so only queue 0's
/// AF_XDP socket gets traffic; native mode spreads flows over queues.
const GENERIC_XDP_SEES_ONE_QUEUE: Limit = Limit {
    applies: |b| b.xdp == Some(XdpMode::Skb),
    reason: "generic XDP on veth reports RX queue 0 for every frame, so a second queue's \
             AF_XDP socket gets nothing (the case runs in native mode)",
};

/// Every case, in the order the report lists them.
pub const CASES: &[Case] = &[
    case(
        "a_valid_binding_request_creates_a_flow_that_dtls_and_rtp_reuse",
        behaviour::a_valid_binding_request_creates_a_flow_that_dtls_and_rtp_reuse,
    ),
    case(
        "the_return_path_reaches_the_right_client_from_the_vip_it_used",
        behaviour::the_return_path_reaches_the_right_client_from_the_vip_it_used,
    ),
    case(
        "each_bad_first_packet_is_dropped_counted_and_not_forwarded",
        behaviour::each_bad_first_packet_is_dropped_counted_and_not_forwarded,
    ),
    case(
        "non_stun_without_a_flow_is_never_forwarded",
        behaviour::non_stun_without_a_flow_is_never_forwarded,
    ),
    case(
        "return_frames_without_a_flow_or_from_elsewhere_are_dropped",
        behaviour::return_frames_without_a_flow_or_from_elsewhere_are_dropped,
    ),
    case(
        "frames_from_outside_the_transceiver_networks_are_dropped_before_parsing",
        behaviour::frames_from_outside_the_transceiver_networks_are_dropped_before_parsing,
    ),
    case(
        "idle_flows_expire_and_then_need_stun_again",
        behaviour::idle_flows_expire_and_then_need_stun_again,
    ),
    case(
        "a_full_table_refuses_new_flows_while_old_ones_keep_forwarding",
        behaviour::a_full_table_refuses_new_flows_while_old_ones_keep_forwarding,
    ),
    case(
        "a_backlog_beyond_one_turn_is_drained_without_new_traffic",
        behaviour::a_backlog_beyond_one_turn_is_drained_without_new_traffic,
    ),
    Case {
        name: "two_workers_are_both_used_and_each_pinned_to_its_own_core",
        run: behaviour::two_workers_are_both_used_and_each_pinned_to_its_own_core,
        limit: Some(GENERIC_XDP_SEES_ONE_QUEUE),
    },
    Case {
        name: "two_workers_return_every_reply_whichever_queue_it_lands_on",
        run: behaviour::two_workers_return_every_reply_whichever_queue_it_lands_on,
        limit: Some(GENERIC_XDP_SEES_ONE_QUEUE),
    },
    case(
        "a_busy_polling_worker_forwards_and_never_sleeps",
        behaviour::a_busy_polling_worker_forwards_and_never_sleeps,
    ),
    case(
        "global_relay_to_cluster_relay_to_transceiver_and_back",
        behaviour::global_relay_to_cluster_relay_to_transceiver_and_back,
    ),
    case(
        "a_cluster_relay_refuses_frames_from_non_global_relays",
        behaviour::a_cluster_relay_refuses_frames_from_non_global_relays,
    ),
    case(
        "sigterm_turns_readiness_off_keeps_forwarding_during_drain_then_exits_0",
        behaviour::sigterm_turns_readiness_off_keeps_forwarding_during_drain_then_exits_0,
    ),
    case(
        "a_bad_config_exits_non_zero_naming_the_field",
        behaviour::a_bad_config_exits_non_zero_naming_the_field,
    ),
    case(
        "a_dead_worker_turns_readiness_off_and_is_counted",
        behaviour::a_dead_worker_turns_readiness_off_and_is_counted,
    ),
    case(
        "the_shipped_binary_ignores_a_fault_request",
        behaviour::the_shipped_binary_ignores_a_fault_request,
    ),
    case(
        "help_explains_the_flags",
        behaviour::help_explains_the_flags,
    ),
    case(
        "json_logs_are_one_object_per_line",
        behaviour::json_logs_are_one_object_per_line,
    ),
    case(
        "startup_errors_are_json_when_the_logs_are",
        behaviour::startup_errors_are_json_when_the_logs_are,
    ),
    case(
        "the_example_config_loads_and_prints_back_to_itself",
        behaviour::the_example_config_loads_and_prints_back_to_itself,
    ),
    case(
        "one_sessions_request_replayed_from_many_sources_creates_one_flow",
        admission::one_sessions_request_replayed_from_many_sources_creates_one_flow,
    ),
    case(
        "a_request_replayed_from_64_sources_makes_one_flow_whichever_worker_sees_it",
        admission::a_request_replayed_from_64_sources_makes_one_flow_whichever_worker_sees_it,
    ),
    case(
        "squatted_flows_that_never_prove_themselves_give_way_to_a_new_session",
        admission::squatted_flows_that_never_prove_themselves_give_way_to_a_new_session,
    ),
    case(
        "route_cache_a_restarted_relay_restores_the_flow_from_the_first_srtp_packet",
        route_cache::a_restarted_relay_restores_the_flow_from_the_first_srtp_packet,
    ),
    case(
        "route_cache_without_redis_a_restarted_relay_waits_for_the_next_stun",
        route_cache::without_redis_a_restarted_relay_waits_for_the_next_stun,
    ),
    case(
        "route_cache_redis_dying_mid_run_does_not_stop_forwarding_and_the_relay_reconnects",
        route_cache::redis_dying_mid_run_does_not_stop_forwarding_and_the_relay_reconnects,
    ),
    case(
        "route_cache_an_ended_sessions_route_leaves_redis_with_its_flow",
        route_cache::an_ended_sessions_route_leaves_redis_with_its_flow,
    ),
    case(
        "route_cache_a_route_forged_in_redis_is_not_followed",
        route_cache::a_route_forged_in_redis_is_not_followed,
    ),
    case(
        "route_cache_media_without_a_flow_asks_the_route_cache_within_its_bounds",
        route_cache::media_without_a_flow_asks_the_route_cache_within_its_bounds,
    ),
];

/// Why `backend` cannot run `case` here, if it cannot.
fn skip_reason(backend: &Backend, case: &Case) -> Option<&'static str> {
    if backend.place == Place::Testbed && !crate::testbed::is_root() {
        return Some("the netns testbed needs root (CI runs as root)");
    }
    case.limit
        .filter(|limit| (limit.applies)(backend))
        .map(|limit| limit.reason)
}

/// Every case for every backend as a trial named `<label>::<case>`; a skipped one is
/// ignored, and its reason goes to stderr.
pub fn trials(backends: &[Backend]) -> Vec<Trial> {
    let mut trials = vec![];
    for backend in backends {
        for case in CASES {
            let name = format!("{}::{}", backend.label(), case.name);
            let skip = skip_reason(backend, case);
            if let Some(reason) = skip {
                eprintln!("!! SKIPPED {name}: {reason}");
            }
            let (backend, run) = (backend.clone(), case.run);
            trials.push(
                Trial::test(name, move || {
                    run(&backend);
                    Ok(())
                })
                .with_ignored_flag(skip.is_some()),
            );
        }
    }
    trials
}

/// Runs the suite for `backends` with libtest's command line (filters, `--list`,
/// `--test-threads`) and returns the test binary's exit code.
pub fn run(backends: &[Backend]) -> ExitCode {
    let args = Arguments::from_args();
    let conclusion = libtest_mimic::run(&args, trials(backends));
    if conclusion.has_failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
