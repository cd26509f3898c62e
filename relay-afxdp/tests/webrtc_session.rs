//! A real WebRTC session through relay-afxdp (root only; CI runs as root): a str0m client
//! in the testbed's client namespace signals to the transceiver (in the transceiver
//! namespace), whose only ICE candidate is relay-afxdp's VIP; ICE, DTLS, SRTP audio and the
//! data channel then all cross relay-afxdp, and the echo comes back.

use std::net::SocketAddr;

use ufrag_testkit::testbed::Testbed;
use ufrag_testkit::testbed::tools::{echoed_session, require_root, start_relay, start_transceiver};

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
    let (mut xcvr, http) = start_transceiver(&bed, vip, &[]);
    echoed_session(&bed, http, vip, "through relay-afxdp");
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
