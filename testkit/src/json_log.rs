//! Reading the binaries' JSON logs (`--log-format json`) in tests.

/// One JSON log line (the only line `stderr` has), at level ERROR: a startup error with
/// `--log-format json`. Returns its message.
pub fn the_error(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    let line: serde_json::Value =
        serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {stderr}"));
    assert_eq!(line["level"], "ERROR", "{line}");
    assert!(line["timestamp"].is_string(), "{line}");
    line["fields"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message: {line}"))
        .to_string()
}
