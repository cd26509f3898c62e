//! Load tools in BPF, so that the tools are never the limit of what they measure.
//!
//! [`XdpGenerator`] transmits one prebuilt UDP frame (IPv4 or IPv6) many times with `BPF_PROG_RUN`
//! in live-frames mode (the mechanism behind xdp-trafficgen): a small XDP program stamps
//! each copy with a flow (source port), a sequence number and the send time (keeping an
//! IPv6 frame's UDP checksum right), and returns
//! `XDP_TX`, so the frame leaves the client's veth as if a NIC had sent it: no socket, no
//! syscall per frame or batch, no IP output path; the program paces itself against
//! `bpf_ktime_get_ns` in one long run (a run per slice could take tens of milliseconds
//! to tear down), stopped by a signal. [`XdpSink`] counts frames for one UDP
//! port in XDP on the receiving veth (per-CPU counters, `XDP_DROP`) and passes one in
//! `sample_every` to the kernel, where the socket [`crate::bench::load::Sink`] reads its send
//! time for latency. Both speak the datagram format of [`crate::bench::load`].
//!
//! The parts: `programs` loads the BPF programs of `perf/bpf/tools.bpf.c` (generator,
//! sink, the in-kernel reference relay) with their settings, `tools` attaches and drives
//! them; this module holds the frames they
//! start from and the interfaces they attach to.

mod programs;
mod tools;

pub use programs::{
    Counted, NEVER_SAMPLED, Rewrite, generator_program, relay_program, sink_program,
};
pub use tools::{
    Conversation, PeerPass, Sender, XdpGenerator, XdpLoad, XdpRelay, XdpSink, live_frames_refused,
    skip_without_live_frames,
};

use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::process::Command;
use std::time::Instant;

use ufrag_bpf::sys as bpf;

use crate::bench::load::FlowPlan;
use crate::bench::load::target::ReturnPath;

use ufrag_common::wire::{ETH_LEN as ETH, IPV4_LEN as IPV4, IPV6_LEN as IPV6, UDP_LEN as UDP};

const PAYLOAD: usize = ETH + IPV4 + UDP;
const PAYLOAD_V6: usize = ETH + IPV6 + UDP;

/// An interface inside a namespace, as the BPF calls need it.
#[derive(Clone, Debug)]
pub struct Iface {
    /// Its namespace (`None`: this process's own).
    pub ns: Option<String>,
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
        Self::lookup_in(Some(ns), name)
    }

    /// Looks `name` up in namespace `ns`, or in this process's own (a lab's real NIC).
    pub fn lookup_in(ns: Option<&str>, name: &str) -> io::Result<Iface> {
        let mut ip = Command::new("ip");
        if let Some(ns) = ns {
            ip.args(["-n", ns]);
        }
        let out = ip.args(["-o", "link", "show", "dev", name]).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let bad = || io::Error::other(format!("ip link show {name} (namespace {ns:?}): {text:?}"));
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
        let mac = parse_mac(mac_text).ok_or_else(bad)?;
        Ok(Iface {
            ns: ns.map(str::to_string),
            name: name.to_string(),
            ifindex,
            mac,
        })
    }

    /// Attaches `prog` in native mode; the attachment lasts as long as the returned link.
    fn attach_native(&self, prog: OwnedFd) -> io::Result<Attached> {
        let ifindex = self.ifindex;
        let link = ufrag_testbed::netns::in_netns(self.ns.as_deref(), move || {
            bpf::link_create_xdp(&prog, ifindex, bpf::XDP_FLAGS_DRV_MODE)
        })??;
        Ok(Attached { _link: link })
    }
}

pub use ufrag_common::wire::parse_mac;

/// A program attached to an interface; detached on drop.
#[derive(Debug)]
struct Attached {
    _link: OwnedFd,
}

use ufrag_bpf::sys::ktime_now;

