//! The guard operations on a store: register, transition, history,
//! verify, upgrade, override, migrate and apply_upgrade.
//!
//! Owns: each operation's steps and the rules between them — an unknown
//! or broken resource refused before any work; predicates evaluated with no
//! store transaction open; the state re-checked at commit by the store's
//! compare-and-swap on the record's version (a write that lost the race is
//! reloaded, and the attempt is refused as `stale` when the state moved,
//! applied when only the ledger grew); every attempt appended to the ledger;
//! idempotency replays; the additive-only rules of upgrade; signatures over
//! payloads rebuilt here with the ledger head.
//! Must never: write a state change without its ledger entry in the same
//! transaction, decide a predicate on the caller's claims, or read the
//! trust root from anywhere but `authz`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use stratum_vm::store::{GuardRecord, GuardStore, GuardWrite, LedgerRow, StoreError};

use crate::authz::{self, TrustRoot};
use crate::error::GuardError;
use crate::evidence::{Claims, Host};
use crate::ledger::{
    self, DescriptorRef, Entry, EntryKind, EntryStatus, GENESIS, Refusal, Signer, Verdict,
};
use crate::policy::{self, Policy, PolicyInput};

/// How many times a write that lost a race is retried.
const MAX_RETRIES: usize = 16;
/// The most ledger entries read at once (history, verify).
pub const MAX_LEDGER_ENTRIES: u64 = 100_000;
/// The longest resource id.
pub const MAX_RESOURCE_ID_CHARS: usize = 200;

/// Builds the evidence host of a workspace root (the adapter reads the
/// configuration there).
pub trait Hosts {
    fn host(&self, root: &Path) -> Result<Host, GuardError>;
}

/// What the operations share: the store, the hosts, the clock reading.
pub struct Guard<'a> {
    pub store: &'a mut dyn GuardStore,
    pub hosts: &'a dyn Hosts,
    pub now_ms: i64,
}

/// `register`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Registered {
    pub guard_id: String,
    pub resource_id: String,
    pub checksum: String,
    /// `registered` or `unchanged`.
    pub status: &'static str,
    pub current_state: String,
    pub graph_version: u64,
}

/// A transition's request.
#[derive(Debug, Clone, Default)]
pub struct TransitionRequest {
    pub resource_id: String,
    pub from_state: String,
    pub to_state: String,
    pub claims: Claims,
    pub idempotency_key: Option<String>,
    pub resolved_by: String,
}

/// `transition`'s (and `override`'s) answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transitioned {
    /// `applied`, `refused` or `replayed`.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Refusal>,
    pub ledger_ref: String,
    pub current_state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorized_by: Option<Signer>,
}

/// A policy change's answer (upgrade, migrate, apply_upgrade).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyChanged {
    /// `migrated` / `applied` or `unchanged`.
    pub status: &'static str,
    pub checksum: String,
    pub graph_version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorized_by: Option<Signer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub descriptor_id: Option<String>,
}

/// `history`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct History {
    pub resource_id: String,
    pub current_state: String,
    pub graph_version: u64,
    pub checksum: String,
    pub ledger_head: String,
    pub ledger: Vec<Entry>,
}

/// `verify`'s answer for one resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verified {
    pub resource_id: String,
    pub entries: u64,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// A new policy as upgrade and migrate take it (the initial state and the
/// workspace root stay the registered ones).
#[derive(Debug, Clone, Default)]
pub struct NewPolicy {
    pub graph: BTreeMap<String, Vec<String>>,
    pub edge_predicates: BTreeMap<String, Vec<policy::Predicate>>,
    pub terminal: Vec<String>,
    pub stakes: BTreeMap<String, policy::Stakes>,
}

fn check_resource_id(id: &str) -> Result<(), GuardError> {
    if id.is_empty()
        || id.chars().count() > MAX_RESOURCE_ID_CHARS
        || id.chars().any(char::is_control)
    {
        return Err(GuardError::InvalidRequest(format!(
            "resource id {id:?} must be 1 to {MAX_RESOURCE_ID_CHARS} characters without control characters"
        )));
    }
    Ok(())
}

