//! The relay configuration both backends share: every setting a `clap` flag of
//! [`RelayArgs`], declared once; a TOML file whose keys are the flags' long names (`_` for
//! `-`) read as flags before the command line's own ([`crate::config_file`]); and validation
//! at start ([`RelayConfig::load`]) with errors that name the bad key and say why.
//!
//! Precedence: a flag beats the file, the file beats the default (a list on the command line
//! replaces the file's). Hint keys never come from a flag (flags show up in `ps` and shell
//! history): they come from the file named by `hint_keys_file` (a secret: the runtime's host
//! refuses it when others, or a group other than the process's own, may read it) or from
//! the environment variable [`HINT_KEYS_ENV`], one key per line or comma-separated as
//! `<id>:<hex secret>`, current key first.
//!
//! ```toml
//! vip = ["203.0.113.10:3478"]             # public VIP:port list (required)
//! internal_addr = "10.0.0.5:40000"        # worker i binds port 40000 + i (required)
//! allow_transceiver_net = ["10.0.0.0/8"]  # required
//! hint_keys_file = "/etc/ufrag-relay/hint.keys"   # or UFRAG_RELAY_HINT_KEYS
//! cpus = "0-1"                            # cores to pin workers to (default: all)
//! cluster_id = 1
//! cluster_relay = ["2=198.51.100.7:3479"] # global mode: another cluster's relay
//! redis_url = "redis://127.0.0.1:6379"    # or redis_cluster_node, or redis_sentinel
//! tcp_vip = ["203.0.113.10:443"]          # ICE-TCP for clients whose networks block UDP
//! ```
//!
//! `relay-mio --help` lists every key with its default; `--print-config` writes them all.

use core::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::ffi::OsString;

use ipnet::IpNet;

use crate::admission::AdmissionPolicy;
pub use crate::config_file::ConfigError;
use crate::config_file::{ParseError, Parsed};
use crate::flow::MAX_CAPACITY;
use crate::forward::ForwardPolicy;
use crate::hint::HintKeys;
use crate::replay::ReplayFilter;

/// The environment variable that may hold the hint keys.
pub const HINT_KEYS_ENV: &str = "UFRAG_RELAY_HINT_KEYS";

/// Set to `1`, lets a binary run with an example secret (a hint key such as the tests',
/// a placeholder token): the tests and the benchmarks' own testbeds set it, a deployment
/// never does.
pub const ALLOW_EXAMPLE_SECRETS_ENV: &str = "UFRAG_ALLOW_EXAMPLE_SECRETS";

/// Refuses hint keys whose secret is an example's ([`crate::hint::is_example_secret`])
/// unless `allowed`: ICE passwords derive from the key, so anyone who has read the
/// example could forge connectivity checks for every session.
pub fn refuse_example_keys(keys: &HintKeys, allowed: bool) -> Result<(), ConfigError> {
    match keys.example_key() {
        Some(id) if !allowed => Err(bad(
            "hint_keys",
            format!(
                "key {id} is an example secret (counting or repeated bytes, as the \
                 repository's test key): anyone could forge ICE checks with it; make one with \
                 `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'` \
                 ({ALLOW_EXAMPLE_SECRETS_ENV}=1 lets tests use it)"
            ),
        )),
        _ => Ok(()),
    }
}

/// Each worker's flow table capacity when `--flows-per-worker` does not say.
pub const DEFAULT_FLOWS_PER_WORKER: usize = 262_144;
/// The shortest `hint_max_age`: a client needs a few seconds between the answer and its
/// first check.
const MIN_HINT_MAX_AGE: Duration = Duration::from_secs(10);
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_TCP_CONNECTIONS_PER_WORKER: usize = 4096;
const MAX_TCP_CONNECTIONS_PER_WORKER: usize = 65_536;
const DEFAULT_TCP_CONNECTIONS_PER_PREFIX: u32 = 16;
const DEFAULT_TCP_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_TCP_ACCEPTS_PER_PREFIX: u32 = 8;
const DEFAULT_TCP_ACCEPTS_PER_WORKER: u32 = 1000;
const MAX_TCP_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_DRAIN_TIME: Duration = Duration::from_secs(5);
/// The metrics listener's default: the manifests' port (not 9100, node_exporter's, which
/// a node agent holds on every node), on loopback: a private address.
const DEFAULT_METRICS_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9590);
const MIN_IDLE_TIMEOUT: Duration = Duration::from_millis(100);
const MAX_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);
const MAX_DRAIN_TIME: Duration = Duration::from_secs(600);
const MAX_WORKERS: usize = 1024;
/// The internal path's MTU when none is configured: Ethernet's.
pub const DEFAULT_INTERNAL_MTU: u16 = 1500;
/// IPv6's minimum MTU: no internal path is smaller.
const MIN_INTERNAL_MTU: u16 = 1280;
/// A jumbo frame: no internal path is larger.
const MAX_INTERNAL_MTU: u16 = 9216;

fn bad(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        reason: reason.into(),
    }
}

/// What resolving a configuration reads from the host it runs on: the files its settings
/// name and the environment variables that may carry its secrets. The configuration is
/// decided here, without I/O; the runtime's `runtime::host::Host` reads the process's
/// real files and environment, and a test gives what it needs.
pub trait ConfigSources {
    /// The contents of the file at `path`, which the setting `field` names. A `secret`
    /// file that others may read is refused; every error names `field`.
    fn read_file(&self, field: &str, path: &Path, secret: bool) -> Result<Vec<u8>, ConfigError>;

