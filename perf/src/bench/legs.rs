//! Where a forwarder's core spends its time, leg by leg: receiving from clients, sending
//! to clients, receiving from the internal side (transceivers), sending to it, waiting,
//! softirq work, and the relay's own work between system calls. `perf record` traces the
//! core's system calls, context switches and softirqs (tracepoints: no hardware counters,
//! no sampling error), and each system call is charged to the side its socket faces: a
//! socket bound to the VIP's port faces the clients, any other socket the internal side.
//!
//! Accounting, per interval between two events on the core: a softirq that is running
//! is charged as softirq (inside or outside a system call of the task it interrupted);
//! otherwise the task on the core is charged: idle, `ksoftirqd` (softirq), a relay
//! thread inside a system call (that call's leg) or outside one (its own work), or any
//! other task (perf itself among them: a measuring tool's share is shown, not hidden).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::bench::profile::{LINUX_PERF, PerfRecord};

/// The side of the relay a socket faces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Bound to the VIP's port: the clients.
    Client,
    /// Any other socket: the transceivers (or the upstream of a proxy).
    Internal,
}

/// What a system call does, by its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum CallKind {
    Receive,
    Send,
    Wait,
    Other,
}

fn call_kind(nr: i64) -> CallKind {
    const RECEIVE: [i64; 4] = [
        libc::SYS_recvmmsg,
        libc::SYS_recvfrom,
        libc::SYS_recvmsg,
        libc::SYS_read,
    ];
    const SEND: [i64; 4] = [
        libc::SYS_sendmmsg,
        libc::SYS_sendto,
        libc::SYS_sendmsg,
        libc::SYS_write,
    ];
    const WAIT: [i64; 5] = [
        libc::SYS_epoll_wait,
        libc::SYS_epoll_pwait,
        libc::SYS_poll,
        libc::SYS_ppoll,
        libc::SYS_pselect6,
    ];
    if RECEIVE.contains(&nr) {
        CallKind::Receive
    } else if SEND.contains(&nr) {
        CallKind::Send
    } else if WAIT.contains(&nr) {
        CallKind::Wait
    } else {
        CallKind::Other
    }
}

/// One core's time over a recording, in nanoseconds, by what it was spent on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Legs {
    /// Receive calls (`recvmmsg`, `recvmsg`, …), by [`Side`]: client, internal.
    pub receive: [u64; 2],
    /// Send calls (`sendmmsg`, `sendmsg`, …), by [`Side`]: client, internal.
    pub send: [u64; 2],
    /// Waiting calls on the core (`epoll_wait` and kin), their on-core part.
    pub wait: u64,
    /// Every other system call of the relay's threads (timers, files, receive or send
    /// on a descriptor that is not a UDP or TCP socket).
    pub other_calls: u64,
    /// Softirqs run inside the relay's system calls (on veth, a send runs the
    /// receiver's stack here).
    pub softirq_in_calls: u64,
    /// Softirqs run elsewhere: on interrupt exit, in `ksoftirqd`, or while the core idled.
    pub softirq_outside: u64,
    /// The relay's threads outside system calls and softirqs: its own work.
    pub own_work: u64,
    /// Any other task on the core (kernel workers, perf itself).
    pub other_tasks: u64,
    /// Idle.
    pub idle: u64,
    /// Events traced: each costs the core a little, which the parts above include.
    pub events: u64,
}

impl Legs {
    /// The busy nanoseconds: everything but idle.
    pub fn busy(&self) -> u64 {
        self.receive.iter().chain(&self.send).sum::<u64>()
            + self.wait
            + self.other_calls
            + self.softirq_in_calls
            + self.softirq_outside
            + self.own_work
            + self.other_tasks
    }

