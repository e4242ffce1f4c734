//! The seven STRAT-GUARD tools (issue 17), one inner module each:
//! `stratum_guard_register`, `_transition`, `_history`, `_upgrade`,
//! `_override`, `_migrate` and `_apply_upgrade`.
//!
//! Owns: decoding each request into the guard crate's typed requests
//! (both name styles through the field lists), the host factory on the
//! server's configuration, and shaping results and refusals.
//! Must never: apply a guard rule (`stratum_guard::service` does), read the
//! trust root from anywhere but `stratum_guard::authz`, or open a second
//! store connection (the engine's is used).

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use stratum_guard::service::{NewPolicy, TransitionRequest};
use stratum_guard::{ConfigHosts, Guard, GuardError};
use stratum_vm::store::GuardStore;

use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::State;

const RESOURCE_ID: Field = Field::req(
    "resourceId",
    Kind::Str,
    "The guarded resource, in the client's namespace (e.g. `compose:FEAT-1`).",
)
.or("resource_id");
const FROM_STATE: Field =
    Field::req("fromState", Kind::Str, "The state the resource is in.").or("from_state");
const TO_STATE: Field = Field::req("toState", Kind::Str, "The state to move it to.").or("to_state");
const RATIONALE: Field = Field::req("rationale", Kind::Str, "Why (recorded in the ledger).");
const AUTHORIZATION: Field = Field::req(
    "authorization",
    Kind::Str,
    "An armored SSH signature (`ssh-keygen -Y sign`) of the payload `stratumc guard authorize` prints.",
);
const NEW_GRAPH: Field =
    Field::req("newGraph", Kind::Obj, "The new graph: {from: [to]}.").or("new_graph");
const NEW_PREDICATES: Field = Field::opt(
    "newEdgePredicates",
    Kind::Obj,
    "The new predicates: {\"from->to\": [{id, type, statement}]}.",
)
.or("new_edge_predicates");
const NEW_TERMINAL: Field =
    Field::opt("newTerminal", Kind::Arr, "The new terminal states.").or("new_terminal");
const NEW_STAKES: Field = Field::opt(
    "newStakes",
    Kind::Obj,
    "The new stakes: {\"from->to\": cheap|default|paranoid}.",
)
.or("new_stakes");

/// A typed field (absent: the default).
fn typed<T: DeserializeOwned + Default>(args: &Args, name: &str) -> Result<T, Reply> {
    match args.get(name) {
        None => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| Reply::bad_request(format!("field `{name}`: {e}"))),
    }
}

fn refused(e: &GuardError) -> Reply {
    Reply::error(e.code(), e.to_string())
}

fn answer<T: Serialize>(r: Result<T, GuardError>) -> Reply {
    match r {
        Ok(v) => Reply::Ok(serde_json::to_value(v).unwrap_or(Value::Null)),
        Err(e) => refused(&e),
    }
}