    /// The value of the environment variable `name`; `None` when it is unset or empty.
    fn env_var(&self, name: &str) -> Option<String>;
}

/// A `--cluster-relay ID=IP:PORT` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterRelay {
    /// The cluster id.
    pub cluster: u16,
    /// That cluster's relay (its internal frame port).
    pub relay: SocketAddr,
}

impl core::str::FromStr for ClusterRelay {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (id, addr) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected ID=IP:PORT"))?;
        Ok(ClusterRelay {
            cluster: id
                .trim()
                .parse()
                .map_err(|_| format!("`{id}`: cluster id must be 0..=65535"))?,
            relay: addr
                .trim()
                .parse()
                .map_err(|_| format!("`{addr}`: expected IP:PORT"))?,
        })
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("`{s}`: {e} (e.g. 30s, 500ms, 2m)"))
}

/// How a binary writes its logs (on stderr).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, message and fields), for a log pipeline.
    Json,
}

/// How a relay worker waits when it has nothing to read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PollMode {
    /// Sleep in the kernel (epoll, poll) until a datagram or the tick is due: the core is
    /// free when traffic is light, and each datagram after a quiet spell pays a wake-up.
    #[default]
    Wakeup,
    /// Spin (DPDK style): the worker's core is 100 % busy by construction, and no datagram
    /// waits for the worker to be woken (on a VM, a wake-up is an inter-processor interrupt
    /// through the hypervisor).
    Busy,
}

/// The variable that may name the config file when `--config` does not.
pub const RELAY_CONFIG_ENV: &str = "UFRAG_RELAY_CONFIG";

/// Keys the relay's config file once had, their flags' names now, and how the value is
/// written: an old file is refused with the key to write instead.
pub const RENAMED_KEYS: &[crate::config_file::RenamedKey] = &[
    ("vips", "vip", "a list of \"IP:PORT\""),
    ("tcp_vips", "tcp_vip", "a list of \"IP:PORT\""),
    (
        "allowed_transceiver_networks",
        "allow_transceiver_net",
        "a list of CIDRs",
    ),
    (
        "global_relay_networks",
        "allow_global_relay_net",
        "a list of CIDRs",
    ),
    (
        "clusters",
        "cluster_relay",
        "a list of \"ID=IP:PORT\" in place of the [clusters] table",
    ),
    (
        "redis_cluster_nodes",
        "redis_cluster_node",
        "a list of URLs",
    ),
    ("redis_sentinels", "redis_sentinel", "a list of URLs"),
];

/// A duration flag's value (`30s`, `500ms`, `2m`).
fn duration_value(s: &str) -> Result<humantime::Duration, String> {
    parse_duration(s).map(Into::into)
}

