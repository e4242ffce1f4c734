//! The IDE API: what the language server asks of the compiler.
//!
//! Owns: the editor-facing queries over the salsa database ([`Db`]) —
//! diagnostics, hover, definition, references, rename, completion, symbols,
//! folding and code actions — all answered from the compiler's own analysis
//! (the decoded AST with spans, the checked tables and IR). Positions are
//! byte offsets into the file text.
//! Must never: re-implement a language rule, know about LSP types or UTF-16
//! (the `lsp` crate converts at its edge), or panic on any offset.

mod index;

pub use crate::db::{Db, FileId};

use crate::check::FactKind;
use crate::diagnostics::Diagnostic;
use crate::source::{LineIndex, Span};
use crate::syntax::ast::{self, StepKind};
use crate::syntax::decode;
use crate::types::Type;
use index::{Index, Sym};

/// A replacement of `span` by `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextEdit {
    /// What to replace (byte range).
    pub span: Span,
    /// The new text.
    pub text: String,
}

/// What hovering shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoverResult {
    /// The hovered range.
    pub range: Span,
    /// Markdown text.
    pub markdown: String,
}

/// The kind of a completion item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionKind {
    /// A mapping key.
    Key,
    /// A step id.
    Step,
    /// A contract name.
    Contract,
    /// A flow name.
    Flow,
    /// A field of a contract or input.
    Field,
    /// A builtin function.
    Function,
    /// A keyword or binding (`result`, `input`, …).
    Keyword,
    /// An enumerated value.
    Value,
}

/// One completion proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionItem {
    /// What is shown (and inserted when `insert_text` is `None`).
    pub label: String,
    /// What it is.
    pub kind: CompletionKind,
    /// A short description (a type, a construct).
    pub detail: Option<String>,
    /// Text to insert instead of the label.
    pub insert_text: Option<String>,
}

/// The kind of a document symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolKind {
    /// A contract.
    Contract,
    /// A contract or input field.
    Field,
    /// A flow.
    Flow,
    /// A step.
    Step,
    /// A flow's input block.
    Input,
}

/// A document symbol with its children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Its name.
    pub name: String,
    /// What it is.
    pub kind: SymbolKind,
    /// A short description.
    pub detail: Option<String>,
    /// The whole declaration.
    pub range: Span,
    /// The name.
    pub selection: Span,
    /// Nested symbols.
    pub children: Vec<Symbol>,
}

/// A quick fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeAction {
    /// What it does.
    pub title: String,
    /// The code of the diagnostic it fixes (`"S0102"`).
    pub code: &'static str,
    /// The edits.
    pub edits: Vec<TextEdit>,
    /// Whether editors may apply it directly.
    pub preferred: bool,
}

/// The same diagnostics, in the same order, as `analyze(text).diagnostics`.
pub fn diagnostics(db: &Db, file: FileId) -> Vec<Diagnostic> {
    crate::db::file_analysis(db, file).diagnostics.clone()
}

/// The line index of a file.
pub fn line_index(db: &Db, file: FileId) -> LineIndex {
    LineIndex::new(db.text(file))
}

