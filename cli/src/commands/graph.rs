//! `stratumc graph SPEC [--flow F] [--format dot|mermaid|svg] [--run RUN]`:
//! a flow of the checked IR as a picture.
//!
//! Owns: turning a [`FlowIr`] into a small drawing model (nodes shaped by
//! construct, fanout and sub-flow boxes, edges styled by the IR's edge kind,
//! revise edges with their reset closures; leases, artifacts, gate `show`
//! files and scored judges as short label lines), colouring it with the step
//! statuses of a stored run (read-only), and rendering the model as Graphviz
//! DOT or Mermaid (`svg` pipes the DOT through `dot -Tsvg`). Output is
//! deterministic: the same spec (and run state) always gives the same bytes.
//! Must never: decide anything about the language (edges, closures and types
//! come from `stratum-compiler`), or write to the run store.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use stratum_compiler::ir::{
    ArtifactIr, EdgeKind, FlowId, FlowIr, GateOptionsIr, Ir, Piece, PredicateIr, RouteActionIr,
    ScopeIr, StageIr, StepIr, StepKindIr, TemplateIr,
};
use stratum_compiler::syntax::ast::{Isolation, Require};
use stratum_vm::interp::{StepState, StepStatus};

use super::usage;
use crate::Exit;

/// The picture format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    /// Graphviz DOT text.
    Dot,
    /// A Mermaid flowchart (renders on GitHub and in many Markdown viewers).
    Mermaid,
    /// SVG, rendered by Graphviz `dot -Tsvg` (must be installed).
    Svg,
}

/// Arguments of `stratumc graph`.
#[derive(clap::Args, Debug)]
pub struct GraphArgs {
    /// The spec file.
    pub spec: PathBuf,
    /// The flow to draw (default: the run's flow with `--run`, else the entry flow).
    #[arg(long)]
    pub flow: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
    pub format: GraphFormat,
    /// A run in the store ($STRATUM_HOME) whose step statuses colour the nodes.
    #[arg(long)]
    pub run: Option<String>,
}

/// Runs the command.
pub fn run(args: &GraphArgs) -> Exit {
    let shown = args.spec.display().to_string();
    let analysis = match super::error_free_spec(&args.spec, "no graph drawn", false) {
        Ok(a) => a,
        Err(exit) => return exit,
    };
    let Some(ir) = analysis.ir.as_ref() else {
        return Exit::Errors;
    };
    let run = match args.run.as_deref().map(load_run).transpose() {
        Ok(r) => r,
        Err(e) => return usage(e),
    };
    if let Some(r) = &run
        && let Some(plan) = stratum_compiler::build::build_plan(&analysis)
    {
        let (_, hash) = stratum_vm::plan::file::encode(&plan);
        if hash.to_hex() != r.plan_hash {
            eprintln!(
                "warning: run `{}` executes a different plan than {shown} builds today (the spec changed since the run started); steps are matched by id",
                r.id
            );
        }
    }
    let flow_name = args
        .flow
        .as_deref()
        .or(run.as_ref().map(|r| r.flows[0].as_str()))
        .unwrap_or(ir.flows[ir.entry].name.as_str());
    let Some((flow, _)) = ir.flow(flow_name) else {
        let names: Vec<String> = ir.flows.iter().map(|f| format!("`{}`", f.name)).collect();
        return usage(format_args!(
            "no flow `{flow_name}` in {shown}; its flows are {}",
            names.join(", ")
        ));
    };
    if let Some(r) = &run
        && r.flows[0] != flow_name
    {
        return usage(format_args!(
            "run `{}` runs flow `{}`, not `{flow_name}`; drop `--flow` or name that flow",
            r.id, r.flows[0]
        ));
    }
    let model = model(ir, flow, run.as_ref());
    let text = match args.format {
        GraphFormat::Dot => dot(&model),
        GraphFormat::Mermaid => mermaid(&model),
        GraphFormat::Svg => match svg(&dot(&model)) {
            Ok(s) => s,
            Err(e) => return usage(e),
        },
    };
    super::emit(&text);
    Exit::Ok
}

// ----- the run -----------------------------------------------------------------

/// What a stored run says about its steps.
pub struct RunView {
    /// Run id.
    pub id: String,
    /// Run status.
    pub status: String,
    /// Plan hash of the run.
    pub plan_hash: String,
    /// Flow name of every frame (frame 0 is the flow the run started).
    pub flows: Vec<String>,
    /// Step id → state, per frame.
    pub frames: Vec<HashMap<String, StepState>>,
}

fn load_run(id: &str) -> Result<RunView, String> {
    let location = stratum_vm::store::StoreLocation::from_env().map_err(|e| e.to_string())?;
    if let stratum_vm::store::StoreLocation::Sqlite(db) = &location
        && !db.is_file()
    {
        return Err(format!(
            "no run store at {} (STRATUM_HOME): run `{id}` cannot exist there",
            db.display()
        ));
    }
    let store = location.open_existing().map_err(|e| e.to_string())?;
    let db = location;
    let mut engine = stratum_vm::engine::Engine::new(store);
    let (run, plan) = engine.load(id).map_err(|e| match e {
        stratum_vm::engine::EngineError::Store(stratum_vm::store::StoreError::NotFound(_)) => {
            format!("no run `{id}` in the store at {db} (list runs with `stratumc query flows`)")
        }
        other => format!("cannot read run `{id}`: {other}"),
    })?;
    let plan = &plan.plan;
    let mut flows = Vec::new();
    let mut frames = Vec::new();
    for (fi, frame) in run.header.frames.iter().enumerate() {
        let def = plan.flows.get(frame.flow as usize);
        flows.push(def.map_or("?", |f| plan.str(f.name)).to_string());
        let mut map = HashMap::new();
        if let (Some(def), Some(rows)) = (def, run.steps.get(fi)) {
            for (s, state) in def.steps.iter().zip(rows) {
                map.insert(plan.str(s.id).to_string(), state.clone());
            }
        }
        frames.push(map);
    }
    Ok(RunView {
        id: run.header.id.clone(),
        status: run.header.status.as_str().to_string(),
        plan_hash: run.header.plan_hash.clone(),
        flows,
        frames,
    })
}

