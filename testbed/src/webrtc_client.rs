//! A str0m client peer for the end-to-end tests and the session benchmarks: full ICE
//! (not lite), one Opus audio m-line, the `events` data channel, WHIP-style signaling
//! (over [`crate::http`]), paced audio, counters of what came back.
//!
//! It is test and load tooling, not part of the server: it lives in the test kit so that
//! `perf` drives the same peer the tests drive.
//!
//! A client made with [`Client::over_tcp`] is one whose network blocks UDP: its only
//! candidate is an active ICE-TCP one (RFC 6544) on a connection it opens to the relay's
//! TCP VIP, and every STUN, DTLS and SRTP packet travels on it with RFC 4571 framing.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use crate::http::{HttpResponse, request};
use str0m::change::{SdpAnswer, SdpPendingOffer};
use str0m::channel::ChannelId;
use str0m::media::{Direction, Frequency, MediaKind, MediaTime, Mid, Pt};
use str0m::net::{Protocol, Receive, TcpType};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc};

/// How long `run_until` waits.
pub const WAIT: Duration = Duration::from_secs(15);

/// A str0m client peer: full ICE (not lite), one audio m-line, the `events` channel.
#[derive(Debug)]
pub struct Client {
    /// The peer.
    pub rtc: Rtc,
    /// Its socket.
    pub socket: UdpSocket,
    /// The socket's address.
    pub local: SocketAddr,
    /// The audio m-line.
    pub mid: Mid,
    /// The `events` channel.
    pub channel: ChannelId,
    pending: Option<SdpPendingOffer>,
    /// The SDP offer.
    pub offer: String,
    /// `Location` of the session once signaled.
    pub location: Option<String>,
    /// The SDP answer once signaled.
    pub answer: Option<String>,
    /// When ICE and DTLS connected.
    pub connected_at: Option<Instant>,
    /// When the first echoed audio packet arrived.
    pub first_audio_at: Option<Instant>,
    /// The `events` channel is open.
    pub channel_open: bool,
    /// Text messages received on the channel.
    pub messages: Vec<String>,
    /// Audio packets received.
    pub audio_received: usize,
    /// The payloads of the first [`KEPT_PAYLOADS`] audio packets received, as str0m
    /// delivered them (to tell a model's own voice from an echo).
    pub audio_payloads: Vec<Vec<u8>>,
    /// When the last echoed audio packet arrived.
    pub last_audio_at: Option<Instant>,
    /// The longest time between two echoed audio packets as str0m delivered them (its
    /// receive buffer holds packets behind a lost one for a while).
    pub longest_audio_gap: Duration,
    /// When the last RTP datagram arrived at the socket.
    pub last_rtp_at: Option<Instant>,
    /// The longest time between two RTP datagrams arriving at the socket: the gap on the
    /// wire, before any buffering.
    pub longest_rtp_gap: Duration,
    /// Audio packets missing from the RTP sequence numbers received: each gap between a
    /// packet and the highest one before it (a jump of more than [`MAX_SEQ_GAP`] is a
    /// new sequence, not loss).
    pub audio_gaps: u64,
    /// The highest RTP sequence number of the audio received.
    last_audio_seq: Option<u64>,
    /// Since when ICE has reported the connection disconnected (consent or the path
    /// lost); cleared when it connects again.
    pub disconnected_since: Option<Instant>,
    /// Audio packets sent.
    pub audio_sent: usize,
    /// STUN datagrams sent (connectivity and consent checks).
    pub stun_sent: usize,
    next_timeout: Instant,
    pt: Option<Pt>,
    rtp_time: u64,
    /// Echoed RTP datagrams kept as they arrived while a recorded talk played
    /// ([`Client::keep_arrivals`]), to be checked by [`Client::verify_echoes`].
    pub kept: Vec<Vec<u8>>,
    /// The client's clock after [`Client::record_talk`]: ahead of the wall clock.
    recorded_until: Option<Instant>,
    /// Where the recorded talk goes: the server's address on the selected pair.
    recorded_to: Option<SocketAddr>,
    /// The ICE-TCP connection, for a client made with [`Client::over_tcp`].
    pub tcp: Option<TcpLink>,
}

