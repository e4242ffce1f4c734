//! Completion: what may be typed at the cursor.
//!
//! Owns: reading the cursor's context (inside `${...}`, inside an expression
//! after `.`, a key position, a value position) and listing keys from the
//! decoder's key tables, names from the spec, fields from the checker's
//! types and builtins from the checker's table.
//! Must never: decide a type or a scope itself: the type before a `.` comes
//! from the checker's facts on the text with the partial member removed.

use super::{CompletionItem, CompletionKind, Db, FileId, Index, flow_at, members, step_items};
use crate::check::FactKind;
use crate::syntax::{
    ast::{self, StepKind},
    decode,
};

fn item(label: &str, kind: CompletionKind, detail: Option<String>) -> CompletionItem {
    CompletionItem {
        label: label.to_string(),
        kind,
        detail,
        insert_text: None,
    }
}

/// Completions at `offset`.
pub fn completion(db: &Db, file: FileId, offset: u32) -> Vec<CompletionItem> {
    let ix = Index::new(db, file);
    let text = ix.text;
    let mut at = (offset as usize).min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = &text[line_start..at];
    let partial_len = line
        .chars()
        .rev()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
        .map(char::len_utf8)
        .sum::<usize>();
    let before = &line[..line.len() - partial_len];
    let spec = ix.spec();
    let fi = flow_at(spec, offset);
    let flow = fi.and_then(|i| spec.flows.get(i));

    // inside `${...}`
    let open = before.rfind("${");
    if let Some(o) = open
        && !before[o..].contains('}')
    {
        let inner = &before[o + 2..];
        if inner.is_empty() {
            let mut out: Vec<CompletionItem> = flow.map(step_items).unwrap_or_default();
            for it in &mut out {
                it.insert_text = Some(format!("{}.output", it.label));
            }
            out.push(item(
                "input",
                CompletionKind::Keyword,
                Some("flow input".into()),
            ));
            if let Some(c) = flow.and_then(|f| f.carry.as_ref()) {
                for v in &c.vars {
                    out.push(item(
                        &v.name.text,
                        CompletionKind::Field,
                        Some("carry".into()),
                    ));
                }
            }
            return out;
        }
        if inner == "input." {
            return input_fields(&ix, fi);
        }
        if let Some(step) = inner.strip_suffix('.').and_then(|id| step_named(flow, id)) {
            return template_state_members(step);
        }
        if inner.ends_with('.') {
            let dot = line_start + before.len() - 1;
            let close = !text[at..].lines().next().unwrap_or("").contains('}');
            return after_dot(db, &ix, fi, dot, at, close);
        }
        return Vec::new();
    }
    // an expression member: `result.`, `input.`, `x.y.`
    if before.ends_with('.') && before.len() > 1 {
        let dot = line_start + before.len() - 1;
        return after_dot(db, &ix, fi, dot, at, false);
    }
    let trimmed = before.trim_start().trim_start_matches("- ");
    // value positions; in a flow mapping (`{when: "…", goto: `, X9 route
    // and `on_fail` entries) the key is the last one before the cursor
    let pair = if trimmed.starts_with('{') {
        trimmed
            .rsplit_once(':')
            .map(|(k, v)| (k.rsplit(['{', ',']).next().unwrap_or(k), v))
    } else {
        trimmed.split_once(':')
    };
    if let Some((key, value)) = pair {
        let key = key.trim();
        let value = value.trim_start().trim_start_matches('[');
        let in_list = value.ends_with(", ") || value.ends_with(',') || value.is_empty();
        return match key {
            "out" | "contract" => spec
                .contracts
                .iter()
                .map(|c| {
                    item(
                        &c.name.text,
                        CompletionKind::Contract,
                        Some("contract".into()),
                    )
                })
                .collect(),
            "run" | "entry" => spec
                .flows
                .iter()
                .map(|f| item(&f.name.text, CompletionKind::Flow, Some("flow".into())))
                .collect(),
            "on_fail" if value.is_empty() => {
                let mut out = flow.map(step_items).unwrap_or_default();
                out.push(item(
                    "continue",
                    CompletionKind::Value,
                    decode::key_doc(None, "on_fail").map(String::from),
                ));
                out
            }
            "after" | "on_fail" | "on_approve" | "on_revise" | "on_kill" if in_list => {
                flow.map(step_items).unwrap_or_default()
            }
            "judge" => db
                .env(file)
                .judges
                .iter()
                .flatten()
                .map(|j| {
                    item(
                        j,
                        CompletionKind::Value,
                        Some("judge of stratum.toml".into()),
                    )
                })
                .collect(),
            "goto" => flow.map(step_items).unwrap_or_default(),
            "agent" => decode::AGENTS
                .iter()
                .map(|(a, _)| item(a, CompletionKind::Value, None))
                .collect(),
            "expr" | "when" | "until" => expression_start(),
            _ if value.trim_start_matches('"').is_empty() && is_set_value(&ix, offset) => {
                expression_start()
            }
            _ => Vec::new(),
        };
    }
    // key positions
    if !trimmed.is_empty() {
        return Vec::new();
    }
    keys(&ix, fi, offset, before, line_start)
}

