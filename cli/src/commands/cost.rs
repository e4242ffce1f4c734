//! `stratumc cost SPEC`: dispatch, token, dollar and time estimates of a flow
//! before any run.
//!
//! Owns: reading the spec, the inputs (`--inputs JSON|@file`) and the agent
//! profiles (`--config`, else `./stratum.toml` when it exists, else the
//! built-in defaults), choosing the flow, and printing the human table or the
//! versioned JSON document.
//! With `--history`: the observed figures of the run store's past runs of
//! the same compiled steps (`stratum_vm::history`, by step hash, the newest
//! [`stratum_vm::history::MAX_RUNS`] runs), handed to the cost model as
//! plain data; a step without history keeps its profile and says so.
//! Must never: estimate anything itself — every figure comes from
//! `stratum_compiler::cost::analyze_cost` — or write to the run store.
//!
//! JSON (`--format json`, one document on stdout):
//! `{"version": 1, "flow": F, "dispatches": E, "tokens": E, "usd": E,
//! "ms": E, "agent_ms": E, "decisions": N, "p_success": P,
//! "steps": [{"id", "construct", "entries", "dispatches": E, "tokens": E,
//! "usd": E, "ms": E, "basis": {"runs", "dispatches"}|null}],
//! "budget": {"declared", "exceeded", "unchecked"}, "notes": [..],
//! "history"?: {"runs_scanned", "runs_skipped", "max_runs"}}` where
//! `E = {"min", "expected", "worst": N|null, "worst_symbolic": S|null,
//! "min_symbolic": S|null, "expected_symbolic": S|null}`; a step's `ms` is
//! its dispatch and judge times added up (the flow's `agent_ms` is their
//! sum); `basis` is what its observed figures rest on (`null`: profile);
//! `history` is there only with `--history`.

use std::io::Write;
use std::path::{Path, PathBuf};

use stratum_compiler::cost::{
    CostConfig, Estimate, FlowCost, StepCost, analyze_cost, format_number,
};

use super::usage;
use crate::{Exit, Format};

/// Version of the JSON document.
pub const JSON_VERSION: u32 = 1;

/// Arguments of `stratumc cost`.
#[derive(clap::Args, Debug)]
pub struct CostArgs {
    /// The spec file.
    pub spec: PathBuf,
    /// The flow (default: the entry flow).
    #[arg(long)]
    pub flow: Option<String>,
    /// The flow's input object: JSON text, or `@FILE` to read it from a file.
    #[arg(long)]
    pub inputs: Option<String>,
    /// Agent profiles (default: `./stratum.toml` when it exists, else built-in defaults).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Use the run store's past runs of the same compiled steps (by step
    /// hash, the newest 200 runs) for observed pass rates, tokens, dollars
    /// and time instead of the profiles (a spec's own `cost:` hint still wins).
    #[arg(long)]
    pub history: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

/// What `--history` read from the store.
#[derive(Debug, Clone, Copy)]
pub struct Scanned {
    runs_scanned: usize,
    runs_skipped: usize,
    max_runs: usize,
}

impl Scanned {
    fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "runs_scanned": self.runs_scanned,
            "runs_skipped": self.runs_skipped,
            "max_runs": self.max_runs,
        })
    }
}

/// Runs the command.
pub fn run(args: &CostArgs) -> Exit {
    let shown = args.spec.display().to_string();
    let analysis = match super::error_free_spec(
        &args.spec,
        "no cost computed",
        args.format == Format::Human,
    ) {
        Ok(a) => a,
        Err(exit) => return exit,
    };
    let Some(ir) = analysis.ir.as_ref() else {
        return Exit::Errors;
    };

    let (config, config_name) = match load_config(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };

    let flow = match flow_of(ir, args.flow.as_deref(), &shown) {
        Ok(f) => f,
        Err(e) => return usage(e),
    };

    let inputs = match args.inputs.as_deref().map(super::flow_inputs).transpose() {
        Ok(v) => v,
        Err(e) => return usage(e),
    };

    let (config, scanned) = if args.history {
        match with_history(&analysis, config) {
            Ok(x) => (x.0, Some(x.1)),
            Err(e) => return usage(e),
        }
    } else {
        (config, None)
    };

    let cost = analyze_cost(ir, flow, inputs.as_ref(), &config);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.format {
        Format::Json => {
            let text = serde_json::to_string_pretty(&json_doc(&cost, scanned)).unwrap_or_default();
            let _ = writeln!(out, "{text}");
        }
        Format::Human => {
            let _ = out.write_all(human(&cost, &shown, &config_name, scanned).as_bytes());
        }
    }
    let _ = out.flush();
    Exit::Ok
}

