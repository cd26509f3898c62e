//! Loading a BPF object that clang compiled (see [`crate::build`]): aya reads the ELF,
//! creates its maps with their BTF types (so `bpftool map dump` prints named fields),
//! sets the read-only globals a program is configured with (`const volatile` in C: the
//! verifier sees them as constants and prunes what they turn off) and loads the
//! programs asked for. What the caller keeps are plain descriptors: programs as
//! [`OwnedFd`]s and maps as [`Map`]s whose type and key and value sizes were checked
//! against the caller's layout.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::sys::Map;

/// A value a program's read-only global can be set to (integers and arrays of them).
pub use aya::Pod;
/// Includes a file with the alignment an ELF reader needs.
pub use aya::include_bytes_aligned;

/// The object clang built from `bpf/pass.bpf.c`.
static PASS_OBJECT: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/pass.bpf.o"));

/// `XDP_PASS` for everything: what a veth's far end needs before the `XDP_TX` frames or
/// AF_XDP transmissions of its near end can arrive.
pub fn pass_program() -> io::Result<OwnedFd> {
    ObjectLoader::default()
        .load(PASS_OBJECT, "bpf/pass.bpf.c's object")?
        .xdp_program("pass_all")
}

/// The settings of one load: map sizes and the globals' values.
#[derive(Debug)]
pub struct ObjectLoader<'a> {
    loader: aya::EbpfLoader<'a>,
}

impl Default for ObjectLoader<'_> {
    fn default() -> Self {
        ObjectLoader {
            loader: aya::EbpfLoader::new(),
        }
    }
}

fn error(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// `e` with every error beneath it (aya keeps the kernel's errno as a source: ENOMEM for a
/// map too large, EPERM without CAP_BPF), keeping the kind of the deepest `io::Error`.
fn error_chain(what: &str, e: &(dyn std::error::Error + 'static)) -> io::Error {
    let mut text = format!("{what}: {e}");
    let mut kind = io::ErrorKind::Other;
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            kind = io.kind();
        }
        source = cause.source();
    }
    io::Error::new(kind, text)
}

impl<'a> ObjectLoader<'a> {
    /// Gives map `name` room for `entries` entries, whatever the source declares.
    pub fn max_entries(mut self, name: &'a str, entries: u32) -> Self {
        self.loader.map_max_entries(name, entries);
        self
    }

    /// Sets the read-only global `name` (which must exist) to `value`.
    pub fn global<T: Pod>(mut self, name: &'a str, value: &'a T) -> Self {
        self.loader.override_global(name, value, true);
        self
    }

    /// Reads `object` and creates its maps; programs are loaded one by one with
    /// [`Object::xdp_program`]. `what` names the object in errors.
    pub fn load(mut self, object: &[u8], what: &str) -> io::Result<Object> {
        let ebpf = self
            .loader
            .load(object)
            .map_err(|e| error_chain(&format!("loading {what}"), &e))?;
        Ok(Object { ebpf })
    }
}

/// A loaded object: its maps exist; its programs load on demand.
#[derive(Debug)]
pub struct Object {
    ebpf: aya::Ebpf,
}

impl Object {
    /// Loads the XDP program `name` (the verifier's log tail in the error if it is
    /// refused) and returns its descriptor.
    pub fn xdp_program(&mut self, name: &str) -> io::Result<OwnedFd> {
        let program: &mut aya::programs::Xdp = self
            .ebpf
            .program_mut(name)
            .ok_or_else(|| error(name, "not in the object"))?
            .try_into()
            .map_err(|e| error(name, e))?;
        program.load().map_err(|e| match &e {
            aya::programs::ProgramError::LoadError { .. } => {
                error(&format!("the verifier on {name}"), verifier_log(&e))
            }
            other => error_chain(&format!("loading {name}"), other),
        })?;
        program
            .fd()
            .map_err(|e| error(name, e))?
            .as_fd()
            .try_clone_to_owned()
    }

    /// Map `name`, checked to be of `kind` (`BPF_MAP_TYPE_*`) with `key`- and
    /// `value`-byte keys and values.
    pub fn map(&self, name: &str, kind: u32, key: usize, value: usize) -> io::Result<Map> {
        let map = self
            .ebpf
            .map(name)
            .ok_or_else(|| error(name, "not in the object"))?;
        let fd = map_fd(map)
            .ok_or_else(|| error(name, "a map type this loader does not hand out"))?
            .try_clone_to_owned()?;
        let size = |n: usize| u32::try_from(n).map_err(|e| error(name, e));
        Map::adopt(fd, kind, size(key)?, size(value)?)
            .map_err(|e| error(&format!("{name} against the caller's layout"), e))
    }
}

/// The descriptor of a map of one of the types the project's programs use.
fn map_fd(map: &aya::maps::Map) -> Option<BorrowedFd<'_>> {
    use aya::maps::Map as M;
    match map {
        M::HashMap(data)
        | M::PerCpuHashMap(data)
        | M::Array(data)
        | M::PerCpuArray(data)
        | M::XskMap(data) => Some(data.fd().as_fd()),
        _ => None,
    }
}

/// The tail of the verifier's log when it refused a program, else the error itself.
fn verifier_log(e: &aya::programs::ProgramError) -> String {
    match e {
        aya::programs::ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let text = verifier_log.to_string();
            let tail: Vec<&str> = text.lines().rev().take(12).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("{io_error}; verifier says:\n{}", tail.join("\n"))
        }
        other => other.to_string(),
    }
}
