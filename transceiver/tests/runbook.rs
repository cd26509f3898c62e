//! `docs/runbook.md` is what the code says: every reason of every counted family (the
//! relay's drops and ICE-TCP closes, the transceiver's drops, signaling refusals, session
//! ends and model messages) with its documentation and its entry. Regenerate with
//! `UFRAG_WRITE_RUNBOOK=1 cargo test -p transceiver --test runbook`.

use std::path::Path;

#[test]
fn the_committed_runbook_is_the_one_the_code_generates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/runbook.md");
    let generated = transceiver::runbook::render();
    if std::env::var_os("UFRAG_WRITE_RUNBOOK").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/runbook.md differs from what the code says: regenerate it with \
         `UFRAG_WRITE_RUNBOOK=1 cargo test -p transceiver --test runbook` and commit it"
    );
}

#[test]
fn every_reason_has_a_row_with_its_meaning_and_an_action() {
    let page = transceiver::runbook::render();
    let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("| `")).collect();
    let reasons = ufrag_common::metrics::DropReason::COUNT
        + ufrag_common::metrics::TcpCloseReason::COUNT
        + transceiver::metrics::DropReason::COUNT
        + transceiver::metrics::HttpRefusal::COUNT
        + transceiver::metrics::EndReason::COUNT
        + transceiver::metrics::ModelDrop::COUNT
        + transceiver::model_wire::DecodeError::COUNT;
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
}
