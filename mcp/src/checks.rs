//! Long checks off the request path (language 1.1 X12, `checking`): a
//! `stratum_step_done` on a run whose plan may run a declared command or
//! ask a judge (`Plan::may_run_checks`) is transitioned on a thread of its
//! own — its own store connection (`RunStore::reopen`) and the run's host
//! built as for any stored run (`crate::state::stored_context`) — so the
//! server keeps answering other calls while the checks run. The call waits
//! for the verdict up to [`check_wait`]; when the checks take longer it
//! answers `{status: "checking", runId, stepId}` and the verdict (the reply
//! the report would have had) arrives with the next response on that run,
//! under `checked`. While a run's checks run, calls that would change the
//! run are answered `checking` too (one report's checks at a time per
//! run); `stratum_flow_cancel` goes through (it stops the running command
//! first, and the report is dropped unrecorded), and so do the reads
//! (`stratum_audit`, `stratum_flow_poll`).
//!
//! Owns: which runs have checks running or a verdict waiting to be
//! handed out, the check thread, and the `checking` reply.
//! Must never: take the state lock while a check runs (only to hand its
//! verdict over), hold a verdict for a run after it was handed out, or run
//! a report whose plan runs no command or judge off the request path (they
//! stay on the fast path, unchanged).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use stratum_vm::agent::StopProbe;
use stratum_vm::engine::Engine;
use stratum_vm::interp::Report;
use stratum_vm::store::RunStore;
use tokio::sync::Notify;

use crate::reply::{Reply, engine_error};
use crate::state::State;
use crate::tools::envelope;

/// How long a `stratum_step_done` waits for its checks before answering
/// `checking`, unless `STRATUM_CHECK_WAIT_MS` says otherwise.
const DEFAULT_WAIT: Duration = Duration::from_secs(2);

/// The tools that run while a run's checks run (the rest are answered
/// `checking`): the cancel, which stops them, and the reads.
const DURING_CHECKS: &[&str] = &["stratum_flow_cancel", "stratum_audit", "stratum_flow_poll"];

