//! The merge of the operator's file and the workspace's: the operator's
//! judge, commands and timeouts win, the workspace may only narrow them.
//!
//! Owns: [`merge`] and every [`Widening`] it refuses.
//! Must never: read files (callers hand it two parsed [`Config`]s).

use super::*;

// ---------------------------------------------------------------------------
// The merge: the operator's file wins, the workspace's may only narrow it

/// One key by which a workspace file would widen the operator's.
#[derive(Debug, Clone, PartialEq)]
pub struct Widening {
    /// Dotted path of the key (`judge.url`, `agents.codex.command`).
    pub path: String,
    /// The workspace's value, as written in TOML.
    pub workspace: String,
    /// The operator's value (`None`: the operator configures none).
    pub operator: Option<String>,
    /// What the workspace may do with the key instead.
    pub rule: &'static str,
}

impl fmt::Display for Widening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = self.operator.as_deref().unwrap_or("none");
        write!(
            f,
            "`{}` = {} (the operator's: {op}; {})",
            self.path, self.workspace, self.rule
        )
    }
}

pub(super) const SAME: &str = "it may only repeat the operator's value";
pub(super) const NO_ADD: &str = "it cannot add one";
pub(super) const SHORTER: &str = "it may only shorten it";
pub(super) const STORE: &str =
    "the run store is the operator's to choose (STRATUM_STORE or $STRATUM_HOME/stratum.toml)";

/// Merges the operator's configuration with a workspace's: the operator's
/// judge, agent commands and timeouts stand, and the workspace may only
/// narrow them — repeat a value unchanged, shorten a timeout, or name a
/// subset of the operator's commands (then only those agents keep one).
/// Any other judge or command key of the workspace is a [`Widening`]; all of
/// them are returned. Cost figures are estimates, not trust: the operator's
/// win, the workspace's fill the gaps.
pub fn merge(operator: &Config, workspace: &Config) -> Result<Config, Vec<Widening>> {
    let mut out = operator.clone();
    let mut widenings = Vec::new();
    merge_agents(&mut out, operator, workspace, &mut widenings);
    if let Some(w) = &workspace.judge {
        let judge = out.judge.get_or_insert_with(JudgeSection::default);
        merge_judge("judge", judge, operator.judge.as_ref(), w, &mut widenings);
    }
    for (name, w) in &workspace.judges {
        let judge = out.judges.entry(name.clone()).or_default();
        let prefix = format!("judges.{name}");
        merge_judge(&prefix, judge, operator.judges.get(name), w, &mut widenings);
    }
    for (name, w) in &workspace.commands {
        merge_command(
            &mut out,
            name,
            operator.commands.get(name),
            w,
            &mut widenings,
        );
    }
    if workspace.store.is_some() {
        widenings.push(Widening {
            path: "store.url".to_owned(),
            workspace: "(a store)".to_owned(),
            operator: operator.store.as_ref().map(|s| quote(&s.url)),
            rule: STORE,
        });
    }
    if widenings.is_empty() {
        Ok(out)
    } else {
        Err(widenings)
    }
}

pub(super) fn merge_agents(
    out: &mut Config,
    operator: &Config,
    workspace: &Config,
    bad: &mut Vec<Widening>,
) {
    let allowed = operator.commands();
    let named = workspace.commands();
    for (agent, command) in &named {
        if allowed.get(agent) != Some(command) {
            bad.push(Widening {
                path: format!("agents.{}.command", agent.as_str()),
                workspace: quote(command),
                operator: allowed.get(agent).map(|c| quote(c)),
                rule: if allowed.contains_key(agent) {
                    SAME
                } else {
                    NO_ADD
                },
            });
        }
    }
    for (agent, w) in &workspace.agents {
        let theirs = operator.agents.get(agent).cloned().unwrap_or_default();
        connector_widenings(agent.as_str(), w, &theirs, bad);
        let o = out.agents.entry(*agent).or_default();
        if let Some(t) = w.timeout_ms {
            let limit = operator.agent_timeout(*agent).as_millis() as u64;
            if t > limit {
                bad.push(Widening {
                    path: format!("agents.{}.timeout_ms", agent.as_str()),
                    workspace: t.to_string(),
                    operator: Some(limit.to_string()),
                    rule: SHORTER,
                });
            } else {
                o.timeout_ms = Some(t);
            }
        }
        fill_figures(o, w);
    }
    if !named.is_empty() {
        for (agent, o) in out.agents.iter_mut() {
            if !named.contains_key(agent) {
                o.command = None;
            }
        }
    }
}

