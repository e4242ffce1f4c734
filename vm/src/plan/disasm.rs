//! The readable listing of a plan (`stratumc build --emit asm`,
//! `stratumc inspect`): per flow, per step, its fields, instructions with
//! their source positions, reset closures and cost bounds.
//!
//! Owns: the listing format (golden-tested; changes show up as snapshot diffs).
//! Must never: be parsed back; it is for people.

use std::fmt::Write;

use super::op::{self, BUILTINS, Op};
use super::*;

/// Renders a whole plan.
pub fn listing(plan: &Plan) -> String {
    let mut out = String::new();
    let s = |id: StrId| plan.str(id);
    let _ = writeln!(
        out,
        "; entry flow: {}",
        plan.flows
            .get(plan.entry as usize)
            .map_or("?", |f| s(f.name))
    );
    for (ri, r) in plan.records.iter().enumerate() {
        let fields: Vec<String> = r
            .fields
            .iter()
            .map(|f| {
                format!(
                    "{}: {}{}",
                    s(f.name),
                    type_text(plan, &f.ty),
                    if f.optional { "?" } else { "" }
                )
            })
            .collect();
        let _ = writeln!(out, "record #{ri} {} {{{}}}", s(r.name), fields.join(", "));
    }
    for flow in &plan.flows {
        flow_listing(plan, flow, &mut out);
    }
    out
}

/// A contract type as written in specs (`string[]`, `(a|b)[]`, `Review?`).
pub fn type_string(plan: &Plan, t: &TypeDef, optional: bool) -> String {
    let mut s = type_text(plan, t);
    if optional {
        s.push('?');
    }
    s
}

fn type_text(plan: &Plan, t: &TypeDef) -> String {
    let base = match &t.base {
        BaseType::String => "string".to_string(),
        BaseType::Integer => "integer".into(),
        BaseType::Number => "number".into(),
        BaseType::Boolean => "boolean".into(),
        BaseType::Object => "object".into(),
        BaseType::Array => "array".into(),
        BaseType::Enum(v) => {
            let joined = v.iter().map(|i| plan.str(*i)).collect::<Vec<_>>().join("|");
            if t.list_depth > 0 {
                format!("({joined})")
            } else {
                joined
            }
        }
        BaseType::Record(r) => plan
            .records
            .get(*r as usize)
            .map_or("?".into(), |r| plan.str(r.name).to_string()),
    };
    format!("{base}{}", "[]".repeat(t.list_depth as usize))
}

fn bound_text(plan: &Plan, b: &Bound) -> String {
    match b {
        Bound::Finite(n) => n.to_string(),
        Bound::Symbolic(text) => plan.str(*text).to_string(),
    }
}

fn path_text(plan: &Plan, path: &[Seg]) -> String {
    path.iter()
        .map(|s| match s {
            Seg::Field(f) => format!(".{}", plan.str(*f)),
            Seg::Index(i) => format!("[{i}]"),
        })
        .collect()
}

fn ref_text(plan: &Plan, flow: &FlowDef, r: &RefDef) -> String {
    let head = match r.target {
        RefTarget::Input => "input".to_string(),
        RefTarget::Step(i) => format!("{}.output", step_name(plan, flow, i)),
        RefTarget::Status(i) => format!("{}.status", step_name(plan, flow, i)),
        RefTarget::Failure(i) => format!("{}.failure", step_name(plan, flow, i)),
        RefTarget::Note(i) => format!("{}.note", step_name(plan, flow, i)),
        RefTarget::Choice(i) => format!("{}.choice", step_name(plan, flow, i)),
        RefTarget::Item => "item".into(),
        RefTarget::Prev => "prev".into(),
        RefTarget::Carry(c) => flow
            .carry
            .get(c as usize)
            .map_or("?".into(), |c| plan.str(c.name).to_string()),
    };
    format!("${{{head}{}}}", path_text(plan, &r.path))
}

fn step_name<'p>(plan: &'p Plan, flow: &FlowDef, i: u32) -> &'p str {
    flow.steps.get(i as usize).map_or("?", |s| plan.str(s.id))
}

