//! Relay configuration: file + flags precedence, one error per bad field, each naming
//! the field, and every file and variable read through the host it is given.

#[cfg(feature = "runtime")]
use std::io::Write as _;
#[cfg(feature = "runtime")]
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use ufrag_common::config::{
    ConfigError, ConfigSources, HINT_KEYS_ENV, PollMode, RelayArgs, RelayConfig, RouteStore,
    parse_cpu_list,
};
#[cfg(feature = "runtime")]
use ufrag_common::runtime::host::Host;

const KEYS: &str = "1:30313233343536373839616263646566";

/// The configuration the file `toml` and `flags` give, its files and variables read
/// through `sources`, with `cpus` the process's CPUs.
fn from_file(
    toml: &str,
    flags: &[&str],
    sources: &dyn ConfigSources,
    cpus: &[usize],
) -> Result<RelayConfig, ConfigError> {
    RelayConfig::load(&RelayArgs::parse(Some(toml), flags)?.options, sources, cpus)
}

/// The effective configuration `--print-config` writes for the file `toml` and `flags`.
fn printed(toml: &str, flags: &[&str]) -> String {
    RelayArgs::parse(Some(toml), flags).unwrap().effective
}

const MINIMAL: &str = r#"
vip = ["127.0.0.1:3478"]
internal_addr = "127.0.0.1:40000"
allow_transceiver_net = ["10.0.0.0/8"]
"#;

/// A host of the test's own: the given environment, and files held in memory; every read
/// is recorded as (field, path, secret).
#[derive(Default)]
struct Given {
    env: Vec<(&'static str, String)>,
    files: Vec<(PathBuf, Vec<u8>)>,
    reads: RefCell<Vec<(String, PathBuf, bool)>>,
}

impl Given {
    fn keys(keys: &str) -> Self {
        Given {
            env: vec![(HINT_KEYS_ENV, keys.to_string())],
            ..Given::default()
        }
    }
}

impl ConfigSources for Given {
    fn read_file(&self, field: &str, path: &Path, secret: bool) -> Result<Vec<u8>, ConfigError> {
        self.reads
            .borrow_mut()
            .push((field.to_string(), path.to_path_buf(), secret));
        let file = self.files.iter().find(|(held, _)| held == path);
        file.map(|(_, bytes)| bytes.clone()).ok_or(ConfigError {
            field: field.to_string(),
            reason: format!("cannot read {}: no such file", path.display()),
        })
    }

