//! The checks of an output: its contract, then each `ensure` in order
//! (expressions, file predicates, judged statements and scored rubrics,
//! `exec` checks on declared commands).
//!
//! Owns: turning each predicate's verdict into a failure with its
//! violation, the evidence, judge and judge-error events, the judge's
//! usage, and the judge's tries (X5): an erring judge is asked again, up to
//! [`JUDGE_TRIES`] times with the pauses of [`JUDGE_BACKOFF_MS`] through
//! the host, and then fails the step [`JUDGE_UNAVAILABLE`] with no retry;
//! an `exec` check's arguments rendered one argument each and its receipt
//! (X12) in the audit and the violation.
//! Must never: settle usage (the attempt path does), or treat an erring
//! judge or file check as holding.

use serde_json::{Value, json};

use super::Transition;
use super::attempt::Retry;
use super::values::ResultSel;
use crate::eval::contract::check_record;
use crate::eval::value::type_name;
use crate::interp::event::{EventKind, JudgeUsage};
use crate::interp::host::{CommandRequest, FileRoot, HostError, JudgeAsk, JudgeRequest, Verdict};
use crate::interp::state::*;
use crate::plan::{ArtifactDef, PredDef};

/// A predicate that did not hold: the failure reason and its violation.
type Violation = (String, Value);

/// How often one judged predicate asks an erring judge before the step
/// fails [`JUDGE_UNAVAILABLE`].
pub const JUDGE_TRIES: u32 = 3;
/// The pauses before the second and the third try, in ms.
pub const JUDGE_BACKOFF_MS: [u64; 2] = [1000, 2000];
/// The failure reason after [`JUDGE_TRIES`] judge errors in a row (routable
/// by `on_fail`; the attempt is not retried).
pub const JUDGE_UNAVAILABLE: &str = "judge_unavailable";

/// A judged predicate as the interpreter asks it (rendered).
struct Judged {
    /// `[judges.NAME]`, or `None` for the default judge.
    judge: Option<String>,
    /// A statement (with its stakes) or a rendered rubric (with its threshold).
    form: Form,
    /// Rendered input paths.
    inputs: Vec<String>,
}

enum Form {
    Statement(String, &'static str),
    Rubric(String, f64),
}

impl Judged {
    fn ask(&self) -> JudgeAsk<'_> {
        match &self.form {
            Form::Statement(statement, stakes) => JudgeAsk::Statement { statement, stakes },
            Form::Rubric(rubric, threshold) => JudgeAsk::Rubric {
                rubric,
                threshold: *threshold,
            },
        }
    }

    fn text(&self) -> &str {
        match &self.form {
            Form::Statement(t, _) | Form::Rubric(t, _) => t,
        }
    }