/// Template `t` of `flow` as written (`${...}` references spelled out).
pub fn template_source(plan: &Plan, flow: &FlowDef, t: u32) -> String {
    let Some(t) = flow.templates.get(t as usize) else {
        return "?".into();
    };
    t.pieces
        .iter()
        .map(|p| match p {
            PieceDef::Text(s) => plan.str(*s).replace('\n', "\\n"),
            PieceDef::Ref(r) => ref_text(plan, flow, r),
        })
        .collect()
}

fn template_text(plan: &Plan, flow: &FlowDef, t: u32) -> String {
    let body = template_source(plan, flow, t);
    let Some(t) = flow.templates.get(t as usize) else {
        return "?".into();
    };
    let mode = match t.mode {
        TemplateMode::Interpolate => "",
        TemplateMode::FullValue => " (full value)",
        TemplateMode::FullValueString => " (full value, string)",
    };
    format!("{:?}{mode}", body)
}

/// One line per `artifacts` entry (X4): `artifact` or `artifact glob`.
fn artifacts_listing(
    plan: &Plan,
    flow: &FlowDef,
    artifacts: &[super::ArtifactDef],
    indent: &str,
    out: &mut String,
) {
    for a in artifacts {
        let _ = writeln!(
            out,
            "{indent}artifact{} {}",
            if a.glob { " glob" } else { "" },
            template_text(plan, flow, a.template)
        );
    }
}

/// The lines of a `scope` (X11): `scope files N create N max_changed_bytes
/// N` (or `scope fence`), then one `files`/`create` line per entry.
fn scope_listing(
    plan: &Plan,
    flow: &FlowDef,
    scope: Option<&super::ScopeDef>,
    indent: &str,
    out: &mut String,
) {
    let Some(sc) = scope else {
        return;
    };
    let fence = sc.files.is_empty() && sc.create.is_empty();
    let _ = writeln!(
        out,
        "{indent}scope{}{}",
        if fence { " fence" } else { "" },
        sc.max_changed_bytes
            .map_or(String::new(), |m| format!(" max_changed_bytes {m}"))
    );
    for (key, entries) in [("files", &sc.files), ("create", &sc.create)] {
        for a in entries {
            let _ = writeln!(
                out,
                "{indent}  {key}{} {}",
                if a.glob { " glob" } else { "" },
                template_text(plan, flow, a.template)
            );
        }
    }
}

