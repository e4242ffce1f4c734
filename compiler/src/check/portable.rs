//! `stratumc check --portable`: one warning per use of a language 1.1
//! addition (`shared/EXTENSIONS.md`), for specs that must also run on the
//! original engine. Codes S09NN, NN the addition's number (S0901: X1,
//! S0902: X2, S0903: X3, S0904: X4, S0905: X5, S0906: X6, S0907: X7,
//! S0909: X9, S0910: X10, S0911: X11, S0912: X12).
//!
//! Owns: the list of additions and where each is used in a spec.
//! Must never: change whether a spec is valid (warnings only, and only when
//! asked for).

use stratum_grammar::{ExprKind, RefKind, SegmentKind};

use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::{
    CostHint, Flow, Int, Name, Predicate, PredicateKind, Spec, Step, StepKind,
};
use crate::yaml::Str;

/// Every use of an addition in `spec`, in document order.
pub fn warnings(spec: &Spec) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for flow in &spec.flows {
        if let Some(t) = &flow.dispatch_timeout_ms {
            out.push(lease(t, "dispatch_timeout_ms"));
        }
        for step in &flow.steps {
            out.extend(step.when.iter().flat_map(builtins));
            out.extend(ensures(&step.ensure));
            out.extend(file_paths(&step.ensure));
            out.extend(
                step.iterate
                    .iter()
                    .flat_map(|i| i.until.iter().flat_map(builtins)),
            );
            if let StepKind::Set(fields) = &step.kind {
                out.extend(fields.iter().flat_map(|(_, v)| v.iter().flat_map(builtins)));
            }
            out.extend(scored(&step.ensure));
            out.extend(commands(&step.ensure));
            if let StepKind::Evaluate(ev) = &step.kind {
                out.push(evaluate(ev));
            }
            out.extend(step_states(flow, step));
            if let Some(n) = step.on_fail_names().find(|n| n.text == "continue") {
                out.push(continues(n));
            }
            out.extend(on_fail_routes(step));
            if let (StepKind::Run { .. }, Some(_)) = (&step.kind, &step.iterate) {
                out.push(
                    Diagnostic::new(
                        Code::PortableRoutes,
                        step.construct_span,
                        "`iterate` on a `run` step is a stratumc addition (language 1.1, X9); the original engine rejects it",
                    )
                    .with_help("for the original engine, iterate a `do` step inside the called flow"),
                );
            }
            if let Some(c) = &step.cost {
                out.push(cost_hint(c));
            }
            if let Some(t) = &step.timeout_ms {
                out.push(lease(t, "timeout_ms"));
            }
            out.extend(step.artifacts.first().map(|a| artifacts(a, "artifacts")));
            out.extend(step.scope.as_ref().map(scope));
            out.extend(step.routes.first().map(routes));
            if let StepKind::Fanout(f) = &step.kind {
                for s in &f.stages {
                    out.extend(s.when.iter().flat_map(builtins));
                    out.extend(ensures(&s.ensure));
                    out.extend(file_paths(&s.ensure));
                    out.extend(scored(&s.ensure));
                    out.extend(commands(&s.ensure));
                    out.extend(s.cost.as_ref().map(cost_hint));
                    out.extend(s.timeout_ms.as_ref().map(|t| lease(t, "timeout_ms")));
                    out.extend(s.artifacts.first().map(|a| artifacts(a, "artifacts")));
                    out.extend(s.scope.as_ref().map(scope));
                }
            }
            if let StepKind::Gate(g) = &step.kind {
                out.extend(g.prompt.as_ref().map(|p| artifacts(p, "prompt")));
                out.extend(g.show.first().map(|s| artifacts(s, "show")));
                out.extend(gate_options(g));
            }
        }
    }
    out
}

