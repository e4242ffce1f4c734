//! The salsa database behind the language server: incremental analysis.
//!
//! Owns: the file-text input ([`FileId`], with its environment input
//! [`CheckEnv`]: what the `stratum.toml` near the file says), the path → file map, and the
//! tracked queries that run the front end's stages (YAML + decode, shared
//! tables, per-flow checks, IR assembly) so that an edit re-runs only what
//! the edit can affect; the event log used by tests to observe re-execution.
//! Must never: implement a language rule (it calls `yaml`, `syntax` and
//! `check`), or do I/O.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use salsa::Setter;

use crate::check::{self, Fact, Parses, Tables};
use crate::diagnostics::{Diagnostic, Sink};
use crate::env::CheckEnv;
use crate::ir::{self, FlowIr, Ir};
use crate::source::Span;
use crate::syntax::{
    ast::{self, Spec},
    decode,
};
use crate::yaml::{self, Node, Str, Value};

/// One open file: a salsa input holding its path and text.
#[salsa::input(debug)]
pub struct FileId {
    /// The path (or URI) the file is known by.
    #[returns(ref)]
    pub path: String,
    /// The whole text.
    #[returns(ref)]
    pub text: String,
    /// The environment input (the `stratum.toml` near the file, as the
    /// caller found it; default: none known). Only [`file_analysis`] reads it.
    #[returns(ref)]
    pub env: CheckEnv,
}

/// Query executions recorded by the event callback (tests only look at it).
type EventLog = Arc<Mutex<Vec<salsa::DatabaseKeyIndex>>>;

/// The database: salsa storage plus the path → file map.
#[salsa::db]
#[derive(Clone)]
pub struct Db {
    storage: salsa::Storage<Self>,
    files: HashMap<String, FileId>,
    log: EventLog,
}

#[salsa::db]
impl salsa::Database for Db {}

impl Default for Db {
    fn default() -> Self {
        Db::new()
    }
}

impl Db {
    /// An empty database that records which queries execute.
    pub fn new() -> Db {
        let log: EventLog = Arc::default();
        let sink = Arc::clone(&log);
        let storage = salsa::Storage::new(Some(Box::new(move |event: salsa::Event| {
            if let salsa::EventKind::WillExecute { database_key } = event.kind
                && let Ok(mut log) = sink.lock()
            {
                log.push(database_key);
            }
        })));
        let mut db = Db {
            storage,
            files: HashMap::new(),
            log,
        };
        // a file is never cut into more chunks than this, so they all stay
        loaded_chunk::set_lru_capacity(&mut db, yaml::chunked::MAX_CHUNKS);
        db
    }

    /// Creates or updates a file's text; returns its handle.
    pub fn set_text(&mut self, path: &str, text: String) -> FileId {
        match self.files.get(path) {
            Some(&file) => {
                if file.text(self) != &text {
                    file.set_text(self).to(text);
                }
                file
            }
            None => {
                let file = FileId::new(self, path.to_string(), text, CheckEnv::default());
                self.files.insert(path.to_string(), file);
                file
            }
        }
    }

    /// Sets a file's environment input (only a changed environment
    /// invalidates anything, and then only the file's [`file_analysis`]).
    pub fn set_env(&mut self, file: FileId, env: CheckEnv) {
        if file.env(self) != &env {
            file.set_env(self).to(env);
        }
    }

    /// The environment input of a file.
    pub fn env(&self, file: FileId) -> &CheckEnv {
        file.env(self)
    }

    /// The handle of a file, if it is open.
    pub fn file(&self, path: &str) -> Option<FileId> {
        self.files.get(path).copied()
    }

    /// Forgets a file (its handle must not be used afterwards).
    pub fn remove(&mut self, path: &str) {
        if let Some(file) = self.files.remove(path) {
            // release the text; the handle itself stays valid but unused
            file.set_text(self).to(String::new());
        }
    }

    /// The text of a file.
    pub fn text(&self, file: FileId) -> &str {
        file.text(self)
    }

    /// Names of the flows whose check query ([`check_flow`]) executed since
    /// the last call of this or [`Db::take_executed`] (and clears the log).
    pub fn take_executed_flow_checks(&self) -> Vec<String> {
        use salsa::Database;
        use salsa::plumbing::FromId;
        let keys = match self.log.lock() {
            Ok(mut log) => std::mem::take(&mut *log),
            Err(_) => Vec::new(),
        };
        keys.into_iter()
            .filter(|k| self.ingredient_debug_name(k.ingredient_index()) == "check_flow")
            .map(|k| FlowKey::from_id(k.key_index()).name(self).clone())
            .collect()
    }

