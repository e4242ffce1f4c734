//! Resolution and every static rule of the language (reference §6, decisions
//! C1–C8), producing the checked IR.
//!
//! Owns: the phases of the checker and its per-flow state, the flow table,
//! step ids and their resolution, the step graph's edges (order, data and
//! route edges; self references; cycles), the reset region of every revise
//! (computed once, recorded in the IR), sub-flow bodies, and the driver that
//! runs the rule files: [`contracts`], [`template`] (references), [`steps`],
//! [`output`], [`carry`], [`gates`], [`worktrees`], [`unreachable`],
//! [`recursion`] and [`expr`]; graph algorithms are in [`graph`].
//! Must never: re-read YAML (it works on the AST) or emit a follow-on error for
//! something already reported: broken parts resolve to error types (C1).

mod carry;
mod continues;
mod contracts;
pub mod expr;
mod gates;
mod graph;
mod output;
pub mod portable;
mod recursion;
mod routes;
mod scopes;
mod steps;
mod template;
mod unreachable;
mod worktrees;

use std::collections::HashMap;

use crate::diagnostics::{Code, Diagnostic, Sink, did_you_mean};
use crate::ir::{self, FlowIr, Ir, StepId};
use crate::source::Span;
use crate::syntax::ast::{self, Spec, StepKind};
use crate::types::{FieldType, Record, RecordId, Ty, Type, TypeTable};

pub use graph::Graph;
pub(crate) use template::TEMPLATE_STATE_MEMBERS;

/// What the output of a step looks like to its readers.
#[derive(Debug, Clone)]
pub(crate) enum StepOut {
    /// It has an output of this type.
    Known(Type),
    /// A `do` step without `out`.
    NoContract,
    /// A gate: no output at all.
    Gate,
    /// A fanout whose last stage has no `out` (span of that stage).
    FanoutNoFinalOut(Span),
}

/// Per-flow state of the checker.
pub(crate) struct FlowCtx<'f> {
    pub flow: &'f ast::Flow,
    pub flow_index: usize,
    pub is_entry: bool,
    /// Step id → index (first occurrence).
    pub index: HashMap<&'f str, StepId>,
    /// Output of each step.
    pub outputs: Vec<StepOut>,
    /// The flow input record.
    pub input: RecordId,
    /// The step graph.
    pub graph: Graph,
    /// Steps whose `when` is constant false.
    pub never_runs: Vec<StepId>,
    /// Carry variable name → index.
    pub carry: HashMap<&'f str, usize>,
    /// Carry uses: (variable, using step, span).
    pub carry_uses: Vec<(usize, StepId, Span)>,
    /// What each revise resets (filled once the graph is complete).
    pub resets: Vec<ir::ResetIr>,
    /// Memo of dependency ancestors per step.
    ancestors: HashMap<StepId, Vec<bool>>,
    /// Reads of a step's output (X2: checked against `on_fail: continue`).
    pub output_reads: Vec<continues::OutputRead>,
    /// (reader, step): the reader's `when` reads `steps.<step>.status` (X2).
    pub status_guards: Vec<(StepId, StepId)>,
}

