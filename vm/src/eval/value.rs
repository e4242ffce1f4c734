//! Run-time values: plain JSON, with the language's equality, truthiness,
//! type names and JavaScript-compatible text forms (reference v1-language
//! §5.6, §7.4; decision C7).
//!
//! Owns: structural equality (numbers as IEEE doubles, `0 == -0`, objects
//! key-order-insensitive), truthiness, the nesting-depth measure, number
//! normalization, `js_number` (JavaScript `Number` → `String`),
//! `compact_json` (`JSON.stringify` without spacing, also bounded), and the
//! size limit of the values the evaluator builds ([`MAX_VALUE_BYTES`]).
//! Must never: recurse over a value (values can be nested arbitrarily deep;
//! every walk here keeps an explicit stack), or panic.

use serde_json::Number;

/// A run-time value: any JSON value. Objects keep insertion order.
pub type Value = serde_json::Value;

/// Deepest nesting of arrays and objects accepted in a binding value.
pub const MAX_DEPTH: usize = 128;

/// Largest value the evaluator builds, in bytes of text: a string made by
/// `+`, `str` or template interpolation (UTF-8 bytes), or the compact JSON
/// text of an array or object turned into a string. Values it only reads or
/// copies (bindings, step outputs, full-value references) are bounded where
/// they come from.
pub const MAX_VALUE_BYTES: usize = 16 * 1024 * 1024;

/// The message of a value over [`MAX_VALUE_BYTES`]: `what` (e.g. "`+`")
/// would build a string of `len` bytes (`None`: not known, only that it is
/// over).
pub fn too_large_message(what: &str, len: Option<usize>) -> String {
    let size = match len {
        Some(n) => format!("a string of {n} bytes"),
        None => "a longer string".to_string(),
    };
    format!(
        "{what} would build {size}, but values are limited to {} MiB ({MAX_VALUE_BYTES} bytes); keep large data in workspace files and pass their paths",
        MAX_VALUE_BYTES >> 20
    )
}

/// The language's name of a value's type (`null`, `boolean`, `number`,
/// `string`, `array`, `object`).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A number as an IEEE double (`None` only for a number that is not
/// representable, which plain JSON numbers never are).
pub fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

/// Makes a JSON number from a double: integral values within the `i64`
/// range are stored as integers (so `2 + 1` serializes as `3`, and `-0`
/// as `0`); `None` when `n` is not finite.
pub fn number(n: f64) -> Option<Value> {
    if !n.is_finite() {
        return None;
    }
    // -2^63 ≤ n < 2^63: exactly representable as i64
    if n.fract() == 0.0 && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&n) {
        return Some(Value::Number(Number::from(n as i64)));
    }
    Number::from_f64(n).map(Value::Number)
}

/// Truthiness (used by `any`, `all`, `bool`): null → false; boolean →
/// itself; number → ≠ 0; string and array → non-empty; object → has a key.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Strict structural equality: no coercion; numbers compare as doubles
/// (`0 == -0`, `1 == 1.0`); arrays element-wise in order; objects by key set
/// and values, in any key order.
pub fn equal(a: &Value, b: &Value) -> bool {
    let mut stack = vec![(a, b)];
    while let Some(pair) = stack.pop() {
        match pair {
            (Value::Null, Value::Null) => {}
            (Value::Bool(x), Value::Bool(y)) if x == y => {}
            (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
            (Value::String(x), Value::String(y)) if x == y => {}
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                stack.extend(x.iter().zip(y));
            }
            (Value::Object(x), Value::Object(y)) if x.len() == y.len() => {
                for (k, v) in x {
                    match y.get(k) {
                        Some(w) => stack.push((v, w)),
                        None => return false,
                    }
                }
            }
            _ => return false,
        }
    }
    true
}

/// Whether `v` nests arrays and objects more than `limit` levels deep
/// (`1` and `"s"` are depth 0, `[]` and `{}` depth 1, `[[1]]` depth 2).
pub fn deeper_than(v: &Value, limit: usize) -> bool {
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                if d + 1 > limit {
                    return true;
                }
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(o) => {
                if d + 1 > limit {
                    return true;
                }
                stack.extend(o.values().map(|c| (c, d + 1)));
            }
            _ => {}
        }
    }
    false
}

