//! The guard operations on real stores, real git repositories, real
//! commands and real `ssh-keygen` signatures (no binary: `cli/tests/guard.rs`
//! drives the built `stratumc`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use stratum_guard::authz::{self, TrustRoot};
use stratum_guard::service::{NewPolicy, TransitionRequest};
use stratum_guard::{ConfigHosts, Guard, GuardError, policy};
use stratum_vm::store::{GuardStore, MemoryStore, SqliteStore};

const HOSTS: ConfigHosts = ConfigHosts { operator: None };

fn guard(store: &mut dyn GuardStore) -> Guard<'_> {
    Guard {
        store,
        hosts: &HOSTS,
        now_ms: 1,
    }
}

/// A git repository with one commit and a stratum.toml declaring `make test`-like commands.
fn workspace() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(
        root.join("stratum.toml"),
        "[commands.ok]\nargv = [\"true\"]\n[commands.no]\nargv = [\"false\"]\n[commands.slow]\nargv = [\"sleep\", \"1\"]\n",
    )
    .unwrap();
    std::fs::write(root.join("README.md"), "hi\n").unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    git(&["init", "-q"]);
    git(&["add", "README.md"]);
    git(&["commit", "-q", "-m", "first"]);
    let sha = git(&["rev-parse", "HEAD"]);
    (dir, sha)
}

fn tracker(root: &Path, sha: &str) -> Value {
    json!({
        "graph": {"planned": ["in_progress"], "in_progress": ["review"], "review": ["done", "in_progress"]},
        "edge_predicates": {
            "planned->in_progress": [{"id": "readme", "type": "deterministic", "statement": "server_file_exists('README.md')"}],
            "in_progress->review": [{"id": "commit", "type": "deterministic", "statement": format!("git_commit_exists('{sha}')")}],
            "review->done": [{"id": "tests", "type": "deterministic", "statement": "command_exit_zero(['true'])"}]
        },
        "initial": "planned",
        "terminal": ["done"],
        "stakes": {"review->done": "paranoid"},
        "workspace_root": root.display().to_string()
    })
}

fn input(v: Value) -> policy::PolicyInput {
    policy::from_value(v).unwrap()
}

fn step(
    g: &mut Guard<'_>,
    from: &str,
    to: &str,
    key: Option<&str>,
) -> stratum_guard::service::Transitioned {
    g.transition(&TransitionRequest {
        resource_id: "feat:1".into(),
        from_state: from.into(),
        to_state: to.into(),
        idempotency_key: key.map(str::to_owned),
        resolved_by: "agent".into(),
        ..TransitionRequest::default()
    })
    .unwrap()
}

#[test]
fn register_is_idempotent_and_a_different_policy_is_refused() {
    let (ws, sha) = workspace();
    let mut store = MemoryStore::new();
    let mut g = guard(&mut store);
    let a = g
        .register("feat:1", &input(tracker(ws.path(), &sha)))
        .unwrap();
    assert_eq!(
        (a.status, a.current_state.as_str()),
        ("registered", "planned")
    );
    let b = g
        .register("feat:1", &input(tracker(ws.path(), &sha)))
        .unwrap();
    assert_eq!(
        (b.status, &b.guard_id, &b.checksum),
        ("unchanged", &a.guard_id, &a.checksum)
    );
    let mut other = tracker(ws.path(), &sha);
    other["stakes"]["planned->in_progress"] = json!("cheap");
    let e = g.register("feat:1", &input(other)).unwrap_err();
    assert_eq!(e.code(), "policy_exists");
    assert!(e.to_string().contains("stratum_guard_upgrade") && e.to_string().contains("migrate"));
    assert_eq!(g.history("feat:1").unwrap().ledger.len(), 1);
    // an undeclared argv is refused at registration
    let mut bad = tracker(ws.path(), &sha);
    bad["edge_predicates"]["review->done"][0]["statement"] =
        json!("command_exit_zero(['rm', '-rf', '/'])");
    let e = g.register("feat:2", &input(bad)).unwrap_err();
    assert_eq!(e.code(), "undeclared_command");
    let mut bad = tracker(ws.path(), &sha);
    bad["workspace_root"] = json!("/no/such/dir");
    assert!(
        g.register("feat:3", &input(bad))
            .unwrap_err()
            .to_string()
            .contains("not a directory")
    );
}

