//! `stratumc verify RUN`: re-hashes every file the run's manifests recorded
//! (X4 `artifacts`) in the run's workspace and lists the changed and missing
//! ones (exit 0: all match, 1: differences, 2: unknown run or store error).
//!
//! Owns: the command's table and its JSON document (`"version": 1`).
//! Must never: change a run or a file (the re-hashing is
//! `stratum_vm::view::verify`, through the standard host's jail).

use stratum_vm::host::StdHost;
use stratum_vm::view::wire::{check_status as status, owner};
use stratum_vm::view::{self, VerifiedFile, wire};

use super::query::{is_unknown_run, open, table, unknown_run};
use crate::{Exit, Format};

/// Arguments of `stratumc verify`.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The run id (`run-…`).
    pub run: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

/// Runs the command.
pub fn run(args: &VerifyArgs) -> Exit {
    let mut engine = match open() {
        Ok(e) => e,
        Err(code) => return code,
    };
    let root = match engine.workspace_of(&args.run) {
        Ok(r) => r,
        Err(e) if is_unknown_run(&e) => {
            eprintln!("{}", unknown_run(&args.run));
            return Exit::Usage;
        }
        Err(e) => {
            eprintln!("error: run `{}`: {e}", args.run);
            return Exit::Usage;
        }
    };
    let Some(root) = root else {
        eprintln!(
            "error: run `{}` has no recorded workspace, so its artifacts cannot be re-hashed",
            args.run
        );
        return Exit::Usage;
    };
    let mut host = match StdHost::for_root(Some(std::path::Path::new(&root))) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: run `{}`: {e}", args.run);
            return Exit::Usage;
        }
    };
    let files = match view::verify(&engine, &args.run, &mut host) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: run `{}`: {e}", args.run);
            return Exit::Usage;
        }
    };
    let text = match args.format {
        Format::Json => format!("{}\n", wire::verified_json(&args.run, &root, &files)),
        Format::Human => human(&args.run, &files),
    };
    super::emit(&text);
    if files.iter().all(VerifiedFile::matches) {
        Exit::Ok
    } else {
        Exit::Errors
    }
}

fn human(run: &str, files: &[VerifiedFile]) -> String {
    if files.is_empty() {
        return format!("run {run} recorded no artifacts\n");
    }
    let bad: Vec<&VerifiedFile> = files.iter().filter(|f| !f.matches()).collect();
    let mut out = if bad.is_empty() {
        format!("all {} recorded files of run {run} match\n", files.len())
    } else {
        format!(
            "{} of {} recorded files of run {run} differ:\n",
            bad.len(),
            files.len()
        )
    };
    if !bad.is_empty() {
        let rows = bad
            .iter()
            .map(|f| {
                vec![
                    status(&f.check).to_string(),
                    f.recorded.path.clone(),
                    owner(f),
                    f.recorded.sha256[..f.recorded.sha256.len().min(12)].to_string(),
                ]
            })
            .collect();
        out.push_str(&table(&["STATUS", "PATH", "STEP", "RECORDED"], rows));
    }
    out
}