// ----- the drawing model -----------------------------------------------------------

/// How a node is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// An agent task (`do`, fanout stages).
    Task,
    /// A computed object (`set`).
    Compute,
    /// A human gate.
    Gate,
    /// The flow output.
    Output,
}

/// A node.
#[derive(Debug, Clone)]
pub struct Node {
    /// Unique key (the step path, `main/child/write`).
    pub key: String,
    /// Label lines.
    pub lines: Vec<String>,
    /// Shape.
    pub shape: Shape,
    /// Status in the run, if drawn with one.
    pub status: Option<StepStatus>,
}

/// A box around nodes (a fanout's stages, a sub-flow's steps).
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Unique key (the step path).
    pub key: String,
    /// Label lines.
    pub lines: Vec<String>,
    /// What is inside.
    pub items: Vec<Item>,
    /// Status in the run, if drawn with one.
    pub status: Option<StepStatus>,
}

/// A node or a box.
#[derive(Debug, Clone)]
pub enum Item {
    /// A node.
    Node(Node),
    /// A box.
    Cluster(Cluster),
}

/// How an edge is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Style {
    /// A `${step.output}` reference.
    Data,
    /// `after`, fanout stage order, sub-flow output.
    Order,
    /// `on_fail`.
    OnFail,
    /// `gate.on_approve`.
    Approve,
    /// `gate.on_kill`.
    Kill,
    /// `gate.on_revise` (backwards; resets a closure).
    Revise,
    /// A `${step.status}` / `failure` / `note` reference (X1): orders, never skips.
    State,
    /// Out of a step with `on_fail: continue` (X2): the dependent runs
    /// whether the step succeeded or failed.
    Continue,
}

/// Where an edge attaches: a node, drawn at the border of its outermost box.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct End {
    /// The node.
    pub node: String,
    /// The box the edge stops at, if the step is drawn as one.
    pub cluster: Option<String>,
}

/// An edge.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GEdge {
    /// Tail.
    pub from: End,
    /// Head.
    pub to: End,
    /// Style.
    pub style: Style,
    /// Label.
    pub label: Option<String>,
}

/// A whole picture.
#[derive(Debug, Clone)]
pub struct Model {
    /// Title lines.
    pub title: Vec<String>,
    /// Top-level items.
    pub items: Vec<Item>,
    /// Edges, in drawing order.
    pub edges: Vec<GEdge>,
    /// Whether statuses are drawn.
    pub coloured: bool,
}

/// How a step is entered and left.
struct Anchor {
    entry: End,
    exit: End,
}

impl Anchor {
    /// Entry and exit nodes inside the cluster `key` (a fanout or sub-flow box).
    fn in_cluster(entry: String, exit: String, key: String) -> Anchor {
        Anchor {
            entry: End {
                node: entry,
                cluster: Some(key.clone()),
            },
            exit: End {
                node: exit,
                cluster: Some(key),
            },
        }
    }
}

fn shorten(s: &str, max: usize) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        format!("{}…", cut.trim_end())
    }
}

fn status_line(state: Option<&StepState>) -> Option<String> {
    let s = state?;
    let mut line = format!("● {}", s.status.as_str());
    if s.attempts > 1 {
        let _ = write!(line, " · attempt {}", s.attempts);
    }
    if s.gate_rounds > 0 {
        let _ = write!(line, " · round {}", s.gate_rounds);
    }
    if let Some(d) = &s.decision {
        let _ = write!(line, " · {d}");
    }
    if let Some(c) = &s.choice {
        let _ = write!(line, " · {}", shorten(c, 24));
    }
    Some(line)
}

/// A fanout cluster's label: what it iterates over, its settings, and (in
/// a run) its status with the count of items per status.
fn fanout_label(f: &FlowIr, step: &StepIr, state: Option<&StepState>) -> Vec<String> {
    let StepKindIr::Fanout {
        over,
        concurrency,
        isolation,
        require,
        ..
    } = &step.kind
    else {
        return Vec::new();
    };
    let mut label = vec![
        format!(
            "fanout {} over ${{{}}}",
            step.id,
            f.reference_text(&over.target, &over.path)
        ),
        format!(
            "concurrency {concurrency} · require {} · isolation {}",
            match require {
                Require::All => "all".to_string(),
                Require::Any => "any".to_string(),
                Require::AtLeast(n) => format!("≥ {n}"),
            },
            match isolation {
                Isolation::None => "none",
                Isolation::Worktree => "worktree",
            }
        ),
    ];
    if let Some(s) = state {
        let mut line = status_line(Some(s)).unwrap_or_default();
        if !s.items.is_empty() {
            let mut counts: Vec<(&str, usize)> = Vec::new();
            for it in &s.items {
                let name = it.status.as_str();
                match counts.iter_mut().find(|(n, _)| *n == name) {
                    Some(c) => c.1 += 1,
                    None => counts.push((name, 1)),
                }
            }
            let parts: Vec<String> = counts.iter().map(|(n, c)| format!("{c} {n}")).collect();
            let _ = write!(line, " · items: {}", parts.join(", "));
        }
        label.push(line);
    }
    label
}

