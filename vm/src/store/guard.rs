//! The store side of STRAT-GUARD (issue 17): guarded resources and their
//! append-only ledgers.
//!
//! Owns: the [`GuardStore`] trait (every [`super::RunStore`] is one), the
//! stored shapes [`GuardRecord`] and [`LedgerRow`], and the one write,
//! [`GuardStore::guard_write`]: the resource's record and the new ledger
//! rows commit in ONE transaction, as an optimistic compare-and-swap on the
//! record's `version` (of two writers that loaded the same version, one
//! commits and the other gets [`StoreError::Conflict`] with nothing
//! changed), with the rows' sequence numbers checked to continue the ledger.
//!
//! The store treats the policy and the entries as opaque text: the ledger's
//! hash chain (the `stratum-guard` crate) is its integrity check, so rows
//! are handed out as stored — a tampered row must reach `stratumc guard
//! verify`, which names the first broken link, not fail the read.
//! Must never: interpret a policy or an entry, rewrite or delete a ledger
//! row, or append rows that do not continue the ledger.

use super::StoreError;

/// A guarded resource as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardRecord {
    pub resource_id: String,
    /// The policy in force, as canonical JSON text.
    pub policy: String,
    /// Its checksum.
    pub checksum: String,
    /// The current state.
    pub state: String,
    /// 1 at registration; +1 per migration or upgrade.
    pub graph_version: u64,
    /// The optimistic-concurrency version: 1 at creation, +1 per write
    /// (ignored in a [`GuardWrite`]: the store sets it).
    pub version: u64,
    /// How many ledger rows the resource has.
    pub ledger_len: u64,
    /// The hash of the last ledger row.
    pub head: String,
}

/// One ledger row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    /// 0 for the first entry of a resource.
    pub seq: u64,
    /// The entry's own hash (what `ledger_ref`s name).
    pub hash: String,
    /// The idempotency key of the transition it records, if any.
    pub idempotency_key: Option<String>,
    /// The entry as canonical JSON text.
    pub json: String,
}

/// One atomic write of a resource.
#[derive(Debug, Clone, Copy)]
pub struct GuardWrite<'a> {
    /// The record after the write (its `version` is ignored).
    pub record: &'a GuardRecord,
    /// `None`: create (refused with [`StoreError::Exists`] when present);
    /// `Some(v)`: the version the caller loaded (else [`StoreError::Conflict`]).
    pub expected_version: Option<u64>,
    /// The rows to append, continuing the ledger.
    pub entries: &'a [LedgerRow],
}

/// Guarded resources and their ledgers.
pub trait GuardStore {
    /// The record of `resource_id`, if registered.
    fn guard(&self, resource_id: &str) -> Result<Option<GuardRecord>, StoreError>;

    /// Writes the record and appends the rows in one transaction; returns the
    /// new version. The rows' `seq` must continue the stored ledger and
    /// `record.ledger_len` must count them ([`StoreError::Invalid`] if not).
    fn guard_write(&mut self, write: &GuardWrite<'_>) -> Result<u64, StoreError>;

    /// Up to `limit` rows of the ledger from position `from`, ordered by
    /// `seq`, as stored.
    fn guard_ledger(
        &self,
        resource_id: &str,
        from: u64,
        limit: u64,
    ) -> Result<Vec<LedgerRow>, StoreError>;

    /// The row whose hash is `hash`, with its resource id.
    fn guard_entry(&self, hash: &str) -> Result<Option<(String, LedgerRow)>, StoreError>;

    /// The row of `resource_id` recording the idempotency key `key`.
    fn guard_by_key(&self, resource_id: &str, key: &str) -> Result<Option<LedgerRow>, StoreError>;

    /// Every registered resource id, sorted.
    fn guard_ids(&self) -> Result<Vec<String>, StoreError>;
}

/// The checks every store makes before a [`GuardWrite`]: the rows continue
/// a ledger of `stored_len` rows and the record counts them.
pub(super) fn check_write(write: &GuardWrite<'_>, stored_len: u64) -> Result<(), StoreError> {
    if write.record.resource_id.is_empty() {
        return Err(StoreError::Invalid("resource id is empty".to_owned()));
    }
    for (i, row) in write.entries.iter().enumerate() {
        if row.seq != stored_len + i as u64 {
            return Err(StoreError::Invalid(format!(
                "ledger row {} of `{}` does not continue the ledger of {stored_len} rows",
                row.seq, write.record.resource_id
            )));
        }
    }
    if write.record.ledger_len != stored_len + write.entries.len() as u64 {
        return Err(StoreError::Invalid(format!(
            "the record of `{}` counts {} ledger rows, the write makes {}",
            write.record.resource_id,
            write.record.ledger_len,
            stored_len + write.entries.len() as u64
        )));
    }
    Ok(())
}
