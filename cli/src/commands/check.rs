//! `stratumc check FILE...`: analyse specs and report diagnostics.
//!
//! Owns: expanding directories to `*.stratum.yaml` files, reading them,
//! choosing human or JSON output and the exit status.
//! Must never: decide validity itself — it prints what `analyze_bytes` says.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use stratum_compiler::analysis::analyze_bytes;
use stratum_compiler::diagnostics::render;

use crate::{Color, Exit, Format};

/// Spec files below `dir`, sorted, recursively.
fn specs_below(dir: &Path, out: &mut Vec<PathBuf>, problems: &mut Vec<String>) {
    let mut stack = vec![dir.to_path_buf()];
    let mut found = Vec::new();
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) => {
                problems.push(format!("cannot read directory {}: {e}", d.display()));
                continue;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".stratum.yaml"))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    out.extend(found);
}

/// Arguments of `stratumc check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Spec files, or directories to search for `*.stratum.yaml`.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Colour of human output.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    pub color: Color,
}

/// Runs the command.
pub fn run(args: &CheckArgs) -> Exit {
    let CheckArgs {
        paths,
        format,
        color,
    } = args;
    let (format, color) = (*format, *color);
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for p in paths {
        if p.is_dir() {
            let before = files.len();
            specs_below(p, &mut files, &mut problems);
            if files.len() == before {
                problems.push(format!(
                    "no `*.stratum.yaml` files in directory {}",
                    p.display()
                ));
            }
        } else {
            files.push(p.clone());
        }
    }
    let use_color = match color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let mut any_errors = false;
    let (mut total_errors, mut total_warnings, mut checked) = (0usize, 0usize, 0usize);
    let mut json_files = Vec::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for path in &files {
        let shown = path.display().to_string();
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                problems.push(format!("cannot read {shown}: {e}"));
                continue;
            }
        };
        // The process ends soon after: skip freeing the analysis (as rustc does).
        let analysis = std::mem::ManuallyDrop::new(analyze_bytes(&bytes));
        checked += 1;
        total_errors += analysis.error_count();
        total_warnings += analysis.warning_count();
        any_errors |= analysis.error_count() > 0;
        match format {
            Format::Json => json_files.push(render::json_file(
                &shown,
                &analysis.text,
                &analysis.lines,
                &analysis.diagnostics,
            )),
            Format::Human => {
                let text = render::human(&shown, &analysis.text, &analysis.diagnostics, use_color);
                let _ = out.write_all(text.as_bytes());
            }
        }
    }
    for p in &problems {
        eprintln!("error: {p}");
    }
    match format {
        Format::Json => {
            let doc = serde_json::json!({ "version": render::JSON_VERSION, "files": json_files });
            let _ = writeln!(out, "{doc}");
        }
        Format::Human => {
            let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
            eprintln!(
                "{}: {} checked, {}, {}",
                if any_errors { "failed" } else { "ok" },
                plural(checked, "file"),
                plural(total_errors, "error"),
                plural(total_warnings, "warning")
            );
        }
    }
    let _ = out.flush();
    if !problems.is_empty() {
        Exit::Usage
    } else if any_errors {
        Exit::Errors
    } else {
        Exit::Ok
    }
}
