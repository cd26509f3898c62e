//! `ufrag-perf agent`: the tools host's half of lab mode. It listens for one `perf compare
//! --lab` at a time, and for it makes each setup's flows from the client interface, holds
//! one load (the generator and the sink) and runs the trials it asks for. It serves only a
//! compare that proves the shared token ([`super::token`]). Every request
//! is bounded (flows, rate, length, size) and sends only to the destination it names (a
//! setup's return path must be that destination's): a mistyped request costs a
//! refusal, not a flood. The flows come from a range of client addresses on the client interface
//! (`--client-addresses`), IPv4 or IPv6 as the compare asks, spread evenly over them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::protocol::{Channel, Prepare, Purpose, Request, trial_json};
use super::token::{Token, demand_proof};
use crate::bench::load::target::{
    FIRST_CLIENT_PORT, PORTS_PER_CLIENT_ADDR, ReturnPath, SAMPLE_EVERY, SETTLE, SINK_PORT,
    SOCKET_FLOWS, Target, make_flows, prove_flows,
};
use crate::bench::load::{FlowPlan, Generator, Load, Sink, Trial};
use crate::forwarders::xdp::{
    Conversation, Counted, Iface, NEVER_SAMPLED, ReplyFrames, Sender, XdpGenerator, XdpLoad,
    XdpSink, template_frame,
};

/// The most client addresses the flows may come from.
pub const MAX_CLIENT_ADDRESSES: u32 = 100;
/// The most flows a load may make: every client address's ports (4 M).
pub const MAX_FLOWS: u32 = MAX_CLIENT_ADDRESSES * PORTS_PER_CLIENT_ADDR;
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
    /// The interface the clients' load leaves by, towards the relay host (its addresses
    /// are the clients': `--client-addresses`).
    #[arg(long)]
    pub interface: String,
    /// How many client addresses the flows come from: N consecutive addresses of each
    /// family (the last octet +1, +2, …), every one already on the interface (`ip addr
    /// add`), from the lowest whose N are all there. Each holds up to 40,000 flows, and
    /// where a NIC hashes on addresses alone, more addresses spread the load over more
    /// queues.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub client_addresses: u32,
    /// The interface the sink counts on (default: `--interface`); its first IPv4 address
    /// (and first global IPv6 one) is the transceiver's.
    #[arg(long)]
    pub sink_interface: Option<String>,
    /// The tools' CPUs (comma-separated): the generator and the sink run on these, the
    /// live-frames generator on the first, and when both ways are sent at once the
    /// downlink's on the second (if given; else beside the uplink's).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Serve one compare, then exit.
    #[arg(long)]
    pub once: bool,
}

/// The tools host as the agent found it.
struct Tools {
    client_if: Iface,
    /// The clients' first IPv4 address.
    client_ip: Ipv4Addr,
    /// The clients' first IPv6 address, or why the agent sends no IPv6.
    client_ip6: Result<IpAddr, String>,
    /// How many addresses up from each first one the flows come from.
    client_addresses: u32,
    sink_if: Iface,
    sink_addr: SocketAddr,
    /// The sink's IPv6 address, if its interface has a global one.
    sink_addr6: Option<SocketAddr>,
    /// The second of `--cpus`: the downlink's generator runs there when both ways are
    /// sent at once (else beside the uplink's, on the first).
    downlink_cpu: Option<usize>,
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
        // Threads started later inherit the mask; the load's own threads (the
        // live-frames generator, which busy-polls, and the latency sink) take the first,
        // a second generator sending the other way at the same time the second.
        crate::bench::load::set_load_cpu(options.cpus[0]);
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
        "ufrag-perf agent: listening on {}; clients {} address(es) from {}{} on {} (at most {} \
         flows), sink {}{} on {}",
        listener.local_addr().map_err(|e| e.to_string())?,
        tools.client_addresses,
        tools.client_ip,
        tools
            .client_ip6
            .as_ref()
            .map_or(String::new(), |ip| format!(" and from {ip}")),
        tools.client_if.name,
        max_flows(tools.client_addresses),
        tools.sink_addr,
        tools
            .sink_addr6
            .map_or(String::new(), |a| format!(" and {a}")),
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
    use crate::bench::nic::{addresses, first_of};
    let lookup = |name: &str| Iface::lookup_in(None, name).map_err(|e| format!("{name}: {e}"));
    let client_if = lookup(&options.interface)?;
    let sink_name = options
        .sink_interface
        .as_deref()
        .unwrap_or(&options.interface);
    let sink_if = lookup(sink_name)?;
    let on_client = addresses(&client_if.name)?;
    let on_sink = addresses(sink_name)?;
    let n = options.client_addresses;
    let IpAddr::V4(client_ip) = client_range(&on_client, false, n, &client_if.name)? else {
        unreachable!("an IPv4 range starts at an IPv4 address")
    };
    // IPv6 is optional: an interface with no whole IPv6 range serves IPv4 loads, and an
    // IPv6 compare is told why not.
    let client_ip6 = client_range(&on_client, true, n, &client_if.name);
    if let Err(e) = &client_ip6 {
        eprintln!("ufrag-perf agent: no IPv6 loads: {e}");
    }
    let Some(sink_ip) = first_of(&on_sink, false) else {
        return Err(format!("{sink_name} has no IPv4 address"));
    };
    if sink_if.name != client_if.name && !answers_arp_alone(&client_if.name) {
        eprintln!(
            "ufrag-perf agent: !! {} answers ARP for {sink_ip} too (arp_ignore 0): the \
             relay may send the uplink there, uncounted; set \
             net.ipv4.conf.all.arp_ignore=1 and arp_announce=2",
            client_if.name
        );
    }
    Ok(Tools {
        client_ip,
        client_ip6,
        client_addresses: n,
        sink_addr: SocketAddr::new(sink_ip, SINK_PORT),
        sink_addr6: first_of(&on_sink, true).map(|ip| SocketAddr::new(ip, SINK_PORT)),
        client_if,
        sink_if,
        downlink_cpu: options.cpus.get(1).copied(),
        epoch: Instant::now(),
    })
}

