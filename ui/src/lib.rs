//! The operator UI of stratumc (`stratumc ui`): a web server over the run
//! store with pages for the people who supervise runs — the runs, one run
//! (its graph coloured by status, steps, artifacts, patches, receipts, the
//! audit timeline), the gates waiting across all runs with their decisions —
//! and the versioned JSON API under `/api/v1/` the pages are built on.
//!
//! Owns: the routes, the request and response shapes of the API, the
//! security rules of the server ([`security`]), and the embedded assets
//! (HTML, CSS, JavaScript: no CDN, no build step, nothing fetched at run
//! time).
//! Must never: implement a rule of its own. Views come from
//! `stratum_vm::view` (the JSON documents of `stratumc query`), gate
//! decisions go through `stratum_vm::operator` (as `stratumc gate`),
//! cancellation through `Engine::cancel_flow` (as `stratumc flow cancel`);
//! every store access runs on a blocking thread, never on the async runtime.

pub mod graph;
pub mod security;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use stratum_vm::engine::{Engine, EngineError};
use stratum_vm::host::StdHost;
use stratum_vm::interp::{GateDecision, RunStatus};
use stratum_vm::operator::{self, DecideError};
use stratum_vm::store::{RunStore, StoreError};
use stratum_vm::view::{self, wire};

/// Opens the run store for one request (each request gets its own
/// connection; the store is shared safely between them and with other
/// processes).
pub type OpenStore = Arc<dyn Fn() -> Result<Box<dyn RunStore>, StoreError> + Send + Sync>;

/// What the server needs.
#[derive(Clone)]
pub struct Ui {
    open: OpenStore,
    guard: security::Guard,
}

/// Most runs one listing answers (`limit` may ask for fewer or more, up to
/// [`MAX_LIST`]).
pub const DEFAULT_LIST: usize = 200;
/// The largest `limit` of a listing.
pub const MAX_LIST: usize = 2000;

impl Ui {
    /// A server over the store `open` gives, with the security rules of
    /// `guard`.
    pub fn new(open: OpenStore, guard: security::Guard) -> Ui {
        Ui { open, guard }
    }

    /// Every route of the UI.
    pub fn router(self) -> Router {
        let guard = self.guard.clone();
        Router::new()
            .route("/", get(page))
            .route("/app.js", get(script))
            .route("/app.css", get(style))
            .route("/api/v1/runs", get(runs))
            .route("/api/v1/runs/{run}", get(run))
            .route("/api/v1/runs/{run}/version", get(version))
            .route("/api/v1/runs/{run}/graph.svg", get(run_graph))
            .route("/api/v1/runs/{run}/gates/{step}", post(decide))
            .route("/api/v1/runs/{run}/cancel", post(cancel))
            .route("/api/v1/gates", get(gates))
            .with_state(self)
            .layer(axum::middleware::from_fn_with_state(guard, security::check))
    }
}

/// Serves the UI on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, ui: Ui) -> std::io::Result<()> {
    axum::serve(listener, ui.router()).await
}

// ----- errors ---------------------------------------------------------------

/// An API refusal: `{"version": 1, "error": {"type", "message"}}` with a
/// status code.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"version": 1, "error": {"type": self.kind, "message": self.message}});
        (self.status, axum::Json(body)).into_response()
    }
}

fn engine_error(run: &str, e: EngineError) -> ApiError {
    match &e {
        EngineError::Store(StoreError::NotFound(_)) => ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_run",
            format!("no run `{run}` in the run store"),
        ),
        _ => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "store_error",
            format!("run `{run}`: {e}"),
        ),
    }
}

/// Runs `work` with an engine on a blocking thread.
async fn with_engine<T: Send + 'static>(
    ui: &Ui,
    work: impl FnOnce(&mut Engine) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let open = ui.open.clone();
    tokio::task::spawn_blocking(move || {
        let store = open().map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                format!("cannot open the run store: {e}"),
            )
        })?;
        let mut engine = Engine::new(store);
        work(&mut engine)
    })
    .await
    .map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the request's worker ended: {e}"),
        )
    })?
}

fn load(engine: &mut Engine, run: &str) -> Result<view::RunView, ApiError> {
    view::load(engine, run).map_err(|e| engine_error(run, e))
}

// ----- assets ---------------------------------------------------------------

async fn page() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("assets/index.html"),
    )
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/app.js"),
    )
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/app.css"),
    )
}

// ----- reads ----------------------------------------------------------------

#[derive(Deserialize)]
struct ListQuery {
    status: Option<String>,
    limit: Option<usize>,
}

