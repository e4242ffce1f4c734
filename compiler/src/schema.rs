//! A JSON Schema (draft-07, the newest draft yaml-language-server supports)
//! of the v1 spec, for completion and validation of `*.stratum.yaml` files
//! in any editor with yaml-language-server.
//!
//! Owns: building the schema from the decoder's own tables
//! ([`crate::syntax::decode`]: the keys of every strict object, the
//! construct/field matrix, the enum values, the name patterns), so that a key
//! the decoder learns appears here too; the required keys and value types
//! that are written inline in the decoder are restated here and tested
//! against the decoder (a spec missing each required key must get S0103).
//! Also converts a spanned YAML tree to JSON ([`yaml_to_json`]) the same way
//! the front end reads scalars (YAML 1.2 core schema), for tests and tools.
//! Must never: claim more than the structure — references, types, graphs and
//! expressions are `stratumc check`'s job (the LSP and the CLI report them).

use serde_json::{Map, Value as Json, json};

use crate::syntax::decode::{
    AGENTS, BUDGET_FIELDS, CARRY_FIELDS, CONSTRUCTS, COST_FIELDS, DISPATCHES, FANOUT_FIELDS,
    FILE_CONTAINS_FIELDS, FLOW_FIELDS, GATE_FIELDS, ISOLATIONS, ITERATE_FIELDS, MERGES,
    OUTPUT_FIELDS, PREDICATE_FORMS, REQUIRE_WORDS, RESERVED, ROOT_FIELDS, SCOPE_FIELDS,
    SCORED_FIELDS, SHARED_STEP_FIELDS, STAGE_FIELDS, STAKES, STEP_FIELDS, allowed_for,
};
use crate::yaml::{self, Node, Value};

/// The draft the schema is written in.
pub const DRAFT: &str = "http://json-schema.org/draft-07/schema#";

/// Constructs the decoder recognises but stratumc does not run yet: left out
/// of the schema so editors do not offer them.
/// (None now: `evaluate` runs since language 1.1 X12.)
pub const NOT_SUPPORTED_YET: &[&str] = &[];

const STEP_ID: &str = "^[a-z][a-z0-9_-]*$";
/// A `[commands.NAME]` name (X12), as `stratum_vm::config` takes it.
const COMMAND_NAME: &str = "^[A-Za-z][A-Za-z0-9_-]*$";
const FIELD_NAME: &str = "^[A-Za-z_][A-Za-z0-9_]*$";