/// The flow named `name` of the spec `shown` (default: its entry flow).
pub fn flow_of(
    ir: &stratum_compiler::ir::Ir,
    name: Option<&str>,
    shown: &str,
) -> Result<stratum_compiler::ir::FlowId, String> {
    let Some(name) = name else {
        return Ok(ir.entry);
    };
    match ir.flow(name) {
        Some((id, _)) => Ok(id),
        None => {
            let names: Vec<String> = ir.flows.iter().map(|f| format!("`{}`", f.name)).collect();
            Err(format!(
                "no flow `{name}` in {shown}; its flows are {}",
                names.join(", ")
            ))
        }
    }
}

/// The JSON document of an estimate (the module's doc gives its shape),
/// also the Python package's `stratumc.cost`.
pub fn json_doc(cost: &FlowCost, scanned: Option<Scanned>) -> serde_json::Value {
    let mut doc = serde_json::Map::new();
    doc.insert("version".into(), JSON_VERSION.into());
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(cost) {
        doc.extend(fields);
    }
    if let Some(s) = scanned {
        doc.insert("history".into(), s.to_json());
    }
    serde_json::Value::Object(doc)
}

/// The profiles with what the store's past runs show of the spec's
/// compiled steps (matched by step hash), as the cost model's plain data.
pub fn with_history(
    analysis: &stratum_compiler::analysis::Analysis,
    config: CostConfig,
) -> Result<(CostConfig, Scanned), String> {
    use std::collections::{BTreeMap, BTreeSet};
    use stratum_compiler::cost::{Basis, Observed};
    let plan = stratum_compiler::build::build_plan(analysis)
        .ok_or_else(|| "the spec could not be built; no history read".to_string())?;
    // (flow name, step id) → step hash
    let mut keys = Vec::new();
    for (f, flow) in plan.flows.iter().enumerate() {
        for (s, step) in flow.steps.iter().enumerate() {
            let hash = stratum_vm::plan::hash::step_hash(&plan, f as u32, s as u32);
            if let Some(h) = hash {
                let key = (
                    plan.str(flow.name).to_string(),
                    plan.str(step.id).to_string(),
                );
                keys.push((key, h));
            }
        }
    }
    let wanted: BTreeSet<String> = keys.iter().map(|(_, h)| h.clone()).collect();
    let store = stratum_vm::store::open_default().map_err(|e| e.to_string())?;
    let mut engine = stratum_vm::engine::Engine::new(store);
    let seen = stratum_vm::history::observe(&mut engine, &wanted)
        .map_err(|e| format!("cannot read the run store's history: {e}"))?;
    let mut observed = BTreeMap::new();
    for (key, hash) in keys {
        let Some(h) = seen.steps.get(&hash) else {
            continue;
        };
        observed.insert(
            key,
            Observed {
                tokens: h.per_dispatch(h.tokens),
                usd: h.per_dispatch(h.usd),
                ms: h.per_dispatch(h.ms),
                p: h.pass_rate(),
                judge_tokens: h.judge_tokens_per_call(),
                basis: Basis {
                    runs: h.runs,
                    dispatches: h.dispatches,
                },
            },
        );
    }
    let scanned = Scanned {
        runs_scanned: seen.runs_scanned,
        runs_skipped: seen.runs_skipped,
        max_runs: stratum_vm::history::MAX_RUNS,
    };
    Ok((config.with_history(observed), scanned))
}

/// The profiles and where they come from.
pub fn load_config(explicit: Option<&Path>) -> Result<(CostConfig, String), String> {
    let path: PathBuf = match explicit {
        Some(p) => p.to_path_buf(),
        None => {
            let default = PathBuf::from("stratum.toml");
            if !default.is_file() {
                return Ok((CostConfig::default(), "built-in defaults".to_string()));
            }
            default
        }
    };
    let config = stratum_vm::config::load_file(&path).map_err(|e| e.to_string())?;
    Ok((CostConfig::from_config(&config), path.display().to_string()))
}

/// Left-aligned first column, right-aligned others.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn min_text(e: &Estimate) -> String {
    e.min_symbolic
        .clone()
        .unwrap_or_else(|| format_number(e.min))
}

fn expected_text(e: &Estimate) -> String {
    e.expected_symbolic
        .clone()
        .unwrap_or_else(|| format_number(e.expected))
}

fn worst_text(e: &Estimate) -> String {
    match (e.worst, &e.worst_symbolic) {
        (Some(w), _) => format_number(w),
        (None, Some(s)) => s.clone(),
        (None, None) => "?".to_string(),
    }
}

