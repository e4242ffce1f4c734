//! The `stratumc` command.
//!
//! Owns: argument parsing (clap), dispatch to one module per subcommand, and
//! the exit-code contract (0 ok, 1 the input has errors, 2 usage or I/O
//! errors) in one place.
//! Must never: implement a language rule; everything comes from
//! `stratum-compiler`.

mod commands;
mod input;

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
    /// Serve the language server over stdio for editors (VS Code, Neovim, Helix, any LSP client).
    Lsp,
    /// Draw a flow as a picture: Graphviz DOT, Mermaid, or SVG (needs Graphviz); `--run` colours steps by their status in a run (exit 0: drawn; 1: spec errors; 2: usage or I/O error).
    Graph {
        /// The spec file.
        spec: std::path::PathBuf,
        /// The flow to draw (default: the run's flow with `--run`, else the entry flow).
        #[arg(long)]
        flow: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = commands::graph::GraphFormat::Dot)]
        format: commands::graph::GraphFormat,
        /// A run in the store ($STRATUM_HOME) whose step statuses colour the nodes.
        #[arg(long)]
        run: Option<String>,
    },
    /// Classify a v0.x (Python-era) spec: which constructs carry over to v1 and how (report only; exit 0: reported, 2: usage or I/O error).
    Migrate {
        /// Report only (required: nothing is ever translated).
        #[arg(long)]
        check: bool,
        /// The legacy spec file.
        file: std::path::PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Inspect the run store ($STRATUM_HOME): `flows`, `flow RUN`, `gates` (exit 0: listed; 2: unknown run, bad filter or store error).
    Query {
        #[command(subcommand)]
        what: commands::query::Cmd,
    },
    /// Decide a waiting gate as a human: approve, reject (= kill) or revise (exit 0: recorded; 1: the gate is not waiting, the run is over, or the token is stale; 2: unknown run, step or not a gate).
    Gate {
        /// approve, reject (kill) or revise.
        #[arg(value_enum)]
        action: commands::gate::Action,
        /// The run id (`run-…`).
        run: String,
        /// The gate's step id (`review`, or `sub/review` inside a sub-flow).
        step: String,
        /// Why (recorded in the audit with the decision).
        #[arg(long)]
        note: Option<String>,
        /// Decide only if the gate still waits with this token (as listed by `query gates`).
        #[arg(long)]
        token: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Operate on runs: `flow cancel RUN`.
    Flow {
        #[command(subcommand)]
        what: commands::flow::Cmd,
    },
    /// Follow a run live until it ends (exit 0: completed; 1: ended otherwise; 2: unknown run).
    Watch {
        /// The run id (`run-…`).
        run: String,
        /// How often to look at the store, in milliseconds.
        #[arg(long, default_value_t = 200)]
        interval: u64,
    },
    /// Compile a spec-kit tasks directory (`*.md` task files) into a v1 spec, written to stdout (exit 0: written; 1: the tasks do not compile; 2: usage or I/O error).
    CompileSpeckit {
        /// The tasks directory.
        tasks_dir: std::path::PathBuf,
        /// Name of the generated flow.
        #[arg(long, default_value = "tasks")]
        flow: String,
        /// Write the spec to this file instead of stdout.
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
    },
    /// Print the JSON Schema (draft-07) of v1 specs, for yaml-language-server: `stratumc schema > stratum.schema.json`.
    Schema,
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
        Command::Graph {
            spec,
            flow,
            format,
            run,
        } => commands::graph::run(&commands::graph::Args {
            spec: &spec,
            flow: flow.as_deref(),
            format,
            run: run.as_deref(),
        }),
        Command::Migrate {
            check,
            file,
            format,
        } => commands::migrate::run(check, &file, format),
        Command::Query { what } => commands::query::run(&what),
        Command::Gate {
            action,
            run,
            step,
            note,
            token,
            format,
        } => commands::gate::run(&commands::gate::Args {
            action,
            run: &run,
            step: &step,
            note: note.as_deref(),
            token: token.as_deref(),
            format,
        }),
        Command::Flow { what } => commands::flow::run(&what),
        Command::Watch { run, interval } => commands::watch::run(&run, interval),
        Command::CompileSpeckit {
            tasks_dir,
            flow,
            output,
        } => commands::speckit::run(&tasks_dir, Some(&flow), output.as_deref()),
        Command::Schema => commands::schema::run(),
        Command::Explain { code, list } => commands::explain::run(code.as_deref(), list),
        Command::Lsp => commands::lsp::run(),
        Command::Mcp => {
            // one thread: every tool call runs under the server's state lock anyway,
            // and a current-thread runtime saves a hand-off per message
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match runtime.map(|rt| rt.block_on(stratum_mcp::serve_stdio())) {
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
