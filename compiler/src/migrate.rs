//! `migrate --check`: the v0.x (Python-era, versions 0.1–0.3) classifier of
//! reference/v1-language.md §9.
//!
//! Owns: reading a legacy document as plain YAML, recognising every legacy
//! construct the reference names (finding id, status, the legacy form, its
//! v1 counterpart, a note, and every path where it occurs, in first-seen
//! order), and the report's text and JSON renderings.
//! Must never: translate or emit a spec (the report is advice only), validate
//! the legacy document (a half-broken file is still classified), do I/O, or
//! print.
//!
//! One decision beyond the reference: a document whose `version` is `1` is
//! reported with the single `unreadable` finding and a note pointing to
//! `stratumc check` instead of classifying v1 fields as legacy ones.

use serde_json::{Value as Json, json};

use crate::yaml::{self, Entry, Node, Value};

/// Version of the JSON report.
pub const JSON_VERSION: u32 = 1;

/// How a legacy construct carries over to v1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// v1 has a direct counterpart.
    Supported,
    /// v1 has nothing equivalent: the workflow must be redesigned there.
    Unsupported,
    /// It carries over, but must be rewritten by hand (or the file is unreadable).
    Diagnostic,
}

impl Status {
    /// Lower-case name (`supported`, `unsupported`, `diagnostic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Supported => "supported",
            Status::Unsupported => "unsupported",
            Status::Diagnostic => "diagnostic",
        }
    }
}

/// One recognised usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Stable id (`function-compute`, `depends-on`, ...).
    pub id: &'static str,
    /// How it carries over.
    pub status: Status,
    /// The legacy form.
    pub python: &'static str,
    /// Its v1 counterpart (`none` when there is none).
    pub v1: &'static str,
    /// Guidance (may be empty).
    pub note: String,
    /// Where it occurs (`flows.main.steps[2].depends_on`), in document order.
    pub paths: Vec<String>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The `version` as written, when the document has a scalar one.
    pub version: Option<String>,
    /// Findings in first-seen order.
    pub findings: Vec<Finding>,
}

/// The fixed texts of one finding id: (id, status, legacy form, v1 form, note).
type Row = (
    &'static str,
    Status,
    &'static str,
    &'static str,
    &'static str,
);

