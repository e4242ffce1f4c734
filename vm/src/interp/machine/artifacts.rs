//! X4 artifacts and what gates show: the `artifacts` check of an output
//! (after its contract, before its ensures), the manifest recorded when the
//! step or item succeeds, and the prompt and files a gate shows when it
//! starts waiting.
//!
//! Owns: rendering `artifacts` entries (a path, a list of paths from a full
//! reference, or a glob), the `artifact_missing` violation, the manifest
//! (`artifacts_recorded` event, digest in the row) and the gate's
//! [`GateShown`].
//! Must never: touch a file except through the `Host` (`hash_file`, `glob`),
//! or fail a gate because a shown file is missing (it is listed as missing).

use serde_json::{Value, json};

use super::Transition;
use crate::interp::event::{EventKind, Manifest, ShownFile};
use crate::interp::host::{FileHash, FileRoot};
use crate::interp::state::*;
use crate::plan::{ArtifactDef, StepKindDef};

/// A failed artifacts check: the failure reason and its violation.
type Violation = (String, Value);

fn missing(reason: String, key: &str, what: &str) -> Violation {
    (
        format!("artifact {reason}"),
        json!({"kind": "artifact_missing", key: what, "reason": reason}),
    )
}

impl Transition<'_> {
    /// Every entry resolved and hashed: a path must be a regular file, a
    /// glob must match at least one; the hashes of every file, in order.
    pub(super) fn check_artifacts(
        &mut self,
        f: FrameIx,
        artifacts: &[ArtifactDef],
        item: Option<(&Value, Option<&Value>)>,
    ) -> Result<Vec<FileHash>, Violation> {
        let mut files = Vec::new();
        for a in artifacts {
            let (it, prev) = item.map_or((None, None), |(i, p)| (Some(i), p));
            let rendered = self.render(f, a.template, it, prev).map_err(|e| {
                let source = self.template_source(f, a.template);
                missing(format!("{source:?} does not render: {e}"), "path", &source)
            })?;
            let paths = match rendered {
                Value::String(s) => vec![s],
                Value::Array(items) => items
                    .into_iter()
                    .map(|v| match v {
                        Value::String(s) => Ok(s),
                        other => Err(missing(
                            format!("list holds {other}, not a path"),
                            "path",
                            &other.to_string(),
                        )),
                    })
                    .collect::<Result<_, _>>()?,
                Value::Null => Vec::new(),
                other => {
                    let text = other.to_string();
                    return Err(missing(format!("{text} is not a path"), "path", &text));
                }
            };
            for p in paths {
                if a.glob {
                    self.glob_files(&p, &mut files)?;
                } else {
                    files.push(self.artifact_file(&p)?);
                }
            }
        }
        Ok(files)
    }

    fn artifact_file(&mut self, path: &str) -> Result<FileHash, Violation> {
        let root = self.file_root.clone();
        let at = root
            .as_deref()
            .map_or(FileRoot::Workspace, FileRoot::Worktree);
        match self.host.hash_file(at, path) {
            Ok(Some(h)) => Ok(h),
            Ok(None) => Err(missing(
                format!("{path:?} is not an existing regular file"),
                "path",
                path,
            )),
            Err(e) => Err(missing(format!("{path:?}: {e}"), "path", path)),
        }
    }

    fn glob_files(&mut self, pattern: &str, files: &mut Vec<FileHash>) -> Result<(), Violation> {
        let root = self.file_root.clone();
        let at = root
            .as_deref()
            .map_or(FileRoot::Workspace, FileRoot::Worktree);
        let paths = self
            .host
            .glob(at, pattern)
            .map_err(|e| missing(format!("glob {pattern:?}: {e}"), "pattern", pattern))?;
        if paths.is_empty() {
            return Err(missing(
                format!("glob {pattern:?} matches no regular file"),
                "pattern",
                pattern,
            ));
        }
        for p in paths {
            files.push(self.artifact_file(&p)?);
        }
        Ok(())
    }

    fn template_source(&self, f: FrameIx, t: u32) -> String {
        crate::plan::disasm::template_source(self.plan, self.flow(f), t)
    }

    /// Records the manifest of a step's (`item: None`) or an item's final
    /// stage's artifacts: the event and the digest in the row.
    pub(super) fn record_manifest(
        &mut self,
        at: StepAt,
        item: Option<u32>,
        attempt: u32,
        files: Vec<FileHash>,
    ) {
        let root = item
            .and_then(|k| self.item(at, k).worktree.as_ref())
            .map(|_| "worktree".to_string());
        let manifest = Manifest::new(self.sid(at), attempt, item, root, files);
        match item {
            None => self.st_mut(at).manifest = Some(manifest.digest.clone()),
            Some(k) => self.item_mut(at, k).manifest = Some(manifest.digest.clone()),
        }
        let id = self.sid(at);
        self.event(EventKind::ArtifactsRecorded(manifest), Some(id));
    }

    /// A gate starts waiting: its prompt rendered and its `show` files hashed
    /// now (a file that is not there is listed as missing).
    pub(super) fn gate_shown(&mut self, at: StepAt) -> Option<GateShown> {
        let StepKindDef::Gate { prompt, show, .. } = &self.def(at).kind else {
            return None;
        };
        if prompt.is_none() && show.is_empty() {
            return None;
        }
        let f = at.frame;
        let prompt = prompt.map(|p| match self.render(f, p, None, None) {
            Ok(Value::String(s)) => s,
            Ok(other) => other.to_string(),
            Err(e) => format!("(the prompt does not render: {e})"),
        });
        let mut files = Vec::new();
        for &t in show {
            let path = match self.render(f, t, None, None) {
                Ok(Value::String(s)) => s,
                Ok(other) => other.to_string(),
                Err(e) => {
                    files.push(ShownFile {
                        path: self.template_source(f, t),
                        size: None,
                        sha256: None,
                        note: Some(format!("does not render: {e}")),
                    });
                    continue;
                }
            };
            let root = self.file_root.clone();
            let at = root
                .as_deref()
                .map_or(FileRoot::Workspace, FileRoot::Worktree);
            let shown = match self.host.hash_file(at, &path) {
                Ok(Some(h)) => ShownFile {
                    path: h.path,
                    size: Some(h.size),
                    sha256: Some(h.sha256),
                    note: None,
                },
                Ok(None) => ShownFile {
                    path,
                    size: None,
                    sha256: None,
                    note: Some("missing".into()),
                },
                Err(e) => ShownFile {
                    path,
                    size: None,
                    sha256: None,
                    note: Some(e.to_string()),
                },
            };
            files.push(shown);
        }
        Some(GateShown { prompt, files })
    }
}