impl FlowCtx<'_> {
    /// Whether `a` is guaranteed to finish before `b` (a dependency ancestor).
    pub fn is_dependency_ancestor(&mut self, a: StepId, b: StepId) -> bool {
        if self.graph.dependencies(b).any(|d| d == a) {
            return true;
        }
        if !self.ancestors.contains_key(&b) {
            let set = self.graph.ancestors(b, true);
            self.ancestors.insert(b, set);
        }
        self.ancestors
            .get(&b)
            .is_some_and(|s| s.get(a).copied().unwrap_or(false))
    }

    /// The reset region of every gate whose `on_revise` names another step
    /// of the flow, in document order (a wrong target is reported by
    /// `revise_gates`).
    fn reset_regions(&self) -> Vec<ir::ResetIr> {
        self.flow
            .steps
            .iter()
            .enumerate()
            .filter_map(|(g, s)| {
                let StepKind::Gate(gate) = &s.kind else {
                    return None;
                };
                let &t = self.index.get(gate.on_revise.step()?.text.as_str())?;
                (t != g).then(|| self.graph.reset_closure(g, t))
            })
            .chain(self.route_regions())
            .collect()
    }

    /// X9: the reset region of every route `goto` and `on_fail` `goto` to
    /// another step, one per (step, target) pair, in document order (a
    /// wrong target is reported by `routes`).
    fn route_regions(&self) -> Vec<ir::ResetIr> {
        let mut out: Vec<ir::ResetIr> = Vec::new();
        for (i, s) in self.flow.steps.iter().enumerate() {
            let routes = s.routes.iter().filter_map(|r| match &r.action {
                ast::RouteEntryAction::Goto { target, .. } => Some(target),
                ast::RouteEntryAction::Fail(_) => None,
            });
            let fails = s.on_fail.iter().filter_map(|e| match &e.action {
                ast::OnFailAction::Goto { target, .. } => Some(target),
                ast::OnFailAction::Step(_) | ast::OnFailAction::Fail => None,
            });
            // X9: a fanout stage's `goto` resets from the fanout step
            let stage_fails = match &s.kind {
                StepKind::Fanout(f) => f.stages.iter().flat_map(|st| &st.on_fail).collect(),
                _ => Vec::new(),
            };
            let stage_fails = stage_fails.into_iter().filter_map(|e| match &e.action {
                ast::OnFailAction::Goto { target, .. } => Some(target),
                ast::OnFailAction::Step(_) | ast::OnFailAction::Fail => None,
            });
            for target in routes.chain(fails).chain(stage_fails) {
                let Some(&t) = self.index.get(target.text.as_str()) else {
                    continue;
                };
                if t != i && !out.iter().any(|x| x.from == i && x.target == t) {
                    out.push(self.graph.reset_closure(i, t));
                }
            }
        }
        out
    }

    /// What a revise of gate `gate` resets.
    pub fn reset_of(&self, gate: StepId) -> Option<&ir::ResetIr> {
        self.resets.iter().find(|r| r.from == gate)
    }
}

/// The checker of one spec.
pub(crate) struct Checker<'a> {
    pub source: &'a str,
    pub sink: &'a mut Sink,
    pub types: TypeTable,
    /// Contract name → record (`None` when the contract is broken).
    pub contracts: HashMap<&'a str, Option<RecordId>>,
    pub spec: &'a Spec,
    /// Flow name → index.
    pub flows: HashMap<&'a str, usize>,
    /// Each flow's input record.
    pub flow_inputs: Vec<RecordId>,
    /// Each flow's output type (`Any` when unknown).
    pub flow_outputs: Vec<Type>,
    /// Each flow's output contract.
    pub flow_output_records: Vec<Option<RecordId>>,
    /// The offset map of the scalar mapped last (keyed by its start), so that
    /// mapping many spans of one scalar stays linear.
    pub offsets: std::cell::RefCell<(u32, Option<std::rc::Rc<crate::yaml::OffsetMap>>)>,
    /// Resolved names, recorded only when asked for (the IDE).
    pub facts: Option<Vec<Fact>>,
    /// Where parses of expressions and templates come from: [`Fresh`], or
    /// the IDE database's cache of them.
    pub parses: &'a dyn Parses,
    /// Whether `changes()` may be called in the expression being checked
    /// (X11: set while the ensures of a scoped step or stage are checked).
    pub changes_allowed: bool,
}

/// One expression text parsed: exactly what [`stratum_grammar::parse_expr`]
/// returns, shared so that a cache can hand it to many checks.
#[derive(Debug, PartialEq)]
pub struct ParsedExpr {
    /// The tree, when the text parsed.
    pub ast: Option<std::sync::Arc<stratum_grammar::Expr>>,
    /// Syntax errors, in order.
    pub errors: Vec<stratum_grammar::ParseError>,
}

/// One template text parsed: exactly what [`stratum_grammar::parse_template`]
/// returns, shared.
#[derive(Debug, PartialEq)]
pub struct ParsedTemplate {
    /// The pieces.
    pub template: stratum_grammar::Template,
    /// Syntax errors, in order.
    pub errors: Vec<stratum_grammar::ParseError>,
}

/// Where the checker gets its parses of expression and template texts. The
/// answers are a function of the text alone (their spans count from the
/// text's start), so a cache may give them (the IDE database does).
pub trait Parses {
    /// `text` parsed as an expression.
    fn expr(&self, text: &str) -> std::sync::Arc<ParsedExpr>;
    /// `text` parsed as a template.
    fn template(&self, text: &str) -> std::sync::Arc<ParsedTemplate>;
}

