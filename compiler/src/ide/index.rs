//! The symbol index of one file: every declaration and use of a step id,
//! contract, contract field, flow, carry variable and flow input field.
//!
//! Owns: collecting occurrences from the decoded AST (names with spans) and
//! from the facts the checker recorded while resolving `${...}` references
//! and expressions ([`crate::check::Fact`]).
//! Must never: resolve a reference or an expression itself — what a name in
//! a template or an expression means comes from the checker's facts.

use std::collections::HashMap;

use crate::check::{FactKind, Tables};
use crate::db::{FileAnalysis, FileId, Parsed, file_analysis, parsed};
use crate::ide::Db;
use crate::source::Span;
use crate::syntax::ast::{self, Spec, StepKind};
use crate::types::{TypeExpr, parse_type};
use crate::yaml::{OffsetMap, Str};

/// What a name denotes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Sym {
    /// A contract.
    Contract(String),
    /// A field of a contract.
    ContractField(String, String),
    /// A flow.
    Flow(String),
    /// A step of flow number `.0`.
    Step(usize, String),
    /// A carry variable of flow number `.0`.
    Carry(usize, String),
    /// An input field of flow number `.0`.
    Input(usize, String),
}

/// One occurrence of a symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occ {
    /// The name as written.
    pub span: Span,
    /// What it denotes.
    pub sym: Sym,
    /// Whether this is the declaration.
    pub decl: bool,
}

/// The analysis of a file plus its occurrences.
pub struct Index<'db> {
    /// The text.
    pub text: &'db str,
    /// Parse results (AST).
    pub parsed: &'db Parsed,
    /// Check results (facts, tables, IR).
    pub analysis: &'db FileAnalysis,
    /// Every occurrence, in no particular order.
    pub occs: Vec<Occ>,
}

impl<'db> Index<'db> {
    /// Builds the index of a file.
    pub fn new(db: &'db Db, file: FileId) -> Index<'db> {
        let text = db.text(file);
        let parsed = parsed(db, file);
        let analysis = file_analysis(db, file);
        let mut ix = Index {
            text,
            parsed,
            analysis,
            occs: Vec::new(),
        };
        ix.collect();
        ix
    }

    /// The spec.
    pub fn spec(&self) -> &'db Spec {
        &self.parsed.spec
    }