/// `n thing` / `n things`.
fn plural(n: usize, thing: &str) -> String {
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

/// A dispatch lease (X7) in the largest whole unit: `⏱ 20 min`.
fn lease(ms: u64) -> String {
    let (n, unit) = match ms {
        0 => (0, "ms"),
        _ if ms.is_multiple_of(3_600_000) => (ms / 3_600_000, "h"),
        _ if ms.is_multiple_of(60_000) => (ms / 60_000, "min"),
        _ if ms.is_multiple_of(1000) => (ms / 1000, "s"),
        _ => (ms, "ms"),
    };
    format!("⏱ {n} {unit}")
}

/// A task's attempts (when not the default 2) and its own lease, on one line.
fn attempts_line(attempts: u64, timeout_ms: Option<u64>) -> Option<String> {
    let mut parts = Vec::new();
    if attempts != 2 {
        parts.push(format!("attempts {attempts}"));
    }
    parts.extend(timeout_ms.map(lease));
    (!parts.is_empty()).then(|| parts.join(" · "))
}

/// The `artifacts` (X4) on one line: how many, then each glob entry by its
/// last two path components (`artifacts: 3 · figures/*.png`).
fn artifacts_line(f: &FlowIr, artifacts: &[ArtifactIr]) -> Option<String> {
    if artifacts.is_empty() {
        return None;
    }
    let mut line = format!("artifacts: {}", artifacts.len());
    for a in artifacts.iter().filter(|a| a.glob) {
        let text = template_text(f, &a.template);
        let parts: Vec<&str> = text.rsplitn(3, '/').take(2).collect();
        let tail: Vec<&str> = parts.into_iter().rev().collect();
        let _ = write!(line, " · {}", shorten(&tail.join("/"), 30));
    }
    Some(line)
}

/// The `scope` (X11) on one line: `write fence`, or `scope: ` and its
/// entries as written (at most 40 characters), `+create …` and the byte cap.
fn scope_line(f: &FlowIr, scope: Option<&ScopeIr>) -> Option<String> {
    let sc = scope?;
    if sc.files.is_empty() && sc.create.is_empty() {
        return Some("write fence".into());
    }
    let texts = |es: &[ArtifactIr]| {
        es.iter()
            .map(|a| template_text(f, &a.template))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut line = format!("scope: {}", shorten(&texts(&sc.files), 40));
    if !sc.create.is_empty() {
        let _ = write!(line, " · create {}", shorten(&texts(&sc.create), 30));
    }
    if let Some(m) = sc.max_changed_bytes {
        let _ = write!(line, " · ≤ {m} B");
    }
    Some(line)
}

/// A template as written (`${input.workdir}/plan.md`).
fn template_text(f: &FlowIr, t: &TemplateIr) -> String {
    t.pieces
        .iter()
        .map(|p| match p {
            Piece::Text(s) => s.clone(),
            Piece::Ref(r) => format!("${{{}}}", f.reference_text(&r.target, &r.path)),
        })
        .collect()
}

/// One line per scored `judged` ensure (X5): `judge local ≥ 0.7` (the
/// default judge has no name).
fn judge_lines(ensure: &[PredicateIr]) -> Vec<String> {
    ensure
        .iter()
        .filter_map(|p| match p {
            PredicateIr::Scored {
                judge, threshold, ..
            } => Some(match judge {
                Some(name) => format!("judge {name} ≥ {threshold}"),
                None => format!("judge ≥ {threshold}"),
            }),
            _ => None,
        })
        .collect()
}

struct Builder<'a> {
    ir: &'a Ir,
    run: Option<&'a RunView>,
    edges: BTreeSet<GEdge>,
    /// Edges in insertion order (the set only removes duplicates).
    ordered: Vec<GEdge>,
}

impl Builder<'_> {
    fn edge(&mut self, from: &End, to: &End, style: Style, label: Option<String>) {
        // an `after` that repeats a data reference is drawn once, as data
        let twin = |s: Style| GEdge {
            from: from.clone(),
            to: to.clone(),
            style: s,
            label: None,
        };
        match style {
            Style::Order if self.edges.contains(&twin(Style::Data)) => return,
            Style::Data if self.edges.contains(&twin(Style::Order)) => {
                let old = twin(Style::Order);
                self.edges.remove(&old);
                if let Some(slot) = self.ordered.iter_mut().find(|e| **e == old) {
                    slot.style = Style::Data;
                }
                self.edges.insert(twin(Style::Data));
                return;
            }
            _ => {}
        }
        let e = GEdge {
            from: from.clone(),
            to: to.clone(),
            style,
            label,
        };
        if self.edges.insert(e.clone()) {
            self.ordered.push(e);
        }
    }

    fn contract(&self, out: Option<usize>) -> Option<String> {
        out.and_then(|r| self.ir.types.records.get(r))
            .map(|r| format!("→ {}", r.name))
    }

    /// Items of one flow (steps in document order) and its anchors.
    fn flow(
        &mut self,
        flow: FlowId,
        prefix: &str,
        frame: Option<usize>,
        depth: usize,
    ) -> (Vec<Item>, Vec<Anchor>) {
        let f: &FlowIr = &self.ir.flows[flow];
        let states = frame.and_then(|fr| self.run.and_then(|r| r.frames.get(fr)));
        let mut items = Vec::new();
        let mut anchors = Vec::new();
        for step in &f.steps {
            let key = format!("{prefix}{}", step.id);
            let state = states.and_then(|m| m.get(&step.id));
            let (item, anchor) = self.step(f, step, key, state, depth);
            items.push(item);
            anchors.push(anchor);
        }
        self.flow_edges(f, &anchors);
        (items, anchors)
    }

    /// One step: a node, or a cluster for a fanout (its stages) or a `run`
    /// (the callee's flow).
    fn step(
        &mut self,
        f: &FlowIr,
        step: &StepIr,
        key: String,
        state: Option<&StepState>,
        depth: usize,
    ) -> (Item, Anchor) {
        let mut lines = vec![step.id.clone()];
        match &step.kind {
            StepKindIr::Do {
                agent,
                attempts,
                iterate,
                ..
            } => {
                lines.push(format!("do · {}", agent.as_str()));
                lines.extend(self.contract(step.out));
                if let Some(it) = iterate {
                    lines.push(format!(
                        "iterate ≤ {} until {}",
                        it.max,
                        shorten(&it.until.source, 40)
                    ));
                }
                lines.extend(attempts_line(*attempts, step.timeout_ms));
                lines.extend(artifacts_line(f, &step.artifacts));
                lines.extend(scope_line(f, step.scope.as_ref()));
                self.node(key, lines, Shape::Task, step, state)
            }
            StepKindIr::Set { fields } => {
                lines.push(format!(
                    "set · {} field{}",
                    fields.len(),
                    if fields.len() == 1 { "" } else { "s" }
                ));
                lines.extend(self.contract(step.out));
                self.node(key, lines, Shape::Compute, step, state)
            }
            StepKindIr::Gate {
                max_rounds,
                show,
                options,
                ..
            } => {
                lines.push("gate".into());
                if let Some(m) = max_rounds {
                    lines.push(format!("max_rounds {m}"));
                }
                if !show.is_empty() {
                    lines.push(format!("show: {}", plural(show.len(), "file")));
                }
                // X10: what a decision may choose
                match options {
                    Some(GateOptionsIr::List(list)) => {
                        lines.push(shorten(&format!("options {}", list.join(" | ")), 40));
                    }
                    Some(GateOptionsIr::Template(_)) => {
                        lines.push("options from a template".into())
                    }
                    None => {}
                }
                self.node(key, lines, Shape::Gate, step, state)
            }
            StepKindIr::Fanout { stages, .. } => {
                let label = fanout_label(f, step, state);
                let (inner, first, last) = self.stages(f, &key, stages);
                let first = first.unwrap_or_else(|| key.clone());
                let last = last.unwrap_or_else(|| key.clone());
                (
                    Item::Cluster(Cluster {
                        key: key.clone(),
                        lines: label,
                        items: inner,
                        status: state.map(|s| s.status),
                    }),
                    Anchor::in_cluster(first, last, key),
                )
            }
            StepKindIr::Run { flow: callee, .. } => self.run_step(*callee, step, key, state, depth),
            // X12: the engine runs a declared command itself, like a computed step
            StepKindIr::Evaluate {
                command,
                timeout_ms,
                ..
            } => {
                lines.push(format!("evaluate · {command}"));
                lines.push(format!("≤ {timeout_ms} ms"));
                lines.extend(self.contract(step.out));
                self.node(key, lines, Shape::Compute, step, state)
            }
        }
    }

    /// A fanout's stages, chained in order: the items, and the keys of the
    /// first and last stage (none without stages).
    fn stages(
        &mut self,
        f: &FlowIr,
        key: &str,
        stages: &[StageIr],
    ) -> (Vec<Item>, Option<String>, Option<String>) {
        let mut inner = Vec::new();
        let mut prev: Option<End> = None;
        let mut first = None;
        for (i, st) in stages.iter().enumerate() {
            let mut sl = vec![format!("stage {}", i + 1)];
            sl.push(format!("do · {}", st.agent.as_str()));
            sl.extend(self.contract(st.out));
            if st.when.is_some() {
                sl.push("when …".into());
            }
            sl.extend(st.timeout_ms.map(lease));
            sl.extend(artifacts_line(f, &st.artifacts));
            sl.extend(scope_line(f, st.scope.as_ref()));
            sl.extend(judge_lines(&st.ensure));
            let sk = format!("{key}#{}", i + 1);
            inner.push(Item::Node(Node {
                key: sk.clone(),
                lines: sl,
                shape: Shape::Task,
                status: None,
            }));
            let here = End {
                node: sk,
                cluster: None,
            };
            if let Some(p) = &prev {
                self.edge(p, &here, Style::Order, None);
            }
            first.get_or_insert_with(|| here.node.clone());
            prev = Some(here);
        }
        (inner, first, prev.map(|p| p.node))
    }

    /// A `run` step: a cluster holding the callee's flow (16 levels deep at
    /// most), entered at its first step and left at its output step.
    fn run_step(
        &mut self,
        callee: FlowId,
        step: &StepIr,
        key: String,
        state: Option<&StepState>,
        depth: usize,
    ) -> (Item, Anchor) {
        let callee_name = self.ir.flows[callee].name.clone();
        let mut label = vec![format!("run {} → flow {callee_name}", step.id)];
        label.extend(status_line(state));
        let child_frame = state.and_then(|s| s.child).map(|c| c.ix());
        let (inner, inner_anchors) = if depth < 16 {
            self.flow(callee, &format!("{key}/"), child_frame, depth + 1)
        } else {
            (Vec::new(), Vec::new())
        };
        let cf = &self.ir.flows[callee];
        let entry = cf
            .topo
            .first()
            .and_then(|&s| inner_anchors.get(s))
            .map_or_else(|| key.clone(), |a| a.entry.node.clone());
        let exit = inner_anchors
            .get(cf.output.step)
            .map_or_else(|| key.clone(), |a| a.exit.node.clone());
        (
            Item::Cluster(Cluster {
                key: key.clone(),
                lines: label,
                items: inner,
                status: state.map(|s| s.status),
            }),
            Anchor::in_cluster(entry, exit, key),
        )
    }

    /// The edges of one flow, in the IR's order, then its revise loops.
    fn flow_edges(&mut self, f: &FlowIr, anchors: &[Anchor]) {
        for e in &f.edges {
            let continues = f.steps[e.from].continues && e.kind.is_dependency();
            let style = match e.kind {
                _ if continues => Style::Continue,
                EdgeKind::Data => Style::Data,
                EdgeKind::Order => Style::Order,
                EdgeKind::OnFail => Style::OnFail,
                EdgeKind::Approve => Style::Approve,
                EdgeKind::Kill => Style::Kill,
                EdgeKind::State => Style::State,
            };
            let label = match e.kind {
                _ if continues => Some("continue".to_string()),
                EdgeKind::Data | EdgeKind::Order => None,
                EdgeKind::OnFail => Some("on_fail".to_string()),
                EdgeKind::Approve => Some("approve".to_string()),
                EdgeKind::Kill => Some("kill".to_string()),
                EdgeKind::State => Some("status".to_string()),
            };
            let (from, to) = (anchors[e.from].exit.clone(), anchors[e.to].entry.clone());
            self.edge(&from, &to, style, label);
        }
        for r in &f.resets {
            let reset: Vec<&str> = f
                .steps
                .iter()
                .zip(&r.steps)
                .filter(|(_, inside)| **inside)
                .map(|(s, _)| s.id.as_str())
                .collect();
            // X9: a route's `goto` is the same back edge, from a non-gate
            // step, and so is an `on_fail` `goto` (taken on failure)
            let from = &f.steps[r.from];
            let routes = from.routes.iter().any(
                |x| matches!(x.action, RouteActionIr::Goto { target, .. } if target == r.target),
            );
            let kind = match from.kind {
                StepKindIr::Gate { .. } => "revise",
                _ if routes => "route",
                _ => "on_fail",
            };
            let label = format!("{kind} ↺ resets {}", reset.join(", "));
            let (from, to) = (
                anchors[r.from].exit.clone(),
                anchors[r.target].entry.clone(),
            );
            self.edge(&from, &to, Style::Revise, Some(label));
        }
    }

    fn node(
        &self,
        key: String,
        mut lines: Vec<String>,
        shape: Shape,
        step: &StepIr,
        state: Option<&StepState>,
    ) -> (Item, Anchor) {
        if let Some(w) = &step.when {
            lines.push(format!("when {}", shorten(&w.source, 40)));
        }
        if !step.ensure.is_empty() {
            lines.push(format!("ensure ×{}", step.ensure.len()));
        }
        lines.extend(judge_lines(&step.ensure));
        lines.extend(status_line(state));
        let end = End {
            node: key.clone(),
            cluster: None,
        };
        (
            Item::Node(Node {
                key,
                lines,
                shape,
                status: state.map(|s| s.status),
            }),
            Anchor {
                entry: end.clone(),
                exit: end,
            },
        )
    }
}

