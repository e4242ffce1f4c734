//! `evaluate` steps (v1 §4.9, language 1.1 X12): a declared command run
//! through the host with the rendered `in` on its stdin; its stdout is the
//! step's result object.
//!
//! Owns: rendering `in` (a string as is, any other value as its JSON), the
//! `command_ran` receipt of the step, the rule of the result object (a
//! strict `{status: closed|open|failed, children: array, reason: string,
//! score?: number, route?: claude|codex}` with `closed` ⇒ no children and
//! `open` ⇒ at least one), then the step's `out` contract; and that every
//! failure is terminal (no retry; `on_fail` may route it).
//! Must never: start a process itself (the host does), retry a failure, or
//! treat a result the rule refuses as an output.

use serde_json::{Value, json};

use super::Transition;
use super::attempt::Retry;
use crate::interp::event::EventKind;
use crate::interp::host::{CommandReceipt, CommandRequest, FileRoot, HostError};
use crate::interp::state::*;
use crate::plan::StrId;

/// The keys of the result object, in the order of v1 §4.9.
pub const RESULT_FIELDS: &[&str] = &["status", "children", "reason", "score", "route"];

impl Transition<'_> {
    /// Runs an `evaluate` step to its end: it succeeds with the result
    /// object, or fails for good.
    pub(super) fn run_evaluate(
        &mut self,
        at: StepAt,
        command: StrId,
        timeout_ms: u64,
        input: Option<u32>,
    ) {
        self.st_mut(at).attempts = 1;
        let name = self.plan.str(command).to_owned();
        let stdin = match input.map(|t| self.render(at.frame, t, None, None)) {
            None => String::new(),
            Some(Ok(Value::String(s))) => s,
            Some(Ok(other)) => other.to_string(),
            Some(Err(why)) => {
                let reason = format!("evaluate `{name}`: `in` could not be rendered: {why}");
                return self.evaluate_failed(
                    at,
                    reason,
                    json!({"kind": "evaluate", "run": name, "reason": why}),
                );
            }
        };
        let req = CommandRequest {
            command: &name,
            args: &[],
            timeout_ms: Some(timeout_ms),
            stdin: &stdin,
            root: FileRoot::Workspace,
        };
        let run = match self.host.run_command(&req) {
            Ok(run) => run,
            Err(why) => {
                if let HostError::Stopped(m) = &why {
                    self.stopped = Some(m.clone());
                }
                let reason = format!("evaluate `{name}` failed: {why}");
                let violation = json!({"kind": "evaluate", "run": name, "reason": why.to_string()});
                return self.evaluate_failed(at, reason, violation);
            }
        };
        let id = self.sid(at);
        self.event(EventKind::CommandRan(run.receipt.clone()), Some(id.clone()));
        let output = match result_object(&run.receipt, &run.stdout) {
            Ok(v) => v,
            Err(why) => {
                let reason = format!("evaluate `{name}` failed: {why}");
                let violation = json!({
                    "kind": "evaluate",
                    "run": name,
                    "reason": why,
                    "receipt": run.receipt,
                });
                return self.evaluate_failed(at, reason, violation);
            }
        };
        let out = self.def(at).out;
        match self
            .check_output(at.frame, out, (&[], &[]), &output, 1, None, &id)
            .0
        {
            Ok(()) => self.succeed(at, output),
            Err((failure, _)) => {
                self.attempt_failed(Slot::step(at), failure, Some(output), Retry::Never)
            }
        }
    }

    fn evaluate_failed(&mut self, at: StepAt, reason: String, violation: Value) {
        let failure = Failure {
            attempt: 1,
            reason,
            violations: vec![violation],
        };
        self.attempt_failed(Slot::step(at), failure, None, Retry::Never);
    }
}

/// The result object of a finished command: it exited 0 within its bounds
/// and its whole stdout is one strict result object (v1 §4.9).
pub fn result_object(receipt: &CommandReceipt, stdout: &[u8]) -> Result<Value, String> {
    if receipt.timed_out {
        return Err(format!(
            "the command timed out after {} ms and its process group was killed",
            receipt.ms
        ));
    }
    match receipt.exit {
        Some(0) => {}
        Some(code) => return Err(format!("the command exited with {code}, expected 0")),
        None => return Err("the command was killed by a signal".to_owned()),
    }
    if receipt.truncated {
        return Err(
            "its stdout is longer than the command's `max_output_bytes`; the result object was cut"
                .to_owned(),
        );
    }
    let text =
        std::str::from_utf8(stdout).map_err(|_| "its stdout is not UTF-8 text".to_owned())?;
    let value: Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("its stdout is not one JSON object: {e}"))?;
    check_result(&value)?;
    Ok(value)
}