/// What a key means (hover text in editors).
fn doc(key: &str) -> Option<&'static str> {
    Some(match key {
        "version" => "The language version: always the number 1.",
        "contracts" => {
            "Named record types: `Name: {field: type}`. Types: string, integer, number, boolean, object, array, `T[]`, `a|b|c` enums, another contract; `T?` is optional."
        }
        "flows" => "The flows of the spec; `entry` names the one that runs first.",
        "input" => "The flow's input fields: `{field: type}` (`{}` for none).",
        "output" => {
            "Where the flow's result comes from: `{from: \"${step.output}\", contract: Name}`."
        }
        "steps" => "The steps of the flow; each has an `id` and exactly one construct.",
        "budget" => "Limits: `usd`, `tokens`, `dispatches`, `ms` (at least one).",
        "max_rounds" => "Most gate revisions in this flow.",
        "carry" => "Variables carried across gate revisions (entry flow only).",
        "dispatch_timeout_ms" => {
            "The dispatch lease of every `do` step and fanout stage of this flow without its own `timeout_ms` (language 1.1)."
        }
        "timeout_ms" => {
            "The dispatch lease in milliseconds (language 1.1): a dispatch not reported within it is an orphan, revoked and dispatched again (an attempt is not consumed; 3 orphans in a row fail the step with reason `orphaned`)."
        }
        "artifacts" => {
            "Files the step must leave (language 1.1): paths and globs (`*`, `?`, `[`, `**`) relative to the workspace, templates allowed; checked after `out`, hashed into a manifest when the step succeeds."
        }
        "scope" => {
            "What the step's dispatch may change in the git working tree (language 1.1): `files` (paths and globs it may change or delete; `[]` changes nothing), `create` (paths and globs it may create), `max_changed_bytes` (added plus removed bytes). A change outside is a `scope_violation`, put back before the retry; `changes()` in `ensure` lists what changed."
        }
        "files" => {
            "Paths and globs (templates allowed; a full reference may render to a list) the dispatch may change or delete; `[]` is a write fence (language 1.1)."
        }
        "create" => {
            "Paths and globs the dispatch may create (language 1.1); a new file anywhere else is a `scope_violation`."
        }
        "max_changed_bytes" => {
            "Most bytes the dispatch may change, added plus removed, summed over every changed file (language 1.1)."
        }
        "show" => {
            "Files shown with the gate's decision, with their current sha256 (language 1.1): template paths."
        }
        "prompt" => "The text shown to the person deciding the gate (a template; language 1.1).",
        "options" => {
            "The choices a gate's approve or revise may carry (language 1.1): a list of strings, or a template that renders to one (`\"${plan.output.candidates}\"`); later steps read the pick as `steps.<gate>.choice` / `${<gate>.choice}`."
        }
        "id" => "The step id: lowercase letters, digits, `_` and `-`, starting with a letter.",
        "after" => "Steps that must finish before this one.",
        "when" => "Run the step only when this expression is true (otherwise it is skipped).",
        "do" => "An agent task: the text the agent gets (`${...}` references are filled in).",
        "set" => "A computed object: `field: expression` for every field of `out`.",
        "gate" => "A human decision: `on_approve`, `on_revise`, `on_kill` (a step id or null).",
        "fanout" => "Run stages for every element of a list (`over`).",
        "run" => "Call another flow of this spec, with `with:` as its input.",
        "evaluate" => {
            "Run a declared command of stratum.toml (`[commands.NAME]`, language 1.1) with `in` on its stdin: its stdout is the step's result `{status: closed|open|failed, children, reason, score?, route?}`, then checked by `out`. Every failure is terminal."
        }
        "agent" => "Who runs the task: claude (default) or codex.",
        "out" => "The contract the step's output must match.",
        "ensure" => {
            "Predicates the output must satisfy: `expr`, `file_exists`, `file_contains`, `judged`, `exec` (language 1.1: a declared command of stratum.toml that must exit with `expect_exit`)."
        }
        "attempts" => "Total attempts (default 2).",
        "iterate" => "Repeat the task until `until` holds, at most `max` times.",
        "on_fail" => {
            "The step that runs when this one fails (the failure is then handled), or `continue` (language 1.1): when attempts run out the step ends failed, the failure is handled and the flow goes on (its output reads as null); or `{goto: STEP, max: N, note?}` (language 1.1): the failure goes back to an earlier step, at most `max` times in the run; or a list of those, each `{…}` with an optional `when` over `failure` (`{reason, violations}`), tried in order."
        }
        "route" => {
            "Conditional edges after success (language 1.1): entries `{when, goto: STEP, max: N, note?}` (go back to an earlier step, at most `max` times in the run; it runs again with `previousRoute`) or `{when, fail: reason}`, tried in order; the first whose `when` (over `result`, `input`, `steps`) holds fires."
        }
        "goto" => {
            "The earlier step to go back to (a strict ancestor); it and the steps after it run again."
        }
        "max" => {
            "A bound: for `iterate`, the most passes; for a `goto` entry, how often it may fire in the whole run (counters are never given back)."
        }
        "note" => "A template handed to the re-entered step in `previousRoute.note`.",
        "rollback" => {
            "A scoped `do` step (this one, or one it comes after): before going back, the files its accepted dispatches changed from its latest entry on are restored to that entry's snapshot, each only if unchanged since (else the step fails with `rollback_conflict`; language 1.1)."
        }
        "fail" => "A template: the step fails with this reason.",
        "with" => "The called flow's input values (templates allowed).",
        "cost" => {
            "Cost hints for `stratumc cost` (language 1.1): `tokens`, `usd`, `ms` per dispatch, `p` (pass probability), `judge_tokens`; they replace the agent profile's figures. The engine ignores them."
        }
        _ => return None,
    })
}

fn with_doc(key: &str, mut schema: Json) -> Json {
    if let (Some(d), Some(obj)) = (doc(key), schema.as_object_mut()) {
        obj.insert("description".into(), d.into());
    }
    schema
}

fn pos_int() -> Json {
    json!({"type": "integer", "minimum": 1})
}

fn string() -> Json {
    json!({"type": "string"})
}

fn non_empty() -> Json {
    json!({"type": "string", "minLength": 1})
}

fn step_id() -> Json {
    json!({"type": "string", "pattern": STEP_ID})
}