/// JavaScript's `Number.prototype.toString()` (and `String(n)`): the
/// shortest digits that round-trip, plain notation for decimal exponents
/// in `-7 < e < 21`, else `1e+21` / `1.5e-7` form; `-0` is `0`.
pub fn js_number(n: f64) -> String {
    if n.is_nan() {
        return "NaN".into();
    }
    if n == 0.0 {
        return "0".into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sign = if n < 0.0 { "-" } else { "" };
    // Rust's `{:e}` prints the shortest round-trip digits: `1.2345e-7`, `5e0`
    let sci = format!("{:e}", n.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let k = digits.len() as i64;
    // value = 0.d1d2…dk × 10^point
    let point = exp + 1;
    let body = if k <= point && point <= 21 {
        format!("{digits}{}", "0".repeat((point - k) as usize))
    } else if 0 < point && point <= 21 {
        let (int, frac) = digits.split_at(point as usize);
        format!("{int}.{frac}")
    } else if -6 < point && point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else {
        let e = point - 1;
        let e_sign = if e < 0 { '-' } else { '+' };
        let (first, rest) = digits.split_at(1);
        if rest.is_empty() {
            format!("{first}e{e_sign}{}", e.abs())
        } else {
            format!("{first}.{rest}e{e_sign}{}", e.abs())
        }
    };
    format!("{sign}{body}")
}

/// A number value as JavaScript text.
fn js_number_value(n: &Number) -> String {
    match (n.as_i64(), n.as_u64()) {
        // integers below 2^53 print the same in both worlds, and skip the float path
        (Some(i), _) if i.unsigned_abs() < (1 << 53) => i.to_string(),
        (_, Some(u)) if u < (1 << 53) => u.to_string(),
        _ => js_number(n.as_f64().unwrap_or(f64::NAN)),
    }
}

/// Appends `s` as a JSON string literal, escaped as `JSON.stringify` does.
pub fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `JSON.stringify(v)`: no spaces, object keys in insertion order, numbers
/// in JavaScript form (`5`, `2.5`, `1e+21`).
pub fn compact_json(v: &Value) -> String {
    // no text is longer than usize::MAX bytes
    compact_json_within(v, usize::MAX).unwrap_or_default()
}

/// [`compact_json`], or `None` as soon as the text would pass `limit`
/// bytes (it never holds much more than `limit` bytes on the way).
pub fn compact_json_within(v: &Value, limit: usize) -> Option<String> {
    json_text(v, limit, false)
}

/// The canonical JSON text of a value (RFC 8785, JCS): no whitespace,
/// object keys sorted by their UTF-16 code units, numbers in their
/// ECMAScript form, strings escaped as [`compact_json`] does. Two values
/// that are equal as JSON have the same canonical text, whatever the key
/// order they were built with; `digest()` (X3), artifact manifests (X4) and
/// retry's input hashes (X8) hash this text.
pub fn canonical_json(v: &Value) -> String {
    // no text is longer than usize::MAX bytes
    json_text(v, usize::MAX, true).unwrap_or_default()
}

/// The SHA-256 hex digest of `v`'s [`canonical_json`] text.
pub fn canonical_digest(v: &Value) -> String {
    sha256_hex(canonical_json(v).as_bytes())
}

/// The lowercase SHA-256 hex digest of `bytes` (what `sha256sum` prints).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
    }
    out
}

