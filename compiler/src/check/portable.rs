//! `stratumc check --portable`: one warning per use of a language 1.1
//! addition (`shared/EXTENSIONS.md`), for specs that must also run on the
//! original engine. Codes S09NN, NN the addition's number (S0906: X6).
//!
//! Owns: the list of additions and where each is used in a spec.
//! Must never: change whether a spec is valid (warnings only, and only when
//! asked for).

use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::{CostHint, Spec, StepKind};

/// Every use of an addition in `spec`, in document order.
pub fn warnings(spec: &Spec) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for flow in &spec.flows {
        for step in &flow.steps {
            if let Some(c) = &step.cost {
                out.push(cost_hint(c));
            }
            if let StepKind::Fanout(f) = &step.kind {
                out.extend(
                    f.stages
                        .iter()
                        .filter_map(|s| s.cost.as_ref())
                        .map(cost_hint),
                );
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
