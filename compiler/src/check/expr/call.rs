//! Builtin calls: the function exists, its arity, its argument types, and
//! the static check of a literal `matches` pattern; lambdas (X3): where
//! they may stand, their parameter's type and scope, their body's type; the
//! fields of a `file(path)` value.
//!
//! Owns: the type of each builtin's result and what its arguments must be;
//! the lambda rules (S0619 placement, S0620 shadowing: a parameter may not
//! reuse a binding's name or an enclosing parameter's, S0621 boolean
//! bodies).
//! Must never: hold the builtin table (the VM's `BUILTINS` is the one
//! source) or the pattern rule (`stratum_vm::eval::regex`).

use stratum_grammar::{Expr, ExprKind};
use stratum_vm::plan::op;

use super::{BUILTINS, Walk};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::types::Type;

/// Names a lambda parameter may not take: the bindings of expressions.
const BINDINGS: &[&str] = &["result", "input", "item", "prev", "steps"];

impl Walk<'_, '_, '_> {
    /// A call: the callee, its arity, then its argument types.
    pub(super) fn call(
        &mut self,
        callee: &str,
        callee_span: stratum_grammar::Span,
        args: &[Expr],
        whole: &Expr,
    ) -> Type {
        if let Some(lambda) = args.last().filter(|a| is_lambda(a))
            && op::LAMBDA_FORMS.contains(&callee)
        {
            return self.lambda_form(callee, args, lambda, whole);
        }
        let arg_types: Vec<Type> = args
            .iter()
            .map(|a| {
                if is_lambda(a) {
                    self.misplaced_lambda(a, Some(callee));
                    Type::Any
                } else {
                    self.ty(a)
                }
            })
            .collect();
        let Some(arity) = BUILTINS.iter().find(|(n, _)| *n == callee).map(|&(_, a)| a) else {
            self.unknown_function(callee, callee_span);
            return Type::Any;
        };
        if args.iter().any(is_lambda) {
            // one root cause: the misplaced lambda, reported above
            return fallback(callee);
        }
        if op::lambda_only(callee) {
            self.needs_lambda(callee, whole);
            return fallback(callee);
        }
        if !op::arity_accepts(arity, args.len()) {
            self.wrong_arity(callee, arity, args.len(), whole);
            return fallback(callee);
        }
        if callee.starts_with("file") || callee == "matches" || callee == "glob" {
            self.dynamic = true;
        }
        if callee == "receipts" {
            self.dynamic = true;
            return self.receipts(whole);
        }
        if callee == "changes" {
            self.dynamic = true;
            if !self.ck.changes_allowed {
                let span = self.span(whole.span);
                self.ck.changes_outside_scope(span, self.scope.field);
            }
        }
        self.builtin(callee, args, &arg_types)
    }

    /// The type of lambda parameter `name` when one is in scope.
    pub(super) fn param(&self, name: &str) -> Option<Type> {
        self.params
            .iter()
            .rev()
            .find(|(p, _)| p == name)
            .map(|(_, t)| t.clone())
    }

    /// `all`/`any`/`count`/`filter`/`map` with a lambda as the last argument.
    fn lambda_form(&mut self, callee: &str, args: &[Expr], lambda: &Expr, whole: &Expr) -> Type {
        let ExprKind::Lambda {
            param,
            param_span,
            body,
        } = &lambda.kind
        else {
            return Type::Any;
        };
        if args.len() != 2 {
            self.wrong_arity(callee, 2, args.len(), whole);
            return fallback(callee);
        }
        let list = self.ty(&args[0]);
        let element = match &list {
            Type::List(inner) => (**inner).clone(),
            Type::Any => Type::Any,
            other => {
                self.operand_error(&args[0], other, &format!("`{callee}` needs a list"));
                Type::Any
            }
        };
        self.check_param(param, *param_span);
        // hover on the parameter shows the element type
        let kind = crate::check::FactKind::Binding(param.clone());
        self.ck.fact_at(
            self.scalar,
            (param_span.start, param_span.end),
            kind,
            &element,
        );
        self.params.push((param.clone(), element.clone()));
        let body_ty = self.ty(body);
        self.params.pop();
        if callee != "map" && !matches!(body_ty, Type::Bool | Type::Any) {
            let span = self.span(body.span);
            let shown = self.show(&body_ty);
            self.push(
                Diagnostic::new(
                    Code::LambdaBodyType,
                    span,
                    format!("the lambda of `{callee}` must give a boolean, but its body is {shown}"),
                )
                .with_span_label(format!("this is {shown}"))
                .with_help(format!(
                    "compare the element, for example `{callee}(xs, {param} -> {param}.ok == true)`; `map` takes any body"
                )),
            );
        }
        match callee {
            "count" => Type::Number,
            "filter" => Type::List(Box::new(element)),
            "map" => Type::List(Box::new(body_ty)),
            _ => Type::Bool,
        }
    }

    /// S0620: a parameter named like a binding or an enclosing parameter.
    fn check_param(&mut self, param: &str, raw_span: stratum_grammar::Span) {
        let hides = if BINDINGS.contains(&param) {
            Some("the binding")
        } else if self.param(param).is_some() {
            Some("the enclosing lambda's parameter")
        } else {
            None
        };
        if let Some(what) = hides {
            let span = self.span(raw_span);
            self.push(
                Diagnostic::new(
                    Code::LambdaShadows,
                    span,
                    format!("the lambda parameter `{param}` hides {what} `{param}`"),
                )
                .with_note("inside the body the name would mean only the element, which is easy to misread")
                .with_help(format!("give the parameter another name, such as `{}`", fresh(param))),
            );
        }
    }

    /// S0619: a lambda where none may stand.
    pub(super) fn misplaced_lambda(&mut self, lambda: &Expr, callee: Option<&str>) {
        let span = self.span(lambda.span);
        let message = match callee {
            Some(c) if op::LAMBDA_FORMS.contains(&c) => {
                format!("a lambda can only be the last argument of `{c}`")
            }
            Some(c) => format!("`{c}` takes no lambda"),
            None => "a lambda cannot stand here".to_owned(),
        };
        self.push(
            Diagnostic::new(Code::MisplacedLambda, span, message)
                .with_note("lambdas `p -> body` are the last argument of `all`, `any`, `count`, `filter` and `map`")
                .with_help("write the list first and the lambda last, for example `all(result.items, p -> p.ok)`"),
        );
    }

    /// `count`, `filter`, `map` called without a lambda.
    fn needs_lambda(&mut self, callee: &str, whole: &Expr) {
        let span = self.span(whole.span);
        self.push(
            Diagnostic::new(
                Code::WrongArity,
                span,
                format!("`{callee}` takes a list and a lambda"),
            )
            .with_help(format!("for example `{callee}(result.items, p -> p.ok)`")),
        );
    }

    /// The type of `file(path).name`, checking the name (`None`: not a
    /// `file()` value).
    pub(super) fn file_member(
        &mut self,
        object: &Expr,
        name: &str,
        raw_span: stratum_grammar::Span,
    ) -> Option<Type> {
        let mut inner = object;
        while let ExprKind::Paren(e) = &inner.kind {
            inner = e;
        }
        if !matches!(&inner.kind, ExprKind::Call { callee, .. } if callee == "file") {
            return None;
        }
        Some(match name {
            "exists" => Type::Bool,
            "size" => Type::Number,
            "text" | "sha256" => Type::String,
            "json" => Type::Any,
            _ => {
                let fields = stratum_vm::eval::FILE_FIELDS;
                let help = did_you_mean(name, fields.iter().copied());
                self.push(
                    Diagnostic::new(
                        Code::UnknownMember,
                        self.span(raw_span),
                        format!("a `file()` value has no field `{name}`"),
                    )
                    .with_note(format!("it has: {}", fields.join(", ")))
                    .with_help_opt(help),
                );
                Type::Any
            }
        })
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

    fn wrong_arity(&mut self, callee: &str, arity: u8, given: usize, whole: &Expr) {
        let whole_span = self.span(whole.span);
        let takes = if arity == op::VARIADIC {
            "at least 1 argument".to_owned()
        } else {
            format!("{arity} argument{}", if arity == 1 { "" } else { "s" })
        };
        self.push(Diagnostic::new(
            Code::WrongArity,
            whole_span,
            format!(
                "`{callee}` takes {takes}, but {given} {} given",
                if given == 1 { "was" } else { "were" }
            ),
        ));
    }

    /// The result type of a known builtin called with the right number of
    /// arguments, reporting arguments of the wrong type.
    fn builtin(&mut self, callee: &str, args: &[Expr], arg_types: &[Type]) -> Type {
        // `changes()` (X11) is the one builtin without arguments
        let Some(a0) = arg_types.first() else {
            return fallback(callee);
        };
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
            "unique" => {
                if bad(a0, &|t| matches!(t, Type::List(_))) {
                    self.operand_error(&args[0], a0, "`unique` needs a list");
                }
                a0.clone()
            }
            "keys" => {
                if bad(a0, &|t| t.is_objecty()) {
                    self.operand_error(&args[0], a0, "`keys` needs an object");
                }
                Type::List(Box::new(Type::String))
            }
            "coalesce" => coalesced(arg_types),
            "digest" => Type::String,
            "file" | "glob" => {
                if bad(a0, &|t| t.is_stringy()) {
                    self.operand_error(&args[0], a0, &format!("`{callee}` needs a string"));
                }
                if callee == "file" {
                    Type::Object
                } else {
                    Type::List(Box::new(Type::String))
                }
            }
            _ => {
                self.string_arguments(callee, args, arg_types);
                Type::Bool
            }
        }
    }

    /// `receipts()` (X12): the receipts of this attempt's `exec` checks, so
    /// bound only in an `ensure` expression (S0337 elsewhere).
    fn receipts(&mut self, whole: &Expr) -> Type {
        if self.scope.field != "ensure" {
            let span = self.span(whole.span);
            let field = self.scope.field;
            self.push(
                Diagnostic::new(
                    Code::ReceiptsOutsideEnsure,
                    span,
                    format!("`receipts()` is only bound in an `ensure` expression, not in `{field}`"),
                )
                .with_note("it lists the receipts of the `exec` checks of the attempt being checked; elsewhere there is no attempt")
                .with_help("move the condition into the step's `ensure` list, after its `exec` checks"),
            );
        }
        Type::List(Box::new(Type::Object))
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

fn is_lambda(e: &Expr) -> bool {
    matches!(e.kind, ExprKind::Lambda { .. })
}

/// The result type of a call whose arguments are wrong.
fn fallback(callee: &str) -> Type {
    match callee {
        "str" | "digest" => Type::String,
        "int" | "len" | "count" => Type::Number,
        "max" | "min" | "coalesce" | "unique" | "file" | "filter" | "map" => Type::Any,
        "keys" | "glob" => Type::List(Box::new(Type::String)),
        "receipts" => Type::List(Box::new(Type::Object)),
        "changes" => changes_type(),
        _ => Type::Bool,
    }
}

/// `changes()` (X11): a list of `{path, status, bytes}` objects.
fn changes_type() -> Type {
    Type::List(Box::new(Type::Object))
}

/// `coalesce`: the arguments' type when all non-null ones agree, else any.
fn coalesced(types: &[Type]) -> Type {
    let mut known = types.iter().filter(|t| !matches!(t, Type::Null));
    match known.next() {
        None => Type::Null,
        Some(first) if known.all(|t| t == first) => first.clone(),
        Some(_) => Type::Any,
    }
}

/// A parameter name that hides nothing, for the help.
fn fresh(param: &str) -> String {
    match param {
        "item" => "it".to_owned(),
        "result" | "input" | "prev" | "steps" => "x".to_owned(),
        other => format!("{other}2"),
    }
}

/// A known type that `ok` refuses (`any` is never bad).
fn bad(t: &Type, ok: &dyn Fn(&Type) -> bool) -> bool {
    !matches!(t, Type::Any) && !ok(t)
}