/// A client's ICE-TCP connection to the relay's TCP VIP, RFC 4571 framed both ways.
#[derive(Debug)]
pub struct TcpLink {
    /// The connection (non-blocking).
    pub stream: TcpStream,
    /// The relay's TCP VIP.
    pub remote: SocketAddr,
    /// Bytes read and not yet a whole message.
    inbox: Vec<u8>,
    /// Framed messages the kernel has not taken yet.
    outbox: Vec<u8>,
}

impl TcpLink {
    /// Queues one message (framed) and writes what the kernel takes now.
    fn send(&mut self, message: &[u8]) {
        let len = u16::try_from(message.len()).expect("a message fits a 2-byte length");
        self.outbox.extend_from_slice(&len.to_be_bytes());
        self.outbox.extend_from_slice(message);
        self.write_out();
    }

    fn write_out(&mut self) {
        while !self.outbox.is_empty() {
            match self.stream.write(&self.outbox) {
                Ok(0) => return,
                Ok(n) => {
                    self.outbox.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// Reads what arrived (until the connection would block) and returns the whole
    /// messages among it.
    fn receive(&mut self) -> Vec<Vec<u8>> {
        self.write_out();
        let mut buf = [0u8; 4096];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.inbox.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let mut messages = Vec::new();
        while self.inbox.len() >= 2 {
            let len = usize::from(u16::from_be_bytes([self.inbox[0], self.inbox[1]]));
            if self.inbox.len() < 2 + len {
                break;
            }
            messages.push(self.inbox[2..2 + len].to_vec());
            self.inbox.drain(..2 + len);
        }
        messages
    }
}

/// Audio payloads a client keeps ([`Client::audio_payloads`]).
pub const KEPT_PAYLOADS: usize = 1000;

/// One datagram of a recorded talk: sent `offset` after the talk starts, to `to`.
#[derive(Clone, Debug)]
pub struct RecordedDatagram {
    /// When, from the start of the talk.
    pub offset: Duration,
    /// The server address it goes to.
    pub to: SocketAddr,
    /// The datagram (SRTP, SRTCP or STUN, as str0m made it).
    pub bytes: Vec<u8>,
    /// It carries a frame of audio (RTP, not RTCP).
    pub audio: bool,
}

/// The largest jump in RTP sequence numbers counted as loss; a larger one starts a new
/// sequence (a new stream, or a sender that skipped ahead).
pub const MAX_SEQ_GAP: u64 = 1000;

/// Packets `low..=high` arrived after the highest one so far, `last`: how many are
/// missing between them, and the new highest. A late (reordered) or repeated packet
/// misses nothing; a jump beyond [`MAX_SEQ_GAP`] restarts the count.
pub fn sequence_gap(last: Option<u64>, low: u64, high: u64) -> (u64, u64) {
    match last {
        None => (0, high),
        Some(last) if low > last && low - last <= MAX_SEQ_GAP => (low - last - 1, high),
        Some(last) if low > last => (0, high),
        Some(last) => (0, last.max(high)),
    }
}

/// RTP, not RTCP (RFC 5761: RTCP packet types 192–223 in the second byte).
fn is_rtp(datagram: &[u8]) -> bool {
    datagram.len() >= 12 && datagram[0] & 0xc0 == 0x80 && !(192..=223).contains(&datagram[1])
}

impl Client {
    /// A client whose socket binds `ip` (port chosen by the kernel).
    pub fn new_on(ip: std::net::Ipv4Addr) -> Client {
        Self::with_socket(UdpSocket::bind((ip, 0)).expect("client socket binds"))
    }

    /// A client on a socket the caller bound (e.g. inside a network namespace).
    pub fn with_socket(socket: UdpSocket) -> Client {
        let local = socket.local_addr().expect("a bound socket has an address");
        let candidate = Candidate::host(local, "udp").expect("a host candidate");
        Self::with_candidate(socket, candidate, None)
    }

    /// A client whose network blocks UDP: it connects from `ip` to the relay's TCP VIP
    /// `relay_tcp`, and its only candidate is an active ICE-TCP one on that connection.
    pub fn over_tcp(ip: std::net::Ipv4Addr, relay_tcp: SocketAddr) -> Client {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a TCP socket");
        socket
            .bind(&SocketAddr::from((ip, 0)).into())
            .expect("the client address binds");
        socket
            .connect(&relay_tcp.into())
            .expect("the relay's TCP VIP accepts");
        let stream: TcpStream = socket.into();
        stream.set_nodelay(true).expect("TCP_NODELAY");
        stream.set_nonblocking(true).expect("non-blocking mode");
        let local = stream
            .local_addr()
            .expect("a connected stream has an address");
        let candidate = Candidate::builder()
            .tcp()
            .host(local)
            .tcptype(TcpType::Active)
            .build()
            .expect("an active TCP candidate");
        // The UDP socket is never used: it keeps the fields every client has.
        let unused = UdpSocket::bind((ip, 0)).expect("client socket binds");
        let link = TcpLink {
            stream,
            remote: relay_tcp,
            inbox: Vec::new(),
            outbox: Vec::new(),
        };
        let mut client = Self::with_candidate(unused, candidate, Some(link));
        client.local = local;
        client
    }

    fn with_candidate(socket: UdpSocket, candidate: Candidate, tcp: Option<TcpLink>) -> Client {
        let now = Instant::now();
        socket.set_nonblocking(true).expect("non-blocking mode");
        let local = socket.local_addr().expect("a bound socket has an address");
        let mut rtc = Rtc::builder()
            .clear_codecs()
            .enable_opus(true, false)
            .build(now);
        rtc.add_local_candidate(candidate);
        let mut api = rtc.sdp_api();
        let mid = api.add_media(MediaKind::Audio, Direction::SendRecv, None, None, None);
        let channel = api.add_channel("events".into());
        let (offer, pending) = api.apply().expect("a new media line always makes an offer");
        Client {
            rtc,
            socket,
            local,
            mid,
            channel,
            pending: Some(pending),
            offer: offer.to_sdp_string(),
            location: None,
            answer: None,
            connected_at: None,
            first_audio_at: None,
            channel_open: false,
            messages: vec![],
            audio_received: 0,
            audio_payloads: Vec::new(),
            last_audio_at: None,
            longest_audio_gap: Duration::ZERO,
            last_rtp_at: None,
            longest_rtp_gap: Duration::ZERO,
            audio_gaps: 0,
            last_audio_seq: None,
            disconnected_since: None,
            audio_sent: 0,
            stun_sent: 0,
            next_timeout: now,
            pt: None,
            rtp_time: 0,
            kept: Vec::new(),
            recorded_until: None,
            recorded_to: None,
            tcp,
        }
    }

    /// The SDP offer, for a caller that POSTs it itself (then [`Client::apply_answer`]).
    pub fn offer(&self) -> &str {
        &self.offer
    }

    /// A signaling request as this client makes it: from its own address when that is a
    /// loopback one, as each real user signals from its own (signaling's per-address
    /// limits then count each client apart).
    fn signaling_request(
        &self,
        http: SocketAddr,
        method: &str,
        path: &str,
        body: (&str, &str),
    ) -> Option<HttpResponse> {
        if self.local.ip().is_loopback() {
            crate::http::request_from(self.local.ip(), http, method, path, Some(body), &[])
        } else {
            request(http, method, path, Some(body), &[])
        }
    }

    /// POSTs the offer; on 201 applies the answer.
    pub fn signal(&mut self, http: SocketAddr) -> HttpResponse {
        let r = self
            .signaling_request(
                http,
                "POST",
                "/v1/sessions",
                ("application/sdp", &self.offer),
            )
            .expect("signaling answers");
        self.apply_answer(&r);
        r
    }

    /// Applies the response to the offer's POST (made by the caller, e.g. from another
    /// network namespace): on 201 the answer is accepted and the Location kept.
    pub fn apply_answer(&mut self, r: &HttpResponse) {
        self.try_apply_answer(r).expect("the answer is accepted");
    }

    /// [`Client::apply_answer`] for a server that may answer badly: an answer str0m
    /// cannot take is an error, not a panic.
    pub fn try_apply_answer(&mut self, r: &HttpResponse) -> Result<(), String> {
        if r.status != 201 {
            return Ok(());
        }
        let answer = SdpAnswer::from_sdp_string(&r.body).map_err(|e| e.to_string())?;
        let pending = self
            .pending
            .take()
            .ok_or("the offer was answered already")?;
        self.rtc
            .sdp_api()
            .accept_answer(pending, answer)
            .map_err(|e| e.to_string())?;
        self.location = r.header("Location").map(str::to_string);
        self.answer = Some(r.body.clone());
        Ok(())
    }

    /// When str0m next wants [`Client::step`] called without new input.
    pub fn next_timeout(&self) -> Instant {
        self.next_timeout
    }

    /// Drains outputs, then reads whatever arrived (non-blocking, until the socket would
    /// block). Returns when idle.
    pub fn step(&mut self) {
        self.step_bounded(usize::MAX);
    }

    /// [`Client::step`] reading at most `reads` datagrams: a peer that floods this client
    /// cannot keep it from returning. True when it stopped at `reads` (more may wait: a
    /// caller on edge-triggered readiness steps it again).
    pub fn step_bounded(&mut self, reads: usize) -> bool {
        let now = Instant::now();
        if now >= self.next_timeout {
            let _ = self.rtc.handle_input(Input::Timeout(now));
        }
        self.drain();
        if self.tcp.is_some() {
            self.step_tcp();
            return false;
        }
        self.read_udp(reads)
    }

    /// Reads up to `reads` datagrams into str0m (until the socket would block); true
    /// when it stopped at `reads`.
    fn read_udp(&mut self, reads: usize) -> bool {
        let mut buf = [0u8; 2048];
        for _ in 0..reads {
            let Ok((n, source)) = self.socket.recv_from(&mut buf) else {
                return false;
            };
            if is_rtp(&buf[..n]) {
                let now = Instant::now();
                if let Some(last) = self.last_rtp_at.replace(now) {
                    self.longest_rtp_gap = self.longest_rtp_gap.max(now - last);
                }
            }
            let Ok(r) = Receive::new(Protocol::Udp, source, self.local, &buf[..n]) else {
                continue;
            };
            let _ = self.rtc.handle_input(Input::Receive(Instant::now(), r));
            self.drain();
        }
        true
    }

    /// [`Client::step`]'s reads for a client over TCP: each whole message to str0m.
    fn step_tcp(&mut self) {
        loop {
            let Some(link) = self.tcp.as_mut() else {
                return;
            };
            let remote = link.remote;
            let messages = link.receive();
            if messages.is_empty() {
                return;
            }
            for message in messages {
                if is_rtp(&message) {
                    let now = Instant::now();
                    if let Some(last) = self.last_rtp_at.replace(now) {
                        self.longest_rtp_gap = self.longest_rtp_gap.max(now - last);
                    }
                }
                let Ok(r) = Receive::new(Protocol::Tcp, remote, self.local, &message) else {
                    continue;
                };
                let _ = self.rtc.handle_input(Input::Receive(Instant::now(), r));
                self.drain();
            }
        }
    }

    fn drain(&mut self) {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Transmit(t)) => {
                    if t.contents.first().is_some_and(|b| *b < 4) {
                        self.stun_sent += 1;
                    }
                    match (&mut self.tcp, t.proto) {
                        (Some(link), Protocol::Tcp) => link.send(&t.contents),
                        _ => {
                            let _ = self.socket.send_to(&t.contents, t.destination);
                        }
                    }
                }
                Ok(Output::Timeout(t)) => {
                    self.next_timeout = t;
                    return;
                }
                Ok(Output::Event(e)) => self.on_event(e),
                Err(_) => return,
            }
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Connected => self.connected_at = Some(Instant::now()),
            Event::IceConnectionStateChange(state) => match state {
                IceConnectionState::Disconnected => {
                    self.disconnected_since.get_or_insert_with(Instant::now);
                }
                IceConnectionState::Connected | IceConnectionState::Completed => {
                    self.disconnected_since = None;
                }
                _ => {}
            },
            Event::ChannelOpen(id, _) if id == self.channel => self.channel_open = true,
            Event::ChannelData(d) if !d.binary => {
                self.messages
                    .push(String::from_utf8_lossy(&d.data).to_string());
            }
            Event::MediaData(data) => {
                let now = Instant::now();
                self.audio_received += 1;
                let (low, high) = (**data.seq_range.start(), **data.seq_range.end());
                let (gap, highest) = sequence_gap(self.last_audio_seq, low, high);
                self.audio_gaps += gap;
                self.last_audio_seq = Some(highest);
                if self.audio_payloads.len() < KEPT_PAYLOADS {
                    self.audio_payloads.push(data.data.to_vec());
                }
                self.first_audio_at.get_or_insert(now);
                if let Some(last) = self.last_audio_at.replace(now) {
                    self.longest_audio_gap = self.longest_audio_gap.max(now - last);
                }
            }
            _ => {}
        }
    }

    /// ICE restart the WHIP way (RFC 9725 §4.3): new local credentials, PATCHed as an
    /// sdpfrag; the server's new credentials are applied as the answer. Returns the PATCH
    /// response; on 200 the restart is under way.
    pub fn ice_restart(&mut self, http: SocketAddr) -> HttpResponse {
        let mut api = self.rtc.sdp_api();
        let creds = api.ice_restart(true);
        let (_, pending) = api.apply().expect("an ICE restart always makes an offer");
        let fragment = format!(
            "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n",
            creds.ufrag, creds.pass
        );
        let location = self.location.clone().expect("signal first");
        let r = self
            .signaling_request(
                http,
                "PATCH",
                &location,
                ("application/trickle-ice-sdpfrag", &fragment),
            )
            .expect("signaling answers");
        if r.status == 200 {
            let value = |key: &str| {
                r.body
                    .lines()
                    .find_map(|l| l.trim().strip_prefix(key))
                    .map(|v| v.trim().to_string())
                    .expect("the fragment has the new credentials")
            };
            let (ufrag, pass) = (value("a=ice-ufrag:"), value("a=ice-pwd:"));
            // The answer to our restart offer is the previous answer with the server's new
            // credentials wherever the old ones stood (ice-ufrag, ice-pwd, and the
            // candidate's `ufrag` extension): nothing else changed.
            let previous = self.answer.clone().expect("signal first");
            let old = |key: &str| {
                previous
                    .lines()
                    .find_map(|l| l.trim().strip_prefix(key))
                    .map(|v| v.trim().to_string())
                    .expect("the answer has credentials")
            };
            let answer = previous
                .replace(&old("a=ice-ufrag:"), &ufrag)
                .replace(&old("a=ice-pwd:"), &pass);
            let parsed = SdpAnswer::from_sdp_string(&answer).expect("rewritten answer parses");
            self.rtc
                .sdp_api()
                .accept_answer(pending, parsed)
                .expect("restart answer accepted");
            self.answer = Some(answer);
        }
        self.drain();
        r
    }

    /// Sends a text message on the `events` channel.
    pub fn send_text(&mut self, text: &str) -> bool {
        let ok = self
            .rtc
            .channel(self.channel)
            .is_some_and(|mut ch| ch.write(false, text.as_bytes()).is_ok());
        self.drain();
        ok
    }

    /// Writes one 20 ms Opus-sized audio packet.
    pub fn send_audio(&mut self) -> bool {
        let ok = self.write_audio(Instant::now());
        if ok {
            self.audio_sent += 1;
        }
        self.drain();
        ok
    }

    /// Writes `frames` audio packets at once and only then sends them, back to back:
    /// a burst the relay reads in one batch more often than paced audio. Returns how
    /// many str0m took.
    pub fn send_audio_burst(&mut self, frames: usize) -> usize {
        let now = Instant::now();
        let written = (0..frames).take_while(|_| self.write_audio(now)).count();
        self.audio_sent += written;
        self.drain();
        written
    }

    /// Hands str0m one 20 ms Opus-sized frame of audio, written at `now`.
    fn write_audio(&mut self, now: Instant) -> bool {
        let Some(writer) = self.rtc.writer(self.mid) else {
            return false;
        };
        let pt = match self.pt {
            Some(pt) => pt,
            None => match writer.payload_params().next() {
                Some(p) => {
                    let pt = p.pt();
                    self.pt = Some(pt);
                    pt
                }
                None => return false,
            },
        };
        self.rtp_time += 960;
        let payload = vec![0xF8u8; 80];
        writer
            .write(
                pt,
                now,
                MediaTime::new(self.rtp_time, Frequency::FORTY_EIGHT_KHZ),
                payload,
            )
            .is_ok()
    }

    /// Records what this connected client sends while it talks for `frames` frames of
    /// 20 ms, the first `phase` after the talk starts, without sending it: str0m runs on
    /// a clock of its own moved forward in memory, so every datagram (SRTP audio, SRTCP
    /// reports, consent checks) is made now, as str0m makes it, with its offset from the
    /// start of the talk. A load client that plays the recording back costs a
    /// `send_to` per datagram, not a str0m client's work, and so is not the limit of
    /// what it measures. The client must not be stepped afterwards, except through
    /// [`Client::keep_arrivals`] and [`Client::verify_echoes`].
    pub fn record_talk(&mut self, phase: Duration, frames: usize) -> Vec<RecordedDatagram> {
        const FRAME: Duration = Duration::from_millis(20);
        let start = Instant::now().max(self.next_timeout);
        let end = start + phase + FRAME * frames as u32;
        let (mut now, mut next_frame, mut written) = (start, start + phase, 0);
        let mut recorded = Vec::new();
        // Bounded: each round moves the clock to a frame or to one of str0m's timeouts.
        for _ in 0..frames * 64 + 1024 {
            if now >= next_frame && written < frames && self.write_audio(now) {
                written += 1;
                next_frame += FRAME;
            }
            loop {
                match self.rtc.poll_output() {
                    Ok(Output::Transmit(t)) => {
                        let audio = is_rtp(&t.contents);
                        self.audio_sent += usize::from(audio);
                        self.recorded_to = Some(t.destination);
                        recorded.push(RecordedDatagram {
                            offset: now - start,
                            to: t.destination,
                            bytes: t.contents.to_vec(),
                            audio,
                        });
                    }
                    Ok(Output::Timeout(t)) => {
                        self.next_timeout = t;
                        break;
                    }
                    Ok(Output::Event(_)) => {}
                    Err(_) => break,
                }
            }
            let next = if written < frames {
                next_frame.min(self.next_timeout)
            } else {
                self.next_timeout
            };
            if next > end + FRAME {
                break;
            }
            // A timeout already due still needs the clock moved; never past a frame.
            now = if next > now {
                next
            } else if written < frames {
                (now + Duration::from_micros(1)).min(next_frame)
            } else {
                now + Duration::from_micros(1)
            };
            let _ = self.rtc.handle_input(Input::Timeout(now));
        }
        self.recorded_until = Some(now);
        recorded
    }

    /// Reads what arrived (non-blocking, until the socket would block) and keeps the
    /// RTP datagrams for [`Client::verify_echoes`]; the rest (STUN answers, SRTCP) is
    /// read and dropped. For a client playing back a recorded talk.
    pub fn keep_arrivals(&mut self) {
        let mut buf = [0u8; 2048];
        while let Ok(n) = self.socket.recv(&mut buf) {
            if is_rtp(&buf[..n]) {
                self.kept.push(buf[..n].to_vec());
            }
        }
    }

    /// Hands the kept RTP datagrams to str0m, after the talk: each one str0m decrypts,
    /// authenticates and delivers as audio counts in `audio_received`. Returns how many
    /// were kept.
    pub fn verify_echoes(&mut self) -> usize {
        let now = self.recorded_until.unwrap_or_else(Instant::now);
        let kept = std::mem::take(&mut self.kept);
        let Some(remote) = self.recorded_to else {
            return kept.len();
        };
        for datagram in &kept {
            if let Ok(r) = Receive::new(Protocol::Udp, remote, self.local, datagram) {
                let _ = self.rtc.handle_input(Input::Receive(now, r));
            }
            // What str0m would send now (reports, checks) stays unsent: the talk is over.
            while let Ok(output) = self.rtc.poll_output() {
                match output {
                    Output::Event(e) => self.on_event(e),
                    Output::Transmit(_) => {}
                    Output::Timeout(_) => break,
                }
            }
        }
        kept.len()
    }
}

/// Steps every client until `done` holds for all of them, or panics after `WAIT`.
pub fn run_until(clients: &mut [Client], what: &str, done: impl Fn(&Client) -> bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        for c in clients.iter_mut() {
            c.step();
        }
        if clients.iter().all(&done) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The echo model's conversation with one signaled client, each step waited for: ICE
/// and DTLS connect (`path` names the way in the failure message) and the `events`
/// channel opens, `session.created` arrives, a ping is answered by its pong, then
/// `packets` Opus packets paced at 20 ms go out and at least `echoed` come back.
pub fn converse_with_echo(client: Client, path: &str, packets: u32, echoed: usize) -> Client {
    let mut clients = vec![client];
    run_until(
        &mut clients,
        &format!("ICE + DTLS connected {path}, events channel open"),
        |c| c.connected_at.is_some() && c.channel_open,
    );
    run_until(&mut clients, "session.created", |c| {
        c.messages.iter().any(|m| m.contains("session.created"))
    });
    assert!(clients[0].send_text(r#"{"type":"ping","id":7}"#));
    run_until(&mut clients, "pong", |c| {
        c.messages.iter().any(|m| m == r#"{"type":"pong","id":7}"#)
    });
    let start = Instant::now();
    for i in 0..packets {
        while start.elapsed() < Duration::from_millis(20 * u64::from(i)) {
            clients[0].step();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(clients[0].send_audio());
    }
    run_until(&mut clients, "echoed audio", |c| c.audio_received >= echoed);
    clients.remove(0)
}

/// An SDP offer with only a data channel (no audio), for signaling tests.
pub fn offer_without_audio() -> String {
    let mut rtc = Rtc::builder().build(Instant::now());
    let local = SocketAddr::from(([127, 0, 0, 1], 9));
    rtc.add_local_candidate(Candidate::host(local, "udp").expect("a host candidate"));
    let mut api = rtc.sdp_api();
    api.add_channel("events".into());
    api.apply()
        .expect("a new channel always makes an offer")
        .0
        .to_sdp_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_gaps_count_missing_packets_not_reordering_or_new_streams() {
        assert_eq!(sequence_gap(None, 500, 500), (0, 500), "the first packet");
        assert_eq!(sequence_gap(Some(500), 501, 501), (0, 501), "the next one");
        assert_eq!(
            sequence_gap(Some(501), 505, 505),
            (3, 505),
            "502-504 missing"
        );
        assert_eq!(
            sequence_gap(Some(505), 503, 503),
            (0, 505),
            "late: already counted"
        );
        assert_eq!(sequence_gap(Some(505), 505, 505), (0, 505), "a repeat");
        assert_eq!(
            sequence_gap(Some(505), 506, 508),
            (0, 508),
            "a frame of three"
        );
        assert_eq!(
            sequence_gap(Some(508), 508 + MAX_SEQ_GAP + 1, 508 + MAX_SEQ_GAP + 1),
            (0, 508 + MAX_SEQ_GAP + 1),
            "a jump is a new sequence"
        );
    }
}
