//! The `relay-mio` binary: parse the shared relay flags, load and validate the config,
//! run until SIGTERM/SIGINT, drain, exit 0.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ufrag_relay_mio::cli::main()
}
