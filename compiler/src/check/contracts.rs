//! Contracts: the record type table built from the `contracts` section
//! (names first, so they resolve in any order), field types in the contract
//! type language, cycles between contracts, and unknown contract names with
//! did-you-mean.
//!
//! Owns: reference v1-language §2 as applied to the `contracts` section and
//! to every `out` / `output.contract` name.
//! Must never: look at flows or steps (it runs before them, in phase 1).

use super::Checker;
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::source::Span;
use crate::syntax::ast;
use crate::types::{FieldType, Record, RecordId, Ty, TypeExpr, parse_type};

impl Checker<'_> {
    pub(super) fn contracts(&mut self) {
        let spec = self.spec;
        // records first, so that names resolve in any order
        for (i, c) in spec.contracts.iter().enumerate() {
            self.types.records.push(Record {
                name: c.name.text.clone(),
                fields: Vec::new(),
            });
            self.contracts
                .insert(c.name.text.as_str(), if c.ok { Some(i) } else { None });
        }
        let mut named: Vec<Vec<(usize, String, Span)>> = vec![Vec::new(); spec.contracts.len()];
        for (i, c) in spec.contracts.iter().enumerate() {
            let mut fields = Vec::new();
            for f in &c.fields {
                let first = named[i].len();
                let ft = match &f.ty {
                    Some(t) => self.field_type(t, &mut named[i]),
                    None => FieldType {
                        ty: Ty::Error,
                        optional: true,
                    },
                };
                // the references this field's type made go through this field
                for reference in &mut named[i][first..] {
                    reference.1 = f.name.text.clone();
                }
                fields.push((f.name.text.clone(), ft));
            }
            self.types.records[i].fields = fields;
        }
        // cycles through references, contracts in declaration order
        let mut state = vec![0u8; spec.contracts.len()]; // 0 new, 1 on stack, 2 done
        for start in 0..spec.contracts.len() {
            self.contract_cycle(start, &named, &mut state);
        }
    }

    fn contract_cycle(&mut self, c: usize, named: &[Vec<(usize, String, Span)>], state: &mut [u8]) {
        if state[c] != 0 {
            return;
        }
        state[c] = 1;
        for (target, field, span) in &named[c] {
            match state[*target] {
                1 => {
                    let names = (
                        self.spec.contracts[c].name.text.clone(),
                        self.spec.contracts[*target].name.text.clone(),
                    );
                    self.sink.push(
                        Diagnostic::new(
                            Code::RecursiveContract,
                            *span,
                            format!(
                                "contract `{}` refers back to `{}` through field `{field}`",
                                names.0, names.1
                            ),
                        )
                        .with_label(
                            self.spec.contracts[*target].name.span,
                            "the cycle starts here",
                        )
                        .with_note(
                            "contract values must be finite JSON; `?` does not break a cycle",
                        )
                        .with_help("use `object` for the recursive field"),
                    );
                    // break the cycle for later users
                    if let Some((_, ft)) = self.types.records[c]
                        .fields
                        .iter_mut()
                        .find(|(n, _)| n == field)
                    {
                        ft.ty = Ty::Error;
                    }
                }
                0 => self.contract_cycle(*target, named, state),
                _ => {}
            }
        }
        state[c] = 2;
    }

    /// Resolves a type string; reports problems; collects named references.
    pub(super) fn field_type(
        &mut self,
        s: &crate::yaml::Str,
        named: &mut Vec<(usize, String, Span)>,
    ) -> FieldType {
        match parse_type(&s.text) {
            Err(why) => {
                let mut d = Diagnostic::new(Code::InvalidTypeString, s.span, format!("invalid type `{}`: {why}", s.text))
                    .with_note("types are `string`, `integer`, `number`, `boolean`, `object`, `array`, `a|b` enums, `T[]` lists, contract names, and `T?` for optional");
                let bare = s.text.trim_end_matches('?').trim_end_matches("[]");
                if let Some(Some(_)) = self.contracts.get(bare) {
                    d = d.with_help(format!("contract `{bare}` exists, but only contracts whose names start with an uppercase letter can be used in a type"));
                } else if let Some(h) = did_you_mean(
                    bare,
                    ["string", "integer", "number", "boolean", "object", "array"],
                ) {
                    d = d.with_help(h);
                } else if matches!(bare, "int" | "float" | "str" | "bool") {
                    let m = match bare {
                        "int" => "integer",
                        "float" => "number",
                        "str" => "string",
                        _ => "boolean",
                    };
                    d = d.with_help(format!("write `{m}`"));
                }
                self.sink.push(d);
                FieldType {
                    ty: Ty::Error,
                    optional: true,
                }
            }
            Ok((expr, optional)) => FieldType {
                ty: self.resolve_type(&expr, s, named),
                optional,
            },
        }
    }

    fn resolve_type(
        &mut self,
        t: &TypeExpr,
        s: &crate::yaml::Str,
        named: &mut Vec<(usize, String, Span)>,
    ) -> Ty {
        match t {
            TypeExpr::String => Ty::String,
            TypeExpr::Integer => Ty::Integer,
            TypeExpr::Number => Ty::Number,
            TypeExpr::Boolean => Ty::Boolean,
            TypeExpr::Object => Ty::Object,
            TypeExpr::Array => Ty::Array,
            TypeExpr::Enum(v) => Ty::Enum(v.clone()),
            TypeExpr::List(inner) => Ty::List(Box::new(self.resolve_type(inner, s, named))),
            TypeExpr::Named(n) => match self.contracts.get(n.as_str()) {
                Some(Some(id)) => {
                    named.push((*id, String::new(), s.span));
                    Ty::Record(*id)
                }
                Some(None) => Ty::Error,
                None => {
                    self.unknown_contract(n, s.span);
                    Ty::Error
                }
            },
        }
    }

    fn unknown_contract(&mut self, name: &str, span: Span) {
        if self.spec.contracts_broken {
            return; // the broken `contracts` section is already reported
        }
        let names: Vec<&str> = self
            .spec
            .contracts
            .iter()
            .map(|c| c.name.text.as_str())
            .collect();
        let help = did_you_mean(name, names.iter().copied());
        let d = Diagnostic::new(
            Code::UnknownContract,
            span,
            format!("unknown contract `{name}`"),
        )
        .with_note(if names.is_empty() {
            "the spec declares no contracts".to_string()
        } else {
            format!("declared contracts: {}", names.join(", "))
        })
        .with_help_opt(help.or_else(|| {
            Some(format!(
                "declare it under `contracts:` as `{name}: {{field: type}}`"
            ))
        }));
        self.sink.push(d);
    }

    /// Looks up a contract named by `out:` or `output.contract` (any declared name).
    pub(super) fn contract_named(&mut self, n: &ast::Name) -> Option<Option<RecordId>> {
        match self.contracts.get(n.text.as_str()) {
            Some(r) => Some(*r),
            None => {
                self.unknown_contract(&n.text, n.span);
                None
            }
        }
    }
}
