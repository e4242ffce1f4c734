//! Evaluating predicates on evidence the server reads itself, through the
//! VM's host interfaces: files jailed to the workspace root
//! (`stratum_vm::host::Workspace`), commit objects (`host::commit_exists`),
//! declared commands (`host::commands::run`, only argv declared in
//! `[commands]`), earlier ledger entries (the store) and the judge
//! (`host::judge`, at the edge's stakes, with the transition's artifacts
//! and modified files as context).
//!
//! Owns: the [`Evidence`] each predicate records, [`Host`] (the effects one
//! resource's evaluation may use, built from its workspace root and the
//! configuration there), and failing closed: a refused path, a git error,
//! a command that cannot start, a missing judge is a predicate not met,
//! with the reason as evidence.
//! Must never: take the caller's word for a fact, run an argv not declared
//! in `[commands]`, run anything through a shell, or read outside the root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;
use stratum_vm::config::{CommandConfig, Config, JudgeConfig};
use stratum_vm::host::{self, Workspace};
use stratum_vm::interp::{CommandRequest, FileRoot};
use stratum_vm::store::GuardStore;

use crate::builtin::Builtin;
use crate::ledger::{Entry, PredicateResult, Verdict};
use crate::policy::{Predicate, PredicateType, Stakes};

/// What a predicate was decided on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Evidence {
    /// `server_file_exists`: what the jail found.
    File {
        path: String,
        exists: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blake3: Option<String>,
    },
    /// `git_commit_exists`.
    Commit { sha: String, exists: bool },
    /// `command_exit_zero`: the command's receipt.
    Command {
        command: String,
        argv: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit: Option<i32>,
        timed_out: bool,
        stdout_sha256: String,
        tail: String,
    },
    /// `verdict_receipt_clean`: the entry found.
    Receipt {
        ledger_ref: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resource_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
        found: bool,
        clean: bool,
    },
    /// A judge's verdict.
    Judge {
        holds: bool,
        reason: String,
        model: String,
        stakes: Stakes,
    },
    /// The predicate could not be evaluated (fails closed).
    Unavailable { reason: String },
}

/// The effects available to one resource's evaluation.
pub struct Host {
    root: PathBuf,
    workspace: Option<Workspace>,
    commands: BTreeMap<String, CommandConfig>,
    judge: Option<JudgeConfig>,
}

/// What a transition hands the judge as context.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Claims {
    pub artifacts: BTreeMap<String, String>,
    pub modified_files: Vec<String>,
}

impl Host {
    /// The host of a resource rooted at `root` with `config` (the operator's
    /// configuration merged with the workspace's `stratum.toml`).
    pub fn new(root: &Path, config: &Config) -> Host {
        Host {
            root: root.to_path_buf(),
            workspace: Workspace::new(root).ok(),
            commands: config
                .commands
                .keys()
                .filter_map(|n| Some((n.clone(), config.command(n)?)))
                .collect(),
            judge: config.judge_runner(),
        }
    }

    /// The name of the `[commands.NAME]` whose argv is exactly `argv`.
    pub fn declared(&self, argv: &[String]) -> Option<&str> {
        self.commands
            .iter()
            .find(|(_, c)| c.argv == argv)
            .map(|(n, _)| n.as_str())
    }

    /// Evaluates every predicate of an edge.
    pub fn verdict(
        &self,
        store: &dyn GuardStore,
        predicates: &[Predicate],
        stakes: Stakes,
        claims: &Claims,
    ) -> Verdict {
        let results: Vec<PredicateResult> = predicates
            .iter()
            .map(|p| {
                let evidence = self.evaluate(store, p, stakes, claims);
                PredicateResult {
                    id: p.id.clone(),
                    kind: p.kind,
                    statement: p.statement.clone(),
                    met: met(&evidence),
                    evidence,
                }
            })
            .collect();
        Verdict {
            met: results.iter().all(|r| r.met),
            stakes,
            predicates: results,
        }
    }

    fn evaluate(
        &self,
        store: &dyn GuardStore,
        p: &Predicate,
        stakes: Stakes,
        claims: &Claims,
    ) -> Evidence {
        match p.kind {
            PredicateType::Deterministic => match p.builtin() {
                Some(Ok(b)) => self.builtin(store, &b),
                Some(Err(e)) => unavailable(e.to_string()),
                None => unavailable("not a deterministic predicate".to_owned()),
            },
            PredicateType::Verified | PredicateType::Judged => self.judge(p, stakes, claims),
        }
    }