/// Every relay setting, declared once: the flags both relay binaries accept, which the
/// config file sets too (TOML whose keys are the long flags' names with `_` for `-`, read
/// as flags given before the command line's own: [`crate::config_file`]). A default is
/// the flag's; a setting without one is optional or derived at load.
#[derive(Debug, Clone, clap::Args)]
pub struct RelayArgs {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// TOML config file whose keys are these flags' long names with `_` for `-`; a flag
    /// given here replaces the file's key. Or UFRAG_RELAY_CONFIG (empty: none).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Public VIP:port to serve (repeat for several).
    #[arg(long = "vip", value_name = "IP:PORT")]
    pub vips: Vec<SocketAddr>,
    /// Internal address towards transceivers; worker i binds PORT + i (required).
    #[arg(long, value_name = "IP:PORT")]
    pub internal_addr: Option<SocketAddr>,
    /// Number of workers (default: one per CPU in --cpus).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// CPUs to pin workers to, e.g. "0-3,6" (default: the CPUs this process may run on,
    /// its affinity mask: a container's cpuset, or what `taskset` gave it).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// A network transceivers live in (repeat; at least one).
    #[arg(long = "allow-transceiver-net", value_name = "CIDR")]
    pub allowed_transceiver_networks: Vec<IpNet>,
    /// File holding the hint keys, `<id>:<hex>` per line, current first, previous second
    /// (mode 0600); reloaded on SIGHUP and when it changes. Or UFRAG_RELAY_HINT_KEYS.
    #[arg(long, value_name = "FILE")]
    pub hint_keys_file: Option<PathBuf>,
    /// This relay's cluster id.
    #[arg(long, value_name = "ID", default_value_t = 0)]
    pub cluster_id: u16,
    /// Global mode: the relay of another cluster (repeat).
    #[arg(long = "cluster-relay", value_name = "ID=IP:PORT")]
    pub cluster_relays: Vec<ClusterRelay>,
    /// A network global relays send frames from (repeat).
    #[arg(long = "allow-global-relay-net", value_name = "CIDR")]
    pub global_relay_networks: Vec<IpNet>,
    /// Flow table capacity of each worker, fixed at start.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_FLOWS_PER_WORKER)]
    pub flows_per_worker: usize,
    /// A flow with no traffic for this long expires.
    #[arg(long, value_name = "DURATION", value_parser = duration_value,
          default_value_t = DEFAULT_IDLE_TIMEOUT.into())]
    pub idle_timeout: humantime::Duration,
    /// On SIGTERM, keep forwarding existing flows this long before exiting.
    #[arg(long, value_name = "DURATION", value_parser = duration_value,
          default_value_t = DEFAULT_DRAIN_TIME.into())]
    pub drain_time: humantime::Duration,
    /// Redis route cache URL (absent: in-memory flows only).
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// The route cache is a Redis Cluster: one of its nodes (repeat for more seeds).
    #[arg(long = "redis-cluster-node", value_name = "URL")]
    pub redis_cluster_nodes: Vec<String>,
    /// The route cache is the master these Redis Sentinels name (repeat); needs
    /// --redis-sentinel-master.
    #[arg(long = "redis-sentinel", value_name = "URL")]
    pub redis_sentinels: Vec<String>,
    /// The master's name in the Sentinels' configuration.
    #[arg(long, value_name = "NAME")]
    pub redis_sentinel_master: Option<String>,
    /// The Redis ACL user (default: Redis's `default` user).
    #[arg(long, value_name = "NAME")]
    pub redis_username: Option<String>,
    /// A file holding the Redis password (mode 0600); or UFRAG_REDIS_PASSWORD. Never in a
    /// URL: that shows in `ps` and in config maps.
    #[arg(long, value_name = "FILE")]
    pub redis_password_file: Option<PathBuf>,
    /// For rediss:// URLs: the CA certificate(s) (PEM) that sign Redis's certificate
    /// (default: the system's roots).
    #[arg(long, value_name = "FILE")]
    pub redis_ca_file: Option<PathBuf>,
    /// For rediss:// URLs, when Redis asks for client certificates: this relay's
    /// certificate chain (PEM); needs --redis-client-key-file.
    #[arg(long, value_name = "FILE")]
    pub redis_client_cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM, mode 0600).
    #[arg(long, value_name = "FILE")]
    pub redis_client_key_file: Option<PathBuf>,
    /// Where /metrics, /healthz and /readyz listen.
    #[arg(long, value_name = "IP:PORT", default_value_t = DEFAULT_METRICS_ADDR)]
    pub metrics_addr: SocketAddr,
    /// Print the effective configuration (the file, the flags and the defaults, as a config
    /// file that loads to the same; hint keys never printed) and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Live flows one session (all its ufrags, ICE restarts included) may hold in one
    /// worker.
    #[arg(long, value_name = "N",
          default_value_t = AdmissionPolicy::default().max_flows_per_session)]
    pub max_flows_per_session: u16,
    /// New flows per second (and burst) from one source prefix.
    #[arg(long, value_name = "N",
          default_value_t = AdmissionPolicy::default().new_flows_per_prefix)]
    pub new_flows_per_prefix: u32,
    /// IPv4 prefix length sources are rate-limited by.
    #[arg(long, value_name = "LEN", default_value_t = AdmissionPolicy::default().prefix_len_v4)]
    pub rate_limit_prefix_v4: u8,
    /// IPv6 prefix length sources are rate-limited by.
    #[arg(long, value_name = "LEN", default_value_t = AdmissionPolicy::default().prefix_len_v6)]
    pub rate_limit_prefix_v6: u8,
    /// New flows per second (and burst) in one worker.
    #[arg(long, value_name = "N",
          default_value_t = AdmissionPolicy::default().new_flows_per_worker)]
    pub new_flows_per_worker: u32,
    /// A hint makes new flows this long after its transceiver minted it (a session's
    /// existing flows are not affected; an ICE restart mints a new hint).
    #[arg(long, value_name = "DURATION", value_parser = duration_value,
          default_value_t = AdmissionPolicy::default().hint_max_age.into())]
    pub hint_max_age: humantime::Duration,
    /// How workers wait when idle: wakeup (sleep) or busy (spin on a core of their own,
    /// for the lowest latency).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = PollMode::Wakeup)]
    pub poll: PollMode,
    /// Public VIP:port for ICE over TCP (RFC 6544, RFC 4571 framing), for clients whose
    /// networks block UDP (repeat; none: no TCP).
    #[arg(long = "tcp-vip", value_name = "IP:PORT")]
    pub tcp_vips: Vec<SocketAddr>,
    /// Open TCP connections one worker holds at most.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TCP_CONNECTIONS_PER_WORKER)]
    pub tcp_connections_per_worker: usize,
    /// Open TCP connections from one source prefix (--rate-limit-prefix-v4/-v6) per
    /// worker.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TCP_CONNECTIONS_PER_PREFIX)]
    pub tcp_connections_per_prefix: u32,
    /// A TCP connection must bring an authentic Binding Request within this.
    #[arg(long, value_name = "DURATION", value_parser = duration_value,
          default_value_t = DEFAULT_TCP_HANDSHAKE_TIMEOUT.into())]
    pub tcp_handshake_timeout: humantime::Duration,
    /// New TCP connections per second (and burst) from one source prefix, per worker.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TCP_ACCEPTS_PER_PREFIX)]
    pub tcp_accepts_per_prefix: u32,
    /// New TCP connections per second (and burst) in one worker.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TCP_ACCEPTS_PER_WORKER)]
    pub tcp_accepts_per_worker: u32,
    /// A network of transceivers that read bundles (frame version 2): what one receive
    /// batch has for one of them leaves in one datagram (repeat; none: single frames to
    /// every transceiver).
    #[arg(long = "bundle-to", value_name = "CIDR")]
    pub bundle_to: Vec<IpNet>,
    /// The MTU of the path to the transceivers: a bundle never passes it.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_INTERNAL_MTU)]
    pub internal_mtu: u16,
    /// Send each run of equal-size frames to one transceiver as one GSO send
    /// (UDP_SEGMENT) instead of one send each. Measured against bundles in
    /// docs/performance.md; off by default.
    #[arg(long)]
    pub internal_gso: bool,
}

