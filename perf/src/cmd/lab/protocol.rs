//! The control channel between `perf compare --lab` and the agent: one JSON object per
//! line each way over TCP, a request and then its reply, one load held by the agent at a
//! time. A reply is `{"ok": …}` or `{"error": "…"}`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use hmac::{KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use ufrag_common::wire::{hex, mac_text, unhex};

use crate::bench::load::target::ReturnPath;
use crate::bench::load::{CDF_QUANTILES, Latency, Trial};

/// The longest line either side reads: a request or a reply is a few hundred bytes, the
/// agent's hello with its environment a few kilobytes.
pub const MAX_LINE: u64 = 64 * 1024;

/// The protocol's version: the agent refuses a compare that speaks another (2: the
/// handshake proves both ends and seals every later line; 3: the flows spread over the
/// agent's client addresses, IPv4 or IPv6 as the destination is, and its hello says
/// how many flows they hold, and whether it can send live frames; the fixed loads may
/// be live frames; 4: the flows are proven both ways where the setup carries returns,
/// and a search may go downlink or both ways).
pub const VERSION: u64 = 4;

/// What a prepared load is for, and what sends it: live frames paced in the tools host's
/// kernel, or client sockets paced by sleeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// The fixed-load phase: nothing sampled for latency.
    Fixed {
        /// Live frames (else sockets).
        live_frames: bool,
    },
    /// The rate search: 1 in 8 sampled for latency.
    Search {
        /// Live frames (else sockets).
        live_frames: bool,
    },
}

impl Purpose {
    /// Whether live frames send it.
    pub fn live_frames(self) -> bool {
        match self {
            Purpose::Fixed { live_frames } | Purpose::Search { live_frames } => live_frames,
        }
    }
}

/// A load for the agent to prepare: where it goes and how.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prepare {
    /// The datagrams' destination.
    pub dst: SocketAddr,
    /// The next hop's MAC.
    pub dst_mac: [u8; 6],
    /// Flows made by Binding Requests in our relay↔transceiver frames (our relays).
    pub framed: bool,
    /// Whether flows are made before the trials (all setups but the direct path).
    pub keeps_flows: bool,
    /// Client flows.
    pub flows: u32,
    /// UDP payload bytes.
    pub size: usize,
    /// What the load is for.
    pub purpose: Purpose,
    /// How the transceiver's datagrams reach the clients through the setup, for the
    /// setups that carry returns: the agent proves each flow both ways over it after
    /// making the flows (as a session does before its media), and sends the downlink
    /// over it.
    pub returns: Option<ReturnPath>,
    /// The share of each trial's rate sent downlink, from the sink's interface back to
    /// the clients through `returns`: 0 (uplink only) to 1 (downlink only).
    pub downlink_share: f64,
}

/// A request to the agent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Request {
    /// Who are you: the agent's addresses and environment.
    Hello,
    /// Make a load's flows and hold the load.
    Prepare(Prepare),
    /// One trial of the held load (`latency`: the latency trial).
    Trial {
        /// Offered rate, pps.
        rate: u64,
        /// Its length.
        duration: Duration,
        /// The latency trial rather than an ordinary one.
        latency: bool,
    },
    /// Drop the held load.
    Release,
}

impl Request {
    /// As one JSON object.
    pub fn to_json(&self) -> Value {
        match *self {
            Request::Hello => json!({"op": "hello", "version": VERSION}),
            Request::Prepare(p) => json!({
                "op": "prepare",
                "dst": p.dst.to_string(),
                "dst_mac": mac_text(p.dst_mac),
                "framed": p.framed,
                "keeps_flows": p.keeps_flows,
                "flows": p.flows,
                "size": p.size,
                "purpose": match p.purpose {
                    Purpose::Fixed { live_frames: true } => "fixed-live-frames",
                    Purpose::Fixed { live_frames: false } => "fixed-sockets",
                    Purpose::Search { live_frames: true } => "search-live-frames",
                    Purpose::Search { live_frames: false } => "search-sockets",
                },
                "returns": match p.returns {
                    None => Value::Null,
                    Some(ReturnPath::Framed { internal, vip }) => json!({
                        "framed": { "internal": internal.to_string(), "vip": vip.to_string() },
                    }),
                    Some(ReturnPath::ToClientPort(ip)) => json!({ "to_client_port": ip.to_string() }),
                },
                "downlink_share": p.downlink_share,
            }),
            Request::Trial {
                rate,
                duration,
                latency,
            } => json!({
                "op": "trial",
                "rate": rate,
                "ms": duration.as_millis() as u64,
                "latency": latency,
            }),
            Request::Release => json!({"op": "release"}),
        }
    }

