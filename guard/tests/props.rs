//! The property of the `guard_policy` fuzz target (fuzz/fuzz_targets/), as a
//! proptest: canonical JSON is a fixpoint that reads back to the same value;
//! random policies over a small alphabet either are refused with a typed
//! error or have a canonical form that reads back and validates to the same
//! checksum; random statements never panic the parser, and a parsed one
//! prints to the same call.

use proptest::prelude::*;
use serde_json::{Value, json};
use stratum_guard::{builtin, canon, policy};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z\"\\\\\u{e9}\u{1F600} ]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-dZ]{0,3}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const STATES: [&str; 5] = ["a", "b", "c", "d", "e->f"];
const STATEMENTS: [&str; 6] = [
    "server_file_exists('x')",
    "git_commit_exists('abcd')",
    "command_exit_zero(['ok'])",
    "command_exit_zero(['rm'])",
    "verdict_receipt_clean('r')",
    "anything",
];

fn a_policy() -> impl Strategy<Value = Value> {
    let state = prop::sample::select(&STATES[..]);
    let edges = prop::collection::vec((state.clone(), state.clone()), 0..8);
    let preds = prop::collection::vec(
        (
            prop::sample::select(&["p", "q"][..]),
            prop::sample::select(&["deterministic", "judged", "verified"][..]),
            prop::sample::select(&STATEMENTS[..]),
        ),
        0..3,
    );
    (
        edges,
        prop::collection::vec((state.clone(), state.clone(), preds), 0..4),
        prop::collection::vec(
            (
                state.clone(),
                state.clone(),
                prop::sample::select(&["cheap", "default", "paranoid"][..]),
            ),
            0..3,
        ),
        state.clone(),
        prop::collection::vec(state, 0..3),
        any::<bool>(),
    )
        .prop_map(|(edges, preds, stakes, initial, terminal, absolute)| {
            let mut graph = serde_json::Map::new();
            for (f, t) in edges {
                let e = graph.entry(f.to_owned()).or_insert_with(|| json!([]));
                if let Some(list) = e.as_array_mut() {
                    list.push(json!(t));
                }
            }
            let mut ep = serde_json::Map::new();
            for (f, t, ps) in preds {
                let list: Vec<Value> = ps
                    .into_iter()
                    .map(|(id, kind, st)| json!({"id": id, "type": kind, "statement": st}))
                    .collect();
                ep.insert(format!("{f}->{t}"), Value::from(list));
            }
            let mut sk = serde_json::Map::new();
            for (f, t, s) in stakes {
                sk.insert(format!("{f}->{t}"), json!(s));
            }
            json!({
                "graph": graph, "edge_predicates": ep, "initial": initial, "terminal": terminal,
                "stakes": sk, "workspace_root": if absolute { "/w" } else { "w" }
            })
        })
}

fn declared(argv: &[String]) -> bool {
    argv.first().is_some_and(|a| a.starts_with("ok"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn canonical_text_is_a_fixpoint(v in json_value()) {
        let c = canon::canonical(&v);
        let back: Value = serde_json::from_str(&c).unwrap();
        prop_assert_eq!(&back, &v);
        prop_assert_eq!(canon::canonical(&back), c);
    }

    #[test]
    fn a_valid_policy_is_canonical_and_stable(v in a_policy()) {
        let input = policy::from_value(v).unwrap();
        match policy::validate(&input, &declared) {
            Ok(p) => {
                let stored = policy::Policy::from_stored(&p.canonical()).unwrap();
                prop_assert_eq!(&stored, &p);
                let again = policy::from_value(p.to_value()).unwrap();
                let q = policy::validate(&again, &declared).unwrap();
                prop_assert_eq!(q.checksum(), p.checksum());
                for t in &p.terminal {
                    prop_assert!(p.graph[t].is_empty());
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn statements_never_panic_and_print_back(s in "[a-z_(\\['\"\\\\, )\\]0-9]{0,40}") {
        if let Ok(b) = builtin::parse(&s) {
            prop_assert_eq!(builtin::parse(&b.to_string()), Ok(b));
        }
    }
}
