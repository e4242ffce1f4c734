//! The evaluator on hand-assembled bytecode: every opcode and builtin with
//! its error cases, bindings and limits, plus contract checks and template
//! rendering. (End-to-end tests through the compiler live in
//! `compiler/tests/eval_e2e.rs`; the VM must not depend on the compiler.)

use std::borrow::Cow;
use std::cell::Cell;

use serde_json::{Value, json};
use stratum_vm::eval::contract::{
    ContractError, Problem, check_record, check_record_at, check_type,
};
use stratum_vm::eval::expr::{
    Bindings, EvalError, Files, NoFiles, ResultBinding, StepOutputs, StepStates, eval, eval_bool,
    eval_with_steps,
};
use stratum_vm::eval::template::{RefValues, RenderError, render};
use stratum_vm::eval::value::{compact_json, equal, js_number, truthy, type_name};
use stratum_vm::interp::HostError;
use stratum_vm::plan::op::{self, Op};
use stratum_vm::plan::*;

/// A result with its error as the text it displays.
fn text<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

// ----- a tiny assembler -------------------------------------------------------

/// One instruction of a test program (reverse Polish).
enum I {
    K(Value),
    Res,
    Input,
    Item,
    Prev,
    F(&'static str),
    Ix(u32),
    O(Op),
    Call(&'static str, u8),
    /// `&&` with this right side.
    And(Vec<I>),
    /// `||` with this right side.
    Or(Vec<I>),
}
use I::*;

struct Asm {
    strings: Vec<String>,
    consts: Vec<ConstDef>,
}

impl Asm {
    fn s(&mut self, s: &str) -> u32 {
        if let Some(i) = self.strings.iter().position(|x| x == s) {
            return i as u32;
        }
        self.strings.push(s.into());
        (self.strings.len() - 1) as u32
    }

    fn emit(&mut self, code: &mut Vec<u8>, prog: &[I]) {
        for i in prog {
            match i {
                K(v) => {
                    let k = match v {
                        Value::Null => ConstDef::Null,
                        Value::Bool(b) => ConstDef::Bool(*b),
                        Value::Number(n) => ConstDef::Number(n.as_f64().unwrap()),
                        Value::String(s) => ConstDef::Str(self.s(s)),
                        _ => panic!("constants are scalars"),
                    };
                    self.consts.push(k);
                    op::encode(code, Op::Const, &[(self.consts.len() - 1) as u32]);
                }
                Res => op::encode(code, Op::LoadResult, &[]),
                Input => op::encode(code, Op::LoadInput, &[]),
                Item => op::encode(code, Op::LoadItem, &[]),
                Prev => op::encode(code, Op::LoadPrev, &[]),
                F(name) => {
                    let id = self.s(name);
                    op::encode(code, Op::Field, &[id]);
                }
                Ix(n) => op::encode(code, Op::Index, &[*n]),
                O(o) => op::encode(code, *o, &[]),
                Call(name, argc) => {
                    let f = op::builtin(name).expect("a builtin");
                    op::encode(code, Op::Call, &[u32::from(f), u32::from(*argc)]);
                }
                And(rhs) | Or(rhs) => {
                    let at = code.len();
                    let jump = if matches!(i, And(_)) {
                        Op::AndJump
                    } else {
                        Op::OrJump
                    };
                    op::encode(code, jump, &[0]);
                    let after = code.len();
                    self.emit(code, rhs);
                    op::encode(code, Op::CheckBool, &[]);
                    let d = (code.len() - after) as u16;
                    code[at + 1..at + 3].copy_from_slice(&d.to_le_bytes());
                }
            }
        }
    }
}

fn assemble(prog: &[I]) -> (Plan, Chunk) {
    let mut a = Asm {
        strings: vec!["<test>".into()],
        consts: Vec::new(),
    };
    let mut code = Vec::new();
    a.emit(&mut code, prog);
    op::encode(&mut code, Op::Return, &[]);
    let plan = Plan {
        strings: a.strings,
        records: Vec::new(),
        flows: Vec::new(),
        entry: 0,
    };
    let chunk = Chunk {
        source: 0,
        context: Context::Output,
        code,
        consts: a.consts,
        max_stack: 64,
        pos: Pos::default(),
        spans: Vec::new(),
    };
    (plan, chunk)
}

fn with(prog: &[I], b: &Bindings<'_>) -> Result<Value, EvalError> {
    let (plan, chunk) = assemble(prog);
    eval(&plan, &chunk, b, &mut NoFiles)
}

fn run(prog: &[I]) -> Result<Value, EvalError> {
    let input = json!({"n": 3, "s": "abc", "o": {"a": 1}, "l": [1, 2, 3]});
    let result = json!({"tasks": ["a"], "ok": true});
    let b = Bindings {
        result: ResultBinding::Value(&result),
        input: &input,
        item: None,
        prev: None,
    };
    with(prog, &b)
}

fn ok(prog: &[I]) -> Value {
    run(prog).unwrap_or_else(|e| panic!("{e}"))
}

fn err(prog: &[I]) -> EvalError {
    match run(prog) {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e,
    }
}

fn code(prog: &[I]) -> &'static str {
    err(prog).code()
}

fn k(v: Value) -> I {
    K(v)
}

// ----- operators --------------------------------------------------------------

#[test]
fn arithmetic() {
    assert_eq!(ok(&[k(json!(1)), k(json!(2)), O(Op::Add)]), json!(3));
    assert_eq!(
        ok(&[k(json!(0.1)), k(json!(0.2)), O(Op::Add)]),
        json!(0.30000000000000004)
    );
    assert_eq!(ok(&[k(json!("1")), k(json!("1")), O(Op::Add)]), json!("11"));
    assert_eq!(
        ok(&[Input, F("s"), k(json!("!")), O(Op::Add)]),
        json!("abc!")
    );
    assert_eq!(ok(&[k(json!(5)), k(json!(7)), O(Op::Sub)]), json!(-2));
    assert_eq!(ok(&[k(json!(2.5)), k(json!(4)), O(Op::Mul)]), json!(10));
    assert_eq!(ok(&[k(json!(1)), k(json!(4)), O(Op::Div)]), json!(0.25));
    assert_eq!(ok(&[k(json!(3)), O(Op::Neg)]), json!(-3));
    assert_eq!(ok(&[k(json!(0)), O(Op::Neg)]), json!(0));
    let e = err(&[k(json!(1)), k(json!("1")), O(Op::Add)]);
    assert_eq!(
        e.to_string(),
        "type_error: `+` needs two numbers or two strings, found number and string"
    );
    assert_eq!(
        code(&[k(json!("1")), k(json!(1)), O(Op::Add)]),
        "type_error"
    );
    assert_eq!(
        code(&[k(json!(true)), k(json!(1)), O(Op::Add)]),
        "type_error"
    );
    assert_eq!(
        code(&[k(json!("a")), k(json!("b")), O(Op::Sub)]),
        "type_error"
    );
    assert_eq!(
        code(&[k(json!(null)), k(json!(2)), O(Op::Mul)]),
        "type_error"
    );
    assert_eq!(code(&[k(json!("x")), O(Op::Neg)]), "type_error");
    assert_eq!(
        err(&[k(json!(1)), k(json!(0)), O(Op::Div)]).to_string(),
        "type_error: division by zero"
    );
    assert_eq!(
        code(&[k(json!(1)), k(json!(-0.0)), O(Op::Div)]),
        "type_error"
    );
    // non-finite results
    let big = || k(json!(1e308));
    assert_eq!(
        err(&[big(), big(), O(Op::Add)]).to_string(),
        "type_error: the result of `+` is not a finite number"
    );
    assert_eq!(code(&[big(), k(json!(10)), O(Op::Mul)]), "type_error");
    assert_eq!(code(&[big(), k(json!(1e-10)), O(Op::Div)]), "type_error");
    assert_eq!(code(&[big(), O(Op::Neg), big(), O(Op::Sub)]), "type_error");
}

#[test]
fn not_and_equality() {
    assert_eq!(ok(&[k(json!(true)), O(Op::Not)]), json!(false));
    assert_eq!(
        err(&[k(json!(0)), O(Op::Not)]).to_string(),
        "type_error: `!` needs a boolean, found number"
    );
    assert_eq!(code(&[k(json!(null)), O(Op::Not)]), "type_error");
    assert_eq!(ok(&[k(json!(1)), k(json!(1.0)), O(Op::Eq)]), json!(true));
    assert_eq!(ok(&[k(json!(0)), k(json!(-0.0)), O(Op::Eq)]), json!(true));
    assert_eq!(ok(&[k(json!(1)), k(json!("1")), O(Op::Eq)]), json!(false));
    assert_eq!(ok(&[k(json!(true)), k(json!(1)), O(Op::Ne)]), json!(true));
    assert_eq!(
        ok(&[k(json!(null)), k(json!(null)), O(Op::Eq)]),
        json!(true)
    );
    assert_eq!(
        ok(&[Res, F("tasks"), Res, F("tasks"), O(Op::Eq)]),
        json!(true)
    );
    assert_eq!(ok(&[Res, Input, O(Op::Ne)]), json!(true));
}

#[test]
fn comparisons() {
    let cmp = |a: Value, b: Value, o: Op| ok(&[k(a), k(b), O(o)]);
    assert_eq!(cmp(json!(1), json!(2), Op::Lt), json!(true));
    assert_eq!(cmp(json!(2), json!(2), Op::Le), json!(true));
    assert_eq!(cmp(json!(2), json!(2), Op::Gt), json!(false));
    assert_eq!(cmp(json!(2), json!(2.0), Op::Ge), json!(true));
    assert_eq!(cmp(json!(-0.0), json!(0), Op::Lt), json!(false));
    assert_eq!(cmp(json!("Z"), json!("a"), Op::Lt), json!(true));
    assert_eq!(cmp(json!("abc"), json!("abd"), Op::Lt), json!(true));
    assert_eq!(cmp(json!("ab"), json!("abc"), Op::Lt), json!(true));
    assert_eq!(cmp(json!("z"), json!("é"), Op::Lt), json!(true));
    // C7: code point order; UTF-16 order would put the emoji (D83D) first
    assert_eq!(cmp(json!("\u{ff61}"), json!("😀"), Op::Lt), json!(true));
    assert_eq!(
        err(&[k(json!(1)), k(json!("2")), O(Op::Lt)]).to_string(),
        "type_error: `<` needs two numbers or two strings, found number and string"
    );
    assert_eq!(
        code(&[k(json!(null)), k(json!(null)), O(Op::Ge)]),
        "type_error"
    );
    assert_eq!(
        code(&[k(json!(true)), k(json!(false)), O(Op::Gt)]),
        "type_error"
    );
    assert_eq!(
        code(&[Input, F("l"), Input, F("l"), O(Op::Le)]),
        "type_error"
    );
    // chains compare a boolean with a number
    assert_eq!(
        code(&[k(json!(1)), k(json!(2)), O(Op::Lt), k(json!(3)), O(Op::Lt)]),
        "type_error"
    );
}

#[test]
fn membership() {
    assert_eq!(ok(&[k(json!(2)), Input, F("l"), O(Op::In)]), json!(true));
    assert_eq!(ok(&[k(json!(2.0)), Input, F("l"), O(Op::In)]), json!(true));
    assert_eq!(ok(&[k(json!("2")), Input, F("l"), O(Op::In)]), json!(false));
    assert_eq!(ok(&[k(json!("b")), Input, F("s"), O(Op::In)]), json!(true));
    assert_eq!(ok(&[k(json!("")), Input, F("s"), O(Op::In)]), json!(true));
    assert_eq!(ok(&[k(json!("a")), Input, F("o"), O(Op::In)]), json!(true));
    assert_eq!(ok(&[k(json!("note")), Res, O(Op::In)]), json!(false));
    assert_eq!(
        err(&[k(json!("__proto__")), Input, F("o"), O(Op::In)]).code(),
        "validation_error"
    );
    assert_eq!(
        code(&[k(json!("constructor")), Input, O(Op::In)]),
        "validation_error"
    );
    assert_eq!(code(&[k(json!(1)), Input, F("o"), O(Op::In)]), "type_error");
    assert_eq!(code(&[k(json!(1)), Input, F("s"), O(Op::In)]), "type_error");
    assert_eq!(
        err(&[k(json!(1)), k(json!(1)), O(Op::In)]).to_string(),
        "type_error: `in` needs an array, a string or an object on the right, found number"
    );
    assert_eq!(
        code(&[k(json!(null)), k(json!(null)), O(Op::In)]),
        "type_error"
    );
}

#[test]
fn member_and_index_access() {
    assert_eq!(ok(&[Input, F("o"), F("a")]), json!(1));
    assert_eq!(ok(&[Input, F("l"), Ix(2)]), json!(3));
    assert_eq!(ok(&[Res, F("tasks"), Ix(0)]), json!("a"));
    // reference §14: a missing member is a type error, not null
    assert_eq!(
        err(&[Res, F("note"), k(json!(null)), O(Op::Eq)]).to_string(),
        "type_error: no field `note`"
    );
    assert_eq!(
        err(&[Input, F("n"), F("x")]).to_string(),
        "type_error: cannot read field `x` of number"
    );
    assert_eq!(code(&[Input, F("l"), F("length")]), "type_error");
    assert_eq!(
        err(&[Input, F("l"), Ix(3)]).to_string(),
        "type_error: index 3 is out of range for an array of length 3"
    );
    assert_eq!(code(&[Input, F("s"), Ix(0)]), "type_error");
    assert_eq!(code(&[Input, F("o"), Ix(0)]), "type_error");
    assert_eq!(code(&[k(json!(null)), F("x")]), "type_error");
}

#[test]
fn logic_requires_booleans_and_short_circuits() {
    // `false && missing.x` is false: the right side never runs
    assert_eq!(
        ok(&[k(json!(false)), And(vec![Input, F("missing"), F("x")])]),
        json!(false)
    );
    assert_eq!(
        ok(&[k(json!(true)), Or(vec![k(json!(1)), O(Op::Not)])]),
        json!(true)
    );
    assert_eq!(
        ok(&[k(json!(true)), And(vec![k(json!(true))])]),
        json!(true)
    );
    assert_eq!(
        ok(&[k(json!(true)), And(vec![k(json!(false))])]),
        json!(false)
    );
    assert_eq!(
        ok(&[k(json!(false)), Or(vec![k(json!(false))])]),
        json!(false)
    );
    assert_eq!(
        ok(&[k(json!(false)), Or(vec![k(json!(true))])]),
        json!(true)
    );
    // `result.ok && 1` (reference §14)
    assert_eq!(
        err(&[Res, F("ok"), And(vec![k(json!(1))])]).to_string(),
        "type_error: `&&` needs booleans, found number"
    );
    assert_eq!(
        err(&[k(json!(1)), And(vec![k(json!(true))])]).to_string(),
        "type_error: `&&` needs booleans, found number"
    );
    assert_eq!(
        err(&[k(json!(false)), Or(vec![k(json!("x"))])]).to_string(),
        "type_error: `||` needs booleans, found string"
    );
    assert_eq!(
        code(&[k(json!(null)), Or(vec![k(json!(true))])]),
        "type_error"
    );
    // nested: a && (b || c) with the inner jump taken
    assert_eq!(
        ok(&[
            k(json!(true)),
            And(vec![k(json!(true)), Or(vec![Input, F("nope")])])
        ]),
        json!(true)
    );
    // nested: the inner right side is checked as `||`, the outer as `&&`
    assert_eq!(
        err(&[
            k(json!(true)),
            And(vec![k(json!(false)), Or(vec![k(json!(0))])])
        ])
        .to_string(),
        "type_error: `||` needs booleans, found number"
    );
}

// ----- functions --------------------------------------------------------------

fn call1(name: &'static str, v: Value) -> Result<Value, EvalError> {
    let input = json!({ "v": v });
    let b = Bindings {
        result: ResultBinding::Unbound,
        input: &input,
        item: None,
        prev: None,
    };
    with(&[Input, F("v"), Call(name, 1)], &b)
}

#[test]
fn len_counts_characters() {
    assert_eq!(call1("len", json!("😀")).unwrap(), json!(1));
    assert_eq!(call1("len", json!("héllo")).unwrap(), json!(5));
    assert_eq!(call1("len", json!("")).unwrap(), json!(0));
    assert_eq!(call1("len", json!([1, [2, 3]])).unwrap(), json!(2));
    assert_eq!(call1("len", json!({"a": 1, "b": 2})).unwrap(), json!(2));
    assert_eq!(
        call1("len", json!(5)).unwrap_err().to_string(),
        "type_error: `len` needs a string, an array or an object, found number"
    );
    assert_eq!(call1("len", json!(null)).unwrap_err().code(), "type_error");
}

#[test]
fn any_all_bool_use_truthiness() {
    assert_eq!(call1("any", json!([0, "", null])).unwrap(), json!(false));
    assert_eq!(
        call1("any", json!([0, "", null, [0]])).unwrap(),
        json!(true)
    );
    assert_eq!(call1("any", json!([])).unwrap(), json!(false));
    assert_eq!(call1("all", json!([])).unwrap(), json!(true));
    assert_eq!(
        call1("all", json!([1, "x", [0], {"a": 0}, true])).unwrap(),
        json!(true)
    );
    assert_eq!(call1("all", json!([1, {}])).unwrap(), json!(false));
    assert_eq!(call1("any", json!("abc")).unwrap_err().code(), "type_error");
    assert_eq!(
        call1("all", json!({"a": 1})).unwrap_err().code(),
        "type_error"
    );
    assert_eq!(call1("bool", json!("false")).unwrap(), json!(true));
    assert_eq!(call1("bool", json!(-0.0)).unwrap(), json!(false));
    for (v, t) in [
        (json!(null), false),
        (json!(false), false),
        (json!(true), true),
        (json!(0), false),
        (json!(0.5), true),
        (json!(-1), true),
        (json!(""), false),
        (json!(" "), true),
        (json!([]), false),
        (json!([null]), true),
        (json!({}), false),
        (json!({"k": null}), true),
    ] {
        assert_eq!(truthy(&v), t, "{v}");
        assert_eq!(call1("bool", v.clone()).unwrap(), json!(t), "{v}");
    }
}

#[test]
fn max_and_min() {
    assert_eq!(call1("max", json!([3, 9.5, -1])).unwrap(), json!(9.5));
    assert_eq!(call1("min", json!([3, 9.5, -1])).unwrap(), json!(-1));
    assert_eq!(call1("max", json!(["b", "a", "é"])).unwrap(), json!("é"));
    assert_eq!(call1("min", json!(["b", "a", "é"])).unwrap(), json!("a"));
    assert_eq!(call1("max", json!([7])).unwrap(), json!(7));
    assert_eq!(
        call1("max", json!([])).unwrap_err().to_string(),
        "type_error: `max` of an empty array"
    );
    assert_eq!(
        call1("min", json!([1, "a"])).unwrap_err().to_string(),
        "type_error: `min` needs all numbers or all strings, found number and string"
    );
    assert_eq!(
        call1("max", json!([true])).unwrap_err().code(),
        "type_error"
    );
    assert_eq!(
        call1("max", json!([null, null])).unwrap_err().code(),
        "type_error"
    );
    assert_eq!(call1("max", json!(3)).unwrap_err().code(), "type_error");
}

#[test]
fn str_uses_javascript_text() {
    for (v, s) in [
        (json!("x"), "x"),
        (json!(null), "null"),
        (json!(true), "true"),
        (json!(4), "4"),
        (json!(5.0), "5"),
        (json!(2.5), "2.5"),
        (json!(1e21), "1e+21"),
        (json!(-0.0), "0"),
        (json!(1e-7), "1e-7"),
        (json!([1, "a", null]), "[1,\"a\",null]"),
        (
            json!({"b": {"c": 2.0}, "a": []}),
            "{\"b\":{\"c\":2},\"a\":[]}",
        ),
    ] {
        assert_eq!(call1("str", v.clone()).unwrap(), json!(s), "{v}");
    }
}

#[test]
fn int_conversions() {
    for (v, n) in [
        (json!(true), json!(1)),
        (json!(false), json!(0)),
        (json!(2.9), json!(2)),
        (json!(-2.9), json!(-2)),
        (json!("-7"), json!(-7)),
        (json!("+7"), json!(7)),
        (json!("007"), json!(7)),
        (json!("-0"), json!(0)),
        (json!(1e300), json!(1e300)),
    ] {
        assert_eq!(call1("int", v.clone()).unwrap(), n, "{v}");
    }
    for v in [
        json!("7.0"),
        json!("5.0"),
        json!(" 5"),
        json!("2x"),
        json!(""),
        json!("+"),
        json!("١"),
        json!(null),
        json!([1]),
        json!({}),
    ] {
        assert_eq!(
            call1("int", v.clone()).unwrap_err().code(),
            "type_error",
            "{v}"
        );
    }
    assert_eq!(
        call1("int", json!("7.0")).unwrap_err().to_string(),
        "type_error: `int` cannot convert the string \"7.0\": it is not a whole number"
    );
    // a digit string too long for a double is not finite
    assert_eq!(
        call1("int", json!("9".repeat(400))).unwrap_err().code(),
        "type_error"
    );
}

fn matches(s: Value, p: Value) -> Result<Value, EvalError> {
    let input = json!({ "s": s, "p": p });
    let b = Bindings {
        result: ResultBinding::Unbound,
        input: &input,
        item: None,
        prev: None,
    };
    with(&[Input, F("s"), Input, F("p"), Call("matches", 2)], &b)
}

#[test]
fn matches_filters_and_limits() {
    assert_eq!(matches(json!("abc"), json!("b")).unwrap(), json!(true));
    assert_eq!(matches(json!("abc"), json!("^b")).unwrap(), json!(false));
    assert_eq!(
        matches(json!("v1.22"), json!("^v[0-9]+\\.[0-9]+$")).unwrap(),
        json!(true)
    );
    assert_eq!(
        matches(json!("x error y"), json!(".*error.*")).unwrap(),
        json!(true)
    );
    let e = matches(json!("x"), json!("(?i)x")).unwrap_err();
    assert_eq!(e.code(), "validation_error");
    assert!(e.message().starts_with("unsafe construct"), "{e}");
    for bad in ["a*a*", "(a+)+", "\\1", "\\p{L}", "[ab"] {
        assert_eq!(
            matches(json!("x"), json!(bad)).unwrap_err().code(),
            "validation_error",
            "{bad}"
        );
    }
    // passes the filter, fails to compile
    let e = matches(json!("x"), json!("[z-a]")).unwrap_err();
    assert_eq!(e.code(), "validation_error");
    assert!(e.message().starts_with("invalid `matches` pattern"), "{e}");
    // inputs up to 8 MiB (X3: as large as a file's text); patterns count characters (C7)
    assert!(matches(json!("a".repeat(8 * 1024 * 1024)), json!("a$")).is_ok());
    assert_eq!(
        matches(json!("a".repeat(8 * 1024 * 1024 + 1)), json!("x"))
            .unwrap_err()
            .to_string(),
        "resource_limit: `matches` input is 8388609 bytes, longer than the 8 MiB limit"
    );
    assert!(matches(json!("x"), json!("a".repeat(256))).is_ok());
    assert_eq!(
        matches(json!("x"), json!("a".repeat(257)))
            .unwrap_err()
            .code(),
        "resource_limit"
    );
    assert_eq!(
        matches(json!(1), json!("x")).unwrap_err().code(),
        "type_error"
    );
    assert_eq!(
        matches(json!("x"), json!(null)).unwrap_err().code(),
        "type_error"
    );
}

struct FakeFiles;

impl Files for FakeFiles {
    fn file_exists(&mut self, path: &str) -> Result<bool, HostError> {
        match path {
            "../x" => Err(HostError::Refused("path escapes the workspace".into())),
            p => Ok(p == "src/a.rs"),
        }
    }

