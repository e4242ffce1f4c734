//! The structural decoder: spanned YAML → [`ast::Spec`].
//!
//! Owns: the shape of the v1 schema — strict objects, required fields, value
//! types, enums and name patterns, the construct/field matrix — with
//! did-you-mean suggestions for unknown fields and values. Steps are decoded
//! in [`step`].
//! Must never: resolve names across the spec (unknown steps, contracts, flows
//! are `check`'s job) or parse expressions and templates.

use super::ast::*;
use crate::diagnostics::{Code, Diagnostic, Sink, did_you_mean};
use crate::source::Span;
use crate::yaml::{Entry, Node, Str, Value};

mod on_fail;
mod route;
mod step;

pub const ROOT_FIELDS: &[&str] = &["version", "contracts", "flows"];
pub const FLOW_FIELDS: &[&str] = &[
    "input",
    "output",
    "steps",
    "budget",
    "max_rounds",
    "carry",
    "dispatch_timeout_ms",
];
pub const STEP_FIELDS: &[&str] = &[
    "id",
    "after",
    "when",
    "do",
    "set",
    "gate",
    "fanout",
    "run",
    "evaluate",
    "agent",
    "out",
    "ensure",
    "attempts",
    "iterate",
    "budget",
    "on_fail",
    "with",
    "cost",
    "timeout_ms",
    "artifacts",
    "scope",
    "route",
];
/// Fields of a `route` entry (X9; `rollback` is X11).
pub const ROUTE_FIELDS: &[&str] = &["when", "goto", "max", "note", "fail", "rollback"];
/// Fields of an `on_fail` mapping (X9; `rollback` is X11, with `goto` only).
pub const ON_FAIL_FIELDS: &[&str] = &["when", "goto", "max", "note", "rollback"];
pub const CONSTRUCTS: &[&str] = &["do", "set", "gate", "fanout", "run", "evaluate"];
/// Step fields every construct takes.
pub const SHARED_STEP_FIELDS: &[&str] = &["id", "after", "when"];
pub const STAGE_FIELDS: &[&str] = &[
    "do",
    "agent",
    "out",
    "ensure",
    "attempts",
    "when",
    "cost",
    "timeout_ms",
    "artifacts",
    "scope",
    "on_fail",
];
/// Keys of `scope` (X11).
pub const SCOPE_FIELDS: &[&str] = &["files", "create", "max_changed_bytes"];
/// Keys of `cost` hints (X6).
pub const COST_FIELDS: &[&str] = &["tokens", "usd", "ms", "p", "judge_tokens"];
pub const FANOUT_FIELDS: &[&str] = &[
    "over",
    "steps",
    "concurrency",
    "isolation",
    "require",
    "merge",
    "pre_merge",
    "dispatch",
];
pub const GATE_FIELDS: &[&str] = &[
    "on_approve",
    "on_revise",
    "on_kill",
    "max_rounds",
    "prompt",
    "show",
    "options",
];
pub const BUDGET_FIELDS: &[&str] = &["usd", "tokens", "dispatches", "ms"];
/// Fields of `iterate`.
pub const ITERATE_FIELDS: &[&str] = &["max", "until"];
/// Fields of a flow's `output`.
pub const OUTPUT_FIELDS: &[&str] = &["from", "contract"];
/// Fields of a carry variable.
pub const CARRY_FIELDS: &[&str] = &["initial", "on_revise"];
/// Fields of `file_contains`.
pub const FILE_CONTAINS_FIELDS: &[&str] = &["path", "text"];
/// Fields of `judged` (both forms: `statement`/`stakes`, and the scored
/// form's `rubric`/`threshold`/`judge`/`inputs` of X5).
pub const JUDGED_FIELDS: &[&str] = &[
    "statement",
    "stakes",
    "rubric",
    "threshold",
    "judge",
    "inputs",
];
/// Fields of the scored form of `judged` (X5).
pub const SCORED_FIELDS: &[&str] = &["rubric", "threshold", "judge", "inputs"];
/// The forms of an ensure predicate.
pub const PREDICATE_FORMS: &[&str] = &["expr", "file_exists", "file_contains", "judged", "exec"];
/// Fields of `evaluate` (v1 §4.9, X12).
pub const EVALUATE_FIELDS: &[&str] = &["command", "timeout_ms", "in"];
/// Fields of `exec` (X12).
pub const EXEC_FIELDS: &[&str] = &["run", "args", "expect_exit", "timeout_ms"];
/// Values of `agent` (the plan's names).
pub const AGENTS: &[(&str, Agent)] = Agent::NAMED;
/// Values of `fanout.isolation`.
pub const ISOLATIONS: &[(&str, Isolation)] =
    &[("none", Isolation::None), ("worktree", Isolation::Worktree)];
