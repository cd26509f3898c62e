//! Random bytes from the kernel, for session ids, routing hints' random bits and ICE
//! probes.

use std::io::Read;

/// Random bytes from the kernel (`/dev/urandom`): for setups and path probes, never per
/// packet.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    let mut f = std::fs::File::open("/dev/urandom").expect("/dev/urandom exists");
    f.read_exact(&mut out).expect("/dev/urandom reads");
    out
}
