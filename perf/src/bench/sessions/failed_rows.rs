//! The rows a subcommand's Markdown report marks as failed, and the exit code they give:
//! every `failed: …` a report shows fails the run, one line per row on stderr naming the
//! report, the row and the reason. Read from the report itself, so a row cannot say
//! "failed" while the process exits 0. (Shared by `perf loopback`, `sessions`, `model`
//! and `resilience`.)

use std::path::Path;

/// What marks a failed row: a table cell, or a line (after an optional list dash), that
/// begins with it.
const FAILED: &str = "failed: ";

/// One row a report marks as failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedRow {
    /// The row: a table row's first cell, or for a line outside a table the heading it
    /// sits under.
    pub row: String,
    /// The section (`##` heading or deeper) a table row sits in: two tables of one
    /// report may have rows of the same name. `None` for a line, whose row is its
    /// heading, and under the report's title.
    pub section: Option<String>,
    /// Why, as the report words it (after `failed: `).
    pub reason: String,
}

impl FailedRow {
    /// The line the subcommand `command` prints for it, its report at `report`:
    /// `ufrag-perf sessions (target/perf/sessions.md): FAILED row "…" [in "…"]: …`.
    pub fn line(&self, command: &str, report: &Path) -> String {
        let section = self
            .section
            .as_ref()
            .map_or(String::new(), |s| format!(" in \"{s}\""));
        format!(
            "ufrag-perf {command} ({}): FAILED row \"{}\"{section}: {}",
            report.display(),
            self.row,
            self.reason
        )
    }
}

/// Every row `markdown` marks as failed, in the report's order: a table row with a cell
/// that begins `failed: ` (the row is its first cell), or a line `failed: …` or
/// `- failed: …` (the row is the heading above it).
pub fn failed_rows(markdown: &str) -> Vec<FailedRow> {
    let mut heading = String::from("(before any heading)");
    // The heading if it is a section's (`##` or deeper), not the report's title.
    let mut section = None;
    let mut failed = Vec::new();
    for line in markdown.lines().map(str::trim) {
        if line.starts_with('#') {
            let text = line.trim_start_matches('#');
            heading = text.trim().to_string();
            section = (line.len() - text.len() >= 2).then(|| heading.clone());
        } else if line.starts_with('|') {
            let inner = line.trim_start_matches('|').trim_end_matches('|');
            let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
            let failed_cell = cells
                .iter()
                .enumerate()
                .find_map(|(at, cell)| Some((at, cell.strip_prefix(FAILED)?)));
            if let Some((at, reason)) = failed_cell {
                // A table whose first cell is the failure itself has no row name of its
                // own: its heading names it.
                let (row, section) = match cells.first() {
                    Some(first) if at > 0 && !first.is_empty() => {
                        ((*first).to_string(), section.clone())
                    }
                    _ => (heading.clone(), None),
                };
                failed.push(FailedRow {
                    row,
                    section,
                    reason: reason.trim().to_string(),
                });
            }
        } else if let Some(reason) = line.strip_prefix("- ").unwrap_or(line).strip_prefix(FAILED) {
            failed.push(FailedRow {
                row: heading.clone(),
                section: None,
                reason: reason.trim().to_string(),
            });
        }
    }
    failed
}

