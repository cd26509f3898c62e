//! The load tools at work: the programs of [`super::programs`] loaded and attached,
//! the generator driven, the sink read, and the [`Load`] a search drives.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ufrag_bpf::sys::{self as bpf, Map};

use super::programs::{
    Counted, Rewrite, generator_program, probe_program, relay_program, sink_program,
};
use super::{Attached, Iface, Stamps, ktime_at, ktime_now, state};
use crate::bench::load::{FlowPlan, Load, Sink, Trial};

/// The reference relay attached to the relay's interface (native XDP); detached on
/// drop. Its `XDP_TX` frames reach the veth's peer only when the peer has an XDP program
/// of its own ([`PeerPass`]): `perf compare` keeps one there for every setup alike.
#[derive(Debug)]
pub struct XdpRelay {
    _relay: Attached,
}

impl XdpRelay {
    /// Attaches to `on`.
    pub fn attach(on: &Iface, rewrite: &Rewrite) -> io::Result<Self> {
        let prog = relay_program(rewrite)?;
        Ok(XdpRelay {
            _relay: on.attach_native(prog)?,
        })
    }

    /// Its verdict and output on one frame (`BPF_PROG_TEST_RUN`), for tests.
    pub fn run_once(rewrite: &Rewrite, frame: &[u8]) -> io::Result<(u32, Vec<u8>)> {
        bpf::prog_test_run_output(&relay_program(rewrite)?, frame)
    }
}

/// An `XDP_PASS` program on a veth's far end, which the veth needs before `XDP_TX` or
/// AF_XDP frames sent from its near end can arrive; detached on drop.
#[derive(Debug)]
pub struct PeerPass {
    _attached: Attached,
}

impl PeerPass {
    /// Attaches it to `peer`.
    pub fn attach(peer: &Iface) -> io::Result<Self> {
        Ok(PeerPass {
            _attached: peer.attach_native(ufrag_bpf::object::pass_program()?)?,
        })
    }
}

/// Live-frame transmitter on one interface.
#[derive(Debug)]
pub struct XdpGenerator {
    prog: Arc<OwnedFd>,
    state: Map,
    frame: Vec<u8>,
    from: Iface,
    /// The CPU its thread busy-polls: the load tools' unless [`XdpGenerator::on_cpu`].
    cpu: Option<usize>,
    _peer: Option<PeerPass>,
}

/// Frames per `BPF_PROG_RUN` batch (the kernel's NAPI budget).
const LIVE_BATCH: u32 = 64;
/// The largest burst after a stall, in frames.
const MAX_BURST: u64 = 64;

/// The signal that ends a generator's `BPF_PROG_RUN` (which returns EINTR once a signal
/// is pending); its handler does nothing else.
const STOP_SIGNAL: i32 = signal_hook::consts::SIGUSR1;

fn install_stop_handler() -> io::Result<()> {
    static INSTALLED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            signal_hook::flag::register(STOP_SIGNAL, Arc::new(AtomicBool::new(false)))
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(io::Error::other)
}

impl XdpGenerator {
    /// Copies of `frame` (a [`super::template_frame`] from `plan`'s first flow), one flow after
    /// another of `plan` as the frames' source, transmitted on `from`. `peer` is the far
    /// end of `from`'s veth pair; it gets an `XDP_PASS` program so that veth accepts XDP
    /// frames (a NIC has no peer: `None`).
    pub fn new(
        from: Iface,
        peer: Option<&Iface>,
        frame: Vec<u8>,
        plan: &FlowPlan,
        epoch: Instant,
    ) -> io::Result<Self> {
        Self::stamping(from, peer, frame, (plan, Stamps::source_of(plan)), epoch)
    }