/// The drawing model of one flow (with the statuses of `run`, when given).
pub fn model(ir: &Ir, flow: FlowId, run: Option<&RunView>) -> Model {
    let mut b = Builder {
        ir,
        run,
        edges: BTreeSet::new(),
        ordered: Vec::new(),
    };
    let f = &ir.flows[flow];
    let prefix = format!("{}/", f.name);
    let (mut items, anchors) = b.flow(flow, &prefix, run.map(|_| 0), 0);
    // the flow output
    let contract = ir
        .types
        .records
        .get(f.output.contract)
        .map_or_else(String::new, |r| r.name.clone());
    let out_key = format!("{}/(output)", f.name);
    let mut out_lines = vec!["output".to_string(), format!("→ {contract}")];
    if let Some(r) = run {
        out_lines.push(format!("● run {}", r.status));
    }
    items.push(Item::Node(Node {
        key: out_key.clone(),
        lines: out_lines,
        shape: Shape::Output,
        status: None,
    }));
    if let Some(a) = anchors.get(f.output.step) {
        let to = End {
            node: out_key,
            cluster: None,
        };
        b.edge(&a.exit.clone(), &to, Style::Data, None);
    }
    let mut title = vec![format!("flow {}", f.name)];
    if let Some(ms) = f.dispatch_timeout_ms {
        title.push(format!("dispatch lease {}", lease(ms)));
    }
    if let Some(r) = run {
        title.push(format!("run {} · {}", r.id, r.status));
    }
    Model {
        title,
        items,
        edges: b.ordered,
        coloured: run.is_some(),
    }
}

