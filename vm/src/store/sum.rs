//! Checksums of stored records: how each record of the SQLite store is
//! summed (blake3, one derive-key context per kind of record, every field
//! length-prefixed) and how a stored checksum is verified on read.
//!
//! Owns: the one definition of each record's checksum — what it covers and
//! in which order — and the wording of a mismatch.
//! Must never: read or write the database (callers hand in the fields), or
//! accept a record whose checksum is missing (schema 2 writes one with every
//! record and migrating from schema 1 computed the rest).
//!
//! Each checksum binds the record to its place: a row's covers the run id and
//! the row key as well as the blob, so a blob moved to another key or another
//! run fails as surely as a flipped bit.

use super::{RunMeta, StoreError};

/// A checksum as stored (a 32-byte BLOB column).
pub(crate) type Sum = [u8; 32];

struct Summer(blake3::Hasher);

impl Summer {
    fn new(context: &'static str) -> Summer {
        Summer(blake3::Hasher::new_derive_key(context))
    }

    fn bytes(mut self, b: &[u8]) -> Summer {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.0.update(b);
        self
    }

    fn int(mut self, v: i64) -> Summer {
        self.0.update(&v.to_le_bytes());
        self
    }

    fn opt_bytes(self, b: Option<&[u8]>) -> Summer {
        match b {
            None => self.int(0),
            Some(b) => self.int(1).bytes(b),
        }
    }

    fn opt_int(self, v: Option<i64>) -> Summer {
        match v {
            None => self.int(0),
            Some(v) => self.int(1).int(v),
        }
    }

    fn finish(self) -> Sum {
        *self.0.finalize().as_bytes()
    }
}

/// A run's listing record with its version and its counts of events, rows
/// and checkpoints (the `runs` columns other than the header).
pub(crate) fn run_meta(meta: &RunMeta, version: i64, counts: [i64; 3]) -> Sum {
    let [event_count, row_count, checkpoint_count] = counts;
    Summer::new("stratum run store v2: run meta")
        .bytes(meta.run_id.as_bytes())
        .bytes(meta.plan_hash.as_bytes())
        .bytes(meta.flow.as_bytes())
        .bytes(meta.status.as_bytes())
        .int(meta.created_ms)
        .int(meta.updated_ms)
        .int(version)
        .int(event_count)
        .int(row_count)
        .int(checkpoint_count)
        .finish()
}

/// A run's header blob.
pub(crate) fn header(run_id: &str, header: &[u8]) -> Sum {
    Summer::new("stratum run store v2: run header")
        .bytes(run_id.as_bytes())
        .bytes(header)
        .finish()
}

/// One keyed row of a run.
pub(crate) fn row(run_id: &str, key: i64, blob: &[u8]) -> Sum {
    Summer::new("stratum run store v2: run row")
        .bytes(run_id.as_bytes())
        .int(key)
        .bytes(blob)
        .finish()
}

/// One event line of a run.
pub(crate) fn event(run_id: &str, seq: i64, json: &str) -> Sum {
    Summer::new("stratum run store v2: event")
        .bytes(run_id.as_bytes())
        .int(seq)
        .bytes(json.as_bytes())
        .finish()
}

/// One checkpoint of a run.
pub(crate) fn checkpoint(run_id: &str, label: &str, position: i64, blob: &[u8]) -> Sum {
    Summer::new("stratum run store v2: checkpoint")
        .bytes(run_id.as_bytes())
        .bytes(label.as_bytes())
        .int(position)
        .bytes(blob)
        .finish()
}

/// Stored plan bytes.
pub(crate) fn plan(hash: &str, bytes: &[u8]) -> Sum {
    Summer::new("stratum run store v2: plan")
        .bytes(hash.as_bytes())
        .bytes(bytes)
        .finish()
}

