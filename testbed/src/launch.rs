//! Starting the project's binaries for a run, as the benchmark suite and the testbed's
//! tools do it: a relay ([`RelayLaunch`]) with the flags every run gives it (its VIP, internal
//! address, transceiver network, workers and CPUs, metrics address, then the caller's own),
//! a transceiver ([`TransceiverLaunch`]) with its HTTP and media addresses, both with the
//! example hint key, in a namespace or in this one. A binary is ready when its `/readyz`
//! answers 200; one that exits first is an error carrying its last words.

use std::io::Read as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::child::OwnedChild;

/// Where a started relay's stderr goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stderr {
    /// A pipe the caller reads (`child.stderr`): for a test that checks the logs and stops
    /// the relay before it could fill the pipe.
    Piped,
    /// An unlinked file, read only when the relay exits before it is ready: for a relay
    /// that runs under load for minutes, which a pipe nobody drains would stall.
    Kept,
    /// The caller's own: a tool's user sees the relay's warnings as they come.
    Inherited,
}

/// A relay to start.
#[derive(Clone, Debug)]
pub struct RelayLaunch {
    /// The relay's binary.
    pub binary: PathBuf,
    /// The network namespace it runs in (`ip netns exec`); `None`: this process's.
    pub ns: Option<String>,
    /// A command and its arguments the relay's command line follows (`setpriv …`).
    pub wrapper: Vec<String>,
    /// `--vip`.
    pub vip: SocketAddr,
    /// `--internal-addr`.
    pub internal: SocketAddr,
    /// `--allow-transceiver-net`.
    pub transceiver_net: String,
    /// `--workers`.
    pub workers: usize,
    /// `--cpus`.
    pub cpus: String,
    /// `--metrics-addr`, where readiness is asked.
    pub metrics: SocketAddr,
    /// The caller's own flags, after these.
    pub flags: Vec<String>,
    /// `RUST_LOG`, when set.
    pub log_filter: Option<String>,
}

impl RelayLaunch {
    /// The relay's command line, not started: stdout discarded, stderr not yet chosen.
    pub fn command(&self) -> Command {
        let mut command = in_namespace(self.ns.as_deref(), &self.wrapper, &self.binary);
        command
            .args(["--vip", &self.vip.to_string()])
            .args(["--internal-addr", &self.internal.to_string()])
            .args(["--allow-transceiver-net", &self.transceiver_net])
            .args(["--workers", &self.workers.to_string(), "--cpus", &self.cpus])
            .args(["--metrics-addr", &self.metrics.to_string()])
            .args(&self.flags);
        with_example_key(&mut command, self.log_filter.as_deref());
        command
    }

    /// Starts the relay with its stderr as `stderr` says and waits at most `timeout` until
    /// it is ready. An error names the binary and says why: it did not start, it exited
    /// first (with its status and the last line it wrote), or it was not ready in time.
    pub fn start(&self, stderr: Stderr, timeout: Duration) -> Result<OwnedChild, String> {
        let ready = Ready {
            ns: self.ns.as_deref(),
            addr: self.metrics,
        };
        start(self.command(), &self.binary, ready, stderr, timeout)
    }
}

/// A transceiver to start.
#[derive(Clone, Debug)]
pub struct TransceiverLaunch {
    /// The transceiver's binary.
    pub binary: PathBuf,
    /// The network namespace it runs in; `None`: this process's.
    pub ns: Option<String>,
    /// `--http-addr`: signaling, and where readiness is asked.
    pub http: SocketAddr,
    /// `--bind`: its media socket.
    pub bind: SocketAddr,
    /// The namespace `/readyz` is asked from when not the transceiver's own (the testbed
    /// asks from the client's, which proves the route too).
    pub ready_from: Option<String>,
    /// The caller's own flags, after these.
    pub flags: Vec<String>,
    /// `RUST_LOG`, when set.
    pub log_filter: Option<String>,
}

impl TransceiverLaunch {
    /// The transceiver's command line, not started: stdout discarded.
    pub fn command(&self) -> Command {
        let mut command = in_namespace(self.ns.as_deref(), &[], &self.binary);
        command
            .args(["--http-addr", &self.http.to_string()])
            .args(["--bind", &self.bind.to_string()])
            .args(&self.flags);
        with_example_key(&mut command, self.log_filter.as_deref());
        command
    }

    /// Starts the transceiver as [`RelayLaunch::start`] starts a relay.
    pub fn start(&self, stderr: Stderr, timeout: Duration) -> Result<OwnedChild, String> {
        let ready = Ready {
            ns: self.ready_from.as_deref().or(self.ns.as_deref()),
            addr: self.http,
        };
        start(self.command(), &self.binary, ready, stderr, timeout)
    }
}

/// `wrapper` then `binary`, in namespace `ns` or in this one.
fn in_namespace(ns: Option<&str>, wrapper: &[String], binary: &std::path::Path) -> Command {
    let binary = binary.to_string_lossy().into_owned();
    let mut line: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    line.push(&binary);
    let (program, args) = line.split_first().expect("a binary");
    let mut command = crate::netns::command_in(ns, program);
    command.args(args);
    command
}

/// The variables a deployment may have set that would change what a launched binary
/// runs with (its config file, the route cache's password) or that are not its to see
/// (the lab agent's token).
pub const DEPLOYMENT_ENV: [&str; 4] = [
    "UFRAG_RELAY_CONFIG",
    "UFRAG_TRANSCEIVER_CONFIG",
    "UFRAG_REDIS_PASSWORD",
    AGENT_TOKEN_ENV,
];

