//! [`MemoryStore`]: a non-durable [`RunStore`] in ordinary collections, for
//! tests and non-durable benchmarks. Same semantics as the SQLite store.
//!
//! Must never: be used where runs must survive the process.

use std::collections::{BTreeMap, HashMap};

use super::agents::grant;
use super::guard::{GuardRecord, GuardStore, GuardWrite, LedgerRow, check_write};
use super::{
    AgentRun, AgentUpdate, Delta, Lease, LeaseGrant, RunMeta, RunStore, Snapshot, StoreError,
    check_delta, check_run_id,
};

#[derive(Debug, Clone)]
struct Run {
    meta: RunMeta,
    version: u64,
    header: Vec<u8>,
    rows: BTreeMap<u64, Vec<u8>>,
    events: Vec<String>,
    /// Insertion-ordered labels with their blobs.
    checkpoints: Vec<(String, Vec<u8>)>,
}

/// An in-memory [`RunStore`].
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    plans: HashMap<String, Vec<u8>>,
    runs: HashMap<String, Run>,
    /// Agent runs in the order they were created.
    agent_runs: Vec<AgentRun>,
    leases: HashMap<String, Lease>,
    guards: BTreeMap<String, (GuardRecord, Vec<LedgerRow>)>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn run(&self, run_id: &str) -> Result<&Run, StoreError> {
        self.runs
            .get(run_id)
            .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))
    }

    fn run_mut(&mut self, run_id: &str) -> Result<&mut Run, StoreError> {
        self.runs
            .get_mut(run_id)
            .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))
    }
}

impl RunStore for MemoryStore {
    fn put_plan(&mut self, hash: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.plans
            .entry(hash.to_owned())
            .or_insert_with(|| bytes.to_vec());
        Ok(())
    }

    fn get_plan(&self, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.plans.get(hash).cloned())
    }

    fn create(
        &mut self,
        meta: &RunMeta,
        header: &[u8],
        rows: &[(u64, Vec<u8>)],
        events: &[String],
    ) -> Result<(), StoreError> {
        check_run_id(&meta.run_id)?;
        if self.runs.contains_key(&meta.run_id) {
            return Err(StoreError::Exists(meta.run_id.clone()));
        }
        let run = Run {
            meta: meta.clone(),
            version: 1,
            header: header.to_vec(),
            rows: rows.iter().cloned().collect(),
            events: events.to_vec(),
            checkpoints: Vec::new(),
        };
        self.runs.insert(meta.run_id.clone(), run);
        Ok(())
    }

    fn version(&self, run_id: &str) -> Result<u64, StoreError> {
        Ok(self.run(run_id)?.version)
    }

    fn load(&self, run_id: &str) -> Result<Snapshot, StoreError> {
        let run = self.run(run_id)?;
        Ok(Snapshot {
            meta: run.meta.clone(),
            version: run.version,
            header: run.header.clone(),
            rows: run.rows.iter().map(|(k, v)| (*k, v.clone())).collect(),
            event_count: run.events.len() as u64,
        })
    }

    fn commit(&mut self, delta: &Delta<'_>) -> Result<u64, StoreError> {
        check_delta(delta)?;
        let run = self.run_mut(delta.run_id)?;
        if run.version != delta.expected_version {
            return Err(StoreError::Conflict {
                expected: delta.expected_version,
                current: run.version,
            });
        }
        let created_ms = run.meta.created_ms;
        run.meta = delta.meta.clone();
        run.meta.created_ms = created_ms;
        run.header = delta.header.to_vec();
        for (key, blob) in delta.rows {
            run.rows.insert(*key, blob.clone());
        }
        run.events.extend(delta.events.iter().cloned());
        run.version += 1;
        Ok(run.version)
    }

    fn events(&self, run_id: &str, from: u64, limit: u64) -> Result<Vec<String>, StoreError> {
        let run = self.run(run_id)?;
        let start = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .min(run.events.len());
        let take = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(run.events[start..].iter().take(take).cloned().collect())
    }

    fn list(&self, status: Option<&str>) -> Result<Vec<RunMeta>, StoreError> {
        let mut out: Vec<RunMeta> = self
            .runs
            .values()
            .filter(|r| status.is_none_or(|s| r.meta.status == s))
            .map(|r| r.meta.clone())
            .collect();
        out.sort_by(|a, b| {
            b.created_ms
                .cmp(&a.created_ms)
                .then_with(|| b.run_id.cmp(&a.run_id))
        });
        Ok(out)
    }

    fn put_checkpoint(&mut self, run_id: &str, label: &str, blob: &[u8]) -> Result<(), StoreError> {
        let run = self.run_mut(run_id)?;
        match run.checkpoints.iter_mut().find(|(l, _)| l == label) {
            Some((_, existing)) => *existing = blob.to_vec(),
            None => run.checkpoints.push((label.to_owned(), blob.to_vec())),
        }
        Ok(())
    }

    fn get_checkpoint(&self, run_id: &str, label: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let run = self.run(run_id)?;
        Ok(run
            .checkpoints
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, b)| b.clone()))
    }

    fn checkpoint_labels(&self, run_id: &str) -> Result<Vec<String>, StoreError> {
        let run = self.run(run_id)?;
        Ok(run.checkpoints.iter().map(|(l, _)| l.clone()).collect())
    }

    fn create_agent_run(&mut self, run: &AgentRun) -> Result<(), StoreError> {
        run.check()?;
        let taken = |r: &AgentRun| {
            r.id == run.id
                || (run.cancellation_id.is_some() && r.cancellation_id == run.cancellation_id)
        };
        if let Some(r) = self.agent_runs.iter().find(|r| taken(r)) {
            return Err(StoreError::Exists(r.id.clone()));
        }
        self.agent_runs.push(run.clone());
        Ok(())
    }

    fn update_agent_run(&mut self, run: &AgentRun) -> Result<AgentUpdate, StoreError> {
        run.check()?;
        let stored = self
            .agent_runs
            .iter_mut()
            .find(|r| r.id == run.id)
            .ok_or_else(|| StoreError::NotFound(run.id.clone()))?;
        if stored.is_settled() {
            return Ok(AgentUpdate::Settled(Box::new(stored.clone())));
        }
        *stored = run.clone();
        Ok(AgentUpdate::Written)
    }

    fn agent_run(&self, id: &str) -> Result<Option<AgentRun>, StoreError> {
        Ok(self.agent_runs.iter().find(|r| r.id == id).cloned())
    }

    fn agent_run_by_cancellation(&self, id: &str) -> Result<Option<AgentRun>, StoreError> {
        Ok(self
            .agent_runs
            .iter()
            .find(|r| r.cancellation_id.as_deref() == Some(id))
            .cloned())
    }

    fn agent_runs_of_flow(&self, run_id: &str) -> Result<Vec<AgentRun>, StoreError> {
        let mut out: Vec<AgentRun> = self
            .agent_runs
            .iter()
            .filter(|r| r.flow.as_ref().is_some_and(|f| f.run_id == run_id))
            .cloned()
            .collect();
        out.sort_by_key(|r| r.started_ms);
        Ok(out)
    }

    fn acquire_lease(&mut self, asked: &Lease) -> Result<LeaseGrant, StoreError> {
        check_run_id(&asked.run_id)?;
        let granted = grant(self.leases.get(&asked.run_id), asked);
        if !matches!(granted, LeaseGrant::Held(_)) {
            self.leases.insert(asked.run_id.clone(), asked.clone());
        }
        Ok(granted)
    }

    fn release_lease(&mut self, run_id: &str, holder: &str) -> Result<bool, StoreError> {
        if self.leases.get(run_id).is_some_and(|l| l.holder == holder) {
            self.leases.remove(run_id);
            return Ok(true);
        }
        Ok(false)
    }

    fn lease(&self, run_id: &str) -> Result<Option<Lease>, StoreError> {
        Ok(self.leases.get(run_id).cloned())
    }
}