/// The first of `n` client addresses of the family (`ipv6`) that are all among
/// `configured` on `interface`, the last octet counted up as a [`FlowPlan`] lays them
/// out: the lowest address whose range is whole (`ip addr` lists IPv6 addresses newest
/// first, so its order says nothing). The relay host's replies reach only addresses the
/// tools host owns, so a range with a gap is refused, naming what is missing from the
/// lowest address's range and the command that adds it.
fn client_range(
    configured: &[IpAddr],
    ipv6: bool,
    n: u32,
    interface: &str,
) -> Result<IpAddr, String> {
    if !(1..=MAX_CLIENT_ADDRESSES).contains(&n) {
        return Err(format!(
            "--client-addresses {n}: between 1 and {MAX_CLIENT_ADDRESSES}"
        ));
    }
    let family = if ipv6 { "global IPv6" } else { "IPv4" };
    let mut candidates: Vec<IpAddr> = configured
        .iter()
        .copied()
        .filter(|a| a.is_ipv6() == ipv6)
        .collect();
    candidates.sort();
    let missing_after = |first: IpAddr| {
        FlowPlan::new(first, FIRST_CLIENT_PORT, 1, n)
            .map_err(|e| format!("--client-addresses {n}: {e}"))
            .map(|range| {
                (0..n)
                    .map(|i| range.ip(i))
                    .find(|ip| !configured.contains(ip))
            })
    };
    if let Some(whole) = candidates
        .iter()
        .find(|first| matches!(missing_after(**first), Ok(None)))
    {
        return Ok(*whole);
    }
    let lowest = candidates
        .first()
        .ok_or(format!("{interface} has no {family} address"))?;
    match missing_after(*lowest)? {
        Some(missing) => Err(format!(
            "--client-addresses {n}: no {n} consecutive {family} addresses on {interface}: \
             {missing} is missing after {lowest} (add it with `ip addr add {missing}/PREFIX \
             dev {interface}`, PREFIX as {lowest}'s)"
        )),
        None => unreachable!("a whole range was found above"),
    }
}

/// How many of the agent's `addresses` client addresses `flows` flows come from: all of
/// them, or one a flow when the flows are fewer (as [`FlowPlan::over`] deals them).
pub fn addresses_used(addresses: u64, flows: u32) -> u64 {
    addresses.clamp(1, u64::from(flows).max(1))
}

/// The most flows `addresses` client addresses hold.
pub fn max_flows(addresses: u32) -> u32 {
    addresses
        .saturating_mul(PORTS_PER_CLIENT_ADDR)
        .min(MAX_FLOWS)
}

