//! `stratumc report RUN [--format html|md|json] [-o FILE]`: the evidence
//! chain of a run as a document a reviewer reads — per step its status,
//! attempts and failures, the files its checks read (size and digest), every
//! verdict (rules, judge, human decisions with notes), the receipts of the
//! declared commands its checks ran (X12), spend against budget,
//! spend against the estimate the run was started with (each step's spent /
//! expected / worst per dimension; a step over 2× its expected estimate is
//! marked `⚠ over 2×` and listed, `flags` in the JSON), and the timeline.
//!
//! Owns: laying the [`RunReport`] out as one document model ([`Block`]s),
//! and writing it as Markdown, as one self-contained HTML file (inline
//! style, no scripts, no network) or as the report's JSON.
//! Must never: gather or interpret evidence itself (that is
//! `stratum_vm::report`), or change a run.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::json;
use stratum_vm::interp::event::EstimateFigure;
use stratum_vm::report::{self, RunReport, SpendRecord, StepReport};

use super::query::{is_unknown_run, open, time, unknown_run};
use crate::Exit;

/// Version of the JSON document.
pub const JSON_VERSION: u32 = 1;

/// Output formats of `stratumc report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// One self-contained HTML file.
    Html,
    /// Markdown.
    Md,
    /// The report as one JSON document.
    Json,
}

/// Arguments of `stratumc report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The run id (`run-…`).
    pub run: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Md)]
    pub format: ReportFormat,
    /// Write the report to this file instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Print the full unified diff of STEP's patch record (X11) instead of
    /// the report (the latest one; `--item` and `--attempt` pick another).
    /// The output applies with `git apply`.
    #[arg(long, value_name = "STEP")]
    pub diff: Option<String>,
    /// With `--diff`: the fanout item's record.
    #[arg(long, requires = "diff", value_name = "K")]
    pub item: Option<u32>,
    /// With `--diff`: the record of this attempt.
    #[arg(long, requires = "diff", value_name = "N")]
    pub attempt: Option<u32>,
}

/// Runs the command: exit 0 written, 2 unknown run or unwritable file.
pub fn run(args: &ReportArgs) -> Exit {
    let mut engine = match open() {
        Ok(e) => e,
        Err(code) => return code,
    };
    let report = match report::load(&mut engine, &args.run) {
        Ok(r) => r,
        Err(e) if is_unknown_run(&e) => {
            eprintln!("{}", unknown_run(&args.run));
            return Exit::Usage;
        }
        Err(e) => return super::usage(format_args!("run `{}`: {e}", args.run)),
    };
    let text = match &args.diff {
        Some(step) => match full_diff(&engine, args, &report, step) {
            Ok(text) => text,
            Err(why) => return super::usage(why),
        },
        None => document_text(args, &report),
    };
    write_out(args, &text)
}

/// The report in the asked format.
fn document_text(args: &ReportArgs, report: &RunReport) -> String {
    match args.format {
        ReportFormat::Json => format!("{}\n", json!({"version": JSON_VERSION, "report": report})),
        ReportFormat::Md => markdown(&document(report)),
        ReportFormat::Html => html(&report.run_id, &document(report)),
    }
}

/// `--diff STEP`: the full diff of the step's chosen patch record.
fn full_diff(
    engine: &stratum_vm::engine::Engine,
    args: &ReportArgs,
    report: &RunReport,
    step: &str,
) -> Result<String, String> {
    let records: Vec<_> = report
        .steps
        .iter()
        .filter(|s| s.id == step)
        .flat_map(|s| &s.patches)
        .filter(|p| args.item.is_none_or(|k| p.item_index == Some(k)))
        .filter(|p| args.attempt.is_none_or(|a| p.attempt == a))
        .collect();
    let Some(record) = records.last() else {
        return Err(format!(
            "run `{}` has no patch record of step `{step}`{}{} (`stratumc query flow {} --patches` lists them)",
            report.run_id,
            args.item.map_or(String::new(), |k| format!(", item {k}")),
            args.attempt
                .map_or(String::new(), |a| format!(", attempt {a}")),
            report.run_id
        ));
    };
    match stratum_vm::view::full_diff(engine, &report.run_id, record) {
        Ok(Some(text)) => Ok(text),
        Ok(None) => Err(format!(
            "the full diff of step `{step}` (attempt {}) was not kept: the record predates kept diffs; its inline diff (cut at 64 KiB) is in `stratumc query flow {} --patches`",
            record.attempt, report.run_id
        )),
        Err(e) => Err(format!("run `{}`: {e}", report.run_id)),
    }
}

