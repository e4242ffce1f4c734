//! The PostgreSQL store's connection: one `tokio-postgres` client driven by
//! a current-thread tokio runtime that lives on the store's own thread
//! (`super::PostgresStore` sends it jobs over a channel), so the synchronous
//! [`super::super::RunStore`] can be called from anywhere — also from inside
//! another tokio runtime (the MCP server, the UI), where blocking on a
//! runtime of one's own would panic.
//!
//! Owns: reading the store URL (a password in it is refused; the password
//! comes from `PGPASSWORD` or a `PGPASSFILE`), TLS (rustls with the webpki
//! roots, plus the certificates of `PGSSLROOTCERT`), connecting and
//! reconnecting (a lost connection is reopened before the next request; a
//! request that was cut off is an error, never a success), the statement
//! cache, transactions, the `LISTEN` side of change notifications, and how
//! a PostgreSQL error becomes a [`StoreError`] (a lost connection names the
//! host and port, never a password; a serialization failure or deadlock is
//! an i/o error saying nothing was written, never a `Conflict`).
//! Must never: print or keep a URL with a password, or report a write whose
//! `COMMIT` did not return.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, Config, Row, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::super::StoreError;

/// The channel every committed run change is announced on (payload: the run id).
pub(super) const CHANGES: &str = "stratum_changes";

/// How long a connection attempt may take when the URL does not say.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A parameter of a statement.
pub(super) type Param<'a> = &'a (dyn ToSql + Sync);