fn step_named<'a>(flow: Option<&'a ast::Flow>, id: &str) -> Option<&'a ast::Step> {
    flow?
        .steps
        .iter()
        .find(|s| s.id.as_ref().is_some_and(|n| n.text == id))
}

/// What `${<id>.` may read of a step (X1): its output and the state members
/// the checker accepts in a template (`note` of gates only).
fn template_state_members(step: &ast::Step) -> Vec<CompletionItem> {
    let is_gate = matches!(step.kind, StepKind::Gate(_));
    let mut out = vec![item(
        "output",
        CompletionKind::Field,
        step.out.as_ref().map(|c| format!("`{}`", c.text)),
    )];
    for m in crate::check::TEMPLATE_STATE_MEMBERS {
        let doc = match *m {
            "status" => "\"succeeded\" | \"failed\" | \"skipped\"",
            "failure" => "{reason, violations} or null",
            "note" if is_gate => "the note of the gate's latest decision",
            _ => continue,
        };
        out.push(item(m, CompletionKind::Field, Some(doc.into())));
    }
    out
}

fn is_set_value(ix: &Index<'_>, offset: u32) -> bool {
    ix.spec().flows.iter().flat_map(|f| &f.steps).any(|s| {
        matches!(s.kind, StepKind::Set(_)) && s.span.start <= offset && offset <= s.span.end
    })
}

/// Bindings and builtin functions.
fn expression_start() -> Vec<CompletionItem> {
    let mut out: Vec<CompletionItem> = ["result", "input", "item", "prev", "steps"]
        .iter()
        .map(|b| item(b, CompletionKind::Keyword, Some("binding".into())))
        .collect();
    let docs = stratum_vm::plan::op::BUILTIN_DOCS;
    for (i, (name, arity)) in crate::check::expr::BUILTINS.iter().enumerate() {
        let detail = match docs.get(i) {
            Some(doc) => format!("builtin: {doc}"),
            None if *arity == stratum_vm::plan::op::VARIADIC => {
                "builtin, 1 or more arguments".into()
            }
            None => format!("builtin, {arity:?} argument(s)"),
        };
        out.push(CompletionItem {
            label: name.to_string(),
            kind: CompletionKind::Function,
            detail: Some(detail),
            insert_text: Some(format!("{name}(")),
        });
    }
    out
}

fn input_fields(ix: &Index<'_>, fi: Option<usize>) -> Vec<CompletionItem> {
    let (Some(t), Some(fi)) = (ix.tables(), fi) else {
        return Vec::new();
    };
    match t.flow_inputs.get(fi) {
        Some(&r) => members(ix, Some(fi), &crate::types::Type::Record(r)),
        None => Vec::new(),
    }
}

