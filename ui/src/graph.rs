//! A run's entry flow drawn as SVG for the browser, from the run's own plan
//! (the store holds plans, not specs) and coloured by the run's step
//! statuses.
//!
//! Owns: a layered layout (a step's column is the longest path to it over
//! the plan's forward edges; steps keep plan order within a column), the
//! shapes — the same as `stratumc graph`: `do` a rounded box, `set` a box,
//! `gate` a diamond, `fanout` a double box, `run` a dashed box, `evaluate` a
//! box with a thick border — the edge styles (order and data solid, state
//! reads dotted, `on_fail` red and dashed, `on_approve` green, `on_kill`
//! grey, a gate's `on_revise` an orange dashed arc back), and escaping every text that reaches the document.
//! Must never: decide anything about the flow (edges and kinds are the
//! plan's), or depend on a renderer outside the binary.

use std::fmt::Write as _;

use stratum_vm::plan::{EdgeKind, Plan, StepKindDef};
use stratum_vm::view::RunView;

const W: i32 = 170;
const H: i32 = 54;
const GAP_X: i32 = 60;
const GAP_Y: i32 = 26;
const PAD: i32 = 16;

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

/// The entry flow of `plan` as an SVG document, each step filled by its
/// status in `run` (white when the run has not reached it).
pub fn svg(plan: &Plan, run: &RunView) -> String {
    let Some(flow) = plan.flows.get(plan.entry as usize) else {
        return "<svg xmlns=\"http://www.w3.org/2000/svg\"/>".to_string();
    };
    let n = flow.steps.len();
    let mut column = vec![0i32; n];
    // steps are in topological order: every edge goes to a higher index
    for e in &flow.edges {
        let (from, to) = (e.from as usize, e.to as usize);
        if from < to && to < n {
            column[to] = column[to].max(column[from] + 1);
        }
    }
    let mut row = vec![0i32; n];
    let mut used = vec![0i32; n + 1];
    for i in 0..n {
        let c = column[i] as usize;
        row[i] = used[c];
        used[c] += 1;
    }
    let cols = column.iter().max().map_or(0, |m| m + 1);
    let rows = used.iter().max().copied().unwrap_or(0).max(1);
    let width = PAD * 2 + cols * W + (cols - 1).max(0) * GAP_X;
    // room under the last row for revise arcs
    let height = PAD * 2 + rows * H + rows * GAP_Y;
    let at = |i: usize| (PAD + column[i] * (W + GAP_X), PAD + row[i] * (H + GAP_Y));
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\" aria-label=\"flow graph\">"
    );
    out.push_str("<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#555\"/></marker></defs>");
    for e in &flow.edges {
        let (from, to) = (e.from as usize, e.to as usize);
        if from >= n || to >= n {
            continue;
        }
        let ((x1, y1), (x2, y2)) = (at(from), at(to));
        let (stroke, dash) = match e.kind {
            EdgeKind::Order | EdgeKind::Data => ("#555", ""),
            EdgeKind::State => ("#555", " stroke-dasharray=\"2 3\""),
            EdgeKind::OnFail => ("#c0392b", " stroke-dasharray=\"6 4\""),
            EdgeKind::Approve => ("#2e8b57", ""),
            EdgeKind::Kill => ("#999", " stroke-dasharray=\"6 4\""),
        };
        let _ = write!(
            out,
            "<path class=\"edge\" d=\"M{} {} C{} {} {} {} {} {}\" fill=\"none\" stroke=\"{stroke}\"{dash} marker-end=\"url(#arrow)\"/>",
            x1 + W,
            y1 + H / 2,
            x1 + W + GAP_X / 2,
            y1 + H / 2,
            x2 - GAP_X / 2,
            y2 + H / 2,
            x2,
            y2 + H / 2
        );
    }
    // revise edges go back to an earlier step: an orange dashed arc under the row
    for (i, step) in flow.steps.iter().enumerate() {
        if let StepKindDef::Gate {
            on_revise: Some(t), ..
        } = &step.kind
        {
            let t = *t as usize;
            if t >= n {
                continue;
            }
            let ((x1, y1), (x2, y2)) = (at(i), at(t));
            let below = y1.max(y2) + H + GAP_Y - 6;
            let _ = write!(
                out,
                "<path class=\"edge revise\" d=\"M{} {} C{} {} {} {} {} {}\" fill=\"none\" stroke=\"#d97706\" stroke-dasharray=\"6 4\" marker-end=\"url(#arrow)\"><title>revise</title></path>",
                x1 + W / 2,
                y1 + H,
                x1 + W / 2,
                below,
                x2 + W / 2,
                below,
                x2 + W / 2,
                y2 + H
            );
        }
    }
    for (i, step) in flow.steps.iter().enumerate() {
        let id = plan.str(step.id);
        let status = run
            .steps
            .iter()
            .find(|s| s.depth == 0 && s.id == id)
            .map_or("pending", |s| s.status.as_str());
        let k = kind(&step.kind);
        let (x, y) = at(i);
        let f = fill(status);
        let _ = write!(
            out,
            "<g class=\"step\" data-step=\"{}\" data-status=\"{status}\"><title>{} ({k}): {status}</title>",
            escape(id),
            escape(id)
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
            "fanout" => {
                let _ = write!(
                    out,
                    "<rect x=\"{x}\" y=\"{y}\" width=\"{W}\" height=\"{H}\" fill=\"{f}\" stroke=\"#333\"/><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>",
                    x + 4,
                    y + 4,
                    W - 8,
                    H - 8
                );
            }
            _ => {
                let (rx, extra) = match k {
                    "do" => (12, ""),
                    "run" => (0, " stroke-dasharray=\"5 3\""),
                    "evaluate" => (2, " stroke-width=\"3\""),
                    _ => (0, ""),
                };
                let _ = write!(
                    out,
                    "<rect x=\"{x}\" y=\"{y}\" width=\"{W}\" height=\"{H}\" rx=\"{rx}\" fill=\"{f}\" stroke=\"#333\"{extra}/>"
                );
            }
        }
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#444\">{k} · {status}</text></g>",
            x + W / 2,
            y + H / 2 - 3,
            escape(&short(id, 22)),
            x + W / 2,
            y + H / 2 + 13
        );
    }
    out.push_str("</svg>");
    out
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
}
