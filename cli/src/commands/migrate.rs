//! `stratumc migrate --check FILE`: classify a v0.x (Python-era) spec.
//!
//! Owns: reading the file, refusing `migrate` without `--check` (the
//! command is report-only), printing the text or JSON report, and the exit
//! codes of reference §9: 0 whenever a report was printed (whatever it
//! found), 2 on usage or I/O errors.
//! Must never: classify anything itself (`stratum_compiler::migrate` does),
//! or write a translated spec.

use std::path::PathBuf;

use stratum_compiler::migrate;

use crate::{Exit, Format};

/// Arguments of `stratumc migrate`.
#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// Report only (required: nothing is ever translated).
    #[arg(long)]
    pub check: bool,
    /// The legacy spec file.
    pub file: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

/// Runs the command.
pub fn run(args: &MigrateArgs) -> Exit {
    let (check, file, format) = (args.check, args.file.as_path(), args.format);
    if !check {
        eprintln!(
            "error: `stratumc migrate` only reports (nothing is translated): run `stratumc migrate --check {}`",
            file.display()
        );
        return Exit::Usage;
    }
    let bytes = match crate::input::read(file, crate::input::Kind::Spec) {
        Ok(b) => b,
        Err(e) => return super::usage(e),
    };
    let report = migrate::check_bytes(&bytes);
    match format {
        Format::Human => super::emit(&migrate::render_text(&report)),
        Format::Json => {
            let text = serde_json::to_string_pretty(&migrate::to_json(&report)).unwrap_or_default();
            super::emit(&format!("{text}\n"));
        }
    }
    Exit::Ok
}