    fn env_var(&self, name: &str) -> Option<String> {
        let value = self.env.iter().find(|(given, _)| *given == name);
        value.map(|(_, value)| value.clone())
    }
}

/// The configuration `toml` and `flags` make, with [`KEYS`] in the environment and
/// files read from the file system (through the runtime's host) when the test build has
/// the `runtime` feature, from nowhere otherwise.
fn load(toml: &str, flags: &[&str]) -> Result<RelayConfig, ConfigError> {
    #[cfg(feature = "runtime")]
    let sources = Host::files_only().with_env(HINT_KEYS_ENV, KEYS);
    #[cfg(not(feature = "runtime"))]
    let sources = Given::keys(KEYS);
    from_file(toml, flags, &sources, &[0, 1])
}

fn field_of(toml: &str, flags: &[&str]) -> String {
    load(toml, flags).expect_err("should be rejected").field
}

#[test]
fn minimal_file_gets_the_documented_defaults() {
    let c = load(MINIMAL, &[]).unwrap();
    assert_eq!(c.workers(), 2, "one worker per online CPU");
    assert_eq!(c.worker_cpus, vec![0, 1]);
    assert_eq!(
        c.worker_internal_addr(1),
        "127.0.0.1:40001".parse().unwrap()
    );
    assert_eq!(c.idle_timeout, Duration::from_secs(30));
    assert_eq!(c.drain_time, Duration::from_secs(5));
    assert_eq!(c.flows_per_worker, 262_144);
    assert_eq!(c.route_store, None);
    assert_eq!(c.metrics_addr, "127.0.0.1:9590".parse().unwrap());
    assert_eq!(c.hint_keys.current().id(), 1);
    assert_eq!(c.poll, PollMode::Wakeup, "workers sleep when idle");
}

#[test]
fn the_route_store_is_one_server_a_cluster_or_what_sentinels_name() {
    let cluster = load(
        MINIMAL,
        &[
            "--redis-cluster-node",
            "redis://10.0.0.7:6379",
            "--redis-cluster-node",
            "redis://10.0.0.8:6379",
        ],
    )
    .unwrap();
    assert_eq!(
        cluster.route_store,
        Some(RouteStore::Cluster(vec![
            "redis://10.0.0.7:6379".into(),
            "redis://10.0.0.8:6379".into()
        ]))
    );
    let file = format!(
        "{MINIMAL}\nredis_sentinel = [\"redis://10.0.0.9:26379\"]\nredis_sentinel_master = \"routes\"\n"
    );
    assert_eq!(
        load(&file, &[]).unwrap().route_store,
        Some(RouteStore::Sentinel {
            sentinels: vec!["redis://10.0.0.9:26379".into()],
            master: "routes".into()
        })
    );
    // Two stores at once, a sentinel without its master's name, a master's name without
    // sentinels, and a URL that is not Redis's: each refused, naming the key.
    let both = [
        "--redis-url",
        "redis://10.0.0.1:6379",
        "--redis-cluster-node",
        "redis://10.0.0.7:6379",
    ];
    assert_eq!(field_of(MINIMAL, &both), "redis_url");
    assert_eq!(
        field_of(MINIMAL, &["--redis-sentinel", "redis://10.0.0.9:26379"]),
        "redis_sentinel_master"
    );
    assert_eq!(
        field_of(MINIMAL, &["--redis-sentinel-master", "routes"]),
        "redis_sentinel_master"
    );
    assert_eq!(
        field_of(MINIMAL, &["--redis-cluster-node", "http://10.0.0.7"]),
        "redis_cluster_node"
    );
}

#[test]
fn the_poll_mode_comes_from_the_flag_then_the_file() {
    let busy_file = format!("{MINIMAL}\npoll = \"busy\"\n");
    assert_eq!(load(&busy_file, &[]).unwrap().poll, PollMode::Busy);
    assert_eq!(
        load(&busy_file, &["--poll", "wakeup"]).unwrap().poll,
        PollMode::Wakeup
    );
    assert_eq!(
        load(MINIMAL, &["--poll", "busy"]).unwrap().poll,
        PollMode::Busy
    );
    assert_eq!(
        field_of(&format!("{MINIMAL}\npoll = \"spin\"\n"), &[]),
        "poll"
    );
}

#[test]
fn flags_override_the_file() {
    let toml = format!(
        "{MINIMAL}\nworkers = 1\nidle_timeout = \"10s\"\ncluster_relay = [\"2=10.9.0.1:4000\"]\n"
    );
    let c = load(
        &toml,
        &[
            "--vip",
            "127.0.0.1:5000",
            "--vip",
            "127.0.0.1:5001",
            "--workers",
            "2",
            "--idle-timeout",
            "2s",
            "--cpus",
            "0-1",
            "--redis-url",
            "redis://127.0.0.1:6379",
            "--cluster-relay",
            "3=10.9.0.3:4000",
        ],
    )
    .unwrap();
    assert_eq!(c.vips.len(), 2);
    assert_eq!(c.workers(), 2);
    assert_eq!(c.idle_timeout, Duration::from_secs(2));
    assert_eq!(
        c.route_store,
        Some(RouteStore::Server("redis://127.0.0.1:6379".into()))
    );
    assert_eq!(
        c.clusters.len(),
        1,
        "a list on the command line replaces the file's"
    );
    assert_eq!(c.clusters[&3], "10.9.0.3:4000".parse().unwrap());
    let from_file = load(&toml, &[]).unwrap();
    assert_eq!(from_file.clusters[&2], "10.9.0.1:4000".parse().unwrap());
    assert_eq!(from_file.workers(), 1);
}

#[test]
fn ice_tcp_is_off_unless_a_tcp_vip_is_given_and_its_limits_have_defaults() {
    let off = load(MINIMAL, &[]).unwrap();
    assert!(off.tcp.vips.is_empty(), "no TCP VIP: TCP not served");
    assert_eq!(off.tcp.connections_per_worker, 4096);
    assert_eq!(off.tcp.connections_per_prefix, 16);
    assert_eq!(off.tcp.handshake_timeout, Duration::from_secs(5));
    let file = format!(
        "{MINIMAL}\ntcp_vip = [\"127.0.0.1:443\"]\ntcp_connections_per_prefix = 4\ntcp_handshake_timeout = \"2s\""
    );
    let on = load(&file, &["--tcp-connections-per-worker", "10"]).unwrap();
    assert_eq!(on.tcp.vips, vec!["127.0.0.1:443".parse().unwrap()]);
    assert_eq!(on.tcp.connections_per_worker, 10);
    assert_eq!(on.tcp.connections_per_prefix, 4);
    assert_eq!(on.tcp.handshake_timeout, Duration::from_secs(2));
    // A relay that serves only ICE-TCP (beside relay-afxdp) needs no UDP VIP.
    let tcp_only = load(
        "internal_addr = \"127.0.0.1:40000\"\nallow_transceiver_net = [\"10.0.0.0/8\"]",
        &["--tcp-vip", "127.0.0.1:443"],
    )
    .unwrap();
    assert!(tcp_only.vips.is_empty());
    assert_eq!(tcp_only.tcp.vips.len(), 1);
    // The same address and port as a UDP VIP is another socket: allowed.
    let shared = load(MINIMAL, &["--tcp-vip", &off.vips[0].to_string()]).unwrap();
    assert_eq!(shared.tcp.vips, off.vips);
}

#[test]
fn each_bad_field_is_named() {
    let cases: &[(&str, &[&str], &str)] = &[
        ("", &[], "vip"),
        ("vip = [\"127.0.0.1:0\"]", &[], "vip"),
        ("vip = [\"0.0.0.0:3478\"]", &[], "vip"),
        ("vip = [\"[::]:3478\"]", &[], "vip"),
        ("vip = [\"127.0.0.1:1\", \"127.0.0.1:1\"]", &[], "vip"),
        ("vip = [\"127.0.0.1:1\"]", &[], "internal_addr"),
        (
            MINIMAL,
            &["--internal-addr", "127.0.0.1:0"],
            "internal_addr",
        ),
        (
            MINIMAL,
            &["--internal-addr", "127.0.0.1:65535"],
            "internal_addr",
        ),
        (
            MINIMAL,
            &["--internal-addr", "127.0.0.1:3477"],
            "internal_addr",
        ),
        (
            MINIMAL,
            &["--internal-addr", "0.0.0.0:40000"],
            "internal_addr",
        ),
        (MINIMAL, &["--internal-addr", "[::]:40000"], "internal_addr"),
        (MINIMAL, &["--hint-max-age", "1s"], "hint_max_age"),
        (MINIMAL, &["--hint-max-age", "30h"], "hint_max_age"),
        (
            MINIMAL,
            &["--tcp-accepts-per-prefix", "0"],
            "tcp_accepts_per_prefix",
        ),
        (
            MINIMAL,
            &["--tcp-accepts-per-worker", "0"],
            "tcp_accepts_per_worker",
        ),
        (MINIMAL, &["--workers", "0"], "workers"),
        (MINIMAL, &["--workers", "3"], "workers"),
        (MINIMAL, &["--cpus", "1-0"], "cpus"),
        (MINIMAL, &["--cpus", "0,0"], "cpus"),
        (MINIMAL, &["--cpus", "a"], "cpus"),
        (
            "vip = [\"127.0.0.1:3478\"]\ninternal_addr = \"127.0.0.1:40000\"",
            &[],
            "allow_transceiver_net",
        ),
        (MINIMAL, &["--flows-per-worker", "0"], "flows_per_worker"),
        (MINIMAL, &["--tcp-vip", "0.0.0.0:443"], "tcp_vip"),
        (MINIMAL, &["--tcp-vip", "127.0.0.1:0"], "tcp_vip"),
        (
            MINIMAL,
            &["--tcp-vip", "127.0.0.1:443", "--tcp-vip", "127.0.0.1:443"],
            "tcp_vip",
        ),
        (
            MINIMAL,
            &["--tcp-connections-per-worker", "0"],
            "tcp_connections_per_worker",
        ),
        (
            MINIMAL,
            &["--tcp-connections-per-worker", "65537"],
            "tcp_connections_per_worker",
        ),
        (
            MINIMAL,
            &["--tcp-connections-per-prefix", "0"],
            "tcp_connections_per_prefix",
        ),
        (
            MINIMAL,
            &["--tcp-handshake-timeout", "10ms"],
            "tcp_handshake_timeout",
        ),
        (
            MINIMAL,
            &["--tcp-handshake-timeout", "2m"],
            "tcp_handshake_timeout",
        ),
        (MINIMAL, &["--idle-timeout", "10ms"], "idle_timeout"),
        (MINIMAL, &["--idle-timeout", "2h"], "idle_timeout"),
        (MINIMAL, &["--drain-time", "1h"], "drain_time"),
        (MINIMAL, &["--redis-url", "http://x"], "redis_url"),
        (MINIMAL, &["--redis-url", "redis://:pw@x:6379"], "redis_url"),
        (
            MINIMAL,
            &[
                "--cluster-relay",
                "2=10.0.0.1:1",
                "--cluster-relay",
                "2=10.0.0.2:1",
            ],
            "cluster_relay",
        ),
    ];
    for (toml, flags, field) in cases {
        assert_eq!(&field_of(toml, flags), field, "{toml:?} {flags:?}");
    }
}

#[test]
fn without_a_cpu_list_the_workers_take_the_cpus_the_process_may_run_on() {
    // A pod given cores 4 and 6 by the static CPU manager: one worker on each, not on
    // CPUs 0 and 1 (outside its cpuset, where pinning fails and they would run unpinned).
    let config = from_file(MINIMAL, &[], &Given::keys(KEYS), &[4, 6]).unwrap();
    assert_eq!(config.worker_cpus, vec![4, 6]);
    let one = from_file(MINIMAL, &["--workers", "1"], &Given::keys(KEYS), &[4, 6]);
    assert_eq!(one.unwrap().worker_cpus, vec![4]);
    let listed = from_file(MINIMAL, &["--cpus", "1"], &Given::keys(KEYS), &[4, 6]);
    assert_eq!(listed.unwrap().worker_cpus, vec![1], "a list given wins");
}

#[cfg(feature = "runtime")]
/// A file of this test run, written with `mode`.
fn scratch_file(name: &str, text: &str, mode: u32) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ufrag-cfg-redis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[cfg(feature = "runtime")]
const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

#[test]
fn tls_to_redis_is_accepted_and_a_password_never_rides_in_a_url() {
    let tls = load(MINIMAL, &["--redis-url", "rediss://cache:6380"]).unwrap();
    assert!(tls.route_store.unwrap().uses_tls());
    assert!(load(MINIMAL, &["--redis-url", "redis://alice@cache:6379"]).is_ok());
    for (flag, url, field) in [
        ("--redis-url", "redis://:pw@cache:6379", "redis_url"),
        ("--redis-url", "rediss://alice:pw@cache:6380/0", "redis_url"),
        (
            "--redis-url",
            "redis://cache:6379/?password=pw",
            "redis_url",
        ),
        (
            "--redis-cluster-node",
            "redis://u:p@node:6379",
            "redis_cluster_node",
        ),
        (
            "--redis-sentinel",
            "redis://u:p@sentinel:26379",
            "redis_sentinel",
        ),
    ] {
        let mut flags = vec![flag, url];
        if flag == "--redis-sentinel" {
            flags.extend(["--redis-sentinel-master", "routes"]);
        }
        let e = load(MINIMAL, &flags).unwrap_err();
        assert_eq!(e.field, field, "{url}: {e}");
        assert!(e.reason.contains("redis_password_file"), "{url}: {e}");
        assert!(
            !e.to_string().contains("pw@"),
            "the error does not repeat it: {e}"
        );
    }
}

#[cfg(feature = "runtime")]
/// A private Redis password file: its path, and the path as text.
fn redis_password_file() -> (std::path::PathBuf, String) {
    let path = scratch_file("redis.password", "s3cret-pw\n", 0o600);
    let text = path.to_str().unwrap().to_string();
    (path, text)
}

#[cfg(feature = "runtime")]
/// The flags that point the relay's Redis at password file `path`.
fn password_flags(path: &str) -> [&str; 4] {
    [
        "--redis-url",
        "redis://cache:6379",
        "--redis-password-file",
        path,
    ]
}

#[test]
fn an_empty_variable_is_an_unset_one_whatever_the_sources() {
    let keys_file = (
        PathBuf::from("/cfg/hint.keys"),
        format!("{KEYS}\n").into_bytes(),
    );
    let given = Given {
        env: vec![
            (HINT_KEYS_ENV, String::new()),
            ("UFRAG_REDIS_PASSWORD", String::new()),
        ],
        files: vec![keys_file],
        ..Given::default()
    };
    let flags = [
        "--hint-keys-file",
        "/cfg/hint.keys",
        "--redis-url",
        "redis://cache:6379",
    ];
    let config = from_file(MINIMAL, &flags, &given, &[0]).unwrap();
    assert_eq!(
        config.hint_keys.current().id(),
        1,
        "the key file, not \"both set\""
    );
    assert_eq!(config.redis_access.password, None);
    let none = from_file(MINIMAL, &[], &given, &[0]).unwrap_err();
    assert_eq!(
        none.field, "hint_keys_file",
        "an empty variable holds no keys: {none}"
    );
}

#[test]
fn every_file_is_read_through_the_sources_and_secrets_are_marked_secret() {
    let pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec();
    let key = b"-----BEGIN PRIVATE KEY-----\nMC4\n-----END PRIVATE KEY-----\n".to_vec();
    let file = |path: &str, bytes: &[u8]| (PathBuf::from(path), bytes.to_vec());
    let given = Given {
        files: vec![
            file("/cfg/hint.keys", format!("{KEYS}\n").as_bytes()),
            file("/cfg/redis.password", b"s3cret-pw\n"),
            file("/cfg/ca.pem", &pem),
            file("/cfg/client.pem", &pem),
            file("/cfg/client.key", &key),
        ],
        ..Given::default()
    };
    let flags = [
        "--hint-keys-file",
        "/cfg/hint.keys",
        "--redis-url",
        "rediss://cache:6380",
        "--redis-password-file",
        "/cfg/redis.password",
        "--redis-ca-file",
        "/cfg/ca.pem",
        "--redis-client-cert-file",
        "/cfg/client.pem",
        "--redis-client-key-file",
        "/cfg/client.key",
    ];
    let config = from_file(MINIMAL, &flags, &given, &[0]).unwrap();
    assert_eq!(config.hint_keys.current().id(), 1);
    assert_eq!(config.redis_access.password.as_deref(), Some("s3cret-pw"));
    assert_eq!(config.redis_access.ca.as_ref().unwrap().pem, pem);
    let mut reads = given.reads.take();
    reads.sort();
    let read =
        |field: &str, path: &str, secret: bool| (field.to_string(), PathBuf::from(path), secret);
    assert_eq!(
        reads,
        vec![
            read("hint_keys_file", "/cfg/hint.keys", true),
            read("redis_ca_file", "/cfg/ca.pem", false),
            read("redis_client_cert_file", "/cfg/client.pem", false),
            read("redis_client_key_file", "/cfg/client.key", true),
            read("redis_password_file", "/cfg/redis.password", true),
        ],
        "each file once, the keys and the password and the client key as secrets"
    );
    // The environment is the sources' too: the password from there, never both.
    let both = Given {
        env: vec![("UFRAG_REDIS_PASSWORD", "pw".to_string())],
        ..given
    };
    let e = from_file(MINIMAL, &flags, &both, &[0]).unwrap_err();
    assert_eq!(e.field, "redis_password_file", "{e}");
}

#[cfg(feature = "runtime")]
#[test]
fn the_redis_password_comes_from_a_private_file_and_is_never_shown() {
    let (path, p) = redis_password_file();
    let flags = password_flags(&p);
    let config = load(
        MINIMAL,
        &[&flags[..], &["--redis-username", "relay"]].concat(),
    )
    .unwrap();
    assert_eq!(config.redis_access.password.as_deref(), Some("s3cret-pw"));
    assert_eq!(config.redis_access.username.as_deref(), Some("relay"));
    assert!(
        !format!("{config:?}").contains("s3cret"),
        "Debug redacts it"
    );
    let printed = printed(
        MINIMAL,
        &[&flags[..], &["--redis-username", "relay"]].concat(),
    );
    assert!(!printed.contains("s3cret"), "{printed}");
    assert!(
        printed.contains(&format!("redis_password_file = \"{p}\"")),
        "{printed}"
    );
    assert!(printed.contains("redis_username = \"relay\""), "{printed}");

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = load(MINIMAL, &flags).unwrap_err();
    assert_eq!(e.field, "redis_password_file", "{e}");
    assert!(e.reason.contains("0644"), "{e}");
    let empty = scratch_file("empty.password", "\n", 0o600);
    let e = load(MINIMAL, &["--redis-password-file", empty.to_str().unwrap()]).unwrap_err();
    assert!(
        e.field == "redis_password_file" && e.reason.contains("empty"),
        "{e}"
    );
}

#[cfg(feature = "runtime")]
#[test]
fn tls_files_are_pem_paired_and_only_for_rediss() {
    let ca = scratch_file("ca.pem", PEM, 0o644);
    let cert = scratch_file("client.pem", PEM, 0o644);
    let key = scratch_file(
        "client.key",
        "-----BEGIN PRIVATE KEY-----\nMC4\n-----END PRIVATE KEY-----\n",
        0o600,
    );
    let not_pem = scratch_file("ca.der", "\u{30}\u{82}binary", 0o644);
    let (ca, cert, key) = (
        ca.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
    );
    let rediss = ["--redis-url", "rediss://cache:6380"];
    let all = [
        &rediss[..],
        &["--redis-ca-file", ca, "--redis-client-cert-file", cert],
        &["--redis-client-key-file", key],
    ]
    .concat();
    let config = load(MINIMAL, &all).unwrap();
    assert!(config.redis_access.uses_tls());
    assert_eq!(config.redis_access.ca.as_ref().unwrap().pem, PEM.as_bytes());
    assert!(printed(MINIMAL, &all).contains(&format!("redis_ca_file = \"{ca}\"")));

    let plain = load(
        MINIMAL,
        &["--redis-url", "redis://cache:6379", "--redis-ca-file", ca],
    );
    assert_eq!(plain.unwrap_err().field, "redis_ca_file");
    let e = load(
        MINIMAL,
        &[&rediss[..], &["--redis-ca-file", not_pem.to_str().unwrap()]].concat(),
    );
    assert!(e.unwrap_err().reason.contains("not PEM"));
    let alone = load(
        MINIMAL,
        &[&rediss[..], &["--redis-client-cert-file", cert]].concat(),
    );
    assert_eq!(alone.unwrap_err().field, "redis_client_key_file");
    let alone = load(
        MINIMAL,
        &[&rediss[..], &["--redis-client-key-file", key]].concat(),
    );
    assert_eq!(alone.unwrap_err().field, "redis_client_cert_file");
    std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open_key = load(MINIMAL, &all).unwrap_err();
    assert_eq!(open_key.field, "redis_client_key_file", "{open_key}");
}

#[test]
fn file_errors_name_the_key() {
    let e = load(&format!("{MINIMAL}\nflow_capcity = 5\n"), &[]).unwrap_err();
    assert_eq!(e.field, "flow_capcity", "{e}");
    assert!(e.reason.contains("not a key"), "{e}");
    let e = load(&format!("{MINIMAL}\nworkers = \"two\"\n"), &[]).unwrap_err();
    assert_eq!(e.field, "workers", "{e}");
    let e = load(&format!("{MINIMAL}\nidle_timeout = \"soon\"\n"), &[]).unwrap_err();
    assert_eq!(e.field, "idle_timeout", "{e}");
    let e = load(&format!("{MINIMAL}\nworkers = [1, 2]\n"), &[]).unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.reason.as_str()),
        ("workers", "takes one value, not a list")
    );
    let no_port = "internal_addr = \"127.0.0.1:40000\"\nvip = \"127.0.0.1\"\n";
    let e = load(no_port, &[]).unwrap_err();
    assert_eq!(e.field, "vip", "{e}");
    assert!(
        e.to_string().starts_with("invalid configuration: `vip`"),
        "{e}"
    );
    // A flag's own value is not the file's fault: it is named too.
    let e = load(MINIMAL, &["--workers", "two"]).unwrap_err();
    assert_eq!(e.field, "workers", "{e}");
}

