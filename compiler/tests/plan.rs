//! The plan: determinism, round trips, verification of hostile plans, and
//! reset closures computed by hand.

use std::path::Path;

use proptest::prelude::*;
use stratum_compiler::analyze;
use stratum_compiler::build::build_plan;
use stratum_vm::plan::file::{self, LoadError};
use stratum_vm::plan::op::{self, Op};
use stratum_vm::plan::verify::verify;
use stratum_vm::plan::*;

fn examples() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".stratum.yaml"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn plan_of(text: &str) -> Plan {
    let a = analyze(text);
    assert!(
        a.diagnostics.iter().all(|d| !d.is_error()),
        "{:?}",
        a.diagnostics
    );
    build_plan(&a).expect("a valid spec builds")
}

#[test]
fn examples_build_deterministically_and_round_trip() {
    for (name, text) in examples() {
        let p1 = plan_of(&text);
        let p2 = plan_of(&text);
        let (b1, h1) = file::encode(&p1);
        let (b2, h2) = file::encode(&p2);
        assert_eq!(b1, b2, "{name}: two builds differ");
        assert_eq!(h1, h2);
        verify(&p1).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (decoded, h3) = file::load(&b1).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(h3, h1);
        assert_eq!(decoded, p1, "{name}: decode differs");
        assert_eq!(file::encode(&decoded).0, b1, "{name}: re-encode differs");
    }
}

#[test]
fn truncated_and_corrupted_files_are_typed_errors() {
    let (_, text) = &examples()[0];
    let (bytes, _) = file::encode(&plan_of(text));
    for len in 0..bytes.len() {
        assert!(
            file::load(&bytes[..len]).is_err(),
            "truncated to {len} bytes loaded"
        );
    }
    let mut extra = bytes.clone();
    extra.push(0);
    assert!(matches!(
        file::load(&extra),
        Err(LoadError::TrailingBytes { .. })
    ));
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert_eq!(file::load(&flipped).unwrap_err(), LoadError::HashMismatch);
    // a newer format is refused with "upgrade"; a version before the oldest read is unsupported
    let mut version = bytes.clone();
    version[8] = 99;
    assert!(matches!(
        file::load(&version),
        Err(LoadError::NewerVersion { found: 99 })
    ));
    assert!(
        file::load(&version)
            .unwrap_err()
            .to_string()
            .contains("upgrade stratumc")
    );
    version[8] = 0;
    assert!(matches!(
        file::load(&version),
        Err(LoadError::UnsupportedVersion { found: 0 })
    ));
    assert_eq!(file::load(b"not a plan").unwrap_err(), LoadError::BadMagic);
}

/// Raw postcard bytes of a plan, recompressed after mutation, exercise the
/// decoder and the verifier behind the hash check.
fn body_of(raw: &[u8]) -> Vec<u8> {
    lz4_flex::compress_prepend_size(raw)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn mutated_bodies_never_panic(example in 0usize..7, flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8), cut in any::<prop::sample::Index>()) {
        let all = examples();
        let (_, text) = &all[example % all.len()];
        let plan = plan_of(text);
        let mut raw = postcard::to_stdvec(&plan).unwrap();
        for (i, b) in flips {
            let at = i.index(raw.len());
            raw[at] = b;
        }
        // either loads (and then verifies) or is a typed error
        if let Ok(p) = file::load_body(&body_of(&raw)) {
            prop_assert!(verify(&p).is_ok());
        }
        let keep = cut.index(raw.len());
        let _ = file::load_body(&body_of(&raw[..keep]));
    }
}

