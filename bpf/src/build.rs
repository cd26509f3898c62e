//! Compiling the project's XDP programs from C, for the build scripts of the crates that
//! ship them: Debian's clang with `-target bpf`, BTF included (`-g`), warnings as errors.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `source` (a `.bpf.c` file) to `$OUT_DIR/<name>.o` and tells cargo to rebuild
/// when it or a header beside it changes. Panics with what to install when clang is
/// missing, and with clang's own output when the source does not compile: a build script
/// has no other way to fail.
pub fn compile_xdp(source: &Path) -> PathBuf {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let stem = source
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".c"))
        .expect("a .c source");
    let object = out_dir.join(format!("{stem}.o"));
    println!("cargo:rerun-if-changed={}", source.display());
    if let Some(dir) = source.parent() {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    // The object's byte order is the target's, not the building machine's.
    let target = match std::env::var("CARGO_CFG_TARGET_ENDIAN").as_deref() {
        Ok("big") => "bpfeb",
        _ => "bpfel",
    };
    // With a BPF target clang does not search the host's multiarch directory, where
    // Debian keeps <asm/types.h>.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = match arch.as_str() {
        "x86" => "i386-linux-gnu".to_string(),
        "arm" => "arm-linux-gnueabihf".to_string(),
        other => format!("{other}-linux-gnu"),
    };
    let multiarch = format!("/usr/include/{multiarch}");
    let output = Command::new("clang")
        .args(["-target", target, "-O2", "-g", "-Wall", "-Werror"])
        // The instruction set the programs were measured with (clang 14's default; later
        // clangs default to v3), and no type-based alias analysis: the programs write
        // keys a word at a time through byte arrays.
        .args(["-mcpu=v1", "-fno-strict-aliasing"])
        .arg("-I")
        .arg(&multiarch)
        .arg("-c")
        .arg(source)
        .arg("-o")
        .arg(&object)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running clang to compile {}: {e}; scripts/build-deps.sh installs clang \
                 and libbpf-dev",
                source.display()
            )
        });
    if !output.status.success() {
        panic!(
            "clang could not compile {}:\n{}{}",
            source.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    object
}
