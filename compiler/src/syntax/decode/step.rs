//! Decoding one step: construct detection, the construct/field matrix, the
//! fields every construct shares, and each construct's own value (`do`,
//! `set`, `gate`, `fanout` with its stages, `run` with `with`, `evaluate`).
//!
//! Owns: the step schema of v1 (the key tables it reads are in the parent
//! module, where `schema` and the IDE read them too).
//! Must never: resolve step ids or contracts (that is `check`).

use super::{
    CONSTRUCTS, DISPATCHES, Decoder, EVALUATE_FIELDS, FANOUT_FIELDS, GATE_FIELDS, ISOLATIONS,
    ITERATE_FIELDS, MERGES, Obj, REQUIRE_WORDS, SHARED_STEP_FIELDS, STAGE_FIELDS, STEP_FIELDS,
    allowed_for, name,
};
use crate::diagnostics::{Code, Diagnostic};
use crate::source::Span;
use crate::syntax::ast::{
    Evaluate, Fanout, Gate, GateOptions, Iterate, Name, Require, Route, Stage, Step, StepKind,
    WithEntry,
};
use crate::yaml::{Entry, Node, Str, Value};

impl Decoder<'_> {
    pub(super) fn step(&mut self, item: &Node) -> Option<Step> {
        let obj = self.obj(item, "a step", None)?;
        self.strict(&obj, STEP_FIELDS, "a step");
        let id = match obj.get("id") {
            Some(e) => self.step_id(&e.value, "`id`"),
            None => {
                self.err(
                    Code::MissingField,
                    obj.owner,
                    "a step is missing the required field `id`",
                );
                None
            }
        };
        let label = id
            .as_ref()
            .map_or_else(|| "this step".to_string(), |n| format!("step `{}`", n.text));
        let construct = self.construct(&obj, &label);
        if let Some(c) = construct {
            self.construct_fields(&obj, c);
        }
        let kw = construct.map(|c| c.key.text.as_str());
        let mut step = Step {
            span: item.span,
            id,
            construct_span: construct.map_or(item.span, |c| c.key.span),
            kind: StepKind::Broken,
            after: Vec::new(),
            when: None,
            agent: None,
            out: None,
            ensure: Vec::new(),
            attempts: None,
            iterate: None,
            budget: None,
            cost: None,
            timeout_ms: None,
            artifacts: Vec::new(),
            scope: None,
            on_fail: Vec::new(),
            on_fail_list: false,
            routes: Vec::new(),
            out_broken: false,
        };
        self.step_fields(&obj, kw, &mut step);
        if let Some(construct) = construct {
            step.kind = self.step_kind(&obj, construct, &label);
        }
        Some(step)
    }

    /// Construct detection: the one key of `CONSTRUCTS` a step has (the
    /// first, when it has several).
    fn construct<'a>(&mut self, obj: &Obj<'a>, label: &str) -> Option<&'a Entry> {
        let present: Vec<&Entry> = obj
            .entries
            .iter()
            .filter(|e| CONSTRUCTS.contains(&e.key.text.as_str()))
            .collect();
        match present.as_slice() {
            [] => {
                let d = self.err(
                    Code::MissingConstruct,
                    obj.owner,
                    format!("{label} names no construct"),
                );
                d.notes.push(
                    "every step has exactly one of `do`, `set`, `gate`, `fanout`, `run`".into(),
                );
                None
            }
            [one] => Some(*one),
            [first, second, ..] => {
                let d = Diagnostic::new(
                    Code::ConstructMix,
                    second.key.span,
                    format!(
                        "{label} has both `{}` and `{}`",
                        first.key.text, second.key.text
                    ),
                )
                .with_span_label("second construct")
                .with_label(first.key.span, "first construct")
                .with_help("a step has exactly one construct; split it into two steps");
                self.sink.push(d);
                Some(*first)
            }
        }
    }

    /// The construct/field matrix: step fields that `construct` does not take.
    fn construct_fields(&mut self, obj: &Obj<'_>, construct: &Entry) {
        let kw = construct.key.text.as_str();
        let allowed = allowed_for(kw);
        for e in obj.entries {
            let k = e.key.text.as_str();
            if STEP_FIELDS.contains(&k)
                && !CONSTRUCTS.contains(&k)
                && !SHARED_STEP_FIELDS.contains(&k)
                && !allowed.contains(&k)
            {
                let d = Diagnostic::new(
                    Code::FieldForKind,
                    e.key.span,
                    format!("a `{kw}` step does not take `{k}`"),
                )
                .with_label(construct.key.span, format!("this is a `{kw}` step"))
                .with_note(if allowed.is_empty() {
                    format!("a `{kw}` step takes only `id`, `after` and `when` besides `{kw}`")
                } else {
                    format!(
                        "a `{kw}` step takes `id`, `after`, `when`, `{kw}` and: {}",
                        allowed.join(", ")
                    )
                });
                self.sink.push(d);
            }
        }
    }

    /// The fields besides the construct, each read only when the construct
    /// `kw` takes it (the others are reported by [`Self::construct_fields`]).
    fn step_fields(&mut self, obj: &Obj<'_>, kw: Option<&str>, step: &mut Step) {
        let allowed = |k: &str| kw.is_some_and(|kw| allowed_for(kw).contains(&k));
        if let Some(a) = obj.get("after") {
            match &a.value.value {
                Value::Sequence(items) => {
                    for i in items {
                        if let Some(n) = self.step_id(i, "an `after` entry") {
                            step.after.push(n);
                        }
                    }
                }
                _ => self.wrong_type(&a.value, "a list of step ids", "`after`"),
            }
        }
        if let Some(w) = obj.get("when") {
            step.when = self.string(&w.value, "`when`");
        }
        if let Some(a) = obj.get("agent").filter(|_| allowed("agent")) {
            step.agent = self.agent(&a.value);
        }
        if let Some(o) = obj.get("out").filter(|_| allowed("out")) {
            step.out = self.string(&o.value, "`out`").map(|s| name(&s));
            step.out_broken = step.out.is_none();
        }
        if let Some(e) = obj.get("ensure").filter(|_| allowed("ensure")) {
            step.ensure = self.ensure(&e.value);
        }
        if let Some(a) = obj.get("attempts").filter(|_| allowed("attempts")) {
            step.attempts = self.positive_int(&a.value, "`attempts`");
        }
        if let Some(i) = obj.get("iterate").filter(|_| allowed("iterate")) {
            step.iterate = self.iterate(i);
        }
        if let Some(b) = obj.get("budget").filter(|_| allowed("budget")) {
            step.budget = self.budget(&b.value, b.key.span);
        }
        if let Some(c) = obj.get("cost").filter(|_| allowed("cost")) {
            step.cost = self.cost_hint(c);
        }
        if let Some(t) = obj.get("timeout_ms").filter(|_| allowed("timeout_ms")) {
            step.timeout_ms = self.lease(&t.value, "`timeout_ms`");
        }
        if let Some(a) = obj.get("artifacts").filter(|_| allowed("artifacts")) {
            step.artifacts = self.string_list(&a.value, "`artifacts`");
        }
        if let Some(sc) = obj.get("scope").filter(|_| allowed("scope")) {
            step.scope = self.scope(sc);
        }
        if let Some(f) = obj.get("on_fail").filter(|_| allowed("on_fail")) {
            (step.on_fail, step.on_fail_list) = self.on_fail(&f.value);
        }
        if let Some(r) = obj.get("route").filter(|_| allowed("route")) {
            step.routes = self.routes(&r.value);
        }
    }

    /// `iterate: {max, until}`.
    fn iterate(&mut self, e: &Entry) -> Option<Iterate> {
        let it = self.obj(&e.value, "`iterate`", Some(e.key.span))?;
        self.strict(&it, ITERATE_FIELDS, "`iterate`");
        let max = self
            .required(&it, "max", "`iterate`")
            .and_then(|m| self.positive_int(&m.value, "`iterate.max`"));
        let until = self
            .required(&it, "until", "`iterate`")
            .and_then(|u| self.string(&u.value, "`iterate.until`"));
        Some(Iterate { max, until })
    }

    /// The construct's own value.
    fn step_kind(&mut self, obj: &Obj<'_>, construct: &Entry, label: &str) -> StepKind {
        match construct.key.text.as_str() {
            "do" => self
                .string(&construct.value, "`do`")
                .map_or(StepKind::Broken, StepKind::Do),
            "set" => {
                if obj.get("out").is_none() {
                    let d = self.err(
                        Code::MissingField,
                        obj.owner,
                        format!("{label} is a `set` step without `out`"),
                    );
                    d.notes.push(
                        "a `set` step builds an object that its `out` contract checks".into(),
                    );
                    d.help = Some("add `out: <Contract>` naming the contract of the object".into());
                }
                self.set(&construct.value, construct.key.span)
                    .map_or(StepKind::Broken, StepKind::Set)
            }
            "gate" => self
                .gate(construct)
                .map_or(StepKind::Broken, StepKind::Gate),
            "fanout" => self
                .fanout(construct)
                .map_or(StepKind::Broken, StepKind::Fanout),
            "run" => self.run(obj, construct, label),
            _ => self
                .evaluate(construct)
                .map_or(StepKind::Broken, StepKind::Evaluate),
        }
    }

    /// `evaluate: {command, timeout_ms, in?}` (v1 §4.9, X12).
    fn evaluate(&mut self, e: &Entry) -> Option<Evaluate> {
        let obj = self.obj(&e.value, "`evaluate`", Some(e.key.span))?;
        self.strict(&obj, EVALUATE_FIELDS, "`evaluate`");
        let command = self
            .required(&obj, "command", "`evaluate`")
            .and_then(|c| self.command_name(&c.value, "`evaluate.command`"));
        let timeout_ms = match obj.get("timeout_ms") {
            Some(t) => self.positive_int(&t.value, "`evaluate.timeout_ms`"),
            None => {
                let d = self.err(
                    Code::MissingField,
                    obj.owner,
                    "`evaluate` is missing the required field `timeout_ms`",
                );
                d.help = Some("add `timeout_ms: 60000` (the most milliseconds the command may run; the smaller of it and the command's `timeout_ms` in stratum.toml applies)".into());
                None
            }
        };
        let input = match obj.get("in") {
            Some(i) => Some(self.string(&i.value, "`evaluate.in`")?),
            None => None,
        };
        Some(Evaluate {
            command: command?,
            timeout_ms: timeout_ms?,
            input,
            key: e.key.span,
        })
    }

    /// A `run` step: the callee and its `with` mapping.
    fn run(&mut self, obj: &Obj<'_>, construct: &Entry, label: &str) -> StepKind {
        let flow = self.string(&construct.value, "`run`").map(|s| name(&s));
        let (with, with_span) = match obj.get("with") {
            Some(w) => match &w.value.value {
                Value::Mapping(entries) => (
                    Some(
                        entries
                            .iter()
                            .filter(|e| !self.reserved(&e.key, "a `with` key"))
                            .map(|e| WithEntry {
                                key: name(&e.key),
                                value: e.value.clone(),
                            })
                            .collect(),
                    ),
                    Some(w.key.span),
                ),
                _ => {
                    self.wrong_type(&w.value, "a mapping", "`with`");
                    (None, Some(w.key.span))
                }
            },
            None => {
                let d = self.err(
                    Code::MissingField,
                    obj.owner,
                    format!("{label} is a `run` step without `with`"),
                );
                d.help = Some("add `with:` giving a value for every input of the called flow (`with: {}` when it has none)".into());
                (None, None)
            }
        };
        flow.map_or(StepKind::Broken, |flow| StepKind::Run {
            flow,
            with,
            with_span,
        })
    }

    fn set(&mut self, node: &Node, owner: Span) -> Option<Vec<(Name, Option<Str>)>> {
        let obj = self.obj(node, "`set`", Some(owner))?;
        let mut out = Vec::new();
        for e in obj.entries {
            if self.reserved(&e.key, "a `set` key") {
                continue;
            }
            let value = self.string(&e.value, &format!("`set.{}` (an expression)", e.key.text));
            out.push((name(&e.key), value));
        }
        Some(out)
    }

    fn route(&mut self, obj: &Obj<'_>, key: &str) -> Route {
        let Some(e) = obj.get(key) else {
            let d = self.err(
                Code::MissingField,
                obj.owner,
                format!("`gate` is missing the required field `{key}`"),
            );
            d.help = Some(format!(
                "add `{key}: null` if this decision has no target step"
            ));
            return Route::Missing;
        };
        match &e.value.value {
            Value::Null => Route::Null(e.value.span),
            _ => self
                .step_id(&e.value, &format!("`{key}`"))
                .map_or(Route::Missing, Route::Step),
        }
    }

    fn gate(&mut self, e: &Entry) -> Option<Gate> {
        let obj = self.obj(&e.value, "`gate`", Some(e.key.span))?;
        self.strict(&obj, GATE_FIELDS, "`gate`");
        let on_approve = self.route(&obj, "on_approve");
        let on_revise = self.route(&obj, "on_revise");
        let on_kill = self.route(&obj, "on_kill");
        let max_rounds = obj
            .get("max_rounds")
            .and_then(|m| self.positive_int(&m.value, "`gate.max_rounds`"));
        let prompt = obj
            .get("prompt")
            .and_then(|p| self.string(&p.value, "`gate.prompt`"));
        let show = obj
            .get("show")
            .map(|s| self.string_list(&s.value, "`gate.show`"))
            .unwrap_or_default();
        let options = obj.get("options").and_then(|o| self.gate_options(&o.value));
        Some(Gate {
            on_approve,
            on_revise,
            on_kill,
            max_rounds,
            prompt,
            show,
            options,
        })
    }

    /// `gate.options` (X10): a list of strings (S0331 for an entry that is
    /// not one, S0333 for an empty list or a repeated option) or a template.
    fn gate_options(&mut self, node: &Node) -> Option<GateOptions> {
        let items = match &node.value {
            Value::String(s) => return Some(GateOptions::Template(s.clone())),
            Value::Sequence(items) => items,
            _ => {
                let d = self.err(
                    Code::GateOptionNotString,
                    node.span,
                    "`gate.options` must be a list of strings or a template that renders to one",
                );
                d.help = Some("write `options: [approve-as-is, rework]`".into());
                return None;
            }
        };
        if items.is_empty() {
            let d = self.err(
                Code::GateOptionsInvalid,
                node.span,
                "`gate.options` is empty",
            );
            d.help = Some("list at least one option, or remove `options`".into());
            return None;
        }
        let mut out: Vec<Str> = Vec::new();
        for item in items {
            let Value::String(s) = &item.value else {
                let d = self.err(
                    Code::GateOptionNotString,
                    item.span,
                    "a gate option must be a string",
                );
                d.help = Some("quote the option: `\"3\"`".into());
                continue;
            };
            if out.iter().any(|o| o.text == s.text) {
                let d = self.err(
                    Code::GateOptionsInvalid,
                    item.span,
                    format!("the gate option `{}` is listed twice", s.text),
                );
                d.help = Some("list each option once".into());
                continue;
            }
            out.push(s.clone());
        }
        Some(GateOptions::List(out))
    }

    fn fanout(&mut self, e: &Entry) -> Option<Fanout> {
        let obj = self.obj(&e.value, "`fanout`", Some(e.key.span))?;
        self.strict(&obj, FANOUT_FIELDS, "`fanout`");
        let over = self
            .required(&obj, "over", "`fanout`")
            .and_then(|o| self.string(&o.value, "`fanout.over`"));
        let mut stages = Vec::new();
        if let Some(s) = self.required(&obj, "steps", "`fanout`") {
            match &s.value.value {
                Value::Sequence(items) if items.is_empty() => {
                    self.err(
                        Code::InvalidValue,
                        s.value.span,
                        "a fanout needs at least one stage in `steps`",
                    );
                }
                Value::Sequence(items) => {
                    for i in items {
                        if let Some(st) = self.stage(i) {
                            stages.push(st);
                        }
                    }
                }
                _ => self.wrong_type(&s.value, "a list of stages", "`fanout.steps`"),
            }
        }
        let concurrency = self
            .required(&obj, "concurrency", "`fanout`")
            .and_then(|c| self.positive_int(&c.value, "`fanout.concurrency`"));
        let isolation = self.required(&obj, "isolation", "`fanout`").and_then(|i| {
            self.one_of(&i.value, "isolation", ISOLATIONS)
                .map(|v| (v, i.value.span))
        });
        let require =
            self.required(&obj, "require", "`fanout`")
                .and_then(|r| match r.value.value {
                    Value::Number(_) => self
                        .positive_int(&r.value, "`fanout.require`")
                        .map(|n| Require::AtLeast(n.value)),
                    _ => self.one_of(&r.value, "require", REQUIRE_WORDS),
                });
        if let Some(m) = self.required(&obj, "merge", "`fanout`") {
            self.one_of(&m.value, "merge", MERGES);
        }
        let mut pre_merge = Vec::new();
        if let Some(p) = obj.get("pre_merge") {
            match &p.value.value {
                Value::Sequence(items) => {
                    for i in items {
                        if let Some(s) = self.string(i, "a `pre_merge` command") {
                            pre_merge.push(s);
                        }
                    }
                }
                _ => self.wrong_type(&p.value, "a list of commands", "`pre_merge`"),
            }
        }
        let dispatch = obj
            .get("dispatch")
            .and_then(|d| self.one_of(&d.value, "dispatch", DISPATCHES))
            .unwrap_or_default();
        Some(Fanout {
            over,
            stages,
            concurrency,
            isolation,
            require,
            pre_merge,
            dispatch,
        })
    }

    fn stage(&mut self, item: &Node) -> Option<Stage> {
        let obj = self.obj(item, "a fanout stage", None)?;
        self.strict(&obj, STAGE_FIELDS, "a fanout stage");
        let task = match obj.get("do") {
            Some(d) => self.string(&d.value, "`do`"),
            None => {
                self.err(
                    Code::MissingField,
                    obj.owner,
                    "a fanout stage is missing the required field `do`",
                );
                None
            }
        };
        Some(Stage {
            span: item.span,
            task,
            agent: obj.get("agent").and_then(|a| self.agent(&a.value)),
            out: obj
                .get("out")
                .and_then(|o| self.string(&o.value, "`out`"))
                .map(|s| name(&s)),
            ensure: obj
                .get("ensure")
                .map(|e| self.ensure(&e.value))
                .unwrap_or_default(),
            attempts: obj
                .get("attempts")
                .and_then(|a| self.positive_int(&a.value, "`attempts`")),
            when: obj
                .get("when")
                .and_then(|w| self.string(&w.value, "`when`")),
            cost: obj.get("cost").and_then(|c| self.cost_hint(c)),
            timeout_ms: obj
                .get("timeout_ms")
                .and_then(|t| self.lease(&t.value, "`timeout_ms`")),
            artifacts: obj
                .get("artifacts")
                .map(|a| self.string_list(&a.value, "`artifacts`"))
                .unwrap_or_default(),
            scope: obj.get("scope").and_then(|sc| self.scope(sc)),
            on_fail: obj
                .get("on_fail")
                .map(|f| self.on_fail(&f.value).0)
                .unwrap_or_default(),
        })
    }
}
