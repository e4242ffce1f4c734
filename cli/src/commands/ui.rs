//! `stratumc ui [--listen ADDR]`: the operator UI in the browser, over the
//! run store of `$STRATUM_HOME` (see `stratum-ui`).
//!
//! Owns: the listen address and its rule (loopback by default; any other
//! address needs a token: `STRATUM_UI_TOKEN`, else a fresh random one), the
//! announcement line (`ui: http://ADDR/` — with `?token=…` when there is a
//! token — on stdout, so a script can read the port of `--listen
//! 127.0.0.1:0`), and running the server until a signal.
//! Must never: serve anything itself; the routes and rules are the UI
//! crate's.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use stratum_ui::security::Guard;
use stratum_ui::{OpenStore, Ui};
use stratum_vm::store::StoreLocation;

use crate::Exit;

/// Arguments of `stratumc ui`.
#[derive(clap::Args, Debug)]
pub struct UiArgs {
    /// The address to serve on. A loopback address (the default) serves this machine's browser only; any other address requires a token on every request (`STRATUM_UI_TOKEN`, else a random one printed at start). Port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:7878", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
}

/// A token: `STRATUM_UI_TOKEN` when set, else 16 random bytes as hex.
fn token() -> Result<String, String> {
    if let Ok(t) = std::env::var("STRATUM_UI_TOKEN") {
        let t = t.trim().to_string();
        if t.len() < 16
            || !t
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(
                "STRATUM_UI_TOKEN must be at least 16 characters of letters, digits, `-` and `_`"
                    .into(),
            );
        }
        return Ok(t);
    }
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom for a token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Runs the command.
pub fn run(args: &UiArgs) -> Exit {
    let loopback = args.listen.ip().is_loopback();
    let token = match (loopback, std::env::var_os("STRATUM_UI_TOKEN").is_some()) {
        (true, false) => None,
        _ => match token() {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("error: {e}");
                return Exit::Usage;
            }
        },
    };
    // the store must open now: a wrong STRATUM_HOME is an error at start, not per page
    let location = match StoreLocation::from_env() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    if let Err(e) = location.open() {
        eprintln!("error: {e}");
        return Exit::Usage;
    }
    let store_shown = location.shown();
    let open: OpenStore = Arc::new(move || location.open());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: ui: {e}");
            return Exit::Usage;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot listen on {}: {e}", args.listen);
                return Exit::Usage;
            }
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => {
                eprintln!("error: ui: {e}");
                return Exit::Usage;
            }
        };
        let guard = match (loopback, &token) {
            (true, t) => Guard::loopback(addr.port(), t.clone()),
            (false, Some(t)) => Guard::token(t.clone()),
            (false, None) => unreachable!("invariant: a non-loopback address always gets a token"),
        };
        let shown = match &token {
            Some(t) => format!("http://{addr}/?token={t}"),
            None => format!("http://{addr}/"),
        };
        println!("ui: {shown}");
        let _ = std::io::stdout().flush();
        eprintln!("serving the run store at {store_shown}; stop with Ctrl-C");
        let server = stratum_ui::serve(listener, Ui::new(open, guard));
        tokio::select! {
            r = server => match r {
                Ok(()) => Exit::Ok,
                Err(e) => {
                    eprintln!("error: ui: {e}");
                    Exit::Usage
                }
            },
            _ = tokio::signal::ctrl_c() => Exit::Ok,
        }
    })
}
