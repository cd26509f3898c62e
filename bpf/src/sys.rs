//! A thin layer on the raw `bpf(2)` syscall (maps, test runs, links, object info): the
//! only unsafe code of this crate.
//!
//! Each command fills a zeroed `union bpf_attr` (144 bytes on this kernel ABI) at the
//! field offsets of `include/uapi/linux/bpf.h`, calls the syscall and wraps any new file
//! descriptor in an [`OwnedFd`], so maps, programs and links close when dropped. A
//! [`Map`] remembers its key and value sizes and every access checks the caller's
//! buffers against them: the kernel reads and writes exactly those sizes.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const CMD_MAP_CREATE: libc::c_int = 0;
const CMD_MAP_LOOKUP_ELEM: libc::c_int = 1;
const CMD_MAP_UPDATE_ELEM: libc::c_int = 2;
const CMD_MAP_DELETE_ELEM: libc::c_int = 3;
const CMD_PROG_TEST_RUN: libc::c_int = 10;
const CMD_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const CMD_LINK_CREATE: libc::c_int = 28;

/// `BPF_MAP_TYPE_HASH`.
pub const MAP_HASH: u32 = 1;
/// `BPF_MAP_TYPE_ARRAY`.
pub const MAP_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_PERCPU_HASH`: a hash map with one value per possible CPU per key.
pub const MAP_PERCPU_HASH: u32 = 5;
/// `BPF_MAP_TYPE_PERCPU_ARRAY`: one value per possible CPU, no atomics needed.
pub const MAP_PERCPU_ARRAY: u32 = 6;
/// `BPF_MAP_TYPE_XSKMAP`.
pub const MAP_XSKMAP: u32 = 17;
/// `BPF_XDP` attach type.
pub const ATTACH_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: generic XDP.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// `BPF_F_TEST_XDP_LIVE_FRAMES`: frames the program returns `XDP_TX` or `XDP_REDIRECT`
/// for are really transmitted.
const F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// The kernel's cap on a live-frames batch (`TEST_XDP_MAX_BATCH`).
pub const LIVE_FRAMES_MAX_BATCH: u32 = 256;

/// XDP verdicts (`enum xdp_action`).
pub mod action {
    /// Something went wrong (counted by the kernel's xdp_exception tracepoint).
    pub const ABORTED: u32 = 0;
    /// Drop.
    pub const DROP: u32 = 1;
    /// To the kernel's stack.
    pub const PASS: u32 = 2;
    /// Out of the interface it arrived on.
    pub const TX: u32 = 3;
    /// Redirected (to an AF_XDP socket or another interface).
    pub const REDIRECT: u32 = 4;
}

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
    // the duration of the call and sized as the kernel will access it (checked by each
    // caller below). The kernel reads (and for some commands writes) at most the size we
    // pass.
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

fn size_error(what: &str, got: usize, want: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what} is {got} bytes; the map's is {want}"),
    )
}

/// A BPF map and the sizes the kernel will read and write through it.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    kind: u32,
    key_size: usize,
    value_size: usize,
    /// Values per key: the possible CPUs for a per-CPU map (read once, at creation, so
    /// no access reads sysfs), else 1.
    values_per_key: usize,
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock `bpf_ktime_get_ns` reads in a program
/// (and [`std::time::Instant`]'s), so user space can compare its stamps with them.
pub fn ktime_now() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the whole call, and clock_gettime
    // writes only into it. CLOCK_MONOTONIC exists on every Linux, so it cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`, e.g. `0-1`): how
/// many values a per-CPU map holds per key.
pub fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut count = 0;
    for range in text.trim().split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let parse = |s: &str| {
            s.parse::<usize>()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{text:?}: {e}")))
        };
        count += parse(hi)? - parse(lo)? + 1;
    }
    Ok(count)
}

/// What the kernel says about a map (`struct bpf_map_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapInfo {
    /// `BPF_MAP_TYPE_*`.
    pub kind: u32,
    /// The kernel's id of the map (what `bpftool map dump id` takes).
    pub id: u32,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes (one CPU's, for a per-CPU map).
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
    /// The BTF type of the key, 0 when the map was created without BTF.
    pub btf_key_type_id: u32,
    /// The BTF type of the value, 0 when the map was created without BTF.
    pub btf_value_type_id: u32,
}

/// Reads `struct bpf_*_info` of `fd` into `info`.
fn object_info(fd: &OwnedFd, info: &mut [u8]) -> io::Result<()> {
    let mut a = Attr::new();
    a.u32(0, fd.as_raw_fd() as u32)
        .u32(4, info.len() as u32)
        .u64(8, info.as_mut_ptr() as u64);
    sys_bpf(CMD_OBJ_GET_INFO_BY_FD, &mut a).map(|_| ())
}

