//! The PostgreSQL store's agent runs and leases (the tables `agent_runs`
//! and `leases`, each record checksummed like the SQLite store's).
//!
//! Owns: their SQL. An update locks the stored record (`FOR UPDATE`) before
//! deciding, so a settled record is never changed; a lease request takes a
//! transaction-scoped advisory lock on the run's lease first, so of two
//! askers on any connections exactly one is granted it.
//! Must never: change a settled agent run, or hand out a record whose
//! checksum does not match.

use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

use super::super::agents::grant;
use super::super::{
    AgentRun, AgentRunStatus, AgentUpdate, AgentUsage, FlowLink, Lease, LeaseGrant, StoreError,
    check_run_id, sum,
};
use super::conn::{Db, column};

/// The advisory-lock class of leases (the first key of the two-key lock).
const LEASE_LOCK: i32 = 0x4c45; // "LE"

const BY_ID: &str = "SELECT id, agent, status, pid, pgid, host, started_ms, updated_ms, output,
         failure, usage_tokens, usage_usd, flow_run_id, flow_step_id, flow_item, cancellation_id,
         owner, sum
     FROM agent_runs WHERE id = $1";
const LOCK_BY_ID: &str =
    "SELECT id, agent, status, pid, pgid, host, started_ms, updated_ms, output,
         failure, usage_tokens, usage_usd, flow_run_id, flow_step_id, flow_item, cancellation_id,
         owner, sum
     FROM agent_runs WHERE id = $1 FOR UPDATE";
const BY_CANCELLATION: &str = "SELECT id, agent, status, pid, pgid, host, started_ms, updated_ms,
         output, failure, usage_tokens, usage_usd, flow_run_id, flow_step_id, flow_item,
         cancellation_id, owner, sum
     FROM agent_runs WHERE cancellation_id = $1";
const BY_FLOW: &str = "SELECT id, agent, status, pid, pgid, host, started_ms, updated_ms, output,
         failure, usage_tokens, usage_usd, flow_run_id, flow_step_id, flow_item, cancellation_id,
         owner, sum
     FROM agent_runs WHERE flow_run_id = $1 ORDER BY started_ms, id";

/// A record and its stored checksum, not yet verified.
pub(super) fn agent_record(r: &Row) -> Result<(AgentRun, Option<Vec<u8>>), StoreError> {
    let id: String = column(r, 0)?;
    let status: String = column(r, 2)?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("agent run `{id}` has {what}"));
    let u32_of = |v: Option<i64>, what: &str| {
        v.map(u32::try_from)
            .transpose()
            .map_err(|_| corrupt(&format!("an out-of-range {what}")))
    };
    let status = AgentRunStatus::from_name(&status)
        .ok_or_else(|| corrupt(&format!("the unknown status `{status}`")))?;
    let tokens: Option<i64> = column(r, 10)?;
    let usd: Option<f64> = column(r, 11)?;
    let flow_run: Option<String> = column(r, 12)?;
    let record = AgentRun {
        id: id.clone(),
        agent: column(r, 1)?,
        status,
        pid: u32_of(column(r, 3)?, "pid")?,
        pgid: u32_of(column(r, 4)?, "group id")?,
        host: column(r, 5)?,
        started_ms: column(r, 6)?,
        updated_ms: column(r, 7)?,
        output: column(r, 8)?,
        failure: column(r, 9)?,
        usage: tokens
            .map(|t| {
                Ok::<_, StoreError>(AgentUsage {
                    tokens: u64::try_from(t).map_err(|_| corrupt("an out-of-range token count"))?,
                    usd,
                })
            })
            .transpose()?,
        flow: flow_run
            .map(|run_id| {
                Ok::<_, StoreError>(FlowLink {
                    run_id,
                    step_id: column(r, 13)?,
                    item_index: u32_of(column(r, 14)?, "item index")?,
                })
            })
            .transpose()?,
        cancellation_id: column(r, 15)?,
        owner: column(r, 16)?,
    };
    Ok((record, column(r, 17)?))
}

