//! A run's flow graph drawn as SVG for the browser, from the run's own plan
//! (the store holds plans, not specs) and coloured by the run's step
//! statuses — with the same nesting as `stratumc graph`: a `fanout` is a
//! double-bordered box around its stages, chained in order, and a `run` is a
//! dashed box around the called flow's steps (16 levels deep at most), each
//! coloured by its own status (`parent/child` ids, as the views name them).
//!
//! Owns: a nested layered layout (in each flow, a step's column is the
//! longest path to it over the plan's forward edges; steps keep plan order
//! within a column; a column is as wide as its widest block, a block as big
//! as what it holds), the shapes — the same as `stratumc graph`: `do` a
//! rounded box, `set` a box, `gate` a diamond, `fanout` a double box, `run` a
//! dashed box, `evaluate` a box with a thick border — the edge styles (order
//! and data solid, state reads dotted, `on_fail` red and dashed,
//! `on_approve` green, `on_kill` grey, a gate's `on_revise` an orange dashed
//! arc back, under its flow), and escaping every text that reaches the
//! document.
//! Must never: decide anything about the flow (edges and kinds are the
//! plan's), or depend on a renderer outside the binary.

use std::fmt::Write as _;

use stratum_vm::plan::{EdgeKind, FlowDef, Plan, StepKindDef};
use stratum_vm::view::{RunView, StepView};

/// A step's box.
const W: i32 = 170;
const H: i32 = 54;
/// Between columns and between the blocks of a column.
const GAP_X: i32 = 60;
const GAP_Y: i32 = 26;
/// Around the whole drawing.
const PAD: i32 = 16;
/// Inside a box that holds steps, and the height of its title line.
const INSET: i32 = 12;
const TITLE: i32 = 20;
/// How deep sub-flows are drawn (as `stratumc graph`).
const MAX_DEPTH: usize = 16;

/// Escapes text for an SVG element or attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

fn fill(status: &str) -> &'static str {
    match status {
        "succeeded" => "#cfeed8",
        "failed" => "#f6c9c9",
        "running" | "ready" => "#fff1b8",
        "waiting_gate" => "#ffd98a",
        "skipped" => "#e4e4e4",
        _ => "#ffffff",
    }
}

/// The kind word of a step, as `stratumc graph` and the views name it.
fn kind(k: &StepKindDef) -> &'static str {
    match k {
        StepKindDef::Do { .. } => "do",
        StepKindDef::Set { .. } => "set",
        StepKindDef::Gate { .. } => "gate",
        StepKindDef::Fanout { .. } => "fanout",
        StepKindDef::Run { .. } => "run",
        StepKindDef::Evaluate { .. } => "evaluate",
    }
}

/// Something drawn at a place: a step, or a box holding a body.
struct Block {
    w: i32,
    h: i32,
    shape: Shape,
}

enum Shape {
    /// A step drawn as one node.
    Step {
        key: String,
        kind: &'static str,
        status: String,
    },
    /// A fanout stage (its items' statuses are the fanout's counts).
    Stage { key: String, title: String },
    /// A fanout or a `run`: a titled box around `body`.
    Group {
        key: String,
        kind: &'static str,
        status: String,
        title: String,
        body: Body,
    },
}

/// Blocks at offsets from the body's corner, and what connects them.
struct Body {
    w: i32,
    h: i32,
    blocks: Vec<(i32, i32, Block)>,
    /// (from, to, kind) over `blocks`' indexes.
    edges: Vec<(usize, usize, EdgeKind)>,
    /// Revise arcs (gate, target) over `blocks`' indexes.
    revise: Vec<(usize, usize)>,
}

/// What the drawing reads: the plan and the run's step views.
struct Ctx<'a> {
    plan: &'a Plan,
    steps: &'a [StepView],
}

