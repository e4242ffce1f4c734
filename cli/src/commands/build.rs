//! `stratumc build SPEC [-o PLAN] [--emit plan|asm]` and `stratumc inspect PLAN`.
//!
//! Owns: reading the spec, printing its diagnostics, writing the plan file
//! (default: next to the spec with the extension `.stratumc`), printing the
//! plan hash or the listing; loading and verifying a plan file for `inspect`.
//! Must never: lower or verify plans itself (compiler and vm do).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use stratum_compiler::analysis::analyze_bytes;
use stratum_compiler::diagnostics::render;
use stratum_vm::plan::{disasm, file};

use crate::Exit;

/// What `build` emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// The binary plan file.
    Plan,
    /// A readable listing on stdout.
    Asm,
}

/// The default plan path: `x.stratum.yaml` → `x.stratumc`.
pub fn default_output(spec: &Path) -> PathBuf {
    let name = spec
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".stratum.yaml")
        .or_else(|| name.strip_suffix(".yaml"))
        .or_else(|| name.strip_suffix(".yml"))
        .unwrap_or(&name);
    spec.with_file_name(format!("{stem}.stratumc"))
}

/// Arguments of `stratumc build`.
#[derive(clap::Args, Debug)]
pub struct BuildArgs {
    /// The spec.
    pub spec: PathBuf,
    /// Where to write the plan.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// `plan` writes the plan file; `asm` prints a readable listing instead.
    #[arg(long, value_enum, default_value_t = Emit::Plan)]
    pub emit: Emit,
}

/// Arguments of `stratumc inspect`.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// The plan file.
    pub plan: PathBuf,
}

/// Runs `build`.
pub fn run(args: &BuildArgs) -> Exit {
    let (spec, output, emit) = (args.spec.as_path(), args.output.as_deref(), args.emit);
    let shown = spec.display().to_string();
    let bytes = match crate::input::read(spec, crate::input::Kind::Spec) {
        Ok(b) => b,
        Err(e) => return super::usage(e),
    };
    let analysis = analyze_bytes(&bytes);
    if !analysis.diagnostics.is_empty() {
        let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        eprint!(
            "{}",
            render::human(&shown, &analysis.text, &analysis.diagnostics, color)
        );
    }
    let Some(plan) = stratum_compiler::build::build_plan(&analysis) else {
        eprintln!(
            "error: {shown} has {} error(s); no plan was built",
            analysis.error_count()
        );
        return Exit::Errors;
    };
    let (encoded, hash) = file::encode(&plan);
    if emit == Emit::Asm {
        super::emit(&format!(
            "; plan {hash} ({} bytes, format {})\n",
            encoded.len(),
            file::FORMAT_VERSION
        ));
        super::emit(&disasm::listing(&plan));
        if output.is_none() {
            return Exit::Ok;
        }
    }
    let path = output.map_or_else(|| default_output(spec), Path::to_path_buf);
    if let Err(e) = write_plan(&path, &encoded) {
        eprintln!("error: {e}");
        return Exit::Usage;
    }
    if emit == Emit::Plan {
        super::emit(&format!("{hash}\n"));
        eprintln!("wrote {} ({} bytes)", path.display(), encoded.len());
    }
    Exit::Ok
}

/// Writes a plan file: to a temporary file, then renamed, so a crash never
/// leaves half a plan (also the Python package's `stratumc.build`).
pub fn write_plan(path: &Path, encoded: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension(format!("stratumc.tmp{}", std::process::id()));
    std::fs::write(&tmp, encoded)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot write {}: {e}", path.display())
        })
}

/// Runs `inspect`.
pub fn inspect(args: &InspectArgs) -> Exit {
    let path = args.plan.as_path();
    let bytes = match crate::input::read(path, crate::input::Kind::Plan) {
        Ok(b) => b,
        Err(e) => return super::usage(e),
    };
    match file::load(&bytes) {
        Ok((plan, hash)) => {
            // the version the file was written in (an older one was migrated on load)
            let version = file::read_header(&bytes).map_or(file::FORMAT_VERSION, |h| h.0);
            super::emit(&format!(
                "; plan {hash} ({} bytes, format {version})\n",
                bytes.len()
            ));
            super::emit(&disasm::listing(&plan));
            Exit::Ok
        }
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            Exit::Errors
        }
    }
}