/// The variable that may hold the lab agent's token (`ufrag-perf agent`).
pub const AGENT_TOKEN_ENV: &str = "UFRAG_PERF_AGENT_TOKEN";

/// The example hint key (and the permission to use it), none of the caller's deployment
/// variables, the log filter, no stdout.
fn with_example_key(command: &mut Command, log_filter: Option<&str>) {
    for name in DEPLOYMENT_ENV {
        command.env_remove(name);
    }
    command
        .env("UFRAG_RELAY_HINT_KEYS", crate::keys::KEYS)
        .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
        .stdout(Stdio::null());
    if let Some(filter) = log_filter {
        command.env("RUST_LOG", filter);
    }
}

/// Where a started binary's `/readyz` is asked.
#[derive(Clone, Copy, Debug)]
struct Ready<'a> {
    ns: Option<&'a str>,
    addr: SocketAddr,
}

/// Starts `command` (the binary `binary`) with its stderr as `stderr` says and waits at most
/// `timeout` until `ready` answers 200, or until it exits, which is an error with its
/// status and the last line it wrote.
fn start(
    mut command: Command,
    binary: &std::path::Path,
    ready: Ready<'_>,
    stderr: Stderr,
    timeout: Duration,
) -> Result<OwnedChild, String> {
    let name = binary
        .file_name()
        .map_or_else(|| "the binary".into(), |n| n.to_string_lossy().into_owned());
    let mut kept = None;
    match stderr {
        Stderr::Piped => {
            command.stderr(Stdio::piped());
        }
        Stderr::Inherited => {
            command.stderr(Stdio::inherit());
        }
        Stderr::Kept => {
            static STARTED: AtomicU32 = AtomicU32::new(0);
            let path = std::env::temp_dir().join(format!(
                "ufrag-launch-{}-{name}-{}.stderr",
                std::process::id(),
                STARTED.fetch_add(1, Ordering::Relaxed)
            ));
            // A new file of our own (O_EXCL: never a name someone linked elsewhere).
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| format!("{path:?}: {e}"))?;
            kept = Some(std::fs::File::open(&path).map_err(|e| format!("{path:?}: {e}"))?);
            let _ = std::fs::remove_file(&path);
            command.stderr(file);
        }
    }
    let mut child =
        OwnedChild::spawn(&mut command).map_err(|e| format!("{name} did not start: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        let answered = crate::http::get(ready.ns, ready.addr, "/readyz")
            .is_some_and(|(status, _)| status == 200);
        if answered {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut said = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut said);
            }
            if let Some(file) = kept.as_mut() {
                let _ = file.read_to_string(&mut said);
            }
            let last = said.lines().rev().find(|l| !l.trim().is_empty());
            return Err(format!(
                "{name} exited before it was ready ({status}): {}",
                last.unwrap_or("see its stderr")
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{name} was not ready on {} within {timeout:?}",
                ready.addr
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(binary: &str, flags: &[&str]) -> RelayLaunch {
        RelayLaunch {
            binary: binary.into(),
            ns: None,
            wrapper: vec![],
            vip: "127.0.0.1:3478".parse().unwrap(),
            internal: "127.0.0.1:40000".parse().unwrap(),
            transceiver_net: "127.0.0.0/8".into(),
            workers: 1,
            cpus: "0".into(),
            metrics: "127.0.0.1:9".parse().unwrap(),
            flags: flags.iter().map(|f| f.to_string()).collect(),
            log_filter: None,
        }
    }

    #[test]
    fn the_command_line_is_the_wrapper_the_relay_its_flags_then_the_callers() {
        let mut relay = launch("/opt/relay-mio", &["--poll", "busy"]);
        relay.ns = Some("ns-1".into());
        relay.wrapper = vec!["setpriv".into(), "--inh-caps=-all".into()];
        let command = relay.command();
        let args: Vec<String> = command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(command.get_program(), "ip");
        assert_eq!(
            args[..6],
            [
                "netns",
                "exec",
                "ns-1",
                "setpriv",
                "--inh-caps=-all",
                "/opt/relay-mio"
            ]
        );
        assert_eq!(args[6..8], ["--vip", "127.0.0.1:3478"]);
        assert_eq!(args[args.len() - 2..], ["--poll", "busy"]);
        let keys = command
            .get_envs()
            .find(|(k, _)| *k == "UFRAG_RELAY_HINT_KEYS")
            .and_then(|(_, v)| v);
        assert_eq!(keys, Some(std::ffi::OsStr::new(crate::keys::KEYS)));
    }

    #[test]
    fn a_relay_that_exits_first_is_an_error_with_its_last_words() {
        // `sh -c` stands in for a relay that refuses its configuration: it writes a line
        // on stderr and exits 2 before anything answers.
        for stderr in [Stderr::Piped, Stderr::Kept] {
            let mut relay = launch("sh", &[]);
            relay.wrapper = vec!["sh".into(), "-c".into(), "echo refused >&2; exit 2".into()];
            let error = relay.start(stderr, Duration::from_secs(10)).unwrap_err();
            assert!(
                error.contains("exited before it was ready"),
                "{stderr:?}: {error}"
            );
            assert!(error.contains("refused"), "{stderr:?}: {error}");
        }
        let missing = launch("/nonexistent/relay", &[]).start(Stderr::Kept, Duration::ZERO);
        assert!(missing.unwrap_err().contains("did not start"));
    }
}
