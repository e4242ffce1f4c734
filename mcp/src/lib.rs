//! stratum-mcp: `stratumc mcp`, the Stratum front end and VM served to coding
//! agents over the Model Context Protocol (stdio).
//!
//! Owns: the MCP tool surface of LANGUAGE.md "The MCP protocol" (tool names,
//! request fields in both name styles, the validation of every request, the
//! shape of every reply), and the one engine + run store a server process
//! keeps for its whole life.
//! Must never: apply a rule of the language or of execution itself (every
//! check comes from `stratum-compiler`, every transition from
//! `stratum_vm::engine`), or write anything to stdout — stdout is the
//! protocol channel; diagnostics go to stderr.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod args;
pub mod driver;
pub mod reply;
pub mod server;
pub mod state;
pub mod tools;

pub use server::StratumServer;

/// Serves MCP over stdin/stdout until the client closes stdin.
///
/// Opens the run store (`$STRATUM_HOME/stratum.db`) once for the whole
/// process; every tool call uses that one connection.
pub async fn serve_stdio() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use rmcp::ServiceExt;
    let store = stratum_vm::store::SqliteStore::open_default()?;
    let server = StratumServer::new(stratum_vm::engine::Engine::new(Box::new(store)));
    // non-blocking pipes when the client launched us over pipes (the usual
    // case): no hand-off to tokio's blocking pool per message
    let running = server.serve(rmcp::transport::stdio_pipes()).await?;
    running.waiting().await?;
    Ok(())
}