    fn builtin(&self, store: &dyn GuardStore, b: &Builtin) -> Evidence {
        match b {
            Builtin::ServerFileExists(path) => self.file(path),
            Builtin::GitCommitExists(sha) => match host::commit_exists(&self.root, sha) {
                Ok(exists) => Evidence::Commit {
                    sha: sha.clone(),
                    exists,
                },
                Err(e) => unavailable(e.to_string()),
            },
            Builtin::CommandExitZero(argv) => self.command(argv),
            Builtin::VerdictReceiptClean(r) => receipt(store, r),
        }
    }

    fn file(&self, path: &str) -> Evidence {
        let Some(ws) = &self.workspace else {
            return unavailable(format!(
                "the workspace root {} is not a directory",
                self.root.display()
            ));
        };
        match ws.file_exists(path) {
            Ok(f) => Evidence::File {
                path: f.path,
                exists: f.exists,
                size: f.size,
                blake3: f.blake3,
            },
            Err(e) => unavailable(e.to_string()),
        }
    }

    fn command(&self, argv: &[String]) -> Evidence {
        let Some(name) = self.declared(argv) else {
            return unavailable(format!(
                "{argv:?} is no longer declared in `[commands]` of stratum.toml"
            ));
        };
        let req = CommandRequest {
            command: name,
            args: &[],
            timeout_ms: None,
            stdin: "",
            root: FileRoot::Workspace,
        };
        match host::commands::run(&self.commands, &req, &self.root) {
            Ok(run) => Evidence::Command {
                command: name.to_owned(),
                argv: run.receipt.argv,
                exit: run.receipt.exit,
                timed_out: run.receipt.timed_out,
                stdout_sha256: run.receipt.stdout_sha256,
                tail: run.receipt.tail,
            },
            Err(e) => unavailable(e.to_string()),
        }
    }

    fn judge(&self, p: &Predicate, stakes: Stakes, claims: &Claims) -> Evidence {
        let Some(cfg) = &self.judge else {
            return unavailable(host::NO_JUDGE_REASON.to_owned());
        };
        let context = json!({
            "artifacts": claims.artifacts,
            "modified_files": claims.modified_files,
            "note": "artifacts and modified_files are the caller's claims",
        });
        match host::judge(cfg, &p.statement, stakes.as_str(), &context) {
            Ok(o) => Evidence::Judge {
                holds: o.holds,
                reason: o.reason,
                model: o.model,
                stakes,
            },
            Err(e) => unavailable(e.to_string()),
        }
    }
}

fn unavailable(reason: String) -> Evidence {
    Evidence::Unavailable { reason }
}

/// Whether the evidence meets its predicate.
fn met(e: &Evidence) -> bool {
    match e {
        Evidence::File { exists, .. } | Evidence::Commit { exists, .. } => *exists,
        Evidence::Command {
            exit, timed_out, ..
        } => *exit == Some(0) && !timed_out,
        Evidence::Receipt { found, clean, .. } => *found && *clean,
        Evidence::Judge { holds, .. } => *holds,
        Evidence::Unavailable { .. } => false,
    }
}

/// `verdict_receipt_clean`: the entry must be in the store, its hash must
/// be its content's, and it must be an applied transition whose predicates
/// were all met.
fn receipt(store: &dyn GuardStore, ledger_ref: &str) -> Evidence {
    let missing = |found| Evidence::Receipt {
        ledger_ref: ledger_ref.to_owned(),
        resource_id: None,
        seq: None,
        found,
        clean: false,
    };
    match store.guard_entry(ledger_ref) {
        Ok(Some((resource_id, row))) => match Entry::from_row(&row) {
            Ok(e) => Evidence::Receipt {
                ledger_ref: ledger_ref.to_owned(),
                resource_id: Some(resource_id),
                seq: Some(e.seq),
                found: true,
                clean: e.is_clean_receipt(),
            },
            Err(_) => missing(true),
        },
        Ok(None) => missing(false),
        Err(e) => unavailable(e.to_string()),
    }
}