/// Hover information at `offset`.
pub fn hover(db: &Db, file: FileId, offset: u32) -> Option<HoverResult> {
    let ix = Index::new(db, file);
    let t = ix.tables();
    // what the checker resolved (templates and expressions)
    let fact = ix
        .analysis
        .facts
        .iter()
        .enumerate()
        .flat_map(|(fi, fs)| fs.iter().map(move |f| (fi, f)))
        .filter(|(_, f)| f.span.start <= offset && offset <= f.span.end)
        .min_by_key(|(_, f)| f.span.end - f.span.start);
    if let (Some((fi, f)), Some(t)) = (fact, t) {
        let ty = t.types.display(&f.ty);
        let written = ix.text.get(f.span.range()).unwrap_or("");
        let markdown = match &f.kind {
            FactKind::Step(i) => step_summary(&ix, fi, *i),
            FactKind::Field { record, field } => {
                let owner = t.types.records.get(*record).map_or("", |r| r.name.as_str());
                format!("```\n{field}: {ty}\n```\nfield of {}", quote_record(owner))
            }
            FactKind::Binding(name) => format!("```\n{name}: {ty}\n```"),
            FactKind::Carry(_) => format!("```\n{written}\n```\ncarry variable"),
            FactKind::Reference => format!("```\n{written}: {ty}\n```"),
        };
        return Some(HoverResult {
            range: f.span,
            markdown,
        });
    }
    let Some(occ) = ix.at(offset) else {
        return word_hover(ix.text, offset);
    };
    let markdown = match &occ.sym {
        Sym::Step(fi, id) => {
            let flow = ix.spec().flows.get(*fi)?;
            let i = flow
                .steps
                .iter()
                .position(|s| s.id.as_ref().is_some_and(|n| &n.text == id))?;
            step_summary(&ix, *fi, i)
        }
        Sym::Contract(name) => {
            let c = ix.spec().contracts.iter().find(|c| &c.name.text == name)?;
            let fields: Vec<String> = c
                .fields
                .iter()
                .map(|f| {
                    let ty = f.ty.as_ref().map_or("?", |t| t.text.as_str());
                    format!("  {}: {ty}", f.name.text)
                })
                .collect();
            format!("```\ncontract {name}\n{}\n```", fields.join("\n"))
        }
        Sym::ContractField(c, f) => {
            let ty = field_type_text(&ix, c, f).unwrap_or_else(|| "?".into());
            format!("```\n{f}: {ty}\n```\nfield of contract `{c}`")
        }
        Sym::Flow(name) => {
            let flow = ix.spec().flows.iter().find(|f| &f.name.text == name)?;
            let inputs: Vec<String> = flow
                .input
                .iter()
                .flatten()
                .map(|f| {
                    let ty = f.ty.as_ref().map_or("?", |t| t.text.as_str());
                    format!("{}: {ty}", f.name.text)
                })
                .collect();
            let out = flow
                .output
                .as_ref()
                .and_then(|o| o.contract.as_ref())
                .map_or("none".to_string(), |c| format!("`{}`", c.text));
            format!(
                "**flow `{name}`** — {} steps\n\ninput: {}\n\noutput: {out}",
                flow.steps.len(),
                if inputs.is_empty() {
                    "none".to_string()
                } else {
                    format!("`{}`", inputs.join(", "))
                }
            )
        }
        Sym::Input(fi, field) => {
            let flow = ix.spec().flows.get(*fi)?;
            let f = flow
                .input
                .iter()
                .flatten()
                .find(|f| &f.name.text == field)?;
            let ty = f.ty.as_ref().map_or("?", |t| t.text.as_str());
            format!(
                "```\n{field}: {ty}\n```\ninput of flow `{}`",
                flow.name.text
            )
        }
        Sym::Carry(fi, name) => {
            let flow = ix.spec().flows.get(*fi)?;
            format!("carry variable `{name}` of flow `{}`", flow.name.text)
        }
    };
    Some(HoverResult {
        range: occ.span,
        markdown,
    })
}

/// Hover on a key (its meaning, from the decoder's [`decode::KEY_DOCS`]) or
/// on a builtin's name before `(` (its line of the plan's `BUILTIN_DOCS`).
fn word_hover(text: &str, offset: u32) -> Option<HoverResult> {
    let at = (offset as usize).min(text.len());
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let start = text.get(..at)?.trim_end_matches(is_word).len();
    let end = at + (text.get(at..)?.len() - text.get(at..)?.trim_start_matches(is_word).len());
    let word = text.get(start..end).filter(|w| !w.is_empty())?;
    let range = Span::new(start as u32, end as u32);
    let after = text.get(end..)?;
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let lead = &text[line_start..start];
    if after.starts_with(':') && lead.trim_start().trim_start_matches("- ").is_empty() {
        let col = lead.chars().count();
        let parent = complete::parent_key(text, line_start, col);
        let doc = decode::key_doc(parent, word)?;
        return Some(HoverResult {
            range,
            markdown: format!("`{word}` — {doc}"),
        });
    }
    if after.starts_with('(') {
        let i = crate::check::expr::BUILTINS
            .iter()
            .position(|(name, _)| *name == word)?;
        let doc = stratum_vm::plan::op::BUILTIN_DOCS.get(i)?;
        return Some(HoverResult {
            range,
            markdown: format!("```\n{doc}\n```\nbuiltin"),
        });
    }
    None
}

fn quote_record(name: &str) -> String {
    if name.contains(' ') {
        name.to_string()
    } else {
        format!("contract `{name}`")
    }
}

fn field_type_text(ix: &Index<'_>, contract: &str, field: &str) -> Option<String> {
    let c = ix
        .spec()
        .contracts
        .iter()
        .find(|c| c.name.text == contract)?;
    let f = c.fields.iter().find(|f| f.name.text == field)?;
    Some(f.ty.as_ref()?.text.clone())
}

