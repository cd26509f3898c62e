//! The transceiver's configuration: the example file under `deploy/config` loads, prints
//! back to itself with `--print-config`, flags beat its keys, a bad key or value is named
//! (as JSON when the logs are), and `--demo-page=false` takes the page off the public port.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::*;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/transceiver.toml")
}

fn run(args: &[&str], config: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_transceiver"));
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    cmd.args(args)
        .env("UFRAG_RELAY_HINT_KEYS", KEYS)
        .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
        .env_remove("UFRAG_TRANSCEIVER_CONFIG")
        .output()
        .unwrap()
}

fn printed(config: &Path, args: &[&str]) -> String {
    let out = run(&[&["--print-config"], args].concat(), Some(config));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

/// A scratch file named for this test run.
fn scratch(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("xcvr-config-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_example_file_loads_and_prints_back_to_itself() {
    let text = printed(&example(), &[]);
    for line in [
        "http_addr = \"0.0.0.0:8080\"",
        "metrics_addr = \"0.0.0.0:9591\"",
        "demo_page = false",
        "workers = 2",
        "allow_relay_net = [\"10.0.0.0/8\"]",
        "log_format = \"json\"",
        // Defaults the file leaves out are filled in.
        "max_sessions_per_worker = 1000",
        "connect_timeout = \"10s\"",
        "direct = false",
        "# cpus: not set",
    ] {
        assert!(has_line(&text, line), "{line} in\n{text}");
    }
    assert!(!text.contains(KEYS), "hint keys are never printed");
    let copy = scratch("printed.toml", &text);
    let again = printed(&copy, &[]);
    std::fs::remove_file(&copy).unwrap();
    assert_eq!(again, text, "what --print-config writes loads to the same");
}

#[test]
fn a_flag_replaces_the_files_key_and_list() {
    let text = printed(
        &example(),
        &[
            "--workers",
            "3",
            "--allow-relay-net",
            "192.0.2.0/24",
            "--demo-page",
            "true",
        ],
    );
    assert!(has_line(&text, "workers = 3"), "{text}");
    assert!(
        has_line(&text, "allow_relay_net = [\"192.0.2.0/24\"]"),
        "{text}"
    );
    assert!(has_line(&text, "demo_page = true"), "{text}");
    // The environment may name the file instead of --config.
    let out = Command::new(env!("CARGO_BIN_EXE_transceiver"))
        .arg("--print-config")
        .env("UFRAG_TRANSCEIVER_CONFIG", example())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(has_line(
        &String::from_utf8_lossy(&out.stdout),
        "workers = 2"
    ));
}

#[test]
fn a_bad_file_is_named_with_its_key_and_exits_2() {
    let cases = [
        ("unknown.toml", "workerz = 2\n", "`workerz`: not a key"),
        ("secret.toml", "config = \"x\"\n", "`config`: not a key"),
        (
            "value.toml",
            "bind = \"127.0.0.1:0\"\nworkers = \"many\"\n",
            "many",
        ),
        (
            "list.toml",
            "bind = [\"a\", \"b\"]\n",
            "`bind`: takes one value",
        ),
        ("broken.toml", "bind = \n", "not TOML"),
    ];
    for (name, text, expected) in cases {
        let path = scratch(name, text);
        let out = run(&["--direct"], Some(&path));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(expected) && stderr.contains(name),
            "{name}: {stderr}"
        );
        // With JSON logs, one JSON error line names the same.
        let out = run(&["--direct", "--log-format", "json"], Some(&path));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(out.status.code(), Some(2));
        let message = ufrag_testkit::json_log::the_error(&String::from_utf8_lossy(&out.stderr));
        assert!(message.contains(expected), "{name}: {message}");
    }
    let out = run(&["--direct"], Some(Path::new("/nonexistent/xcvr.toml")));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read it"));
}

#[test]
fn startup_errors_are_json_when_the_logs_are() {
    let base = ["--bind", "127.0.0.1:0", "--direct", "--log-format", "json"];
    // A configuration the transceiver refuses at start.
    let out = run(&[&base[..], &["--workers", "0"]].concat(), None);
    assert_eq!(out.status.code(), Some(2));
    let message = ufrag_testkit::json_log::the_error(&String::from_utf8_lossy(&out.stderr));
    assert!(message.contains("`workers`"), "{message}");
    // A value clap refuses.
    let out = run(&[&base[..], &["--idle-timeout", "soon"]].concat(), None);
    assert_eq!(out.status.code(), Some(2));
    let message = ufrag_testkit::json_log::the_error(&String::from_utf8_lossy(&out.stderr));
    assert!(message.contains("--idle-timeout"), "{message}");
    // Hint keys missing.
    let out = Command::new(env!("CARGO_BIN_EXE_transceiver"))
        .args(base)
        .env_remove("UFRAG_RELAY_HINT_KEYS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let message = ufrag_testkit::json_log::the_error(&String::from_utf8_lossy(&out.stderr));
    assert!(message.contains("hint"), "{message}");
}

#[test]
fn the_demo_page_can_be_switched_off() {
    let on = Transceiver::start(Some("127.0.0.1:3478".parse().unwrap()), &[]);
    assert_eq!(
        http_request(on.http, "GET", "/", None, &[]).unwrap().status,
        200
    );
    drop(on);
    let off = Transceiver::start(
        Some("127.0.0.1:3478".parse().unwrap()),
        &["--demo-page=false"],
    );
    for path in ["/", "/app.js"] {
        let answer = http_request(off.http, "GET", path, None, &[]).unwrap();
        assert_eq!(answer.status, 404, "{path}");
    }
    let health = http_request(off.http, "GET", "/readyz", None, &[]).unwrap();
    assert_eq!(health.status, 200, "the rest is served as before");
    let post = http_request(
        off.http,
        "POST",
        "/v1/sessions",
        Some(("application/sdp", "not an offer")),
        &[],
    )
    .unwrap();
    assert_eq!(post.status, 400, "signaling still answers");
}

#[test]
fn example_secrets_are_refused_unless_a_test_allows_them() {
    let base = ["--bind", "127.0.0.1:0", "--direct"];
    let start = |keys: &str, token: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_transceiver"));
        cmd.args(base)
            .env("UFRAG_RELAY_HINT_KEYS", keys)
            .env_remove("UFRAG_ALLOW_EXAMPLE_SECRETS")
            .env_remove("UFRAG_TRANSCEIVER_CONFIG");
        match token {
            Some(token) => cmd.env("UFRAG_TRANSCEIVER_TOKEN", token),
            None => cmd.env_remove("UFRAG_TRANSCEIVER_TOKEN"),
        };
        cmd.output().unwrap()
    };
    // The tests' own key (counting bytes), and any key of one repeated byte.
    for keys in [KEYS.to_string(), format!("3:{}", "22".repeat(32))] {
        let out = start(&keys, None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{keys}: {stderr}");
        assert!(
            stderr.contains("`hint_keys`") && stderr.contains("is an example secret"),
            "{stderr}"
        );
    }
    // A key of its own, but the example manifests' placeholder token.
    // A random key (none a test writes down can be a real one).
    let mut secret = [0u8; 32];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut secret,
    )
    .unwrap();
    let own = format!(
        "1:{}",
        secret
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let out = start(&own, Some("REPLACE-ME-with-a-long-random-token"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`UFRAG_TRANSCEIVER_TOKEN`") && stderr.contains("placeholder"),
        "{stderr}"
    );
    // A token too short to be random.
    let out = start(&own, Some("s3cret-token"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("at least 32 characters"), "{stderr}");
}
