//! Agent runs outside a flow's dispatch loop (issue 16 §2:
//! `stratum_agent_run`, `stratum_agent_poll`, `stratum_cancel_agent_run`):
//! one configured agent (its connector CLI or its command) given a prompt,
//! supervised like a dispatch, its life kept in a durable
//! [`AgentRun`] record so that another process can poll it, cancel it or
//! reap it.
//!
//! Owns: the job an agent run is (the prompt and the contract as an entry:
//! the connector's argv or the command's stdin), the record's first state
//! and its settled state from the supervisor's [`Answer`], the rules of a
//! cancel (the record is settled as `cancelled` first, then the recorded
//! process group is killed — only on the host that started it — and the
//! teardown reported), and who this process is (host, owner id).
//! Must never: start or signal a process itself (`crate::agent` does: the
//! supervision's one home), touch a flow run's state (a linked flow step is
//! only named in the record), or kill a group recorded on another host.

use std::time::Duration;

use serde_json::{Value, json};

use crate::agent::{self, Answer, Job, Teardown};
use crate::connector::{Call, ConnectorKind, Settings};
use crate::store::{
    AgentRun, AgentRunStatus, AgentUpdate, AgentUsage, FlowLink, MAX_AGENT_FAILURE,
    MAX_AGENT_OUTPUT, RunStore, StoreError,
};

/// How long a cancel waits for a killed group to be gone before it says
/// the teardown is unconfirmed.
pub const TEARDOWN_WAIT: Duration = Duration::from_secs(5);

/// Who runs an agent: its connector CLI, or its command (`sh -c`).
#[derive(Debug, Clone, PartialEq)]
pub enum Runner {
    /// `[agents.NAME] connector` with its settings.
    Connector(ConnectorKind, Settings),
    /// `[agents.NAME] command`.
    Command(String),
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The agent's name (`claude`, `codex`), for the record.
    pub agent: String,
    /// Its runner.
    pub runner: Runner,
    /// The task.
    pub prompt: String,
    /// The output contract, as a JSON Schema, when the caller gives one.
    pub contract: Option<Value>,
    /// How long it may run.
    pub timeout: Duration,
}

/// The host name of this machine (`uname -n`); a group recorded with
/// another host is never killed from here.
pub fn this_host() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The owner id of this process (`host:pid:start_ms`): unique per process,
/// also across pid reuse.
pub fn owner_id(started_ms: i64) -> String {
    format!("{}:{}:{started_ms}", this_host(), std::process::id())
}

/// A fresh agent run id (`agent-` and 16 hex digits).
pub fn new_id() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let h = blake3::hash(format!("agent:{nanos}:{}:{n}", std::process::id()).as_bytes());
    format!("agent-{}", &h.to_hex()[..16])
}

/// The prompt a connector CLI gets: the task, the contract and how to
/// answer (one JSON object, as for a dispatch, so one reader reads both).
fn connector_prompt(r: &Request) -> String {
    let mut p = format!("## Task\n\n{}\n", r.prompt);
    if let Some(c) = &r.contract {
        let schema = serde_json::to_string_pretty(c).unwrap_or_default();
        p.push_str(&format!(
            "\n## Output contract (JSON Schema)\n\n```json\n{schema}\n```\n"
        ));
    }
    p.push_str(
        "\n## How to answer\n\nWhen you are done, reply with exactly one JSON object and nothing else: the output itself (matching the contract when there is one; without one, `{\"output\": \"your answer\"}`), or `{\"failure\": \"why\"}` if you cannot do the task.\n",
    );
    p
}

/// The job of agent run `id`: a command reads `{id, agent, task, contract,
/// dispatch: "agent_run"}` on stdin; a connector gets the prompt in its argv.
pub fn job(id: &str, r: &Request) -> Job {
    let entry = json!({
        "id": id,
        "agent": r.agent,
        "task": r.prompt,
        "contract": r.contract,
        "dispatch": "agent_run",
    });
    match &r.runner {
        Runner::Command(cmd) => Job::new(cmd.as_str(), entry, r.timeout),
        Runner::Connector(kind, settings) => {
            let call = Call {
                kind: *kind,
                argv: crate::connector::argv(*kind, settings, connector_prompt(r)),
                settings: settings.clone(),
            };
            Job::connected(call, entry, r.timeout)
        }
    }
}

/// The record of agent run `id` as it starts (no pid yet).
pub fn started(
    id: &str,
    r: &Request,
    (now_ms, owner): (i64, &str),
    flow: Option<FlowLink>,
    cancellation_id: Option<String>,
) -> AgentRun {
    AgentRun {
        id: id.to_owned(),
        agent: r.agent.clone(),
        status: AgentRunStatus::Running,
        pid: None,
        pgid: None,
        host: this_host(),
        started_ms: now_ms,
        updated_ms: now_ms,
        output: None,
        failure: None,
        usage: None,
        flow,
        cancellation_id,
        owner: owner.to_owned(),
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(64);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes in all]", &text[..end], text.len())
}