impl Ctx<'_> {
    fn view(&self, key: &str) -> Option<&StepView> {
        self.steps.iter().find(|s| s.id == key)
    }

    fn status(&self, key: &str) -> String {
        self.view(key)
            .map_or("pending", |s| s.status.as_str())
            .to_string()
    }

    /// The steps of `flow` laid out in columns; `prefix` names its steps
    /// (`""` for the entry flow, `"parent/"` inside a `run`).
    fn flow(&self, flow: &FlowDef, prefix: &str, depth: usize) -> Body {
        let n = flow.steps.len();
        let mut column = vec![0usize; n];
        // steps are in topological order: every forward edge goes to a higher index
        for e in &flow.edges {
            let (from, to) = (e.from as usize, e.to as usize);
            if from < to && to < n {
                column[to] = column[to].max(column[from] + 1);
            }
        }
        let blocks: Vec<Block> = flow
            .steps
            .iter()
            .map(|step| self.step(step, prefix, depth))
            .collect();
        let cols = column.iter().max().map_or(0, |m| m + 1);
        let mut col_w = vec![0i32; cols];
        let mut col_h = vec![0i32; cols];
        let mut y = vec![0i32; n];
        for (i, b) in blocks.iter().enumerate() {
            let c = column[i];
            col_w[c] = col_w[c].max(b.w);
            y[i] = col_h[c] + if col_h[c] > 0 { GAP_Y } else { 0 };
            col_h[c] = y[i] + b.h;
        }
        let mut col_x = vec![0i32; cols];
        for c in 1..cols {
            col_x[c] = col_x[c - 1] + col_w[c - 1] + GAP_X;
        }
        let w = col_x.last().copied().unwrap_or(0) + col_w.last().copied().unwrap_or(0);
        let revise: Vec<(usize, usize)> = flow
            .steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match &s.kind {
                StepKindDef::Gate {
                    on_revise: Some(t), ..
                } if (*t as usize) < n => Some((i, *t as usize)),
                _ => None,
            })
            .collect();
        // room under the blocks for the revise arcs
        let arcs = if revise.is_empty() { 0 } else { GAP_Y };
        let h = col_h.iter().max().copied().unwrap_or(0) + arcs;
        let edges = flow
            .edges
            .iter()
            .filter(|e| (e.from as usize) < n && (e.to as usize) < n)
            .map(|e| (e.from as usize, e.to as usize, e.kind))
            .collect();
        Body {
            w,
            h,
            blocks: blocks
                .into_iter()
                .enumerate()
                .map(|(i, b)| (col_x[column[i]], y[i], b))
                .collect(),
            edges,
            revise,
        }
    }

    fn step(&self, step: &stratum_vm::plan::StepDef, prefix: &str, depth: usize) -> Block {
        let key = format!("{prefix}{}", self.plan.str(step.id));
        let status = self.status(&key);
        let k = kind(&step.kind);
        match &step.kind {
            StepKindDef::Fanout { stages, .. } => {
                let counts = self
                    .view(&key)
                    .and_then(|v| v.items)
                    .map_or_else(String::new, |c| {
                        format!(" · {}/{} items", c.succeeded, c.total)
                    });
                let body = stages_body(&key, stages.len());
                group(
                    key.clone(),
                    k,
                    status,
                    format!("fanout {key}{counts}"),
                    body,
                )
            }
            StepKindDef::Run { flow, .. } => {
                let callee = self.plan.flows.get(*flow as usize);
                let name = callee.map_or("?", |f| self.plan.str(f.name));
                let body = match callee {
                    Some(f) if depth < MAX_DEPTH => self.flow(f, &format!("{key}/"), depth + 1),
                    _ => empty(),
                };
                group(
                    key.clone(),
                    k,
                    status,
                    format!("run {key} → flow {name}"),
                    body,
                )
            }
            _ => Block {
                w: W,
                h: H,
                shape: Shape::Step {
                    key,
                    kind: k,
                    status,
                },
            },
        }
    }
}

/// A fanout's stages in a row, chained in order.
fn stages_body(key: &str, count: usize) -> Body {
    let blocks = (0..count)
        .map(|i| {
            (
                i as i32 * (W + GAP_X),
                0,
                Block {
                    w: W,
                    h: H,
                    shape: Shape::Stage {
                        key: format!("{key}#{}", i + 1),
                        title: format!("stage {}", i + 1),
                    },
                },
            )
        })
        .collect::<Vec<_>>();
    let w = (count as i32 * (W + GAP_X) - GAP_X).max(0);
    Body {
        w,
        h: if count > 0 { H } else { 0 },
        blocks,
        edges: (1..count).map(|i| (i - 1, i, EdgeKind::Order)).collect(),
        revise: Vec::new(),
    }
}