/// Every finding the classifier can report.
pub const FINDINGS: &[Row] = &[
    (
        "unreadable",
        Status::Diagnostic,
        "legacy document",
        "none",
        "",
    ),
    (
        "contracts",
        Status::Diagnostic,
        "contracts / output_schema / output_contract",
        "contracts as field -> type-string maps; step `out: <Contract>`",
        "v1 contracts are flat `field: type` maps (`string`, `integer`, `T[]`, `a|b`, another contract); rewrite schema-style contracts by hand",
    ),
    (
        "function-infer",
        Status::Supported,
        "function decl mode: infer + step",
        "step `do` (agent task) with `out`",
        "",
    ),
    (
        "function-compute",
        Status::Supported,
        "function decl mode: compute + step",
        "task (agent-dispatched)",
        "a Python compute function ran code in-process; in v1 it becomes an agent task, not a `set` step (`set` only evaluates expressions)",
    ),
    (
        "function-gate",
        Status::Supported,
        "function decl mode: gate",
        "step `gate: {on_approve, on_revise, on_kill}`",
        "",
    ),
    (
        "ensure-expressions",
        Status::Diagnostic,
        "ensure expressions (Python syntax)",
        "ensure: [{expr: ...}] in the v1 expression language",
        "rewrite each expression: `and`/`or`/`not` become `&&`/`||`/`!`, `True`/`False` become `true`/`false`, the output is `result`",
    ),
    (
        "max-rounds",
        Status::Supported,
        "flow max_rounds",
        "flow `max_rounds` (or a gate's `max_rounds`)",
        "",
    ),
    (
        "flow-output",
        Status::Diagnostic,
        "flow output",
        "output: {from: \"${step.output}\", contract: C}",
        "v1 names the producing step and the output contract explicitly",
    ),
    (
        "inline",
        Status::Supported,
        "inline step (intent without a function)",
        "step `do` with the intent as its task",
        "",
    ),
    (
        "subflow",
        Status::Supported,
        "flow step (type: flow)",
        "step `run: <flow>` with `with:`",
        "",
    ),
    (
        "decompose",
        Status::Supported,
        "decompose step",
        "a `do` step that returns the list, then a `fanout` over it",
        "",
    ),
    (
        "decompose-dependencies",
        Status::Unsupported,
        "decompose items with depends_on",
        "none",
        "fanout items are independent in v1; model ordered work as separate steps",
    ),
    (
        "parallel-dispatch",
        Status::Supported,
        "parallel_dispatch",
        "fanout {over, concurrency, isolation, require, merge: sequential}",
        "",
    ),
    (
        "parallel-unsupported",
        Status::Unsupported,
        "parallel_dispatch option (branch isolation, manual merge, verify script, reasoning templates, timeouts, diff capture, deferred advance)",
        "none",
        "v1 fanouts take isolation none|worktree, merge sequential and a pre_merge command list only",
    ),
    (
        "pipeline-when",
        Status::Supported,
        "pipeline stage when",
        "fanout stage `when`",
        "",
    ),
    (
        "pipeline-exit",
        Status::Unsupported,
        "pipeline stage exit_when",
        "none",
        "",
    ),
    (
        "pipeline-nested",
        Status::Unsupported,
        "nested fanout / join in a pipeline stage",
        "none",
        "",
    ),
    (
        "judge-fold",
        Status::Diagnostic,
        "judge predicates (deterministic / judged)",
        "ensure entries `expr` / `judged: {statement, stakes}`",
        "fold each predicate into the step's `ensure` list",
    ),
    (
        "judge-unsupported",
        Status::Unsupported,
        "judge budget, verified predicates, applied_gate",
        "none",
        "",
    ),
    (
        "iterate",
        Status::Supported,
        "max_iterations / exit_criterion",
        "iterate: {max, until}",
        "",
    ),
    (
        "score-accumulate",
        Status::Unsupported,
        "score_expr / accumulate / accumulate_key",
        "none",
        "",
    ),
    (
        "depends-on",
        Status::Supported,
        "depends_on",
        "`${step.output}` references plus `after`",
        "",
    ),
    (
        "skip-if",
        Status::Supported,
        "skip_if",
        "when (inverted sense)",
        "`skip_if: X` becomes `when: \"!(X)\"` in the v1 expression language",
    ),
    (
        "next",
        Status::Diagnostic,
        "next",
        "`after` edges and gate routes",
        "v1 has no explicit successor: order comes from `after` and references",
    ),
    (
        "on-fail",
        Status::Diagnostic,
        "on_fail",
        "on_fail: <recovery step id>",
        "v1 routes a failure to one step of the same flow; check the target",
    ),
    (
        "missing-max-rounds",
        Status::Diagnostic,
        "on_revise without a flow max_rounds",
        "flow `max_rounds`",
        "a revising gate needs a cap on rounds: start at 3",
    ),
];

struct Collector {
    findings: Vec<Finding>,
}

impl Collector {
    fn hit(&mut self, id: &'static str, path: String) {
        if let Some(f) = self.findings.iter_mut().find(|f| f.id == id) {
            if !f.paths.contains(&path) {
                f.paths.push(path);
            }
            return;
        }
        let (_, status, python, v1, note) = FINDINGS
            .iter()
            .copied()
            .find(|r| r.0 == id)
            .expect("invariant: every finding id used here is in FINDINGS");
        self.findings.push(Finding {
            id,
            status,
            python,
            v1,
            note: note.to_string(),
            paths: vec![path],
        });
    }
}

fn get<'a>(entries: &'a [Entry], key: &str) -> Option<&'a Node> {
    entries.iter().find(|e| e.key.text == key).map(|e| &e.value)
}

fn str_of(n: Option<&Node>) -> Option<&str> {
    n.and_then(Node::as_str).map(|s| s.text.as_str())
}

fn non_empty(n: Option<&Node>) -> bool {
    match n.map(|n| &n.value) {
        None | Some(Value::Null) => false,
        Some(Value::Sequence(v)) => !v.is_empty(),
        Some(Value::Mapping(m)) => !m.is_empty(),
        Some(Value::String(s)) => !s.text.is_empty(),
        Some(_) => true,
    }
}