/// Parses every text afresh (the batch checker).
pub struct Fresh;

impl Parses for Fresh {
    fn expr(&self, text: &str) -> std::sync::Arc<ParsedExpr> {
        let (ast, errors) = stratum_grammar::parse_expr(text);
        std::sync::Arc::new(ParsedExpr {
            ast: ast.map(std::sync::Arc::new),
            errors,
        })
    }

    fn template(&self, text: &str) -> std::sync::Arc<ParsedTemplate> {
        let (template, errors) = stratum_grammar::parse_template(text);
        std::sync::Arc::new(ParsedTemplate { template, errors })
    }
}

/// What a name in a flow resolved to, recorded for the IDE while checking.
#[derive(Debug, Clone, PartialEq)]
pub enum FactKind {
    /// A step of the flow, by index (`${id.output}` heads, `result.<id>`).
    Step(StepId),
    /// A field of a record (contract or flow input).
    Field {
        /// The record.
        record: RecordId,
        /// The field name.
        field: String,
    },
    /// A binding or reference head: `result`, `input`, `item`, `prev`.
    Binding(String),
    /// A carry variable, by index.
    Carry(usize),
    /// A whole `${...}` reference.
    Reference,
}

/// One resolved name with its static type.
#[derive(Debug, Clone, PartialEq)]
pub struct Fact {
    /// Where it is written.
    pub span: Span,
    /// What it is.
    pub kind: FactKind,
    /// Its static type.
    pub ty: Type,
}

/// A flow as the other flows see it.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSig {
    /// Its name.
    pub name: String,
    /// Whether it declares `input` (even an empty one).
    pub declares_input: bool,
}

/// What checking one flow reads besides the flow itself: the contract type
/// table and every flow's signature. It holds no spans, so moving a flow in
/// the file leaves it equal (the incremental database relies on this).
#[derive(Debug, Clone, PartialEq)]
pub struct Tables {
    /// Contracts, then flow inputs.
    pub types: TypeTable,
    /// Contract name → record (`None` when the contract is broken), in declaration order.
    pub contracts: Vec<(String, Option<RecordId>)>,
    /// The `contracts` section is missing or broken (already reported).
    pub contracts_broken: bool,
    /// Every flow, in document order.
    pub flows: Vec<FlowSig>,
    /// `flows.entry`, when it is a string.
    pub entry: Option<String>,
    /// Each flow's input record.
    pub flow_inputs: Vec<RecordId>,
    /// Each flow's output type (`Any` when unknown).
    pub flow_outputs: Vec<Type>,
    /// Each flow's output contract.
    pub flow_output_records: Vec<Option<RecordId>>,
}

/// Checks a decoded spec; returns the IR when the spec has no errors.
pub fn check(spec: &Spec, source: &str, sink: &mut Sink) -> Option<Ir> {
    let tables = tables(spec, source, sink);
    let flows: Vec<Option<std::sync::Arc<FlowIr>>> = spec
        .flows
        .iter()
        .enumerate()
        .map(|(i, flow)| check_flow(&tables, i, flow, source, sink).map(std::sync::Arc::new))
        .collect();
    subflow_recursion(spec, &tables, source, sink);
    if sink.has_errors() {
        return None;
    }
    assemble(spec, tables, flows)
}

/// Phase 1 of [`check`]: contracts (type table, cycles) and flow signatures.
pub fn tables(spec: &Spec, source: &str, sink: &mut Sink) -> Tables {
    let mut ck = Checker::new(spec, source, sink);
    ck.contracts();
    ck.flow_table();
    let contracts = spec
        .contracts
        .iter()
        .map(|c| {
            let r = ck.contracts.get(c.name.text.as_str()).copied().flatten();
            (c.name.text.clone(), r)
        })
        .collect();
    Tables {
        types: ck.types,
        contracts,
        contracts_broken: spec.contracts_broken,
        flows: spec
            .flows
            .iter()
            .map(|f| FlowSig {
                name: f.name.text.clone(),
                declares_input: f.input.is_some(),
            })
            .collect(),
        entry: spec.entry.as_ref().map(|e| e.text.clone()),
        flow_inputs: ck.flow_inputs,
        flow_outputs: ck.flow_outputs,
        flow_output_records: ck.flow_output_records,
    }
}