fn flow_listing(plan: &Plan, flow: &FlowDef, out: &mut String) {
    let s = |id: StrId| plan.str(id);
    let _ = writeln!(
        out,
        "\nflow {} (input #{}, worst {} dispatches)",
        s(flow.name),
        flow.input,
        bound_text(plan, &flow.worst_dispatches)
    );
    let o = &flow.output;
    let _ = writeln!(
        out,
        "  output {}.output{} as #{}  ; line {}",
        step_name(plan, flow, o.step),
        path_text(plan, &o.path),
        o.contract,
        o.pos.line
    );
    if let Some(m) = flow.max_rounds {
        let _ = writeln!(out, "  max_rounds {m}");
    }
    if let Some(b) = &flow.budget {
        let _ = writeln!(out, "  budget {}", budget_text(b));
    }
    for c in &flow.carry {
        let _ = writeln!(
            out,
            "  carry {} = {}",
            s(c.name),
            ref_text(plan, flow, &c.initial)
        );
        for (g, r) in &c.on_revise {
            let _ = writeln!(
                out,
                "    on revise of {}: {}",
                step_name(plan, flow, *g),
                ref_text(plan, flow, r)
            );
        }
    }
    for (i, st) in flow.steps.iter().enumerate() {
        let deps: Vec<String> = flow
            .edges
            .iter()
            .filter(|e| e.to as usize == i)
            .map(|e| format!("{}:{}", step_name(plan, flow, e.from), edge_text(e.kind)))
            .collect();
        let _ = writeln!(
            out,
            "  step {i} {}  ; line {}  entries {}  worst {} dispatches{}",
            s(st.id),
            st.pos.line,
            st.entries,
            bound_text(plan, &st.worst_dispatches),
            if deps.is_empty() {
                String::new()
            } else {
                format!("  after {}", deps.join(", "))
            }
        );
        match &st.kind {
            StepKindDef::Do {
                task,
                agent,
                attempts,
                iterate,
            } => {
                let _ = writeln!(
                    out,
                    "    do {} agent {agent:?} attempts {attempts}",
                    template_text(plan, flow, *task)
                );
                if let Some((max, c)) = iterate {
                    let _ = writeln!(out, "    iterate max {max} until chunk {c}");
                }
            }
            StepKindDef::Set { fields } => {
                for (k, c) in fields {
                    let _ = writeln!(out, "    set {} = chunk {c}", s(*k));
                }
            }
            StepKindDef::Gate {
                on_approve,
                on_revise,
                on_kill,
                max_rounds,
                prompt,
                show,
                options,
            } => {
                let t = |x: &Option<u32>| {
                    x.map_or("null".to_string(), |i| step_name(plan, flow, i).to_string())
                };
                let _ = writeln!(
                    out,
                    "    gate approve {} revise {} kill {}{}",
                    t(on_approve),
                    t(on_revise),
                    t(on_kill),
                    max_rounds.map_or(String::new(), |m| format!(" max_rounds {m}"))
                );
                if let Some(p) = prompt {
                    let _ = writeln!(out, "    prompt {}", template_text(plan, flow, *p));
                }
                for p in show {
                    let _ = writeln!(out, "    show {}", template_text(plan, flow, *p));
                }
                match options {
                    Some(crate::plan::GateOptionsDef::List(list)) => {
                        let list: Vec<&str> = list.iter().map(|s| plan.str(*s)).collect();
                        let _ = writeln!(out, "    options {}", list.join(" | "));
                    }
                    Some(crate::plan::GateOptionsDef::Template(p)) => {
                        let _ = writeln!(out, "    options {}", template_text(plan, flow, *p));
                    }
                    None => {}
                }
            }
            StepKindDef::Fanout {
                over,
                stages,
                concurrency,
                worktree,
                require,
                consumer,
                pre_merge,
            } => {
                let _ = writeln!(
                    out,
                    "    fanout over {} concurrency {concurrency} require {require:?}{}{}",
                    template_text(plan, flow, *over),
                    if *worktree { " worktree" } else { "" },
                    if *consumer { " consumer" } else { "" }
                );
                for (j, stage) in stages.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "      stage {j} do {} agent {:?} attempts {}{}{}{}",
                        template_text(plan, flow, stage.task),
                        stage.agent,
                        stage.attempts,
                        stage.out.map_or(String::new(), |o| format!(" out #{o}")),
                        stage
                            .when
                            .map_or(String::new(), |c| format!(" when chunk {c}")),
                        stage
                            .timeout_ms
                            .map_or(String::new(), |t| format!(" timeout_ms {t}"))
                    );
                    for p in &stage.ensure {
                        let _ = writeln!(out, "        ensure {}", pred_text(plan, flow, p));
                    }
                    artifacts_listing(plan, flow, &stage.artifacts, "        ", out);
                    scope_listing(plan, flow, stage.scope.as_ref(), "        ", out);
                    on_fail_listing(plan, flow, &stage.on_fail, "        ", out);
                }
                for p in pre_merge {
                    let _ = writeln!(out, "      pre_merge {:?}", s(*p));
                }
            }
            StepKindDef::Run {
                flow: callee,
                with,
                iterate,
            } => {
                let name = plan.flows.get(*callee as usize).map_or("?", |f| s(f.name));
                let _ = writeln!(out, "    run {name}");
                if let Some((max, until)) = iterate {
                    let _ = writeln!(out, "      iterate max {max} until chunk {until}");
                }
                for (k, node) in with {
                    let _ = writeln!(
                        out,
                        "      with {} = {}",
                        s(*k),
                        with_text(plan, flow, *node)
                    );
                }
            }
            StepKindDef::Evaluate {
                command,
                timeout_ms,
                input,
            } => {
                let _ = writeln!(
                    out,
                    "    evaluate {:?} timeout {timeout_ms} ms",
                    s(*command)
                );
                if let Some(t) = input {
                    let _ = writeln!(out, "      in {}", template_text(plan, flow, *t));
                }
            }
        }
        if let Some(o) = st.out {
            let _ = writeln!(out, "    out #{o}");
        }
        if let Some(c) = st.when {
            let _ = writeln!(out, "    when chunk {c}");
        }
        for p in &st.ensure {
            let _ = writeln!(out, "    ensure {}", pred_text(plan, flow, p));
        }
        if st.on_fail_continue {
            let _ = writeln!(out, "    on_fail continue");
        }
        if let Some(f) = st.on_fail {
            let _ = writeln!(out, "    on_fail {}", step_name(plan, flow, f));
        }
        if let Some(t) = st.timeout_ms {
            let _ = writeln!(out, "    timeout_ms {t}");
        }
        artifacts_listing(plan, flow, &st.artifacts, "    ", out);
        scope_listing(plan, flow, st.scope.as_ref(), "    ", out);
        on_fail_listing(plan, flow, &st.on_fail_routes, "    ", out);
        for r in &st.routes {
            if let Some(rb) = r.rollback {
                let _ = writeln!(out, "    route rollback {}", step_name(plan, flow, rb));
            }
            let _ = match r.action {
                super::RouteAction::Goto { target, max, note } => writeln!(
                    out,
                    "    route when chunk {} goto {} max {max}{}",
                    r.when,
                    step_name(plan, flow, target),
                    note.map_or(String::new(), |n| format!(" note template {n}"))
                ),
                super::RouteAction::Fail { reason } => writeln!(
                    out,
                    "    route when chunk {} fail template {reason}",
                    r.when
                ),
            };
        }
        if let Some(b) = &st.budget {
            let _ = writeln!(out, "    budget {}", budget_text(b));
        }
    }
    for c in &flow.closures {
        let members: Vec<&str> = (0..flow.steps.len() as u32)
            .filter(|&i| c.contains(i))
            .map(|i| step_name(plan, flow, i))
            .collect();
        let _ = writeln!(
            out,
            "  closure gate {} revise {}: {{{}}}",
            step_name(plan, flow, c.gate),
            step_name(plan, flow, c.target),
            members.join(", ")
        );
    }
    for (ci, c) in flow.chunks.iter().enumerate() {
        let _ = writeln!(
            out,
            "  chunk {ci} {:?} ({:?}, max stack {})  ; line {}",
            s(c.source),
            c.context,
            c.max_stack,
            c.pos.line
        );
        chunk_listing(plan, c, out);
    }
}

