//! `stratumc query flows [--status S] [--limit N [--before RUN]]`,
//! `stratumc query flow RUN`,
//! `stratumc query gates`: read-only listings of the run store
//! (`$STRATUM_HOME/stratum.db`), as human tables or versioned JSON.
//!
//! Owns: the query subcommands, their human tables and JSON documents
//! (`"version": 1`, documented in the README), and the helpers the other
//! operator commands share (opening the store, the unknown-run message,
//! times, money, tables, the run summary that `watch` redraws).
//! Must never: change a run (every read goes through `stratum_vm::view`),
//! or apply an execution rule.

use clap::Subcommand;
use serde_json::{Value, json};
use stratum_vm::engine::{Engine, EngineError};
use stratum_vm::store::{RunMeta, StoreError};
use stratum_vm::view::{self, GateView, RunView, StepView, wire};
pub use wire::{gate_json, ledger_json, run_json};

use crate::{Exit, Format};

/// Run statuses `--status` accepts.
pub const STATUSES: [&str; 6] = [
    "running",
    "completed",
    "failed",
    "killed",
    "budget_exhausted",
    "cancelled",
];

/// Arguments of `stratumc query`: what to query.
#[derive(clap::Args, Debug)]
pub struct QueryArgs {
    /// The query.
    #[command(subcommand)]
    pub what: Cmd,
}