#[test]
fn each_builtin_true_and_false_and_every_attempt_is_in_the_ledger() {
    let (ws, sha) = workspace();
    let mut store = MemoryStore::new();
    let mut g = guard(&mut store);
    let mut p = tracker(ws.path(), &sha);
    p["edge_predicates"]["review->in_progress"] = json!([{"id": "r", "type": "deterministic", "statement": "verdict_receipt_clean('sha256:nope')"}]);
    g.register("feat:1", &input(p)).unwrap();
    // illegal edge and wrong state are refused without evaluation
    let r = step(&mut g, "planned", "done", None);
    assert_eq!(
        (r.status, r.refusal.unwrap().code.as_str()),
        ("refused", "illegal_edge")
    );
    let r = step(&mut g, "in_progress", "review", None);
    assert_eq!(
        (r.status, r.refusal.unwrap().code.as_str()),
        ("refused", "wrong_state")
    );
    // server_file_exists false, then true
    std::fs::rename(ws.path().join("README.md"), ws.path().join("gone.md")).unwrap();
    let r = step(&mut g, "planned", "in_progress", None);
    assert_eq!(r.status, "refused");
    assert!(!r.verdict.unwrap().predicates[0].met);
    std::fs::rename(ws.path().join("gone.md"), ws.path().join("README.md")).unwrap();
    let first = step(&mut g, "planned", "in_progress", None);
    assert_eq!(
        (first.status, first.current_state.as_str()),
        ("applied", "in_progress")
    );
    // git_commit_exists: the real commit
    let r = step(&mut g, "in_progress", "review", None);
    assert_eq!(r.status, "applied", "{r:?}");
    // verdict_receipt_clean of an unknown ref is false
    let r = step(&mut g, "review", "in_progress", None);
    assert_eq!(r.status, "refused");
    // command_exit_zero(['true'])
    let r = step(&mut g, "review", "done", None);
    assert_eq!((r.status, r.current_state.as_str()), ("applied", "done"));
    let h = g.history("feat:1").unwrap();
    assert_eq!(h.ledger.len(), 8);
    assert_eq!(h.current_state, "done");
    assert!(g.verify("feat:1").unwrap().ok);

    // a second resource: a missing commit and a failing command, and a clean receipt
    let mut q = tracker(ws.path(), "0123456789abcdef0123456789abcdef01234567");
    q["edge_predicates"]["review->done"][0]["statement"] = json!("command_exit_zero(['false'])");
    q["edge_predicates"]["planned->in_progress"] = json!([{"id": "r", "type": "deterministic", "statement": format!("verdict_receipt_clean('{}')", first.ledger_ref)}]);
    g.register("feat:2", &input(q)).unwrap();
    let t = |g: &mut Guard<'_>, from: &str, to: &str| {
        g.transition(&TransitionRequest {
            resource_id: "feat:2".into(),
            from_state: from.into(),
            to_state: to.into(),
            resolved_by: "agent".into(),
            ..TransitionRequest::default()
        })
        .unwrap()
    };
    assert_eq!(t(&mut g, "planned", "in_progress").status, "applied");
    let r = t(&mut g, "in_progress", "review");
    assert_eq!(r.status, "refused");
    assert!(matches!(
        r.verdict.unwrap().predicates[0].evidence,
        stratum_guard::evidence::Evidence::Commit { exists: false, .. }
    ));
}

