//! Instruction counts (callgrind, via iai-callgrind) of one established session's echo
//! path inside the transceiver: an SRTP audio datagram from the client goes into the
//! session (str0m: SRTP, RTP, the audio depacketizer), the echo model turns it around,
//! and the session writes it back (packetizer, pacer, SRTP) until it leaves as a
//! datagram. The client, the handshake and the client's datagrams are made outside the
//! measurement; each run echoes [`PACKETS`] datagrams (divide by [`PACKETS`]). This is
//! the cost that decides how many sessions a worker core carries. Gated by
//! `scripts/instructions.sh`.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use str0m::change::SdpAnswer;
use str0m::media::{Direction, Frequency, MediaKind, MediaTime};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, IceCreds, Input, Output, Rtc};
use ufrag_model_protocol::messages::ModelInput;
use ufrag_model_protocol::messages::ModelOutput;
use ufrag_transceiver::session::{EVENTS_CHANNEL, Session, SessionOutput};

/// Audio datagrams echoed per bench run.
const PACKETS: u64 = 100;
/// One Opus frame's duration, as clients send them.
const FRAME: Duration = Duration::from_millis(20);
const CLIENT: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 7)),
    5000,
);
const VIP: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 1)),
    3478,
);
const RELAY: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)),
    40000,
);

/// A connected session at time `now`, and the client's next audio datagrams, each with
/// the time it was sent.
struct Established {
    session: Session,
    now: Instant,
    audio: Vec<(Instant, Vec<u8>)>,
}

/// What the session answered with: datagrams and audio frames for the model.
#[derive(Default)]
struct Answered {
    datagrams: Vec<Vec<u8>>,
    audio: Vec<ModelInput>,
    connected: bool,
}

/// Polls `session` until it waits, collecting what it asks for; the earliest wake-up.
fn drain(session: &mut Session, answered: &mut Answered) -> Instant {
    loop {
        match session.poll_output() {
            SessionOutput::Transmit(t) => answered.datagrams.push(t.contents.to_vec()),
            SessionOutput::Model(input @ ModelInput::Audio { .. }) => answered.audio.push(input),
            SessionOutput::Connected(_) => answered.connected = true,
            SessionOutput::Model(_) => {}
            SessionOutput::Timeout(at) => return at,
            SessionOutput::Ended(reason) => panic!("the session ended: {reason:?}"),
        }
    }
}

/// Polls `client` until it waits: its datagrams, and its earliest wake-up.
fn drain_client(client: &mut Rtc) -> (Vec<Vec<u8>>, Instant) {
    let mut datagrams = Vec::new();
    loop {
        match client.poll_output().expect("the client works") {
            Output::Transmit(t) => datagrams.push(t.contents.to_vec()),
            Output::Timeout(at) => return (datagrams, at),
            Output::Event(_) => {}
        }
    }
}

/// A str0m client offering Opus and the `events` channel, connected in memory to a
/// session that answered it, then `PACKETS` audio frames the client sends 20 ms apart
/// (made here, outside the measurement).
fn established() -> Established {
    let mut now = Instant::now();
    let mut client = Rtc::builder()
        .clear_codecs()
        .enable_opus(true, false)
        .build(now);
    client.add_local_candidate(Candidate::host(CLIENT, "udp").unwrap());
    let mut api = client.sdp_api();
    let mid = api.add_media(MediaKind::Audio, Direction::SendRecv, None, None, None);
    api.add_channel(EVENTS_CHANNEL.into());
    let (offer, pending) = api.apply().unwrap();
    let creds = IceCreds {
        ufrag: "serverUfrag".into(),
        pass: "serverPasswordOf22chars".into(),
    };
    let cert = ufrag_transceiver::session::process_certificate().expect("a certificate");
    let (mut session, answer) = Session::accept(7, offer, creds, VIP, cert, now).unwrap();
    let answer = SdpAnswer::from_sdp_string(&answer).unwrap();
    client.sdp_api().accept_answer(pending, answer).unwrap();

    let mut answered = Answered::default();
    for _ in 0..400 {
        let (datagrams, client_at) = drain_client(&mut client);
        for d in datagrams {
            session
                .handle_receive(now, CLIENT, VIP, Some(RELAY), &d)
                .expect("the session takes the client's datagram");
        }
        let session_at = drain(&mut session, &mut answered);
        for d in answered.datagrams.drain(..) {
            let receive = Receive::new(Protocol::Udp, VIP, CLIENT, &d).unwrap();
            client.handle_input(Input::Receive(now, receive)).unwrap();
        }
        if answered.connected && client.is_connected() {
            break;
        }
        now = client_at
            .min(session_at)
            .max(now + Duration::from_millis(1));
        client.handle_input(Input::Timeout(now)).unwrap();
        session.handle_timeout(now);
    }
    assert!(answered.connected, "the pair connects in memory");

    let mut audio = Vec::new();
    // The client's pacer may hold a frame until its next timeout: write until enough left.
    for n in 0..PACKETS * 2 {
        if audio.len() as u64 >= PACKETS {
            break;
        }
        now += FRAME;
        client.handle_input(Input::Timeout(now)).unwrap();
        let writer = client.writer(mid).expect("a writer for audio");
        let pt = writer.payload_params().next().expect("Opus").pt();
        let time = MediaTime::new(960 * n, Frequency::FORTY_EIGHT_KHZ);
        writer.write(pt, now, time, vec![0xfc; 80]).unwrap();
        let (datagrams, _) = drain_client(&mut client);
        audio.extend(
            datagrams
                .into_iter()
                .filter(|d| d[0] & 0xc0 == 0x80 && !(192..=223).contains(&d[1]))
                .map(|d| (now, d)),
        );
    }
    audio.truncate(PACKETS as usize);
    assert_eq!(audio.len() as u64, PACKETS, "the client sent its audio");
    let start = audio[0].0 - FRAME;
    session.handle_timeout(start);
    drain(&mut session, &mut answered);
    Established {
        session,
        now: start,
        audio,
    }
}

// What the worker does for each datagram, with the echo model inline: the datagram in,
// its audio frame to the model and straight back, the reply out. Returns the
// datagrams sent.
#[library_benchmark]
#[bench::opus_80_bytes(established())]
fn echo_x100(mut e: Established) -> u64 {
    let mut answered = Answered::default();
    let mut sent = 0;
    for (at, datagram) in &e.audio {
        e.now = *at;
        e.session.handle_timeout(e.now);
        e.session
            .handle_receive(e.now, CLIENT, VIP, Some(RELAY), black_box(datagram))
            .expect("the session takes its audio");
        drain(&mut e.session, &mut answered);
        for input in answered.audio.drain(..) {
            let ModelInput::Audio { session, frame } = input else {
                unreachable!("only audio is collected");
            };
            e.session
                .handle_model(e.now, ModelOutput::Audio { session, frame });
        }
        drain(&mut e.session, &mut answered);
        sent += answered.datagrams.len() as u64;
        answered.datagrams.clear();
    }
    assert!(sent >= PACKETS, "every frame was echoed: {sent}");
    sent
}

library_benchmark_group!(
    name = session;
    benchmarks = echo_x100
);

main!(library_benchmark_groups = session);