    fn judge_name(&self) -> &str {
        self.judge.as_deref().unwrap_or("default")
    }
}

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
    ) -> (Result<(), (Failure, Retry)>, Spend) {
        let mut usage = Spend::default();
        if let Some(rec) = out
            && let Err(e) = check_record(self.plan, rec, output).map_err(|e| e.to_string())
        {
            let failure = Failure {
                attempt,
                reason: format!("output does not satisfy its contract: {e}"),
                violations: vec![json!({"kind": "contract", "message": e})],
            };
            return (Err((failure, Retry::Allowed)), usage);
        }
        self.artifacts_seen = None;
        self.receipts = Some(Vec::new());
        let verdict = self.check_ensures(
            f,
            (ensure, artifacts),
            output,
            attempt,
            item,
            step_id,
            &mut usage,
        );
        self.receipts = None;
        (verdict, usage)
    }

    /// The artifacts and the ensures of [`Self::check_output`], in order;
    /// `exec` receipts gather in `self.receipts`.
    #[allow(clippy::too_many_arguments)]
    fn check_ensures(
        &mut self,
        f: FrameIx,
        (ensure, artifacts): (&[PredDef], &[ArtifactDef]),
        output: &Value,
        attempt: u32,
        item: Option<(&Value, Option<&Value>)>,
        step_id: &str,
        usage: &mut Spend,
    ) -> Result<(), (Failure, Retry)> {
        if !artifacts.is_empty() {
            match self.check_artifacts(f, artifacts, item) {
                Ok(files) => self.artifacts_seen = Some(files),
                Err((reason, violation)) => {
                    let failure = Failure {
                        attempt,
                        reason,
                        violations: vec![violation],
                    };
                    return Err((failure, Retry::Allowed));
                }
            }
        }
        for p in ensure {
            let allowed = |r: Result<(), Violation>| r.map_err(|v| (v, Retry::Allowed));
            let verdict = match p {
                PredDef::Expr(c) => allowed(self.ensure_expr(f, *c, output, item, step_id)),
                PredDef::FileExists(path) => {
                    allowed(self.ensure_file_exists(self.plan.str(*path), step_id))
                }
                PredDef::FileContains(path, text) => {
                    let (path, text) = (self.plan.str(*path), self.plan.str(*text));
                    allowed(self.ensure_file_contains(path, text, step_id))
                }
                PredDef::FileExistsAt(t) => match self.file_path(f, *t, item, "file_exists") {
                    Ok(path) => allowed(self.ensure_file_exists(&path, step_id)),
                    Err(v) => Err((v, Retry::Allowed)),
                },
                PredDef::FileContainsAt(t, text) => {
                    match self.file_path(f, *t, item, "file_contains") {
                        Ok(path) => {
                            let text = self.plan.str(*text);
                            allowed(self.ensure_file_contains(&path, text, step_id))
                        }
                        Err(v) => Err((v, Retry::Allowed)),
                    }
                }
                PredDef::Judged(s, stakes) => {
                    let j = Judged {
                        judge: None,
                        form: Form::Statement(self.plan.str(*s).to_owned(), stakes.as_str()),
                        inputs: Vec::new(),
                    };
                    self.ensure_judged(f, &j, output, step_id, usage)
                }
                PredDef::Scored {
                    rubric,
                    threshold,
                    judge,
                    inputs,
                } => match self.scored(f, *rubric, *threshold, *judge, inputs, item) {
                    Ok(j) => self.ensure_judged(f, &j, output, step_id, usage),
                    Err(v) => Err((v, Retry::Allowed)),
                },
                PredDef::Exec {
                    run,
                    args,
                    expect_exit,
                    timeout_ms,
                } => match self.exec_args(f, args, item) {
                    Ok(argv) => {
                        let check = Exec {
                            run: self.plan.str(*run).to_owned(),
                            args: argv,
                            expect_exit: *expect_exit,
                            timeout_ms: *timeout_ms,
                        };
                        self.ensure_exec(&check, step_id)
                    }
                    Err(v) => Err((v, Retry::Allowed)),
                },
            };
            if let Err(((reason, violation), retry)) = verdict {
                let failure = Failure {
                    attempt,
                    reason,
                    violations: vec![violation],
                };
                return Err((failure, retry));
            }
        }
        Ok(())
    }

    /// A file predicate path (X3) rendered in the step's context (the item's
    /// in a fanout stage); a full reference that is not a string, or one
    /// whose value is not there, fails the predicate.
    fn file_path(
        &self,
        f: FrameIx,
        t: u32,
        item: Option<(&Value, Option<&Value>)>,
        form: &str,
    ) -> Result<String, Violation> {
        let (it, prev) = item.map_or((None, None), |(i, p)| (Some(i), p));
        match self.render(f, t, it, prev) {
            Ok(Value::String(s)) => Ok(s),
            Ok(other) => Err(path_unrendered(
                form,
                &format!(
                    "type_error: the path must be a string, received {}",
                    type_name(&other)
                ),
            )),
            Err(why) => Err(path_unrendered(form, &why)),
        }
    }

    /// The arguments of an `exec` check rendered (X12): an interpolated
    /// template is one argument; a full reference to a string, number or
    /// boolean is one, to a list of them one per element; anything else
    /// (or a reference not there) fails the check.
    fn exec_args(
        &self,
        f: FrameIx,
        args: &[u32],
        item: Option<(&Value, Option<&Value>)>,
    ) -> Result<Vec<String>, Violation> {
        let (it, prev) = item.map_or((None, None), |(i, p)| (Some(i), p));
        let mut out = Vec::new();
        for t in args {
            let v = self
                .render(f, *t, it, prev)
                .map_err(|why| exec_unrendered(&why))?;
            match v {
                Value::Array(items) => {
                    for i in &items {
                        out.push(exec_arg(i).map_err(|why| exec_unrendered(&why))?);
                    }
                }
                one => out.push(exec_arg(&one).map_err(|why| exec_unrendered(&why))?),
            }
        }
        Ok(out)
    }

    /// Runs an `exec` check through the host: the receipt goes into the
    /// audit (`command_ran`) and, when the exit does not match, into the
    /// violation. A command the host cannot run (not declared, cannot
    /// start) fails the step at once: another attempt cannot change that.
    fn ensure_exec(&mut self, check: &Exec, step_id: &str) -> Result<(), (Violation, Retry)> {
        let root = self.file_root();
        let at = root
            .as_deref()
            .map_or(FileRoot::Workspace, FileRoot::Worktree);
        let req = CommandRequest {
            command: &check.run,
            args: &check.args,
            timeout_ms: check.timeout_ms,
            stdin: "",
            root: at,
        };
        let run = match self.host.run_command(&req) {
            Ok(run) => run,
            Err(why) => {
                if let HostError::Stopped(m) = &why {
                    self.stopped = Some(m.clone());
                }
                let violation =
                    json!({"kind": "exec", "run": check.run, "reason": why.to_string()});
                let reason = format!("ensure exec `{}` failed: {why}", check.run);
                return Err(((reason, violation), Retry::Never));
            }
        };
        let receipt = run.receipt;
        if let Some(all) = self.receipts.as_mut() {
            all.push(receipt.clone());
        }
        self.event(
            EventKind::CommandRan(receipt.clone()),
            Some(step_id.to_string()),
        );
        if receipt.exit == Some(check.expect_exit) {
            return Ok(());
        }
        let why = match (receipt.exit, receipt.timed_out) {
            (_, true) => format!(
                "timed out after {} ms and its process group was killed",
                receipt.ms
            ),
            (Some(code), _) => format!("exited with {code}, expected {}", check.expect_exit),
            (None, false) => "was killed by a signal".to_owned(),
        };
        let reason = format!("ensure exec `{}` failed: the command {why}", check.run);
        let violation = json!({
            "kind": "exec",
            "run": check.run,
            "expectExit": check.expect_exit,
            "reason": why,
            "receipt": receipt,
        });
        Err(((reason, violation), Retry::Allowed))
    }

    /// The scored form rendered: its rubric and input paths.
    fn scored(
        &self,
        f: FrameIx,
        rubric: u32,
        threshold: f64,
        judge: Option<u32>,
        inputs: &[u32],
        item: Option<(&Value, Option<&Value>)>,
    ) -> Result<Judged, Violation> {
        let (it, prev) = item.map_or((None, None), |(i, p)| (Some(i), p));
        let text = |t: u32| -> Result<String, Violation> {
            match self.render(f, t, it, prev) {
                Ok(Value::String(s)) => Ok(s),
                Ok(other) => Ok(other.to_string()),
                Err(why) => Err((
                    format!("ensure judged rubric could not be rendered: {why}"),
                    json!({"kind": "judged", "reason": why}),
                )),
            }
        };
        let rubric = text(rubric)?;
        let inputs = inputs.iter().map(|t| text(*t)).collect::<Result<_, _>>()?;
        Ok(Judged {
            judge: judge.map(|j| self.plan.str(j).to_owned()),
            form: Form::Rubric(rubric, threshold),
            inputs,
        })
    }

    fn ensure_expr(
        &mut self,
        f: FrameIx,
        c: u32,
        output: &Value,
        item: Option<(&Value, Option<&Value>)>,
        step_id: &str,
    ) -> Result<(), Violation> {
        let source = self
            .plan
            .str(self.flow(f).chunks[c as usize].source)
            .to_string();
        let r = match item {
            Some((it, prev)) => self.run_chunk(
                step_id,
                f,
                c,
                ResultSel::Value(output),
                Some(it),
                Some(prev),
            ),
            None => self.run_chunk(step_id, f, c, ResultSel::Value(output), None, None),
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

    /// Asks the judge, again after an error, up to [`JUDGE_TRIES`] times.
    fn ensure_judged(
        &mut self,
        f: FrameIx,
        j: &Judged,
        output: &Value,
        step_id: &str,
        usage: &mut Spend,
    ) -> Result<(), (Violation, Retry)> {
        let context = json!({"result": output, "input": self.frame(f).input});
        let root = self.file_root();
        let at = root
            .as_deref()
            .map_or(FileRoot::Workspace, FileRoot::Worktree);
        let mut last = String::new();
        for try_no in 1..=JUDGE_TRIES {
            if let Some(ms) = try_no
                .checked_sub(2)
                .and_then(|i| JUDGE_BACKOFF_MS.get(i as usize))
            {
                self.host.pause_ms(*ms);
            }
            let req = JudgeRequest {
                judge: j.judge.as_deref(),
                ask: j.ask(),
                context: &context,
                inputs: &j.inputs,
                root: at,
            };
            match self.host.judge_request(&req) {
                Ok(v) => return self.verdict(j, v, step_id, usage),
                Err(HostError::Judge(error)) => {
                    let kind = EventKind::JudgeError {
                        judge: j.judge_name().to_owned(),
                        try_no,
                        error: error.clone(),
                    };
                    self.event(kind, Some(step_id.to_string()));
                    last = error;
                }
                Err(closed) => {
                    // No judge (or none under the name), refused inputs: fails closed at once.
                    let none = Verdict {
                        reason: closed.to_string(),
                        model: "none".to_owned(),
                        ..Verdict::default()
                    };
                    return self.verdict(j, none, step_id, usage);
                }
            }
        }
        let text = j.text();
        let message = format!(
            "judge `{}` erred {JUDGE_TRIES} times in a row; last error: {last}",
            j.judge_name()
        );
        let violation = json!({
            "kind": JUDGE_UNAVAILABLE,
            "judge": j.judge_name(),
            "statement": text,
            "tries": JUDGE_TRIES,
            "message": message,
            "lastError": last,
        });
        Err(((JUDGE_UNAVAILABLE.to_string(), violation), Retry::Never))
    }

    /// Records a verdict (the `judged` event, the usage); the violation when
    /// it does not hold.
    fn verdict(
        &mut self,
        j: &Judged,
        v: Verdict,
        step_id: &str,
        usage: &mut Spend,
    ) -> Result<(), (Violation, Retry)> {
        usage.tokens += v.tokens;
        usage.usd += v.usd;
        let (stakes, threshold) = match &j.form {
            Form::Statement(_, stakes) => (*stakes, None),
            Form::Rubric(_, t) => ("scored", Some(*t)),
        };
        let text = j.text().to_string();
        let kind = EventKind::Judged {
            statement: text.clone(),
            holds: v.holds,
            reason: v.reason.clone(),
            stakes: stakes.to_string(),
            model: v.model,
            usage: JudgeUsage {
                tokens: v.tokens,
                usd: v.usd,
            },
            judge: j.judge.clone(),
            score: v.score,
            threshold: threshold.filter(|_| v.score.is_some()),
            reasons: v.reasons.clone(),
            inputs: v.inputs,
        };
        self.event(kind, Some(step_id.to_string()));
        if v.holds {
            return Ok(());
        }
        let reason = &v.reason;
        let violation = match (&j.form, v.score) {
            (Form::Rubric(_, t), Some(score)) => json!({
                "kind": "judged", "rubric": text, "judge": j.judge_name(),
                "score": score, "threshold": t, "reasons": v.reasons, "reason": reason,
            }),
            (Form::Rubric(..), None) => {
                json!({"kind": "judged", "rubric": text, "judge": j.judge_name(), "reason": reason})
            }
            (Form::Statement(..), _) => {
                json!({"kind": "judged", "statement": text, "reason": reason})
            }
        };
        let why = match (v.score, threshold) {
            (Some(score), Some(t)) => format!("score {score} is below the threshold {t}: {reason}"),
            _ => reason.clone(),
        };
        Err((
            (format!("ensure judged {text:?} failed: {why}"), violation),
            Retry::Allowed,
        ))
    }
}

/// An `exec` check as the interpreter runs it (rendered).
struct Exec {
    run: String,
    args: Vec<String>,
    expect_exit: i32,
    timeout_ms: Option<u64>,
}

/// One rendered value as one argument: text as is, numbers and booleans as
/// JSON writes them.
fn exec_arg(v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(_) | Value::Bool(_) => Ok(v.to_string()),
        other => Err(format!(
            "type_error: an argument must be text (or a list of texts), received {}",
            type_name(other)
        )),
    }
}

/// The violation of an `exec` check whose arguments could not be rendered.
fn exec_unrendered(why: &str) -> Violation {
    (
        format!("ensure exec arguments could not be rendered: {why}"),
        json!({"kind": "exec", "reason": why}),
    )
}

/// The violation of a file predicate whose path could not be rendered.
fn path_unrendered(form: &str, why: &str) -> Violation {
    (
        format!("ensure {form} path could not be rendered: {why}"),
        json!({"kind": "ensure", form: null, "reason": why}),
    )
}
