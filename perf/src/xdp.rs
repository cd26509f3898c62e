//! Load tools in BPF, so that the tools are never the limit of what they measure.
//!
//! [`XdpGenerator`] transmits one prebuilt IPv4/UDP frame many times with `BPF_PROG_RUN`
//! in live-frames mode (the mechanism behind xdp-trafficgen): a small XDP program stamps
//! each copy with a flow (source port), a sequence number and the send time, and returns
//! `XDP_TX`, so the frame leaves the client's veth as if a NIC had sent it: no socket, no
//! syscall per batch of 64, no IP output path. [`XdpSink`] counts frames for one UDP
//! port in XDP on the receiving veth (per-CPU counters, `XDP_DROP`) and passes one in
//! `sample_every` to the kernel, where the socket [`crate::load::Sink`] reads its send
//! time for latency. Both speak the datagram format of [`crate::load`].

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::OwnedFd;
use std::process::Command;
use std::time::{Duration, Instant};

use ufrag_bpf::asm::{Asm, B, DW, H, Insn, JEQ, JGT, JNE, action, helper};
use ufrag_bpf::sys::{self as bpf, Map};

use crate::load::{DATAGRAM_LEN, Load, Sink, Trial};

const ETH: usize = 14;
const IPV4: usize = 20;
const UDP: usize = 8;
const PAYLOAD: usize = ETH + IPV4 + UDP;

/// An interface inside a namespace, as the BPF calls need it.
#[derive(Clone, Debug)]
pub struct Iface {
    /// Its namespace.
    pub ns: String,
    /// Its name.
    pub name: String,
    /// Its index (in `ns`).
    pub ifindex: u32,
    /// Its MAC address.
    pub mac: [u8; 6],
}