    /// Each part with its name, in the report's order; `sides` names what the two
    /// sides' sockets face (for a relay: the clients, the internal side).
    pub fn parts(&self, sides: [&str; 2]) -> [(String, u64); 10] {
        let [client, internal] = sides;
        [
            (format!("receive from {client}"), self.receive[0]),
            (format!("send to {client}"), self.send[0]),
            (format!("receive from {internal}"), self.receive[1]),
            (format!("send to {internal}"), self.send[1]),
            ("its own work".to_string(), self.own_work),
            (
                "softirq inside its calls".to_string(),
                self.softirq_in_calls,
            ),
            ("softirq elsewhere".to_string(), self.softirq_outside),
            ("waiting (epoll), on the core".to_string(), self.wait),
            ("other system calls".to_string(), self.other_calls),
            (
                "other tasks (perf, kernel workers)".to_string(),
                self.other_tasks,
            ),
        ]
    }
}

/// The tracepoints [`LegRecording`] needs.
const EVENTS: [&str; 5] = [
    "raw_syscalls:sys_enter",
    "raw_syscalls:sys_exit",
    "sched:sched_switch",
    "irq:softirq_entry",
    "irq:softirq_exit",
];

/// A running trace of one core; [`LegRecording::finish`] stops it and splits its time.
#[derive(Debug)]
pub struct LegRecording {
    record: PerfRecord,
}

impl LegRecording {
    /// Starts tracing `cpu` into a file under `dir`; `None` when Linux perf is missing
    /// or will not start.
    pub fn start(cpu: usize, dir: &Path, name: &str) -> Option<LegRecording> {
        let cpu = cpu.to_string();
        let mut args = vec!["-C", cpu.as_str()];
        for event in EVENTS {
            // perf's own events would feed on themselves (each write of the trace is a
            // system call on the traced core when perf runs there).
            args.extend(["-e", event, "--exclude-perf"]);
        }
        Some(LegRecording {
            record: PerfRecord::start(&args, dir, &format!("{name}-legs"))?,
        })
    }

    /// Stops the trace and splits the core's time; sockets on `clients_reach`'s port
    /// face the clients, and the tasks that hold one are the relay's. Call it while the traced processes still run: their sockets are looked
    /// up in `/proc`.
    pub fn finish(mut self, clients_reach: SocketAddr) -> Option<Legs> {
        let port = clients_reach.port();
        let (data, _) = self.record.stop();
        let out = Command::new(LINUX_PERF)
            .args(["script", "--ns", "-F", "comm,tid,time,event,trace", "-i"])
            .arg(data)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let trace = parse_trace(&String::from_utf8_lossy(&out.stdout));
        if trace.events.is_empty() {
            return None;
        }
        let relay_tasks: std::collections::HashSet<u32> = trace
            .tasks()
            .into_iter()
            .filter(|tid| holds_a_socket_on(*tid, port))
            .collect();
        Some(trace.legs(
            |tid| relay_tasks.contains(&tid),
            |tid, fd| side_of_descriptor(tid, fd, port),
        ))
    }
}

/// One traced event.
#[derive(Clone, Debug, PartialEq)]
enum Event {
    Enter { nr: i64, fd: i64 },
    Exit,
    Switch { next_pid: u32, next_comm: String },
    SoftirqEntry,
    SoftirqExit,
}

/// A traced event on the core: when, which task was current, what.
#[derive(Clone, Debug, PartialEq)]
struct Traced {
    ns: u64,
    tid: u32,
    comm: String,
    event: Event,
}

/// The parsed trace.
#[derive(Debug, Default)]
struct Trace {
    events: Vec<Traced>,
}

/// Parses `perf script --ns -F comm,tid,time,event,trace` lines:
/// `relay-w0 4242 1686.029639123: raw_syscalls:sys_enter: NR 299 (5, …)`.
fn parse_trace(text: &str) -> Trace {
    let events = text.lines().filter_map(parse_line).collect();
    Trace { events }
}