/// `flows` flows from `first` dealt round `addresses` addresses from it up (fewer when
/// there are fewer flows): as many ports on each, give or take one.
fn client_plan(first: IpAddr, addresses: u32, flows: u32) -> Result<FlowPlan, String> {
    let most = max_flows(addresses);
    if flows == 0 || flows > most {
        return Err(format!(
            "flows: between 1 and {most} ({addresses} client address(es), \
             {PORTS_PER_CLIENT_ADDR} ports each; start the agent with more \
             --client-addresses)"
        ));
    }
    FlowPlan::over(first, FIRST_CLIENT_PORT, addresses, flows).map_err(|e| format!("flows: {e}"))
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
        "client_ip6": tools.client_ip6.as_ref().ok().map(|ip| ip.to_string()),
        "no_ipv6_because": tools.client_ip6.as_ref().err(),
        "max_flows": max_flows(tools.client_addresses),
        "sink_addr6": tools.sink_addr6.map(|a| a.to_string()),
        "live_frames_refused": crate::forwarders::xdp::live_frames_refused(),
        "tools_cpu": crate::bench::load::load_cpu(),
        "downlink_cpu": tools.downlink_cpu,
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
            "client_addresses": tools.client_addresses,
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

/// The load `p` asks for, its flows made: IPv6 when `p.dst` is.
fn prepare(tools: &Tools, p: &Prepare) -> Result<Box<dyn Load>, String> {
    if !(12..=MAX_SIZE).contains(&p.size) {
        return Err(format!("size: between 12 and {MAX_SIZE} bytes"));
    }
    let (first, sink_addr) = if p.dst.is_ipv6() {
        (
            tools.client_ip6.clone()?,
            tools
                .sink_addr6
                .ok_or("IPv6: the sink interface has no global IPv6 address")?,
        )
    } else {
        (IpAddr::V4(tools.client_ip), tools.sink_addr)
    };
    let plan = client_plan(first, tools.client_addresses, p.flows)?;
    let target = Target {
        dst: p.dst,
        dst_mac: p.dst_mac,
        framed: p.framed,
    };
    check_returns(p)?;
    let downlink = downlink_way(tools, p)?;
    let sockets = make_flows(None, &plan, p.keeps_flows, target, sink_addr, tools.epoch)
        .map_err(failed("making the flows"))?
        .with_payload_len(p.size);
    if let Some(back) = p.returns {
        prove_flows((None, None), &plan, target, sink_addr, back)
            .map_err(failed("proving the flows"))?;
    }
    if p.dst == sink_addr {
        // The direct path: to this host's own address, which the kernel delivers over
        // loopback, past the interface's XDP sink: a socket counts it. The same both
        // ways: its row is the relay host at rest.
        let sink = Sink::start_in(None, sink_addr, false, tools.epoch)
            .map_err(failed("the sink's socket"))?;
        return Ok(Box::new(ToOwnSink {
            generator: sockets,
            sink,
            to: p.dst,
        }));
    }
    // Both ways at once: the downlink's generator on a core of its own when the agent
    // has a second.
    let cpu = tools.downlink_cpu.filter(|_| p.downlink_share < 1.0);
    let down = downlink
        .map(|back| downlink_load(tools, p, &plan, (sink_addr, back), cpu))
        .transpose()?;
    if p.downlink_share >= 1.0
        && let Some(down) = down
    {
        return Ok(Box::new(down));
    }
    let (sample_every, sampler_addr) = match p.purpose {
        Purpose::Fixed { .. } => (NEVER_SAMPLED, SocketAddr::new(sink_addr.ip(), 0)),
        Purpose::Search { .. } => (SAMPLE_EVERY, sink_addr),
    };
    let sockets = Sender::Sockets(sockets, p.dst);
    // Live frames, paced in this host's kernel on the agent's first CPU: the search's
    // over every flow, the fixed loads' over the first [`SOCKET_FLOWS`] as the sockets
    // send from (so the flows a trial touches do not grow with its rate, and the cost's
    // slope is the packets' alone). The latency trial's datagrams still come from the
    // sockets (a busy-polling generator would put its own scheduling delay into the
    // tail).
    let (generator, latency_generator) = if p.purpose.live_frames() {
        let sending = match p.purpose {
            Purpose::Fixed { .. } => FlowPlan {
                flows: plan.flows.min(SOCKET_FLOWS),
                ..plan
            },
            Purpose::Search { .. } => plan,
        };
        let frame = template_frame(tools.client_if.mac, p.dst_mac, plan.addr(0), p.dst, p.size);
        let frames = XdpGenerator::new(tools.client_if.clone(), None, frame, &sending, tools.epoch)
            .map_err(failed("the live-frames generator"))?;
        (Sender::LiveFrames(frames), Some(sockets))
    } else {
        (sockets, None)
    };
    let up = XdpLoad {
        generator,
        latency_generator,
        sink: XdpSink::attach(&tools.sink_if, Counted::ToPort(SINK_PORT), sample_every)
            .map_err(failed("the XDP sink"))?,
        sampler: Sink::start_in(None, sampler_addr, p.framed, tools.epoch)
            .map_err(failed("the latency socket"))?,
        settle: SETTLE,
    };
    Ok(match down {
        Some(down) => Box::new(Conversation {
            up,
            down,
            downlink_share: p.downlink_share,
        }),
        None => Box::new(up),
    })
}

/// An I/O error of the step `what`, as a refusal's text.
fn failed(what: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("{what}: {e}")
}

/// Whether `interface` answers ARP only for its own addresses: the kernel takes the
/// larger of `all`'s and the interface's `arp_ignore` (unreadable counts as the default,
/// 0: answering for every address of the host).
fn answers_arp_alone(interface: &str) -> bool {
    let arp_ignore = |conf: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{conf}/arp_ignore"))
            .ok()
            .and_then(|v| v.trim().parse::<u8>().ok())
            .unwrap_or(0)
    };
    arp_ignore("all").max(arp_ignore(interface)) >= 1
}