    /// Like [`XdpGenerator::new`], with each flow written where `stamps` say (and
    /// `frame` carrying the plan's first flow there).
    pub fn stamping(
        from: Iface,
        peer: Option<&Iface>,
        frame: Vec<u8>,
        (plan, stamps): (&FlowPlan, Stamps),
        epoch: Instant,
    ) -> io::Result<Self> {
        if frame.len() < stamps.datagram_at + 12 || stamps.flow_of(&frame) != plan.addr(0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a template frame with the plan's first flow where the stamps go",
            ));
        }
        install_stop_handler()?;
        let peer = peer.map(PeerPass::attach).transpose()?;
        let (prog, state) = generator_program(&frame, (plan, stamps), ktime_at(epoch))?;
        Ok(XdpGenerator {
            prog: Arc::new(prog),
            state,
            frame,
            from,
            cpu: None,
            _peer: peer,
        })
    }

    /// This generator, its thread pinned to `cpu` rather than the load tools' CPU (a
    /// second generator sending at the same time, on a core of its own).
    pub fn on_cpu(self, cpu: usize) -> Self {
        XdpGenerator {
            cpu: Some(cpu),
            ..self
        }
    }

    /// The first `frames` frames the program makes, as it makes them
    /// (`BPF_PROG_TEST_RUN`, nothing transmitted), for tests.
    pub fn stamp(&self, frames: u64) -> io::Result<Vec<Vec<u8>>> {
        self.write_state([0, 1, 0, frames, MAX_BURST, 0])?;
        (0..frames)
            .map(|_| bpf::prog_test_run_output(&self.prog, &self.frame).map(|(_, f)| f))
            .collect()
    }

    fn write_state(&self, fields: [u64; state::LEN / 8]) -> io::Result<()> {
        let value: Vec<u8> = fields.iter().flat_map(|f| f.to_ne_bytes()).collect();
        self.state.update(&0u32.to_ne_bytes(), &value)
    }

    fn read_state(&self, field: i16) -> io::Result<u64> {
        let mut value = [0u8; state::LEN];
        self.state.lookup(&0u32.to_ne_bytes(), &mut value)?;
        let at = field as usize;
        Ok(u64::from_ne_bytes(
            value[at..at + 8].try_into().expect("8 bytes"),
        ))
    }

    /// Transmits `rate_pps × duration` frames at `rate_pps`, paced by the program, from
    /// one `BPF_PROG_RUN` on a thread in the interface's namespace pinned to the load CPU
    /// or the one [`XdpGenerator::on_cpu`] gave it (it busy-polls that core), stopped by a
    /// signal once all are sent or the time is well past; returns (frames sent, seconds
    /// from the first to the last).
    pub fn send(&self, rate_pps: u64, duration: Duration) -> io::Result<(u64, f64)> {
        let total = (rate_pps as f64 * duration.as_secs_f64()) as u64;
        let interval_ns = (1e9 / rate_pps.max(1) as f64).max(1.0) as u64;
        self.write_state([0, interval_ns, 0, total, MAX_BURST * interval_ns, 0])?;
        let prog = Arc::clone(&self.prog);
        let frame = self.frame.clone();
        let ifindex = self.from.ifindex;
        let thread_id = Arc::new(std::sync::Mutex::new(None));
        let done = Arc::new(AtomicBool::new(false));
        let (id_out, done_out) = (Arc::clone(&thread_id), Arc::clone(&done));
        let start = Instant::now();
        let cpu = self.cpu;
        let handle =
            ufrag_testbed::netns::spawn_in(self.from.ns.as_deref(), "xdp-gen", move || {
                match cpu {
                    // A second generator that shared a core with the first would halve
                    // both: one not where it was put fails rather than measures that.
                    Some(id) if !core_affinity::set_for_current(core_affinity::CoreId { id }) => {
                        done_out.store(true, Ordering::SeqCst);
                        return Err(io::Error::other(format!(
                            "the live-frames generator could not be pinned to CPU {id}"
                        )));
                    }
                    Some(_) => {}
                    None => crate::bench::load::pin_to_load_cpu(),
                }
                *id_out.lock().expect("thread id") = Some(nix::sys::pthread::pthread_self());
                let result = loop {
                    match bpf::prog_run_live(&prog, &frame, ifindex, 0, u32::MAX, LIVE_BATCH) {
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => break Ok(()),
                        Err(e) => break Err(e),
                        Ok(()) => {} // four billion runs done: go on
                    }
                };
                done_out.store(true, Ordering::SeqCst);
                result
            })?;
        let deadline = duration + duration / 2 + Duration::from_millis(200);
        let mut finished = None;
        while start.elapsed() < deadline && !done.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
            if self.read_state(state::SENT)? >= total {
                finished = Some(ktime_now());
                break;
            }
        }
        while !done.load(Ordering::SeqCst) {
            if let Some(id) = *thread_id.lock().expect("thread id") {
                let _ = nix::sys::pthread::pthread_kill(id, nix::sys::signal::Signal::SIGUSR1);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        handle
            .join()
            .map_err(|_| io::Error::other("generator thread panicked"))???;
        let sent = self.read_state(state::SENT)?;
        let first = self.read_state(state::FIRST_NS)?;
        let last = finished.unwrap_or_else(ktime_now);
        // The sending took from the first frame until the last was seen sent (polled each
        // millisecond), plus the interval the last frame stands for.
        let seconds = (last.saturating_sub(first) + interval_ns) as f64 / 1e9;
        Ok((sent, seconds))
    }
}

/// Why this kernel refuses `BPF_PROG_RUN` with live frames, the generator's mechanism,
/// if it does: some answer EPERM to every caller (a kernel locked down by its
/// configuration, for one). One run of a program that drops its frame, on loopback:
/// nothing is transmitted. Only a refusal counts; another error is the generator's to
/// report when it runs.
pub fn live_frames_refused() -> Option<String> {
    let prog = probe_program().ok()?;
    let loopback = 1;
    match bpf::prog_run_live(&prog, &[0u8; 64], loopback, 0, 1, 1) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Some(format!(
            "this kernel refuses BPF_PROG_RUN with live frames ({e})"
        )),
        _ => None,
    }
}

/// For a test that needs the live-frames generator: `true` (and a loud line, which
/// `scripts/test-summary.sh` counts as skipped, not passed) when the kernel refuses it.
/// Written straight to stderr, past the test harness's capture.
pub fn skip_without_live_frames(test: &str) -> bool {
    let Some(why) = live_frames_refused() else {
        return false;
    };
    use std::io::Write as _;
    let _ = writeln!(io::stderr(), "!! SKIPPED at run time: {test}: {why}");
    true
}