/// JSON text of `v`, keys in insertion order or (`sorted`) in canonical
/// order; `None` as soon as it would pass `limit` bytes.
fn json_text(v: &Value, limit: usize, sorted: bool) -> Option<String> {
    enum Work<'a> {
        Value(&'a Value),
        Key(&'a str),
        Text(&'static str),
    }
    let mut out = String::new();
    let mut stack = vec![Work::Value(v)];
    while let Some(w) = stack.pop() {
        match w {
            Work::Text(t) => out.push_str(t),
            Work::Key(k) => {
                write_json_string(&mut out, k);
                out.push(':');
            }
            Work::Value(v) => match v {
                Value::Null => out.push_str("null"),
                Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                Value::Number(n) => out.push_str(&js_number_value(n)),
                Value::String(s) => {
                    // the literal is at least the string and its quotes
                    if out.len().saturating_add(s.len()).saturating_add(2) > limit {
                        return None;
                    }
                    write_json_string(&mut out, s);
                }
                Value::Array(a) => {
                    out.push('[');
                    stack.push(Work::Text("]"));
                    for (i, e) in a.iter().enumerate().rev() {
                        stack.push(Work::Value(e));
                        if i > 0 {
                            stack.push(Work::Text(","));
                        }
                    }
                }
                Value::Object(o) => {
                    out.push('{');
                    stack.push(Work::Text("}"));
                    let mut entries: Vec<(&String, &Value)> = o.iter().collect();
                    if sorted {
                        entries.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
                    }
                    for (i, (k, e)) in entries.into_iter().enumerate().rev() {
                        stack.push(Work::Value(e));
                        stack.push(Work::Key(k));
                        if i > 0 {
                            stack.push(Work::Text(","));
                        }
                    }
                }
            },
        }
        if out.len() > limit {
            return None;
        }
    }
    Some(out)
}

/// [`js_string`], or `None` when the text would pass `limit` bytes.
pub fn js_string_within(v: &Value, limit: usize) -> Option<String> {
    match v {
        Value::String(s) if s.len() > limit => None,
        Value::Array(_) | Value::Object(_) => compact_json_within(v, limit),
        _ => Some(js_string(v)).filter(|s| s.len() <= limit),
    }
}

/// JavaScript `String(v)`: strings as they are, scalars as text, arrays and
/// objects as compact JSON.
pub fn js_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => js_number_value(n),
        Value::Array(_) | Value::Object(_) => compact_json(v),
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_by_utf16_and_hashes_with_sha256() {
        let a = serde_json::json!({"b": [1, 2.5, {"z": null, "a": true}], "a": "x\n", "\u{e9}": 1, "\u{1f600}": 2, "\u{ff61}": 3});
        assert_eq!(
            canonical_json(&a),
            "{\"a\":\"x\\n\",\"b\":[1,2.5,{\"a\":true,\"z\":null}],\"\u{e9}\":1,\"\u{1f600}\":2,\"\u{ff61}\":3}"
        );
        let b = serde_json::json!({"\u{ff61}": 3, "\u{1f600}": 2, "\u{e9}": 1, "a": "x\n", "b": [1, 2.5, {"a": true, "z": null}]});
        assert_eq!(canonical_digest(&a), canonical_digest(&b));
        // sha256("abc"), FIPS 180-2 test vector
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(canonical_json(&serde_json::json!(1.0)), "1");
    }

    #[test]
    fn js_numbers() {
        for (n, s) in [
            (0.0, "0"),
            (-0.0, "0"),
            (5.0, "5"),
            (-5.0, "-5"),
            (2.5, "2.5"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (1e-6, "0.000001"),
            (0.1 + 0.2, "0.30000000000000004"),
            (123456789012345680000.0, "123456789012345680000"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (123.456, "123.456"),
            (-1e-7, "-1e-7"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
        ] {
            assert_eq!(js_number(n), s, "{n:e}");
        }
    }

    #[test]
    fn compact_json_matches_js() {
        let v = json!({"b": [1, 2.5, null, true, "x\"\n\u{1}"], "a": {}, "c": []});
        assert_eq!(
            compact_json(&v),
            r#"{"b":[1,2.5,null,true,"x\"\n\u0001"],"a":{},"c":[]}"#
        );
        assert_eq!(compact_json(&json!(1e21)), "1e+21");
        assert_eq!(compact_json(&json!(-0.0)), "0");
    }

    #[test]
    fn deep_values_do_not_overflow() {
        let mut v = json!(1);
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        assert!(deeper_than(&v, MAX_DEPTH));
        assert!(equal(&v, &v));
        assert!(!equal(&v, &Value::Array(vec![json!(2)])));
        assert_eq!(compact_json(&v).len(), 200_001);
        // dropping a deep serde_json value recurses; unwind it by hand
        let mut cur = v;
        while let Value::Array(mut a) = cur {
            cur = a.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn depth_measure() {
        assert!(!deeper_than(&json!(1), 0));
        assert!(deeper_than(&json!([]), 0));
        assert!(!deeper_than(&json!([[1]]), 2));
        assert!(deeper_than(&json!([[1]]), 1));
        assert!(deeper_than(&json!({"a": {"b": {}}}), 2));
    }

    #[test]
    fn compact_json_within_stops_past_the_limit() {
        let v = json!({"a": ["xyz", 1, null], "b": "é"});
        let full = compact_json(&v);
        assert_eq!(compact_json_within(&v, full.len()), Some(full.clone()));
        assert_eq!(compact_json_within(&v, full.len() - 1), None);
        assert_eq!(compact_json_within(&v, 0), None);
        // a long string is refused before it is escaped
        let long = json!(["x".repeat(100)]);
        assert_eq!(compact_json_within(&long, 50), None);
        assert_eq!(js_string_within(&json!("abc"), 3), Some("abc".into()));
        assert_eq!(js_string_within(&json!("abcd"), 3), None);
        assert_eq!(js_string_within(&json!(12345), 3), None);
        assert_eq!(js_string_within(&json!([1]), 3), Some("[1]".into()));
    }

    #[test]
    fn numbers_normalize() {
        assert_eq!(number(3.0), Some(json!(3)));
        assert_eq!(number(-0.0), Some(json!(0)));
        assert_eq!(number(2.5), Some(json!(2.5)));
        assert_eq!(number(f64::INFINITY), None);
        assert_eq!(number(1e300).and_then(|v| v.as_f64()), Some(1e300));
    }
}
