//! STRAT-GUARD's validators on arbitrary input: canonical JSON
//! (`stratum_guard::canon`), policy validation (`stratum_guard::policy`)
//! and the deterministic built-ins' parser (`stratum_guard::builtin`).
//!
//! What must hold: nothing panics; the canonical text of any JSON value
//! without non-integer numbers (guard hashes none: see `canon`) parses back
//! to the same value and is its own canonical text; a policy
//! that validates has a canonical form that reads back (`from_stored`) to
//! the same policy and validates again to the same checksum; every
//! statement that parses prints (`Display`) to a statement that parses to
//! the same call.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use stratum_guard::{builtin, canon, policy};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(b) = builtin::parse(text) {
        assert_eq!(builtin::parse(&b.to_string()), Ok(b));
    }
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let c = canon::canonical(&value);
    let back: Value = serde_json::from_str(&c).expect("canonical text is JSON");
    if !has_float(&value) {
        assert_eq!(back, value);
        assert_eq!(canon::canonical(&back), c);
    }
    let Ok(input) = policy::from_value(value) else {
        return;
    };
    let declared = |argv: &[String]| argv.first().is_some_and(|a| a.starts_with("ok"));
    if let Ok(p) = policy::validate(&input, &declared) {
        let stored =
            policy::Policy::from_stored(&p.canonical()).expect("a canonical policy reads back");
        assert_eq!(stored, p);
        let again = policy::from_value(p.to_value()).expect("a canonical policy is an input");
        let q = policy::validate(&again, &declared).expect("a canonical policy validates");
        assert_eq!(q.checksum(), p.checksum());
    }
});

fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(m) => m.values().any(has_float),
        _ => false,
    }
}
