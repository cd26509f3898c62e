//! The binaries a test runs, got through cargo: a test of one crate that needs another
//! crate's binary (or an example) asks cargo to build it, in the profile and target
//! directory of the running test, once per test process. Cargo releases its build lock
//! before it runs tests, and an up-to-date target is a no-op, so this costs a fraction of
//! a second when the workspace is built and makes `cargo test -p <crate>` work on its own.
//!
//! A crate's own binaries need none of this: its tests use `env!("CARGO_BIN_EXE_<name>")`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Targets this process has already had cargo build.
static BUILT: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// The package a binary named after its package belongs to: every package is named
/// `ufrag-<name>`, and its binary drops the prefix (`relay-mio` of `ufrag-relay-mio`)
/// unless it is the prefix that keeps it from shadowing a system tool (`ufrag-perf`).
fn package_of(binary: &str) -> String {
    if binary.starts_with("ufrag-") {
        binary.to_string()
    } else {
        format!("ufrag-{binary}")
    }
}

/// The binary `name` of the workspace package named after it (`relay-mio`,
/// `relay-afxdp`, `transceiver`, `ufrag-perf`), built if needed.
pub fn bin(name: &str) -> PathBuf {
    build(&package_of(name), &["--bin", name]);
    profile_dir().join(name)
}

/// The binary `name` of workspace package `package` (`model-echo` of
/// `ufrag-model-servers`), built if needed.
pub fn package_bin(package: &str, name: &str) -> PathBuf {
    build(package, &["--bin", name]);
    profile_dir().join(name)
}

/// Binary `binary`'s twin with fault injection compiled in (`<binary>-faults`, built
/// with `--features fault-injection`; the binary itself never has it), built if needed.
pub fn faults_bin(binary: &str) -> PathBuf {
    let name = format!("{binary}-faults");
    build(
        &package_of(binary),
        &["--bin", &name, "--features", "fault-injection"],
    );
    profile_dir().join(name)
}

/// The example `name` of `package`, built if needed.
pub fn example(package: &str, name: &str) -> PathBuf {
    build(package, &["--example", name]);
    profile_dir().join("examples").join(name)
}

/// `target/<profile>` of the running test executable (`target/<profile>/deps/<test>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    let mut dir = exe.parent().expect("a directory").to_path_buf();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    dir
}

/// The cargo flag that selects the profile whose output directory is `dir`.
fn profile_flags(dir: &Path) -> Vec<String> {
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => vec![],
        Some("release") => vec!["--release".into()],
        Some(other) => vec!["--profile".into(), other.into()],
    }
}

fn build(package: &str, target: &[&str]) {
    let key = format!("{package} {}", target.join(" "));
    let mut built = BUILT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if built.get_or_insert_with(HashSet::new).contains(&key) {
        return;
    }
    let dir = profile_dir();
    let target_dir = dir.parent().expect("target directory");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(["build", "--quiet", "--locked"])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .args(profile_flags(&dir))
        .args(["-p", package])
        .args(target)
        .status()
        .unwrap_or_else(|e| panic!("running {cargo} to build {key}: {e}"));
    assert!(status.success(), "cargo could not build {key}");
    built.get_or_insert_with(HashSet::new).insert(key);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_named_after_its_package_finds_it() {
        assert_eq!(package_of("relay-mio"), "ufrag-relay-mio");
        assert_eq!(package_of("transceiver"), "ufrag-transceiver");
        assert_eq!(package_of("ufrag-perf"), "ufrag-perf");
    }

    #[test]
    fn the_profile_follows_the_output_directory() {
        assert!(profile_flags(Path::new("/w/target/debug")).is_empty());
        assert_eq!(profile_flags(Path::new("/w/target/release")), ["--release"]);
        assert_eq!(
            profile_flags(Path::new("/w/target/bench-fast")),
            ["--profile", "bench-fast"]
        );
    }
}
