//! `transceiver` with fault injection compiled in (`--features fault-injection`): the binary
//! the tests that kill a worker run (`ufrag_testkit::cargo_build::faults_bin`). Never shipped.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ufrag_transceiver::cli::main()
}
