//! `stratumc store migrate --to DEST [--format json]`: copies every run,
//! event, checkpoint, linked agent run and guard ledger of this machine's
//! run store into another store, then reads the copy back and compares
//! content digests (issue 18 §3).
//!
//! Exit codes: 0 copied and verified (also when everything was already
//! there), 1 records in the destination differ from the source (left as
//! they are) or the verification failed, 2 a store cannot be opened.
//!
//! Owns: the command's arguments and its report (human, and the JSON
//! document `"version": 1` described in the README).
//! Must never: decide what is copied or how it is compared
//! (`stratum_vm::store::copy_store` does), or write to the source.

use std::path::PathBuf;

use serde_json::json;
use stratum_vm::store::{CopyReport, RunStore, SqliteStore, copy_store, default_home, verify_copy};

use crate::{Exit, Format};

/// Opens the destination named on the command line.
fn open_destination(to: &str) -> Result<Box<dyn RunStore>, String> {
    if to.starts_with("postgres://") || to.starts_with("postgresql://") {
        return Err(
            "this stratumc has no PostgreSQL store yet; `--to` takes the path of a SQLite database"
                .to_string(),
        );
    }
    let path = PathBuf::from(to);
    if path.is_dir() {
        return Err(format!(
            "{to} is a directory; name the database file (e.g. {}/stratum.db)",
            to.trim_end_matches('/')
        ));
    }
    SqliteStore::open(&path)
        .map(|s| Box::new(s) as Box<dyn RunStore>)
        .map_err(|e| e.to_string())
}

/// Runs `stratumc store migrate`.
pub fn migrate(to: &str, format: Format) -> Exit {
    let source = match default_home() {
        Ok(home) => home.join("stratum.db"),
        Err(e) => return super::usage(e),
    };
    let from = match SqliteStore::open_existing(&source) {
        Ok(s) => s,
        Err(e) => return super::usage(e),
    };
    if std::fs::canonicalize(&source).ok() == std::fs::canonicalize(to).ok() {
        return super::usage(format!("{to} is the source store itself"));
    }
    let mut dest = match open_destination(to) {
        Ok(s) => s,
        Err(e) => return super::usage(format!("cannot open the destination: {e}")),
    };
    let report = match copy_store(&from, dest.as_mut()) {
        Ok(r) => r,
        Err(e) => {
            return super::usage(format!(
                "the copy stopped: {e} (run it again: a copy skips what is already there)"
            ));
        }
    };
    let verified = match verify_copy(&from, dest.as_ref()) {
        Ok(d) => d,
        Err(e) => return super::usage(format!("cannot read the copy back: {e}")),
    };
    let ok = report.mismatches.is_empty() && verified == report.digest;
    let shown = source.display().to_string();
    let text = match format {
        Format::Json => format!("{}\n", document(&shown, to, &report, &verified)),
        Format::Human => human(&shown, to, &report, &verified),
    };
    super::emit(&text);
    if ok { Exit::Ok } else { Exit::Errors }
}

fn human(from: &str, to: &str, r: &CopyReport, verified: &str) -> String {
    let mut out = format!(
        "copied {from} into {to}: {} runs written, {} already there; {} events, {} checkpoints and {} agent runs written; {} guarded resources written, {} already there ({} ledger rows)\n",
        r.runs_copied,
        r.runs_present,
        r.events,
        r.checkpoints,
        r.agent_runs,
        r.guards_copied,
        r.guards_present,
        r.ledger_rows
    );
    for m in &r.mismatches {
        out.push_str(&format!("differs: {m}\n"));
    }
    if r.mismatches.is_empty() && verified == r.digest {
        out.push_str(&format!(
            "verified: the destination holds every record of the source (digest {})\n",
            &r.digest[..16.min(r.digest.len())]
        ));
    } else {
        out.push_str(&format!(
            "failed: the destination does not match the source (source digest {}, destination {}); records that differ were left as they are\n",
            &r.digest[..16.min(r.digest.len())],
            &verified[..16.min(verified.len())]
        ));
    }
    out
}

fn document(from: &str, to: &str, r: &CopyReport, verified: &str) -> serde_json::Value {
    json!({
        "version": 1,
        "from": from,
        "to": to,
        "runsCopied": r.runs_copied,
        "runsPresent": r.runs_present,
        "events": r.events,
        "checkpoints": r.checkpoints,
        "agentRuns": r.agent_runs,
        "guardsCopied": r.guards_copied,
        "guardsPresent": r.guards_present,
        "ledgerRows": r.ledger_rows,
        "differ": r.mismatches.iter().map(|m| json!({"record": m.what, "id": m.id})).collect::<Vec<_>>(),
        "sourceDigest": r.digest,
        "destinationDigest": verified,
        "verified": r.mismatches.is_empty() && verified == r.digest,
    })
}