/// Word values of `fanout.require` (besides a positive integer).
pub const REQUIRE_WORDS: &[(&str, Require)] = &[("all", Require::All), ("any", Require::Any)];
/// Values of `fanout.merge`.
pub const MERGES: &[(&str, ())] = &[("sequential", ())];
/// Values of `fanout.dispatch`.
pub const DISPATCHES: &[(&str, Dispatch)] = &[
    ("engine", Dispatch::Engine),
    ("consumer", Dispatch::Consumer),
];
/// Values of `judged.stakes` (the plan's names).
pub const STAKES: &[(&str, Stakes)] = Stakes::NAMED;
/// What each key means, one line (hover and completion in the language
/// server): `(parent, key, doc)`, where `parent` is the key of the mapping
/// the key sits in (`"steps"` for a step or a fanout stage, `""` for any
/// place the key is not listed under its parent). The first match wins.
pub const KEY_DOCS: &[(&str, &str, &str)] = &[
    ("", "version", "the spec language version: `1`"),
    ("", "contracts", "named record types: `Name: {field: type}`"),
    (
        "",
        "flows",
        "the flows, and `entry: NAME`, the flow a run starts with",
    ),
    ("flows", "entry", "the flow a run starts with"),
    ("", "input", "the flow's input fields: `{name: type}`"),
    (
        "",
        "output",
        "what the flow returns: `from` a template, as `contract`",
    ),
    (
        "output",
        "from",
        "the template the flow's output is rendered from",
    ),
    (
        "output",
        "contract",
        "the contract the flow's output must satisfy",
    ),
    ("cost", "tokens", "X6: expected tokens of one attempt"),
    ("cost", "usd", "X6: expected dollars of one attempt"),
    ("cost", "ms", "X6: expected milliseconds of one attempt"),
    (
        "cost",
        "p",
        "X6: probability that one attempt succeeds (0 < p <= 1)",
    ),
    (
        "cost",
        "judge_tokens",
        "X6: expected tokens of the judge calls of one attempt",
    ),
    (
        "budget",
        "usd",
        "the most dollars the flow or step may spend",
    ),
    (
        "budget",
        "tokens",
        "the most tokens the flow or step may spend",
    ),
    (
        "budget",
        "dispatches",
        "the most agent dispatches the flow or step may make",
    ),
    (
        "budget",
        "ms",
        "the most milliseconds the flow or step may take",
    ),
    (
        "judged",
        "statement",
        "what an LLM judge must agree is true of the result",
    ),
    (
        "judged",
        "stakes",
        "how much a wrong verdict costs: it picks the judge",
    ),
    (
        "judged",
        "rubric",
        "X5: how the judge scores the result, from 0 to 1",
    ),
    (
        "judged",
        "threshold",
        "X5: the least score that passes (0 to 1)",
    ),
    (
        "judged",
        "judge",
        "X5: the `[judges.NAME]` of stratum.toml that scores (default: `[judge]`)",
    ),
    (
        "judged",
        "inputs",
        "X5: templates the judge reads besides the result: `{name: template}`",
    ),
    (
        "",
        "steps",
        "the steps: a list of `- id: ...` with one construct each",
    ),
    (
        "",
        "budget",
        "limits on dollars, tokens, dispatches and milliseconds",
    ),
    (
        "",
        "max_rounds",
        "how many times a gate may send the flow back for revision",
    ),
    (
        "",
        "carry",
        "variables kept across gate revisions: `{name: {initial, on_revise}}`",
    ),
    (
        "",
        "dispatch_timeout_ms",
        "X2: the default `timeout_ms` of every dispatch of the flow",
    ),
    (
        "",
        "timeout_ms",
        "X2: the most milliseconds one dispatch may take; then it fails with `timeout`",
    ),
    (
        "",
        "cost",
        "X6: expected cost of one attempt: `{tokens, usd, ms, p, judge_tokens}`",
    ),
    (
        "",
        "artifacts",
        "X4: files the step leaves for later steps: templated paths",
    ),
    (
        "",
        "id",
        "the step's id, unique in the flow: `[a-z][a-z0-9_-]*`",
    ),
    ("", "after", "steps that must finish first: `[id, ...]`"),
    (
        "",
        "when",
        "an expression: the step runs only when it is true, else it is skipped",
    ),
    ("", "do", "a task for an agent: a template"),
    (
        "",
        "set",
        "computes values without an agent: `{name: expression}`",
    ),
    (
        "",
        "gate",
        "waits for a human decision: approve, revise or kill",
    ),
    ("", "fanout", "runs stages for each element of `over`"),
    ("", "run", "runs another flow as a sub-flow"),
    (
        "",
        "evaluate",
        "runs a declared command (`[commands.NAME]`) and takes its stdout as the result object (X12)",
    ),
    ("", "agent", "which agent runs the task"),
    ("", "out", "the contract the step's result must satisfy"),
    (
        "",
        "ensure",
        "predicates the result must meet, or the attempt fails",
    ),
    (
        "",
        "attempts",
        "how many times the step is tried before it fails",
    ),
    (
        "",
        "iterate",
        "repeats the step: at most `max` times, `until` an expression holds",
    ),
    (
        "",
        "on_fail",
        "where a failure goes: a step id, `null`, or `continue` (X1: the flow goes on)",
    ),
    ("", "with", "the sub-flow's input: `{field: template}`"),
    ("", "prompt", "X4: a template the human reads at the gate"),
    (
        "",
        "show",
        "X4: templates (artifacts, outputs) shown at the gate",
    ),
    (
        "",
        "on_approve",
        "the step the flow goes on with when the gate is approved",
    ),
    (
        "",
        "on_revise",
        "the step the flow goes back to when the gate asks for revision",
    ),
    (
        "",
        "on_kill",
        "the step that runs when the gate kills the run",
    ),
    (
        "",
        "over",
        "the list a fanout runs its stages for (`${item}` in them)",
    ),
    ("", "concurrency", "how many fanout items run at once"),
    (
        "",
        "isolation",
        "`none`, or `worktree`: each item in its own git worktree",
    ),
    (
        "",
        "require",
        "how many items must succeed: `all`, `any` or a number",
    ),
    (
        "",
        "merge",
        "how the items' worktrees are merged: `sequential`",
    ),
    (
        "",
        "pre_merge",
        "checks each item's worktree must pass before it is merged",
    ),
    (
        "",
        "dispatch",
        "who dispatches the items: `engine` or `consumer`",
    ),
    ("", "expr", "an expression the result must make true"),
    ("", "file_exists", "a templated path that must exist"),
    (
        "",
        "file_contains",
        "a templated path whose file must contain `text`",
    ),
    (
        "",
        "judged",
        "an LLM judge decides: a `statement`, or a `rubric` and `threshold` (X5)",
    ),
    ("", "max", "the most iterations"),
    (
        "",
        "until",
        "an expression: iteration stops when it is true",
    ),
    ("", "initial", "the carry variable's first value"),
    (
        "",
        "route",
        "conditional edges tried in order after the step succeeded: `{when, goto, max, note?, rollback?}` or `{when, fail}` (X9)",
    ),
    (
        "",
        "goto",
        "a strict ancestor to go back to: its reset closure runs again (X9)",
    ),
    (
        "",
        "fail",
        "a template: the step fails with this reason when the entry fires (X9)",
    ),
    (
        "",
        "rollback",
        "a scoped `do` step: the workspace is restored to its latest entry's snapshot first (X11)",
    ),
    (
        "route",
        "when",
        "the condition over `result` (the step's output), `input` and `steps`",
    ),
    (
        "route",
        "max",
        "how often this route may fire in the whole run (required)",
    ),
    (
        "route",
        "note",
        "a template the re-entered step reads as `previousRoute.note`",
    ),
    (
        "on_fail",
        "when",
        "the condition over `failure` (`{reason, violations}`)",
    ),
    (
        "on_fail",
        "max",
        "how often this entry may take a failure in the whole run (required)",
    ),
    (
        "on_fail",
        "note",
        "a template the re-entered step reads as `previousRoute.note`",
    ),
    (
        "",
        "scope",
        "what the dispatch may change in its git working tree; `files: []` is a write fence (X11)",
    ),
    (
        "",
        "files",
        "paths or globs (templates) the dispatch may change",
    ),
    (
        "",
        "create",
        "paths or globs (templates) the dispatch may create",
    ),
    (
        "",
        "max_changed_bytes",
        "the most bytes of added plus removed lines over every changed file",
    ),
    (
        "",
        "options",
        "what a decision's `choice` may be: a list of strings, or one reference to a list (X10)",
    ),
    (
        "",
        "exec",
        "runs a declared command (`[commands.NAME]` in stratum.toml); holds iff its exit status is `expect_exit` (X12)",
    ),
    (
        "exec",
        "run",
        "the name of a `[commands.NAME]` entry of stratum.toml",
    ),
    (
        "exec",
        "args",
        "argument templates, each one argument (a list renders one per element; no shell, no globbing)",
    ),
    (
        "exec",
        "expect_exit",
        "the exit status that passes (default 0)",
    ),
    (
        "exec",
        "timeout_ms",
        "the check's time limit (the smaller of this and the command's)",
    ),
    (
        "evaluate",
        "command",
        "the name of a `[commands.NAME]` entry of stratum.toml",
    ),
    (
        "evaluate",
        "timeout_ms",
        "the command's time limit in milliseconds",
    ),
    (
        "evaluate",
        "in",
        "a template written to the command's stdin",
    ),
];

