//! Test tool: load the steering program for the given destinations, attach it to an interface
//! of the current network namespace through a BPF link, print `attached`, and hold until
//! killed. The kernel removes the attachment when the process dies, even on SIGKILL.
//!
//! `steer_hold <ifname> <skb|native> <ip:port>...`

use std::process::ExitCode;

use ufrag_relay_afxdp::steering::{AttachMode, Steering};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: steer_hold <ifname> <skb|native> <ip:port>...");
        return ExitCode::from(2);
    }
    let mode = match args[2].as_str() {
        "skb" => AttachMode::Skb,
        "native" => AttachMode::Native,
        other => {
            eprintln!("mode must be skb or native, not {other}");
            return ExitCode::from(2);
        }
    };
    let dests: Vec<std::net::SocketAddr> = match args[3..].iter().map(|p| p.parse()).collect() {
        Ok(p) => p,
        Err(_) => {
            eprintln!("destinations must be ip:port");
            return ExitCode::from(2);
        }
    };
    let ifindex = match std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", args[1])) {
        Ok(s) => s.trim().parse::<u32>().unwrap_or(0),
        Err(e) => {
            eprintln!("no interface {}: {e}", args[1]);
            return ExitCode::FAILURE;
        }
    };
    let steering = match Steering::load(&dests, 1) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("load: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _link = match steering.attach(ifindex, mode) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("attach: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("attached");
    loop {
        std::thread::park();
    }
}
