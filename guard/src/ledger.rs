//! The ledger: every attempt on a guarded resource, applied or refused, as
//! an append-only chain of entries, each holding the hash of the previous
//! one and the hash of its own canonical content.
//!
//! Owns: the entry format ([`Entry`], its kinds and the verdict it
//! carries), its hash (SHA-256 over the canonical JSON of the entry without
//! its `hash`), the genesis link, and [`walk`]: re-reading a ledger row by
//! row, checking positions, links and hashes, and replaying what the
//! entries say the resource's state, checksum and graph version are.
//! Must never: trust a stored row without recomputing its hash, or read
//! the store itself (the service hands it the rows).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use stratum_vm::store::{GuardRecord, LedgerRow};

use crate::canon;

/// The `prev` of the first entry.
pub const GENESIS: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// The resource was registered (`to_state`: the initial state).
    Registered,
    /// A transition attempt through its predicates.
    Transition,
    /// A signed override: a legal edge without its predicates.
    Deviation,
    /// A new policy (upgrade, apply_upgrade or migrate).
    GraphVersion,
}

/// Whether the attempt changed anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryStatus {
    Applied,
    Refused,
}

/// Why an attempt was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refusal {
    /// Stable: `illegal_edge`, `wrong_state`, `predicates_unmet`, `stale`.
    pub code: String,
    pub message: String,
}

/// Who signed an authorization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signer {
    /// The principals of the trust root's line.
    pub principal: String,
    /// The key's SHA-256 fingerprint (`SHA256:…`).
    pub fingerprint: String,
}

/// The descriptor an `apply_upgrade` applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorRef {
    pub id: String,
    /// SHA-256 of the descriptor file's bytes.
    pub file_sha256: String,
}

/// One predicate's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredicateResult {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: crate::policy::PredicateType,
    pub statement: String,
    pub met: bool,
    pub evidence: crate::evidence::Evidence,
}

/// The verdict of a transition: every predicate of the edge with its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// Every predicate met (true for an edge without predicates).
    pub met: bool,
    pub stakes: crate::policy::Stakes,
    pub predicates: Vec<PredicateResult>,
}

/// One ledger entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub seq: u64,
    pub kind: EntryKind,
    pub status: EntryStatus,
    pub resource_id: String,
    pub at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_state: Option<String>,
    pub resolved_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Refusal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The checksum of the policy in force after this entry.
    pub policy_checksum: String,
    /// The graph version after this entry.
    pub graph_version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorized_by: Option<Signer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descriptor: Option<DescriptorRef>,
    /// The hash of the previous entry ([`GENESIS`] for the first).
    pub prev: String,
    /// The hash of this entry without this field (its `ledger_ref`).
    #[serde(default)]
    pub hash: String,
}

impl Entry {
    /// The hash of the entry's content (everything but `hash`).
    pub fn content_hash(&self) -> String {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Some(m) = v.as_object_mut() {
            m.remove("hash");
        }
        canon::checksum(&v)
    }

    /// Sets `hash` and returns the stored row.
    pub fn seal(mut self) -> (Entry, LedgerRow) {
        self.hash = self.content_hash();
        let row = LedgerRow {
            seq: self.seq,
            hash: self.hash.clone(),
            idempotency_key: self.idempotency_key.clone(),
            json: self.to_json(),
        };
        (self, row)
    }

    /// The canonical JSON text.
    pub fn to_json(&self) -> String {
        canon::canonical(&serde_json::to_value(self).unwrap_or(Value::Null))
    }

    /// Reads a stored row back and checks that its hash is its content's.
    pub fn from_row(row: &LedgerRow) -> Result<Entry, LinkProblem> {
        let e: Entry = serde_json::from_str(&row.json)
            .map_err(|err| LinkProblem::Unreadable(err.to_string()))?;
        let computed = e.content_hash();
        if computed != e.hash || e.hash != row.hash {
            return Err(LinkProblem::HashMismatch {
                stored: row.hash.clone(),
                computed,
            });
        }
        Ok(e)
    }

    /// An applied transition whose predicates were all met (what
    /// `verdict_receipt_clean` accepts).
    pub fn is_clean_receipt(&self) -> bool {
        self.kind == EntryKind::Transition
            && self.status == EntryStatus::Applied
            && self.verdict.as_ref().is_some_and(|v| v.met)
    }
}

/// What is wrong with one link of the chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkProblem {
    #[error("the entry is not a ledger entry ({0})")]
    Unreadable(String),
    #[error("its content hashes to {computed}, but {stored} is recorded (the entry was edited)")]
    HashMismatch { stored: String, computed: String },
    #[error(
        "it is stored at position {position} but says it is entry {seq} (entries were deleted or moved)"
    )]
    Position { position: u64, seq: u64 },
    #[error(
        "it links to {found}, but the entry before it is {expected} (entries were deleted, inserted or reordered)"
    )]
    Link { expected: String, found: String },
    #[error("it is for resource `{0}`")]
    Resource(String),
    #[error("the first entry is not the registration")]
    NotRegistration,
    #[error("the resource record says {what} is {record}, but the ledger says {ledger}")]
    Record {
        what: &'static str,
        record: String,
        ledger: String,
    },
}

/// The first broken link of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The position of the first entry that does not hold.
    pub seq: u64,
    pub problem: LinkProblem,
}

/// What a walk of a ledger found.
#[derive(Debug, Clone, PartialEq)]
pub struct Walk {
    pub entries: Vec<Entry>,
    /// `None` when every link holds and the record agrees.
    pub broken: Option<Broken>,
}

/// The state, checksum and graph version the entries say.
#[derive(Debug, Default)]
struct Replay {
    state: String,
    checksum: String,
    graph_version: u64,
}

