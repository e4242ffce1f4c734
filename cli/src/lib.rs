//! The `stratumc` command, as a library: [`main_with_args`] is the whole
//! command line (the binary in `bin/stratumc.rs` and the Python package's
//! `stratumc` console script both call it).
//!
//! Owns: the list of subcommands (clap; each command's arguments are a
//! `clap::Args` struct in its own module), dispatch to that module, and
//! the exit-code contract (0 ok, 1 the input has errors, 2 usage or I/O
//! errors) in one place.
//! Must never: implement a language rule; everything comes from
//! `stratum-compiler`.

// public for the Python package (`python/`), which drives runs and
// estimates with the same functions as the commands
pub mod commands;
pub mod input;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

/// stratumc: compiler toolchain for Stratum v1 workflow specs.
#[derive(Parser, Debug)]
#[command(name = "stratumc", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Output format of `cost`, `migrate`, `verify` and other commands with a human and a JSON form (`check` has its own, with SARIF and GitHub annotations).
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

/// The subcommands; each one's arguments are its module's `clap::Args` struct.
#[derive(Subcommand, Debug)]
enum Command {
    /// Check specs and report every problem (exit 0: no errors, 1: errors, 2: usage or I/O error).
    #[command(alias = "validate")]
    Check(commands::check::CheckArgs),
    /// Compile a spec to a plan file (default: next to the spec, `.stratumc`); prints the plan hash.
    Build(commands::build::BuildArgs),
    /// Load a plan file, verify it, and print its header and listing.
    Inspect(commands::build::InspectArgs),
    /// Estimate dispatches, tokens, dollars and time of a flow before a run (exit 0: ok, also over budget; 1: spec errors; 2: usage or I/O error).
    Cost(commands::cost::CostArgs),
    /// Run a spec or plan with an agent command or the configured connectors (exit 0: completed; 1: failed, killed, budget exhausted, cancelled or paused; 2: usage error or invalid spec; 130/143: stopped by SIGINT/SIGTERM, resumable).
    Run(commands::run::RunArgs),
    /// Serve the MCP tools over stdio for coding agents (Claude Code, Codex, any MCP host).
    Mcp(McpArgs),
    /// Serve the language server over stdio for editors (VS Code, Neovim, Helix, any LSP client).
    Lsp,
    /// Draw a flow as a picture: Graphviz DOT, Mermaid, or SVG (needs Graphviz); `--run` colours steps by their status in a run (exit 0: drawn; 1: spec errors; 2: usage or I/O error).
    Graph(commands::graph::GraphArgs),
    /// Classify a v0.x (Python-era) spec: which constructs carry over to v1 and how (report only; exit 0: reported, 2: usage or I/O error).
    Migrate(commands::migrate::MigrateArgs),
    /// Inspect the run store ($STRATUM_HOME): `flows`, `flow RUN`, `events RUN`, `gates` (exit 0: listed; 2: unknown run, bad filter or store error).
    Query(commands::query::QueryArgs),
    /// Decide a waiting gate as a human: approve, reject (= kill) or revise (exit 0: recorded; 1: the gate is not waiting, the run is over, or the token is stale; 2: unknown run, step or not a gate).
    Gate(commands::gate::GateArgs),
    /// Re-hash every file a run's manifests recorded (`artifacts`) and list the changed or missing ones (exit 0: all match; 1: differences; 2: unknown run or store error).
    Verify(commands::verify::VerifyArgs),
    /// Check the run store for damage: `store check` (exit 0: healthy; 1: damage found; 2: cannot open).
    Store(commands::store::StoreArgs),
    /// Guarded resources (STRAT-GUARD): `history RESOURCE`, `verify RESOURCE|--all`, `authorize` (stdin → the payload to sign), `descriptors` (exit 0: ok; 1: a broken ledger; 2: unknown resource or store error).
    Guard(commands::guard::GuardArgs),
    /// Operate on runs: `flow cancel RUN`.
    Flow(commands::flow::FlowArgs),
    /// Follow a run live until it ends (exit 0: completed; 1: ended otherwise; 2: unknown run).
    Watch(commands::watch::WatchArgs),
    /// The evidence chain of a run as a document: steps, attempts, files and digests, verdicts, decisions, spend, timeline (`--format md|html|json`, `-o FILE`; exit 0: written; 2: unknown run or unwritable file).
    Report(commands::report::ReportArgs),
    /// Write a working project: a starter spec, or a preset (`--preset research`: the staged research pipeline); never overwrites a file (exit 0: written; 2: a file exists or cannot be written).
    Init(commands::init::InitArgs),
    /// Compile a spec-kit tasks directory (`*.md` task files) into a v1 spec, written to stdout (exit 0: written; 1: the tasks do not compile; 2: usage or I/O error).
    CompileSpeckit(commands::speckit::CompileSpeckitArgs),
    /// Print the JSON Schema (draft-07) of v1 specs, for yaml-language-server: `stratumc schema > stratum.schema.json`.
    Schema,
    /// Explain a diagnostic code, e.g. `stratumc explain S0305`.
    Explain(commands::explain::ExplainArgs),
    /// List the agents (their connector or command, whether the connector's CLI is on PATH), the judges and their cost profiles (exit 0: listed; 2: unreadable configuration).
    Models(commands::models::ModelsArgs),
    /// Serve the operator UI in the browser: runs, their graphs, gates with approve/revise/kill, evidence, live (loopback by default; `--listen ADDR:PORT`, a token off loopback).
    Ui(commands::ui::UiArgs),
    /// Print a shell completion script: `stratumc completions bash|zsh|fish|elvish|powershell`.
    Completions(commands::completions::CompletionsArgs),
    /// Print the manual page `stratumc.1` (roff), or write every command's page with `--out-dir DIR`.
    Man(commands::completions::ManArgs),
}