/// The record once the supervisor answered: `completed` with the output,
/// or `failed` with why; the usage the CLI (or the command's report)
/// gave. An output past [`MAX_AGENT_OUTPUT`] is a failure saying so.
pub fn settled(mut record: AgentRun, answer: Answer, now_ms: i64) -> AgentRun {
    let (report, usage) = match answer {
        Answer::Report(r) => {
            let usage = r.usage.as_ref().and_then(|u| {
                Some(AgentUsage {
                    tokens: u.get("tokens")?.as_u64()?,
                    usd: u.get("usd").and_then(Value::as_f64),
                })
            });
            (Some(r), usage)
        }
        Answer::Connected(c) => {
            let usage = c.usage.as_ref().map(|u| AgentUsage {
                // tokens are whole numbers the CLI counted
                tokens: u.tokens.max(0.0).round() as u64,
                usd: u.usd,
            });
            (Some(c.report), usage)
        }
        Answer::Orphaned => (None, None),
    };
    record.updated_ms = now_ms;
    record.usage = usage;
    let Some(report) = report else {
        record.status = AgentRunStatus::Failed;
        record.failure = Some("the agent ran past its time limit and was killed".into());
        return record;
    };
    match (report.failure, report.output) {
        (Some(f), _) => {
            record.status = AgentRunStatus::Failed;
            record.failure = Some(cut(&f, MAX_AGENT_FAILURE));
        }
        (None, output) => {
            let text = output.unwrap_or(Value::Null).to_string();
            if text.len() > MAX_AGENT_OUTPUT {
                record.status = AgentRunStatus::Failed;
                record.failure = Some(format!(
                    "the agent's output is {} bytes; at most {MAX_AGENT_OUTPUT} are kept (write large results to files)",
                    text.len()
                ));
            } else {
                record.status = AgentRunStatus::Completed;
                record.output = Some(text);
            }
        }
    }
    record
}

/// What a cancel did.
#[derive(Debug, Clone, PartialEq)]
pub struct Cancel {
    /// The record after the cancel (settled as `cancelled`, or as it had
    /// already settled).
    pub record: AgentRun,
    /// The record had already settled before: nothing was changed or killed.
    pub already: bool,
    /// What became of its process group (`None`: it had none to kill, or it
    /// runs on another host).
    pub teardown: Option<Teardown>,
    /// The group is recorded on another host: it was not signalled.
    pub other_host: bool,
}

impl Cancel {
    /// Whether nothing of the run is left alive (as far as this host can
    /// tell: a group on another host is unconfirmed).
    pub fn confirmed(&self) -> bool {
        !self.other_host && self.teardown.is_none_or(Teardown::confirmed)
    }
}

/// Cancels `record` (as read from `store`): settles it as `cancelled` with
/// `why` first (so the run's own end, written later, is refused), then, on
/// this host, kills its process group and waits for it to be gone. A record
/// that had already settled is left as it is.
pub fn cancel(
    store: &mut dyn RunStore,
    record: AgentRun,
    why: &str,
    now_ms: i64,
) -> Result<Cancel, StoreError> {
    stop(store, record, (AgentRunStatus::Cancelled, why), now_ms)
}

/// [`cancel`] with the status to settle as: `cancelled`, or `lost` when a
/// process takes over the work of an owner that went away.
pub fn stop(
    store: &mut dyn RunStore,
    record: AgentRun,
    (status, why): (AgentRunStatus, &str),
    now_ms: i64,
) -> Result<Cancel, StoreError> {
    let settled = AgentRun {
        status,
        failure: Some(cut(why, MAX_AGENT_FAILURE)),
        updated_ms: now_ms,
        ..record.clone()
    };
    let record = match store.update_agent_run(&settled)? {
        AgentUpdate::Settled(stored) => {
            return Ok(Cancel {
                record: *stored,
                already: true,
                teardown: None,
                other_host: false,
            });
        }
        AgentUpdate::Written => settled,
    };
    let other_host = record.pgid.is_some() && record.host != this_host();
    let teardown = match record.pgid {
        Some(pgid) if !other_host => Some(agent::kill_group(pgid, TEARDOWN_WAIT)),
        _ => None,
    };
    Ok(Cancel {
        record,
        already: false,
        teardown,
        other_host,
    })
}

