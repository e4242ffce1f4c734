//! The canonical text of a [`Config`] (what a run freezes) and the
//! differences between two files.
//!
//! Owns: the key order and number format of that text.
//! Must never: lose a key: a frozen text reads back to the same [`Config`].

use super::*;

// ---------------------------------------------------------------------------
// The canonical text (what a run freezes) and differences between two files

/// A value as TOML writes it.
pub(super) fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// The file's tables in a fixed order: (table, [(key, TOML value)]).
pub(super) type Tables = Vec<(String, Vec<(&'static str, String)>)>;

pub(super) fn put<T>(
    keys: &mut Vec<(&'static str, String)>,
    key: &'static str,
    v: &Option<T>,
    f: impl Fn(&T) -> String,
) {
    if let Some(v) = v {
        keys.push((key, f(v)));
    }
}

pub(super) fn float(f: &f64) -> String {
    format!("{f:?}")
}

/// The tables of one judge (`table`: `judge` or `judges.NAME`).
pub(super) fn judge_tables_of(table: &str, j: &JudgeSection, out: &mut Tables) {
    let mut k = Vec::new();
    put(&mut k, "url", &j.url, |s| quote(s));
    put(&mut k, "model", &j.model, |s| quote(s));
    put(&mut k, "api_key_env", &j.api_key_env, |s| quote(s));
    put(&mut k, "timeout_ms", &j.timeout_ms, u64::to_string);
    put(&mut k, "p_success", &j.p_success, float);
    put(&mut k, "tokens", &j.tokens, float);
    put(&mut k, "usd", &j.usd, float);
    put(&mut k, "ms", &j.ms, float);
    out.push((table.to_owned(), k));
    for (tier, s) in &j.stakes {
        let mut k = Vec::new();
        put(&mut k, "model", &s.model, |s| quote(s));
        put(&mut k, "temperature", &s.temperature, float);
        out.push((format!("{table}.stakes.{}", tier.as_str()), k));
    }
}

impl Config {
    pub(super) fn tables(&self) -> Tables {
        let mut out = Tables::new();
        for (agent, a) in &self.agents {
            let mut k = Vec::new();
            put(&mut k, "command", &a.command, |s| quote(s));
            put(&mut k, "timeout_ms", &a.timeout_ms, u64::to_string);
            put(&mut k, "connector", &a.connector, |c| quote(c.as_str()));
            put(&mut k, "model", &a.model, |s| quote(s));
            put(&mut k, "allowed_tools", &a.allowed_tools, |t| {
                let items: Vec<String> = t.iter().map(|s| quote(s)).collect();
                format!("[{}]", items.join(", "))
            });
            put(&mut k, "permission_mode", &a.permission_mode, |c| {
                quote(c.as_str())
            });
            put(&mut k, "max_turns", &a.max_turns, u64::to_string);
            put(&mut k, "sandbox", &a.sandbox, |c| quote(c.as_str()));
            put(&mut k, "reasoning_effort", &a.reasoning_effort, |c| {
                quote(c.as_str())
            });
            put(&mut k, "p_success", &a.p_success, float);
            put(&mut k, "tokens", &a.tokens, float);
            put(&mut k, "usd", &a.usd, float);
            put(&mut k, "ms", &a.ms, float);
            out.push((format!("agents.{}", agent.as_str()), k));
        }
        if let Some(j) = &self.judge {
            judge_tables_of("judge", j, &mut out);
        }
        for (name, j) in &self.judges {
            judge_tables_of(&format!("judges.{name}"), j, &mut out);
        }
        for (name, c) in &self.commands {
            let list = |v: &Vec<String>| {
                toml::Value::Array(v.iter().map(|s| s.as_str().into()).collect()).to_string()
            };
            let mut k = vec![("argv", list(&c.argv))];
            put(&mut k, "timeout_ms", &c.timeout_ms, u64::to_string);
            if !c.env.is_empty() {
                k.push(("env", list(&c.env)));
            }
            put(
                &mut k,
                "max_output_bytes",
                &c.max_output_bytes,
                u64::to_string,
            );
            out.push((format!("commands.{name}"), k));
        }
        out
    }

    /// The canonical `stratum.toml` text of this configuration (tables and
    /// keys in a fixed order): what a run freezes, and what its hash is
    /// taken of. [`Config::from_toml`] reads it back to an equal `Config`.
    pub fn to_toml(&self) -> String {
        let mut text = String::new();
        for (table, keys) in self.tables() {
            text.push_str(&format!("[{table}]\n"));
            for (k, v) in keys {
                text.push_str(&format!("{k} = {v}\n"));
            }
        }
        text
    }

    /// Every key whose value differs between `self` and `now`, as
    /// `` `judge.url`: "a" → "b" `` (`none` where a side has no value).
    pub fn differences(&self, now: &Config) -> Vec<String> {
        let flat = |c: &Config| -> BTreeMap<String, String> {
            c.tables()
                .into_iter()
                .flat_map(|(t, keys)| keys.into_iter().map(move |(k, v)| (format!("{t}.{k}"), v)))
                .collect()
        };
        let (was, is) = (flat(self), flat(now));
        let keys: std::collections::BTreeSet<&String> = was.keys().chain(is.keys()).collect();
        keys.into_iter()
            .filter(|k| was.get(*k) != is.get(*k))
            .map(|k| {
                let side = |m: &BTreeMap<String, String>| {
                    m.get(k).cloned().unwrap_or_else(|| "none".into())
                };
                format!("`{k}`: {} → {}", side(&was), side(&is))
            })
            .collect()
    }
}