    /// From one JSON object, or what is wrong with it.
    pub fn from_json(v: &Value) -> Result<Request, String> {
        let text = |k: &str| v[k].as_str().ok_or(format!("`{k}`: a string"));
        let number = |k: &str| v[k].as_u64().ok_or(format!("`{k}`: a number"));
        let flag = |k: &str| v[k].as_bool().ok_or(format!("`{k}`: true or false"));
        match text("op")? {
            "hello" => match number("version")? {
                VERSION => Ok(Request::Hello),
                other => Err(format!(
                    "protocol version {other}; this agent speaks {VERSION} (run the same \
                     ufrag-perf on both hosts)"
                )),
            },
            "prepare" => Ok(Request::Prepare(Prepare {
                dst: text("dst")?.parse().map_err(|e| format!("`dst`: {e}"))?,
                dst_mac: crate::forwarders::xdp::parse_mac(text("dst_mac")?)
                    .ok_or("`dst_mac`: a MAC")?,
                framed: flag("framed")?,
                keeps_flows: flag("keeps_flows")?,
                flows: u32::try_from(number("flows")?).map_err(|e| format!("`flows`: {e}"))?,
                size: usize::try_from(number("size")?).map_err(|e| format!("`size`: {e}"))?,
                purpose: match text("purpose")? {
                    "fixed-live-frames" => Purpose::Fixed { live_frames: true },
                    "fixed-sockets" => Purpose::Fixed { live_frames: false },
                    "search-live-frames" => Purpose::Search { live_frames: true },
                    "search-sockets" => Purpose::Search { live_frames: false },
                    other => return Err(format!("`purpose`: {other:?}")),
                },
                returns: returns_from_json(&v["returns"])?,
                downlink_share: v["downlink_share"]
                    .as_f64()
                    .filter(|share| (0.0..=1.0).contains(share))
                    .ok_or("`downlink_share`: a number from 0 to 1")?,
            })),
            "trial" => Ok(Request::Trial {
                rate: number("rate")?,
                duration: Duration::from_millis(number("ms")?),
                latency: flag("latency")?,
            }),
            "release" => Ok(Request::Release),
            other => Err(format!("unknown op {other:?}")),
        }
    }
}

/// A prepared load's `returns` from JSON: null, `{"framed": {"internal", "vip"}}` or
/// `{"to_client_port": ip}`.
fn returns_from_json(v: &Value) -> Result<Option<ReturnPath>, String> {
    let address = |v: &Value, k: &str| -> Result<SocketAddr, String> {
        v[k].as_str()
            .ok_or(format!("`returns.{k}`: an address"))?
            .parse()
            .map_err(|e| format!("`returns.{k}`: {e}"))
    };
    if v.is_null() {
        Ok(None)
    } else if let Some(framed) = v.get("framed") {
        Ok(Some(ReturnPath::Framed {
            internal: address(framed, "internal")?,
            vip: address(framed, "vip")?,
        }))
    } else if let Some(ip) = v["to_client_port"].as_str() {
        Ok(Some(ReturnPath::ToClientPort(
            ip.parse()
                .map_err(|e| format!("`returns.to_client_port`: {e}"))?,
        )))
    } else {
        Err("`returns`: null, {\"framed\": …} or {\"to_client_port\": …}".into())
    }
}

/// A trial as JSON.
pub fn trial_json(t: &Trial) -> Value {
    json!({
        "offered_pps": t.offered_pps,
        "sent_pps": t.sent_pps,
        "sent": t.sent,
        "received": t.received,
        "latency_samples": t.latency.samples,
        "latency_cdf_us": t.latency.cdf_us.to_vec(),
    })
}

/// A trial from JSON.
pub fn trial_from_json(v: &Value) -> Result<Trial, String> {
    let number = |k: &str| v[k].as_u64().ok_or(format!("trial `{k}`: a number"));
    let cdf: Vec<f64> = v["latency_cdf_us"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    let cdf_us: [f64; CDF_QUANTILES.len()] = cdf
        .try_into()
        .map_err(|_| format!("trial `latency_cdf_us`: {} numbers", CDF_QUANTILES.len()))?;
    Ok(Trial {
        offered_pps: number("offered_pps")?,
        sent_pps: number("sent_pps")?,
        sent: number("sent")?,
        received: number("received")?,
        latency: Latency {
            samples: number("latency_samples")?,
            cdf_us,
        },
    })
}

/// Which end of the channel this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The agent on the tools host.
    Agent,
    /// The compare on the relay host.
    Compare,
}

/// A proven connection's key and its two sequence counters: every line one end sends
/// carries `HMAC(key, direction ‖ sequence ‖ body)`, and the other end takes only the next
/// sequence number of the other direction.
pub struct Session {
    key: Vec<u8>,
    outgoing: &'static [u8],
    incoming: &'static [u8],
    sent: u64,
    received: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Session(sent {}, received {})", self.sent, self.received)
    }
}

