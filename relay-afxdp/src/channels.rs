//! An interface's queue (channel) count over ethtool's generic netlink family: read it
//! (`ETHTOOL_MSG_CHANNELS_GET`, what `ethtool -l` shows) and set it
//! (`ETHTOOL_MSG_CHANNELS_SET`, what `ethtool -L` does), so that relay-afxdp can give
//! its interface one RX queue per worker without a per-node step. Reading needs no
//! privilege; setting needs CAP_NET_ADMIN. Messages are built and parsed here without
//! trusting any length, on the socket helpers of [`crate::netlink`]; no unsafe code.

use std::io::{self, Read};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::netlink::{NLM_F_REQUEST, NLMSG_HDR_LEN, Walk, align, attributes, walk};

/// `struct genlmsghdr`: command, version, two reserved bytes.
const GENL_HDR_LEN: usize = 4;
const NLM_F_ACK: u16 = 0x4;
const NLA_F_NESTED: u16 = 0x8000;
/// The generic netlink controller, which names families' ids (`GENL_ID_CTRL`).
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_NEWFAMILY: u8 = 1;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const ETHTOOL_GENL_NAME: &str = "ethtool";
const ETHTOOL_GENL_VERSION: u8 = 1;
const ETHTOOL_MSG_CHANNELS_GET: u8 = 17;
const ETHTOOL_MSG_CHANNELS_SET: u8 = 18;
const ETHTOOL_MSG_CHANNELS_GET_REPLY: u8 = 18;
const ETHTOOL_A_CHANNELS_HEADER: u16 = 1;
const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
const ETHTOOL_A_CHANNELS_RX_MAX: u16 = 2;
const ETHTOOL_A_CHANNELS_TX_MAX: u16 = 3;
const ETHTOOL_A_CHANNELS_COMBINED_MAX: u16 = 5;
const ETHTOOL_A_CHANNELS_RX_COUNT: u16 = 6;
const ETHTOOL_A_CHANNELS_TX_COUNT: u16 = 7;
const ETHTOOL_A_CHANNELS_COMBINED_COUNT: u16 = 9;

/// An interface's channels as its driver reports them: a NIC's queue pairs are
/// *combined* channels; veth has separate RX and TX queues and no combined ones. A
/// maximum of 0 means the driver has no channel of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Channels {
    /// Most RX-only channels the driver offers.
    pub rx_max: u32,
    /// Most TX-only channels the driver offers.
    pub tx_max: u32,
    /// Most combined (RX and TX) channels the driver offers.
    pub combined_max: u32,
    /// RX-only channels in use.
    pub rx: u32,
    /// TX-only channels in use.
    pub tx: u32,
    /// Combined channels in use.
    pub combined: u32,
}

impl Channels {
    /// How many queues receive: combined channels and RX-only ones.
    pub fn rx_queues(&self) -> u32 {
        self.combined + self.rx
    }

    /// The counts to set for `queues` RX queues, or why the driver cannot have them.
    /// Combined channels where the driver has them (RX-only ones then set to none);
    /// otherwise RX and TX queues alike (each worker sends on its own queue).
    pub fn for_rx_queues(&self, queues: u32) -> Result<Channels, String> {
        if queues == 0 {
            return Err("no queue asked for".into());
        }
        if self.combined_max > 0 {
            if queues > self.combined_max {
                return Err(format!(
                    "{queues} queues asked for, the driver offers at most {} combined channels",
                    self.combined_max
                ));
            }
            // RX-only and TX-only channels to none: the queues are the combined ones
            // (some drivers refuse combined and TX-only channels together).
            return Ok(Channels {
                combined: queues,
                rx: 0,
                tx: 0,
                ..*self
            });
        }
        if self.rx_max == 0 {
            return Err("the driver reports no channels it can change".into());
        }
        if queues > self.rx_max || (self.tx_max > 0 && queues > self.tx_max) {
            return Err(format!(
                "{queues} queues asked for, the driver offers at most {} RX and {} TX queues",
                self.rx_max, self.tx_max
            ));
        }
        Ok(Channels {
            rx: queues,
            tx: if self.tx_max > 0 { queues } else { self.tx },
            ..*self
        })
    }
}