    fn file_contains(&mut self, path: &str, text: &str) -> Result<bool, HostError> {
        Ok(path == "src/a.rs" && "fn main() {}".contains(text))
    }
}

#[test]
fn file_functions_go_through_files() {
    let input = json!({"p": "src/a.rs", "q": "../x", "t": "main", "n": 1});
    let b = Bindings {
        result: ResultBinding::Unbound,
        input: &input,
        item: None,
        prev: None,
    };
    let go = |prog: &[I], files: &mut dyn Files| {
        let (plan, chunk) = assemble(prog);
        eval(&plan, &chunk, &b, files)
    };
    assert_eq!(
        go(&[Input, F("p"), Call("file_exists", 1)], &mut FakeFiles),
        Ok(json!(true))
    );
    assert_eq!(
        go(&[Input, F("t"), Call("file_exists", 1)], &mut FakeFiles),
        Ok(json!(false))
    );
    assert_eq!(
        go(&[Input, F("q"), Call("file_exists", 1)], &mut FakeFiles)
            .unwrap_err()
            .to_string(),
        "validation_error: path escapes the workspace"
    );
    assert_eq!(
        go(
            &[Input, F("p"), Input, F("t"), Call("file_contains", 2)],
            &mut FakeFiles
        ),
        Ok(json!(true))
    );
    assert_eq!(
        go(&[Input, F("n"), Call("file_exists", 1)], &mut FakeFiles)
            .unwrap_err()
            .code(),
        "type_error"
    );
    assert_eq!(
        go(
            &[Input, F("p"), Input, F("n"), Call("file_contains", 2)],
            &mut FakeFiles
        )
        .unwrap_err()
        .code(),
        "type_error"
    );
    assert_eq!(
        go(&[Input, F("p"), Call("file_exists", 1)], &mut NoFiles)
            .unwrap_err()
            .to_string(),
        "validation_error: file function requires a workspace root"
    );
    assert_eq!(
        go(
            &[Input, F("p"), Input, F("t"), Call("file_contains", 2)],
            &mut NoFiles
        )
        .unwrap_err()
        .code(),
        "validation_error"
    );
}

#[test]
fn wrong_arity_and_unknown_builtins() {
    let (plan, mut chunk) = assemble(&[k(json!(1)), k(json!(2))]);
    // replace Return by `Call len/2` + Return
    chunk.code.pop();
    op::encode(&mut chunk.code, Op::Call, &[0, 2]);
    op::encode(&mut chunk.code, Op::Return, &[]);
    let b = Bindings {
        result: ResultBinding::Unbound,
        input: &Value::Null,
        item: None,
        prev: None,
    };
    assert_eq!(
        eval(&plan, &chunk, &b, &mut NoFiles)
            .unwrap_err()
            .to_string(),
        "type_error: len expects 1 argument(s), received 2"
    );
    let (plan, mut chunk) = assemble(&[k(json!(1))]);
    chunk.code.pop();
    op::encode(&mut chunk.code, Op::Call, &[200, 1]);
    op::encode(&mut chunk.code, Op::Return, &[]);
    assert_eq!(
        eval(&plan, &chunk, &b, &mut NoFiles).unwrap_err().code(),
        "unknown_function"
    );
}

// ----- bindings ---------------------------------------------------------------

#[test]
fn unbound_identifiers() {
    let input = json!({});
    let b = Bindings {
        result: ResultBinding::Unbound,
        input: &input,
        item: None,
        prev: None,
    };
    for prog in [[Res], [Item], [Prev]] {
        assert_eq!(with(&prog, &b).unwrap_err().code(), "unknown_identifier");
    }
    let item = json!({"f": "x"});
    let prev = json!({"g": 2});
    let b = Bindings {
        result: ResultBinding::Unbound,
        input: &input,
        item: Some(&item),
        prev: Some(None),
    };
    assert_eq!(with(&[Item, F("f")], &b), Ok(json!("x")));
    let e = with(&[Prev], &b).unwrap_err();
    assert_eq!(e.code(), "type_error");
    assert!(e.message().contains("not a JSON value"), "{e}");
    let b = Bindings {
        prev: Some(Some(&prev)),
        ..b
    };
    assert_eq!(with(&[Prev, F("g")], &b), Ok(json!(2)));
    assert_eq!(with(&[Input], &b), Ok(json!({})));
}

fn nested(levels: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = Value::Array(vec![v]);
    }
    v
}