/// The one-line meaning of `key` in the mapping under `parent` ([`KEY_DOCS`]).
pub fn key_doc(parent: Option<&str>, key: &str) -> Option<&'static str> {
    let exact = KEY_DOCS
        .iter()
        .find(|(p, k, _)| !p.is_empty() && Some(*p) == parent && *k == key);
    exact
        .or_else(|| KEY_DOCS.iter().find(|(p, k, _)| p.is_empty() && *k == key))
        .map(|(_, _, doc)| *doc)
}

/// Names that may never be used as field, carry or key names.
pub const RESERVED: &[&str] = &["__proto__", "constructor", "prototype"];

/// Which step fields each construct accepts (besides [`SHARED_STEP_FIELDS`]):
/// the construct/field matrix.
pub fn allowed_for(construct: &str) -> &'static [&'static str] {
    match construct {
        "do" => &[
            "agent",
            "out",
            "ensure",
            "attempts",
            "iterate",
            "budget",
            "on_fail",
            "cost",
            "timeout_ms",
            "artifacts",
            "scope",
            "route",
        ],
        "set" => &["out", "ensure", "on_fail", "route"],
        "gate" => &[],
        "fanout" => &["attempts", "budget", "on_fail", "route"],
        "run" => &["budget", "on_fail", "with", "route", "iterate"],
        // v1 §4.9 takes `out`; X9/X12 add `on_fail` (an evaluate failure is terminal)
        _ => &["out", "on_fail"],
    }
}

/// Whether `s` is a valid step id (`^[a-z][a-z0-9_-]*$`).
pub fn is_step_id(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
}

/// Whether `s` is a valid contract or field name (`^[A-Za-z_][A-Za-z0-9_]*$`).
pub fn is_field_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z' | 'A'..='Z' | '_'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Decodes the root node of a spec. `root` is `None` for an empty document.
pub fn decode(root: Option<&Node>, text_len: u32, sink: &mut Sink) -> Spec {
    let mut d = Decoder { sink };
    let Some(root) = root else {
        d.sink.push(
            Diagnostic::new(
                Code::WrongType,
                Span::new(0, text_len.min(1)),
                "a spec must be a mapping, found an empty document",
            )
            .with_help("start with `version: 1`, then `contracts:` and `flows:`"),
        );
        return Spec::default();
    };
    d.spec(root)
}

struct Decoder<'s> {
    sink: &'s mut Sink,
}

/// A mapping being decoded.
struct Obj<'a> {
    entries: &'a [Entry],
    /// Where to report missing fields.
    owner: Span,
}

impl<'a> Obj<'a> {
    fn get(&self, key: &str) -> Option<&'a Entry> {
        self.entries.iter().find(|e| e.key.text == key)
    }
}

fn name(s: &Str) -> Name {
    Name {
        text: s.text.clone(),
        span: s.span,
    }
}