/// X11: one warning per `scope` (at its key); `changes()` needs a scope,
/// so the scope's warning covers the calls too.
fn scope(sc: &crate::syntax::ast::Scope) -> Diagnostic {
    Diagnostic::new(
        Code::PortableScope,
        sc.span,
        "`scope` is a stratumc addition (language 1.1, X11); the original engine rejects the key (and `changes()` in the ensures)",
    )
    .with_help("remove `scope` and its `changes()` ensures for the original engine; review the agent's diff with a gate instead")
}

/// The expressions of ensure entries.
fn ensures(preds: &[Predicate]) -> Vec<Diagnostic> {
    preds
        .iter()
        .filter_map(|p| match &p.kind {
            Some(PredicateKind::Expr(e)) => Some(builtins(e)),
            _ => None,
        })
        .flatten()
        .collect()
}

/// X3: one warning per file predicate path with a `${` (the path is a
/// template in language 1.1; v1's original engine reads it literally).
fn file_paths(preds: &[Predicate]) -> Vec<Diagnostic> {
    preds
        .iter()
        .filter_map(|p| match &p.kind {
            Some(PredicateKind::FileExists(path) | PredicateKind::FileContains { path, .. }) => {
                Some(path)
            }
            _ => None,
        })
        .filter(|path| path.text.contains("${"))
        .map(|path| {
            Diagnostic::new(
                Code::PortableBuiltins,
                path.span,
                format!(
                    "the path `{}` is a template in stratumc (language 1.1, X3); the original engine reads this path literally, `${{...}}` and all",
                    path.text
                ),
            )
            .with_help("write the literal path, or check the file from the agent's output with an `expr` ensure, for the original engine")
        })
        .collect()
}

/// X3: one warning per lambda and per call of a language 1.1 built-in in
/// one expression (on the expression's span).
fn builtins(expr: &Str) -> Vec<Diagnostic> {
    const ADDED: &[&str] = &[
        "count", "filter", "map", "unique", "keys", "coalesce", "digest", "file", "glob",
    ];
    let (Some(ast), _) = stratum_grammar::parse_expr(&expr.text) else {
        return Vec::new();
    };
    let mut uses = Vec::new();
    stratum_grammar::walk(&ast, &mut |e| match &e.kind {
        stratum_grammar::ExprKind::Lambda { .. } => uses.push("a lambda `p -> …`".to_owned()),
        stratum_grammar::ExprKind::Call { callee, .. } if ADDED.contains(&callee.as_str()) => {
            uses.push(format!("`{callee}()`"));
        }
        _ => {}
    });
    uses.into_iter()
        .map(|what| {
            Diagnostic::new(
                Code::PortableBuiltins,
                expr.span,
                format!(
                    "{what} is a stratumc addition (language 1.1, X3); the original engine cannot evaluate it"
                ),
            )
            .with_help("write the condition with the v1 built-ins, or compute the value in a step, for the original engine")
        })
        .collect()
}

/// One S0912 per `exec` check (X12) of an ensure list.
fn commands(ensure: &[Predicate]) -> Vec<Diagnostic> {
    ensure
        .iter()
        .filter_map(|p| match &p.kind {
            Some(PredicateKind::Exec(ex)) => Some(
                Diagnostic::new(
                    Code::PortableCommands,
                    ex.key,
                    "`exec` is a stratumc addition (language 1.1, X12); the original engine does not know the predicate nor `[commands.NAME]`",
                )
                .with_help("for the original engine, have an agent run the command and report its exit in the output, checked by an `expr`"),
            ),
            Some(PredicateKind::Expr(e)) if calls_receipts(e) => Some(
                Diagnostic::new(
                    Code::PortableCommands,
                    e.span,
                    "`receipts()` is a stratumc addition (language 1.1, X12); the original engine cannot evaluate it",
                )
                .with_help("for the original engine, check the command's result from the agent's output instead"),
            ),
            _ => None,
        })
        .collect()
}