/// How long a report waits for its checks (`STRATUM_CHECK_WAIT_MS`, else 2 s).
pub fn check_wait() -> Duration {
    std::env::var("STRATUM_CHECK_WAIT_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_WAIT, Duration::from_millis)
}

/// The runs with checks running or a verdict waiting, and the checks to
/// start once the call that asked has released the state lock.
#[derive(Default)]
pub struct Checks {
    runs: BTreeMap<String, Job>,
    starts: Vec<Start>,
}

/// One run's report under check.
struct Job {
    step: String,
    verdict: Option<Reply>,
    done: Arc<Notify>,
}

/// A report to check on a thread of its own.
pub struct Start {
    run: String,
    step: String,
    token: String,
    report: Report,
    store: Box<dyn RunStore>,
    operator: Option<std::path::PathBuf>,
    probe: Arc<StopProbe>,
    done: Arc<Notify>,
}

impl Start {
    /// The run it checks.
    pub fn run(&self) -> &str {
        &self.run
    }
}

/// What a call on a run meets.
pub enum Before {
    /// No check: the call runs.
    Free,
    /// Checks are running: the call is answered with this.
    Checking(Reply),
    /// A verdict was waiting: the call runs, and its reply carries this
    /// under `checked`.
    Verdict(Reply),
}

impl Checks {
    /// What a call of `tool` on `run` meets (a waiting verdict is taken).
    pub fn before(&mut self, tool: &str, run: &str) -> Before {
        if let Some(v) = self.take_verdict(run) {
            return Before::Verdict(v);
        }
        let Some(job) = self.runs.get(run) else {
            return Before::Free;
        };
        if DURING_CHECKS.contains(&tool) {
            return Before::Free;
        }
        Before::Checking(checking(run, &job.step))
    }

    /// The verdict of `run`'s checks, when they have ended (taken).
    pub fn take_verdict(&mut self, run: &str) -> Option<Reply> {
        if self.runs.get(run).is_some_and(|j| j.verdict.is_some()) {
            return self.runs.remove(run).and_then(|j| j.verdict);
        }
        None
    }

    /// Whether `run`'s checks are running.
    pub fn running(&self, run: &str) -> bool {
        self.runs.get(run).is_some_and(|j| j.verdict.is_none())
    }

    /// An engine worker's reports on `run` are checked off the state lock
    /// (crate::driver): calls that would change the run are answered
    /// `checking` meanwhile, as for a client's report (a commit between
    /// the checks' start and their end would make the report's transition
    /// run them again). `false` when a report of `run` is under check
    /// already (the worker then reports under the lock).
    pub fn begin_worker(&mut self, run: &str, step: &str) -> bool {
        if self.runs.contains_key(run) {
            return false;
        }
        let job = Job {
            step: step.to_owned(),
            verdict: None,
            done: Arc::new(Notify::new()),
        };
        self.runs.insert(run.to_owned(), job);
        true
    }

    /// The worker's reports on `run` are made (their results are in the
    /// run: no verdict is handed out).
    pub fn end_worker(&mut self, run: &str) {
        self.runs.remove(run);
    }

    /// What the call that started `run`'s checks waits on.
    pub fn waiter(&self, run: &str) -> Option<Arc<Notify>> {
        self.runs.get(run).map(|j| j.done.clone())
    }

    /// The checks asked for since the last call (started by the server).
    pub fn take_starts(&mut self) -> Vec<Start> {
        std::mem::take(&mut self.starts)
    }

    fn finish(&mut self, run: &str, verdict: Reply) {
        if let Some(job) = self.runs.get_mut(run) {
            job.verdict = Some(verdict);
        }
    }

    /// The check of `run` could not start: nothing is waiting any more.
    pub fn not_started(&mut self, run: &str, why: &str) {
        let reply = Reply::error(
            "internal_error",
            format!(
                "the report's checks could not start ({why}); the run was not changed: report again"
            ),
        );
        self.finish(run, reply);
    }
}

/// The `checking` answer for a report on `step` of `run`.
pub fn checking(run: &str, step: &str) -> Reply {
    Reply::Ok(json!({
        "status": "checking",
        "runId": run,
        "stepId": step,
        "message": format!(
            "the checks of the report on `{step}` are still running; the verdict comes with the next response on this run (call stratum_resume {{runId}} in a moment)"
        ),
    }))
}

/// Takes the report of `step` off the request path when the run's plan may
/// run checks and the store can be opened again; `None`: the caller runs
/// it as usual. The answer is the `checking` reply (which the server then
/// waits to replace with the verdict).
pub fn offload(
    state: &mut State,
    run: &str,
    step: &str,
    token: &str,
    report: &Report,
) -> Option<Reply> {
    let store = side_store(state, run)?;
    let done = Arc::new(Notify::new());
    state.checks.runs.insert(
        run.to_owned(),
        Job {
            step: step.to_owned(),
            verdict: None,
            done: done.clone(),
        },
    );
    state.checks.starts.push(Start {
        run: run.to_owned(),
        step: step.to_owned(),
        token: token.to_owned(),
        report: report.clone(),
        store,
        operator: state.operator().map(std::path::Path::to_path_buf),
        probe: state.stops.probe(run),
        done,
    });
    Some(checking(run, step))
}

/// A connection of its own to the store, when `run`'s plan may run checks
/// (and the store can be opened again): what a report off the request
/// path, or an engine worker's report (crate::driver), is made through.
pub fn side_store(state: &mut State, run: &str) -> Option<Box<dyn RunStore>> {
    let plan_hash = state.run(run).ok()?.plan_hash;
    let plan = state.engine.plan(&plan_hash).ok()?;
    if !plan.plan.may_run_checks() {
        return None;
    }
    state.engine.store().reopen()?.ok()
}

/// Reports `run`'s results through an engine on `store` (outside the state
/// lock): refusals change nothing, as on the state's engine. `false` when
/// the run's host could not be built (nothing was reported).
pub fn report_on_side(
    store: Box<dyn RunStore>,
    run: &str,
    operator: Option<&std::path::Path>,
    probe: Arc<StopProbe>,
    reports: &[crate::driver::Reported],
) -> bool {
    let mut engine = Engine::new(store);
    let Ok(mut ctx) = crate::state::stored_context(&mut engine, run, operator) else {
        return false;
    };
    ctx.host.stop = Some(probe);
    crate::driver::report_each(&mut engine, &mut ctx.host, run, reports);
    true
}

/// Starts the thread that checks `s` and hands its verdict to the state.
pub fn start(state: &Arc<Mutex<State>>, s: Start) -> std::io::Result<JoinHandle<()>> {
    let state = state.clone();
    std::thread::Builder::new()
        .name(format!("stratum-check-{}", s.run))
        .spawn(move || {
            let (run, done) = (s.run.clone(), s.done.clone());
            let (verdict, wants_worker) = check(s);
            let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
            if wants_worker {
                st.dispatches.want(&run);
            }
            st.checks.finish(&run, verdict);
            drop(st);
            done.notify_one();
        })
}

/// The report, transitioned on an engine of its own: the reply and whether
/// the run now has engine entries for a worker.
fn check(s: Start) -> (Reply, bool) {
    let mut engine = Engine::new(s.store);
    let mut ctx = match crate::state::stored_context(&mut engine, &s.run, s.operator.as_deref()) {
        Ok(c) => c,
        Err(r) => return (r, false),
    };
    ctx.host.stop = Some(s.probe);
    match engine.report(&s.run, &s.step, Some(&s.token), &s.report, &mut ctx.host) {
        Ok(o) => {
            let want = crate::driver::has_work(&o, &ctx.agents);
            (
                Reply::Ok(envelope(&o, &s.run, &ctx.plan_hash, &ctx.agents)),
                want,
            )
        }
        Err(e) => (engine_error(&e), false),
    }
}

/// `reply` with the verdict of the checks that had ended under `checked`.
pub fn with_verdict(reply: Reply, verdict: Reply) -> Reply {
    let checked: Value = match verdict {
        Reply::Ok(v) | Reply::Err(v) => v,
    };
    let put = |mut v: Value| {
        if let Some(m) = v.as_object_mut() {
            m.insert("checked".into(), checked.clone());
        }
        v
    };
    match reply {
        Reply::Ok(v) => Reply::Ok(put(v)),
        Reply::Err(v) => Reply::Err(put(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn under_check(run: &str) -> Checks {
        let mut c = Checks::default();
        c.runs.insert(
            run.to_owned(),
            Job {
                step: "write".into(),
                verdict: None,
                done: Arc::new(Notify::new()),
            },
        );
        c
    }

    #[test]
    fn calls_on_a_run_under_check_are_answered_checking_except_cancel_and_reads() {
        let mut c = under_check("run-a");
        assert!(matches!(
            c.before("stratum_step_done", "run-b"),
            Before::Free
        ));
        let Before::Checking(Reply::Ok(v)) = c.before("stratum_resume", "run-a") else {
            panic!("a change to the run waits for its checks");
        };
        assert_eq!(
            (v["status"].as_str(), v["stepId"].as_str()),
            (Some("checking"), Some("write"))
        );
        for tool in DURING_CHECKS {
            assert!(matches!(c.before(tool, "run-a"), Before::Free), "{tool}");
        }
        assert!(c.running("run-a") && c.take_verdict("run-a").is_none());
    }

    #[test]
    fn a_verdict_is_handed_out_once() {
        let mut c = under_check("run-a");
        c.finish("run-a", Reply::Ok(json!({"status": "completed"})));
        assert!(!c.running("run-a"));
        let Before::Verdict(v) = c.before("stratum_audit", "run-a") else {
            panic!("the next call gets the verdict");
        };
        let with = with_verdict(
            Reply::Ok(json!({"status": "completed", "runId": "run-a"})),
            v,
        );
        let Reply::Ok(w) = with else { panic!() };
        assert_eq!(w["checked"]["status"], "completed");
        assert!(matches!(c.before("stratum_audit", "run-a"), Before::Free));
    }
}