fn parse_line(line: &str) -> Option<Traced> {
    let (head, rest) = line.split_once(": ")?;
    // `comm` may hold spaces; the tid and the time are the last two fields.
    let head_fields: Vec<&str> = head.split_whitespace().collect();
    let [comm @ .., tid, time] = head_fields.as_slice() else {
        return None;
    };
    let tid = tid.parse().ok()?;
    let comm = comm.join(" ");
    let (secs, nanos) = time.split_once('.')?;
    let ns = secs.parse::<u64>().ok()? * 1_000_000_000 + nanos.parse::<u64>().ok()?;
    let (name, trace) = rest.split_once(": ").unwrap_or((rest, ""));
    let event = match name.trim() {
        "raw_syscalls:sys_enter" => {
            let trace = trace.strip_prefix("NR ")?;
            let (nr, args) = trace.split_once(" (")?;
            let fd = args.split([',', ')']).next()?.trim();
            Event::Enter {
                nr: nr.trim().parse().ok()?,
                fd: i64::from_str_radix(fd, 16).ok()?,
            }
        }
        "raw_syscalls:sys_exit" => Event::Exit,
        "sched:sched_switch" => {
            let next = trace.split("==>").nth(1)?;
            let next_pid = field(next, "next_pid=")?.parse().ok()?;
            let next_comm = field(next, "next_comm=")?.to_string();
            Event::Switch {
                next_pid,
                next_comm,
            }
        }
        "irq:softirq_entry" => Event::SoftirqEntry,
        "irq:softirq_exit" => Event::SoftirqExit,
        _ => return None,
    };
    Some(Traced {
        ns,
        tid,
        comm,
        event,
    })
}

/// The value after `key` in `text`, up to the next space.
fn field<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    let at = text.find(key)? + key.len();
    text[at..].split_whitespace().next()
}

/// What kind of task a thread is, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskKind {
    Idle,
    Softirq,
    Other,
    Relay,
}

/// A task's kind: idle, `ksoftirqd`, the relay (`is_relay`: a thread of a process that
/// holds a socket on the VIP's port), or any other.
fn task_kind(pid: u32, comm: &str, is_relay: &impl Fn(u32) -> bool) -> TaskKind {
    if pid == 0 || comm.starts_with("swapper") {
        TaskKind::Idle
    } else if comm.starts_with("ksoftirqd/") {
        TaskKind::Softirq
    } else if is_relay(pid) {
        TaskKind::Relay
    } else {
        TaskKind::Other
    }
}

/// Where an interval is charged before the side of a call's socket is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Charge {
    Idle,
    SoftirqInCall,
    SoftirqOutside,
    OtherTask,
    OwnWork,
    Call { kind: CallKind, tid: u32, fd: i64 },
}

impl Trace {
    /// Every thread the trace names (as current, or switched to).
    fn tasks(&self) -> Vec<u32> {
        let mut tasks: Vec<u32> = self
            .events
            .iter()
            .flat_map(|t| match t.event {
                Event::Switch { next_pid, .. } => [t.tid, next_pid],
                _ => [t.tid, t.tid],
            })
            .collect();
        tasks.sort_unstable();
        tasks.dedup();
        tasks
    }