/// Cancels every running agent run linked to flow run `run_id` (a flow
/// cancelled from any process: `stratum_flow_cancel`).
pub fn cancel_linked(
    store: &mut dyn RunStore,
    run_id: &str,
    now_ms: i64,
) -> Result<Vec<Cancel>, StoreError> {
    let why = format!("cancelled: its flow run `{run_id}` was cancelled");
    let mut out = Vec::new();
    for record in store.agent_runs_of_flow(run_id)? {
        if record.is_settled() {
            continue;
        }
        out.push(cancel(store, record, &why, now_ms)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn request(cmd: &str) -> Request {
        Request {
            agent: "claude".into(),
            runner: Runner::Command(cmd.into()),
            prompt: "say hi".into(),
            contract: None,
            timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn a_command_agent_run_reads_its_entry_and_settles_with_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let r = request(
            r#"read line; printf '{"output": {"seen": %s}, "usage": {"tokens": 7}}' "$line""#,
        );
        let id = new_id();
        let record = started(&id, &r, (1, "me"), None, None);
        let mut pid = None;
        let answer = agent::run_command_observed(&job(&id, &r), &id, dir.path(), |p| pid = Some(p));
        assert!(pid.is_some());
        let done = settled(record, answer, 2);
        assert_eq!(done.status, AgentRunStatus::Completed, "{done:?}");
        let out: Value = serde_json::from_str(done.output.as_deref().unwrap()).unwrap();
        assert_eq!(out["seen"]["task"], "say hi");
        assert_eq!(out["seen"]["dispatch"], "agent_run");
        assert_eq!(
            done.usage,
            Some(AgentUsage {
                tokens: 7,
                usd: None
            })
        );
    }

    #[test]
    fn a_failing_command_settles_as_failed_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let r = request("echo broken >&2; exit 3");
        let answer = agent::run_command(&job("a", &r), "a", dir.path());
        let done = settled(started("a", &r, (1, "me"), None, None), answer, 2);
        assert_eq!(done.status, AgentRunStatus::Failed);
        assert!(
            done.failure.as_deref().unwrap().contains("broken"),
            "{done:?}"
        );
    }

    #[test]
    fn a_cancel_settles_first_then_kills_the_group_and_the_late_end_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = MemoryStore::new();
        let r = request("sleep 60 & sleep 60; echo '{}'");
        let record = started("a", &r, (1, "me"), None, None);
        store.create_agent_run(&record).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let job = job("a", &r);
        let cwd = dir.path().to_path_buf();
        let runner = std::thread::spawn(move || {
            agent::run_command_observed(&job, "a", &cwd, |p| {
                let _ = tx.send(p);
            })
        });
        let pid = rx.recv().unwrap();
        let with_pid = AgentRun {
            pid: Some(pid),
            pgid: Some(pid),
            ..record
        };
        store.update_agent_run(&with_pid).unwrap();
        let c = cancel(&mut store, with_pid.clone(), "cancelled by the caller", 5).unwrap();
        assert!(!c.already);
        assert_eq!(c.teardown, Some(Teardown::Reaped));
        assert!(c.confirmed());
        let answer = runner.join().unwrap();
        // the supervisor's end comes after the cancel: the cancel is kept
        let late = settled(with_pid, answer, 9);
        assert!(matches!(
            store.update_agent_run(&late).unwrap(),
            AgentUpdate::Settled(_)
        ));
        let stored = store.agent_run("a").unwrap().unwrap();
        assert_eq!(stored.status, AgentRunStatus::Cancelled);
        // a second cancel changes nothing
        let again = cancel(&mut store, stored, "again", 10).unwrap();
        assert!(again.already && again.teardown.is_none());
    }

    #[test]
    fn a_group_that_has_ended_is_gone_and_init_is_never_signalled() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(
            agent::kill_group(pid, Duration::from_secs(1)),
            Teardown::Gone
        );
        assert_eq!(agent::kill_group(1, Duration::from_secs(1)), Teardown::Gone);
        assert_eq!(agent::kill_group(0, Duration::from_secs(1)), Teardown::Gone);
    }

    #[test]
    fn a_group_on_another_host_is_not_signalled() {
        let mut store = MemoryStore::new();
        let r = request("true");
        let record = AgentRun {
            host: "elsewhere.invalid".into(),
            pid: Some(999_999),
            pgid: Some(999_999),
            ..started("a", &r, (1, "me"), None, None)
        };
        store.create_agent_run(&record).unwrap();
        let c = cancel(&mut store, record, "cancelled", 2).unwrap();
        assert!(c.teardown.is_none() && c.other_host && !c.confirmed());
    }

    #[test]
    fn outputs_and_failures_are_cut_to_their_bounds() {
        let long = "é".repeat(MAX_AGENT_FAILURE);
        let c = cut(&long, MAX_AGENT_FAILURE);
        assert!(c.len() <= MAX_AGENT_FAILURE && c.ends_with("bytes in all]"));
        let r = request("true");
        let big = Answer::Report(crate::interp::Report {
            output: Some(Value::String("x".repeat(MAX_AGENT_OUTPUT + 1))),
            ..Default::default()
        });
        let done = settled(started("a", &r, (1, "me"), None, None), big, 2);
        assert_eq!(done.status, AgentRunStatus::Failed);
        assert!(done.output.is_none());
    }
}