fn u32_at(bytes: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(bytes[off..off + 4].try_into().expect("4 bytes"))
}

/// The kernel's description of the map `fd`.
pub fn map_info(fd: &OwnedFd) -> io::Result<MapInfo> {
    // struct bpf_map_info: type, id, key_size, value_size, max_entries, map_flags,
    // name[16], ifindex, btf_vmlinux_value_type_id, netns_dev, netns_ino, btf_id,
    // btf_key_type_id (at 68), btf_value_type_id (72), btf_vmlinux_id, map_extra.
    let mut info = [0u8; 88];
    object_info(fd, &mut info)?;
    Ok(MapInfo {
        kind: u32_at(&info, 0),
        id: u32_at(&info, 4),
        key_size: u32_at(&info, 8),
        value_size: u32_at(&info, 12),
        max_entries: u32_at(&info, 16),
        btf_key_type_id: u32_at(&info, 68),
        btf_value_type_id: u32_at(&info, 72),
    })
}

impl Map {
    /// Takes over a map some other loader created (an ELF object's, say), after checking
    /// that the kernel's description of it is the one the caller's buffers are sized
    /// for: its type and its key and value sizes.
    pub fn adopt(fd: OwnedFd, kind: u32, key_size: u32, value_size: u32) -> io::Result<Map> {
        let info = map_info(&fd)?;
        if (info.kind, info.key_size, info.value_size) != (kind, key_size, value_size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the map is of type {} with {}-byte keys and {}-byte values; \
                     expected type {kind}, {key_size} and {value_size}",
                    info.kind, info.key_size, info.value_size
                ),
            ));
        }
        Map::with_sizes(fd, kind, key_size, value_size)
    }

    /// A map's descriptor with the sizes its buffers must have; a per-CPU map's values per
    /// key are the possible CPUs, read once here so that no access reads sysfs.
    fn with_sizes(fd: OwnedFd, kind: u32, key_size: u32, value_size: u32) -> io::Result<Map> {
        let values_per_key = if matches!(kind, MAP_PERCPU_ARRAY | MAP_PERCPU_HASH) {
            possible_cpus()?
        } else {
            1
        };
        Ok(Map {
            fd,
            kind,
            key_size: key_size as usize,
            value_size: value_size as usize,
            values_per_key,
        })
    }

    /// The kernel's description of this map.
    pub fn info(&self) -> io::Result<MapInfo> {
        map_info(&self.fd)
    }

    /// Creates a map.
    pub fn create(
        kind: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        name: &str,
    ) -> io::Result<Map> {
        let mut a = Attr::new();
        a.u32(0, kind)
            .u32(4, key_size)
            .u32(8, value_size)
            .u32(12, max_entries)
            .name(28, name);
        let fd = sys_bpf(CMD_MAP_CREATE, &mut a).map(owned)?;
        Map::with_sizes(fd, kind, key_size, value_size)
    }

    /// The bytes the kernel reads or writes for one value: `value_size`, or for a per-CPU
    /// map `value_size` rounded up to 8 once per possible CPU.
    pub fn value_buffer_len(&self) -> io::Result<usize> {
        Ok(self.value_stride() * self.values_per_key)
    }

    fn is_per_cpu(&self) -> bool {
        matches!(self.kind, MAP_PERCPU_ARRAY | MAP_PERCPU_HASH)
    }

    /// How many values one key holds: one per possible CPU for a per-CPU map, else one.
    pub fn values_per_key(&self) -> usize {
        self.values_per_key
    }

    /// The distance between two CPUs' values in a value buffer (`value_size`, rounded up
    /// to 8 for a per-CPU map).
    pub fn value_stride(&self) -> usize {
        if self.is_per_cpu() {
            self.value_size.div_ceil(8) * 8
        } else {
            self.value_size
        }
    }

    fn check(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        if key.len() != self.key_size {
            return Err(size_error("the key", key.len(), self.key_size));
        }
        let want = self.value_buffer_len()?;
        if value.len() != want {
            return Err(size_error("the value buffer", value.len(), want));
        }
        Ok(())
    }

    /// Writes `value` at `key` (for a per-CPU map: one value per possible CPU).
    pub fn update(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.check(key, value)?;
        let mut a = Attr::new();
        a.u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64)
            .u64(16, value.as_ptr() as u64)
            .u64(24, 0);
        sys_bpf(CMD_MAP_UPDATE_ELEM, &mut a).map(|_| ())
    }

    /// Reads the value at `key` into `value` (its length must be
    /// [`Map::value_buffer_len`]).
    pub fn lookup(&self, key: &[u8], value: &mut [u8]) -> io::Result<()> {
        self.check(key, value)?;
        let mut a = Attr::new();
        a.u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64)
            .u64(16, value.as_mut_ptr() as u64);
        sys_bpf(CMD_MAP_LOOKUP_ELEM, &mut a).map(|_| ())
    }

    /// Removes `key`; an error of kind `NotFound` if it was not there.
    pub fn delete(&self, key: &[u8]) -> io::Result<()> {
        if key.len() != self.key_size {
            return Err(size_error("the key", key.len(), self.key_size));
        }
        let mut a = Attr::new();
        a.u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64);
        sys_bpf(CMD_MAP_DELETE_ELEM, &mut a).map(|_| ())
    }

    /// The `u64` counters at array index `index`, one per possible CPU (one in all for
    /// an ordinary array).
    pub fn counters(&self, index: u32) -> io::Result<Vec<u64>> {
        let mut value = vec![0u8; self.value_buffer_len()?];
        self.lookup(&index.to_ne_bytes(), &mut value)?;
        let stride = self.value_stride();
        Ok(value
            .chunks(stride)
            .map(|c| u64::from_ne_bytes(c[..8].try_into().expect("a u64 counter")))
            .collect())
    }

    /// The fd, for a program's map loads.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The fd.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