#[test]
fn a_file_with_the_old_keys_is_told_the_new_ones() {
    let old = [
        ("vips = [\"127.0.0.1:3478\"]", "vips", "renamed `vip`"),
        (
            "tcp_vips = [\"127.0.0.1:443\"]",
            "tcp_vips",
            "renamed `tcp_vip`",
        ),
        (
            "allowed_transceiver_networks = [\"10.0.0.0/8\"]",
            "allowed_transceiver_networks",
            "renamed `allow_transceiver_net`",
        ),
        (
            "global_relay_networks = [\"10.0.0.0/8\"]",
            "global_relay_networks",
            "renamed `allow_global_relay_net`",
        ),
        (
            "[clusters]\n2 = \"10.0.0.1:1\"",
            "clusters",
            "renamed `cluster_relay`: a list of \"ID=IP:PORT\"",
        ),
        (
            "redis_cluster_nodes = [\"redis://a:1\"]",
            "redis_cluster_nodes",
            "renamed `redis_cluster_node`",
        ),
        (
            "redis_sentinels = [\"redis://a:1\"]",
            "redis_sentinels",
            "renamed `redis_sentinel`",
        ),
    ];
    for (line, key, reason) in old {
        let e = load(&format!("{MINIMAL}\n{line}\n"), &[]).unwrap_err();
        assert_eq!(e.field, key, "{line}: {e}");
        assert!(e.reason.contains(reason), "{line}: {e}");
    }
    let global = load(
        &format!("{MINIMAL}\nallow_global_relay_net = [\"192.0.2.0/24\"]\n"),
        &[],
    );
    assert_eq!(global.unwrap().global_relay_networks.len(), 1);
}