/// Phase 2 of [`check`]: checks flow number `index` against the tables.
///
/// Reads nothing of the spec but `flow` and `tables`, and `source` only at
/// the spans inside `flow`: `flow` and `source` may be shifted together (the
/// incremental database checks a flow with spans relative to its start).
pub fn check_flow(
    tables: &Tables,
    index: usize,
    flow: &ast::Flow,
    source: &str,
    sink: &mut Sink,
) -> Option<FlowIr> {
    let stub = stub_spec(tables);
    let mut ck = Checker::from_tables(&stub, tables, source, sink);
    ck.flow(index, flow)
}

/// [`check_flow`], also returning the names it resolved (for the IDE).
pub fn check_flow_facts(
    tables: &Tables,
    index: usize,
    flow: &ast::Flow,
    source: &str,
    parses: &dyn Parses,
    sink: &mut Sink,
) -> (Option<FlowIr>, Vec<Fact>) {
    let stub = stub_spec(tables);
    let mut ck = Checker::from_tables(&stub, tables, source, sink);
    ck.facts = Some(Vec::new());
    ck.parses = parses;
    let ir = ck.flow(index, flow);
    (ir, ck.facts.take().unwrap_or_default())
}

/// Phase 3 of [`check`]: sub-flow recursion across flows.
pub fn subflow_recursion(spec: &Spec, tables: &Tables, source: &str, sink: &mut Sink) {
    let mut ck = Checker::from_tables(spec, tables, source, sink);
    ck.subflow_recursion();
}

/// Phase 4 of [`check`]: the IR from the checked flows (call only when no
/// error was reported).
pub fn assemble(
    spec: &Spec,
    tables: Tables,
    flows: Vec<Option<std::sync::Arc<FlowIr>>>,
) -> Option<Ir> {
    let entry = spec
        .entry
        .as_ref()
        .and_then(|e| tables.flows.iter().rposition(|f| f.name == e.text));
    let flows: Option<Vec<std::sync::Arc<FlowIr>>> = flows.into_iter().collect();
    let contracts = spec
        .contracts
        .iter()
        .filter_map(|c| {
            let r = tables
                .contracts
                .iter()
                .rev()
                .find(|(n, _)| *n == c.name.text)
                .and_then(|(_, r)| *r)?;
            Some((c.name.text.clone(), r))
        })
        .collect();
    Some(Ir {
        types: tables.types,
        contracts,
        flows: flows?,
        entry: entry?,
    })
}

/// A spec holding only what a flow check reads of other parts: names,
/// whether contracts are usable, whether flows declare inputs.
fn stub_spec(tables: &Tables) -> Spec {
    let name = |text: &str| ast::Name {
        text: text.to_string(),
        span: Span::default(),
    };
    Spec {
        contracts: tables
            .contracts
            .iter()
            .map(|(n, r)| ast::Contract {
                name: name(n),
                fields: Vec::new(),
                ok: r.is_some(),
            })
            .collect(),
        entry: tables.entry.as_deref().map(name),
        flows: tables
            .flows
            .iter()
            .map(|f| ast::Flow {
                input: f.declares_input.then(Vec::new),
                ..ast::Flow::named(name(&f.name))
            })
            .collect(),
        span: Span::default(),
        contracts_broken: tables.contracts_broken,
    }
}

/// Validates a literal `matches` pattern: the safe-shape filter of reference
/// §7.8 and compilability.
/// (The rule lives in `stratum_vm::eval::regex`, shared with the evaluator.)
pub(crate) fn regex_check(pattern: &str) -> Result<(), String> {
    stratum_vm::eval::regex::check_pattern(pattern).map_err(|e| e.to_string())
}

impl<'a> Checker<'a> {
    fn new(spec: &'a Spec, source: &'a str, sink: &'a mut Sink) -> Self {
        Checker {
            source,
            sink,
            types: TypeTable::default(),
            contracts: HashMap::new(),
            spec,
            flows: HashMap::new(),
            flow_inputs: Vec::new(),
            flow_outputs: Vec::new(),
            flow_output_records: Vec::new(),
            offsets: std::cell::RefCell::new((u32::MAX, None)),
            facts: None,
            parses: &Fresh,
            changes_allowed: false,
        }
    }