/// Arguments of `stratumc mcp`.
#[derive(clap::Args, Debug)]
struct McpArgs {
    /// The operator's configuration (default: `$STRATUM_HOME/stratum.toml` when it exists): its judge, agent commands and timeouts win over the `stratum.toml` of a run's workspace, which may only narrow them. Frozen into each run at `stratum_plan`.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
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
    /// `run` stopped by SIGINT (128 + 2); the run stays resumable.
    Interrupted = 130,
    /// `run` stopped by SIGTERM (128 + 15); the run stays resumable.
    Terminated = 143,
}

/// Runs the command line `args` (the first one is the program name) and
/// returns the process exit status.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    ExitCode::from(exit_with_args(args) as u8)
}

/// [`main_with_args`], with the exit status as its [`Exit`] (the Python
/// console script hands it to `sys.exit`: an `ExitCode` has no readable value).
pub fn exit_with_args<I, T>(args: I) -> Exit
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Ok
            };
            let _ = e.print();
            return code;
        }
    };
    match &cli.command {
        Command::Check(args) => commands::check::run(args),
        Command::Build(args) => commands::build::run(args),
        Command::Inspect(args) => commands::build::inspect(args),
        Command::Run(args) => commands::run::run(args),
        Command::Cost(args) => commands::cost::run(args),
        Command::Graph(args) => commands::graph::run(args),
        Command::Migrate(args) => commands::migrate::run(args),
        Command::Query(args) => commands::query::run(args),
        Command::Gate(args) => commands::gate::run(args),
        Command::Flow(args) => commands::flow::run(args),
        Command::Guard(args) => commands::guard::run(args),
        Command::Store(args) => commands::store::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Watch(args) => commands::watch::run(args),
        Command::Report(args) => commands::report::run(args),
        Command::Init(args) => commands::init::run(args),
        Command::CompileSpeckit(args) => commands::speckit::run(args),
        Command::Schema => commands::schema::run(),
        Command::Explain(args) => commands::explain::run(args),
        Command::Models(args) => commands::models::run(args),
        Command::Ui(args) => commands::ui::run(args),
        Command::Completions(args) => commands::completions::completions(args, Cli::command()),
        Command::Man(args) => commands::completions::man(args, Cli::command()),
        Command::Lsp => commands::lsp::run(),
        Command::Mcp(args) => {
            // one thread: every tool call runs under the server's state lock anyway,
            // and a current-thread runtime saves a hand-off per message
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match runtime.map(|rt| rt.block_on(stratum_mcp::serve_stdio_with(args.config.clone())))
            {
                Ok(Ok(stratum_mcp::Ended::ClientClosed)) => Exit::Ok,
                Ok(Ok(stratum_mcp::Ended::Signal(2))) => Exit::Interrupted,
                Ok(Ok(stratum_mcp::Ended::Signal(_))) => Exit::Terminated,
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
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap's own consistency checks over every subcommand's `Args` struct
    /// (duplicate names, bad defaults, conflicting positionals).
    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