impl GuardStore for MemoryStore {
    fn guard(&self, resource_id: &str) -> Result<Option<GuardRecord>, StoreError> {
        Ok(self.guards.get(resource_id).map(|(r, _)| r.clone()))
    }

    fn guard_write(&mut self, write: &GuardWrite<'_>) -> Result<u64, StoreError> {
        let id = &write.record.resource_id;
        let stored = self.guards.get(id);
        let (version, len) = match (stored, write.expected_version) {
            (Some(_), None) => return Err(StoreError::Exists(id.clone())),
            (None, Some(_)) => return Err(StoreError::NotFound(id.clone())),
            (None, None) => (0, 0),
            (Some((r, _)), Some(expected)) if r.version != expected => {
                return Err(StoreError::Conflict {
                    expected,
                    current: r.version,
                });
            }
            (Some((r, rows)), Some(_)) => (r.version, rows.len() as u64),
        };
        check_write(write, len)?;
        let rows = stored.map(|(_, rows)| rows.clone()).unwrap_or_default();
        for row in write.entries {
            if let Some(key) = &row.idempotency_key
                && rows.iter().any(|r| r.idempotency_key.as_ref() == Some(key))
            {
                return Err(StoreError::Invalid(format!(
                    "idempotency key `{key}` is already recorded for `{id}`"
                )));
            }
        }
        let mut record = write.record.clone();
        record.version = version + 1;
        let mut rows = rows;
        rows.extend(write.entries.iter().cloned());
        self.guards.insert(id.clone(), (record, rows));
        Ok(version + 1)
    }

    fn guard_ledger(
        &self,
        resource_id: &str,
        from: u64,
        limit: u64,
    ) -> Result<Vec<LedgerRow>, StoreError> {
        let Some((_, rows)) = self.guards.get(resource_id) else {
            return Ok(Vec::new());
        };
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(rows.iter().skip(from).take(limit).cloned().collect())
    }

    fn guard_entry(&self, hash: &str) -> Result<Option<(String, LedgerRow)>, StoreError> {
        Ok(self.guards.iter().find_map(|(id, (_, rows))| {
            rows.iter()
                .find(|r| r.hash == hash)
                .map(|r| (id.clone(), r.clone()))
        }))
    }

    fn guard_by_key(&self, resource_id: &str, key: &str) -> Result<Option<LedgerRow>, StoreError> {
        Ok(self.guards.get(resource_id).and_then(|(_, rows)| {
            rows.iter()
                .find(|r| r.idempotency_key.as_deref() == Some(key))
                .cloned()
        }))
    }

    fn guard_ids(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.guards.keys().cloned().collect())
    }
}
