//! Canonical JSON and checksums: the one byte form that policy checksums,
//! ledger hashes and signed payloads are computed over.
//!
//! Owns: the canonical text of a JSON value (object keys sorted by their
//! UTF-8 bytes, no whitespace, strings and numbers as `serde_json` writes
//! them) and `sha256:`-prefixed digests of it.
//! Every value guard hashes (policies, ledger entries, payloads) is made of
//! strings, booleans, integers, lists and maps by its types; a non-integer
//! number is written as `serde_json` writes it, but such a text is not
//! promised to read back to the same `f64` (serde_json parses floats
//! without `float_roundtrip`; the fuzz target found it), so nothing here
//! relies on floats.
//! Must never: depend on the order a map was built in, or accept a
//! non-finite number (`serde_json::Value` cannot hold one).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical text of `value`.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                write(&map[k.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `sha256:` and the hex SHA-256 of the canonical text of `value`.
pub fn checksum(value: &Value) -> String {
    format!("sha256:{}", sha256_hex(canonical(value).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value =
            serde_json::from_str(r#"{"b": [1, {"z": 1, "a": "x"}], "a": null}"#).unwrap();
        let b = json!({"a": null, "b": [1, {"a": "x", "z": 1}]});
        assert_eq!(canonical(&a), r#"{"a":null,"b":[1,{"a":"x","z":1}]}"#);
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(checksum(&a), checksum(&b));
        // arrays keep their order
        assert_ne!(canonical(&json!([1, 2])), canonical(&json!([2, 1])));
    }

    #[test]
    fn strings_are_escaped_and_canonical_text_parses_back() {
        let v = json!({"k\"ey": "line\nbreak \u{1F600} \\ é"});
        let text = canonical(&v);
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
        assert_eq!(canonical(&back), text);
    }
}