/// S0912 for an `evaluate` step (X12): the original engine hands
/// `command` to its injected runner, not to `[commands.NAME]`.
fn evaluate(ev: &crate::syntax::ast::Evaluate) -> Diagnostic {
    Diagnostic::new(
        Code::PortableCommands,
        ev.key,
        format!(
            "`evaluate` runs `[commands.{}]` of stratum.toml in stratumc (language 1.1, X12); the original engine hands `command` to the runner its host injects, and fails the step without one",
            ev.command.text
        ),
    )
    .with_help("for the original engine, configure its runner to answer this command, or have an agent run it in a `do` step")
}

/// Whether an expression calls `receipts()` (X12).
fn calls_receipts(expr: &Str) -> bool {
    let (Some(ast), _) = stratum_grammar::parse_expr(&expr.text) else {
        return false;
    };
    let mut seen = false;
    stratum_grammar::walk(&ast, &mut |e| {
        if matches!(&e.kind, stratum_grammar::ExprKind::Call { callee, .. } if callee == "receipts")
        {
            seen = true;
        }
    });
    seen
}

/// One S0905 per scored `judged` (X5) of an ensure list.
fn scored(ensure: &[Predicate]) -> Vec<Diagnostic> {
    ensure
        .iter()
        .filter_map(|p| match &p.kind {
            Some(PredicateKind::Scored(sc)) => Some(
                Diagnostic::new(
                    Code::PortableScoredJudge,
                    sc.key,
                    "the scored form of `judged` (`rubric`, `threshold`, `judge`, `inputs`) is a stratumc addition (language 1.1, X5); the original engine knows only `{statement, stakes}`",
                )
                .with_help("write it as `judged: {statement: \"...\", stakes: default}` for the original engine"),
            ),
            _ => None,
        })
        .collect()
}

/// X1: every expression that reads `steps` and every template reference
/// to a step's state (`${<id>.status}`, `failure`, `note`) of one step.
fn step_states(flow: &Flow, step: &Step) -> Vec<Diagnostic> {
    let mut exprs: Vec<&Str> = Vec::new();
    let mut templates: Vec<&Str> = Vec::new();
    exprs.extend(step.when.iter());
    exprs.extend(step.iterate.as_ref().and_then(|i| i.until.as_ref()));
    let own = preds(&step.ensure);
    exprs.extend(own);
    match &step.kind {
        StepKind::Do(t) => templates.push(t),
        StepKind::Evaluate(ev) => templates.extend(ev.input.iter()),
        StepKind::Set(fields) => exprs.extend(fields.iter().filter_map(|(_, v)| v.as_ref())),
        StepKind::Fanout(f) => {
            for st in &f.stages {
                exprs.extend(st.when.iter());
                let stage = preds(&st.ensure);
                exprs.extend(stage);
                templates.extend(st.task.iter());
            }
        }
        _ => {}
    }
    let mut out = Vec::new();
    for e in exprs {
        let (Some(ast), _) = stratum_grammar::parse_expr(&e.text) else {
            continue;
        };
        let mut uses = 0;
        stratum_grammar::walk(&ast, &mut |n| {
            if matches!(&n.kind, ExprKind::Ident(name) if name == "steps") {
                uses += 1;
            }
        });
        out.extend((0..uses).map(|_| step_state(e, "the `steps` binding")));
    }
    let is_step = |id: &str| {
        flow.steps
            .iter()
            .any(|s| s.id.as_ref().is_some_and(|n| n.text == id))
    };
    for t in templates {
        let (template, _) = stratum_grammar::parse_template(&t.text);
        for r in template.references() {
            let first = r.path.first().map(|p| &p.kind);
            if r.kind == RefKind::Carry
                && is_step(&r.head)
                && matches!(first, Some(SegmentKind::Field(f)) if f == "choice")
            {
                out.push(choice_read(t, &r.head));
            }
            let member = match first {
                Some(SegmentKind::Field(f))
                    if ["status", "failure", "note"].contains(&f.as_str()) =>
                {
                    f
                }
                _ => continue,
            };
            if r.kind == RefKind::Carry && is_step(&r.head) {
                out.push(step_state(t, &format!("`${{{}.{member}}}`", r.head)));
            }
        }
    }
    out
}