    /// The tables, unless the YAML was unusable.
    pub fn tables(&self) -> Option<&'db Tables> {
        self.analysis.tables.as_ref()
    }

    /// The occurrence under `offset` (the narrowest one).
    pub fn at(&self, offset: u32) -> Option<&Occ> {
        self.occs
            .iter()
            .filter(|o| o.span.start <= offset && offset <= o.span.end)
            .min_by_key(|o| o.span.end - o.span.start)
    }

    /// Every occurrence of `sym`, in file order.
    pub fn all(&self, sym: &Sym) -> Vec<&Occ> {
        let mut v: Vec<&Occ> = self.occs.iter().filter(|o| &o.sym == sym).collect();
        v.sort_by_key(|o| (o.span.start, o.span.end));
        v.dedup_by_key(|o| o.span);
        v
    }

    /// The declaration of `sym`.
    pub fn decl(&self, sym: &Sym) -> Option<&Occ> {
        self.occs.iter().find(|o| o.decl && &o.sym == sym)
    }

    fn push(&mut self, span: Span, sym: Sym, decl: bool) {
        self.occs.push(Occ { span, sym, decl });
    }

    fn collect(&mut self) {
        let spec = self.spec();
        for c in &spec.contracts {
            self.push(c.name.span, Sym::Contract(c.name.text.clone()), true);
            for f in &c.fields {
                let sym = Sym::ContractField(c.name.text.clone(), f.name.text.clone());
                self.push(f.name.span, sym, true);
                if let Some(t) = &f.ty {
                    self.type_string(t);
                }
            }
        }
        if let Some(e) = &spec.entry {
            self.push(e.span, Sym::Flow(e.text.clone()), false);
        }
        for (fi, flow) in spec.flows.iter().enumerate() {
            self.flow(fi, flow);
        }
        self.facts();
    }

    /// A contract named inside a type string (`Item[]`, `Review?`).
    fn type_string(&mut self, s: &Str) {
        let Ok((mut t, _)) = parse_type(&s.text) else {
            return;
        };
        while let TypeExpr::List(inner) = t {
            t = *inner;
        }
        let TypeExpr::Named(name) = t else {
            return;
        };
        let Some(i) = s.text.find(name.as_str()) else {
            return;
        };
        let map = OffsetMap::new(self.text, s);
        let start = map.at(i as u32);
        let end = map.at((i + name.len()) as u32 - 1) + 1;
        self.push(Span::new(start, end), Sym::Contract(name), false);
    }

    fn flow(&mut self, fi: usize, flow: &'db ast::Flow) {
        self.push(flow.name.span, Sym::Flow(flow.name.text.clone()), true);
        for f in flow.input.iter().flatten() {
            self.push(f.name.span, Sym::Input(fi, f.name.text.clone()), true);
            if let Some(t) = &f.ty {
                self.type_string(t);
            }
        }
        if let Some(c) = flow.output.as_ref().and_then(|o| o.contract.as_ref()) {
            self.push(c.span, Sym::Contract(c.text.clone()), false);
        }
        let step = |n: &ast::Name| Sym::Step(fi, n.text.clone());
        if let Some(carry) = &flow.carry {
            for v in &carry.vars {
                self.push(v.name.span, Sym::Carry(fi, v.name.text.clone()), true);
                for (gate, _) in &v.on_revise {
                    self.push(gate.span, step(gate), false);
                }
            }
        }
        for s in &flow.steps {
            if let Some(id) = &s.id {
                self.push(id.span, step(id), true);
            }
            for a in &s.after {
                self.push(a.span, step(a), false);
            }
            for f in s.on_fail_names() {
                self.push(f.span, step(f), false);
            }
            // X9: `goto` targets of `on_fail` entries and of routes
            for e in &s.on_fail {
                if let crate::syntax::ast::OnFailAction::Goto { target, .. } = &e.action {
                    self.push(target.span, step(target), false);
                }
            }
            for r in &s.routes {
                if let crate::syntax::ast::RouteEntryAction::Goto { target, .. } = &r.action {
                    self.push(target.span, step(target), false);
                }
            }
            if let Some(o) = &s.out {
                self.push(o.span, Sym::Contract(o.text.clone()), false);
            }
            match &s.kind {
                StepKind::Gate(g) => {
                    for r in [&g.on_approve, &g.on_revise, &g.on_kill] {
                        if let Some(n) = r.step() {
                            self.push(n.span, step(n), false);
                        }
                    }
                }
                StepKind::Fanout(f) => {
                    for st in &f.stages {
                        if let Some(o) = &st.out {
                            self.push(o.span, Sym::Contract(o.text.clone()), false);
                        }
                    }
                }
                StepKind::Run {
                    flow: callee, with, ..
                } => {
                    self.push(callee.span, Sym::Flow(callee.text.clone()), false);
                    let target = self
                        .spec()
                        .flows
                        .iter()
                        .position(|f| f.name.text == callee.text);
                    if let Some(k) = target {
                        for e in with.iter().flatten() {
                            self.push(e.key.span, Sym::Input(k, e.key.text.clone()), false);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Names inside templates and expressions, as the checker resolved them.
    fn facts(&mut self) {
        let Some(t) = self.tables() else { return };
        let spec = self.spec();
        let inputs: HashMap<usize, usize> = t
            .flow_inputs
            .iter()
            .enumerate()
            .map(|(k, r)| (*r, k))
            .collect();
        for (fi, facts) in self.analysis.facts.iter().enumerate() {
            let Some(flow) = spec.flows.get(fi) else {
                continue;
            };
            for f in facts.iter() {
                let sym = match &f.kind {
                    FactKind::Step(i) => flow
                        .steps
                        .get(*i)
                        .and_then(|s| s.id.as_ref())
                        .map(|id| Sym::Step(fi, id.text.clone())),
                    FactKind::Carry(v) => flow
                        .carry
                        .as_ref()
                        .and_then(|c| c.vars.get(*v))
                        .map(|v| Sym::Carry(fi, v.name.text.clone())),
                    FactKind::Field { record, field } => match t.contracts.get(*record) {
                        Some((c, _)) => Some(Sym::ContractField(c.clone(), field.clone())),
                        None => inputs.get(record).map(|k| Sym::Input(*k, field.clone())),
                    },
                    FactKind::Binding(_) | FactKind::Reference => None,
                };
                if let Some(sym) = sym {
                    self.push(f.span, sym, false);
                }
            }
        }
    }
}
