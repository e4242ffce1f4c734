//! Plans of format version 3 (language 1.1 part one, before part two)
//! still load, verify and run: `fixtures/v3-plan.stratumc` was built from
//! `fixtures/v3-plan.stratum.yaml` by the stratumc of main before the format
//! became version 4. Its artifacts, gate prompt and show files, `on_fail:
//! continue` and step-status reads survive the migration, and the fields
//! version 4 added (routes, scopes, gate options) come out empty.

use serde_json::{Value, json};
use stratum_vm::engine::Engine;
use stratum_vm::interp::{
    FileEvidence, FileHash, FileRoot, Host, HostError, Report, RunStatus, Verdict,
};
use stratum_vm::plan::file::{self, FORMAT_VERSION};
use stratum_vm::plan::{PredDef, StepKindDef};
use stratum_vm::store::MemoryStore;

const V3_PLAN: &[u8] = include_bytes!("fixtures/v3-plan.stratumc");

/// A host whose files all exist and say "Draft".
struct Agreeable(i64);

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

impl Host for Agreeable {
    fn now_ms(&mut self) -> i64 {
        self.0 += 1;
        self.0
    }
    fn file_exists(&mut self, _: FileRoot<'_>, p: &str) -> Result<FileEvidence, HostError> {
        Ok(evidence(p))
    }
    fn file_contains(
        &mut self,
        _: FileRoot<'_>,
        p: &str,
        text: &str,
    ) -> Result<(bool, FileEvidence), HostError> {
        Ok((text == "Draft", evidence(p)))
    }
    fn judge(&mut self, _: &str, _: &str, _: &Value) -> Result<Verdict, HostError> {
        Err(HostError::Unsupported("no judge in this plan".into()))
    }
    fn hash_file(&mut self, _: FileRoot<'_>, p: &str) -> Result<Option<FileHash>, HostError> {
        Ok(Some(FileHash {
            path: p.to_owned(),
            size: 5,
            sha256: stratum_vm::eval::sha256_hex(b"Draft"),
        }))
    }
}

#[test]
fn the_fixture_is_a_version_3_file() {
    let (version, _, _) = file::read_header(V3_PLAN).unwrap();
    assert_eq!(version, 3);
    const { assert!(FORMAT_VERSION > 3, "this binary writes a newer format") };
}

#[test]
fn a_version_3_plan_keeps_its_part_one_features() {
    let (plan, hash) = file::load(V3_PLAN).expect("a v3 plan loads");
    // the hash is the stored file's, not a re-encoding's
    assert_eq!(
        hash.to_hex(),
        "3ea5ccd9cb628a698beeb72960da7f17d50068535a6a43f054c3fe8e142f6a98"
    );
    let flow = &plan.flows[plan.entry as usize];
    let ids: Vec<&str> = flow.steps.iter().map(|s| plan.str(s.id)).collect();
    assert_eq!(ids, ["draft", "fan", "review", "finish"]);
    let draft = &flow.steps[0];
    assert_eq!(draft.timeout_ms, Some(5000));
    assert_eq!(draft.artifacts.len(), 1);
    assert!(matches!(draft.ensure[1], PredDef::FileContainsAt(_, t) if plan.str(t) == "Draft"));
    assert!(flow.steps[1].on_fail_continue);
    let StepKindDef::Fanout { stages, .. } = &flow.steps[1].kind else {
        panic!("`fan` is a fanout: {:?}", flow.steps[1].kind)
    };
    assert_eq!(stages[0].artifacts.len(), 1);
    let StepKindDef::Gate {
        on_revise,
        max_rounds,
        prompt,
        show,
        ..
    } = &flow.steps[2].kind
    else {
        panic!("`review` is a gate: {:?}", flow.steps[2].kind)
    };
    assert_eq!((*on_revise, *max_rounds), (Some(0), Some(2)));
    assert!(prompt.is_some());
    assert_eq!(show.len(), 1);
    assert!(flow.steps[3].when.is_some());
    // re-encoded, it is a current-version file of the same plan
    let (bytes, _) = file::encode(&plan);
    assert_eq!(file::read_header(&bytes).unwrap().0, FORMAT_VERSION);
    assert_eq!(file::load(&bytes).unwrap().0, plan);
}

#[test]
fn a_run_of_a_version_3_plan_completes() {
    let mut engine = Engine::new(Box::new(MemoryStore::new()));
    let plan = engine
        .add_plan(V3_PLAN)
        .expect("the engine stores a v3 plan");
    let mut host = Agreeable(0);
    let (run, mut outcome) = engine
        .start(&plan, None, json!({"items": ["a"]}), &mut host, None)
        .unwrap();
    let mut reported = Vec::new();
    while outcome.status == RunStatus::Running {
        assert!(reported.len() < 10, "the run does not end: {reported:?}");
        if let Some(gate) = outcome.gates.first().cloned() {
            assert_eq!(
                gate.prompt.as_deref(),
                Some("Is Draft a ready (fan: succeeded)?")
            );
            assert_eq!(gate.show.len(), 1, "the gate shows notes/draft.md");
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
        let report = Report {
            output: Some(json!({"text": "Draft a"})),
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