/// CLOCK_MONOTONIC at `epoch`, in nanoseconds.
fn ktime_at(epoch: Instant) -> u64 {
    ktime_now().saturating_sub(epoch.elapsed().as_nanos() as u64)
}

/// The frame every generated datagram starts from: Ethernet, then IPv4 (checksummed) and
/// UDP with checksum 0 (none, which IPv4 allows, so stamping the payload needs no
/// fix-up), or IPv6 and UDP with its checksum (mandatory: the generator keeps it right),
/// and a `payload_len`-byte payload (at least 12) that starts like RTP.
pub fn template_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: impl Into<SocketAddr>,
    dst: impl Into<SocketAddr>,
    payload_len: usize,
) -> Vec<u8> {
    let mut payload = vec![0u8; payload_len.max(12)];
    payload[0] = 0x80;
    payload[1] = 111;
    frame_around(src_mac, dst_mac, src, dst, &payload)
}

/// Ethernet, IP and UDP around `payload` ([`crate::bench::load::udp_packet`]).
pub fn frame_around(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: impl Into<SocketAddr>,
    dst: impl Into<SocketAddr>,
    payload: &[u8],
) -> Vec<u8> {
    let (src, dst) = (src.into(), dst.into());
    let mut f = Vec::with_capacity(PAYLOAD_V6 + payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    let ethertype: u16 = if src.is_ipv6() { 0x86DD } else { 0x0800 };
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(&crate::bench::load::udp_packet(src, dst, payload));
    f
}

/// A relay frame as a transceiver sends it towards `client` through the relay: a
/// [`template_frame`] whose payload is the frame header (`client`, `vip`) and then the
/// `datagram_len`-byte RTP-like datagram.
pub fn framed_template(
    (src_mac, dst_mac): ([u8; 6], [u8; 6]),
    (src, dst): (SocketAddrV4, SocketAddrV4),
    (client, vip): (SocketAddrV4, SocketAddrV4),
    datagram_len: usize,
) -> Vec<u8> {
    use ufrag_common::frame::FrameHeader;
    // As our transceiver sends it: on a path that answered its probe.
    let header = FrameHeader::new(client.into(), vip.into()).on_verified_path(true);
    let mut payload = vec![0u8; header.encoded_len() + datagram_len.max(12)];
    let n = header.emit(&mut payload).expect("room for the header");
    payload[n] = 0x80;
    payload[n + 1] = 111;
    frame_around(src_mac, dst_mac, src, dst, &payload)
}

/// The downlink's frames, as a transceiver sends them: what [`XdpGenerator::stamping`]
/// sends, and the port its replies reach the clients from.
#[derive(Debug)]
pub struct ReplyFrames {
    /// The template every frame starts from.
    pub frame: Vec<u8>,
    /// The flows stamped into it, one a frame in turn.
    pub plan: FlowPlan,
    /// Where they are stamped.
    pub stamps: Stamps,
    /// The source port the replies reach the clients from (through a relay the VIP's):
    /// what a sink on the clients' interface counts.
    pub from_port: u16,
}

impl ReplyFrames {
    /// Replies to `plan`'s clients through `back`, from `sink` (the transceiver, behind
    /// `macs.0`) to the relay's interface (`macs.1`): to our relays a frame to the
    /// internal port naming the client and the VIP, to nftables a datagram to the VIP's
    /// address at the client's port (which its conntrack maps back to the client from the
    /// port the clients sent to, `vip_port`). IPv4 only (the frames are built over IPv4
    /// headers): an IPv6 address is refused, and so is a reply whose frame would outgrow
    /// a 1500-byte MTU ([`MAX_FRAME_LEN`]).
    pub fn through(
        back: ReturnPath,
        macs: ([u8; 6], [u8; 6]),
        sink: SocketAddr,
        plan: &FlowPlan,
        vip_port: u16,
        size: usize,
    ) -> io::Result<ReplyFrames> {
        let v4 = |a: SocketAddr| match a {
            SocketAddr::V4(a) => Ok(a),
            SocketAddr::V6(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the downlink's frames are IPv4 only",
            )),
        };
        let replies = match back {
            ReturnPath::Framed { internal, vip } => ReplyFrames {
                frame: framed_template(
                    macs,
                    (v4(sink)?, v4(internal)?),
                    (v4(plan.addr(0))?, v4(vip)?),
                    size,
                ),
                plan: *plan,
                stamps: Stamps::FRAMED_CLIENT,
                from_port: vip.port(),
            },
            ReturnPath::ToClientPort(ip) => {
                // To the VIP's address at each client's port: the plan's ports on it,
                // which name the clients only when they share one address.
                if plan.addresses != 1 {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        "replies to the VIP at the client's port need one client address",
                    ));
                }
                let to_vip = FlowPlan {
                    first_ip: ip,
                    ..*plan
                };
                let dst = v4(to_vip.addr(0))?;
                ReplyFrames {
                    frame: template_frame(macs.0, macs.1, v4(sink)?, dst, size),
                    plan: to_vip,
                    stamps: Stamps::DESTINATION,
                    from_port: vip_port,
                }
            }
        };
        // The framed path adds the frame header to the datagram: near the largest size
        // the frame would outgrow the link and every reply read as the relay's loss.
        if replies.frame.len() > MAX_FRAME_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {size}-byte reply makes a {}-byte frame through this return path, \
                     over the {MAX_FRAME_LEN} bytes of a 1500-byte MTU",
                    replies.frame.len()
                ),
            ));
        }
        Ok(replies)
    }
}

