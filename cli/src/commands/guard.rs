//! `stratumc guard`: the operator's side of STRAT-GUARD (issue 17).
//! `history RESOURCE [--format json]`, `verify RESOURCE|--all` (re-walks
//! each ledger's hash chain; exit 1 naming the first broken link),
//! `authorize` (reads a request as JSON on stdin and prints the exact
//! payload to sign, with the resource's current ledger head) and
//! `descriptors` (the trust root it reads, the installed upgrade
//! descriptors, their signers and verification; grants nothing).
//!
//! Exit codes: 0 ok, 1 a broken ledger (`verify`), 2 usage, unknown
//! resource or store error.
//! Must never: apply an upgrade descriptor (MCP only: a CLI process inherits
//! its caller's environment, which could point it at a descriptor file of
//! the caller's own), change a resource, or create a store.

use std::path::Path;

use clap::Subcommand;
use serde_json::json;
use stratum_guard::service::AuthorizeRequest;
use stratum_guard::{ConfigHosts, Guard, GuardError, authz, descriptors};
use stratum_vm::store::StoreLocation;

use crate::{Exit, Format};

/// Arguments of `stratumc guard`.
#[derive(clap::Args, Debug)]
pub struct GuardArgs {
    #[command(subcommand)]
    pub what: Cmd,
}

/// Guard operations.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// A resource's current state and its ledger (exit 2: unknown resource or a broken ledger).
    History {
        /// The resource id.
        resource: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Re-walk ledgers' hash chains (exit 0: intact; 1: a link is broken, named; 2: unknown resource).
    Verify {
        /// The resource id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        resource: Option<String>,
        /// Every registered resource.
        #[arg(long)]
        all: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Print the exact payload to sign for an override or a migration; reads {"kind": "override"|"migrate", ...} on stdin.
    Authorize,
    /// The trust root read, the installed upgrade descriptors ($STRATUM_GUARD_UPGRADE_DESCRIPTORS), their signers and verification (grants nothing).
    Descriptors {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
}

/// Runs `stratumc guard`.
pub fn run(args: &GuardArgs) -> Exit {
    match &args.what {
        Cmd::History { resource, format } => with_store(|g| history(g, resource, *format)),
        Cmd::Verify {
            resource,
            all,
            format,
        } => with_store(|g| verify(g, resource.as_deref().filter(|_| !all), *format)),
        Cmd::Authorize => authorize(),
        Cmd::Descriptors { format } => descriptors_cmd(*format),
    }
}

fn with_store(op: impl FnOnce(&mut Guard<'_>) -> Exit) -> Exit {
    let mut store = match StoreLocation::from_env().and_then(|l| l.open_existing()) {
        Ok(s) => s,
        Err(e) => return super::usage(e),
    };
    let hosts = ConfigHosts { operator: None };
    let mut guard = Guard {
        store: store.as_mut(),
        hosts: &hosts,
        now_ms: stratum_guard::now_ms(),
    };
    op(&mut guard)
}

fn refused(e: &GuardError) -> Exit {
    super::usage(format!("{} ({})", e, e.code()))
}

fn history(g: &mut Guard<'_>, resource: &str, format: Format) -> Exit {
    let h = match g.history(resource) {
        Ok(h) => h,
        Err(e) => return refused(&e),
    };
    let text = match format {
        Format::Json => format!("{}\n", serde_json::to_value(&h).unwrap_or_default()),
        Format::Human => {
            let mut out = format!(
                "{}: {} (graph version {}, policy {})\n",
                h.resource_id, h.current_state, h.graph_version, h.checksum
            );
            for e in &h.ledger {
                let edge = match (&e.from_state, &e.to_state) {
                    (Some(f), Some(t)) => format!(" {f} -> {t}"),
                    (None, Some(t)) => format!(" -> {t}"),
                    _ => String::new(),
                };
                let why = e
                    .refusal
                    .as_ref()
                    .map(|r| format!(" [{}: {}]", r.code, r.message))
                    .unwrap_or_default();
                let by = e
                    .authorized_by
                    .as_ref()
                    .map(|s| format!(" signed by {} ({})", s.principal, s.fingerprint))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "{:>4}  {:?} {:?}{edge} by {}{why}{by}  {}\n",
                    e.seq, e.kind, e.status, e.resolved_by, e.hash
                ));
            }
            out
        }
    };
    super::emit(&text);
    Exit::Ok
}

fn verify(g: &mut Guard<'_>, resource: Option<&str>, format: Format) -> Exit {
    let results = match resource {
        Some(r) => g.verify(r).map(|v| vec![v]),
        None => g.verify_all(),
    };
    let results = match results {
        Ok(r) => r,
        Err(e) => return refused(&e),
    };
    let text = match format {
        Format::Json => format!(
            "{}\n",
            json!({"version": 1, "resources": results, "ok": results.iter().all(|r| r.ok)})
        ),
        Format::Human => {
            let mut out = String::new();
            for r in &results {
                match (&r.broken_at, &r.problem) {
                    (Some(at), Some(p)) => out.push_str(&format!(
                        "{}: BROKEN at entry {at} of {}: {p}\n",
                        r.resource_id, r.entries
                    )),
                    _ => out.push_str(&format!("{}: ok ({} entries)\n", r.resource_id, r.entries)),
                }
            }
            if results.is_empty() {
                out.push_str("no guarded resources\n");
            }
            out
        }
    };
    super::emit(&text);
    if results.iter().all(|r| r.ok) {
        Exit::Ok
    } else {
        Exit::Errors
    }
}

fn authorize() -> Exit {
    let text = match crate::input::read_text(Path::new("/dev/stdin"), crate::input::Kind::Inputs) {
        Ok(t) => t,
        Err(e) => return super::usage(e),
    };
    let req: AuthorizeRequest = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => {
            return super::usage(format!(
                "stdin is not an authorization request ({e}); send {{\"kind\": \"override\", \"resource_id\", \"from_state\", \"to_state\", \"rationale\"}} or {{\"kind\": \"migrate\", \"resource_id\", \"rationale\", \"new_graph\", ...}}"
            ));
        }
    };
    with_store(|g| {
        let payload = g.authorize(&req);
        match payload {
            Ok((p, namespace)) => {
                // the exact bytes to sign: no newline after them
                super::emit(&p);
                eprintln!(
                    "sign these bytes (save stdout to a file): ssh-keygen -Y sign -f <key> -n {namespace} <file>"
                );
                Exit::Ok
            }
            Err(e) => refused(&e),
        }
    })
}

