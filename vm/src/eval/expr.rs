//! The expression evaluator: runs one compiled [`Chunk`] over its bindings
//! on a value stack and yields a value or a typed error (reference
//! v1-language §7.3–7.10, with decision C7: strings count and order by
//! Unicode scalar values).
//!
//! Owns: the run-time meaning of every opcode and builtin, the bindings an
//! expression sees, the error codes and their messages, the binding depth
//! limit, the size limit of the strings it builds (`+`, `str`:
//! [`value::MAX_VALUE_BYTES`], a `resource_limit` past it), and the
//! file-function seam ([`Files`]), the lambda forms (`Each` … `EachEnd`,
//! X3) with their element frames.
//! Must never: panic or index unchecked (chunks come from plan files), clone
//! a binding merely to read it (`input`, `result` and step outputs are
//! borrowed until an operation needs an owned value), materialize the step
//! map for `result.<id>` or `steps.<id>`, touch the file system itself, or recurse over a
//! value.

use std::borrow::Cow;
use std::fmt;

use super::forms::{self, Form, Frame};
use super::regex as pattern;
use super::value::{self, MAX_DEPTH, MAX_VALUE_BYTES, Value, as_number, equal, truthy, type_name};
use crate::interp::HostError;
use crate::interp::host::FileRead;
use crate::plan::op::{self, BUILTINS, Op};
use crate::plan::{Chunk, ConstDef, Plan};

/// The outputs of the steps in scope, keyed by step id (the `result` of a
/// step `when`, a `set` value and a stage `when`).
pub trait StepOutputs {
    /// The output of step `id`, if it has one.
    fn get(&self, id: &str) -> Option<&Value>;
    /// The whole map as an object (only when an expression uses `result`
    /// itself rather than `result.<id>`).
    fn to_object(&self) -> Value;
}

/// The states of the steps of a frame (X1: the `steps` binding of every
/// expression field), keyed by step id.
pub trait StepStates {
    /// `{status, output, failure, attempts}` of step `id` (`None`: no such
    /// step). Built on demand: only the steps an expression names.
    fn state(&self, id: &str) -> Option<Value>;
    /// Every step's state as one object (only when an expression uses
    /// `steps` itself rather than `steps.<id>`).
    fn to_object(&self) -> Value;
}

/// What `result` is bound to.
#[derive(Clone, Copy)]
pub enum ResultBinding<'a> {
    /// The output under test (`ensure`, `until`, stage ensures).
    Value(&'a Value),
    /// The step map (`when`, `set`, stage `when`).
    Steps(&'a dyn StepOutputs),
    /// Not bound: reading it is an `unknown_identifier`.
    Unbound,
}

/// The bindings of one evaluation.
#[derive(Clone, Copy)]
pub struct Bindings<'a> {
    /// `result`.
    pub result: ResultBinding<'a>,
    /// `input`.
    pub input: &'a Value,
    /// `item` (`None`: not bound).
    pub item: Option<&'a Value>,
    /// `prev`: `None` not bound; `Some(None)` bound without a value (the
    /// first stage), so reading it is a `type_error`.
    pub prev: Option<Option<&'a Value>>,
}

/// The file functions, answered by the host (which jails paths).
pub trait Files {
    /// `file_exists(path)`: whether it is an existing regular file. An error
    /// (bad path, escape from the jail, no root) becomes a `validation_error`
    /// with the error's text.
    fn file_exists(&mut self, path: &str) -> Result<bool, HostError>;
    /// `file_contains(path, text)`: false when missing or not a regular file.
    fn file_contains(&mut self, path: &str, text: &str) -> Result<bool, HostError>;
    /// `file(path)` (X3): what the host read under its jail.
    fn read_file(&mut self, _path: &str) -> Result<FileRead, HostError> {
        Err(HostError::Unsupported(NO_ROOT.into()))
    }
    /// `glob(pattern)` (X3): the sorted workspace paths of matching regular files.
    fn glob(&mut self, _pattern: &str) -> Result<Vec<String>, HostError> {
        Err(HostError::Unsupported(NO_ROOT.into()))
    }
    /// `receipts()` (X12): the receipts of this attempt's `exec` checks run
    /// so far, in order; only an ensure binds them.
    fn receipts(&mut self) -> Result<Value, HostError> {
        Err(HostError::Unsupported(NO_RECEIPTS.into()))
    }

