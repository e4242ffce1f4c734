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

use std::path::Path;

use serde_json::json;
use stratum_vm::store::{CopyReport, RunStore, StoreLocation, copy_store, verify_copy};

use crate::{Exit, Format};

/// The destination named on the command line: a PostgreSQL URL, a
/// `sqlite:PATH`, or a plain path of a SQLite database file.
fn destination(to: &str) -> Result<StoreLocation, String> {
    let location = if to.contains("://") || to.starts_with("sqlite:") {
        StoreLocation::parse(to, "--to").map_err(|e| e.to_string())?
    } else {
        StoreLocation::Sqlite(to.into())
    };
    if let StoreLocation::Sqlite(path) = &location
        && path.is_dir()
    {
        return Err(format!(
            "{} is a directory; name the database file (e.g. {})",
            path.display(),
            path.join("stratum.db").display()
        ));
    }
    Ok(location)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Runs `stratumc store migrate`.
pub fn migrate(to: &str, format: Format) -> Exit {
    let source = match StoreLocation::from_env() {
        Ok(l) => l,
        Err(e) => return super::usage(e),
    };
    let dest = match destination(to) {
        Ok(l) => l,
        Err(e) => return super::usage(format!("cannot open the destination: {e}")),
    };
    let same = match (&source, &dest) {
        (StoreLocation::Sqlite(a), StoreLocation::Sqlite(b)) => same_file(a, b),
        (a, b) => a == b,
    };
    if same {
        return super::usage(format!("{} is the source store itself", dest.shown()));
    }
    let from = match source.open_existing() {
        Ok(s) => s,
        Err(e) => return super::usage(e),
    };
    let mut to_store = match dest.open() {
        Ok(s) => s,
        Err(e) => return super::usage(format!("cannot open the destination: {e}")),
    };
    run_copy(
        from.as_ref(),
        to_store.as_mut(),
        &source.shown(),
        &dest.shown(),
        format,
    )
}

fn run_copy(
    from: &dyn RunStore,
    to: &mut dyn RunStore,
    shown_from: &str,
    shown_to: &str,
    format: Format,
) -> Exit {
    let report = match copy_store(from, to) {
        Ok(r) => r,
        Err(e) => {
            return super::usage(format!(
                "the copy stopped: {e} (run it again: a copy skips what is already there)"
            ));
        }
    };
    let verified = match verify_copy(from, to) {
        Ok(d) => d,
        Err(e) => return super::usage(format!("cannot read the copy back: {e}")),
    };
    let ok = report.mismatches.is_empty() && verified == report.digest;
    let text = match format {
        Format::Json => format!("{}\n", document(shown_from, shown_to, &report, &verified)),
        Format::Human => human(shown_from, shown_to, &report, &verified),
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
