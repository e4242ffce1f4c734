//! `stratumc compile-speckit TASKS_DIR [--flow NAME] [-o FILE]`: spec-kit
//! task files → a Stratum v1 spec (stdout by default).
//!
//! Owns: reading the directory (through the MCP tool's reader, so the CLI and
//! `stratum_compile_speckit` read the same files), writing the spec to
//! stdout or `-o FILE`, and the exit codes: 0 written; 1 the tasks do not
//! compile (every problem on stderr); 2 usage or I/O error (no such
//! directory, unwritable output).
//! Must never: compile anything itself (`stratum_compiler::speckit` does).

use std::path::PathBuf;

use stratum_compiler::speckit;
use stratum_mcp::tools::compile_speckit::read_tasks_dir;

use crate::Exit;

/// Arguments of `stratumc compile-speckit`.
#[derive(clap::Args, Debug)]
pub struct CompileSpeckitArgs {
    /// The tasks directory.
    pub tasks_dir: PathBuf,
    /// Name of the generated flow.
    #[arg(long, default_value = "tasks")]
    pub flow: String,
    /// Write the spec to this file instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// Runs the command.
pub fn run(args: &CompileSpeckitArgs) -> Exit {
    let (dir, flow, output) = (
        args.tasks_dir.as_path(),
        Some(args.flow.as_str()),
        args.output.as_deref(),
    );
    let files = match read_tasks_dir(dir) {
        Ok(f) => f,
        Err(e) if e.error_type == "directory_not_found" => {
            eprintln!("error: {}", e.message);
            return Exit::Usage;
        }
        Err(e) => {
            eprintln!("error: {}", e.message);
            return Exit::Errors;
        }
    };
    let compiled = match speckit::compile(&files, flow) {
        Ok(c) => c,
        Err(errors) => {
            for e in &errors {
                eprintln!("error[{}]: {e}", e.kind());
            }
            eprintln!(
                "failed: {} has {} problem{}; no spec written",
                dir.display(),
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
            return Exit::Errors;
        }
    };
    match output {
        None => super::emit(&compiled.yaml),
        Some(path) => {
            if let Err(e) = std::fs::write(path, &compiled.yaml) {
                eprintln!("error: cannot write {}: {e}", path.display());
                return Exit::Usage;
            }
            eprintln!(
                "wrote {} (flow `{}`, {} step{})",
                path.display(),
                compiled.flow_name,
                compiled.tasks.len(),
                if compiled.tasks.len() == 1 { "" } else { "s" }
            );
        }
    }
    Exit::Ok
}
