//! Where the run store is: the one rule that every command, the MCP server
//! and the UI follow to choose it ([`StoreLocation::from_env`],
//! [`open_default`]).
//!
//! In order: the location a host that embeds the toolchain chose for the
//! process ([`set_location`]: the Python package's `store=` URL), else
//! `STRATUM_STORE` (`postgres://USER@HOST:PORT/DB`, or `sqlite:PATH`), else `[store] url` in the operator's `stratum.toml`
//! (`$STRATUM_HOME/stratum.toml`), else the SQLite store at
//! `$STRATUM_HOME/stratum.db`. A PostgreSQL URL never carries a password
//! (refused: the password comes from `PGPASSWORD` or a `PGPASSFILE`), so a
//! location can always be shown as it is.
//!
//! Owns: [`StoreLocation`], reading it, showing it, opening it.
//! Must never: read a workspace's `stratum.toml` (a workspace does not
//! choose where runs are kept), or show a password.

use std::path::PathBuf;
use std::sync::RwLock;

use super::{Durability, RunStore, SqliteStore, StoreError, default_home};

/// The environment variable that names the store.
pub const STORE_ENV: &str = "STRATUM_STORE";

/// The location [`set_location`] chose, if any.
static CHOSEN: RwLock<Option<StoreLocation>> = RwLock::new(None);

/// Chooses the store for the whole process instead of `STRATUM_STORE` and
/// `[store] url` (`None`: back to them), and returns the choice it
/// replaces. For a host that embeds the toolchain (the Python package's
/// `store=` URL); the command line never sets it.
pub fn set_location(location: Option<StoreLocation>) -> Option<StoreLocation> {
    let mut chosen = CHOSEN
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    std::mem::replace(&mut *chosen, location)
}

/// Whether `text` is written as a store URL (`postgres://`,
/// `postgresql://`, `sqlite:`) rather than a directory.
pub fn is_store_url(text: &str) -> bool {
    let text = text.trim();
    ["postgres://", "postgresql://", "sqlite:"]
        .iter()
        .any(|p| text.starts_with(p))
}

/// Where a run store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The SQLite database file at this path.
    Sqlite(PathBuf),
    /// The PostgreSQL database of this URL (it carries no password).
    Postgres(String),
}

impl StoreLocation {
    /// Reads a location as `STRATUM_STORE` or `[store] url` give it
    /// (`from`: where it was read, for the message).
    pub fn parse(text: &str, from: &str) -> Result<StoreLocation, StoreError> {
        let text = text.trim();
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            if has_password(text) {
                return Err(StoreError::Io(format!(
                    "{from}: the PostgreSQL URL carries a password; remove it from the URL and put it in PGPASSWORD or in a PGPASSFILE (URLs are shown in messages, passwords must not be)"
                )));
            }
            return Ok(StoreLocation::Postgres(text.to_owned()));
        }
        if let Some(path) = text.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(StoreError::Io(format!(
                    "{from}: `sqlite:` names no file; write sqlite:/path/to/stratum.db"
                )));
            }
            return Ok(StoreLocation::Sqlite(PathBuf::from(path)));
        }
        Err(StoreError::Io(format!(
            "{from} is `{}`, which is not a store: write postgres://USER@HOST:PORT/DATABASE (or sqlite:PATH; leave it unset for $STRATUM_HOME/stratum.db)",
            shorten(text)
        )))
    }

    /// The location the environment and the operator's `stratum.toml` name
    /// (see the module docs).
    pub fn from_env() -> Result<StoreLocation, StoreError> {
        let chosen = CHOSEN
            .read()
            .map_or_else(|e| e.into_inner().clone(), |c| c.clone());
        if let Some(location) = chosen {
            return Ok(location);
        }
        if let Some(v) = std::env::var(STORE_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            return StoreLocation::parse(&v, STORE_ENV);
        }
        match crate::config::load_operator(None) {
            Ok(Some((path, config))) => {
                if let Some(url) = config.store.as_ref().map(|s| s.url.as_str()) {
                    let from = format!("[store] url in {}", path.display());
                    return StoreLocation::parse(url, &from);
                }
            }
            Ok(None) => {}
            Err(e) => {
                return Err(StoreError::Io(format!(
                    "cannot read the operator's configuration to find the run store: {e}"
                )));
            }
        }
        Ok(StoreLocation::Sqlite(default_home()?.join("stratum.db")))
    }

    /// Opens (creating if needed) the store. SQLite commits with the
    /// durability `STRATUM_SYNC` asks for.
    pub fn open(&self) -> Result<Box<dyn RunStore>, StoreError> {
        match self {
            StoreLocation::Sqlite(path) => {
                let durability =
                    Durability::from_env(std::env::var("STRATUM_SYNC").ok().as_deref())?;
                Ok(Box::new(SqliteStore::open_with(path, durability)?))
            }
            StoreLocation::Postgres(url) => open_postgres(url),
        }
    }

    /// Opens the store only if it exists (a SQLite file must be there; a
    /// PostgreSQL database is opened, its tables created if missing).
    pub fn open_existing(&self) -> Result<Box<dyn RunStore>, StoreError> {
        match self {
            StoreLocation::Sqlite(path) => Ok(Box::new(SqliteStore::open_existing(path)?)),
            StoreLocation::Postgres(url) => open_postgres(url),
        }
    }

    /// The location as people read it: the file's path, or the URL (which
    /// never carries a password).
    pub fn shown(&self) -> String {
        match self {
            StoreLocation::Sqlite(path) => path.display().to_string(),
            StoreLocation::Postgres(url) => url.clone(),
        }
    }
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

