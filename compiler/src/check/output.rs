//! The flow output: `output.from` is one `${step.output...}` reference whose
//! value fits `output.contract`.
//!
//! Owns: the value check of reference v1-language §6.2 items 47–52 (the
//! reference itself is resolved by `template`), and S0318: the output step
//! may not say `on_fail: continue` (X2: the run would have no output).
//! Must never: type the reference path itself (that is `template`).

use super::template::Leaf;
use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic};
use crate::ir::{self, RefTarget};
use crate::types::FieldType;

impl<'a> Checker<'a> {
    pub(super) fn flow_output(&mut self, fc: &mut FlowCtx<'a>) -> Option<ir::OutputIr> {
        let out = fc.flow.output.as_ref()?;
        let from = out.from.as_ref()?;
        let r = self.single_ref(
            fc,
            from,
            Leaf::OutputFrom,
            false,
            Code::InvalidFlowOutput,
            "`output.from`",
        )?;
        let RefTarget::Step(step) = r.target else {
            return None;
        };
        let producer = &fc.flow.steps[step];
        if let Some(n) = producer
            .on_fail_names()
            .find(|n| super::continues::is_continue(fc, n))
        {
            let id = producer.id.as_ref().map_or("", |i| i.text.as_str());
            self.sink.push(
                Diagnostic::new(Code::ContinueFlowOutput, n.span, format!("`{id}` has `on_fail: continue`, but the output of flow `{}` comes from it", fc.flow.name.text))
                    .with_label(from.span, "the flow output is read here")
                    .with_note("a flow whose output step failed has no output to return; the run could not succeed")
                    .with_help(format!("remove `on_fail: continue` from `{id}` (its failure then fails the run), or take the output from a later step that checks `steps.{id}.status`")),
            );
            return None;
        }
        let contract = self.flow_output_records[fc.flow_index];
        if let (Some(c), ty) = (contract, &r.ty) {
            let ft = FieldType {
                ty: crate::types::Ty::Record(c),
                optional: false,
            };
            if !self.types.fits(ty, &ft) {
                let (want, got) = (self.types.display_ty(&ft), self.types.display(ty));
                let cspan = out.contract.as_ref().map_or(from.span, |c| c.span);
                self.sink.push(
                    Diagnostic::new(Code::FlowOutputMismatch, from.span, format!("the flow output is {got}, but `output.contract` is `{want}`"))
                        .with_label(cspan, "declared here")
                        .with_note("the producer's value must satisfy the flow's output contract (structurally identical contracts are accepted)"),
                );
                return None;
            }
        }
        Some(ir::OutputIr {
            step,
            path: r.path,
            contract: contract?,
            span: from.span,
        })
    }
}