/// What to query.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// List runs, newest first: id, status, flow, plan hash, started, updated.
    Flows {
        /// Only runs with this status.
        #[arg(long, value_parser = STATUSES)]
        status: Option<String>,
        /// Show at most N runs (a page, read through an index: its cost does not grow with the store); the output names the option that shows the next page.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        limit: Option<u64>,
        /// Start the page after this run (the last run of the previous page).
        #[arg(long, value_name = "RUN", requires = "limit")]
        before: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Full state of one run: steps, attempts, rounds, outputs, waiting gates, spend against budget.
    Flow {
        /// The run id (`run-…`).
        run: String,
        /// Show the manifests of the run's artifacts (X4): step, attempt, files with size and sha256, digest.
        #[arg(long, conflicts_with_all = ["receipts", "patches"])]
        artifacts: bool,
        /// Show the receipts of the declared commands its `exec` checks and `evaluate` steps ran (X12): step, command, argv, exit, ms, stdout sha256, output tail.
        #[arg(long, conflicts_with = "patches")]
        receipts: bool,
        /// Show the patch records of the run's scoped dispatches (X11): step, attempt, trees, files with status, bytes and sha256 before and after, and the diff.
        #[arg(long)]
        patches: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// The audit trail of one run: every event in order (time, step, type, fields); `--type` keeps one kind.
    Events {
        /// The run id (`run-…`).
        run: String,
        /// Only events of this type (`command_ran`, `scope_restored`, `routed_back`, …; docs/events.md).
        #[arg(long = "type")]
        kind: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Gates waiting for a decision, over every running run, with their tokens and rounds.
    Gates {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
}

/// Opens the engine on the default store; prints the error otherwise.
pub fn open() -> Result<Engine, Exit> {
    match stratum_vm::store::open_default() {
        Ok(s) => Ok(Engine::new(s)),
        Err(e) => {
            eprintln!("error: {e}");
            Err(Exit::Usage)
        }
    }
}

/// Whether an engine error means the run does not exist.
pub fn is_unknown_run(e: &EngineError) -> bool {
    matches!(e, EngineError::Store(StoreError::NotFound(_)))
}

/// The message for a run id that is not in the store.
pub fn unknown_run(run: &str) -> String {
    format!("error: no run `{run}` in the run store; list runs with `stratumc query flows`")
}

/// Reads a run; unknown runs and unreadable stores exit 2.
pub fn load(engine: &mut Engine, run: &str) -> Result<RunView, Exit> {
    view::load(engine, run).map_err(|e| {
        if is_unknown_run(&e) {
            eprintln!("{}", unknown_run(run));
        } else {
            eprintln!("error: run `{run}`: {e}");
        }
        Exit::Usage
    })
}

/// Runs a query.
pub fn run(args: &QueryArgs) -> Exit {
    let cmd = &args.what;
    let mut engine = match open() {
        Ok(e) => e,
        Err(code) => return code,
    };
    match cmd {
        Cmd::Flows {
            status,
            limit,
            before,
            format,
        } => {
            let page = limit.map(|limit| Page {
                limit,
                before: before.as_deref(),
            });
            flows(&mut engine, status.as_deref(), page, *format)
        }
        Cmd::Events { run, kind, format } => events(&mut engine, run, kind.as_deref(), *format),
        Cmd::Flow {
            run,
            format,
            artifacts: true,
            ..
        } => manifests(&mut engine, run, *format),
        Cmd::Flow {
            run,
            format,
            receipts: true,
            ..
        } => receipts(&mut engine, run, *format),
        Cmd::Flow {
            run,
            format,
            patches: true,
            ..
        } => patches(&mut engine, run, *format),
        Cmd::Flow { run, format, .. } => match load(&mut engine, run) {
            Ok(v) => {
                let text = match format {
                    Format::Json => format!("{}\n", json!({"version": 1, "run": run_json(&v)})),
                    Format::Human => summary(&v, true),
                };
                super::emit(&text);
                Exit::Ok
            }
            Err(code) => code,
        },
        Cmd::Gates { format } => gates(&mut engine, *format),
    }
}

/// Reads one list of an existing run (`fetch` on the engine); unknown runs
/// and unreadable stores exit 2 with the message said once.
fn run_list<T>(
    engine: &mut Engine,
    run: &str,
    fetch: impl FnOnce(&Engine) -> Result<T, EngineError>,
) -> Result<T, Exit> {
    load(engine, run)?;
    fetch(engine).map_err(|e| {
        eprintln!("error: run `{run}`: {e}");
        Exit::Usage
    })
}

/// `query flow RUN --patches`: the patch records the run recorded (X11).
fn patches(engine: &mut Engine, run: &str, format: Format) -> Exit {
    let list = match run_list(engine, run, |e| view::patches(e, run)) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let text = match format {
        Format::Json => {
            let list = serde_json::to_value(&list).unwrap_or(Value::Null);
            format!("{}\n", json!({"version": 1, "runId": run, "patches": list}))
        }
        Format::Human if list.is_empty() => format!("run {run} recorded no patches\n"),
        Format::Human => {
            let mut out = String::new();
            for p in &list {
                let who = p
                    .item_index
                    .map_or(p.step.clone(), |k| format!("{}/{k}", p.step));
                out.push_str(&format!(
                    "{who} attempt {}: {} files, tree {} -> {}\n",
                    p.attempt,
                    p.files.len(),
                    p.tree_before,
                    p.tree_after
                ));
                let rows = p
                    .files
                    .iter()
                    .map(|f| {
                        vec![
                            f.path.clone(),
                            f.status.as_str().to_string(),
                            f.bytes.to_string(),
                            f.before.clone().unwrap_or_else(|| "-".into()),
                            f.after.clone().unwrap_or_else(|| "-".into()),
                        ]
                    })
                    .collect();
                out.push_str(&table(
                    &["PATH", "STATUS", "BYTES", "BEFORE", "AFTER"],
                    rows,
                ));
                out.push_str(&p.diff);
                if p.diff_truncated {
                    out.push_str("… (diff cut at 64 KiB)\n");
                }
            }
            out
        }
    };
    super::emit(&text);
    Exit::Ok
}

/// `query flow RUN --artifacts`: the manifests the run recorded.
fn manifests(engine: &mut Engine, run: &str, format: Format) -> Exit {
    let list = match run_list(engine, run, |e| view::manifests(e, run)) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let text = match format {
        Format::Json => {
            let list = serde_json::to_value(&list).unwrap_or(Value::Null);
            format!(
                "{}\n",
                json!({"version": 1, "runId": run, "manifests": list})
            )
        }
        Format::Human if list.is_empty() => format!("run {run} recorded no artifacts\n"),
        Format::Human => {
            let mut out = String::new();
            for m in &list {
                let who = m
                    .item_index
                    .map_or(m.step.clone(), |k| format!("{}/{k}", m.step));
                out.push_str(&format!(
                    "{who} attempt {}: {} files, digest {}\n",
                    m.attempt,
                    m.files.len(),
                    m.digest
                ));
                let rows = m
                    .files
                    .iter()
                    .map(|f| vec![f.path.clone(), f.size.to_string(), f.sha256.clone()])
                    .collect();
                out.push_str(&table(&["PATH", "SIZE", "SHA256"], rows));
            }
            out
        }
    };
    super::emit(&text);
    Exit::Ok
}

/// `query events RUN [--type KIND]`: the audit trail as stored, in order.
fn events(engine: &mut Engine, run: &str, kind: Option<&str>, format: Format) -> Exit {
    let list: Vec<Value> = match run_list(engine, run, |e| e.audit(run)) {
        Ok(all) => all
            .into_iter()
            .filter(|e| kind.is_none_or(|k| e["type"] == k))
            .collect(),
        Err(code) => return code,
    };
    let text = match format {
        Format::Json => format!("{}\n", json!({"version": 1, "runId": run, "events": list})),
        Format::Human => list
            .iter()
            .map(|e| {
                let field = |k: &str| e.get(k).cloned();
                let (at, step, ty) = (field("at"), field("stepId"), field("type"));
                let detail = field("detail").unwrap_or(Value::Null);
                let show = |v: Option<Value>| match v {
                    Some(Value::String(s)) => s,
                    Some(Value::Null) | None => "-".to_owned(),
                    Some(other) => other.to_string(),
                };
                format!("{}  {}  {}  {}\n", show(at), show(step), show(ty), detail)
            })
            .collect(),
    };
    print!("{text}");
    Exit::Ok
}

/// `query flow RUN --receipts`: the declared commands the run ran (X12).
fn receipts(engine: &mut Engine, run: &str, format: Format) -> Exit {
    let list = match run_list(engine, run, |e| view::receipts(e, run)) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let text = match format {
        Format::Json => {
            let list = serde_json::to_value(&list).unwrap_or(Value::Null);
            format!(
                "{}\n",
                json!({"version": 1, "runId": run, "receipts": list})
            )
        }
        Format::Human if list.is_empty() => format!("run {run} ran no declared commands\n"),
        Format::Human => {
            let rows = list
                .iter()
                .map(|r| {
                    let c = &r.receipt;
                    let exit = match (c.exit, c.timed_out) {
                        (_, true) => "timed out".to_owned(),
                        (Some(code), _) => code.to_string(),
                        (None, false) => "killed".to_owned(),
                    };
                    vec![
                        r.step.clone().unwrap_or_default(),
                        c.command.clone(),
                        exit,
                        c.ms.to_string(),
                        short_hash(&c.stdout_sha256),
                        c.argv.join(" "),
                    ]
                })
                .collect();
            table(&["STEP", "COMMAND", "EXIT", "MS", "STDOUT", "ARGV"], rows)
        }
    };
    super::emit(&text);
    Exit::Ok
}

/// What `query flows --limit N [--before RUN]` asks for.
#[derive(Debug, Clone, Copy)]
struct Page<'a> {
    limit: u64,
    before: Option<&'a str>,
}

/// The runs to list and, for a page that has more after it, the run the
/// next page starts after.
fn listed(
    engine: &Engine,
    status: Option<&str>,
    page: Option<Page<'_>>,
) -> Result<(Vec<RunMeta>, Option<String>), StoreError> {
    let Some(page) = page else {
        return Ok((engine.store().list(status)?, None));
    };
    // one more than asked: whether there is a next page
    let mut runs = engine
        .store()
        .list_page(status, page.limit.saturating_add(1), page.before)?;
    let more = runs.len() as u64 > page.limit;
    runs.truncate(usize::try_from(page.limit).unwrap_or(usize::MAX));
    let next = more
        .then(|| runs.last().map(|m| m.run_id.clone()))
        .flatten();
    Ok((runs, next))
}

fn flows(
    engine: &mut Engine,
    status: Option<&str>,
    page: Option<Page<'_>>,
    format: Format,
) -> Exit {
    let (runs, next) = match listed(engine, status, page) {
        Ok(r) => r,
        Err(StoreError::NotFound(run)) => {
            eprintln!(
                "error: no run `{run}` in the run store to start the page after (`--before` takes a run id that `stratumc query flows` listed)"
            );
            return Exit::Usage;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    // X8: the run each one retries (an unreadable run shows none here; `query flow` says why)
    let links: Vec<Option<(String, Option<String>)>> = runs
        .iter()
        .map(|m| view::retry_link(engine, &m.run_id).ok().flatten())
        .collect();
    if format == Format::Json {
        let runs: Vec<Value> = runs
            .iter()
            .zip(&links)
            .map(|(m, link)| wire::listed_run_json(m, link.as_ref()))
            .collect();
        let doc = match page {
            // a page says where the next one starts (`null`: this was the last)
            Some(_) => json!({"version": 1, "runs": runs, "next": next}),
            None => json!({"version": 1, "runs": runs}),
        };
        super::emit(&format!("{doc}\n"));
        return Exit::Ok;
    }
    if runs.is_empty() {
        super::emit(&match status {
            Some(s) => format!("no runs with status {s}\n"),
            None => "no runs\n".to_string(),
        });
        return Exit::Ok;
    }
    let any_link = links.iter().any(Option::is_some);
    let rows = runs
        .iter()
        .zip(&links)
        .map(|(m, link)| {
            let mut row = vec![
                m.run_id.clone(),
                m.status.clone(),
                m.flow.clone(),
                short_hash(&m.plan_hash),
                time(m.created_ms),
                time(m.updated_ms),
            ];
            if any_link {
                row.push(link_text(link.as_ref()));
            }
            row
        })
        .collect();
    let mut headers = vec!["RUN", "STATUS", "FLOW", "PLAN", "STARTED", "UPDATED"];
    if any_link {
        headers.push("RETRY OF");
    }
    let mut text = table(&headers, rows);
    if let (Some(page), Some(next)) = (page, next) {
        let status = status.map_or_else(String::new, |s| format!(" --status {s}"));
        text.push_str(&format!(
            "next page: stratumc query flows{status} --limit {} --before {next}\n",
            page.limit
        ));
    }
    super::emit(&text);
    Exit::Ok
}

/// `RUN` or `RUN from STEP`; `-` for an ordinary run.
fn link_text(link: Option<&(String, Option<String>)>) -> String {
    match link {
        None => "-".to_string(),
        Some((run, None)) => run.clone(),
        Some((run, Some(from))) => format!("{run} from {from}"),
    }
}

fn gates(engine: &mut Engine, format: Format) -> Exit {
    let (waiting, unreadable) = match view::waiting_gates(engine) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    // a run that is unreadable is reported, the others are still listed
    for (run, e) in &unreadable {
        eprintln!("warning: run `{run}`: {e}");
    }
    let found: Vec<(&str, &str, &GateView)> = waiting
        .iter()
        .map(|w| (w.run_id.as_str(), w.flow.as_str(), &w.gate))
        .collect();
    if format == Format::Json {
        let gates: Vec<Value> = found.iter().map(|(r, f, g)| gate_json(r, f, g)).collect();
        super::emit(&format!("{}\n", json!({"version": 1, "gates": gates})));
        return Exit::Ok;
    }
    if found.is_empty() {
        super::emit("no gates waiting\n");
        return Exit::Ok;
    }
    let rows = found
        .iter()
        .map(|(run, flow, g)| {
            vec![
                run.to_string(),
                flow.to_string(),
                g.step_id.clone(),
                rounds(g.round, g.max_rounds),
                rounds(g.gate_rounds, g.gate_max_rounds),
                g.token.clone(),
            ]
        })
        .collect();
    let mut text = table(
        &["RUN", "FLOW", "GATE", "ROUND", "GATE ROUNDS", "TOKEN"],
        rows,
    );
    for (_, _, g) in &found {
        if let Some(options) = g.options.as_deref().filter(|o| !o.is_empty()) {
            text.push_str(&format!(
                "options of {}: {}\n",
                g.step_id,
                options.join(", ")
            ));
        }
    }
    text.push_str(
        "decide with: stratumc gate approve|revise|reject RUN GATE [--note TEXT] [--choice OPTION]\n",
    );
    super::emit(&text);
    Exit::Ok
}

// ----- human -----------------------------------------------------------------

/// `n/max`, or `n` without a cap.
pub fn rounds(n: u32, max: Option<u32>) -> String {
    match max {
        Some(m) => format!("{n}/{m}"),
        None => n.to_string(),
    }
}

/// The first 12 hex digits of a plan hash.
pub fn short_hash(h: &str) -> String {
    h.chars().take(12).collect()
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil date from days since 1970-01-01 (proleptic Gregorian, era-based)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn usd(x: f64) -> String {
    if x > 0.0 && x < 0.01 {
        format!("${x:.4}")
    } else {
        format!("${x:.2}")
    }
}

/// `spent: $0.02 of $8.00 · dispatches 2 of 15 · tokens 1600 · time 1.8 s`.
pub fn spend_line(v: &RunView) -> String {
    let b = v.budget.as_ref();
    let s = &v.spent;
    let mut parts = Vec::new();
    let cap = |spent: String, max: Option<String>| match max {
        Some(m) => format!("{spent} of {m}"),
        None => spent,
    };
    if s.usd > 0.0 || b.is_some_and(|b| b.usd.is_some()) {
        parts.push(cap(usd(s.usd), b.and_then(|b| b.usd).map(usd)));
    }
    if s.dispatches > 0.0 || b.is_some_and(|b| b.dispatches.is_some()) {
        parts.push(format!(
            "dispatches {}",
            cap(
                format!("{}", s.dispatches),
                b.and_then(|b| b.dispatches).map(|d| d.to_string())
            )
        ));
    }
    if s.tokens > 0.0 || b.is_some_and(|b| b.tokens.is_some()) {
        parts.push(format!(
            "tokens {}",
            cap(
                format!("{}", s.tokens),
                b.and_then(|b| b.tokens).map(|d| d.to_string())
            )
        ));
    }
    if s.ms > 0.0 || b.is_some_and(|b| b.ms.is_some()) {
        let secs = |ms: f64| format!("{:.1} s", ms / 1000.0);
        parts.push(format!(
            "time {}",
            cap(secs(s.ms), b.and_then(|b| b.ms).map(|m| secs(m as f64)))
        ));
    }
    if parts.is_empty() {
        "spent: nothing yet".to_string()
    } else {
        format!("spent: {}", parts.join(" · "))
    }
}

/// `[########------------] 2/5 steps done`.
pub fn progress_bar(v: &RunView) -> String {
    let (done, total) = v.progress();
    const WIDTH: usize = 20;
    let filled = (done * WIDTH).checked_div(total).unwrap_or(WIDTH);
    format!(
        "[{}{}] {done}/{total} steps done",
        "#".repeat(filled),
        "-".repeat(WIDTH - filled)
    )
}

/// What a step shows in the OUTPUT column: items, output, failure or decision.
pub fn step_note(s: &StepView, width: usize) -> String {
    let mut parts = Vec::new();
    if let Some(c) = s.items {
        let mut t = format!("{}/{} items done", c.succeeded, c.total);
        if c.failed > 0 {
            t.push_str(&format!(", {} failed", c.failed));
        }
        if c.in_flight > 0 {
            t.push_str(&format!(", {} in flight", c.in_flight));
        }
        parts.push(t);
    }
    if let Some(from) = &s.reused_from {
        parts.push(format!("reused from {from}"));
    }
    if let Some(d) = &s.decision {
        parts.push(format!("decided {d}"));
    }
    if let Some(o) = &s.output {
        parts.push(view::summarize(o, width));
    } else if let Some(f) = &s.failure {
        parts.push(format!(
            "failure: {}",
            view::summarize(&Value::from(f.as_str()), width)
        ));
    }
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join("; ")
    }
}

/// Attempts (and iterations) of a step; `-` for steps that make none.
pub fn attempts(s: &StepView) -> String {
    match (s.attempts, s.iterations) {
        (0, _) if matches!(s.kind, "gate" | "set" | "run") => "-".to_string(),
        (a, 0) => a.to_string(),
        (a, i) => format!("{a} ({i} iter)"),
    }
}

/// The step table of a run.
pub fn step_table(v: &RunView) -> String {
    let rows = v
        .steps
        .iter()
        .map(|s| {
            let round = match s.gate_rounds {
                Some((n, max)) => rounds(n, max),
                None if s.resets > 0 => format!("reset {}", s.resets),
                None => "-".to_string(),
            };
            vec![
                format!("{}{}", "  ".repeat(s.depth as usize), s.id),
                s.kind.to_string(),
                s.status.as_str().to_string(),
                attempts(s),
                round,
                step_note(s, 60),
            ]
        })
        .collect();
    table(
        &["STEP", "KIND", "STATUS", "ATTEMPTS", "ROUND", "OUTPUT"],
        rows,
    )
}

/// The human view of a run (`query flow`; `watch` redraws it without times).
pub fn summary(v: &RunView, with_times: bool) -> String {
    let mut out = format!(
        "run {}  flow {}  plan {}\n",
        v.meta.run_id,
        v.meta.flow,
        short_hash(&v.meta.plan_hash)
    );
    out.push_str(&format!(
        "status: {}  round {}\n",
        v.status.as_str(),
        rounds(v.round, v.max_rounds)
    ));
    if with_times {
        out.push_str(&format!(
            "started {}  updated {}\n",
            time(v.meta.created_ms),
            time(v.meta.updated_ms)
        ));
    }
    out.push_str(&format!("{}\n", progress_bar(v)));
    out.push_str(&format!("{}\n", spend_line(v)));
    if let Some(f) = &v.failure {
        out.push_str(&format!("failure: {f}\n"));
    }
    if let Some((old, from)) = &v.retry_of {
        let from = from
            .as_ref()
            .map(|s| format!(" from `{s}`"))
            .unwrap_or_default();
        out.push_str(&format!("retry of {old}{from}\n"));
    }
    if !v.retried_by.is_empty() {
        out.push_str(&format!("retried by {}\n", v.retried_by.join(", ")));
    }
    out.push('\n');
    out.push_str(&step_table(v));
    if !v.gates.is_empty() {
        out.push_str("\nwaiting gates:\n");
        for g in &v.gates {
            out.push_str(&format!(
                "  {}  round {}  token {}\n    decide: stratumc gate approve|revise|reject {} {} [--note TEXT]\n",
                g.step_id,
                rounds(g.round, g.max_rounds),
                g.token,
                v.meta.run_id,
                g.step_id
            ));
        }
    }
    if !v.overdue.is_empty() {
        out.push_str("\noverdue dispatches (orphaned when a driver next touches the run):\n");
        for o in &v.overdue {
            out.push_str(&format!(
                "  {}  attempt {}  lease {} ms, {} ms late\n",
                o.id, o.attempt, o.timeout_ms, o.late_ms
            ));
        }
    }
    if let Some(o) = &v.output {
        out.push_str(&format!("\noutput: {}\n", view::summarize(o, 200)));
    }
    out
}

/// Left-aligned columns separated by two spaces; no trailing blanks.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let head = std::iter::once(headers.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for r in head.chain(rows) {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(c);
            let pad = widths[i].saturating_sub(c.chars().count());
            line.push_str(&" ".repeat(pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(time(0), "1970-01-01 00:00:00");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(time(1_767_225_599_999), "2025-12-31 23:59:59");
        assert_eq!(time(1_709_210_096_000), "2024-02-29 12:34:56");
    }

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["A", "LONGER"],
            vec![vec!["xyz".into(), "1".into()], vec!["é".into(), "".into()]],
        );
        assert_eq!(t, "A    LONGER\nxyz  1\né\n");
    }
}
