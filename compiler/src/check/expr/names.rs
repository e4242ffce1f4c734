//! What a name in an expression means: the bindings of each field
//! (`result`, `input`, `item`, `prev`, `steps`, and `failure` in an
//! `on_fail` entry's `when`, X9), member access on closed
//! contracts, ordered reads of `result.<step>` and `steps.<id>` (X1).
//!
//! Owns: the binding table ([`available`]: which binding each field
//! provides — the one place that says where `steps` is bound), the
//! binding-availability, unknown-name, unknown-member and unordered-read
//! diagnostics, the members of a step's state, and recording output reads
//! and status guards for the `on_fail: continue` check (X2).
//! Must never: type operators or calls (`ops`, `call`), or evaluate
//! anything.

use stratum_grammar::Expr;

use super::{BUILTINS, Scope, Walk};
use crate::check::StepOut;
use crate::check::continues::OutputRead;
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::types::Type;

impl Walk<'_, '_, '_> {
    pub(super) fn binding(&mut self, name: &str, e: &Expr) -> Type {
        if let Some(t) = self.param(name) {
            return t;
        }
        let raw_span = e.span;
        self.dynamic = true;
        match name {
            // X9: an `on_fail` entry's `when` reads the failure, not a result
            "failure" if self.scope.failure => Type::Failure,
            "result" if self.scope.failure => {
                self.push(
                    Diagnostic::new(Code::BindingUnavailable, self.span(raw_span), format!("`result` is not available in `{}`", self.scope.field))
                        .with_note("a failed step has no result; an `on_fail` entry's `when` reads `failure` (`{reason, violations}`)")
                        .with_help("write `failure.reason` or `failure.violations`"),
                );
                Type::Any
            }
            "result" => self.scope.result.clone(),
            "input" => Type::Record(self.fc.input),
            "steps" if available(self.scope).contains(&"steps") => {
                Type::StepStates(self.fc.flow_index)
            }
            "item" => {
                match &self.scope.item {
                    Some(t) => t.clone(),
                    None => {
                        self.push(
                        Diagnostic::new(Code::BindingUnavailable, self.span(raw_span), format!("`item` is not available in `{}`", self.scope.field))
                            .with_note("`item` and `prev` are bound only in fanout stage `when` and `ensure`"),
                    );
                        Type::Any
                    }
                }
            }
            "prev" => {
                match &self.scope.prev {
                    Some(Some(t)) => t.clone(),
                    Some(None) => {
                        self.push(
                        Diagnostic::new(Code::BindingUnavailable, self.span(raw_span), "`prev` has no value in the first fanout stage")
                            .with_note("`prev` is the output of the previous stage; the first stage has none"),
                    );
                        Type::Any
                    }
                    None => {
                        self.push(
                        Diagnostic::new(Code::BindingUnavailable, self.span(raw_span), format!("`prev` is not available in `{}`", self.scope.field))
                            .with_note("`item` and `prev` are bound only in fanout stage `when` and `ensure`"),
                    );
                        Type::Any
                    }
                }
            }
            other => {
                let candidates = available(self.scope);
                let help = did_you_mean(other, candidates.iter().copied());
                self.push(
                    Diagnostic::new(
                        Code::UnknownBinding,
                        self.span(raw_span),
                        format!("unknown name `{other}`"),
                    )
                    .with_note(format!(
                        "the names available in `{}` are: {}",
                        self.scope.field,
                        candidates.join(", ")
                    ))
                    .with_help_opt(help.or_else(|| {
                        (BUILTINS.iter().any(|(f, _)| *f == other))
                            .then(|| format!("`{other}` is a function: call it as `{other}(...)`"))
                    }))
                    .with_help_opt(None),
                );
                Type::Any
            }
        }
    }

    pub(super) fn member(
        &mut self,
        base: &Type,
        object: &Expr,
        name: &str,
        name_span: stratum_grammar::Span,
        whole: &Expr,
    ) -> Type {
        let raw_span = name_span;
        match base {
            Type::Any | Type::Object => Type::Any,
            Type::Record(r) => {
                let record = &self.ck.types.records[*r];
                match record.field(name) {
                    Some(ft) => Type::of(&ft.ty),
                    None => {
                        let help =
                            did_you_mean(name, record.fields.iter().map(|(n, _)| n.as_str()));
                        let fields: Vec<String> = record
                            .fields
                            .iter()
                            .map(|(n, _)| format!("`{n}`"))
                            .collect();
                        let rname = record.name.clone();
                        self.push(
                            Diagnostic::new(
                                Code::UnknownMember,
                                self.span(raw_span),
                                format!("`{rname}` has no field `{name}`"),
                            )
                            .with_span_label("unknown field")
                            .with_note(if fields.is_empty() {
                                format!("`{rname}` has no fields")
                            } else {
                                format!("`{rname}` has: {}", fields.join(", "))
                            })
                            .with_help_opt(help),
                        );
                        Type::Any
                    }
                }
            }
            Type::Steps(_) => self.result_step(name, raw_span, whole),
            Type::StepStates(_) => self.step_state(name, raw_span, whole),
            Type::StepState(step) => self.state_member(*step, name, raw_span, whole),
            Type::Failure => match name {
                "reason" => Type::String,
                "violations" => Type::List(Box::new(Type::Any)),
                _ => {
                    let help = did_you_mean(name, ["reason", "violations"]);
                    self.push(
                        Diagnostic::new(
                            Code::UnknownMember,
                            self.span(raw_span),
                            format!("a failure has no field `{name}`"),
                        )
                        .with_span_label("unknown field")
                        .with_note("a failure has: `reason` (a string), `violations` (a list)")
                        .with_help_opt(help),
                    );
                    Type::Any
                }
            },
            other => {
                let shown = self.show(other);
                self.push(Diagnostic::new(
                    Code::UnknownMember,
                    self.span(raw_span),
                    format!(
                        "`{}` is {shown} and has no field `{name}`",
                        self.text(object)
                    ),
                ));
                Type::Any
            }
        }
    }

    /// `result.<step>` in `when`/`set`.
    fn result_step(&mut self, name: &str, raw_span: stratum_grammar::Span, whole: &Expr) -> Type {
        let Some(&step) = self.fc.index.get(name) else {
            let help = did_you_mean(name, self.fc.index.keys().copied());
            self.push(
                Diagnostic::new(
                    Code::UnknownResultStep,
                    self.span(raw_span),
                    format!("`result.{name}`: there is no step `{name}` in this flow"),
                )
                .with_note(format!(
                    "in `{}`, `result` maps the ids of earlier steps to their outputs",
                    self.scope.field
                ))
                .with_help_opt(help),
            );
            return Type::Any;
        };
        let reader = self.scope.reader;
        if step == reader {
            self.push(Diagnostic::new(
                Code::UnorderedRead,
                self.span(raw_span),
                format!(
                    "step `{name}` reads its own output in `{}`",
                    self.scope.field
                ),
            ));
            return Type::Any;
        }
        if !self.fc.is_dependency_ancestor(step, reader) {
            let reader_id = self.fc.flow.steps[reader]
                .id
                .as_ref()
                .map_or("this step", |n| n.text.as_str())
                .to_string();
            let whole_span = self.span(whole.span);
            self.push(
                Diagnostic::new(Code::UnorderedRead, whole_span, format!("`{}` reads `result.{name}`, but `{name}` may not have finished", self.scope.field))
                    .with_note(format!("nothing orders `{name}` before `{reader_id}`: it is not listed in `after` and no `${{{name}.output}}` reference reads it"))
                    .with_help(format!("add `{name}` to the `after` list of `{reader_id}`")),
            );
        }
        self.output_read(step, whole);
        match &self.fc.outputs[step] {
            StepOut::Known(t) => t.clone(),
            StepOut::Gate => {
                self.push(Diagnostic::new(
                    Code::UnknownResultStep,
                    self.span(raw_span),
                    format!("`result.{name}`: step `{name}` is a gate and has no output"),
                ));
                Type::Any
            }
            _ => Type::Any,
        }
    }
}

