//! Cost analysis of a checked flow: how many dispatches, tokens, dollars and
//! milliseconds a run can take, before any run.
//!
//! Owns: the agent profiles ([`CostConfig`], built from the `stratum.toml`
//! that `stratum_vm::config` reads),
//! the multiplicity analysis (how often each step can be entered), the
//! minimum / expected / worst estimates per step and per flow
//! ([`analyze_cost`]), and the budget check that `check` reports as S0701
//! ([`budget_warnings`]).
//! Must never: read files or the environment (callers hand it text and JSON),
//! print, or mix probabilities into bounds: worst cases are sound whatever the
//! profiles' success probabilities are; probabilities only shape `expected`
//! (reference seed-systems §4.2, rule 4).
//!
//! # Model
//!
//! **Entries.** Only gate revises re-enter steps in v1. A revise by gate `g`
//! to target `t` resets `t` and every step reachable from `t` through any
//! forward edge (dependency or route): the reset closure of `g`, read from
//! the IR (`FlowIr::resets`, computed by the checker). The flow's
//! `max_rounds` bounds all revisions of the flow together and a gate's own
//! `max_rounds` bounds its own revisions, so
//!
//! ```text
//! Entries(s) = 1 + min(flow.max_rounds, Σ { rounds(g) : s ∈ closure(g) })
//! rounds(g)  = min(g.max_rounds or flow.max_rounds, flow.max_rounds)
//! ```
//!
//! A step that no revising gate covers is entered once.
//!
//! **Worst case per entry** (sound whatever the profiles say):
//! - `do`: `attempts × iterate.max` dispatches (`attempts` without `iterate`);
//!   every dispatch also pays one judge call per `judged` ensure (tokens, usd
//!   and time, not a dispatch), at the figures of the judge it names
//!   (`[judges.NAME]`, X5; else `[judge]`). A judge that errs is asked up
//!   to 3 times per predicate; erring calls are not in the figures (no
//!   verdict, and transport errors and timeouts bill nothing), so the
//!   worst case is one billed call per predicate and dispatch.
//! - `set`: no dispatch; its judged ensures cost one judge call each.
//! - `exec` ensures (X12) run their command once per reported result: each
//!   adds its bound (the spec's `timeout_ms` lowered by `[commands.NAME]
//!   timeout_ms`) to the worst wall-clock time, nothing to tokens or
//!   dollars, and nothing to the minimum or expected time (a command may end
//!   at once). An `evaluate` step is one such bound.
//! - `gate`: nothing (human waiting is not time); one human decision.
//! - `fanout`: `items × Σ stage attempts` dispatches. `items` is the length of
//!   the `over` list when it can be read from the given inputs
//!   (`${input.path}`, or a carry variable whose initial value is an input and
//!   that no gate rewrites); otherwise the bound is symbolic in
//!   `len(<reference>)`, and `worst` is `None` with the bound as text in
//!   `worst_symbolic`.
//! - `run`: the worst case of the called flow (analysed once, memoized).
//!
//! A step's worst case is `Entries(s) ×` its worst case per entry; the flow's
//! is the sum over its steps, route targets included.
//!
//! **Minimum** (the happy path): every step that is activated normally runs
//! once and passes on its first attempt (`when` conditions are taken as true,
//! `iterate.until` holds at once, gates approve, no revise); route-only
//! targets (`on_fail`, `on_approve`, `on_kill` targets) do not run. A fanout
//! still dispatches every stage of every item, also under `require: any`.
//!
//! **Expected.** A dispatch passes (contract and every ensure) with
//! probability `q = agent.p_success × Π judge.p_success` (one factor per
//! judged ensure, of the judge it names). With `k`
//! attempts, `E[dispatches per pass] = (1 − (1−q)^k) / q` and the step passes
//! with probability `1 − (1−q)^k`. `iterate` repeats passes until `until`
//! holds, taken to hold with probability `agent.p_success` per pass:
//! `E[passes] = (1 − (1−u)^N) / u`. Fanout items cost the sum of their stages'
//! expectations. Gates are assumed to approve (no revise rounds). Route
//! targets are weighted by the probability that they are routed: an `on_fail`
//! target by the probability that its source fails, an `on_approve` target
//! fully, an `on_kill` target not at all. Normally activated steps count
//! fully (no fail-fast discount), so `min ≤ expected ≤ worst` holds in every
//! dimension. The dependents of an `on_fail: continue` step (X2) run whether
//! it passes or fails, so they count fully in all three; its failure does
//! not lower the run's `p_success`.
//!
//! **Time.** `ms` is wall-clock time excluding human waits. A step's time per
//! entry is the sum of its dispatches' times (attempts run one after
//! another); a fanout takes `ceil(items / concurrency) ×` the worst time of
//! one item. The minimum and expected times are the longest path through the
//! step graph. The worst time is the longest path of one pass plus, for every
//! revise round, the longest path through the reset closure it re-runs
//! (rounds given to the gates with the longest closures first, up to the
//! flow's `max_rounds`). The longest path weighted by entries alone is not a
//! bound: a slow branch outside a closure overlaps only the first pass. When
//! lengths are unknown, which of two paths is longer depends on them, so
//! their maximum is bounded term by term (exact once inputs are given).
//! `agent_ms` is the sum of all dispatch and judge times instead: what a
//! budget's `ms` meters (every reported duration is added to the ledger, also
//! for dispatches that run in parallel), and what the budget check compares.
//!
//! **Per step.** Every step has its own dispatches, tokens, dollars and
//! milliseconds ([`StepCost`]), each min / expected / worst: exactly the
//! terms the flow's totals add up (worst over all its entries, expected
//! weighted by its activation, nothing on the happy path for a route-only
//! target), so the flow's dispatches, tokens, usd and `agent_ms` are the
//! sums of its steps'. A step's `ms` is its dispatch and judge times added
//! up (what its ledger meters); only the flow's wall-clock `ms` is a
//! longest path. `stratumc run` and MCP `stratum_plan` record the expected
//! and worst figures in the run (`estimated` event) for `stratumc report`.
//!
//! **History** (`stratumc cost --history`). Figures observed in past runs of
//! the same compiled step ([`Observed`], gathered by the CLI) are used as
//! that step's `cost` hints, so the model has one path: per-dispatch
//! tokens, dollars and time, the pass rate per attempt (which then already
//! includes the judges' verdicts), tokens per judge call. The spec's own
//! `cost:` hint wins over history, figure by figure. A fanout's history
//! covers all its stages together and applies to each stage. This module
//! never reads the run store: the observations come in as plain data.
//!
//! **Budgets.** A flow budget is compared with the flow's worst case; a step
//! budget (refreshed whenever a revise resets the step) with the step's worst
//! case per entry. A dimension whose worst case is symbolic is not checked.
//! `check` uses the built-in profiles; `stratumc cost` reads `stratum.toml`.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use serde::{Serialize, Serializer};
use stratum_vm::config::{Config, Figures};

use crate::diagnostics::{Code, Diagnostic};
use crate::ir::{
    EdgeKind, FlowId, FlowIr, Ir, IterateIr, OnFailActionIr, PredicateIr, RefIr, RefTarget,
    RouteActionIr, Segment, StageIr, StepId, StepKindIr,
};
use crate::source::Span;
use crate::syntax::ast::{Agent, Budget, CostHint, Require};
use stratum_vm::interp::MAX_ORPHANS;
use stratum_vm::interp::event::{EstimateFigure, StepEstimate};

// ---------------------------------------------------------------------------
// Configuration

/// What one dispatch of an agent (or one judge call) costs, and how likely it
/// is to pass.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Profile {
    /// Probability that one attempt passes its contract and ensures (0..=1).
    pub p_success: f64,
    /// Tokens per dispatch.
    pub tokens: f64,
    /// Dollars per dispatch.
    pub usd: f64,
    /// Milliseconds per dispatch.
    pub ms: f64,
}

impl Profile {
    /// Built-in `claude` profile: a rough default for one agentic coding task
    /// (20k tokens, $0.30, two minutes, passes 85 % of first attempts).
    pub const CLAUDE: Profile = Profile {
        p_success: 0.85,
        tokens: 20_000.0,
        usd: 0.30,
        ms: 120_000.0,
    };

    /// Built-in `codex` profile: a rough default (25k tokens, $0.25, three
    /// minutes, passes 80 % of first attempts).
    pub const CODEX: Profile = Profile {
        p_success: 0.80,
        tokens: 25_000.0,
        usd: 0.25,
        ms: 180_000.0,
    };

    /// Built-in judge profile for `judged` ensures: a rough default (3k
    /// tokens, $0.01, ten seconds; taken to agree with the agent, p = 1).
    pub const JUDGE: Profile = Profile {
        p_success: 1.0,
        tokens: 3_000.0,
        usd: 0.01,
        ms: 10_000.0,
    };

    /// The built-in profile of an agent.
    pub fn built_in(agent: Agent) -> Profile {
        match agent {
            Agent::Claude => Profile::CLAUDE,
            Agent::Codex => Profile::CODEX,
        }
    }

