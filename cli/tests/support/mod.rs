//! Helpers shared by the end-to-end tests of the `stratumc` binary.
//!
//! Owns: where the repository and its examples are, running the built
//! binary with a given directory and environment, and scratch directories.
//! Must never: assert on behaviour — each test file says what it expects.

// each test crate uses a different subset of these helpers
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod mcp_client;
pub mod standins;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every example spec, sorted by path: `examples/*.stratum.yaml` and the
/// project directories' `examples/*/*.stratum.yaml` (the research pipeline).
pub fn examples() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root().join("examples")).expect("the repository has examples/") {
        let path = entry.expect("examples/ is readable").path();
        if path.is_dir() {
            let inner = std::fs::read_dir(&path).expect("an examples/ directory is readable");
            files.extend(
                inner
                    .map(|e| e.expect("an examples/ directory is readable").path())
                    .filter(|p| is_spec(p)),
            );
        } else if is_spec(&path) {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The snapshot name of an example: its file stem (`research` for
/// `examples/research-pipeline/research.stratum.yaml`).
pub fn example_name(p: &Path) -> String {
    p.file_name()
        .expect("an example path names a file")
        .to_string_lossy()
        .trim_end_matches(".stratum.yaml")
        .to_string()
}

fn is_spec(p: &Path) -> bool {
    p.is_file() && p.to_string_lossy().ends_with(".stratum.yaml")
}

/// Runs the built `stratumc ARGS` in `dir` (with `NO_COLOR`, and
/// `STRATUM_HOME` when given); returns (exit code, stdout, stderr).
pub fn stratumc_in(dir: &Path, home: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stratumc"));
    cmd.args(args).current_dir(dir).env("NO_COLOR", "1");
    if let Some(home) = home {
        cmd.env("STRATUM_HOME", home);
    }
    let out = cmd.output().expect("the built stratumc runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh, empty directory under the system temp dir, unique to this call
/// (named after `suite`, the test process, `name` and a counter).
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "stratumc-{suite}-{}-{name}-{n}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the temp dir is writable");
    dir
}

/// A finished `stratumc` process.
pub struct Ran {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Ran {
    /// Runs `cmd` to the end.
    pub fn of(cmd: &mut Command) -> Ran {
        let out = cmd.output().expect("stratumc starts");
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Exit code, stdout and stderr, for assertion messages.
    pub fn context(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// The `--format json` document (exactly one line on stdout).
    pub fn doc(&self) -> serde_json::Value {
        assert_eq!(
            self.stdout.lines().count(),
            1,
            "stdout should be one JSON line: {}",
            self.context()
        );
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.context()))
    }

    /// The run id from the first stderr line, `run: <id>` (`stratumc run`).
    pub fn run_id(&self) -> String {
        let first = self.stderr.lines().next().unwrap_or("");
        let id = first
            .strip_prefix("run: ")
            .unwrap_or_else(|| panic!("first stderr line is not `run: <id>`: {}", self.context()));
        assert!(
            id.starts_with("run-") && !id.contains(char::is_whitespace),
            "{first}"
        );
        id.to_string()
    }

    /// Asserts exit 0, status completed, and returns the output.
    pub fn completed(&self) -> serde_json::Value {
        let doc = self.doc();
        assert_eq!(
            (self.code, doc["status"].as_str()),
            (0, Some("completed")),
            "{}",
            self.context()
        );
        assert_eq!(
            doc["failure"],
            serde_json::Value::Null,
            "{}",
            self.context()
        );
        doc["output"].clone()
    }

    /// Asserts the exit code and that stderr mentions `needle`.
    pub fn fails(&self, code: i32, needle: &str) {
        assert_eq!(self.code, code, "{}", self.context());
        assert!(
            self.stderr.contains(needle),
            "{needle:?}\n{}",
            self.context()
        );
    }
}

/// A linear chain: `s0` increments `input.start`, each `s<i>` increments
/// `${s<i-1>.output.x}`; the flow output is the last step's.
pub fn chain_spec(n: usize) -> String {
    let mut s = format!(
        "version: 1\ncontracts:\n  V:\n    x: integer\nflows:\n  entry: chain\n  chain:\n    input:\n      start: integer\n    output:\n      from: \"${{s{}.output}}\"\n      contract: V\n    steps:\n",
        n - 1
    );
    for i in 0..n {
        let prev = if i == 0 {
            "${input.start}".to_string()
        } else {
            format!("${{s{}.output.x}}", i - 1)
        };
        s.push_str(&format!(
            "      - id: s{i}\n        do: \"step {i}: increment {prev}\"\n        out: V\n"
        ));
    }
    s
}

/// Debian's Chromium (or `$CHROMIUM`) for the browser tests; `None`, with a
/// note, when it is missing — a failure when `STRATUM_REQUIRE_CHROMIUM` is
/// set (CI sets it: there its absence must not pass as a skip).
pub fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("STRATUM_REQUIRE_CHROMIUM").is_none(),
        "STRATUM_REQUIRE_CHROMIUM is set but {} does not exist",
        path.display()
    );
    eprintln!("skipped: no Chromium at {}", path.display());
    None
}

/// Makes every command with STRATUM_HOME=`home` keep its runs in the
/// store at `url` (`[store] url` in the home's `stratum.toml`).
pub fn home_on_store(home: &Path, url: &str) {
    std::fs::create_dir_all(home).expect("the home is writable");
    std::fs::write(
        home.join("stratum.toml"),
        format!("[store]\nurl = \"{url}\"\n"),
    )
    .expect("the home's stratum.toml is writable");
}

/// The URL of a new, empty schema on the PostgreSQL test server
/// (`STRATUM_TEST_PG`, which `scripts/test.sh` sets), for a test that runs
/// the binary with `STRATUM_STORE` pointing at it. `None` (with a printed
/// note) when no server is configured; under `CI=true` that is a failure,
/// so CI cannot skip PostgreSQL by accident.
pub fn pg_url() -> Option<String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let Some(base) = std::env::var("STRATUM_TEST_PG")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "STRATUM_TEST_PG is unset under CI=true: scripts/test.sh starts a PostgreSQL server and sets it"
        );
        eprintln!(
            "note: STRATUM_TEST_PG is unset; skipping the PostgreSQL store (scripts/test.sh sets it)"
        );
        return None;
    };
    let schema = format!(
        "cli_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let psql = std::env::var("STRATUM_TEST_PSQL").unwrap_or_else(|_| "psql".to_owned());
    let out = Command::new(psql)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &base])
        .args(["-c", &format!("CREATE SCHEMA {schema}")])
        .output()
        .expect("run psql (install postgresql-client, or set STRATUM_TEST_PSQL)");
    assert!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sep = if base.contains('?') { '&' } else { '?' };
    Some(format!("{base}{sep}options=-csearch_path%3D{schema}"))
}