impl Session {
    /// A session of `key` at `end` of the connection.
    pub fn new(key: Vec<u8>, end: End) -> Session {
        let (outgoing, incoming): (&'static [u8], &'static [u8]) = match end {
            End::Agent => (b"agent->compare", b"compare->agent"),
            End::Compare => (b"compare->agent", b"agent->compare"),
        };
        Session {
            key,
            outgoing,
            incoming,
            sent: 0,
            received: 0,
        }
    }

    fn mac(&self, direction: &[u8], sequence: u64, body: &str) -> hmac::Hmac<Sha256> {
        let mut mac =
            hmac::Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(direction);
        mac.update(&sequence.to_be_bytes());
        mac.update(body.as_bytes());
        mac
    }

    /// `body` sealed as the next line this end sends.
    pub fn seal(&mut self, body: &Value) -> Value {
        let body = body.to_string();
        let tag = hex(&self
            .mac(self.outgoing, self.sent, &body)
            .finalize()
            .into_bytes());
        self.sent += 1;
        json!({ "body": body, "mac": tag })
    }

    /// The body of `line` if it is the next line the other end sent, MAC intact.
    pub fn open(&mut self, line: &Value) -> Result<Value, String> {
        let (Some(body), Some(tag)) = (line["body"].as_str(), line["mac"].as_str()) else {
            return Err("a line without a session MAC".into());
        };
        let good = unhex(tag).is_some_and(|tag| {
            self.mac(self.incoming, self.received, body)
                .verify_slice(&tag)
                .is_ok()
        });
        if !good {
            return Err(
                "a line whose session MAC does not check (changed, replayed or reordered)".into(),
            );
        }
        self.received += 1;
        serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))
    }
}

/// One end of the channel: writes a line, reads a line, at most [`MAX_LINE`] bytes; once
/// sealed with a [`Session`] (after the token handshake), every line carries its MAC.
#[derive(Debug)]
pub struct Channel {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    session: Option<Session>,
}

impl Channel {
    /// Over `stream`.
    pub fn new(stream: TcpStream) -> std::io::Result<Channel> {
        stream.set_nodelay(true)?;
        Ok(Channel {
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
            session: None,
        })
    }