    /// This profile with the figures that `stratum.toml` gives.
    fn overridden(self, f: Figures) -> Profile {
        Profile {
            p_success: f.p_success.unwrap_or(self.p_success),
            tokens: f.tokens.unwrap_or(self.tokens),
            usd: f.usd.unwrap_or(self.usd),
            ms: f.ms.unwrap_or(self.ms),
        }
    }
}

/// Agent and judge profiles.
///
/// The defaults are rough figures for planning, not measurements; override
/// them in `stratum.toml` with what your own runs show.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostConfig {
    /// Profile per agent.
    pub agents: BTreeMap<Agent, Profile>,
    /// Profile of one call of the default judge (`[judge]`).
    pub judge: Profile,
    /// Profile of one call of each named judge (`[judges.NAME]`, X5) that
    /// `stratum.toml` gives figures for (over the default judge's profile).
    pub judges: BTreeMap<String, Profile>,
    /// The config's bound on one run of each declared command
    /// (`[commands.NAME] timeout_ms`, X12), in ms: what an `exec` ensure or
    /// an `evaluate` step can take at worst (the spec's `timeout_ms` may
    /// only lower it).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub command_timeouts_ms: BTreeMap<String, u64>,
    /// Figures observed in past runs of the same compiled steps
    /// (`stratumc cost --history`), by flow name and step id; `None` when
    /// no history was asked for. See [`Observed`].
    #[serde(skip)]
    pub history: Option<BTreeMap<(String, String), Observed>>,
}

/// What past runs of one compiled step showed (`stratumc cost --history`):
/// plain data that the CLI gathers from the run store
/// (`stratum_vm::history`) and hands to the model, which treats it as the
/// step's `cost` hints (X6), one path for both. A figure the runs did not
/// show is `None` and keeps the profile's. The spec's own `cost:` hint wins
/// over history, figure by figure: it is what the author wrote down for
/// this step on purpose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Observed {
    /// Tokens per dispatch.
    pub tokens: Option<f64>,
    /// Dollars per dispatch.
    pub usd: Option<f64>,
    /// Milliseconds per dispatch.
    pub ms: Option<f64>,
    /// Share of attempts that passed every check (contract, ensures, judges
    /// together: it replaces the agent's `p_success`, and the judges'
    /// probabilities are not multiplied in again).
    pub p: Option<f64>,
    /// Tokens per judge call.
    pub judge_tokens: Option<f64>,
    /// How many runs and dispatches the figures rest on.
    pub basis: Basis,
}

/// How many past runs and dispatches observed figures rest on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Basis {
    /// Runs that dispatched the step at least once.
    pub runs: u64,
    /// Its dispatches over those runs.
    pub dispatches: u64,
}

impl Default for CostConfig {
    fn default() -> Self {
        CostConfig {
            agents: Agent::ALL
                .iter()
                .map(|a| (*a, Profile::built_in(*a)))
                .collect(),
            judge: Profile::JUDGE,
            judges: BTreeMap::new(),
            command_timeouts_ms: BTreeMap::new(),
            history: None,
        }
    }
}

impl CostConfig {
    /// The profiles of a `stratum.toml` (read and checked by
    /// [`stratum_vm::config`]) over the built-in defaults:
    ///
    /// ```toml
    /// [agents.claude]
    /// p_success = 0.9      # any key left out keeps its default
    /// tokens = 18000
    /// usd = 0.27
    /// ms = 90000
    ///
    /// [judge]
    /// usd = 0
    /// ```
    pub fn from_config(config: &Config) -> CostConfig {
        let mut out = CostConfig::default();
        for (agent, table) in &config.agents {
            out.agents.insert(
                *agent,
                Profile::built_in(*agent).overridden(table.figures()),
            );
        }
        if let Some(judge) = &config.judge {
            out.judge = out.judge.overridden(judge.figures());
        }
        for (name, table) in &config.judges {
            out.judges
                .insert(name.clone(), out.judge.overridden(table.figures()));
        }
        for (name, section) in &config.commands {
            out.command_timeouts_ms
                .insert(name.clone(), section.runner().timeout_ms);
        }
        out
    }

    /// The longest one run of command `name` can take: the spec's bound
    /// lowered by the config's, as the host applies them; a command the
    /// config does not declare (a spec costed without its workspace) gets
    /// the spec's bound, else the default command timeout.
    fn command_ms(&self, name: &str, spec: Option<u64>) -> u64 {
        match (self.command_timeouts_ms.get(name), spec) {
            (Some(&cfg), Some(t)) => t.min(cfg),
            (Some(&cfg), None) => cfg,
            (None, Some(t)) => t,
            (None, None) => stratum_vm::config::DEFAULT_COMMAND_TIMEOUT_MS,
        }
    }

    /// The worst time of checking `ensure`'s `exec` predicates once (they
    /// run one after another): the sum of their commands' bounds.
    fn exec_worst_ms(&self, ensure: &[PredicateIr]) -> u64 {
        ensure
            .iter()
            .map(|p| match p {
                PredicateIr::Exec {
                    run, timeout_ms, ..
                } => self.command_ms(run, *timeout_ms),
                _ => 0,
            })
            .fold(0u64, u64::saturating_add)
    }

    /// The profile of one call of the judge a predicate names (`None`, or a
    /// name without figures: the default judge's).
    pub fn judge_named(&self, name: Option<&str>) -> Profile {
        name.and_then(|n| self.judges.get(n))
            .copied()
            .unwrap_or(self.judge)
    }

    /// One judge call's profile per judged predicate of `ensure`.
    fn judge_calls(&self, ensure: &[PredicateIr]) -> Vec<Profile> {
        ensure
            .iter()
            .filter_map(|p| match p {
                PredicateIr::Judged { .. } => Some(self.judge),
                PredicateIr::Scored { judge, .. } => Some(self.judge_named(judge.as_deref())),
                _ => None,
            })
            .collect()
    }

    /// [`CostConfig::from_config`] of a `stratum.toml` text; the reader's
    /// refusal as text otherwise.
    pub fn from_toml(text: &str) -> Result<CostConfig, String> {
        Config::from_toml(text)
            .map(|c| CostConfig::from_config(&c))
            .map_err(|e| e.to_string())
    }

    /// The profile of an agent (the built-in one when the map lacks it).
    pub fn agent(&self, agent: Agent) -> Profile {
        self.agents
            .get(&agent)
            .copied()
            .unwrap_or_else(|| Profile::built_in(agent))
    }

    /// These profiles with the figures observed in past runs (a step
    /// without an entry keeps its profile and says so: `basis` is `None`).
    pub fn with_history(mut self, history: BTreeMap<(String, String), Observed>) -> CostConfig {
        self.history = Some(history);
        self
    }

    /// What past runs showed of step `step` of flow `flow`.
    fn observed(&self, flow: &str, step: &str) -> Option<&Observed> {
        self.history
            .as_ref()?
            .get(&(flow.to_string(), step.to_string()))
    }
}

// ---------------------------------------------------------------------------
// Public results

/// One dimension estimated three ways.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// The happy path. With unknown fanout lengths: at zero items.
    #[serde(serialize_with = "ser_num")]
    pub min: f64,
    /// The expected value. With unknown fanout lengths: at zero items.
    #[serde(serialize_with = "ser_num")]
    pub expected: f64,
    /// The worst case; `None` exactly when it depends on a fanout length that
    /// is not known.
    #[serde(serialize_with = "ser_opt_num")]
    pub worst: Option<f64>,
    /// The worst case as a formula, e.g. `12 + 4 * len(input.items)`, when it
    /// depends on an unknown length.
    pub worst_symbolic: Option<String>,
    /// The minimum as a formula, when it depends on an unknown length.
    pub min_symbolic: Option<String>,
    /// The expected value as a formula, when it depends on an unknown length.
    pub expected_symbolic: Option<String>,
}

/// Cost of one step over a whole run of its flow.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepCost {
    /// Step id.
    pub id: String,
    /// `do`, `set`, `gate`, `fanout` or `run`.
    pub construct: String,
    /// Most times the step can be entered (1 + revise rounds that reset it).
    pub entries: u64,
    /// Dispatches of the step over all its entries.
    pub dispatches: Estimate,
    /// Tokens of its dispatches and judge calls over all its entries.
    pub tokens: Estimate,
    /// Dollars, the same way.
    pub usd: Estimate,
    /// Milliseconds of its dispatches and judge calls added up, over all its
    /// entries: what its ledger meters (the flow's `agent_ms` is their sum;
    /// the flow's wall-clock `ms` is a longest path, not a sum of steps).
    pub ms: Estimate,
    /// With history (`stratumc cost --history`): the runs and dispatches its
    /// observed figures rest on; `None` when it has no history (or none was
    /// asked for) and its figures are the profile's (and its hints').
    pub basis: Option<Basis>,
}

/// The limits of a budget block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limits {
    /// `dispatches`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatches: Option<u64>,
    /// `tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// `usd`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt_num"
    )]
    pub usd: Option<f64>,
    /// `ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
}