    /// Names of the queries executed since the last call (and clears the log),
    /// as `query(key)` strings.
    pub fn take_executed(&self) -> Vec<String> {
        let keys = match self.log.lock() {
            Ok(mut log) => std::mem::take(&mut *log),
            Err(_) => Vec::new(),
        };
        use salsa::Database;
        keys.into_iter()
            .map(|k| {
                format!(
                    "{}({:?})",
                    self.ingredient_debug_name(k.ingredient_index()),
                    k.key_index()
                )
            })
            .collect()
    }
}

// ----- queries ---------------------------------------------------------------

/// YAML loading and decoding of a whole file.
#[derive(Debug)]
pub struct Parsed {
    /// The decoded spec (empty when the YAML could not be read).
    pub spec: Spec,
    /// YAML and decoder diagnostics, in the order they were found.
    pub diagnostics: Vec<Diagnostic>,
    /// The YAML was unusable: nothing was decoded or checked.
    pub yaml_failed: bool,
    /// The YAML reader reported something (then there is no IR).
    pub yaml_errors: bool,
}

/// The text of one chunk of a file (`yaml::chunked`; interned: equal texts
/// share one key).
#[salsa::interned(debug)]
struct YamlChunk<'db> {
    #[returns(ref)]
    text: String,
}

/// Stage 1': one chunk loaded on its own (spans relative to the chunk), so
/// that an edit re-reads only the chunks it touched. The least recently used
/// are dropped past `yaml::chunked::MAX_CHUNKS` kept (set by [`Db::new`]; a
/// file never has more).
#[salsa::tracked(returns(ref), lru = 1)]
fn loaded_chunk<'db>(
    db: &'db dyn salsa::Database,
    chunk: YamlChunk<'db>,
) -> Option<Arc<yaml::chunked::Item>> {
    yaml::chunked::load_item(chunk.text(db)).map(Arc::new)
}

/// Stage 1: text → YAML → AST (re-runs on every edit of the file; the YAML
/// of unchanged chunks comes from [`loaded_chunk`]).
#[salsa::tracked(returns(ref), no_eq)]
pub fn parsed(db: &dyn salsa::Database, file: FileId) -> Parsed {
    let text = file.text(db);
    let loaded = yaml::chunked::load_with(text, &|chunk| {
        loaded_chunk(db, YamlChunk::new(db, chunk)).clone()
    });
    let yaml_failed = loaded.root.is_none() && !loaded.diagnostics.is_empty();
    let yaml_errors = !loaded.diagnostics.is_empty();
    let mut sink = Sink::default();
    for d in loaded.diagnostics {
        sink.push(d);
    }
    let spec = if yaml_failed {
        Spec::default()
    } else {
        decode::decode(loaded.root.as_ref(), text.len() as u32, &mut sink)
    };
    Parsed {
        spec,
        diagnostics: sink.into_unsorted(),
        yaml_failed,
        yaml_errors,
    }
}

/// Stage 2a: contracts and flow signatures, with their diagnostics.
#[salsa::tracked(returns(ref), no_eq)]
fn tables_with_diagnostics(
    db: &dyn salsa::Database,
    file: FileId,
) -> (Option<Tables>, Vec<Diagnostic>) {
    let p = parsed(db, file);
    if p.yaml_failed {
        return (None, Vec::new());
    }
    let mut sink = Sink::default();
    let t = check::tables(&p.spec, file.text(db), &mut sink);
    (Some(t), sink.into_unsorted())
}

/// Stage 2b: the tables alone. They hold no spans, so this query keeps its
/// old value (and its readers stay valid) unless a contract or a flow's
/// signature really changed.
#[salsa::tracked(returns(ref))]
pub fn tables(db: &dyn salsa::Database, file: FileId) -> Option<Tables> {
    tables_with_diagnostics(db, file).0.clone()
}

/// A flow of a file, by name (and occurrence, should a name repeat).
#[salsa::interned(debug)]
pub struct FlowKey<'db> {
    /// The file.
    #[returns(copy)]
    pub file: FileId,
    /// The flow name.
    #[returns(ref)]
    pub name: String,
    /// How many flows of the same name come before it (normally 0).
    #[returns(copy)]
    pub nth: u32,
}

/// A flow made position-independent: its AST with spans relative to `base`,
/// and the file text from `base` to its last span.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowInput {
    /// Index of the flow in the spec.
    pub index: usize,
    /// The flow, spans relative to `base`.
    pub flow: ast::Flow,
    /// `text[base..end]`, where `end` is the end of the flow's last span.
    pub source: String,
}

/// Where a flow is in the file (its first span) and its index.
fn locate(spec: &Spec, name: &str, nth: u32) -> Option<usize> {
    spec.flows
        .iter()
        .enumerate()
        .filter(|(_, f)| f.name.text == name)
        .nth(nth as usize)
        .map(|(i, _)| i)
}