/// The longest Ethernet frame a 1500-byte MTU carries (its header, no FCS).
pub const MAX_FRAME_LEN: usize = 14 + 1500;

/// Where the live-frames generator writes what changes from frame to frame: the flow's
/// port and its address's last octet, and the datagram's count and send time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamps {
    /// The flow's port (16 bits, big endian).
    pub port_at: usize,
    /// The last octet of the flow's address (whose `addr_len` bytes end here).
    pub octet_at: usize,
    /// The address's length: 4 (IPv4) or 16 (IPv6).
    pub addr_len: usize,
    /// True when that address is in the IPv4 header (its checksum is then adjusted).
    pub in_ip_header: bool,
    /// Where the UDP checksum is, when the frame carries one (IPv6): every frame's is
    /// then adjusted for what was stamped.
    pub udp_checksum_at: Option<usize>,
    /// Where the RTP-like datagram starts: its bytes 2–3 get the count, 4–11 the time.
    pub datagram_at: usize,
}

impl Stamps {
    /// The flow is the frame's source (client → relay).
    pub const SOURCE: Stamps = Stamps {
        port_at: ETH + IPV4,
        octet_at: ETH + 15,
        addr_len: 4,
        in_ip_header: true,
        udp_checksum_at: None,
        datagram_at: PAYLOAD,
    };
    /// The flow is the frame's source, over IPv6 (client → relay).
    pub const SOURCE_V6: Stamps = Stamps {
        port_at: ETH + IPV6,
        octet_at: ETH + 8 + 15,
        addr_len: 16,
        in_ip_header: false,
        udp_checksum_at: Some(ETH + IPV6 + 6),
        datagram_at: PAYLOAD_V6,
    };
    /// The flow is the frame's destination (transceiver → client, straight or NATed).
    pub const DESTINATION: Stamps = Stamps {
        port_at: ETH + IPV4 + 2,
        octet_at: ETH + 19,
        addr_len: 4,
        in_ip_header: true,
        udp_checksum_at: None,
        datagram_at: PAYLOAD,
    };
    /// The flow is the client in the relay frame header of a [`framed_template`]
    /// (transceiver → relay; the `common::frame` layout with IPv4 client and VIP: client
    /// port at bytes 4–5, client IP at 8–11, 16 bytes in all).
    pub const FRAMED_CLIENT: Stamps = Stamps {
        port_at: PAYLOAD + 4,
        octet_at: PAYLOAD + 11,
        addr_len: 4,
        in_ip_header: false,
        udp_checksum_at: None,
        datagram_at: PAYLOAD + 16,
    };

