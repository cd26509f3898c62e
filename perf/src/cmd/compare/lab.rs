//! The relay host's half of lab mode: `perf compare --lab AGENT --interface IF` starts
//! the setups on this host's interface and asks the agent on the tools host
//! ([`crate::cmd::lab`]) for each setup's flows and trials ([`Lab`], a [`Bed`] like the
//! testbed).

use std::cell::RefCell;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::rc::Rc;
use std::time::Duration;

use serde_json::{Value, json};

use super::bed::Bed;
use super::bench::warn_if_flows_missing;
use super::options::{Direction, GeneratorKind, Options};
use super::relay_host::{BindMode, RelayHost};
use super::setups::Setup;
use crate::bench::load::{Load, Trial};
use crate::cmd::lab::protocol::{Channel, Prepare, Purpose, Request, trial_from_json};
use crate::forwarders::xdp::Iface;

/// How long connecting to the agent may take.
const CONNECT: Duration = Duration::from_secs(5);

/// A lab: this host (the relay host) and the agent on the tools host.
#[derive(Debug)]
pub struct Lab {
    relay: RelayHost,
    agent: Rc<RefCell<Channel>>,
    hello: Value,
    /// The tools host sends the search as live frames (else from sockets).
    live_frames: bool,
    /// ... and the fixed loads: not when the tools host is this machine (this kernel's
    /// boot id, whatever its PID namespace), whose CPUs the cost counts, where a
    /// busy-polling generator would load every row but the null row's (which stays on
    /// sockets) by a core.
    fixed_live_frames: bool,
    /// How many of the agent's client addresses the flows come from.
    addresses_used: u32,
    _queues: Option<crate::bench::nic::Queues>,
}

