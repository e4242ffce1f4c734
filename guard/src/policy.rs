//! A guarded resource's policy: the transition graph, each edge's evidence
//! predicates and stakes, the initial and terminal states and the workspace
//! the evidence is read from.
//!
//! Owns: the policy model, its validation (every rule below, each a typed
//! [`PolicyError`] naming what is wrong and where), its canonical form
//! (every state a key of `graph` with its targets sorted, every edge listed
//! in `edge_predicates` and `stakes`, `terminal` sorted) and its checksum
//! (SHA-256 over the canonical JSON).
//!
//! Rules: the graph has at least one state; state names are non-empty, at
//! most 200 characters, without control characters or `->`; no edge is
//! listed twice; `initial` and every `terminal` state exist; no terminal
//! state has an outgoing edge; every key of `edge_predicates` and `stakes`
//! is an edge (`"from->to"`) of the graph; predicate ids are non-empty and
//! unique per edge, statements non-empty; a `deterministic` statement is
//! one call of a built-in ([`crate::builtin`]), and a `command_exit_zero`
//! argv must be declared in `[commands]`; every `paranoid` edge has at
//! least one deterministic predicate; `workspace_root` is absolute; at most
//! [`MAX_STATES`] states and [`MAX_PREDICATES`] predicates per edge.
//! Must never: touch the filesystem (the service checks that the workspace
//! root is a directory) or evaluate a predicate.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::builtin::{self, Builtin, BuiltinError};
use crate::canon;

/// The most states a policy may have.
pub const MAX_STATES: usize = 1000;
/// The most predicates one edge may have.
pub const MAX_PREDICATES: usize = 64;
/// The longest state name or predicate id (characters).
pub const MAX_NAME_CHARS: usize = 200;

/// A predicate's tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PredicateType {
    /// Checked by the server on evidence it reads itself.
    Deterministic,
    /// Sent to the judge.
    Verified,
    /// Sent to the judge.
    Judged,
}

/// An edge's stakes (the judge tier of its model-level predicates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stakes {
    Cheap,
    #[default]
    Default,
    Paranoid,
}

impl Stakes {
    /// The name the judge configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Stakes::Cheap => "cheap",
            Stakes::Default => "default",
            Stakes::Paranoid => "paranoid",
        }
    }
}

/// One evidence predicate of an edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Predicate {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: PredicateType,
    pub statement: String,
}

impl Predicate {
    /// The built-in call of a deterministic predicate (validated policies
    /// only hold parseable ones).
    pub fn builtin(&self) -> Option<Result<Builtin, BuiltinError>> {
        (self.kind == PredicateType::Deterministic).then(|| builtin::parse(&self.statement))
    }
}

/// A policy as a client sends it (`stratum_guard_register`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyInput {
    pub graph: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub edge_predicates: BTreeMap<String, Vec<Predicate>>,
    pub initial: String,
    #[serde(default)]
    pub terminal: Vec<String>,
    #[serde(default)]
    pub stakes: BTreeMap<String, Stakes>,
    pub workspace_root: String,
}

/// A validated policy in canonical form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Every state, with its targets sorted.
    pub graph: BTreeMap<String, Vec<String>>,
    /// Every edge, with its predicates (possibly none) in the given order.
    pub edge_predicates: BTreeMap<String, Vec<Predicate>>,
    pub initial: String,
    /// Sorted.
    pub terminal: Vec<String>,
    /// Every edge.
    pub stakes: BTreeMap<String, Stakes>,
    pub workspace_root: String,
}

