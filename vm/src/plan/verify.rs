//! Verification on load: every index in range, every jump in bounds and onto
//! an instruction, stack depths within the recorded bound, builtin arities,
//! topological step order, closures and `with` trees well-formed.
//!
//! Owns: the invariants the VM relies on when it indexes a plan.
//! Must never: panic or index unchecked; it runs on untrusted plans.

use super::op::{self, BUILTINS, Op};
use super::*;

/// Why a plan is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{where_}: {what}")]
pub struct VerifyError {
    /// Where in the plan.
    pub where_: String,
    /// What is wrong.
    pub what: String,
}

struct V<'p> {
    plan: &'p Plan,
    /// Where we are, formatted only when something fails: (what, flow, index).
    at: (&'static str, usize, usize),
}

type R = Result<(), VerifyError>;

/// Deepest `with` nesting accepted.
pub const MAX_WITH_DEPTH: u32 = 64;

impl V<'_> {
    fn fail(&self, what: impl Into<String>) -> R {
        Err(self.err(what))
    }

    fn err(&self, what: impl Into<String>) -> VerifyError {
        VerifyError {
            where_: where_text(self.at),
            what: what.into(),
        }
    }

    fn idx(&self, i: u32, len: usize, what: &str) -> R {
        if (i as usize) < len {
            Ok(())
        } else {
            self.fail(format!("{what} index {i} out of range (0..{len})"))
        }
    }

    fn s(&self, id: StrId) -> R {
        self.idx(id, self.plan.strings.len(), "string")
    }

    fn record(&self, r: u32) -> R {
        self.idx(r, self.plan.records.len(), "record")
    }

    fn ty(&self, t: &TypeDef) -> R {
        match &t.base {
            BaseType::Enum(values) => values.iter().try_for_each(|v| self.s(*v)),
            BaseType::Record(r) => self.record(*r),
            _ => Ok(()),
        }
    }

    fn path(&self, path: &[Seg]) -> R {
        path.iter().try_for_each(|s| match s {
            Seg::Field(f) => self.s(*f),
            Seg::Index(_) => Ok(()),
        })
    }
}

/// A dispatch lease (X7) is at least one millisecond.
fn lease(v: &V<'_>, timeout_ms: Option<u64>) -> R {
    match timeout_ms {
        Some(0) => v.fail("a dispatch lease (`timeout_ms`) of 0 ms"),
        _ => Ok(()),
    }
}

/// Checks every invariant of a plan.
pub fn verify(plan: &Plan) -> R {
    let mut v = V {
        plan,
        at: ("plan", 0, 0),
    };
    v.idx(plan.entry, plan.flows.len(), "entry flow")?;
    for (ri, r) in plan.records.iter().enumerate() {
        v.at = ("record", 0, ri);
        v.s(r.name)?;
        for f in &r.fields {
            v.s(f.name)?;
            v.ty(&f.ty)?;
        }
    }
    for (fi, flow) in plan.flows.iter().enumerate() {
        v.at = ("flow", fi, 0);
        verify_flow(&mut v, flow, fi)?;
    }
    Ok(())
}

