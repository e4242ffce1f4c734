//! The host side effects behind ensure predicates: workspace files and the
//! judge.
//!
//! Owns:
//! - [`Workspace`]: `file_exists` / `file_contains` jailed to a workspace root
//!   (reference v1-language §8.3). Paths must be relative, non-empty and free
//!   of NUL; they are resolved lexically against the root and must stay
//!   inside; if the file (or its deepest existing ancestor) exists, real
//!   paths are compared, so a symlink leading outside is refused. Every call
//!   returns [`FileEvidence`] (relative path, size, blake3) for the audit.
//! - The judge: [`judge`] with the [`JudgeConfig`] that
//!   [`crate::config::Config::judge_runner`] reads from `[judge]`, one blocking call to an OpenAI-compatible
//!   `POST {url}/chat/completions` endpoint (a local ollama, say).
//! - Git worktrees of `isolation: worktree` fanout items (reference
//!   v1-runtime §4.12): [`worktree_create`] (a detached checkout of HEAD in
//!   the system temp directory), [`worktree_patch`] (everything staged,
//!   `git diff --binary`), [`worktree_remove`], and [`merge_patches`]
//!   (`pre_merge` commands in the root, then a 3-way `git apply --index` per
//!   patch, in order). They run the `git` program.
//!
//! Errors are `Err(String)` with a message meant for the violation reason;
//! the caller turns them into `validation_error`s (files) or failed judged
//! predicates (judge).
//!
//! When no judge is configured the caller must fail the judged predicate
//! closed, with [`NO_JUDGE_REASON`]; nothing here ever treats a missing or
//! broken judge as "holds".
//!
//! Must never: read or stat anything outside the root (git work aside: it
//! makes and removes worktrees under the temp directory and applies patches
//! in the root's repository), read more than
//! [`MAX_FILE_BYTES`] of a file, open a non-regular file (a FIFO would
//! block), or panic on any input. The jail checks paths at the time of the
//! call; it protects against spec mistakes and symlinks left in the
//! workspace, not against a process racing to swap files during the check.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;

use crate::plan::Stakes;
use serde_json::{Value, json};

pub use crate::interp::FileEvidence;

mod std_host;
pub use std_host::StdHost;

/// The largest file `file_contains` reads (and `file_exists` hashes): 16 MiB.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A workspace root that file predicates are jailed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Canonical (real) path of the root.
    root: PathBuf,
}

/// A jailed path: its normalized relative form, and its real path if the
/// file exists.
struct Resolved {
    rel: String,
    real: Option<PathBuf>,
}

impl Workspace {
    /// A workspace rooted at `root`, which must be an existing directory.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, String> {
        let root = root.as_ref();
        let real = fs::canonicalize(root)
            .map_err(|e| format!("workspace root {} is not usable: {e}", root.display()))?;
        if !real.is_dir() {
            return Err(format!(
                "workspace root {} is not a directory",
                root.display()
            ));
        }
        Ok(Workspace { root: real })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `file_exists(path)`: `exists` is true iff the path resolves to a
    /// regular file inside the root. `Err` for paths the jail refuses.
    pub fn file_exists(&self, path: &str) -> Result<FileEvidence, String> {
        let Resolved { rel, real } = self.resolve(path)?;
        let Some(real) = real else {
            return Ok(FileEvidence::missing(rel, "no such file"));
        };
        let meta = fs::metadata(&real).map_err(|e| format!("cannot stat {rel:?}: {e}"))?;
        if !meta.is_file() {
            return Ok(FileEvidence::missing(rel, "not a regular file"));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Ok(FileEvidence {
                path: rel,
                exists: true,
                size: Some(meta.len()),
                blake3: None,
                note: Some("larger than 16 MiB, not hashed".to_owned()),
            });
        }
        let bytes = read_bounded(&real, &rel)?;
        Ok(FileEvidence {
            path: rel,
            exists: true,
            size: Some(bytes.len() as u64),
            blake3: Some(blake3::hash(&bytes).to_hex().to_string()),
            note: None,
        })
    }

