//! stratum-mcp: `stratumc mcp`, the Stratum front end and VM served to coding
//! agents over the Model Context Protocol (stdio).
//!
//! Owns: the MCP tool surface of LANGUAGE.md "The MCP protocol" (tool names,
//! request fields in both name styles, the validation of every request, the
//! shape of every reply), the one engine + run store a server process
//! keeps for its whole life, and the stdio transport (FIFOs, Unix sockets,
//! or blocking stdio, whichever the client gave the process) behind our own
//! framing (`framing`, `transport`: every bad line gets a JSON-RPC error).
//! Must never: apply a rule of the language or of execution itself (every
//! check comes from `stratum-compiler`, every transition from
//! `stratum_vm::engine`), or write anything to stdout — stdout is the
//! protocol channel; diagnostics go to stderr.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod agent_runs;
pub mod args;
pub mod checks;
pub mod driver;
pub mod framing;
pub mod reply;
pub mod server;
pub mod state;
pub mod stops;
pub mod tools;
pub mod transport;

pub use server::StratumServer;

/// Why serving ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The client closed stdin.
    ClientClosed,
    /// SIGINT or SIGTERM (the signal number) asked the server to stop.
    Signal(i32),
}

/// Serves MCP over stdin/stdout until the client closes stdin or SIGINT /
/// SIGTERM arrives, then stops the engine workers (killing the agent
/// commands they run, reporting nothing for them: the runs stay resumable)
/// and returns why it ended.
///
/// Opens the run store (`stratum_vm::store::open_default`: `STRATUM_STORE`,
/// `[store] url`, else `$STRATUM_HOME/stratum.db`) once for the whole
/// process; every tool call uses that one connection.
pub async fn serve_stdio() -> Result<Ended, Box<dyn std::error::Error + Send + Sync>> {
    serve_stdio_with(None).await
}

/// [`serve_stdio`] with the operator's configuration `config` (`--config
/// FILE`; `None`: `$STRATUM_HOME/stratum.toml` when it exists), which is
/// read and checked before serving and again for every run it plans.
pub async fn serve_stdio_with(
    config: Option<std::path::PathBuf>,
) -> Result<Ended, Box<dyn std::error::Error + Send + Sync>> {
    stratum_vm::config::load_operator(config.as_deref())?;
    let store = stratum_vm::store::open_default()?;
    let engine = stratum_vm::engine::Engine::new(store);
    let server = StratumServer::with_state(state::State::with_operator_config(engine, config));
    #[cfg(unix)]
    if let Some(io) = socket_stdio() {
        return serve(server, io).await;
    }
    // non-blocking pipes when the client launched us over pipes (the usual
    // case for Python and Rust clients): no hand-off to tokio's blocking pool
    // per message; anything else falls back to rmcp's blocking stdio
    serve(server, rmcp::transport::stdio_pipes()).await
}

async fn serve<R, W>(
    server: StratumServer,
    io: (R, W),
) -> Result<Ended, Box<dyn std::error::Error + Send + Sync>>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    use rmcp::ServiceExt;
    let session = server.clone();
    let stop = stop_signal()?;
    let running = server
        .serve(transport::LineTransport::new(io.0, io.1))
        .await;
    let ended = match running {
        Ok(running) => {
            tokio::select! {
                done = running.waiting() => done.map(|_| Ended::ClientClosed).map_err(Into::into),
                signal = stop => Ok(Ended::Signal(signal)),
            }
        }
        Err(e) => Err(e.into()),
    };
    // the client is gone or a signal came: kill what this session started
    session.shutdown();
    ended
}

/// A future that yields the number of the first SIGINT or SIGTERM.
#[cfg(unix)]
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = i32>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => 2,
            _ = term.recv() => 15,
        }
    })
}

/// Elsewhere only the client closing stdin ends serving.
#[cfg(not(unix))]
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = i32>> {
    Ok(std::future::pending())
}

/// Stdin and stdout as non-blocking Unix stream sockets, when the client
/// launched us with a socket pair for each: clients built on libuv do
/// (Node.js hosts, Python on uvloop). rmcp's `stdio_pipes` takes FIFOs only
/// and would run every read and write of a socket on tokio's blocking pool.
///
/// The descriptors are duplicates of fd 0 and 1, but a socket cannot be
/// reopened, so `O_NONBLOCK` is set on the open socket that fd 0 and 1 share:
/// harmless here, since nothing else in the process touches them and every
/// command the server starts gets its own pipes or `/dev/null` for the
/// streams it uses.
#[cfg(unix)]
fn socket_stdio() -> Option<(tokio::net::UnixStream, tokio::net::UnixStream)> {
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::fs::FileTypeExt;
    use std::os::unix::net::UnixStream;

    fn unix_socket(fd: OwnedFd) -> Option<UnixStream> {
        let is_socket = fd
            .try_clone()
            .map(std::fs::File::from)
            .and_then(|f| f.metadata())
            .is_ok_and(|m| m.file_type().is_socket());
        let stream = UnixStream::from(fd);
        // an AF_UNIX socket (local_addr fails on any other family)
        (is_socket && stream.local_addr().is_ok()).then_some(stream)
    }
    fn nonblocking(stream: UnixStream) -> Option<tokio::net::UnixStream> {
        stream.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(stream).ok()
    }
    // both are checked before either is made non-blocking: a half-socket
    // stdio goes to the fallback untouched
    let input = unix_socket(std::io::stdin().as_fd().try_clone_to_owned().ok()?)?;
    let output = unix_socket(std::io::stdout().as_fd().try_clone_to_owned().ok()?)?;
    Some((nonblocking(input)?, nonblocking(output)?))
}
