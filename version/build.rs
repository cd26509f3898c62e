//! Stamps the build with the commit it is built from, for `--version`: `UFRAG_COMMIT` when
//! set (a build from a source archive, which has no git), else `git rev-parse` of the
//! checkout, else `unknown`. Cargo re-runs this when HEAD or a branch moves. A new stamp
//! rebuilds this crate and the packages that print it (the relays, the transceiver, the
//! model servers, ufrag-perf) in the profile being built: a clean build pays nothing, a
//! developer's next build after a commit pays those packages again.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=UFRAG_COMMIT");
    let given = std::env::var("UFRAG_COMMIT").ok().filter(|c| !c.is_empty());
    if let Some(c) = &given {
        assert!(
            (7..=40).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_hexdigit()),
            "UFRAG_COMMIT={c}: not a commit id (7 to 40 hex digits)"
        );
    }
    let commit = given
        .or_else(commit_from_git)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=UFRAG_BUILD_COMMIT={commit}");
}

/// The checked-out commit (12 hex digits), watching the files that say which it is: HEAD,
/// the branches (a directory: Cargo watches every file under it) and the packed refs, each
/// where git keeps it (a linked worktree keeps its HEAD apart from the branches).
fn commit_from_git() -> Option<String> {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    for file in ["HEAD", "refs/heads", "packed-refs"] {
        if let Some(path) = git(
            &dir,
            &["rev-parse", "--path-format=absolute", "--git-path", file],
        ) {
            watch(Path::new(&path));
        }
    }
    git(&dir, &["rev-parse", "--short=12", "HEAD"])
}

/// Re-run when `path` changes; a path that does not exist is not watched (Cargo would
/// re-run every build for it).
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// What `git ARGS` prints in `dir`, trimmed; `None` when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