#[test]
fn binding_depth_limit() {
    let fine = nested(128);
    let deep = nested(129);
    for (v, good) in [(&fine, true), (&deep, false)] {
        let b = Bindings {
            result: ResultBinding::Value(v),
            input: v,
            item: Some(v),
            prev: Some(Some(v)),
        };
        for prog in [[Res], [Input], [Item], [Prev]] {
            let r = with(&[prog.into_iter().next().unwrap(), Call("len", 1)], &b);
            if good {
                assert_eq!(r, Ok(json!(1)));
            } else {
                assert_eq!(
                    r.unwrap_err().to_string(),
                    "resource_limit: binding value nested deeper than 128 levels"
                );
            }
        }
    }
    // only a binding that is read is checked
    let b = Bindings {
        result: ResultBinding::Value(&deep),
        input: &fine,
        item: None,
        prev: None,
    };
    assert_eq!(with(&[Input, Call("len", 1)], &b), Ok(json!(1)));
}

struct Steps {
    outputs: Vec<(&'static str, Value)>,
    materialized: Cell<u32>,
}

impl StepOutputs for Steps {
    fn get(&self, id: &str) -> Option<&Value> {
        self.outputs.iter().find(|(k, _)| *k == id).map(|(_, v)| v)
    }

    fn to_object(&self) -> Value {
        self.materialized.set(self.materialized.get() + 1);
        Value::Object(
            self.outputs
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
        )
    }
}

#[test]
fn step_map_is_read_lazily() {
    let steps = Steps {
        outputs: vec![
            ("plan", json!({"tasks": ["a", "b"]})),
            ("review", json!(true)),
        ],
        materialized: Cell::new(0),
    };
    let input = json!({});
    let b = Bindings {
        result: ResultBinding::Steps(&steps),
        input: &input,
        item: None,
        prev: None,
    };
    assert_eq!(
        with(&[Res, F("plan"), F("tasks"), Call("len", 1)], &b),
        Ok(json!(2))
    );
    assert_eq!(
        with(&[k(json!("plan")), Res, O(Op::In)], &b),
        Ok(json!(true))
    );
    assert_eq!(
        with(&[k(json!("gate")), Res, O(Op::In)], &b),
        Ok(json!(false))
    );
    assert_eq!(
        with(&[Res, F("review"), And(vec![k(json!(true))])], &b),
        Ok(json!(true))
    );
    assert_eq!(steps.materialized.get(), 0);
    assert_eq!(
        with(&[Res, F("gate")], &b).unwrap_err().to_string(),
        "type_error: no field `gate`"
    );
    assert_eq!(with(&[Res, Ix(0)], &b).unwrap_err().code(), "type_error");
    assert_eq!(
        with(&[Res, And(vec![k(json!(true))])], &b)
            .unwrap_err()
            .to_string(),
        "type_error: `&&` needs booleans, found object"
    );
    assert_eq!(steps.materialized.get(), 0);
    // whole-map uses materialize it
    assert_eq!(with(&[Res, Call("len", 1)], &b), Ok(json!(2)));
    assert_eq!(
        with(&[Res], &b),
        Ok(json!({"plan": {"tasks": ["a", "b"]}, "review": true}))
    );
    assert_eq!(with(&[Res, Res, O(Op::Eq)], &b), Ok(json!(true)));
    assert_eq!(steps.materialized.get(), 4);
    // the map is one level: an output 128 deep makes `result` 129 deep
    let deep = Steps {
        outputs: vec![("a", nested(128)), ("b", nested(127))],
        materialized: Cell::new(0),
    };
    let b = Bindings {
        result: ResultBinding::Steps(&deep),
        ..b
    };
    assert_eq!(with(&[Res, F("b"), Call("len", 1)], &b), Ok(json!(1)));
    assert_eq!(
        with(&[Res, F("a")], &b).unwrap_err().code(),
        "resource_limit"
    );
    assert_eq!(
        with(&[Res, Call("len", 1)], &b).unwrap_err().code(),
        "resource_limit"
    );
}

#[test]
fn conditions_must_be_booleans() {
    let (plan, chunk) = assemble(&[k(json!(1))]);
    let b = Bindings {
        result: ResultBinding::Unbound,
        input: &Value::Null,
        item: None,
        prev: None,
    };
    assert_eq!(
        eval_bool(&plan, &chunk, &b, &mut NoFiles)
            .unwrap_err()
            .to_string(),
        "type_error: predicate must evaluate to boolean, received number"
    );
    let (plan, chunk) = assemble(&[k(json!(true))]);
    assert_eq!(eval_bool(&plan, &chunk, &b, &mut NoFiles), Ok(true));
}

#[test]
fn malformed_bytecode_is_an_error_not_a_panic() {
    let b = Bindings {
        result: ResultBinding::Unbound,
        input: &Value::Null,
        item: None,
        prev: None,
    };
    let (plan, base) = assemble(&[k(json!(false))]);
    let cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![Op::Return as u8],
        vec![Op::Add as u8, Op::Return as u8],
        vec![0xff],
        vec![Op::Const as u8, 9, 0, Op::Return as u8],
        vec![Op::Field as u8, 0, 0, 0, 0],
        vec![Op::Const as u8, 0],
        vec![Op::Const as u8, 0, 0, Op::AndJump as u8, 0xff, 0xff],
        vec![
            Op::Const as u8,
            0,
            0,
            Op::Call as u8,
            0,
            5,
            Op::Return as u8,
        ],
        vec![Op::CheckBool as u8, Op::Return as u8],
    ];
    for code in cases {
        let chunk = Chunk {
            code: code.clone(),
            ..base.clone()
        };
        let e = eval(&plan, &chunk, &b, &mut NoFiles).unwrap_err();
        assert_eq!(e.code(), "validation_error", "{code:?}: {e}");
    }
    // every truncation of a real program fails cleanly
    let (plan, chunk) = assemble(&[
        Input,
        And(vec![k(json!("x")), k(json!("xy")), O(Op::In)]),
        Call("str", 1),
    ]);
    for cut in 0..chunk.code.len() {
        let c = Chunk {
            code: chunk.code[..cut].to_vec(),
            ..chunk.clone()
        };
        assert!(eval(&plan, &c, &b, &mut NoFiles).is_err());
    }
}

