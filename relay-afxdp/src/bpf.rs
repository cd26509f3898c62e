//! A thin loader on the raw `bpf(2)` syscall: the only unsafe code of this crate.
//!
//! Each command fills a zeroed `union bpf_attr` (144 bytes on this kernel ABI) at the
//! field offsets of `include/uapi/linux/bpf.h`, calls the syscall and wraps any new file
//! descriptor in an [`OwnedFd`], so maps, programs and links close when dropped.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::program::Insn;

const CMD_MAP_CREATE: libc::c_int = 0;
const CMD_MAP_LOOKUP_ELEM: libc::c_int = 1;
const CMD_MAP_UPDATE_ELEM: libc::c_int = 2;
const CMD_PROG_LOAD: libc::c_int = 5;
const CMD_PROG_TEST_RUN: libc::c_int = 10;
const CMD_LINK_CREATE: libc::c_int = 28;

/// `BPF_MAP_TYPE_ARRAY`.
pub const MAP_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_XSKMAP`.
pub const MAP_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
pub const PROG_XDP: u32 = 6;
/// `BPF_XDP` attach type.
pub const ATTACH_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: generic XDP.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// A zeroed `union bpf_attr`.
#[repr(C, align(8))]
struct Attr([u8; 144]);

impl Attr {
    fn new() -> Self {
        Attr([0; 144])
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn get_u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.0[off..off + 4].try_into().expect("4 bytes"))
    }
    fn name(&mut self, off: usize, name: &str) -> &mut Self {
        let n = name.len().min(15);
        self.0[off..off + n].copy_from_slice(&name.as_bytes()[..n]);
        self
    }
}

fn sys_bpf(cmd: libc::c_int, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, 8-aligned, 144-byte buffer laid out as `union bpf_attr`
    // for `cmd`; every pointer stored in it points to memory the caller keeps alive for
    // the duration of the call. The kernel reads (and for some commands writes) at most
    // the size we pass.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), attr.0.len()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Creates a map.
pub fn map_create(
    kind: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, kind)
        .u32(4, key_size)
        .u32(8, value_size)
        .u32(12, max_entries)
        .name(28, name);
    sys_bpf(CMD_MAP_CREATE, &mut a).map(owned)
}

/// Writes `value` at `key`.
pub fn map_update(map: &OwnedFd, key: &[u8], value: &[u8]) -> io::Result<()> {
    let mut a = Attr::new();
    a.u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_ptr() as u64)
        .u64(24, 0);
    sys_bpf(CMD_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// Reads the value at `key` into `value` (which must be the map's value size).
pub fn map_lookup(map: &OwnedFd, key: &[u8], value: &mut [u8]) -> io::Result<()> {
    let mut a = Attr::new();
    a.u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_mut_ptr() as u64);
    sys_bpf(CMD_MAP_LOOKUP_ELEM, &mut a).map(|_| ())
}

/// Loads an XDP program; on rejection the error carries the verifier's log.
pub fn prog_load_xdp(insns: &[Insn], name: &str) -> io::Result<OwnedFd> {
    let code: Vec<u8> = insns.iter().flat_map(|i| i.encode()).collect();
    let license = b"Dual MIT/GPL\0";
    let mut log = vec![0u8; 64 * 1024];
    let mut a = Attr::new();
    a.u32(0, PROG_XDP)
        .u32(4, insns.len() as u32)
        .u64(8, code.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(24, 1)
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64)
        .name(48, name);
    match sys_bpf(CMD_PROG_LOAD, &mut a) {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: Vec<&str> = text.lines().rev().take(12).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            Err(io::Error::new(
                e.kind(),
                format!(
                    "program rejected ({e}); verifier says:\n{}",
                    tail.join("\n")
                ),
            ))
        }
    }
}

/// Runs the program once on `frame` (`BPF_PROG_TEST_RUN`); returns its verdict.
pub fn prog_test_run(prog: &OwnedFd, frame: &[u8]) -> io::Result<u32> {
    let mut out = vec![0u8; frame.len() + 256];
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(8, frame.len() as u32)
        .u32(12, out.len() as u32)
        .u64(16, frame.as_ptr() as u64)
        .u64(24, out.as_mut_ptr() as u64)
        .u32(32, 1);
    sys_bpf(CMD_PROG_TEST_RUN, &mut a)?;
    Ok(a.get_u32(4))
}

/// Attaches an XDP program to an interface through a BPF link; the attachment lasts as
/// long as the returned descriptor (the kernel drops it when the process dies).
pub fn link_create_xdp(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, ATTACH_XDP)
        .u32(12, flags);
    sys_bpf(CMD_LINK_CREATE, &mut a).map(owned)
}