fn names<T>(table: &[(&str, T)]) -> Vec<Json> {
    table.iter().map(|(n, _)| Json::from(*n)).collect()
}

/// A strict object with exactly `keys` (each given a schema by `value`).
fn strict(keys: &[&str], required: &[&str], value: impl Fn(&str) -> Json) -> Json {
    let mut props = Map::new();
    for k in keys {
        props.insert((*k).to_string(), with_doc(k, value(k)));
    }
    let mut o = json!({"type": "object", "properties": props, "additionalProperties": false});
    if !required.is_empty() {
        o["required"] = json!(required);
    }
    o
}

fn field_map() -> Json {
    json!({
        "type": "object",
        "propertyNames": {"pattern": FIELD_NAME, "not": {"enum": RESERVED}},
        "additionalProperties": {"type": "string", "description": "A type: string, integer, number, boolean, object, array, T[], a|b|c, a contract name; T? is optional."}
    })
}

fn budget() -> Json {
    let mut b = strict(BUDGET_FIELDS, &[], |k| match k {
        "usd" => json!({"type": "number", "exclusiveMinimum": 0}),
        _ => pos_int(),
    });
    b["minProperties"] = json!(1);
    b
}

fn predicate() -> Json {
    let forms: Vec<Json> = PREDICATE_FORMS
        .iter()
        .map(|form| {
            let value = match *form {
                "expr" => json!({"type": "string", "description": "An expression over `result` (and `input`, `item`)."}),
                "file_exists" => non_empty(),
                "file_contains" => strict(FILE_CONTAINS_FIELDS, FILE_CONTAINS_FIELDS, |k| {
                    if k == "path" { non_empty() } else { string() }
                }),
                // language 1.1 X12
                "exec" => strict(crate::syntax::decode::EXEC_FIELDS, &["run"], |k| match k {
                    "run" => json!({"type": "string", "pattern": COMMAND_NAME}),
                    "args" => json!({"type": "array", "items": string()}),
                    "expect_exit" => json!({"type": "integer", "minimum": 0, "maximum": 255}),
                    _ => pos_int(),
                }),
                _ => json!({"oneOf": [
                    strict(&["statement", "stakes"], &["statement", "stakes"], |k| {
                        if k == "stakes" {
                            json!({"enum": names(STAKES)})
                        } else {
                            non_empty()
                        }
                    }),
                    // the scored form (language 1.1 X5)
                    strict(SCORED_FIELDS, &["rubric", "threshold"], |k| match k {
                        "threshold" => json!({"type": "number", "minimum": 0, "maximum": 1}),
                        "inputs" => json!({"type": "array", "items": non_empty()}),
                        "judge" => json!({"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_-]*$"}),
                        _ => non_empty(),
                    }),
                ]}),
            };
            strict(&[*form], &[*form], |_| value.clone())
        })
        .collect();
    json!({"oneOf": forms})
}