/// Why [`set_rx_queues`] did not give the interface its queues.
#[derive(Debug)]
pub enum SetQueuesError {
    /// The driver cannot have that many queues (or none it can change): a configuration
    /// that does not fit this interface.
    Unfit(String),
    /// The kernel refused the request or could not be asked.
    Kernel(io::Error),
}

impl std::fmt::Display for SetQueuesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetQueuesError::Unfit(why) => f.write_str(why),
            SetQueuesError::Kernel(e) => e.fmt(f),
        }
    }
}

impl From<io::Error> for SetQueuesError {
    fn from(e: io::Error) -> Self {
        SetQueuesError::Kernel(e)
    }
}

/// What [`set_rx_queues`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueuesSet {
    /// The interface already had that many RX queues: nothing was sent to the driver.
    Unchanged,
    /// The driver was asked to change, and did: the channels before.
    Changed {
        /// The channels it had.
        before: Channels,
    },
}

/// An open socket of ethtool's generic netlink family.
#[derive(Debug)]
pub struct EthtoolSocket {
    socket: Socket,
    family: u16,
    seq: u32,
    buf: Vec<u8>,
}

impl EthtoolSocket {
    /// Opens the socket and asks the controller for the ethtool family's id (no privilege
    /// needed). Fails where the kernel has no ethtool netlink (before 5.6; channels
    /// since 5.7).
    pub fn open() -> io::Result<Self> {
        let socket = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::RAW,
            Some(Protocol::from(libc::NETLINK_GENERIC)),
        )?;
        socket.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut this = EthtoolSocket {
            socket,
            family: 0,
            seq: 0,
            buf: vec![0; 16 * 1024],
        };
        let mut name = ETHTOOL_GENL_NAME.as_bytes().to_vec();
        name.push(0);
        let request = message(
            GENL_ID_CTRL,
            CTRL_CMD_GETFAMILY,
            1,
            &attribute(CTRL_ATTR_FAMILY_NAME, &name),
        );
        let mut family = None;
        this.exchange(request, GENL_ID_CTRL, |cmd, attrs| {
            if cmd == CTRL_CMD_NEWFAMILY {
                family = family_id(attrs);
            }
        })?;
        this.family = family.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel names no ethtool netlink family",
            )
        })?;
        Ok(this)
    }

    /// The channels of interface `ifname`.
    pub fn channels(&mut self, ifname: &str) -> io::Result<Channels> {
        let request = message(
            self.family,
            ETHTOOL_MSG_CHANNELS_GET,
            ETHTOOL_GENL_VERSION,
            &device_header(ifname),
        );
        let mut found = None;
        self.exchange(request, self.family, |cmd, attrs| {
            if cmd == ETHTOOL_MSG_CHANNELS_GET_REPLY {
                found = Some(parse_channels(attrs));
            }
        })?;
        found.ok_or_else(|| io::Error::other(format!("no channels reported for {ifname}")))
    }

    /// Sets interface `ifname`'s channel counts to `to` (each kind the driver has).
    pub fn set_channels(&mut self, ifname: &str, to: &Channels) -> io::Result<()> {
        let mut body = device_header(ifname);
        for (kind, max, count) in [
            (
                ETHTOOL_A_CHANNELS_COMBINED_COUNT,
                to.combined_max,
                to.combined,
            ),
            (ETHTOOL_A_CHANNELS_RX_COUNT, to.rx_max, to.rx),
            (ETHTOOL_A_CHANNELS_TX_COUNT, to.tx_max, to.tx),
        ] {
            if max > 0 {
                body.extend(attribute(kind, &count.to_ne_bytes()));
            }
        }
        let request = message(
            self.family,
            ETHTOOL_MSG_CHANNELS_SET,
            ETHTOOL_GENL_VERSION,
            &body,
        );
        self.exchange(request, self.family, |_, _| {})
    }

    /// Sends one request (asking for an acknowledgement) and hands each reply's command
    /// and attributes to `each` until the kernel acknowledges it, or says why not.
    fn exchange(
        &mut self,
        mut request: Vec<u8>,
        reply: u16,
        mut each: impl FnMut(u8, &[u8]),
    ) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        request[8..12].copy_from_slice(&seq.to_ne_bytes());
        self.socket.send(&request)?;
        loop {
            let n = (&self.socket).read(&mut self.buf)?;
            let step = walk(&self.buf[..n], seq, reply, &mut |body: &[u8]| {
                if body.len() >= GENL_HDR_LEN {
                    each(body[0], &body[GENL_HDR_LEN..]);
                }
            })?;
            if step == Walk::Done {
                return Ok(());
            }
        }
    }
}

