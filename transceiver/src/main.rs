//! The `transceiver` binary: parse, start, wait for SIGTERM, drain, join.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ufrag_transceiver::cli::main()
}