    /// `changes()` (X11): the files the dispatch being checked changed
    /// since its snapshot, `[{path, status, bytes}]`.
    fn changes(&mut self) -> Result<Value, HostError> {
        Err(HostError::Unsupported(
            "`changes()` is only known in the ensure of a scoped dispatch".into(),
        ))
    }
}

/// What `receipts()` answers outside an output's checks.
pub const NO_RECEIPTS: &str = "`receipts()` is only bound in an ensure";

/// No workspace root: every file function is a `validation_error`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFiles;

/// The message of [`NoFiles`].
pub const NO_ROOT: &str = "file function requires a workspace root";

impl Files for NoFiles {
    fn file_exists(&mut self, _path: &str) -> Result<bool, HostError> {
        Err(HostError::Unsupported(NO_ROOT.into()))
    }

    fn file_contains(&mut self, _path: &str, _text: &str) -> Result<bool, HostError> {
        Err(HostError::Unsupported(NO_ROOT.into()))
    }
}

/// Why an evaluation failed. Displays as `<code>: <message>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvalError {
    /// `parse_error` (never raised at run time: the compiler parses; kept so
    /// the code list is complete).
    ParseError(String),
    /// `unknown_identifier`: a binding not available here.
    UnknownIdentifier(String),
    /// `unknown_function`.
    UnknownFunction(String),
    /// `type_error`.
    TypeError(String),
    /// `validation_error`: unsafe or invalid pattern, file function failure,
    /// reserved names, malformed bytecode.
    ValidationError(String),
    /// `resource_limit`: nesting, pattern or input length.
    ResourceLimit(String),
}

impl EvalError {
    /// Every code, in the reference's order.
    pub const CODES: &'static [&'static str] = &[
        "parse_error",
        "unknown_identifier",
        "unknown_function",
        "type_error",
        "validation_error",
        "resource_limit",
    ];

    /// The code (`type_error`, …).
    pub fn code(&self) -> &'static str {
        match self {
            EvalError::ParseError(_) => "parse_error",
            EvalError::UnknownIdentifier(_) => "unknown_identifier",
            EvalError::UnknownFunction(_) => "unknown_function",
            EvalError::TypeError(_) => "type_error",
            EvalError::ValidationError(_) => "validation_error",
            EvalError::ResourceLimit(_) => "resource_limit",
        }
    }

    /// The message without the code.
    pub fn message(&self) -> &str {
        match self {
            EvalError::ParseError(m)
            | EvalError::UnknownIdentifier(m)
            | EvalError::UnknownFunction(m)
            | EvalError::TypeError(m)
            | EvalError::ValidationError(m)
            | EvalError::ResourceLimit(m) => m,
        }
    }
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message())
    }
}

impl std::error::Error for EvalError {}

pub(super) type R<T> = Result<T, EvalError>;

pub(super) fn type_error(m: impl Into<String>) -> EvalError {
    EvalError::TypeError(m.into())
}