fn is_true(n: Option<&Node>) -> bool {
    matches!(n.map(|n| &n.value), Some(Value::Bool(true)))
}

/// Whether any object inside a list below `n` has a non-empty `depends_on`.
fn nested_depends_on(n: &Node) -> bool {
    let mut stack = vec![(n, false)];
    while let Some((node, in_list)) = stack.pop() {
        match &node.value {
            Value::Sequence(items) => stack.extend(items.iter().map(|i| (i, true))),
            Value::Mapping(entries) => {
                if in_list && non_empty(get(entries, "depends_on")) {
                    return true;
                }
                stack.extend(entries.iter().map(|e| (&e.value, false)));
            }
            _ => {}
        }
    }
    false
}

fn scalar_text(n: &Node) -> Option<String> {
    match &n.value {
        Value::Number(x) => Some(yaml::format_number(*x)),
        Value::String(s) => Some(s.text.clone()),
        _ => None,
    }
}

/// Classifies raw file contents (text that is not UTF-8 is unreadable).
pub fn check_bytes(bytes: &[u8]) -> Report {
    match std::str::from_utf8(bytes) {
        Ok(text) => check(text),
        Err(e) => {
            let mut c = Collector {
                findings: Vec::new(),
            };
            c.hit("unreadable", "root".into());
            c.findings[0].note = format!(
                "the file is not UTF-8 text (invalid byte at offset {})",
                e.valid_up_to()
            );
            Report {
                version: None,
                findings: c.findings,
            }
        }
    }
}

/// Classifies a legacy document.
pub fn check(text: &str) -> Report {
    let loaded = yaml::load(text);
    let mut c = Collector {
        findings: Vec::new(),
    };
    let root = match (&loaded.root, loaded.diagnostics.is_empty()) {
        (Some(root), true) => root,
        _ => {
            let mut messages: Vec<String> = loaded
                .diagnostics
                .iter()
                .map(|d| d.message.clone())
                .collect();
            if messages.is_empty() {
                messages.push("the document is empty".into());
            }
            c.hit("unreadable", "root".into());
            c.findings[0].note = messages.join("; ");
            return Report {
                version: None,
                findings: c.findings,
            };
        }
    };
    let Some(entries) = root.as_mapping() else {
        c.hit("unreadable", "root".into());
        c.findings[0].note = "YAML root must be a mapping".into();
        return Report {
            version: None,
            findings: c.findings,
        };
    };
    let version_node = get(entries, "version");
    let version = version_node.and_then(scalar_text);
    let legacy = version
        .as_deref()
        .is_some_and(|v| matches!(v.trim(), "0.1" | "0.2" | "0.3"));
    if !legacy {
        c.hit("unreadable", "version".into());
        let is_v1 = version.as_deref().is_some_and(|v| v.trim() == "1");
        c.findings[0].note = if is_v1 {
            "expected version 0.1, 0.2, or 0.3; this is already a v1 spec: check it with `stratumc check`".into()
        } else {
            "expected version 0.1, 0.2, or 0.3".into()
        };
        if is_v1 {
            return Report {
                version,
                findings: c.findings,
            };
        }
    }
    if let Some(Value::Mapping(_)) = get(entries, "contracts").map(|n| &n.value) {
        c.hit("contracts", "contracts".into());
    }
    if let Some(functions) = get(entries, "functions").and_then(Node::as_mapping) {
        for f in functions {
            let Some(body) = f.value.as_mapping() else {
                continue;
            };
            let at = format!("functions.{}", f.key.text);
            match str_of(get(body, "mode")) {
                Some("infer") => c.hit("function-infer", format!("{at}.mode")),
                Some("compute") => c.hit("function-compute", format!("{at}.mode")),
                Some("gate") => c.hit("function-gate", format!("{at}.mode")),
                _ => {}
            }
            if let Some(Value::Sequence(_)) = get(body, "ensure").map(|n| &n.value) {
                c.hit("ensure-expressions", format!("{at}.ensure"));
            }
        }
    }
    if let Some(flows) = get(entries, "flows").and_then(Node::as_mapping) {
        for f in flows {
            let Some(body) = f.value.as_mapping() else {
                continue;
            };
            let at = format!("flows.{}", f.key.text);
            let has_max_rounds = get(body, "max_rounds").is_some();
            if has_max_rounds {
                c.hit("max-rounds", format!("{at}.max_rounds"));
            }
            if get(body, "output").is_some() {
                c.hit("flow-output", format!("{at}.output"));
            }
            if let Some(Value::Sequence(steps)) = get(body, "steps").map(|n| &n.value) {
                for (i, s) in steps.iter().enumerate() {
                    if let Some(step) = s.as_mapping() {
                        classify_step(&mut c, step, &format!("{at}.steps[{i}]"), has_max_rounds);
                    }
                }
            }
        }
    }
    Report {
        version,
        findings: c.findings,
    }
}

