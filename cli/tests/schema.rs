//! `stratumc schema` against the corpus: the schema is a valid draft-07
//! schema; every example and every conformance spec without an `# error:`
//! annotation validates against it; every conformance spec whose errors are
//! all structural (unknown field S0101, missing field S0103, two constructs
//! S0107, a field the construct does not take S0108) is rejected.
//!
//! Validation uses the Python `jsonschema` package (installed with the MCP
//! SDK, `python3 -m pip install mcp`; CI installs it). YAML is turned into
//! JSON by `stratum_compiler::schema::instance`, which reads scalars the way
//! the front end does.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn specs_below(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            specs_below(&p, out);
        } else if p.to_string_lossy().ends_with(".stratum.yaml") {
            out.push(p);
        }
    }
}

/// The codes of the `# error:` / `# error@N:` annotations of a conformance file.
fn error_codes(text: &str) -> Vec<String> {
    let mut codes = Vec::new();
    for line in text.lines() {
        let Some(at) = line.find('#') else { continue };
        let rest = line[at + 1..].trim_start();
        let Some(rest) = rest.strip_prefix("error") else {
            continue;
        };
        let Some(colon) = rest.find(':') else {
            continue;
        };
        if !rest[..colon].is_empty() && !rest[..colon].starts_with('@') {
            continue;
        }
        for c in rest[colon + 1..].split(',') {
            let c = c.trim();
            if c.len() == 5 && c.starts_with('S') {
                codes.push(c.to_string());
            }
        }
    }
    codes
}

fn schema() -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_stratumc"))
        .arg("schema")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    serde_json::from_slice(&out.stdout).expect("`stratumc schema` prints JSON")
}

/// Validates every case with Python's jsonschema; returns the mismatches.
fn validate(schema: &Value, cases: &[Value]) -> Vec<Value> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("stratumc-schema-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("cases.json");
    std::fs::write(
        &input,
        serde_json::to_vec(&json!({"schema": schema, "cases": cases})).unwrap(),
    )
    .unwrap();
    let script = r#"
import json, sys
try:
    import jsonschema
except ImportError:
    print("the Python jsonschema package is missing: run `python3 -m pip install mcp` (or jsonschema)", file=sys.stderr)
    sys.exit(3)
doc = json.load(open(sys.argv[1]))
jsonschema.Draft7Validator.check_schema(doc["schema"])
v = jsonschema.Draft7Validator(doc["schema"])
bad = []
for c in doc["cases"]:
    errors = [e.message for e in v.iter_errors(c["instance"])]
    if bool(errors) == c["valid"]:
        bad.append({"name": c["name"], "valid": c["valid"], "errors": errors[:3]})
print(json.dumps(bad))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&input)
        .output()
        .expect("python3 must be installed for the schema test");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "python jsonschema failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

#[test]
fn the_corpus_agrees_with_the_schema() {
    let schema = schema();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    let mut files = Vec::new();
    specs_below(&root().join("examples"), &mut files);
    let examples = files.len();
    specs_below(&root().join("tests/conformance"), &mut files);
    let mut cases = Vec::new();
    let (mut valid, mut invalid) = (0, 0);
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue; // the corpus holds one file that is not UTF-8 on purpose
        };
        let name = f
            .strip_prefix(root())
            .unwrap_or(f)
            .to_string_lossy()
            .into_owned();
        let codes = error_codes(&text);
        let structural = !codes.is_empty()
            && codes
                .iter()
                .all(|c| ["S0101", "S0103", "S0107", "S0108"].contains(&c.as_str()));
        if !codes.is_empty() && !structural {
            continue; // semantic errors: beyond a schema
        }
        let Some(instance) = stratum_compiler::schema::instance(&text) else {
            // JSON has no infinity or NaN: those specs cannot be JSON instances
            let infinite = [".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"]
                .iter()
                .any(|t| text.contains(t));
            assert!(
                !codes.is_empty() || infinite,
                "{name}: a passing spec must load"
            );
            continue;
        };
        if codes.is_empty() {
            valid += 1;
        } else {
            invalid += 1;
        }
        cases.push(json!({"name": name, "instance": instance, "valid": codes.is_empty()}));
    }
    assert!(examples >= 7);
    assert!(valid > 100, "{valid} passing specs");
    assert!(invalid > 20, "{invalid} structurally broken specs");
    let bad = validate(&schema, &cases);
    assert!(
        bad.is_empty(),
        "{} of {} specs disagree with the schema:\n{}",
        bad.len(),
        cases.len(),
        serde_json::to_string_pretty(&bad).unwrap()
    );
}

#[test]
fn unknown_keys_are_rejected_everywhere() {
    let schema = schema();
    let base = stratum_compiler::schema::instance(
        &std::fs::read_to_string(root().join("examples/five-constructs.stratum.yaml")).unwrap(),
    )
    .unwrap();
    let mut cases = vec![json!({"name": "base", "instance": base, "valid": true})];
    let pointers = [
        "",
        "/flows/main",
        "/flows/main/steps/0",
        "/flows/main/steps/0/ensure/0",
        "/flows/main/steps/2/gate",
        "/flows/main/steps/3/fanout",
        "/flows/main/steps/3/fanout/steps/0",
        "/flows/main/budget",
        "/flows/main/output",
    ];
    for p in pointers {
        let mut doc = base.clone();
        doc.pointer_mut(p)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("{p} is an object"))
            .insert("colour".into(), json!("blue"));
        cases.push(json!({"name": format!("unknown key at {p}"), "instance": doc, "valid": false}));
    }
    // a field the construct does not take, two constructs, a bad enum value
    let mut doc = base.clone();
    doc["flows"]["main"]["steps"][2]["agent"] = json!("claude");
    cases.push(json!({"name": "agent on a gate", "instance": doc, "valid": false}));
    let mut doc = base.clone();
    doc["flows"]["main"]["steps"][0]["set"] = json!({"a": "1"});
    cases.push(json!({"name": "do and set", "instance": doc, "valid": false}));
    let mut doc = base.clone();
    doc["flows"]["main"]["steps"][0]["agent"] = json!("gpt");
    cases.push(json!({"name": "unknown agent", "instance": doc, "valid": false}));
    // X9 on a fanout stage: `continue` and `goto` entries, never a recovery
    // step or a `rollback` (S0345)
    let stage_on_fail = [
        (json!("continue"), true),
        (json!({"goto": "start", "max": 1, "note": "again"}), true),
        (json!(["continue"]), true),
        (
            json!([{"when": "true", "goto": "start", "max": 2}, "continue"]),
            true,
        ),
        (json!("recover"), false),
        (
            json!({"goto": "start", "max": 1, "rollback": "start"}),
            false,
        ),
        (json!({"rollback": "start"}), false),
        (json!(["recover"]), false),
    ];
    for (form, valid) in stage_on_fail {
        let mut doc = base.clone();
        doc["flows"]["main"]["steps"][3]["fanout"]["steps"][0]["on_fail"] = form.clone();
        cases.push(
            json!({"name": format!("stage on_fail {form}"), "instance": doc, "valid": valid}),
        );
    }
    let mut doc = base;
    doc["version"] = json!("1");
    cases.push(json!({"name": "version as a string", "instance": doc, "valid": false}));
    let bad = validate(&schema, &cases);
    assert!(
        bad.is_empty(),
        "{}",
        serde_json::to_string_pretty(&bad).unwrap()
    );
}