/// Construct, agent, out contract, attempts and worst-case dispatches of a step.
fn step_summary(ix: &Index<'_>, fi: usize, i: usize) -> String {
    let Some(step) = ix.spec().flows.get(fi).and_then(|f| f.steps.get(i)) else {
        return String::new();
    };
    let id = step.id.as_ref().map_or("?", |n| n.text.as_str());
    let mut lines = vec![format!("**step `{id}`** — `{}`", step.kind.keyword())];
    let ir_step = ix
        .analysis
        .ir
        .as_ref()
        .and_then(|ir| ir.flows.get(fi))
        .and_then(|f| f.steps.get(i));
    match (&step.kind, ir_step.map(|s| &s.kind)) {
        (
            StepKind::Do(_),
            Some(crate::ir::StepKindIr::Do {
                agent, attempts, ..
            }),
        ) => {
            lines.push(format!("agent: `{}`", agent.as_str()));
            lines.push(format!("attempts: {attempts}"));
        }
        (StepKind::Do(_), _) => {
            lines.push(format!(
                "agent: `{}`",
                step.agent.unwrap_or_default().as_str()
            ));
            if let Some(a) = step.attempts {
                lines.push(format!("attempts: {}", a.value));
            }
        }
        (StepKind::Run { flow, .. }, _) => lines.push(format!("runs flow `{}`", flow.text)),
        (StepKind::Evaluate(ev), _) => {
            lines.push(format!(
                "runs command `{}` of stratum.toml (`[commands.{}]`), at most {} ms",
                ev.command.text, ev.command.text, ev.timeout_ms.value
            ));
            lines.push("its stdout is the result `{status, children, reason, score?, route?}`; every failure is terminal".to_owned());
        }
        _ => {}
    }
    if let Some(out) = &step.out {
        lines.push(format!("out: `{}`", out.text));
    }
    if let Some(ir) = &ix.analysis.ir {
        let cost = crate::cost::analyze_cost(ir, fi, None, &crate::cost::CostConfig::default());
        if let Some(c) = cost.steps.get(i) {
            let worst = match (&c.dispatches.worst, &c.dispatches.worst_symbolic) {
                (_, Some(sym)) => sym.clone(),
                (Some(w), None) => format!("{w}"),
                (None, None) => "unknown".into(),
            };
            lines.push(format!("worst-case dispatches: {worst}"));
        }
    }
    lines.join("\n\n")
}

/// The declaration (name span) of the symbol at `offset`.
pub fn definition(db: &Db, file: FileId, offset: u32) -> Option<Span> {
    let ix = Index::new(db, file);
    let occ = ix.at(offset)?;
    ix.decl(&occ.sym).map(|d| d.span)
}

/// Every use of the symbol at `offset` (and its declaration when asked).
pub fn references(db: &Db, file: FileId, offset: u32, include_declaration: bool) -> Vec<Span> {
    let ix = Index::new(db, file);
    let Some(occ) = ix.at(offset) else {
        return Vec::new();
    };
    ix.all(&occ.sym)
        .into_iter()
        .filter(|o| include_declaration || !o.decl)
        .map(|o| o.span)
        .collect()
}

/// The span of the renameable name at `offset`.
pub fn prepare_rename(db: &Db, file: FileId, offset: u32) -> Option<Span> {
    let ix = Index::new(db, file);
    let occ = ix.at(offset)?;
    renameable(&occ.sym).then_some(occ.span)
}

fn renameable(sym: &Sym) -> bool {
    matches!(sym, Sym::Step(..) | Sym::Contract(_) | Sym::Flow(_))
}

