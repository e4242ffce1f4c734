//! Repository hygiene, enforced as a test (rust-analyzer's tidy): every Rust
//! source file opens with a `//!` module doc, no test is ignored or expected to
//! panic, layering holds (the grammar crate depends on no other workspace
//! crate), and the generated documents match the code they come from:
//! `docs/diagnostics.md` (the code catalogue), `docs/events.md` (the event
//! kinds), `docs/reference/builtins.md` (the VM's builtin table) and
//! `docs/reference/stratum.schema.json` (`stratumc schema`).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if p.is_dir() {
            if !matches!(
                name.as_str(),
                "target"
                    | ".git"
                    | "snapshots"
                    | "conformance"
                    | "fixtures"
                    | "corpus"
                    | "artifacts"
            ) {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_module_has_a_doc_and_no_test_is_ignored() {
    let mut files = Vec::new();
    for krate in [
        "grammar", "compiler", "vm", "guard", "mcp", "cli", "tests", "fuzz", "lsp",
    ] {
        rust_files(&root().join(krate), &mut files);
    }
    assert!(files.len() > 20);
    let mut problems = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        if !first.starts_with("//!") && !f.ends_with("build.rs") {
            problems.push(format!(
                "{}: does not start with a `//!` module doc",
                f.display()
            ));
        }
        for bad in ["#[ignore", "#[should_panic"] {
            if text.contains(bad) && !f.ends_with("tidy.rs") {
                problems.push(format!(
                    "{}: uses {bad}]; assert the behaviour instead (see STYLE.md)",
                    f.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn vm_never_depends_on_the_front_end() {
    let manifest = std::fs::read_to_string(root().join("vm/Cargo.toml")).unwrap();
    for other in [
        "stratum-compiler",
        "stratum-grammar",
        "stratumc",
        "salsa",
        "lsp-types",
        "rmcp",
        "stratum-guard",
    ] {
        assert!(
            !manifest.contains(other),
            "vm/Cargo.toml must not depend on {other}"
        );
    }
    // tokio only for the PostgreSQL store (tokio-postgres on the store's own
    // thread), as an optional dependency of the `postgres` feature
    for line in manifest.lines().filter(|l| l.starts_with("tokio")) {
        assert!(
            line.contains("optional = true"),
            "vm/Cargo.toml may depend on tokio only optionally, for the `postgres` feature: {line}"
        );
    }
    let features = manifest
        .split_once("[features]")
        .map_or("", |(_, f)| f.split("\n[").next().unwrap_or(""));
    assert!(
        !features
            .lines()
            .any(|l| l.starts_with("default") && l.contains("postgres")),
        "the vm's `postgres` feature is not on by default (the crates that serve the store enable it)"
    );
}

#[test]
fn guard_depends_only_on_the_vm() {
    let manifest = std::fs::read_to_string(root().join("guard/Cargo.toml")).unwrap();
    for other in [
        "stratum-compiler",
        "stratum-grammar",
        "stratum-mcp",
        "stratumc",
        "rmcp",
        "tokio",
    ] {
        assert!(
            !manifest.contains(&format!("{other}.workspace"))
                && !manifest.contains(&format!("{other} =")),
            "guard/Cargo.toml must not depend on {other}"
        );
    }
}

#[test]
fn grammar_depends_on_no_workspace_crate() {
    let manifest = std::fs::read_to_string(root().join("grammar/Cargo.toml")).unwrap();
    for other in [
        "stratum-compiler",
        "stratumc",
        "stratum-vm",
        "salsa",
        "tokio",
        "rmcp",
        "lsp-types",
    ] {
        assert!(
            !manifest.contains(other),
            "grammar/Cargo.toml must not depend on {other}"
        );
    }
}

#[test]
fn lsp_depends_only_on_the_compiler() {
    let manifest = std::fs::read_to_string(root().join("lsp/Cargo.toml")).unwrap();
    // only the `[dependencies]` table: tests may use the conformance corpus
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("lsp/Cargo.toml has a [dependencies] table");
    assert!(deps.contains("stratum-compiler"));
    for other in [
        "stratum-vm",
        "stratum-grammar",
        "stratum-mcp",
        "stratumc",
        "tokio",
        "rmcp",
    ] {
        assert!(
            !deps.contains(other),
            "lsp/Cargo.toml must not depend on {other}: the language server sees only the compiler"
        );
    }
}

#[test]
fn diagnostics_doc_is_up_to_date() {
    let generated = stratum_compiler::diagnostics::codes::catalogue_markdown();
    let path = root().join("docs/diagnostics.md");
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "docs/diagnostics.md is stale: run `UPDATE_DOCS=1 cargo test -p stratum-conformance --test tidy`"
    );
}

#[test]
fn events_doc_is_up_to_date() {
    let path = root().join("docs/events.md");
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    let marker = "## Kinds\n\n";
    let head = current
        .find(marker)
        .map_or("# Audit events\n\n## Kinds\n\n".to_string(), |i| {
            current[..i + marker.len()].to_string()
        });
    let generated = format!(
        "{head}{}",
        stratum_vm::interp::EventKind::catalogue_markdown()
    );
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "docs/events.md is stale: run `UPDATE_DOCS=1 cargo test -p stratum-conformance --test tidy`"
    );
}

/// Writes `generated` to `rel` under `UPDATE_DOCS=1`, then asserts the file holds it.
fn assert_generated(rel: &str, generated: &str) {
    let path = root().join(rel);
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, generated).unwrap();
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "{rel} is stale: run `UPDATE_DOCS=1 cargo test -p stratum-conformance --test tidy`"
    );
}

/// The builtin table of the expression language, from the VM's own tables
/// (`BUILTINS` for names and arity, `BUILTIN_DOCS` for signatures,
/// `LAMBDA_FORMS` for the forms that take a lambda).
fn builtins_markdown() -> String {
    use stratum_vm::plan::op::{BUILTIN_DOCS, BUILTINS, LAMBDA_FORMS, VARIADIC, lambda_only};
    assert_eq!(
        BUILTINS.len(),
        BUILTIN_DOCS.len(),
        "every builtin in vm/src/plan/op.rs BUILTINS needs a line in BUILTIN_DOCS"
    );
    let mut out = String::from(
        "# Expression built-ins\n\n\
         <!-- Generated from vm/src/plan/op.rs (BUILTINS, BUILTIN_DOCS, LAMBDA_FORMS); \
         regenerate with `UPDATE_DOCS=1 cargo test -p stratum-conformance --test tidy`. -->\n\n\
         Every function the expression language knows, in the order of the VM's table \
         (the index is part of the plan format). Calling any other name is S0604; a wrong \
         number of arguments is S0605. How expressions are evaluated, and which bindings \
         each context has, is in [the language reference](language.md#expressions).\n\n\
         | function | arguments | lambda | signature and meaning |\n|---|---|---|---|\n",
    );
    for ((name, arity), doc) in BUILTINS.iter().zip(BUILTIN_DOCS) {
        let args = if *arity == VARIADIC {
            "1 or more".to_string()
        } else {
            arity.to_string()
        };
        let lambda = if lambda_only(name) {
            "required"
        } else if LAMBDA_FORMS.contains(name) {
            "optional"
        } else {
            ""
        };
        let doc = doc.replace('|', "\\|");
        out.push_str(&format!("| `{name}` | {args} | {lambda} | {doc} |\n"));
    }
    out
}

#[test]
fn builtins_doc_is_up_to_date() {
    assert_generated("docs/reference/builtins.md", &builtins_markdown());
}

#[test]
fn json_schema_doc_is_up_to_date() {
    let schema = stratum_compiler::schema::schema();
    let text = format!("{}\n", serde_json::to_string_pretty(&schema).unwrap());
    assert_generated("docs/reference/stratum.schema.json", &text);
}
