//! The `relay-afxdp` binary: the relay's flags and config (shared with relay-mio) plus
//! the AF_XDP options; one pinned worker per (interface, queue); metrics, health, drain
//! and route cache as in relay-mio.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ufrag_relay_afxdp::cli::main()
}
