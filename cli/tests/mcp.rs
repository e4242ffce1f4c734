//! `stratumc mcp` end to end: runs `mcp/tests/e2e.py`, which drives the
//! binary cargo built for this test through the official Python MCP SDK
//! (a client nobody here wrote). Needs `python3` with the `mcp` package
//! (`python3 -m pip install mcp`; CI installs it).

use std::path::Path;
use std::process::Command;

#[test]
fn python_sdk_drives_every_construct() {
    let binary = env!("CARGO_BIN_EXE_stratumc");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the cli crate sits in the workspace");
    let script = root.join("mcp/tests/e2e.py");
    let probe = Command::new("python3")
        .args(["-c", "import mcp"])
        .output()
        .expect("python3 must be installed to run the MCP end-to-end tests");
    assert!(
        probe.status.success(),
        "the Python MCP SDK is missing: run `python3 -m pip install mcp` (CI installs it)\n{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let out = Command::new("python3")
        .arg(&script)
        .arg(binary)
        .current_dir(root)
        .output()
        .expect("python3 runs the e2e script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mcp/tests/e2e.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(" passed, 0 failed"),
        "unexpected e2e output:\n{stdout}"
    );
}