impl Iface {
    /// Looks `name` up in namespace `ns` (`ip -o link show`).
    pub fn lookup(ns: &str, name: &str) -> io::Result<Iface> {
        let out = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", "dev", name])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let bad = || io::Error::other(format!("ip -n {ns} link show {name}: {text:?}"));
        let ifindex = text
            .split(':')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(bad)?;
        let mac_text = text
            .split("link/ether ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .ok_or_else(bad)?;
        let mut mac = [0u8; 6];
        for (byte, hex) in mac.iter_mut().zip(mac_text.split(':')) {
            *byte = u8::from_str_radix(hex, 16).map_err(|_| bad())?;
        }
        Ok(Iface {
            ns: ns.to_string(),
            name: name.to_string(),
            ifindex,
            mac,
        })
    }

    /// Attaches `prog` in native mode; the attachment lasts as long as the returned link.
    fn attach_native(&self, prog: OwnedFd) -> io::Result<Attached> {
        let ifindex = self.ifindex;
        let link = testkit::netns::in_netns(Some(&self.ns), move || {
            bpf::link_create_xdp(&prog, ifindex, bpf::XDP_FLAGS_DRV_MODE)
        })??;
        Ok(Attached { _link: link })
    }
}

/// A program attached to an interface; detached on drop.
#[derive(Debug)]
struct Attached {
    _link: OwnedFd,
}

/// CLOCK_MONOTONIC (what `bpf_ktime_get_ns` reads) at `epoch`, in nanoseconds.
fn ktime_at(epoch: Instant) -> u64 {
    let now =
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    let now_ns = now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64;
    now_ns.saturating_sub(epoch.elapsed().as_nanos() as u64)
}

/// The Internet checksum of `bytes` (RFC 1071).
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The frame every generated datagram starts from: Ethernet, IPv4 (checksummed), UDP
/// with checksum 0 (none, which IPv4 allows, so stamping the payload needs no fix-up),
/// and a [`DATAGRAM_LEN`]-byte payload that starts like RTP.
pub fn template_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: SocketAddrV4,
    dst: SocketAddrV4,
) -> Vec<u8> {
    let mut f = Vec::with_capacity(PAYLOAD + DATAGRAM_LEN);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (IPV4 + UDP + DATAGRAM_LEN) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]); // id, DF, TTL, UDP, checksum
    ip.extend_from_slice(&src.ip().octets());
    ip.extend_from_slice(&dst.ip().octets());
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&src.port().to_be_bytes());
    f.extend_from_slice(&dst.port().to_be_bytes());
    f.extend_from_slice(&((UDP + DATAGRAM_LEN) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    let mut payload = [0u8; DATAGRAM_LEN];
    payload[0] = 0x80;
    payload[1] = 111;
    f.extend_from_slice(&payload);
    f
}

/// Bytes of the template the generator's program writes into every frame.
const STAMPED_HEADER: usize = PAYLOAD + 2;

/// The generator's program: the template's headers and first two payload bytes written
/// in full (live-frame pages come back from the stack recycled, not reset: a frame that
/// was NATed or routed on the way returns with that path's addresses in it); `seq += 1`
/// (a per-CPU counter); source port `base_port + seq % flows`; payload bytes 2–3 the
/// sequence number, 4–11 the time since the epoch (ns, big endian); `XDP_TX`.
pub fn generator_program(
    seq_fd: i32,
    template: &[u8],
    base_port: u16,
    flows: u16,
    epoch_ktime: u64,
) -> Vec<Insn> {
    assert!(template.len() >= PAYLOAD + 12, "a whole template frame");
    let mut a = Asm::default();
    a.mov_reg(6, 1);
    a.load(ufrag_bpf::asm::W, 9, 6, 0); // data
    a.load(ufrag_bpf::asm::W, 3, 6, 4); // data_end
    a.mov_reg(4, 9);
    a.add_imm(4, (PAYLOAD + 12) as i32);
    a.jump(JGT, 4, Ok(3), "abort");
    for (i, word) in template[..STAMPED_HEADER].chunks(4).enumerate() {
        let mut w = [0u8; 4];
        w[..word.len()].copy_from_slice(word);
        if word.len() == 4 {
            a.store_imm(ufrag_bpf::asm::W, 9, (i * 4) as i16, i32::from_le_bytes(w));
        } else {
            let half = u16::from_le_bytes([w[0], w[1]]);
            a.store_imm(H, 9, (i * 4) as i16, i32::from(half));
        }
    }
    a.lookup_array(seq_fd, 0, "abort");
    a.load(DW, 7, 0, 0);
    a.add_imm(7, 1);
    a.store_reg(DW, 0, 0, 7);
    a.mov_reg(8, 7);
    a.mod_imm(8, i32::from(flows.max(1)));
    a.add_imm(8, i32::from(base_port));
    a.to_be(8, 16);
    a.store_reg(H, 9, (ETH + IPV4) as i16, 8);
    a.mov_reg(8, 7);
    a.to_be(8, 16);
    a.store_reg(H, 9, (PAYLOAD + 2) as i16, 8);
    a.call(helper::KTIME_GET_NS);
    a.mov_imm64(1, epoch_ktime);
    a.sub_reg(0, 1);
    a.to_be(0, 64);
    a.store_reg(DW, 9, (PAYLOAD + 4) as i16, 0);
    a.mov_imm(0, action::TX as i32);
    a.exit();
    a.label("abort");
    a.mov_imm(0, action::ABORTED as i32);
    a.exit();
    a.finish()
}

/// The sink's program: an IPv4 UDP frame (no options) to `port` is counted in the
/// per-CPU `counts[0]`; one in `sample_every` goes on to the kernel (for the latency
/// socket), the rest are dropped; everything else passes untouched.
pub fn sink_program(counts_fd: i32, port: u16, sample_every: u32) -> Vec<Insn> {
    let mut a = Asm::default();
    a.load(ufrag_bpf::asm::W, 2, 1, 0);
    a.load(ufrag_bpf::asm::W, 3, 1, 4);
    a.mov_reg(4, 2);
    a.add_imm(4, PAYLOAD as i32);
    a.jump(JGT, 4, Ok(3), "pass");
    a.load(H, 5, 2, 12);
    a.jump(JNE, 5, Err(0x0008), "pass"); // IPv4, as loaded (little endian)
    a.load(B, 5, 2, ETH as i16);
    a.jump(JNE, 5, Err(0x45), "pass");
    a.load(B, 5, 2, (ETH + 9) as i16);
    a.jump(JNE, 5, Err(17), "pass");
    a.load(H, 5, 2, (ETH + IPV4 + 2) as i16);
    a.jump(
        JNE,
        5,
        Err(i32::from(u16::from_le_bytes(port.to_be_bytes()))),
        "pass",
    );
    a.lookup_array(counts_fd, 0, "pass");
    a.load(DW, 7, 0, 0);
    a.add_imm(7, 1);
    a.store_reg(DW, 0, 0, 7);
    a.mod_imm(7, sample_every.max(1) as i32);
    a.jump(JEQ, 7, Err(0), "pass");
    a.mov_imm(0, action::DROP as i32);
    a.exit();
    a.label("pass");
    a.mov_imm(0, action::PASS as i32);
    a.exit();
    a.finish()
}

/// `return XDP_PASS`: what a veth needs on the far end before `XDP_TX` frames can reach it.
fn pass_program() -> Vec<Insn> {
    let mut a = Asm::default();
    a.mov_imm(0, action::PASS as i32);
    a.exit();
    a.finish()
}

/// Live-frame transmitter on one interface.
#[derive(Debug)]
pub struct XdpGenerator {
    prog: std::sync::Arc<OwnedFd>,
    _seq: Map,
    frame: Vec<u8>,
    from: Iface,
    _peer: Attached,
}

/// Frames per `BPF_PROG_RUN` batch (the kernel's NAPI budget).
const LIVE_BATCH: u32 = 64;
/// Frames per `BPF_PROG_RUN` call at most.
const MAX_BURST: u64 = 256;

impl XdpGenerator {
    /// Frames from `src` (ports `src.port()` to `src.port() + flows - 1`) to `dst`,
    /// transmitted on `from` towards `dst_mac`. `peer` is the far end of `from`'s veth
    /// pair; it gets an `XDP_PASS` program so that veth accepts XDP frames.
    pub fn new(
        from: Iface,
        peer: &Iface,
        dst_mac: [u8; 6],
        src: SocketAddrV4,
        flows: u16,
        dst: SocketAddrV4,
        epoch: Instant,
    ) -> io::Result<Self> {
        let peer_prog = bpf::prog_load_xdp(&pass_program(), "perf_pass")?;
        let peer = peer.attach_native(peer_prog)?;
        let seq = Map::create(bpf::MAP_PERCPU_ARRAY, 4, 8, 1, "perf_gen_seq")?;
        let frame = template_frame(from.mac, dst_mac, src, dst);
        let insns = generator_program(seq.raw_fd(), &frame, src.port(), flows, ktime_at(epoch));
        let prog = bpf::prog_load_xdp(&insns, "perf_gen")?;
        Ok(XdpGenerator {
            prog: std::sync::Arc::new(prog),
            _seq: seq,
            frame,
            from,
            _peer: peer,
        })
    }

    /// Transmits at `rate_pps` for `duration`, paced in 0.5 ms slices, from a thread in
    /// the interface's namespace pinned to the load CPU; returns (frames sent, seconds).
    pub fn send(&self, rate_pps: u64, duration: Duration) -> io::Result<(u64, f64)> {
        let prog = std::sync::Arc::clone(&self.prog);
        let frame = self.frame.clone();
        let ifindex = self.from.ifindex;
        testkit::netns::in_netns(Some(&self.from.ns), move || {
            crate::load::pin_to_load_cpu();
            let total = (rate_pps as f64 * duration.as_secs_f64()) as u64;
            let start = Instant::now();
            let mut sent = 0u64;
            while sent < total {
                let due = ((rate_pps as f64 * start.elapsed().as_secs_f64()) as u64).min(total);
                if due > sent {
                    // A call that fell behind sends at most one burst: a longer one would
                    // overflow the queues on the way (a veth ring holds 256 frames) and
                    // count as the setup's loss; falling short is the generator's.
                    let n = (due - sent).min(MAX_BURST) as u32;
                    bpf::prog_run_live(&prog, &frame, ifindex, 0, n, LIVE_BATCH)?;
                    sent += u64::from(n);
                } else {
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
            Ok((sent, start.elapsed().as_secs_f64()))
        })?
    }
}

/// A counting sink in XDP on one interface.
#[derive(Debug)]
pub struct XdpSink {
    counts: Map,
    _attached: Attached,
    base: u64,
}

impl XdpSink {
    /// Counts UDP frames to `port` arriving on `on`, passing one in `sample_every`.
    pub fn attach(on: &Iface, port: u16, sample_every: u32) -> io::Result<Self> {
        let counts = Map::create(bpf::MAP_PERCPU_ARRAY, 4, 8, 1, "perf_sink")?;
        let prog = bpf::prog_load_xdp(
            &sink_program(counts.raw_fd(), port, sample_every),
            "perf_sink",
        )?;
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
    Sockets(crate::load::Generator, std::net::SocketAddr),
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
                eprintln!("  XDP generator failed: {e}");
                (0, duration.as_secs_f64())
            }
        };
        std::thread::sleep(self.settle);
        let received = self.sink.received();
        let (_, latency) = self.sampler.take();
        Trial::from_counts(rate_pps, sent, seconds, received, &latency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_is_a_valid_ipv4_udp_frame() {
        let f = template_frame(
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 2],
            "10.77.0.1:20000".parse().unwrap(),
            "10.77.0.2:3478".parse().unwrap(),
        );
        assert_eq!(f.len(), PAYLOAD + DATAGRAM_LEN);
        assert_eq!(
            checksum(&f[ETH..ETH + IPV4]),
            0,
            "the IPv4 header sums to 0"
        );
        assert_eq!(&f[ETH + IPV4 + 2..ETH + IPV4 + 4], &3478u16.to_be_bytes());
        assert_eq!(f[PAYLOAD], 0x80, "starts like RTP, so a relay forwards it");
    }

    #[test]
    fn the_programs_end_in_exit_and_jump_inside_themselves() {
        let template = template_frame(
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 2],
            "10.77.0.1:20000".parse().unwrap(),
            "10.77.0.2:3478".parse().unwrap(),
        );
        for p in [
            generator_program(3, &template, 20_000, 32, 1),
            sink_program(4, 41_000, 64),
        ] {
            assert_eq!(p.last().unwrap().encode()[0], 0x95);
            for (i, insn) in p.iter().enumerate() {
                if insn.is_jump() {
                    let to = i as isize + 1 + insn.off as isize;
                    assert!(
                        (0..p.len() as isize).contains(&to),
                        "insn {i} jumps to {to}"
                    );
                }
            }
        }
    }
}
