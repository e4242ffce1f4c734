//! The host side effects behind ensure predicates: workspace files, the
//! judge, and git worktrees.
//!
//! Owns:
//! - The workspace jail (`workspace.rs`, `beneath.rs`): [`Workspace`] answers
//!   `file_exists` / `file_contains` under a workspace root (reference
//!   v1-language §8.3). Paths must be relative, non-empty and free of NUL;
//!   `..` is resolved lexically and never climbs above the root. The path is
//!   then looked up beneath a descriptor of the root that the jail opened
//!   once: on Linux with `openat2(RESOLVE_BENEATH)`, else (or when the kernel
//!   refuses) by a walk that opens each component with `O_NOFOLLOW` from its
//!   parent's descriptor. Symlinks are followed only while they stay beneath
//!   the root (an absolute target only when it names a place under the
//!   root's real path); one that leads out is refused. The file is opened
//!   `O_NONBLOCK` and its type checked on the descriptor, and the bytes
//!   hashed are the bytes of that descriptor, so what the audit records
//!   ([`FileEvidence`]: relative path, size, blake3) is what was read.
//! - The judge: [`judge`] with the [`JudgeConfig`] that
//!   [`crate::config::Config::judge_runner`] reads from `[judge]`, one blocking call to an OpenAI-compatible
//!   `POST {url}/chat/completions` endpoint (a local ollama, say).
//! - Git worktrees of `isolation: worktree` fanout items ([`git`]).
//! - The standard host ([`StdHost`]) that wires them to the interpreter.
//!
//! Errors are typed: [`JailError`], [`JudgeError`], [`GitError`]; their
//! messages are meant for a violation reason. [`StdHost`] maps each to a
//! [`crate::interp::HostError`] kind by a `match`.
//!
//! When no judge is configured the caller must fail the judged predicate
//! closed, with [`NO_JUDGE_REASON`]; nothing here ever treats a missing or
//! broken judge as "holds".
//!
//! Must never: read or stat anything outside the root (git work aside: it
//! makes and removes worktrees under the temp directory and applies patches
//! in the root's repository), read more than [`MAX_FILE_BYTES`] of a file,
//! block opening a non-regular file, or panic on any input. The jail holds
//! against a process that swaps files, directories, symlinks or FIFOs while
//! a predicate runs (`renameat2(RENAME_EXCHANGE)` loops are tested): a read
//! sees either what is inside the root at that moment or nothing. It does
//! not stop such a process from putting content into the workspace (a copy
//! of an outside file is a file inside), nor from renaming a directory out
//! of the root while a lookup is inside it (the kernel's `RESOLVE_BENEATH`
//! makes the same choice); the root itself is trusted as it was when the
//! jail was made.

use std::time::Duration;

use serde::Serialize;

use crate::plan::Stakes;
use serde_json::{Value, json};

pub use crate::interp::FileEvidence;

mod beneath;
pub mod git;
mod glob;
mod std_host;
mod workspace;
pub use git::{
    GitError, MAX_PATCH_BYTES, merge_patches, worktree_create, worktree_patch, worktree_remove,
};
pub use std_host::{HostSetupError, StdHost};
pub use workspace::{JailError, MAX_FILE_BYTES, Refusal, Workspace};

/// The reason a judged predicate fails with when no judge is configured.
pub const NO_JUDGE_REASON: &str = "judged predicate requires a configured judge runner (add a [judge] table with url and model to stratum.toml)";

pub use crate::config::{JudgeConfig, StakesConfig};

/// The largest reply body read from the judge.
const MAX_REPLY_BYTES: u64 = 1024 * 1024;
/// The largest context (as JSON text) sent to the judge.
const MAX_CONTEXT_CHARS: usize = 100_000;

/// Why a judge call has no verdict (the judged predicate then fails closed).
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    /// The context or request could not be encoded as JSON.
    #[error("judge {what}: {source}")]
    Encode {
        what: &'static str,
        source: serde_json::Error,
    },
    /// The configured API key variable is unset or empty.
    #[error("judge api key variable `{var}` is not set")]
    MissingApiKey { var: String },
    /// No answer within the configured timeout.
    #[error("judge timed out after {ms} ms")]
    Timeout { ms: u64 },
    /// The request could not be made.
    #[error("judge request to {endpoint} failed: {source}")]
    Request {
        endpoint: String,
        source: Box<ureq::Error>,
    },
    /// The reply body could not be read.
    #[error("cannot read the judge reply: {source}")]
    ReadReply { source: Box<ureq::Error> },
    /// The endpoint answered with a non-2xx status (`excerpt`: the body's start).
    #[error("judge returned HTTP {status}: {excerpt}")]
    Status { status: u16, excerpt: String },
    /// The reply is not JSON.
    #[error("judge reply is not JSON ({source}): {excerpt}")]
    NotJson {
        source: serde_json::Error,
        excerpt: String,
    },
    /// The reply has no message content.
    #[error("judge reply has no choices[0].message.content: {excerpt}")]
    NoContent { excerpt: String },
    /// The model's answer is not `{"holds": bool, "reason": string}`.
    #[error(
        "judge runner returned a malformed outcome (expected {{\"holds\": bool, \"reason\": string}}): {excerpt}"
    )]
    MalformedVerdict { excerpt: String },
}

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
) -> Result<JudgeOutcome, JudgeError> {
    let tier = Stakes::from_name(stakes).and_then(|s| cfg.per_stakes.get(&s));
    let model = tier
        .and_then(|t| t.model.clone())
        .unwrap_or_else(|| cfg.model.clone());
    let temperature = tier.and_then(|t| t.temperature).unwrap_or(0.0);

    let mut context_text =
        serde_json::to_string_pretty(context).map_err(|source| JudgeError::Encode {
            what: "context",
            source,
        })?;
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
    let body = serde_json::to_string(&body).map_err(|source| JudgeError::Encode {
        what: "request",
        source,
    })?;

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
            .ok_or_else(|| JudgeError::MissingApiKey { var: var.clone() })?;
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let timeout = JudgeError::Timeout { ms: cfg.timeout_ms };
    let mut response = request.send(body.as_bytes()).map_err(|e| match e {
        ureq::Error::Timeout(_) => timeout,
        other => JudgeError::Request {
            endpoint: endpoint.clone(),
            source: Box::new(other),
        },
    })?;
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .with_config()
        .limit(MAX_REPLY_BYTES)
        .read_to_string()
        .map_err(|e| match e {
            ureq::Error::Timeout(_) => JudgeError::Timeout { ms: cfg.timeout_ms },
            other => JudgeError::ReadReply {
                source: Box::new(other),
            },
        })?;
    if !(200..300).contains(&status) {
        return Err(JudgeError::Status {
            status,
            excerpt: excerpt(&text),
        });
    }
    let reply: Value = serde_json::from_str(&text).map_err(|source| JudgeError::NotJson {
        source,
        excerpt: excerpt(&text),
    })?;
    let content = reply
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or_else(|| JudgeError::NoContent {
            excerpt: excerpt(&text),
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
pub fn parse_verdict(content: &str) -> Result<(bool, String), JudgeError> {
    let malformed = || JudgeError::MalformedVerdict {
        excerpt: excerpt(content),
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
