//! `docs/runbook.md` and `deploy/monitoring/{alerts,prometheus-rule}.yaml` are what the
//! code says: every
//! reason of every counted family (the relay's drops and ICE-TCP closes, the
//! transceiver's drops, signaling refusals, session ends and model messages) with its
//! documentation and its entry, and every alert with its rule. Regenerate both with
//! `UFRAG_WRITE_RUNBOOK=1 cargo test -p ufrag-transceiver --test runbook`. The rules pass
//! `promtool check rules`, and `promtool test rules` fires each alert where it should
//! (`deploy/monitoring/alerts.test.yaml`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repository(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// Fails unless the committed file at `path` is `generated` (or writes it, when asked).
fn committed_is_generated(path: &str, generated: &str) {
    let file = repository(path);
    if std::env::var_os("UFRAG_WRITE_RUNBOOK").is_some() {
        std::fs::write(&file, generated).unwrap();
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        committed == generated,
        "{path} differs from what the code says: regenerate it with \
         `UFRAG_WRITE_RUNBOOK=1 cargo test -p ufrag-transceiver --test runbook` and commit it"
    );
}

#[test]
fn the_committed_runbook_and_alert_rules_are_the_ones_the_code_generates() {
    committed_is_generated("docs/runbook.md", &ufrag_transceiver::runbook::render());
    committed_is_generated(
        "deploy/monitoring/alerts.yaml",
        &ufrag_transceiver::runbook::render_alert_rules(),
    );
    committed_is_generated(
        "deploy/monitoring/prometheus-rule.yaml",
        &ufrag_transceiver::runbook::render_prometheus_rule(),
    );
}

#[test]
fn every_reason_has_a_row_with_its_meaning_and_an_action() {
    let page = ufrag_transceiver::runbook::render();
    let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("| `")).collect();
    let reasons = ufrag_common::reasons::DropReason::COUNT
        + ufrag_common::reasons::CacheError::COUNT
        + ufrag_common::reasons::TcpCloseReason::COUNT
        + ufrag_transceiver::metrics::DropReason::COUNT
        + ufrag_transceiver::metrics::HttpRefusal::COUNT
        + ufrag_transceiver::metrics::EndReason::COUNT
        + ufrag_transceiver::metrics::ModelDrop::COUNT
        + ufrag_model_protocol::wire::DecodeError::COUNT
        + ufrag_transceiver::session_token::TokenRefusal::COUNT;
    assert_eq!(rows.len(), reasons, "one row per reason");
    for row in rows {
        let cells: Vec<&str> = row.split(" | ").collect();
        assert_eq!(cells.len(), 4, "four cells: {row}");
        assert!(
            cells[1].len() > 10,
            "a meaning from the reason's doc: {row}"
        );
        assert!(cells[3].len() > 20, "an action: {row}");
    }
    for alert in ufrag_transceiver::runbook::ALERTS {
        assert!(
            page.contains(&format!("\n### {}\n", alert.name)),
            "{} has its section, the runbook_url's anchor",
            alert.name
        );
    }
}

#[test]
fn every_runbook_link_is_absolute_and_lands_on_its_alerts_heading() {
    use ufrag_transceiver::runbook::{ALERTS, RUNBOOK_BASE, runbook_url};
    let page = ufrag_transceiver::runbook::render();
    let rules = ufrag_transceiver::runbook::render_alert_rules();
    for alert in ALERTS {
        let url = runbook_url(alert);
        let (base, anchor) = url.split_once('#').expect("an anchor");
        assert_eq!(base, RUNBOOK_BASE);
        assert!(
            base.starts_with("https://") && base.ends_with("/runbook.md"),
            "{url}"
        );
        // GitHub and GitLab make a heading's anchor of its text in lower case.
        assert!(
            page.lines().any(|l| l
                .strip_prefix("### ")
                .is_some_and(|h| h.to_lowercase() == anchor)),
            "{url}: no heading `{anchor}` in docs/runbook.md"
        );
        assert!(
            rules.contains(&format!("runbook_url: {url}\n")),
            "{url} in alerts.yaml"
        );
    }
    // The kustomization's one setting starts from the same base, so the Operator's rules
    // and alerts.yaml point at the same page until a team changes it.
    let kustomization =
        std::fs::read_to_string(repository("deploy/monitoring/kustomization.yaml")).unwrap();
    assert!(
        kustomization.contains(&format!("- runbook-base={RUNBOOK_BASE}\n")),
        "deploy/monitoring/kustomization.yaml sets runbook-base={RUNBOOK_BASE}"
    );
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repository("deploy/monitoring"))
        .output()
        .expect("promtool must be installed (scripts/test.sh installs Debian's prometheus)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{said}");
    said
}

#[test]
fn the_alert_rules_pass_promtool_and_each_alert_is_tested_firing() {
    let checked = promtool(&["check", "rules", "alerts.yaml"]);
    let count = ufrag_transceiver::runbook::ALERTS.len();
    assert!(
        checked.contains(&format!("SUCCESS: {count} rules found")),
        "{checked}"
    );
    let tested = promtool(&["test", "rules", "alerts.test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a case where it fires (an expected alert with its labels).
    let cases = std::fs::read_to_string(repository("deploy/monitoring/alerts.test.yaml")).unwrap();
    for alert in ufrag_transceiver::runbook::ALERTS {
        let firing = cases.split("- eval_time:").any(|case| {
            case.contains(&format!("alertname: {}\n", alert.name)) && case.contains("exp_labels")
        });
        assert!(firing, "{} has a promtool case where it fires", alert.name);
    }
}
