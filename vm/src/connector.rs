//! Agent connectors (issue 16 §1): the coding-agent CLIs a dispatch can be
//! handed to without a wrapper script — `claude-code` (the Claude Code CLI
//! in print mode, `claude -p PROMPT --output-format json`) and `codex`
//! (`codex exec --json`, stdin closed, an explicit `--sandbox`).
//!
//! Owns: the prompt built from a ready entry (the task, the output contract
//! as a JSON Schema, the ensures, the previous failure and revise), the
//! exact argv of each CLI from its `[agents.NAME]` settings, and reading
//! what the CLI printed into a report plus the usage it reports (Claude
//! Code: `usage` and `total_cost_usd`; Codex: the `turn.completed` events'
//! tokens, dollars estimated from the agent's cost profile).
//! Must never: start or supervise a process (that is `crate::agent`'s one
//! home: process group, timeout, bounded output, cancel), touch run state,
//! or read settings other than the agent's own table.

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::interp::outcome::{ContractView, EnsureView};
use crate::interp::{ReadyEntry, Report};

/// A value of a config key that takes one of a fixed set of names.
pub trait Choice: Sized + Copy {
    /// What the key is (`a connector`).
    const WHAT: &'static str;
    /// The accepted names.
    const NAMES: &'static [&'static str];
    /// The value of `name`.
    fn from_name(name: &str) -> Option<Self>;
    /// Its name, as written in `stratum.toml`.
    fn as_str(self) -> &'static str;
}

macro_rules! choice {
    ($(#[$m:meta])* $ty:ident, $what:literal, { $($(#[$vm:meta])* $v:ident = $n:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $ty { $($(#[$vm])* $v),+ }
        impl Choice for $ty {
            const WHAT: &'static str = $what;
            const NAMES: &'static [&'static str] = &[$($n),+];
            fn from_name(name: &str) -> Option<Self> {
                match name { $($n => Some($ty::$v),)+ _ => None }
            }
            fn as_str(self) -> &'static str {
                match self { $($ty::$v => $n),+ }
            }
        }
        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

choice!(
    /// `[agents.NAME] connector`: which CLI runs the agent's dispatches.
    ConnectorKind, "connector", {
        /// The Claude Code CLI (`claude`).
        ClaudeCode = "claude-code",
        /// The OpenAI Codex CLI (`codex`).
        Codex = "codex",
    }
);

choice!(
    /// `permission_mode` of the Claude Code CLI (`--permission-mode`).
    PermissionMode, "permission mode", {
        /// Ask for each tool not allowed (headless: refused).
        Default = "default",
        /// Accept file edits.
        AcceptEdits = "acceptEdits",
        /// Plan only, change nothing.
        Plan = "plan",
        /// Every tool allowed without asking.
        BypassPermissions = "bypassPermissions",
        /// Never ask: a tool not allowed is refused.
        DontAsk = "dontAsk",
    }
);

choice!(
    /// `sandbox` of the Codex CLI (`--sandbox`).
    Sandbox, "sandbox", {
        /// Read files, change nothing.
        ReadOnly = "read-only",
        /// Write inside the working directory.
        WorkspaceWrite = "workspace-write",
    }
);

choice!(
    /// `reasoning_effort` of the Codex CLI (`-c model_reasoning_effort=…`).
    Effort, "reasoning effort", {
        /// Least reasoning.
        Minimal = "minimal",
        /// Low.
        Low = "low",
        /// Medium.
        Medium = "medium",
        /// High.
        High = "high",
    }
);

impl ConnectorKind {
    /// The program looked up on `PATH`.
    pub fn program(self) -> &'static str {
        match self {
            ConnectorKind::ClaudeCode => "claude",
            ConnectorKind::Codex => "codex",
        }
    }

    /// How to install the CLI (for the error when it is missing).
    pub fn install(self) -> &'static str {
        match self {
            ConnectorKind::ClaudeCode => {
                "install Claude Code (`npm install -g @anthropic-ai/claude-code`) and log in with `claude`"
            }
            ConnectorKind::Codex => {
                "install the Codex CLI (`npm install -g @openai/codex`) and log in with `codex login`"
            }
        }
    }
}

