//! `stratum_vm::plan::hash::step_hash` (X8) on compiled specs: the same step
//! in differently ordered specs hashes the same; any change of what it does
//! changes its hash.

use stratum_vm::plan::Plan;
use stratum_vm::plan::hash::step_hash;

fn plan(spec: &str) -> Plan {
    let analysis = stratum_compiler::analyze(spec);
    assert_eq!(analysis.error_count(), 0, "{:?}", analysis.diagnostics);
    stratum_compiler::build::build_plan(&analysis).expect("the spec builds")
}

/// The hash of step `id` of flow `main`.
fn hash(p: &Plan, id: &str) -> String {
    let (f, fd) = p
        .flows
        .iter()
        .enumerate()
        .find(|(_, f)| p.str(f.name) == "main")
        .expect("flow main");
    let s = fd
        .steps
        .iter()
        .position(|s| p.str(s.id) == id)
        .expect("the step");
    step_hash(p, f as u32, s as u32).expect("indices of the plan")
}

const BASE: &str = r#"version: 1
contracts:
  Plan: {value: string, tags: "string[]"}
  Result: {value: string}
flows:
  entry: main
  main:
    input: {topic: string}
    output: {from: "${write.output}", contract: Result}
    steps:
      - id: plan
        do: "plan ${input.topic}"
        agent: claude
        out: Plan
        attempts: 2
        ensure:
          - expr: "len(result.tags) > 0"
          - file_exists: "notes.md"
      - id: write
        do: "write ${plan.output.value}"
        out: Result
"#;

/// The same flow with contracts, steps and strings in another order.
const REORDERED: &str = r#"version: 1
contracts:
  Result: {value: string}
  Plan: {tags: "string[]", value: string}
flows:
  entry: main
  main:
    input: {topic: string}
    output: {from: "${write.output}", contract: Result}
    steps:
      - id: write
        do: "write ${plan.output.value}"
        out: Result
      - id: plan
        attempts: 2
        out: Plan
        agent: claude
        do: "plan ${input.topic}"
        ensure:
          - expr: "len(result.tags) > 0"
          - file_exists: "notes.md"
"#;

#[test]
fn the_same_step_in_a_reordered_spec_hashes_the_same() {
    let (a, b) = (plan(BASE), plan(REORDERED));
    assert_eq!(hash(&a, "plan"), hash(&b, "plan"));
    assert_eq!(hash(&a, "write"), hash(&b, "write"));
    assert_ne!(hash(&a, "plan"), hash(&a, "write"));
    assert_eq!(hash(&a, "plan").len(), 64);
}

#[test]
fn positions_and_cost_hints_are_not_part_of_the_hash() {
    let spaced = BASE.replace("    steps:\n", "    steps:\n\n\n");
    assert_eq!(hash(&plan(BASE), "plan"), hash(&plan(&spaced), "plan"));
}

#[test]
fn any_change_of_what_a_step_does_changes_its_hash() {
    let base = plan(BASE);
    let changes = [
        (
            "task text",
            "plan ${input.topic}",
            "plan ${input.topic} now",
        ),
        ("ensure", "len(result.tags) > 0", "len(result.tags) > 1"),
        (
            "file predicate",
            "file_exists: \"notes.md\"",
            "file_exists: \"other.md\"",
        ),
        ("agent", "agent: claude", "agent: codex"),
        ("attempts", "attempts: 2", "attempts: 3"),
        ("contract", "tags: \"string[]\"}", "tags: \"integer[]\"}"),
    ];
    for (what, from, to) in changes {
        assert!(BASE.contains(from), "{what}: the base spec has `{from}`");
        let changed = plan(&BASE.replacen(from, to, 1));
        assert_ne!(hash(&base, "plan"), hash(&changed, "plan"), "{what}");
        assert_eq!(
            hash(&base, "write"),
            hash(&changed, "write"),
            "{what}: `write` is untouched"
        );
    }
}

#[test]
fn indices_outside_the_plan_have_no_hash() {
    let p = plan(BASE);
    assert_eq!(step_hash(&p, 0, 99), None);
    assert_eq!(step_hash(&p, 99, 0), None);
}

/// X10: a gate's `options` are part of its hash; other steps keep theirs.
#[test]
fn gate_options_change_the_gates_hash() {
    let gated = BASE.replace(
        "      - id: write\n",
        "      - id: review\n        after: [plan]\n        gate: {on_approve: null, on_revise: null, on_kill: null, options: [a, b]}\n      - id: write\n        after: [review]\n",
    );
    let base = plan(&gated);
    for to in [
        "options: [a, c]",
        "options: [b, a]",
        "options: \"${plan.output.tags}\"",
    ] {
        let changed = plan(&gated.replacen("options: [a, b]", to, 1));
        assert_ne!(hash(&base, "review"), hash(&changed, "review"), "{to}");
        assert_eq!(hash(&base, "plan"), hash(&changed, "plan"), "{to}");
    }
    let none = plan(&gated.replacen(", options: [a, b]", "", 1));
    assert_ne!(hash(&base, "review"), hash(&none, "review"));
}
