//! Tool replies: every result goes out twice, as `structuredContent` and as
//! JSON text, and every refusal is a tool result with `isError: true` whose
//! text starts with a sentence an agent can act on.
//!
//! Owns: the mapping from engine errors to stable `error_type` strings.
//! Must never: decide whether something is an error (the engine and the
//! front end do); it only shapes what they said.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};
use stratum_vm::engine::EngineError;
use stratum_vm::interp::{CheckpointError, VmError};
use stratum_vm::store::StoreError;

/// What a tool hands back before it becomes a [`CallToolResult`].
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The tool did its job; the value is the result.
    Ok(Value),
    /// Refused: `{status: "error", error_type, message, ...}`.
    Err(Value),
}

impl Reply {
    /// A refusal with a type and a message.
    pub fn error(error_type: &str, message: impl Into<String>) -> Reply {
        Reply::Err(json!({"status": "error", "error_type": error_type, "message": message.into()}))
    }

    /// A refusal carrying more fields (diagnostics, available labels).
    pub fn error_with(error_type: &str, message: impl Into<String>, extra: Value) -> Reply {
        let mut v = json!({"status": "error", "error_type": error_type, "message": message.into()});
        if let (Some(m), Value::Object(x)) = (v.as_object_mut(), extra) {
            m.extend(x);
        }
        Reply::Err(v)
    }

    /// A malformed request (unknown or missing field, wrong type).
    pub fn bad_request(message: String) -> Reply {
        Reply::error("invalid_request", message)
    }

    /// The MCP result: structured content plus the same JSON as text; a
    /// refusal's text starts with its message on a line of its own.
    pub fn into_result(self) -> CallToolResult {
        match self {
            Reply::Ok(v) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(v.to_string())]);
                r.structured_content = Some(v);
                r
            }
            Reply::Err(v) => {
                let message = v["message"].as_str().unwrap_or("error").to_string();
                let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
                    "error: {message}\n{v}"
                ))]);
                r.structured_content = Some(v);
                r
            }
        }
    }
}

/// A refusal from the engine; nothing in the run changed. The `error_type`
/// is the error's stable code ([`EngineError::code`], one exhaustive match).
pub fn engine_error(e: &EngineError) -> Reply {
    let message = match e {
        EngineError::Store(StoreError::NotFound(id)) => {
            format!("no run `{id}` in the store (start one with stratum_plan)")
        }
        other => other.to_string(),
    };
    // the labels a missing checkpoint could have been, as a field (reference §2.3)
    if let EngineError::Vm(VmError::Checkpoint(CheckpointError::NotFound { available, .. })) = e {
        return Reply::error_with(e.code(), message, json!({"available": available}));
    }
    Reply::error(e.code(), message)
}