/// The settings of one `[agents.NAME]` table with a `connector`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Settings {
    /// `model`.
    pub model: Option<String>,
    /// `allowed_tools` (Claude Code).
    pub allowed_tools: Vec<String>,
    /// `permission_mode` (Claude Code).
    pub permission_mode: Option<PermissionMode>,
    /// `max_turns` (Claude Code).
    pub max_turns: Option<u64>,
    /// `sandbox` (Codex; `read-only` when not set: always passed explicitly).
    pub sandbox: Option<Sandbox>,
    /// `reasoning_effort` (Codex).
    pub reasoning_effort: Option<Effort>,
    /// The cost profile's dollars per dispatch (`usd`), for estimates.
    pub profile_usd: Option<f64>,
    /// The cost profile's tokens per dispatch (`tokens`), for estimates.
    pub profile_tokens: Option<f64>,
}

/// One connector run: the CLI, its exact argv, how to read what it prints.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Which CLI.
    pub kind: ConnectorKind,
    /// The program and its arguments (the prompt is one of them).
    pub argv: Vec<String>,
    /// The settings (for the dollar estimate).
    pub settings: Settings,
}

impl Call {
    /// The call that runs `entry` through `kind` with `settings`.
    pub fn new(kind: ConnectorKind, settings: &Settings, entry: &ReadyEntry) -> Call {
        let prompt = prompt(entry);
        Call {
            kind,
            argv: argv(kind, settings, prompt),
            settings: settings.clone(),
        }
    }
}

/// The argv of `kind` for `prompt`.
pub fn argv(kind: ConnectorKind, s: &Settings, prompt: String) -> Vec<String> {
    let mut a: Vec<String> = vec![kind.program().into()];
    match kind {
        ConnectorKind::ClaudeCode => {
            a.extend(["-p".into(), prompt, "--output-format".into(), "json".into()]);
            if let Some(m) = &s.model {
                a.extend(["--model".into(), m.clone()]);
            }
            if let Some(p) = s.permission_mode {
                a.extend(["--permission-mode".into(), p.as_str().into()]);
            }
            if let Some(n) = s.max_turns {
                a.extend(["--max-turns".into(), n.to_string()]);
            }
            // last: the flag takes every argument after it, one tool each
            // (a pattern such as `Bash(git diff:*)` holds a space)
            if !s.allowed_tools.is_empty() {
                a.push("--allowedTools".into());
                a.extend(s.allowed_tools.iter().cloned());
            }
        }
        ConnectorKind::Codex => {
            let sandbox = s.sandbox.unwrap_or(Sandbox::ReadOnly);
            a.extend(["exec".into(), "--json".into()]);
            a.extend(["--sandbox".into(), sandbox.as_str().into()]);
            if let Some(m) = &s.model {
                a.extend(["--model".into(), m.clone()]);
            }
            if let Some(e) = s.reasoning_effort {
                a.extend([
                    "-c".into(),
                    format!("model_reasoning_effort=\"{}\"", e.as_str()),
                ]);
            }
            // the prompt after `--`: a task starting with `-` is not a flag
            a.extend(["--".into(), prompt]);
        }
    }
    a
}

/// The prompt for one dispatch: everything the ready entry tells an agent,
/// and how to answer.
pub fn prompt(e: &ReadyEntry) -> String {
    let mut p = format!(
        "You are the `{}` agent of a Stratum flow run, doing one step: `{}` (attempt {}, {} left after this one).\n\n## Task\n\n{}\n",
        e.agent.as_str(),
        e.id,
        e.attempt,
        e.attempts_left,
        e.task
    );
    if let Some(item) = &e.item {
        p.push_str(&format!(
            "\n## Item\n\nItem {} (stage {}): {}\n",
            item.item_index, item.stage, item.item
        ));
        if let Some(prev) = item.prev.as_ref().filter(|v| !v.is_null()) {
            p.push_str(&format!("The previous stage's output: {prev}\n"));
        }
    }
    if let Some(c) = &e.contract {
        let schema = serde_json::to_string_pretty(&json_schema(c)).unwrap_or_default();
        p.push_str(&format!(
            "\n## Output contract (JSON Schema)\n\n```json\n{schema}\n```\n"
        ));
    }
    if !e.ensure.is_empty() {
        p.push_str("\n## Checks your output must pass\n\n");
        for en in &e.ensure {
            p.push_str(&format!("- {}\n", ensure_text(en)));
        }
    }
    if let Some(f) = &e.previous_failure {
        p.push_str(&format!(
            "\n## The previous attempt failed\n\n{}\n",
            serde_json::to_string(f).unwrap_or_else(|_| f.reason.clone())
        ));
    }
    if let Some(r) = &e.previous_revise {
        p.push_str(&format!(
            "\n## A reviewer sent this step back\n\n{}\n",
            serde_json::to_string(r).unwrap_or_default()
        ));
    }
    if let Some(r) = &e.previous_route {
        p.push_str(&format!(
            "\n## A later step sent the work back here\n\n{}\n",
            serde_json::to_string(r).unwrap_or_default()
        ));
    }
    if let Some(s) = &e.scope {
        p.push_str(&scope_text(s));
    }
    p.push_str(
        "\n## How to answer\n\nWhen you are done, reply with exactly one JSON object and nothing else: the output itself (matching the contract), or `{\"output\": ...}`; if you cannot do the task, `{\"failure\": \"why\"}`.\n",
    );
    p
}

