//! The `stratumc` command.
//!
//! Owns: argument parsing (clap), dispatch to one module per subcommand, and
//! the exit-code contract (0 ok, 1 the input has errors, 2 usage or I/O
//! errors) in one place.
//! Must never: implement a language rule; everything comes from
//! `stratum-compiler`.

mod commands;

/// A faster allocator: the front end allocates many small values.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// stratumc: compiler toolchain for Stratum v1 workflow specs.
#[derive(Parser, Debug)]
#[command(name = "stratumc", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Output format of `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Rustc-style text.
    Human,
    /// One JSON document on stdout.
    Json,
}

/// When to colour human output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Color {
    /// On a terminal, unless NO_COLOR is set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check specs and report every problem (exit 0: no errors, 1: errors, 2: usage or I/O error).
    Check {
        /// Spec files, or directories to search for `*.stratum.yaml`.
        #[arg(required = true)]
        paths: Vec<std::path::PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// Colour of human output.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
    },
    /// Compile a spec to a plan file (default: next to the spec, `.stratumc`); prints the plan hash.
    Build {
        /// The spec.
        spec: std::path::PathBuf,
        /// Where to write the plan.
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
        /// `plan` writes the plan file; `asm` prints a readable listing instead.
        #[arg(long, value_enum, default_value_t = commands::build::Emit::Plan)]
        emit: commands::build::Emit,
    },
    /// Load a plan file, verify it, and print its header and listing.
    Inspect {
        /// The plan file.
        plan: std::path::PathBuf,
    },
    /// Explain a diagnostic code, e.g. `stratumc explain S0305`.
    Explain {
        /// The code (`S0305`), or `--list` to list every code.
        code: Option<String>,
        /// List every code with its title.
        #[arg(long)]
        list: bool,
    },
}

/// Process exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything fine (warnings allowed).
    Ok = 0,
    /// The input has errors.
    Errors = 1,
    /// Usage or I/O error.
    Usage = 2,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Ok
            };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let exit = match cli.command {
        Command::Check {
            paths,
            format,
            color,
        } => commands::check::run(&paths, format, color),
        Command::Build { spec, output, emit } => {
            commands::build::run(&spec, output.as_deref(), emit)
        }
        Command::Inspect { plan } => commands::build::inspect(&plan),
        Command::Explain { code, list } => commands::explain::run(code.as_deref(), list),
    };
    ExitCode::from(exit as u8)
}