#[test]
fn an_idempotency_key_replays_and_refuses_another_edge() {
    let (ws, sha) = workspace();
    let mut store = MemoryStore::new();
    let mut g = guard(&mut store);
    g.register("feat:1", &input(tracker(ws.path(), &sha)))
        .unwrap();
    let a = step(&mut g, "planned", "in_progress", Some("k1"));
    let b = step(&mut g, "planned", "in_progress", Some("k1"));
    assert_eq!((a.status, b.status), ("applied", "replayed"));
    assert_eq!(a.ledger_ref, b.ledger_ref);
    assert_eq!(g.history("feat:1").unwrap().ledger.len(), 2);
    let e = g
        .transition(&TransitionRequest {
            resource_id: "feat:1".into(),
            from_state: "in_progress".into(),
            to_state: "review".into(),
            idempotency_key: Some("k1".into()),
            resolved_by: "agent".into(),
            ..TransitionRequest::default()
        })
        .unwrap_err();
    assert_eq!(e.code(), "idempotency_conflict");
}

#[test]
fn two_racing_transitions_on_one_sqlite_store_one_applies_one_is_stale() {
    let (ws, sha) = workspace();
    let db = ws.path().join("guard.db");
    let mut p = tracker(ws.path(), &sha);
    p["edge_predicates"]["planned->in_progress"] = json!([{"id": "slow", "type": "deterministic", "statement": "command_exit_zero(['sleep', '1'])"}]);
    {
        let mut s = SqliteStore::open(&db).unwrap();
        guard(&mut s).register("feat:1", &input(p)).unwrap();
    }
    let racers: Vec<_> = (0..2)
        .map(|_| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut s = SqliteStore::open(&db).unwrap();
                let mut g = guard(&mut s);
                step(&mut g, "planned", "in_progress", None)
            })
        })
        .collect();
    let mut results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    results.sort_by_key(|r| r.status);
    assert_eq!(results[0].status, "applied", "{results:?}");
    assert_eq!(results[1].status, "refused", "{results:?}");
    let code = results[1].refusal.as_ref().unwrap().code.clone();
    assert!(code == "stale" || code == "wrong_state", "{code}");
    let mut s = SqliteStore::open(&db).unwrap();
    let g = guard(&mut s);
    let h = g.history("feat:1").unwrap();
    assert_eq!(
        (h.current_state.as_str(), h.ledger.len()),
        ("in_progress", 3)
    );
    assert!(g.verify("feat:1").unwrap().ok);
}

fn upgrade_base(root: &Path) -> Value {
    json!({
        "graph": {"a": ["b"], "b": ["z"]},
        "edge_predicates": {"a->b": [{"id": "f", "type": "deterministic", "statement": "server_file_exists('README.md')"}]},
        "initial": "a",
        "terminal": ["z"],
        "stakes": {"a->b": "cheap"},
        "workspace_root": root.display().to_string()
    })
}

fn new_policy(v: &Value) -> NewPolicy {
    NewPolicy {
        graph: serde_json::from_value(v["graph"].clone()).unwrap(),
        edge_predicates: serde_json::from_value(v["edge_predicates"].clone()).unwrap(),
        terminal: serde_json::from_value(v["terminal"].clone()).unwrap(),
        stakes: serde_json::from_value(v["stakes"].clone()).unwrap(),
    }
}

