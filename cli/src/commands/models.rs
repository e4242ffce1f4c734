//! `stratumc models [--format json]`: who would run a dispatch here — every
//! agent with its connector (and whether its CLI is on `PATH`) or command,
//! every judge runner, and their cost profiles (issue 16 §1).
//!
//! Owns: reading the configuration a run started here would get (the
//! operator's merged with the workspace's) and printing it, with the cost
//! model's profiles (built-in figures under the configured ones).
//! Must never: start a CLI or a judge (finding one on `PATH` is all it
//! checks), or decide which runner a dispatch gets (that is `run`'s).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use stratum_compiler::cost::{CostConfig, Profile};
use stratum_vm::config::{self, Config, Figures};
use stratum_vm::connector::Choice;
use stratum_vm::plan::Agent;

use crate::{Exit, Format};

/// Arguments of `stratumc models`.
#[derive(clap::Args, Debug)]
pub struct ModelsArgs {
    /// The workspace whose `stratum.toml` applies (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// The operator's configuration (default: `$STRATUM_HOME/stratum.toml` when it exists).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// `json` prints one JSON object on stdout.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

/// The first executable called `program` on `PATH`.
pub fn on_path(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The cost model's profile (the built-in figures under `stratum.toml`'s)
/// and which of its figures `stratum.toml` sets.
fn profile(p: Profile, f: &Figures) -> Value {
    let set: Vec<&str> = [
        ("p_success", f.p_success),
        ("tokens", f.tokens),
        ("usd", f.usd),
        ("ms", f.ms),
    ]
    .iter()
    .filter(|(_, v)| v.is_some())
    .map(|(k, _)| *k)
    .collect();
    json!({"p_success": p.p_success, "tokens": p.tokens, "usd": p.usd, "ms": p.ms, "configured": set})
}

fn agent_doc(config: &Config, cost: &CostConfig, agent: Agent) -> Value {
    let table = config.agents.get(&agent).cloned().unwrap_or_default();
    let mut doc = json!({
        "timeoutMs": config.agent_timeout(agent).as_millis() as u64,
        "profile": profile(cost.agent(agent), &table.figures()),
    });
    if let Some((kind, s)) = table.connector_settings() {
        let found = on_path(kind.program());
        doc["runner"] = json!("connector");
        doc["connector"] = json!(kind.as_str());
        doc["program"] = json!(kind.program());
        doc["found"] = json!(found.is_some());
        doc["path"] = json!(found.as_ref().map(|p| p.display().to_string()));
        if found.is_none() {
            doc["install"] = json!(kind.install());
        }
        doc["settings"] = json!({
            "model": s.model,
            "allowed_tools": table.allowed_tools,
            "permission_mode": s.permission_mode,
            "max_turns": s.max_turns,
            "sandbox": s.sandbox,
            "reasoning_effort": s.reasoning_effort,
        });
    } else if let Some(cmd) = &table.command {
        doc["runner"] = json!("command");
        doc["command"] = json!(cmd);
    } else {
        doc["runner"] = json!(null);
    }
    doc
}

fn judges_doc(config: &Config, cost: &CostConfig) -> Value {
    let runners = config.judge_runners();
    let rows: Vec<Value> = runners
        .iter()
        .map(|(name, r)| {
            let figures = config
                .judge_section(name.as_deref())
                .map(|s| s.figures())
                .unwrap_or_default();
            let p = cost.judge_named(name.as_deref());
            json!({"name": name, "url": r.url, "model": r.model, "timeoutMs": r.timeout_ms, "profile": profile(p, &figures)})
        })
        .collect();
    Value::Array(rows)
}

fn human(doc: &Value) -> String {
    let mut out = String::new();
    let num = |v: &Value| v.as_f64().map_or("-".to_string(), |n| n.to_string());
    for agent in Agent::ALL {
        let a = &doc["agents"][agent.as_str()];
        let runner = match a["runner"].as_str() {
            Some("connector") => {
                let place = match a["path"].as_str() {
                    Some(p) => format!("found at {p}"),
                    None => format!(
                        "`{}` not found on PATH: {}",
                        a["program"].as_str().unwrap_or(""),
                        a["install"].as_str().unwrap_or("")
                    ),
                };
                format!(
                    "connector {} ({place})",
                    a["connector"].as_str().unwrap_or("")
                )
            }
            Some("command") => format!("command `{}`", a["command"].as_str().unwrap_or("")),
            _ => "no runner (pass `--agent CMD` or set a connector)".to_string(),
        };
        let p = &a["profile"];
        out.push_str(&format!(
            "agent {}: {runner}; timeout {} ms; profile p_success {}, tokens {}, usd {}, ms {}\n",
            agent.as_str(),
            a["timeoutMs"],
            num(&p["p_success"]),
            num(&p["tokens"]),
            num(&p["usd"]),
            num(&p["ms"])
        ));
    }
    let judges = doc["judges"].as_array().cloned().unwrap_or_default();
    if judges.is_empty() {
        out.push_str("judges: none configured (judged checks fail closed)\n");
    }
    for j in judges {
        out.push_str(&format!(
            "judge {}: {} at {}; usd {}\n",
            j["name"].as_str().unwrap_or("(default)"),
            j["model"].as_str().unwrap_or(""),
            j["url"].as_str().unwrap_or(""),
            num(&j["profile"]["usd"])
        ));
    }
    out
}

/// Runs the command.
pub fn run(args: &ModelsArgs) -> Exit {
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let root: &Path = args.workspace.as_deref().unwrap_or(&here);
    let resolved = match config::for_run(args.config.as_deref(), Some(root)) {
        Ok(r) => r,
        Err(e) => return super::usage(e),
    };
    let c = &resolved.config;
    let cost = CostConfig::from_config(c);
    let agents: serde_json::Map<String, Value> = Agent::ALL
        .iter()
        .map(|a| (a.as_str().to_string(), agent_doc(c, &cost, *a)))
        .collect();
    let doc = json!({"version": 1, "agents": agents, "judges": judges_doc(c, &cost)});
    match args.format {
        Format::Json => super::emit(&format!("{doc}\n")),
        Format::Human => super::emit(&human(&doc)),
    }
    Exit::Ok
}