    /// Splits the traced time; `is_relay(tid)` says whether a thread is the relay's, and
    /// `side_of(tid, fd)` which side a call's descriptor faces (`None`: not a socket).
    fn legs(
        &self,
        is_relay: impl Fn(u32) -> bool,
        side_of: impl Fn(u32, i64) -> Option<Side>,
    ) -> Legs {
        let mut charged: HashMap<Charge, u64> = HashMap::new();
        let mut current: Option<(u32, TaskKind)> = None;
        let mut open_calls: HashMap<u32, (i64, i64)> = HashMap::new();
        let mut in_softirq = false;
        let mut last: Option<u64> = None;
        for traced in &self.events {
            // Events before the first switch name the current task themselves.
            let (tid, kind) = *current
                .get_or_insert((traced.tid, task_kind(traced.tid, &traced.comm, &is_relay)));
            if let Some(since) = last {
                let open = open_calls.get(&tid).copied();
                let charge = match (in_softirq, kind, open) {
                    (true, TaskKind::Relay, Some(_)) => Charge::SoftirqInCall,
                    (true, _, _) | (false, TaskKind::Softirq, _) => Charge::SoftirqOutside,
                    (false, TaskKind::Idle, _) => Charge::Idle,
                    (false, TaskKind::Other, _) => Charge::OtherTask,
                    (false, TaskKind::Relay, Some((nr, fd))) => Charge::Call {
                        kind: call_kind(nr),
                        tid,
                        fd,
                    },
                    (false, TaskKind::Relay, None) => Charge::OwnWork,
                };
                *charged.entry(charge).or_default() += traced.ns.saturating_sub(since);
            }
            last = Some(traced.ns);
            match &traced.event {
                Event::Enter { nr, fd } => {
                    open_calls.insert(traced.tid, (*nr, *fd));
                }
                Event::Exit => {
                    open_calls.remove(&traced.tid);
                }
                Event::Switch {
                    next_pid,
                    next_comm,
                } => current = Some((*next_pid, task_kind(*next_pid, next_comm, &is_relay))),
                Event::SoftirqEntry => in_softirq = true,
                Event::SoftirqExit => in_softirq = false,
            }
        }
        let mut legs = Legs {
            events: self.events.len() as u64,
            ..Legs::default()
        };
        for (charge, ns) in charged {
            match charge {
                Charge::Idle => legs.idle += ns,
                Charge::SoftirqInCall => legs.softirq_in_calls += ns,
                Charge::SoftirqOutside => legs.softirq_outside += ns,
                Charge::OtherTask => legs.other_tasks += ns,
                Charge::OwnWork => legs.own_work += ns,
                Charge::Call { kind, tid, fd } => {
                    let side = side_of(tid, fd);
                    match (kind, side) {
                        (CallKind::Receive, Some(side)) => legs.receive[side as usize] += ns,
                        (CallKind::Send, Some(side)) => legs.send[side as usize] += ns,
                        (CallKind::Wait, _) => legs.wait += ns,
                        _ => legs.other_calls += ns,
                    }
                }
            }
        }
        legs
    }
}

/// Whether thread `tid`'s process holds a UDP or TCP socket on local port `port`.
fn holds_a_socket_on(tid: u32, port: u16) -> bool {
    std::fs::read_dir(format!("/proc/{tid}/fd")).is_ok_and(|descriptors| {
        descriptors
            .filter_map(|d| socket_inode(&d.ok()?.path()))
            .any(|inode| local_port(tid, &inode) == Some(port))
    })
}

/// The side socket `fd` of thread `tid` faces, by its local port. `None` for a
/// descriptor that is not a UDP or TCP socket (or is gone).
fn side_of_descriptor(tid: u32, fd: i64, vip_port: u16) -> Option<Side> {
    let inode = socket_inode(Path::new(&format!("/proc/{tid}/fd/{fd}")))?;
    Some(if local_port(tid, &inode)? == vip_port {
        Side::Client
    } else {
        Side::Internal
    })
}

/// The inode of the socket a `/proc/<pid>/fd/<n>` link names (`socket:[12345]`).
fn socket_inode(descriptor: &Path) -> Option<String> {
    let link = std::fs::read_link(descriptor).ok()?;
    let inode = link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?;
    Some(inode.to_string())
}

/// The local port of socket `inode`, from thread `tid`'s view (its network namespace)
/// of `/proc/net/{udp,udp6,tcp,tcp6}`.
fn local_port(tid: u32, inode: &str) -> Option<u16> {
    ["udp", "udp6", "tcp", "tcp6"].iter().find_map(|table| {
        let text = std::fs::read_to_string(format!("/proc/{tid}/net/{table}")).ok()?;
        local_port_of_inode(&text, inode)
    })
}

/// The local port of the socket with `inode` in a `/proc/net/udp`-style table
/// (`sl local_address rem_address st … uid timeout inode …`, addresses as `HEX:PORT`).
fn local_port_of_inode(table: &str, inode: &str) -> Option<u16> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(9) != Some(&inode) {
            return None;
        }
        let (_, port) = fields.get(1)?.rsplit_once(':')?;
        u16::from_str_radix(port, 16).ok()
    })
}