/// [`RelayArgs`] as a command of its own, for [`RelayArgs::parse`].
#[derive(clap::Parser)]
struct RelayCommand {
    #[command(flatten)]
    relay: RelayArgs,
}

impl RelayArgs {
    /// The flags a config file's `text` (if any) and `flags` (a command line without the
    /// program's name) give, merged as the binaries merge them, and the effective
    /// configuration as `--print-config` writes it: for a relay embedded in another program
    /// and for tests (the binaries read their own command line and file:
    /// `runtime::lifecycle::parse_with_config_file`). An error names the key.
    pub fn parse(text: Option<&str>, flags: &[&str]) -> Result<Parsed<RelayArgs>, ConfigError> {
        let args: Vec<OsString> = std::iter::once("relay")
            .chain(flags.iter().copied())
            .map(OsString::from)
            .collect();
        let parsed = crate::config_file::parse::<RelayCommand>(text, &args, RENAMED_KEYS)
            .map_err(ParseError::into_config_error)?;
        Ok(Parsed {
            options: parsed.options.relay,
            effective: parsed.effective,
        })
    }
}

/// A validated relay configuration.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Public VIP:port list for UDP; empty only in an ICE-TCP-only relay.
    pub vips: Vec<SocketAddr>,
    /// Internal address; worker i uses port `internal_addr.port() + i`.
    pub internal_addr: SocketAddr,
    /// CPU of each worker, one entry per worker.
    pub worker_cpus: Vec<usize>,
    /// Networks transceivers live in.
    pub allowed_transceiver_networks: Vec<IpNet>,
    /// The accepted hint keys, as loaded at start.
    pub hint_keys: HintKeys,
    /// The file they came from, reloaded on SIGHUP and when it changes
    /// (`runtime::keys`); `None` when they came from the environment.
    pub hint_keys_file: Option<PathBuf>,
    /// This relay's cluster.
    pub cluster_id: u16,
    /// Other clusters' relays, for global mode.
    pub clusters: BTreeMap<u16, SocketAddr>,
    /// Networks global relays send frames from.
    pub global_relay_networks: Vec<IpNet>,
    /// Flow capacity of each worker.
    pub flows_per_worker: usize,
    /// Idle expiry.
    pub idle_timeout: Duration,
    /// Drain time on SIGTERM.
    pub drain_time: Duration,
    /// Where the route cache keeps flows, if anywhere.
    pub route_store: Option<RouteStore>,
    /// Who the route cache is to Redis, and how it checks Redis: user, password, TLS.
    pub redis_access: RedisAccess,
    /// Metrics and health listen address.
    pub metrics_addr: SocketAddr,
    /// What one session, source prefix and worker may cost in new flows.
    pub admission: AdmissionPolicy,
    /// How workers wait when idle.
    pub poll: PollMode,
    /// ICE over TCP: its VIPs (none: not served) and what connections may cost.
    pub tcp: TcpPolicy,
    /// Which transceivers get bundles, and how large a bundle may be.
    pub bundles: BundlePolicy,
}

/// How frames leave for the transceivers: in bundles ([`crate::bundle`]) to those that
/// read them, within the MTU of the path to them, and whether runs of equal-size
/// datagrams leave as one GSO send. Received bundles are read whatever this says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundlePolicy {
    /// Networks of transceivers that read bundles; empty: every frame leaves alone.
    pub to: Vec<IpNet>,
    /// The internal path's MTU.
    pub mtu: u16,
    /// Runs of equal-size datagrams to one transceiver leave as one `UDP_SEGMENT` send.
    pub gso: bool,
}

impl Default for BundlePolicy {
    /// No bundles, no GSO; Ethernet's MTU.
    fn default() -> Self {
        BundlePolicy {
            to: Vec::new(),
            mtu: DEFAULT_INTERNAL_MTU,
            gso: false,
        }
    }
}

impl BundlePolicy {
    /// Whether frames for `peer` go in bundles.
    pub fn bundles_to(&self, peer: SocketAddr) -> bool {
        let ip = peer.ip().to_canonical();
        self.to.iter().any(|net| net.contains(&ip))
    }
}

/// ICE over TCP: where it listens and what its connections may cost. A connection's idle
/// timeout is the flows' (`idle_timeout`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpPolicy {
    /// Public VIP:port list for TCP; empty when TCP is not served.
    pub vips: Vec<SocketAddr>,
    /// Open connections one worker holds at most.
    pub connections_per_worker: usize,
    /// Open connections from one source prefix, per worker.
    pub connections_per_prefix: u32,
    /// The first Binding Request must arrive within this.
    pub handshake_timeout: Duration,
    /// New connections per second (and burst) from one source prefix, per worker.
    pub accepts_per_prefix: u32,
    /// New connections per second (and burst) in one worker.
    pub accepts_per_worker: u32,
}

impl Default for TcpPolicy {
    /// TCP not served; the limits it would have.
    fn default() -> Self {
        TcpPolicy {
            vips: Vec::new(),
            connections_per_worker: DEFAULT_TCP_CONNECTIONS_PER_WORKER,
            connections_per_prefix: DEFAULT_TCP_CONNECTIONS_PER_PREFIX,
            handshake_timeout: DEFAULT_TCP_HANDSHAKE_TIMEOUT,
            accepts_per_prefix: DEFAULT_TCP_ACCEPTS_PER_PREFIX,
            accepts_per_worker: DEFAULT_TCP_ACCEPTS_PER_WORKER,
        }
    }
}

