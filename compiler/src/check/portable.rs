//! `stratumc check --portable`: one warning per use of a language 1.1
//! addition (`shared/EXTENSIONS.md`), for specs that must also run on the
//! original engine. Codes S09NN, NN the addition's number (S0904: X4,
//! S0906: X6, S0907: X7).
//!
//! Owns: the list of additions and where each is used in a spec.
//! Must never: change whether a spec is valid (warnings only, and only when
//! asked for).

use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::{CostHint, Int, Spec, StepKind};
use crate::yaml::Str;

/// Every use of an addition in `spec`, in document order.
pub fn warnings(spec: &Spec) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for flow in &spec.flows {
        if let Some(t) = &flow.dispatch_timeout_ms {
            out.push(lease(t, "dispatch_timeout_ms"));
        }
        for step in &flow.steps {
            if let Some(c) = &step.cost {
                out.push(cost_hint(c));
            }
            if let Some(t) = &step.timeout_ms {
                out.push(lease(t, "timeout_ms"));
            }
            out.extend(step.artifacts.first().map(|a| artifacts(a, "artifacts")));
            if let StepKind::Fanout(f) = &step.kind {
                for s in &f.stages {
                    out.extend(s.cost.as_ref().map(cost_hint));
                    out.extend(s.timeout_ms.as_ref().map(|t| lease(t, "timeout_ms")));
                    out.extend(s.artifacts.first().map(|a| artifacts(a, "artifacts")));
                }
            }
            if let StepKind::Gate(g) = &step.kind {
                out.extend(g.prompt.as_ref().map(|p| artifacts(p, "prompt")));
                out.extend(g.show.first().map(|s| artifacts(s, "show")));
            }
        }
    }
    out
}

fn cost_hint(c: &CostHint) -> Diagnostic {
    Diagnostic::new(
        Code::PortableCostHint,
        c.span,
        "`cost` hints are a stratumc addition (language 1.1, X6); the original engine rejects the key",
    )
    .with_help("remove `cost` for the original engine; `stratumc cost` then uses the agent profiles")
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
        // two steps' lists, a stage's list, a gate's prompt and its show list
        assert_eq!(
            codes("../tests/conformance/ext/x4-artifacts-ok.stratum.yaml"),
            ["S0904"; 5]
        );
    }
}