/// Writes `text` to stdout or `-o FILE`.
fn write_out(args: &ReportArgs, text: &str) -> Exit {
    match &args.output {
        None => {
            super::emit(text);
            Exit::Ok
        }
        Some(path) => match std::fs::write(path, text) {
            Ok(()) => {
                eprintln!("wrote {}", path.display());
                Exit::Ok
            }
            Err(e) => super::usage(format_args!("cannot write {}: {e}", path.display())),
        },
    }
}

/// One piece of the document.
#[derive(Debug, Clone, PartialEq)]
enum Block {
    /// A heading of level 1 to 3.
    Heading(u8, String),
    /// A paragraph of plain text.
    Para(String),
    /// A table: header cells and rows.
    Table(Vec<&'static str>, Vec<Vec<Cell>>),
}

/// A table cell: its text, and a status class that HTML colours.
#[derive(Debug, Clone, PartialEq)]
struct Cell {
    text: String,
    class: Option<&'static str>,
    code: bool,
}

impl Cell {
    fn text(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            class: None,
            code: false,
        }
    }
    fn code(text: impl Into<String>) -> Cell {
        Cell {
            code: true,
            ..Cell::text(text)
        }
    }
    fn status(text: &str) -> Cell {
        Cell {
            class: Some(status_class(text)),
            ..Cell::text(text)
        }
    }
}

/// The colour class of a status or verdict word.
fn status_class(word: &str) -> &'static str {
    match word {
        "succeeded" | "completed" | "passed" | "holds" | "approve" => "ok",
        "failed" | "killed" | "budget_exhausted" | "cancelled" | "does not hold" | "kill" => "bad",
        "skipped" | "pending" => "muted",
        _ => "warn",
    }
}

/// The document of a report: the run, then each step, then the timeline.
fn document(r: &RunReport) -> Vec<Block> {
    let mut doc = vec![Block::Heading(1, format!("Run {}", r.run_id))];
    doc.push(Block::Table(
        vec!["flow", "status", "plan", "started", "updated"],
        vec![vec![
            Cell::code(&r.flow),
            Cell::status(&r.status),
            Cell::code(&r.plan_hash),
            Cell::text(time(r.created_ms)),
            Cell::text(time(r.updated_ms)),
        ]],
    ));
    if let Some(f) = &r.failure {
        doc.push(Block::Para(format!("Failure: {f}")));
    }
    doc.push(Block::Heading(2, "Spend".into()));
    doc.push(spend_table(r));
    doc.push(Block::Heading(2, "Steps".into()));
    doc.push(steps_table(&r.steps));
    estimate_blocks(r, &mut doc);
    for step in &r.steps {
        step_section(&r.run_id, step, &mut doc);
    }
    doc.push(Block::Heading(2, "Timeline".into()));
    doc.push(Block::Table(
        vec!["at", "step", "event", "detail"],
        r.timeline
            .iter()
            .map(|e| {
                vec![
                    Cell::text(time(e.at)),
                    Cell::code(e.step.clone().unwrap_or_default()),
                    Cell::code(&e.kind),
                    Cell::text(&e.summary),
                ]
            })
            .collect(),
    ));
    doc
}