/// A workspace's connector keys may only repeat the operator's (a
/// connector runs a CLI with the operator's credentials, like `command`).
pub(super) fn connector_widenings(
    agent: &str,
    w: &AgentConfig,
    o: &AgentConfig,
    bad: &mut Vec<Widening>,
) {
    let (mut wk, mut ok) = (Vec::new(), Vec::new());
    for (c, keys) in [(w, &mut wk), (o, &mut ok)] {
        put(keys, "connector", &c.connector, |c| quote(c.as_str()));
        put(keys, "model", &c.model, |s| quote(s));
        put(keys, "allowed_tools", &c.allowed_tools, |t| {
            format!("{t:?}")
        });
        put(keys, "permission_mode", &c.permission_mode, |c| {
            quote(c.as_str())
        });
        put(keys, "max_turns", &c.max_turns, u64::to_string);
        put(keys, "sandbox", &c.sandbox, |c| quote(c.as_str()));
        put(keys, "reasoning_effort", &c.reasoning_effort, |c| {
            quote(c.as_str())
        });
    }
    for (key, value) in wk {
        let op = ok.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone());
        if op.as_ref() != Some(&value) {
            bad.push(Widening {
                path: format!("agents.{agent}.{key}"),
                workspace: value,
                rule: if op.is_some() { SAME } else { NO_ADD },
                operator: op,
            });
        }
    }
}

pub(super) fn fill_figures(o: &mut AgentConfig, w: &AgentConfig) {
    o.p_success = o.p_success.or(w.p_success);
    o.tokens = o.tokens.or(w.tokens);
    o.usd = o.usd.or(w.usd);
    o.ms = o.ms.or(w.ms);
}

/// One judge table (`prefix`: `judge` or `judges.NAME`): the operator's
/// runner stands, the workspace may repeat it or shorten its timeout.
pub(super) fn merge_judge(
    prefix: &str,
    out: &mut JudgeSection,
    operator: Option<&JudgeSection>,
    w: &JudgeSection,
    bad: &mut Vec<Widening>,
) {
    let empty = JudgeSection::default();
    let o = operator.unwrap_or(&empty);
    for (key, theirs, ours) in [
        ("url", &w.url, &o.url),
        ("model", &w.model, &o.model),
        ("api_key_env", &w.api_key_env, &o.api_key_env),
    ] {
        if let Some(v) = theirs
            && ours.as_ref() != Some(v)
        {
            bad.push(judge_widening(
                prefix,
                key,
                quote(v),
                ours.as_deref().map(quote),
                o,
            ));
        }
    }
    if let Some(t) = w.timeout_ms {
        let limit = o.timeout_ms.unwrap_or(DEFAULT_JUDGE_TIMEOUT_MS);
        if !o.configures_runner() || t > limit {
            let ours = o.configures_runner().then(|| limit.to_string());
            bad.push(judge_widening(prefix, "timeout_ms", t.to_string(), ours, o));
        } else {
            out.timeout_ms = Some(t);
        }
    }
    for (tier, ws) in &w.stakes {
        let os = o.stakes.get(tier);
        let model = os.and_then(|s| s.model.clone()).or_else(|| o.model.clone());
        let temp = os.and_then(|s| s.temperature).unwrap_or(0.0);
        let key = format!("stakes.{}", tier.as_str());
        if let Some(m) = &ws.model
            && model.as_ref() != Some(m)
        {
            let ours = model.as_deref().map(quote);
            bad.push(judge_widening(
                prefix,
                &format!("{key}.model"),
                quote(m),
                ours,
                o,
            ));
        }
        if let Some(t) = ws.temperature
            && (!o.configures_runner() || t != temp)
        {
            let ours = o.configures_runner().then(|| format!("{temp:?}"));
            bad.push(judge_widening(
                prefix,
                &format!("{key}.temperature"),
                format!("{t:?}"),
                ours,
                o,
            ));
        }
    }
    out.p_success = out.p_success.or(w.p_success);
    out.tokens = out.tokens.or(w.tokens);
    out.usd = out.usd.or(w.usd);
    out.ms = out.ms.or(w.ms);
}