fn empty() -> Body {
    Body {
        w: 0,
        h: 0,
        blocks: Vec::new(),
        edges: Vec::new(),
        revise: Vec::new(),
    }
}

fn group(key: String, kind: &'static str, status: String, title: String, body: Body) -> Block {
    // wide enough for the title too (about 7 px a character)
    let title_w = (title.chars().count() as i32).min(60) * 7;
    Block {
        w: (body.w + 2 * INSET).max(W).max(title_w + 2 * INSET),
        h: body.h + TITLE + 2 * INSET,
        shape: Shape::Group {
            key,
            kind,
            status,
            title,
            body,
        },
    }
}

/// The run's entry flow (and what it holds) as an SVG document, each step
/// filled by its status in `run` (white when the run has not reached it).
pub fn svg(plan: &Plan, run: &RunView) -> String {
    let Some(flow) = plan.flows.get(plan.entry as usize) else {
        return "<svg xmlns=\"http://www.w3.org/2000/svg\"/>".to_string();
    };
    let ctx = Ctx {
        plan,
        steps: &run.steps,
    };
    let body = ctx.flow(flow, "", 0);
    let width = body.w + 2 * PAD;
    let height = body.h + 2 * PAD;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\" aria-label=\"flow graph\">"
    );
    out.push_str("<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#555\"/></marker></defs>");
    draw_body(&mut out, &body, PAD, PAD);
    out.push_str("</svg>");
    out
}

/// Edges first (under the blocks), then the blocks.
fn draw_body(out: &mut String, body: &Body, ox: i32, oy: i32) {
    let at = |i: usize| {
        let (x, y, b) = &body.blocks[i];
        (ox + x, oy + y, b.w, b.h)
    };
    for &(from, to, kind) in &body.edges {
        let ((x1, y1, w1, h1), (x2, y2, _, h2)) = (at(from), at(to));
        let (stroke, dash) = match kind {
            EdgeKind::Order | EdgeKind::Data => ("#555", ""),
            EdgeKind::State => ("#555", " stroke-dasharray=\"2 3\""),
            EdgeKind::OnFail => ("#c0392b", " stroke-dasharray=\"6 4\""),
            EdgeKind::Approve => ("#2e8b57", ""),
            EdgeKind::Kill => ("#999", " stroke-dasharray=\"6 4\""),
        };
        let (sx, sy, ex, ey) = (x1 + w1, y1 + h1.min(H) / 2, x2, y2 + h2.min(H) / 2);
        let _ = write!(
            out,
            "<path class=\"edge\" d=\"M{sx} {sy} C{} {sy} {} {ey} {ex} {ey}\" fill=\"none\" stroke=\"{stroke}\"{dash} marker-end=\"url(#arrow)\"/>",
            sx + GAP_X / 2,
            ex - GAP_X / 2,
        );
    }
    // revise edges go back to an earlier step: an orange dashed arc under the flow
    let below = oy + body.h - 6;
    for &(gate, target) in &body.revise {
        let ((x1, y1, w1, h1), (x2, y2, w2, h2)) = (at(gate), at(target));
        let _ = write!(
            out,
            "<path class=\"edge revise\" d=\"M{} {} C{} {below} {} {below} {} {}\" fill=\"none\" stroke=\"#d97706\" stroke-dasharray=\"6 4\" marker-end=\"url(#arrow)\"><title>revise</title></path>",
            x1 + w1 / 2,
            y1 + h1,
            x1 + w1 / 2,
            x2 + w2 / 2,
            x2 + w2 / 2,
            y2 + h2
        );
    }
    for (x, y, b) in &body.blocks {
        draw_block(out, b, ox + x, oy + y);
    }
}