/// The sides of a relay: its clients, and its transceivers (or a proxy's upstream).
pub const RELAY_SIDES: [&str; 2] = ["clients", "the internal side"];

/// The Markdown of one setup's split, titled `title`: per datagram (`packets` of them
/// over the recording) and as a share of the busy time, the sides named by `sides`.
pub fn markdown(title: &str, packets: u64, legs: &Legs, sides: [&str; 2]) -> String {
    let busy = legs.busy().max(1) as f64;
    let per_packet = |ns: u64| ns as f64 / 1e3 / packets.max(1) as f64;
    let mut out = format!(
        "\n### {title}\n\n\
         {packets} datagrams; busy {:.3} µs per datagram ({:.0} % of the \
         traced time), {:.2} events traced per datagram (each costs the core a little: the \
         parts include it). Each system call is charged to the side its socket faces.\n\n\
         | part | µs per datagram | share of busy |\n|---|---:|---:|\n",
        per_packet(legs.busy()),
        busy / (busy + legs.idle as f64) * 100.0,
        legs.events as f64 / packets.max(1) as f64,
    );
    for (name, ns) in legs.parts(sides) {
        out.push_str(&format!(
            "| {name} | {:.3} | {:.1} % |\n",
            per_packet(ns),
            ns as f64 / busy * 100.0
        ));
    }
    out
}