impl Replay {
    fn apply(&mut self, e: &Entry) {
        self.checksum = e.policy_checksum.clone();
        self.graph_version = e.graph_version;
        if e.status == EntryStatus::Applied
            && matches!(
                e.kind,
                EntryKind::Registered | EntryKind::Transition | EntryKind::Deviation
            )
            && let Some(to) = &e.to_state
        {
            self.state = to.clone();
        }
    }
}

/// Re-walks `rows` (the whole ledger of `record`, in stored order).
pub fn walk(record: &GuardRecord, rows: &[LedgerRow]) -> Walk {
    let mut entries = Vec::new();
    let mut prev = GENESIS.to_owned();
    let mut replay = Replay::default();
    let broken = |seq, problem| Broken { seq, problem };
    for (i, row) in rows.iter().enumerate() {
        let position = i as u64;
        let e = match Entry::from_row(row) {
            Ok(e) => e,
            Err(p) => {
                return Walk {
                    entries,
                    broken: Some(broken(position, p)),
                };
            }
        };
        let problem = if e.seq != position || row.seq != position {
            Some(LinkProblem::Position {
                position,
                seq: if e.seq != position { e.seq } else { row.seq },
            })
        } else if e.prev != prev {
            Some(LinkProblem::Link {
                expected: prev.clone(),
                found: e.prev.clone(),
            })
        } else if e.resource_id != record.resource_id {
            Some(LinkProblem::Resource(e.resource_id.clone()))
        } else if position == 0 && e.kind != EntryKind::Registered {
            Some(LinkProblem::NotRegistration)
        } else {
            None
        };
        if let Some(p) = problem {
            return Walk {
                entries,
                broken: Some(broken(position, p)),
            };
        }
        replay.apply(&e);
        prev = e.hash.clone();
        entries.push(e);
    }
    let end = rows.len() as u64;
    let stored_policy = serde_json::from_str::<Value>(&record.policy)
        .map(|v| canon::checksum(&v))
        .unwrap_or_else(|e| format!("unreadable ({e})"));
    let checks: [(&'static str, String, String); 6] = [
        (
            "the stored policy's checksum",
            record.checksum.clone(),
            stored_policy,
        ),
        (
            "the ledger length",
            record.ledger_len.to_string(),
            end.to_string(),
        ),
        ("the ledger head", record.head.clone(), prev),
        ("the current state", record.state.clone(), replay.state),
        (
            "the policy checksum",
            record.checksum.clone(),
            replay.checksum,
        ),
        (
            "the graph version",
            record.graph_version.to_string(),
            replay.graph_version.to_string(),
        ),
    ];
    let mismatch = checks.into_iter().find(|(_, r, l)| r != l);
    let broken = mismatch.map(|(what, record, ledger)| Broken {
        seq: end,
        problem: LinkProblem::Record {
            what,
            record,
            ledger,
        },
    });
    Walk { entries, broken }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: u64) -> (GuardRecord, Vec<LedgerRow>) {
        let mut prev = GENESIS.to_owned();
        let mut rows = Vec::new();
        let mut state = String::new();
        for seq in 0..n {
            let to = format!("s{seq}");
            let e = Entry {
                seq,
                kind: if seq == 0 {
                    EntryKind::Registered
                } else {
                    EntryKind::Transition
                },
                status: EntryStatus::Applied,
                resource_id: "r".into(),
                at_ms: 1,
                from_state: (seq > 0).then(|| state.clone()),
                to_state: Some(to.clone()),
                resolved_by: "t".into(),
                verdict: None,
                refusal: None,
                idempotency_key: None,
                policy_checksum: canon::checksum(&serde_json::json!({})),
                graph_version: 1,
                rationale: None,
                authorized_by: None,
                descriptor: None,
                prev: prev.clone(),
                hash: String::new(),
            };
            let (e, row) = e.seal();
            prev = e.hash;
            state = to;
            rows.push(row);
        }
        let rec = GuardRecord {
            resource_id: "r".into(),
            policy: "{}".into(),
            checksum: canon::checksum(&serde_json::json!({})),
            state,
            graph_version: 1,
            version: n,
            ledger_len: n,
            head: prev,
        };
        (rec, rows)
    }

    #[test]
    fn an_intact_chain_walks_and_each_tampering_names_its_entry() {
        let (rec, rows) = chain(4);
        assert_eq!(walk(&rec, &rows).broken, None);
        // an edited entry (its hash no longer matches)
        let mut edited = rows.clone();
        edited[2].json = edited[2].json.replace("\"s2\"", "\"s9\"");
        let b = walk(&rec, &edited).broken.unwrap();
        assert_eq!(b.seq, 2);
        assert!(matches!(b.problem, LinkProblem::HashMismatch { .. }));
        // a deleted entry
        let mut deleted = rows.clone();
        deleted.remove(1);
        let b = walk(&rec, &deleted).broken.unwrap();
        assert_eq!(b.seq, 1);
        // two entries swapped
        let mut swapped = rows.clone();
        swapped.swap(1, 2);
        assert_eq!(walk(&rec, &swapped).broken.unwrap().seq, 1);
        // the record disagrees with the ledger
        let mut moved = rec.clone();
        moved.state = "s0".into();
        let b = walk(&moved, &rows).broken.unwrap();
        assert_eq!(b.seq, 4);
        assert!(
            b.problem.to_string().contains("current state"),
            "{}",
            b.problem
        );
        // the last entry dropped along with the head: the count says so
        let b = walk(&rec, &rows[..3]).broken.unwrap();
        assert_eq!(b.seq, 3);
    }
}
