//! The SQLite store's agent runs and leases (schema 4: tables `agent_runs`
//! and `leases`, each record checksummed like the rest of the store).
//!
//! Owns: the columns of an [`AgentRun`] and a [`Lease`], their reads (each
//! verified) and their writes (each in one immediate transaction with the
//! read that decides it).
//! Must never: change a settled agent run, or hand out a record whose
//! checksum does not match.

use rusqlite::{Connection, OptionalExtension, params};

use super::super::agents::grant;
use super::super::{
    AgentRun, AgentRunStatus, AgentUpdate, AgentUsage, FlowLink, Lease, LeaseGrant, StoreError, sum,
};
use super::{SqliteStore, map_err};

/// The `agent_runs` columns [`agent_from_row`] reads, in its order.
pub(super) const AGENT_COLUMNS: &str =
    "id, agent, status, pid, pgid, host, started_ms, updated_ms, output,
     failure, usage_tokens, usage_usd, flow_run_id, flow_step_id, flow_item, cancellation_id,
     owner, sum";

/// The stored checksum is read with the record; [`verified`] checks it.
pub(super) type Stored<T> = (T, Option<Vec<u8>>);

pub(super) fn agent_from_row(
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<Stored<Result<AgentRun, String>>> {
    let status: String = r.get(2)?;
    let id: String = r.get(0)?;
    let tokens: Option<i64> = r.get(10)?;
    let usd: Option<f64> = r.get(11)?;
    let flow_run: Option<String> = r.get(12)?;
    let flow_item: Option<i64> = r.get(14)?;
    let u32_of = |v: Option<i64>| v.map(u32::try_from).transpose();
    let record = (|| {
        let status = AgentRunStatus::from_name(&status)
            .ok_or_else(|| format!("agent run `{id}` has the unknown status `{status}`"))?;
        let bad = |what: &str| format!("agent run `{id}` has an out-of-range {what}");
        Ok(AgentRun {
            id: id.clone(),
            agent: r.get(1).map_err(|e| e.to_string())?,
            status,
            pid: u32_of(r.get(3).map_err(|e| e.to_string())?).map_err(|_| bad("pid"))?,
            pgid: u32_of(r.get(4).map_err(|e| e.to_string())?).map_err(|_| bad("group id"))?,
            host: r.get(5).map_err(|e| e.to_string())?,
            started_ms: r.get(6).map_err(|e| e.to_string())?,
            updated_ms: r.get(7).map_err(|e| e.to_string())?,
            output: r.get(8).map_err(|e| e.to_string())?,
            failure: r.get(9).map_err(|e| e.to_string())?,
            usage: tokens
                .map(|t| {
                    Ok::<_, String>(AgentUsage {
                        tokens: u64::try_from(t).map_err(|_| bad("token count"))?,
                        usd,
                    })
                })
                .transpose()?,
            flow: flow_run
                .map(|run_id| {
                    Ok::<_, String>(FlowLink {
                        run_id,
                        step_id: r.get(13).map_err(|e| e.to_string())?,
                        item_index: u32_of(flow_item).map_err(|_| bad("item index"))?,
                    })
                })
                .transpose()?,
            cancellation_id: r.get(15).map_err(|e| e.to_string())?,
            owner: r.get(16).map_err(|e| e.to_string())?,
        })
    })();
    Ok((record, r.get(17)?))
}

fn verified(stored: Stored<Result<AgentRun, String>>) -> Result<AgentRun, StoreError> {
    let (record, s) = stored;
    let record = record.map_err(StoreError::Corrupt)?;
    sum::verify(s.as_deref(), &sum::agent_run(&record), || {
        format!("agent run `{}`", record.id)
    })?;
    Ok(record)
}

fn read_agents(conn: &Connection, filter: &str, arg: &str) -> Result<Vec<AgentRun>, StoreError> {
    let sql = format!("SELECT {AGENT_COLUMNS} FROM agent_runs WHERE {filter}");
    let mut stmt = conn.prepare_cached(&sql).map_err(map_err)?;
    let rows = stmt.query_map([arg], agent_from_row).map_err(map_err)?;
    rows.map(|r| verified(r.map_err(map_err)?)).collect()
}

fn one_agent(conn: &Connection, filter: &str, arg: &str) -> Result<Option<AgentRun>, StoreError> {
    Ok(read_agents(conn, filter, arg)?.into_iter().next())
}

/// The column values of a record, in [`AGENT_COLUMNS`]' order.
fn write_agent(conn: &Connection, r: &AgentRun, insert: bool) -> Result<(), StoreError> {
    let s = sum::agent_run(r);
    let flow = r.flow.as_ref();
    let tokens = r
        .usage
        .map(|u| i64::try_from(u.tokens))
        .transpose()
        .map_err(|_| {
            StoreError::Invalid(format!("agent run `{}`: token count out of range", r.id))
        })?;
    let sql = if insert {
        "INSERT INTO agent_runs (id, agent, status, pid, pgid, host, started_ms, updated_ms, output,
             failure, usage_tokens, usage_usd, flow_run_id, flow_step_id, flow_item,
             cancellation_id, owner, sum)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
    } else {
        "UPDATE agent_runs SET agent = ?2, status = ?3, pid = ?4, pgid = ?5, host = ?6,
             started_ms = ?7, updated_ms = ?8, output = ?9, failure = ?10, usage_tokens = ?11,
             usage_usd = ?12, flow_run_id = ?13, flow_step_id = ?14, flow_item = ?15,
             cancellation_id = ?16, owner = ?17, sum = ?18
         WHERE id = ?1"
    };
    let mut stmt = conn.prepare_cached(sql).map_err(map_err)?;
    stmt.execute(params![
        r.id,
        r.agent,
        r.status.as_str(),
        r.pid,
        r.pgid,
        r.host,
        r.started_ms,
        r.updated_ms,
        r.output,
        r.failure,
        tokens,
        r.usage.and_then(|u| u.usd),
        flow.map(|f| f.run_id.as_str()),
        flow.and_then(|f| f.step_id.as_deref()),
        flow.and_then(|f| f.item_index),
        r.cancellation_id,
        r.owner,
        &s[..],
    ])
    .map_err(map_err)?;
    Ok(())
}

