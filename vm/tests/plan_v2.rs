//! Plans of format version 2 (X7's dispatch leases, before language 1.1
//! part one) still load, verify and run: `fixtures/v2-plan.stratumc` was
//! built from `fixtures/v2-plan.stratum.yaml` by the stratumc of main before
//! the format became version 3. Its leases, predicates and gate survive the
//! migration.

use serde_json::{Value, json};
use stratum_vm::engine::Engine;
use stratum_vm::interp::{FileEvidence, FileRoot, Host, HostError, Report, RunStatus, Verdict};
use stratum_vm::plan::disasm::listing;
use stratum_vm::plan::file::{self, FORMAT_VERSION};
use stratum_vm::plan::{PredDef, StepKindDef};
use stratum_vm::store::MemoryStore;

const V2_PLAN: &[u8] = include_bytes!("fixtures/v2-plan.stratumc");

/// A host whose files all exist and say "Draft", and whose judge agrees.
struct Agreeable(i64);

impl Agreeable {
    fn evidence(path: &str) -> FileEvidence {
        FileEvidence {
            path: path.to_owned(),
            exists: true,
            size: Some(5),
            blake3: None,
            note: None,
            sha256: None,
        }
    }
}

impl Host for Agreeable {
    fn now_ms(&mut self) -> i64 {
        self.0 += 1;
        self.0
    }
    fn file_exists(&mut self, _: FileRoot<'_>, p: &str) -> Result<FileEvidence, HostError> {
        Ok(Self::evidence(p))
    }
    fn file_contains(
        &mut self,
        _: FileRoot<'_>,
        p: &str,
        text: &str,
    ) -> Result<(bool, FileEvidence), HostError> {
        Ok((text == "Draft", Self::evidence(p)))
    }
    fn judge(&mut self, _: &str, _: &str, _: &Value) -> Result<Verdict, HostError> {
        Ok(Verdict {
            holds: true,
            reason: "finished".into(),
            model: "stand-in".into(),
            tokens: 1.0,
            usd: 0.0,
            ..Verdict::default()
        })
    }
}

#[test]
fn the_fixture_is_a_version_2_file() {
    let (version, _, _) = file::read_header(V2_PLAN).unwrap();
    assert_eq!(version, 2);
    const { assert!(FORMAT_VERSION > 2, "this binary writes a newer format") };
}

#[test]
fn a_version_2_plan_keeps_its_leases_predicates_and_gate() {
    let (plan, hash) = file::load(V2_PLAN).expect("a v2 plan loads");
    // the hash is the stored file's, not a re-encoding's
    assert_eq!(
        hash.to_hex(),
        "5153c79f8d6da7380d7979e5ecba07bca22691374b14b08d6bdd1de8f440fe23"
    );
    let flow = &plan.flows[plan.entry as usize];
    let ids: Vec<&str> = flow.steps.iter().map(|s| plan.str(s.id)).collect();
    assert_eq!(ids, ["draft", "fan", "review", "finish"]);
    let leases: Vec<Option<u64>> = flow.steps.iter().map(|s| s.timeout_ms).collect();
    assert_eq!(leases, [Some(5000), None, None, Some(60000)]);
    let draft = &flow.steps[0];
    assert!(matches!(draft.ensure[0], PredDef::Expr(_)));
    assert!(matches!(draft.ensure[1], PredDef::FileExists(p) if plan.str(p) == "notes/draft.md"));
    assert!(matches!(draft.ensure[2], PredDef::FileContains(_, t) if plan.str(t) == "Draft"));
    assert!(matches!(flow.steps[3].ensure[0], PredDef::Judged(..)));
    let StepKindDef::Fanout { stages, .. } = &flow.steps[1].kind else {
        panic!("`fan` is a fanout: {:?}", flow.steps[1].kind)
    };
    assert_eq!(stages[0].timeout_ms, Some(7000));
    let StepKindDef::Gate {
        on_revise,
        max_rounds,
        ..
    } = &flow.steps[2].kind
    else {
        panic!("`review` is a gate: {:?}", flow.steps[2].kind)
    };
    assert_eq!((*on_revise, *max_rounds), (Some(0), Some(2)));
    assert!(listing(&plan).contains("timeout_ms 5000"));
    // re-encoded, it is a current-version file of the same plan
    let (bytes, _) = file::encode(&plan);
    assert_eq!(file::read_header(&bytes).unwrap().0, FORMAT_VERSION);
    assert_eq!(file::load(&bytes).unwrap().0, plan);
}

#[test]
fn a_run_of_a_version_2_plan_completes() {
    let mut engine = Engine::new(Box::new(MemoryStore::new()));
    let plan = engine
        .add_plan(V2_PLAN)
        .expect("the engine stores a v2 plan");
    let mut host = Agreeable(0);
    let (run, mut outcome) = engine
        .start(&plan, None, json!({"items": ["a"]}), &mut host, None)
        .unwrap();
    let mut reported = Vec::new();
    while outcome.status == RunStatus::Running {
        assert!(reported.len() < 10, "the run does not end: {reported:?}");
        if let Some(gate) = outcome.gates.first().cloned() {
            outcome = engine
                .resolve_gate(
                    &run,
                    &gate.step_id,
                    Some(&gate.gate_token),
                    &stratum_vm::interp::GateDecision {
                        decision: "approve",
                        ..Default::default()
                    },
                    "human",
                    &mut host,
                )
                .unwrap();
            reported.push(gate.step_id);
            continue;
        }
        let entry = outcome
            .ready
            .first()
            .cloned()
            .expect("a running run has work");
        assert!(entry.timeout_ms.is_some(), "{} keeps its lease", entry.id);
        let report = Report {
            output: Some(json!({"text": format!("done {}", entry.id)})),
            ..Report::default()
        };
        outcome = engine
            .report(
                &run,
                &entry.id,
                Some(&entry.dispatch_token),
                &report,
                &mut host,
            )
            .unwrap();
        reported.push(entry.id);
    }
    assert_eq!(reported, ["draft", "fan/0", "review", "finish"]);
    assert_eq!(outcome.status, RunStatus::Completed);
}
