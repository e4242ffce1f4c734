//! Cost analysis against hand-computed expectations: attempts, iterate,
//! judged ensures, fanouts with known and unknown lengths, revise rounds
//! through reset closures (chained, capped, nested, diamond-shaped, reached
//! through a route), sub-flows, time along the graph, the ordering
//! `min ≤ expected ≤ worst`, and the S0701 budget warning through `analyze`.
//!
//! Owns: the expectations, each derived in a comment from the model in
//! `compiler/src/cost.rs`.
//! Must never: depend on the built-in profiles except where a test says so
//! (figures use the round profiles of [`CONFIG`]).

use serde_json::json;
use stratum_compiler::cost::{CostConfig, Estimate, FlowCost, analyze_cost};
use stratum_compiler::ir::Ir;
use stratum_compiler::{Code, analyze};

/// Round profiles: claude passes half of its attempts, codex 80 %.
const CONFIG: &str = "
[agents.claude]
p_success = 0.5
tokens = 1000
usd = 1
ms = 1000

[agents.codex]
p_success = 0.8
tokens = 2000
usd = 2
ms = 2000

[judge]
p_success = 1
tokens = 100
usd = 0.1
ms = 10
";

fn config() -> CostConfig {
    CostConfig::from_toml(CONFIG).unwrap()
}

/// A spec with the test contracts and these flows (`entry` included).
fn spec(flows: &str) -> String {
    format!(
        "version: 1\ncontracts:\n  Out: {{text: string}}\n  List: {{items: \"string[]\"}}\nflows:\n{flows}"
    )
}

/// The IR of a spec that must have no diagnostic but budget warnings.
fn ir(flows: &str) -> Ir {
    let text = spec(flows);
    let a = analyze(&text);
    let shown: Vec<String> = a
        .diagnostics
        .iter()
        .filter(|d| d.code != Code::BudgetExceeded)
        .map(|d| format!("{} {}", d.code.as_str(), d.message))
        .collect();
    assert!(shown.is_empty(), "{text}\n{shown:#?}");
    a.ir.unwrap()
}

fn cost_of(ir: &Ir, flow: &str, inputs: Option<serde_json::Value>) -> FlowCost {
    let (id, _) = ir.flow(flow).unwrap();
    let c = analyze_cost(ir, id, inputs.as_ref(), &config());
    assert_ordered(&c);
    c
}

