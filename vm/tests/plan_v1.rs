//! Plans of format version 1 (before language 1.1's X7 dispatch leases)
//! still load, verify and run: `fixtures/v1-plan.stratumc` was built from
//! `fixtures/v1-plan.stratum.yaml` by the stratumc of main before the format
//! became version 2.

use serde_json::{Value, json};
use stratum_vm::engine::Engine;
use stratum_vm::interp::{FileEvidence, FileRoot, Host, HostError, Report, RunStatus, Verdict};
use stratum_vm::plan::StepKindDef;
use stratum_vm::plan::disasm::listing;
use stratum_vm::plan::file::{self, FORMAT_VERSION};
use stratum_vm::store::MemoryStore;

const V1_PLAN: &[u8] = include_bytes!("fixtures/v1-plan.stratumc");

/// A host with a clock and nothing else (the fixture reads no files and has no judge).
struct Clock(i64);

impl Host for Clock {
    fn now_ms(&mut self) -> i64 {
        self.0 += 1;
        self.0
    }
    fn file_exists(&mut self, _: FileRoot<'_>, p: &str) -> Result<FileEvidence, HostError> {
        Err(HostError::Unsupported(format!("no files here: {p}")))
    }
    fn file_contains(
        &mut self,
        _: FileRoot<'_>,
        p: &str,
        _: &str,
    ) -> Result<(bool, FileEvidence), HostError> {
        Err(HostError::Unsupported(format!("no files here: {p}")))
    }
    fn judge(&mut self, _: &str, _: &str, _: &Value) -> Result<Verdict, HostError> {
        Err(HostError::Judge("no judge here".into()))
    }
}

#[test]
fn the_fixture_is_a_version_1_file() {
    let (version, _, _) = file::read_header(V1_PLAN).unwrap();
    assert_eq!(version, 1);
    const { assert!(FORMAT_VERSION > 1, "this binary writes a newer format") };
}

#[test]
fn a_version_1_plan_loads_and_verifies_without_leases() {
    let (plan, hash) = file::load(V1_PLAN).expect("a v1 plan loads");
    // the hash is the stored file's, not a re-encoding's
    assert_eq!(
        hash.to_hex(),
        "630257d23983d71f4969776a8bb7c89c5e2cdcd87898fc8835b719fbb58f7e96"
    );
    let flow = &plan.flows[plan.entry as usize];
    let ids: Vec<&str> = flow.steps.iter().map(|s| plan.str(s.id)).collect();
    assert_eq!(ids, ["draft", "fan", "finish"]);
    assert!(flow.steps.iter().all(|s| s.timeout_ms.is_none()));
    let StepKindDef::Fanout { stages, .. } = &flow.steps[1].kind else {
        panic!("`fan` is a fanout: {:?}", flow.steps[1].kind)
    };
    assert_eq!(stages.len(), 1);
    assert_eq!(stages[0].timeout_ms, None);
    assert_eq!(stages[0].attempts, 2);
    assert!(!listing(&plan).contains("timeout_ms"));
    // re-encoded, it is a current-version file of the same plan
    let (bytes, _) = file::encode(&plan);
    assert_eq!(file::read_header(&bytes).unwrap().0, FORMAT_VERSION);
    assert_eq!(file::load(&bytes).unwrap().0, plan);
}

#[test]
fn a_run_of_a_version_1_plan_completes() {
    let mut engine = Engine::new(Box::new(MemoryStore::new()));
    let plan = engine
        .add_plan(V1_PLAN)
        .expect("the engine stores a v1 plan");
    let mut host = Clock(0);
    let (run, mut outcome) = engine
        .start(&plan, None, json!({"items": ["a", "b"]}), &mut host, None)
        .unwrap();
    let mut reported = Vec::new();
    while let Some(entry) = outcome.ready.first().cloned() {
        assert!(reported.len() < 10, "the run does not end: {reported:?}");
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
    assert_eq!(reported, ["draft", "fan/0", "fan/1", "finish"]);
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.output, Some(json!({"text": "done finish"})));
}