fn draw_block(out: &mut String, b: &Block, x: i32, y: i32) {
    match &b.shape {
        Shape::Step { key, kind, status } => draw_step(out, key, kind, status, x, y),
        Shape::Stage { key, title } => {
            let _ = write!(
                out,
                "<g class=\"stage\" data-step=\"{}\"><title>{}</title><rect x=\"{x}\" y=\"{y}\" width=\"{W}\" height=\"{H}\" rx=\"12\" fill=\"#ffffff\" stroke=\"#333\"/><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#444\">{}</text></g>",
                escape(key),
                escape(key),
                x + W / 2,
                y + H / 2 + 4,
                escape(title)
            );
        }
        Shape::Group {
            key,
            kind,
            status,
            title,
            body,
        } => {
            let f = fill(status);
            let border = match *kind {
                "run" => " stroke-dasharray=\"5 3\"",
                _ => "",
            };
            let _ = write!(
                out,
                "<g class=\"step group\" data-step=\"{}\" data-status=\"{status}\"><title>{} ({kind}): {status}</title><rect x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" rx=\"4\" fill=\"{f}\" fill-opacity=\"0.45\" stroke=\"#333\"{border}/>",
                escape(key),
                escape(key),
                b.w,
                b.h
            );
            if *kind == "fanout" {
                let _ = write!(
                    out,
                    "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\" fill=\"none\" stroke=\"#333\"/>",
                    x + 4,
                    y + 4,
                    b.w - 8,
                    b.h - 8
                );
            }
            let _ = write!(
                out,
                "<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{} · {status}</text></g>",
                x + INSET,
                y + INSET + 8,
                escape(&short(title, 60))
            );
            draw_body(out, body, x + INSET, y + INSET + TITLE);
        }
    }
}

fn draw_step(out: &mut String, key: &str, k: &str, status: &str, x: i32, y: i32) {
    let f = fill(status);
    let _ = write!(
        out,
        "<g class=\"step\" data-step=\"{}\" data-status=\"{status}\"><title>{} ({k}): {status}</title>",
        escape(key),
        escape(key)
    );
    match k {
        "gate" => {
            let _ = write!(
                out,
                "<polygon points=\"{},{} {},{} {},{} {},{}\" fill=\"{f}\" stroke=\"#333\"/>",
                x + W / 2,
                y,
                x + W,
                y + H / 2,
                x + W / 2,
                y + H,
                x,
                y + H / 2
            );
        }
        _ => {
            let (rx, extra) = match k {
                "do" => (12, ""),
                "evaluate" => (2, " stroke-width=\"3\""),
                _ => (0, ""),
            };
            let _ = write!(
                out,
                "<rect x=\"{x}\" y=\"{y}\" width=\"{W}\" height=\"{H}\" rx=\"{rx}\" fill=\"{f}\" stroke=\"#333\"{extra}/>"
            );
        }
    }
    // the last segment of a nested id is what the box shows; the title has it whole
    let label = key.rsplit('/').next().unwrap_or(key);
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#444\">{k} · {status}</text></g>",
        x + W / 2,
        y + H / 2 - 3,
        escape(&short(label, 22)),
        x + W / 2,
        y + H / 2 + 13
    );
}

fn short(s: &str, max: usize) -> String {
    match s.chars().count() > max {
        true => format!("{}…", s.chars().take(max - 1).collect::<String>()),
        false => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(escape("a\u{1}b"), "ab");
    }

    #[test]
    fn long_ids_are_shortened() {
        assert_eq!(short("abc", 5), "abc");
        assert_eq!(short("abcdefgh", 5), "abcd…");
    }

    #[test]
    fn stages_are_chained_in_a_row() {
        let body = stages_body("fan", 3);
        assert_eq!(body.w, 3 * W + 2 * GAP_X);
        assert_eq!(body.h, H);
        assert_eq!(
            body.edges
                .iter()
                .map(|&(a, b, _)| (a, b))
                .collect::<Vec<_>>(),
            [(0, 1), (1, 2)]
        );
        assert!(stages_body("fan", 0).blocks.is_empty());
    }

    #[test]
    fn a_group_is_big_enough_for_its_body_and_title() {
        let body = Body {
            w: 400,
            h: 100,
            ..empty()
        };
        let b = group("s".into(), "run", "pending".into(), "run s".into(), body);
        assert_eq!((b.w, b.h), (400 + 2 * INSET, 100 + TITLE + 2 * INSET));
    }
}