fn preds(ps: &[crate::syntax::ast::Predicate]) -> Vec<&Str> {
    ps.iter()
        .filter_map(|p| match &p.kind {
            Some(PredicateKind::Expr(e)) => Some(e),
            _ => None,
        })
        .collect()
}

fn step_state(at: &Str, what: &str) -> Diagnostic {
    Diagnostic::new(
        Code::PortableStepState,
        at.span,
        format!("{what} (a step's state) is a stratumc addition (language 1.1, X1); the original engine does not know it"),
    )
    .with_help("for the original engine, read outputs through `result.<id>` and order the reader with `after`")
}

fn continues(n: &Name) -> Diagnostic {
    Diagnostic::new(
        Code::PortableContinue,
        n.span,
        "`on_fail: continue` is a stratumc addition (language 1.1, X2); the original engine looks for a step named `continue`",
    )
    .with_help("for the original engine, route the failure to a recovery step: `on_fail: <step id>`")
}

fn cost_hint(c: &CostHint) -> Diagnostic {
    Diagnostic::new(
        Code::PortableCostHint,
        c.span,
        "`cost` hints are a stratumc addition (language 1.1, X6); the original engine rejects the key",
    )
    .with_help("remove `cost` for the original engine; `stratumc cost` then uses the agent profiles")
}

/// X10: one warning per gate `options`, at its first entry (or its template).
fn gate_options(g: &crate::syntax::ast::Gate) -> Option<Diagnostic> {
    use crate::syntax::ast::GateOptions;
    let at = match g.options.as_ref()? {
        GateOptions::List(list) => list.first()?,
        GateOptions::Template(t) => t,
    };
    Some(
        Diagnostic::new(
            Code::PortableGateOptions,
            at.span,
            "gate `options` are a stratumc addition (language 1.1, X10); the original engine rejects the key",
        )
        .with_help("remove `options` for the original engine and ask for the choice in the gate's note"),
    )
}

/// X10: a template read of a gate's `choice`.
fn choice_read(at: &Str, gate: &str) -> Diagnostic {
    Diagnostic::new(
        Code::PortableGateOptions,
        at.span,
        format!("`${{{gate}.choice}}` (a gate decision's choice) is a stratumc addition (language 1.1, X10); the original engine does not know it"),
    )
    .with_help("for the original engine, pass the choice in the gate's note")
}

/// One warning per `artifacts` list, gate `show` list or `prompt` (X4), at
/// its first entry.
fn artifacts(at: &Str, key: &str) -> Diagnostic {
    Diagnostic::new(
        Code::PortableArtifacts,
        at.span,
        format!("`{key}` is a stratumc addition (language 1.1, X4); the original engine rejects the key"),
    )
    .with_help(if key == "artifacts" {
        "remove `artifacts` for the original engine; check the files with `file_exists` ensures instead"
    } else {
        "remove `show` and `prompt` for the original engine; the gate then shows only its step id"
    })
}

/// X9: one warning per step with `route` entries, at its first entry.
fn routes(r: &crate::syntax::ast::RouteEntry) -> Diagnostic {
    Diagnostic::new(
        Code::PortableRoutes,
        r.span,
        "`route` (conditional edges after success) is a stratumc addition (language 1.1, X9); the original engine rejects the key",
    )
    .with_help("for the original engine, go back through a gate's `on_revise` (a human decides) or loop one step with `iterate`")
}

/// X9: one warning per step whose `on_fail` uses a language 1.1 form (a
/// `goto`, a `when`, a list) or sits on a `set` step.
fn on_fail_routes(step: &crate::syntax::ast::Step) -> Option<Diagnostic> {
    let first = step.on_fail.first()?;
    let goto = step
        .on_fail
        .iter()
        .any(|e| matches!(e.action, crate::syntax::ast::OnFailAction::Goto { .. }));
    let set = matches!(step.kind, StepKind::Set(_));
    if !(goto || step.on_fail_list || set) {
        return None;
    }
    let what = if set {
        "`on_fail` on a `set` step"
    } else {
        "`on_fail` as `{goto, max}` or as a list of entries"
    };
    Some(
        Diagnostic::new(
            Code::PortableRoutes,
            first.span,
            format!("{what} is a stratumc addition (language 1.1, X9); the original engine rejects it"),
        )
        .with_help("for the original engine, write `on_fail: <recovery step id>` on a `do`, `fanout` or `run` step"),
    )
}