/// Runs the program once on `frame` (`BPF_PROG_TEST_RUN`); returns its verdict.
pub fn prog_test_run(prog: &OwnedFd, frame: &[u8]) -> io::Result<u32> {
    prog_test_run_output(prog, frame).map(|(verdict, _)| verdict)
}

/// Runs the program once on `frame`; returns its verdict and the frame as it left it.
pub fn prog_test_run_output(prog: &OwnedFd, frame: &[u8]) -> io::Result<(u32, Vec<u8>)> {
    let mut out = vec![0u8; frame.len() + 256];
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(8, frame.len() as u32)
        .u32(12, out.len() as u32)
        .u64(16, frame.as_ptr() as u64)
        .u64(24, out.as_mut_ptr() as u64)
        .u32(32, 1);
    sys_bpf(CMD_PROG_TEST_RUN, &mut a)?;
    // The kernel wrote data_size_out bytes (at most the buffer we gave it).
    let written = (a.get_u32(12) as usize).min(out.len());
    out.truncate(written);
    Ok((a.get_u32(4), out))
}

/// Runs the program `repeat` times on copies of `frame` as if they had arrived on
/// `ifindex` queue `rx_queue`, with live frames (`BPF_F_TEST_XDP_LIVE_FRAMES`): frames
/// it returns `XDP_TX` for leave through `ifindex`, in batches of `batch` (at most
/// [`LIVE_FRAMES_MAX_BATCH`]). This is the mechanism behind xdp-trafficgen.
pub fn prog_run_live(
    prog: &OwnedFd,
    frame: &[u8],
    ifindex: u32,
    rx_queue: u32,
    repeat: u32,
    batch: u32,
) -> io::Result<()> {
    if batch == 0 || batch > LIVE_FRAMES_MAX_BATCH {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("batch {batch}: 1 to {LIVE_FRAMES_MAX_BATCH}"),
        ));
    }
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
    // egress_ifindex (u32 each); live mode wants data 0 and data_end = the frame's length.
    let mut ctx = [0u8; 24];
    ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
    ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
    ctx[16..20].copy_from_slice(&rx_queue.to_ne_bytes());
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(8, frame.len() as u32)
        .u64(16, frame.as_ptr() as u64)
        .u32(32, repeat)
        .u32(40, ctx.len() as u32)
        .u64(48, ctx.as_ptr() as u64)
        .u32(64, F_TEST_XDP_LIVE_FRAMES)
        .u32(72, batch);
    sys_bpf(CMD_PROG_TEST_RUN, &mut a).map(|_| ())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn possible_cpus_counts_at_least_the_online_ones() {
        let n = possible_cpus().expect("sysfs");
        assert!(n >= std::thread::available_parallelism().map_or(1, |p| p.get()));
    }

    #[test]
    fn a_buffer_of_the_wrong_size_is_refused_before_the_kernel_sees_it() {
        // Needs CAP_BPF to create the map; CI runs as root.
        let map = Map::create(MAP_ARRAY, 4, 8, 2, "size_test").expect("map (needs root)");
        let key = 0u32.to_ne_bytes();
        let mut short = [0u8; 4];
        let e = map.lookup(&key, &mut short).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(map.update(&key, &[1u8; 16]).is_err(), "too long a value");
        assert!(map.update(&[0u8; 2], &[0u8; 8]).is_err(), "too short a key");
        map.update(&1u32.to_ne_bytes(), &7u64.to_ne_bytes())
            .expect("right sizes");
        assert_eq!(map.counters(1).expect("lookup"), vec![7]);
        let percpu = Map::create(MAP_PERCPU_ARRAY, 4, 8, 1, "percpu_test").expect("map");
        assert_eq!(
            percpu.counters(0).expect("lookup").len(),
            possible_cpus().unwrap()
        );
    }
}
