//! Builtin calls: the function exists, its arity, its argument types, and
//! the static check of a literal `matches` pattern.
//!
//! Owns: the type of each builtin's result and what its arguments must be.
//! Must never: hold the builtin table (the VM's `BUILTINS` is the one
//! source) or the pattern rule (`stratum_vm::eval::regex`).

use stratum_grammar::{Expr, ExprKind};

use super::{BUILTINS, Walk};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::types::Type;

impl Walk<'_, '_, '_> {
    /// A call: the callee, its arity, then its argument types.
    pub(super) fn call(
        &mut self,
        callee: &str,
        callee_span: stratum_grammar::Span,
        args: &[Expr],
        whole: &Expr,
    ) -> Type {
        let arg_types: Vec<Type> = args.iter().map(|a| self.ty(a)).collect();
        let Some(arity) = BUILTINS
            .iter()
            .find(|(n, _)| *n == callee)
            .map(|&(_, a)| usize::from(a))
        else {
            self.unknown_function(callee, callee_span);
            return Type::Any;
        };
        if args.len() != arity {
            self.wrong_arity(callee, arity, args.len(), whole);
            return match callee {
                "str" => Type::String,
                "int" | "len" => Type::Number,
                "max" | "min" => Type::Any,
                _ => Type::Bool,
            };
        }
        if callee.starts_with("file_") || callee == "matches" {
            self.dynamic = true;
        }
        self.builtin(callee, args, &arg_types)
    }

    fn unknown_function(&mut self, callee: &str, raw_span: stratum_grammar::Span) {
        let help = did_you_mean(callee, BUILTINS.iter().map(|(n, _)| *n));
        self.push(
            Diagnostic::new(
                Code::UnknownFunction,
                self.span(raw_span),
                format!("unknown function `{callee}`"),
            )
            .with_note(format!(
                "the functions are: {}",
                BUILTINS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .with_help_opt(help),
        );
    }

    fn wrong_arity(&mut self, callee: &str, arity: usize, given: usize, whole: &Expr) {
        let whole_span = self.span(whole.span);
        self.push(Diagnostic::new(
            Code::WrongArity,
            whole_span,
            format!(
                "`{callee}` takes {arity} argument{}, but {given} {} given",
                if arity == 1 { "" } else { "s" },
                if given == 1 { "was" } else { "were" }
            ),
        ));
    }

    /// The result type of a known builtin called with the right number of
    /// arguments, reporting arguments of the wrong type.
    fn builtin(&mut self, callee: &str, args: &[Expr], arg_types: &[Type]) -> Type {
        let a0 = &arg_types[0];
        match callee {
            "len" => {
                if bad(a0, &|t| {
                    t.is_stringy() || t.is_objecty() || matches!(t, Type::List(_))
                }) {
                    self.operand_error(&args[0], a0, "`len` needs a string, a list or an object");
                }
                Type::Number
            }
            "any" | "all" => {
                if bad(a0, &|t| matches!(t, Type::List(_))) {
                    self.operand_error(&args[0], a0, &format!("`{callee}` needs a list"));
                }
                Type::Bool
            }
            "max" | "min" => self.extreme(callee, &args[0], a0),
            "str" => Type::String,
            "int" => {
                if bad(a0, &|t| {
                    matches!(t, Type::Bool | Type::Number) || t.is_stringy()
                }) {
                    self.operand_error(&args[0], a0, "`int` needs a boolean, a number or a string");
                }
                Type::Number
            }
            "bool" => Type::Bool,
            _ => {
                self.string_arguments(callee, args, arg_types);
                Type::Bool
            }
        }
    }

    /// `max` / `min`: the element type of a list of numbers or strings.
    fn extreme(&mut self, callee: &str, arg: &Expr, t: &Type) -> Type {
        match t {
            Type::List(inner) => match **inner {
                Type::Number | Type::String | Type::Enum(_) | Type::Any => (**inner).clone(),
                _ => {
                    self.operand_error(
                        arg,
                        t,
                        &format!("`{callee}` needs a list of numbers or of strings"),
                    );
                    Type::Any
                }
            },
            Type::Any => Type::Any,
            other => {
                self.operand_error(arg, other, &format!("`{callee}` needs a list"));
                Type::Any
            }
        }
    }

    /// `matches`, `file_exists`, `file_contains`: string arguments, and a
    /// literal `matches` pattern that passes the safe-shape filter.
    fn string_arguments(&mut self, callee: &str, args: &[Expr], arg_types: &[Type]) {
        for (a, t) in args.iter().zip(arg_types) {
            if bad(t, &|t| t.is_stringy()) {
                self.operand_error(a, t, &format!("`{callee}` needs string arguments"));
            }
        }
        if callee == "matches"
            && let ExprKind::String(pattern) = &args[1].kind
            && let Err(why) = crate::check::regex_check(pattern)
        {
            let span = self.span(args[1].span);
            self.push(Diagnostic::new(
                Code::InvalidRegex,
                span,
                format!("this `matches` pattern can never be used: {why}"),
            ));
        }
    }
}

/// A known type that `ok` refuses (`any` is never bad).
fn bad(t: &Type, ok: &dyn Fn(&Type) -> bool) -> bool {
    !matches!(t, Type::Any) && !ok(t)
}