fn agent_from_row(r: &Row) -> Result<AgentRun, StoreError> {
    let (record, stored) = agent_record(r)?;
    sum::verify(stored.as_deref(), &sum::agent_run(&record), || {
        format!("agent run `{}`", record.id)
    })?;
    Ok(record)
}

fn one_agent(db: &mut Db, sql: &'static str, arg: &str) -> Result<Option<AgentRun>, StoreError> {
    db.query_opt(sql, &[&arg])?
        .map(|r| agent_from_row(&r))
        .transpose()
}

/// Inserts (`insert`) or replaces a record; a unique violation is handed back.
fn write_agent(
    db: &mut Db,
    r: &AgentRun,
    insert: bool,
) -> Result<Result<u64, tokio_postgres::Error>, StoreError> {
    let s = sum::agent_run(r).to_vec();
    let flow = r.flow.as_ref();
    let tokens = r
        .usage
        .map(|u| i64::try_from(u.tokens))
        .transpose()
        .map_err(|_| {
            StoreError::Invalid(format!("agent run `{}`: token count out of range", r.id))
        })?;
    let sql = if insert {
        "INSERT INTO agent_runs (id, agent, status, pid, pgid, host, started_ms, updated_ms,
             output, failure, usage_tokens, usage_usd, flow_run_id, flow_step_id, flow_item,
             cancellation_id, owner, sum)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
    } else {
        "UPDATE agent_runs SET agent = $2, status = $3, pid = $4, pgid = $5, host = $6,
             started_ms = $7, updated_ms = $8, output = $9, failure = $10, usage_tokens = $11,
             usage_usd = $12, flow_run_id = $13, flow_step_id = $14, flow_item = $15,
             cancellation_id = $16, owner = $17, sum = $18
         WHERE id = $1"
    };
    let pid = r.pid.map(i64::from);
    let pgid = r.pgid.map(i64::from);
    let item = flow.and_then(|f| f.item_index).map(i64::from);
    db.execute_raw(
        sql,
        &[
            &r.id,
            &r.agent,
            &r.status.as_str(),
            &pid,
            &pgid,
            &r.host,
            &r.started_ms,
            &r.updated_ms,
            &r.output,
            &r.failure,
            &tokens,
            &r.usage.and_then(|u| u.usd),
            &flow.map(|f| f.run_id.as_str()),
            &flow.and_then(|f| f.step_id.as_deref()),
            &item,
            &r.cancellation_id,
            &r.owner,
            &s,
        ],
    )
}

fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

pub(super) fn create_agent_run(db: &mut Db, run: &AgentRun) -> Result<(), StoreError> {
    run.check()?;
    let mut raced = false;
    let written = db.write(|db| {
        if one_agent(db, BY_ID, &run.id)?.is_some() {
            return Err(StoreError::Exists(run.id.clone()));
        }
        if let Some(c) = &run.cancellation_id
            && let Some(other) = one_agent(db, BY_CANCELLATION, c)?
        {
            return Err(StoreError::Exists(other.id));
        }
        match write_agent(db, run, true)? {
            Ok(_) => Ok(()),
            // another connection inserted the id or the cancellation id
            // since the reads above: this transaction is rolled back
            Err(e) if is_unique_violation(&e) => {
                raced = true;
                Err(StoreError::Exists(run.id.clone()))
            }
            Err(e) => Err(db.error(e)),
        }
    });
    if !raced {
        return written;
    }
    // name the record that took the cancellation id, when it is another
    if let Some(c) = &run.cancellation_id
        && let Some(other) = one_agent(db, BY_CANCELLATION, c)?
        && other.id != run.id
    {
        return Err(StoreError::Exists(other.id));
    }
    written
}