    /// Records a resolved name written at `start..end` of scalar `s`.
    pub(crate) fn fact_at(
        &mut self,
        s: &crate::yaml::Str,
        at: (u32, u32),
        kind: FactKind,
        ty: &Type,
    ) {
        if self.facts.is_some() {
            let span = self.map(s, at.0, at.1);
            self.fact(span, kind, ty);
        }
    }

    /// Records a resolved name (when facts are being collected).
    pub(crate) fn fact(&mut self, span: Span, kind: FactKind, ty: &Type) {
        if let Some(facts) = &mut self.facts {
            facts.push(Fact {
                span,
                kind,
                ty: ty.clone(),
            });
        }
    }

    /// A checker past phase 1, rebuilt from its tables.
    fn from_tables(spec: &'a Spec, t: &'a Tables, source: &'a str, sink: &'a mut Sink) -> Self {
        let mut ck = Checker::new(spec, source, sink);
        ck.types = t.types.clone();
        for (name, r) in &t.contracts {
            ck.contracts.insert(name.as_str(), *r);
        }
        for (i, f) in t.flows.iter().enumerate() {
            ck.flows.insert(f.name.as_str(), i);
        }
        ck.flow_inputs = t.flow_inputs.clone();
        ck.flow_outputs = t.flow_outputs.clone();
        ck.flow_output_records = t.flow_output_records.clone();
        ck
    }

    // ----- flows -----------------------------------------------------------

    fn flow_table(&mut self) {
        let spec = self.spec;
        for (i, f) in spec.flows.iter().enumerate() {
            self.flows.insert(f.name.text.as_str(), i);
        }
        if let Some(entry) = &spec.entry
            && !self.flows.contains_key(entry.text.as_str())
        {
            let names: Vec<&str> = spec.flows.iter().map(|f| f.name.text.as_str()).collect();
            self.sink.push(
                Diagnostic::new(
                    Code::UnknownEntry,
                    entry.span,
                    format!("`flows.entry` names `{}`, which is not a flow", entry.text),
                )
                .with_note(if names.is_empty() {
                    "the spec defines no flows".into()
                } else {
                    format!("the flows are: {}", names.join(", "))
                })
                .with_help_opt(did_you_mean(&entry.text, names.iter().copied())),
            );
        }
        // inputs and outputs of every flow, before any step is checked
        for f in &spec.flows {
            let rid = self.types.records.len();
            self.types.records.push(Record {
                name: format!("input of flow `{}`", f.name.text),
                fields: Vec::new(),
            });
            let mut fields = Vec::new();
            let mut dummy = Vec::new();
            for fd in f.input.iter().flatten() {
                let ft = match &fd.ty {
                    Some(t) => self.field_type(t, &mut dummy),
                    None => FieldType {
                        ty: Ty::Error,
                        optional: true,
                    },
                };
                fields.push((fd.name.text.clone(), ft));
            }
            self.types.records[rid].fields = fields;
            self.flow_inputs.push(rid);
            let out = f
                .output
                .as_ref()
                .and_then(|o| o.contract.as_ref())
                .and_then(|c| self.contract_named(c));
            self.flow_outputs.push(match out {
                Some(Some(r)) => Type::Record(r),
                _ => Type::Any,
            });
            self.flow_output_records.push(out.flatten());
        }
    }

    fn is_entry(&self, i: usize) -> bool {
        self.spec
            .entry
            .as_ref()
            .is_some_and(|e| self.spec.flows[i].name.text == e.text)
    }