/// The strict shape of v1 §4.9's result object.
pub fn check_result(v: &Value) -> Result<(), String> {
    let Value::Object(o) = v else {
        return Err(format!(
            "the result must be an object {{status, children, reason}}, found {}",
            crate::eval::value::type_name(v)
        ));
    };
    if let Some(k) = o.keys().find(|k| !RESULT_FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "the result has the unknown field `{k}` (it takes {})",
            RESULT_FIELDS.join(", ")
        ));
    }
    let status = match o.get("status") {
        Some(Value::String(s)) if ["closed", "open", "failed"].contains(&s.as_str()) => s.as_str(),
        Some(other) => {
            return Err(format!(
                "the result's `status` must be \"closed\", \"open\" or \"failed\", found {other}"
            ));
        }
        None => return Err("the result has no `status`".to_owned()),
    };
    let children = match o.get("children") {
        Some(Value::Array(c)) => c.len(),
        Some(_) => return Err("the result's `children` must be an array".to_owned()),
        None => return Err("the result has no `children`".to_owned()),
    };
    if !matches!(o.get("reason"), Some(Value::String(_))) {
        return Err("the result's `reason` must be a string".to_owned());
    }
    if o.get("score").is_some_and(|s| !s.is_number()) {
        return Err("the result's `score` must be a number".to_owned());
    }
    if let Some(r) = o.get("route")
        && !matches!(r.as_str(), Some("claude" | "codex"))
    {
        return Err(format!(
            "the result's `route` must be \"claude\" or \"codex\", found {r}"
        ));
    }
    match (status, children) {
        ("closed", n) if n > 0 => Err(format!("a `closed` result has no children, found {n}")),
        ("open", 0) => Err("an `open` result has at least one child".to_owned()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_object_is_strict() {
        let ok = |v: Value| check_result(&v);
        assert!(ok(json!({"status": "closed", "children": [], "reason": "done"})).is_ok());
        assert!(ok(json!({"status": "open", "children": [{"id": 1}], "reason": "", "score": 0.5, "route": "codex"})).is_ok());
        assert!(ok(json!({"status": "failed", "children": [1], "reason": "x"})).is_ok());
        for (bad, why) in [
            (json!([]), "must be an object"),
            (
                json!({"status": "closed", "children": [], "reason": "x", "extra": 1}),
                "unknown field `extra`",
            ),
            (
                json!({"status": "done", "children": [], "reason": "x"}),
                "`status` must be",
            ),
            (json!({"children": [], "reason": "x"}), "no `status`"),
            (
                json!({"status": "open", "children": {}, "reason": "x"}),
                "`children` must be an array",
            ),
            (
                json!({"status": "open", "children": [], "reason": "x"}),
                "at least one child",
            ),
            (
                json!({"status": "closed", "children": [1], "reason": "x"}),
                "has no children",
            ),
            (
                json!({"status": "closed", "children": []}),
                "`reason` must be a string",
            ),
            (
                json!({"status": "closed", "children": [], "reason": "x", "score": "1"}),
                "`score` must be a number",
            ),
            (
                json!({"status": "closed", "children": [], "reason": "x", "route": "gpt"}),
                "`route` must be",
            ),
        ] {
            let e = ok(bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    fn receipt(exit: Option<i32>, timed_out: bool, truncated: bool) -> CommandReceipt {
        CommandReceipt {
            command: "eval".into(),
            argv: vec!["eval".into()],
            exit,
            ms: 5,
            stdout_sha256: String::new(),
            tail: String::new(),
            timed_out,
            truncated,
        }
    }

    #[test]
    fn only_a_clean_exit_with_one_object_gives_a_result() {
        let out = br#" {"status": "closed", "children": [], "reason": "ok"}
"#;
        let v = result_object(&receipt(Some(0), false, false), out).unwrap();
        assert_eq!(v["reason"], "ok");
        let e = |r: CommandReceipt, out: &[u8]| result_object(&r, out).unwrap_err();
        assert!(e(receipt(Some(2), false, false), out).contains("exited with 2"));
        assert!(e(receipt(None, true, false), out).contains("timed out"));
        assert!(e(receipt(None, false, false), out).contains("killed by a signal"));
        assert!(e(receipt(Some(0), false, true), out).contains("max_output_bytes"));
        assert!(e(receipt(Some(0), false, false), b"{} {}").contains("not one JSON object"));
        assert!(e(receipt(Some(0), false, false), b"\xff").contains("not UTF-8"));
    }
}