/// A named way of breaking a plan.
type Mutation = (&'static str, Box<dyn Fn(&mut Plan)>);

#[test]
fn hostile_plans_fail_verification() {
    let (_, text) = examples()
        .into_iter()
        .find(|(n, _)| n.starts_with("reviewed-work-gate"))
        .unwrap();
    let good = plan_of(&text);
    let cases: Vec<Mutation> = vec![
        ("entry out of range", Box::new(|p| p.entry = 99)),
        (
            "string out of range",
            Box::new(|p| p.flows[0].name = 10_000),
        ),
        (
            "on_fail out of range",
            Box::new(|p| p.flows[0].steps[0].on_fail = Some(77)),
        ),
        (
            "backward edge",
            Box::new(|p| {
                let e = p.flows[0].edges[0];
                p.flows[0].edges[0] = EdgeDef {
                    from: e.to,
                    to: e.from,
                    kind: e.kind,
                };
            }),
        ),
        (
            "bitset too short",
            Box::new(|p| p.flows[0].closures[0].steps.clear()),
        ),
        (
            "unknown opcode",
            Box::new(|p| p.flows[0].chunks[0].code.insert(0, 0xee)),
        ),
        (
            "stack bound too low",
            Box::new(|p| p.flows[0].chunks[0].max_stack = 0),
        ),
        (
            "missing return",
            Box::new(|p| {
                p.flows[0].chunks[0].code.pop();
            }),
        ),
        (
            "jump out of bounds",
            Box::new(|p| {
                let mut code = Vec::new();
                op::encode(&mut code, Op::LoadResult, &[]);
                op::encode(&mut code, Op::AndJump, &[500]);
                op::encode(&mut code, Op::LoadResult, &[]);
                op::encode(&mut code, Op::Return, &[]);
                p.flows[0].chunks[0].code = code;
            }),
        ),
        (
            "jump into an instruction",
            Box::new(|p| {
                let mut code = Vec::new();
                op::encode(&mut code, Op::LoadResult, &[]);
                op::encode(&mut code, Op::AndJump, &[2]);
                op::encode(&mut code, Op::Const, &[0]);
                op::encode(&mut code, Op::CheckBool, &[]);
                op::encode(&mut code, Op::Return, &[]);
                p.flows[0].chunks[0].code = code;
            }),
        ),
        (
            "wrong arity",
            Box::new(|p| {
                let mut code = Vec::new();
                op::encode(&mut code, Op::LoadResult, &[]);
                op::encode(&mut code, Op::Call, &[0, 1]);
                op::encode(&mut code, Op::Call, &[8, 1]);
                op::encode(&mut code, Op::Return, &[]);
                p.flows[0].chunks[0].code = code;
            }),
        ),
        (
            "stack underflow",
            Box::new(|p| {
                let mut code = Vec::new();
                op::encode(&mut code, Op::Add, &[]);
                op::encode(&mut code, Op::Return, &[]);
                p.flows[0].chunks[0].code = code;
            }),
        ),
        (
            "with child after parent",
            Box::new(|p| p.flows[0].with_nodes.push(WithNode::List(vec![5]))),
        ),
    ];
    for (name, mutate) in cases {
        let mut p = good.clone();
        mutate(&mut p);
        let err = verify(&p)
            .err()
            .unwrap_or_else(|| panic!("{name}: verified"));
        assert!(!err.to_string().is_empty(), "{name}");
        // and through the file format too
        let (bytes, _) = file::encode(&p);
        assert!(
            matches!(file::load(&bytes), Err(LoadError::Invalid(_))),
            "{name}"
        );
    }
}

/// Names of the steps in a gate's closure, sorted.
fn closure_of(plan: &Plan, gate: &str) -> Vec<String> {
    let flow = &plan.flows[plan.entry as usize];
    let g = flow
        .steps
        .iter()
        .position(|s| plan.str(s.id) == gate)
        .unwrap() as u32;
    let c = flow.closures.iter().find(|c| c.gate == g).unwrap();
    let mut names: Vec<String> = (0..flow.steps.len() as u32)
        .filter(|&i| c.contains(i))
        .map(|i| plan.str(flow.steps[i as usize].id).to_string())
        .collect();
    names.sort();
    names
}

const CLOSURES: &str = r#"
version: 1
contracts:
  Out: {text: string, ok: boolean}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${done.output}", contract: Out}
    max_rounds: 3
    steps:
      - {id: draft, do: "draft", out: Out}
      - {id: left, do: "left ${draft.output.text}", out: Out}
      - {id: right, do: "right ${draft.output.text}", out: Out}
      - {id: join, do: "join ${left.output.text} ${right.output.text}", out: Out, on_fail: rescue}
      - {id: rescue, do: "rescue", out: Out}
      - {id: unrelated, do: "other", out: Out}
      - id: review
        after: [join]
        gate: {on_approve: done, on_revise: draft, on_kill: null}
      - id: inner
        after: [review]
        gate: {on_approve: null, on_revise: join, on_kill: null}
      - {id: done, do: "ship ${join.output.text}", out: Out}
"#;

#[test]
fn reset_closures_by_hand() {
    let plan = plan_of(CLOSURES);
    // diamond (left/right) below draft, the on_fail route to rescue, the gate
    // itself and its approve route to done; `unrelated` is outside
    assert_eq!(
        closure_of(&plan, "review"),
        [
            "done", "draft", "inner", "join", "left", "rescue", "review", "right"
        ]
    );
    // nested: a revise to join resets only join and what follows it
    assert_eq!(
        closure_of(&plan, "inner"),
        ["done", "inner", "join", "rescue", "review"]
    );
}

use stratum_vm::interp::{FileEvidence, FileRoot, HostError};

struct NoHost;

impl stratum_vm::interp::Host for NoHost {
    fn now_ms(&mut self) -> i64 {
        0
    }
    fn file_exists(&mut self, _: FileRoot<'_>, _: &str) -> Result<FileEvidence, HostError> {
        Err(HostError::Unsupported("none".into()))
    }
    fn file_contains(
        &mut self,
        _: FileRoot<'_>,
        _: &str,
        _: &str,
    ) -> Result<(bool, FileEvidence), HostError> {
        Err(HostError::Unsupported("none".into()))
    }
    fn judge(
        &mut self,
        _: &str,
        _: &str,
        _: &serde_json::Value,
    ) -> Result<stratum_vm::interp::Verdict, HostError> {
        Err(HostError::Unsupported("none".into()))
    }
}

#[test]
fn engine_worktree_fanouts_are_refused_clearly() {
    let spec = r#"
version: 1
contracts:
  Out: {text: string}
flows:
  entry: main
  main:
    input: {items: "string[]"}
    output: {from: "${fan.output[0]}", contract: Out}
    steps:
      - id: fan
        fanout:
          over: "${input.items}"
          concurrency: 1
          isolation: worktree
          require: all
          merge: sequential
          steps:
            - {do: "edit ${item}", out: Out}
"#;
    let plan = plan_of(spec);
    let index = stratum_vm::interp::PlanIndex::new(&plan);
    let err = stratum_vm::interp::start(
        &plan,
        &index,
        "h",
        "r",
        None,
        serde_json::json!({"items": ["a"]}),
        None,
        &mut NoHost,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("`isolation: worktree` with `dispatch: engine` is not supported yet"),
        "{err}"
    );
}

#[test]
fn step_states_and_continue_are_lowered_and_listed() {
    // X1/X2: the escalate pattern — `on_fail: continue`, a `steps` read, a
    // state reference (`${escalate_literature.note}`) as a state edge
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("tests/conformance/ext/x2-escalate.stratum.yaml"))
        .expect("the conformance case exists");
    let plan = plan_of(&text);
    verify(&plan).expect("the plan verifies");
    let flow = &plan.flows[plan.entry as usize];
    let by_id = |id: &str| {
        flow.steps
            .iter()
            .position(|s| plan.str(s.id) == id)
            .expect("the step exists") as u32
    };
    let (lit, gate, paper) = (
        by_id("literature"),
        by_id("escalate_literature"),
        by_id("paper"),
    );
    assert!(flow.steps[lit as usize].on_fail_continue);
    assert!(!flow.steps[paper as usize].on_fail_continue);
    assert!(
        flow.edges
            .iter()
            .any(|e| (e.from, e.to, e.kind) == (gate, paper, EdgeKind::State)),
        "{:?}",
        flow.edges
    );
    let asm = stratum_vm::plan::disasm::listing(&plan);
    assert!(asm.contains("on_fail continue"), "{asm}");
    assert!(asm.contains("LoadSteps"), "{asm}");
    assert!(asm.contains("escalate_literature.note"), "{asm}");
    // the plan file round-trips the new fields
    let (bytes, _) = file::encode(&plan);
    let (back, _) = file::load(&bytes).expect("the plan loads");
    assert_eq!(back, plan);
}