// ----- colours -------------------------------------------------------------------

/// Fill colour of a status.
fn fill(status: Option<StepStatus>) -> &'static str {
    match status {
        None | Some(StepStatus::Pending) => "#ffffff",
        Some(StepStatus::Ready) | Some(StepStatus::Running) => "#fff3c4",
        Some(StepStatus::WaitingGate) => "#ffd8a8",
        Some(StepStatus::Succeeded) => "#c8f0c8",
        Some(StepStatus::Failed) => "#ffc9c9",
        Some(StepStatus::Skipped) => "#e9ecef",
    }
}

fn status_class(status: Option<StepStatus>) -> &'static str {
    status.map_or("pending", StepStatus::as_str)
}

const STATUSES: [StepStatus; 7] = [
    StepStatus::Pending,
    StepStatus::Ready,
    StepStatus::Running,
    StepStatus::WaitingGate,
    StepStatus::Succeeded,
    StepStatus::Failed,
    StepStatus::Skipped,
];

// ----- DOT -------------------------------------------------------------------------

fn dot_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

fn dot_label(lines: &[String]) -> String {
    dot_str(&lines.join("\n"))
}

/// Graphviz DOT text of a model.
pub fn dot(m: &Model) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// generated by `stratumc graph`; render with `dot -Tsvg`"
    );
    s.push_str("digraph stratum {\n");
    s.push_str("  compound=true;\n  rankdir=TB;\n  newrank=true;\n");
    let _ = writeln!(
        s,
        "  graph [fontname=\"Helvetica\", fontsize=12, labelloc=t, label={}];",
        dot_label(&m.title)
    );
    s.push_str(
        "  node [fontname=\"Helvetica\", fontsize=11, style=filled, fillcolor=\"#ffffff\"];\n",
    );
    s.push_str("  edge [fontname=\"Helvetica\", fontsize=9];\n");
    let mut clusters = HashMap::new();
    dot_items(&m.items, 1, m.coloured, &mut clusters, &mut s);
    for e in &m.edges {
        let mut attrs: Vec<String> = Vec::new();
        match e.style {
            Style::Data => {}
            Style::Order => attrs.push("style=dashed".into()),
            Style::OnFail => {
                attrs.push("color=\"#c92a2a\", fontcolor=\"#c92a2a\", penwidth=2".into())
            }
            Style::Approve => {
                attrs.push("color=\"#2b8a3e\", fontcolor=\"#2b8a3e\", penwidth=2".into())
            }
            Style::Kill => attrs.push("color=\"#862e9c\", fontcolor=\"#862e9c\", penwidth=2".into()),
            Style::Revise => attrs.push(
                "style=dotted, color=\"#1864ab\", fontcolor=\"#1864ab\", penwidth=2, constraint=false"
                    .into(),
            ),
            Style::State => attrs.push("style=dashed, color=\"#495057\", fontcolor=\"#495057\"".into()),
            Style::Continue => attrs.push(
                "style=bold, color=\"#e67700\", fontcolor=\"#e67700\", penwidth=2".into(),
            ),
        }
        if let Some(l) = &e.label {
            attrs.push(format!("label={}", dot_str(l)));
        }
        if let Some(c) = &e.from.cluster {
            attrs.push(format!("ltail={}", clusters[c]));
        }
        if let Some(c) = &e.to.cluster {
            attrs.push(format!("lhead={}", clusters[c]));
        }
        let _ = write!(s, "  {} -> {}", dot_str(&e.from.node), dot_str(&e.to.node));
        if !attrs.is_empty() {
            let _ = write!(s, " [{}]", attrs.join(", "));
        }
        s.push_str(";\n");
    }
    s.push_str("}\n");
    s
}