/// The smallest start and largest end of every span in a flow. Usually the
/// flow's name and its last value, but a YAML alias can point elsewhere.
pub(crate) fn extent(flow: &ast::Flow) -> (u32, u32) {
    let mut copy = flow.clone();
    let mut d = Delta::measure();
    copy.shift(&mut d);
    (d.min, d.max)
}

/// Where a flow is: its index in the spec and the extent of its spans
/// (re-runs on every edit; equal when the flow did not move).
#[salsa::tracked(returns(copy))]
fn flow_place<'db>(db: &'db dyn salsa::Database, key: FlowKey<'db>) -> Option<(usize, u32, u32)> {
    let p = parsed(db, key.file(db));
    let index = locate(&p.spec, key.name(db), key.nth(db))?;
    let (base, end) = extent(&p.spec.flows[index]);
    Some((index, base, end))
}

/// Stage 3a: one flow, position-independent (re-runs on every edit, cheap;
/// equal after edits elsewhere, so the flow's check is not re-run).
#[salsa::tracked(returns(ref))]
fn flow_input<'db>(db: &'db dyn salsa::Database, key: FlowKey<'db>) -> Option<FlowInput> {
    let file = key.file(db);
    let p = parsed(db, file);
    let (index, base, end) = flow_place(db, key)?;
    let mut flow = p.spec.flows[index].clone();
    flow.shift(&mut Delta::by(-i64::from(base)));
    let source = file
        .text(db)
        .get(base as usize..end as usize)
        .unwrap_or_default()
        .to_string();
    Some(FlowInput {
        index,
        flow,
        source,
    })
}

/// The text of one expression or template (interned: equal texts share one
/// key).
#[salsa::interned(debug)]
struct ParseText<'db> {
    #[returns(ref)]
    text: String,
}

/// Stage 3a': one expression parsed. Parses carry spans relative to their
/// own text, so one is reused by every check that meets the same text again
/// — an edit re-parses only the expressions it touched. The least recently
/// used are dropped past 16,384 kept.
#[salsa::tracked(returns(ref), lru = 16384)]
fn parsed_expr<'db>(db: &'db dyn salsa::Database, text: ParseText<'db>) -> Arc<check::ParsedExpr> {
    check::Fresh.expr(text.text(db))
}

/// Stage 3a'': one template parsed (as [`parsed_expr`]).
#[salsa::tracked(returns(ref), lru = 16384)]
fn parsed_template<'db>(
    db: &'db dyn salsa::Database,
    text: ParseText<'db>,
) -> Arc<check::ParsedTemplate> {
    check::Fresh.template(text.text(db))
}

/// The checker's parses from [`parsed_expr`] and [`parsed_template`].
struct CachedParses<'db>(&'db dyn salsa::Database);

impl check::Parses for CachedParses<'_> {
    fn expr(&self, text: &str) -> Arc<check::ParsedExpr> {
        parsed_expr(self.0, ParseText::new(self.0, text)).clone()
    }

    fn template(&self, text: &str) -> Arc<check::ParsedTemplate> {
        parsed_template(self.0, ParseText::new(self.0, text)).clone()
    }
}

/// One flow checked, spans relative to the flow's base.
#[derive(Debug, Clone)]
pub struct FlowChecked {
    /// Diagnostics in the order found.
    pub diagnostics: Vec<Diagnostic>,
    /// The flow's IR when it has no error.
    pub ir: Option<FlowIr>,
    /// What the names in the flow resolved to.
    pub facts: Vec<Fact>,
}

/// Stage 3b: the check of one flow. Reads only [`flow_input`] and
/// [`tables`], so it re-runs only when this flow or a signature it may read
/// changed.
#[salsa::tracked(returns(ref), no_eq)]
pub fn check_flow<'db>(db: &'db dyn salsa::Database, key: FlowKey<'db>) -> FlowChecked {
    let mut sink = Sink::default();
    let (ir, facts) = match (flow_input(db, key), tables(db, key.file(db))) {
        (Some(input), Some(t)) => check::check_flow_facts(
            t,
            input.index,
            &input.flow,
            &input.source,
            &CachedParses(db),
            &mut sink,
        ),
        _ => (None, Vec::new()),
    };
    FlowChecked {
        diagnostics: sink.into_unsorted(),
        ir,
        facts,
    }
}

/// Everything known about one file, positions absolute.
#[derive(Debug)]
pub struct FileAnalysis {
    /// Exactly `analysis::analyze_with(text, env).diagnostics`.
    pub diagnostics: Vec<Diagnostic>,
    /// The checked IR, present exactly when there are no errors.
    pub ir: Option<Arc<Ir>>,
    /// The tables (contracts, flow signatures), unless the YAML was unusable.
    pub tables: Option<Tables>,
    /// Per flow (by index in the spec): what its names resolved to.
    pub facts: Vec<Arc<Vec<Fact>>>,
}