impl Lab {
    /// Connects to the agent, reads where its clients and sink are, sets the interface's
    /// queues if asked, and describes this host for the setups.
    pub fn up(options: &Options) -> Result<Lab, String> {
        let args = &options.lab;
        let agent = args.lab.as_deref().ok_or("not lab mode")?;
        let interface = args.interface.as_deref().ok_or("--interface")?;
        let token = crate::cmd::lab::token::Token::load(args.lab_token_file.as_deref())
            .map_err(|e| format!("--lab {agent}: {e}"))?;
        let addr = agent
            .to_socket_addrs()
            .map_err(|e| format!("--lab {agent}: {e}"))?
            .next()
            .ok_or(format!("--lab {agent}: no address"))?;
        let stream = TcpStream::connect_timeout(&addr, CONNECT).map_err(|e| {
            format!("--lab {agent}: {e} (is `ufrag-perf agent` running on the tools host?)")
        })?;
        let mut channel = Channel::new(stream).map_err(|e| format!("--lab {agent}: {e}"))?;
        crate::cmd::lab::token::prove(&mut channel, &token)
            .map_err(|e| format!("--lab {agent}: {e}"))?;
        let hello = channel.call(&Request::Hello)?;
        let field = |k: &str| {
            hello[k]
                .as_str()
                .ok_or(format!("the agent's hello has no {k}"))
        };
        let ipv6 = options.ipv6;
        if ipv6 && hello["client_ip6"].is_null() {
            return Err(format!(
                "--ipv6: the agent ({agent}) sends no IPv6: {}",
                hello["no_ipv6_because"]
                    .as_str()
                    .unwrap_or("it did not say why")
            ));
        }
        let sink_key = if ipv6 { "sink_addr6" } else { "sink_addr" };
        let sink_addr: SocketAddr = hello[sink_key]
            .as_str()
            .ok_or(format!(
                "the agent's sink interface has no {} address ({agent})",
                if ipv6 { "global IPv6" } else { "IPv4" }
            ))?
            .parse()
            .map_err(|e| format!("the agent's {sink_key}: {e}"))?;
        let most = hello["max_flows"]
            .as_u64()
            .ok_or("the agent's hello has no max_flows")?;
        if u64::from(options.flows) > most {
            return Err(format!(
                "--flows {}: the agent's {} client address(es) hold at most {most} flows \
                 (start it with more: `ufrag-perf agent --client-addresses N`)",
                options.flows, hello["environment"]["client_addresses"]
            ));
        }
        let addresses_used = hello["environment"]["client_addresses"]
            .as_u64()
            .map_or(1, |n| {
                crate::cmd::lab::agent::addresses_used(n, options.flows)
            });
        let addresses_used = u32::try_from(addresses_used)
            .map_err(|_| "the agent's hello: too many client addresses")?;
        let interface_of = |nic: &str| hello["environment"][nic]["interface"].as_str();
        if options.direction == Direction::Both
            && interface_of("sink_nic") == interface_of("client_nic")
        {
            return Err(format!(
                "--direction both: {}",
                crate::cmd::lab::agent::BOTH_WAYS_NEED_TWO_INTERFACES
            ));
        }
        let live_frames = options.generator == GeneratorKind::LiveFrames;
        // On one machine the fixed loads stay on sockets: nothing sends live frames when
        // the search does not run either.
        let fixed_live_frames = live_frames && !same_boot(&hello);
        let sends_live_frames = live_frames && (!options.no_search || fixed_live_frames);
        if let Some(why) = hello["live_frames_refused"]
            .as_str()
            .filter(|_| sends_live_frames)
        {
            return Err(format!(
                "the tools host cannot send live frames, the loads' default generator: {why} \
                 (run with --generator sockets, whose own ceiling is lower)"
            ));
        }
        let sink_mac =
            crate::forwarders::xdp::parse_mac(field("sink_mac")?).ok_or("the agent's sink_mac")?;
        let queue_setting = match args.queues {
            Some(n) => Some(crate::bench::nic::Queues::set(interface, n)?),
            None => None,
        };
        let iface = Iface::lookup_in(None, interface).map_err(|e| format!("--interface: {e}"))?;
        let ip = crate::bench::nic::first_address(interface, ipv6)?;
        let exe_dir = std::env::current_exe()
            .map_err(|e| format!("own path: {e}"))?
            .parent()
            .ok_or("perf's directory")?
            .to_path_buf();
        let relay_cpus = if args.relay_cpus.is_empty() {
            let forwarder = options.forwarder_cpu;
            std::iter::once(forwarder)
                .chain((0..crate::bench::environment::online_cpus()).filter(|c| *c != forwarder))
                .collect()
        } else {
            args.relay_cpus.clone()
        };
        let queues = crate::bench::nic::rx_queues(interface).max(1);
        let counted = crate::bench::counted::lab_set(&relay_cpus, interface);
        let (a, b) = (
            crate::bench::cpu::Snapshot::now(),
            crate::bench::cpu::Snapshot::now(),
        );
        if counted.len() < crate::bench::environment::online_cpus() && a.busy_by_cpu(&b).is_none() {
            return Err(
                "--relay-cpus counts some CPUs alone, which needs each CPU's idle clock \
                 (/proc/timer_list, read pinned to each CPU): it did not read"
                    .into(),
            );
        }
        let relay = RelayHost {
            iface,
            vip: SocketAddr::from((ip, 3478)),
            internal: SocketAddr::from((ip, 40_000)),
            metrics: SocketAddr::from(([127, 0, 0, 1], 9100)),
            sink_addr,
            sink_mac,
            transceiver_net: format!("{}/{}", sink_addr.ip(), if ipv6 { 128 } else { 32 }),
            exe_dir,
            relay_cpus,
            flows: options.flows,
            bind_mode: args.bind_mode,
            afxdp_workers: queues,
            steering: Some(crate::bench::steering::Steering::read(interface)),
            counted: Some(counted),
        };
        Ok(Lab {
            relay,
            agent: Rc::new(RefCell::new(channel)),
            fixed_live_frames,
            addresses_used,
            hello,
            live_frames,
            _queues: queue_setting,
        })
    }

