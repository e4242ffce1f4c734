//! Plans of format version 4 (language 1.1 part two, before `on_fail` on
//! fanout stages) still load, verify and run: `fixtures/v4-plan.stratumc`
//! was built from `fixtures/v4-plan.stratum.yaml` by the stratumc of main
//! before the format became version 5. Its routes and `on_fail` entries
//! survive the migration, and its fanout stages come out with no `on_fail`.

use serde_json::{Value, json};
use stratum_vm::engine::Engine;
use stratum_vm::interp::{FileEvidence, FileRoot, Host, HostError, Report, RunStatus, Verdict};
use stratum_vm::plan::file::{self, FORMAT_VERSION};
use stratum_vm::plan::{OnFailAction, StepKindDef};
use stratum_vm::store::MemoryStore;

const V4_PLAN: &[u8] = include_bytes!("fixtures/v4-plan.stratumc");

/// A host that is never asked anything (the plan has no files or judges).
struct Quiet(i64);

impl Host for Quiet {
    fn now_ms(&mut self) -> i64 {
        self.0 += 1;
        self.0
    }
    fn file_exists(&mut self, _: FileRoot<'_>, _: &str) -> Result<FileEvidence, HostError> {
        Err(HostError::Unsupported("no files in this plan".into()))
    }
    fn file_contains(
        &mut self,
        _: FileRoot<'_>,
        _: &str,
        _: &str,
    ) -> Result<(bool, FileEvidence), HostError> {
        Err(HostError::Unsupported("no files in this plan".into()))
    }
    fn judge(&mut self, _: &str, _: &str, _: &Value) -> Result<Verdict, HostError> {
        Err(HostError::Unsupported("no judge in this plan".into()))
    }
}

#[test]
fn the_fixture_is_a_version_4_file() {
    let (version, _, _) = file::read_header(V4_PLAN).unwrap();
    assert_eq!(version, 4);
    const { assert!(FORMAT_VERSION > 4, "this binary writes a newer format") };
}

#[test]
fn a_version_4_plan_keeps_its_routes_and_stages() {
    let (plan, hash) = file::load(V4_PLAN).expect("a v4 plan loads");
    // the hash is the stored file's, not a re-encoding's
    assert_eq!(
        hash.to_hex(),
        "713ea31e9857d0fd2a62294f1e85e06ba0caa1d234a8fe8a2eeabd786d91a684"
    );
    let flow = &plan.flows[plan.entry as usize];
    let ids: Vec<&str> = flow.steps.iter().map(|s| plan.str(s.id)).collect();
    assert_eq!(ids, ["plan", "fan", "impl"]);
    assert_eq!(flow.steps[1].routes.len(), 1);
    let StepKindDef::Fanout { stages, .. } = &flow.steps[1].kind else {
        panic!("`fan` is a fanout: {:?}", flow.steps[1].kind)
    };
    assert_eq!(stages.len(), 1);
    assert_eq!(stages[0].attempts, 2);
    assert!(
        stages[0].on_fail.is_empty(),
        "format 4 stages had no on_fail"
    );
    let impl_fail = &flow.steps[2].on_fail_routes;
    assert_eq!(impl_fail.len(), 1);
    assert!(matches!(
        impl_fail[0].action,
        OnFailAction::Goto {
            target: 0,
            max: 1,
            ..
        }
    ));
    // re-encoded, it is a current-version file of the same plan
    let (bytes, _) = file::encode(&plan);
    assert_eq!(file::read_header(&bytes).unwrap().0, FORMAT_VERSION);
    assert_eq!(file::load(&bytes).unwrap().0, plan);
}

#[test]
fn a_run_of_a_version_4_plan_completes() {
    let mut engine = Engine::new(Box::new(MemoryStore::new()));
    let plan = engine
        .add_plan(V4_PLAN)
        .expect("the engine stores a v4 plan");
    let mut host = Quiet(0);
    let (run, mut outcome) = engine
        .start(&plan, None, json!({"items": ["a"]}), &mut host, None)
        .unwrap();
    let mut reported = Vec::new();
    while outcome.status == RunStatus::Running {
        assert!(reported.len() < 10, "the run does not end: {reported:?}");
        let entry = outcome
            .ready
            .first()
            .cloned()
            .expect("a running run has work");
        let output = if entry.id == "plan" {
            json!({"steps": "p"})
        } else {
            json!({"ok": true})
        };
        let report = Report {
            output: Some(output),
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
    assert_eq!(reported, ["plan", "fan/0", "impl"]);
    assert_eq!(outcome.status, RunStatus::Completed);
}