impl RelayConfig {
    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.worker_cpus.len()
    }

    /// The internal address of worker `index`.
    pub fn worker_internal_addr(&self, index: usize) -> SocketAddr {
        // Validated at load: base port + workers - 1 <= 65535.
        let port = self.internal_addr.port() + index as u16;
        SocketAddr::new(self.internal_addr.ip(), port)
    }

    /// The configuration the flags (file and command line merged:
    /// [`crate::config_file::parse`]) give: the hint keys read from their file or from
    /// [`HINT_KEYS_ENV`], and every setting validated. Every file and environment variable
    /// is read through `sources` (the process's own: `runtime::host::Host`).
    /// `allowed_cpus` is the default CPU list when none is given (the process's affinity
    /// mask).
    pub fn load(
        args: &RelayArgs,
        sources: &dyn ConfigSources,
        allowed_cpus: &[usize],
    ) -> Result<Self, ConfigError> {
        let admission = admission_policy(args)?;
        let tcp = tcp_policy(args)?;
        let redis_access = redis_access(args, sources)?;

        let vips = args.vips.clone();
        // An ICE-TCP-only relay (beside relay-afxdp, which leaves TCP to the kernel)
        // needs no UDP VIP.
        if vips.is_empty() && tcp.vips.is_empty() {
            return Err(bad(
                "vip",
                "at least one public VIP:port is required (--vip; or --tcp-vip alone for a \
                 relay that serves only ICE over TCP)",
            ));
        }
        validate_vips("vip", &vips)?;

        let internal_addr = args
            .internal_addr
            .ok_or_else(|| bad("internal_addr", "required (--internal-addr IP:PORT)"))?;
        if internal_addr.port() == 0 {
            return Err(bad(
                "internal_addr",
                "port 0: workers need fixed ports so return traffic reaches the flow's owner",
            ));
        }
        if internal_addr.ip().is_unspecified() {
            return Err(bad(
                "internal_addr",
                format!(
                    "{}: a wildcard would take frames on every address, the public ones too; \
                     name the internal interface's address",
                    internal_addr.ip()
                ),
            ));
        }

        let cpus = match args.cpus.as_deref() {
            Some(list) => parse_cpu_list(list).map_err(|reason| bad("cpus", reason))?,
            None if allowed_cpus.is_empty() => vec![0],
            None => allowed_cpus.to_vec(),
        };
        let workers = args.workers.unwrap_or(cpus.len());
        if workers == 0 || workers > MAX_WORKERS {
            return Err(bad(
                "workers",
                format!("{workers}: must be 1..={MAX_WORKERS}"),
            ));
        }
        if workers > cpus.len() {
            return Err(bad(
                "workers",
                format!(
                    "{workers} workers but only {} CPUs listed: each worker is pinned to its own core",
                    cpus.len()
                ),
            ));
        }
        if usize::from(internal_addr.port()) + workers - 1 > usize::from(u16::MAX) {
            return Err(bad(
                "internal_addr",
                format!(
                    "port {} + {workers} workers exceeds 65535",
                    internal_addr.port()
                ),
            ));
        }
        for vip in &vips {
            let clash = vip.ip() == internal_addr.ip() || internal_addr.ip().is_unspecified();
            let p = usize::from(vip.port());
            let base = usize::from(internal_addr.port());
            if clash && (base..base + workers).contains(&p) {
                return Err(bad(
                    "internal_addr",
                    format!(
                        "worker ports {base}..{} overlap VIP {vip}",
                        base + workers - 1
                    ),
                ));
            }
        }
        let worker_cpus = cpus[..workers].to_vec();

        let allowed_transceiver_networks = args.allowed_transceiver_networks.clone();
        if allowed_transceiver_networks.is_empty() {
            return Err(bad(
                "allow_transceiver_net",
                "at least one network is required, or no hint can ever be routed",
            ));
        }

        let keys_file = args.hint_keys_file.clone();
        let hint_keys = load_hint_keys(keys_file.as_deref(), sources)?;

        let cluster_id = args.cluster_id;
        let mut clusters = BTreeMap::new();
        for entry in &args.cluster_relays {
            if clusters.insert(entry.cluster, entry.relay).is_some() {
                return Err(bad(
                    "cluster_relay",
                    format!("cluster {} is listed twice", entry.cluster),
                ));
            }
        }
        let global_relay_networks = args.global_relay_networks.clone();

        let flows_per_worker = args.flows_per_worker;
        if flows_per_worker == 0 || flows_per_worker > MAX_CAPACITY {
            return Err(bad(
                "flows_per_worker",
                format!("{flows_per_worker}: must be 1..={MAX_CAPACITY}"),
            ));
        }

        let idle_timeout = *args.idle_timeout;
        within(
            "idle_timeout",
            idle_timeout,
            MIN_IDLE_TIMEOUT,
            MAX_IDLE_TIMEOUT,
        )?;
        let drain_time = *args.drain_time;
        if drain_time > MAX_DRAIN_TIME {
            return Err(bad(
                "drain_time",
                format!(
                    "must be at most {}",
                    humantime::format_duration(MAX_DRAIN_TIME)
                ),
            ));
        }

        let route_store = route_store(
            args.redis_url.clone(),
            args.redis_cluster_nodes.clone(),
            (
                args.redis_sentinels.clone(),
                args.redis_sentinel_master.clone(),
            ),
        )?;

        if redis_access.uses_tls() && !route_store.as_ref().is_some_and(RouteStore::uses_tls) {
            return Err(bad(
                "redis_ca_file",
                "TLS files are for a rediss:// route store; the URLs here are not rediss://",
            ));
        }

        let metrics_addr = args.metrics_addr;

        let bundles = BundlePolicy {
            to: args.bundle_to.clone(),
            mtu: args.internal_mtu,
            gso: args.internal_gso,
        };
        if !(MIN_INTERNAL_MTU..=MAX_INTERNAL_MTU).contains(&bundles.mtu) {
            return Err(bad(
                "internal_mtu",
                format!(
                    "{}: must be {MIN_INTERNAL_MTU}..={MAX_INTERNAL_MTU} (IPv6's minimum to a jumbo frame)",
                    bundles.mtu
                ),
            ));
        }

        Ok(RelayConfig {
            vips,
            internal_addr,
            worker_cpus,
            allowed_transceiver_networks,
            hint_keys,
            hint_keys_file: keys_file,
            cluster_id,
            clusters,
            global_relay_networks,
            flows_per_worker,
            idle_timeout,
            drain_time,
            route_store,
            redis_access,
            metrics_addr,
            admission,
            poll: args.poll,
            tcp,
            bundles,
        })
    }

    /// What one worker's forwarder applies: this configuration's networks, keys and
    /// limits, with a replay filter of the forwarder's own (one worker).
    pub fn forward_policy(&self) -> ForwardPolicy {
        ForwardPolicy {
            vips: self.vips.clone(),
            allowed_transceiver_networks: self.allowed_transceiver_networks.clone(),
            global_relay_networks: self.global_relay_networks.clone(),
            cluster_id: self.cluster_id,
            clusters: self.clusters.clone(),
            hint_keys: self.hint_keys.clone(),
            route_cache: self.route_store.is_some(),
            admission: self.admission,
            shared_replays: None,
        }
    }

    /// What every worker of one relay applies: [`RelayConfig::forward_policy`] with one
    /// replay filter for all of them (UDP and TCP), sized for their admission rate over
    /// the window, started at `now`.
    pub fn shared_forward_policy(&self, now: Instant) -> ForwardPolicy {
        let admission = self.admission;
        ForwardPolicy {
            shared_replays: Some(Arc::new(ReplayFilter::new(
                self.workers(),
                admission.new_flows_per_worker,
                admission.replay_window(),
                now,
            ))),
            ..self.forward_policy()
        }
    }
}