fn classify_step(c: &mut Collector, step: &[Entry], at: &str, flow_max_rounds: bool) {
    let ty = str_of(get(step, "type"));
    if get(step, "output_schema").is_some() || get(step, "output_contract").is_some() {
        c.hit("contracts", at.to_string());
    }
    if matches!(
        get(step, "ensure").map(|n| &n.value),
        Some(Value::Sequence(_))
    ) || get(step, "exit_criterion").is_some()
    {
        c.hit("ensure-expressions", at.to_string());
    }
    let has = |k: &str| get(step, k).is_some();
    if ty == Some("inline") || (has("intent") && !has("function") && !has("flow")) {
        c.hit("inline", at.to_string());
    }
    if ty == Some("flow") || has("flow") {
        c.hit("subflow", at.to_string());
    }
    if ty == Some("decompose") {
        c.hit("decompose", at.to_string());
        if step.iter().any(|e| nested_depends_on(&e.value)) {
            c.hit("decompose-dependencies", at.to_string());
        }
    }
    if ty == Some("parallel_dispatch") {
        c.hit("parallel-dispatch", at.to_string());
        let unsupported = [
            (
                "isolation",
                str_of(get(step, "isolation")) == Some("branch"),
            ),
            ("merge", str_of(get(step, "merge")) == Some("manual")),
            (
                "pre_merge_verify",
                str_of(get(step, "pre_merge_verify")).is_some(),
            ),
            ("reasoning_template", has("reasoning_template")),
            ("task_reasoning_template", has("task_reasoning_template")),
            ("task_timeout", has("task_timeout")),
            ("capture_diff", is_true(get(step, "capture_diff"))),
            ("defer_advance", is_true(get(step, "defer_advance"))),
        ];
        for (key, hit) in unsupported {
            if hit {
                c.hit("parallel-unsupported", format!("{at}.{key}"));
            }
        }
    }
    if ty == Some("pipeline")
        && let Some(Value::Sequence(stages)) = get(step, "stages").map(|n| &n.value)
    {
        let stages_at = format!("{at}.stages");
        for stage in stages.iter().filter_map(Node::as_mapping) {
            if get(stage, "when").is_some() {
                c.hit("pipeline-when", stages_at.clone());
            }
            if get(stage, "exit_when").is_some() {
                c.hit("pipeline-exit", stages_at.clone());
            }
            if get(stage, "fanout").is_some() || get(stage, "join").is_some() {
                c.hit("pipeline-nested", stages_at.clone());
            }
        }
    }
    if let Some(judge) = get(step, "judge").and_then(Node::as_mapping) {
        let predicates: Vec<&[Entry]> = match get(judge, "predicates").map(|n| &n.value) {
            Some(Value::Sequence(p)) => p.iter().filter_map(Node::as_mapping).collect(),
            _ => Vec::new(),
        };
        if predicates
            .iter()
            .any(|p| matches!(str_of(get(p, "type")), Some("deterministic" | "judged")))
        {
            c.hit("judge-fold", format!("{at}.judge.predicates"));
        }
        if get(judge, "budget").is_some()
            || predicates.iter().any(|p| {
                str_of(get(p, "type")) == Some("verified") || get(p, "applied_gate").is_some()
            })
        {
            c.hit("judge-unsupported", format!("{at}.judge"));
        }
    }
    if has("max_iterations") || has("exit_criterion") {
        c.hit("iterate", at.to_string());
    }
    if has("score_expr") || has("accumulate") || has("accumulate_key") {
        c.hit("score-accumulate", at.to_string());
    }
    if non_empty(get(step, "depends_on")) {
        c.hit("depends-on", format!("{at}.depends_on"));
    }
    if has("skip_if") {
        c.hit("skip-if", format!("{at}.skip_if"));
    }
    if has("next") {
        c.hit("next", format!("{at}.next"));
    }
    if has("on_fail") {
        c.hit("on-fail", format!("{at}.on_fail"));
    }
    if has("on_revise") && !flow_max_rounds {
        c.hit("missing-max-rounds", format!("{at}.on_revise"));
    }
}