/// Stage 4: joins the stages in the order `analysis::analyze` runs them
/// (sub-flow recursion, IR assembly and budget warnings are whole-spec
/// and re-run here; the per-flow checks come from [`check_flow`]).
#[salsa::tracked(returns(ref), no_eq)]
pub fn file_analysis(db: &dyn salsa::Database, file: FileId) -> FileAnalysis {
    let text = file.text(db);
    // the same limit as `stratumc check` (`analysis::analyze_bytes`)
    if text.len() > crate::analysis::MAX_FILE_SIZE {
        return FileAnalysis {
            diagnostics: vec![crate::analysis::too_large(text.len())],
            ir: None,
            tables: None,
            facts: Vec::new(),
        };
    }
    let p = parsed(db, file);
    let mut sink = Sink::default();
    for d in &p.diagnostics {
        sink.push(d.clone());
    }
    let mut ir = None;
    let mut facts = Vec::new();
    let (t, table_diagnostics) = tables_with_diagnostics(db, file);
    if let (false, Some(t)) = (p.yaml_failed, t) {
        for d in table_diagnostics {
            sink.push(d.clone());
        }
        let mut seen: HashMap<&str, u32> = HashMap::new();
        let mut flows = Vec::with_capacity(p.spec.flows.len());
        for flow in &p.spec.flows {
            let nth = seen.entry(flow.name.text.as_str()).or_default();
            let key = FlowKey::new(db, file, flow.name.text.clone(), *nth);
            *nth += 1;
            let placed = flow_placed(db, key);
            for d in &placed.diagnostics {
                sink.push(d.clone());
            }
            facts.push(placed.facts.clone());
            flows.push(placed.ir.clone());
        }
        check::subflow_recursion(&p.spec, t, text, &mut sink);
        if !sink.has_errors() && !p.yaml_errors {
            ir = check::assemble(&p.spec, t.clone(), flows);
        }
        // after the check, as `analysis::analyze_with` pushes them
        for d in crate::env::warnings(&p.spec, file.env(db)) {
            sink.push(d);
        }
        if let Some(ir) = &ir {
            let config = crate::cost::CostConfig::default();
            for d in crate::cost::budget_warnings(ir, &config) {
                sink.push(d);
            }
        }
    }
    FileAnalysis {
        diagnostics: sink.finish(),
        ir: ir.map(Arc::new),
        tables: t.clone(),
        facts,
    }
}

/// The offset a flow's relative spans count from.
fn flow_base<'db>(db: &'db dyn salsa::Database, key: FlowKey<'db>) -> u32 {
    flow_place(db, key).map_or(0, |(_, base, _)| base)
}

/// One flow's check results at file positions.
#[derive(Debug, Clone)]
pub struct FlowPlaced {
    /// Diagnostics in the order found.
    pub diagnostics: Vec<Diagnostic>,
    /// The flow's IR when it has no error.
    pub ir: Option<Arc<FlowIr>>,
    /// What the names in the flow resolved to.
    pub facts: Arc<Vec<Fact>>,
}

/// Stage 3c: [`check_flow`] moved to file positions. Re-runs only when the
/// flow's check re-ran or the flow moved (an edit before it changed its
/// length), so flows before an edit are not copied again.
#[salsa::tracked(returns(ref), no_eq)]
pub fn flow_placed<'db>(db: &'db dyn salsa::Database, key: FlowKey<'db>) -> FlowPlaced {
    let base = i64::from(flow_base(db, key));
    let checked = check_flow(db, key);
    let diagnostics = checked
        .diagnostics
        .iter()
        .map(|d| {
            let mut d = d.clone();
            d.shift(&mut Delta::by(base));
            d
        })
        .collect();
    let mut facts = checked.facts.clone();
    facts.shift(&mut Delta::by(base));
    let ir = checked.ir.clone().map(|mut f| {
        f.shift(&mut Delta::by(base));
        Arc::new(f)
    });
    FlowPlaced {
        diagnostics,
        ir,
        facts: Arc::new(facts),
    }
}

// ----- moving spans ----------------------------------------------------------

/// A move of every span by `by` bytes; also records the smallest start and
/// largest end seen (before the move).
struct Delta {
    by: i64,
    min: u32,
    max: u32,
}

impl Delta {
    fn by(by: i64) -> Delta {
        Delta {
            by,
            min: u32::MAX,
            max: 0,
        }
    }

    fn measure() -> Delta {
        Delta::by(0)
    }

    fn span(&mut self, s: &mut Span) {
        self.min = self.min.min(s.start);
        self.max = self.max.max(s.end);
        let mv = |x: u32| (i64::from(x) + self.by).clamp(0, i64::from(u32::MAX)) as u32;
        s.start = mv(s.start);
        s.end = mv(s.end);
    }
}