/// Edits that rename the symbol at `offset`, or why the rename is refused.
pub fn rename(db: &Db, file: FileId, offset: u32, new_name: &str) -> Result<Vec<TextEdit>, String> {
    let ix = Index::new(db, file);
    let occ = ix
        .at(offset)
        .ok_or("there is no step, contract or flow name here")?;
    let spec = ix.spec();
    match &occ.sym {
        Sym::Step(fi, old) => {
            if !decode::is_step_id(new_name) {
                return Err(format!(
                    "`{new_name}` is not a valid step id: step ids match `[a-z][a-z0-9_-]*`"
                ));
            }
            let flow = &spec.flows[*fi];
            if new_name != old
                && flow
                    .steps
                    .iter()
                    .any(|s| s.id.as_ref().is_some_and(|n| n.text == new_name))
            {
                return Err(format!(
                    "flow `{}` already has a step `{new_name}`",
                    flow.name.text
                ));
            }
        }
        Sym::Contract(old) => {
            if !decode::is_field_name(new_name) {
                return Err(format!(
                    "`{new_name}` is not a valid contract name: names match `[A-Za-z_][A-Za-z0-9_]*`"
                ));
            }
            if crate::types::parse_type(new_name)
                .is_ok_and(|(t, _)| !matches!(t, crate::types::TypeExpr::Named(_)))
            {
                return Err(format!("`{new_name}` is a built-in type name"));
            }
            if new_name != old && spec.contracts.iter().any(|c| c.name.text == new_name) {
                return Err(format!("a contract `{new_name}` already exists"));
            }
            let in_type = ix.all(&occ.sym).iter().any(|o| {
                ix.text.get(o.span.range()) == Some(old.as_str()) && is_in_type(&ix, o.span)
            });
            if in_type && !new_name.starts_with(|c: char| c.is_ascii_uppercase()) {
                return Err(format!(
                    "`{old}` is used in a type, and only contracts whose names start with an uppercase letter can be"
                ));
            }
        }
        Sym::Flow(old) => {
            if !decode::is_field_name(new_name) && !decode::is_step_id(new_name) {
                return Err(format!(
                    "`{new_name}` is not a valid flow name: use letters, digits, `_` and `-`"
                ));
            }
            if new_name == "entry" {
                return Err("`entry` is reserved under `flows`".into());
            }
            if new_name != old && spec.flows.iter().any(|f| f.name.text == new_name) {
                return Err(format!("a flow `{new_name}` already exists"));
            }
        }
        _ => return Err("only step ids, contracts and flows can be renamed".into()),
    }
    Ok(ix
        .all(&occ.sym)
        .into_iter()
        .map(|o| TextEdit {
            span: o.span,
            text: new_name.to_string(),
        })
        .collect())
}

/// Whether `span` lies inside a contract field's or flow input's type string.
fn is_in_type(ix: &Index<'_>, span: Span) -> bool {
    let spec = ix.spec();
    let fields = spec
        .contracts
        .iter()
        .flat_map(|c| c.fields.iter())
        .chain(spec.flows.iter().flat_map(|f| f.input.iter().flatten()));
    fields
        .filter_map(|f| f.ty.as_ref())
        .any(|t| t.span.start <= span.start && span.end <= t.span.end)
}

/// The whole extent of a flow (name to last value).
fn flow_range(flow: &ast::Flow) -> Span {
    let (start, end) = crate::db::extent(flow);
    Span::new(start.min(flow.name.span.start), end.max(flow.name.span.end))
}

fn contract_range(c: &ast::Contract) -> Span {
    c.fields.iter().fold(c.name.span, |acc, f| {
        let acc = acc.cover(f.name.span);
        f.ty.as_ref().map_or(acc, |t| acc.cover(t.span))
    })
}

/// The symbol of a contract field or a flow input: `name: type`.
fn field_symbol(f: &crate::syntax::ast::Field, kind: SymbolKind) -> Symbol {
    Symbol {
        name: f.name.text.clone(),
        kind,
        detail: f.ty.as_ref().map(|t| t.text.clone()),
        range: f
            .ty
            .as_ref()
            .map_or(f.name.span, |t| f.name.span.cover(t.span)),
        selection: f.name.span,
        children: Vec::new(),
    }
}

/// Document symbols: contracts with fields, flows with inputs and steps.
pub fn symbols(db: &Db, file: FileId) -> Vec<Symbol> {
    let spec = &crate::db::parsed(db, file).spec;
    let mut out = Vec::new();
    for c in &spec.contracts {
        out.push(Symbol {
            name: c.name.text.clone(),
            kind: SymbolKind::Contract,
            detail: Some("contract".into()),
            range: contract_range(c),
            selection: c.name.span,
            children: c
                .fields
                .iter()
                .map(|f| field_symbol(f, SymbolKind::Field))
                .collect(),
        });
    }
    for flow in &spec.flows {
        let mut children: Vec<Symbol> = flow
            .input
            .iter()
            .flatten()
            .map(|f| field_symbol(f, SymbolKind::Input))
            .collect();
        for s in &flow.steps {
            let Some(id) = &s.id else { continue };
            children.push(Symbol {
                name: id.text.clone(),
                kind: SymbolKind::Step,
                detail: Some(s.kind.keyword().to_string()),
                range: s.span.cover(id.span),
                selection: id.span,
                children: Vec::new(),
            });
        }
        out.push(Symbol {
            name: flow.name.text.clone(),
            kind: SymbolKind::Flow,
            detail: Some("flow".into()),
            range: flow_range(flow),
            selection: flow.name.span,
            children,
        });
    }
    out
}