/// A stack slot: a borrowed or owned value, the lazily read step map
/// (`result` of `when`/`set`, or `steps`), or what `file()` read (its
/// `json` parsed only when read).
pub(super) enum Slot<'a> {
    Val(Cow<'a, Value>),
    Steps(&'a dyn StepOutputs),
    States(&'a dyn StepStates),
    File(Box<FileRead>),
}

fn depth_guard(v: &Value, limit: usize) -> R<()> {
    if value::deeper_than(v, limit) {
        Err(EvalError::ResourceLimit(format!(
            "binding value nested deeper than {MAX_DEPTH} levels"
        )))
    } else {
        Ok(())
    }
}

/// Turns the step map (or a file read) into an object (checking its
/// depth); values pass.
fn materialize(s: Slot<'_>) -> R<Cow<'_, Value>> {
    match s {
        Slot::Val(v) => Ok(v),
        Slot::Steps(steps) => {
            let o = steps.to_object();
            depth_guard(&o, MAX_DEPTH)?;
            Ok(Cow::Owned(o))
        }
        Slot::States(states) => {
            let o = states.to_object();
            depth_guard(&o, MAX_DEPTH)?;
            Ok(Cow::Owned(o))
        }
        Slot::File(f) => Ok(Cow::Owned(forms::file_object(&f))),
    }
}

fn slot_type(s: &Slot<'_>) -> &'static str {
    match s {
        Slot::Val(v) => type_name(v),
        Slot::Steps(_) | Slot::States(_) | Slot::File(_) => "object",
    }
}

fn num(n: f64, what: &str) -> R<Value> {
    value::number(n).ok_or_else(|| type_error(format!("{what} is not a finite number")))
}

/// Names the reference engine reserves (they are object-prototype members
/// there); testing them with `in` is a `validation_error`.
const RESERVED: &[&str] = &["__proto__", "constructor", "prototype"];

/// Evaluates `chunk` (of a flow of `plan`) with bindings `b` and no
/// `steps` binding (reading it is an `unknown_identifier`).
pub fn eval(
    plan: &Plan,
    chunk: &Chunk,
    b: &Bindings<'_>,
    files: &mut dyn Files,
) -> Result<Value, EvalError> {
    eval_with_steps(plan, chunk, b, None, files)
}

/// Evaluates `chunk` with bindings `b` and the `steps` binding (X1).
pub fn eval_with_steps(
    plan: &Plan,
    chunk: &Chunk,
    b: &Bindings<'_>,
    steps: Option<&dyn StepStates>,
    files: &mut dyn Files,
) -> Result<Value, EvalError> {
    Machine {
        plan,
        chunk,
        b: *b,
        steps,
        files,
        stack: Vec::with_capacity(usize::from(chunk.max_stack).min(256)),
        checked: [false; 4],
        logic: Vec::new(),
        frames: Vec::new(),
    }
    .run()
}

/// Evaluates a condition (`ensure`, `until`): the value must be a boolean,
/// else `type_error: predicate must evaluate to boolean, received <type>`.
pub fn eval_bool(
    plan: &Plan,
    chunk: &Chunk,
    b: &Bindings<'_>,
    files: &mut dyn Files,
) -> Result<bool, EvalError> {
    match eval(plan, chunk, b, files)? {
        Value::Bool(v) => Ok(v),
        other => Err(type_error(format!(
            "predicate must evaluate to boolean, received {}",
            type_name(&other)
        ))),
    }
}

struct Machine<'a, 'p> {
    plan: &'p Plan,
    chunk: &'p Chunk,
    b: Bindings<'a>,
    steps: Option<&'a dyn StepStates>,
    files: &'p mut dyn Files,
    stack: Vec<Slot<'a>>,
    /// Depth already checked: result, input, item, prev.
    checked: [bool; 4],
    /// Pending `&&` (true) / `||` (false) right sides, for messages.
    logic: Vec<bool>,
    /// The open lambda forms, innermost last.
    frames: Vec<Frame<'a>>,
}

fn malformed(pc: usize, what: &str) -> EvalError {
    EvalError::ValidationError(format!("malformed bytecode at {pc}: {what}"))
}

impl<'a> Machine<'a, '_> {
    fn pop(&mut self, pc: usize) -> R<Slot<'a>> {
        self.stack
            .pop()
            .ok_or_else(|| malformed(pc, "stack underflow"))
    }

    fn pop_val(&mut self, pc: usize) -> R<Cow<'a, Value>> {
        let s = self.pop(pc)?;
        materialize(s)
    }

    fn push(&mut self, v: Value) {
        self.stack.push(Slot::Val(Cow::Owned(v)));
    }

    fn binding(&mut self, which: usize, v: &'a Value) -> R<Slot<'a>> {
        if !self.checked[which] {
            depth_guard(v, MAX_DEPTH)?;
            self.checked[which] = true;
        }
        Ok(Slot::Val(Cow::Borrowed(v)))
    }

    fn run(mut self) -> R<Value> {
        let chunk = self.chunk;
        let plan = self.plan;
        let code = &chunk.code;
        let mut pc = 0usize;
        loop {
            let i = op::decode(code, pc).map_err(|e| malformed(pc, &format!("{e:?}")))?;
            let mut next = pc + i.len;
            match i.op {
                Op::Return => {
                    let v = self.pop_val(pc)?;
                    return Ok(v.into_owned());
                }
                Op::LoadResult => {
                    let s = match self.b.result {
                        ResultBinding::Value(v) => self.binding(0, v)?,
                        ResultBinding::Steps(s) => Slot::Steps(s),
                        ResultBinding::Unbound => {
                            return Err(EvalError::UnknownIdentifier(
                                "`result` is not available here".into(),
                            ));
                        }
                    };
                    self.stack.push(s);
                }
                Op::LoadInput => {
                    let s = self.binding(1, self.b.input)?;
                    self.stack.push(s);
                }
                Op::LoadItem => {
                    let Some(v) = self.b.item else {
                        return Err(EvalError::UnknownIdentifier(
                            "`item` is not available here".into(),
                        ));
                    };
                    let s = self.binding(2, v)?;
                    self.stack.push(s);
                }
                Op::LoadPrev => {
                    let v = match self.b.prev {
                        None => {
                            return Err(EvalError::UnknownIdentifier(
                                "`prev` is not available here".into(),
                            ));
                        }
                        Some(None) => {
                            return Err(type_error(
                                "`prev` is not a JSON value (the first stage has no previous stage)",
                            ));
                        }
                        Some(Some(v)) => v,
                    };
                    let s = self.binding(3, v)?;
                    self.stack.push(s);
                }
                Op::LoadSteps => {
                    let Some(states) = self.steps else {
                        return Err(EvalError::UnknownIdentifier(
                            "`steps` is not available here".into(),
                        ));
                    };
                    self.stack.push(Slot::States(states));
                }
                Op::Const => {
                    let v = match chunk.consts.get(i.args[0] as usize) {
                        Some(ConstDef::Null) => Value::Null,
                        Some(ConstDef::Bool(b)) => Value::Bool(*b),
                        Some(ConstDef::Number(n)) => {
                            value::number(*n).ok_or_else(|| malformed(pc, "non-finite constant"))?
                        }
                        Some(ConstDef::Str(s)) => match plan.strings.get(*s as usize) {
                            Some(s) => Value::String(s.clone()),
                            None => return Err(malformed(pc, "string out of range")),
                        },
                        None => return Err(malformed(pc, "constant out of range")),
                    };
                    self.push(v);
                }
                Op::Field => {
                    let Some(name) = plan.strings.get(i.args[0] as usize) else {
                        return Err(malformed(pc, "string out of range"));
                    };
                    let top = self.pop(pc)?;
                    let s = field(top, name)?;
                    self.stack.push(s);
                }
                Op::Index => {
                    let top = self.pop(pc)?;
                    let s = index(top, i.args[0] as usize)?;
                    self.stack.push(s);
                }
                Op::Not => match *self.pop_val(pc)? {
                    Value::Bool(b) => self.push(Value::Bool(!b)),
                    ref other => {
                        return Err(type_error(format!(
                            "`!` needs a boolean, found {}",
                            type_name(other)
                        )));
                    }
                },
                Op::Neg => {
                    let v = self.pop_val(pc)?;
                    match as_number(&v) {
                        Some(n) => self.push(num(-n, "`-` result")?),
                        None => {
                            return Err(type_error(format!(
                                "unary `-` needs a number, found {}",
                                type_name(&v)
                            )));
                        }
                    }
                }
                Op::Add | Op::Sub | Op::Mul | Op::Div => {
                    let r = self.pop_val(pc)?;
                    let l = self.pop_val(pc)?;
                    let v = arith(i.op, l, &r)?;
                    self.push(v);
                }
                Op::Eq | Op::Ne => {
                    let r = self.pop_val(pc)?;
                    let l = self.pop_val(pc)?;
                    let same = equal(&l, &r);
                    self.push(Value::Bool(same == (i.op == Op::Eq)));
                }
                Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                    let r = self.pop_val(pc)?;
                    let l = self.pop_val(pc)?;
                    let v = compare(i.op, &l, &r)?;
                    self.push(Value::Bool(v));
                }
                Op::In => {
                    let r = self.pop(pc)?;
                    let l = self.pop_val(pc)?;
                    let v = contains(&l, r)?;
                    self.push(Value::Bool(v));
                }
                Op::AndJump | Op::OrJump => {
                    let is_and = i.op == Op::AndJump;
                    let b = match self.stack.last() {
                        Some(Slot::Val(v)) => match **v {
                            Value::Bool(b) => Ok(b),
                            ref other => Err(type_name(other)),
                        },
                        Some(Slot::Steps(_) | Slot::States(_) | Slot::File(_)) => Err("object"),
                        None => return Err(malformed(pc, "stack underflow")),
                    };
                    let b = b.map_err(|found| logic_error(Some(is_and), found))?;
                    if b != is_and {
                        // `false && …` / `true || …`: keep the value, skip the right side
                        next += i.args[0] as usize;
                    } else {
                        self.stack.pop();
                        self.logic.push(is_and);
                    }
                }
                Op::CheckBool => {
                    let which = self.logic.pop();
                    match self.stack.last() {
                        Some(Slot::Val(v)) if matches!(**v, Value::Bool(_)) => {}
                        Some(s) => return Err(logic_error(which, slot_type(s))),
                        None => return Err(malformed(pc, "stack underflow")),
                    }
                }
                Op::Call => {
                    let (f, argc) = (i.args[0] as usize, i.args[1] as usize);
                    if argc > self.stack.len() {
                        return Err(malformed(pc, "stack underflow"));
                    }
                    let slots = self.stack.split_off(self.stack.len() - argc);
                    let mut args = Vec::with_capacity(argc);
                    for s in slots {
                        args.push(materialize(s)?);
                    }
                    let s = self.call(f, &args)?;
                    self.stack.push(s);
                }
                Op::Each => next = self.each(pc, &i)?,
                Op::EachEnd => next = self.each_end(pc, next)?,
                Op::Param => {
                    let s = self.param(pc, i.args[0] as usize)?;
                    self.stack.push(s);
                }
            }
            pc = next;
        }
    }

    /// A builtin through `Call`; `file()` answers a lazy slot.
    fn call(&mut self, f: usize, args: &[Cow<'a, Value>]) -> R<Slot<'a>> {
        let Some(&(name, arity)) = BUILTINS.get(f) else {
            return Err(EvalError::UnknownFunction(format!("unknown function #{f}")));
        };
        if !op::arity_accepts(arity, args.len()) || op::lambda_only(name) {
            return Err(type_error(format!(
                "{name} expects {arity} argument(s), received {}",
                args.len()
            )));
        }
        match name {
            "file" => forms::file(&mut *self.files, &args[0]).map(|f| Slot::File(Box::new(f))),
            "coalesce" => Ok(Slot::Val(forms::coalesce(args))),
            "receipts" => self
                .files
                .receipts()
                .map(|v| Slot::Val(Cow::Owned(v)))
                .map_err(|e| EvalError::ValidationError(e.to_string())),
            _ => self
                .call_value(name, args)
                .map(|v| Slot::Val(Cow::Owned(v))),
        }
    }

    /// Opens a lambda form over the list on top: its frame, or (for an
    /// empty list) the result at once. Answers the next pc.
    fn each(&mut self, pc: usize, i: &op::Instr) -> R<usize> {
        let name = BUILTINS.get(i.args[0] as usize).map_or("?", |b| b.0);
        let form =
            Form::of(name).ok_or_else(|| malformed(pc, "`Each` of a builtin without a lambda"))?;
        let list = self.pop_val(pc)?;
        let after = pc + i.len + i.args[1] as usize;
        match Frame::open(form, list, pc + i.len, after)? {
            Ok(frame) => {
                self.frames.push(frame);
                Ok(pc + i.len)
            }
            Err(result) => {
                self.push(result);
                Ok(after)
            }
        }
    }

    /// Folds the body's value into the innermost form; back to the body for
    /// the next element, or its result pushed and on past `next`.
    fn each_end(&mut self, pc: usize, next: usize) -> R<usize> {
        let v = self.pop_val(pc)?;
        let frame = self
            .frames
            .last_mut()
            .ok_or_else(|| malformed(pc, "`EachEnd` outside a lambda"))?;
        if frame.after != next {
            return Err(malformed(pc, "`EachEnd` does not close its `Each`"));
        }
        match frame.fold(v)? {
            Some(body) => Ok(body),
            None => {
                let frame = self
                    .frames
                    .pop()
                    .ok_or_else(|| malformed(pc, "`EachEnd` outside a lambda"))?;
                self.push(frame.finish());
                Ok(next)
            }
        }
    }

    /// The element lambda `outward` (0: the innermost) is at.
    fn param(&mut self, pc: usize, outward: usize) -> R<Slot<'a>> {
        let at = self
            .frames
            .len()
            .checked_sub(outward + 1)
            .ok_or_else(|| malformed(pc, "`Param` outside its lambda"))?;
        let v = self.frames[at]
            .element()
            .ok_or_else(|| malformed(pc, "`Param` past the end of its list"))?;
        Ok(Slot::Val(v))
    }

    fn call_value(&mut self, name: &str, args: &[Cow<'a, Value>]) -> R<Value> {
        if name == "changes" {
            return self
                .files
                .changes()
                .map_err(|e| EvalError::ValidationError(e.to_string()));
        }
        let Some(a0) = args.first().map(|a| &**a) else {
            return Err(type_error(format!("`{name}` needs an argument")));
        };
        let found = |v: &Value| type_name(v);
        match name {
            "len" => {
                let n = match a0 {
                    Value::String(s) => s.chars().count(),
                    Value::Array(a) => a.len(),
                    Value::Object(o) => o.len(),
                    other => {
                        return Err(type_error(format!(
                            "`len` needs a string, an array or an object, found {}",
                            found(other)
                        )));
                    }
                };
                Ok(Value::from(n as u64))
            }
            "any" | "all" => {
                let Value::Array(items) = a0 else {
                    return Err(type_error(format!(
                        "`{name}` needs an array, found {}",
                        found(a0)
                    )));
                };
                Ok(Value::Bool(if name == "any" {
                    items.iter().any(truthy)
                } else {
                    items.iter().all(truthy)
                }))
            }
            "max" | "min" => extreme(name, a0),
            "str" => value::js_string_within(a0, MAX_VALUE_BYTES)
                .map(Value::String)
                .ok_or_else(|| EvalError::ResourceLimit(value::too_large_message("`str`", None))),
            "int" => int(a0),
            "bool" => Ok(Value::Bool(truthy(a0))),
            "matches" => {
                let a1: &Value = &args[1];
                let (Value::String(s), Value::String(p)) = (a0, a1) else {
                    return Err(type_error(format!(
                        "`matches` needs two strings, found {} and {}",
                        found(a0),
                        found(a1)
                    )));
                };
                matches(s, p)
            }
            "file_exists" => {
                let Value::String(p) = a0 else {
                    return Err(type_error(format!(
                        "`file_exists` needs a string path, found {}",
                        found(a0)
                    )));
                };
                self.files
                    .file_exists(p)
                    .map(Value::Bool)
                    .map_err(|e| EvalError::ValidationError(e.to_string()))
            }
            "file_contains" => {
                let a1: &Value = &args[1];
                let (Value::String(p), Value::String(t)) = (a0, a1) else {
                    return Err(type_error(format!(
                        "`file_contains` needs two strings, found {} and {}",
                        found(a0),
                        found(a1)
                    )));
                };
                self.files
                    .file_contains(p, t)
                    .map(Value::Bool)
                    .map_err(|e| EvalError::ValidationError(e.to_string()))
            }
            "unique" => forms::unique(a0),
            "keys" => forms::keys(a0),
            "digest" => forms::digest(a0),
            "glob" => forms::glob(&mut *self.files, a0),
            other => Err(EvalError::UnknownFunction(format!(
                "unknown function `{other}`"
            ))),
        }
    }
}

fn logic_error(is_and: Option<bool>, found: &str) -> EvalError {
    let op = match is_and {
        Some(true) => "`&&`",
        Some(false) => "`||`",
        None => "`&&` and `||`",
    };
    type_error(format!("{op} needs booleans, found {found}"))
}

fn field<'a>(top: Slot<'a>, name: &str) -> R<Slot<'a>> {
    let missing = || type_error(format!("no field `{name}`"));
    let not_object =
        |v: &Value| type_error(format!("cannot read field `{name}` of {}", type_name(v)));
    match top {
        Slot::File(f) => forms::file_field(&f, name).map(|v| Slot::Val(Cow::Owned(v))),
        Slot::Steps(steps) => {
            let v = steps.get(name).ok_or_else(missing)?;
            // the step map itself is one level
            depth_guard(v, MAX_DEPTH - 1)?;
            Ok(Slot::Val(Cow::Borrowed(v)))
        }
        Slot::States(states) => {
            let v = states
                .state(name)
                .ok_or_else(|| type_error(format!("no step `{name}`")))?;
            // the step map and the state object are two levels
            depth_guard(&v, MAX_DEPTH - 2)?;
            Ok(Slot::Val(Cow::Owned(v)))
        }
        Slot::Val(Cow::Borrowed(v)) => match v {
            Value::Object(o) => o
                .get(name)
                .map(|v| Slot::Val(Cow::Borrowed(v)))
                .ok_or_else(missing),
            other => Err(not_object(other)),
        },
        Slot::Val(Cow::Owned(v)) => match v {
            Value::Object(mut o) => o
                .remove(name)
                .map(|v| Slot::Val(Cow::Owned(v)))
                .ok_or_else(missing),
            other => Err(not_object(&other)),
        },
    }
}

fn index(top: Slot<'_>, i: usize) -> R<Slot<'_>> {
    let out_of_range = |len: usize| {
        type_error(format!(
            "index {i} is out of range for an array of length {len}"
        ))
    };
    let not_array = |t: &str| type_error(format!("cannot index {t}: only arrays have elements"));
    match top {
        Slot::Steps(_) | Slot::States(_) | Slot::File(_) => Err(not_array("object")),
        Slot::Val(Cow::Borrowed(v)) => match v {
            Value::Array(a) => a
                .get(i)
                .map(|v| Slot::Val(Cow::Borrowed(v)))
                .ok_or_else(|| out_of_range(a.len())),
            other => Err(not_array(type_name(other))),
        },
        Slot::Val(Cow::Owned(v)) => match v {
            Value::Array(mut a) if i < a.len() => Ok(Slot::Val(Cow::Owned(a.swap_remove(i)))),
            Value::Array(a) => Err(out_of_range(a.len())),
            other => Err(not_array(type_name(&other))),
        },
    }
}

fn symbol(op: Op) -> &'static str {
    match op {
        Op::Add => "+",
        Op::Sub => "-",
        Op::Mul => "*",
        Op::Div => "/",
        Op::Lt => "<",
        Op::Le => "<=",
        Op::Gt => ">",
        _ => ">=",
    }
}

fn arith(op: Op, l: Cow<'_, Value>, r: &Value) -> R<Value> {
    let sym = symbol(op);
    if op == Op::Add
        && let Value::String(b) = r
    {
        if let Value::String(a) = &*l {
            concat_fits(a, b)?;
        }
        return match l {
            Cow::Owned(Value::String(mut a)) => {
                a.push_str(b);
                Ok(Value::String(a))
            }
            Cow::Borrowed(Value::String(a)) => Ok(Value::String(format!("{a}{b}"))),
            other => Err(type_error(format!(
                "`+` needs two numbers or two strings, found {} and string",
                type_name(&other)
            ))),
        };
    }
    let (Some(a), Some(b)) = (as_number(&l), as_number(r)) else {
        let want = if op == Op::Add {
            "two numbers or two strings"
        } else {
            "numbers"
        };
        return Err(type_error(format!(
            "`{sym}` needs {want}, found {} and {}",
            type_name(&l),
            type_name(r)
        )));
    };
    let n = match op {
        Op::Add => a + b,
        Op::Sub => a - b,
        Op::Mul => a * b,
        _ => {
            if b == 0.0 {
                return Err(type_error("division by zero"));
            }
            a / b
        }
    };
    num(n, &format!("the result of `{sym}`"))
}

/// Whether `a + b` stays within [`MAX_VALUE_BYTES`] (checked before the
/// string is built).
fn concat_fits(a: &str, b: &str) -> R<()> {
    let len = a.len().saturating_add(b.len());
    if len > MAX_VALUE_BYTES {
        return Err(EvalError::ResourceLimit(value::too_large_message(
            "`+`",
            Some(len),
        )));
    }
    Ok(())
}

fn compare(op: Op, l: &Value, r: &Value) -> R<bool> {
    use std::cmp::Ordering;
    let ord = match (l, r) {
        (Value::Number(_), Value::Number(_)) => {
            let (a, b) = (as_number(l), as_number(r));
            a.partial_cmp(&b)
        }
        // UTF-8 byte order is code point order (decision C7)
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    };
    let Some(ord) = ord else {
        return Err(type_error(format!(
            "`{}` needs two numbers or two strings, found {} and {}",
            symbol(op),
            type_name(l),
            type_name(r)
        )));
    };
    Ok(match op {
        Op::Lt => ord == Ordering::Less,
        Op::Le => ord != Ordering::Greater,
        Op::Gt => ord == Ordering::Greater,
        _ => ord != Ordering::Less,
    })
}

fn contains(needle: &Value, hay: Slot<'_>) -> R<bool> {
    let key = |needle: &Value| -> R<String> {
        match needle {
            Value::String(k) if RESERVED.contains(&k.as_str()) => Err(EvalError::ValidationError(
                format!("`{k}` is a reserved name"),
            )),
            Value::String(k) => Ok(k.clone()),
            other => Err(type_error(format!(
                "`in` on an object needs a string key on the left, found {}",
                type_name(other)
            ))),
        }
    };
    match hay {
        Slot::Steps(steps) => Ok(steps.get(&key(needle)?).is_some()),
        Slot::States(states) => Ok(states.state(&key(needle)?).is_some()),
        Slot::File(_) => Ok(forms::FILE_FIELDS.contains(&key(needle)?.as_str())),
        Slot::Val(v) => match &*v {
            Value::Array(items) => Ok(items.iter().any(|e| equal(needle, e))),
            Value::String(s) => match needle {
                Value::String(n) => Ok(s.contains(n.as_str())),
                other => Err(type_error(format!(
                    "`in` on a string needs a string on the left, found {}",
                    type_name(other)
                ))),
            },
            Value::Object(o) => Ok(o.contains_key(&key(needle)?)),
            other => Err(type_error(format!(
                "`in` needs an array, a string or an object on the right, found {}",
                type_name(other)
            ))),
        },
    }
}

fn extreme(name: &str, a: &Value) -> R<Value> {
    let Value::Array(items) = a else {
        return Err(type_error(format!(
            "`{name}` needs an array, found {}",
            type_name(a)
        )));
    };
    let Some(first) = items.first() else {
        return Err(type_error(format!("`{name}` of an empty array")));
    };
    let want_max = name == "max";
    let mut best = first;
    for v in &items[1..] {
        let better = match (best, v) {
            (Value::Number(_), Value::Number(_)) => {
                let (b, x) = (as_number(best), as_number(v));
                if want_max { x > b } else { x < b }
            }
            (Value::String(b), Value::String(x)) => {
                if want_max {
                    x > b
                } else {
                    x < b
                }
            }
            _ => {
                return Err(type_error(format!(
                    "`{name}` needs all numbers or all strings, found {} and {}",
                    type_name(best),
                    type_name(v)
                )));
            }
        };
        if better {
            best = v;
        }
    }
    if !matches!(best, Value::Number(_) | Value::String(_)) {
        return Err(type_error(format!(
            "`{name}` needs numbers or strings, found {}",
            type_name(best)
        )));
    }
    Ok(best.clone())
}

fn int(v: &Value) -> R<Value> {
    match v {
        Value::Bool(b) => Ok(Value::from(u8::from(*b))),
        Value::Number(_) => num(as_number(v).unwrap_or(f64::NAN).trunc(), "`int` result"),
        Value::String(s) => {
            let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(type_error(format!(
                    "`int` cannot convert the string {}: it is not a whole number",
                    preview(s)
                )));
            }
            let n: f64 = s.parse().unwrap_or(f64::NAN);
            num(n, "`int` result")
        }
        other => Err(type_error(format!(
            "`int` needs a boolean, a number or a string, found {}",
            type_name(other)
        ))),
    }
}

/// A string for a message: JSON-quoted, cut at 40 characters.
fn preview(s: &str) -> String {
    let mut out = String::new();
    if s.chars().count() > 40 {
        let cut: String = s.chars().take(40).collect();
        value::write_json_string(&mut out, &cut);
        out.push('…');
    } else {
        value::write_json_string(&mut out, s);
    }
    out
}

fn matches(s: &str, p: &str) -> R<Value> {
    if s.len() > pattern::MAX_INPUT_BYTES {
        return Err(EvalError::ResourceLimit(format!(
            "`matches` input is {} bytes, longer than the 8 MiB limit",
            s.len()
        )));
    }
    if p.chars().count() > pattern::MAX_PATTERN_CHARS {
        return Err(EvalError::ResourceLimit(format!(
            "`matches` pattern is longer than {} characters",
            pattern::MAX_PATTERN_CHARS
        )));
    }
    pattern::check_shape(p).map_err(|why| {
        EvalError::ValidationError(format!("unsafe construct in `matches` pattern: {why}"))
    })?;
    let re = pattern::compile(p)
        .map_err(|why| EvalError::ValidationError(format!("invalid `matches` pattern: {why}")))?;
    Ok(Value::Bool(re.is_match(s)))
}