/// A counting sink in XDP on one interface.
#[derive(Debug)]
pub struct XdpSink {
    counts: Map,
    _attached: Attached,
    base: u64,
}

impl XdpSink {
    /// Counts the `counted` UDP frames arriving on `on`, passing one in `sample_every`.
    pub fn attach(on: &Iface, counted: Counted, sample_every: u32) -> io::Result<Self> {
        let (prog, counts) = sink_program(counted, sample_every)?;
        let attached = on.attach_native(prog)?;
        Ok(XdpSink {
            counts,
            _attached: attached,
            base: 0,
        })
    }

    fn total(&self) -> u64 {
        self.counts.counters(0).map_or(0, |v| v.iter().sum())
    }

    /// Starts a new count.
    pub fn reset(&mut self) {
        self.base = self.total();
    }

    /// Frames counted since the last reset.
    pub fn received(&self) -> u64 {
        self.total() - self.base
    }
}

/// A paced sender: the socket generator or the live-frame one.
#[derive(Debug)]
pub enum Sender {
    /// `sendmmsg` from client sockets, to this address.
    Sockets(crate::bench::load::Generator, std::net::SocketAddr),
    /// `BPF_PROG_RUN` live frames.
    LiveFrames(XdpGenerator),
}

impl Sender {
    fn send(&mut self, rate_pps: u64, duration: Duration) -> io::Result<(u64, f64)> {
        match self {
            Sender::Sockets(g, to) => Ok(g.send_paced(*to, rate_pps, duration)),
            Sender::LiveFrames(g) => g.send(rate_pps, duration),
        }
    }
}

/// A sender counted by the XDP sink, latency from the socket sink's sample.
#[derive(Debug)]
pub struct XdpLoad {
    /// The sender.
    pub generator: Sender,
    /// The sender of the latency trial, if not `generator`: a busy-polling generator
    /// shares its core with the latency socket and would put its own scheduling delay
    /// into the tail.
    pub latency_generator: Option<Sender>,
    /// The counter.
    pub sink: XdpSink,
    /// The socket the sink passes its sample to.
    pub sampler: Sink,
    /// How long to wait for stragglers.
    pub settle: Duration,
}

impl Load for XdpLoad {
    fn trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.sink.reset();
        self.sampler.reset();
        let (sent, seconds) = match self.generator.send(rate_pps, duration) {
            Ok(r) => r,
            Err(e) => {
                crate::say!("  XDP generator failed: {e}");
                (0, duration.as_secs_f64())
            }
        };
        std::thread::sleep(self.settle);
        let received = self.sink.received();
        let (_, latency) = self.sampler.take();
        Trial::from_counts(rate_pps, sent, seconds, received, &latency)
    }

    fn latency_trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        let Some(mut other) = self.latency_generator.take() else {
            return self.trial(rate_pps, duration);
        };
        std::mem::swap(&mut self.generator, &mut other);
        let t = self.trial(rate_pps, duration);
        std::mem::swap(&mut self.generator, &mut other);
        self.latency_generator = Some(other);
        t
    }
}

/// Uplink and downlink at once, as in a conversation: a trial offers `downlink_share` of
/// the rate downlink and the rest uplink (half each way in a conversation, more downlink
/// while the model speaks), the downlink's generator on a thread of its own beside the
/// uplink's (both on the tools' CPU), and counts both ways together. The latency is the
/// uplink's sample.
#[derive(Debug)]
pub struct Conversation {
    /// Client → transceiver.
    pub up: XdpLoad,
    /// Transceiver → client.
    pub down: XdpLoad,
    /// The share of each trial's rate offered downlink (0.5: a conversation).
    pub downlink_share: f64,
}

impl Conversation {
    /// Runs `up` on the uplink and a plain trial on the downlink, side by side, each at
    /// its share of `rate_pps`; the two trials summed.
    fn both(
        &mut self,
        rate_pps: u64,
        duration: Duration,
        up: fn(&mut XdpLoad, u64, Duration) -> Trial,
    ) -> Trial {
        let down_pps = (rate_pps as f64 * self.downlink_share).round() as u64;
        let (up_way, down_way) = (&mut self.up, &mut self.down);
        let (u, d) = std::thread::scope(|scope| {
            let d = scope.spawn(move || down_way.trial(down_pps, duration));
            let u = up(up_way, rate_pps - down_pps, duration);
            (u, d.join().expect("the downlink trial"))
        });
        Trial {
            offered_pps: rate_pps,
            sent_pps: u.sent_pps + d.sent_pps,
            sent: u.sent + d.sent,
            received: u.received + d.received,
            latency: u.latency,
        }
    }
}

impl Load for Conversation {
    fn trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.both(rate_pps, duration, |l, r, d| l.trial(r, d))
    }

    fn latency_trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.both(rate_pps, duration, |l, r, d| l.latency_trial(r, d))
    }
}