/// Folding ranges: contracts, flows, steps.
pub fn folding(db: &Db, file: FileId) -> Vec<Span> {
    let spec = &crate::db::parsed(db, file).spec;
    let mut out: Vec<Span> = spec.contracts.iter().map(contract_range).collect();
    for flow in &spec.flows {
        out.push(flow_range(flow));
        out.extend(flow.steps.iter().map(|s| s.span));
    }
    out.sort();
    out
}

/// Quick fixes for diagnostics overlapping `range` (did-you-mean suggestions).
pub fn code_actions(db: &Db, file: FileId, range: Span) -> Vec<CodeAction> {
    let text = db.text(file);
    let mut out = Vec::new();
    for d in diagnostics(db, file) {
        if d.span.end < range.start || range.end < d.span.start {
            continue;
        }
        let Some(suggestion) = d.suggestion() else {
            continue;
        };
        let written = text.get(d.span.range()).unwrap_or("");
        // only a bare name is replaced (never a quoted or composite scalar)
        let bare = !written.is_empty()
            && written
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
        if !bare {
            continue;
        }
        out.push(CodeAction {
            title: format!("Replace `{written}` with `{suggestion}`"),
            code: d.code.as_str(),
            edits: vec![TextEdit {
                span: d.span,
                text: suggestion.to_string(),
            }],
            preferred: true,
        });
    }
    out
}

mod complete;
pub use complete::completion;

/// The flow (index) whose extent contains `offset`.
fn flow_at(spec: &ast::Spec, offset: u32) -> Option<usize> {
    spec.flows.iter().position(|f| {
        let r = flow_range(f);
        r.start <= offset && offset <= r.end
    })
}

/// Types a completion after `.` can list: fields of a record, or step ids.
fn members(ix: &Index<'_>, fi: Option<usize>, ty: &Type) -> Vec<CompletionItem> {
    let Some(t) = ix.tables() else {
        return Vec::new();
    };
    match ty {
        Type::Record(r) => t
            .types
            .records
            .get(*r)
            .map(|rec| {
                rec.fields
                    .iter()
                    .map(|(n, ft)| CompletionItem {
                        label: n.clone(),
                        kind: CompletionKind::Field,
                        detail: Some(t.types.display_ty(ft)),
                        insert_text: None,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        Type::Steps(_) | Type::StepStates(_) => fi
            .and_then(|fi| ix.spec().flows.get(fi))
            .map(step_items)
            .unwrap_or_default(),
        // X1: the members of `steps.<id>` and of a failure; X10: a gate
        // with `options` also has its decision's `choice`
        Type::StepState(step) => {
            let has_options = fi
                .and_then(|fi| ix.spec().flows.get(fi))
                .and_then(|f| f.steps.get(*step))
                .is_some_and(|s| matches!(&s.kind, ast::StepKind::Gate(g) if g.options.is_some()));
            [
                ("status", "\"succeeded\" | \"failed\" | \"skipped\""),
                ("output", "the step's `out`, null unless it succeeded"),
                ("failure", "{reason, violations} or null"),
                ("attempts", "integer"),
            ]
            .into_iter()
            .chain(has_options.then_some((
                "choice",
                "the option the gate's latest decision chose, or null",
            )))
            .map(|(n, d)| CompletionItem {
                label: n.to_string(),
                kind: CompletionKind::Field,
                detail: Some(d.to_string()),
                insert_text: None,
            })
            .collect()
        }
        Type::Failure => [("reason", "string"), ("violations", "array")]
            .iter()
            .map(|(n, d)| CompletionItem {
                label: n.to_string(),
                kind: CompletionKind::Field,
                detail: Some(d.to_string()),
                insert_text: None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn step_items(flow: &ast::Flow) -> Vec<CompletionItem> {
    flow.steps
        .iter()
        .filter_map(|s| {
            s.id.as_ref().map(|id| CompletionItem {
                label: id.text.clone(),
                kind: CompletionKind::Step,
                detail: Some(format!("{} step", s.kind.keyword())),
                insert_text: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