fn chunk_listing(plan: &Plan, c: &Chunk, out: &mut String) {
    let mut pc = 0;
    while pc < c.code.len() {
        let Ok(i) = op::decode(&c.code, pc) else {
            let _ = writeln!(out, "    {pc:04} <invalid>");
            return;
        };
        let operand = match i.op {
            Op::Const => c
                .consts
                .get(i.args[0] as usize)
                .map_or("?".into(), |k| match k {
                    ConstDef::Null => "null".into(),
                    ConstDef::Bool(b) => b.to_string(),
                    ConstDef::Number(n) => n.to_string(),
                    ConstDef::Str(s) => format!("{:?}", plan.str(*s)),
                }),
            Op::Field => plan.str(i.args[0]).to_string(),
            Op::Index => i.args[0].to_string(),
            Op::AndJump | Op::OrJump => format!("-> {:04}", pc + i.len + i.args[0] as usize),
            Op::Call => format!(
                "{}/{}",
                BUILTINS.get(i.args[0] as usize).map_or("?", |b| b.0),
                i.args[1]
            ),
            Op::Each => format!(
                "{} (end -> {:04})",
                BUILTINS.get(i.args[0] as usize).map_or("?", |b| b.0),
                pc + i.len + i.args[1] as usize
            ),
            Op::Param => format!("^{}", i.args[0]),
            _ => String::new(),
        };
        let offset = c
            .spans
            .iter()
            .rev()
            .find(|(p, _)| *p as usize <= pc)
            .map(|(_, o)| *o);
        let col = offset.map_or(String::new(), |o| format!("  ; col +{o}"));
        let _ = writeln!(out, "    {pc:04} {:<10} {operand}{col}", i.op.name());
        pc += i.len;
    }
}

fn edge_text(k: EdgeKind) -> &'static str {
    match k {
        EdgeKind::Order => "order",
        EdgeKind::Data => "data",
        EdgeKind::OnFail => "on_fail",
        EdgeKind::State => "state",
        EdgeKind::Approve => "approve",
        EdgeKind::Kill => "kill",
    }
}