/// The text report (reference §9's layout).
pub fn render_text(r: &Report) -> String {
    let mut s = String::from("stratumc migrate --check");
    if let Some(v) = &r.version {
        s.push_str(&format!(" (v{v})"));
    }
    s.push('\n');
    s.push_str("report-only: no YAML was emitted or translated\n");
    if r.findings.is_empty() {
        s.push_str("No mapped legacy constructs found.\n");
    }
    for f in &r.findings {
        s.push_str(&format!(
            "- [{}] {} -> {}\n",
            f.status.as_str().to_uppercase(),
            f.python,
            f.v1
        ));
        if !f.note.is_empty() {
            s.push_str(&format!("  {}\n", f.note));
        }
        s.push_str(&format!("  at: {}\n", f.paths.join(", ")));
    }
    s
}

/// The JSON report: `{version, source_version, findings: [{id, status,
/// python, v1, note, paths}]}`.
pub fn to_json(r: &Report) -> Json {
    json!({
        "version": JSON_VERSION,
        "source_version": r.version,
        "findings": r.findings.iter().map(|f| json!({
            "id": f.id,
            "status": f.status.as_str(),
            "python": f.python,
            "v1": f.v1,
            "note": f.note,
            "paths": f.paths,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(r: &Report) -> Vec<&str> {
        r.findings.iter().map(|f| f.id).collect()
    }

    #[test]
    fn repeated_hits_append_paths_in_first_seen_order() {
        let r = check(
            "version: '0.2'
flows:
  main:
    steps:
      - id: a
        intent: x
        depends_on: [b]
      - id: b
        intent: y
        depends_on: [c]
        skip_if: 'x'
",
        );
        assert_eq!(r.version.as_deref(), Some("0.2"));
        assert_eq!(ids(&r), ["inline", "depends-on", "skip-if"]);
        assert_eq!(
            r.findings[1].paths,
            [
                "flows.main.steps[0].depends_on",
                "flows.main.steps[1].depends_on"
            ]
        );
    }

    #[test]
    fn unreadable_documents() {
        let r = check("a: [");
        assert_eq!(ids(&r), ["unreadable"]);
        assert_eq!(r.findings[0].paths, ["root"]);
        assert!(!r.findings[0].note.is_empty());
        let r = check("- 1\n- 2\n");
        assert_eq!(r.findings[0].note, "YAML root must be a mapping");
        let r = check("flows: {}\n");
        assert_eq!(r.findings[0].paths, ["version"]);
        assert_eq!(r.findings[0].note, "expected version 0.1, 0.2, or 0.3");
        assert_eq!(r.version, None);
    }

    #[test]
    fn the_text_report_has_the_reference_layout() {
        let r = check("version: 0.3\nfunctions:\n  work: {mode: compute}\n");
        let text = render_text(&r);
        assert_eq!(
            text,
            "stratumc migrate --check (v0.3)
report-only: no YAML was emitted or translated
- [SUPPORTED] function decl mode: compute + step -> task (agent-dispatched)
  a Python compute function ran code in-process; in v1 it becomes an agent task, not a `set` step (`set` only evaluates expressions)
  at: functions.work.mode
"
        );
        let empty = render_text(&check("version: 0.1\n"));
        assert!(
            empty.ends_with("No mapped legacy constructs found.\n"),
            "{empty}"
        );
    }

    #[test]
    fn every_finding_id_is_unique() {
        for (i, a) in FINDINGS.iter().enumerate() {
            assert!(FINDINGS[i + 1..].iter().all(|b| b.0 != a.0), "{}", a.0);
        }
    }
}