impl Limits {
    fn of(budget: &Budget) -> Limits {
        Limits {
            dispatches: budget.dispatches,
            tokens: budget.tokens,
            usd: budget.usd,
            ms: budget.ms,
        }
    }
}

/// A declared limit that the worst case goes above.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exceeded {
    /// The step whose own budget it is (`None`: the flow's budget).
    pub step: Option<String>,
    /// `dispatches`, `tokens`, `usd` or `ms`.
    pub dimension: String,
    /// The declared limit.
    #[serde(serialize_with = "ser_num")]
    pub limit: f64,
    /// The worst case (per entry for a step budget; `ms` as metered, see
    /// [`FlowCost::agent_ms`]).
    #[serde(serialize_with = "ser_num")]
    pub worst: f64,
    /// The step contributing most to that worst case.
    pub dominant_step: Option<String>,
    /// Its share of the worst case (0..=1).
    #[serde(serialize_with = "ser_num")]
    pub share: f64,
}

/// A declared limit that cannot be checked before the fanout lengths are known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unchecked {
    /// The step whose own budget it is (`None`: the flow's budget).
    pub step: Option<String>,
    /// The dimension.
    pub dimension: String,
    /// The worst case as a formula.
    pub worst_symbolic: String,
}

/// The budget verdict of a flow.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetVerdict {
    /// The flow's budget, if it declares one.
    pub declared: Option<Limits>,
    /// Limits (the flow's and its steps') that the worst case goes above.
    pub exceeded: Vec<Exceeded>,
    /// Limits whose worst case is symbolic.
    pub unchecked: Vec<Unchecked>,
}

/// The cost of one run of a flow.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowCost {
    /// Flow name.
    pub flow: String,
    /// Agent dispatches (fanout items count one per stage attempt).
    pub dispatches: Estimate,
    /// Tokens, judge calls included.
    pub tokens: Estimate,
    /// Dollars, judge calls included.
    pub usd: Estimate,
    /// Wall-clock milliseconds without human waiting (longest paths).
    pub ms: Estimate,
    /// Milliseconds summed over every dispatch and judge call: what a
    /// budget's `ms` meters.
    pub agent_ms: Estimate,
    /// Most human gate decisions.
    pub decisions: u64,
    /// Rough probability that a run completes (product over the normally
    /// activated steps without `on_fail`; an `on_fail: continue` step's
    /// failure does not fail the run either).
    #[serde(serialize_with = "ser_num")]
    pub p_success: f64,
    /// Per step, in document order.
    pub steps: Vec<StepCost>,
    /// Budget verdict.
    pub budget: BudgetVerdict,
    /// Facts about the inputs (e.g. a fanout list missing from them).
    pub notes: Vec<String>,
}

fn round6(x: f64) -> f64 {
    let r = (x * 1e6).round() / 1e6;
    if r == 0.0 { 0.0 } else { r }
}

fn ser_num<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    if x.fract() == 0.0 && x.abs() < 9e15 {
        s.serialize_i64(*x as i64)
    } else {
        s.serialize_f64(*x)
    }
}

fn ser_opt_num<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => ser_num(x, s),
        None => s.serialize_none(),
    }
}

