//! `ufrag-perf agent`: the tools host's half of lab mode. It listens for one `perf compare
//! --lab` at a time, and for it makes each setup's flows from the client interface, holds
//! one load (the generator and the sink) and runs the trials it asks for. It serves only a
//! compare that proves the shared token ([`super::token`]). Every request
//! is bounded (flows, rate, length, size): a mistyped request costs a refusal, not a
//! flood.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::protocol::{Channel, Prepare, Purpose, Request, trial_json};
use super::token::{Token, demand_proof};
use crate::bench::load::target::{
    FIRST_CLIENT_PORT, PORTS_PER_CLIENT_ADDR, SAMPLE_EVERY, SETTLE, SINK_PORT, Target, make_flows,
};
use crate::bench::load::{FlowPlan, Generator, Load, Sink, Trial};
use crate::forwarders::xdp::{
    Counted, Iface, NEVER_SAMPLED, Sender, XdpGenerator, XdpLoad, XdpSink, template_frame,
};

/// The most flows a load may make (one client address's ports).
pub const MAX_FLOWS: u32 = PORTS_PER_CLIENT_ADDR;
/// The highest rate a trial may offer, pps.
pub const MAX_RATE: u64 = 100_000_000;
/// The longest trial.
pub const MAX_TRIAL: Duration = Duration::from_secs(120);
/// The largest UDP payload (a 1,500-byte MTU).
pub const MAX_SIZE: usize = 1472;

/// `ufrag-perf agent`'s options.
#[derive(Debug, clap::Args)]
pub struct AgentOptions {
    /// Where `perf compare --lab` connects, e.g. 192.0.2.5:7700 (the control channel: an
    /// address on the lab's management network, not the interfaces under test; no
    /// default, so the agent never listens everywhere by accident).
    #[arg(long, value_name = "IP:PORT")]
    pub listen: SocketAddr,
    /// The token a compare must prove it holds (a file of mode 0600; or
    /// UFRAG_PERF_AGENT_TOKEN): without one the agent does not start.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// The interface the clients' load leaves by, towards the relay host (its first IPv4
    /// address is the clients' address).
    #[arg(long)]
    pub interface: String,
    /// The interface the sink counts on (default: `--interface`); its first IPv4 address
    /// is the transceiver's.
    #[arg(long)]
    pub sink_interface: Option<String>,
    /// The tools' CPUs (comma-separated): the generator and the sink run on these.
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Serve one compare, then exit.
    #[arg(long)]
    pub once: bool,
}

/// The tools host as the agent found it.
struct Tools {
    client_if: Iface,
    client_ip: Ipv4Addr,
    sink_if: Iface,
    sink_addr: SocketAddr,
    epoch: Instant,
}

/// Runs the agent; the process's exit code.
pub fn run(options: AgentOptions) -> i32 {
    match serve(&options) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ufrag-perf agent: {e}");
            2
        }
    }
}

fn serve(options: &AgentOptions) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("needs root (XDP programs on the interfaces): run it with sudo".into());
    }
    if !options.cpus.is_empty() {
        let list = options
            .cpus
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",");
        // Threads started later (the sinks') inherit the mask.
        crate::bench::shell::run(
            crate::bench::shell::in_ns(
                None,
                "taskset",
                &["-p", "-c", &list, &std::process::id().to_string()],
            ),
            "taskset",
        )
        .map_err(|e| format!("--cpus {list}: {e}"))?;
    }
    let token = Token::load(options.token_file.as_deref())?;
    let tools = tools(options)?;
    let listener = TcpListener::bind(options.listen)
        .map_err(|e| format!("--listen {}: {e}", options.listen))?;
    eprintln!(
        "ufrag-perf agent: listening on {}; clients {} on {}, sink {} on {}",
        listener.local_addr().map_err(|e| e.to_string())?,
        tools.client_ip,
        tools.client_if.name,
        tools.sink_addr,
        tools.sink_if.name
    );
    loop {
        let (stream, from) = listener.accept().map_err(|e| format!("accept: {e}"))?;
        // A compare that vanishes without a FIN (its host rebooted) must not hold the
        // agent and its load for ever: TCP keepalive finds it gone within two minutes.
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(Duration::from_secs(60))
            .with_interval(Duration::from_secs(10))
            .with_retries(6);
        let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
        let proven = Channel::new(stream)
            .map_err(|e| e.to_string())
            .and_then(|mut channel| demand_proof(&mut channel, &token).map(|()| channel));
        let channel = match proven {
            Ok(channel) => channel,
            Err(e) => {
                // Refused before anything is served; it does not count as the one compare.
                eprintln!("ufrag-perf agent: refused {from}: {e}");
                continue;
            }
        };
        eprintln!("ufrag-perf agent: a compare from {from}");
        session(&tools, channel);
        eprintln!("ufrag-perf agent: {from} is done");
        if options.once {
            return Ok(());
        }
    }
}

fn tools(options: &AgentOptions) -> Result<Tools, String> {
    let lookup = |name: &str| Iface::lookup_in(None, name).map_err(|e| format!("{name}: {e}"));
    let client_if = lookup(&options.interface)?;
    let sink_name = options
        .sink_interface
        .as_deref()
        .unwrap_or(&options.interface);
    let sink_if = lookup(sink_name)?;
    Ok(Tools {
        client_ip: crate::bench::nic::first_ipv4(&client_if.name)?,
        sink_addr: SocketAddr::from((crate::bench::nic::first_ipv4(sink_name)?, SINK_PORT)),
        client_if,
        sink_if,
        epoch: Instant::now(),
    })
}

