//! The version line every ufrag-relay binary prints for `--version`: the workspace's
//! version and the commit it was built from (`build.rs` says how that is found).
#![forbid(unsafe_code)]

/// `0.1.0 (commit 0123456789ab)`; `(commit unknown)` for a build outside a git checkout
/// without `UFRAG_COMMIT`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("UFRAG_BUILD_COMMIT"),
    ")"
);

#[cfg(test)]
mod tests {
    #[test]
    fn the_line_names_the_version_and_a_commit() {
        let (version, rest) = super::VERSION.split_once(' ').unwrap();
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
        let commit = rest
            .strip_prefix("(commit ")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap();
        assert!(
            commit == "unknown"
                || ((7..=40).contains(&commit.len())
                    && commit.bytes().all(|b| b.is_ascii_hexdigit())),
            "{commit}"
        );
    }
}