#[test]
fn every_upgrade_rule_is_accepted_or_refused() {
    let (ws, _) = workspace();
    let base = upgrade_base(ws.path());
    type Edit = fn(&mut Value);
    let refused: Vec<(Edit, &str)> = vec![
        (
            |v| {
                v["graph"] = json!({"a": ["b"], "b": []});
                v["terminal"] = json!([]);
            },
            "state `z` would be removed",
        ),
        (
            |v| {
                v["graph"] = json!({"a": [], "b": ["z"]});
                v["edge_predicates"] = json!({});
                v["stakes"] = json!({});
            },
            "edge `a->b` would be removed",
        ),
        (
            |v| v["edge_predicates"]["a->b"][0]["statement"] = json!("server_file_exists('x')"),
            "predicates of existing edge `a->b`",
        ),
        (
            |v| v["stakes"]["a->b"] = json!("default"),
            "stakes of existing edge `a->b`",
        ),
        (
            |v| v["graph"]["a"] = json!(["b", "z"]),
            "touches a terminal state",
        ),
        (
            |v| {
                v["graph"]["b"] = json!(["z", "y"]);
                v["terminal"] = json!(["y", "z"]);
            },
            "terminal",
        ),
        (|v| v["graph"]["b"] = json!(["z", "a"]), "already exists"),
    ];
    for (edit, needle) in refused {
        let mut store = MemoryStore::new();
        let mut g = guard(&mut store);
        g.register("r", &input(base.clone())).unwrap();
        let mut v = base.clone();
        edit(&mut v);
        let e = g.upgrade("r", &new_policy(&v), "why").unwrap_err();
        assert_eq!(e.code(), "incompatible_policy_upgrade", "{needle}: {e}");
        assert!(e.to_string().contains(needle), "{needle:?} not in {e}");
        assert_eq!(g.history("r").unwrap().graph_version, 1);
    }
    // accepted: a new state reached by a new edge, with its own predicates
    let mut store = MemoryStore::new();
    let mut g = guard(&mut store);
    g.register("r", &input(base.clone())).unwrap();
    let same = g.upgrade("r", &new_policy(&base), "nothing").unwrap();
    assert_eq!(
        (same.status, same.graph_version, same.ledger_ref),
        ("unchanged", 1, None)
    );
    let mut v = base.clone();
    v["graph"]["b"] = json!(["z", "blocked"]);
    v["graph"]["blocked"] = json!(["archived"]);
    v["stakes"]["b->blocked"] = json!("cheap");
    let up = g.upgrade("r", &new_policy(&v), "add blocked").unwrap();
    assert_eq!((up.status, up.graph_version), ("migrated", 2));
    let again = g.upgrade("r", &new_policy(&v), "again").unwrap();
    assert_eq!(again.status, "unchanged");
    let h = g.history("r").unwrap();
    assert_eq!(h.ledger.len(), 2);
    assert_eq!(h.ledger[1].resolved_by, "agent");
    assert!(g.verify("r").unwrap().ok);
}

/// An ed25519 key made by ssh-keygen: (private key path, public key line).
fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let key = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    (key, public.trim().to_owned())
}

/// `ssh-keygen -Y sign` of `payload` in `namespace`.
fn sign(dir: &Path, key: &Path, namespace: &str, payload: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = dir.join(format!("payload-{n}"));
    std::fs::write(&file, payload).unwrap();
    let out = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", namespace, "-f"])
        .arg(key)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::read_to_string(stratum_guard::descriptors::sig_path(&file)).unwrap()
}

fn trust(dir: &Path, lines: &str) -> TrustRoot {
    let path = dir.join("guard-signers.allowed");
    std::fs::write(&path, lines).unwrap();
    authz::read_trust_root(&path).unwrap()
}

