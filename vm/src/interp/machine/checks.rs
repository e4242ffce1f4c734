//! The checks of an output: its contract, then each `ensure` in order
//! (expressions, file predicates, judged statements).
//!
//! Owns: turning each predicate's verdict into a failure with its
//! violation, the evidence and judge events, and the judge's usage.
//! Must never: decide retries or settle usage (the attempt path does), or
//! treat an erring judge or file check as holding.

use serde_json::{Value, json};

use super::Transition;
use super::values::ResultSel;
use crate::eval::contract::check_record;
use crate::eval::value::type_name;
use crate::interp::event::{EventKind, JudgeUsage};
use crate::interp::host::FileRoot;
use crate::interp::state::*;
use crate::plan::{ArtifactDef, PredDef, Stakes};

/// A predicate that did not hold: the failure reason and its violation.
type Violation = (String, Value);

impl Transition<'_> {
    /// Contract and ensures of an output: the failure with its violations
    /// when one fails, and what the judge spent either way.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check_output(
        &mut self,
        f: FrameIx,
        out: Option<u32>,
        (ensure, artifacts): (&[PredDef], &[ArtifactDef]),
        output: &Value,
        attempt: u32,
        item: Option<(&Value, Option<&Value>)>,
        step_id: &str,
    ) -> (Result<(), Failure>, Spend) {
        let mut usage = Spend::default();
        if let Some(rec) = out
            && let Err(e) = check_record(self.plan, rec, output).map_err(|e| e.to_string())
        {
            let failure = Failure {
                attempt,
                reason: format!("output does not satisfy its contract: {e}"),
                violations: vec![json!({"kind": "contract", "message": e})],
            };
            return (Err(failure), usage);
        }
        self.artifacts_seen = None;
        if !artifacts.is_empty() {
            match self.check_artifacts(f, artifacts, item) {
                Ok(files) => self.artifacts_seen = Some(files),
                Err((reason, violation)) => {
                    let failure = Failure {
                        attempt,
                        reason,
                        violations: vec![violation],
                    };
                    return (Err(failure), usage);
                }
            }
        }
        for p in ensure {
            let verdict = match p {
                PredDef::Expr(c) => self.ensure_expr(f, *c, output, item),
                PredDef::FileExists(path) => self.ensure_file_exists(self.plan.str(*path), step_id),
                PredDef::FileContains(path, text) => {
                    let (path, text) = (self.plan.str(*path), self.plan.str(*text));
                    self.ensure_file_contains(path, text, step_id)
                }
                PredDef::Judged(s, stakes) => {
                    let statement = self.plan.str(*s);
                    self.ensure_judged(f, statement, *stakes, output, step_id, &mut usage)
                }
            };
            if let Err((reason, violation)) = verdict {
                let failure = Failure {
                    attempt,
                    reason,
                    violations: vec![violation],
                };
                return (Err(failure), usage);
            }
        }
        (Ok(()), usage)
    }

    fn ensure_expr(
        &mut self,
        f: FrameIx,
        c: u32,
        output: &Value,
        item: Option<(&Value, Option<&Value>)>,
    ) -> Result<(), Violation> {
        let source = self
            .plan
            .str(self.flow(f).chunks[c as usize].source)
            .to_string();
        let r = match item {
            Some((it, prev)) => {
                self.run_chunk(f, c, ResultSel::Value(output), Some(it), Some(prev))
            }
            None => self.run_chunk(f, c, ResultSel::Value(output), None, None),
        };
        let why = match r {
            Ok(Value::Bool(true)) => return Ok(()),
            Ok(Value::Bool(false)) => "predicate evaluated to false".to_string(),
            Ok(other) => format!(
                "type_error: predicate must evaluate to boolean, received {}",
                type_name(&other)
            ),
            Err(why) => why,
        };
        Err((
            format!("ensure {source:?} failed: {why}"),
            json!({"kind": "ensure", "expr": source, "reason": why}),
        ))
    }

    /// Where file predicates look now: an item's worktree, else the workspace.
    fn file_root(&self) -> Option<String> {
        self.file_root.clone()
    }

    fn ensure_file_exists(&mut self, path: &str, step_id: &str) -> Result<(), Violation> {
        let root = self.file_root();
        let at = root
            .as_deref()
            .map_or(FileRoot::Workspace, FileRoot::Worktree);
        match self.host.file_exists(at, path) {
            Ok(ev) => {
                let exists = ev.exists;
                self.evidence(ev, root.is_some(), Some(step_id));
                if exists {
                    return Ok(());
                }
                Err((
                    format!("ensure file_exists {path:?} failed: no such file"),
                    json!({"kind": "ensure", "file_exists": path, "reason": "no such file"}),
                ))
            }
            Err(why) => Err((
                format!("ensure file_exists {path:?} failed: validation_error: {why}"),
                json!({"kind": "ensure", "file_exists": path, "reason": why.to_string()}),
            )),
        }
    }

    fn ensure_file_contains(
        &mut self,
        path: &str,
        text: &str,
        step_id: &str,
    ) -> Result<(), Violation> {
        let root = self.file_root();
        let at = root
            .as_deref()
            .map_or(FileRoot::Workspace, FileRoot::Worktree);
        let subject = json!({"path": path, "text": text});
        match self.host.file_contains(at, path, text) {
            Ok((holds, ev)) => {
                self.evidence(ev, root.is_some(), Some(step_id));
                if holds {
                    return Ok(());
                }
                Err((
                    format!("ensure file_contains {path:?} {text:?} failed: text not found"),
                    json!({"kind": "ensure", "file_contains": subject, "reason": "text not found"}),
                ))
            }
            Err(why) => Err((
                format!("ensure file_contains {path:?} failed: validation_error: {why}"),
                json!({"kind": "ensure", "file_contains": subject, "reason": why.to_string()}),
            )),
        }
    }

    fn ensure_judged(
        &mut self,
        f: FrameIx,
        statement: &str,
        stakes: Stakes,
        output: &Value,
        step_id: &str,
        usage: &mut Spend,
    ) -> Result<(), Violation> {
        let stakes = stakes.as_str();
        let context = json!({"result": output, "input": self.frame(f).input});
        let verdict = self.host.judge(statement, stakes, &context);
        let (holds, reason, model, tokens, usd) = match &verdict {
            Ok(v) => (v.holds, v.reason.clone(), v.model.clone(), v.tokens, v.usd),
            Err(e) => (false, e.to_string(), "none".to_string(), 0.0, 0.0),
        };
        usage.tokens += tokens;
        usage.usd += usd;
        let kind = EventKind::Judged {
            statement: statement.to_string(),
            holds,
            reason: reason.clone(),
            stakes: stakes.to_string(),
            model,
            usage: JudgeUsage { tokens, usd },
        };
        self.event(kind, Some(step_id.to_string()));
        if holds {
            return Ok(());
        }
        Err((
            format!("ensure judged {statement:?} failed: {reason}"),
            json!({"kind": "judged", "statement": statement, "reason": reason}),
        ))
    }
}