fn value_of(key: &str) -> Json {
    match key {
        "id" => step_id(),
        "on_fail" => on_fail(),
        "route" => json!({"type": "array", "minItems": 1, "items": {"oneOf": [
            entry_when(strict(&["when", "goto", "max", "note", "rollback"], &["when", "goto", "max"], |k| match k {
                "goto" | "rollback" => step_id(),
                "max" => pos_int(),
                _ => string(),
            }), "A condition over `result` (the step's output), `input` and `steps`: the entry fires when it holds."),
            entry_when(strict(&["when", "fail"], &["when", "fail"], |_| string()), "A condition over `result` (the step's output), `input` and `steps`: the entry fires when it holds."),
        ]}}),
        "after" => json!({"type": "array", "items": step_id()}),
        "when" | "do" | "run" | "out" => string(),
        // language 1.1 X12 (v1 §4.9)
        "evaluate" => strict(
            crate::syntax::decode::EVALUATE_FIELDS,
            &["command", "timeout_ms"],
            |k| match k {
                "command" => json!({"type": "string", "pattern": COMMAND_NAME}),
                "timeout_ms" => pos_int(),
                _ => string(),
            },
        ),
        "set" => json!({
            "type": "object",
            "propertyNames": {"not": {"enum": RESERVED}},
            "additionalProperties": {"type": "string", "description": "An expression."}
        }),
        "gate" => strict(
            GATE_FIELDS,
            &["on_approve", "on_revise", "on_kill"],
            |k| match k {
                "max_rounds" => pos_int(),
                "prompt" => string(),
                "show" => json!({"type": "array", "items": string()}),
                "options" => json!({"oneOf": [
                    {"type": "array", "items": string(), "minItems": 1, "uniqueItems": true},
                    string(),
                ]}),
                _ => json!({"oneOf": [step_id(), {"type": "null"}]}),
            },
        ),
        "fanout" => strict(
            FANOUT_FIELDS,
            &[
                "over",
                "steps",
                "concurrency",
                "isolation",
                "require",
                "merge",
            ],
            |k| match k {
                "over" => string(),
                "steps" => {
                    json!({"type": "array", "minItems": 1, "items": {"$ref": "#/definitions/stage"}})
                }
                "concurrency" => pos_int(),
                "isolation" => json!({"enum": names(ISOLATIONS)}),
                "require" => json!({"oneOf": [pos_int(), {"enum": names(REQUIRE_WORDS)}]}),
                "merge" => json!({"enum": names(MERGES)}),
                "pre_merge" => json!({"type": "array", "items": string()}),
                _ => json!({"enum": names(DISPATCHES)}),
            },
        ),
        "agent" => json!({"enum": names(AGENTS)}),
        "ensure" => json!({"type": "array", "items": {"$ref": "#/definitions/predicate"}}),
        "attempts" | "timeout_ms" => pos_int(),
        "artifacts" => json!({"type": "array", "items": string()}),
        "scope" => strict(SCOPE_FIELDS, &["files"], |k| match k {
            "max_changed_bytes" => pos_int(),
            _ => json!({"type": "array", "items": string()}),
        }),
        "iterate" => strict(ITERATE_FIELDS, ITERATE_FIELDS, |k| {
            if k == "max" { pos_int() } else { string() }
        }),
        "budget" => json!({"$ref": "#/definitions/budget"}),
        "with" => json!({"type": "object", "propertyNames": {"not": {"enum": RESERVED}}}),
        "cost" => {
            let mut c = strict(COST_FIELDS, &[], |k| match k {
                "p" => json!({"type": "number", "minimum": 0, "maximum": 1}),
                _ => json!({"type": "number", "minimum": 0}),
            });
            c["minProperties"] = json!(1);
            c
        }
        _ => json!({}),
    }
}

/// X9: `on_fail` is a step id (or `continue`), a `goto` entry, a
/// `{rollback}` entry (X11: restore, then fail), or a list of those whose
/// mappings may carry `when`.
fn on_fail() -> Json {
    let entry = |keys: &[&str], required: &[&str]| {
        strict(keys, required, |k| match k {
            "goto" | "rollback" => step_id(),
            "max" => pos_int(),
            _ => string(),
        })
    };
    let when = "A condition over `failure` (`{reason, violations}`), `input` and `steps`: the entry takes the failure when it holds.";
    let listed = entry_when(
        entry(
            &["when", "goto", "max", "note", "rollback"],
            &["goto", "max"],
        ),
        when,
    );
    let listed_rollback = entry_when(entry(&["when", "rollback"], &["rollback"]), when);
    json!({"oneOf": [
        step_id(),
        entry(&["goto", "max", "note", "rollback"], &["goto", "max"]),
        entry(&["rollback"], &["rollback"]),
        {"type": "array", "minItems": 1, "items": {"oneOf": [step_id(), listed, listed_rollback]}},
    ]})
}

/// The description of `when` in an X9 entry (not a step's `when`).
fn entry_when(mut entry: Json, text: &str) -> Json {
    if let Some(w) = entry.pointer_mut("/properties/when") {
        w["description"] = text.into();
    }
    entry
}

fn step() -> Json {
    let keys: Vec<&str> = STEP_FIELDS
        .iter()
        .copied()
        .filter(|k| !NOT_SUPPORTED_YET.contains(k))
        .collect();
    let constructs: Vec<&str> = CONSTRUCTS
        .iter()
        .copied()
        .filter(|k| !NOT_SUPPORTED_YET.contains(k))
        .collect();
    let mut s = strict(&keys, &["id"], value_of);
    let mut all_of = vec![json!({
        "oneOf": constructs.iter().map(|c| json!({"required": [c]})).collect::<Vec<_>>()
    })];
    for c in &constructs {
        let allowed = allowed_for(c);
        let mut forbidden = Map::new();
        for k in &keys {
            if *k != *c && !SHARED_STEP_FIELDS.contains(k) && !allowed.contains(k) {
                forbidden.insert((*k).to_string(), Json::Bool(false));
            }
        }
        let mut then = json!({"properties": forbidden});
        match *c {
            "set" => then["required"] = json!(["out"]),
            "run" => then["required"] = json!(["with"]),
            _ => {}
        }
        all_of.push(json!({"if": {"required": [c]}, "then": then}));
    }
    s["allOf"] = Json::Array(all_of);
    s
}