fn cost(flows: &str) -> FlowCost {
    cost_of(&ir(flows), "main", None)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[track_caller]
fn assert_est(e: &Estimate, min: f64, expected: f64, worst: f64) {
    assert!(
        close(e.min, min)
            && close(e.expected, expected)
            && e.worst.is_some_and(|w| close(w, worst)),
        "expected min {min}, expected {expected}, worst {worst}; got {e:?}"
    );
    assert_eq!(e.worst_symbolic, None);
}

fn entries(c: &FlowCost) -> Vec<(&str, u64)> {
    c.steps.iter().map(|s| (s.id.as_str(), s.entries)).collect()
}

/// `min ≤ expected ≤ worst` in every dimension (concrete parts).
fn assert_ordered(c: &FlowCost) {
    let mut all: Vec<(&str, &Estimate)> = vec![
        ("dispatches", &c.dispatches),
        ("tokens", &c.tokens),
        ("usd", &c.usd),
        ("ms", &c.ms),
        ("agent_ms", &c.agent_ms),
    ];
    for s in &c.steps {
        all.push((s.id.as_str(), &s.dispatches));
    }
    for (name, e) in all {
        assert!(e.min <= e.expected + 1e-9, "{}: {name}: {e:?}", c.flow);
        if let Some(w) = e.worst {
            assert!(e.expected <= w + 1e-9, "{}: {name}: {e:?}", c.flow);
        }
        assert_eq!(
            e.worst.is_none(),
            e.worst_symbolic.is_some(),
            "{name}: {e:?}"
        );
    }
}

const ONE_DO: &str = "  entry: main
  main:
    input: {}
    output: {from: \"${a.output}\", contract: Out}
    steps:
";

#[test]
fn attempts_multiply_dispatches() {
    let c = cost(&format!(
        "{ONE_DO}      - {{id: a, do: \"A\", out: Out, attempts: 3}}\n"
    ));
    // q = 0.5, k = 3: E = (1 - 0.5^3) / 0.5 = 1.75
    assert_est(&c.dispatches, 1.0, 1.75, 3.0);
    assert_est(&c.tokens, 1000.0, 1750.0, 3000.0);
    assert_est(&c.usd, 1.0, 1.75, 3.0);
    assert_est(&c.ms, 1000.0, 1750.0, 3000.0);
    assert_eq!(entries(&c), [("a", 1)]);
    // the run completes when one of 3 attempts passes: 1 - 0.5^3
    assert!(close(c.p_success, 0.875));
}

#[test]
fn default_attempts_are_two() {
    let c = cost(&format!("{ONE_DO}      - {{id: a, do: \"A\", out: Out}}\n"));
    assert_est(&c.dispatches, 1.0, 1.5, 2.0);
}

#[test]
fn iterate_multiplies_attempts() {
    let c = cost(&format!(
        "{ONE_DO}      - {{id: a, do: \"A\", out: Out, attempts: 2, iterate: {{max: 4, until: \"result.text == 'done'\"}}}}\n"
    ));
    // worst 2 × 4 = 8; expected (1 - 0.5^2)/0.5 × (1 - 0.5^4)/0.5 = 1.5 × 1.875
    assert_est(&c.dispatches, 1.0, 2.8125, 8.0);
    assert_eq!(c.steps[0].dispatches.worst, Some(8.0));
}

#[test]
fn judged_ensures_cost_judge_calls_but_no_dispatches() {
    let c = cost(&format!(
        "{ONE_DO}      - id: a\n        do: \"A\"\n        out: Out\n        agent: codex\n        attempts: 2\n        ensure:\n          - judged: {{statement: \"good\", stakes: cheap}}\n          - judged: {{statement: \"true\", stakes: paranoid}}\n"
    ));
    // per dispatch: 2000 + 2 × 100 tokens, 2 + 2 × 0.1 usd, 2000 + 2 × 10 ms
    // q = 0.8 × 1^2; E = (1 - 0.2^2)/0.8 = 1.2
    assert_est(&c.dispatches, 1.0, 1.2, 2.0);
    assert_est(&c.tokens, 2200.0, 2640.0, 4400.0);
    assert_est(&c.usd, 2.2, 2.64, 4.4);
    assert_est(&c.ms, 2020.0, 2424.0, 4040.0);

    // a judge that rejects half the outputs halves q: E = (1 - 0.6^2)/0.4 = 1.6
    let mut strict = config();
    strict.judge.p_success = std::f64::consts::FRAC_1_SQRT_2;
    let ir = ir(&format!(
        "{ONE_DO}      - id: a\n        do: \"A\"\n        out: Out\n        agent: codex\n        attempts: 2\n        ensure:\n          - judged: {{statement: \"good\", stakes: cheap}}\n          - judged: {{statement: \"true\", stakes: paranoid}}\n"
    ));
    let c = analyze_cost(&ir, 0, None, &strict);
    assert!(close(c.dispatches.expected, 1.6), "{:?}", c.dispatches);
    assert_eq!(c.dispatches.worst, Some(2.0));
}

#[test]
fn set_and_gate_steps_dispatch_nothing() {
    let c = cost(
        "  entry: main
  main:
    input: {}
    output: {from: \"${s.output}\", contract: Out}
    steps:
      - {id: a, do: \"A\", out: Out, attempts: 1}
      - id: g
        after: [a]
        gate: {on_approve: null, on_revise: null, on_kill: null}
      - id: s
        after: [g]
        set: {text: \"result.a.text\"}
        out: Out
",
    );
    assert_est(&c.dispatches, 1.0, 1.0, 1.0);
    assert_eq!(c.decisions, 1);
    let constructs: Vec<&str> = c.steps.iter().map(|s| s.construct.as_str()).collect();
    assert_eq!(constructs, ["do", "gate", "set"]);
}

const FANOUT: &str = "  entry: main
  main:
    input: {items: \"string[]\"}
    output: {from: \"${plan.output}\", contract: Out}
    steps:
      - {id: plan, do: \"Plan\", out: Out, attempts: 1}
      - id: fan
        after: [plan]
        fanout:
          over: \"${input.items}\"
          concurrency: 2
          isolation: none
          require: all
          merge: sequential
          steps:
            - {do: \"First ${item}\", attempts: 2}
            - {do: \"Second ${item}\", agent: codex, attempts: 3}
";

#[test]
fn fanout_with_a_known_length() {
    let ir = ir(FANOUT);
    let c = cost_of(
        &ir,
        "main",
        Some(json!({"items": ["a", "b", "c", "d", "e"]})),
    );
    // worst: 1 + 5 items × (2 + 3); min: 1 + 5 × 2 stages;
    // expected: 1 + 5 × (1.5 + (1 - 0.2^3)/0.8 = 1.24)
    assert_est(&c.dispatches, 11.0, 14.7, 26.0);
    // tokens: 1000 + 5 × (2 × 1000 + 3 × 2000)
    assert_est(
        &c.tokens,
        16000.0,
        1000.0 + 5.0 * (1500.0 + 2480.0),
        41000.0,
    );
    // wall time: ceil(5 / 2) = 3 waves of one item (2 × 1000 + 3 × 2000)
    assert_eq!(c.ms.worst, Some(1000.0 + 3.0 * 8000.0));
    assert_eq!(c.ms.min, 1000.0 + 3.0 * 3000.0);
    // summed time: every item
    assert_eq!(c.agent_ms.worst, Some(41000.0));
    assert_eq!(c.steps[1].dispatches.worst, Some(25.0));
    assert!(c.notes.is_empty());

    let empty = cost_of(&ir, "main", Some(json!({"items": []})));
    assert_est(&empty.dispatches, 1.0, 1.0, 1.0);
}

#[test]
fn fanout_with_an_unknown_length_is_symbolic() {
    let c = cost(FANOUT);
    assert_eq!(c.dispatches.worst, None);
    assert_eq!(
        c.dispatches.worst_symbolic.as_deref(),
        Some("1 + 5 * len(input.items)")
    );
    assert_eq!(
        c.dispatches.min_symbolic.as_deref(),
        Some("1 + 2 * len(input.items)")
    );
    assert_eq!(
        c.dispatches.expected_symbolic.as_deref(),
        Some("1 + 2.74 * len(input.items)")
    );
    // the concrete parts are the figures at zero items
    assert_eq!((c.dispatches.min, c.dispatches.expected), (1.0, 1.0));
    assert_eq!(
        c.ms.worst_symbolic.as_deref(),
        Some("1000 + 8000 * ceil(len(input.items) / 2)")
    );
    assert_eq!(
        c.steps[1].dispatches.worst_symbolic.as_deref(),
        Some("5 * len(input.items)")
    );
    assert_eq!(c.steps[0].dispatches.worst, Some(1.0));

    // inputs without the list: a note, and the bound stays symbolic
    let c = cost_of(&ir(FANOUT), "main", Some(json!({"other": 1})));
    assert_eq!(c.dispatches.worst, None);
    assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
    assert!(
        c.notes[0].contains("`input.items` is missing"),
        "{:?}",
        c.notes
    );
}

#[test]
fn fanout_lengths_follow_paths_and_carry_variables() {
    let flows = "  entry: main
  main:
    input: {groups: \"List[]\"}
    output: {from: \"${plan.output}\", contract: List}
    carry:
      fixed: {initial: \"${input.groups[1].items}\"}
      planned: {initial: \"${plan.output.items}\"}
    steps:
      - {id: plan, do: \"Plan\", out: List, attempts: 1}
      - id: by_path
        fanout:
          over: \"${input.groups[1].items}\"
          concurrency: 1
          isolation: none
          require: any
          merge: sequential
          steps: [{do: \"A ${item}\", attempts: 1}]
      - id: by_carry
        after: [plan]
        fanout:
          over: \"${fixed}\"
          concurrency: 1
          isolation: none
          require: all
          merge: sequential
          steps: [{do: \"B ${item}\", attempts: 1}]
      - id: by_step
        after: [plan]
        fanout:
          over: \"${plan.output.items}\"
          concurrency: 1
          isolation: none
          require: all
          merge: sequential
          steps: [{do: \"C ${item}\", attempts: 1}]
      - id: by_planned
        after: [plan]
        fanout:
          over: \"${planned}\"
          concurrency: 3
          isolation: none
          require: all
          merge: sequential
          steps: [{do: \"D ${item}\", attempts: 2}]
";
    let ir = ir(flows);
    let inputs = json!({"groups": [{"items": ["x"]}, {"items": ["a", "b", "c"]}]});
    let c = cost_of(&ir, "main", Some(inputs));
    let worst: Vec<(Option<f64>, Option<&str>)> = c
        .steps
        .iter()
        .map(|s| (s.dispatches.worst, s.dispatches.worst_symbolic.as_deref()))
        .collect();
    assert_eq!(
        worst,
        [
            (Some(1.0), None),
            (Some(3.0), None),
            (Some(3.0), None),
            (None, Some("len(plan.output.items)")),
            (None, Some("2 * len(planned)")),
        ]
    );
    // `require: any` still dispatches every item in the minimum
    assert_eq!(c.steps[1].dispatches.min, 3.0);
    assert_eq!(
        c.dispatches.worst_symbolic.as_deref(),
        Some("7 + len(plan.output.items) + 2 * len(planned)")
    );
    // parallel paths: plan → by_carry (4000), plan → by_step (1000 + 1000 × len),
    // plan → by_planned (1000 + 2000 × waves); their maximum is bounded
    // termwise, since which one is longest depends on the lengths
    assert_eq!(
        c.ms.worst_symbolic.as_deref(),
        Some("4000 + 2000 * ceil(len(planned) / 3) + 1000 * len(plan.output.items)")
    );
}

#[test]
fn a_revise_re_enters_its_closure() {
    let c = cost(
        "  entry: main
  main:
    input: {}
    output: {from: \"${a.output}\", contract: Out}
    max_rounds: 3
    steps:
      - {id: a, do: \"A\", out: Out, attempts: 1}
      - id: g
        after: [a]
        gate: {on_approve: null, on_revise: a, on_kill: null, max_rounds: 2}
",
    );
    // the gate's own cap (2) is below the flow's (3): 1 + 2 entries
    assert_eq!(entries(&c), [("a", 3), ("g", 3)]);
    // expected and min assume the gate approves
    assert_est(&c.dispatches, 1.0, 1.0, 3.0);
    assert_eq!(c.decisions, 3);
    assert_eq!(c.ms.worst, Some(3000.0));
}

#[test]
fn the_flow_cap_bounds_all_gates_together() {
    let c = cost(
        "  entry: main
  main:
    input: {}
    output: {from: \"${a.output}\", contract: Out}
    max_rounds: 3
    steps:
      - {id: a, do: \"A\", out: Out, attempts: 1}
      - {id: b, after: [a], do: \"B\", attempts: 1}
      - id: g1
        after: [b]
        gate: {on_approve: null, on_revise: a, on_kill: null, max_rounds: 2}
      - id: g2
        after: [g1]
        gate: {on_approve: null, on_revise: b, on_kill: null}
",
    );
    // a: g1 only (2); b, g1, g2: g1 (2) + g2 (flow cap 3) = 5, capped at 3
    assert_eq!(entries(&c), [("a", 3), ("b", 4), ("g1", 4), ("g2", 4)]);
    assert_eq!(c.dispatches.worst, Some(7.0));
    // time: one pass (2000), then the flow's 3 rounds go to the longest
    // closures first: g1's (a, b: 2000) twice, g2's (b: 1000) once
    assert_eq!(c.ms.worst, Some(2000.0 + 2.0 * 2000.0 + 1000.0));
}

const NESTED: &str = "  entry: main
  main:
    input: {}
    output: {from: \"${c.output}\", contract: Out}
    max_rounds: ROUNDS
    steps:
      - {id: a, do: \"A\", out: Out, attempts: 1}
      - {id: b, after: [a], do: \"B\", attempts: 1}
      - id: g1
        after: [b]
        gate: {on_approve: null, on_revise: b, on_kill: null, max_rounds: 2}
      - {id: c, after: [g1], do: \"C\", out: Out, attempts: 1}
      - id: g2
        after: [c]
        gate: {on_approve: null, on_revise: a, on_kill: null, max_rounds: 1}
";

#[test]
fn nested_closures_add_up_to_the_flow_cap() {
    // closure(g1) = b, g1, c, g2 (2 rounds); closure(g2) = everything (1 round)
    let c = cost(&NESTED.replace("ROUNDS", "3"));
    assert_eq!(
        entries(&c),
        [("a", 2), ("b", 4), ("g1", 4), ("c", 4), ("g2", 4)]
    );
    assert_eq!(c.dispatches.worst, Some(2.0 + 4.0 + 4.0));
    // one pass 3000; g2's round re-runs a, b, c (3000), g1's two rounds b, c (2000 each)
    assert_eq!(c.ms.worst, Some(3000.0 + 3000.0 + 2.0 * 2000.0));
    assert_eq!(c.decisions, 8);

    let c = cost(&NESTED.replace("ROUNDS", "2"));
    assert_eq!(
        entries(&c),
        [("a", 2), ("b", 3), ("g1", 3), ("c", 3), ("g2", 3)]
    );
    // two rounds in all: the longest closure (g2's, 3000) then g1's (2000)
    assert_eq!(c.ms.worst, Some(3000.0 + 3000.0 + 2000.0));
}

#[test]
fn diamond_closures_and_time_outside_them() {
    let c = cost(
        "  entry: main
  main:
    input: {}
    output: {from: \"${d.output}\", contract: Out}
    max_rounds: 2
    steps:
      - {id: a, do: \"A\", out: Out, attempts: 1}
      - {id: b, after: [a], do: \"B\", attempts: 1}
      - {id: c, after: [a], do: \"C\", attempts: 3}
      - {id: d, after: [b, c], do: \"D\", out: Out, attempts: 1}
      - id: g
        after: [d]
        gate: {on_approve: null, on_revise: b, on_kill: null, max_rounds: 2}
",
    );
    // closure(b) = b, d, g: c joins d but is not reset
    assert_eq!(
        entries(&c),
        [("a", 1), ("b", 3), ("c", 1), ("d", 3), ("g", 3)]
    );
    assert_eq!(c.dispatches.worst, Some(1.0 + 3.0 + 3.0 + 3.0));
    // first pass a (1000) → c (3000) → d (1000) = 5000; each of the 2 rounds
    // re-runs b → d (2000): 9000. Weighting one path by entries would give
    // 7000, less than the run a → {b, c} → d → g → (b → d → g) × 2 can take.
    assert_eq!(c.ms.worst, Some(9000.0));
    assert_eq!(c.agent_ms.worst, Some(10000.0));
}

#[test]
fn a_route_reachable_descendant_is_in_the_closure() {
    let c = cost(
        "  entry: main
  main:
    input: {}
    output: {from: \"${x.output}\", contract: Out}
    max_rounds: 2
    steps:
      - {id: w, do: \"W\", out: Out, attempts: 1, on_fail: r}
      - {id: r, do: \"R\", attempts: 1}
      - {id: s, after: [r], do: \"S\", attempts: 1}
      - id: g
        after: [w, s]
        gate: {on_approve: null, on_revise: w, on_kill: null}
      - {id: x, after: [g], do: \"X\", out: Out, attempts: 1}
",
    );
    // closure(w) = w, r (on_fail), s (after r), g, x: all 1 + 2 entries
    assert_eq!(
        entries(&c),
        [("w", 3), ("r", 3), ("s", 3), ("g", 3), ("x", 3)]
    );
    assert_eq!(c.dispatches.worst, Some(12.0));
    // min: r only runs when routed; expected: r weighted by P(w fails) = 0.5
    assert_est(&c.dispatches, 3.0, 3.5, 12.0);
    let r = &c.steps[1].dispatches;
    assert_eq!((r.min, r.expected, r.worst), (0.0, 0.5, Some(3.0)));
}

#[test]
fn gate_routes_weigh_approve_targets_fully_and_kill_targets_not_at_all() {
    let c = cost(
        "  entry: main
  main:
    input: {}
    output: {from: \"${a.output}\", contract: Out}
    steps:
      - {id: a, do: \"A\", out: Out, attempts: 1}
      - id: g
        after: [a]
        gate: {on_approve: ship, on_revise: null, on_kill: cleanup}
      - {id: ship, do: \"Ship\", attempts: 1}
      - {id: cleanup, do: \"Clean up\", attempts: 1}
",
    );
    let d: Vec<(f64, f64, Option<f64>)> = c
        .steps
        .iter()
        .map(|s| (s.dispatches.min, s.dispatches.expected, s.dispatches.worst))
        .collect();
    assert_eq!(
        d,
        [
            (1.0, 1.0, Some(1.0)),
            (0.0, 0.0, Some(0.0)),
            (0.0, 1.0, Some(1.0)),
            (0.0, 0.0, Some(1.0)),
        ]
    );
    assert_est(&c.dispatches, 1.0, 2.0, 3.0);
}

const SUBFLOW: &str = "  entry: main
  child:
    input: {}
    output: {from: \"${work.output}\", contract: Out}
    max_rounds: 1
    steps:
      - {id: work, do: \"Work\", out: Out, attempts: 3}
      - id: ok
        after: [work]
        gate: {on_approve: null, on_revise: work, on_kill: null}
  main:
    input: {}
    output: {from: \"${call.output}\", contract: Out}
    max_rounds: 1
    steps:
      - {id: first, do: \"First\", out: Out, attempts: 1}
      - id: call
        after: [first]
        run: child
        with: {}
      - id: sign
        after: [call]
        gate: {on_approve: null, on_revise: call, on_kill: null}
";

#[test]
fn sub_flows_cost_their_worst_case_per_entry() {
    let ir = ir(SUBFLOW);
    let child = cost_of(&ir, "child", None);
    // work: 3 attempts × (1 + 1 round)
    assert_eq!(entries(&child), [("work", 2), ("ok", 2)]);
    assert_est(&child.dispatches, 1.0, 1.75, 6.0);
    assert_eq!(child.ms.worst, Some(6000.0));

    let main = cost_of(&ir, "main", None);
    // call is entered twice (sign revises it): 2 × 6
    assert_eq!(entries(&main), [("first", 1), ("call", 2), ("sign", 2)]);
    assert_eq!(main.steps[1].dispatches.worst, Some(12.0));
    assert_est(&main.dispatches, 2.0, 2.75, 13.0);
    // decisions: sign twice, and ok twice per entry of call
    assert_eq!(main.decisions, 6);
    // time: first (1000) + call (6000), and one round re-running call (6000)
    assert_eq!(main.ms.worst, Some(13000.0));
}

#[test]
fn the_config_changes_figures_but_not_dispatch_bounds() {
    let ir = ir(&format!(
        "{ONE_DO}      - {{id: a, do: \"A\", out: Out, attempts: 3}}\n"
    ));
    let built_in = analyze_cost(&ir, 0, None, &CostConfig::default());
    // claude: $0.30 and 20 000 tokens per dispatch, p = 0.85
    assert_eq!(built_in.dispatches.worst, Some(3.0));
    assert_eq!(built_in.usd.worst, Some(0.9));
    assert_eq!(built_in.tokens.worst, Some(60000.0));
    let cheap = CostConfig::from_toml("[agents.claude]\nusd = 0.1\np_success = 1\n").unwrap();
    let c = analyze_cost(&ir, 0, None, &cheap);
    assert_eq!(c.dispatches.worst, Some(3.0));
    assert_eq!(c.dispatches.expected, 1.0);
    assert!(close(c.usd.worst.unwrap(), 0.3));
}

// ---------------------------------------------------------------------------
// Budgets

fn warnings(flows: &str) -> Vec<stratum_compiler::Diagnostic> {
    let text = spec(flows);
    let a = analyze(&text);
    assert_eq!(a.error_count(), 0, "{:?}", a.diagnostics);
    a.diagnostics
        .into_iter()
        .filter(|d| d.code == Code::BudgetExceeded)
        .collect()
}

#[test]
fn a_flow_budget_below_the_worst_case_warns() {
    let flows = "  entry: main
  main:
    input: {}
    output: {from: \"${a.output}\", contract: Out}
    budget: {dispatches: 5}
    steps:
      - {id: a, do: \"A\", out: Out, attempts: 2}
      - {id: b, after: [a], do: \"B\", attempts: 4}
";
    let text = spec(flows);
    let w = warnings(flows);
    assert_eq!(w.len(), 1, "{w:?}");
    let d = &w[0];
    assert_eq!(d.code.as_str(), "S0701");
    assert!(!d.is_error());
    assert_eq!(
        d.message,
        "the worst case of flow `main` is 6 dispatches, above its budget of 5 dispatches; step `b` contributes most"
    );
    assert!(text[d.span.range()].starts_with("{dispatches: 5}"));
    assert!(text[d.labels[0].span.range()].contains("id: b"));
    assert!(
        d.notes[0].starts_with(
            "step `b` contributes 4 of the 6 dispatches (66.7%): 4 attempts per entry, 1 entry"
        ),
        "{:?}",
        d.notes
    );

    // the same figures in the verdict of `analyze_cost`
    let c = cost(flows);
    let x = &c.budget.exceeded[0];
    assert_eq!(
        (x.step.as_deref(), x.dimension.as_str(), x.limit, x.worst),
        (None, "dispatches", 5.0, 6.0)
    );
    assert_eq!(x.dominant_step.as_deref(), Some("b"));
    assert!(close(x.share, 4.0 / 6.0));
}

#[test]
fn budgets_at_or_above_the_worst_case_and_symbolic_ones_are_quiet() {
    // exactly at the limit: a debit equal to the limit is allowed
    // (built-in claude profile: 2 attempts × $0.30)
    let at_limit = format!("{ONE_DO}      - {{id: a, do: \"A\", out: Out}}\n").replacen(
        "    steps:\n",
        "    budget: {dispatches: 2, usd: 0.6}\n    steps:\n",
        1,
    );
    assert!(warnings(&at_limit).is_empty());
    // a fanout over an unknown list: the limit cannot be checked
    let flows = FANOUT.replacen(
        "    steps:\n",
        "    budget: {dispatches: 1}\n    steps:\n",
        1,
    );
    assert!(warnings(&flows).is_empty());
    let c = cost_of(&ir(&flows), "main", None);
    assert!(c.budget.exceeded.is_empty());
    assert_eq!(
        c.budget.unchecked[0].worst_symbolic,
        "1 + 5 * len(input.items)"
    );
    // with the inputs it can
    let c = cost_of(&ir(&flows), "main", Some(json!({"items": ["a"]})));
    assert_eq!(c.budget.exceeded[0].worst, 6.0);
    assert_eq!(c.budget.exceeded[0].dominant_step.as_deref(), Some("fan"));
}

#[test]
fn step_budgets_apply_per_entry() {
    let flows = "  entry: main
  main:
    input: {}
    output: {from: \"${a.output}\", contract: Out}
    max_rounds: 2
    steps:
      - {id: a, do: \"A\", out: Out, attempts: 2, budget: {dispatches: 2}}
      - {id: b, after: [a], do: \"B\", attempts: 3, budget: {dispatches: 2, tokens: 1000000}}
      - id: g
        after: [b]
        gate: {on_approve: null, on_revise: a, on_kill: null}
";
    // a: 2 per entry (3 entries) fits; b: 3 per entry does not
    let w = warnings(flows);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        w[0].message,
        "the worst case of step `b` is 3 dispatches per entry, above its budget of 2 dispatches"
    );
    let c = cost(flows);
    assert_eq!(c.budget.exceeded[0].step.as_deref(), Some("b"));
    assert_eq!(c.budget.declared, None);
}

#[test]
fn money_and_time_budgets_use_the_built_in_profiles_in_check() {
    let flows = "  entry: main
  main:
    input: {}
    output: {from: \"${a.output}\", contract: Out}
    budget: {usd: 1, ms: 100000, tokens: 1000000}
    steps:
      - {id: a, do: \"A\", out: Out, attempts: 2}
      - {id: b, do: \"B\", agent: codex, attempts: 3}
";
    // claude 2 × $0.30 + codex 3 × $0.25 = $1.35; summed time 2 × 120 s + 3 × 180 s
    let w = warnings(flows);
    let messages: Vec<&str> = w.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "the worst case of flow `main` is 1.35 usd, above its budget of 1 usd; step `b` contributes most",
            "the worst case of flow `main` is 780000 ms, above its budget of 100000 ms; step `b` contributes most",
        ]
    );
    assert!(w[1].notes.iter().any(|n| n.contains("added up")));
}

#[test]
fn called_flows_are_checked_against_their_own_budget() {
    let flows = SUBFLOW.replace(
        "    max_rounds: 1\n    steps:\n      - {id: work",
        "    max_rounds: 1\n    budget: {dispatches: 4}\n    steps:\n      - {id: work",
    );
    let w = warnings(&flows);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].message
            .starts_with("the worst case of flow `child` is 6 dispatches")
    );
}

#[test]
fn every_example_is_ordered_and_concrete_once_lengths_are_known() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".stratum.yaml") {
            continue;
        }
        let a = analyze(&std::fs::read_to_string(&path).unwrap());
        let ir = a.ir.unwrap();
        for id in 0..ir.flows.len() {
            let c = analyze_cost(&ir, id, None, &CostConfig::default());
            assert_ordered(&c);
            for n in [0, 1, 7] {
                let items: Vec<u32> = (0..n).collect();
                let inputs = json!({"items": items, "files": items, "topic": "t"});
                let c = analyze_cost(&ir, id, Some(&inputs), &CostConfig::default());
                assert_ordered(&c);
            }
        }
        seen += 1;
    }
    assert!(seen >= 7);
}

#[test]
fn cost_hints_replace_the_profile_for_their_step_only() {
    // X6: `a` costs 500 tokens, $0.25, 100 ms per dispatch and passes 80 % of
    // its attempts; its judge call costs 40 tokens (the judge's usd and ms
    // stay the profile's: 0.1 and 10). `b` keeps the claude profile.
    let c = cost(&format!(
        "{ONE_DO}      - id: a\n        do: \"A\"\n        out: Out\n        attempts: 2\n        cost: {{tokens: 500, usd: 0.25, ms: 100, p: 0.8, judge_tokens: 40}}\n        ensure:\n          - judged: {{statement: \"good\", stakes: cheap}}\n      - {{id: b, do: \"B\", out: Out, attempts: 1, after: [a]}}\n"
    ));
    // a: q = 0.8 × 1 (judge p 1); E = (1 - 0.2^2) / 0.8 = 1.2; worst 2
    // b: 1 dispatch, 1000 tokens, $1, 1000 ms
    assert_est(&c.dispatches, 2.0, 2.2, 3.0);
    // tokens per `a` dispatch: 500 + 40
    assert_est(
        &c.tokens,
        1540.0,
        1.2 * 540.0 + 1000.0,
        2.0 * 540.0 + 1000.0,
    );
    assert_est(&c.usd, 1.35, 1.2 * 0.35 + 1.0, 2.0 * 0.35 + 1.0);
}

#[test]
fn leased_dispatches_may_be_handed_out_three_times_per_attempt_in_the_worst_case() {
    // X7: `a` has its own lease, `b` the flow default. An orphan is
    // re-dispatched without consuming an attempt, and the third orphan in a
    // row fails it: up to 3 dispatches per attempt. The expected case ignores
    // orphans (q = 0.5, k = 2: E = 1.5 per step); worst 2 × 3 per step.
    let spec = format!(
        "{}    dispatch_timeout_ms: 60000\n{}",
        ONE_DO.trim_end_matches("    steps:\n"),
        "    steps:\n      - {id: a, do: \"A\", out: Out, attempts: 2, timeout_ms: 1000}\n      - {id: b, do: \"B\", out: Out, attempts: 2, after: [a]}\n"
    );
    let c = cost(&spec);
    assert_est(&c.dispatches, 2.0, 3.0, 12.0);
    // without any lease, the worst case is the attempts
    let c = cost(&format!(
        "{ONE_DO}      - {{id: a, do: \"A\", out: Out, attempts: 2}}\n"
    ));
    assert_est(&c.dispatches, 1.0, 1.5, 2.0);
}

#[test]
fn a_continue_step_counts_its_dependents_and_does_not_fail_the_run() {
    // `a` continues past its failure, so `b` (which reads it) and `c` run in
    // every case: all three count in min, expected and worst
    let flows = "  entry: main
  main:
    input: {}
    output: {from: \"${c.output}\", contract: Out}
    steps:
      - {id: a, do: \"A\", out: Out, attempts: 1, on_fail: continue}
      - {id: b, do: \"B ${a.status}\", out: Out, attempts: 1}
      - {id: c, after: [b], do: \"C\", out: Out, attempts: 1}
";
    let c = cost(flows);
    assert_est(&c.dispatches, 3.0, 3.0, 3.0);
    // only b and c can fail the run: 0.5 × 0.5 (a's failure is handled)
    assert!(close(c.p_success, 0.25), "{}", c.p_success);
    // the same flow without `continue` fails when a fails: 0.5³
    let plain = cost(&flows.replace(", on_fail: continue", ""));
    assert_est(&plain.dispatches, 3.0, 3.0, 3.0);
    assert!(close(plain.p_success, 0.125), "{}", plain.p_success);
}

/// X9: two routes back to `a` (max 2 from `b`, max 3 from `c`) and an
/// `on_fail` goto back to `b` (max 1 from `c`): counters are run-wide, so a
/// step's entries are 1 + the sum of the `max` of the back edges whose
/// reset closure holds it — not a product over overlapping routes — and
/// they do not depend on `max_rounds` (the flow has none).
#[test]
fn route_entries_are_a_sum_of_max_over_closures() {
    let c = cost(
        r#"  entry: main
  main:
    input: {}
    output: {from: "${c.output}", contract: Out}
    steps:
      - {id: a, do: "A", out: Out, attempts: 1}
      - id: b
        do: "B ${a.output.text}"
        out: Out
        attempts: 1
        route: [{when: "result.text == 'redo'", goto: a, max: 2}]
      - id: c
        do: "C ${b.output.text}"
        out: Out
        attempts: 1
        route: [{when: "result.text == 'redo'", goto: a, max: 3}]
        on_fail: {goto: b, max: 1}
"#,
    );
    // a: 1 + 2 + 3; b: 1 + 2 + 3 + 1 (c's on_fail goto resets b and c);
    // c: the same as b
    assert_eq!(entries(&c), vec![("a", 6), ("b", 7), ("c", 7)]);
    // one attempt each: worst dispatches 6 + 7 + 7
    assert_eq!(c.dispatches.worst, Some(20.0));
}

/// X9: a fanout stage's `on_fail` goto (max 2 back to `a`) counts like a
/// step's: its `max` is added to every step of the reset closure of the
/// fanout step and its target (`a`, `f` and `z`, which comes after `f`).
#[test]
fn a_stage_on_fail_goto_adds_its_max_to_the_closure() {
    let c = cost(
        r#"  entry: main
  main:
    input: {}
    output: {from: "${z.output}", contract: Out}
    steps:
      - {id: a, do: "A", out: List, attempts: 1}
      - id: f
        fanout:
          over: "${a.output.items}"
          concurrency: 1
          isolation: none
          require: all
          merge: sequential
          steps:
            - do: "F ${item}"
              out: Out
              attempts: 1
              on_fail: {goto: a, max: 2}
      - {id: z, after: [f], do: "Z", out: Out, attempts: 1}
"#,
    );
    assert_eq!(entries(&c), vec![("a", 3), ("f", 3), ("z", 3)]);
}

/// X9: `iterate` on a `run` step runs the called flow up to `max` times in
/// the worst case (one pass at least).
#[test]
fn an_iterating_run_multiplies_the_callee_worst_case() {
    let c = cost(
        r#"  entry: main
  helper:
    input: {}
    output: {from: "${h.output}", contract: Out}
    steps:
      - {id: h, do: "H", out: Out, attempts: 2}
  main:
    input: {}
    output: {from: "${r.output}", contract: Out}
    steps:
      - id: r
        run: helper
        with: {}
        iterate: {max: 3, until: "result.text == 'done'"}
"#,
    );
    // worst: 3 passes × 2 attempts; min: one pass, one attempt
    assert_eq!(c.dispatches.worst, Some(6.0));
    assert_eq!(c.dispatches.min, 1.0);
}

/// The IR of a spec checked against a `stratum.toml` text (for X12's
/// declared commands), and that text's cost profiles.
fn ir_with_config(flows: &str, toml: &str) -> (Ir, CostConfig) {
    let text = spec(flows);
    let toml = stratum_vm::config::Config::from_toml(toml).expect("a valid stratum.toml");
    let env = stratum_compiler::env::CheckEnv::from_config(&toml);
    let a = stratum_compiler::analysis::analyze_bytes_with(text.as_bytes(), &env);
    let shown: Vec<String> = a
        .diagnostics
        .iter()
        .filter(|d| d.code != Code::BudgetExceeded)
        .map(|d| format!("{} {}", d.code.as_str(), d.message))
        .collect();
    assert!(shown.is_empty(), "{text}\n{shown:#?}");
    // the round agent profiles of CONFIG, the commands of `toml`
    let mut profiles = config();
    profiles.command_timeouts_ms = CostConfig::from_config(&toml).command_timeouts_ms;
    (a.ir.expect("no errors"), profiles)
}

#[test]
fn exec_checks_add_their_command_bounds_to_the_worst_time_only() {
    let toml = "[commands.test]\nargv = [\"true\"]\ntimeout_ms = 5000\n\n[commands.lint]\nargv = [\"true\"]\n";
    // `test` is bounded by the config (5 s, the spec's 9 s is lowered), `lint`
    // by the spec (3 s under the default 10 min); 2 attempts × 2 iterations
    // report 4 results, each checked by both: 4 × 8 s on top of 4 dispatches
    let flows = format!(
        "{ONE_DO}      - id: a\n        do: \"A\"\n        out: Out\n        agent: codex\n        attempts: 2\n        iterate: {{max: 2, until: \"result.text == 'x'\"}}\n        ensure:\n          - exec: {{run: test, timeout_ms: 9000}}\n          - exec: {{run: lint, timeout_ms: 3000}}\n"
    );
    let (ir, profiles) = ir_with_config(&flows, toml);
    let c = analyze_cost(&ir, 0, None, &profiles);
    // the flow's wall-clock time; a step's `ms` is what its ledger meters
    // (agent and judge time), which command time is not part of
    assert_eq!(c.ms.worst, Some(4.0 * 2000.0 + 4.0 * 8000.0), "{:?}", c.ms);
    assert_eq!(
        c.ms.min, 2000.0,
        "a command may end at once: not in the minimum"
    );
    let a = &c.steps[0];
    assert_eq!(a.ms.worst, Some(4.0 * 2000.0), "not metered: {:?}", a.ms);
    assert_eq!(
        a.tokens.worst,
        Some(4.0 * 2000.0),
        "commands bill no tokens"
    );
    assert_eq!(a.dispatches.worst, Some(4.0), "checks are not dispatches");

    // without an exec ensure nothing is added
    let (ir, profiles) = ir_with_config(
        &format!(
            "{ONE_DO}      - id: a\n        do: \"A\"\n        out: Out\n        agent: codex\n        attempts: 2\n"
        ),
        toml,
    );
    let c = analyze_cost(&ir, 0, None, &profiles);
    assert_eq!(c.ms.worst, Some(2.0 * 2000.0));

    // an `evaluate` step: the spec's bound lowered by the config's
    let (ir, profiles) = ir_with_config(
        "  entry: main
  main:
    input: {}
    output: {from: \"${e.output}\", contract: Out}
    steps:
      - {id: e, evaluate: {command: test, timeout_ms: 60000}, out: Out}
",
        toml,
    );
    let c = analyze_cost(&ir, 0, None, &profiles);
    assert_eq!(c.ms.worst, Some(5000.0));
    assert_eq!(c.steps[0].dispatches.worst, Some(0.0));
}