impl Decoder<'_> {
    fn err(&mut self, code: Code, span: Span, message: impl Into<String>) -> &mut Diagnostic {
        self.sink.push(Diagnostic::new(code, span, message));
        self.last()
    }

    /// The diagnostic pushed last (only called right after a push).
    fn last(&mut self) -> &mut Diagnostic {
        self.sink
            .last_mut()
            .expect("invariant: called right after a diagnostic was pushed")
    }

    fn wrong_type(&mut self, node: &Node, expected: &str, what: &str) {
        let mut d = Diagnostic::new(
            Code::WrongType,
            node.span,
            format!("expected {expected} for {what}, found {}", node.type_name()),
        );
        if matches!(node.value, Value::Null) {
            d = d.with_note("`null` never means \"absent\" in a spec: leave the field out instead");
        } else if let Value::String(s) = &node.value
            && (expected.contains("integer") || expected.contains("number"))
            && s.text.trim().parse::<f64>().is_ok()
        {
            d = d.with_help(format!("remove the quotes: `{}`", s.text.trim()));
        } else if let Value::Number(n) = node.value
            && expected == "a string"
        {
            d = d.with_help(format!("quote it: `\"{}\"`", crate::yaml::format_number(n)));
        }
        self.sink.push(d);
    }

    /// Expects a mapping; `owner` is where missing fields are reported.
    fn obj<'a>(&mut self, node: &'a Node, what: &str, owner: Option<Span>) -> Option<Obj<'a>> {
        match &node.value {
            Value::Mapping(entries) => {
                let owner = owner.unwrap_or_else(|| {
                    entries
                        .first()
                        .map_or(node.span, |e| Span::new(node.span.start, e.key.span.end))
                });
                Some(Obj { entries, owner })
            }
            _ => {
                self.wrong_type(node, "a mapping", what);
                None
            }
        }
    }

    /// Reports keys not in `allowed`.
    fn strict(&mut self, obj: &Obj<'_>, allowed: &[&str], what: &str) {
        for e in obj.entries {
            if !allowed.contains(&e.key.text.as_str()) {
                let help = did_you_mean(&e.key.text, allowed.iter().copied());
                let d = Diagnostic::new(
                    Code::UnknownField,
                    e.key.span,
                    format!("unknown field `{}` in {what}", e.key.text),
                )
                .with_span_label("not a field here")
                .with_note(format!("{what} accepts: {}", allowed.join(", ")))
                .with_help_opt(help);
                self.sink.push(d);
            }
        }
    }

    fn required<'a>(&mut self, obj: &Obj<'a>, key: &str, what: &str) -> Option<&'a Entry> {
        let e = obj.get(key);
        if e.is_none() {
            self.err(
                Code::MissingField,
                obj.owner,
                format!("{what} is missing the required field `{key}`"),
            );
        }
        e
    }

    fn string(&mut self, node: &Node, what: &str) -> Option<Str> {
        match &node.value {
            Value::String(s) => Some(s.clone()),
            _ => {
                self.wrong_type(node, "a string", what);
                None
            }
        }
    }

    /// A list of strings (X4's `artifacts` and a gate's `show`): each entry
    /// that is not a string is reported and left out.
    fn string_list(&mut self, node: &Node, what: &str) -> Vec<Str> {
        match &node.value {
            Value::Sequence(items) => items
                .iter()
                .filter_map(|i| self.string(i, &format!("an entry of {what}")))
                .collect(),
            _ => {
                self.wrong_type(node, "a list of strings (paths or globs)", what);
                Vec::new()
            }
        }
    }

    fn positive_int(&mut self, node: &Node, what: &str) -> Option<Int> {
        match node.value {
            Value::Number(n) => {
                if n.fract() == 0.0 && (1.0..=9_007_199_254_740_991.0).contains(&n) {
                    Some(Int {
                        value: n as u64,
                        span: node.span,
                    })
                } else {
                    self.err(
                        Code::InvalidValue,
                        node.span,
                        format!(
                            "{what} must be a positive integer, found `{}`",
                            crate::yaml::format_number(n)
                        ),
                    );
                    None
                }
            }
            _ => {
                self.wrong_type(node, "a positive integer", what);
                None
            }
        }
    }

    /// A dispatch lease (X7): a positive integer of milliseconds.
    pub(super) fn lease(&mut self, node: &Node, what: &str) -> Option<Int> {
        let ms = self.positive_int(node, what);
        if ms.is_none() {
            self.last().help = Some(
                "a lease is a whole number of milliseconds, e.g. `600000` for ten minutes".into(),
            );
        }
        ms
    }

    fn step_id(&mut self, node: &Node, what: &str) -> Option<Name> {
        let s = self.string(node, what)?;
        if is_step_id(&s.text) {
            Some(name(&s))
        } else {
            let lower: String = s
                .text
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c.to_ascii_lowercase()
                    } else {
                        '_'
                    }
                })
                .collect();
            let d = self.err(
                Code::InvalidValue,
                s.span,
                format!("invalid step id `{}`", s.text),
            );
            d.notes.push("step ids start with a lowercase letter and contain only lowercase letters, digits, `_` and `-`".into());
            if is_step_id(&lower) {
                d.help = Some(format!("write `{lower}`"));
            }
            // keep the name so that references to it resolve (one diagnostic per root cause)
            Some(name(&s))
        }
    }

    fn one_of<T: Copy>(&mut self, node: &Node, what: &str, options: &[(&str, T)]) -> Option<T> {
        let s = self.string(node, what)?;
        if let Some((_, v)) = options.iter().find(|(k, _)| *k == s.text) {
            return Some(*v);
        }
        let names: Vec<&str> = options.iter().map(|(k, _)| *k).collect();
        let help = did_you_mean(&s.text, names.iter().copied());
        let d = self.err(
            Code::InvalidValue,
            s.span,
            format!("invalid {what} `{}`", s.text),
        );
        d.notes.push(format!(
            "expected one of: {}",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        d.help = help;
        None
    }

    fn reserved(&mut self, key: &Str, what: &str) -> bool {
        if RESERVED.contains(&key.text.as_str()) {
            self.err(
                Code::ReservedName,
                key.span,
                format!("`{}` is a reserved name and cannot be {what}", key.text),
            );
            true
        } else {
            false
        }
    }

    fn spec(&mut self, root: &Node) -> Spec {
        let mut spec = Spec {
            span: root.span,
            ..Spec::default()
        };
        let Value::Mapping(entries) = &root.value else {
            let d = Diagnostic::new(
                Code::WrongType,
                root.span,
                format!(
                    "a spec must be a mapping with `version`, `contracts` and `flows`, found {}",
                    root.type_name()
                ),
            );
            self.sink.push(d);
            return spec;
        };
        let obj = Obj {
            entries,
            owner: entries.first().map_or(root.span, |e| e.key.span),
        };
        self.strict(&obj, ROOT_FIELDS, "the spec root");
        if let Some(v) = self.required(&obj, "version", "the spec") {
            self.version(&v.value);
        }
        let contracts = self.required(&obj, "contracts", "the spec");
        match contracts.and_then(|c| self.obj(&c.value, "`contracts`", Some(c.key.span))) {
            Some(body) => {
                for e in body.entries {
                    if let Some(contract) = self.contract(e) {
                        spec.contracts.push(contract);
                    }
                }
            }
            None => spec.contracts_broken = true,
        }
        if let Some(f) = self.required(&obj, "flows", "the spec")
            && let Some(flows) = self.obj(&f.value, "`flows`", Some(f.key.span))
        {
            match self.required(&flows, "entry", "`flows`") {
                Some(e) => spec.entry = self.string(&e.value, "`flows.entry`").map(|s| name(&s)),
                None => {
                    self.last().help =
                        Some("add `entry: <flow name>` naming the flow that runs first".into());
                }
            }
            for e in flows.entries {
                if e.key.text != "entry"
                    && let Some(flow) = self.flow(e)
                {
                    spec.flows.push(flow);
                }
            }
        }
        spec
    }

    fn version(&mut self, node: &Node) {
        match &node.value {
            Value::Number(n) if *n == 1.0 => {}
            Value::String(s) if s.text.trim() == "1" => {
                self.err(
                    Code::UnsupportedVersion,
                    node.span,
                    "`version` must be the number 1, found a string",
                )
                .help = Some("write `version: 1` without quotes".into());
            }
            Value::Number(n) => {
                let d = self.err(
                    Code::UnsupportedVersion,
                    node.span,
                    format!(
                        "unsupported spec version `{}`: stratumc reads version 1 specs",
                        crate::yaml::format_number(*n)
                    ),
                );
                if *n < 1.0 {
                    d.help = Some("v0.x specs must be rewritten for v1; `stratumc migrate --check` will classify them".into());
                }
            }
            _ => {
                self.err(
                    Code::UnsupportedVersion,
                    node.span,
                    format!("`version` must be the number 1, found {}", node.type_name()),
                );
            }
        }
    }

    fn fields(&mut self, node: &Node, owner: Span, what: &str) -> Option<Vec<Field>> {
        let obj = self.obj(node, what, Some(owner))?;
        let mut fields = Vec::new();
        let mut ok = true;
        for e in obj.entries {
            if self.reserved(&e.key, "a field name") {
                ok = false;
                continue;
            }
            if !is_field_name(&e.key.text) {
                let d = self.err(
                    Code::InvalidValue,
                    e.key.span,
                    format!("invalid field name `{}`", e.key.text),
                );
                d.notes
                    .push("field names match `[A-Za-z_][A-Za-z0-9_]*`".into());
                ok = false;
                continue;
            }
            let ty = self.string(&e.value, &format!("the type of field `{}`", e.key.text));
            if ty.is_none() {
                ok = false;
            }
            fields.push(Field {
                name: name(&e.key),
                ty,
            });
        }
        let _ = ok;
        Some(fields)
    }

    fn contract(&mut self, e: &Entry) -> Option<Contract> {
        if !is_field_name(&e.key.text) {
            let d = self.err(
                Code::InvalidValue,
                e.key.span,
                format!("invalid contract name `{}`", e.key.text),
            );
            d.notes
                .push("contract names match `[A-Za-z_][A-Za-z0-9_]*`".into());
            return None;
        }
        let before = self.sink.len();
        let fields = self.fields(&e.value, e.key.span, &format!("contract `{}`", e.key.text));
        let ok = fields.is_some() && self.sink.len() == before;
        Some(Contract {
            name: name(&e.key),
            fields: fields.unwrap_or_default(),
            ok,
        })
    }

    fn budget(&mut self, node: &Node, owner: Span) -> Option<Budget> {
        let obj = self.obj(node, "`budget`", Some(owner))?;
        self.strict(&obj, BUDGET_FIELDS, "`budget`");
        let mut b = Budget {
            span: node.span,
            ..Budget::default()
        };
        if obj.entries.is_empty() {
            self.err(
                Code::EmptyBudget,
                node.span,
                "a budget needs at least one limit",
            )
            .help = Some("set one or more of `usd`, `tokens`, `dispatches`, `ms`".into());
            return None;
        }
        if let Some(e) = obj.get("usd") {
            match e.value.value {
                Value::Number(n) if n > 0.0 && !n.is_nan() => b.usd = Some(n),
                Value::Number(n) => {
                    self.err(
                        Code::InvalidValue,
                        e.value.span,
                        format!(
                            "`budget.usd` must be a positive number, found `{}`",
                            crate::yaml::format_number(n)
                        ),
                    );
                }
                _ => self.wrong_type(&e.value, "a positive number", "`budget.usd`"),
            }
        }
        for (key, slot) in [
            ("tokens", &mut b.tokens),
            ("dispatches", &mut b.dispatches),
            ("ms", &mut b.ms),
        ] {
            if let Some(e) = obj.get(key) {
                *slot = self
                    .positive_int(&e.value, &format!("`budget.{key}`"))
                    .map(|i| i.value);
            }
        }
        Some(b)
    }

    fn flow(&mut self, e: &Entry) -> Option<Flow> {
        let what = format!("flow `{}`", e.key.text);
        let obj = self.obj(&e.value, &what, Some(e.key.span))?;
        self.strict(&obj, FLOW_FIELDS, "a flow");
        let mut flow = Flow::named(name(&e.key));
        if let Some(i) = self.required(&obj, "input", &what) {
            flow.input = self.fields(&i.value, i.key.span, "the flow `input`");
        } else {
            self.last().help = Some("add `input: {}` when the flow takes no input".into());
        }
        if let Some(o) = self.required(&obj, "output", &what)
            && let Some(out) = self.obj(&o.value, "`output`", Some(o.key.span))
        {
            self.strict(&out, OUTPUT_FIELDS, "`output`");
            let from = self
                .required(&out, "from", "`output`")
                .and_then(|f| self.string(&f.value, "`output.from`"));
            let contract = self
                .required(&out, "contract", "`output`")
                .and_then(|c| self.string(&c.value, "`output.contract`"));
            flow.output = Some(Output {
                from,
                contract: contract.map(|c| name(&c)),
                key_span: o.key.span,
            });
        }
        if let Some(s) = self.required(&obj, "steps", &what) {
            match &s.value.value {
                Value::Sequence(items) => {
                    for item in items {
                        if let Some(step) = self.step(item) {
                            flow.steps.push(step);
                        }
                    }
                }
                _ => {
                    flow.steps_broken = true;
                    self.wrong_type(&s.value, "a list of steps", "`steps`");
                }
            }
        } else {
            flow.steps_broken = true;
        }
        if let Some(b) = obj.get("budget") {
            flow.budget = self.budget(&b.value, b.key.span);
        }
        if let Some(m) = obj.get("max_rounds") {
            flow.max_rounds = self.positive_int(&m.value, "`max_rounds`");
        }
        if let Some(c) = obj.get("carry") {
            flow.carry = self.carry(c);
        }
        if let Some(t) = obj.get("dispatch_timeout_ms") {
            flow.dispatch_timeout_ms = self.lease(&t.value, "`dispatch_timeout_ms`");
        }
        Some(flow)
    }

    /// `cost: {tokens?, usd?, ms?, p?, judge_tokens?}` (X6): non-negative
    /// numbers, `p` a probability, at least one key.
    fn cost_hint(&mut self, e: &Entry) -> Option<CostHint> {
        let obj = self.obj(&e.value, "`cost`", Some(e.key.span))?;
        self.strict(&obj, COST_FIELDS, "`cost`");
        if obj.entries.is_empty() {
            self.err(
                Code::InvalidValue,
                e.value.span,
                "`cost` hints need at least one figure",
            )
            .help = Some("set one or more of `tokens`, `usd`, `ms`, `p`, `judge_tokens`".into());
            return None;
        }
        let mut hint = CostHint {
            span: e.value.span,
            ..CostHint::default()
        };
        for (key, slot) in [
            ("tokens", &mut hint.tokens),
            ("usd", &mut hint.usd),
            ("ms", &mut hint.ms),
            ("p", &mut hint.p),
            ("judge_tokens", &mut hint.judge_tokens),
        ] {
            let Some(v) = obj.get(key) else { continue };
            let (max, want) = match key {
                "p" => (1.0, "a probability from 0 to 1"),
                _ => (f64::INFINITY, "a non-negative number"),
            };
            match v.value.value {
                Value::Number(n) if (0.0..=max).contains(&n) => *slot = Some(n),
                Value::Number(n) => {
                    self.err(
                        Code::InvalidValue,
                        v.value.span,
                        format!(
                            "`cost.{key}` must be {want}, found `{}`",
                            crate::yaml::format_number(n)
                        ),
                    );
                }
                _ => self.wrong_type(&v.value, want, &format!("`cost.{key}`")),
            }
        }
        Some(hint)
    }

    /// `scope: {files, create?, max_changed_bytes?}` (X11): `files` is
    /// required (`[]` is a write fence); the entries are strings.
    fn scope(&mut self, e: &Entry) -> Option<Scope> {
        let obj = self.obj(&e.value, "`scope`", Some(e.key.span))?;
        self.strict(&obj, SCOPE_FIELDS, "`scope`");
        let files = self.required(&obj, "files", "`scope`");
        if files.is_none() {
            self.last().help = Some(
                "list the paths the step may change, e.g. `files: [\"src/**/*.rs\"]`; `files: []` lets it change nothing".into(),
            );
        }
        let files = files.map(|f| self.string_list(&f.value, "`scope.files`"))?;
        let create = obj
            .get("create")
            .map(|c| self.string_list(&c.value, "`scope.create`"))
            .unwrap_or_default();
        let max_changed_bytes = obj
            .get("max_changed_bytes")
            .and_then(|m| self.positive_int(&m.value, "`scope.max_changed_bytes`"));
        Some(Scope {
            span: e.key.span,
            files,
            create,
            max_changed_bytes,
        })
    }

    fn carry(&mut self, e: &Entry) -> Option<Carry> {
        let obj = self.obj(&e.value, "`carry`", Some(e.key.span))?;
        let mut carry = Carry {
            key_span: e.key.span,
            vars: Vec::new(),
        };
        for v in obj.entries {
            if self.reserved(&v.key, "a carry variable") {
                continue;
            }
            if !is_step_id(&v.key.text) {
                let d = self.err(
                    Code::InvalidValue,
                    v.key.span,
                    format!("invalid carry variable name `{}`", v.key.text),
                );
                d.notes
                    .push("carry names follow the step id pattern `[a-z][a-z0-9_-]*`".into());
                continue;
            }
            let what = format!("carry variable `{}`", v.key.text);
            let Some(body) = self.obj(&v.value, &what, Some(v.key.span)) else {
                continue;
            };
            self.strict(&body, CARRY_FIELDS, "a carry variable");
            let initial = self
                .required(&body, "initial", &what)
                .and_then(|i| self.non_empty(&i.value, "`initial`"));
            let mut on_revise = Vec::new();
            if let Some(r) = body.get("on_revise")
                && let Some(map) = self.obj(&r.value, "`on_revise`", Some(r.key.span))
            {
                for g in map.entries {
                    let gate = match self.step_id(
                        &Node {
                            value: Value::String(g.key.clone()),
                            span: g.key.span,
                        },
                        "a gate id",
                    ) {
                        Some(n) => n,
                        None => continue,
                    };
                    if let Some(value) = self.non_empty(&g.value, "a carry `on_revise` value") {
                        on_revise.push((gate, value));
                    }
                }
            }
            carry.vars.push(CarryVar {
                name: name(&v.key),
                initial,
                on_revise,
            });
        }
        Some(carry)
    }

    fn non_empty(&mut self, node: &Node, what: &str) -> Option<Str> {
        let s = self.string(node, what)?;
        if s.text.is_empty() {
            self.err(
                Code::InvalidValue,
                s.span,
                format!("{what} must not be empty"),
            );
            return None;
        }
        Some(s)
    }

    fn agent(&mut self, node: &Node) -> Option<Agent> {
        self.one_of(node, "agent", AGENTS)
    }

    fn ensure(&mut self, node: &Node) -> Vec<Predicate> {
        let Value::Sequence(items) = &node.value else {
            self.wrong_type(node, "a list of predicates", "`ensure`");
            return Vec::new();
        };
        items
            .iter()
            .map(|item| Predicate {
                kind: self.predicate(item),
                span: item.span,
            })
            .collect()
    }

    fn predicate(&mut self, item: &Node) -> Option<PredicateKind> {
        const FORMS: &[&str] = PREDICATE_FORMS;
        let help = "write one of `expr: \"...\"`, `file_exists: \"path\"`, `file_contains: {path, text}`, `judged: {statement, stakes}`";
        let Value::Mapping(entries) = &item.value else {
            let d = self.err(
                Code::InvalidPredicate,
                item.span,
                format!(
                    "an ensure entry must be a predicate mapping, found {}",
                    item.type_name()
                ),
            );
            d.help = Some(help.into());
            if let Value::String(s) = &item.value {
                d.help = Some(format!(
                    "write it as an expression predicate: `- expr: \"{}\"`",
                    s.text.replace('"', "\\\"")
                ));
            }
            return None;
        };
        let form = entries
            .iter()
            .find(|e| FORMS.contains(&e.key.text.as_str()));
        let Some(form) = form else {
            let mut d = Diagnostic::new(
                Code::InvalidPredicate,
                item.span,
                "an ensure entry must name exactly one predicate form",
            )
            .with_help(help);
            if let Some(first) = entries.first()
                && let Some(h) = did_you_mean(&first.key.text, FORMS.iter().copied())
            {
                d = d.with_label(
                    first.key.span,
                    format!("unknown predicate `{}`; {h}", first.key.text),
                );
            }
            self.sink.push(d);
            return None;
        };
        for e in entries {
            if e.key.text != form.key.text {
                let what = if FORMS.contains(&e.key.text.as_str()) {
                    "a second predicate form"
                } else {
                    "not a predicate field"
                };
                let d = Diagnostic::new(Code::UnknownField, e.key.span, format!("unknown field `{}` in an `{}` predicate", e.key.text, form.key.text))
                    .with_span_label(what)
                    .with_help("each ensure entry holds exactly one predicate; put the other one in its own list item");
                self.sink.push(d);
            }
        }
        let v = &form.value;
        match form.key.text.as_str() {
            "expr" => self.string(v, "`expr`").map(PredicateKind::Expr),
            "file_exists" => self
                .non_empty(v, "`file_exists`")
                .map(PredicateKind::FileExists),
            "file_contains" => {
                let obj = self.obj(v, "`file_contains`", Some(form.key.span))?;
                self.strict(&obj, FILE_CONTAINS_FIELDS, "`file_contains`");
                let path = self
                    .required(&obj, "path", "`file_contains`")
                    .and_then(|p| self.non_empty(&p.value, "`file_contains.path`"));
                let text = self
                    .required(&obj, "text", "`file_contains`")
                    .and_then(|t| self.string(&t.value, "`file_contains.text`"));
                Some(PredicateKind::FileContains {
                    path: path?,
                    text: text?,
                })
            }
            "exec" => self.exec(v, form.key.span).map(PredicateKind::Exec),
            _ => {
                let obj = self.obj(v, "`judged`", Some(form.key.span))?;
                self.strict(&obj, JUDGED_FIELDS, "`judged`");
                if obj.get("rubric").is_some()
                    || obj.get("statement").is_none() && obj.get("threshold").is_some()
                {
                    return self.scored(&obj, form.key.span);
                }
                if self.mixes_scored_keys(&obj) {
                    return None;
                }
                let statement = self
                    .required(&obj, "statement", "`judged`")
                    .and_then(|s| self.non_empty(&s.value, "`judged.statement`"));
                let stakes = self
                    .required(&obj, "stakes", "`judged`")
                    .and_then(|s| self.one_of(&s.value, "stakes", STAKES));
                Some(PredicateKind::Judged {
                    statement: statement?,
                    stakes: stakes?,
                })
            }
        }
    }

    /// A `judged` of the statement form that also has scored-form keys
    /// (`threshold`, `judge`, `inputs`): S0323, once; whether it has them.
    fn mixes_scored_keys(&mut self, obj: &Obj<'_>) -> bool {
        let extra: Vec<&Entry> = SCORED_FIELDS.iter().filter_map(|k| obj.get(k)).collect();
        let Some(first) = extra.first() else {
            return false;
        };
        let names: Vec<String> = extra.iter().map(|e| format!("`{}`", e.key.text)).collect();
        let d = Diagnostic::new(
            Code::JudgedFormMix,
            first.key.span,
            format!(
                "{} belong to the scored form of `judged`, but this one has a `statement`",
                names.join(", ")
            ),
        )
        .with_note("`judged` is either `{statement, stakes}` (v1: holds or not) or `{rubric, threshold, judge?, inputs?}` (a score in [0, 1])")
        .with_help("write `rubric:` instead of `statement:` (and drop `stakes`), or remove the scored-form keys");
        self.sink.push(d);
        true
    }

    /// `judged: {rubric, threshold, judge?, inputs?}` (X5).
    fn scored(&mut self, obj: &Obj<'_>, key: Span) -> Option<PredicateKind> {
        if let Some(e) = obj.get("statement").or_else(|| obj.get("stakes")) {
            let d = Diagnostic::new(
                Code::JudgedFormMix,
                e.key.span,
                format!("`{}` belongs to the statement form of `judged`, but this one has a `rubric`", e.key.text),
            )
            .with_note("`judged` is either `{statement, stakes}` (v1: holds or not) or `{rubric, threshold, judge?, inputs?}` (a score in [0, 1])")
            .with_help("keep one form: put the statement's wording into the rubric, or write a second ensure entry");
            self.sink.push(d);
            return None;
        }
        let rubric = self
            .required(obj, "rubric", "`judged`")
            .and_then(|s| self.non_empty(&s.value, "`judged.rubric`"));
        let threshold = self
            .required(obj, "threshold", "the scored form of `judged`")
            .and_then(|t| self.threshold(&t.value));
        let judge = match obj.get("judge") {
            Some(j) => Some(self.judge_name(&j.value)?),
            None => None,
        };
        let inputs = match obj.get("inputs") {
            Some(e) => self.inputs(&e.value)?,
            None => Vec::new(),
        };
        Some(PredicateKind::Scored(Scored {
            rubric: rubric?,
            threshold: threshold?,
            judge,
            inputs,
            key,
        }))
    }

    /// `judged.threshold`: a number in [0, 1] (S0324).
    fn threshold(&mut self, node: &Node) -> Option<f64> {
        let Value::Number(n) = node.value else {
            self.wrong_type(node, "a number in [0, 1]", "`judged.threshold`");
            return None;
        };
        if (0.0..=1.0).contains(&n) {
            return Some(n);
        }
        let d = Diagnostic::new(
            Code::JudgeThreshold,
            node.span,
            format!(
                "`judged.threshold` must be in [0, 1], found `{}`",
                crate::yaml::format_number(n)
            ),
        )
        .with_note(
            "the judge answers a score in [0, 1]; the predicate holds iff score >= threshold",
        )
        .with_help("write a fraction, e.g. `threshold: 0.8` for 80%");
        self.sink.push(d);
        None
    }

    /// `judged.judge`: a judge name (`[judges.NAME]`).
    fn judge_name(&mut self, node: &Node) -> Option<Str> {
        let s = self.non_empty(node, "`judged.judge`")?;
        if stratum_vm::config::is_judge_name(&s.text) {
            return Some(s);
        }
        let d = self.err(
            Code::InvalidValue,
            s.span,
            format!("`{}` is not a judge name", s.text),
        );
        d.help = Some("a judge name is a letter, then letters, digits, `_` or `-`, as in `[judges.local]` of stratum.toml".into());
        None
    }

    /// `exec: {run, args?, expect_exit?, timeout_ms?}` (X12).
    fn exec(&mut self, v: &Node, key: Span) -> Option<Exec> {
        let obj = self.obj(v, "`exec`", Some(key))?;
        self.strict(&obj, EXEC_FIELDS, "`exec`");
        let run = self
            .required(&obj, "run", "`exec`")
            .and_then(|r| self.command_name(&r.value, "`exec.run`"));
        let args = match obj.get("args") {
            Some(e) => match &e.value.value {
                Value::Sequence(items) => {
                    let args: Vec<Option<Str>> = items
                        .iter()
                        .map(|i| self.string(i, "an entry of `exec.args`"))
                        .collect();
                    args.into_iter().collect::<Option<Vec<_>>>()
                }
                _ => {
                    self.wrong_type(&e.value, "a list of argument templates", "`exec.args`");
                    self.last().help = Some("write `args: [\"-k\", \"${input.test}\"]`: each entry is one argument, never split by a shell".into());
                    None
                }
            },
            None => Some(Vec::new()),
        };
        let expect_exit = match obj.get("expect_exit") {
            Some(e) => self.exit_status(&e.value),
            None => Some(0),
        };
        let timeout_ms = match obj.get("timeout_ms") {
            Some(e) => Some(self.positive_int(&e.value, "`exec.timeout_ms`")?),
            None => None,
        };
        Some(Exec {
            run: run?,
            args: args?,
            expect_exit: expect_exit?,
            timeout_ms,
            key,
        })
    }

    /// A command name (`[commands.NAME]`): `exec.run`, `evaluate.command`.
    pub(super) fn command_name(&mut self, node: &Node, what: &str) -> Option<Str> {
        let s = self.non_empty(node, what)?;
        if stratum_vm::config::is_judge_name(&s.text) {
            return Some(s);
        }
        let d = self.err(
            Code::InvalidValue,
            s.span,
            format!("{what} must name a declared command, found `{}`", s.text),
        );
        d.help = Some("a command name is a letter, then letters, digits, `_` or `-`, as in `[commands.test]` of stratum.toml; the command line itself goes into its `argv` there, never into the spec".into());
        None
    }

    /// `exec.expect_exit`: an exit status 0..=255 (S0336).
    fn exit_status(&mut self, node: &Node) -> Option<i32> {
        let Value::Number(n) = node.value else {
            self.wrong_type(
                node,
                "an exit status (an integer 0..=255)",
                "`exec.expect_exit`",
            );
            return None;
        };
        if n.fract() == 0.0 && (0.0..=255.0).contains(&n) {
            return Some(n as i32);
        }
        let d = Diagnostic::new(
            Code::ExecExitStatus,
            node.span,
            format!(
                "`exec.expect_exit` must be an exit status 0..=255, found `{}`",
                crate::yaml::format_number(n)
            ),
        )
        .with_note("a process exits with a status 0..=255; a command killed by its timeout or a signal has none and never matches")
        .with_help("write the status the check expects, e.g. `expect_exit: 1` for a command that must fail");
        self.sink.push(d);
        None
    }

    /// `judged.inputs`: a list of non-empty path templates.
    fn inputs(&mut self, node: &Node) -> Option<Vec<Str>> {
        let Value::Sequence(items) = &node.value else {
            self.wrong_type(node, "a list of file paths", "`judged.inputs`");
            return None;
        };
        let paths: Vec<Option<Str>> = items
            .iter()
            .map(|i| self.non_empty(i, "an entry of `judged.inputs`"))
            .collect();
        paths.into_iter().collect()
    }
}