/// Refuses a return path that is not `p`'s destination's: the frames to our relay's
/// internal port go to its address, naming the VIP the clients send to; nftables' go to
/// the VIP's address. A setup that keeps no flows has none. So the proof and the
/// downlink reach only the host the load already goes to, in its family.
fn check_returns(p: &Prepare) -> Result<(), String> {
    let fits = match p.returns {
        None => true,
        Some(_) if !p.keeps_flows => false,
        Some(ReturnPath::Framed { internal, vip }) => vip == p.dst && internal.ip() == p.dst.ip(),
        Some(ReturnPath::ToClientPort(ip)) => ip == p.dst.ip(),
    };
    if fits {
        Ok(())
    } else {
        Err(format!(
            "returns {:?}: not the return path of a load to {} that keeps flows",
            p.returns, p.dst
        ))
    }
}

/// How `p`'s downlink returns to the clients, when it asks for one (`None`: uplink only),
/// or why it cannot: only a search sends one, in live frames, over IPv4, through a setup
/// that carries returns (the direct path's loopback excepted: the same both ways); and
/// both ways at once need two interfaces, each counting its way in XDP.
fn downlink_way(tools: &Tools, p: &Prepare) -> Result<Option<ReturnPath>, String> {
    if !(0.0..=1.0).contains(&p.downlink_share) {
        return Err("downlink_share: a share from 0 to 1".into());
    }
    if p.downlink_share == 0.0 || p.dst == tools.sink_addr || Some(p.dst) == tools.sink_addr6 {
        return Ok(None);
    }
    if !matches!(p.purpose, Purpose::Search { live_frames: true }) {
        return Err("a downlink is sent in a search, in live frames".into());
    }
    if p.dst.is_ipv6() {
        return Err("the downlink's frames are IPv4 only".into());
    }
    if p.downlink_share < 1.0 && tools.sink_if.name == tools.client_if.name {
        return Err(BOTH_WAYS_NEED_TWO_INTERFACES.into());
    }
    p.returns
        .map(Some)
        .ok_or_else(|| "a downlink needs the setup's returns (it carries none)".into())
}

/// Why both ways at once are refused on one interface.
pub const BOTH_WAYS_NEED_TWO_INTERFACES: &str = "both ways at once count the uplink on the \
     sink's interface and the downlink on the clients', each with an XDP program of its own: \
     start the agent with `--sink-interface` on a second interface";