/// Types whose spans can be moved.
trait Shift {
    fn shift(&mut self, d: &mut Delta);
}

impl Shift for Span {
    fn shift(&mut self, d: &mut Delta) {
        d.span(self);
    }
}

impl<T: Shift> Shift for Option<T> {
    fn shift(&mut self, d: &mut Delta) {
        if let Some(x) = self {
            x.shift(d);
        }
    }
}

impl<T: Shift> Shift for Vec<T> {
    fn shift(&mut self, d: &mut Delta) {
        for x in self {
            x.shift(d);
        }
    }
}

impl<A: Shift, B: Shift> Shift for (A, B) {
    fn shift(&mut self, d: &mut Delta) {
        self.0.shift(d);
        self.1.shift(d);
    }
}

impl Shift for String {
    fn shift(&mut self, _: &mut Delta) {}
}

impl Shift for ir::StepId {
    fn shift(&mut self, _: &mut Delta) {}
}

/// Implements [`Shift`] for a struct by shifting the listed fields.
macro_rules! shift_fields {
    ($($ty:ty => $($field:ident),*;)*) => {$(
        impl Shift for $ty {
            fn shift(&mut self, d: &mut Delta) {
                $(self.$field.shift(d);)*
            }
        }
    )*};
}

shift_fields! {
    ast::Name => span;
    ast::Int => span;
    Str => span;
    ast::Field => name, ty;
    ast::Budget => span;
    ast::Output => from, contract, key_span;
    ast::Flow => name, input, output, steps, budget, max_rounds, carry;
    ast::Carry => key_span, vars;
    ast::CarryVar => name, initial, on_revise;
    ast::Predicate => kind, span;
    ast::Iterate => max, until;
    ast::Gate => on_approve, on_revise, on_kill, max_rounds, prompt, show, options;
    ast::Stage => span, task, out, ensure, attempts, when, artifacts, scope, on_fail;
    ast::Scope => span, files, create, max_changed_bytes;
    ast::WithEntry => key, value;
    ast::Step => span, id, construct_span, kind, after, when, out, ensure, attempts,
        iterate, budget, on_fail, artifacts, routes, scope;
    ast::RouteEntry => span, when, action, rollback;
    ast::OnFailEntry => span, when, action, rollback;
    yaml::Entry => key, value;
    FlowIr => output, steps, budget, carry;
    ir::OutputIr => span;
    ir::RefIr => span;
    ir::TemplateIr => pieces, span;
    ir::ExprIr => span;
    ir::StageIr => task, ensure, when, artifacts, scope, on_fail;
    ir::ScopeIr => files, create;
    ir::ArtifactIr => template;
    ir::IterateIr => until;
    ir::StepIr => span, kind, when, ensure, budget, artifacts, routes, on_fail_routes, scope;
    ir::RouteIr => span, when, action;
    ir::OnFailIr => span, when, action;
    ir::CarryIr => initial, on_revise;
    crate::diagnostics::Label => span;
    Fact => span;
    Diagnostic => span, labels;
}

impl Shift for ir::RouteActionIr {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ir::RouteActionIr::Goto { note, .. } => note.shift(d),
            ir::RouteActionIr::Fail(reason) => reason.shift(d),
        }
    }
}

impl Shift for ir::OnFailActionIr {
    fn shift(&mut self, d: &mut Delta) {
        if let ir::OnFailActionIr::Goto { note, .. } = self {
            note.shift(d);
        }
    }
}

impl Shift for ast::OnFailAction {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ast::OnFailAction::Step(n) => n.shift(d),
            ast::OnFailAction::Goto { target, max, note } => {
                target.shift(d);
                max.shift(d);
                note.shift(d);
            }
            ast::OnFailAction::Fail => {}
        }
    }
}

impl Shift for ast::RouteEntryAction {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ast::RouteEntryAction::Goto { target, max, note } => {
                target.shift(d);
                max.shift(d);
                note.shift(d);
            }
            ast::RouteEntryAction::Fail(reason) => reason.shift(d),
        }
    }
}