fn verify_flow(v: &mut V<'_>, flow: &FlowDef, fi: usize) -> R {
    let plan = v.plan;
    let n = flow.steps.len();
    v.s(flow.name)?;
    v.record(flow.input)?;
    v.idx(flow.output.step, n, "output step")?;
    v.record(flow.output.contract)?;
    v.path(&flow.output.path)?;
    bound(v, &flow.worst_dispatches)?;
    for e in &flow.edges {
        v.idx(e.from, n, "edge source")?;
        v.idx(e.to, n, "edge target")?;
        if e.from >= e.to {
            return v.fail(format!(
                "edge {} → {} does not follow the topological order",
                e.from, e.to
            ));
        }
    }
    for (ci, c) in flow.closures.iter().enumerate() {
        v.at = ("closure", fi, ci);
        v.idx(c.gate, n, "gate")?;
        v.idx(c.target, n, "revise target")?;
        if c.steps.len() != n.div_ceil(64) {
            return v.fail(format!("bitset has {} words for {n} steps", c.steps.len()));
        }
        if !n.is_multiple_of(64)
            && let Some(last) = c.steps.last()
            && last >> (n % 64) != 0
        {
            return v.fail("bitset has bits beyond the last step");
        }
    }
    for (ti, t) in flow.templates.iter().enumerate() {
        v.at = ("template", fi, ti);
        for p in &t.pieces {
            match p {
                PieceDef::Text(s) => v.s(*s)?,
                PieceDef::Ref(r) => reference(v, r, flow)?,
            }
        }
        if t.mode != TemplateMode::Interpolate && !matches!(t.pieces.as_slice(), [PieceDef::Ref(_)])
        {
            return v.fail("a full-value template must be exactly one reference");
        }
    }
    let mut depth = vec![0u32; flow.with_nodes.len()];
    for (wi, w) in flow.with_nodes.iter().enumerate() {
        v.at = ("with node", fi, wi);
        let children: Vec<u32> = match w {
            WithNode::Template(t) => {
                v.idx(*t, flow.templates.len(), "template")?;
                Vec::new()
            }
            WithNode::List(items) => items.clone(),
            WithNode::Map(entries) => {
                for (k, _) in entries {
                    v.s(*k)?;
                }
                entries.iter().map(|(_, c)| *c).collect()
            }
            _ => Vec::new(),
        };
        let mut d = 0;
        for c in children {
            if c as usize >= wi {
                return v.fail(format!("child node {c} does not come before its parent"));
            }
            d = d.max(depth[c as usize] + 1);
        }
        if d > MAX_WITH_DEPTH {
            return v.fail(format!("`with` value nested deeper than {MAX_WITH_DEPTH}"));
        }
        depth[wi] = d;
    }
    for (ci, c) in flow.carry.iter().enumerate() {
        v.at = ("carry", fi, ci);
        v.s(c.name)?;
        reference(v, &c.initial, flow)?;
        for (g, r) in &c.on_revise {
            v.idx(*g, n, "gate")?;
            reference(v, r, flow)?;
        }
    }
    for (ci, c) in flow.chunks.iter().enumerate() {
        v.at = ("chunk", fi, ci);
        chunk(v, c)?;
    }
    let chunk_ok = |v: &V<'_>, c: u32| v.idx(c, flow.chunks.len(), "chunk");
    let template_ok = |v: &V<'_>, t: u32| v.idx(t, flow.templates.len(), "template");
    let scope_ok = |v: &V<'_>, sc: Option<&crate::plan::ScopeDef>| -> R {
        for a in sc.iter().flat_map(|sc| sc.files.iter().chain(&sc.create)) {
            template_ok(v, a.template)?;
        }
        Ok(())
    };
    for (si, s) in flow.steps.iter().enumerate() {
        v.at = ("step", fi, si);
        v.s(s.id)?;
        if let Some(c) = s.when {
            chunk_ok(v, c)?;
        }
        if let Some(o) = s.out {
            v.record(o)?;
        }
        if let Some(f) = s.on_fail {
            v.idx(f, n, "on_fail target")?;
        }
        lease(v, s.timeout_ms)?;
        if s.timeout_ms.is_some() && !matches!(s.kind, StepKindDef::Do { .. }) {
            return v.fail("only `do` steps have a dispatch lease (`timeout_ms`)");
        }
        if !s.artifacts.is_empty() && !matches!(s.kind, StepKindDef::Do { .. }) {
            return v.fail("only `do` steps and fanout stages have `artifacts`");
        }
        for a in &s.artifacts {
            template_ok(v, a.template)?;
        }
        if s.scope.is_some() && !matches!(s.kind, StepKindDef::Do { .. }) {
            return v.fail("only `do` steps and fanout stages have a `scope`");
        }
        scope_ok(v, s.scope.as_ref())?;
        on_fail_entries(v, &s.on_fail_routes, flow, si)?;
        for r in &s.routes {
            chunk_ok(v, r.when)?;
            match r.action {
                RouteAction::Goto { target, note, .. } => {
                    v.idx(target, n, "route target")?;
                    if target as usize >= si {
                        return v.fail("a route goes back to an earlier step");
                    }
                    if let Some(t) = note {
                        template_ok(v, t)?;
                    }
                }
                RouteAction::Fail { reason } => template_ok(v, reason)?,
            }
        }
        bound(v, &s.worst_dispatches)?;
        predicates(v, &s.ensure, flow)?;
        match &s.kind {
            StepKindDef::Do { task, iterate, .. } => {
                template_ok(v, *task)?;
                if let Some((_, c)) = iterate {
                    chunk_ok(v, *c)?;
                }
            }
            StepKindDef::Set { fields } => {
                for (k, c) in fields {
                    v.s(*k)?;
                    chunk_ok(v, *c)?;
                }
            }
            StepKindDef::Gate {
                on_approve,
                on_revise,
                on_kill,
                prompt,
                show,
                options,
                ..
            } => {
                for t in [on_approve, on_revise, on_kill].into_iter().flatten() {
                    v.idx(*t, n, "gate target")?;
                }
                for t in prompt.iter().chain(show) {
                    template_ok(v, *t)?;
                }
                match options {
                    Some(super::GateOptionsDef::Template(t)) => template_ok(v, *t)?,
                    Some(super::GateOptionsDef::List(list)) => {
                        for s in list {
                            v.s(*s)?;
                        }
                    }
                    None => {}
                }
            }
            StepKindDef::Fanout {
                over,
                stages,
                pre_merge,
                ..
            } => {
                template_ok(v, *over)?;
                for st in stages {
                    template_ok(v, st.task)?;
                    lease(v, st.timeout_ms)?;
                    for a in &st.artifacts {
                        template_ok(v, a.template)?;
                    }
                    scope_ok(v, st.scope.as_ref())?;
                    if let Some(o) = st.out {
                        v.record(o)?;
                    }
                    if let Some(c) = st.when {
                        chunk_ok(v, c)?;
                    }
                    predicates(v, &st.ensure, flow)?;
                    // X9: a stage takes `continue` and `goto` entries only
                    if st.on_fail.iter().any(|e| {
                        matches!(e.action, OnFailAction::Step(_) | OnFailAction::Fail)
                            || e.rollback.is_some()
                    }) {
                        return v.fail(
                            "a fanout stage's `on_fail` entries are `continue` or `goto` only",
                        );
                    }
                    on_fail_entries(v, &st.on_fail, flow, si)?;
                }
                for p in pre_merge {
                    v.s(*p)?;
                }
            }
            StepKindDef::Run {
                flow: callee,
                with,
                iterate,
            } => {
                v.idx(*callee, plan.flows.len(), "called flow")?;
                if let Some((_, until)) = iterate {
                    chunk_ok(v, *until)?;
                }
                for (k, node) in with {
                    v.s(*k)?;
                    v.idx(*node, flow.with_nodes.len(), "with node")?;
                }
            }
            StepKindDef::Evaluate {
                command,
                timeout_ms,
                input,
            } => {
                v.s(*command)?;
                if *timeout_ms == 0 {
                    v.fail("evaluate timeout_ms is 0".to_owned())?;
                }
                if let Some(t) = input {
                    v.idx(*t, flow.templates.len(), "evaluate input template")?;
                }
            }
        }
    }
    Ok(())
}