/// Where the route cache keeps flows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteStore {
    /// One Redis server (`redis_url`).
    Server(String),
    /// A Redis Cluster, found from these nodes (`redis_cluster_node`): keys spread over
    /// its masters by slot, and a relay follows the cluster's own failovers.
    Cluster(Vec<String>),
    /// The master these Sentinels name (`redis_sentinel`, `redis_sentinel_master`),
    /// asked again whenever the connection fails, so a failover is followed.
    Sentinel {
        /// The Sentinels' URLs.
        sentinels: Vec<String>,
        /// The master's name in their configuration.
        master: String,
    },
}

/// Checks that `url` names a Redis server (`field` says which key it came from):
/// `redis://`, `rediss://` (TLS) or `unix://`, with no password in it (a URL shows in `ps`,
/// in config maps and in logs: the password comes from a file or the environment).
fn redis_url_checked(field: &str, url: &str) -> Result<(), ConfigError> {
    let scheme_ok = ["redis://", "rediss://", "unix://", "redis+unix://"]
        .iter()
        .any(|s| url.starts_with(s));
    if !scheme_ok {
        return Err(bad(
            field,
            format!("`{url}`: expected redis://HOST:PORT, rediss://HOST:PORT or unix://PATH"),
        ));
    }
    let authority = url.split_once("://").map_or("", |(_, rest)| rest);
    let authority = authority.split(['/', '?']).next().unwrap_or_default();
    let has_password = authority
        .rsplit_once('@')
        .is_some_and(|(user_info, _)| user_info.contains(':'));
    let has_password = has_password || url.contains("password=");
    if has_password {
        return Err(bad(
            field,
            "a password in the URL shows in `ps`, config maps and logs; give it in \
             redis_password_file or UFRAG_REDIS_PASSWORD (and the user in redis_username)",
        ));
    }
    Ok(())
}

/// The route store from its three ways of being named, at most one of them used.
fn route_store(
    server: Option<String>,
    cluster: Vec<String>,
    (sentinels, master): (Vec<String>, Option<String>),
) -> Result<Option<RouteStore>, ConfigError> {
    let named = [server.is_some(), !cluster.is_empty(), !sentinels.is_empty()];
    if named.iter().filter(|&&n| n).count() > 1 {
        return Err(bad(
            "redis_url",
            "name one route store: redis_url, redis_cluster_node or redis_sentinel",
        ));
    }
    if sentinels.is_empty() && master.is_some() {
        return Err(bad(
            "redis_sentinel_master",
            "a master name needs redis_sentinel",
        ));
    }
    if let Some(url) = server {
        redis_url_checked("redis_url", &url)?;
        return Ok(Some(RouteStore::Server(url)));
    }
    if !cluster.is_empty() {
        for url in &cluster {
            redis_url_checked("redis_cluster_node", url)?;
        }
        return Ok(Some(RouteStore::Cluster(cluster)));
    }
    if sentinels.is_empty() {
        return Ok(None);
    }
    for url in &sentinels {
        redis_url_checked("redis_sentinel", url)?;
    }
    let master = master.filter(|m| !m.is_empty()).ok_or_else(|| {
        bad(
            "redis_sentinel_master",
            "redis_sentinel needs the master's name (--redis-sentinel-master)",
        )
    })?;
    Ok(Some(RouteStore::Sentinel { sentinels, master }))
}