/// `p`'s downlink: the transceiver's replies from `sink_addr` through `back`
/// ([`ReplyFrames::through`]), sent as live frames from the sink's interface (the
/// generator busy-polling `cpu`, else the tools' CPU), counted in XDP on the clients' by
/// the port they come from; no latency sample.
fn downlink_load(
    tools: &Tools,
    p: &Prepare,
    plan: &FlowPlan,
    (sink_addr, back): (SocketAddr, ReturnPath),
    cpu: Option<usize>,
) -> Result<XdpLoad, String> {
    let replies = ReplyFrames::through(
        back,
        (tools.sink_if.mac, p.dst_mac),
        sink_addr,
        plan,
        p.dst.port(),
        p.size,
    )
    .map_err(failed("the downlink's frames"))?;
    let frames = XdpGenerator::stamping(
        tools.sink_if.clone(),
        None,
        replies.frame,
        (&replies.plan, replies.stamps),
        tools.epoch,
    )
    .map_err(failed("the downlink's live-frames generator"))?;
    let frames = match cpu {
        Some(cpu) => frames.on_cpu(cpu),
        None => frames,
    };
    Ok(XdpLoad {
        generator: Sender::LiveFrames(frames),
        latency_generator: None,
        sink: XdpSink::attach(
            &tools.client_if,
            Counted::FromPort(replies.from_port),
            NEVER_SAMPLED,
        )
        .map_err(failed("the downlink's XDP sink"))?,
        sampler: Sink::start_in(
            None,
            SocketAddr::new(plan.addr(0).ip(), 0),
            false,
            tools.epoch,
        )
        .map_err(failed("an idle latency socket"))?,
        settle: SETTLE,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(text: &[&str]) -> Vec<IpAddr> {
        text.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn the_client_range_is_the_lowest_whole_one_and_a_gap_is_named() {
        // As `ip addr` lists them: IPv6 newest first.
        let on = ips(&["10.89.0.2", "10.89.0.3", "fd89::4", "fd89::3", "fd89::2"]);
        let ip = |a: &str| a.parse::<IpAddr>().unwrap();
        assert_eq!(client_range(&on, false, 2, "eth1"), Ok(ip("10.89.0.2")));
        assert_eq!(client_range(&on, true, 3, "eth1"), Ok(ip("fd89::2")));
        assert_eq!(client_range(&on, true, 1, "eth1"), Ok(ip("fd89::2")));
        let gap = client_range(&on, false, 3, "eth1").unwrap_err();
        assert!(
            gap.contains("10.89.0.4 is missing after 10.89.0.2")
                && gap.contains("`ip addr add 10.89.0.4/PREFIX dev eth1`"),
            "{gap}"
        );
        // A stray lower address does not hide a whole range above it.
        let stray = ips(&["10.89.0.2", "10.89.0.50", "10.89.0.51"]);
        assert_eq!(client_range(&stray, false, 2, "eth1"), Ok(ip("10.89.0.50")));
        let none = client_range(&ips(&["10.89.0.2"]), true, 1, "eth1").unwrap_err();
        assert!(none.contains("eth1 has no global IPv6 address"), "{none}");
        assert!(client_range(&on, false, 0, "eth1").is_err());
        assert!(client_range(&on, false, MAX_CLIENT_ADDRESSES + 1, "eth1").is_err());
        // Past .255: refused, saying so.
        let high = ips(&["10.89.0.250"]);
        let e = client_range(&high, false, 10, "eth1").unwrap_err();
        assert!(e.contains("run past .254"), "{e}");
    }

    #[test]
    fn flows_are_dealt_round_the_client_addresses_up_to_their_ports() {
        let first: IpAddr = "10.89.0.2".parse().unwrap();
        // 1,000 flows over two addresses: 500 ports on each, the first two flows one on
        // each.
        let plan = client_plan(first, 2, 1_000).unwrap();
        assert_eq!((plan.addresses(), plan.ports_per_addr()), (2, 500));
        assert_eq!(plan.addr(1), "10.89.0.3:20000".parse().unwrap());
        assert_eq!(plan.addr(999), "10.89.0.3:20499".parse().unwrap());
        // One million flows need 25 addresses; 24 hold 960,000.
        let million = client_plan(first, 25, 1_000_000).unwrap();
        assert_eq!(
            (million.addresses(), million.ports_per_addr()),
            (25, PORTS_PER_CLIENT_ADDR)
        );
        let e = client_plan(first, 24, 1_000_000).unwrap_err();
        assert!(e.contains("between 1 and 960000"), "{e}");
        assert!(client_plan(first, 1, 0).is_err());
        assert_eq!(max_flows(MAX_CLIENT_ADDRESSES * 2), MAX_FLOWS);
        // IPv6 the same way.
        let v6 = client_plan("fd89::2".parse().unwrap(), 2, 3).unwrap();
        assert_eq!(v6.addr(1), "[fd89::3]:20000".parse().unwrap());
    }
}
