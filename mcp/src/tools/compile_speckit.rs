//! `stratum_compile_speckit {tasks_dir, flow_name?}`: spec-kit task files
//! (`tasks/*.md`) → a Stratum v1 spec.
//!
//! Owns: reading a tasks directory ([`read_tasks_dir`], also used by
//! `stratumc compile-speckit`, so both read the same files) and the reply
//! `{status: "ok", yaml, flow_name, steps: [{id, title, parallel, after,
//! ensures, judgment, file}]}` or an error with `error_type`
//! `directory_not_found`, `no_tasks`, `step_id_collision` or `compile_error`.
//! Must never: compile anything itself (`stratum_compiler::speckit` does).

use std::path::Path;

use serde_json::{Value, json};
use stratum_compiler::analysis::MAX_FILE_SIZE;
use stratum_compiler::speckit::{self, Compiled};

use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_compile_speckit";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Compile a spec-kit tasks directory (one `*.md` file per task: `# Task: [P] title`, a description, \
`## Acceptance Criteria` with `- [ ]` items) into a Stratum v1 spec. `file X exists` / `file X contains \"Y\"` become file_exists / \
file_contains ensures, `tests pass` / `no lint errors` become boolean result fields tests_pass / lint_clean with ensures, other criteria \
go into the task text; `[P]` tasks run in parallel after the same predecessor. Returns {status: \"ok\", yaml, flow_name, steps}: \
pass `yaml` to stratum_validate or stratum_plan as `spec`.";

/// Request fields.
pub const FIELDS: &[Field] = &[
    Field::req(
        "tasks_dir",
        Kind::Str,
        "The tasks directory (absolute, or relative to the server's working directory).",
    ),
    Field::opt(
        "flow_name",
        Kind::Str,
        "Name of the generated flow (default `tasks`).",
    ),
];

/// Why a directory could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    /// `directory_not_found` or `compile_error` (a file that is not UTF-8 or cannot be read).
    pub error_type: &'static str,
    /// What went wrong.
    pub message: String,
}

/// The `*.md` files directly in `dir` as `(file name, text)`, in name order.
pub fn read_tasks_dir(dir: &Path) -> Result<Vec<(String, String)>, ReadError> {
    let shown = dir.display();
    if !dir.is_dir() {
        return Err(ReadError {
            error_type: "directory_not_found",
            message: if dir.exists() {
                format!(
                    "{shown} is not a directory: give the tasks directory (the folder of `*.md` task files)"
                )
            } else {
                format!(
                    "no directory {shown}: give the tasks directory (the folder of `*.md` task files)"
                )
            },
        });
    }
    let entries = std::fs::read_dir(dir).map_err(|e| ReadError {
        error_type: "directory_not_found",
        message: format!("cannot read directory {shown}: {e}"),
    })?;
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        if !name.ends_with(".md") || !path.is_file() {
            continue;
        }
        let bytes = read_task_file(&path).map_err(|message| ReadError {
            error_type: "compile_error",
            message,
        })?;
        let text = String::from_utf8(bytes).map_err(|_| ReadError {
            error_type: "compile_error",
            message: format!("{name}: the file is not UTF-8 text"),
        })?;
        files.push((name, text));
    }
    files.sort();
    Ok(files)
}

/// One task file: a regular file (checked on the opened descriptor) of at
/// most [`MAX_FILE_SIZE`] bytes (what one spec may hold), read with
/// `Read::take` so an endless file stops at the limit.
fn read_task_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("cannot read {shown}: it is not a regular file"));
    }
    let limit = MAX_FILE_SIZE as u64;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "cannot read {shown}: a task file is limited to {} MiB ({limit} bytes), like a spec",
            limit >> 20
        ));
    }
    Ok(bytes)
}

/// The steps of a compiled spec as the reply lists them.
pub fn steps_json(c: &Compiled) -> Value {
    Value::Array(
        c.tasks
            .iter()
            .map(|t| {
                json!({
                    "id": t.id,
                    "title": t.title,
                    "parallel": t.parallel,
                    "after": t.after,
                    "ensures": t.ensures(),
                    "judgment": t.judgment(),
                    "file": t.file,
                })
            })
            .collect(),
    )
}

/// Runs the tool.
pub fn call(_: &mut State, args: &Args) -> Reply {
    let dir = Path::new(args.req_str("tasks_dir"));
    let files = match read_tasks_dir(dir) {
        Ok(f) => f,
        Err(e) => return Reply::error(e.error_type, e.message),
    };
    match speckit::compile(&files, args.str("flow_name")) {
        Ok(c) => Reply::Ok(json!({
            "status": "ok",
            "yaml": c.yaml,
            "flow_name": c.flow_name,
            "steps": steps_json(&c),
        })),
        Err(errors) => {
            let kind = errors.first().map_or("compile_error", speckit::Error::kind);
            let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
            Reply::error_with(
                kind,
                messages.join("; "),
                json!({"errors": errors.iter().map(|e| json!({"error_type": e.kind(), "message": e.to_string()})).collect::<Vec<_>>()}),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_markdown_files_in_name_order() {
        let dir = std::env::temp_dir().join(format!("stratum-speckit-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub.md")).unwrap();
        std::fs::write(dir.join("b.md"), "# Task: b\n").unwrap();
        std::fs::write(dir.join("a.md"), "# Task: a\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "x").unwrap();
        let files = read_tasks_dir(&dir).unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a.md", "b.md"]);
        let e = read_tasks_dir(&dir.join("a.md")).unwrap_err();
        assert_eq!(e.error_type, "directory_not_found");
        assert!(e.message.contains("is not a directory"), "{}", e.message);
        let e = read_tasks_dir(&dir.join("missing")).unwrap_err();
        assert!(e.message.starts_with("no directory "), "{}", e.message);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
