//! `stratumc store check` through the binary: a healthy store exits 0, a
//! flipped byte in a step row exits 1 naming the run, a missing store exits
//! 2; the operator view of a damaged run is an error, never a wrong view.

use std::path::{Path, PathBuf};

use serde_json::Value;

mod support;

const AGENT: &str = r#"n=$(sed -n 's/.*increment \([0-9][0-9]*\).*/\1/p'); printf '{"output": {"x": %d}}' $((n + 1))"#;

/// A completed 30-step run in a fresh `STRATUM_HOME`; returns (dir, run id).
fn completed_run(tag: &str) -> (PathBuf, String) {
    let dir = support::scratch("store", tag);
    std::fs::write(dir.join("chain.stratum.yaml"), support::chain_spec(30)).unwrap();
    let home = dir.join("home");
    let (code, out, err) = support::stratumc_in(
        &dir,
        Some(&home),
        &[
            "run",
            "chain.stratum.yaml",
            "--inputs",
            r#"{"start": 0}"#,
            "--agent",
            AGENT,
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    (dir, doc["runId"].as_str().unwrap().to_string())
}

fn check(dir: &Path, format: &str) -> (i32, String, String) {
    support::stratumc_in(
        dir,
        Some(&dir.join("home")),
        &["store", "check", "--format", format],
    )
}

/// Flips one bit of the first stored copy of `needle` in the database file.
fn flip_in_file(db: &Path, needle: &[u8]) {
    let mut bytes = std::fs::read(db).unwrap();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the row is in the file");
    bytes[at + needle.len() - 1] ^= 0x01;
    std::fs::write(db, bytes).unwrap();
}

#[test]
fn a_healthy_store_passes_and_a_flipped_byte_names_the_run() {
    let (dir, run) = completed_run("flip");
    let (code, out, err) = check(&dir, "human");
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("healthy: 1 runs and 0 guard ledgers checked, no damage found"),
        "{out}"
    );
    let (_, good, _) = support::stratumc_in(
        &dir,
        Some(&dir.join("home")),
        &["query", "flow", &run, "--format", "json"],
    );

    // the output of step 17 is {"x":18}: flip a bit of it on disk
    flip_in_file(&dir.join("home/stratum.db"), br#""x":18"#);
    let (code, out, err) = check(&dir, "human");
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(&format!(
            "damaged: run `{run}`: row 17 does not match its checksum"
        )),
        "{out}"
    );
    let (code, out, _) = check(&dir, "json");
    assert_eq!(code, 1);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["healthy"], false);
    assert_eq!(doc["damagedRuns"], serde_json::json!([run]));
    assert_eq!(doc["damage"][0]["record"], "row 17");

    // the operator view is an error, not the run with a different step 17
    let (code, out, err) = support::stratumc_in(
        &dir,
        Some(&dir.join("home")),
        &["query", "flow", &run, "--format", "json"],
    );
    assert_eq!(code, 2, "{out}");
    assert_ne!(out, good);
    assert!(
        err.contains("row 17 of run") && err.contains("does not match its checksum"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_deleted_row_is_damage_not_a_pending_step() {
    let (dir, run) = completed_run("deleted");
    {
        let conn = rusqlite::Connection::open(dir.join("home/stratum.db")).unwrap();
        conn.execute("DELETE FROM run_rows WHERE key = 12", [])
            .unwrap();
    }
    let (code, out, _) =
        support::stratumc_in(&dir, Some(&dir.join("home")), &["query", "flow", &run]);
    assert_eq!(
        code, 2,
        "a completed run must not show as partly pending: {out}"
    );
    let (code, out, err) = check(&dir, "human");
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(&format!("damaged: run `{run}`: state does not load")),
        "{out}"
    );
    // 30 step rows and the entry frame's input row
    assert!(out.contains("has 31 rows, but 30 are stored"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_store_or_an_empty_file_cannot_be_opened() {
    let dir = support::scratch("store", "missing");
    let (code, _, err) = check(&dir, "human");
    assert_eq!(code, 2);
    assert!(err.contains("there is no run store at"), "{err}");
    assert!(
        !dir.join("home/stratum.db").exists(),
        "check creates nothing"
    );
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::fs::write(dir.join("home/stratum.db"), b"").unwrap();
    let (code, _, err) = check(&dir, "human");
    assert_eq!(code, 2);
    assert!(err.contains("is empty (0 bytes)"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