/// An agent run record (schema 4), every field.
pub(crate) fn agent_run(r: &super::AgentRun) -> Sum {
    let flow = r.flow.as_ref();
    let usage = r.usage.as_ref();
    Summer::new("stratum run store v4: agent run")
        .bytes(r.id.as_bytes())
        .bytes(r.agent.as_bytes())
        .bytes(r.status.as_str().as_bytes())
        .opt_int(r.pid.map(i64::from))
        .opt_int(r.pgid.map(i64::from))
        .bytes(r.host.as_bytes())
        .int(r.started_ms)
        .int(r.updated_ms)
        .opt_bytes(r.output.as_deref().map(str::as_bytes))
        .opt_bytes(r.failure.as_deref().map(str::as_bytes))
        .opt_int(usage.map(|u| i64::from_le_bytes(u.tokens.to_le_bytes())))
        .opt_int(
            usage
                .and_then(|u| u.usd)
                .map(|d| i64::from_le_bytes(d.to_bits().to_le_bytes())),
        )
        .opt_bytes(flow.map(|f| f.run_id.as_bytes()))
        .opt_bytes(flow.and_then(|f| f.step_id.as_deref()).map(str::as_bytes))
        .opt_int(flow.and_then(|f| f.item_index).map(i64::from))
        .opt_bytes(r.cancellation_id.as_deref().map(str::as_bytes))
        .bytes(r.owner.as_bytes())
        .finish()
}

/// A run's lease (schema 4).
pub(crate) fn lease(l: &super::Lease) -> Sum {
    Summer::new("stratum run store v4: lease")
        .bytes(l.run_id.as_bytes())
        .bytes(l.holder.as_bytes())
        .bytes(l.host.as_bytes())
        .int(i64::from(l.pid))
        .int(l.heartbeat_ms)
        .int(l.expires_ms)
        .finish()
}

/// What is wrong with a record's checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SumProblem {
    /// The checksum column is empty (or not a 32-byte blob).
    Missing,
    /// The record's contents do not match its checksum.
    Mismatch,
}

impl std::fmt::Display for SumProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SumProblem::Missing => "has no checksum (every record of schema 2 carries one)",
            SumProblem::Mismatch => "does not match its checksum",
        })
    }
}

/// Compares a stored checksum with the computed one.
pub(crate) fn problem(stored: Option<&[u8]>, computed: &Sum) -> Option<SumProblem> {
    match stored {
        None => Some(SumProblem::Missing),
        Some(s) if s.len() != computed.len() => Some(SumProblem::Missing),
        Some(s) if s != computed => Some(SumProblem::Mismatch),
        Some(_) => None,
    }
}

/// [`problem`] as a [`StoreError::Corrupt`] naming `what` (e.g. "run `r1`,
/// row 5").
pub(crate) fn verify(
    stored: Option<&[u8]>,
    computed: &Sum,
    what: impl FnOnce() -> String,
) -> Result<(), StoreError> {
    match problem(stored, computed) {
        None => Ok(()),
        Some(p) => Err(StoreError::Corrupt(format!(
            "{} {p}: the stored data is damaged",
            what()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_sum_binds_the_run_and_the_key() {
        let s = row("r1", 5, b"blob");
        assert_eq!(problem(Some(&s), &row("r1", 5, b"blob")), None);
        assert_eq!(
            problem(Some(&s), &row("r1", 6, b"blob")),
            Some(SumProblem::Mismatch)
        );
        assert_eq!(
            problem(Some(&s), &row("r2", 5, b"blob")),
            Some(SumProblem::Mismatch)
        );
        assert_eq!(
            problem(Some(&s), &row("r1", 5, b"blob!")),
            Some(SumProblem::Mismatch)
        );
        assert_eq!(
            problem(None, &row("r1", 5, b"blob")),
            Some(SumProblem::Missing)
        );
        assert_eq!(
            problem(Some(&s[..31]), &row("r1", 5, b"blob")),
            Some(SumProblem::Missing)
        );
    }

    #[test]
    fn fields_are_length_prefixed_so_boundaries_matter() {
        assert_ne!(header("ab", b"c"), header("a", b"bc"));
        assert_ne!(plan("h", b"x"), header("h", b"x"), "contexts differ");
    }

    #[test]
    fn a_mismatch_is_a_corrupt_error_naming_the_record() {
        let err = verify(None, &plan("h", b"x"), || "plan h".into()).unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt(m) if m.starts_with("plan h has no checksum")),
            "{err}"
        );
    }
}