/// The X9 `on_fail` entries of step `si` (or of one of its fanout stages):
/// conditions, targets (earlier steps) and notes in range.
fn on_fail_entries(v: &V<'_>, entries: &[OnFailDef], flow: &FlowDef, si: usize) -> R {
    let n = flow.steps.len();
    for e in entries {
        if let Some(c) = e.when {
            v.idx(c, flow.chunks.len(), "chunk")?;
        }
        match e.action {
            OnFailAction::Step(t) => v.idx(t, n, "on_fail target")?,
            OnFailAction::Continue => {}
            OnFailAction::Fail if e.rollback.is_none() => {
                return v.fail("an `on_fail` entry that only fails names its rollback target");
            }
            OnFailAction::Fail => {}
            OnFailAction::Goto { target, note, .. } => {
                v.idx(target, n, "on_fail goto target")?;
                if target as usize >= si {
                    return v.fail("an `on_fail` goto goes back to an earlier step");
                }
                if let Some(t) = note {
                    v.idx(t, flow.templates.len(), "template")?;
                }
            }
        }
    }
    Ok(())
}

fn bound(v: &V<'_>, b: &Bound) -> R {
    match b {
        Bound::Finite(_) => Ok(()),
        Bound::Symbolic(text) => v.s(*text),
    }
}