#[test]
fn override_and_migrate_need_a_good_signature_at_the_current_head() {
    let (ws, sha) = workspace();
    let keys = tempfile::tempdir().unwrap();
    let (alice, alice_pub) = keygen(keys.path(), "alice");
    let (mallory, _) = keygen(keys.path(), "mallory");
    let root = trust(
        keys.path(),
        &format!("# trusted\nalice@example.com {alice_pub}\n"),
    );
    let mut store = MemoryStore::new();
    let mut g = guard(&mut store);
    g.register("feat:1", &input(tracker(ws.path(), &sha)))
        .unwrap();
    let req = TransitionRequest {
        resource_id: "feat:1".into(),
        from_state: "planned".into(),
        to_state: "in_progress".into(),
        resolved_by: "human".into(),
        ..TransitionRequest::default()
    };
    let payload = g
        .override_payload("feat:1", "planned", "in_progress", "hotfix")
        .unwrap();
    let good = sign(keys.path(), &alice, authz::NS_OVERRIDE, &payload);
    let code = |e: GuardError| (e.code(), e.to_string());
    // empty trust root: unavailable
    let (c, m) = code(
        g.override_edge(&req, "hotfix", &good, &TrustRoot::default())
            .unwrap_err(),
    );
    assert_eq!(c, "signatures_unavailable", "{m}");
    // wrong namespace
    let wrong_ns = sign(keys.path(), &alice, authz::NS_MIGRATE, &payload);
    let (c, m) = code(
        g.override_edge(&req, "hotfix", &wrong_ns, &root)
            .unwrap_err(),
    );
    assert!(
        c == "authorization_refused" && m.contains("namespace"),
        "{m}"
    );
    // a key not in the trust root
    let untrusted = sign(keys.path(), &mallory, authz::NS_OVERRIDE, &payload);
    let (c, m) = code(
        g.override_edge(&req, "hotfix", &untrusted, &root)
            .unwrap_err(),
    );
    assert!(
        c == "authorization_refused" && m.contains("not in the trust root"),
        "{m}"
    );
    // the right key over another payload (another rationale)
    let (c, m) = code(
        g.override_edge(&req, "other reason", &good, &root)
            .unwrap_err(),
    );
    assert!(
        c == "authorization_refused" && m.contains("does not cover"),
        "{m}"
    );
    // a key trusted only for another namespace
    let limited = trust(
        keys.path(),
        &format!("alice namespaces=\"stratum-guard-migrate\" {alice_pub}\n"),
    );
    let (c, m) = code(
        g.override_edge(&req, "hotfix", &good, &limited)
            .unwrap_err(),
    );
    assert!(
        c == "authorization_refused" && m.contains("not for namespace"),
        "{m}"
    );
    // agent-resolved overrides are refused
    let mut agent = req.clone();
    agent.resolved_by = "agent".into();
    assert_eq!(
        g.override_edge(&agent, "hotfix", &good, &root)
            .unwrap_err()
            .code(),
        "invalid_request"
    );
    // the good one applies and names the signer
    let done = g.override_edge(&req, "hotfix", &good, &root).unwrap();
    assert_eq!(
        (done.status, done.current_state.as_str()),
        ("applied", "in_progress")
    );
    assert_eq!(
        done.authorized_by.as_ref().unwrap().principal,
        "alice@example.com"
    );
    let h = g.history("feat:1").unwrap();
    let last = h.ledger.last().unwrap();
    assert_eq!(format!("{:?}", last.kind), "Deviation");
    // replaying the same signature after the head moved is refused
    let back = TransitionRequest {
        from_state: "in_progress".into(),
        to_state: "review".into(),
        ..req.clone()
    };
    let (c, m) = code(g.override_edge(&back, "hotfix", &good, &root).unwrap_err());
    assert!(
        c == "authorization_refused" && m.contains("does not cover"),
        "{m}"
    );

    // migrate: any change, signed over the new policy's checksum
    let new = NewPolicy {
        graph: serde_json::from_value(json!({"planned": ["in_progress"], "in_progress": ["done"]}))
            .unwrap(),
        terminal: vec!["done".into()],
        ..NewPolicy::default()
    };
    let payload = g.migrate_payload("feat:1", &new, "simplify").unwrap();
    let sig = sign(keys.path(), &alice, authz::NS_MIGRATE, &payload);
    let other = NewPolicy {
        terminal: vec![],
        graph: serde_json::from_value(json!({"planned": ["in_progress"], "in_progress": ["x"]}))
            .unwrap(),
        ..NewPolicy::default()
    };
    assert_eq!(
        g.migrate("feat:1", &other, "simplify", &sig, &root)
            .unwrap_err()
            .code(),
        "authorization_refused"
    );
    let m = g.migrate("feat:1", &new, "simplify", &sig, &root).unwrap();
    assert_eq!((m.status, m.graph_version), ("migrated", 2));
    assert_eq!(
        g.migrate("feat:1", &new, "simplify", &sig, &root)
            .unwrap_err()
            .code(),
        "authorization_refused"
    );
    // the current state must stay in the graph
    let gone = NewPolicy {
        graph: serde_json::from_value(json!({"planned": ["done"]})).unwrap(),
        terminal: vec!["done".into()],
        ..NewPolicy::default()
    };
    let payload = g.migrate_payload("feat:1", &gone, "x").unwrap();
    let sig = sign(keys.path(), &alice, authz::NS_MIGRATE, &payload);
    assert_eq!(
        g.migrate("feat:1", &gone, "x", &sig, &root)
            .unwrap_err()
            .code(),
        "state_not_in_graph"
    );
    assert!(g.verify("feat:1").unwrap().ok);
}