fn dot_items(
    items: &[Item],
    depth: usize,
    coloured: bool,
    clusters: &mut HashMap<String, String>,
    s: &mut String,
) {
    let pad = "  ".repeat(depth);
    for it in items {
        match it {
            Item::Node(n) => {
                let shape = match n.shape {
                    Shape::Task => "shape=box, style=\"rounded,filled\"",
                    Shape::Compute => "shape=parallelogram",
                    Shape::Gate => "shape=diamond",
                    Shape::Output => "shape=ellipse, style=\"filled,bold\"",
                };
                let mut attrs = format!("{shape}, label={}", dot_label(&n.lines));
                if coloured && n.shape != Shape::Output {
                    let _ = write!(attrs, ", fillcolor=\"{}\"", fill(n.status));
                    if n.status == Some(StepStatus::Skipped) {
                        attrs.push_str(", fontcolor=\"#868e96\"");
                    }
                }
                let _ = writeln!(s, "{pad}{} [{attrs}];", dot_str(&n.key));
            }
            Item::Cluster(c) => {
                let name = format!("cluster_{}", clusters.len());
                clusters.insert(c.key.clone(), name.clone());
                let _ = writeln!(s, "{pad}subgraph {name} {{");
                let _ = writeln!(s, "{pad}  label={};", dot_label(&c.lines));
                let _ = writeln!(s, "{pad}  labeljust=l;");
                let fillc = if coloured { fill(c.status) } else { "#f8f9fa" };
                let _ = writeln!(
                    s,
                    "{pad}  style=\"rounded,filled\"; color=\"#868e96\"; fillcolor=\"{fillc}\";"
                );
                dot_items(&c.items, depth + 1, coloured, clusters, s);
                let _ = writeln!(s, "{pad}}}");
            }
        }
    }
}