/// `expected / worst` of one step's dimension.
fn pair(e: &Estimate) -> String {
    format!("{} / {}", expected_text(e), worst_text(e))
}

/// What a step's figures rest on, for the `--history` column.
fn basis_text(s: &StepCost) -> String {
    match s.basis {
        Some(b) => format!(
            "history: {} run{}, {} dispatch{}",
            b.runs,
            if b.runs == 1 { "" } else { "s" },
            b.dispatches,
            if b.dispatches == 1 { "" } else { "es" }
        ),
        None => "profile (no history)".to_string(),
    }
}

fn human(cost: &FlowCost, shown: &str, config: &str, scanned: Option<Scanned>) -> String {
    let mut out = format!(
        "cost of flow `{}` in {shown} (profiles: {config})\n",
        cost.flow
    );
    if let Some(s) = scanned {
        out.push_str(&format!(
            "history: {} past run{} read (the newest {} at most), {} unreadable\n",
            s.runs_scanned,
            if s.runs_scanned == 1 { "" } else { "s" },
            s.max_runs,
            s.runs_skipped
        ));
    }
    out.push('\n');
    let mut head: Vec<String> = [
        "step",
        "construct",
        "entries",
        "worst dispatches",
        "tokens (expected / worst)",
        "usd (expected / worst)",
        "ms summed (expected / worst)",
    ]
    .map(String::from)
    .to_vec();
    if scanned.is_some() {
        head.push("figures".to_string());
    }
    let mut rows = vec![head];
    for s in &cost.steps {
        let mut row = vec![
            s.id.clone(),
            s.construct.clone(),
            s.entries.to_string(),
            worst_text(&s.dispatches),
            pair(&s.tokens),
            pair(&s.usd),
            pair(&s.ms),
        ];
        if scanned.is_some() {
            row.push(basis_text(s));
        }
        rows.push(row);
    }
    out.push_str(&table(&rows));
    out.push('\n');
    let mut rows = vec![vec![
        String::new(),
        "min".to_string(),
        "expected".to_string(),
        "worst".to_string(),
    ]];
    for (name, e) in [
        ("dispatches", &cost.dispatches),
        ("tokens", &cost.tokens),
        ("usd", &cost.usd),
        ("ms", &cost.ms),
        ("ms summed", &cost.agent_ms),
    ] {
        rows.push(vec![
            name.to_string(),
            min_text(e),
            expected_text(e),
            worst_text(e),
        ]);
    }
    out.push_str(&table(&rows));
    out.push_str(&format!(
        "\nms is wall-clock time without human waits; ms summed adds up every dispatch (what a budget's `ms` meters).\nhuman decisions: at most {}; chance that a run completes: about {}%\n",
        cost.decisions,
        format_number((cost.p_success * 1000.0).round() / 10.0)
    ));

    out.push('\n');
    let b = &cost.budget;
    match &b.declared {
        None => out.push_str("budget: none declared for the flow\n"),
        Some(l) => {
            let mut parts = Vec::new();
            if let Some(v) = l.dispatches {
                parts.push(format!("dispatches {v}"));
            }
            if let Some(v) = l.tokens {
                parts.push(format!("tokens {v}"));
            }
            if let Some(v) = l.usd {
                parts.push(format!("usd {}", format_number(v)));
            }
            if let Some(v) = l.ms {
                parts.push(format!("ms {v}"));
            }
            out.push_str(&format!("budget: {}\n", parts.join(", ")));
        }
    }
    let owner = |step: &Option<String>| match step {
        None => "flow budget".to_string(),
        Some(s) => format!("budget of step `{s}` (per entry)"),
    };
    for x in &b.exceeded {
        out.push_str(&format!(
            "  exceeded: {} {}: worst {} > {}",
            owner(&x.step),
            x.dimension,
            format_number(x.worst),
            format_number(x.limit)
        ));
        if let Some(d) = &x.dominant_step {
            out.push_str(&format!(
                "; step `{d}` contributes {}%",
                format_number((x.share * 1000.0).round() / 10.0)
            ));
        }
        out.push('\n');
    }
    for u in &b.unchecked {
        out.push_str(&format!(
            "  not checked: {} {}: worst {} (give --inputs to check it)\n",
            owner(&u.step),
            u.dimension,
            u.worst_symbolic
        ));
    }
    if b.exceeded.is_empty() && b.unchecked.is_empty() && b.declared.is_some() {
        out.push_str("  within: the worst case fits every declared limit\n");
    }
    for n in &cost.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}