/// Gives interface `ifname` `queues` RX queues ([`Channels::for_rx_queues`]), unless it
/// has them already: `has` is the count the caller reads where it checks it later (sysfs),
/// so that the driver is not asked at all when that count is right, even a driver with
/// no channel operations. Checks the driver's answer by reading the channels again.
pub fn set_rx_queues(ifname: &str, queues: u32, has: u32) -> Result<QueuesSet, SetQueuesError> {
    if has == queues {
        return Ok(QueuesSet::Unchanged);
    }
    let mut socket = EthtoolSocket::open()?;
    let before = socket.channels(ifname)?;
    let wanted = before
        .for_rx_queues(queues)
        .map_err(|why| SetQueuesError::Unfit(format!("{ifname}: {why}")))?;
    socket.set_channels(ifname, &wanted)?;
    let after = socket.channels(ifname)?;
    if after.rx_queues() != queues {
        return Err(SetQueuesError::Kernel(io::Error::other(format!(
            "{ifname} has {} RX queues after it was asked for {queues}",
            after.rx_queues()
        ))));
    }
    Ok(QueuesSet::Changed { before })
}

/// A request: netlink header (sequence number filled in when sent), generic netlink
/// header, then `attributes`.
fn message(kind: u16, cmd: u8, version: u8, attributes: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDR_LEN + GENL_HDR_LEN + attributes.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    m.extend_from_slice(&[0; 8]); // sequence number, port id (0: the kernel assigns)
    m.extend_from_slice(&[cmd, version, 0, 0]);
    m.extend_from_slice(attributes);
    m
}

/// One attribute, padded to 4 bytes.
fn attribute(kind: u16, payload: &[u8]) -> Vec<u8> {
    let len = 4 + payload.len();
    let mut a = Vec::with_capacity(align(len));
    a.extend_from_slice(&(len as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(payload);
    a.resize(align(len), 0);
    a
}

/// The nested header that names the device an ethtool request is about.
fn device_header(ifname: &str) -> Vec<u8> {
    let mut name = ifname.as_bytes().to_vec();
    name.push(0);
    attribute(
        ETHTOOL_A_CHANNELS_HEADER | NLA_F_NESTED,
        &attribute(ETHTOOL_A_HEADER_DEV_NAME, &name),
    )
}

fn family_id(attrs: &[u8]) -> Option<u16> {
    attributes(attrs)
        .find(|(kind, _)| *kind == CTRL_ATTR_FAMILY_ID)
        .and_then(|(_, v)| Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?)))
}