/// Spend against the estimate recorded at start, and the flagged steps.
fn estimate_blocks(r: &RunReport, doc: &mut Vec<Block>) {
    doc.push(Block::Heading(2, "Spend against the estimate".into()));
    if r.steps.iter().all(|s| s.estimate.is_none()) {
        doc.push(Block::Para(
            "No estimate was recorded: the run was started from a plan file (or by a retry), not from a spec.".into(),
        ));
        return;
    }
    let over =
        |s: &StepReport, dim: &str| r.flags.iter().any(|f| f.step == s.id && f.dimension == dim);
    let fig = |spent: f64, f: &EstimateFigure, flagged: bool| {
        let worst = f.worst.map_or_else(|| "?".to_string(), number);
        let text = format!("{} / {} / {worst}", number(spent), number(f.expected));
        if flagged {
            Cell {
                class: Some("bad"),
                ..Cell::text(format!("{text} ⚠"))
            }
        } else {
            Cell::text(text)
        }
    };
    let rows = r
        .steps
        .iter()
        .filter_map(|s| {
            let e = s.estimate.as_ref()?;
            let flagged = r.flags.iter().any(|f| f.step == s.id);
            Some(vec![
                Cell::code(&s.id),
                fig(s.spent.dispatches, &e.dispatches, over(s, "dispatches")),
                fig(s.spent.tokens, &e.tokens, over(s, "tokens")),
                fig(s.spent.usd, &e.usd, over(s, "usd")),
                fig(s.spent.ms, &e.ms, over(s, "ms")),
                if flagged {
                    Cell {
                        class: Some("bad"),
                        ..Cell::text("⚠ over 2×")
                    }
                } else {
                    Cell::text("")
                },
            ])
        })
        .collect();
    doc.push(Block::Table(
        vec![
            "step",
            "dispatches (spent / expected / worst)",
            "tokens",
            "usd",
            "ms",
            "flag",
        ],
        rows,
    ));
    for f in &r.flags {
        doc.push(Block::Para(format!(
            "⚠ Step {} spent {} {}, more than {}× its expected {}.",
            f.step,
            number(f.actual),
            f.dimension,
            number(report::OVER_FACTOR),
            number(f.expected)
        )));
    }
}

fn spend_table(r: &RunReport) -> Block {
    let limit = |x: Option<String>| Cell::text(x.unwrap_or_else(|| "—".into()));
    let b = r.budget;
    Block::Table(
        vec!["", "dispatches", "tokens", "usd", "ms"],
        vec![
            spend_row("spent", &r.spent),
            vec![
                Cell::text("budget"),
                limit(b.and_then(|b| b.dispatches).map(|x| x.to_string())),
                limit(b.and_then(|b| b.tokens).map(|x| x.to_string())),
                limit(b.and_then(|b| b.usd).map(|x| format!("{x:.2}"))),
                limit(b.and_then(|b| b.ms).map(|x| x.to_string())),
            ],
        ],
    )
}