fn stage() -> Json {
    strict(STAGE_FIELDS, &["do"], |k| match k {
        "on_fail" => stage_on_fail(),
        _ => value_of(k),
    })
}

/// X9 on a fanout stage: `continue`, a `goto` entry, or a list of those
/// whose mappings may carry `when` (a recovery step or a `rollback` is
/// S0345 there, so the schema does not offer them).
fn stage_on_fail() -> Json {
    let goto = |keys: &[&str]| {
        strict(keys, &["goto", "max"], |k| match k {
            "goto" => step_id(),
            "max" => pos_int(),
            _ => string(),
        })
    };
    let when = "A condition over `failure` (`{reason, violations}`), `input` and `steps`: the entry takes the item's failure when it holds.";
    let cont = json!({"const": "continue"});
    json!({"oneOf": [
        cont.clone(),
        goto(&["goto", "max", "note"]),
        {"type": "array", "minItems": 1, "items": {"oneOf": [
            cont,
            entry_when(goto(&["when", "goto", "max", "note"]), when),
        ]}},
    ]})
}

fn flow() -> Json {
    strict(FLOW_FIELDS, &["input", "output", "steps"], |k| match k {
        "input" => field_map(),
        "output" => strict(OUTPUT_FIELDS, OUTPUT_FIELDS, |_| string()),
        "steps" => json!({"type": "array", "items": {"$ref": "#/definitions/step"}}),
        "budget" => json!({"$ref": "#/definitions/budget"}),
        "max_rounds" | "dispatch_timeout_ms" => pos_int(),
        _ => json!({
            "type": "object",
            "propertyNames": {"pattern": STEP_ID, "not": {"enum": RESERVED}},
            "additionalProperties": strict(CARRY_FIELDS, &["initial"], |k| {
                if k == "initial" {
                    non_empty()
                } else {
                    json!({
                        "type": "object",
                        "propertyNames": {"pattern": STEP_ID},
                        "additionalProperties": non_empty()
                    })
                }
            })
        }),
    })
}

/// The JSON Schema of a v1 spec.
pub fn schema() -> Json {
    let mut root = strict(ROOT_FIELDS, ROOT_FIELDS, |k| match k {
        "version" => json!({"const": 1}),
        "contracts" => json!({
            "type": "object",
            "propertyNames": {"pattern": FIELD_NAME, "not": {"enum": RESERVED}},
            "additionalProperties": field_map()
        }),
        _ => json!({
            "type": "object",
            "required": ["entry"],
            "properties": {"entry": {"type": "string", "description": "The flow that runs first."}},
            "additionalProperties": {"$ref": "#/definitions/flow"}
        }),
    });
    let obj = root
        .as_object_mut()
        .expect("invariant: `strict` always builds an object");
    let mut head = Map::new();
    head.insert("$schema".into(), DRAFT.into());
    head.insert(
        "$id".into(),
        "https://stratumc.invalid/schema/spec-v1.json".into(),
    );
    head.insert("title".into(), "Stratum v1 spec (.stratum.yaml)".into());
    head.insert(
        "description".into(),
        "Generated by `stratumc schema` from the decoder's tables. It checks structure only; run `stratumc check` (or `stratumc lsp`) for references, types and graphs.".into(),
    );
    head.extend(std::mem::take(obj));
    head.insert(
        "definitions".into(),
        json!({
            "flow": flow(),
            "step": step(),
            "stage": stage(),
            "predicate": predicate(),
            "budget": budget(),
        }),
    );
    Json::Object(head)
}

/// The JSON value of a YAML tree, scalars read as the front end reads them
/// (integral numbers become JSON integers).
pub fn yaml_to_json(node: &Node) -> Json {
    match &node.value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Number(n) => {
            if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
                Json::from(*n as i64)
            } else {
                serde_json::Number::from_f64(*n).map_or(Json::Null, Json::Number)
            }
        }
        Value::String(s) => Json::String(s.text.clone()),
        Value::Sequence(items) => Json::Array(items.iter().map(yaml_to_json).collect()),
        Value::Mapping(entries) => Json::Object(
            entries
                .iter()
                .map(|e| (e.key.text.clone(), yaml_to_json(&e.value)))
                .collect(),
        ),
    }
}