/// The channels in a `CHANNELS_GET` reply's attributes; what the driver does not report
/// stays 0.
fn parse_channels(attrs: &[u8]) -> Channels {
    let mut c = Channels::default();
    for (kind, value) in attributes(attrs) {
        let Some(v) = value
            .get(..4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        else {
            continue;
        };
        match kind {
            ETHTOOL_A_CHANNELS_RX_MAX => c.rx_max = v,
            ETHTOOL_A_CHANNELS_TX_MAX => c.tx_max = v,
            ETHTOOL_A_CHANNELS_COMBINED_MAX => c.combined_max = v,
            ETHTOOL_A_CHANNELS_RX_COUNT => c.rx = v,
            ETHTOOL_A_CHANNELS_TX_COUNT => c.tx = v,
            ETHTOOL_A_CHANNELS_COMBINED_COUNT => c.combined = v,
            _ => {}
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_attr(kind: u16, v: u32) -> Vec<u8> {
        attribute(kind, &v.to_ne_bytes())
    }

    #[test]
    fn a_nic_gets_combined_channels_and_no_rx_only_ones() {
        let nic = Channels {
            combined_max: 8,
            combined: 8,
            rx_max: 2,
            rx: 1,
            ..Default::default()
        };
        let to = nic.for_rx_queues(2).unwrap();
        assert_eq!((to.combined, to.rx, to.rx_queues()), (2, 0, 2));
        assert!(
            nic.for_rx_queues(9)
                .unwrap_err()
                .contains("at most 8 combined")
        );
        assert!(nic.for_rx_queues(0).is_err());
    }

    #[test]
    fn veth_gets_as_many_rx_and_tx_queues() {
        let veth = Channels {
            rx_max: 4,
            tx_max: 4,
            rx: 4,
            tx: 4,
            ..Default::default()
        };
        let to = veth.for_rx_queues(2).unwrap();
        assert_eq!((to.rx, to.tx, to.combined), (2, 2, 0));
        assert!(veth.for_rx_queues(5).unwrap_err().contains("at most 4 RX"));
        let fixed = Channels::default();
        assert!(fixed.for_rx_queues(1).unwrap_err().contains("no channels"));
    }

    #[test]
    fn a_reply_is_parsed_and_a_malformed_one_yields_what_came_before() {
        let mut attrs = device_header("eth0");
        for (kind, v) in [
            (ETHTOOL_A_CHANNELS_COMBINED_MAX, 63),
            (ETHTOOL_A_CHANNELS_COMBINED_COUNT, 4),
            (ETHTOOL_A_CHANNELS_RX_MAX, 0),
        ] {
            attrs.extend(u32_attr(kind, v));
        }
        let parsed = parse_channels(&attrs);
        assert_eq!((parsed.combined_max, parsed.combined), (63, 4));
        // A length past the end stops the walk; a short value is skipped.
        let mut bad = u32_attr(ETHTOOL_A_CHANNELS_COMBINED_MAX, 2);
        bad.extend(attribute(ETHTOOL_A_CHANNELS_RX_COUNT, &[1, 2]));
        bad.extend([200, 0, ETHTOOL_A_CHANNELS_RX_MAX as u8, 0, 1]);
        let parsed = parse_channels(&bad);
        assert_eq!(
            parsed,
            Channels {
                combined_max: 2,
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_request_names_the_device_in_a_nested_header() {
        let m = message(42, ETHTOOL_MSG_CHANNELS_GET, 1, &device_header("veth7"));
        assert_eq!(
            u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize,
            m.len()
        );
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 42);
        assert_eq!(&m[16..18], &[ETHTOOL_MSG_CHANNELS_GET, 1]);
        let (kind, nested) = attributes(&m[20..]).next().unwrap();
        assert_eq!(kind, ETHTOOL_A_CHANNELS_HEADER);
        let (inner, name) = attributes(nested).next().unwrap();
        assert_eq!((inner, name), (ETHTOOL_A_HEADER_DEV_NAME, &b"veth7\0"[..]));
        assert_eq!(m.len() % 4, 0);
    }

    /// Reading loopback's channels goes through the real kernel: loopback reports none
    /// (its driver has no channel operations), which the kernel answers with an error.
    #[test]
    fn the_kernel_answers_for_loopback() {
        let mut socket = EthtoolSocket::open().expect("ethtool netlink (Linux 5.6 or later)");
        match socket.channels("lo") {
            Ok(c) => assert_eq!(c.rx_queues(), 0, "{c:?}"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}"),
        }
        let missing = socket.channels("no-such-if0").unwrap_err();
        assert_eq!(missing.raw_os_error(), Some(libc::ENODEV), "{missing}");
    }
}