fn predicates(v: &V<'_>, preds: &[PredDef], flow: &FlowDef) -> R {
    for p in preds {
        match p {
            PredDef::Expr(c) => v.idx(*c, flow.chunks.len(), "chunk")?,
            PredDef::FileExists(s) => v.s(*s)?,
            PredDef::FileContains(a, b) => {
                v.s(*a)?;
                v.s(*b)?;
            }
            PredDef::Judged(s, _) => v.s(*s)?,
            PredDef::FileExistsAt(t) => v.idx(*t, flow.templates.len(), "file path template")?,
            PredDef::FileContainsAt(t, text) => {
                v.idx(*t, flow.templates.len(), "file path template")?;
                v.s(*text)?;
            }
            PredDef::Scored {
                rubric,
                threshold,
                judge,
                inputs,
            } => {
                v.idx(*rubric, flow.templates.len(), "rubric template")?;
                for t in inputs {
                    v.idx(*t, flow.templates.len(), "judge input template")?;
                }
                if let Some(j) = judge {
                    v.s(*j)?;
                }
                if !(0.0..=1.0).contains(threshold) {
                    v.fail(format!("judge threshold {threshold} is not in [0, 1]"))?;
                }
            }
            PredDef::Exec {
                run,
                args,
                expect_exit,
                timeout_ms,
            } => {
                v.s(*run)?;
                for t in args {
                    v.idx(*t, flow.templates.len(), "exec argument template")?;
                }
                if !(0..=255).contains(expect_exit) {
                    v.fail(format!("exec expect_exit {expect_exit} is not in 0..=255"))?;
                }
                if *timeout_ms == Some(0) {
                    v.fail("exec timeout_ms is 0".to_owned())?;
                }
            }
        }
    }
    Ok(())
}

fn reference(v: &V<'_>, r: &RefDef, flow: &FlowDef) -> R {
    match r.target {
        RefTarget::Step(s)
        | RefTarget::Status(s)
        | RefTarget::Failure(s)
        | RefTarget::Note(s)
        | RefTarget::Choice(s) => v.idx(s, flow.steps.len(), "referenced step")?,
        RefTarget::Carry(c) => v.idx(c, flow.carry.len(), "carry variable")?,
        _ => {}
    }
    v.path(&r.path)
}

/// Bytecode: decodable, operands in range, forward jumps onto instructions,
/// consistent stack depths, ends with `Return` at depth 1.
fn chunk(v: &V<'_>, c: &Chunk) -> R {
    v.s(c.source)?;
    for k in &c.consts {
        if let ConstDef::Str(s) = k {
            v.s(*s)?;
        }
    }
    if c.code.is_empty() {
        return v.fail("empty bytecode");
    }
    // depth expected at each pc reached by a jump
    // expected stack depth at each jump target (u32::MAX: none), and instruction starts
    let mut targets: Vec<u32> = vec![u32::MAX; c.code.len() + 1];
    let mut depth: Option<u32> = Some(0);
    let mut max = 0u32;
    let mut pc = 0usize;
    let mut returned = false;
    let mut starts = vec![false; c.code.len() + 1];
    let mut loops: Vec<Loop> = Vec::new();
    while pc < c.code.len() {
        starts[pc] = true;
        let i = op::decode(&c.code, pc).map_err(|e| VerifyError {
            where_: where_text(v.at),
            what: format!("{e:?}"),
        })?;
        if let Some(&d) = targets.get(pc).filter(|&&d| d != u32::MAX) {
            match depth {
                Some(cur) if cur != d => {
                    return v.fail(format!(
                        "stack depth {cur} at pc {pc} differs from {d} on the jump there"
                    ));
                }
                None => depth = Some(d),
                _ => {}
            }
        }
        let Some(d) = depth else {
            return v.fail(format!("unreachable instruction at pc {pc}"));
        };
        let (pops, pushes) = effect(v, &i)?;
        if d < pops {
            return v.fail(format!("stack underflow at pc {pc} ({})", i.op.name()));
        }
        operands(v, c, &i, d, &mut targets, &mut loops)?;
        let after = d - pops + pushes;
        max = max.max(after);
        if i.op == Op::Return {
            if d != 1 {
                return v.fail(format!("`Return` with {d} values on the stack"));
            }
            if pc + i.len != c.code.len() {
                return v.fail("instructions after `Return`");
            }
            returned = true;
            depth = None;
        } else {
            depth = Some(after);
        }
        pc += i.len;
    }
    if !returned {
        return v.fail("bytecode does not end with `Return`");
    }
    if !loops.is_empty() {
        return v.fail("an `Each` has no `EachEnd`");
    }
    if let Some(t) = (0..targets.len()).find(|&t| targets[t] != u32::MAX && !starts[t]) {
        return v.fail(format!(
            "a jump lands at {t}, which is not the start of an instruction"
        ));
    }
    if max > u32::from(c.max_stack) {
        return v.fail(format!(
            "stack reaches {max}, above the recorded bound {}",
            c.max_stack
        ));
    }
    for w in c.spans.windows(2) {
        if w[0].0 >= w[1].0 {
            return v.fail("span runs out of order");
        }
    }
    Ok(())
}