#[cfg(feature = "postgres")]
fn open_postgres(url: &str) -> Result<Box<dyn RunStore>, StoreError> {
    Ok(Box::new(super::PostgresStore::open(url)?))
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(_url: &str) -> Result<Box<dyn RunStore>, StoreError> {
    Err(StoreError::Io(
        "this stratumc was built without PostgreSQL support (the `postgres` feature of stratum-vm); use a build with it, or unset STRATUM_STORE"
            .to_owned(),
    ))
}

/// Opens the store [`StoreLocation::from_env`] names.
pub fn open_default() -> Result<Box<dyn RunStore>, StoreError> {
    StoreLocation::from_env()?.open()
}

/// Whether a `postgres://` URL has a password in its user-info part
/// (`user:password@`) or in a `password=` query parameter.
fn has_password(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let in_userinfo = authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'));
    let in_query = url.split_once('?').is_some_and(|(_, q)| {
        q.split('&')
            .any(|kv| kv.split('=').next().is_some_and(|k| k == "password"))
    });
    in_userinfo || in_query
}

/// At most 60 characters of a value, for a message.
fn shorten(text: &str) -> String {
    if text.chars().count() <= 60 {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(60).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_and_sqlite_locations_are_read() {
        assert_eq!(
            StoreLocation::parse("postgres://me@db:5432/runs", "X").unwrap(),
            StoreLocation::Postgres("postgres://me@db:5432/runs".into())
        );
        assert_eq!(
            StoreLocation::parse("sqlite:/tmp/s.db", "X").unwrap(),
            StoreLocation::Sqlite("/tmp/s.db".into())
        );
        let err = StoreLocation::parse("mysql://x", "STRATUM_STORE").unwrap_err();
        assert!(err.to_string().contains("STRATUM_STORE"), "{err}");
    }

    #[test]
    fn a_password_in_the_url_is_refused_without_showing_it() {
        for url in [
            "postgres://me:hunter2@db/runs",
            "postgresql://me@db/runs?sslmode=require&password=hunter2",
        ] {
            let err = StoreLocation::parse(url, "STRATUM_STORE").unwrap_err();
            let text = err.to_string();
            assert!(text.contains("PGPASSWORD"), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
        }
        assert!(!has_password("postgres://me@db:5432/runs?sslmode=require"));
        assert!(!has_password("postgres://db/runs"));
    }

    #[test]
    fn urls_are_told_from_directories() {
        assert!(is_store_url("postgres://me@db/runs"));
        assert!(is_store_url(" sqlite:/tmp/s.db"));
        assert!(!is_store_url("/home/me/.stratum"));
        assert!(!is_store_url("postgres"));
    }
}