/// `GET /api/v1/runs[?status=S][&limit=N]`: the newest runs, those with a
/// waiting gate first, each with its progress, spend and waiting gates.
async fn runs(State(ui): State<Ui>, Query(q): Query<ListQuery>) -> Result<Response, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_LIST).clamp(1, MAX_LIST);
    let body = with_engine(&ui, move |engine| {
        // one page (one more than shown: whether the list is truncated), so
        // the page costs the same in a store of 100,000 finished runs
        let wanted = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
        let metas = engine
            .store()
            .list_page(q.status.as_deref(), wanted, None)
            .map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "store_error",
                    e.to_string(),
                )
            })?;
        let mut listed = Vec::new();
        // newest first, as `query flows`
        for m in metas.iter().take(limit) {
            let link = view::retry_link(engine, &m.run_id).ok().flatten();
            let mut r = wire::listed_run_json(m, link.as_ref());
            match view::load(engine, &m.run_id) {
                Ok(v) => {
                    let (done, total) = v.progress();
                    r["progress"] = json!({"done": done, "total": total});
                    r["ledger"] = wire::ledger_json(&v);
                    r["waitingGates"] =
                        json!(v.gates.iter().map(|g| &g.step_id).collect::<Vec<_>>());
                }
                Err(e) => r["unreadable"] = json!(e.to_string()),
            }
            listed.push(r);
        }
        // runs waiting for a person first; the order is otherwise kept
        listed.sort_by_key(|r| r["waitingGates"].as_array().is_none_or(|g| g.is_empty()));
        Ok(json!({"version": 1, "runs": listed, "truncated": metas.len() > limit}))
    })
    .await?;
    Ok(axum::Json(body).into_response())
}

/// `GET /api/v1/runs/{run}`: the run as `query flow --format json` shows
/// it, with its audit events, artifacts manifests, patch records and
/// command receipts.
async fn run(State(ui): State<Ui>, Path(run): Path<String>) -> Result<Response, ApiError> {
    let body = with_engine(&ui, move |engine| {
        let v = load(engine, &run)?;
        let events = engine.events(&run).map_err(|e| engine_error(&run, e))?;
        let manifests = view::manifests(engine, &run).map_err(|e| engine_error(&run, e))?;
        let patches = view::patches(engine, &run).map_err(|e| engine_error(&run, e))?;
        let receipts = view::receipts(engine, &run).map_err(|e| engine_error(&run, e))?;
        Ok(json!({
            "version": 1,
            "run": wire::run_json(&v),
            "events": events,
            "manifests": manifests,
            "verify": verified(engine, &run),
            "patches": patches,
            "receipts": receipts,
        }))
    })
    .await?;
    Ok(axum::Json(body).into_response())
}

/// The recorded artifacts re-hashed in the run's workspace now, as
/// `stratumc verify RUN --format json` shows them; `null` when the run has
/// no recorded workspace or no artifacts, or it cannot be read (the reason).
fn verified(engine: &mut Engine, run: &str) -> Value {
    let root = match engine.workspace_of(run) {
        Ok(Some(root)) => root,
        Ok(None) => return Value::Null,
        Err(e) => return json!({"error": e.to_string()}),
    };
    let mut host = match StdHost::for_root(Some(std::path::Path::new(&root))) {
        Ok(h) => h,
        Err(e) => return json!({"error": e.to_string()}),
    };
    match view::verify(engine, run, &mut host) {
        Ok(files) if files.is_empty() => Value::Null,
        Ok(files) => wire::verified_json(run, &root, &files),
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// `GET /api/v1/runs/{run}/version`: the run's store version, which every
/// transition raises; a page polls it and reloads the run when it moves.
async fn version(State(ui): State<Ui>, Path(run): Path<String>) -> Result<Response, ApiError> {
    let body = with_engine(&ui, move |engine| {
        let v = engine
            .store()
            .version(&run)
            .map_err(|e| engine_error(&run, EngineError::Store(e)))?;
        Ok(json!({"version": 1, "runId": run, "storeVersion": v}))
    })
    .await?;
    Ok(axum::Json(body).into_response())
}

/// `GET /api/v1/runs/{run}/graph.svg`: the entry flow of the run's own plan
/// drawn as SVG, coloured by the run's step statuses.
async fn run_graph(State(ui): State<Ui>, Path(run): Path<String>) -> Result<Response, ApiError> {
    let svg = with_engine(&ui, move |engine| {
        let v = load(engine, &run)?;
        let plan = engine
            .plan(&v.meta.plan_hash)
            .map_err(|e| engine_error(&run, e))?;
        Ok(graph::svg(&plan.plan, &v))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response())
}

/// `GET /api/v1/gates`: every gate waiting in a running run, oldest run
/// first, as `query gates --format json` lists them.
async fn gates(State(ui): State<Ui>) -> Result<Response, ApiError> {
    let body = with_engine(&ui, move |engine| {
        // an unreadable run is left out here; its own page says why
        let (found, _unreadable) = view::waiting_gates(engine).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_error",
                e.to_string(),
            )
        })?;
        let gates: Vec<Value> = found
            .iter()
            .map(|w| wire::gate_json(&w.run_id, &w.flow, &w.gate))
            .collect();
        Ok(json!({"version": 1, "gates": gates}))
    })
    .await?;
    Ok(axum::Json(body).into_response())
}