/// Serves one compare until it closes the connection; the held load goes with it.
fn session(tools: &Tools, mut channel: Channel) {
    let mut held: Option<Box<dyn Load>> = None;
    loop {
        let request = match channel.receive() {
            Ok(Some(v)) => Request::from_json(&v),
            Ok(None) => return,
            Err(e) => {
                eprintln!("ufrag-perf agent: {e}");
                return;
            }
        };
        let reply = match request.and_then(|r| answer(tools, &mut held, r)) {
            Ok(ok) => json!({ "ok": ok }),
            Err(e) => json!({ "error": e }),
        };
        if channel.send(&reply).is_err() {
            return;
        }
    }
}

fn answer(
    tools: &Tools,
    held: &mut Option<Box<dyn Load>>,
    request: Request,
) -> Result<Value, String> {
    match request {
        Request::Hello => Ok(hello(tools)),
        Request::Prepare(p) => {
            *held = None;
            *held = Some(prepare(tools, &p)?);
            Ok(json!({}))
        }
        Request::Trial {
            rate,
            duration,
            latency,
        } => {
            if rate > MAX_RATE || duration > MAX_TRIAL {
                return Err(format!(
                    "a trial of at most {MAX_RATE} pps for at most {MAX_TRIAL:?}"
                ));
            }
            let load = held.as_mut().ok_or("no load prepared")?;
            let t: Trial = if latency {
                load.latency_trial(rate, duration)
            } else {
                load.trial(rate, duration)
            };
            Ok(trial_json(&t))
        }
        Request::Release => {
            *held = None;
            Ok(json!({}))
        }
    }
}

/// Who the agent is: its version, addresses and environment.
fn hello(tools: &Tools) -> Value {
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "client_ip": tools.client_ip.to_string(),
        "client_mac": ufrag_common::wire::mac_text(tools.client_if.mac),
        "sink_addr": tools.sink_addr.to_string(),
        "sink_mac": ufrag_common::wire::mac_text(tools.sink_if.mac),
        "pid": std::process::id(),
        "boot_id": boot_id(),
        "pid_namespace": pid_namespace(),
        "environment": {
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or("unknown".into(), |s| s.trim().to_string()),
            "vcpus": crate::bench::environment::online_cpus(),
            "client_nic": crate::bench::nic::facts(&tools.client_if.name),
            "sink_nic": crate::bench::nic::facts(&tools.sink_if.name),
            "host_settings": crate::bench::settings::host(),
        },
    })
}

/// This boot of this machine's kernel (`/proc/sys/kernel/random/boot_id`): the same on
/// both ends when the "two hosts" are namespaces of one machine.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|id| id.trim().to_string())
}

/// This process's PID namespace (`pid:[4026531836]`): the same on both ends only when
/// the agent's pid means the same process here.
pub fn pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|link| link.to_string_lossy().into_owned())
}

/// The load `p` asks for, its flows made.
fn prepare(tools: &Tools, p: &Prepare) -> Result<Box<dyn Load>, String> {
    if p.flows == 0 || p.flows > MAX_FLOWS {
        return Err(format!("flows: between 1 and {MAX_FLOWS}"));
    }
    if !(12..=MAX_SIZE).contains(&p.size) {
        return Err(format!("size: between 12 and {MAX_SIZE} bytes"));
    }
    let plan = FlowPlan::new(
        tools.client_ip,
        FIRST_CLIENT_PORT,
        PORTS_PER_CLIENT_ADDR,
        p.flows,
    )
    .map_err(|e| format!("flows: {e}"))?;
    let target = Target {
        dst: p.dst,
        dst_mac: p.dst_mac,
        framed: p.framed,
    };
    let failed = |what: &'static str| move |e: std::io::Error| format!("{what}: {e}");
    let sockets = make_flows(
        None,
        &plan,
        p.keeps_flows,
        target,
        tools.sink_addr,
        tools.epoch,
    )
    .map_err(failed("making the flows"))?
    .with_payload_len(p.size);
    if p.dst == tools.sink_addr {
        // The direct path: to this host's own address, which the kernel delivers over
        // loopback, past the interface's XDP sink: a socket counts it.
        let sink = Sink::start_in(None, tools.sink_addr, false, tools.epoch)
            .map_err(failed("the sink's socket"))?;
        return Ok(Box::new(ToOwnSink {
            generator: sockets,
            sink,
            to: p.dst,
        }));
    }
    let (sample_every, sampler_addr) = match p.purpose {
        Purpose::Fixed => (NEVER_SAMPLED, SocketAddr::new(tools.sink_addr.ip(), 0)),
        Purpose::Search { .. } => (SAMPLE_EVERY, tools.sink_addr),
    };
    let sockets = Sender::Sockets(sockets, p.dst);
    let (generator, latency_generator) = match p.purpose {
        Purpose::Search { live_frames: true } => {
            let frame = template_frame(tools.client_if.mac, p.dst_mac, plan.addr(0), p.dst, p.size);
            let frames =
                XdpGenerator::new(tools.client_if.clone(), None, frame, &plan, tools.epoch)
                    .map_err(failed("the live-frames generator"))?;
            (Sender::LiveFrames(frames), Some(sockets))
        }
        _ => (sockets, None),
    };
    Ok(Box::new(XdpLoad {
        generator,
        latency_generator,
        sink: XdpSink::attach(&tools.sink_if, Counted::ToPort(SINK_PORT), sample_every)
            .map_err(failed("the XDP sink"))?,
        sampler: Sink::start_in(None, sampler_addr, p.framed, tools.epoch)
            .map_err(failed("the latency socket"))?,
        settle: SETTLE,
    }))
}

/// The direct path's load on the tools host: client sockets to its own sink socket.
struct ToOwnSink {
    generator: Generator,
    sink: Sink,
    to: SocketAddr,
}

impl Load for ToOwnSink {
    fn trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.generator
            .trial(self.to, rate_pps, duration, SETTLE, &self.sink)
    }
}