/// Runs `op` on the server's store with its configuration's hosts.
fn with_guard<T>(state: &mut State, op: impl FnOnce(&mut Guard<'_>) -> T) -> T {
    let hosts = ConfigHosts {
        operator: state.operator().map(std::path::Path::to_path_buf),
    };
    let store: &mut dyn GuardStore = state.engine.store_mut();
    let mut guard = Guard {
        store,
        hosts: &hosts,
        now_ms: stratum_guard::now_ms(),
    };
    op(&mut guard)
}

fn new_policy(args: &Args) -> Result<NewPolicy, Reply> {
    Ok(NewPolicy {
        graph: typed(args, "newGraph")?,
        edge_predicates: typed(args, "newEdgePredicates")?,
        terminal: typed(args, "newTerminal")?,
        stakes: typed(args, "newStakes")?,
    })
}

/// `stratum_guard_register`.
pub mod register {
    use super::*;

    pub const NAME: &str = "stratum_guard_register";
    pub const DESCRIPTION: &str = "Register a guarded resource: a transition graph with evidence predicates per edge. \
{resourceId, graph: {from: [to]}, edgePredicates: {\"from->to\": [{id, type: deterministic|verified|judged, statement}]}, initial, terminal: [..], \
stakes: {\"from->to\": cheap|default|paranoid}, workspaceRoot} → {guard_id, checksum, status: registered|unchanged}. A deterministic statement is exactly one of \
server_file_exists('rel/path'), git_commit_exists('<sha>'), command_exit_zero(['argv', ...]) (the argv must be declared in stratum.toml [commands]) or \
verdict_receipt_clean('<ledger_ref>'). Re-registering the same policy changes nothing; a different one is refused (use stratum_guard_upgrade or stratum_guard_migrate).";
    pub const FIELDS: &[Field] = &[
        RESOURCE_ID,
        Field::req("graph", Kind::Obj, "The transition graph: {from: [to]}."),
        Field::opt(
            "edgePredicates",
            Kind::Obj,
            "Per edge: {\"from->to\": [{id, type, statement}]}.",
        )
        .or("edge_predicates"),
        Field::req("initial", Kind::Str, "The initial state."),
        Field::opt(
            "terminal",
            Kind::Arr,
            "The terminal states (no outgoing edges).",
        ),
        Field::opt(
            "stakes",
            Kind::Obj,
            "Per edge: cheap|default|paranoid (default: default).",
        ),
        Field::req(
            "workspaceRoot",
            Kind::Str,
            "The absolute directory file, git and command evidence is read in.",
        )
        .or("workspace_root"),
    ];

    pub fn call(state: &mut State, args: &Args) -> Reply {
        let mut policy = serde_json::Map::new();
        for (from, to) in [
            ("graph", "graph"),
            ("edgePredicates", "edge_predicates"),
            ("initial", "initial"),
            ("terminal", "terminal"),
            ("stakes", "stakes"),
            ("workspaceRoot", "workspace_root"),
        ] {
            if let Some(v) = args.get(from) {
                policy.insert(to.to_owned(), v.clone());
            }
        }
        let input = match stratum_guard::policy::from_value(Value::Object(policy)) {
            Ok(i) => i,
            Err(e) => return refused(&e.into()),
        };
        let id = args.req_str("resourceId").to_owned();
        answer(with_guard(state, |g| g.register(&id, &input)))
    }
}

/// `stratum_guard_transition`.
pub mod transition {
    use super::*;

    pub const NAME: &str = "stratum_guard_transition";
    pub const DESCRIPTION: &str = "Attempt fromState -> toState on a guarded resource. The server checks the edge and evaluates its predicates on evidence it reads itself \
(deterministic built-ins; verified/judged predicates through the judge at the edge's stakes, with artifacts and modifiedFiles as context), then commits if the state \
has not moved. → {status: applied|refused|replayed, verdict: {met, stakes, predicates: [{id, type, statement, met, evidence}]}, refusal?: {code, message}, \
ledger_ref, current_state}. Every attempt is in the ledger; ledger_ref is the receipt verdict_receipt_clean takes. A repeated idempotencyKey answers replayed.";
    pub const FIELDS: &[Field] = &[
        RESOURCE_ID,
        FROM_STATE,
        TO_STATE,
        Field::opt(
            "artifacts",
            Kind::Obj,
            "{name: text} context for judged predicates (claims, not evidence).",
        ),
        Field::opt(
            "modifiedFiles",
            Kind::Arr,
            "Paths the change touched (context for judged predicates).",
        )
        .or("modified_files"),
        Field::opt(
            "idempotencyKey",
            Kind::Str,
            "A key: the same key again answers `replayed`.",
        )
        .or("idempotency_key"),
        Field::req(
            "resolvedBy",
            Kind::Str,
            "Who asks (agent, human, a tool name).",
        )
        .or("resolved_by"),
    ];

    pub fn call(state: &mut State, args: &Args) -> Reply {
        let artifacts: BTreeMap<String, String> = match typed(args, "artifacts") {
            Ok(a) => a,
            Err(r) => return r,
        };
        let modified_files: Vec<String> = match typed(args, "modifiedFiles") {
            Ok(a) => a,
            Err(r) => return r,
        };
        let req = TransitionRequest {
            resource_id: args.req_str("resourceId").to_owned(),
            from_state: args.req_str("fromState").to_owned(),
            to_state: args.req_str("toState").to_owned(),
            claims: stratum_guard::evidence::Claims {
                artifacts,
                modified_files,
            },
            idempotency_key: args.str("idempotencyKey").map(str::to_owned),
            resolved_by: args.req_str("resolvedBy").to_owned(),
        };
        answer(with_guard(state, |g| g.transition(&req)))
    }
}

/// `stratum_guard_history`.
pub mod history {
    use super::*;

    pub const NAME: &str = "stratum_guard_history";
    pub const DESCRIPTION: &str = "A guarded resource's current state and its append-only, hash-chained ledger: \
{resource_id, current_state, graph_version, checksum, ledger_head, ledger: [{seq, kind: registered|transition|deviation|graph_version, status, from_state?, to_state?, \
resolved_by, verdict?, refusal?, authorized_by?, policy_checksum, graph_version, prev, hash}]} (an entry's hash is its ledger_ref). Refused when the chain is broken.";
    pub const FIELDS: &[Field] = &[RESOURCE_ID];

    pub fn call(state: &mut State, args: &Args) -> Reply {
        let id = args.req_str("resourceId").to_owned();
        answer(with_guard(state, |g| g.history(&id)))
    }
}

/// `stratum_guard_upgrade`.
pub mod upgrade {
    use super::*;

    pub const NAME: &str = "stratum_guard_upgrade";
    pub const DESCRIPTION: &str = "Evolve a policy without a signature, additively only: no state or edge removed, existing edges' predicates and stakes byte-identical, \
new edges only into new states, terminal frozen; anything else is refused as incompatible_policy_upgrade. Idempotent: the same policy answers unchanged and writes nothing. \
{resourceId, newGraph, newEdgePredicates, rationale, newTerminal, newStakes} → {status: migrated|unchanged, checksum, graph_version, ledger_ref?, rationale}.";
    pub const FIELDS: &[Field] = &[
        RESOURCE_ID,
        NEW_GRAPH,
        NEW_PREDICATES,
        RATIONALE,
        NEW_TERMINAL,
        NEW_STAKES,
    ];

    pub fn call(state: &mut State, args: &Args) -> Reply {
        let new = match new_policy(args) {
            Ok(n) => n,
            Err(r) => return r,
        };
        let id = args.req_str("resourceId").to_owned();
        let rationale = args.req_str("rationale").to_owned();
        answer(with_guard(state, |g| g.upgrade(&id, &new, &rationale)))
    }
}

/// `stratum_guard_override`.
pub mod override_edge {
    use super::*;

    pub const NAME: &str = "stratum_guard_override";
    pub const DESCRIPTION: &str = "Move a legal edge without its predicates, authorized by an SSH signature (namespace stratum-guard-override) over the payload \
{action, resource_id, from_state, to_state, rationale, ledger_head} that the server rebuilds itself (`stratumc guard authorize` prints it); resolvedBy must be \
\"human\". Writes a deviation entry naming the signer. → {status: applied, ledger_ref, current_state, authorized_by}.";
    pub const FIELDS: &[Field] = &[
        RESOURCE_ID,
        FROM_STATE,
        TO_STATE,
        AUTHORIZATION,
        RATIONALE,
        Field::req("resolvedBy", Kind::Str, "Must be \"human\".").or("resolved_by"),
    ];

    pub fn call(state: &mut State, args: &Args) -> Reply {
        let trust = match stratum_guard::authz::load_trust_root() {
            Ok(t) => t,
            Err(e) => return refused(&e.into()),
        };
        let req = TransitionRequest {
            resource_id: args.req_str("resourceId").to_owned(),
            from_state: args.req_str("fromState").to_owned(),
            to_state: args.req_str("toState").to_owned(),
            resolved_by: args.req_str("resolvedBy").to_owned(),
            ..TransitionRequest::default()
        };
        let (rationale, auth) = (args.req_str("rationale"), args.req_str("authorization"));
        answer(with_guard(state, |g| {
            g.override_edge(&req, rationale, auth, &trust)
        }))
    }
}

/// `stratum_guard_migrate`.
pub mod migrate {
    use super::*;

    pub const NAME: &str = "stratum_guard_migrate";
    pub const DESCRIPTION: &str = "Change a policy in any way, authorized by an SSH signature (namespace stratum-guard-migrate) over \
{action, resource_id, policy_checksum, rationale, ledger_head} (the new policy's checksum; `stratumc guard authorize` prints it). The current state must be a \
state of the new graph; graph_version + 1. → {status: migrated, checksum, graph_version, ledger_ref, authorized_by}.";
    pub const FIELDS: &[Field] = &[
        RESOURCE_ID,
        NEW_GRAPH,
        NEW_PREDICATES,
        AUTHORIZATION,
        RATIONALE,
        NEW_TERMINAL,
        NEW_STAKES,
    ];

    pub fn call(state: &mut State, args: &Args) -> Reply {
        let trust = match stratum_guard::authz::load_trust_root() {
            Ok(t) => t,
            Err(e) => return refused(&e.into()),
        };
        let new = match new_policy(args) {
            Ok(n) => n,
            Err(r) => return r,
        };
        let id = args.req_str("resourceId").to_owned();
        let (rationale, auth) = (args.req_str("rationale"), args.req_str("authorization"));
        answer(with_guard(state, |g| {
            g.migrate(&id, &new, rationale, auth, &trust)
        }))
    }
}

/// `stratum_guard_apply_upgrade`.
pub mod apply_upgrade {
    use super::*;

    pub const NAME: &str = "stratum_guard_apply_upgrade";
    pub const DESCRIPTION: &str = "Apply a server-managed upgrade descriptor {id, rationale, from_checksum, to_policy}: the files named by the server's \
STRATUM_GUARD_UPGRADE_DESCRIPTORS, each signed at <path>.sig (namespace stratum-guard-descriptors) by a key of the trust root. Applies only when the resource's \
checksum is from_checksum; unchanged when it already has to_policy. MCP only (no CLI verb). → {status: applied|unchanged, checksum, graph_version, ledger_ref?, descriptor_id}.";
    pub const FIELDS: &[Field] = &[
        RESOURCE_ID,
        Field::req("descriptorId", Kind::Str, "The descriptor's id.").or("descriptor_id"),
    ];

    pub fn call(state: &mut State, args: &Args) -> Reply {
        use stratum_guard::descriptors;
        let trust = match stratum_guard::authz::load_trust_root() {
            Ok(t) => t,
            Err(e) => return refused(&e.into()),
        };
        let files = descriptors::paths(std::env::var(descriptors::ENV).ok().as_deref());
        let (d, file) = match descriptors::find(&files, &trust, args.req_str("descriptorId")) {
            Ok(found) => found,
            Err(e) => return refused(&e),
        };
        let id = args.req_str("resourceId").to_owned();
        answer(with_guard(state, |g| g.apply_upgrade(&id, &d, &file)))
    }
}