/// An open lambda body (X3) while the verifier walks it.
struct Loop {
    /// The pc just past its `EachEnd`.
    after_end: usize,
    /// The stack depth the body starts at (and every round ends at, plus one).
    body_depth: u32,
}

/// The stack effect of one instruction; `Call` only of a builtin `Call` runs,
/// with its arity.
fn effect(v: &V<'_>, i: &op::Instr) -> Result<(u32, u32), VerifyError> {
    if i.op != Op::Call {
        // Invariant: every opcode other than Call has a fixed effect in the table.
        return Ok(i
            .op
            .effect()
            .expect("invariant: only Call has a variable stack effect"));
    }
    let (f, argc) = (i.args[0] as usize, i.args[1]);
    match BUILTINS.get(f) {
        Some((name, _)) if op::lambda_only(name) => Err(v.err(format!(
            "`{name}` runs only with a lambda (`Each`), not `Call`"
        ))),
        Some((_, arity)) if op::arity_accepts(*arity, argc as usize) => Ok((argc, 1)),
        Some((name, arity)) => Err(v.err(format!(
            "`{name}` called with {argc} arguments, takes {arity}"
        ))),
        None => Err(v.err(format!("unknown builtin {f}"))),
    }
}

/// Operands in range, jumps onto the right depth, lambda bodies well nested
/// (a jump never leaves the body it is in, `Param` names an open lambda).
fn operands(
    v: &V<'_>,
    c: &Chunk,
    i: &op::Instr,
    d: u32,
    targets: &mut [u32],
    loops: &mut Vec<Loop>,
) -> R {
    let pc = i.pc;
    let limit = loops.last().map_or(c.code.len(), |l| l.after_end - 1);
    let mut jump_to = |target: usize, depth: u32, limit: usize| -> R {
        if target > limit {
            return v.fail(format!("jump at pc {pc} to {target} is out of bounds"));
        }
        let prev = std::mem::replace(&mut targets[target], depth);
        if prev != u32::MAX && prev != depth {
            return v.fail(format!("inconsistent stack depth at jump target {target}"));
        }
        Ok(())
    };
    match i.op {
        Op::Const => v.idx(i.args[0], c.consts.len(), "constant")?,
        Op::Field => v.s(i.args[0])?,
        Op::AndJump | Op::OrJump => {
            if i.args[0] == 0 {
                return v.fail(format!("jump at pc {pc} has distance 0"));
            }
            // the kept value stays on the stack at the target
            jump_to(pc + i.len + i.args[0] as usize, d, limit)?;
        }
        Op::Each => {
            let name = BUILTINS.get(i.args[0] as usize).map_or("?", |b| b.0);
            if !op::LAMBDA_FORMS.contains(&name) {
                return v.fail(format!("`Each` of `{name}`, which takes no lambda"));
            }
            let after_end = pc + i.len + i.args[1] as usize;
            if i.args[1] == 0 || after_end > limit {
                return v.fail(format!("`Each` at pc {pc} ends out of bounds"));
            }
            // the result replaces the list at the end
            jump_to(after_end, d, after_end)?;
            loops.push(Loop {
                after_end,
                body_depth: d - 1,
            });
        }
        Op::EachEnd => match loops.pop() {
            Some(l) if l.after_end == pc + i.len && d == l.body_depth + 1 => {}
            Some(_) => return v.fail(format!("`EachEnd` at pc {pc} does not close its body")),
            None => return v.fail(format!("`EachEnd` at pc {pc} without `Each`")),
        },
        Op::Param if i.args[0] as usize >= loops.len() => {
            return v.fail(format!(
                "`Param {}` at pc {pc} outside its lambda",
                i.args[0]
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Formats a location of the verifier.
fn where_text((what, flow, index): (&'static str, usize, usize)) -> String {
    match what {
        "plan" => "plan".to_string(),
        "record" => format!("record {index}"),
        "flow" => format!("flow {flow}"),
        other => format!("flow {flow} {other} {index}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Instructions with their operands.
    type Code<'a> = &'a [(Op, &'a [u32])];

    fn check(code: Code<'_>) -> Result<(), String> {
        let plan = Plan {
            strings: vec!["x".into()],
            records: Vec::new(),
            flows: Vec::new(),
            entry: 0,
        };
        let v = V {
            plan: &plan,
            at: ("chunk", 0, 0),
        };
        let mut bytes = Vec::new();
        for (o, args) in code {
            op::encode(&mut bytes, *o, args);
        }
        let c = Chunk {
            source: 0,
            context: Context::Output,
            code: bytes,
            consts: vec![ConstDef::Bool(true)],
            max_stack: 8,
            pos: Pos::default(),
            spans: Vec::new(),
        };
        chunk(&v, &c).map_err(|e| e.what)
    }

    const ALL: u32 = 2;
    const MAP: u32 = 19;

    #[test]
    fn lambda_bodies_must_nest_and_close() {
        assert_eq!(op::builtin("all"), Some(ALL as u8));
        assert_eq!(op::builtin("map"), Some(MAP as u8));
        // all(input, p -> p): Each(4 bytes) Param(2) EachEnd(1)
        let good: &[(Op, &[u32])] = &[
            (Op::LoadInput, &[]),
            (Op::Each, &[ALL, 3]),
            (Op::Param, &[0]),
            (Op::EachEnd, &[]),
            (Op::Return, &[]),
        ];
        assert_eq!(check(good), Ok(()));
        // nested: map(input, x -> all(input, y -> x))
        let nested: &[(Op, &[u32])] = &[
            (Op::LoadInput, &[]),
            (Op::Each, &[MAP, 9]),
            (Op::LoadInput, &[]),
            (Op::Each, &[ALL, 3]),
            (Op::Param, &[1]),
            (Op::EachEnd, &[]),
            (Op::EachEnd, &[]),
            (Op::Return, &[]),
        ];
        assert_eq!(check(nested), Ok(()));
        let bad: Vec<(Code<'_>, &str)> = vec![
            // a parameter outside any lambda, or too far out
            (
                &[(Op::Param, &[0]), (Op::Return, &[])],
                "outside its lambda",
            ),
            (
                &[
                    (Op::LoadInput, &[]),
                    (Op::Each, &[ALL, 3]),
                    (Op::Param, &[1]),
                    (Op::EachEnd, &[]),
                    (Op::Return, &[]),
                ],
                "outside its lambda",
            ),
            // the end does not close the body it names
            (
                &[
                    (Op::LoadInput, &[]),
                    (Op::Each, &[ALL, 2]),
                    (Op::Param, &[0]),
                    (Op::EachEnd, &[]),
                    (Op::Return, &[]),
                ],
                "does not close",
            ),
            // `len` takes no lambda; `map` never runs through `Call`
            (
                &[
                    (Op::LoadInput, &[]),
                    (Op::Each, &[0, 3]),
                    (Op::Param, &[0]),
                    (Op::EachEnd, &[]),
                    (Op::Return, &[]),
                ],
                "takes no lambda",
            ),
            (
                &[
                    (Op::LoadInput, &[]),
                    (Op::LoadInput, &[]),
                    (Op::Call, &[MAP, 2]),
                    (Op::Return, &[]),
                ],
                "only with a lambda",
            ),
            (
                &[(Op::LoadInput, &[]), (Op::EachEnd, &[]), (Op::Return, &[])],
                "without `Each`",
            ),
        ];
        for (code, want) in bad {
            let got = check(code).unwrap_err();
            assert!(got.contains(want), "{got} (wanted {want})");
        }
    }
}