/// Why a policy is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("the policy is not of the expected shape: {0}")]
    Shape(String),
    #[error("`graph` has no state; list at least the initial state")]
    EmptyGraph,
    #[error("`graph` has {0} states; the limit is {MAX_STATES}")]
    TooManyStates(usize),
    #[error(
        "state name {0:?} is not allowed: names are 1 to {MAX_NAME_CHARS} characters, without control characters or `->`"
    )]
    BadStateName(String),
    #[error("edge `{from}->{to}` is listed twice in `graph.{from}`")]
    DuplicateEdge { from: String, to: String },
    #[error("`initial` is `{0}`, which is not a state of `graph`")]
    UnknownInitial(String),
    #[error("`terminal` lists `{0}`, which is not a state of `graph`")]
    UnknownTerminal(String),
    #[error("`terminal` lists `{0}` twice")]
    DuplicateTerminal(String),
    #[error(
        "terminal state `{state}` has an outgoing edge to `{to}`; a terminal state has none (remove the edge or the state from `terminal`)"
    )]
    TerminalHasEdge { state: String, to: String },
    #[error("`{field}` key {key:?} is not of the form \"from->to\"")]
    BadEdgeKey { field: &'static str, key: String },
    #[error("`{field}` names edge `{key}`, which is not in `graph` (add `{to}` to `graph.{from}`)")]
    NoSuchEdge {
        field: &'static str,
        key: String,
        from: String,
        to: String,
    },
    #[error("edge `{edge}` has {count} predicates; the limit is {MAX_PREDICATES}")]
    TooManyPredicates { edge: String, count: usize },
    #[error("a predicate of edge `{edge}` has an empty or over-long id")]
    BadPredicateId { edge: String },
    #[error("edge `{edge}` has two predicates with id `{id}`")]
    DuplicatePredicate { edge: String, id: String },
    #[error("predicate `{id}` of edge `{edge}` has an empty statement")]
    EmptyStatement { edge: String, id: String },
    #[error("deterministic predicate `{id}` of edge `{edge}`: {error}")]
    BadStatement {
        edge: String,
        id: String,
        error: BuiltinError,
    },
    #[error(
        "predicate `{id}` of edge `{edge}` runs {argv:?}, which no `[commands.NAME] argv` in stratum.toml declares; declare it there (the exact argv) or use another predicate"
    )]
    UndeclaredCommand {
        edge: String,
        id: String,
        argv: Vec<String>,
    },
    #[error(
        "edge `{0}` has stakes `paranoid` but no deterministic predicate; a paranoid edge needs at least one evidence check the server makes itself"
    )]
    ParanoidWithoutDeterministic(String),
    #[error("`workspace_root` {0:?} is not an absolute path")]
    RelativeRoot(String),
}

impl PolicyError {
    /// The stable code of every policy refusal.
    pub fn code(&self) -> &'static str {
        match self {
            PolicyError::UndeclaredCommand { .. } => "undeclared_command",
            _ => "invalid_policy",
        }
    }
}

/// Splits `"from->to"`.
pub fn split_edge(key: &str) -> Option<(&str, &str)> {
    let (from, to) = key.split_once("->")?;
    (!from.is_empty() && !to.is_empty() && !to.contains("->")).then_some((from, to))
}

/// The key of an edge.
pub fn edge_key(from: &str, to: &str) -> String {
    format!("{from}->{to}")
}

fn good_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars().count() <= MAX_NAME_CHARS
        && !s.contains("->")
        && !s.chars().any(char::is_control)
}

/// Reads a policy from a JSON value (typed, unknown keys refused).
pub fn from_value(value: Value) -> Result<PolicyInput, PolicyError> {
    serde_json::from_value(value).map_err(|e| PolicyError::Shape(e.to_string()))
}

/// Validates `input` into its canonical form. `declared(argv)` says whether
/// an argv is declared in `[commands]`.
pub fn validate(
    input: &PolicyInput,
    declared: &dyn Fn(&[String]) -> bool,
) -> Result<Policy, PolicyError> {
    let graph = graph_of(input)?;
    let edges: BTreeSet<String> = graph
        .iter()
        .flat_map(|(f, ts)| ts.iter().map(move |t| edge_key(f, t)))
        .collect();
    if !graph.contains_key(&input.initial) {
        return Err(PolicyError::UnknownInitial(input.initial.clone()));
    }
    let mut terminal = Vec::new();
    for t in &input.terminal {
        let Some(out) = graph.get(t) else {
            return Err(PolicyError::UnknownTerminal(t.clone()));
        };
        if terminal.contains(t) {
            return Err(PolicyError::DuplicateTerminal(t.clone()));
        }
        if let Some(to) = out.first() {
            return Err(PolicyError::TerminalHasEdge {
                state: t.clone(),
                to: to.clone(),
            });
        }
        terminal.push(t.clone());
    }
    terminal.sort();
    for key in input.edge_predicates.keys() {
        known_edge("edge_predicates", key, &edges)?;
    }
    for key in input.stakes.keys() {
        known_edge("stakes", key, &edges)?;
    }
    let mut edge_predicates = BTreeMap::new();
    let mut stakes = BTreeMap::new();
    for edge in &edges {
        let preds = input.edge_predicates.get(edge).cloned().unwrap_or_default();
        let s = input.stakes.get(edge).copied().unwrap_or_default();
        check_predicates(edge, &preds, s, declared)?;
        edge_predicates.insert(edge.clone(), preds);
        stakes.insert(edge.clone(), s);
    }
    if !input.workspace_root.starts_with('/') {
        return Err(PolicyError::RelativeRoot(input.workspace_root.clone()));
    }
    Ok(Policy {
        graph,
        edge_predicates,
        initial: input.initial.clone(),
        terminal,
        stakes,
        workspace_root: input.workspace_root.clone(),
    })
}

