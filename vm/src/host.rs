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
//! - The judge: [`judge`] (a statement) and [`judge_scored`] (a rubric with
//!   input files, X5) with a [`JudgeConfig`] that
//!   [`crate::config::Config::judge_runners`] reads from `[judge]` and
//!   `[judges.NAME]`, one blocking call to an OpenAI-compatible
//!   `POST {url}/chat/completions` endpoint (a local ollama, say) in a fresh
//!   context. Input files are read through the jail, at most
//!   [`MAX_INPUT_BYTES`] each and [`MAX_INPUTS_TOTAL_BYTES`] in all.
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

pub use crate::interp::{FileEvidence, FileHash};

mod beneath;
pub mod commands;
pub mod git;
pub mod glob;
pub mod snapshot;
mod std_host;
mod workspace;
pub use git::{
    GitError, MAX_PATCH_BYTES, commit_exists, merge_patches, worktree_create, worktree_patch,
    worktree_remove,
};
pub use std_host::{HostSetupError, StdHost, read_judge_inputs};
pub use workspace::{Capped, JailError, MAX_FILE_BYTES, Refusal, Workspace};

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
    /// The model's answer to a rubric is not `{"score": 0..1, "reasons": [string]}`.
    #[error(
        "judge returned a malformed score (expected {{\"score\": number in [0, 1], \"reasons\": [string]}}): {excerpt}"
    )]
    MalformedScore { excerpt: String },
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
    let context_text = context_text(context)?;
    let user = format!("Statement: {statement}\nStakes: {stakes}\nContext:\n{context_text}");
    let reply = chat(cfg, &model, temperature, SYSTEM_PROMPT, &user)?;
    let (holds, reason) = parse_verdict(&reply.content)?;
    Ok(JudgeOutcome {
        holds,
        reason,
        model: reply.model,
        tokens: reply.tokens,
    })
}

/// The largest input file sent to a scored judge: 256 KiB.
pub const MAX_INPUT_BYTES: u64 = 256 * 1024;
/// The largest total of input files sent in one scored judge call: 1 MiB.
pub const MAX_INPUTS_TOTAL_BYTES: u64 = 1024 * 1024;

const SCORED_PROMPT: &str = "You are a strict grader inside a workflow engine. \
You are given a rubric, a context (the step's result and the flow's input, as JSON) and, when \
listed, the contents of input files. Score how well the result meets the rubric, from 0 (not at \
all) to 1 (fully), judging only from what you are given. \
Answer with exactly one JSON object and nothing else: \
{\"score\": a number from 0 to 1, \"reasons\": [\"short strings explaining the score\"]}";

/// One input file of a scored judge call: its path and UTF-8 text.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeInput {
    /// The path relative to the root.
    pub path: String,
    /// Its text.
    pub text: String,
}

/// The answer of a scored judge call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredOutcome {
    /// The score in [0, 1].
    pub score: f64,
    /// The reasons.
    pub reasons: Vec<String>,
    /// The model that answered.
    pub model: String,
    /// `usage.total_tokens` of the reply, when reported.
    pub tokens: Option<u64>,
}

/// The user message of a scored call: what to score, the context, each
/// input file fenced with its path.
pub fn scored_prompt(rubric: &str, context_text: &str, inputs: &[JudgeInput]) -> String {
    let mut user = format!("Rubric: {rubric}\nContext:\n{context_text}\n");
    for i in inputs {
        user.push_str(&format!(
            "\nInput file {}:\n<<<FILE {}\n{}\nFILE>>>\n",
            i.path, i.path, i.text
        ));
    }
    user.push_str(
        "\nScore the result against the rubric. Answer {\"score\": 0..1, \"reasons\": [string]}.",
    );
    user
}

/// Asks the judge to score `context` (and the `inputs`) against `rubric`,
/// in a fresh context (one system and one user message), with the default
/// model at temperature 0. `Err` as [`judge`].
pub fn judge_scored(
    cfg: &JudgeConfig,
    rubric: &str,
    context: &Value,
    inputs: &[JudgeInput],
) -> Result<ScoredOutcome, JudgeError> {
    let user = scored_prompt(rubric, &context_text(context)?, inputs);
    let reply = chat(cfg, &cfg.model, 0.0, SCORED_PROMPT, &user)?;
    let (score, reasons) = parse_score(&reply.content)?;
    Ok(ScoredOutcome {
        score,
        reasons,
        model: reply.model,
        tokens: reply.tokens,
    })
}

/// The context as pretty JSON, cut at [`MAX_CONTEXT_CHARS`].
fn context_text(context: &Value) -> Result<String, JudgeError> {
    let mut text = serde_json::to_string_pretty(context).map_err(|source| JudgeError::Encode {
        what: "context",
        source,
    })?;
    if text.len() > MAX_CONTEXT_CHARS {
        let mut cut = MAX_CONTEXT_CHARS;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n… (context truncated)");
    }
    Ok(text)
}

/// What one chat completion answered.
struct ChatReply {
    content: String,
    model: String,
    tokens: Option<u64>,
}

/// One blocking `POST {url}/chat/completions` with a system and a user message.
fn chat(
    cfg: &JudgeConfig,
    model: &str,
    temperature: f64,
    system: &str,
    user: &str,
) -> Result<ChatReply, JudgeError> {
    let body = json!({
        "model": model,
        "messages": [
            {"role": "system", "content": system},
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
    let text = post(cfg, &body)?;
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
    let model = reply
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or(model);
    Ok(ChatReply {
        content: content.to_owned(),
        model: model.to_owned(),
        tokens: reply.pointer("/usage/total_tokens").and_then(Value::as_u64),
    })
}

/// Sends `body`; the reply's text when the status is 2xx.
fn post(cfg: &JudgeConfig, body: &str) -> Result<String, JudgeError> {
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
    Ok(text)
}

/// The model's answer as one JSON object (optionally inside a single
/// Markdown code fence); `None` when it is not.
fn answer_object(content: &str) -> Option<Value> {
    let mut text = content.trim();
    if let Some(rest) = text.strip_prefix("```") {
        // Drop the info string (```json) and the closing fence.
        let (_, body) = rest.split_once('\n')?;
        text = body.trim_end().strip_suffix("```")?.trim();
    }
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

/// Parses a scored answer: one JSON object with a number `score` in [0, 1]
/// and `reasons`, a list of strings (other keys are ignored).
pub fn parse_score(content: &str) -> Result<(f64, Vec<String>), JudgeError> {
    let malformed = || JudgeError::MalformedScore {
        excerpt: excerpt(content),
    };
    let value = answer_object(content).ok_or_else(malformed)?;
    let score = value
        .get("score")
        .and_then(Value::as_f64)
        .filter(|s| (0.0..=1.0).contains(s))
        .ok_or_else(malformed)?;
    let reasons = value
        .get("reasons")
        .and_then(Value::as_array)
        .ok_or_else(malformed)?
        .iter()
        .map(|r| r.as_str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(malformed)?;
    Ok((score, reasons))
}

/// Parses the model's answer: exactly one JSON object, optionally inside a
/// single Markdown code fence, with a boolean `holds` and a string `reason`
/// (other keys are ignored). Nothing is guessed from prose.
pub fn parse_verdict(content: &str) -> Result<(bool, String), JudgeError> {
    let malformed = || JudgeError::MalformedVerdict {
        excerpt: excerpt(content),
    };
    let value = answer_object(content).ok_or_else(malformed)?;
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