    /// The flow is the frame's source, in `plan`'s family.
    pub fn source_of(plan: &FlowPlan) -> Stamps {
        if plan.is_ipv6() {
            Stamps::SOURCE_V6
        } else {
            Stamps::SOURCE
        }
    }

    /// The flow a frame carries where these stamps write it.
    pub fn flow_of(&self, frame: &[u8]) -> SocketAddr {
        let addr = &frame[self.octet_at + 1 - self.addr_len..=self.octet_at];
        let ip: std::net::IpAddr = match self.addr_len {
            4 => <[u8; 4]>::try_from(addr).expect("4 bytes").into(),
            _ => <[u8; 16]>::try_from(addr).expect("16 bytes").into(),
        };
        SocketAddr::new(
            ip,
            u16::from_be_bytes([frame[self.port_at], frame[self.port_at + 1]]),
        )
    }
}

/// The generator's pacing state (`struct gen_state` in `perf/bpf/tools.bpf.c`): six
/// `u64`s, in this order: when the next frame is due (CLOCK_MONOTONIC ns), the
/// nanoseconds between frames, frames sent so far, frames to send, how far behind the
/// schedule may fall before it is reset (ns: the largest burst), and when the first frame
/// was due (set by the first run). Offsets of the fields user space reads back:
mod state {
    /// Frames sent so far.
    pub(super) const SENT: i16 = 16;
    /// When the first frame was due.
    pub(super) const FIRST_NS: i16 = 40;
    /// The value's size.
    pub(super) const LEN: usize = 48;
}