// ----- decisions ------------------------------------------------------------

/// The body of a gate decision.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    /// `approve`, `revise` or `kill`.
    pub decision: String,
    /// Why (recorded with the decision).
    pub note: Option<String>,
    /// One of the gate's options (X10).
    pub choice: Option<String>,
    /// Decide only while the gate waits with this token.
    pub token: Option<String>,
}

fn decide_error(e: DecideError) -> ApiError {
    let (status, kind) = match &e {
        DecideError::UnknownStep { .. } => (StatusCode::NOT_FOUND, "unknown_step"),
        DecideError::NotAGate { .. } => (StatusCode::BAD_REQUEST, "not_a_gate"),
        DecideError::NotWaiting { .. } => (StatusCode::CONFLICT, "not_waiting"),
        DecideError::StaleToken { .. } => (StatusCode::CONFLICT, "stale_token"),
        DecideError::Changed { .. } => (StatusCode::CONFLICT, "changed"),
        DecideError::Refused { .. } => (StatusCode::BAD_REQUEST, "refused"),
        DecideError::Host { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "workspace_error"),
        DecideError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "store_error"),
    };
    ApiError::new(status, kind, e.to_string())
}

/// `POST /api/v1/runs/{run}/gates/{step}` with [`DecisionBody`]: decides
/// the waiting gate as a human, exactly as `stratumc gate` does; answers
/// the decision and what the run does next.
async fn decide(
    State(ui): State<Ui>,
    Path((run, step)): Path<(String, String)>,
    body: Result<axum::Json<DecisionBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let axum::Json(body) =
        body.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))?;
    let decision: &'static str = match body.decision.as_str() {
        "approve" => "approve",
        "revise" => "revise",
        "kill" | "reject" => "kill",
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("`{other}` is not a decision; use approve, revise or kill"),
            ));
        }
    };
    let reply = with_engine(&ui, move |engine| {
        let v = load(engine, &run)?;
        let answer = GateDecision {
            decision,
            note: body.note.as_deref(),
            choice: body.choice.as_deref(),
            // the UI decides the round it showed: operator::decide_gate passes its live token
            tokenless: false,
        };
        let d = operator::decide_gate(engine, &v, &step, body.token.as_deref(), &answer, "human")
            .map_err(decide_error)?;
        let mut doc = wire::decision_json((&run, &step, None), &answer, d.gate.round, &d.outcome);
        doc["warnings"] = json!(d.warnings);
        Ok(doc)
    })
    .await?;
    Ok(axum::Json(reply).into_response())
}

/// `POST /api/v1/runs/{run}/cancel`: cancels the run as `stratumc flow
/// cancel` does; `flowSettled` says whether it is cancelled now, `reason`
/// (`already_<status>`) why nothing changed.
async fn cancel(State(ui): State<Ui>, Path(run): Path<String>) -> Result<Response, ApiError> {
    let reply = with_engine(&ui, move |engine| {
        load(engine, &run)?;
        let mut host = StdHost {
            workspace: None,
            judge: None,
            judges: Default::default(),
            commands: Default::default(),
            stop: None,
        };
        let c = engine
            .cancel_flow(&run, &mut host)
            .map_err(|e| engine_error(&run, e))?;
        let mut doc = json!({
            "version": 1,
            "runId": run,
            "status": c.outcome.status.as_str(),
            "flowSettled": c.settled(),
        });
        if let Some(r) = c.reason() {
            doc["reason"] = json!(r);
        }
        Ok((c.outcome.status == RunStatus::Cancelled, doc))
    })
    .await?;
    let (settled, doc) = reply;
    let status = match settled {
        true => StatusCode::OK,
        false => StatusCode::CONFLICT,
    };
    Ok((status, axum::Json(doc)).into_response())
}
