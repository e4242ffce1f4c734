//! Helpers shared by the end-to-end tests of the `stratumc` binary.
//!
//! Owns: where the repository and its examples are, running the built
//! binary with a given directory and environment, and scratch directories.
//! Must never: assert on behaviour — each test file says what it expects.

// each test crate uses a different subset of these helpers
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `examples/*.stratum.yaml`, sorted.
pub fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .expect("the repository has examples/")
        .map(|e| e.expect("examples/ is readable").path())
        .filter(|p| p.to_string_lossy().ends_with(".stratum.yaml"))
        .collect();
    files.sort();
    files
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

/// A fresh, empty directory under the system temp dir, unique to this test
/// process, `suite` and `name`.
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stratumc-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the temp dir is writable");
    dir
}