    /// How long a read may wait (`None`: for ever).
    pub fn set_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.writer.set_read_timeout(timeout)
    }

    /// Writes `bytes` as they are, outside any line (tests of a peer that misbehaves).
    pub fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)
    }

    /// The next line if one is already whole or comes within 10 ms (tests).
    pub fn try_receive(&mut self) -> std::io::Result<Option<Value>> {
        self.receive_before(
            std::time::Instant::now() + Duration::from_millis(10),
            MAX_LINE,
        )
    }

    /// From now on every line is sealed and checked with `session`.
    pub fn seal(&mut self, session: Session) {
        self.session = Some(session);
    }

    /// Sends `v` as one line (sealed, once the channel is).
    pub fn send(&mut self, v: &Value) -> std::io::Result<()> {
        let sealed;
        let v = match self.session.as_mut() {
            Some(session) => {
                sealed = session.seal(v);
                &sealed
            }
            None => v,
        };
        let mut line = v.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes())
    }

    /// The next line as JSON (opened and checked, once the channel is sealed); `None`
    /// when the other end closed.
    pub fn receive(&mut self) -> std::io::Result<Option<Value>> {
        let mut line = String::new();
        let read = (&mut self.reader).take(MAX_LINE).read_line(&mut line)?;
        if read == 0 {
            return Ok(None);
        }
        self.parse(&line, MAX_LINE).map(Some)
    }

    /// The next line, of at most `max` bytes, whole before `deadline` however slowly it
    /// comes (the read timeout is re-armed to what is left before each read); `None` when
    /// the other end closed first.
    pub fn receive_before(
        &mut self,
        deadline: std::time::Instant,
        max: u64,
    ) -> std::io::Result<Option<Value>> {
        let mut line = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            self.writer.set_read_timeout(Some(left))?;
            let available = self.reader.fill_buf()?;
            if available.is_empty() {
                return Ok(None);
            }
            let end = available.iter().position(|&b| b == b'\n');
            let take = end.map_or(available.len(), |at| at + 1);
            line.extend_from_slice(&available[..take]);
            self.reader.consume(take);
            if line.len() as u64 > max {
                return Err(std::io::Error::other(format!(
                    "a line longer than {max} bytes"
                )));
            }
            if end.is_some() {
                let line = String::from_utf8(line)
                    .map_err(|_| std::io::Error::other("a line that is not UTF-8"))?;
                return self.parse(&line, max).map(Some);
            }
        }
    }

    /// A whole line read as JSON, and opened when the channel is sealed.
    fn parse(&mut self, line: &str, max: u64) -> std::io::Result<Value> {
        if !line.ends_with('\n') {
            return Err(std::io::Error::other(format!(
                "a line longer than {max} bytes"
            )));
        }
        let value: Value = serde_json::from_str(line)
            .map_err(|e| std::io::Error::other(format!("not JSON: {e}")))?;
        match self.session.as_mut() {
            Some(session) => session.open(&value).map_err(std::io::Error::other),
            None => Ok(value),
        }
    }

    /// Sends `request` and reads its reply's `ok` (a refusal's text as the error).
    pub fn call(&mut self, request: &Request) -> Result<Value, String> {
        self.send(&request.to_json())
            .map_err(|e| format!("the agent: {e}"))?;
        let reply = self
            .receive()
            .map_err(|e| format!("the agent: {e}"))?
            .ok_or("the agent closed the connection")?;
        match (reply.get("ok"), reply.get("error")) {
            (Some(ok), _) => Ok(ok.clone()),
            (None, Some(e)) => Err(format!("the agent: {}", e.as_str().unwrap_or("?"))),
            _ => Err(format!(
                "the agent's reply is neither ok nor error: {reply}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A search's load to one of our relays, uplink only: what the tests vary.
    fn a_search() -> Prepare {
        Prepare {
            dst: "10.1.2.3:3478".parse().unwrap(),
            dst_mac: [2, 0, 0, 0, 0, 0xaa],
            framed: true,
            keeps_flows: true,
            flows: 1000,
            size: 200,
            purpose: Purpose::Search { live_frames: true },
            returns: None,
            downlink_share: 0.0,
        }
    }

    #[test]
    fn every_request_reads_back_as_written() {
        let prepare = a_search();
        for r in [
            Request::Hello,
            Request::Prepare(prepare),
            Request::Prepare(Prepare {
                purpose: Purpose::Fixed { live_frames: true },
                ..prepare
            }),
            Request::Prepare(Prepare {
                purpose: Purpose::Fixed { live_frames: false },
                ..prepare
            }),
            Request::Prepare(Prepare {
                returns: Some(ReturnPath::Framed {
                    internal: "10.1.2.3:40000".parse().unwrap(),
                    vip: "10.1.2.3:3478".parse().unwrap(),
                }),
                downlink_share: 0.25,
                ..prepare
            }),
            Request::Prepare(Prepare {
                returns: Some(ReturnPath::ToClientPort("10.1.2.3".parse().unwrap())),
                downlink_share: 1.0,
                ..prepare
            }),
            Request::Prepare(Prepare {
                dst: "[fd00::1]:3478".parse().unwrap(),
                returns: Some(ReturnPath::ToClientPort("fd00::1".parse().unwrap())),
                ..prepare
            }),
            Request::Trial {
                rate: 25_000,
                duration: Duration::from_millis(1500),
                latency: true,
            },
            Request::Release,
        ] {
            assert_eq!(Request::from_json(&r.to_json()), Ok(r));
        }
    }

    #[test]
    fn a_bad_request_is_named_not_guessed() {
        let bad = [
            (json!({"op": "hello", "version": 99}), "protocol version 99"),
            (json!({"op": "reboot"}), "unknown op"),
            (
                json!({"op": "trial", "rate": -1, "ms": 5, "latency": false}),
                "`rate`",
            ),
            (json!({"nothing": 1}), "`op`"),
        ];
        let prepare = Request::Prepare(Prepare {
            downlink_share: 0.5,
            ..a_search()
        })
        .to_json();
        let with = |k: &str, value: Value| {
            let mut v = prepare.clone();
            v[k] = value;
            v
        };
        let bad = bad.into_iter().chain([
            (with("downlink_share", json!(1.5)), "`downlink_share`"),
            (with("downlink_share", json!("half")), "`downlink_share`"),
            (
                with("returns", json!({"framed": {"internal": "x"}})),
                "`returns.internal`",
            ),
            (with("returns", json!({"to_client_port": 7})), "`returns`"),
        ]);
        for (v, says) in bad {
            let e = Request::from_json(&v).unwrap_err();
            assert!(e.contains(says), "{v}: {e}");
        }
    }

    #[test]
    fn a_trial_reads_back_as_written() {
        let t = Trial {
            offered_pps: 10_000,
            sent_pps: 9_990,
            sent: 9_990,
            received: 9_980,
            latency: Latency {
                samples: 1_200,
                cdf_us: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.5],
            },
        };
        let back = trial_from_json(&trial_json(&t)).unwrap();
        assert_eq!(
            (back.sent, back.received, back.latency),
            (t.sent, t.received, t.latency)
        );
    }
}
