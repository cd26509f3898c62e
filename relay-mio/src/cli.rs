//! The `relay-mio` command line and its `main`, shared by the `relay-mio` binary and the
//! `relay-mio-faults` test binary (the same, built with `--features fault-injection`).

use std::process::ExitCode;

use crate::relay::Relay;
use ufrag_common::config::{RELAY_CONFIG_ENV, RENAMED_KEYS, RelayArgs};
use ufrag_common::runtime::lifecycle::{
    init_logging, load_config, parse_with_config_file, report_fatal, serve,
};

/// The WebRTC relay on plain sockets: one fixed public UDP port in front of a fleet of
/// transceivers.
///
/// It reads the routing hint in the server ICE ufrag of a client's first STUN Binding
/// Request, checks it and the request's MESSAGE-INTEGRITY, creates a flow, and then
/// forwards DTLS/SRTP opaquely between the client and the transceiver the hint names.
///
/// Every flag is also a key of the TOML file given with --config: its long name with `_`
/// for `-` (flags win). Hint keys
/// come only from --hint-keys-file (mode 0600) or the UFRAG_RELAY_HINT_KEYS environment
/// variable, as `<id>:<hex secret>`, current key first.
///
/// Example:
///   UFRAG_RELAY_HINT_KEYS=1:$(openssl rand -hex 32) \
///   relay-mio --vip 203.0.113.10:3478 --internal-addr 10.0.0.5:40000 \
///             --allow-transceiver-net 10.0.0.0/8
///
/// Then: GET /metrics, /healthz, /readyz on --metrics-addr (default 127.0.0.1:9590).
/// SIGTERM: /readyz turns 503, existing flows keep forwarding for --drain-time, exit 0.
#[derive(Debug, clap::Parser)]
#[command(name = "relay-mio", version = ufrag_version::VERSION, verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    relay: RelayArgs,
}

/// Runs the binary: what `main` returns.
pub fn main() -> ExitCode {
    let (cli, effective) =
        match parse_with_config_file::<Cli>("relay-mio", RELAY_CONFIG_ENV, RENAMED_KEYS) {
            Ok(parsed) => (parsed.options, parsed.effective),
            Err(code) => return code,
        };
    init_logging(cli.relay.log_format);
    let config = match load_config("relay-mio", &cli.relay) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if cli.relay.print_config {
        print!("{effective}");
        return ExitCode::SUCCESS;
    }
    serve("relay-mio", config.drain_time, || {
        Relay::start(&config).map_err(|e| {
            report_fatal("relay-mio", &e);
            ExitCode::FAILURE
        })
    })
}