/// What a scoped dispatch may change (X11): the runtime diffs the tree at
/// report and puts anything else back.
fn scope_text(s: &crate::interp::outcome::ScopeView) -> String {
    let mut t = String::from("\n## Files you may change\n\n");
    if s.files.is_empty() && s.create.is_empty() {
        t.push_str("None: this step is read-only; any change is put back and fails the attempt.\n");
        return t;
    }
    if !s.files.is_empty() {
        t.push_str(&format!("Change or delete only: {}\n", s.files.join(", ")));
    }
    if !s.create.is_empty() {
        t.push_str(&format!("Create only: {}\n", s.create.join(", ")));
    }
    if let Some(n) = s.max_changed_bytes {
        t.push_str(&format!("At most {n} bytes of added plus removed lines.\n"));
    }
    t.push_str("Any other change is put back and fails the attempt.\n");
    t
}

fn ensure_text(e: &EnsureView) -> String {
    match e {
        EnsureView::Expr(x) => format!("`{x}`"),
        EnsureView::FileExists(p) => format!("the file `{p}` exists"),
        EnsureView::FileContains { path, text } => format!("the file `{path}` contains `{text}`"),
        EnsureView::Judged { statement, stakes } => {
            format!("a judge agrees ({stakes} stakes): {statement}")
        }
        EnsureView::Scored {
            rubric, threshold, ..
        } => format!("a judge scores at least {threshold} on: {rubric}"),
        EnsureView::Exec { run, args, .. } => {
            format!("the declared command `{run}` passes (args {args:?})")
        }
    }
}

/// The contract as a JSON Schema (draft 2020-12): the root record, with
/// every record it reaches under `$defs`.
pub fn json_schema(c: &ContractView) -> Value {
    let mut defs = Map::new();
    for (name, fields) in &c.contracts.0 {
        defs.insert(name.clone(), record_schema(c, &fields.0));
    }
    let root = c
        .contracts
        .0
        .iter()
        .find(|(n, _)| *n == c.root)
        .map(|(_, f)| record_schema(c, &f.0))
        .unwrap_or_else(|| json!({"type": "object"}));
    let mut out =
        json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": c.root});
    if let (Some(o), Value::Object(r)) = (out.as_object_mut(), root) {
        o.extend(r);
        if defs.len() > 1 {
            o.insert("$defs".into(), Value::Object(defs));
        }
    }
    out
}

fn record_schema(c: &ContractView, fields: &[(String, String)]) -> Value {
    let mut props = Map::new();
    let mut required = Vec::new();
    for (name, ty) in fields {
        let (ty, optional) = match ty.strip_suffix('?') {
            Some(t) => (t, true),
            None => (ty.as_str(), false),
        };
        if !optional {
            required.push(Value::String(name.clone()));
        }
        props.insert(name.clone(), type_schema(c, ty));
    }
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

/// The schema of a contract field's type text (`string`, `integer[]`,
/// `a|b`, `(a|b)[]`, a record name; see `plan::disasm::type_string`).
fn type_schema(c: &ContractView, ty: &str) -> Value {
    if let Some(inner) = ty.strip_suffix("[]") {
        return json!({"type": "array", "items": type_schema(c, inner)});
    }
    let ty = ty
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or(ty);
    match ty {
        "string" | "integer" | "number" | "boolean" | "object" | "array" => json!({"type": ty}),
        name if c.contracts.0.iter().any(|(n, _)| n == name) => {
            json!({"$ref": format!("#/$defs/{name}")})
        }
        e if e.contains('|') => json!({"enum": e.split('|').collect::<Vec<_>>()}),
        single => json!({"enum": [single]}),
    }
}

/// What a connector's run printed, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The report for the dispatch.
    pub report: Report,
    /// The usage the CLI reported, when it reported any.
    pub usage: Option<Usage>,
}