// ----- Mermaid ---------------------------------------------------------------------

fn mermaid_text(lines: &[String]) -> String {
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        if i > 0 {
            out.push_str("<br/>");
        }
        for c in l.chars() {
            match c {
                '"' => out.push_str("#quot;"),
                '<' => out.push_str("#lt;"),
                '>' => out.push_str("#gt;"),
                '#' => out.push_str("#35;"),
                _ => out.push(c),
            }
        }
    }
    out
}

/// A Mermaid flowchart of a model.
pub fn mermaid(m: &Model) -> String {
    let mut s = String::new();
    s.push_str("---\n");
    let _ = writeln!(s, "title: \"{}\"", m.title.join(" · ").replace('"', "'"));
    s.push_str("---\nflowchart TD\n");
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut classes: Vec<(String, &'static str)> = Vec::new();
    mermaid_items(&m.items, 1, m.coloured, &mut ids, &mut classes, &mut s);
    let mut link_styles: Vec<(usize, &str)> = Vec::new();
    for (i, e) in m.edges.iter().enumerate() {
        let end = |x: &End| -> String {
            x.cluster
                .as_ref()
                .map_or_else(|| ids[&x.node].clone(), |c| ids[c].clone())
        };
        let (a, b) = (end(&e.from), end(&e.to));
        let arrow = match e.style {
            Style::Data => "-->",
            Style::Order | Style::Revise | Style::State => "-.->",
            Style::OnFail | Style::Approve | Style::Kill | Style::Continue => "==>",
        };
        match &e.label {
            Some(l) => {
                let _ = writeln!(
                    s,
                    "  {a} {arrow}|\"{}\"| {b}",
                    mermaid_text(std::slice::from_ref(l))
                );
            }
            None => {
                let _ = writeln!(s, "  {a} {arrow} {b}");
            }
        }
        let colour = match e.style {
            Style::OnFail => Some("stroke:#c92a2a,color:#c92a2a"),
            Style::Approve => Some("stroke:#2b8a3e,color:#2b8a3e"),
            Style::Kill => Some("stroke:#862e9c,color:#862e9c"),
            Style::Revise => Some("stroke:#1864ab,color:#1864ab"),
            Style::Continue => Some("stroke:#e67700,color:#e67700"),
            Style::State => Some("stroke:#495057,color:#495057"),
            Style::Data | Style::Order => None,
        };
        if let Some(c) = colour {
            link_styles.push((i, c));
        }
    }
    for (i, c) in link_styles {
        let _ = writeln!(s, "  linkStyle {i} {c}");
    }
    if m.coloured {
        for st in STATUSES {
            let _ = writeln!(
                s,
                "  classDef {} fill:{},stroke:#495057",
                st.as_str(),
                fill(Some(st))
            );
        }
        for (id, class) in &classes {
            let _ = writeln!(s, "  class {id} {class}");
        }
    }
    s
}

fn mermaid_items(
    items: &[Item],
    depth: usize,
    coloured: bool,
    ids: &mut HashMap<String, String>,
    classes: &mut Vec<(String, &'static str)>,
    s: &mut String,
) {
    let pad = "  ".repeat(depth);
    for it in items {
        match it {
            Item::Node(n) => {
                let id = format!("n{}", ids.len());
                ids.insert(n.key.clone(), id.clone());
                let t = mermaid_text(&n.lines);
                let _ = match n.shape {
                    Shape::Task => writeln!(s, "{pad}{id}(\"{t}\")"),
                    Shape::Compute => writeln!(s, "{pad}{id}[/\"{t}\"/]"),
                    Shape::Gate => writeln!(s, "{pad}{id}{{\"{t}\"}}"),
                    Shape::Output => writeln!(s, "{pad}{id}([\"{t}\"])"),
                };
                if coloured && n.shape != Shape::Output {
                    classes.push((id, status_class(n.status)));
                }
            }
            Item::Cluster(c) => {
                let id = format!("c{}", ids.len());
                ids.insert(c.key.clone(), id.clone());
                let _ = writeln!(s, "{pad}subgraph {id} [\"{}\"]", mermaid_text(&c.lines));
                s.push_str(&pad);
                s.push_str("  direction TB\n");
                mermaid_items(&c.items, depth + 1, coloured, ids, classes, s);
                let _ = writeln!(s, "{pad}end");
                if coloured {
                    classes.push((id, status_class(c.status)));
                }
            }
        }
    }
}

// ----- SVG -------------------------------------------------------------------------

/// Renders DOT text with Graphviz (`dot -Tsvg`).
fn svg(dot_text: &str) -> Result<String, String> {
    let missing = "`--format svg` needs Graphviz's `dot` command, which is not installed (or not on PATH): install graphviz (e.g. `apt-get install graphviz`, `brew install graphviz`), or use `--format dot` or `--format mermaid`";
    let mut child = match Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing.into()),
        Err(e) => return Err(format!("cannot start Graphviz `dot`: {e}")),
    };
    if let Some(mut stdin) = child.stdin.take() {
        // a write error shows up as a failed exit below
        let _ = stdin.write_all(dot_text.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("Graphviz `dot` failed: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "Graphviz `dot -Tsvg` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_strings_escape_quotes_backslashes_and_newlines() {
        assert_eq!(dot_str("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
    }

    #[test]
    fn mermaid_text_escapes_markup() {
        assert_eq!(
            mermaid_text(&["a<b>\"c\" #1".into(), "x".into()]),
            "a#lt;b#gt;#quot;c#quot; #35;1<br/>x"
        );
    }

    #[test]
    fn long_conditions_are_shortened_on_one_line() {
        assert_eq!(shorten("a\n  b", 10), "a b");
        assert_eq!(shorten("abcdefghijkl", 5), "abcd…");
    }

    #[test]
    fn leases_are_shown_in_their_largest_whole_unit() {
        assert_eq!(lease(1_200_000), "⏱ 20 min");
        assert_eq!(lease(3_600_000), "⏱ 1 h");
        assert_eq!(lease(90_000), "⏱ 90 s");
        assert_eq!(lease(1500), "⏱ 1500 ms");
        assert_eq!(attempts_line(2, None), None);
        assert_eq!(
            attempts_line(3, Some(600_000)).as_deref(),
            Some("attempts 3 · ⏱ 10 min")
        );
    }

    #[test]
    fn leases_artifacts_show_files_and_scored_judges_are_labelled() {
        let text = "version: 1
contracts:
  R: {v: string}
flows:
  entry: main
  main:
    input: {dir: string}
    output: {from: \"${finish.output}\", contract: R}
    dispatch_timeout_ms: 60000
    max_rounds: 1
    steps:
      - id: build
        do: \"build\"
        out: R
        timeout_ms: 1200000
        artifacts: [\"${input.dir}/a.txt\", \"${input.dir}/figures/*.png\"]
        ensure:
          - judged: {rubric: \"good\", threshold: 0.7, judge: local, inputs: [\"${input.dir}/a.txt\"]}
          - judged: {rubric: \"fine\", threshold: 0.5}
      - id: review
        after: [build]
        gate: {on_approve: null, on_revise: build, on_kill: null, show: [\"${input.dir}/a.txt\"]}
      - id: finish
        after: [review]
        do: \"finish\"
        out: R
";
        let a = stratum_compiler::analyze(text);
        let ir = a.ir.expect("valid spec");
        let m = model(&ir, 0, None);
        assert_eq!(m.title, ["flow main", "dispatch lease ⏱ 1 min"]);
        let lines = |key: &str| -> Vec<String> {
            m.items
                .iter()
                .find_map(|i| match i {
                    Item::Node(n) if n.key == key => Some(n.lines.clone()),
                    _ => None,
                })
                .expect("the node is drawn")
        };
        assert_eq!(
            lines("main/build"),
            [
                "build",
                "do · claude",
                "→ R",
                "⏱ 20 min",
                "artifacts: 2 · figures/*.png",
                "ensure ×2",
                "judge local ≥ 0.7",
                "judge ≥ 0.5",
            ]
        );
        assert_eq!(lines("main/review"), ["review", "gate", "show: 1 file"]);
        // a step without 1.1 fields keeps its short label
        assert_eq!(lines("main/finish"), ["finish", "do · claude", "→ R"]);
    }

    #[test]
    fn gate_revise_edges_list_the_reset_closure() {
        let text = "version: 1
contracts:
  R: {v: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${finish.output}\", contract: R}
    max_rounds: 2
    steps:
      - id: build
        do: \"build\"
        out: R
      - id: review
        after: [build]
        gate: {on_approve: null, on_revise: build, on_kill: null}
      - id: finish
        after: [review]
        do: \"finish\"
        out: R
";
        let a = stratum_compiler::analyze(text);
        let ir = a.ir.expect("valid spec");
        let m = model(&ir, 0, None);
        let revise: Vec<&GEdge> = m
            .edges
            .iter()
            .filter(|e| e.style == Style::Revise)
            .collect();
        assert_eq!(revise.len(), 1);
        assert_eq!(revise[0].from.node, "main/review");
        assert_eq!(revise[0].to.node, "main/build");
        assert_eq!(
            revise[0].label.as_deref(),
            Some("revise ↺ resets build, review, finish")
        );
        let d = dot(&m);
        assert!(d.contains("constraint=false"), "{d}");
        let mm = mermaid(&m);
        assert!(
            mm.contains("-.->|\"revise ↺ resets build, review, finish\"|"),
            "{mm}"
        );
    }

    #[test]
    fn a_gate_is_labelled_with_its_options() {
        let text = "version: 1
contracts:
  R: {v: string, list: \"string[]\"}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${build.output}\", contract: R}
    steps:
      - id: build
        do: \"build\"
        out: R
      - id: scope
        after: [build]
        gate: {on_approve: null, on_revise: null, on_kill: null, options: [narrow, broad]}
      - id: pick
        after: [scope]
        gate: {on_approve: null, on_revise: null, on_kill: null, options: \"${build.output.list}\"}
";
        let a = stratum_compiler::analyze(text);
        let ir = a.ir.expect("valid spec");
        let d = dot(&model(&ir, 0, None));
        assert!(
            d.contains("label=\"scope\\ngate\\noptions narrow | broad\""),
            "{d}"
        );
        assert!(
            d.contains("label=\"pick\\ngate\\noptions from a template\""),
            "{d}"
        );
    }
}