#[test]
fn apply_upgrade_takes_a_signed_descriptor_for_the_current_checksum() {
    use stratum_guard::descriptors;
    let (ws, _) = workspace();
    let keys = tempfile::tempdir().unwrap();
    let (alice, alice_pub) = keygen(keys.path(), "alice");
    let (mallory, _) = keygen(keys.path(), "mallory");
    let root = trust(keys.path(), &format!("alice {alice_pub}\n"));
    let mut store = MemoryStore::new();
    let mut g = guard(&mut store);
    let base = upgrade_base(ws.path());
    let reg = g.register("r", &input(base.clone())).unwrap();
    // a change upgrade refuses: remove the predicate of a->b
    let mut to = base.clone();
    to["edge_predicates"] = json!({});
    to["stakes"] = json!({});
    let file = keys.path().join("guard-upgrades.json");
    let text = json!([{"id": "relax-ab", "rationale": "reviewed", "from_checksum": reg.checksum, "to_policy": to}]).to_string();
    std::fs::write(&file, &text).unwrap();
    let files = vec![file.clone()];
    // unsigned
    assert!(descriptors::find(&files, &root, "relax-ab").is_err());
    // signed by an untrusted key
    std::fs::write(
        descriptors::sig_path(&file),
        sign(keys.path(), &mallory, authz::NS_DESCRIPTORS, &text),
    )
    .unwrap();
    assert_eq!(
        descriptors::find(&files, &root, "relax-ab")
            .unwrap_err()
            .code(),
        "authorization_refused"
    );
    // signed in the wrong namespace
    std::fs::write(
        descriptors::sig_path(&file),
        sign(keys.path(), &alice, authz::NS_MIGRATE, &text),
    )
    .unwrap();
    assert_eq!(
        descriptors::find(&files, &root, "relax-ab")
            .unwrap_err()
            .code(),
        "authorization_refused"
    );
    // empty trust root
    assert_eq!(
        descriptors::find(&files, &TrustRoot::default(), "relax-ab")
            .unwrap_err()
            .code(),
        "signatures_unavailable"
    );
    std::fs::write(
        descriptors::sig_path(&file),
        sign(keys.path(), &alice, authz::NS_DESCRIPTORS, &text),
    )
    .unwrap();
    let (d, f) = descriptors::find(&files, &root, "relax-ab").unwrap();
    let a = g.apply_upgrade("r", &d, &f).unwrap();
    assert_eq!((a.status, a.graph_version), ("applied", 2));
    let b = g.apply_upgrade("r", &d, &f).unwrap();
    assert_eq!(b.status, "unchanged");
    let h = g.history("r").unwrap();
    assert_eq!(h.ledger[1].descriptor.as_ref().unwrap().id, "relax-ab");
    // a descriptor for another checksum does not apply
    let mut s2 = MemoryStore::new();
    let mut g2 = guard(&mut s2);
    let mut other = base.clone();
    other["stakes"]["a->b"] = json!("default");
    g2.register("r", &input(other)).unwrap();
    assert!(
        g2.apply_upgrade("r", &d, &f)
            .unwrap_err()
            .to_string()
            .contains("applies to policy")
    );
}