#[test]
fn error_codes_and_display() {
    assert_eq!(
        EvalError::CODES,
        &[
            "parse_error",
            "unknown_identifier",
            "unknown_function",
            "type_error",
            "validation_error",
            "resource_limit"
        ]
    );
    let all = [
        EvalError::ParseError("m".into()),
        EvalError::UnknownIdentifier("m".into()),
        EvalError::UnknownFunction("m".into()),
        EvalError::TypeError("m".into()),
        EvalError::ValidationError("m".into()),
        EvalError::ResourceLimit("m".into()),
    ];
    for (e, c) in all.iter().zip(EvalError::CODES) {
        assert_eq!(e.code(), *c);
        assert_eq!(e.to_string(), format!("{c}: m"));
        assert_eq!(e.message(), "m");
    }
}

// ----- values -----------------------------------------------------------------

#[test]
fn structural_equality() {
    assert!(equal(
        &json!({"a": [1, {"b": null}], "c": "x"}),
        &json!({"c": "x", "a": [1.0, {"b": null}]})
    ));
    assert!(!equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    assert!(!equal(&json!({"a": 1, "b": 2}), &json!({"a": 1, "c": 2})));
    assert!(!equal(&json!([1, 2]), &json!([2, 1])));
    assert!(!equal(&json!([1]), &json!([1, 1])));
    assert!(equal(&json!(0), &json!(-0.0)));
    assert!(!equal(&json!(1), &json!("1")));
    assert!(!equal(&json!(true), &json!(1)));
    assert!(!equal(&json!(null), &json!(false)));
    assert!(!equal(&json!([]), &json!({})));
    assert_eq!(type_name(&json!([])), "array");
    assert_eq!(type_name(&json!(null)), "null");
}

#[test]
fn javascript_number_text() {
    for (n, s) in [
        (0.0, "0"),
        (-0.0, "0"),
        (5.0, "5"),
        (2.5, "2.5"),
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (123456789012345680000.0, "123456789012345680000"),
        (0.1 + 0.2, "0.30000000000000004"),
        (-1.5e300, "-1.5e+300"),
        (0.000001, "0.000001"),
        (1.25e-5, "0.0000125"),
        (999999999999999900000.0, "999999999999999900000"),
    ] {
        assert_eq!(js_number(n), s, "{n:e}");
    }
    assert_eq!(
        compact_json(&json!({"k": [1e21, 2.0, "\u{7f}\t"], "e": {}})),
        "{\"k\":[1e+21,2,\"\u{7f}\\t\"],\"e\":{}}"
    );
}

// ----- contracts --------------------------------------------------------------

/// Records: 0 Item {name: string, qty: integer}; 1 Out {items: Item[],
/// score: integer, note: string?, risk: low|high, meta: object, tags:
/// array?, grid: number[][]}; 2 Loop {next: Loop?} (self-referential, as
/// only a hostile plan could be).
fn contract_plan() -> Plan {
    let strings: Vec<String> = [
        "Item", "name", "qty", "Out", "items", "score", "note", "risk", "low", "high", "meta",
        "tags", "grid", "Loop", "next",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let f = |name: u32, base: BaseType, list_depth: u8, optional: bool| FieldDef {
        name,
        ty: TypeDef { base, list_depth },
        optional,
    };
    Plan {
        strings,
        records: vec![
            RecordDef {
                name: 0,
                fields: vec![
                    f(1, BaseType::String, 0, false),
                    f(2, BaseType::Integer, 0, false),
                ],
            },
            RecordDef {
                name: 3,
                fields: vec![
                    f(4, BaseType::Record(0), 1, false),
                    f(5, BaseType::Integer, 0, false),
                    f(6, BaseType::String, 0, true),
                    f(7, BaseType::Enum(vec![8, 9]), 0, false),
                    f(10, BaseType::Object, 0, false),
                    f(11, BaseType::Array, 0, true),
                    f(12, BaseType::Number, 2, false),
                ],
            },
            RecordDef {
                name: 13,
                fields: vec![f(14, BaseType::Record(2), 0, true)],
            },
        ],
        flows: Vec::new(),
        entry: 0,
    }
}

fn good_out() -> Value {
    json!({
        "items": [{"name": "a", "qty": 1}, {"name": "b", "qty": 2.0}],
        "score": 3,
        "risk": "low",
        "meta": {"anything": [1, {"x": null}]},
        "grid": [[1, 2.5], []]
    })
}

fn out_error(edit: impl FnOnce(&mut Value)) -> String {
    let mut v = good_out();
    edit(&mut v);
    check_record(&contract_plan(), 1, &v)
        .unwrap_err()
        .to_string()
}

#[test]
fn contracts_accept_valid_values() {
    let plan = contract_plan();
    assert_eq!(check_record(&plan, 1, &good_out()), Ok(()));
    let mut v = good_out();
    v["note"] = json!(null);
    v["tags"] = json!(["x", 1]);
    assert_eq!(check_record(&plan, 1, &v), Ok(()));
    v["note"] = json!("n");
    v["tags"] = json!(null);
    v["items"] = json!([]);
    assert_eq!(check_record(&plan, 1, &v), Ok(()));
}

#[test]
fn contracts_are_strict_with_path_messages() {
    assert_eq!(
        out_error(|v| v["extra"] = json!(1)),
        "output: unknown field `extra`"
    );
    assert_eq!(
        out_error(|v| v["items"][1]["colour"] = json!("red")),
        "output.items[1]: unknown field `colour`"
    );
    assert_eq!(
        out_error(|v| {
            v.as_object_mut().unwrap().remove("score");
        }),
        "output: missing required field `score`"
    );
    assert_eq!(
        out_error(|v| v["score"] = json!(null)),
        "output.score: expected integer, found null"
    );
    assert_eq!(
        out_error(|v| v["score"] = json!(2.5)),
        "output.score: expected integer, found 2.5"
    );
    assert_eq!(
        out_error(|v| v["score"] = json!("3")),
        "output.score: expected integer, found string"
    );
    assert_eq!(
        out_error(|v| v["items"] =
            json!([{"name": "a", "qty": 1}, {"name": "b", "qty": 1}, {"name": 7, "qty": 1}])),
        "output.items[2].name: expected string, found number"
    );
    assert_eq!(
        out_error(|v| v["items"] = json!({"name": "a", "qty": 1})),
        "output.items: expected array, found object"
    );
    assert_eq!(
        out_error(|v| v["items"][0] = json!(null)),
        "output.items[0]: expected object, found null"
    );
    assert_eq!(
        out_error(|v| v["risk"] = json!("Low")),
        "output.risk: expected one of \"low\", \"high\", found \"Low\""
    );
    assert_eq!(
        out_error(|v| v["risk"] = json!(1)),
        "output.risk: expected string, found number"
    );
    assert_eq!(
        out_error(|v| v["meta"] = json!([])),
        "output.meta: expected object, found array"
    );
    assert_eq!(
        out_error(|v| v["tags"] = json!({})),
        "output.tags: expected array, found object"
    );
    assert_eq!(
        out_error(|v| v["note"] = json!(false)),
        "output.note: expected string, found boolean"
    );
    assert_eq!(
        out_error(|v| v["grid"] = json!([[1], [true]])),
        "output.grid[1][0]: expected number, found boolean"
    );
    assert_eq!(
        out_error(|v| v["grid"] = json!([1])),
        "output.grid[0]: expected array, found number"
    );
    let plan = contract_plan();
    assert_eq!(
        text(check_record(&plan, 1, &json!([]))),
        Err("output: expected object, found array".into())
    );
    assert_eq!(
        text(check_record_at(&plan, 0, &json!({"name": "x"}), "input")),
        Err("input: missing required field `qty`".into())
    );
    assert!(check_record(&plan, 99, &json!({})).is_err());
}

#[test]
fn contract_types_directly() {
    let plan = contract_plan();
    let ty = |base: BaseType, list_depth: u8| TypeDef { base, list_depth };
    assert_eq!(
        check_type(&plan, &ty(BaseType::Integer, 0), false, &json!(3.0)),
        Ok(())
    );
    assert_eq!(
        check_type(&plan, &ty(BaseType::Integer, 0), true, &json!(null)),
        Ok(())
    );
    assert_eq!(
        text(check_type(
            &plan,
            &ty(BaseType::Integer, 0),
            false,
            &json!(null)
        )),
        Err("output: expected integer, found null".into())
    );
    assert_eq!(
        check_type(
            &plan,
            &ty(BaseType::Integer, 1),
            false,
            &json!([1e20, -0.0])
        ),
        Ok(())
    );
    assert_eq!(
        check_type(
            &plan,
            &ty(BaseType::Record(0), 1),
            false,
            &json!([{"name": "n", "qty": 0}])
        ),
        Ok(())
    );
    assert_eq!(
        text(check_type(
            &plan,
            &ty(BaseType::Record(0), 1),
            false,
            &json!([{"name": "n", "qty": 0, "x": 1}])
        )),
        Err("output[0]: unknown field `x`".into())
    );
    assert_eq!(
        text(check_type(
            &plan,
            &ty(BaseType::Boolean, 0),
            false,
            &json!(0)
        )),
        Err("output: expected boolean, found number".into())
    );
    assert_eq!(
        check_type(&plan, &ty(BaseType::Object, 0), false, &json!({"k": 1})),
        Ok(())
    );
}

#[test]
fn contract_depth_is_bounded() {
    let plan = contract_plan();
    // a self-referential record (only a hostile plan has one) on a deep value
    let mut v = json!({});
    for _ in 0..200 {
        v = json!({ "next": v });
    }
    let e = check_record(&plan, 2, &v).unwrap_err().to_string();
    assert!(e.ends_with("value nested deeper than 128 levels"), "{e}");
    let mut v = json!({});
    for _ in 0..100 {
        v = json!({ "next": v });
    }
    assert_eq!(check_record(&plan, 2, &v), Ok(()));
    // deep lists
    let deep = nested(300);
    let t = TypeDef {
        base: BaseType::Number,
        list_depth: 255,
    };
    assert!(check_type(&plan, &t, false, &deep).is_err());
    let t = TypeDef {
        base: BaseType::Array,
        list_depth: 0,
    };
    assert_eq!(check_type(&plan, &t, false, &deep), Ok(()));
}

#[test]
fn contract_errors_are_typed() {
    let plan = contract_plan();
    let expected = |path: &str, expected: &str, found: &str| ContractError {
        path: path.into(),
        problem: Problem::Expected {
            expected: expected.into(),
            found: found.into(),
        },
    };
    assert_eq!(
        check_record(&plan, 1, &json!([])),
        Err(expected("output", "object", "array"))
    );
    assert_eq!(
        check_record_at(&plan, 0, &json!({"name": "x"}), "input"),
        Err(ContractError {
            path: "input".into(),
            problem: Problem::MissingField("qty".into()),
        })
    );
    assert_eq!(
        check_record(&plan, 99, &json!({})),
        Err(ContractError {
            path: "output".into(),
            problem: Problem::UnknownContract(99),
        })
    );
    let int = TypeDef {
        base: BaseType::Integer,
        list_depth: 1,
    };
    let e = check_type(&plan, &int, false, &json!([1, 1.5])).unwrap_err();
    assert_eq!(e, expected("output[1]", "integer", "1.5"));
    assert_eq!(e.to_string(), "output[1]: expected integer, found 1.5");
}

// ----- templates --------------------------------------------------------------

struct Refs {
    input: Value,
    step: Option<Value>,
    owned: bool,
}

impl RefValues for Refs {
    fn value(&self, target: RefTarget) -> Option<Cow<'_, Value>> {
        let v = match target {
            RefTarget::Input => Some(&self.input),
            RefTarget::Step(0) => self.step.as_ref(),
            _ => None,
        }?;
        Some(if self.owned {
            Cow::Owned(v.clone())
        } else {
            Cow::Borrowed(v)
        })
    }
}

enum P {
    T(&'static str),
    R(RefTarget, Vec<PathSeg>),
}

enum PathSeg {
    F(&'static str),
    I(u32),
}

fn template(pieces: Vec<P>, mode: TemplateMode) -> (Plan, TemplateDef) {
    let mut strings: Vec<String> = Vec::new();
    let mut s = |x: &str| {
        strings.push(x.to_string());
        (strings.len() - 1) as u32
    };
    let pieces = pieces
        .into_iter()
        .map(|p| match p {
            P::T(t) => PieceDef::Text(s(t)),
            P::R(target, path) => PieceDef::Ref(RefDef {
                target,
                path: path
                    .into_iter()
                    .map(|seg| match seg {
                        PathSeg::F(f) => Seg::Field(s(f)),
                        PathSeg::I(i) => Seg::Index(i),
                    })
                    .collect(),
            }),
        })
        .collect();
    let plan = Plan {
        strings,
        records: Vec::new(),
        flows: Vec::new(),
        entry: 0,
    };
    (
        plan,
        TemplateDef {
            pieces,
            mode,
            pos: Pos::default(),
        },
    )
}

fn refs(owned: bool) -> Refs {
    Refs {
        input: json!({
            "goal": "ship",
            "n": 5.0,
            "big": 1e21,
            "ok": true,
            "none": null,
            "list": ["a", 1, null],
            "obj": {"b": 2.5, "a": [true]},
            "tricky": "${input.goal}"
        }),
        step: Some(json!({"tasks": ["x", "y"], "title": "T"})),
        owned,
    }
}

fn input(path: Vec<PathSeg>) -> P {
    P::R(RefTarget::Input, path)
}

#[test]
fn full_value_templates_keep_types() {
    use PathSeg::*;
    for owned in [false, true] {
        let r = refs(owned);
        let (plan, t) = template(vec![input(vec![F("list")])], TemplateMode::FullValue);
        assert_eq!(render(&plan, &t, &r), Ok(json!(["a", 1, null])));
        let (plan, t) = template(vec![input(vec![F("n")])], TemplateMode::FullValue);
        assert_eq!(render(&plan, &t, &r), Ok(json!(5.0)));
        let (plan, t) = template(
            vec![P::R(RefTarget::Step(0), vec![F("tasks"), I(1)])],
            TemplateMode::FullValue,
        );
        assert_eq!(render(&plan, &t, &r), Ok(json!("y")));
        let (plan, t) = template(vec![input(vec![F("none")])], TemplateMode::FullValue);
        assert_eq!(render(&plan, &t, &r), Ok(json!(null)));
        // `do`: a single reference must be a string
        let (plan, t) = template(vec![input(vec![F("goal")])], TemplateMode::FullValueString);
        assert_eq!(render(&plan, &t, &r), Ok(json!("ship")));
        for f in ["n", "none", "list", "obj", "ok"] {
            let (plan, t) = template(vec![input(vec![F(f)])], TemplateMode::FullValueString);
            assert_eq!(
                text(render(&plan, &t, &r)),
                Err("do task must render to a string".into()),
                "{f}"
            );
        }
    }
}

#[test]
fn interpolation_uses_javascript_text() {
    use PathSeg::*;
    let r = refs(false);
    let (plan, t) = template(
        vec![
            P::T("goal="),
            input(vec![F("goal")]),
            P::T(" n="),
            input(vec![F("n")]),
            P::T(" big="),
            input(vec![F("big")]),
            P::T(" ok="),
            input(vec![F("ok")]),
            P::T(" none=["),
            input(vec![F("none")]),
            P::T("] list="),
            input(vec![F("list")]),
            P::T(" obj="),
            input(vec![F("obj")]),
            P::T(" tricky="),
            input(vec![F("tricky")]),
        ],
        TemplateMode::Interpolate,
    );
    assert_eq!(
        render(&plan, &t, &r),
        Ok(json!(
            "goal=ship n=5 big=1e+21 ok=true none=[] list=[\"a\",1,null] obj={\"b\":2.5,\"a\":[true]} tricky=${input.goal}"
        ))
    );
    // one reference alone, interpolated (`x: "${input.n}"` in a `with` is full-value; this is the text form)
    let (plan, t) = template(vec![input(vec![F("n")])], TemplateMode::Interpolate);
    assert_eq!(render(&plan, &t, &r), Ok(json!("5")));
    let (plan, t) = template(vec![P::T("plain")], TemplateMode::Interpolate);
    assert_eq!(render(&plan, &t, &r), Ok(json!("plain")));
}

#[test]
fn missing_references_are_unavailable() {
    use PathSeg::*;
    const UNAVAILABLE: &str = "reference output is unavailable (the source may have been skipped)";
    for owned in [false, true] {
        let r = Refs {
            step: None,
            ..refs(owned)
        };
        for (path, mode) in [
            (vec![F("missing")], TemplateMode::Interpolate),
            (vec![F("list"), I(3)], TemplateMode::FullValue),
            (vec![F("goal"), F("x")], TemplateMode::FullValue),
            (vec![F("list"), F("x")], TemplateMode::FullValueString),
            (vec![F("obj"), I(0)], TemplateMode::Interpolate),
            (vec![F("none"), F("x")], TemplateMode::Interpolate),
        ] {
            let pieces = if mode == TemplateMode::Interpolate {
                vec![P::T("a "), input(path)]
            } else {
                vec![input(path)]
            };
            let (plan, t) = template(pieces, mode);
            assert_eq!(text(render(&plan, &t, &r)), Err(UNAVAILABLE.into()));
        }
        let (plan, t) = template(
            vec![P::R(RefTarget::Step(0), vec![])],
            TemplateMode::FullValue,
        );
        assert_eq!(text(render(&plan, &t, &r)), Err(UNAVAILABLE.into()));
        let (plan, t) = template(
            vec![P::R(RefTarget::Carry(0), vec![])],
            TemplateMode::Interpolate,
        );
        assert_eq!(text(render(&plan, &t, &r)), Err(UNAVAILABLE.into()));
    }
    // a full-value template that is not one reference (a hostile plan)
    let (plan, t) = template(vec![P::T("x")], TemplateMode::FullValue);
    assert!(render(&plan, &t, &refs(false)).is_err());
}

#[test]
fn render_errors_are_typed() {
    use PathSeg::*;
    let r = refs(false);
    let (plan, t) = template(vec![input(vec![F("missing")])], TemplateMode::FullValue);
    assert_eq!(render(&plan, &t, &r), Err(RenderError::Unavailable));
    let (plan, t) = template(vec![input(vec![F("n")])], TemplateMode::FullValueString);
    assert_eq!(render(&plan, &t, &r), Err(RenderError::NotAString));
    let (plan, t) = template(vec![P::T("x")], TemplateMode::FullValue);
    assert_eq!(render(&plan, &t, &r), Err(RenderError::NotOneReference));
    assert_eq!(
        RenderError::NotOneReference.to_string(),
        "a full-value template must be exactly one reference"
    );
    let (plan, mut t) = template(vec![P::T("x")], TemplateMode::Interpolate);
    t.pieces = vec![PieceDef::Text(999)];
    assert_eq!(render(&plan, &t, &r), Err(RenderError::TextOutOfRange(999)));
    assert_eq!(
        RenderError::TextOutOfRange(999).to_string(),
        "template text #999 is out of range"
    );
}

// ----- value size limit -------------------------------------------------------

/// Bindings whose `input.s` is a string of `len` bytes and `input.l` an
/// array of four such strings.
fn big_input(len: usize) -> Value {
    let s = "x".repeat(len);
    json!({"s": s, "l": [s, s, s, s]})
}

fn with_input(prog: &[I], input: &Value) -> Result<Value, EvalError> {
    let b = Bindings {
        result: ResultBinding::Unbound,
        input,
        item: None,
        prev: None,
    };
    with(prog, &b)
}

#[test]
fn concatenation_stops_at_the_value_limit() {
    use stratum_vm::eval::value::MAX_VALUE_BYTES;
    // two halves make exactly the limit: fine
    let input = big_input(MAX_VALUE_BYTES / 2);
    let twice = [Input, F("s"), Input, F("s"), O(Op::Add)];
    let v = with_input(&twice, &input).unwrap();
    assert_eq!(v.as_str().map(str::len), Some(MAX_VALUE_BYTES));
    // one byte more is a resource_limit, raised before the string is built
    let three = [
        Input,
        F("s"),
        Input,
        F("s"),
        O(Op::Add),
        k(json!("!")),
        O(Op::Add),
    ];
    let e = with_input(&three, &input).unwrap_err();
    assert_eq!(e.code(), "resource_limit", "{e}");
    assert!(
        e.message()
            .contains(&format!("a string of {} bytes", MAX_VALUE_BYTES + 1)),
        "{e}"
    );
    assert!(e.message().contains("16 MiB"), "{e}");
    // borrowed on the left (a binding) and owned on the left (a result) alike
    let small = big_input(MAX_VALUE_BYTES / 3 + 1);
    let owned_left = [
        Input,
        F("s"),
        Input,
        F("s"),
        O(Op::Add),
        Input,
        F("s"),
        O(Op::Add),
    ];
    assert_eq!(
        with_input(&owned_left, &small).unwrap_err().code(),
        "resource_limit"
    );
}

#[test]
fn a_balanced_sum_of_a_large_field_is_an_error_not_an_abort() {
    // the case: 1,024 terms over a 4 MB string would build 4 GB
    fn tree(n: usize, out: &mut Vec<I>) {
        if n == 1 {
            out.extend([Input, F("s")]);
            return;
        }
        tree(n / 2, out);
        tree(n - n / 2, out);
        out.push(O(Op::Add));
    }
    let mut prog = Vec::new();
    tree(1024, &mut prog);
    let input = big_input(4_000_000);
    let e = with_input(&prog, &input).unwrap_err();
    assert_eq!(e.code(), "resource_limit", "{e}");
}

#[test]
fn str_of_a_large_value_is_bounded() {
    use stratum_vm::eval::value::MAX_VALUE_BYTES;
    // four strings of a quarter of the limit: their JSON text (quotes, commas) is over it
    let input = big_input(MAX_VALUE_BYTES / 4);
    let e = with_input(&[Input, F("l"), Call("str", 1)], &input).unwrap_err();
    assert_eq!(e.code(), "resource_limit", "{e}");
    assert!(e.message().starts_with("`str` would build"), "{e}");
    // a string at the limit is its own text
    let input = big_input(MAX_VALUE_BYTES);
    let v = with_input(&[Input, F("s"), Call("str", 1)], &input).unwrap();
    assert_eq!(v.as_str().map(str::len), Some(MAX_VALUE_BYTES));
    // small values are unchanged
    assert_eq!(ok(&[Input, F("l"), Call("str", 1)]), json!("[1,2,3]"));
}

#[test]
fn interpolation_stops_at_the_value_limit() {
    use PathSeg::*;
    use stratum_vm::eval::value::MAX_VALUE_BYTES;
    let r = Refs {
        input: big_input(MAX_VALUE_BYTES / 2),
        step: None,
        owned: false,
    };
    // two halves: exactly the limit
    let (plan, t) = template(
        vec![input(vec![F("s")]), input(vec![F("s")])],
        TemplateMode::Interpolate,
    );
    let v = render(&plan, &t, &r).unwrap();
    assert_eq!(v.as_str().map(str::len), Some(MAX_VALUE_BYTES));
    // and one byte of text more
    let (plan, t) = template(
        vec![input(vec![F("s")]), P::T("!"), input(vec![F("s")])],
        TemplateMode::Interpolate,
    );
    let e = render(&plan, &t, &r).unwrap_err().to_string();
    assert!(
        e.starts_with("resource_limit: the template would build"),
        "{e}"
    );
    // an array interpolated as JSON counts its text
    let (plan, t) = template(
        vec![P::T("all: "), input(vec![F("l")])],
        TemplateMode::Interpolate,
    );
    assert!(
        render(&plan, &t, &r)
            .unwrap_err()
            .to_string()
            .starts_with("resource_limit")
    );
    // a full-value reference copies what exists: no limit applies
    let (plan, t) = template(vec![input(vec![F("l")])], TemplateMode::FullValue);
    assert!(render(&plan, &t, &r).is_ok());
}

// ----- properties -------------------------------------------------------------

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary bytecode never panics the evaluator.
        #[test]
        fn arbitrary_bytecode_does_not_panic(code in proptest::collection::vec(any::<u8>(), 0..64)) {
            let (plan, base) = assemble(&[k(json!("s")), k(json!(1.5)), k(json!(true))]);
            let chunk = Chunk { code, ..base };
            let input = json!({"s": "abc", "l": [1, {"x": null}]});
            let b = Bindings {
                result: ResultBinding::Value(&input),
                input: &input,
                item: Some(&input),
                prev: Some(None),
            };
            let _ = eval(&plan, &chunk, &b, &mut NoFiles);
        }

        /// `js_number` text parses back to the same double.
        #[test]
        fn js_number_round_trips(bits in any::<u64>()) {
            let n = f64::from_bits(bits);
            prop_assume!(n.is_finite());
            let text = js_number(n);
            let back: f64 = text.parse().unwrap();
            prop_assert!(back == n, "{} → {} → {}", n, text, back);
        }
    }
}

/// X1: the `steps` binding, read lazily through `StepStates`.
struct States {
    materialized: Cell<u32>,
}

impl StepStates for States {
    fn state(&self, id: &str) -> Option<Value> {
        (id == "analysis").then(|| {
            json!({"status": "failed", "output": null,
                   "failure": {"reason": "no data", "violations": []}, "attempts": 2})
        })
    }

    fn to_object(&self) -> Value {
        self.materialized.set(self.materialized.get() + 1);
        json!({"analysis": self.state("analysis")})
    }
}

#[test]
fn steps_binding_reads_one_state_and_is_unknown_without_it() {
    let states = States {
        materialized: Cell::new(0),
    };
    let input = json!({});
    let b = Bindings {
        result: ResultBinding::Unbound,
        input: &input,
        item: None,
        prev: None,
    };
    let steps_of = |prog: &[I]| {
        let mut code = Vec::new();
        op::encode(&mut code, Op::LoadSteps, &[]);
        let (plan, mut chunk) = assemble(prog);
        code.extend_from_slice(&chunk.code);
        chunk.code = code;
        eval_with_steps(&plan, &chunk, &b, Some(&states), &mut NoFiles)
    };
    assert_eq!(steps_of(&[F("analysis"), F("status")]), Ok(json!("failed")));
    assert_eq!(
        steps_of(&[F("analysis"), F("failure"), F("reason")]),
        Ok(json!("no data"))
    );
    assert_eq!(steps_of(&[F("analysis"), F("attempts")]), Ok(json!(2)));
    assert_eq!(
        states.materialized.get(),
        0,
        "`steps.<id>` never builds the map"
    );
    assert_eq!(steps_of(&[Call("len", 1)]), Ok(json!(1)));
    assert_eq!(states.materialized.get(), 1);
    assert!(matches!(
        steps_of(&[F("paper")]),
        Err(EvalError::TypeError(m)) if m.contains("no step `paper`")
    ));
    // without the binding (the plain `eval`), reading it is unknown
    let (plan, mut chunk) = assemble(&[]);
    chunk.code = Vec::new();
    op::encode(&mut chunk.code, Op::LoadSteps, &[]);
    op::encode(&mut chunk.code, Op::Return, &[]);
    assert!(matches!(
        eval(&plan, &chunk, &b, &mut NoFiles),
        Err(EvalError::UnknownIdentifier(_))
    ));
}