/// Reads back from a report the µs per datagram of part `part` in the first split whose
/// title starts with `title` (what [`markdown`] wrote).
pub fn read_part(report: &str, title: &str, part: &str) -> Option<f64> {
    let section = report.split(&format!("\n### {title}")).nth(1)?;
    let section = section.split("\n### ").next()?;
    let row = format!("| {part} | ");
    section
        .lines()
        .find_map(|l| l.strip_prefix(&row))?
        .split(" |")
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "\
        relay-w0  4242  100.000000000: raw_syscalls:sys_enter: NR 299 (5, 7f00, 20, 40, 0, 0)
        relay-w0  4242 100.000001000:  raw_syscalls:sys_exit: NR 299 = 20
        relay-w0  4242 100.000004000: raw_syscalls:sys_enter: NR 307 (7, 7f00, 20, 0, 0, 0)
        relay-w0  4242 100.000004500:      irq:softirq_entry: vec=3 [action=NET_RX]
        relay-w0  4242 100.000005500:       irq:softirq_exit: vec=3 [action=NET_RX]
        relay-w0  4242 100.000006000:  raw_syscalls:sys_exit: NR 307 = 20
        relay-w0  4242 100.000006000: raw_syscalls:sys_enter: NR 232 (3, 7f00, 400, ffffffff, 0, 0)
        relay-w0  4242 100.000006200:     sched:sched_switch: prev_comm=relay-w0 prev_pid=4242 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
       swapper/1     0 100.000010200:      irq:softirq_entry: vec=3 [action=NET_RX]
       swapper/1     0 100.000010700:       irq:softirq_exit: vec=3 [action=NET_RX]
       swapper/1     0 100.000011000:     sched:sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=relay-w0 next_pid=4242 next_prio=120
        relay-w0  4242 100.000011100:  raw_syscalls:sys_exit: NR 232 = 1
        relay-w0  4242 100.000013100: raw_syscalls:sys_enter: NR 299 (9, 7f00, 20, 40, 0, 0)
        relay-w0  4242 100.000013600:  raw_syscalls:sys_exit: NR 299 = 0
";

    #[test]
    fn each_interval_goes_to_its_leg_by_the_sockets_side() {
        let trace = parse_trace(TRACE);
        assert_eq!(trace.events.len(), 14, "every line parsed");
        assert_eq!(
            trace.events[0].event,
            Event::Enter {
                nr: libc::SYS_recvmmsg,
                fd: 5
            }
        );
        // fd 5 and 7 face the clients, fd 9 the internal side, fd 3 is the epoll.
        assert_eq!(trace.tasks(), vec![0, 4242]);
        let legs = trace.legs(
            |tid| tid == 4242,
            |tid, fd| {
                assert_eq!(tid, 4242);
                match fd {
                    5 | 7 => Some(Side::Client),
                    9 => Some(Side::Internal),
                    _ => None,
                }
            },
        );
        assert_eq!(legs.receive, [1_000, 500]);
        // The send: 2 µs less the 1 µs of softirq inside it.
        assert_eq!(legs.send, [1_000, 0]);
        assert_eq!(legs.softirq_in_calls, 1_000);
        // Own work: 1→4 µs and 11.1→13.1 µs.
        assert_eq!(legs.own_work, 5_000);
        // The epoll: 0.2 µs before the switch and 0.1 µs after it.
        assert_eq!(legs.wait, 300);
        assert_eq!(legs.softirq_outside, 500);
        assert_eq!(legs.idle, 4_300);
        assert_eq!(legs.busy() + legs.idle, 13_600);
    }

    #[test]
    fn a_split_reads_back_from_its_markdown() {
        let legs = Legs {
            receive: [2_000, 0],
            send: [0, 3_000],
            own_work: 1_000,
            idle: 4_000,
            ..Legs::default()
        };
        let report = format!(
            "# A report\n{}\n### after\n\n| its own work | 9.000 | 1 % |\n",
            markdown("relay-mio: the core by leg", 1_000, &legs, RELAY_SIDES)
        );
        let part = |name| read_part(&report, "relay-mio: the core", name);
        assert_eq!(part("receive from clients"), Some(0.002));
        assert_eq!(part("send to the internal side"), Some(0.003));
        assert_eq!(part("its own work"), Some(0.001), "not the next section's");
        assert_eq!(part("no such part"), None);
        assert_eq!(read_part(&report, "nginx", "its own work"), None);
    }

    #[test]
    fn a_socket_is_found_by_its_inode_and_the_vips_port_faces_the_clients() {
        let table = "\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  1: 0100007F:0D96 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 51234 2 0000000000000000 0
  2: 0100007F:A028 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 51235 2 0000000000000000 0
";
        assert_eq!(local_port_of_inode(table, "51234"), Some(3478));
        assert_eq!(local_port_of_inode(table, "51235"), Some(41000));
        assert_eq!(local_port_of_inode(table, "9"), None);
    }

    #[test]
    fn the_relay_is_whoever_holds_the_vips_port_and_idle_and_ksoftirqd_are_known() {
        let relay = |tid| tid == 4242 || tid == 4243;
        assert_eq!(task_kind(0, "swapper/1", &relay), TaskKind::Idle);
        assert_eq!(task_kind(17, "ksoftirqd/1", &relay), TaskKind::Softirq);
        assert_eq!(task_kind(900, "perf", &relay), TaskKind::Other);
        assert_eq!(task_kind(901, "kworker/1:2", &relay), TaskKind::Other);
        assert_eq!(task_kind(4242, "relay-w0", &relay), TaskKind::Relay);
        assert_eq!(task_kind(4243, "nginx", &relay), TaskKind::Relay);
    }

    #[test]
    fn this_process_holds_the_port_of_its_own_socket_and_not_another() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        let me = std::process::id();
        assert!(holds_a_socket_on(me, port));
        assert!(!holds_a_socket_on(me, port.wrapping_add(1).max(1)));
        let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
        assert_eq!(
            side_of_descriptor(me, i64::from(fd), port),
            Some(Side::Client)
        );
        assert_eq!(
            side_of_descriptor(me, i64::from(fd), 1),
            Some(Side::Internal)
        );
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let file_fd = i64::from(std::os::fd::AsRawFd::as_raw_fd(&file));
        assert_eq!(
            side_of_descriptor(me, file_fd, port),
            None,
            "a file is no socket"
        );
    }
}