    fn flow(&mut self, fi: usize, flow: &'a ast::Flow) -> Option<FlowIr> {
        let is_entry = self.is_entry(fi);
        let mut fc = FlowCtx {
            flow,
            flow_index: fi,
            is_entry,
            index: HashMap::new(),
            outputs: Vec::new(),
            input: self.flow_inputs[fi],
            graph: Graph::new(flow.steps.len()),
            never_runs: Vec::new(),
            carry: HashMap::new(),
            carry_uses: Vec::new(),
            resets: Vec::new(),
            ancestors: HashMap::new(),
            output_reads: Vec::new(),
            status_guards: Vec::new(),
        };
        // ids
        for (i, s) in flow.steps.iter().enumerate() {
            let Some(id) = &s.id else { continue };
            if let Some(&first) = fc.index.get(id.text.as_str()) {
                let first_span = flow.steps[first].id.as_ref().map_or(id.span, |n| n.span);
                self.sink.push(
                    Diagnostic::new(
                        Code::DuplicateStep,
                        id.span,
                        format!(
                            "step id `{}` is used twice in flow `{}`",
                            id.text, flow.name.text
                        ),
                    )
                    .with_span_label("second use")
                    .with_label(first_span, "first used here")
                    .with_help("give each step of a flow its own id"),
                );
            } else {
                fc.index.insert(id.text.as_str(), i);
            }
        }
        // carry names (needed while reading templates)
        if let Some(carry) = &flow.carry {
            for (i, v) in carry.vars.iter().enumerate() {
                fc.carry.insert(v.name.text.as_str(), i);
            }
        }
        // outputs
        for s in &flow.steps {
            let out = self.step_output(s);
            fc.outputs.push(out);
        }
        // non-entry flows: only do/set/gate
        if !is_entry {
            for s in &flow.steps {
                if matches!(s.kind, StepKind::Fanout(_) | StepKind::Run { .. }) {
                    self.sink.push(
                        Diagnostic::new(
                            Code::SubflowBodyRestricted,
                            s.construct_span,
                            format!("flow `{}` is not the entry flow, so it cannot contain a `{}` step", flow.name.text, s.kind.keyword()),
                        )
                        .with_note("called flows contain only `do`, `set` and `gate` steps; nesting is one level deep")
                        .with_help("move this step into the entry flow"),
                    );
                }
            }
        }
        let steps = self.steps(&mut fc);
        fc.resets = fc.reset_regions();
        let carry = self.carry(&mut fc);
        self.revise_gates(&mut fc);
        self.consumer_worktrees(&mut fc);
        let output = self.flow_output(&mut fc);
        self.continues(&fc);
        self.unreachable(&mut fc);
        let topo = fc.graph.topo_order();
        let steps = steps?;
        Some(FlowIr {
            name: flow.name.text.clone(),
            input: fc.input,
            output: output?,
            steps,
            edges: fc.graph.edges.clone(),
            topo,
            budget: flow.budget.clone(),
            max_rounds: flow.max_rounds.map(|m| m.value),
            dispatch_timeout_ms: flow.dispatch_timeout_ms.map(|t| t.value),
            carry: carry?,
            resets: fc.resets,
        })
    }

    fn step_output(&mut self, s: &ast::Step) -> StepOut {
        let named = |ck: &mut Self, n: &Option<ast::Name>| {
            n.as_ref().map(|n| match ck.contract_named(n) {
                Some(Some(r)) => Type::Record(r),
                _ => Type::Any,
            })
        };
        match &s.kind {
            StepKind::Do(_) if s.out_broken => StepOut::Known(Type::Any),
            StepKind::Do(_) => named(self, &s.out).map_or(StepOut::NoContract, StepOut::Known),
            StepKind::Set(_) => StepOut::Known(named(self, &s.out).unwrap_or(Type::Any)),
            StepKind::Gate(_) => StepOut::Gate,
            StepKind::Fanout(f) => {
                let mut last = None;
                for (j, st) in f.stages.iter().enumerate() {
                    let t = named(self, &st.out);
                    if j + 1 == f.stages.len() {
                        last = Some((t, st.span));
                    }
                }
                match last {
                    Some((Some(t), _)) => StepOut::Known(Type::List(Box::new(t))),
                    Some((None, span)) => StepOut::FanoutNoFinalOut(span),
                    None => StepOut::Known(Type::Any),
                }
            }
            StepKind::Run { flow, .. } => match self.flows.get(flow.text.as_str()) {
                Some(&callee) => StepOut::Known(self.flow_outputs[callee].clone()),
                None => StepOut::Known(Type::Any),
            },
            // X12: the result object of v1 §4.9, or `out` when it narrows it
            StepKind::Evaluate(_) => StepOut::Known(named(self, &s.out).unwrap_or(Type::Object)),
            StepKind::Broken => StepOut::Known(Type::Any),
        }
    }