pub(super) fn update_agent_run(db: &mut Db, run: &AgentRun) -> Result<AgentUpdate, StoreError> {
    run.check()?;
    db.write(|db| {
        let stored = one_agent(db, LOCK_BY_ID, &run.id)?
            .ok_or_else(|| StoreError::NotFound(run.id.clone()))?;
        if stored.is_settled() {
            return Ok(AgentUpdate::Settled(Box::new(stored)));
        }
        match write_agent(db, run, false)? {
            Ok(_) => Ok(AgentUpdate::Written),
            Err(e) if is_unique_violation(&e) => Err(StoreError::Exists(run.id.clone())),
            Err(e) => Err(db.error(e)),
        }
    })
}

pub(super) fn agent_run(db: &mut Db, id: &str) -> Result<Option<AgentRun>, StoreError> {
    one_agent(db, BY_ID, id)
}

pub(super) fn agent_run_by_cancellation(
    db: &mut Db,
    id: &str,
) -> Result<Option<AgentRun>, StoreError> {
    one_agent(db, BY_CANCELLATION, id)
}

pub(super) fn agent_runs_of_flow(db: &mut Db, run_id: &str) -> Result<Vec<AgentRun>, StoreError> {
    db.query(BY_FLOW, &[&run_id])?
        .iter()
        .map(agent_from_row)
        .collect()
}

fn read_lease(db: &mut Db, run_id: &str) -> Result<Option<Lease>, StoreError> {
    let Some(r) = db.query_opt(
        "SELECT run_id, holder, host, pid, heartbeat_ms, expires_ms, sum FROM leases
         WHERE run_id = $1",
        &[&run_id],
    )?
    else {
        return Ok(None);
    };
    let pid: i64 = column(&r, 3)?;
    let lease = Lease {
        run_id: column(&r, 0)?,
        holder: column(&r, 1)?,
        host: column(&r, 2)?,
        pid: u32::try_from(pid).map_err(|_| {
            StoreError::Corrupt(format!("the lease of run `{run_id}` has pid {pid}"))
        })?,
        heartbeat_ms: column(&r, 4)?,
        expires_ms: column(&r, 5)?,
    };
    let stored: Option<Vec<u8>> = column(&r, 6)?;
    sum::verify(stored.as_deref(), &sum::lease(&lease), || {
        format!("the lease of run `{run_id}`")
    })?;
    Ok(Some(lease))
}

pub(super) fn acquire_lease(db: &mut Db, asked: &Lease) -> Result<LeaseGrant, StoreError> {
    check_run_id(&asked.run_id)?;
    let s = sum::lease(asked).to_vec();
    let pid = i64::from(asked.pid);
    db.write(|db| {
        // serializes every asker of this run's lease until commit (the
        // row may not exist yet, so a row lock cannot do it)
        db.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&LEASE_LOCK, &asked.run_id],
        )?;
        let current = read_lease(db, &asked.run_id)?;
        let granted = grant(current.as_ref(), asked);
        if matches!(granted, LeaseGrant::Held(_)) {
            return Ok(granted);
        }
        db.execute(
            "INSERT INTO leases (run_id, holder, host, pid, heartbeat_ms, expires_ms, sum)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (run_id) DO UPDATE SET holder = EXCLUDED.holder, host = EXCLUDED.host,
                 pid = EXCLUDED.pid, heartbeat_ms = EXCLUDED.heartbeat_ms,
                 expires_ms = EXCLUDED.expires_ms, sum = EXCLUDED.sum",
            &[
                &asked.run_id,
                &asked.holder,
                &asked.host,
                &pid,
                &asked.heartbeat_ms,
                &asked.expires_ms,
                &s,
            ],
        )?;
        Ok(granted)
    })
}

pub(super) fn release_lease(db: &mut Db, run_id: &str, holder: &str) -> Result<bool, StoreError> {
    db.write(|db| {
        db.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&LEASE_LOCK, &run_id],
        )?;
        let n = db.execute(
            "DELETE FROM leases WHERE run_id = $1 AND holder = $2",
            &[&run_id, &holder],
        )?;
        Ok(n > 0)
    })
}

pub(super) fn lease(db: &mut Db, run_id: &str) -> Result<Option<Lease>, StoreError> {
    read_lease(db, run_id)
}
