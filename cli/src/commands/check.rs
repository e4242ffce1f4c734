//! `stratumc check FILE...`: analyse specs and report diagnostics.
//!
//! Owns: expanding directories to `*.stratum.yaml` files, reading them,
//! choosing human or JSON output and the exit status.
//! Must never: decide validity itself — it prints what `analyze_bytes` says.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use stratum_compiler::analysis::{Analysis, analyze_bytes_with};
use stratum_compiler::diagnostics::{ci, render};
use stratum_compiler::env::CheckEnv;

use crate::{Color, Exit};

/// Output format of `stratumc check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckFormat {
    /// Rustc-style text.
    Human,
    /// One JSON document on stdout (version 1).
    Json,
    /// A SARIF 2.1.0 log on stdout, for code scanning (e.g. GitHub's upload-sarif).
    Sarif,
    /// GitHub Actions workflow commands (`::error file=…::…`), shown as annotations.
    Github,
}

/// Spec files below `dir`, sorted, recursively. A `*.stratum.yaml` that is
/// not a regular file (a FIFO, a socket, a device; a symlink is followed) is
/// skipped with a warning in `skipped`: opening a FIFO could wait forever.
fn specs_below(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    problems: &mut Vec<String>,
    skipped: &mut Vec<String>,
) {
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
                match not_regular(&path, kind) {
                    None => found.push(path),
                    Some(what) => skipped.push(format!(
                        "skipped {}: it is {what}, not a regular file",
                        path.display()
                    )),
                }
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
    #[arg(long, value_enum, default_value_t = CheckFormat::Human)]
    pub format: CheckFormat,
    /// Colour of human output.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    pub color: Color,
    /// Also warn once per use of a stratumc addition (language 1.1), for specs that must run on the original engine.
    #[arg(long)]
    pub portable: bool,
}

/// What a directory entry of type `kind` is, when it is not a regular file
/// (through a symlink, the target's type counts).
fn not_regular(path: &Path, kind: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let kind = if kind.is_symlink() {
        match std::fs::metadata(path) {
            Ok(m) => m.file_type(),
            Err(_) => return Some("a broken symlink"),
        }
    } else {
        kind
    };
    if kind.is_file() {
        None
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device")
    } else if kind.is_dir() {
        Some("a symlink to a directory")
    } else {
        Some("not a file")
    }
}

/// Runs the command.
pub fn run(args: &CheckArgs) -> Exit {
    let CheckArgs {
        paths,
        format,
        color,
        portable,
    } = args;
    let (format, color) = (*format, *color);
    let mut files = Vec::new();
    let mut problems = Vec::new();
    let mut skipped = Vec::new();
    for p in paths {
        if p.is_dir() {
            let before = files.len();
            specs_below(p, &mut files, &mut problems, &mut skipped);
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
    let (mut total_errors, mut total_warnings) = (0usize, 0usize);
    // (shown path, analysis) of every file read, in order.
    let mut checked: Vec<(String, std::mem::ManuallyDrop<Analysis>)> = Vec::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for path in &files {
        let shown = path.display().to_string();
        let bytes = match crate::input::read(path, crate::input::Kind::Spec) {
            Ok(b) => b,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        // The environment input: the stratum.toml beside the spec (else in
        // the current directory), as the language server and MCP find it.
        let (env, unreadable) = CheckEnv::near_spec(path);
        if let Some(why) = unreadable {
            eprintln!("warning: {shown}: checked without its stratum.toml: {why}");
        }
        // The process ends soon after: skip freeing the analysis (as rustc does).
        let analysis = match portable {
            true => analyze_bytes_with(&bytes, &env).with_portability_warnings(),
            false => analyze_bytes_with(&bytes, &env),
        };
        let analysis = std::mem::ManuallyDrop::new(analysis);
        total_errors += analysis.error_count();
        total_warnings += analysis.warning_count();
        any_errors |= analysis.error_count() > 0;
        match format {
            // streamed: a long run shows its first files at once
            CheckFormat::Human => {
                let text = render::human(&shown, &analysis.text, &analysis.diagnostics, use_color);
                let _ = out.write_all(text.as_bytes());
            }
            CheckFormat::Github => {
                let _ = out.write_all(ci::github(&as_checked(&shown, &analysis)).as_bytes());
            }
            CheckFormat::Json | CheckFormat::Sarif => {}
        }
        checked.push((shown, analysis));
    }
    for s in &skipped {
        eprintln!("warning: {s}");
    }
    match format {
        CheckFormat::Github => {
            for p in &problems {
                let _ = out.write_all(ci::github_problem(p).as_bytes());
            }
        }
        _ => {
            for p in &problems {
                eprintln!("error: {p}");
            }
        }
    }
    match format {
        CheckFormat::Json => {
            let json_files: Vec<_> = checked
                .iter()
                .map(|(shown, a)| render::json_file(shown, &a.text, &a.lines, &a.diagnostics))
                .collect();
            let doc = serde_json::json!({ "version": render::JSON_VERSION, "files": json_files });
            let _ = writeln!(out, "{doc}");
        }
        CheckFormat::Sarif => {
            let files: Vec<_> = checked
                .iter()
                .map(|(shown, a)| as_checked(shown, a))
                .collect();
            let _ = writeln!(
                out,
                "{}",
                ci::sarif(&files, &problems, env!("CARGO_PKG_VERSION"))
            );
        }
        CheckFormat::Human | CheckFormat::Github => {
            let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
            eprintln!(
                "{}: {} checked, {}, {}",
                if any_errors || !problems.is_empty() {
                    "failed"
                } else {
                    "ok"
                },
                plural(checked.len(), "file"),
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

fn as_checked<'a>(shown: &'a str, a: &'a Analysis) -> ci::CheckedFile<'a> {
    ci::CheckedFile {
        path: shown,
        text: &a.text,
        lines: &a.lines,
        diagnostics: &a.diagnostics,
    }
}