fn spend_row(label: &str, s: &SpendRecord) -> Vec<Cell> {
    vec![
        Cell::text(label),
        Cell::text(number(s.dispatches)),
        Cell::text(number(s.tokens)),
        Cell::text(format!("{:.2}", s.usd)),
        Cell::text(number(s.ms)),
    ]
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

fn steps_table(steps: &[StepReport]) -> Block {
    Block::Table(
        vec![
            "step",
            "construct",
            "status",
            "attempts",
            "artifacts",
            "verdicts",
            "usd",
        ],
        steps
            .iter()
            .map(|s| {
                vec![
                    Cell::code(&s.id),
                    Cell::text(&s.kind),
                    Cell::status(&s.status),
                    Cell::text(s.attempts.to_string()),
                    Cell::text(s.manifests.last().map_or(0, |m| m.files.len()).to_string()),
                    Cell::text((s.verdicts.len() + s.decisions.len()).to_string()),
                    Cell::text(format!("{:.2}", s.spent.usd)),
                ]
            })
            .collect(),
    )
}

/// A step's own section: attempts, files, verdicts, decisions.
fn step_section(run_id: &str, s: &StepReport, doc: &mut Vec<Block>) {
    doc.push(Block::Heading(
        3,
        format!("{} ({}, {})", s.id, s.kind, s.status),
    ));
    if let Some(reason) = &s.skipped {
        doc.push(Block::Para(format!("Skipped: {reason}")));
    }
    if s.judge_errors > 0 {
        doc.push(Block::Para(format!(
            "The judge erred {} time(s) (not verdicts: the report was judged again).",
            s.judge_errors
        )));
    }
    if s.orphans > 0 {
        doc.push(Block::Para(format!(
            "{} dispatch(es) ran out of their lease and were handed out again.",
            s.orphans
        )));
    }
    if !s.tries.is_empty() {
        doc.push(Block::Table(
            vec!["attempt", "at", "result", "reason"],
            s.tries
                .iter()
                .map(|t| {
                    vec![
                        Cell::text(t.attempt.to_string()),
                        Cell::text(time(t.at)),
                        Cell::status(if t.passed { "passed" } else { "failed" }),
                        Cell::text(t.reason.clone().unwrap_or_default()),
                    ]
                })
                .collect(),
        ));
    }
    if !s.evidence.is_empty() {
        doc.push(Block::Table(
            vec!["file", "exists", "size", "blake3"],
            s.evidence
                .iter()
                .map(|f| {
                    vec![
                        Cell::code(&f.path),
                        Cell::text(if f.exists { "yes" } else { "no" }),
                        Cell::text(f.size.map(|n| n.to_string()).unwrap_or_default()),
                        Cell::code(f.blake3.clone().unwrap_or_default()),
                    ]
                })
                .collect(),
        ));
    }
    for m in &s.manifests {
        let who = m.item_index.map_or_else(
            || format!("attempt {}", m.attempt),
            |k| format!("item {k}, attempt {}", m.attempt),
        );
        doc.push(Block::Para(format!(
            "Artifacts ({who}), manifest digest {}",
            m.digest
        )));
        doc.push(Block::Table(
            vec!["artifact", "size", "sha256"],
            m.files
                .iter()
                .map(|f| {
                    vec![
                        Cell::code(&f.path),
                        Cell::text(f.size.to_string()),
                        Cell::code(&f.sha256),
                    ]
                })
                .collect(),
        ));
    }
    receipts(s, doc);
    for p in &s.patches {
        let who = p.item_index.map_or_else(
            || format!("attempt {}", p.attempt),
            |k| format!("item {k}, attempt {}", p.attempt),
        );
        let item = p
            .item_index
            .map_or(String::new(), |k| format!(" --item {k}"));
        let whole = p.diff_sha256.as_ref().map_or(String::new(), |sha| {
            let bytes = p.diff_bytes.unwrap_or(0);
            format!(", {bytes} bytes, sha256 {sha}")
        });
        doc.push(Block::Para(format!(
            "Patch ({who}), tree {} → {}; the full diff{whole}{}: `stratumc report {} --diff {}{item} --attempt {}`",
            p.tree_before,
            p.tree_after,
            if p.diff_truncated {
                " (the inline one is cut at 64 KiB)"
            } else {
                ""
            },
            run_id,
            s.id,
            p.attempt,
        )));
        doc.push(Block::Table(
            vec![
                "changed file",
                "status",
                "bytes",
                "sha256 before",
                "sha256 after",
            ],
            p.files
                .iter()
                .map(|f| {
                    vec![
                        Cell::code(&f.path),
                        Cell::text(f.status.as_str()),
                        Cell::text(f.bytes.to_string()),
                        Cell::code(f.before.clone().unwrap_or_default()),
                        Cell::code(f.after.clone().unwrap_or_default()),
                    ]
                })
                .collect(),
        ));
    }
    verdicts(s, doc);
}

/// The declared commands the step ran (X12): one row per receipt.
fn receipts(s: &StepReport, doc: &mut Vec<Block>) {
    if s.receipts.is_empty() {
        return;
    }
    doc.push(Block::Table(
        vec!["command", "argv", "exit", "ms", "stdout sha256", "tail"],
        s.receipts
            .iter()
            .map(|r| {
                let r = &r.receipt;
                let exit = match (r.exit, r.timed_out) {
                    (_, true) => "timed out".to_owned(),
                    (Some(c), _) => c.to_string(),
                    (None, false) => "killed".to_owned(),
                };
                let mut sha = r.stdout_sha256.clone();
                if r.truncated {
                    sha.push_str(" (output cut)");
                }
                let tail: String = r
                    .tail
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join(" ⏎ ");
                vec![
                    Cell::code(&r.command),
                    Cell::code(r.argv.join(" ")),
                    Cell::text(exit),
                    Cell::text(r.ms.to_string()),
                    Cell::code(sha),
                    Cell::code(tail),
                ]
            })
            .collect(),
    ));
}

fn verdicts(s: &StepReport, doc: &mut Vec<Block>) {
    if !s.verdicts.is_empty() {
        doc.push(Block::Table(
            vec!["judged", "verdict", "score", "reasons", "judge", "inputs"],
            s.verdicts
                .iter()
                .map(|v| {
                    let score = match (v.score, v.threshold) {
                        (Some(sc), Some(t)) => format!("{sc:.2} (pass mark {t:.2})"),
                        (Some(sc), None) => format!("{sc:.2}"),
                        _ => format!("stakes {}", v.stakes),
                    };
                    let reasons = if v.reasons.is_empty() {
                        v.reason.clone()
                    } else {
                        v.reasons.join("; ")
                    };
                    let judge =
                        format!("{} ({})", v.judge.as_deref().unwrap_or("default"), v.model);
                    let inputs: Vec<String> = v
                        .inputs
                        .iter()
                        .map(|i| format!("{} sha256 {}", i.path, i.sha256))
                        .collect();
                    vec![
                        Cell::text(&v.statement),
                        Cell::status(if v.holds { "holds" } else { "does not hold" }),
                        Cell::text(score),
                        Cell::text(reasons),
                        Cell::code(judge),
                        Cell::code(inputs.join(", ")),
                    ]
                })
                .collect(),
        ));
    }
    if !s.decisions.is_empty() {
        let any_choice = s.decisions.iter().any(|d| d.choice.is_some());
        doc.push(Block::Table(
            // X10: the `choice` column only when a decision carries one
            if any_choice {
                vec!["decision", "at", "by", "choice", "note", "target"]
            } else {
                vec!["decision", "at", "by", "note", "target"]
            },
            s.decisions
                .iter()
                .map(|d| {
                    let mut row = vec![
                        Cell::status(&d.decision),
                        Cell::text(time(d.at)),
                        Cell::text(&d.resolved_by),
                        Cell::text(d.note.clone().unwrap_or_default()),
                        Cell::code(d.target.clone().unwrap_or_default()),
                    ];
                    if any_choice {
                        row.insert(3, Cell::code(d.choice.clone().unwrap_or_default()));
                    }
                    row
                })
                .collect(),
        ));
    }
}

/// The document as Markdown (GitHub tables; `|` and line breaks escaped).
fn markdown(doc: &[Block]) -> String {
    let mut out = String::new();
    for block in doc {
        match block {
            Block::Heading(level, text) => {
                let _ = writeln!(
                    out,
                    "{} {}\n",
                    "#".repeat(usize::from(*level)),
                    md_text(text)
                );
            }
            Block::Para(text) => {
                let _ = writeln!(out, "{}\n", md_text(text));
            }
            Block::Table(head, rows) => {
                let _ = writeln!(out, "| {} |", head.join(" | "));
                let _ = writeln!(out, "|{}", " --- |".repeat(head.len()));
                for row in rows {
                    let cells: Vec<String> = row.iter().map(md_cell).collect();
                    let _ = writeln!(out, "| {} |", cells.join(" | "));
                }
                out.push('\n');
            }
        }
    }
    out
}

/// Text for Markdown: one line, and no `<` that a renderer would take for HTML.
fn md_text(text: &str) -> String {
    text.replace('\n', " ")
        .replace('&', "&amp;")
        .replace('<', "&lt;")
}

fn md_cell(cell: &Cell) -> String {
    let text = md_text(&cell.text).replace('|', "\\|");
    if cell.code && !text.is_empty() && !text.contains('`') {
        format!("`{text}`")
    } else {
        text
    }
}

/// Inline style of the HTML report (no external resources).
const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:70rem;\
padding:0 1rem;color:#1b1f24}h1{font-size:1.6rem}h2{margin-top:2rem;border-bottom:1px solid #d0d7de}\
table{border-collapse:collapse;margin:.5rem 0 1rem;width:100%}th,td{border:1px solid #d0d7de;\
padding:.25rem .5rem;text-align:left;vertical-align:top;overflow-wrap:anywhere}th{background:#f6f8fa}\
code{font:12px ui-monospace,monospace}.ok,.bad,.warn{white-space:nowrap}.ok{color:#1a7f37;font-weight:600}\
.bad{color:#cf222e;font-weight:600}.warn{color:#9a6700;font-weight:600}.muted{color:#6e7781}";

/// The document as one self-contained HTML file.
fn html(run_id: &str, doc: &[Block]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>stratumc report {}</title><style>{STYLE}</style></head><body>\n",
        escape(run_id)
    );
    for block in doc {
        match block {
            Block::Heading(level, text) => {
                let _ = writeln!(out, "<h{level}>{}</h{level}>", escape(text));
            }
            Block::Para(text) => {
                let _ = writeln!(out, "<p>{}</p>", escape(text));
            }
            Block::Table(head, rows) => html_table(&mut out, head, rows),
        }
    }
    out.push_str("</body></html>\n");
    out
}

fn html_table(out: &mut String, head: &[&str], rows: &[Vec<Cell>]) {
    out.push_str("<table><thead><tr>");
    for h in head {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let mut inner = escape(&cell.text);
            if cell.code && !inner.is_empty() {
                inner = format!("<code>{inner}</code>");
            }
            match cell.class {
                Some(c) => {
                    let _ = write!(out, "<td class=\"{c}\">{inner}</td>");
                }
                None => {
                    let _ = write!(out, "<td>{inner}</td>");
                }
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}

/// Text as HTML character data or attribute value.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Block> {
        vec![
            Block::Heading(1, "Run <x>".into()),
            Block::Para("a & b".into()),
            Block::Table(
                vec!["step", "status"],
                vec![vec![Cell::code("a|b"), Cell::status("failed")]],
            ),
        ]
    }

    #[test]
    fn markdown_escapes_table_pipes_and_marks_code() {
        let md = markdown(&sample());
        assert!(md.starts_with("# Run &lt;x>\n"));
        assert!(
            md.contains("| step | status |\n| --- | --- |\n| `a\\|b` | failed |"),
            "{md}"
        );
    }

    #[test]
    fn html_escapes_text_and_colours_statuses() {
        let page = html("run-<1>", &sample());
        assert!(page.contains("<title>stratumc report run-&lt;1&gt;</title>"));
        assert!(page.contains("<h1>Run &lt;x&gt;</h1>"));
        assert!(page.contains("<p>a &amp; b</p>"));
        assert!(page.contains("<td><code>a|b</code></td><td class=\"bad\">failed</td>"));
        assert!(!page.contains("http"), "no external resources: {page}");
    }
}