/// The bindings a field provides, in the order messages list them. `steps`
/// (X1) is bound in every expression field: `when`, `set`, `ensure`,
/// `iterate.until` and a fanout stage's `when` and `ensure` (route
/// conditions, X9, join this table).
pub(in crate::check) fn available(scope: &Scope) -> Vec<&'static str> {
    let mut names = if scope.failure {
        vec!["failure", "input", "steps"]
    } else {
        vec!["result", "input", "steps"]
    };
    if scope.item.is_some() {
        names.extend(["item", "prev"]);
    }
    names
}

/// The members of `steps.<id>` (`choice`: a gate's, X10).
pub(in crate::check) const STATE_MEMBERS: &[&str] =
    &["status", "output", "failure", "attempts", "choice"];

/// The statuses a finished step can have.
pub(in crate::check) fn status_type() -> Type {
    Type::Enum(vec!["succeeded".into(), "failed".into(), "skipped".into()])
}

impl Walk<'_, '_, '_> {
    /// `steps.<id>`: an ordered read (C4) of a step of this flow.
    fn step_state(&mut self, name: &str, raw_span: stratum_grammar::Span, whole: &Expr) -> Type {
        let Some(&step) = self.fc.index.get(name) else {
            let help = did_you_mean(name, self.fc.index.keys().copied());
            self.push(
                Diagnostic::new(
                    Code::UnknownStepState,
                    self.span(raw_span),
                    format!("`steps.{name}`: there is no step `{name}` in this flow"),
                )
                .with_note(format!(
                    "in `{}`, `steps` maps the ids of this flow's steps to their state",
                    self.scope.field
                ))
                .with_help_opt(help),
            );
            return Type::Any;
        };
        let reader = self.scope.reader;
        let reader_id = self.fc.flow.steps[reader]
            .id
            .as_ref()
            .map_or("this step", |n| n.text.as_str())
            .to_string();
        if step == reader {
            self.push(
                Diagnostic::new(
                    Code::UnorderedStepRead,
                    self.span(raw_span),
                    format!(
                        "step `{name}` reads its own state in `{}`",
                        self.scope.field
                    ),
                )
                .with_note("a step's state is known only once it has finished"),
            );
            return Type::Any;
        }
        if !self.fc.is_dependency_ancestor(step, reader) {
            let whole_span = self.span(whole.span);
            self.push(
                Diagnostic::new(Code::UnorderedStepRead, whole_span, format!("`{}` reads `steps.{name}`, but `{name}` may not have finished", self.scope.field))
                    .with_note(format!("nothing orders `{name}` before `{reader_id}`: it is not listed in `after` and no `${{{name}...}}` reference reads it"))
                    .with_help(format!("add `{name}` to the `after` list of `{reader_id}`: `after: [{name}]`")),
            );
        }
        Type::StepState(step)
    }

    /// `steps.<id>.<member>`.
    fn state_member(
        &mut self,
        step: usize,
        name: &str,
        raw_span: stratum_grammar::Span,
        whole: &Expr,
    ) -> Type {
        match name {
            "status" => {
                if self.scope.field == "when" {
                    self.fc.status_guards.push((self.scope.reader, step));
                }
                status_type()
            }
            "failure" => Type::Failure,
            "attempts" => Type::Number,
            "choice" => {
                let shown = format!("steps.{}.choice", self.step_name(step));
                let span = self.span(raw_span);
                match crate::check::gates::choice_type(self.fc.flow, step, span, &shown) {
                    Ok(t) => t,
                    Err(d) => {
                        self.push(*d);
                        Type::Any
                    }
                }
            }
            "output" => {
                self.output_read(step, whole);
                match &self.fc.outputs[step] {
                    StepOut::Known(t) => t.clone(),
                    StepOut::Gate => {
                        let id = self.step_name(step);
                        self.push(
                            Diagnostic::new(
                                Code::UnknownStepState,
                                self.span(raw_span),
                                format!(
                                    "`steps.{id}.output`: step `{id}` is a gate and has no output"
                                ),
                            )
                            .with_help(format!("read the gate's `steps.{id}.status` instead")),
                        );
                        Type::Any
                    }
                    _ => Type::Any,
                }
            }
            _ => {
                let id = self.step_name(step);
                let note = format!(
                    "`steps.{id}` has: {}",
                    STATE_MEMBERS
                        .iter()
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                self.push(
                    Diagnostic::new(
                        Code::UnknownStepState,
                        self.span(raw_span),
                        format!("`steps.{id}` has no member `{name}`"),
                    )
                    .with_span_label("unknown member")
                    .with_note(note)
                    .with_help_opt(did_you_mean(name, STATE_MEMBERS.iter().copied())),
                );
                Type::Any
            }
        }
    }

    fn step_name(&self, step: usize) -> String {
        self.fc.flow.steps[step]
            .id
            .as_ref()
            .map_or_else(String::new, |n| n.text.clone())
    }

    /// Records a read of `step`'s output for the `on_fail: continue` check.
    fn output_read(&mut self, step: usize, whole: &Expr) {
        let span = self.span(whole.span);
        self.fc.output_reads.push(OutputRead {
            reader: self.scope.reader,
            step,
            span,
            guarded: self.coalesced > 0,
        });
    }
}