    /// `file_contains(path, text)`: true iff the path is a regular file whose
    /// contents are valid UTF-8 and contain `text` (case-sensitive). False
    /// for missing files, non-regular files and invalid UTF-8 (with a note in
    /// the evidence). `Err` for refused paths and files over 16 MiB.
    pub fn file_contains(&self, path: &str, text: &str) -> Result<(bool, FileEvidence), String> {
        let Resolved { rel, real } = self.resolve(path)?;
        let Some(real) = real else {
            return Ok((false, FileEvidence::missing(rel, "no such file")));
        };
        let meta = fs::metadata(&real).map_err(|e| format!("cannot stat {rel:?}: {e}"))?;
        if !meta.is_file() {
            return Ok((false, FileEvidence::missing(rel, "not a regular file")));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(too_big(&rel, meta.len()));
        }
        let bytes = read_bounded(&real, &rel)?;
        let mut evidence = FileEvidence {
            path: rel,
            exists: true,
            size: Some(bytes.len() as u64),
            blake3: Some(blake3::hash(&bytes).to_hex().to_string()),
            note: None,
        };
        match std::str::from_utf8(&bytes) {
            Ok(content) => Ok((content.contains(text), evidence)),
            Err(e) => {
                evidence.note = Some(format!(
                    "not valid UTF-8 (invalid byte at offset {})",
                    e.valid_up_to()
                ));
                Ok((false, evidence))
            }
        }
    }

    /// Applies the jail: syntax, lexical containment, then real-path
    /// containment of the file or its deepest existing ancestor.
    fn resolve(&self, path: &str) -> Result<Resolved, String> {
        let parts = lexical_parts(path)?;
        let rel = if parts.is_empty() {
            ".".to_owned()
        } else {
            parts.join("/")
        };
        let full = parts.iter().fold(self.root.clone(), |p, c| p.join(c));
        match fs::canonicalize(&full) {
            Ok(real) => {
                self.check_inside(path, &real)?;
                Ok(Resolved {
                    rel,
                    real: Some(real),
                })
            }
            Err(e) if is_missing(&e) => {
                // The file is absent; make sure no existing ancestor leads out
                // (`link-to-outside/missing` is refused, not false).
                for n in (0..parts.len()).rev() {
                    let prefix = parts[..n].iter().fold(self.root.clone(), |p, c| p.join(c));
                    match fs::canonicalize(&prefix) {
                        Ok(real) => {
                            self.check_inside(path, &real)?;
                            break;
                        }
                        Err(e) if is_missing(&e) => continue,
                        Err(e) => return Err(format!("cannot resolve file path {path:?}: {e}")),
                    }
                }
                Ok(Resolved { rel, real: None })
            }
            Err(e) => Err(format!("cannot resolve file path {path:?}: {e}")),
        }
    }

    fn check_inside(&self, path: &str, real: &Path) -> Result<(), String> {
        if real.starts_with(&self.root) {
            Ok(())
        } else {
            Err(format!(
                "file path {path:?} resolves outside the workspace root (through a symlink)"
            ))
        }
    }
}

fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

fn too_big(rel: &str, size: u64) -> String {
    format!("file {rel:?} is {size} bytes, over the 16 MiB limit of file predicates")
}

