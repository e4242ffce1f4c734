//! `stratumc store check [--format json]`: whether the run store (the one
//! `STRATUM_STORE`/`[store] url` name, else `$STRATUM_HOME/stratum.db`) is
//! intact — on SQLite its integrity check, on either store every
//! record's checksum, and every run loaded as the operator views load it
//! (header decodes, one row per step of every frame, plan present), and
//! every guard ledger's hash chain — with each damaged record named; and
//! `stratumc store migrate` (in `store_migrate`).
//!
//! Exit codes: 0 healthy, 1 damage found, 2 the store cannot be opened.
//!
//! Owns: the command's arguments, its human report and its JSON document
//! (`"version": 1`, documented in the README).
//! Must never: create a store, repair anything, or decide on its own what
//! counts as damage (the store and the engine do).

use clap::Subcommand;
use serde_json::{Value, json};
use stratum_guard::service::Verified;
use stratum_guard::{ConfigHosts, Guard};
use stratum_vm::engine::Engine;
use stratum_vm::store::{
    Damage, Place, PostgresStore, Problem, RunStore, SqliteStore, StoreCheck, StoreLocation,
};

use crate::{Exit, Format};

/// Arguments of `stratumc store`.
#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    /// What to do with the store.
    #[command(subcommand)]
    pub what: Cmd,
}

/// Store operations.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Check the whole store: SQLite's integrity check, every record's checksum, every run loads (exit 0: healthy; 1: damage found; 2: cannot open).
    Check {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Copy every run, event, checkpoint and guard ledger of this store into another, then verify the copy by content digests (idempotent: run it again after an interruption).
    Migrate {
        /// The destination store: postgres://USER@HOST:PORT/DATABASE (the password from PGPASSWORD or a PGPASSFILE), sqlite:PATH, or the path of a SQLite database file.
        #[arg(long, value_name = "DEST")]
        to: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
}

/// Runs `stratumc store`.
pub fn run(args: &StoreArgs) -> Exit {
    match &args.what {
        Cmd::Check { format } => check(*format),
        Cmd::Migrate { to, format } => super::store_migrate::migrate(to, *format),
    }
}

fn check(format: Format) -> Exit {
    let location = match StoreLocation::from_env() {
        Ok(l) => l,
        Err(e) => return super::usage(e),
    };
    let (mut store, report): (Box<dyn RunStore>, _) = match &location {
        StoreLocation::Sqlite(path) => {
            let store = match SqliteStore::open_existing(path) {
                Ok(s) => s,
                Err(e) => return super::usage(e),
            };
            let report = store.check();
            (Box::new(store), report)
        }
        StoreLocation::Postgres(url) => {
            let store = match PostgresStore::open(url) {
                Ok(s) => s,
                Err(e) => return super::usage(e),
            };
            let report = store.check();
            (Box::new(store), report)
        }
    };
    let shown = location.shown();
    let mut report = match report {
        Ok(r) => r,
        Err(e) => return super::usage(format!("cannot read {shown}: {e}")),
    };
    let ledgers = match ledger_chains(store.as_mut()) {
        Ok(l) => l,
        Err(e) => return super::usage(format!("cannot read the guard ledgers: {e}")),
    };
    load_runs(store, &mut report);
    let engine = match location {
        StoreLocation::Sqlite(_) => "sqlite",
        StoreLocation::Postgres(_) => "postgresql",
    };
    let text = match format {
        Format::Json => format!("{}\n", document(&shown, engine, &report, &ledgers)),
        Format::Human => human(&shown, engine, &report, &ledgers),
    };
    super::emit(&text);
    if report.healthy() && ledgers.iter().all(|l| l.ok) {
        Exit::Ok
    } else {
        Exit::Errors
    }
}

/// Every guarded resource's ledger walked as `stratumc guard verify --all`
/// walks it (the hash chain, the record's length and head).
fn ledger_chains(store: &mut dyn RunStore) -> Result<Vec<Verified>, String> {
    let hosts = ConfigHosts { operator: None };
    let guard = Guard {
        store,
        hosts: &hosts,
        now_ms: stratum_guard::now_ms(),
    };
    guard.verify_all().map_err(|e| e.to_string())
}

/// Loads every run the scan found undamaged, as the operator views do; a
/// run that does not load is damage.
fn load_runs(store: Box<dyn RunStore>, report: &mut StoreCheck) {
    let mut engine = Engine::new(store);
    let damaged: std::collections::BTreeSet<String> =
        report.damage.iter().filter_map(|d| d.run.clone()).collect();
    for run in report.runs.iter().filter(|r| !damaged.contains(*r)) {
        if let Err(e) = stratum_vm::view::load(&mut engine, run) {
            report.damage.push(Damage {
                run: Some(run.clone()),
                place: Place::Run,
                problem: Problem::Unloadable(e.to_string()),
            });
        }
    }
}

fn damaged_runs(report: &StoreCheck) -> Vec<&str> {
    let mut runs: Vec<&str> = report
        .damage
        .iter()
        .filter_map(|d| d.run.as_deref())
        .collect();
    runs.sort_unstable();
    runs.dedup();
    runs
}

fn human(path: &str, engine: &str, report: &StoreCheck, ledgers: &[Verified]) -> String {
    let mut out = format!("checking {path} (schema {})\n", report.schema_version);
    if report.integrity.is_empty() && engine == "sqlite" {
        out.push_str("sqlite integrity check: ok\n");
    }
    for line in &report.integrity {
        out.push_str(&format!("damaged: sqlite integrity check: {line}\n"));
    }
    for d in &report.damage {
        out.push_str(&format!("damaged: {d}\n"));
    }
    let broken: Vec<&Verified> = ledgers.iter().filter(|l| !l.ok).collect();
    for l in &broken {
        out.push_str(&format!(
            "damaged: the ledger of guarded resource `{}`{}: {} (`stratumc guard verify {}` names the link)\n",
            l.resource_id,
            l.broken_at.map_or_else(String::new, |at| format!(" at entry {at}")),
            l.problem.as_deref().unwrap_or("the hash chain is broken"),
            l.resource_id
        ));
    }
    let runs = damaged_runs(report);
    if report.healthy() && broken.is_empty() {
        out.push_str(&format!(
            "healthy: {} runs and {} guard ledgers checked, no damage found\n",
            report.runs.len(),
            ledgers.len()
        ));
    } else {
        out.push_str(&format!(
            "failed: {} problems found; {} of {} runs damaged{}. Restore the store from a backup (damaged runs cannot be resumed)\n",
            report.integrity.len() + report.damage.len() + broken.len(),
            runs.len(),
            report.runs.len(),
            if runs.is_empty() {
                String::new()
            } else {
                format!(" ({})", runs.join(", "))
            }
        ));
    }
    out
}

fn document(path: &str, engine: &str, report: &StoreCheck, ledgers: &[Verified]) -> Value {
    let damage: Vec<Value> = report
        .damage
        .iter()
        .map(|d| json!({"run": d.run, "record": d.place.to_string(), "problem": d.problem.to_string()}))
        .collect();
    json!({
        "version": 1,
        "path": path,
        "store": engine,
        "schemaVersion": report.schema_version,
        "healthy": report.healthy() && ledgers.iter().all(|l| l.ok),
        "integrity": report.integrity,
        "runsChecked": report.runs.len(),
        "damagedRuns": damaged_runs(report),
        "damage": damage,
        "ledgersChecked": ledgers.len(),
        "brokenLedgers": ledgers.iter().filter(|l| !l.ok).collect::<Vec<_>>(),
    })
}