/// A connector run's usage, for the run's audit (a usage receipt).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Usage {
    /// Tokens (input, cached and output together).
    pub tokens: f64,
    /// Dollars, when known or estimated.
    pub usd: Option<f64>,
    /// `reported` (the CLI's own bill) or `estimated` (from the profile).
    pub usd_source: Option<&'static str>,
    /// Milliseconds the CLI reported.
    pub ms: Option<f64>,
    /// The CLI's own usage object(s), as printed.
    pub raw: Value,
}

fn bad(kind: ConnectorKind, what: impl std::fmt::Display) -> Reading {
    Reading {
        report: Report {
            failure: Some(format!("the {} CLI {what}", kind.program())),
            ..Report::default()
        },
        usage: None,
    }
}

/// Reads what `call`'s CLI printed on stdout after it exited with `success`.
pub fn read(call: &Call, stdout: &[u8], success: bool) -> Reading {
    let text = String::from_utf8_lossy(stdout);
    match call.kind {
        ConnectorKind::ClaudeCode => read_claude(text.trim(), success),
        ConnectorKind::Codex => read_codex(call, &text, success),
    }
}

fn num(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

/// Claude Code's `--output-format json`: one object `{type: "result",
/// subtype, is_error, result, total_cost_usd, usage, duration_ms, ...}`.
fn read_claude(text: &str, success: bool) -> Reading {
    let kind = ConnectorKind::ClaudeCode;
    let doc: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) if success => return bad(kind, format_args!("printed no JSON result: {e}")),
        Err(_) => return bad(kind, "failed before printing a result"),
    };
    let usage = doc.get("usage").filter(|u| u.is_object()).map(|u| {
        let tokens = [
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ]
        .iter()
        .map(|k| num(u, k))
        .sum();
        let usd = doc.get("total_cost_usd").and_then(Value::as_f64);
        Usage {
            tokens,
            usd,
            usd_source: usd.map(|_| "reported"),
            ms: doc.get("duration_ms").and_then(Value::as_f64),
            raw: json!({"usage": u, "total_cost_usd": doc.get("total_cost_usd"), "num_turns": doc.get("num_turns"), "session_id": doc.get("session_id")}),
        }
    });
    let result = doc.get("result").and_then(Value::as_str);
    let is_error = doc
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // `error_max_turns` and the like may come with `is_error: false`
    let subtype = doc.get("subtype").and_then(Value::as_str);
    let failed = is_error || !success || subtype.is_some_and(|s| s != "success");
    let mut reading = match result {
        _ if failed => {
            let subtype = subtype.unwrap_or("error");
            bad(
                kind,
                format_args!("reported an error ({subtype}): {}", result.unwrap_or("")),
            )
        }
        None => bad(kind, "printed a result without a `result` text"),
        Some(r) => answer(kind, r),
    };
    reading.usage = usage;
    reading
}

/// Codex's `exec --json`: one event per line; the answer is the last
/// `item.completed` whose item is an `agent_message`, the usage the sum of
/// the `turn.completed` events' `usage`; `turn.failed` and `error` events
/// are failures.
fn read_codex(call: &Call, text: &str, success: bool) -> Reading {
    let kind = ConnectorKind::Codex;
    let (mut message, mut tokens, mut raw, mut error) = (None, 0.0, Vec::new(), None);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match ev.get("type").and_then(Value::as_str) {
            Some("item.completed") => {
                let item = &ev["item"];
                let t = item
                    .get("type")
                    .or_else(|| item.get("item_type"))
                    .and_then(Value::as_str);
                if t == Some("agent_message") {
                    message = item.get("text").and_then(Value::as_str).map(str::to_owned);
                }
            }
            Some("turn.completed") => {
                let u = &ev["usage"];
                tokens += num(u, "input_tokens") + num(u, "output_tokens");
                raw.push(u.clone());
            }
            Some("turn.failed") => {
                error = ev["error"]["message"].as_str().map(str::to_owned);
            }
            Some("error") => error = ev["message"].as_str().map(str::to_owned),
            _ => {}
        }
    }
    let usage = (!raw.is_empty()).then(|| {
        let s = &call.settings;
        let usd = match (s.profile_usd, s.profile_tokens) {
            (Some(usd), Some(per)) if per > 0.0 => Some(usd * tokens / per),
            (Some(usd), _) => Some(usd),
            _ => None,
        };
        Usage {
            tokens,
            usd,
            usd_source: usd.map(|_| "estimated"),
            ms: None,
            raw: Value::Array(raw),
        }
    });
    let mut reading = match (error, message) {
        (Some(e), _) => bad(kind, format_args!("reported an error: {e}")),
        (None, _) if !success => bad(kind, "failed"),
        (None, None) => bad(kind, "ended without an agent message"),
        (None, Some(m)) => answer(kind, &m),
    };
    reading.usage = usage;
    reading
}