/// A store URL, read and checked: no password in it, the user and the
/// password filled in from the environment.
#[derive(Clone)]
pub(super) struct Target {
    config: Config,
    /// `host:port/db` as people see it (never a password).
    shown: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Target {
    /// Reads `url` (`postgres://user@host:port/db?sslmode=require`).
    pub(super) fn parse(url: &str) -> Result<Target, StoreError> {
        let mut config: Config = url.parse().map_err(|e| {
            StoreError::Io(format!(
                "the PostgreSQL store URL is not valid ({e}); write it as postgres://USER@HOST:PORT/DATABASE"
            ))
        })?;
        if config.get_password().is_some() {
            return Err(StoreError::Io(
                "the PostgreSQL store URL carries a password; remove it from the URL and put it in PGPASSWORD or in a PGPASSFILE (URLs are printed and logged, passwords must not be)".to_owned(),
            ));
        }
        if config.get_user().is_none() {
            let user = env("PGUSER").or_else(|| env("USER")).ok_or_else(|| {
                StoreError::Io(
                    "the PostgreSQL store URL names no user; write postgres://USER@HOST/DATABASE (or set PGUSER)".to_owned(),
                )
            })?;
            config.user(&user);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("stratumc");
        }
        let shown = shown(&config);
        if let Some(password) = password(&config)? {
            config.password(password);
        }
        Ok(Target { config, shown })
    }

    /// `host:port/db`, for messages.
    pub(super) fn shown(&self) -> &str {
        &self.shown
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn shown(config: &Config) -> String {
    use tokio_postgres::config::Host;
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = config
                .get_ports()
                .get(i)
                .or(config.get_ports().first())
                .copied()
                .unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                #[cfg(unix)]
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let hosts = if hosts.is_empty() {
        "localhost:5432".to_owned()
    } else {
        hosts.join(",")
    };
    format!(
        "{hosts}/{}",
        config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("postgres")
    )
}

/// The password: `PGPASSWORD`, else the first matching line of
/// `PGPASSFILE` (default `~/.pgpass`), in libpq's format
/// `host:port:database:user:password` with `*` wildcards.
fn password(config: &Config) -> Result<Option<String>, StoreError> {
    if let Some(p) = env("PGPASSWORD") {
        return Ok(Some(p));
    }
    let (file, explicit) = match env("PGPASSFILE") {
        Some(f) => (std::path::PathBuf::from(f), true),
        None => match env("HOME") {
            Some(h) => (Path::new(&h).join(".pgpass"), false),
            None => return Ok(None),
        },
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(StoreError::Io(format!(
                "cannot read the password file {} (PGPASSFILE): {e}",
                file.display()
            )));
        }
    };
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "localhost".to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let db = config.get_dbname().unwrap_or("").to_owned();
    let user = config.get_user().unwrap_or("").to_owned();
    Ok(passfile_lookup(&text, [&host, &port, &db, &user]))
}

/// The password of the first line of a `.pgpass` text whose four fields
/// match `want` (`*` matches anything; `\:` and `\\` are escapes).
pub(super) fn passfile_lookup(text: &str, want: [&str; 4]) -> Option<String> {
    for line in text.lines() {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_passfile_line(line);
        if fields.len() != 5 {
            continue;
        }
        if fields[..4]
            .iter()
            .zip(want)
            .all(|(f, w)| f == "*" || f == w)
        {
            return Some(fields[4].clone());
        }
    }
    None
}

fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(n), Some(f)) = (chars.next(), fields.last_mut()) {
                    f.push(n);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(f) = fields.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    fields
}

/// The TLS connector: rustls (the ring provider ureq already uses) with the
/// webpki roots and the PEM certificates of `PGSSLROOTCERT`. Used when the
/// URL's `sslmode` asks for TLS (`prefer`, the default, uses it when the
/// server offers it; `require` insists; `disable` never).
fn tls() -> Result<MakeRustlsConnect, StoreError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(file) = env("PGSSLROOTCERT") {
        let certs = CertificateDer::pem_file_iter(&file)
            .map_err(|e| StoreError::Io(format!("cannot read PGSSLROOTCERT ({file}): {e}")))?;
        for cert in certs {
            let cert = cert.map_err(|e| {
                StoreError::Io(format!(
                    "PGSSLROOTCERT ({file}) holds a bad certificate: {e}"
                ))
            })?;
            roots.add(cert).map_err(|e| {
                StoreError::Io(format!(
                    "PGSSLROOTCERT ({file}) holds a bad certificate: {e}"
                ))
            })?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| StoreError::Io(format!("cannot set up TLS: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The connection and everything that lives with it. Only the store's
/// thread has one.
pub(super) struct Db {
    rt: Runtime,
    target: Target,
    tls: MakeRustlsConnect,
    client: Client,
    /// What the connection task forwards: the payloads of notifications.
    notes: UnboundedReceiver<String>,
    listening: bool,
    statements: HashMap<&'static str, Statement>,
}

impl Db {
    /// Connects to `target`.
    pub(super) fn connect(target: Target) -> Result<Db, StoreError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Io(format!("cannot start the store's runtime: {e}")))?;
        let tls = tls()?;
        let (client, notes) = rt.block_on(open(&target, &tls))?;
        Ok(Db {
            rt,
            target,
            tls,
            client,
            notes,
            listening: false,
            statements: HashMap::new(),
        })
    }

    /// Reopens a connection that was lost (the server restarted, the network
    /// dropped): the next request runs on a new one.
    pub(super) fn ensure_open(&mut self) -> Result<(), StoreError> {
        if !self.client.is_closed() {
            return Ok(());
        }
        let (client, notes) = self.rt.block_on(open(&self.target, &self.tls))?;
        self.client = client;
        self.notes = notes;
        self.listening = false;
        self.statements.clear();
        Ok(())
    }

    fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self
            .rt
            .block_on(self.client.prepare(sql))
            .map_err(|e| self.error(e))?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }

    /// Runs a statement, keeping PostgreSQL's own error (for the callers
    /// that tell a unique violation from the rest).
    pub(super) fn execute_raw(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> Result<Result<u64, tokio_postgres::Error>, StoreError> {
        let s = self.statement(sql)?;
        Ok(self.rt.block_on(self.client.execute(&s, params)))
    }

    pub(super) fn execute(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> Result<u64, StoreError> {
        let r = self.execute_raw(sql, params)?;
        r.map_err(|e| self.error(e))
    }

    pub(super) fn query(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, StoreError> {
        let s = self.statement(sql)?;
        self.rt
            .block_on(self.client.query(&s, params))
            .map_err(|e| self.error(e))
    }

    pub(super) fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> Result<Option<Row>, StoreError> {
        let mut rows = self.query(sql, params)?;
        if rows.len() > 1 {
            return Err(StoreError::Corrupt(format!(
                "a lookup by key found {} records (a primary key is missing)",
                rows.len()
            )));
        }
        Ok(rows.pop())
    }

    /// Runs SQL text without parameters (DDL, `BEGIN`, `COMMIT`).
    pub(super) fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.rt
            .block_on(self.client.batch_execute(sql))
            .map_err(|e| self.error(e))
    }

    /// Runs `work` in one transaction (`begin` is its `BEGIN` statement):
    /// committed when it returns `Ok` and the `COMMIT` succeeds, rolled back
    /// otherwise (an `Err` of `work` changes nothing).
    pub(super) fn transaction<T>(
        &mut self,
        begin: &str,
        work: impl FnOnce(&mut Db) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.batch(begin)?;
        match work(self) {
            Ok(v) => {
                self.batch("COMMIT")?;
                Ok(v)
            }
            Err(e) => {
                // a lost connection rolls back by itself
                let _ = self.batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// A write transaction (READ COMMITTED; the writes lock the rows they
    /// decide on with `SELECT … FOR UPDATE` or an advisory lock).
    pub(super) fn write<T>(
        &mut self,
        work: impl FnOnce(&mut Db) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.transaction("BEGIN", work)
    }

    /// A read-only transaction on one snapshot (REPEATABLE READ), so that a
    /// run and its rows are read as of one moment.
    pub(super) fn read<T>(
        &mut self,
        work: impl FnOnce(&mut Db) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", work)
    }

    /// Waits up to `timeout` for a change of `run` (any run when `None`):
    /// `true` when one was announced (or may have been missed: the first
    /// wait on a connection starts listening and returns at once, so the
    /// caller reads again before relying on notifications).
    pub(super) fn wait_for_change(
        &mut self,
        run: Option<&str>,
        timeout: Duration,
    ) -> Result<bool, StoreError> {
        if !self.listening {
            self.batch(&format!("LISTEN {CHANGES}"))?;
            self.listening = true;
            return Ok(true);
        }
        let matches = |p: &str| run.is_none_or(|r| r == p);
        while let Ok(p) = self.notes.try_recv() {
            if matches(&p) {
                return Ok(true);
            }
        }
        let notes = &mut self.notes;
        let next = async {
            loop {
                match notes.recv().await {
                    Some(p) if matches(&p) => return true,
                    Some(_) => {}
                    // the connection ended: the caller's next read reconnects
                    None => return true,
                }
            }
        };
        // the timer must be made inside the runtime
        let waited = self
            .rt
            .block_on(async { tokio::time::timeout(timeout, next).await });
        Ok(waited.unwrap_or(false))
    }

    /// What a PostgreSQL error means for the caller.
    pub(super) fn error(&self, e: tokio_postgres::Error) -> StoreError {
        map_error(self.target.shown(), e)
    }
}

/// Connects and spawns the task that drives the connection and forwards
/// notifications.
async fn open(
    target: &Target,
    tls: &MakeRustlsConnect,
) -> Result<(Client, UnboundedReceiver<String>), StoreError> {
    let (client, mut connection) = target.config.connect(tls.clone()).await.map_err(|e| {
        StoreError::Io(format!(
            "cannot connect to the PostgreSQL store at {}: {} (check STRATUM_STORE or [store] url, that the server runs, and PGPASSWORD/PGPASSFILE)",
            target.shown(),
            with_causes(&e)
        ))
    })?;
    let (tx, rx) = unbounded_channel();
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    let _ = tx.send(n.payload().to_owned());
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            }
        }
    });
    Ok((client, rx))
}

/// An error with the errors that caused it (`error connecting to server:
/// Connection refused`), each said once.
fn with_causes(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

pub(super) fn map_error(shown: &str, e: tokio_postgres::Error) -> StoreError {
    let code = e.code();
    let lost =
        e.is_closed() || std::error::Error::source(&e).is_some_and(|c| c.is::<std::io::Error>());
    let e = with_causes(&e);
    if code == Some(&SqlState::T_R_SERIALIZATION_FAILURE)
        || code == Some(&SqlState::T_R_DEADLOCK_DETECTED)
    {
        return StoreError::Io(format!(
            "PostgreSQL at {shown} rolled the write back ({e}); nothing was written, try again"
        ));
    }
    if code == Some(&SqlState::DATATYPE_MISMATCH) || code == Some(&SqlState::UNDEFINED_COLUMN) {
        return StoreError::Corrupt(format!(
            "the tables at {shown} are not the shape this stratumc writes: {e}"
        ));
    }
    if lost {
        return StoreError::Io(format!(
            "lost the connection to the PostgreSQL store at {shown}: {e}; what was not acknowledged was not written"
        ));
    }
    StoreError::Io(format!("PostgreSQL store at {shown}: {e}"))
}

/// A column that does not hold what the schema writes is damage.
pub(super) fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    i: usize,
) -> Result<T, StoreError> {
    row.try_get(i)
        .map_err(|e| StoreError::Corrupt(format!("a stored value has the wrong type: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_a_password_is_refused() {
        let err = Target::parse("postgres://me:secret@db.example:5433/runs").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("PGPASSWORD"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }

    #[test]
    fn a_target_is_shown_as_host_port_and_database() {
        let t = Target::parse("postgres://me@db.example:5433/runs?sslmode=require").unwrap();
        assert_eq!(t.shown(), "db.example:5433/runs");
        let t = Target::parse("postgresql://me@db.example/runs").unwrap();
        assert_eq!(t.shown(), "db.example:5432/runs");
    }

    #[test]
    fn passfile_lines_match_by_field_with_wildcards_and_escapes() {
        let text = "# comment\nother:5432:runs:me:no\n*:5432:runs:me:pa\\:ss\n";
        assert_eq!(
            passfile_lookup(text, ["db", "5432", "runs", "me"]).as_deref(),
            Some("pa:ss")
        );
        assert_eq!(passfile_lookup(text, ["db", "5433", "runs", "me"]), None);
        assert_eq!(
            passfile_lookup(text, ["other", "5432", "runs", "me"]).as_deref(),
            Some("no")
        );
    }
}