#[test]
fn the_printed_configuration_has_every_key_and_loads_back_to_itself() {
    let flags = [
        "--cluster-relay",
        "2=10.9.0.1:4000",
        "--tcp-vip",
        "127.0.0.1:443",
    ];
    let first = printed(MINIMAL, &flags);
    for line in [
        "vip = [\"127.0.0.1:3478\"]",
        "allow_transceiver_net = [\"10.0.0.0/8\"]",
        "cluster_relay = [\"2=10.9.0.1:4000\"]",
        "flows_per_worker = 262144",
        "idle_timeout = \"30s\"",
        "hint_max_age = \"10m\"",
        "poll = \"wakeup\"",
        "internal_gso = false",
        "# cpus: not set",
    ] {
        assert!(first.lines().any(|l| l == line), "{line} in\n{first}");
    }
    assert_eq!(printed(&first, &[]), first);
    let (a, b) = (load(MINIMAL, &flags).unwrap(), load(&first, &[]).unwrap());
    assert_eq!(
        (a.clusters, a.tcp, a.idle_timeout, a.admission),
        (b.clusters, b.tcp, b.idle_timeout, b.admission)
    );
}

// Reading files is the `runtime` feature's (every binary has it).
#[cfg(feature = "runtime")]
#[test]
fn keys_come_from_a_private_file_or_the_environment_never_both() {
    let dir = std::env::temp_dir().join(format!("ufrag-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hint.keys");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "# current\n{KEYS}").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let p = path.to_str().unwrap();
    let keys_env = |keys: &str| Host::files_only().with_env(HINT_KEYS_ENV, keys);

    let ok = from_file(MINIMAL, &["--hint-keys-file", p], &Host::files_only(), &[0]).unwrap();
    assert_eq!(ok.hint_keys.current().id(), 1);

    let both = from_file(MINIMAL, &["--hint-keys-file", p], &keys_env(KEYS), &[0]);
    assert_eq!(both.unwrap_err().field, "hint_keys_file");

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = from_file(MINIMAL, &["--hint-keys-file", p], &Host::files_only(), &[0]).unwrap_err();
    assert_eq!(open.field, "hint_keys_file");
    assert!(open.reason.contains("0644"), "{open}");

    // Readable by the process's own group (a Kubernetes Secret with fsGroup): accepted;
    // by another group: refused.
    use std::os::unix::fs::MetadataExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let own_group = std::fs::metadata("/proc/self").unwrap().gid();
    std::os::unix::fs::chown(&path, None, Some(own_group)).unwrap();
    let shared = from_file(MINIMAL, &["--hint-keys-file", p], &Host::files_only(), &[0]);
    assert_eq!(shared.unwrap().hint_keys.current().id(), 1);
    std::os::unix::fs::chown(&path, None, Some(own_group + 4242)).unwrap();
    let other = from_file(MINIMAL, &["--hint-keys-file", p], &Host::files_only(), &[0]);
    assert!(other.unwrap_err().reason.contains("0640"));

    let none = from_file(MINIMAL, &[], &Host::files_only(), &[0]).unwrap_err();
    assert_eq!(none.field, "hint_keys_file");
    let bad_env = from_file(MINIMAL, &[], &keys_env("1:abc"), &[0]).unwrap_err();
    assert_eq!(bad_env.field, "UFRAG_RELAY_HINT_KEYS");
    let two = from_file(
        MINIMAL,
        &[],
        &keys_env(&format!("2:{},{KEYS}", &KEYS[2..])),
        &[0],
    )
    .unwrap();
    assert_eq!(two.hint_keys.current().id(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn there_is_no_flag_for_the_keys_themselves() {
    let err = RelayArgs::parse(None, &["--hint-keys", KEYS]).unwrap_err();
    assert_eq!(err.field, "hint_keys", "{err}");
    assert!(err.reason.contains("unexpected argument"), "{err}");
    let err = RelayArgs::parse(Some(&format!("hint_keys = \"{KEYS}\"")), &[]).unwrap_err();
    assert_eq!(err.field, "hint_keys", "{err}");
    assert!(err.reason.contains("not a key"), "{err}");
}

#[test]
fn cpu_lists() {
    assert_eq!(parse_cpu_list("0-3,6").unwrap(), vec![0, 1, 2, 3, 6]);
    assert_eq!(parse_cpu_list(" 2 , 1 ").unwrap(), vec![1, 2]);
    assert!(parse_cpu_list("").is_err());
    assert!(parse_cpu_list("0,,1").is_err());
    assert!(parse_cpu_list("0-2000").is_err());
}

#[test]
fn bundles_go_only_where_configured_and_never_past_the_internal_mtu() {
    let none = load(MINIMAL, &[]).unwrap();
    assert!(none.bundles.to.is_empty(), "no bundles by default");
    assert_eq!(none.bundles.mtu, 1500);
    assert!(!none.bundles.bundles_to("10.0.0.7:40000".parse().unwrap()));

    let file = format!("{MINIMAL}bundle_to = [\"10.1.0.0/16\"]\ninternal_mtu = 9000\n");
    let from_file = load(&file, &[]).unwrap();
    assert!(
        from_file
            .bundles
            .bundles_to("10.1.2.3:40000".parse().unwrap())
    );
    assert!(
        from_file
            .bundles
            .bundles_to("[::ffff:10.1.2.3]:40000".parse().unwrap())
    );
    assert!(
        !from_file
            .bundles
            .bundles_to("10.2.0.1:40000".parse().unwrap())
    );
    assert_eq!(from_file.bundles.mtu, 9000);

    // A flag replaces the file's list and MTU; --print-config writes them back.
    let flagged = load(
        &file,
        &["--bundle-to", "10.2.0.0/16", "--internal-mtu", "1400"],
    )
    .unwrap();
    assert!(
        !flagged
            .bundles
            .bundles_to("10.1.2.3:40000".parse().unwrap())
    );
    assert!(
        flagged
            .bundles
            .bundles_to("10.2.0.1:40000".parse().unwrap())
    );
    assert_eq!(flagged.bundles.mtu, 1400);
    let again = load(
        &printed(
            &file,
            &["--bundle-to", "10.2.0.0/16", "--internal-mtu", "1400"],
        ),
        &[],
    );
    assert_eq!(again.unwrap().bundles, flagged.bundles);

    // Below IPv6's minimum, or past a jumbo frame: refused, by name.
    for mtu in ["1279", "9217"] {
        assert_eq!(field_of(MINIMAL, &["--internal-mtu", mtu]), "internal_mtu");
    }
}

#[test]
fn gso_on_the_internal_socket_is_off_unless_the_flag_or_the_file_turns_it_on() {
    assert!(!load(MINIMAL, &[]).unwrap().bundles.gso);
    let from_file = load(&format!("{MINIMAL}internal_gso = true\n"), &[]).unwrap();
    assert!(from_file.bundles.gso);
    let flagged = load(MINIMAL, &["--internal-gso"]).unwrap();
    assert!(flagged.bundles.gso);
    let again = load(&printed(MINIMAL, &["--internal-gso"]), &[]).unwrap();
    assert_eq!(again.bundles, flagged.bundles);
}
