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

/// Output format of `check` and `cost`.
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
    /// Estimate dispatches, tokens, dollars and time of a flow before a run (exit 0: ok, also over budget; 1: spec errors; 2: usage or I/O error).
    Cost {
        /// The spec file.
        spec: std::path::PathBuf,
        /// The flow (default: the entry flow).
        #[arg(long)]
        flow: Option<String>,
        /// The flow's input object: JSON text, or `@FILE` to read it from a file.
        #[arg(long)]
        inputs: Option<String>,
        /// Agent profiles (default: `./stratum.toml` when it exists, else built-in defaults).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Run a spec or plan with an agent command (exit 0: completed; 1: failed, killed, budget exhausted, cancelled or paused; 2: usage error or invalid spec).
    Run {
        /// The spec (`.stratum.yaml`) or plan (`.stratumc`); not needed with `--resume`.
        source: Option<std::path::PathBuf>,
        /// Continue this run (after a crash, or to decide a gate).
        #[arg(long)]
        resume: Option<String>,
        /// The flow input: JSON text, or `@FILE`.
        #[arg(long)]
        inputs: Option<String>,
        /// The flow to run (default: the entry flow).
        #[arg(long)]
        flow: Option<String>,
        /// Command run through `sh -c` for every dispatch (ready entry on stdin, result JSON on stdout).
        #[arg(long)]
        agent: String,
        /// Workspace root for file predicates and the agent's working directory (default: the current directory).
        #[arg(long)]
        workspace: Option<std::path::PathBuf>,
        /// Decide every gate this way instead of asking (`approve`, `revise`, `kill`).
        #[arg(long, value_parser = ["approve", "revise", "kill"])]
        gate: Option<String>,
        /// `json` prints one final JSON object on stdout.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Serve the MCP tools over stdio for coding agents (Claude Code, Codex, any MCP host).
    Mcp,
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
        Command::Run {
            source,
            resume,
            inputs,
            flow,
            agent,
            workspace,
            gate,
            format,
        } => commands::run::run(&commands::run::Args {
            source: source.as_deref(),
            resume: resume.as_deref(),
            inputs: inputs.as_deref(),
            flow: flow.as_deref(),
            agent: &agent,
            workspace: workspace.as_deref(),
            gate: gate.as_deref(),
            format,
        }),
        Command::Cost {
            spec,
            flow,
            inputs,
            config,
            format,
        } => commands::cost::run(&commands::cost::Args {
            spec: &spec,
            flow: flow.as_deref(),
            inputs: inputs.as_deref(),
            config: config.as_deref(),
            format,
        }),
        Command::Explain { code, list } => commands::explain::run(code.as_deref(), list),
        Command::Mcp => {
            match tokio::runtime::Runtime::new().map(|rt| rt.block_on(stratum_mcp::serve_stdio())) {
                Ok(Ok(())) => Exit::Ok,
                Ok(Err(e)) => {
                    eprintln!("error: mcp: {e}");
                    Exit::Usage
                }
                Err(e) => {
                    eprintln!("error: mcp: {e}");
                    Exit::Usage
                }
            }
        }
    };
    ExitCode::from(exit as u8)
}