/// Reads at most [`MAX_FILE_BYTES`]; a file that grew past it is refused.
fn read_bounded(real: &Path, rel: &str) -> Result<Vec<u8>, String> {
    let file = fs::File::open(real).map_err(|e| format!("cannot read {rel:?}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {rel:?}: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_big(rel, bytes.len() as u64));
    }
    Ok(bytes)
}

/// Checks the syntax of a jailed path and normalizes it lexically. Both `/`
/// and `\` separate components, so `..\x` is refused on every platform.
fn lexical_parts(path: &str) -> Result<Vec<&str>, String> {
    if path.is_empty() {
        return Err("file path is empty".to_owned());
    }
    if path.contains('\0') {
        return Err(format!("file path {path:?} contains a NUL character"));
    }
    let b = path.as_bytes();
    let drive = b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':';
    if path.starts_with('/') || path.starts_with('\\') || drive {
        return Err(format!(
            "file path {path:?} is absolute; paths are relative to the workspace root"
        ));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!("file path {path:?} leaves the workspace root"));
                }
            }
            other => parts.push(other),
        }
    }
    Ok(parts)
}

// ---------------------------------------------------------------------------
// The judge

/// The reason a judged predicate fails with when no judge is configured.
pub const NO_JUDGE_REASON: &str = "judged predicate requires a configured judge runner (add a [judge] table with url and model to stratum.toml)";

pub use crate::config::{JudgeConfig, StakesConfig};

/// The largest reply body read from the judge.
const MAX_REPLY_BYTES: u64 = 1024 * 1024;
/// The largest context (as JSON text) sent to the judge.
const MAX_CONTEXT_CHARS: usize = 100_000;

/// The verdict of one judge call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeOutcome {
    pub holds: bool,
    pub reason: String,
    /// The model that answered (as the server reports it, else as requested).
    pub model: String,
    /// `usage.total_tokens` of the reply, when reported.
    pub tokens: Option<u64>,
}

const SYSTEM_PROMPT: &str = "You are a strict verifier inside a workflow engine. \
You are given a statement and a context (the step's result and the flow's input, as JSON). \
Decide whether the statement holds for that context. Judge only from the context: if it does \
not show that the statement holds, the statement does not hold. \
Answer with exactly one JSON object and nothing else: \
{\"holds\": true or false, \"reason\": \"one or two sentences explaining why\"}";

/// Asks the judge whether `statement` holds for `context`. The model and
/// temperature come from the `stakes` tier if configured, else the defaults
/// (`model`, temperature 0). `Err` on any transport error, timeout, non-2xx
/// status or malformed reply; the caller fails the predicate with it.
pub fn judge(
    cfg: &JudgeConfig,
    statement: &str,
    stakes: &str,
    context: &Value,
) -> Result<JudgeOutcome, String> {
    let tier = Stakes::from_name(stakes).and_then(|s| cfg.per_stakes.get(&s));
    let model = tier
        .and_then(|t| t.model.clone())
        .unwrap_or_else(|| cfg.model.clone());
    let temperature = tier.and_then(|t| t.temperature).unwrap_or(0.0);

    let mut context_text =
        serde_json::to_string_pretty(context).map_err(|e| format!("judge context: {e}"))?;
    if context_text.len() > MAX_CONTEXT_CHARS {
        let mut cut = MAX_CONTEXT_CHARS;
        while !context_text.is_char_boundary(cut) {
            cut -= 1;
        }
        context_text.truncate(cut);
        context_text.push_str("\n… (context truncated)");
    }
    let user = format!("Statement: {statement}\nStakes: {stakes}\nContext:\n{context_text}");
    let body = json!({
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user},
        ],
        "temperature": temperature,
        "response_format": {"type": "json_object"},
        "stream": false,
    });
    let body = serde_json::to_string(&body).map_err(|e| format!("judge request: {e}"))?;

    let endpoint = format!("{}/chat/completions", cfg.url.trim_end_matches('/'));
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_millis(cfg.timeout_ms)))
        .http_status_as_error(false)
        .build();
    let agent = ureq::Agent::new_with_config(config);
    let mut request = agent
        .post(&endpoint)
        .header("content-type", "application/json");
    if let Some(var) = &cfg.api_key_env {
        let key = std::env::var(var)
            .ok()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| format!("judge api key variable `{var}` is not set"))?;
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let mut response = request.send(body.as_bytes()).map_err(|e| match e {
        ureq::Error::Timeout(_) => format!("judge timed out after {} ms", cfg.timeout_ms),
        other => format!("judge request to {endpoint} failed: {other}"),
    })?;
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .with_config()
        .limit(MAX_REPLY_BYTES)
        .read_to_string()
        .map_err(|e| match e {
            ureq::Error::Timeout(_) => format!("judge timed out after {} ms", cfg.timeout_ms),
            other => format!("cannot read the judge reply: {other}"),
        })?;
    if !(200..300).contains(&status) {
        return Err(format!("judge returned HTTP {status}: {}", excerpt(&text)));
    }
    let reply: Value = serde_json::from_str(&text)
        .map_err(|e| format!("judge reply is not JSON ({e}): {}", excerpt(&text)))?;
    let content = reply
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            format!(
                "judge reply has no choices[0].message.content: {}",
                excerpt(&text)
            )
        })?;
    let (holds, reason) = parse_verdict(content)?;
    let model = reply
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .map_or(model, str::to_owned);
    let tokens = reply.pointer("/usage/total_tokens").and_then(Value::as_u64);
    Ok(JudgeOutcome {
        holds,
        reason,
        model,
        tokens,
    })
}

