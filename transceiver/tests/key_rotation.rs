//! Hint keys rotate without a restart, end to end: relay-mio (in process; it notices the
//! key file's change by itself) and the transceiver (a child, told with SIGHUP) share one
//! key file. Sessions minted under the old key keep flowing, and still make their first
//! flow while it is the previous key; sessions minted after the rotation carry the new
//! key; once the old key is removed, a session minted under it is refused by the relay
//! as `hint_unknown_key`, and a key file that does not load (readable by others) changes
//! nothing.

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::*;
use ufrag_common::hint::HintKeys;

/// The new key (id 2); the old one is the test kit's [`KEYS`] (id 1).
const NEW: &str = "2:2222222222222222222222222222222222222222222222222222222222222222";

/// A directory of this test's own, removed however the test ends.
struct KeyDir(PathBuf);

impl Drop for KeyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Replaces the key file as an operator's tooling would: written aside with mode 0600,
/// then renamed over it.
fn write_keys(file: &Path, text: &str) {
    let aside = file.with_extension("new");
    std::fs::write(&aside, text).unwrap();
    std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&aside, file).unwrap();
}

/// The server ufrag of a signaled client's answer.
fn ufrag(c: &Client) -> String {
    let answer = c.answer.as_deref().expect("signaled");
    answer
        .lines()
        .find_map(|l| l.trim().strip_prefix("a=ice-ufrag:"))
        .expect("an ice-ufrag")
        .to_string()
}

/// Whether `ufrag`'s hint verifies under the key text `keys` alone.
fn minted_under(ufrag: &str, keys: &str) -> bool {
    HintKeys::parse(keys)
        .unwrap()
        .authenticate(ufrag.as_bytes())
        .is_ok()
}

/// Waits (at most 10 s) until `series` on `/metrics` at `addr` reaches `at_least`.
fn wait_for_metric(addr: std::net::SocketAddr, series: &str, at_least: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while ufrag_testkit::http::metric(None, addr, series) < at_least {
        assert!(
            Instant::now() < deadline,
            "{series} never reached {at_least}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signaled(xcvr: &Transceiver) -> Client {
    let mut c = new_client();
    assert_eq!(c.signal(xcvr.http).status, 201);
    c
}

#[test]
fn hint_keys_rotate_without_a_restart_and_a_removed_key_stops_verifying() {
    let dir = KeyDir(std::env::temp_dir().join(format!("ufrag-keys-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let file = dir.0.join("hint.keys");
    write_keys(&file, KEYS);
    let path = file.to_str().unwrap();
    let relay = TestRelay::start_keyed(unique_ip(), &["--hint-keys-file", path], None);
    let xcvr = Transceiver::start(Some(relay.vip), &["--hint-keys-file", path]);
    let reloads = |taken: f64| {
        let series = "ufrag_relay_hint_key_reloads_total{result=\"taken\"}";
        wait_for_metric(relay.metrics, series, taken);
        let series = "ufrag_transceiver_hint_key_reloads_total{result=\"taken\"}";
        wait_for_metric(xcvr.http, series, taken);
    };
    let hangup = || {
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &xcvr.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -HUP");
    };

    // Under key 1: session A talks; C and G are minted now and connect later.
    let a = signaled(&xcvr);
    assert!(minted_under(&ufrag(&a), KEYS));
    let a = converse_with_echo(a, "A, minted under key 1", 10, 8);
    let c = signaled(&xcvr);
    let mut g = signaled(&xcvr);
    // Live sessions by the key that minted their ufrag: what tells an operator when an
    // old key may go.
    let by_key = |key: u8| {
        let series = format!("ufrag_transceiver_sessions_by_hint_key{{key_id=\"{key}\"}}");
        ufrag_testkit::http::metric(None, xcvr.http, &series)
    };
    assert_eq!(by_key(1), 3.0, "A, C and G under key 1");

    // Rotation: key 2 current, key 1 previous. The transceiver hears SIGHUP; the relay
    // sees the file change.
    write_keys(&file, &format!("{NEW}\n{KEYS}\n"));
    hangup();
    reloads(1.0);
    assert_eq!(
        ufrag_testkit::http::metric(
            None,
            relay.metrics,
            "ufrag_relay_hint_key_info{key_id=\"2\"}"
        ),
        1.0,
        "the relay names key 2 as its current one"
    );
    let b = signaled(&xcvr);
    assert!(minted_under(&ufrag(&b), NEW), "B carries the new key");
    assert!(!minted_under(&ufrag(&b), KEYS));
    converse_with_echo(b, "B, minted under key 2", 10, 8);
    assert_eq!((by_key(1), by_key(2)), (3.0, 1.0), "B under key 2");
    let heard = a.audio_received;
    converse_with_echo(a, "A, through the rotation", 10, heard + 8);
    converse_with_echo(c, "C, first flow under the previous key", 10, 8);

    // A key file that does not load (readable by others) changes nothing.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    hangup();
    wait_for_metric(
        xcvr.http,
        "ufrag_transceiver_hint_key_reloads_total{result=\"refused\"}",
        1.0,
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();

    // Key 1 removed: G, minted under it, makes its first flow now and is refused.
    write_keys(&file, NEW);
    hangup();
    reloads(2.0);
    let unknown = "ufrag_relay_dropped_datagrams_total{worker=\"0\",reason=\"hint_unknown_key\"}";
    let before = ufrag_testkit::http::metric(None, relay.metrics, unknown);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        g.step();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(g.connected_at.is_none(), "G never connects");
    // G ended (DELETE): one fewer session holds key 1.
    let location = g.location.clone().expect("G's Location");
    let deleted = http_request(xcvr.http, "DELETE", &location, None, &[]).unwrap();
    assert!(
        deleted.status < 300,
        "DELETE {location}: {}",
        deleted.status
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while by_key(1) != 2.0 {
        assert!(
            Instant::now() < deadline,
            "key 1 still counts {}",
            by_key(1)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        ufrag_testkit::http::metric(None, relay.metrics, unknown) > before,
        "the relay refused G's checks as hint_unknown_key"
    );
    // And a session minted now carries key 2 and connects.
    let d = signaled(&xcvr);
    assert!(minted_under(&ufrag(&d), NEW));
    converse_with_echo(d, "D, minted after the removal", 10, 8);
}