    /// Resolves a step id used in `after`, `on_fail` or a gate route.
    fn target(&mut self, fc: &FlowCtx<'_>, name: &ast::Name, what: &str) -> Option<StepId> {
        match fc.index.get(name.text.as_str()) {
            Some(&i) => Some(i),
            // an invalid id or a broken step list is already reported
            None if fc.flow.steps_broken || !crate::syntax::decode::is_step_id(&name.text) => None,
            None => {
                let help = did_you_mean(&name.text, fc.index.keys().copied());
                self.sink.push(
                    Diagnostic::new(
                        Code::UnknownStep,
                        name.span,
                        format!(
                            "{what} names `{}`, which is not a step of flow `{}`",
                            name.text, fc.flow.name.text
                        ),
                    )
                    .with_help_opt(help),
                );
                None
            }
        }
    }

    fn steps(&mut self, fc: &mut FlowCtx<'a>) -> Option<Vec<ir::StepIr>> {
        let flow = fc.flow;
        // phase 1: every edge, in the normative order per step
        let mut pending: Vec<(StepId, StepId, ir::EdgeKind, Span)> = Vec::new();
        let mut answers: Vec<(StepId, StepId, Span)> = Vec::new();
        for (i, s) in flow.steps.iter().enumerate() {
            for a in &s.after {
                if let Some(t) = self.target(fc, a, "`after`") {
                    pending.push((t, i, ir::EdgeKind::Order, a.span));
                }
            }
            for f in s.on_fail_names() {
                if !continues::is_continue(fc, f)
                    && let Some(t) = self.target(fc, f, "`on_fail`")
                {
                    pending.push((i, t, ir::EdgeKind::OnFail, f.span));
                }
            }
            for (from, span, kind, answer) in self.data_sources(fc, i) {
                if answer == template::AnswerRead::Yes {
                    answers.push((from, i, span));
                } else {
                    pending.push((from, i, kind, span));
                }
            }
            if let StepKind::Gate(g) = &s.kind {
                for (route, kind, what) in [
                    (&g.on_approve, ir::EdgeKind::Approve, "`on_approve`"),
                    (&g.on_kill, ir::EdgeKind::Kill, "`on_kill`"),
                ] {
                    if let Some(n) = route.step()
                        && let Some(t) = self.target(fc, n, what)
                    {
                        pending.push((i, t, kind, n.span));
                    }
                }
            }
        }
        for (from, to, kind, span) in pending {
            if from == to {
                let id = flow.steps[from]
                    .id
                    .as_ref()
                    .map_or("this step".into(), |n| format!("step `{}`", n.text));
                let msg = match kind {
                    ir::EdgeKind::Order => format!("{id} lists itself in `after`"),
                    ir::EdgeKind::Data => format!("{id} reads its own output"),
                    ir::EdgeKind::State => format!("{id} reads its own state"),
                    _ => format!("{id} routes to itself"),
                };
                self.sink.push(
                    Diagnostic::new(Code::SelfReference, span, msg)
                        .with_note("a step cannot depend on or route to itself"),
                );
                continue;
            }
            fc.graph.add(from, to, kind, span);
        }
        // X10: a gate's note/choice read inside its reset closure orders nothing
        for (gate, reader, span) in answers {
            if !self.in_answer_closure(fc, gate, reader) {
                fc.graph.add(gate, reader, ir::EdgeKind::State, span);
            }
        }
        for (from, to, kind, span) in fc.graph.break_cycles() {
            let name = |i: StepId| {
                flow.steps[i]
                    .id
                    .as_ref()
                    .map_or("?".to_string(), |n| n.text.clone())
            };
            let path = fc.graph.path(to, from).unwrap_or_default();
            let mut chain: Vec<String> = path.iter().map(|&s| format!("`{}`", name(s))).collect();
            chain.push(format!("`{}`", name(to)));
            let kind_text = match kind {
                ir::EdgeKind::Order => "this `after` entry",
                ir::EdgeKind::Data | ir::EdgeKind::State => "this reference",
                ir::EdgeKind::OnFail => "this `on_fail` route",
                ir::EdgeKind::Approve => "this `on_approve` route",
                ir::EdgeKind::Kill => "this `on_kill` route",
            };
            self.sink.push(
                Diagnostic::new(Code::Cycle, span, format!("{kind_text} closes a cycle: {}", chain.join(" → ")))
                    .with_note("steps and routes must form a directed acyclic graph; only a gate's `on_revise` may go back")
                    .with_help("remove one of the edges, or use a gate's `on_revise` to loop back"),
            );
        }
        // phase 2: per-step content
        let mut out = Vec::new();
        let mut ok = true;
        for i in 0..flow.steps.len() {
            match self.step(fc, i) {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }
}