/// The JSON value of a YAML document (`None` when it does not load cleanly,
/// or holds a number JSON cannot write: `.inf`, `.nan`).
pub fn instance(text: &str) -> Option<Json> {
    let loaded = yaml::load(text);
    if !loaded.diagnostics.is_empty() {
        return None;
    }
    let root = loaded.root.as_ref()?;
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        match &n.value {
            Value::Number(x) if !x.is_finite() => return None,
            Value::Sequence(items) => stack.extend(items),
            Value::Mapping(entries) => stack.extend(entries.iter().map(|e| &e.value)),
            _ => {}
        }
    }
    Some(yaml_to_json(root))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::Code;

    const BASE: &str = "version: 1
contracts:
  R: {v: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${work.output}\", contract: R}
    steps:
      - id: work
        do: \"work\"
        out: R
";

    fn codes(text: &str) -> Vec<Code> {
        crate::analyze(text)
            .diagnostics
            .iter()
            .map(|d| d.code)
            .collect()
    }

    #[test]
    fn the_base_spec_is_clean() {
        assert!(codes(BASE).is_empty());
    }

    /// Every `required` list of the schema is what the decoder requires:
    /// removing one such key from a valid spec gives S0103.
    #[test]
    fn required_keys_match_the_decoder() {
        let cases: &[(&str, &str)] = &[
            ("version: 1\n", ""),
            ("  entry: main\n", ""),
            ("    input: {}\n", ""),
            ("    output: {from: \"${work.output}\", contract: R}\n", ""),
            (
                "output: {from: \"${work.output}\", contract: R}",
                "output: {contract: R}",
            ),
            (
                "output: {from: \"${work.output}\", contract: R}",
                "output: {from: \"${work.output}\"}",
            ),
            ("      - id: work\n        do:", "      - do:"),
        ];
        for (from, to) in cases {
            let text = BASE.replacen(from, to, 1);
            assert_ne!(text, BASE);
            assert!(
                codes(&text).contains(&Code::MissingField),
                "{from:?}: {:?}",
                codes(&text)
            );
        }
        let s = schema();
        assert_eq!(s["required"], json!(["version", "contracts", "flows"]));
        assert_eq!(
            s["definitions"]["flow"]["required"],
            json!(["input", "output", "steps"])
        );
        assert_eq!(s["definitions"]["step"]["required"], json!(["id"]));
        // gate routes, fanout fields, iterate, set/run
        for (step, missing) in [
            ("gate: {on_revise: null, on_kill: null}", "on_approve"),
            ("gate: {on_approve: null, on_kill: null}", "on_revise"),
            ("gate: {on_approve: null, on_revise: null}", "on_kill"),
            ("set: {v: \"'x'\"}", "out"),
            ("run: main", "with"),
        ] {
            let text = BASE.replace(
                "      - id: work\n        do: \"work\"\n        out: R\n",
                &format!("      - id: work\n        do: \"work\"\n        out: R\n      - id: other\n        after: [work]\n        {step}\n"),
            );
            assert!(
                codes(&text).contains(&Code::MissingField),
                "{missing}: {:?}",
                codes(&text)
            );
        }
    }

    #[test]
    fn keys_come_from_the_decoder_tables() {
        let s = schema();
        let step = &s["definitions"]["step"]["properties"];
        for k in STEP_FIELDS {
            assert_eq!(
                step.get(*k).is_some(),
                !NOT_SUPPORTED_YET.contains(k),
                "{k}"
            );
        }
        let fanout = &step["fanout"]["properties"];
        assert_eq!(
            fanout.as_object().map(|o| o.len()),
            Some(FANOUT_FIELDS.len())
        );
        assert_eq!(step["agent"]["enum"], json!(["claude", "codex"]));
    }

    #[test]
    fn yaml_scalars_become_json_like_the_front_end_reads_them() {
        let v = instance("a: 1.0\nb: yes\nc: ~\nd: [0x10, 1.5]\n").unwrap();
        assert_eq!(v, json!({"a": 1, "b": "yes", "c": null, "d": [16, 1.5]}));
        assert!(instance("a: [").is_none());
        assert!(instance("a: .inf").is_none());
    }
}