fn budget_text(b: &BudgetDef) -> String {
    let mut parts = Vec::new();
    if let Some(u) = b.usd {
        parts.push(format!("usd {u}"));
    }
    if let Some(t) = b.tokens {
        parts.push(format!("tokens {t}"));
    }
    if let Some(d) = b.dispatches {
        parts.push(format!("dispatches {d}"));
    }
    if let Some(m) = b.ms {
        parts.push(format!("ms {m}"));
    }
    parts.join(", ")
}

/// An ensure predicate as listed (a templated path as its template text).
fn pred_text(plan: &Plan, flow: &FlowDef, p: &PredDef) -> String {
    match p {
        PredDef::Expr(c) => format!("chunk {c}"),
        PredDef::FileExists(s) => format!("file_exists {:?}", plan.str(*s)),
        PredDef::FileContains(a, b) => {
            format!("file_contains {:?} {:?}", plan.str(*a), plan.str(*b))
        }
        PredDef::Judged(s, k) => format!("judged {:?} stakes {k:?}", plan.str(*s)),
        PredDef::FileExistsAt(t) => format!("file_exists {}", template_text(plan, flow, *t)),
        PredDef::FileContainsAt(t, text) => format!(
            "file_contains {} {:?}",
            template_text(plan, flow, *t),
            plan.str(*text)
        ),
        PredDef::Scored {
            rubric,
            threshold,
            judge,
            inputs,
        } => {
            let judge = judge.map_or("default".to_owned(), |j| format!("{:?}", plan.str(j)));
            let inputs: Vec<String> = inputs.iter().map(|t| format!("tmpl {t}")).collect();
            format!(
                "scored rubric tmpl {rubric} threshold {threshold} judge {judge} inputs [{}]",
                inputs.join(", ")
            )
        }
        PredDef::Exec {
            run,
            args,
            expect_exit,
            timeout_ms,
        } => {
            let args: Vec<String> = args.iter().map(|t| template_text(plan, flow, *t)).collect();
            let timeout = timeout_ms.map_or("config".to_owned(), |t| format!("{t} ms"));
            format!(
                "exec {:?} args [{}] expect_exit {expect_exit} timeout {timeout}",
                plan.str(*run),
                args.join(", ")
            )
        }
    }
}

fn with_text(plan: &Plan, flow: &FlowDef, node: u32) -> String {
    // depth is bounded by the verifier (children come before parents, depth ≤ 64)
    match flow.with_nodes.get(node as usize) {
        None => "?".into(),
        Some(WithNode::Template(t)) => template_text(plan, flow, *t),
        Some(WithNode::Null) => "null".into(),
        Some(WithNode::Bool(b)) => b.to_string(),
        Some(WithNode::Number(n)) => n.to_string(),
        Some(WithNode::List(items)) => {
            format!(
                "[{}]",
                items
                    .iter()
                    .map(|&c| if c < node {
                        with_text(plan, flow, c)
                    } else {
                        "?".into()
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        Some(WithNode::Map(entries)) => format!(
            "{{{}}}",
            entries
                .iter()
                .map(|(k, c)| format!(
                    "{}: {}",
                    plan.str(*k),
                    if *c < node {
                        with_text(plan, flow, *c)
                    } else {
                        "?".into()
                    }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// X9 `on_fail` entries of a step or a fanout stage, one line each.
fn on_fail_listing(
    plan: &Plan,
    flow: &FlowDef,
    entries: &[super::OnFailDef],
    indent: &str,
    out: &mut String,
) {
    for e in entries {
        let when = e.when.map_or(String::new(), |c| format!(" when chunk {c}"))
            + &e.rollback.map_or(String::new(), |r| {
                format!(" rollback {}", step_name(plan, flow, r))
            });
        let _ = match e.action {
            super::OnFailAction::Step(s) => {
                writeln!(out, "{indent}on_fail{when} {}", step_name(plan, flow, s))
            }
            super::OnFailAction::Continue => writeln!(out, "{indent}on_fail{when} continue"),
            super::OnFailAction::Goto { target, max, note } => writeln!(
                out,
                "{indent}on_fail{when} goto {} max {max}{}",
                step_name(plan, flow, target),
                note.map_or(String::new(), |n| format!(" note template {n}"))
            ),
            super::OnFailAction::Fail => writeln!(out, "{indent}on_fail{when} fail"),
        };
    }
}