impl RouteStore {
    /// True when the store is reached over TLS (`rediss://`).
    pub fn uses_tls(&self) -> bool {
        let urls: &[String] = match self {
            RouteStore::Server(url) => std::slice::from_ref(url),
            RouteStore::Cluster(nodes) => nodes,
            RouteStore::Sentinel { sentinels, .. } => sentinels,
        };
        urls.iter().any(|u| u.starts_with("rediss://"))
    }
}

/// The environment variable that may hold the Redis password.
pub const REDIS_PASSWORD_ENV: &str = "UFRAG_REDIS_PASSWORD";

/// A PEM file read at start: where it came from (for `--print-config`) and its bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile {
    /// The file.
    pub path: PathBuf,
    /// Its contents.
    pub pem: Vec<u8>,
}

impl std::fmt::Debug for PemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PemFile({})", self.path.display())
    }
}

/// Who the route cache is to Redis and how it trusts Redis: the ACL user and password
/// (from a file or [`REDIS_PASSWORD_ENV`], never a URL) and, for `rediss://`, the CA and an
/// optional client certificate. The same for every node of a cluster and for a Sentinel's
/// master and the Sentinels themselves.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisAccess {
    /// The ACL user; `None`: Redis's default user.
    pub username: Option<String>,
    /// The password; never printed.
    pub password: Option<String>,
    /// The file it came from (`None`: from the environment, or no password).
    pub password_file: Option<PathBuf>,
    /// Trust anchors for Redis's certificate; `None`: the system's roots.
    pub ca: Option<PemFile>,
    /// This relay's certificate chain and key, for Redis's `tls-auth-clients yes`.
    pub client: Option<(PemFile, PemFile)>,
}

impl std::fmt::Debug for RedisAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAccess")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("ca", &self.ca)
            .field("client", &self.client.as_ref().map(|(cert, _)| cert))
            .finish()
    }
}

impl RedisAccess {
    /// True when TLS material is configured.
    pub fn uses_tls(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }
}

/// The route cache's Redis access from the flags and [`REDIS_PASSWORD_ENV`], its files read
/// through `sources`.
fn redis_access(args: &RelayArgs, sources: &dyn ConfigSources) -> Result<RedisAccess, ConfigError> {
    let env_password = sources
        .env_var(REDIS_PASSWORD_ENV)
        .filter(|v| !v.is_empty());
    let password_file = args.redis_password_file.clone();
    let password = match (&password_file, env_password) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "redis_password_file",
                format!("both it and {REDIS_PASSWORD_ENV} are set; use one"),
            ));
        }
        (Some(path), None) => {
            let text = read_text(sources, "redis_password_file", path, true)?;
            let password = text.trim_end_matches(['\r', '\n']).to_string();
            if password.is_empty() {
                return Err(bad(
                    "redis_password_file",
                    format!("{} is empty", path.display()),
                ));
            }
            Some(password)
        }
        (None, env) => env,
    };
    let pem = |field: &str, path: Option<PathBuf>, secret: bool| -> Result<_, ConfigError> {
        let Some(path) = path else { return Ok(None) };
        let pem = sources.read_file(field, &path, secret)?;
        if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
            return Err(bad(field, format!("{}: not PEM", path.display())));
        }
        Ok(Some(PemFile { path, pem }))
    };
    let ca = pem("redis_ca_file", args.redis_ca_file.clone(), false)?;
    let cert = pem(
        "redis_client_cert_file",
        args.redis_client_cert_file.clone(),
        false,
    )?;
    let key = pem(
        "redis_client_key_file",
        args.redis_client_key_file.clone(),
        true,
    )?;
    let client = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(bad(
                "redis_client_key_file",
                "the client certificate needs its key",
            ));
        }
        (None, Some(_)) => {
            return Err(bad(
                "redis_client_cert_file",
                "the client key needs its certificate",
            ));
        }
    };
    Ok(RedisAccess {
        username: args.redis_username.clone(),
        password,
        password_file,
        ca,
        client,
    })
}

/// Checks a VIP list (`field` names it): named addresses, fixed ports, no repeats.
fn validate_vips(field: &str, vips: &[SocketAddr]) -> Result<(), ConfigError> {
    for (i, vip) in vips.iter().enumerate() {
        // A wildcard VIP cannot work: the frame tells the transceiver which VIP the
        // client used (str0m checks it against its candidate), and a reply must leave
        // from exactly that address; a wildcard socket knows neither.
        if vip.ip().is_unspecified() {
            return Err(bad(
                field,
                format!(
                    "{vip}: a wildcard address cannot be a VIP; name the public address \
                     clients send to (one per address)"
                ),
            ));
        }
        if vip.port() == 0 {
            return Err(bad(
                field,
                format!("{vip}: port 0 is not a fixed public port"),
            ));
        }
        if vips[..i].contains(vip) {
            return Err(bad(field, format!("{vip} is listed twice")));
        }
    }
    Ok(())
}

/// `value` of `field`, refused unless it lies in `min..=max`.
fn within(field: &str, value: Duration, min: Duration, max: Duration) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(bad(
        field,
        format!(
            "{}: must be between {} and {}",
            humantime::format_duration(value),
            humantime::format_duration(min),
            humantime::format_duration(max)
        ),
    ))
}