/// The agent's answer text as a report: one JSON object (the output, or
/// `{output}` / `{failure}`), possibly in a ```json fence.
fn answer(kind: ConnectorKind, text: &str) -> Reading {
    let t = text.trim();
    let t = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|t| t.trim_end().strip_suffix("```"))
        .map_or(t, str::trim);
    let v: Value = match serde_json::from_str(t) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) | Err(_) => {
            let head: String = t.chars().take(200).collect();
            return bad(
                kind,
                format_args!(
                    "agent's answer is not one JSON object (the output, or {{\"output\": …}}): {head}"
                ),
            );
        }
    };
    match Report::from_json(&v) {
        Ok(report) => Reading {
            report: Report {
                usage: None,
                ..report
            },
            usage: None,
        },
        Err(e) => bad(kind, format_args!("agent's answer is malformed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_says_why_a_step_was_sent_back_and_what_it_may_change() {
        let entry = ReadyEntry {
            id: "implement/0".into(),
            task: "Apply IS1".into(),
            agent: crate::plan::Agent::Claude,
            attempt: 1,
            attempts_left: 1,
            dispatch_token: "d1".into(),
            dispatch: crate::interp::outcome::Dispatch::Step,
            contract: None,
            ensure: Vec::new(),
            previous_failure: None,
            previous_revise: None,
            previous_route: Some(crate::interp::PreviousRoute {
                from: "validate".into(),
                note: Some("the project's tests failed".into()),
                output: Value::Null,
                failure: None,
            }),
            item: None,
            cwd: None,
            timeout_ms: None,
            scope: Some(crate::interp::outcome::ScopeView {
                files: vec!["src/lib.rs".into()],
                create: Vec::new(),
                max_changed_bytes: Some(400),
            }),
        };
        let p = prompt(&entry);
        assert!(p.contains("A later step sent the work back here"), "{p}");
        assert!(p.contains("the project's tests failed"), "{p}");
        assert!(p.contains("Change or delete only: src/lib.rs"), "{p}");
        assert!(p.contains("At most 400 bytes"), "{p}");
        let fenced = ReadyEntry {
            scope: Some(crate::interp::outcome::ScopeView {
                files: Vec::new(),
                create: Vec::new(),
                max_changed_bytes: None,
            }),
            previous_route: None,
            ..entry
        };
        let p = prompt(&fenced);
        assert!(p.contains("this step is read-only"), "{p}");
        assert!(!p.contains("sent the work back"), "{p}");
    }

    fn call(kind: ConnectorKind, s: Settings) -> Call {
        Call {
            kind,
            argv: argv(kind, &s, "do it".into()),
            settings: s,
        }
    }

    #[test]
    fn claude_argv_carries_every_setting() {
        let s = Settings {
            model: Some("sonnet".into()),
            allowed_tools: vec!["Read".into(), "Edit".into()],
            permission_mode: Some(PermissionMode::AcceptEdits),
            max_turns: Some(7),
            ..Settings::default()
        };
        let a = call(ConnectorKind::ClaudeCode, s).argv;
        assert_eq!(
            a,
            [
                "claude",
                "-p",
                "do it",
                "--output-format",
                "json",
                "--model",
                "sonnet",
                "--permission-mode",
                "acceptEdits",
                "--max-turns",
                "7",
                "--allowedTools",
                "Read",
                "Edit"
            ]
        );
    }

    #[test]
    fn codex_argv_always_names_a_sandbox() {
        let a = call(ConnectorKind::Codex, Settings::default()).argv;
        assert_eq!(
            a,
            [
                "codex",
                "exec",
                "--json",
                "--sandbox",
                "read-only",
                "--",
                "do it"
            ]
        );
        let s = Settings {
            sandbox: Some(Sandbox::WorkspaceWrite),
            reasoning_effort: Some(Effort::High),
            model: Some("gpt-5".into()),
            ..Settings::default()
        };
        let a = call(ConnectorKind::Codex, s).argv;
        assert!(a.contains(&"workspace-write".to_string()));
        assert!(a.contains(&"model_reasoning_effort=\"high\"".to_string()));
        assert!(a.windows(2).any(|w| w == ["--model", "gpt-5"]));
    }

    #[test]
    fn claude_result_and_usage_are_read() {
        let out = json!({"type": "result", "subtype": "success", "is_error": false,
            "result": "```json\n{\"output\": {\"n\": 3}}\n```", "total_cost_usd": 0.25,
            "duration_ms": 1200, "usage": {"input_tokens": 10, "output_tokens": 5,
            "cache_read_input_tokens": 100}});
        let c = call(ConnectorKind::ClaudeCode, Settings::default());
        let r = read(&c, out.to_string().as_bytes(), true);
        assert_eq!(r.report.output, Some(json!({"n": 3})));
        let u = r.usage.unwrap();
        assert_eq!(
            (u.tokens, u.usd, u.usd_source),
            (115.0, Some(0.25), Some("reported"))
        );
        // the output itself is an answer too; prose is not
        let bare = json!({"result": "{\"n\": 4}", "usage": {}}).to_string();
        assert_eq!(
            read(&c, bare.as_bytes(), true).report.output,
            Some(json!({"n": 4}))
        );
        let prose = json!({"result": "I did it!"}).to_string();
        let f = read(&c, prose.as_bytes(), true).report.failure.unwrap();
        assert!(f.contains("not one JSON object"), "{f}");
        let err = json!({"is_error": true, "subtype": "error_max_turns", "result": ""}).to_string();
        let f = read(&c, err.as_bytes(), false).report.failure.unwrap();
        assert!(f.contains("error_max_turns"), "{f}");
        // a turn limit reported as no error, with no result, on exit 0, is still a failure
        let quiet = json!({"type": "result", "subtype": "error_max_turns", "is_error": false,
            "usage": {"input_tokens": 9}, "total_cost_usd": 0.5});
        let r = read(&c, quiet.to_string().as_bytes(), true);
        assert!(r.report.failure.unwrap().contains("error_max_turns"));
        assert_eq!(r.usage.unwrap().usd, Some(0.5), "its bill still counts");
    }

    #[test]
    fn codex_events_give_the_answer_and_estimated_dollars() {
        let s = Settings {
            profile_usd: Some(1.0),
            profile_tokens: Some(1000.0),
            ..Settings::default()
        };
        let c = call(ConnectorKind::Codex, s);
        let lines = [
            json!({"type": "thread.started", "thread_id": "t"}),
            json!({"type": "turn.started"}),
            json!({"type": "item.completed", "item": {"id": "i0", "type": "reasoning", "text": "hm"}}),
            json!({"type": "item.completed", "item": {"id": "i1", "type": "agent_message", "text": "{\"ok\": true}"}}),
            json!({"type": "turn.completed", "usage": {"input_tokens": 300, "cached_input_tokens": 100, "output_tokens": 200}}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let r = read(&c, text.as_bytes(), true);
        assert_eq!(r.report.output, Some(json!({"ok": true})));
        let u = r.usage.unwrap();
        assert_eq!(
            (u.tokens, u.usd, u.usd_source),
            (500.0, Some(0.5), Some("estimated"))
        );
        let failed =
            json!({"type": "turn.failed", "error": {"message": "rate limited"}}).to_string();
        let f = read(&c, failed.as_bytes(), false).report.failure.unwrap();
        assert!(f.contains("rate limited"), "{f}");
    }

    #[test]
    fn a_contract_becomes_a_json_schema() {
        use crate::interp::outcome::Ordered;
        let c = ContractView {
            root: "Plan".into(),
            contracts: Ordered(vec![
                (
                    "Plan".into(),
                    Ordered(vec![
                        ("steps".into(), "Step[]".into()),
                        ("risk".into(), "low|high".into()),
                        ("note".into(), "string?".into()),
                    ]),
                ),
                ("Step".into(), Ordered(vec![("n".into(), "integer".into())])),
            ]),
        };
        let s = json_schema(&c);
        assert_eq!(s["properties"]["steps"]["items"]["$ref"], "#/$defs/Step");
        assert_eq!(s["properties"]["risk"]["enum"], json!(["low", "high"]));
        assert_eq!(s["required"], json!(["steps", "risk"]));
        assert_eq!(s["$defs"]["Step"]["properties"]["n"]["type"], "integer");
    }
}