impl Shift for Node {
    fn shift(&mut self, d: &mut Delta) {
        self.span.shift(d);
        match &mut self.value {
            Value::String(s) => s.shift(d),
            Value::Sequence(items) => items.shift(d),
            Value::Mapping(entries) => entries.shift(d),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

impl Shift for ast::PredicateKind {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ast::PredicateKind::Expr(s) | ast::PredicateKind::FileExists(s) => s.shift(d),
            ast::PredicateKind::FileContains { path, text } => {
                path.shift(d);
                text.shift(d);
            }
            ast::PredicateKind::Judged { statement, .. } => statement.shift(d),
            ast::PredicateKind::Scored(sc) => {
                sc.rubric.shift(d);
                sc.judge.shift(d);
                sc.inputs.shift(d);
                sc.key.shift(d);
            }
            ast::PredicateKind::Exec(ex) => {
                ex.run.shift(d);
                ex.args.shift(d);
                ex.timeout_ms.shift(d);
                ex.key.shift(d);
            }
        }
    }
}

impl Shift for ast::GateOptions {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ast::GateOptions::List(items) => items.shift(d),
            ast::GateOptions::Template(t) => t.shift(d),
        }
    }
}

impl Shift for ir::GateOptionsIr {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ir::GateOptionsIr::List(_) => {}
            ir::GateOptionsIr::Template(t) => t.shift(d),
        }
    }
}

impl Shift for ast::Route {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ast::Route::Missing => {}
            ast::Route::Null(s) => s.shift(d),
            ast::Route::Step(n) => n.shift(d),
        }
    }
}

impl Shift for ast::Fanout {
    fn shift(&mut self, d: &mut Delta) {
        self.over.shift(d);
        self.stages.shift(d);
        if let Some((_, s)) = &mut self.isolation {
            s.shift(d);
        }
        self.pre_merge.shift(d);
    }
}

impl Shift for ast::StepKind {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ast::StepKind::Do(s) => s.shift(d),
            ast::StepKind::Set(fields) => fields.shift(d),
            ast::StepKind::Gate(g) => g.shift(d),
            ast::StepKind::Fanout(f) => f.shift(d),
            ast::StepKind::Run {
                flow,
                with,
                with_span,
            } => {
                flow.shift(d);
                with.shift(d);
                with_span.shift(d);
            }
            ast::StepKind::Evaluate(ev) => {
                ev.command.shift(d);
                ev.timeout_ms.shift(d);
                ev.input.shift(d);
                ev.key.shift(d);
            }
            ast::StepKind::Broken => {}
        }
    }
}

impl Shift for ir::Piece {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ir::Piece::Text(_) => {}
            ir::Piece::Ref(r) => r.shift(d),
        }
    }
}

impl Shift for ir::PredicateIr {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ir::PredicateIr::Expr(e) => e.shift(d),
            ir::PredicateIr::Exec { args, .. } => args.shift(d),
            _ => {}
        }
    }
}

impl Shift for ir::WithValue {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ir::WithValue::Template(t) => t.shift(d),
            ir::WithValue::Literal(_) => {}
            ir::WithValue::List(items) => items.shift(d),
            ir::WithValue::Map(entries) => entries.shift(d),
        }
    }
}

impl Shift for ir::StepKindIr {
    fn shift(&mut self, d: &mut Delta) {
        match self {
            ir::StepKindIr::Do { task, iterate, .. } => {
                task.shift(d);
                iterate.shift(d);
            }
            ir::StepKindIr::Set { fields } => fields.shift(d),
            ir::StepKindIr::Gate {
                prompt,
                show,
                options,
                ..
            } => {
                prompt.shift(d);
                show.shift(d);
                options.shift(d);
            }
            ir::StepKindIr::Fanout { over, stages, .. } => {
                over.shift(d);
                stages.shift(d);
            }
            ir::StepKindIr::Run { with, .. } => with.shift(d),
            ir::StepKindIr::Evaluate { input, .. } => input.shift(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn specs(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                specs(&p, out);
            } else if p.to_string_lossy().ends_with(".yaml") {
                out.push(p);
            }
        }
    }

    fn corpus() -> Vec<(PathBuf, String)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut paths = Vec::new();
        specs(&root.join("tests/conformance"), &mut paths);
        specs(&root.join("examples"), &mut paths);
        paths.sort();
        paths
            .into_iter()
            .filter_map(|p| {
                let bytes = std::fs::read(&p).expect("corpus files are readable");
                String::from_utf8(bytes).ok().map(|t| (p, t))
            })
            .collect()
    }