/// Prints a line on stderr for each row `markdown` (the report of `ufrag-perf command`,
/// written to `report`) marks as failed; the exit code: 1 if any, else 0.
pub fn exit_code(command: &str, report: &Path, markdown: &str) -> i32 {
    let failed = failed_rows(markdown);
    for row in &failed {
        eprintln!("{}", row.line(command, report));
    }
    i32::from(!failed.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sessions report of a run whose ICE-TCP rows failed (the shape
    /// `cmd::sessions` writes), trimmed.
    const FAILED_SESSIONS_REPORT: &str = "\
# WebRTC sessions: setup time and echo capacity

| path | sessions | connected p50 / p99 ms | first echo p50 / p99 ms | ping RTT p50 / p99 ms |
|---|---:|---|---|---|
| through relay-mio | 20 | 3.4 / 4.9 | 4.1 / 5.6 | 0.18 / 0.32 |
| through relay-mio over ICE-TCP | failed: session 8: no echo within 10s | | | |
| direct | 20 | 3.1 / 6.1 | 3.8 / 6.8 | 0.10 / 0.20 |

## The ICE-TCP listener of one relay-mio worker

1000 connections opened one after the other from one address.

failed: 8 of 1000 connections bound within 30 s

## Headless Chromium on the demo page

| path | sessions | POST → answer applied ms |
|---|---:|---:|
| through relay-mio | failed: chromium is not on PATH | |

## Round trip of an `events` message

- failed: round 2, built-in echo: session 3: no echo within 10s
";

    #[test]
    fn every_failed_row_is_found_with_its_row_and_reason() {
        assert_eq!(
            failed_rows(FAILED_SESSIONS_REPORT),
            vec![
                FailedRow {
                    row: "through relay-mio over ICE-TCP".into(),
                    section: None,
                    reason: "session 8: no echo within 10s".into(),
                },
                FailedRow {
                    row: "The ICE-TCP listener of one relay-mio worker".into(),
                    section: None,
                    reason: "8 of 1000 connections bound within 30 s".into(),
                },
                FailedRow {
                    row: "through relay-mio".into(),
                    section: Some("Headless Chromium on the demo page".into()),
                    reason: "chromium is not on PATH".into(),
                },
                FailedRow {
                    row: "Round trip of an `events` message".into(),
                    section: None,
                    reason: "round 2, built-in echo: session 3: no echo within 10s".into(),
                },
            ]
        );
    }

    #[test]
    fn a_report_whose_rows_all_held_has_none_and_exits_zero() {
        let passed = "# Report\n\n| path | sessions |\n|---|---:|\n| direct | 20 |\n\n\
                      Limit: the relay worker used its core: this is its capacity.\n\
                      A round that failed would be listed here; none did.\n";
        assert_eq!(failed_rows(passed), vec![]);
        assert_eq!(exit_code("sessions", Path::new("s.md"), passed), 0);
    }

    #[test]
    fn the_word_failed_inside_prose_or_a_cell_is_not_a_failed_row() {
        let prose = "# R\n\nThe run failed: no, this sentence only mentions it.\n\n\
                     | attack | refused |\n|---|---|\n| replay | relay drops: `auth_failed: 3` |\n\
                     | failed authentications | 255160 datagrams |\n";
        assert_eq!(failed_rows(prose), vec![]);
    }

    #[test]
    fn a_failed_row_makes_the_exit_code_non_zero_and_its_line_names_everything() {
        assert_eq!(
            exit_code(
                "sessions",
                Path::new("target/perf/sessions.md"),
                FAILED_SESSIONS_REPORT
            ),
            1
        );
        let failed = failed_rows(FAILED_SESSIONS_REPORT);
        let report = Path::new("target/perf/sessions.md");
        assert_eq!(
            failed[0].line("sessions", report),
            "ufrag-perf sessions (target/perf/sessions.md): FAILED row \
             \"through relay-mio over ICE-TCP\": session 8: no echo within 10s"
        );
        assert_eq!(
            failed[2].line("sessions", report),
            "ufrag-perf sessions (target/perf/sessions.md): FAILED row \"through relay-mio\" \
             in \"Headless Chromium on the demo page\": chromium is not on PATH"
        );
    }

    #[test]
    fn a_table_of_failures_without_row_names_is_named_by_its_heading() {
        let report = "## Rows that failed\n\n| failed: forwarded nothing |\n";
        assert_eq!(
            failed_rows(report),
            vec![FailedRow {
                row: "Rows that failed".into(),
                section: None,
                reason: "forwarded nothing".into(),
            }]
        );
    }
}
