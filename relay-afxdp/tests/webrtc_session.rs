//! A real WebRTC session through relay-afxdp (root only; CI runs as root): a str0m client
//! in the testbed's client namespace signals to the transceiver (in the transceiver
//! namespace), whose only ICE candidate is relay-afxdp's VIP; ICE, DTLS, SRTP audio and the
//! data channel then all cross relay-afxdp, and the echo comes back.

use std::net::{SocketAddr, UdpSocket};
use std::process::Stdio;
use std::time::{Duration, Instant};

use testkit::cargo_build::bin;
use testkit::http::{HttpResponse, request as http_request};
use testkit::netns::in_netns;
use testkit::testbed::Testbed;
use testkit::testbed::tools::{KEYS, require_root, start_relay};
use testkit::webrtc_client::{Client, converse_with_echo};

fn request_from(
    ns: &str,
    http: SocketAddr,
    method: &'static str,
    path: String,
    body: Option<String>,
) -> Option<HttpResponse> {
    in_netns(Some(ns), move || {
        http_request(
            http,
            method,
            &path,
            body.as_deref().map(|b| ("application/sdp", b)),
            &[],
        )
    })
    .ok()
    .flatten()
}

fn session_through_relay_afxdp(xdp_mode: &str) {
    require_root();
    let bed = Testbed::up().unwrap();
    let ifname = bed.relay.ifname.clone();
    let mut relay = start_relay(
        &bed,
        "relay-afxdp",
        "1",
        &["--interface", &ifname, "--xdp-mode", xdp_mode],
    );
    let vip = SocketAddr::from((bed.relay.addr, 3478));
    let http = SocketAddr::from((bed.transceiver.addr, 8080));
    let mut command = bed
        .transceiver
        .command(bin("transceiver").to_str().unwrap());
    command
        .args([
            "--http-addr",
            &http.to_string(),
            "--bind",
            &format!("{}:41000", bed.transceiver.addr),
        ])
        // The testbed's private network; the page sends no token.
        .arg("--allow-unauthenticated")
        .args([
            "--advertise",
            &vip.to_string(),
            "--allow-relay-net",
            "10.77.0.0/24",
        ])
        .env("UFRAG_RELAY_HINT_KEYS", KEYS)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut xcvr = testkit::OwnedChild::spawn(&mut command).unwrap();
    let cli = bed.client.ns.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while request_from(&cli, http, "GET", "/readyz".into(), None).map(|r| r.status) != Some(200) {
        assert!(Instant::now() < deadline, "transceiver not ready");
        std::thread::sleep(Duration::from_millis(50));
    }

    let ip = bed.client.addr;
    let socket = in_netns(Some(&cli), move || UdpSocket::bind((ip, 0)))
        .unwrap()
        .unwrap();
    let mut client = Client::with_socket(socket);
    let answer = request_from(
        &cli,
        http,
        "POST",
        "/v1/sessions".into(),
        Some(client.offer.clone()),
    )
    .unwrap();
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert!(
        answer
            .body
            .contains(&format!("{} {}", vip.ip(), vip.port())),
        "the candidate is relay-afxdp's VIP"
    );
    client.apply_answer(&answer);

    let client = converse_with_echo(client, "through relay-afxdp", 25, 20);

    let location = client.location.clone().unwrap();
    assert_eq!(
        request_from(&cli, http, "DELETE", location, None).map(|r| r.status),
        Some(204)
    );
    for child in [&mut relay, &mut xcvr] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn a_webrtc_session_crosses_relay_afxdp_in_skb_mode() {
    session_through_relay_afxdp("skb");
}

#[test]
fn a_webrtc_session_crosses_relay_afxdp_in_native_mode() {
    session_through_relay_afxdp("native");
}