/// A number for messages and formulas: integers without a fraction, others
/// with at most six decimals.
pub fn format_number(x: f64) -> String {
    let x = round6(x);
    if x.fract() == 0.0 && x.abs() < 9e15 {
        format!("{}", x as i64)
    } else {
        let text = format!("{x:.6}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

// ---------------------------------------------------------------------------
// Symbolic linear bounds

/// `c + Σ coef × atom`, where an atom is `len(ref)` or `ceil(len(ref) / n)`
/// and every coefficient is ≥ 0.
#[derive(Debug, Clone, Default, PartialEq)]
struct Sym {
    c: f64,
    terms: BTreeMap<String, f64>,
}

impl Sym {
    fn num(c: f64) -> Sym {
        Sym {
            c,
            terms: BTreeMap::new(),
        }
    }

    fn atom(name: String, coef: f64) -> Sym {
        let mut s = Sym::default();
        if coef != 0.0 {
            s.terms.insert(name, coef);
        }
        s
    }

    fn add(&mut self, other: &Sym) {
        self.c += other.c;
        for (k, v) in &other.terms {
            *self.terms.entry(k.clone()).or_insert(0.0) += v;
        }
    }

    fn scale(&self, k: f64) -> Sym {
        if k == 0.0 {
            return Sym::default();
        }
        Sym {
            c: self.c * k,
            terms: self.terms.iter().map(|(a, v)| (a.clone(), v * k)).collect(),
        }
    }

    /// Componentwise maximum: an upper bound of both (exact when one
    /// dominates the other, which every concrete pair does).
    fn max(&self, other: &Sym) -> Sym {
        let mut out = Sym::num(self.c.max(other.c));
        for (k, v) in self.terms.iter().chain(&other.terms) {
            let e = out.terms.entry(k.clone()).or_insert(0.0);
            *e = e.max(*v);
        }
        out
    }

    fn concrete(&self) -> Option<f64> {
        self.terms.is_empty().then_some(self.c)
    }

    fn render(&self) -> String {
        let mut parts = Vec::new();
        if self.c != 0.0 || self.terms.is_empty() {
            parts.push(format_number(self.c));
        }
        for (atom, coef) in &self.terms {
            if round6(*coef) == 1.0 {
                parts.push(atom.clone());
            } else {
                parts.push(format!("{} * {atom}", format_number(*coef)));
            }
        }
        parts.join(" + ")
    }
}

/// One value per dimension.
#[derive(Debug, Clone, Default)]
struct Unit {
    dispatches: Sym,
    tokens: Sym,
    usd: Sym,
    /// Summed durations (the budget's meter).
    agent_ms: Sym,
    /// Wall-clock time of one entry (per step) or of the run (flow totals).
    ms: Sym,
}

impl Unit {
    /// `n` dispatches (or judge calls) of a profile: every dimension scales,
    /// time is sequential.
    fn of(dispatches: Sym, calls: &Sym, per: PerCall) -> Unit {
        Unit {
            dispatches,
            tokens: calls.scale(per.tokens),
            usd: calls.scale(per.usd),
            agent_ms: calls.scale(per.ms),
            ms: calls.scale(per.ms),
        }
    }

    fn add(&mut self, other: &Unit) {
        self.dispatches.add(&other.dispatches);
        self.tokens.add(&other.tokens);
        self.usd.add(&other.usd);
        self.agent_ms.add(&other.agent_ms);
        self.ms.add(&other.ms);
    }

    fn scale(&self, k: f64) -> Unit {
        Unit {
            dispatches: self.dispatches.scale(k),
            tokens: self.tokens.scale(k),
            usd: self.usd.scale(k),
            agent_ms: self.agent_ms.scale(k),
            ms: self.ms.scale(k),
        }
    }
}

/// Cost of one dispatch, judge calls included.
#[derive(Debug, Clone, Copy)]
struct PerCall {
    tokens: f64,
    usd: f64,
    ms: f64,
    /// Probability that the attempt passes.
    q: f64,
    /// The agent's own success probability (the prior of `until`).
    p_agent: f64,
}

impl PerCall {
    /// One dispatch and one call of each judge in `judges`.
    fn dispatch(agent: Profile, judges: &[Profile]) -> PerCall {
        PerCall {
            tokens: agent.tokens + judges.iter().map(|j| j.tokens).sum::<f64>(),
            usd: agent.usd + judges.iter().map(|j| j.usd).sum::<f64>(),
            ms: agent.ms + judges.iter().map(|j| j.ms).sum::<f64>(),
            q: agent.p_success * judges.iter().map(|j| j.p_success).product::<f64>(),
            p_agent: agent.p_success,
        }
    }
}

/// The agent and judge profiles of a step with `cost` hints (X6): each
/// given figure replaces the profile's. Observed figures (`--history`) are
/// hints too, under the spec's own: a figure the spec gives wins.
fn hinted(
    agent: Profile,
    judges: Vec<Profile>,
    hint: Option<&CostHint>,
    seen: Option<&Observed>,
) -> (Profile, Vec<Profile>) {
    let spec = hint.copied().unwrap_or_default();
    let seen = seen.copied().unwrap_or_default();
    // an observed pass rate already includes the judges' verdicts
    let judges_in_p = spec.p.is_none() && seen.p.is_some();
    let agent = Profile {
        p_success: spec.p.or(seen.p).unwrap_or(agent.p_success),
        tokens: spec.tokens.or(seen.tokens).unwrap_or(agent.tokens),
        usd: spec.usd.or(seen.usd).unwrap_or(agent.usd),
        ms: spec.ms.or(seen.ms).unwrap_or(agent.ms),
    };
    let judge_tokens = spec.judge_tokens.or(seen.judge_tokens);
    let judges = judges
        .into_iter()
        .map(|judge| Profile {
            tokens: judge_tokens.unwrap_or(judge.tokens),
            p_success: if judges_in_p { 1.0 } else { judge.p_success },
            ..judge
        })
        .collect();
    (agent, judges)
}

/// `E[tries]` of up to `k` independent tries that each succeed with `q`.
fn expected_tries(q: f64, k: u64) -> f64 {
    if q <= 0.0 {
        k as f64
    } else {
        (1.0 - (1.0 - q).powf(k as f64)) / q
    }
}

/// Probability that one of up to `k` tries succeeds.
fn pass_within(q: f64, k: u64) -> f64 {
    1.0 - (1.0 - q).powf(k as f64)
}

/// Probability that at least `n` of `l` independent items pass with `p` each.
fn at_least(n: u64, l: u64, p: f64) -> f64 {
    if n > l {
        return 0.0;
    }
    if p >= 1.0 || n == 0 {
        return 1.0;
    }
    if p <= 0.0 {
        return 0.0;
    }
    // P(X < n) by the pmf recurrence; beyond 100 000 terms the tail is negligible
    let mut pmf = (1.0 - p).powf(l as f64);
    let mut below = 0.0;
    for k in 0..n.min(100_000) {
        below += pmf;
        pmf *= (l - k) as f64 / (k + 1) as f64 * p / (1.0 - p);
    }
    (1.0 - below).clamp(0.0, 1.0)
}

// ---------------------------------------------------------------------------
// The analysis

/// The length of a fanout's list.
enum Items {
    Known(u64),
    /// The reference text (`input.items`, `plan.output.files`, `pending`).
    Unknown(String),
}

/// Everything computed for one step.
#[derive(Debug, Clone, Default)]
struct StepCalc {
    entries: u64,
    /// Per entry.
    worst: Unit,
    /// Per entry, happy path.
    min: Unit,
    /// Per entry.
    expected: Unit,
    /// Probability that the step passes once entered.
    p_pass: f64,
    /// Some route targets the step.
    route_target: bool,
    /// Probability that the step is activated (expected model).
    activation: f64,
    /// Human decisions per entry.
    decisions: u64,
    /// What one entry's worst dispatches are made of, for messages.
    why: String,
}

/// Everything computed for one flow.
#[derive(Debug, Default)]
struct FlowCalc {
    steps: Vec<StepCalc>,
    worst: Unit,
    min: Unit,
    expected: Unit,
    p_success: f64,
    decisions: u64,
    notes: Vec<String>,
}

struct Ctx<'a> {
    ir: &'a Ir,
    config: &'a CostConfig,
    memo: HashMap<FlowId, Rc<FlowCalc>>,
    visiting: Vec<FlowId>,
}

impl<'a> Ctx<'a> {
    fn new(ir: &'a Ir, config: &'a CostConfig) -> Self {
        Ctx {
            ir,
            config,
            memo: HashMap::new(),
            visiting: Vec::new(),
        }
    }

    /// A flow analysed without inputs, once.
    fn callee(&mut self, flow: FlowId) -> Rc<FlowCalc> {
        if let Some(c) = self.memo.get(&flow) {
            return c.clone();
        }
        if self.visiting.contains(&flow) {
            // recursion is refused by the checker (S0310); never reached
            return Rc::new(FlowCalc::default());
        }
        self.visiting.push(flow);
        let calc = Rc::new(self.flow(flow, None));
        self.visiting.pop();
        self.memo.insert(flow, calc.clone());
        calc
    }

    fn flow(&mut self, id: FlowId, inputs: Option<&serde_json::Value>) -> FlowCalc {
        let ir = self.ir;
        let flow = &ir.flows[id];
        let n = flow.steps.len();
        let mut notes = Vec::new();
        let mut preds: Vec<Vec<StepId>> = vec![Vec::new(); n];
        let mut route_target = vec![false; n];
        let mut routes_in: Vec<Vec<(StepId, EdgeKind)>> = vec![Vec::new(); n];
        for e in &flow.edges {
            preds[e.to].push(e.from);
            if !e.kind.is_dependency() {
                route_target[e.to] = true;
                routes_in[e.to].push((e.from, e.kind));
            }
        }

        // per step, per entry
        let mut steps: Vec<StepCalc> = Vec::with_capacity(n);
        for (s, &routed) in route_target.iter().enumerate() {
            let mut calc = self.step(flow, s, inputs, &mut notes);
            calc.route_target = routed;
            calc.entries = 1;
            steps.push(calc);
        }

        // entries through reset closures
        let (entries, revisers) = entries(flow);
        for (calc, e) in steps.iter_mut().zip(entries) {
            calc.entries = e;
        }
        activations(flow, &routes_in, &mut steps);

        // totals
        let mut worst = Unit::default();
        let mut min = Unit::default();
        let mut expected = Unit::default();
        let mut p_success = 1.0;
        let mut decisions = 0u64;
        for (s, c) in steps.iter().enumerate() {
            worst.add(&c.worst.scale(c.entries as f64));
            if !c.route_target {
                min.add(&c.min);
                // a routed failure (`on_fail: <step>`) or one continued past
                // (X2 `on_fail: continue`) does not fail the run
                if !failure_handled(&flow.steps[s]) {
                    p_success *= c.p_pass;
                }
            }
            expected.add(&c.expected.scale(c.activation));
            decisions = decisions.saturating_add(c.decisions.saturating_mul(c.entries));
        }

        (worst.ms, min.ms, expected.ms) = wall_clock(flow, &preds, &steps, &revisers);

        FlowCalc {
            steps,
            worst,
            min,
            expected,
            p_success,
            decisions,
            notes,
        }
    }

    fn step(
        &mut self,
        flow: &FlowIr,
        s: StepId,
        inputs: Option<&serde_json::Value>,
        notes: &mut Vec<String>,
    ) -> StepCalc {
        let step = &flow.steps[s];
        let judges = self.config.judge_calls(&step.ensure);
        match &step.kind {
            StepKindIr::Do {
                agent,
                attempts,
                iterate,
                ..
            } => {
                let seen = self.config.observed(&flow.name, &step.id);
                let (agent, judges) =
                    hinted(self.config.agent(*agent), judges, step.cost.as_ref(), seen);
                let per = PerCall::dispatch(agent, &judges);
                let leased = step.timeout_ms.or(flow.dispatch_timeout_ms).is_some();
                let mut calc = do_step(per, *attempts, iterate.as_ref(), leased);
                // every reported result is checked, iterations included
                let checks = attempts.saturating_mul(iterate.as_ref().map_or(1, |i| i.max));
                with_exec_checks(&mut calc, checks, self.config.exec_worst_ms(&step.ensure));
                calc
            }
            StepKindIr::Set { .. } => {
                let mut calc = set_step(&judges);
                with_exec_checks(&mut calc, 1, self.config.exec_worst_ms(&step.ensure));
                calc
            }
            StepKindIr::Evaluate {
                command,
                timeout_ms,
                ..
            } => {
                let mut calc = evaluate_step(self.config.command_ms(command, Some(*timeout_ms)));
                with_exec_checks(&mut calc, 1, self.config.exec_worst_ms(&step.ensure));
                calc
            }
            StepKindIr::Gate { .. } => StepCalc {
                p_pass: 1.0,
                decisions: 1,
                why: "a human decision".to_string(),
                ..StepCalc::default()
            },
            StepKindIr::Fanout {
                over,
                stages,
                concurrency,
                require,
                ..
            } => {
                let items = resolve_items(flow, over, inputs, notes);
                let leased = |st: &StageIr| st.timeout_ms.or(flow.dispatch_timeout_ms).is_some();
                let leases: Vec<bool> = stages.iter().map(leased).collect();
                let seen = self.config.observed(&flow.name, &step.id);
                self.fanout_step(&items, (stages, &leases, seen), *concurrency, require)
            }
            StepKindIr::Run {
                flow: callee,
                iterate,
                ..
            } => {
                let c = self.callee(*callee);
                let name = &self.ir.flows[*callee].name;
                // X9: an iterating call runs the flow up to `max` times (at
                // least once); the expected count is not modelled (one pass)
                let passes = iterate.as_ref().map_or(1, |it| it.max);
                StepCalc {
                    worst: c.worst.scale(passes as f64),
                    min: c.min.clone(),
                    expected: c.expected.clone(),
                    p_pass: c.p_success,
                    decisions: c.decisions.saturating_mul(passes),
                    why: match passes {
                        1 => format!("a run of flow `{name}`"),
                        n => format!("up to {n} runs of flow `{name}` (iterate)"),
                    },
                    ..StepCalc::default()
                }
            }
        }
    }

    /// A fanout over `items`: one item's stages, spread over the items
    /// (time over the waves of `concurrency`).
    fn fanout_step(
        &self,
        items: &Items,
        (stages, leases, seen): (&[StageIr], &[bool], Option<&Observed>),
        concurrency: u64,
        require: &Require,
    ) -> StepCalc {
        let (len, waves, len_text) = match items {
            Items::Known(l) => (
                Sym::num(*l as f64),
                Sym::num(l.div_ceil(concurrency.max(1)) as f64),
                l.to_string(),
            ),
            Items::Unknown(r) => {
                let atom = format!("len({r})");
                let waves = if concurrency <= 1 {
                    atom.clone()
                } else {
                    format!("ceil({atom} / {concurrency})")
                };
                (Sym::atom(atom.clone(), 1.0), Sym::atom(waves, 1.0), atom)
            }
        };
        // one item: sums over its stages
        let mut item_worst = Unit::default();
        let mut item_min = Unit::default();
        let mut item_exp = Unit::default();
        let mut p_item = 1.0;
        let mut attempts = Vec::new();
        for (stage, &leased) in stages.iter().zip(leases) {
            let (agent, judges) = hinted(
                self.config.agent(stage.agent),
                self.config.judge_calls(&stage.ensure),
                stage.cost.as_ref(),
                seen,
            );
            let per = PerCall::dispatch(agent, &judges);
            let k = stage.attempts;
            attempts.push(k.to_string());
            let e = expected_tries(per.q, k);
            let worst = k.saturating_mul(orphan_factor(leased)) as f64;
            item_worst.add(&Unit::of(Sym::num(worst), &Sym::num(worst), per));
            // the stage's `exec` ensures run once per reported attempt
            let exec_ms = self.config.exec_worst_ms(&stage.ensure);
            item_worst.ms.add(&Sym::num(k as f64 * exec_ms as f64));
            item_min.add(&Unit::of(Sym::num(1.0), &Sym::num(1.0), per));
            item_exp.add(&Unit::of(Sym::num(e), &Sym::num(e), per));
            p_item *= pass_within(per.q, k);
        }
        let spread = |item: &Unit| Unit {
            dispatches: len.scale(item.dispatches.c),
            tokens: len.scale(item.tokens.c),
            usd: len.scale(item.usd.c),
            agent_ms: len.scale(item.agent_ms.c),
            ms: waves.scale(item.ms.c),
        };
        let p_pass = match (items, require) {
            (Items::Known(l), Require::All) => p_item.powf(*l as f64),
            (Items::Known(l), Require::Any) => at_least(1, *l, p_item),
            (Items::Known(l), Require::AtLeast(m)) => at_least(*m, *l, p_item),
            (Items::Unknown(_), _) => p_item,
        };
        StepCalc {
            worst: spread(&item_worst),
            min: spread(&item_min),
            expected: spread(&item_exp),
            p_pass,
            why: format!(
                "{len_text} items × ({}) stage attempts",
                attempts.join(" + ")
            ),
            ..StepCalc::default()
        }
    }
}

/// Dispatches per attempt in the worst case: a leased dispatch (X7) may be
/// orphaned and handed out again until the [`MAX_ORPHANS`]th orphan in a
/// row fails the attempt, so an attempt is dispatched up to that many times
/// (each assumed to cost a whole dispatch: the agent may have worked until
/// it was lost). Orphans are rare, so the expected case ignores them.
fn orphan_factor(leased: bool) -> u64 {
    if leased { u64::from(MAX_ORPHANS) } else { 1 }
}

/// A `do` step: `attempts` tries, times the iterations of `iterate`, times
/// the re-dispatches a lease allows ([`orphan_factor`]) in the worst case.
fn do_step(per: PerCall, k: u64, iterate: Option<&IterateIr>, leased: bool) -> StepCalc {
    let iters = iterate.map_or(1, |i| i.max);
    let worst_n = k
        .saturating_mul(iters)
        .saturating_mul(orphan_factor(leased)) as f64;
    let mut exp_n = expected_tries(per.q, k);
    let mut p_pass = pass_within(per.q, k);
    if iterate.is_some() {
        exp_n *= expected_tries(per.p_agent, iters);
        p_pass *= pass_within(per.p_agent, iters);
    }
    let mut why = match iterate {
        Some(_) => format!("{k} attempts × {iters} iterations"),
        None => format!("{k} attempts"),
    };
    if leased {
        why.push_str(&format!(" × {MAX_ORPHANS} dispatches (lease)"));
    }
    StepCalc {
        worst: Unit::of(Sym::num(worst_n), &Sym::num(worst_n), per),
        min: Unit::of(Sym::num(1.0), &Sym::num(1.0), per),
        expected: Unit::of(Sym::num(exp_n), &Sym::num(exp_n), per),
        p_pass,
        why,
        ..StepCalc::default()
    }
}

/// A `set` step: no dispatch, only its judged predicates cost.
fn set_step(judges: &[Profile]) -> StepCalc {
    let per = PerCall::dispatch(
        Profile {
            p_success: 1.0,
            tokens: 0.0,
            usd: 0.0,
            ms: 0.0,
        },
        judges,
    );
    let unit = Unit::of(Sym::default(), &Sym::num(1.0), per);
    StepCalc {
        worst: unit.clone(),
        min: unit.clone(),
        expected: unit,
        p_pass: per.q,
        why: "no dispatch".to_string(),
        ..StepCalc::default()
    }
}

/// An `evaluate` step (X12): no dispatch, no tokens, no dollars; its
/// command runs for at most its `timeout_ms` of wall-clock time (the
/// config may lower it, never raise it).
fn evaluate_step(timeout_ms: u64) -> StepCalc {
    let mut calc = set_step(&[]);
    calc.worst.ms = Sym::num(timeout_ms as f64);
    calc.why = format!("a declared command, at most {timeout_ms} ms");
    calc
}

/// Adds the worst time of `checks` checks of a step's `exec` ensures
/// (`exec_ms` each) to its worst wall-clock time. Commands bill no tokens
/// or dollars, and a command that ends early takes less, so only the worst
/// case grows (as for an `evaluate` step) and `why` says so.
fn with_exec_checks(calc: &mut StepCalc, checks: u64, exec_ms: u64) {
    if exec_ms == 0 {
        return;
    }
    calc.worst.ms.add(&Sym::num(checks as f64 * exec_ms as f64));
    calc.why
        .push_str(&format!(" + exec checks, at most {exec_ms} ms each"));
}

/// The activation probability of each step (the expected model), in
/// topological order: a route target runs when some route into it fires.
fn activations(flow: &FlowIr, routes_in: &[Vec<(StepId, EdgeKind)>], steps: &mut [StepCalc]) {
    for &s in &flow.topo {
        if !steps[s].route_target {
            steps[s].activation = 1.0;
            continue;
        }
        let mut not_routed = 1.0;
        for &(from, kind) in &routes_in[s] {
            let src = &steps[from];
            let rho = match kind {
                EdgeKind::OnFail => src.activation * (1.0 - src.p_pass),
                EdgeKind::Approve => src.activation,
                EdgeKind::Kill | EdgeKind::Order | EdgeKind::Data | EdgeKind::State => 0.0,
            };
            not_routed *= 1.0 - rho;
        }
        steps[s].activation = 1.0 - not_routed;
    }
}

/// Wall-clock time by longest paths: (worst, min, expected); the worst
/// case adds the revise rounds of each reset closure (`revisers`), within
/// the flow's `max_rounds`.
fn wall_clock(
    flow: &FlowIr,
    preds: &[Vec<StepId>],
    steps: &[StepCalc],
    revisers: &[(u64, &[bool])],
) -> (Sym, Sym, Sym) {
    let fmax = flow.max_rounds.unwrap_or(0);
    let mut scratch = Vec::new();
    let w_worst: Vec<Sym> = steps.iter().map(|c| c.worst.ms.clone()).collect();
    let w_min: Vec<Sym> = steps
        .iter()
        .map(|c| {
            if c.route_target {
                Sym::default()
            } else {
                c.min.ms.clone()
            }
        })
        .collect();
    let w_exp: Vec<Sym> = steps
        .iter()
        .map(|c| c.expected.ms.scale(c.activation))
        .collect();
    let topo = &flow.topo;
    let min = longest_path(topo, None, preds, &w_min, &mut scratch);
    let expected = longest_path(topo, None, preds, &w_exp, &mut scratch);
    let mut ms = longest_path(topo, None, preds, &w_worst, &mut scratch);
    let rounds: Vec<(u64, Sym)> = revisers
        .iter()
        .map(|(r, members)| {
            let cp = longest_path(topo, Some(members), preds, &w_worst, &mut scratch);
            (*r, cp)
        })
        .collect();
    if rounds.iter().all(|(_, cp)| cp.concrete().is_some()) {
        // give the flow's rounds to the longest closures first
        let mut sorted: Vec<(u64, f64)> = rounds.iter().map(|(r, cp)| (*r, cp.c)).collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut left = fmax;
        for (r, cp) in sorted {
            let take = r.min(left);
            left -= take;
            ms.add(&Sym::num(take as f64 * cp));
        }
    } else {
        for (r, cp) in &rounds {
            ms.add(&cp.scale(*r as f64));
        }
    }
    (ms, min, expected)
}

/// Entries of each step (1 + the rounds of the revises that reset it,
/// capped by the flow's `max_rounds`, + the `max` of every route `goto`
/// whose closure holds it, X9), and each revising gate's rounds with
/// the reset closure the checker recorded for it.
fn entries(flow: &FlowIr) -> (Vec<u64>, Vec<(u64, &[bool])>) {
    let fmax = flow.max_rounds.unwrap_or(0);
    let mut extra = vec![0u64; flow.steps.len()];
    let mut revisers: Vec<(u64, &[bool])> = Vec::new();
    for reset in &flow.resets {
        if let StepKindIr::Gate { max_rounds, .. } = flow.steps[reset.from].kind {
            let rounds = max_rounds.unwrap_or(fmax).min(fmax);
            for (x, &m) in extra.iter_mut().zip(&reset.steps) {
                if m {
                    *x = x.saturating_add(rounds);
                }
            }
            revisers.push((rounds, &reset.steps));
        }
    }
    // X9: route counters are run-wide and apart from `max_rounds`: each
    // `goto` adds its `max` to every step of its reset closure (a sum over
    // the routes, not a product)
    let mut routed = vec![0u64; flow.steps.len()];
    for reset in &flow.resets {
        let from = &flow.steps[reset.from];
        let routes = from.routes.iter().filter_map(|r| match r.action {
            RouteActionIr::Goto { target, max, .. } if target == reset.target => Some(max),
            _ => None,
        });
        let fails = from.on_fail_routes.iter().filter_map(|e| match e.action {
            OnFailActionIr::Goto { target, max, .. } if target == reset.target => Some(max),
            _ => None,
        });
        // X9: a fanout stage's `goto` routes the fanout step's failure back
        let stage_fails: Vec<u64> = match &from.kind {
            StepKindIr::Fanout { stages, .. } => stages
                .iter()
                .flat_map(|st| &st.on_fail)
                .filter_map(|e| match e.action {
                    OnFailActionIr::Goto { target, max, .. } if target == reset.target => Some(max),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let fires: u64 = routes
            .chain(fails)
            .chain(stage_fails)
            .fold(0u64, u64::saturating_add);
        for (x, &m) in routed.iter_mut().zip(&reset.steps) {
            if m {
                *x = x.saturating_add(fires);
            }
        }
    }
    let entries = extra
        .into_iter()
        .zip(routed)
        .map(|(x, r)| (1 + x.min(fmax)).saturating_add(r))
        .collect();
    (entries, revisers)
}

/// Whether a failure of step `s` never fails the run: a plain `on_fail`
/// (a recovery step, `continue`), or an X9 list with such an entry (its
/// `goto`s alone go back at most `max` times, then the step fails).
fn failure_handled(s: &crate::ir::StepIr) -> bool {
    s.on_fail.is_some()
        || s.continues
        || s.on_fail_routes
            .iter()
            .any(|e| !matches!(e.action, OnFailActionIr::Goto { .. }))
}

/// The heaviest path through the steps of `topo` that are members (weights
/// on steps); `dist` is scratch space of one slot per step.
fn longest_path(
    topo: &[StepId],
    member: Option<&[bool]>,
    preds: &[Vec<StepId>],
    weight: &[Sym],
    dist: &mut Vec<Option<f64>>,
) -> Sym {
    let is_member = |s: StepId| member.is_none_or(|m| m[s]);
    if topo
        .iter()
        .all(|&s| !is_member(s) || weight[s].terms.is_empty())
    {
        // the common case: plain numbers, no allocation per step
        dist.clear();
        dist.resize(weight.len(), None);
        let mut best = 0.0f64;
        for &s in topo {
            if !is_member(s) {
                continue;
            }
            let before = preds[s]
                .iter()
                .filter_map(|&p| dist[p])
                .fold(0.0f64, f64::max);
            let d = before + weight[s].c;
            best = best.max(d);
            dist[s] = Some(d);
        }
        return Sym::num(best);
    }
    let mut sym: Vec<Option<Sym>> = vec![None; weight.len()];
    let mut best = Sym::default();
    for &s in topo {
        if !is_member(s) {
            continue;
        }
        let mut d = Sym::default();
        for &p in &preds[s] {
            if let Some(dp) = &sym[p] {
                d = d.max(dp);
            }
        }
        d.add(&weight[s]);
        best = best.max(&d);
        sym[s] = Some(d);
    }
    best
}

fn resolve_items(
    flow: &FlowIr,
    over: &RefIr,
    inputs: Option<&serde_json::Value>,
    notes: &mut Vec<String>,
) -> Items {
    let shown = flow.reference_text(&over.target, &over.path);
    let path: Vec<Segment> = match over.target {
        RefTarget::Input => over.path.clone(),
        RefTarget::Carry(c)
            if flow.carry[c].initial.target == RefTarget::Input
                && flow.carry[c].on_revise.is_empty() =>
        {
            let mut p = flow.carry[c].initial.path.clone();
            p.extend(over.path.iter().cloned());
            p
        }
        _ => return Items::Unknown(shown),
    };
    let Some(inputs) = inputs else {
        return Items::Unknown(shown);
    };
    let mut at = inputs;
    for seg in &path {
        let next = match seg {
            Segment::Field(f) => at.get(f.as_str()),
            Segment::Index(i) => usize::try_from(*i).ok().and_then(|i| at.get(i)),
        };
        match next {
            Some(v) => at = v,
            None => {
                let p = flow.reference_text(&RefTarget::Input, &path);
                notes.push(format!(
                    "`{p}` is missing from the inputs: the length of `{shown}` stays symbolic"
                ));
                return Items::Unknown(shown);
            }
        }
    }
    match at.as_array() {
        Some(list) => Items::Known(list.len() as u64),
        None => {
            notes.push(format!(
                "`{shown}` is not a list in the inputs: its length stays symbolic"
            ));
            Items::Unknown(shown)
        }
    }
}

// ---------------------------------------------------------------------------
// Budgets

/// A dimension of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dim {
    Dispatches,
    Tokens,
    Usd,
    Ms,
}

impl Dim {
    const ALL: [Dim; 4] = [Dim::Dispatches, Dim::Tokens, Dim::Usd, Dim::Ms];

    fn as_str(self) -> &'static str {
        match self {
            Dim::Dispatches => "dispatches",
            Dim::Tokens => "tokens",
            Dim::Usd => "usd",
            Dim::Ms => "ms",
        }
    }

    fn limit(self, b: &Budget) -> Option<f64> {
        match self {
            Dim::Dispatches => b.dispatches.map(|v| v as f64),
            Dim::Tokens => b.tokens.map(|v| v as f64),
            Dim::Usd => b.usd,
            Dim::Ms => b.ms.map(|v| v as f64),
        }
    }

    /// The metered value: `ms` is the sum of durations, as ledgers add them.
    fn of(self, u: &Unit) -> &Sym {
        match self {
            Dim::Dispatches => &u.dispatches,
            Dim::Tokens => &u.tokens,
            Dim::Usd => &u.usd,
            Dim::Ms => &u.agent_ms,
        }
    }
}

/// One limit above the worst case, with what the message needs.
struct Breach {
    dim: Dim,
    limit: f64,
    worst: f64,
    /// The step whose own budget it is.
    owner: Option<StepId>,
    dominant: Option<StepId>,
    contribution: f64,
    span: Span,
}

fn breaches(flow: &FlowIr, calc: &FlowCalc) -> (Vec<Breach>, Vec<Unchecked>) {
    let mut found = Vec::new();
    let mut unchecked = Vec::new();
    if let Some(b) = &flow.budget {
        for dim in Dim::ALL {
            let Some(limit) = dim.limit(b) else { continue };
            let total = dim.of(&calc.worst);
            let Some(worst) = total.concrete() else {
                unchecked.push(Unchecked {
                    step: None,
                    dimension: dim.as_str().to_string(),
                    worst_symbolic: total.render(),
                });
                continue;
            };
            if worst > limit * (1.0 + 1e-9) {
                let mut dominant = None;
                let mut contribution = 0.0;
                for (s, c) in calc.steps.iter().enumerate() {
                    let v = dim.of(&c.worst).c * c.entries as f64;
                    if v > contribution {
                        contribution = v;
                        dominant = Some(s);
                    }
                }
                found.push(Breach {
                    dim,
                    limit,
                    worst,
                    owner: None,
                    dominant,
                    contribution,
                    span: b.span,
                });
            }
        }
    }
    for (s, step) in flow.steps.iter().enumerate() {
        let Some(b) = &step.budget else { continue };
        for dim in Dim::ALL {
            let Some(limit) = dim.limit(b) else { continue };
            let per_entry = dim.of(&calc.steps[s].worst);
            let Some(worst) = per_entry.concrete() else {
                unchecked.push(Unchecked {
                    step: Some(step.id.clone()),
                    dimension: dim.as_str().to_string(),
                    worst_symbolic: per_entry.render(),
                });
                continue;
            };
            if worst > limit * (1.0 + 1e-9) {
                found.push(Breach {
                    dim,
                    limit,
                    worst,
                    owner: Some(s),
                    dominant: Some(s),
                    contribution: worst,
                    span: b.span,
                });
            }
        }
    }
    (found, unchecked)
}

fn quantity(dim: Dim, x: f64) -> String {
    format!("{} {}", format_number(x), dim.as_str())
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        (part / whole).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// S0701 warnings: every flow budget and step budget (dispatches, tokens,
/// usd, ms) that its worst case goes above, computed without inputs
/// (dimensions with a symbolic worst case are skipped).
pub fn budget_warnings(ir: &Ir, config: &CostConfig) -> Vec<Diagnostic> {
    let mut ctx = Ctx::new(ir, config);
    let mut out = Vec::new();
    for (id, flow) in ir.flows.iter().enumerate() {
        if flow.budget.is_none() && flow.steps.iter().all(|s| s.budget.is_none()) {
            continue;
        }
        let calc = ctx.callee(id);
        let (found, _) = breaches(flow, &calc);
        for b in found {
            out.push(breach_diagnostic(flow, &calc, &b));
        }
    }
    out
}

fn breach_diagnostic(flow: &FlowIr, calc: &FlowCalc, b: &Breach) -> Diagnostic {
    let dim = b.dim.as_str();
    let mut d = match b.owner {
        None => {
            let mut message = format!(
                "the worst case of flow `{}` is {}, above its budget of {}",
                flow.name,
                quantity(b.dim, b.worst),
                quantity(b.dim, b.limit)
            );
            if let Some(s) = b.dominant {
                message.push_str(&format!("; step `{}` contributes most", flow.steps[s].id));
            }
            Diagnostic::new(Code::BudgetExceeded, b.span, message)
                .with_span_label(format!("{dim}: {}", format_number(b.limit)))
        }
        Some(s) => Diagnostic::new(
            Code::BudgetExceeded,
            b.span,
            format!(
                "the worst case of step `{}` is {} per entry, above its budget of {}",
                flow.steps[s].id,
                quantity(b.dim, b.worst),
                quantity(b.dim, b.limit)
            ),
        )
        .with_span_label(format!("{dim}: {}", format_number(b.limit))),
    };
    if let Some(s) = b.dominant {
        let c = &calc.steps[s];
        let step = &flow.steps[s];
        if b.owner.is_none() {
            d = d
                .with_label(step.span, "contributes most")
                .with_note(format!(
                    "step `{}` contributes {} of the {} ({}%): {} per entry, {} {}",
                    step.id,
                    format_number(b.contribution),
                    quantity(b.dim, b.worst),
                    format_number((share(b.contribution, b.worst) * 1000.0).round() / 10.0),
                    c.why,
                    c.entries,
                    if c.entries == 1 { "entry" } else { "entries" }
                ));
        } else {
            d = d.with_note(format!(
                "one entry of `{}` is {}; a step budget applies to each entry (a revise that resets the step refreshes it)",
                step.id, c.why
            ));
        }
    }
    if b.dim == Dim::Ms {
        d = d.with_note(
            "`ms` meters the durations of all dispatches and judge calls added up, also those that run in parallel",
        );
    }
    if b.dim != Dim::Dispatches {
        d = d.with_note(
            "the figures use the built-in agent profiles; `stratumc cost` reads `stratum.toml` and shows every step",
        );
    }
    d.with_help(
        "raise the limit, or lower what multiplies the step (`attempts`, `iterate.max`, `max_rounds`, the fanout's list); when the budget runs out the run stops with `budget_exhausted`",
    )
}

// ---------------------------------------------------------------------------
// Entry point

fn estimate(min: &Sym, expected: &Sym, worst: &Sym) -> Estimate {
    let symbolic = |s: &Sym| s.concrete().is_none().then(|| s.render());
    Estimate {
        min: round6(min.c),
        expected: round6(expected.c),
        worst: worst.concrete().map(round6),
        worst_symbolic: symbolic(worst),
        min_symbolic: symbolic(min),
        expected_symbolic: symbolic(expected),
    }
}

/// One dimension of a step over a run: the happy path (nothing for a
/// route-only target), the expected value weighted by its activation, and
/// the worst case over all its entries — the terms the flow's totals add up.
fn step_estimate(c: &StepCalc, dim: impl Fn(&Unit) -> &Sym) -> Estimate {
    let min = if c.route_target {
        Sym::default()
    } else {
        dim(&c.min).clone()
    };
    estimate(
        &min,
        &dim(&c.expected).scale(c.activation),
        &dim(&c.worst).scale(c.entries as f64),
    )
}

fn construct(kind: &StepKindIr) -> &'static str {
    match kind {
        StepKindIr::Do { .. } => "do",
        StepKindIr::Set { .. } => "set",
        StepKindIr::Gate { .. } => "gate",
        StepKindIr::Fanout { .. } => "fanout",
        StepKindIr::Run { .. } => "run",
        StepKindIr::Evaluate { .. } => "evaluate",
    }
}

/// The estimate a run records when it is started from a spec (the
/// `estimated` event): per step of `flow` (default: the entry flow), its
/// expected and worst dispatches, tokens, dollars and summed milliseconds
/// for the run's `inputs`. `None` when `flow` names no flow of `ir`.
pub fn run_estimate(
    ir: &Ir,
    flow: Option<&str>,
    inputs: &serde_json::Value,
    config: &CostConfig,
) -> Option<Vec<StepEstimate>> {
    let id = match flow {
        None => ir.entry,
        Some(name) => ir.flow(name)?.0,
    };
    let cost = analyze_cost(ir, id, Some(inputs), config);
    let fig = |e: &Estimate| EstimateFigure {
        expected: e.expected,
        worst: e.worst,
    };
    let steps = cost
        .steps
        .iter()
        .map(|s| StepEstimate {
            id: s.id.clone(),
            step_hash: None,
            dispatches: fig(&s.dispatches),
            tokens: fig(&s.tokens),
            usd: fig(&s.usd),
            ms: fig(&s.ms),
        })
        .collect();
    Some(steps)
}

/// The cost of one run of `flow`; `inputs` (the flow's input object) makes
/// fanout lengths concrete. See the module doc for the model.
///
/// Panics when `flow` is not an index of `ir.flows`.
pub fn analyze_cost(
    ir: &Ir,
    flow: FlowId,
    inputs: Option<&serde_json::Value>,
    config: &CostConfig,
) -> FlowCost {
    let mut ctx = Ctx::new(ir, config);
    let calc = ctx.flow(flow, inputs);
    let f = &ir.flows[flow];
    let steps = f
        .steps
        .iter()
        .zip(&calc.steps)
        .map(|(step, c)| StepCost {
            id: step.id.clone(),
            construct: construct(&step.kind).to_string(),
            entries: c.entries,
            dispatches: step_estimate(c, |u| &u.dispatches),
            tokens: step_estimate(c, |u| &u.tokens),
            usd: step_estimate(c, |u| &u.usd),
            ms: step_estimate(c, |u| &u.agent_ms),
            basis: config.observed(&f.name, &step.id).map(|o| o.basis),
        })
        .collect();
    let (found, unchecked) = breaches(f, &calc);
    let exceeded = found
        .iter()
        .map(|b| Exceeded {
            step: b.owner.map(|s| f.steps[s].id.clone()),
            dimension: b.dim.as_str().to_string(),
            limit: round6(b.limit),
            worst: round6(b.worst),
            dominant_step: b.dominant.map(|s| f.steps[s].id.clone()),
            share: round6(share(b.contribution, b.worst)),
        })
        .collect();
    let (w, mi, ex) = (&calc.worst, &calc.min, &calc.expected);
    FlowCost {
        flow: f.name.clone(),
        dispatches: estimate(&mi.dispatches, &ex.dispatches, &w.dispatches),
        tokens: estimate(&mi.tokens, &ex.tokens, &w.tokens),
        usd: estimate(&mi.usd, &ex.usd, &w.usd),
        ms: estimate(&mi.ms, &ex.ms, &w.ms),
        agent_ms: estimate(&mi.agent_ms, &ex.agent_ms, &w.agent_ms),
        decisions: calc.decisions,
        p_success: round6(calc.p_success),
        steps,
        budget: BudgetVerdict {
            declared: f.budget.as_ref().map(Limits::of),
            exceeded,
            unchecked,
        },
        notes: calc.notes.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_bounds_render_like_formulas() {
        let mut s = Sym::num(12.0);
        s.add(&Sym::atom("len(input.items)".into(), 4.0));
        assert_eq!(s.render(), "12 + 4 * len(input.items)");
        assert_eq!(Sym::atom("len(x)".into(), 1.0).render(), "len(x)");
        assert_eq!(Sym::num(0.1 + 0.2).render(), "0.3");
        let m = Sym::atom("len(a)".into(), 2.0).max(&Sym::num(3.0));
        assert_eq!(m.render(), "3 + 2 * len(a)");
    }

    #[test]
    fn probabilities() {
        assert!((expected_tries(0.5, 2) - 1.5).abs() < 1e-12);
        assert_eq!(expected_tries(0.0, 3), 3.0);
        assert_eq!(expected_tries(1.0, 3), 1.0);
        assert!((at_least(1, 2, 0.5) - 0.75).abs() < 1e-12);
        assert!((at_least(2, 2, 0.5) - 0.25).abs() < 1e-12);
        assert_eq!(at_least(3, 2, 0.5), 0.0);
    }

    #[test]
    fn config_overrides_and_refusals() {
        let c = CostConfig::from_toml(
            "[agents.claude]\np_success = 0.9\ntokens = 1000\ncommand = \"claude -p\"\n[judge]\nusd = 0\n",
        )
        .unwrap();
        assert_eq!(c.agent(Agent::Claude).p_success, 0.9);
        assert_eq!(c.agent(Agent::Claude).tokens, 1000.0);
        assert_eq!(c.agent(Agent::Claude).usd, 0.30);
        assert_eq!(c.judge.usd, 0.0);
        let e = CostConfig::from_toml("[agents.claude]\np_sucess = 0.9\n").unwrap_err();
        assert!(
            e.contains("`agents.claude.p_sucess`") && e.contains("did you mean `p_success`"),
            "{e}"
        );
        let e = CostConfig::from_toml("[agents.gpt]\nusd = 1\n").unwrap_err();
        assert!(e.contains("unknown agent `gpt` in `[agents.gpt]`"), "{e}");
        let e = CostConfig::from_toml("[model]\nusd = 1\n").unwrap_err();
        assert!(e.contains("unknown table `model`"), "{e}");
        let e = CostConfig::from_toml("[agents.codex]\np_success = 2\n").unwrap_err();
        assert!(e.contains("between 0 and 1"), "{e}");
        let e = CostConfig::from_toml("[judge]\ntokens = \"many\"\n").unwrap_err();
        assert!(e.contains("must be a number"), "{e}");
        // one stratum.toml serves the cost model and the judge runner
        let c = CostConfig::from_toml(
            "[judge]\nurl = \"http://127.0.0.1:11434/v1\"\nmodel = \"m\"\ntimeout_ms = 5\nusd = 0.5\n[judge.stakes.paranoid]\nmodel = \"big\"\n",
        )
        .unwrap();
        assert_eq!(c.judge.usd, 0.5);
        let e = CostConfig::from_toml("[judge]\ncommand = \"x\"\n").unwrap_err();
        assert!(e.contains("unknown key `judge.command`"), "{e}");
        assert!(
            CostConfig::from_toml("[agents\n")
                .unwrap_err()
                .starts_with("invalid TOML")
        );
    }

    /// Round profiles: claude passes half its attempts; a judge call costs
    /// 100 tokens.
    fn round_config() -> CostConfig {
        CostConfig::from_toml(
            "[agents.claude]\np_success = 0.5\ntokens = 1000\nusd = 1\nms = 1000\n[agents.codex]\np_success = 0.8\ntokens = 2000\nusd = 2\nms = 2000\n[judge]\np_success = 1\ntokens = 100\nusd = 0.1\nms = 10\n",
        )
        .unwrap()
    }

    fn ir_of(text: &str) -> Ir {
        let a = crate::analysis::analyze(text);
        let errors: Vec<String> = a
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.message.clone())
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
        a.ir.expect("an error-free spec has an IR")
    }

    /// A judged `do` step, a revise gate, a route target, a fanout and a
    /// sub-flow call: every way a step's figures are made.
    const MIXED: &str = r#"version: 1
contracts:
  Out: {text: string}
flows:
  entry: main
  helper:
    input: {}
    output: {from: "${h.output}", contract: Out}
    steps:
      - {id: h, do: "Help", out: Out, agent: codex, attempts: 2}
  main:
    input: {items: "string[]"}
    max_rounds: 2
    output: {from: "${draft.output}", contract: Out}
    steps:
      - id: draft
        do: "Draft"
        out: Out
        attempts: 2
        on_fail: rescue
        ensure:
          - judged: {statement: "good", stakes: cheap}
      - {id: rescue, do: "Rescue", out: Out, agent: codex, attempts: 1}
      - id: review
        after: [draft]
        gate: {on_approve: null, on_revise: draft, on_kill: null}
      - id: fan
        after: [review]
        fanout:
          over: "${input.items}"
          concurrency: 2
          isolation: none
          require: all
          merge: sequential
          steps:
            - {do: "First ${item}", attempts: 2}
            - {do: "Second ${item}", agent: codex, attempts: 3}
      - id: call
        after: [fan]
        run: helper
        with: {}
"#;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn per_step_figures_add_up_to_the_flow_totals() {
        let ir = ir_of(MIXED);
        let (id, _) = ir.flow("main").unwrap();
        let inputs = serde_json::json!({"items": ["a", "b", "c"]});
        let c = analyze_cost(&ir, id, Some(&inputs), &round_config());
        type Of = fn(&StepCost) -> &Estimate;
        let dims: [(&Estimate, Of); 4] = [
            (&c.dispatches, |s| &s.dispatches),
            (&c.tokens, |s| &s.tokens),
            (&c.usd, |s| &s.usd),
            (&c.agent_ms, |s| &s.ms),
        ];
        for (total, of) in dims {
            let sum = |f: fn(&Estimate) -> f64| c.steps.iter().map(|s| f(of(s))).sum::<f64>();
            assert!(close(sum(|e| e.min), total.min), "{total:?}");
            assert!(close(sum(|e| e.expected), total.expected), "{total:?}");
            let worst = sum(|e| e.worst.expect("inputs make every worst case concrete"));
            assert!(close(worst, total.worst.unwrap()), "{total:?}");
        }
        // draft: 2 attempts of 1000 + 100 (judge) tokens, 3 entries (2 rounds)
        let draft = &c.steps[0];
        assert_eq!(draft.tokens.worst, Some(3.0 * 2.0 * 1100.0));
        assert_eq!(draft.tokens.min, 1100.0);
        assert!(close(draft.tokens.expected, 1.5 * 1100.0));
        assert_eq!(draft.ms.worst, Some(3.0 * 2.0 * 1010.0));
        assert!(close(draft.usd.worst.unwrap(), 6.6));
        // rescue runs only when draft fails (1 - 0.5^2): nothing on the happy path
        let rescue = &c.steps[1];
        assert_eq!(rescue.tokens.min, 0.0);
        assert!(close(rescue.tokens.expected, 0.25 * 2000.0));
        // the gate costs nothing; the fanout's summed time covers every
        // item, in each of its 3 entries (the revise resets it too)
        assert_eq!(c.steps[2].tokens.worst, Some(0.0));
        assert_eq!(c.steps[3].entries, 3);
        let item = 2.0 * 1000.0 + 3.0 * 2000.0;
        assert_eq!(c.steps[3].ms.worst, Some(3.0 * 3.0 * item));
        // the sub-flow call: its flow's figures, per entry
        assert_eq!(c.steps[4].tokens.worst, Some(3.0 * 2.0 * 2000.0));
        assert!(c.steps.iter().all(|s| s.basis.is_none()));
    }

    #[test]
    fn history_replaces_the_profile_and_the_spec_hint_wins() {
        let text = r#"version: 1
contracts:
  Out: {text: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${b.output}", contract: Out}
    steps:
      - id: a
        do: "A"
        out: Out
        attempts: 3
        ensure:
          - judged: {statement: "good", stakes: cheap}
      - {id: b, after: [a], do: "B", out: Out, attempts: 2, cost: {tokens: 5}}
      - {id: c, after: [b], do: "C", out: Out, attempts: 2}
"#;
        let ir = ir_of(text);
        let seen = Observed {
            tokens: Some(10.0),
            usd: Some(0.5),
            ms: None,
            p: Some(1.0),
            judge_tokens: Some(7.0),
            basis: Basis {
                runs: 2,
                dispatches: 3,
            },
        };
        let mut history = BTreeMap::new();
        history.insert(("main".to_string(), "a".to_string()), seen);
        history.insert(("main".to_string(), "b".to_string()), seen);
        let config = round_config().with_history(history);
        let c = analyze_cost(&ir, 0, None, &config);
        let a = &c.steps[0];
        // every attempt passed: one dispatch expected, the worst unchanged
        assert_eq!(a.dispatches.expected, 1.0);
        assert_eq!(a.dispatches.worst, Some(3.0));
        // 10 tokens per dispatch and 7 per judge call; ms keeps the profile's
        assert_eq!(a.tokens.expected, 17.0);
        assert_eq!(a.tokens.worst, Some(51.0));
        assert_eq!(a.ms.expected, 1010.0);
        assert_eq!(
            a.basis,
            Some(Basis {
                runs: 2,
                dispatches: 3
            })
        );
        // b's own hint (5 tokens) wins over history; its usd is history's
        let b = &c.steps[1];
        assert_eq!(b.tokens.worst, Some(10.0));
        assert_eq!(b.usd.worst, Some(1.0));
        // c has no history: the profile, and it says so
        let step_c = &c.steps[2];
        assert_eq!(step_c.basis, None);
        assert_eq!(step_c.tokens.worst, Some(2000.0));
        assert!(close(step_c.dispatches.expected, 1.5));
        // the flow's totals move with the observed figures
        let plain = analyze_cost(&ir, 0, None, &round_config());
        assert!(c.tokens.expected < plain.tokens.expected);
    }
}