    /// Hostile cursors: every IDE query at many offsets of every corpus spec
    /// (valid and invalid specs alike) answers without panicking, and the
    /// spans it returns lie inside the file.
    #[test]
    fn every_ide_query_answers_anywhere_in_every_corpus_spec() {
        use crate::ide;
        let corpus = corpus();
        let mut db = Db::new();
        let mut calls = 0usize;
        for (path, text) in &corpus {
            let len = text.len() as u32;
            let file = db.set_text("probe.stratum.yaml", text.clone());
            let inside = |s: &Span| s.start <= s.end && s.end <= len;
            let what = path.display();
            assert!(
                ide::symbols(&db, file).iter().all(|s| inside(&s.range)),
                "{what}"
            );
            assert!(ide::folding(&db, file).iter().all(inside), "{what}");
            let all = Span::new(0, len);
            for a in ide::code_actions(&db, file, all) {
                assert!(a.edits.iter().all(|e| inside(&e.span)), "{what}");
            }
            let offsets = (0..=len)
                .step_by(5)
                .chain([len])
                .filter(|&o| text.is_char_boundary(o as usize));
            for (k, o) in offsets.enumerate() {
                calls += 1;
                if let Some(h) = ide::hover(&db, file, o) {
                    assert!(inside(&h.range), "{what} @{o}");
                }
                if let Some(d) = ide::definition(&db, file, o) {
                    assert!(inside(&d), "{what} @{o}");
                }
                let refs = ide::references(&db, file, o, true);
                assert!(refs.iter().all(inside), "{what} @{o}");
                if let Some(r) = ide::prepare_rename(&db, file, o) {
                    assert!(inside(&r), "{what} @{o}");
                    if let Ok(edits) = ide::rename(&db, file, o, "renamed_x") {
                        assert!(edits.iter().all(|e| inside(&e.span)), "{what} @{o}");
                    }
                }
                // completion re-analyses a patched copy: probe fewer offsets
                if k % 4 == 0 {
                    let _ = ide::completion(&db, file, o);
                }
            }
        }
        assert!(calls > 50_000, "probed {calls} offsets");
    }

    #[test]
    fn diagnostics_equal_analyze_on_every_corpus_spec() {
        let corpus = corpus();
        assert!(corpus.len() > 500, "corpus found: {}", corpus.len());
        // one database, one path: every spec is an edit of the previous one
        let mut shared = Db::new();
        for (path, text) in &corpus {
            let want = crate::analysis::analyze(text);
            let mut db = Db::new();
            let file = db.set_text("a.stratum.yaml", text.clone());
            let got = file_analysis(&db, file);
            assert_eq!(got.diagnostics, want.diagnostics, "{}", path.display());
            assert_eq!(got.ir.is_some(), want.ir.is_some(), "{}", path.display());
            let file = shared.set_text("same.stratum.yaml", text.clone());
            let got = crate::ide::diagnostics(&shared, file);
            assert_eq!(got, want.diagnostics, "{} (incremental)", path.display());
        }
    }

    /// With an environment input, too: the database's diagnostics are
    /// `analyze_with`'s, and changing the environment alone updates them.
    #[test]
    fn diagnostics_equal_analyze_with_an_environment_on_every_corpus_spec() {
        let corpus = corpus();
        let judges = ["fast", "strict"].map(String::from);
        let env = CheckEnv {
            judges: Some(judges.into_iter().collect()),
            commands: Some(["test"].map(String::from).into_iter().collect()),
        };
        let mut shared = Db::new();
        let mut unknown_judges = 0;
        for (path, text) in &corpus {
            let want = crate::analysis::analyze_with(text, &env);
            unknown_judges += want
                .diagnostics
                .iter()
                .filter(|d| d.code == crate::diagnostics::Code::UnknownJudge)
                .count();
            let file = shared.set_text("env.stratum.yaml", text.clone());
            shared.set_env(file, env.clone());
            let got = crate::ide::diagnostics(&shared, file);
            assert_eq!(got, want.diagnostics, "{} (with env)", path.display());
            shared.set_env(file, CheckEnv::default());
            let without = crate::analysis::analyze(text).diagnostics;
            assert_eq!(
                crate::ide::diagnostics(&shared, file),
                without,
                "{}",
                path.display()
            );
        }
        assert!(unknown_judges > 0, "the corpus names a judge the env lacks");
    }
}

#[cfg(test)]
mod incremental_tests {
    use super::*;
    use crate::testgen::generate_multi_flow_spec as multi_flow;

    /// Replaces the first `from` after the `anchor` line.
    fn edit_after(text: &str, anchor: &str, from: &str, to: &str) -> String {
        let at = text.find(anchor).expect("anchor present");
        let rel = text[at..].find(from).expect("pattern present");
        let mut out = text.to_string();
        out.replace_range(at + rel..at + rel + from.len(), to);
        out
    }

    #[test]
    fn a_buffer_over_the_size_limit_gets_the_same_diagnostic_as_check() {
        let text = "#".repeat(crate::analysis::MAX_FILE_SIZE + 1);
        let want = crate::analysis::analyze_bytes(text.as_bytes()).diagnostics;
        let mut db = Db::new();
        let file = db.set_text("huge.stratum.yaml", text);
        assert_eq!(file_analysis(&db, file).diagnostics, want);
        assert_eq!(want.len(), 1);
    }

    fn check_same(db: &Db, file: FileId) {
        let want = crate::analysis::analyze(db.text(file));
        let got = file_analysis(db, file);
        assert_eq!(got.diagnostics, want.diagnostics);
        assert_eq!(got.ir.is_some(), want.ir.is_some());
    }

