//! End to end: expressions compiled by the real front end and evaluated by
//! the VM's evaluator (reference v1-language §7, §14 spot checks, with
//! decision C7: `len('😀')` is 1).

use std::path::Path;

use serde_json::{Value, json};
use stratum_compiler::analyze;
use stratum_compiler::build::build_plan;
use stratum_vm::eval::expr::{Bindings, NoFiles, ResultBinding, StepOutputs, eval};
use stratum_vm::plan::{Plan, StepKindDef};

/// What an expression should do.
enum Want {
    /// Evaluate to this value.
    Val(Value),
    /// Fail at run time with this code.
    Err(&'static str),
    /// Be rejected by the compiler (so it never runs).
    Static,
}
use Want::*;

const FIELD_TYPES: &[&str] = &["boolean?", "number?", "string?", "object?", "array?"];

fn spec(expr: &str, field_type: &str) -> String {
    let quoted = serde_json::to_string(expr).unwrap();
    format!(
        r#"version: 1
contracts:
  Out: {{v: "{field_type}"}}
  Plan: {{tasks: "string[]", ok: boolean, n: number, note: "string?"}}
flows:
  entry: main
  main:
    input: {{o: object, l: array, s: string, n: number, e: "string[]"}}
    output: {{from: "${{s.output}}", contract: Out}}
    steps:
      - id: plan
        do: "Plan"
        out: Plan
      - id: s
        after: [plan]
        set: {{v: {quoted}}}
        out: Out
"#
    )
}

/// Compiles `expr` as the only value of a `set` step, trying each field type
/// of the `out` contract until the checker accepts it.
fn compile(expr: &str) -> Option<(Plan, usize, usize)> {
    for ty in FIELD_TYPES {
        let a = analyze(&spec(expr, ty));
        if a.diagnostics.iter().any(|d| d.is_error()) {
            continue;
        }
        let plan = build_plan(&a).expect("a checked spec builds");
        let fi = plan
            .flows
            .iter()
            .position(|f| plan.str(f.name) == "main")
            .unwrap();
        let flow = &plan.flows[fi];
        let step = flow.steps.iter().find(|s| plan.str(s.id) == "s").unwrap();
        let StepKindDef::Set { fields } = &step.kind else {
            panic!("`s` is a set step")
        };
        let chunk = fields[0].1 as usize;
        return Some((plan, fi, chunk));
    }
    None
}

struct Outputs(Vec<(&'static str, Value)>);

impl StepOutputs for Outputs {
    fn get(&self, id: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| *k == id).map(|(_, v)| v)
    }

    fn to_object(&self) -> Value {
        Value::Object(
            self.0
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
        )
    }
}

fn input() -> Value {
    json!({
        "o": {
            "a": 1, "s": "x", "z": 0, "one": 1, "str1": "1", "t": true, "nul": null,
            "nested": {"k": [1, {"m": "deep"}]},
            "emptyo": {}, "list": [0, "", null], "empty": [],
            "nums": [3, 9.5, -1], "strs": ["b", "a", "é"], "mixed": [1, "a"],
            "big": 1e308, "ver": "v1.22", "bad": "(?i)x"
        },
        "l": [1, 2, 3],
        "s": "abc",
        "n": 3,
        "e": ["x", "y"]
    })
}

fn table() -> Vec<(&'static str, Want)> {
    vec![
        // arithmetic
        ("1 + 2", Val(json!(3))),
        ("'1' + '1'", Val(json!("11"))),
        ("1 + '1'", Static),
        ("input.o.one + input.o.str1", Err("type_error")),
        ("input.n * 2 - 1", Val(json!(5))),
        ("7 / 2", Val(json!(3.5))),
        ("input.n / input.o.z", Err("type_error")),
        ("-input.n", Val(json!(-3))),
        ("-input.o.s", Err("type_error")),
        ("input.o.big * 10", Err("type_error")),
        ("0.1 + 0.2", Val(json!(0.30000000000000004))),
        ("input.e[0] + input.s", Val(json!("xabc"))),
        ("str(input.n) + '!'", Val(json!("3!"))),
        // equality
        ("0.1 + 0.2 == 0.3", Val(json!(false))),
        ("1 == 1.0", Val(json!(true))),
        ("0 == -0", Val(json!(true))),
        ("input.o.one != input.o.str1", Val(json!(true))),
        ("input.o.t != input.o.one", Val(json!(true))),
        ("input.o.nul == null", Val(json!(true))),
        ("input.o.nested == input.o.nested", Val(json!(true))),
        ("input.l == input.o.nums", Val(json!(false))),
        // comparison
        ("'a' < 'b'", Val(json!(true))),
        ("'Z' < 'a'", Val(json!(true))),
        ("'\\uff61' < '😀'", Val(json!(true))),
        ("input.o.one < input.o.s", Err("type_error")),
        ("1 < 2 == true", Val(json!(true))),
        ("result.plan.n * 2 > input.n", Val(json!(true))),
        ("input.n >= 3", Val(json!(true))),
        // membership
        ("2 in input.l", Val(json!(true))),
        ("'b' in input.s", Val(json!(true))),
        ("'' in input.s", Val(json!(true))),
        ("'a' in input.o", Val(json!(true))),
        ("'note' in result.plan", Val(json!(false))),
        ("'plan' in result", Val(json!(true))),
        ("input.o.one in input.o.one", Err("type_error")),
        ("'__proto__' in input.o", Err("validation_error")),
        // member and index access
        ("result.plan.note == null", Err("type_error")),
        ("result.plan.tasks[0]", Val(json!("a"))),
        ("input.l[5]", Err("type_error")),
        ("input.o.nested.k[1].m", Val(json!("deep"))),
        ("input.o.s.x", Err("type_error")),
        ("result.tasks[input.n]", Static),
        // logic
        ("false && input.o.missing.x", Val(json!(false))),
        ("true || input.o.missing", Val(json!(true))),
        ("result.plan.ok && input.o.one", Err("type_error")),
        ("input.o.one && true", Err("type_error")),
        ("input.o.t && !false", Val(json!(true))),
        ("!input.o.t", Val(json!(false))),
        ("!input.o.one", Err("type_error")),
        // functions
        ("len('😀')", Val(json!(1))),
        ("len(input.l)", Val(json!(3))),
        ("len(input.o.nested)", Val(json!(1))),
        ("len(result)", Val(json!(1))),
        ("len(input.o.one)", Err("type_error")),
        ("any(input.o.list)", Val(json!(false))),
        ("all(input.o.empty)", Val(json!(true))),
        ("any(input.o.s)", Err("type_error")),
        ("max(input.o.nums)", Val(json!(9.5))),
        ("min(input.o.strs)", Val(json!("a"))),
        ("max(input.o.strs)", Val(json!("é"))),
        ("max(input.o.empty)", Err("type_error")),
        ("max(input.o.mixed)", Err("type_error")),
        ("str(2.50)", Val(json!("2.5"))),
        ("str(1e21)", Val(json!("1e+21"))),
        (
            "str(input.o.nested)",
            Val(json!("{\"k\":[1,{\"m\":\"deep\"}]}")),
        ),
        ("str(null)", Val(json!("null"))),
        ("int('-7')", Val(json!(-7))),
        ("int('7.0')", Err("type_error")),
        ("int(-2.9)", Val(json!(-2))),
        ("int(input.o.nul)", Err("type_error")),
        ("bool('false')", Val(json!(true))),
        ("bool(input.o.emptyo)", Val(json!(false))),
        ("matches('abc', 'b')", Val(json!(true))),
        ("matches('x', '(?i)x')", Static),
        ("matches('x', input.o.bad)", Err("validation_error")),
        (
            "matches(input.o.ver, '^v[0-9]+\\\\.[0-9]+$')",
            Val(json!(true)),
        ),
        ("file_exists('a.txt')", Err("validation_error")),
        ("unknown(1)", Static),
    ]
}

#[test]
fn expressions_evaluate_as_the_reference_says() {
    let input = input();
    let outputs = Outputs(vec![("plan", json!({"tasks": ["a"], "ok": true, "n": 2}))]);
    let b = Bindings {
        result: ResultBinding::Steps(&outputs),
        input: &input,
        item: None,
        prev: None,
    };
    let mut failures = Vec::new();
    let cases = table();
    for (expr, want) in &cases {
        let compiled = compile(expr);
        let got = compiled
            .as_ref()
            .map(|(plan, fi, ci)| eval(plan, &plan.flows[*fi].chunks[*ci], &b, &mut NoFiles));
        let good = match (want, &got) {
            (Static, None) => true,
            (Val(v), Some(Ok(g))) => v == g,
            (Err(code), Some(Result::Err(e))) => e.code() == *code,
            _ => false,
        };
        if !good {
            let got = match &got {
                None => "rejected by the compiler".to_string(),
                Some(Ok(v)) => format!("value {v}"),
                Some(Result::Err(e)) => format!("error {e}"),
            };
            failures.push(format!("`{expr}`: got {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(cases.len() >= 60, "{} cases", cases.len());
}

/// Every chunk of every example evaluates without panicking, whatever the
/// bindings hold.
#[test]
fn example_chunks_evaluate_on_arbitrary_bindings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let values = [
        json!(null),
        json!({}),
        json!([]),
        json!("s"),
        json!({"files": ["a"], "tasks": [], "quality": 0.97, "open_questions": [], "verdict": "pass"}),
    ];
    let mut evaluated = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".stratum.yaml") {
            continue;
        }
        let a = analyze(&std::fs::read_to_string(&path).unwrap());
        let Some(plan) = build_plan(&a) else { continue };
        for flow in &plan.flows {
            for chunk in &flow.chunks {
                for v in &values {
                    let outputs = Outputs(vec![("plan", v.clone())]);
                    for result in [ResultBinding::Value(v), ResultBinding::Steps(&outputs)] {
                        let b = Bindings {
                            result,
                            input: v,
                            item: Some(v),
                            prev: Some(Some(v)),
                        };
                        let _ = eval(&plan, chunk, &b, &mut NoFiles);
                        evaluated += 1;
                    }
                }
            }
        }
    }
    assert!(evaluated > 0);
}

/// Files for the X3 cases: `data.json` (JSON), `notes.md` (text), `bin`
/// (not UTF-8), and two paths that `glob` matches.
struct X3Files;

impl stratum_vm::eval::Files for X3Files {
    fn file_exists(&mut self, path: &str) -> Result<bool, stratum_vm::interp::HostError> {
        Ok(path == "data.json")
    }

    fn file_contains(&mut self, _: &str, _: &str) -> Result<bool, stratum_vm::interp::HostError> {
        Ok(false)
    }

    fn read_file(
        &mut self,
        path: &str,
    ) -> Result<stratum_vm::interp::FileRead, stratum_vm::interp::HostError> {
        let text = match path {
            "data.json" => Some("{\"ok\": true, \"n\": [1, 2]}"),
            "notes.md" => Some("# Notes\n## Method\nsteps"),
            "bin" => None,
            _ => {
                return Ok(stratum_vm::interp::FileRead {
                    path: path.into(),
                    ..Default::default()
                });
            }
        };
        Ok(stratum_vm::interp::FileRead {
            path: path.into(),
            exists: true,
            size: text.map_or(3, str::len) as u64,
            text: text.map(str::to_owned),
            sha256: text.map(|t| stratum_vm::eval::sha256_hex(t.as_bytes())),
        })
    }

    fn glob(&mut self, pattern: &str) -> Result<Vec<String>, stratum_vm::interp::HostError> {
        if pattern.starts_with('/') {
            return Result::Err(stratum_vm::interp::HostError::Refused(
                "leaves the root".into(),
            ));
        }
        Ok(vec!["a/x.md".into(), "b.md".into()])
    }
}

/// Language 1.1 X3 through the real front end: lambdas, the new built-ins,
/// `file()` and `glob()`.
#[test]
fn x3_builtins_evaluate_as_documented() {
    let input = input();
    let outputs = Outputs(vec![(
        "plan",
        json!({"tasks": ["a", "b", "a"], "ok": true, "n": 2, "note": null}),
    )]);
    let b = Bindings {
        result: ResultBinding::Steps(&outputs),
        input: &input,
        item: None,
        prev: None,
    };
    let cases: Vec<(&str, Want)> = vec![
        ("all(input.l, x -> x > 0)", Val(json!(true))),
        ("all(input.l, x -> x > 1)", Val(json!(false))),
        ("all(input.o.empty, x -> x > 1)", Val(json!(true))),
        ("any(input.l, x -> x == 3)", Val(json!(true))),
        ("any(input.o.empty, x -> x == 3)", Val(json!(false))),
        ("count(input.l, x -> x >= 2)", Val(json!(2))),
        ("filter(input.l, x -> x != 2)", Val(json!([1, 3]))),
        ("map(input.l, x -> x * 10)", Val(json!([10, 20, 30]))),
        (
            "map(input.e, s -> s + input.s)",
            Val(json!(["xabc", "yabc"])),
        ),
        // nesting: the inner lambda reads the outer parameter
        (
            "map(input.l, x -> count(input.l, y -> y < x))",
            Val(json!([0, 1, 2])),
        ),
        ("all(input.o.list, x -> x)", Err("type_error")),
        ("map(input.o.s, x -> x)", Err("type_error")),
        ("all(input.o.mixed, x -> x > 0)", Err("type_error")),
        // all/any decide early: the failing element is never reached
        ("any(input.o.mixed, x -> x == 1 || x > 0)", Val(json!(true))),
        ("all(input.l)", Val(json!(true))),
        ("unique(result.plan.tasks)", Val(json!(["a", "b"]))),
        ("unique([1, 1.0][0] == 1)", Static),
        ("keys(input.o.nested)", Val(json!(["k"]))),
        ("keys(input.o)[0]", Val(json!("a"))),
        ("keys(input.l)", Static),
        ("keys(input.o.l)", Err("type_error")),
        (
            "coalesce(result.plan.note, input.o.nul, 'none')",
            Val(json!("none")),
        ),
        ("coalesce(input.o.nul)", Val(json!(null))),
        ("coalesce(input.n, 1)", Val(json!(3))),
        // sha256 of the canonical JSON `{"k":[1,{"m":"deep"}]}`
        (
            "digest(input.o.nested)",
            Val(json!(stratum_vm::eval::sha256_hex(
                br#"{"k":[1,{"m":"deep"}]}"#
            ))),
        ),
        ("digest(1.0) == digest(1)", Val(json!(true))),
        ("file('data.json').json.n[1]", Val(json!(2))),
        ("file('data.json').exists", Val(json!(true))),
        ("file('missing').exists", Val(json!(false))),
        ("file('missing').json", Val(json!(null))),
        ("file('notes.md').json", Err("validation_error")),
        ("file('bin').text", Val(json!(null))),
        ("file('bin').json", Err("validation_error")),
        ("file('notes.md').size", Val(json!(23))),
        (
            "matches(file('notes.md').text, '(^|\\n)## Method')",
            Val(json!(true)),
        ),
        (
            "file('notes.md').sha256",
            Val(json!(stratum_vm::eval::sha256_hex(
                b"# Notes\n## Method\nsteps"
            ))),
        ),
        ("file('data.json').nope", Static),
        ("glob('**/*.md')", Val(json!(["a/x.md", "b.md"]))),
        ("len(glob('/etc/*'))", Err("validation_error")),
    ];
    let mut failures = Vec::new();
    for (expr, want) in &cases {
        let compiled = compile(expr);
        let got = compiled
            .as_ref()
            .map(|(plan, fi, ci)| eval(plan, &plan.flows[*fi].chunks[*ci], &b, &mut X3Files));
        let good = match (want, &got) {
            (Static, None) => true,
            (Val(v), Some(Ok(g))) => v == g,
            (Err(code), Some(Result::Err(e))) => e.code() == *code,
            _ => false,
        };
        if !good {
            let got = match &got {
                None => "rejected by the compiler".to_string(),
                Some(Ok(v)) => format!("value {v}"),
                Some(Result::Err(e)) => format!("error {e}"),
            };
            failures.push(format!("`{expr}`: got {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Properties of the language 1.1 expression syntax (X3) through the real
/// front end and the VM: lambdas and the new built-ins agree with a direct
/// computation in Rust on arbitrary lists, and arbitrary compositions of
/// them never panic the compiler or the evaluator.
mod x3_properties {
    use super::*;
    use proptest::prelude::*;

    /// Evaluates a compiled expression with `input.l = xs`, `input.n = k`.
    fn run(compiled: &(Plan, usize, usize), xs: &[i64], k: i64) -> Result<Value, String> {
        let mut input = input();
        input["l"] = json!(xs);
        input["n"] = json!(k);
        let outputs = Outputs(vec![("plan", json!({"tasks": [], "ok": true, "n": k}))]);
        let b = Bindings {
            result: ResultBinding::Steps(&outputs),
            input: &input,
            item: None,
            prev: None,
        };
        let (plan, fi, ci) = compiled;
        eval(plan, &plan.flows[*fi].chunks[*ci], &b, &mut X3Files).map_err(|e| e.to_string())
    }

    fn compiled(expr: &str) -> (Plan, usize, usize) {
        compile(expr).unwrap_or_else(|| panic!("`{expr}` is accepted by the checker"))
    }

    /// A random composition of the 1.1 constructs over `input.l` (numbers),
    /// `input.e` (strings) and `input.o` (an object): well typed or not.
    fn composition() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("input.l".to_string()),
            Just("input.e".to_string()),
            Just("input.o.nums".to_string()),
            Just("keys(input.o)".to_string()),
            Just("glob('*.md')".to_string()),
        ];
        leaf.prop_recursive(4, 24, 3, |inner| {
            prop_oneof![
                inner.clone().prop_map(|a| format!("unique({a})")),
                inner
                    .clone()
                    .prop_map(|a| format!("filter({a}, x -> x != 2)")),
                inner.clone().prop_map(|a| format!("map({a}, y -> y)")),
                inner
                    .clone()
                    .prop_map(|a| format!("map({a}, x -> count({a}, y -> y == x))")),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("coalesce({a}, {b})")),
                inner.clone().prop_map(|a| format!("keys({a})")),
                inner.prop_map(|a| format!("[digest({a})]")),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn lambdas_agree_with_a_direct_computation(
            xs in proptest::collection::vec(-5i64..5, 0..12),
            k in -5i64..5,
        ) {
            let count = compiled("count(input.l, x -> x > input.n)");
            let filter = compiled("filter(input.l, x -> x > input.n)");
            let map = compiled("map(input.l, x -> x * 2 + input.n)");
            let all = compiled("all(input.l, x -> x > input.n)");
            let none_at_most = compiled("!any(input.l, x -> x <= input.n)");
            let unique = compiled("unique(input.l)");
            let digest = compiled("digest(input.l) == digest(map(input.l, x -> x))");

            let above: Vec<i64> = xs.iter().copied().filter(|x| *x > k).collect();
            prop_assert_eq!(run(&count, &xs, k), Ok(json!(above.len())));
            prop_assert_eq!(run(&filter, &xs, k), Ok(json!(above)));
            let doubled: Vec<i64> = xs.iter().map(|x| x * 2 + k).collect();
            prop_assert_eq!(run(&map, &xs, k), Ok(json!(doubled)));
            prop_assert_eq!(run(&all, &xs, k), run(&none_at_most, &xs, k));
            prop_assert_eq!(run(&all, &xs, k), Ok(json!(xs.iter().all(|x| *x > k))));
            let mut firsts: Vec<i64> = Vec::new();
            for x in &xs {
                if !firsts.contains(x) {
                    firsts.push(*x);
                }
            }
            prop_assert_eq!(run(&unique, &xs, k), Ok(json!(firsts)));
            prop_assert_eq!(run(&digest, &xs, k), Ok(json!(true)));
        }

        #[test]
        fn compositions_never_panic(expr in composition(), xs in proptest::collection::vec(-3i64..3, 0..6)) {
            // the checker may reject it; what it accepts must evaluate to a
            // value or a typed run-time error, never a panic
            if let Some(c) = compile(&expr) {
                let _ = run(&c, &xs, 1);
            }
        }
    }
}
