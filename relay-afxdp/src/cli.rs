//! The `relay-afxdp` command line and its `main`, shared by the `relay-afxdp` binary and the
//! `relay-afxdp-faults` test binary (the same, built with `--features fault-injection`).

use std::process::ExitCode;

use crate::relay::{AfXdpOptions, Relay, StartError};
use ufrag_common::config::{RELAY_CONFIG_ENV, RENAMED_KEYS, RelayArgs};
use ufrag_common::runtime::lifecycle::{
    init_logging, load_config, parse_with_config_file, report_fatal, serve,
};

/// The WebRTC relay on AF_XDP: the same behaviour, flags, config and metrics as
/// relay-mio, with the relay's UDP steered by our XDP program into AF_XDP sockets and
/// forwarded by poll-mode workers, one per (interface, queue). Everything that is not the
/// relay's UDP (ARP, ICMP, SSH, other UDP) stays with the kernel.
///
/// Every flag is also a key of the TOML file given with --config: its long name with `_`
/// for `-` (flags win). Hint keys
/// come only from --hint-keys-file (mode 0600) or the UFRAG_RELAY_HINT_KEYS environment
/// variable, as `<id>:<hex secret>`, current key first.
///
/// IPv4 and IPv6 on the AF_XDP data path; next hops from the kernel's routing and
/// neighbour tables.
#[derive(Debug, clap::Parser)]
#[command(name = "relay-afxdp", version = ufrag_version::VERSION, verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    relay: RelayArgs,
    #[command(flatten)]
    afxdp: AfXdpOptions,
}

/// Runs the binary: what `main` returns.
pub fn main() -> ExitCode {
    let (cli, effective) =
        match parse_with_config_file::<Cli>("relay-afxdp", RELAY_CONFIG_ENV, RENAMED_KEYS) {
            Ok(parsed) => (parsed.options, parsed.effective),
            Err(code) => return code,
        };
    init_logging(cli.relay.log_format);
    let config = match load_config("relay-afxdp", &cli.relay) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if cli.relay.print_config {
        print!("{effective}");
        return ExitCode::SUCCESS;
    }
    serve("relay-afxdp", config.drain_time, || {
        Relay::start(&config, &cli.afxdp).map_err(|e| {
            report_fatal("relay-afxdp", &e);
            // A configuration error exits 2 before anything runs; the rest exit 1.
            match e {
                StartError::Config(_) => ExitCode::from(2),
                StartError::System(_) => ExitCode::FAILURE,
            }
        })
    })
}