fn descriptors_cmd(format: Format) -> Exit {
    let path = authz::trust_root_path();
    let trust = match authz::load_trust_root() {
        Ok(t) => t,
        Err(e) => return super::usage(e),
    };
    let files = descriptors::paths(std::env::var(descriptors::ENV).ok().as_deref());
    let shown = descriptors::inspect(&files, &trust);
    let root = path.as_ref().map(|p| p.display().to_string());
    let text = match format {
        Format::Json => format!(
            "{}\n",
            json!({
                "version": 1,
                "trust_root": root,
                "trusted_keys": trust.signers.iter().map(|s| json!({
                    "principals": s.principals,
                    "fingerprint": s.key.fingerprint(Default::default()).to_string(),
                })).collect::<Vec<_>>(),
                "descriptors": shown,
            })
        ),
        Format::Human => {
            let mut out = match &root {
                Some(r) => format!("trust root: {r} ({} keys)\n", trust.signers.len()),
                None => format!(
                    "trust root: none (looked for <bin>/{} and {}); signed operations are unavailable\n",
                    authz::BESIDE_BINARY,
                    authz::SYSTEM_TRUST_ROOT
                ),
            };
            if files.is_empty() {
                out.push_str(&format!(
                    "no descriptor files ({} is unset)\n",
                    descriptors::ENV
                ));
            }
            for f in &shown {
                match (&f.signer, &f.error) {
                    (Some(s), _) => out.push_str(&format!(
                        "{}: verified, signed by {} ({})\n",
                        f.path, s.principal, s.fingerprint
                    )),
                    (_, Some(e)) => out.push_str(&format!("{}: NOT verified: {e}\n", f.path)),
                    _ => {}
                }
                for d in &f.descriptors {
                    out.push_str(&format!(
                        "  {}: from {} — {}\n",
                        d.id, d.from_checksum, d.rationale
                    ));
                }
            }
            out
        }
    };
    super::emit(&text);
    Exit::Ok
}