/// The graph with every state a key and targets sorted.
fn graph_of(input: &PolicyInput) -> Result<BTreeMap<String, Vec<String>>, PolicyError> {
    if input.graph.is_empty() {
        return Err(PolicyError::EmptyGraph);
    }
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (from, tos) in &input.graph {
        if !good_name(from) {
            return Err(PolicyError::BadStateName(from.clone()));
        }
        let mut sorted = Vec::with_capacity(tos.len());
        for to in tos {
            if !good_name(to) {
                return Err(PolicyError::BadStateName(to.clone()));
            }
            if sorted.contains(to) {
                return Err(PolicyError::DuplicateEdge {
                    from: from.clone(),
                    to: to.clone(),
                });
            }
            sorted.push(to.clone());
        }
        sorted.sort();
        graph.insert(from.clone(), sorted);
    }
    let targets: Vec<String> = graph.values().flatten().cloned().collect();
    for t in targets {
        graph.entry(t).or_default();
    }
    if graph.len() > MAX_STATES {
        return Err(PolicyError::TooManyStates(graph.len()));
    }
    Ok(graph)
}

fn known_edge(field: &'static str, key: &str, edges: &BTreeSet<String>) -> Result<(), PolicyError> {
    let Some((from, to)) = split_edge(key) else {
        return Err(PolicyError::BadEdgeKey {
            field,
            key: key.to_owned(),
        });
    };
    if edges.contains(key) {
        Ok(())
    } else {
        Err(PolicyError::NoSuchEdge {
            field,
            key: key.to_owned(),
            from: from.to_owned(),
            to: to.to_owned(),
        })
    }
}

fn check_predicates(
    edge: &str,
    preds: &[Predicate],
    stakes: Stakes,
    declared: &dyn Fn(&[String]) -> bool,
) -> Result<(), PolicyError> {
    if preds.len() > MAX_PREDICATES {
        return Err(PolicyError::TooManyPredicates {
            edge: edge.to_owned(),
            count: preds.len(),
        });
    }
    let mut ids = BTreeSet::new();
    for p in preds {
        if p.id.is_empty() || p.id.chars().count() > MAX_NAME_CHARS {
            return Err(PolicyError::BadPredicateId {
                edge: edge.to_owned(),
            });
        }
        if !ids.insert(p.id.as_str()) {
            return Err(PolicyError::DuplicatePredicate {
                edge: edge.to_owned(),
                id: p.id.clone(),
            });
        }
        if p.statement.trim().is_empty() {
            return Err(PolicyError::EmptyStatement {
                edge: edge.to_owned(),
                id: p.id.clone(),
            });
        }
        match p.builtin() {
            None => {}
            Some(Err(error)) => {
                return Err(PolicyError::BadStatement {
                    edge: edge.to_owned(),
                    id: p.id.clone(),
                    error,
                });
            }
            Some(Ok(Builtin::CommandExitZero(argv))) if !declared(&argv) => {
                return Err(PolicyError::UndeclaredCommand {
                    edge: edge.to_owned(),
                    id: p.id.clone(),
                    argv,
                });
            }
            Some(Ok(_)) => {}
        }
    }
    if stakes == Stakes::Paranoid && !preds.iter().any(|p| p.kind == PredicateType::Deterministic) {
        return Err(PolicyError::ParanoidWithoutDeterministic(edge.to_owned()));
    }
    Ok(())
}

impl Policy {
    /// The canonical JSON value.
    pub fn to_value(&self) -> Value {
        // Invariant: strings, lists and maps of strings only; they always serialize.
        serde_json::to_value(self).expect("invariant: a policy serializes")
    }

    /// The canonical JSON text (what the store keeps).
    pub fn canonical(&self) -> String {
        canon::canonical(&self.to_value())
    }

    /// `sha256:<hex>` of the canonical text.
    pub fn checksum(&self) -> String {
        canon::checksum(&self.to_value())
    }

    /// Reads a stored policy back.
    pub fn from_stored(text: &str) -> Result<Policy, PolicyError> {
        serde_json::from_str(text).map_err(|e| PolicyError::Shape(e.to_string()))
    }

    /// Whether `from->to` is an edge.
    pub fn has_edge(&self, from: &str, to: &str) -> bool {
        self.graph
            .get(from)
            .is_some_and(|ts| ts.iter().any(|t| t == to))
    }

    /// The predicates of an edge.
    pub fn predicates(&self, from: &str, to: &str) -> &[Predicate] {
        self.edge_predicates
            .get(&edge_key(from, to))
            .map_or(&[], Vec::as_slice)
    }

    /// The stakes of an edge.
    pub fn stakes_of(&self, from: &str, to: &str) -> Stakes {
        self.stakes
            .get(&edge_key(from, to))
            .copied()
            .unwrap_or_default()
    }

