//! The environment input of the checker (EXTENSIONS.md, general rules):
//! what the `stratum.toml` near a spec says that a check needs, as one
//! typed, optional value that `stratumc check`, the language server and the
//! MCP `stratum_validate` build alike (each with `vm::config::load_near`),
//! so their diagnostics stay equal; and the checks that read it.
//!
//! Owns: [`CheckEnv`] and the diagnostics that depend on it (S0325: a
//! `judge:` name that the configuration does not have; S0334: an `exec`
//! `run:` or `evaluate.command` name that it does not declare under
//! `[commands.NAME]`).
//! Must never: read files or the process environment (callers build the
//! [`CheckEnv`]), or change whether a spec without an environment is valid.

use std::collections::BTreeSet;

use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::syntax::ast::{Predicate, PredicateKind, Spec, StepKind};
use crate::yaml::Str;

/// What the checker knows of the environment. `CheckEnv::default()` is no
/// environment: no `stratum.toml` is known, and nothing that needs one is
/// checked (it fails at run time instead).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct CheckEnv {
    /// The judge names of `[judges.NAME]`; `None`: no `stratum.toml` known.
    pub judges: Option<BTreeSet<String>>,
    /// The command names of `[commands.NAME]` (X12); `None`: no
    /// `stratum.toml` known.
    pub commands: Option<BTreeSet<String>>,
}

impl CheckEnv {
    /// The environment of the `stratum.toml` near a spec, as
    /// `stratum_vm::config::near` found it (`Ok(None)`: no file; an
    /// unreadable file is no environment, and the reason is returned for the
    /// caller to show).
    pub fn from_near(
        found: Result<Option<stratum_vm::config::Config>, stratum_vm::config::ConfigError>,
    ) -> (CheckEnv, Option<String>) {
        match found {
            Ok(Some(c)) => (CheckEnv::from_config(&c), None),
            Ok(None) => (CheckEnv::default(), None),
            Err(e) => (CheckEnv::default(), Some(e.to_string())),
        }
    }

    /// The environment of the `stratum.toml` near the spec at `spec`
    /// (beside it, else in the current directory), found as every adapter
    /// finds it: `stratumc check`, the language server and the MCP server.
    pub fn near_spec(spec: &std::path::Path) -> (CheckEnv, Option<String>) {
        CheckEnv::from_near(stratum_vm::config::near_spec(spec))
    }

    /// The environment of a loaded `stratum.toml`.
    pub fn from_config(config: &stratum_vm::config::Config) -> CheckEnv {
        CheckEnv {
            judges: Some(config.judges.keys().cloned().collect()),
            commands: Some(config.commands.keys().cloned().collect()),
        }
    }
}

/// The diagnostics of `spec` that need the environment, in document order.
pub fn warnings(spec: &Spec, env: &CheckEnv) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for step in spec.flows.iter().flat_map(|f| f.steps.iter()) {
        let stages = match &step.kind {
            StepKind::Fanout(f) => f.stages.iter().map(|st| &st.ensure[..]).collect(),
            _ => Vec::new(),
        };
        for ensure in std::iter::once(&step.ensure[..]).chain(stages) {
            if let Some(judges) = &env.judges {
                unknown_judges(ensure, judges, &mut out);
            }
            if let Some(commands) = &env.commands {
                unknown_commands(ensure, commands, &mut out);
            }
        }
        if let (StepKind::Evaluate(ev), Some(commands)) = (&step.kind, &env.commands) {
            unknown_command(&ev.command, commands, &mut out);
        }
    }
    out
}

/// S0334: each `exec` whose `run:` names no `[commands.NAME]`.
fn unknown_commands(ensure: &[Predicate], commands: &BTreeSet<String>, out: &mut Vec<Diagnostic>) {
    for p in ensure {
        let Some(PredicateKind::Exec(ex)) = &p.kind else {
            continue;
        };
        unknown_command(&ex.run, commands, out);
    }
}

/// S0334: a command name (`exec.run`, `evaluate.command`) that no
/// `[commands.NAME]` declares.
fn unknown_command(name: &Str, commands: &BTreeSet<String>, out: &mut Vec<Diagnostic>) {
    if commands.contains(&name.text) {
        return;
    }
    {
        let known = if commands.is_empty() {
            "it declares no `[commands.NAME]`".to_owned()
        } else {
            let names: Vec<String> = commands.iter().map(|c| format!("`{c}`")).collect();
            format!("its commands are {}", names.join(", "))
        };
        let help = did_you_mean(&name.text, commands.iter().map(String::as_str)).unwrap_or_else(|| {
            format!(
                "declare it in stratum.toml: `[commands.{}]` with `argv = [\"program\", \"arg\"]`",
                name.text
            )
        });
        out.push(
            Diagnostic::new(
                Code::UnknownCommand,
                name.span,
                format!(
                    "command `{}` is not declared in the stratum.toml near the spec",
                    name.text
                ),
            )
            .with_span_label("no `[commands.NAME]` of this name")
            .with_note(format!(
                "{known}; a run without this command fails the check (or the `evaluate` step) at once"
            ))
            .with_help(help),
        );
    }
}

fn unknown_judges(ensure: &[Predicate], judges: &BTreeSet<String>, out: &mut Vec<Diagnostic>) {
    for p in ensure {
        let Some(PredicateKind::Scored(sc)) = &p.kind else {
            continue;
        };
        let Some(name) = &sc.judge else {
            continue;
        };
        if judges.contains(&name.text) {
            continue;
        }
        let known = if judges.is_empty() {
            "it has no `[judges.NAME]` tables".to_owned()
        } else {
            let names: Vec<String> = judges.iter().map(|j| format!("`{j}`")).collect();
            format!("its judges are {}", names.join(", "))
        };
        let help = did_you_mean(&name.text, judges.iter().map(String::as_str)).unwrap_or_else(|| {
            format!(
                "add `[judges.{}]` with `url` and `model` to stratum.toml, or leave `judge` out to use `[judge]`",
                name.text
            )
        });
        out.push(
            Diagnostic::new(
                Code::UnknownJudge,
                name.span,
                format!(
                    "judge `{}` is not configured in the stratum.toml near the spec",
                    name.text
                ),
            )
            .with_span_label("no `[judges.NAME]` of this name")
            .with_note(format!(
                "{known}; a run without this judge fails the predicate closed"
            ))
            .with_help(help),
        );
    }
}