/// A rate, refused unless 1..=10,000,000 per second.
fn per_second(field: &str, value: u32) -> Result<u32, ConfigError> {
    if value == 0 || value > 10_000_000 {
        return Err(bad(
            field,
            format!("{value}: must be 1..=10000000 per second"),
        ));
    }
    Ok(value)
}

/// The ICE-TCP settings, validated.
fn tcp_policy(args: &RelayArgs) -> Result<TcpPolicy, ConfigError> {
    let vips = args.tcp_vips.clone();
    validate_vips("tcp_vip", &vips)?;
    let connections_per_worker = args.tcp_connections_per_worker;
    if !(1..=MAX_TCP_CONNECTIONS_PER_WORKER).contains(&connections_per_worker) {
        return Err(bad(
            "tcp_connections_per_worker",
            format!("{connections_per_worker}: must be 1..={MAX_TCP_CONNECTIONS_PER_WORKER}"),
        ));
    }
    let connections_per_prefix = args.tcp_connections_per_prefix;
    if connections_per_prefix == 0 {
        return Err(bad(
            "tcp_connections_per_prefix",
            "0: no client could connect",
        ));
    }
    let handshake_timeout = *args.tcp_handshake_timeout;
    within(
        "tcp_handshake_timeout",
        handshake_timeout,
        MIN_IDLE_TIMEOUT,
        MAX_TCP_HANDSHAKE_TIMEOUT,
    )?;
    Ok(TcpPolicy {
        vips,
        connections_per_worker,
        connections_per_prefix,
        handshake_timeout,
        accepts_per_prefix: per_second("tcp_accepts_per_prefix", args.tcp_accepts_per_prefix)?,
        accepts_per_worker: per_second("tcp_accepts_per_worker", args.tcp_accepts_per_worker)?,
    })
}

/// The admission limits, validated.
fn admission_policy(args: &RelayArgs) -> Result<AdmissionPolicy, ConfigError> {
    let max_flows_per_session = args.max_flows_per_session;
    if max_flows_per_session == 0 {
        return Err(bad(
            "max_flows_per_session",
            "0: a session needs at least one flow",
        ));
    }
    let hint_max_age = *args.hint_max_age;
    let longest_hint_age = crate::replay::MAX_WINDOW - crate::admission::HINT_CLOCK_SKEW;
    within(
        "hint_max_age",
        hint_max_age,
        MIN_HINT_MAX_AGE,
        longest_hint_age,
    )?;
    let prefix = |field: &str, value: u8, max: u8| {
        if value > max {
            return Err(bad(field, format!("{value}: a prefix length is 0..={max}")));
        }
        Ok(value)
    };
    Ok(AdmissionPolicy {
        max_flows_per_session,
        new_flows_per_prefix: per_second("new_flows_per_prefix", args.new_flows_per_prefix)?,
        prefix_len_v4: prefix("rate_limit_prefix_v4", args.rate_limit_prefix_v4, 32)?,
        prefix_len_v6: prefix("rate_limit_prefix_v6", args.rate_limit_prefix_v6, 128)?,
        new_flows_per_worker: per_second("new_flows_per_worker", args.new_flows_per_worker)?,
        hint_max_age,
    })
}

/// Loads the hint keys from exactly one of a key file (a secret: mode 0600) or the text of
/// [`HINT_KEYS_ENV`], both read through `sources`: shared by the relays and the
/// transceiver.
pub fn load_hint_keys(
    file: Option<&Path>,
    sources: &dyn ConfigSources,
) -> Result<HintKeys, ConfigError> {
    // An empty variable is an unset one, whichever host the sources read.
    match (
        file,
        sources.env_var(HINT_KEYS_ENV).filter(|v| !v.is_empty()),
    ) {
        (Some(_), Some(_)) => Err(bad(
            "hint_keys_file",
            format!("both a key file and {HINT_KEYS_ENV} are set; use one"),
        )),
        (Some(path), None) => {
            let field = "hint_keys_file";
            let text = read_text(sources, field, path, true)?;
            HintKeys::parse(&text).map_err(|e| bad(field, format!("{}: {e}", path.display())))
        }
        (None, Some(text)) => {
            HintKeys::parse(&text.replace(',', "\n")).map_err(|e| bad(HINT_KEYS_ENV, e.to_string()))
        }
        (None, None) => Err(bad(
            "hint_keys_file",
            format!("hint keys are required: set hint_keys_file or {HINT_KEYS_ENV}"),
        )),
    }
}

/// The file `field` names, read through `sources`, as text.
fn read_text(
    sources: &dyn ConfigSources,
    field: &str,
    path: &Path,
    secret: bool,
) -> Result<String, ConfigError> {
    String::from_utf8(sources.read_file(field, path, secret)?)
        .map_err(|_| bad(field, format!("{}: not UTF-8", path.display())))
}

/// Parses a CPU list such as `"0-3,6"` into sorted, distinct CPU numbers.
pub fn parse_cpu_list(list: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("`{list}`: empty entry"));
        }
        let number = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{s}` is not a CPU number"))
        };
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo)?, number(hi)?);
                if lo > hi || hi - lo >= MAX_WORKERS {
                    return Err(format!("`{part}`: bad range"));
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(number(part)?),
        }
    }
    cpus.sort_unstable();
    let before = cpus.len();
    cpus.dedup();
    if cpus.len() != before {
        return Err(format!("`{list}`: a CPU is listed twice"));
    }
    Ok(cpus)
}