/// One `[commands.NAME]` of the workspace: it must repeat the operator's
/// `argv` exactly; it may shorten `timeout_ms`, lower `max_output_bytes` and
/// pass a subset of the operator's `env` names. A command the operator does
/// not declare cannot be added. Commands the workspace leaves out stay as
/// the operator declares them.
pub(super) fn merge_command(
    out: &mut Config,
    name: &str,
    operator: Option<&CommandSection>,
    w: &CommandSection,
    bad: &mut Vec<Widening>,
) {
    let prefix = format!("commands.{name}");
    let list = |v: &[String]| {
        toml::Value::Array(v.iter().map(|s| s.as_str().into()).collect()).to_string()
    };
    let Some(o) = operator else {
        bad.push(Widening {
            path: format!("{prefix}.argv"),
            workspace: list(&w.argv),
            operator: None,
            rule: "the operator declares no such command, so it cannot add one",
        });
        return;
    };
    let mut narrowed = o.clone();
    if w.argv != o.argv {
        bad.push(Widening {
            path: format!("{prefix}.argv"),
            workspace: list(&w.argv),
            operator: Some(list(&o.argv)),
            rule: SAME,
        });
    }
    let bounds = [
        (
            "timeout_ms",
            w.timeout_ms,
            o.timeout_ms.unwrap_or(DEFAULT_COMMAND_TIMEOUT_MS),
        ),
        (
            "max_output_bytes",
            w.max_output_bytes,
            o.max_output_bytes.unwrap_or(DEFAULT_COMMAND_OUTPUT_BYTES),
        ),
    ];
    for (key, theirs, limit) in bounds {
        match theirs {
            Some(t) if t > limit => bad.push(Widening {
                path: format!("{prefix}.{key}"),
                workspace: t.to_string(),
                operator: Some(limit.to_string()),
                rule: "it may only lower it",
            }),
            Some(t) if key == "timeout_ms" => narrowed.timeout_ms = Some(t),
            Some(t) => narrowed.max_output_bytes = Some(t),
            None => {}
        }
    }
    let extra: Vec<String> = w
        .env
        .iter()
        .filter(|n| !o.env.contains(n))
        .cloned()
        .collect();
    if extra.is_empty() {
        narrowed.env = w.env.clone();
    } else {
        bad.push(Widening {
            path: format!("{prefix}.env"),
            workspace: list(&extra),
            operator: Some(list(&o.env)),
            rule: "it may only pass a subset of the operator's names",
        });
    }
    out.commands.insert(name.to_owned(), narrowed);
}

pub(super) fn judge_widening(
    prefix: &str,
    key: &str,
    workspace: String,
    operator: Option<String>,
    o: &JudgeSection,
) -> Widening {
    let rule = if !o.configures_runner() {
        "the operator configures no judge, so it cannot configure one"
    } else if key == "timeout_ms" {
        SHORTER
    } else {
        SAME
    };
    Widening {
        path: format!("{prefix}.{key}"),
        workspace,
        operator,
        rule,
    }
}