    /// The environment record: this host's machine and NIC, the tools host's NICs, and
    /// how the load was made; the same fields as the testbed's, and the NICs'.
    pub fn environment(&self, options: &Options) -> Value {
        let mut record = crate::bench::environment::machine(
            crate::bench::load::LOAD_CPU,
            self.relay.forwarder_cpu(),
        );
        let nic = crate::bench::nic::facts(&self.relay.iface.name);
        let tools = &self.hello["environment"];
        let client_ip = if options.ipv6 {
            &self.hello["client_ip6"]
        } else {
            &self.hello["client_ip"]
        };
        let addresses_used = self.addresses_used;
        record["interfaces"] = json!(format!(
            "lab: the relay host's {} ← the tools host's {} at {} client address(es) from {} \
             (agent {}); sink on its {}",
            self.relay.iface.name,
            tools["client_nic"]["interface"].as_str().unwrap_or("?"),
            addresses_used,
            client_ip.as_str().unwrap_or("?"),
            options.lab.lab.as_deref().unwrap_or("?"),
            tools["sink_nic"]["interface"].as_str().unwrap_or("?"),
        ));
        record["driver"] = nic["driver"].clone();
        record["af_xdp"] = json!(match self.relay.bind_mode {
            BindMode::Copy => "copy mode (--bind-mode copy)".to_string(),
            BindMode::Zerocopy => format!(
                "zero-copy requested (--bind-mode zerocopy); relay-afxdp runs {} worker(s), one per RX queue",
                self.relay.afxdp_workers
            ),
        });
        record["placement"] = json!([format!(
            "relays' CPUs in order: {} (the lab places the NIC's interrupts)",
            self.relay.worker_cpus(self.relay.relay_cpus.len())
        )]);
        record["nic"] = nic;
        record["counted_cpus"] = json!(
            self.relay
                .counted
                .as_ref()
                .map(crate::bench::counted::cpu_list)
        );
        record["tools_host"] = tools.clone();
        record["tools"] = json!({
            "generator": match options.generator {
                GeneratorKind::LiveFrames => format!("BPF_PROG_RUN live frames from the tools host's interface, paced in its kernel on the agent's CPU {}, for the search (over every flow) and, on two machines, the fixed loads (the latency trials from sockets)", self.hello["tools_cpu"]),
                GeneratorKind::Sockets => "sendmmsg from the sockets of the first 256 flows (every client address's) on the tools host".to_string(),
            },
            "fixed_loads": if self.fixed_live_frames {
                format!("the tools host's live-frames generator over the first 256 flows, as the sockets send from (`BPF_PROG_RUN`, paced in its kernel on the agent's CPU {}, which the cost does not count; the null row's from sockets, to the sink's own address)", self.hello["tools_cpu"])
            } else {
                "the client sockets of the first 256 flows on the tools host (`sendmmsg`, paced by sleeping)".to_string()
            },
            "client addresses": format!(
                "{addresses_used} from {}, the flows dealt round them (the agent has {})",
                client_ip.as_str().unwrap_or("?"),
                tools["client_addresses"],
            ),
            "sink": "XDP per-CPU counter on the tools host's sink interface, 1 in 8 passed to a socket for latency",
            "downlink": self.downlink_record(options),
            "cpu accounting": if self.agent_here().is_some() {
                "one machine: the tools host is this machine (the agent's boot id and PID namespace are this one's), so the tools' work is in every row on the CPUs counted (counted_cpus), as on the testbed"
            } else {
                "the relay host's CPUs counted (counted_cpus) only: the tools host's work is not in any row"
            },
        });
        record
    }

    /// Asks the agent to make `setup`'s flows (proving them both ways where it carries
    /// returns) and hold its load: `downlink_share` of each trial's rate sent back to
    /// the clients.
    fn remote_load(
        &self,
        setup: &Setup,
        size: usize,
        purpose: Purpose,
        downlink_share: f64,
    ) -> Box<dyn Load> {
        let target = setup.target(&self.relay);
        let prepare = Prepare {
            dst: target.dst,
            dst_mac: target.dst_mac,
            framed: target.framed,
            keeps_flows: setup.keeps_flows(),
            flows: self.relay.flows,
            size,
            purpose,
            returns: setup.return_path(&self.relay, target, self.addresses_used),
            downlink_share,
        };
        if let Err(e) = self.agent.borrow_mut().call(&Request::Prepare(prepare)) {
            panic!("{}: preparing the load: {e}", setup.name);
        }
        if target.framed {
            warn_if_flows_missing(&self.relay, setup.name);
        }
        Box::new(RemoteLoad {
            agent: Rc::clone(&self.agent),
        })
    }
}