fn read_lease(conn: &Connection, run_id: &str) -> Result<Option<Lease>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT run_id, holder, host, pid, heartbeat_ms, expires_ms, sum FROM leases
             WHERE run_id = ?1",
        )
        .map_err(map_err)?;
    let found = stmt
        .query_row([run_id], |r| {
            Ok((
                Lease {
                    run_id: r.get(0)?,
                    holder: r.get(1)?,
                    host: r.get(2)?,
                    pid: r.get(3)?,
                    heartbeat_ms: r.get(4)?,
                    expires_ms: r.get(5)?,
                },
                r.get::<_, Option<Vec<u8>>>(6)?,
            ))
        })
        .optional()
        .map_err(map_err)?;
    let Some((lease, stored)) = found else {
        return Ok(None);
    };
    sum::verify(stored.as_deref(), &sum::lease(&lease), || {
        format!("the lease of run `{run_id}`")
    })?;
    Ok(Some(lease))
}

impl SqliteStore {
    pub(super) fn create_agent_run_impl(&mut self, run: &AgentRun) -> Result<(), StoreError> {
        run.check()?;
        let tx = self.write_tx()?;
        if one_agent(&tx, "id = ?1", &run.id)?.is_some() {
            return Err(StoreError::Exists(run.id.clone()));
        }
        if let Some(c) = &run.cancellation_id
            && let Some(other) = one_agent(&tx, "cancellation_id = ?1", c)?
        {
            return Err(StoreError::Exists(other.id));
        }
        write_agent(&tx, run, true)?;
        tx.commit().map_err(map_err)
    }

    pub(super) fn update_agent_run_impl(
        &mut self,
        run: &AgentRun,
    ) -> Result<AgentUpdate, StoreError> {
        run.check()?;
        let tx = self.write_tx()?;
        let stored = one_agent(&tx, "id = ?1", &run.id)?
            .ok_or_else(|| StoreError::NotFound(run.id.clone()))?;
        if stored.is_settled() {
            return Ok(AgentUpdate::Settled(Box::new(stored)));
        }
        write_agent(&tx, run, false)?;
        tx.commit().map_err(map_err)?;
        Ok(AgentUpdate::Written)
    }

    pub(super) fn agent_run_impl(&self, id: &str) -> Result<Option<AgentRun>, StoreError> {
        one_agent(&self.conn, "id = ?1", id)
    }

    pub(super) fn agent_run_by_cancellation_impl(
        &self,
        id: &str,
    ) -> Result<Option<AgentRun>, StoreError> {
        one_agent(&self.conn, "cancellation_id = ?1", id)
    }

    pub(super) fn agent_runs_of_flow_impl(
        &self,
        run_id: &str,
    ) -> Result<Vec<AgentRun>, StoreError> {
        read_agents(
            &self.conn,
            "flow_run_id = ?1 ORDER BY started_ms, id",
            run_id,
        )
    }

    pub(super) fn acquire_lease_impl(&mut self, asked: &Lease) -> Result<LeaseGrant, StoreError> {
        super::check_run_id(&asked.run_id)?;
        let tx = self.write_tx()?;
        let current = read_lease(&tx, &asked.run_id)?;
        let granted = grant(current.as_ref(), asked);
        if matches!(granted, LeaseGrant::Held(_)) {
            return Ok(granted);
        }
        let s = sum::lease(asked);
        tx.prepare_cached(
            "INSERT INTO leases (run_id, holder, host, pid, heartbeat_ms, expires_ms, sum)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (run_id) DO UPDATE SET holder = excluded.holder, host = excluded.host,
                 pid = excluded.pid, heartbeat_ms = excluded.heartbeat_ms,
                 expires_ms = excluded.expires_ms, sum = excluded.sum",
        )
        .map_err(map_err)?
        .execute(params![
            asked.run_id,
            asked.holder,
            asked.host,
            asked.pid,
            asked.heartbeat_ms,
            asked.expires_ms,
            &s[..]
        ])
        .map_err(map_err)?;
        tx.commit().map_err(map_err)?;
        Ok(granted)
    }

    pub(super) fn release_lease_impl(
        &mut self,
        run_id: &str,
        holder: &str,
    ) -> Result<bool, StoreError> {
        let tx = self.write_tx()?;
        let n = tx
            .prepare_cached("DELETE FROM leases WHERE run_id = ?1 AND holder = ?2")
            .map_err(map_err)?
            .execute([run_id, holder])
            .map_err(map_err)?;
        tx.commit().map_err(map_err)?;
        Ok(n > 0)
    }

    pub(super) fn lease_impl(&self, run_id: &str) -> Result<Option<Lease>, StoreError> {
        read_lease(&self.conn, run_id)
    }
}