    #[test]
    fn an_edit_in_one_flow_rechecks_only_that_flow() {
        let text = multi_flow(3, 30);
        let mut db = Db::new();
        let file = db.set_text("m.stratum.yaml", text.clone());
        check_same(&db, file);
        let mut first = db.take_executed_flow_checks();
        first.sort();
        assert_eq!(first, ["pipeline_0", "pipeline_1", "pipeline_2"]);

        // same length: nothing moves
        let t1 = edit_after(&text, "  pipeline_1:\n", ">= 0.5", ">= 0.6");
        db.set_text("m.stratum.yaml", t1.clone());
        check_same(&db, file);
        assert_eq!(db.take_executed_flow_checks(), ["pipeline_1"]);

        // one byte longer: every later span moves, pipeline_2 is still not re-checked
        let t2 = edit_after(&t1, "  pipeline_1:\n", ">= 0.6", ">= 0.65");
        db.set_text("m.stratum.yaml", t2.clone());
        check_same(&db, file);
        assert_eq!(db.take_executed_flow_checks(), ["pipeline_1"]);

        // an error in the middle flow: its diagnostics are shifted back correctly
        let t3 = edit_after(
            &t2,
            "  pipeline_1:\n",
            "result.score >= 0.65",
            "result.scor >= 'x'",
        );
        db.set_text("m.stratum.yaml", t3.clone());
        check_same(&db, file);
        assert!(!file_analysis(&db, file).diagnostics.is_empty());
        assert_eq!(db.take_executed_flow_checks(), ["pipeline_1"]);

        // many revisions in a row (salsa collects interned values unread for a
        // few revisions): the other flows still keep their checks
        let mut t = t3.clone();
        for round in 0..8 {
            t = edit_after(
                &t,
                "  pipeline_1:\n",
                "result.scor",
                &format!("result.sco{round}"),
            );
            db.set_text("m.stratum.yaml", t.clone());
            check_same(&db, file);
            assert_eq!(
                db.take_executed_flow_checks(),
                ["pipeline_1"],
                "round {round}"
            );
            let t_back = edit_after(
                &t,
                "  pipeline_1:\n",
                &format!("result.sco{round}"),
                "result.scor",
            );
            db.set_text("m.stratum.yaml", t_back.clone());
            check_same(&db, file);
            assert_eq!(
                db.take_executed_flow_checks(),
                ["pipeline_1"],
                "round {round} back"
            );
            t = t_back;
        }
        assert_eq!(t, t3);

        // a line inserted into the first flow moves both later flows: only
        // the first (whose text changed) is re-checked
        let t4 = edit_after(
            &t3,
            "  pipeline_0:\n",
            "    steps:\n",
            "    steps:\n      # é 中文\n",
        );
        db.set_text("m.stratum.yaml", t4);
        check_same(&db, file);
        assert_eq!(db.take_executed_flow_checks(), ["pipeline_0"]);

        // a contract change re-checks every flow
        let t5 = text.replacen(
            "    note: string?\n",
            "    note: string?\n    extra: string?\n",
            1,
        );
        db.set_text("m.stratum.yaml", t5);
        check_same(&db, file);
        assert_eq!(db.take_executed_flow_checks().len(), 3);
    }

    /// How many times each of the named queries executed since the last call.
    fn executed(db: &Db, names: &[&str]) -> Vec<usize> {
        let log = db.take_executed();
        names
            .iter()
            .map(|n| {
                log.iter()
                    .filter(|q| q.starts_with(&format!("{n}(")))
                    .count()
            })
            .collect()
    }

    #[test]
    fn an_edit_in_one_step_reloads_only_its_yaml_and_reparses_only_its_expression() {
        let text = multi_flow(1, 120);
        let mut db = Db::new();
        let file = db.set_text("s.stratum.yaml", text.clone());
        check_same(&db, file);
        let [chunks, exprs] = executed(&db, &["loaded_chunk", "parsed_expr"])[..] else {
            unreachable!("two names asked")
        };
        assert!(chunks >= 120, "every step is a chunk: {chunks}");
        assert!(exprs > 0);

        let t1 = edit_after(
            &text,
            "_60\n",
            "result.score >= 0.5",
            "result.score >= 0.625",
        );
        db.set_text("s.stratum.yaml", t1.clone());
        check_same(&db, file);
        assert_eq!(executed(&db, &["loaded_chunk", "parsed_expr"]), [1, 1]);

        // back to the first text: both pieces are still cached
        db.set_text("s.stratum.yaml", text);
        check_same(&db, file);
        assert_eq!(executed(&db, &["loaded_chunk", "parsed_expr"]), [0, 0]);
    }
}