impl Lab {
    /// What the environment record says of the downlink: none, or how the agent sent it
    /// and on which of its CPUs.
    fn downlink_record(&self, options: &Options) -> String {
        let tools_cpu = &self.hello["tools_cpu"];
        let (way, cpu) = match options.direction {
            Direction::Up => return "none (uplink)".to_string(),
            Direction::Down => ("downlink", tools_cpu.to_string()),
            Direction::Both => (
                "both ways at once",
                self.hello["downlink_cpu"]
                    .as_u64()
                    .map_or(format!("{tools_cpu} beside the uplink's"), |c| {
                        c.to_string()
                    }),
            ),
        };
        format!(
            "{way}: the transceiver's replies as live frames from the tools host's sink \
             interface through each setup, counted in XDP arriving at its client interface \
             from the VIP's port; the generator on the agent's CPU {cpu}"
        )
    }

    /// How many client addresses the flows come from: the agent's, up to one a flow (the
    /// flows are dealt round them).
    pub fn addresses_used(&self) -> u32 {
        self.addresses_used
    }

    /// The agent's process when it runs on this same machine: [`same_machine`].
    fn agent_here(&self) -> Option<u32> {
        same_machine(&self.hello)
    }
}

/// Whether the agent that said `hello` runs on this machine: its boot id is this
/// kernel's (two namespaces or containers, not two hosts).
fn same_boot(hello: &Value) -> bool {
    let here = crate::cmd::lab::agent::boot_id();
    here.is_some_and(|here| hello["boot_id"].as_str() == Some(here.as_str()))
}

/// The pid of the agent that said `hello` when it runs on this same machine
/// ([`same_boot`]) and its pid means the same process here (the same PID namespace),
/// whose work then lands on these CPUs.
fn same_machine(hello: &Value) -> Option<u32> {
    let here = crate::cmd::lab::agent::pid_namespace();
    let same_pids = here.is_some_and(|here| hello["pid_namespace"].as_str() == Some(here.as_str()));
    (same_boot(hello) && same_pids)
        .then(|| hello["pid"].as_u64()?.try_into().ok())
        .flatten()
}

impl Bed for Lab {
    fn relay(&self) -> &RelayHost {
        &self.relay
    }

    fn experiment_roots(&self) -> Vec<u32> {
        std::iter::once(std::process::id())
            .chain(self.agent_here())
            .collect()
    }

    fn fixed_load(&self, setup: &Setup, size: usize) -> Box<dyn Load> {
        let live_frames = self.fixed_live_frames;
        self.remote_load(setup, size, Purpose::Fixed { live_frames }, 0.0)
    }

    fn latency_load(&self, setup: &Setup, size: usize) -> Box<dyn Load> {
        self.remote_load(setup, size, Purpose::Search { live_frames: false }, 0.0)
    }

    fn search_load(&self, setup: &Setup, options: &Options) -> Box<dyn Load> {
        let live_frames = self.live_frames;
        let downlink_share = match options.direction {
            Direction::Up => 0.0,
            Direction::Down => 1.0,
            Direction::Both => options.downlink_share,
        };
        let purpose = Purpose::Search { live_frames };
        self.remote_load(setup, options.search.size, purpose, downlink_share)
    }
}

/// The load the agent holds, driven from here; released when dropped.
struct RemoteLoad {
    agent: Rc<RefCell<Channel>>,
}

impl RemoteLoad {
    fn run(&mut self, rate: u64, duration: Duration, latency: bool) -> Trial {
        let request = Request::Trial {
            rate,
            duration,
            latency,
        };
        // A lost agent ends the run: the report keeps what the finished rounds measured.
        let reply = self.agent.borrow_mut().call(&request);
        match reply.and_then(|v| trial_from_json(&v)) {
            Ok(t) => t,
            Err(e) => panic!("lab mode: a trial at {rate} pps: {e}"),
        }
    }
}

impl Load for RemoteLoad {
    fn trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.run(rate_pps, duration, false)
    }

    fn latency_trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.run(rate_pps, duration, true)
    }
}

impl Drop for RemoteLoad {
    fn drop(&mut self) {
        let _ = self.agent.borrow_mut().call(&Request::Release);
    }
}