    /// Every edge key.
    pub fn edges(&self) -> BTreeSet<String> {
        self.stakes.keys().cloned().collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn tracker() -> Value {
        json!({
            "graph": {"planned": ["in_progress"], "in_progress": ["review"], "review": ["done", "in_progress"]},
            "edge_predicates": {
                "in_progress->review": [{"id": "c", "type": "deterministic", "statement": "git_commit_exists('abcd1234')"}],
                "review->done": [
                    {"id": "t", "type": "deterministic", "statement": "command_exit_zero(['make', 'test'])"},
                    {"id": "j", "type": "judged", "statement": "the review approved the change"}
                ]
            },
            "initial": "planned",
            "terminal": ["done"],
            "stakes": {"review->done": "paranoid"},
            "workspace_root": "/tmp/ws"
        })
    }

    fn make_test(argv: &[String]) -> bool {
        argv == ["make", "test"]
    }

    fn check(v: Value) -> Result<Policy, PolicyError> {
        validate(&from_value(v)?, &make_test)
    }

    #[test]
    fn a_valid_policy_is_canonical_and_its_checksum_ignores_order() {
        let p = check(tracker()).unwrap();
        assert_eq!(p.graph["done"], Vec::<String>::new());
        assert_eq!(p.graph["review"], ["done", "in_progress"]);
        assert_eq!(p.stakes["planned->in_progress"], Stakes::Default);
        assert_eq!(p.edge_predicates["planned->in_progress"], vec![]);
        let mut v = tracker();
        v["graph"]["review"] = json!(["in_progress", "done"]);
        v["stakes"]["planned->in_progress"] = json!("default");
        let q = check(v).unwrap();
        assert_eq!(p.checksum(), q.checksum());
        assert!(p.checksum().starts_with("sha256:"));
        assert_eq!(Policy::from_stored(&p.canonical()).unwrap(), p);
        let mut v = tracker();
        v["stakes"]["planned->in_progress"] = json!("cheap");
        assert_ne!(check(v).unwrap().checksum(), p.checksum());
    }

    #[test]
    fn every_rule_refuses_its_violation() {
        type Edit = fn(&mut Value);
        let cases: Vec<(Edit, &str)> = vec![
            (|v| v["graph"] = json!({}), "no state"),
            (
                |v| v["graph"]["planned"] = json!(["x", "x"]),
                "listed twice",
            ),
            (|v| v["graph"]["a->b"] = json!([]), "not allowed"),
            (|v| v["graph"][""] = json!([]), "not allowed"),
            (
                |v| v["initial"] = json!("nowhere"),
                "`initial` is `nowhere`",
            ),
            (
                |v| v["terminal"] = json!(["gone"]),
                "`gone`, which is not a state",
            ),
            (|v| v["terminal"] = json!(["done", "done"]), "twice"),
            (
                |v| v["terminal"] = json!(["review"]),
                "terminal state `review` has an outgoing edge",
            ),
            (|v| v["stakes"]["x"] = json!("cheap"), "not of the form"),
            (
                |v| v["stakes"]["done->planned"] = json!("cheap"),
                "not in `graph`",
            ),
            (
                |v| v["edge_predicates"]["planned->done"] = json!([]),
                "not in `graph`",
            ),
            (
                |v| v["stakes"]["planned->in_progress"] = json!("extreme"),
                "expected shape",
            ),
            (|v| v["bogus"] = json!(1), "unknown field"),
            (
                |v| v["edge_predicates"]["review->done"][1]["id"] = json!("t"),
                "two predicates with id `t`",
            ),
            (
                |v| v["edge_predicates"]["review->done"][1]["statement"] = json!(" "),
                "empty statement",
            ),
            (
                |v| v["edge_predicates"]["review->done"][0]["statement"] = json!("rm -rf /"),
                "not a deterministic built-in",
            ),
            (
                |v| {
                    v["edge_predicates"]["review->done"][0]["statement"] =
                        json!("command_exit_zero(['rm', '-rf', '/'])")
                },
                "no `[commands.NAME] argv`",
            ),
            (
                |v| v["edge_predicates"]["review->done"][0]["type"] = json!("verified"),
                "`paranoid` but no deterministic",
            ),
            (
                |v| v["workspace_root"] = json!("rel/dir"),
                "not an absolute path",
            ),
            (
                |v| v["edge_predicates"]["review->done"][0]["extra"] = json!(1),
                "unknown field",
            ),
        ];
        for (edit, needle) in cases {
            let mut v = tracker();
            edit(&mut v);
            let e = check(v.clone()).unwrap_err();
            assert!(
                e.to_string().contains(needle),
                "{needle:?} not in {e} for {v}"
            );
        }
    }
}