fn lease(t: &Int, key: &str) -> Diagnostic {
    Diagnostic::new(
        Code::PortableLease,
        t.span,
        format!(
            "`{key}` (a dispatch lease) is a stratumc addition (language 1.1, X7); the original engine rejects the key"
        ),
    )
    .with_help(format!(
        "remove `{key}` for the original engine; its dispatches then never expire and a lost agent needs an operator"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyze;

    fn codes(path: &str) -> Vec<&'static str> {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        let text = std::fs::read_to_string(&file).expect("the conformance file exists");
        let a = analyze(&text);
        assert_eq!(a.error_count(), 0, "{:?}", a.diagnostics);
        warnings(&a.spec).iter().map(|d| d.code.as_str()).collect()
    }

    #[test]
    fn one_lease_warning_per_use() {
        // the flow default, a fanout stage's and a step's; the plain step has none
        assert_eq!(
            codes("../tests/conformance/ext/lease-ok.stratum.yaml"),
            ["S0907", "S0907", "S0907"]
        );
        assert_eq!(
            codes("../tests/conformance/ext/cost-hint-ok.stratum.yaml"),
            ["S0906", "S0906"]
        );
        assert!(codes("../examples/minimal-classifier.stratum.yaml").is_empty());
        // X3: every lambda and every new built-in, in ensures and `set`
        let x3 = codes("../tests/conformance/ext/x3-lambda-ok.stratum.yaml");
        assert_eq!(x3.len(), 21, "{x3:?}");
        assert!(x3.iter().all(|c| *c == "S0903"));
        // two steps' lists, a stage's list, a gate's prompt and its show list
        assert_eq!(
            codes("../tests/conformance/ext/x4-artifacts-ok.stratum.yaml"),
            ["S0904"; 5]
        );
    }

    #[test]
    fn one_warning_per_templated_file_predicate_path() {
        // plan: 2, check: 3, the two stages: 1 and 2; literal paths none
        assert_eq!(
            codes("../tests/conformance/ext/x3-file-path-ok.stratum.yaml"),
            ["S0903"; 8]
        );
        // a stage's `file_exists` and a step's `file_contains`, not its literal path
        assert_eq!(
            codes("../tests/conformance/structure/file-path-template.stratum.yaml"),
            ["S0903"; 2]
        );
    }

    #[test]
    fn one_gate_options_warning_per_gate_and_choice_read() {
        // X10: two gates' `options`, three `${<gate>.choice}` reads; the
        // rest is X1 (`${scope.note}`, the `when`'s two `steps` uses) and X4
        // (the `prompt`)
        let mut got = codes("../tests/conformance/ext/x10-options-ok.stratum.yaml");
        got.sort_unstable();
        assert_eq!(
            got,
            [
                "S0901", "S0901", "S0901", "S0904", "S0910", "S0910", "S0910", "S0910", "S0910"
            ]
        );
    }

    #[test]
    fn one_step_state_and_continue_warning_per_use() {
        // analysis: continue; escalate's `when`; paper's `when` (the
        // `${escalate_literature.note}` reference is one more)
        assert_eq!(
            codes("../tests/conformance/ext/x2-escalate.stratum.yaml"),
            ["S0902", "S0901", "S0901", "S0901"]
        );
        // summary: `when` (two uses) and its ensure; report: three `set` values;
        // analysis: continue
        assert_eq!(
            codes("../tests/conformance/ext/x1-steps-ok.stratum.yaml"),
            [
                "S0902", "S0901", "S0901", "S0901", "S0901", "S0901", "S0901"
            ]
        );
    }
}