/// The root as a directory, or why not.
fn root_dir(root: &str) -> Result<&Path, GuardError> {
    let p = Path::new(root);
    if !p.is_absolute() {
        return Err(policy::PolicyError::RelativeRoot(root.to_owned()).into());
    }
    if !p.is_dir() {
        return Err(GuardError::WorkspaceRoot {
            path: root.to_owned(),
            problem: "is not a directory".to_owned(),
        });
    }
    Ok(p)
}

impl Guard<'_> {
    fn record(&self, id: &str) -> Result<GuardRecord, GuardError> {
        check_resource_id(id)?;
        self.store
            .guard(id)?
            .ok_or_else(|| GuardError::UnknownResource(id.to_owned()))
    }

    /// The whole ledger of `rec` (refused past [`MAX_LEDGER_ENTRIES`], so a
    /// long ledger is never mistaken for a truncated one).
    fn rows(&self, rec: &GuardRecord) -> Result<Vec<LedgerRow>, GuardError> {
        if rec.ledger_len > MAX_LEDGER_ENTRIES {
            return Err(GuardError::InvalidRequest(format!(
                "the ledger of `{}` has {} entries; this stratumc reads at most {MAX_LEDGER_ENTRIES}",
                rec.resource_id, rec.ledger_len
            )));
        }
        // one row more than recorded: an inserted row shows as damage
        Ok(self
            .store
            .guard_ledger(&rec.resource_id, 0, rec.ledger_len + 1)?)
    }

    /// The record, its policy and its ledger entries, after a walk of the
    /// chain (a broken ledger refuses every write).
    fn checked(&self, id: &str) -> Result<(GuardRecord, Policy, Vec<Entry>), GuardError> {
        let rec = self.record(id)?;
        let walk = ledger::walk(&rec, &self.rows(&rec)?);
        if let Some(broken) = walk.broken {
            return Err(GuardError::LedgerBroken {
                resource_id: id.to_owned(),
                broken,
            });
        }
        let policy = Policy::from_stored(&rec.policy)?;
        Ok((rec, policy, walk.entries))
    }

    /// Validates a policy input against the declared commands of its root.
    fn validated(&self, input: &PolicyInput) -> Result<Policy, GuardError> {
        let root = root_dir(&input.workspace_root)?;
        let host = self.hosts.host(root)?;
        Ok(policy::validate(input, &|argv| {
            host.declared(argv).is_some()
        })?)
    }

    fn entry(&self, rec: &GuardRecord, kind: EntryKind, status: EntryStatus) -> Entry {
        Entry {
            seq: rec.ledger_len,
            kind,
            status,
            resource_id: rec.resource_id.clone(),
            at_ms: self.now_ms,
            from_state: None,
            to_state: None,
            resolved_by: String::new(),
            verdict: None,
            refusal: None,
            idempotency_key: None,
            policy_checksum: rec.checksum.clone(),
            graph_version: rec.graph_version,
            rationale: None,
            authorized_by: None,
            descriptor: None,
            prev: rec.head.clone(),
            hash: String::new(),
        }
    }

    /// Appends `entry` to `rec`'s ledger with `next` as the new record
    /// (state, policy), under the loaded version.
    fn append(
        &mut self,
        rec: &GuardRecord,
        entry: Entry,
        next: impl FnOnce(&mut GuardRecord),
    ) -> Result<Result<Entry, StoreError>, GuardError> {
        let (entry, row) = entry.seal();
        let mut new = rec.clone();
        next(&mut new);
        new.ledger_len = rec.ledger_len + 1;
        new.head = entry.hash.clone();
        let write = GuardWrite {
            record: &new,
            expected_version: Some(rec.version),
            entries: std::slice::from_ref(&row),
        };
        match self.store.guard_write(&write) {
            Ok(_) => Ok(Ok(entry)),
            Err(e @ StoreError::Conflict { .. }) => Ok(Err(e)),
            Err(e) => Err(e.into()),
        }
    }

    /// Registers a resource (idempotent for the same policy).
    pub fn register(
        &mut self,
        resource_id: &str,
        input: &PolicyInput,
    ) -> Result<Registered, GuardError> {
        check_resource_id(resource_id)?;
        let policy = self.validated(input)?;
        let checksum = policy.checksum();
        for _ in 0..MAX_RETRIES {
            if let Some(rec) = self.store.guard(resource_id)? {
                if rec.checksum != checksum {
                    return Err(GuardError::PolicyExists {
                        resource_id: resource_id.to_owned(),
                        checksum: rec.checksum,
                    });
                }
                return Ok(Registered {
                    guard_id: self.guard_id(resource_id)?,
                    resource_id: resource_id.to_owned(),
                    checksum,
                    status: "unchanged",
                    current_state: rec.state,
                    graph_version: rec.graph_version,
                });
            }
            let empty = GuardRecord {
                resource_id: resource_id.to_owned(),
                policy: policy.canonical(),
                checksum: checksum.clone(),
                state: policy.initial.clone(),
                graph_version: 1,
                version: 0,
                ledger_len: 0,
                head: GENESIS.to_owned(),
            };
            let mut e = self.entry(&empty, EntryKind::Registered, EntryStatus::Applied);
            e.to_state = Some(policy.initial.clone());
            e.resolved_by = "register".to_owned();
            let (entry, row) = e.seal();
            let rec = GuardRecord {
                ledger_len: 1,
                head: entry.hash.clone(),
                ..empty
            };
            let write = GuardWrite {
                record: &rec,
                expected_version: None,
                entries: std::slice::from_ref(&row),
            };
            match self.store.guard_write(&write) {
                Ok(_) => {
                    return Ok(Registered {
                        guard_id: guard_id_of(&entry.hash),
                        resource_id: resource_id.to_owned(),
                        checksum,
                        status: "registered",
                        current_state: rec.state,
                        graph_version: 1,
                    });
                }
                // another process registered it first: compare with theirs
                Err(StoreError::Exists(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(GuardError::Busy(resource_id.to_owned()))
    }

    fn guard_id(&self, id: &str) -> Result<String, GuardError> {
        let first = self.store.guard_ledger(id, 0, 1)?;
        Ok(first
            .first()
            .map_or_else(String::new, |r| guard_id_of(&r.hash)))
    }

    /// Attempts `from_state -> to_state`.
    pub fn transition(&mut self, req: &TransitionRequest) -> Result<Transitioned, GuardError> {
        let (mut rec, policy, _) = self.checked(&req.resource_id)?;
        if let Some(key) = &req.idempotency_key
            && let Some(done) = self.replay(&rec, req, key)?
        {
            return Ok(done);
        }
        let (from, to) = (req.from_state.as_str(), req.to_state.as_str());
        let early = if !policy.has_edge(from, to) {
            Some(refusal(
                "illegal_edge",
                format!("`{from}->{to}` is not an edge of the policy"),
            ))
        } else if rec.state != from {
            Some(refusal(
                "wrong_state",
                format!("the resource is in `{}`, not `{from}`", rec.state),
            ))
        } else {
            None
        };
        // evaluated with no transaction open; the commit re-checks the state
        let verdict = match early {
            Some(_) => None,
            None => {
                let host = self.hosts.host(root_dir(&policy.workspace_root)?)?;
                Some(host.verdict(
                    &*self.store,
                    policy.predicates(from, to),
                    policy.stakes_of(from, to),
                    &req.claims,
                ))
            }
        };
        let evaluated_checksum = rec.checksum.clone();
        for _ in 0..MAX_RETRIES {
            let mut refused = early.clone();
            if refused.is_none() && !verdict.as_ref().is_some_and(|v| v.met) {
                refused = Some(refusal(
                    "predicates_unmet",
                    "not every predicate of the edge is met".to_owned(),
                ));
            }
            if refused.is_none() && (rec.state != from || rec.checksum != evaluated_checksum) {
                refused = Some(refusal(
                    "stale",
                    format!(
                        "the resource moved to `{}` (or its policy changed) while the predicates were evaluated",
                        rec.state
                    ),
                ));
            }
            let status = if refused.is_some() {
                EntryStatus::Refused
            } else {
                EntryStatus::Applied
            };
            let mut e = self.entry(&rec, EntryKind::Transition, status);
            e.from_state = Some(from.to_owned());
            e.to_state = Some(to.to_owned());
            e.resolved_by = req.resolved_by.clone();
            e.verdict = verdict.clone();
            e.refusal = refused.clone();
            e.idempotency_key = req.idempotency_key.clone();
            let applied = refused.is_none();
            match self.append(&rec, e, |n| {
                if applied {
                    n.state = to.to_owned();
                }
            }) {
                Ok(Ok(entry)) => {
                    return Ok(Transitioned {
                        status: if applied { "applied" } else { "refused" },
                        verdict: entry.verdict,
                        refusal: entry.refusal,
                        ledger_ref: entry.hash,
                        current_state: if applied {
                            to.to_owned()
                        } else {
                            rec.state.clone()
                        },
                        authorized_by: None,
                    });
                }
                Ok(Err(_conflict)) => {
                    rec = self.record(&req.resource_id)?;
                    if let Some(key) = &req.idempotency_key
                        && let Some(done) = self.replay(&rec, req, key)?
                    {
                        return Ok(done);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(GuardError::Busy(req.resource_id.clone()))
    }

    /// The stored answer of an idempotency key, if it was seen.
    fn replay(
        &self,
        rec: &GuardRecord,
        req: &TransitionRequest,
        key: &str,
    ) -> Result<Option<Transitioned>, GuardError> {
        let Some(row) = self.store.guard_by_key(&rec.resource_id, key)? else {
            return Ok(None);
        };
        let e = Entry::from_row(&row).map_err(|problem| GuardError::LedgerBroken {
            resource_id: rec.resource_id.clone(),
            broken: ledger::Broken {
                seq: row.seq,
                problem,
            },
        })?;
        let used = format!(
            "{}->{}",
            e.from_state.as_deref().unwrap_or_default(),
            e.to_state.as_deref().unwrap_or_default()
        );
        let asked = format!("{}->{}", req.from_state, req.to_state);
        if used != asked {
            return Err(GuardError::IdempotencyConflict {
                key: key.to_owned(),
                used,
                asked,
            });
        }
        Ok(Some(Transitioned {
            status: "replayed",
            verdict: e.verdict,
            refusal: e.refusal,
            ledger_ref: e.hash,
            current_state: rec.state.clone(),
            authorized_by: e.authorized_by,
        }))
    }

    /// The resource's state and whole ledger (refused when the chain is broken).
    pub fn history(&self, resource_id: &str) -> Result<History, GuardError> {
        let (rec, _, entries) = self.checked(resource_id)?;
        Ok(History {
            resource_id: rec.resource_id,
            current_state: rec.state,
            graph_version: rec.graph_version,
            checksum: rec.checksum,
            ledger_head: rec.head,
            ledger: entries,
        })
    }

    /// Re-walks one resource's chain.
    pub fn verify(&self, resource_id: &str) -> Result<Verified, GuardError> {
        let rec = self.record(resource_id)?;
        let rows = self.rows(&rec)?;
        let walk = ledger::walk(&rec, &rows);
        Ok(Verified {
            resource_id: rec.resource_id,
            entries: rows.len() as u64,
            ok: walk.broken.is_none(),
            broken_at: walk.broken.as_ref().map(|b| b.seq),
            problem: walk.broken.map(|b| b.problem.to_string()),
        })
    }

    /// Every resource, verified.
    pub fn verify_all(&self) -> Result<Vec<Verified>, GuardError> {
        self.store
            .guard_ids()?
            .iter()
            .map(|id| self.verify(id))
            .collect()
    }

    fn policy_from(&self, old: &Policy, new: &NewPolicy) -> Result<Policy, GuardError> {
        self.validated(&PolicyInput {
            graph: new.graph.clone(),
            edge_predicates: new.edge_predicates.clone(),
            initial: old.initial.clone(),
            terminal: new.terminal.clone(),
            stakes: new.stakes.clone(),
            workspace_root: old.workspace_root.clone(),
        })
    }

    /// Writes a policy change as a `graph_version` entry.
    fn change_policy(
        &mut self,
        resource_id: &str,
        new: &Policy,
        entry: impl Fn(&mut Entry),
        check: impl Fn(&GuardRecord, &Policy) -> Result<(), GuardError>,
    ) -> Result<Entry, GuardError> {
        let checksum = new.checksum();
        for _ in 0..MAX_RETRIES {
            let (rec, old, _) = self.checked(resource_id)?;
            check(&rec, &old)?;
            if !new.graph.contains_key(&rec.state) {
                return Err(GuardError::StateNotInGraph { state: rec.state });
            }
            let mut e = self.entry(&rec, EntryKind::GraphVersion, EntryStatus::Applied);
            e.policy_checksum = checksum.clone();
            e.graph_version = rec.graph_version + 1;
            entry(&mut e);
            let text = new.canonical();
            match self.append(&rec, e, |n| {
                n.policy = text;
                n.checksum = checksum.clone();
                n.graph_version = rec.graph_version + 1;
            })? {
                Ok(entry) => return Ok(entry),
                Err(_conflict) => continue,
            }
        }
        Err(GuardError::Busy(resource_id.to_owned()))
    }

    /// An unsigned, additive-only policy change (idempotent).
    pub fn upgrade(
        &mut self,
        resource_id: &str,
        new: &NewPolicy,
        rationale: &str,
    ) -> Result<PolicyChanged, GuardError> {
        let (rec, old, _) = self.checked(resource_id)?;
        let next = self.policy_from(&old, new)?;
        if next.checksum() == rec.checksum {
            return Ok(unchanged(&rec, Some(rationale)));
        }
        additive(&old, &next)?;
        let expected = rec.checksum.clone();
        let entry = self.change_policy(
            resource_id,
            &next,
            |e| {
                e.resolved_by = "agent".to_owned();
                e.rationale = Some(rationale.to_owned());
            },
            |now, _| same_policy(now, &expected),
        )?;
        Ok(changed("migrated", &entry, Some(rationale), None, None))
    }

    /// A signed, arbitrary policy change.
    pub fn migrate(
        &mut self,
        resource_id: &str,
        new: &NewPolicy,
        rationale: &str,
        authorization: &str,
        trust: &TrustRoot,
    ) -> Result<PolicyChanged, GuardError> {
        let (rec, old, _) = self.checked(resource_id)?;
        let next = self.policy_from(&old, new)?;
        let checksum = next.checksum();
        let payload = authz::migrate_payload(resource_id, &checksum, rationale, &rec.head);
        let signer = authz::verify(trust, authz::NS_MIGRATE, payload.as_bytes(), authorization)?;
        let head = rec.head.clone();
        let entry = self.change_policy(
            resource_id,
            &next,
            |e| {
                e.resolved_by = "human".to_owned();
                e.rationale = Some(rationale.to_owned());
                e.authorized_by = Some(signer.clone());
            },
            // the signature covers the head it was verified at
            |now, _| same_head(now, &head),
        )?;
        Ok(changed(
            "migrated",
            &entry,
            Some(rationale),
            Some(signer),
            None,
        ))
    }

    /// A signed override: a legal edge from the current state, without its
    /// predicates, recorded as a `deviation`.
    pub fn override_edge(
        &mut self,
        req: &TransitionRequest,
        rationale: &str,
        authorization: &str,
        trust: &TrustRoot,
    ) -> Result<Transitioned, GuardError> {
        if req.resolved_by != "human" {
            return Err(GuardError::InvalidRequest(format!(
                "an override is resolved by a human: `resolved_by` must be \"human\", not {:?}",
                req.resolved_by
            )));
        }
        if rationale.trim().is_empty() {
            return Err(GuardError::InvalidRequest(
                "an override needs a `rationale`".to_owned(),
            ));
        }
        let (rec, policy, _) = self.checked(&req.resource_id)?;
        let (from, to) = (req.from_state.as_str(), req.to_state.as_str());
        if !policy.has_edge(from, to) {
            return Err(GuardError::InvalidRequest(format!(
                "`{from}->{to}` is not an edge of the policy; an override only skips the predicates of a legal edge (stratum_guard_migrate changes the graph)"
            )));
        }
        if rec.state != from {
            return Err(GuardError::InvalidRequest(format!(
                "the resource is in `{}`, not `{from}`",
                rec.state
            )));
        }
        let payload = authz::override_payload(&req.resource_id, from, to, rationale, &rec.head);
        let signer = authz::verify(trust, authz::NS_OVERRIDE, payload.as_bytes(), authorization)?;
        let mut e = self.entry(&rec, EntryKind::Deviation, EntryStatus::Applied);
        e.from_state = Some(from.to_owned());
        e.to_state = Some(to.to_owned());
        e.resolved_by = "human".to_owned();
        e.rationale = Some(rationale.to_owned());
        e.authorized_by = Some(signer.clone());
        match self.append(&rec, e, |n| n.state = to.to_owned())? {
            Ok(entry) => Ok(Transitioned {
                status: "applied",
                verdict: None,
                refusal: None,
                ledger_ref: entry.hash,
                current_state: to.to_owned(),
                authorized_by: Some(signer),
            }),
            // the ledger head moved: the signature was for the old one
            Err(_conflict) => Err(authz::AuthzError::BadSignature {
                fingerprint: signer.fingerprint,
            }
            .into()),
        }
    }

    /// Applies a signed upgrade descriptor (see `descriptors`).
    pub fn apply_upgrade(
        &mut self,
        resource_id: &str,
        descriptor: &crate::descriptors::Descriptor,
        file: &crate::descriptors::DescriptorFile,
    ) -> Result<PolicyChanged, GuardError> {
        let (rec, _, _) = self.checked(resource_id)?;
        let next = self.validated(&descriptor.to_policy)?;
        if next.checksum() == rec.checksum {
            let mut u = unchanged(&rec, Some(&descriptor.rationale));
            u.descriptor_id = Some(descriptor.id.clone());
            return Ok(u);
        }
        let from = descriptor.from_checksum.clone();
        let signer = file.signer.clone();
        let entry = self.change_policy(
            resource_id,
            &next,
            |e| {
                e.resolved_by = "descriptor".to_owned();
                e.rationale = Some(descriptor.rationale.clone());
                e.authorized_by = Some(signer.clone());
                e.descriptor = Some(DescriptorRef {
                    id: descriptor.id.clone(),
                    file_sha256: file.sha256.clone(),
                });
            },
            |now, _| {
                if now.checksum == from {
                    Ok(())
                } else {
                    Err(GuardError::InvalidRequest(format!(
                        "descriptor `{}` applies to policy {from}, but `{}` has {}",
                        descriptor.id, now.resource_id, now.checksum
                    )))
                }
            },
        )?;
        Ok(changed(
            "applied",
            &entry,
            Some(&descriptor.rationale),
            Some(file.signer.clone()),
            Some(descriptor.id.clone()),
        ))
    }

    /// The exact payload `stratumc guard authorize` prints for an override.
    pub fn override_payload(
        &self,
        resource_id: &str,
        from: &str,
        to: &str,
        rationale: &str,
    ) -> Result<String, GuardError> {
        let rec = self.record(resource_id)?;
        Ok(authz::override_payload(
            resource_id,
            from,
            to,
            rationale,
            &rec.head,
        ))
    }

    /// The exact payload `stratumc guard authorize` prints for a migration.
    pub fn migrate_payload(
        &self,
        resource_id: &str,
        new: &NewPolicy,
        rationale: &str,
    ) -> Result<String, GuardError> {
        let (rec, old, _) = self.checked(resource_id)?;
        let next = self.policy_from(&old, new)?;
        Ok(authz::migrate_payload(
            resource_id,
            &next.checksum(),
            rationale,
            &rec.head,
        ))
    }
}

/// What `stratumc guard authorize` reads: the operation to authorize.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AuthorizeRequest {
    Override {
        resource_id: String,
        from_state: String,
        to_state: String,
        rationale: String,
    },
    Migrate {
        resource_id: String,
        rationale: String,
        new_graph: BTreeMap<String, Vec<String>>,
        #[serde(default)]
        new_edge_predicates: BTreeMap<String, Vec<policy::Predicate>>,
        #[serde(default)]
        new_terminal: Vec<String>,
        #[serde(default)]
        new_stakes: BTreeMap<String, policy::Stakes>,
    },
}

impl Guard<'_> {
    /// The exact payload to sign for `req`, and its namespace.
    pub fn authorize(&self, req: &AuthorizeRequest) -> Result<(String, &'static str), GuardError> {
        match req {
            AuthorizeRequest::Override {
                resource_id,
                from_state,
                to_state,
                rationale,
            } => Ok((
                self.override_payload(resource_id, from_state, to_state, rationale)?,
                authz::NS_OVERRIDE,
            )),
            AuthorizeRequest::Migrate {
                resource_id,
                rationale,
                new_graph,
                new_edge_predicates,
                new_terminal,
                new_stakes,
            } => {
                let new = NewPolicy {
                    graph: new_graph.clone(),
                    edge_predicates: new_edge_predicates.clone(),
                    terminal: new_terminal.clone(),
                    stakes: new_stakes.clone(),
                };
                Ok((
                    self.migrate_payload(resource_id, &new, rationale)?,
                    authz::NS_MIGRATE,
                ))
            }
        }
    }
}

fn guard_id_of(registration_hash: &str) -> String {
    let hex = registration_hash.trim_start_matches("sha256:");
    format!("guard-{}", &hex[..hex.len().min(16)])
}

fn refusal(code: &str, message: String) -> Refusal {
    Refusal {
        code: code.to_owned(),
        message,
    }
}

fn same_policy(now: &GuardRecord, expected: &str) -> Result<(), GuardError> {
    if now.checksum == expected {
        Ok(())
    } else {
        Err(GuardError::Busy(now.resource_id.clone()))
    }
}

fn same_head(now: &GuardRecord, head: &str) -> Result<(), GuardError> {
    if now.head == head {
        Ok(())
    } else {
        Err(authz::AuthzError::BadSignature {
            fingerprint: "(the ledger head moved while verifying)".to_owned(),
        }
        .into())
    }
}

fn unchanged(rec: &GuardRecord, rationale: Option<&str>) -> PolicyChanged {
    PolicyChanged {
        status: "unchanged",
        checksum: rec.checksum.clone(),
        graph_version: rec.graph_version,
        ledger_ref: None,
        rationale: rationale.map(str::to_owned),
        authorized_by: None,
        descriptor_id: None,
    }
}

fn changed(
    status: &'static str,
    e: &Entry,
    rationale: Option<&str>,
    signer: Option<Signer>,
    descriptor_id: Option<String>,
) -> PolicyChanged {
    PolicyChanged {
        status,
        checksum: e.policy_checksum.clone(),
        graph_version: e.graph_version,
        ledger_ref: Some(e.hash.clone()),
        rationale: rationale.map(str::to_owned),
        authorized_by: signer,
        descriptor_id,
    }
}

/// The additive-only rules of `upgrade`: no state or edge removed; every
/// existing edge's predicates and stakes byte-identical; new edges only
/// into states that did not exist; `terminal` frozen (no new terminal
/// state, no edge into or out of one).
pub fn additive(old: &Policy, new: &Policy) -> Result<(), GuardError> {
    let bad = |m: String| Err(GuardError::IncompatibleUpgrade(m));
    if let Some(s) = old.graph.keys().find(|s| !new.graph.contains_key(*s)) {
        return bad(format!("state `{s}` would be removed"));
    }
    let old_edges = old.edges();
    let new_edges = new.edges();
    if let Some(e) = old_edges.difference(&new_edges).next() {
        return bad(format!("edge `{e}` would be removed"));
    }
    for e in &old_edges {
        let same = |a: &Policy, b: &Policy| {
            crate::canon::canonical(
                &serde_json::to_value(&a.edge_predicates[e]).unwrap_or_default(),
            ) == crate::canon::canonical(
                &serde_json::to_value(&b.edge_predicates[e]).unwrap_or_default(),
            )
        };
        if !same(old, new) {
            return bad(format!(
                "the predicates of existing edge `{e}` would change"
            ));
        }
        if old.stakes[e] != new.stakes[e] {
            return bad(format!("the stakes of existing edge `{e}` would change"));
        }
    }
    if old.terminal != new.terminal {
        return bad(format!(
            "`terminal` would change from {:?} to {:?}; terminal states are frozen",
            old.terminal, new.terminal
        ));
    }
    for e in new_edges.difference(&old_edges) {
        let Some((from, to)) = policy::split_edge(e) else {
            continue;
        };
        if old.terminal.iter().any(|t| t == from || t == to) {
            return bad(format!("new edge `{e}` touches a terminal state"));
        }
        if old.graph.contains_key(to) {
            return bad(format!(
                "new edge `{e}` leads into `{to}`, which already exists; new edges may only lead into new states"
            ));
        }
    }
    Ok(())
}