/// The template's UDP checksum (at `at`) with the words the generator stamps taken out:
/// the one's-complement sum of everything else, to which the program adds each frame's
/// port, count and time (and its address's increase). The template must carry the plan's
/// first flow, count 0 and time 0 where the stamps go, or not: whatever it carries is
/// taken out.
pub fn udp_checksum_base(template: &[u8], at: usize, stamps: Stamps) -> u16 {
    let word = |i: usize| u64::from(u16::from_be_bytes([template[i], template[i + 1]]));
    let stamped = [
        stamps.port_at,
        stamps.datagram_at + 2,
        stamps.datagram_at + 4,
        stamps.datagram_at + 6,
        stamps.datagram_at + 8,
        stamps.datagram_at + 10,
    ];
    // ~checksum is the sum of all words; subtracting a word is adding its complement.
    let mut sum = u64::from(!u16::from_be_bytes([template[at], template[at + 1]]));
    for i in stamped {
        sum += 0xffff - word(i);
    }
    ufrag_common::wire::fold_carries(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::load::{DATAGRAM_LEN, checksum};

    fn sample_plan() -> FlowPlan {
        FlowPlan::new(
            "10.77.0.1".parse::<std::net::Ipv4Addr>().unwrap(),
            20_000,
            1000,
            2500,
        )
        .unwrap()
    }

    fn sample_template() -> Vec<u8> {
        template_frame(
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 2],
            "10.77.0.1:20000".parse::<SocketAddrV4>().unwrap(),
            "10.77.0.2:3478".parse::<SocketAddrV4>().unwrap(),
            DATAGRAM_LEN,
        )
    }

    #[test]
    fn the_checksum_base_plus_the_templates_own_words_is_its_checksum() {
        let f = template_frame(
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 2],
            "[fd77::1]:20000".parse::<SocketAddr>().unwrap(),
            "[fd77::2]:3478".parse::<SocketAddr>().unwrap(),
            DATAGRAM_LEN,
        );
        let stamps = Stamps::SOURCE_V6;
        let at = stamps.udp_checksum_at.unwrap();
        let word = |i: usize| u32::from(u16::from_be_bytes([f[i], f[i + 1]]));
        let mut sum = u32::from(udp_checksum_base(&f, at, stamps));
        for i in [stamps.port_at, stamps.datagram_at + 2]
            .into_iter()
            .chain((4..12).step_by(2).map(|k| stamps.datagram_at + k))
        {
            sum += word(i);
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(!(sum as u16), u16::from_be_bytes([f[at], f[at + 1]]));
        assert_eq!(stamps.flow_of(&f), "[fd77::1]:20000".parse().unwrap());
    }

    #[test]
    fn the_template_is_a_valid_ipv4_udp_frame() {
        let f = sample_template();
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
    fn a_framed_reply_that_outgrows_a_1500_byte_mtu_is_refused() {
        let framed = ReturnPath::Framed {
            internal: "10.77.0.2:40000".parse().unwrap(),
            vip: "10.77.0.2:3478".parse().unwrap(),
        };
        let through = |size| {
            ReplyFrames::through(
                framed,
                ([2; 6], [3; 6]),
                "10.77.0.3:61000".parse().unwrap(),
                &sample_plan(),
                3478,
                size,
            )
        };
        // The largest datagram an unframed IPv4 frame carries fits; framed, it does not.
        let largest = MAX_FRAME_LEN - PAYLOAD;
        assert_eq!(largest, 1472);
        let e = through(largest).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("over the 1514 bytes"), "{e}");
        let header = through(12).unwrap().frame.len() - PAYLOAD - 12;
        let fits = through(largest - header).unwrap();
        assert_eq!(fits.frame.len(), MAX_FRAME_LEN);
        assert!(through(largest - header + 1).is_err());
        let nat = ReturnPath::ToClientPort("10.77.0.2".parse().unwrap());
        let one_address = FlowPlan {
            addresses: 1,
            ..sample_plan()
        };
        let unframed = ReplyFrames::through(
            nat,
            ([2; 6], [3; 6]),
            "10.77.0.3:61000".parse().unwrap(),
            &one_address,
            3478,
            largest,
        )
        .unwrap();
        assert_eq!(unframed.frame.len(), MAX_FRAME_LEN);
    }

    #[test]
    fn every_program_passes_the_verifier_in_every_configuration() {
        // Needs CAP_BPF to load programs; CI runs as root.
        let template = sample_template();
        let rewrite = Rewrite {
            vip: "10.77.0.2:3478".parse().unwrap(),
            relay_mac: [2; 6],
            to: "10.77.0.3:41000".parse().unwrap(),
            to_mac: [3; 6],
        };
        for stamps in [Stamps::SOURCE, Stamps::DESTINATION] {
            generator_program(&template, (&sample_plan(), stamps), 1).expect("perf_gen");
        }
        for counted in [Counted::ToPort(41_000), Counted::FromPort(3478)] {
            sink_program(counted, 64).expect("perf_sink");
        }
        relay_program(&rewrite).expect("perf_xdp_relay");
        ufrag_bpf::object::pass_program().expect("pass_all");
        programs::probe_program().expect("perf_probe");
    }

    #[test]
    fn the_pacing_state_offsets_are_the_ones_clang_laid_out() {
        let members = ufrag_bpf::btf::struct_members(programs::OBJECT, "gen_state")
            .expect("struct gen_state");
        let names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "next_ns",
                "interval_ns",
                "sent",
                "total",
                "burst_ns",
                "first_ns"
            ],
            "the order write_state writes them in"
        );
        let at = |name: &str| members.iter().find(|(n, _)| n == name).map(|(_, o)| *o);
        assert_eq!(at("sent"), Some(state::SENT as usize));
        assert_eq!(at("first_ns"), Some(state::FIRST_NS as usize));
        assert_eq!(members.len() * 8, state::LEN);
    }

    #[test]
    fn a_template_too_short_for_its_stamps_is_refused_before_loading() {
        let short = vec![0u8; Stamps::SOURCE.datagram_at + 4];
        let e = generator_program(&short, (&sample_plan(), Stamps::SOURCE), 1).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    }
}
