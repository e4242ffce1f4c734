//! What a name in an expression means: the bindings of each field
//! (`result`, `input`, `item`, `prev`), member access on closed contracts,
//! and ordered reads of `result.<step>`.
//!
//! Owns: the binding-availability, unknown-name, unknown-member and
//! unordered-read diagnostics.
//! Must never: type operators or calls (`ops`, `call`), or evaluate
//! anything.

use stratum_grammar::Expr;

use super::{BUILTINS, Walk};
use crate::check::StepOut;
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
            "result" => self.scope.result.clone(),
            "input" => Type::Record(self.fc.input),
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
                let mut candidates = vec!["result", "input"];
                if self.scope.item.is_some() {
                    candidates.extend(["item", "prev"]);
                }
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