/// Members after the `.` at byte `dot`: the text is analysed again without
/// `.partial` (closing an open `${` when needed), and the checker's fact that
/// ends at `dot` gives the type.
fn after_dot(
    db: &Db,
    ix: &Index<'_>,
    fi: Option<usize>,
    dot: usize,
    cursor: usize,
    close: bool,
) -> Vec<CompletionItem> {
    let mut patched = String::with_capacity(ix.text.len() + 1);
    patched.push_str(&ix.text[..dot]);
    if close {
        patched.push('}');
    }
    patched.push_str(&ix.text[cursor..]);
    let mut scratch = Db::new();
    let _ = db;
    let file = scratch.set_text("completion.stratum.yaml", patched);
    let analysis = crate::db::file_analysis(&scratch, file);
    let dot = dot as u32;
    let fact = analysis
        .facts
        .iter()
        .flat_map(|fs| fs.iter())
        .filter(|f| {
            f.span.end == dot || (matches!(f.kind, FactKind::Reference) && f.span.end == dot + 1)
        })
        .max_by_key(|f| f.span.end - f.span.start);
    match fact {
        Some(f) => members(ix, fi, &f.ty),
        None => Vec::new(),
    }
}

/// Keys valid at a key position, by indentation: root, flow, step or stage.
fn keys(
    ix: &Index<'_>,
    fi: Option<usize>,
    offset: u32,
    before: &str,
    line_start: usize,
) -> Vec<CompletionItem> {
    let col = before.chars().count();
    let spec = ix.spec();
    let parent = parent_key(ix.text, line_start, col);
    let list: Vec<&str> = if col == 0 {
        decode::ROOT_FIELDS.to_vec()
    } else if parent == Some("cost") {
        decode::COST_FIELDS.to_vec()
    } else if parent == Some("judged") {
        decode::JUDGED_FIELDS.to_vec()
    } else if parent == Some("gate") {
        decode::GATE_FIELDS.to_vec()
    } else if let Some(flow) = fi.and_then(|i| spec.flows.get(i)) {
        let flow_col = column(ix.text, flow.name.span.start);
        // the last step starting before the cursor, if the cursor is at its key column
        let step = flow.steps.iter().rev().find(|s| s.span.start <= offset);
        let step_col = step.map(|s| column(ix.text, s.span.start));
        match step {
            Some(s) if step_col == Some(col) => {
                let mut keys = decode::SHARED_STEP_FIELDS.to_vec();
                match &s.kind {
                    StepKind::Broken => keys.extend(decode::CONSTRUCTS),
                    k => keys.extend(decode::allowed_for(k.keyword())),
                }
                keys
            }
            Some(s) if matches!(s.kind, StepKind::Fanout(_)) && step_col < Some(col) => {
                let mut k = decode::FANOUT_FIELDS.to_vec();
                k.extend(decode::STAGE_FIELDS);
                k
            }
            _ if col == flow_col + 2 => decode::FLOW_FIELDS.to_vec(),
            _ => Vec::new(),
        }
    } else {
        Vec::new()
    };
    list.into_iter()
        .map(|k| CompletionItem {
            label: k.to_string(),
            kind: CompletionKind::Key,
            detail: decode::key_doc(parent, k).map(String::from),
            insert_text: Some(format!("{k}: ")),
        })
        .collect()
}

/// Column (in chars) of a byte offset.
fn column(text: &str, offset: u32) -> usize {
    let at = (offset as usize).min(text.len());
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    text.get(start..at).map_or(0, |s| s.chars().count())
}

/// The key of the mapping a key at column `col` of the line starting at
/// byte `line_start` sits in: the nearest line above it that starts left of
/// `col` (a `- ` list marker counts as indentation), when it is `key:`.
pub(super) fn parent_key(text: &str, line_start: usize, col: usize) -> Option<&str> {
    let above = text.get(..line_start)?;
    for line in above.lines().rev() {
        let body = line.trim_start();
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let indent = line.chars().count() - body.chars().count();
        let key_text = body.trim_start_matches("- ");
        let key_col = indent + (body.len() - key_text.len());
        if key_col >= col {
            continue;
        }
        let (key, _) = key_text.split_once(':')?;
        return Some(key.trim());
    }
    None
}