/// Parses the model's answer: exactly one JSON object, optionally inside a
/// single Markdown code fence, with a boolean `holds` and a string `reason`
/// (other keys are ignored). Nothing is guessed from prose.
pub fn parse_verdict(content: &str) -> Result<(bool, String), String> {
    let malformed = || {
        format!(
            "judge runner returned a malformed outcome (expected {{\"holds\": bool, \"reason\": string}}): {}",
            excerpt(content)
        )
    };
    let mut text = content.trim();
    if let Some(rest) = text.strip_prefix("```") {
        // Drop the info string (```json) and the closing fence.
        let (_, body) = rest.split_once('\n').ok_or_else(malformed)?;
        text = body
            .trim_end()
            .strip_suffix("```")
            .ok_or_else(malformed)?
            .trim();
    }
    let value: Value = serde_json::from_str(text).map_err(|_| malformed())?;
    let holds = value.get("holds").and_then(Value::as_bool);
    let reason = value.get("reason").and_then(Value::as_str);
    match (holds, reason) {
        (Some(holds), Some(reason)) => Ok((holds, reason.to_owned())),
        _ => Err(malformed()),
    }
}

/// The first 200 characters of a text, for error messages.
fn excerpt(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

// ----- git worktrees for `isolation: worktree` (reference v1-runtime §4.12) -----

/// Most bytes of an item's patch (it is stored in the run state).
pub const MAX_PATCH_BYTES: usize = 16 * 1024 * 1024;

/// Runs `git -C dir ARGS` (with `input` on stdin) and returns its stdout; a
/// failure says which command failed and the end of what git printed.
fn git(dir: &Path, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, String> {
    run_captured(
        Command::new("git").arg("-C").arg(dir).args(args),
        &format!("git {}", args.join(" ")),
        input,
    )
}

fn run_captured(cmd: &mut Command, what: &str, input: Option<&[u8]>) -> Result<Vec<u8>, String> {
    let mut child = cmd
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{what}`: {e}"))?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // written on its own thread: the command may fill its output pipes before reading all of it
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("`{what}` failed: {e}"))?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let text = if err.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        err.into_owned()
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(6)..].join("; ");
    Err(format!("`{what}` exited with {}: {tail}", out.status))
}

fn trimmed(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).trim().to_owned()
}

/// A file name made of safe characters only (`fan/3` → `fan_3`).
fn safe_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Creates (or finds) the worktree `name` of run `run_id`: a detached
/// checkout of HEAD of the repository holding `root`, under the system temp
/// directory. Returns the directory that corresponds to `root` inside it (the
/// worktree itself when `root` is the repository's top level).
pub fn worktree_create(root: &Path, run_id: &str, name: &str) -> Result<PathBuf, String> {
    let top = PathBuf::from(trimmed(
        git(root, &["rev-parse", "--show-toplevel"], None)
            .map_err(|e| format!("the workspace root is not inside a git repository ({e})"))?,
    ));
    let prefix = trimmed(git(root, &["rev-parse", "--show-prefix"], None)?);
    git(&top, &["rev-parse", "--verify", "--quiet", "HEAD"], None).map_err(|_| {
        "the workspace repository has no commit yet; items start from HEAD, so commit once first"
            .to_owned()
    })?;
    let dir = std::env::temp_dir()
        .join("stratum-worktrees")
        .join(safe_name(run_id))
        .join(safe_name(name));
    if !dir.join(".git").exists() {
        if let Some(parent) = dir.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        // a leftover directory of a worktree that was half made
        if dir.exists() {
            let _ = fs::remove_dir_all(&dir);
            let _ = git(&top, &["worktree", "prune"], None);
        }
        let d = dir.to_string_lossy().into_owned();
        git(&top, &["worktree", "add", "--detach", &d, "HEAD"], None)?;
    }
    Ok(if prefix.is_empty() {
        dir
    } else {
        dir.join(prefix.trim_end_matches('/'))
    })
}

/// Stages everything in the worktree holding `dir` (new files included,
/// ignored files excluded) and returns `git diff --binary --cached HEAD`.
pub fn worktree_patch(dir: &Path) -> Result<String, String> {
    let top = PathBuf::from(trimmed(git(dir, &["rev-parse", "--show-toplevel"], None)?));
    git(&top, &["add", "--all"], None)?;
    let patch = git(
        &top,
        &[
            "diff",
            "--cached",
            "--binary",
            "--no-color",
            "--no-ext-diff",
            "HEAD",
        ],
        None,
    )?;
    if patch.len() > MAX_PATCH_BYTES {
        return Err(format!(
            "the item's changes are {} bytes as a patch; the limit is {MAX_PATCH_BYTES}",
            patch.len()
        ));
    }
    String::from_utf8(patch).map_err(|_| {
        "the item's patch is not valid UTF-8 (a text file in a legacy encoding?); mark such files binary in .gitattributes".to_owned()
    })
}

/// Removes the worktree holding `dir` from the repository holding `root`;
/// one already gone is not an error.
pub fn worktree_remove(root: &Path, dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        let _ = git(root, &["worktree", "prune"], None);
        return Ok(());
    }
    let top = PathBuf::from(trimmed(git(dir, &["rev-parse", "--show-toplevel"], None)?));
    let t = top.to_string_lossy().into_owned();
    let removed = git(root, &["worktree", "remove", "--force", &t], None);
    if removed.is_err() {
        // not a registered worktree any more: remove the directory, forget the record
        fs::remove_dir_all(&top).map_err(|e| format!("cannot remove {t}: {e}"))?;
        let _ = git(root, &["worktree", "prune"], None);
    }
    // the run's folder goes with its last worktree
    if let Some(parent) = top.parent() {
        let _ = fs::remove_dir(parent);
    }
    Ok(())
}

/// Runs each `pre_merge` command (`sh -c`) in `root`, then applies the
/// patches in the order given with a 3-way `git apply --index` at the
/// repository's top level, skipping a patch that is already applied (so a
/// re-run settlement merges nothing twice). Stops at the first error.
pub fn merge_patches(
    root: &Path,
    pre_merge: &[String],
    patches: &[(u32, String)],
) -> Result<(), String> {
    for cmd in pre_merge {
        run_captured(
            Command::new("sh").arg("-c").arg(cmd).current_dir(root),
            &format!("pre_merge {cmd}"),
            None,
        )?;
    }
    if patches.is_empty() {
        return Ok(());
    }
    let top = PathBuf::from(trimmed(git(root, &["rev-parse", "--show-toplevel"], None)?));
    for (k, patch) in patches {
        // already applied (a settlement re-run after a crash or a commit
        // conflict): its reverse applies cleanly, so it is skipped
        let applied = git(
            &top,
            &["apply", "--reverse", "--check", "--index", "-"],
            Some(patch.as_bytes()),
        )
        .is_ok();
        if applied {
            continue;
        }
        git(
            &top,
            &["apply", "--3way", "--index", "--whitespace=nowarn", "-"],
            Some(patch.as_bytes()),
        )
        .map_err(|e| format!("item {k}'s patch does not apply: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git_ok(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn worktrees_start_at_head_and_merge_their_patches_in_order() {
        let repo = tempfile::tempdir().unwrap();
        let root = repo.path().join("sub");
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("a.txt"), "a\n").unwrap();
        git_ok(repo.path(), &["init", "-q"]);
        // no commit yet: items cannot start from HEAD
        let e = worktree_create(&root, "run-t", "fan-e0-0").unwrap_err();
        assert!(e.contains("no commit yet"), "{e}");
        git_ok(repo.path(), &["add", "-A"]);
        git_ok(repo.path(), &["commit", "-q", "-m", "init"]);
        let run = format!("run-host-test-{}", std::process::id());
        // the item works in the worktree's copy of the workspace subdirectory
        let w0 = worktree_create(&root, &run, "fan-e0-0").unwrap();
        let w1 = worktree_create(&root, &run, "fan/e0/1").unwrap();
        let w2 = worktree_create(&root, &run, "fan-e0-2").unwrap();
        assert!(w0.ends_with("fan-e0-0/sub"), "{}", w0.display());
        assert_eq!(fs::read_to_string(w0.join("a.txt")).unwrap(), "a\n");
        // creating it again finds the same one
        assert_eq!(worktree_create(&root, &run, "fan-e0-0").unwrap(), w0);
        fs::write(w0.join("new.bin"), [0u8, 1, 2, 255]).unwrap();
        fs::write(w1.join("a.txt"), "a\nb\n").unwrap();
        fs::write(w2.join("a.txt"), "a\nc\n").unwrap();
        let p2 = worktree_patch(&w2).unwrap();
        let (p0, p1) = (worktree_patch(&w0).unwrap(), worktree_patch(&w1).unwrap());
        assert!(
            p0.contains("sub/new.bin") && p0.contains("GIT binary patch"),
            "{p0}"
        );
        assert!(p1.contains("+b"), "{p1}");
        for w in [&w0, &w1, &w2] {
            worktree_remove(&root, w).unwrap();
            assert!(!w.exists());
            // a second removal is not an error
            worktree_remove(&root, w).unwrap();
        }
        merge_patches(
            &root,
            &["echo ran > pre.txt".to_owned()],
            &[(0, p0.clone()), (1, p1)],
        )
        .unwrap();
        assert_eq!(fs::read(root.join("new.bin")).unwrap(), [0u8, 1, 2, 255]);
        assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "a\nb\n");
        assert_eq!(fs::read_to_string(root.join("pre.txt")).unwrap(), "ran\n");
        // merging the same patches again (a re-run settlement) changes nothing
        merge_patches(&root, &[], &[(0, p0.clone())]).unwrap();
        assert_eq!(fs::read(root.join("new.bin")).unwrap(), [0u8, 1, 2, 255]);
        assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "a\nb\n");
        // a patch of the same lines conflicts; a failing pre_merge stops before any patch
        let e = merge_patches(&root, &[], &[(2, p2)]).unwrap_err();
        assert!(e.starts_with("item 2's patch does not apply"), "{e}");
        let e = merge_patches(&root, &["exit 4".to_owned()], &[(0, p0)]).unwrap_err();
        assert!(
            e.contains("pre_merge exit 4") && e.contains("exit status: 4"),
            "{e}"
        );
    }
}
