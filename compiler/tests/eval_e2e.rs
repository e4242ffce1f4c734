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
