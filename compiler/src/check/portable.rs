//! `stratumc check --portable`: one warning per use of a language 1.1
//! addition (`shared/EXTENSIONS.md`), for specs that must also run on the
//! original engine. Codes S09NN, NN the addition's number (S0903: X3,
//! S0906: X6, S0907: X7).
//!
//! Owns: the list of additions and where each is used in a spec.
//! Must never: change whether a spec is valid (warnings only, and only when
//! asked for).

use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::{CostHint, Int, Predicate, PredicateKind, Spec, StepKind};
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
            out.extend(
                step.iterate
                    .iter()
                    .flat_map(|i| i.until.iter().flat_map(builtins)),
            );
            if let StepKind::Set(fields) = &step.kind {
                out.extend(fields.iter().flat_map(|(_, v)| v.iter().flat_map(builtins)));
            }
            if let Some(c) = &step.cost {
                out.push(cost_hint(c));
            }
            if let Some(t) = &step.timeout_ms {
                out.push(lease(t, "timeout_ms"));
            }
            if let StepKind::Fanout(f) = &step.kind {
                for s in &f.stages {
                    out.extend(s.when.iter().flat_map(builtins));
                    out.extend(ensures(&s.ensure));
                    out.extend(s.cost.as_ref().map(cost_hint));
                    out.extend(s.timeout_ms.as_ref().map(|t| lease(t, "timeout_ms")));
                }
            }
        }
    }
    out
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

fn cost_hint(c: &CostHint) -> Diagnostic {
    Diagnostic::new(
        Code::PortableCostHint,
        c.span,
        "`cost` hints are a stratumc addition (language 1.1, X6); the original engine rejects the key",
    )
    .with_help("remove `cost` for the original engine; `stratumc cost` then uses the agent profiles")
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
    }
}
