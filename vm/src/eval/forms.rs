//! The language 1.1 (X3) built-ins that are more than one line: the lambda
//! forms `all`/`any`/`count`/`filter`/`map` over a list (their element
//! frames), `unique`, `keys`, `coalesce`, `digest`, and the values of
//! `file(path)` and `glob(pattern)` from what the host read.
//!
//! Owns: what each of these computes and its errors; the frame a lambda
//! body runs in (which element, what has been folded so far); the size
//! limit of the lists `map` builds ([`MAX_VALUE_BYTES`]).
//! Must never: read files itself (the host answers through
//! [`Files`](super::expr::Files)), run bytecode (the evaluator in
//! [`super::expr`] does), or recurse over a value.

use std::borrow::Cow;
use std::collections::HashSet;

use super::expr::{EvalError, Files, R, type_error};
use super::value::{
    self, MAX_DEPTH, MAX_VALUE_BYTES, Value, canonical_digest, canonical_json, type_name,
};
use crate::interp::host::FileRead;

/// The fields of a `file(path)` value, in the documented order.
pub const FILE_FIELDS: &[&str] = &["exists", "size", "text", "json", "sha256"];

/// A builtin that takes a lambda.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    All,
    Any,
    Count,
    Filter,
    Map,
}

impl Form {
    /// The form of a builtin name (one of `op::LAMBDA_FORMS`).
    pub(super) fn of(name: &str) -> Option<Form> {
        Some(match name {
            "all" => Form::All,
            "any" => Form::Any,
            "count" => Form::Count,
            "filter" => Form::Filter,
            "map" => Form::Map,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Form::All => "all",
            Form::Any => "any",
            Form::Count => "count",
            Form::Filter => "filter",
            Form::Map => "map",
        }
    }
}

/// One open lambda form: the list, the element its body sees, what has
/// been folded so far.
pub(super) struct Frame<'a> {
    form: Form,
    /// Always an array (checked by [`Frame::open`]).
    list: Cow<'a, Value>,
    len: usize,
    at: usize,
    /// The pc of the body's first instruction.
    body: usize,
    /// The pc just past the form's `EachEnd`.
    pub(super) after: usize,
    /// `all`/`any` decided before the end of the list.
    decided: Option<bool>,
    count: u64,
    out: Vec<Value>,
    /// Bytes of JSON text `map` has built so far.
    bytes: usize,
}

impl<'a> Frame<'a> {
    /// A frame over `list`, or (`Err`) the form's result at once when the
    /// list is empty.
    pub(super) fn open(
        form: Form,
        list: Cow<'a, Value>,
        body: usize,
        after: usize,
    ) -> R<Result<Frame<'a>, Value>> {
        let len = match &*list {
            Value::Array(items) => items.len(),
            other => {
                return Err(type_error(format!(
                    "`{}` needs an array, found {}",
                    form.name(),
                    type_name(other)
                )));
            }
        };
        let frame = Frame {
            form,
            list,
            len,
            at: 0,
            body,
            after,
            decided: None,
            count: 0,
            out: Vec::new(),
            bytes: 0,
        };
        Ok(if len == 0 {
            Err(frame.finish())
        } else {
            Ok(frame)
        })
    }

    /// The element the parameter is bound to now.
    pub(super) fn element(&self) -> Option<Cow<'a, Value>> {
        match &self.list {
            Cow::Borrowed(Value::Array(items)) => items.get(self.at).map(Cow::Borrowed),
            Cow::Owned(Value::Array(items)) => items.get(self.at).cloned().map(Cow::Owned),
            _ => None,
        }
    }

    /// Folds one body value in: `Some(pc)` of the body for the next
    /// element, `None` when the form is done.
    pub(super) fn fold(&mut self, v: Cow<'_, Value>) -> R<Option<usize>> {
        if self.form == Form::Map {
            let room = MAX_VALUE_BYTES.saturating_sub(self.bytes);
            let text = value::compact_json_within(&v, room)
                .ok_or_else(|| EvalError::ResourceLimit(value::too_large_message("`map`", None)))?;
            self.bytes += text.len() + 1;
            self.out.push(v.into_owned());
        } else {
            let Value::Bool(holds) = *v else {
                return Err(type_error(format!(
                    "the lambda of `{}` must give a boolean, found {}",
                    self.form.name(),
                    type_name(&v)
                )));
            };
            match self.form {
                Form::All if !holds => self.decided = Some(false),
                Form::Any if holds => self.decided = Some(true),
                Form::Count => self.count += u64::from(holds),
                Form::Filter if holds => {
                    if let Some(e) = self.element() {
                        self.out.push(e.into_owned());
                    }
                }
                _ => {}
            }
        }
        self.at += 1;
        Ok((self.decided.is_none() && self.at < self.len).then_some(self.body))
    }

    /// The form's result.
    pub(super) fn finish(self) -> Value {
        match self.form {
            Form::All => Value::Bool(self.decided.unwrap_or(true)),
            Form::Any => Value::Bool(self.decided.unwrap_or(false)),
            Form::Count => Value::from(self.count),
            Form::Filter | Form::Map => Value::Array(self.out),
        }
    }
}

/// `unique(xs)`: the elements without repeats (equal as JSON values, so
/// `1` and `1.0` are one), each kept where it first occurs.
pub(super) fn unique(v: &Value) -> R<Value> {
    let Value::Array(items) = v else {
        return Err(type_error(format!(
            "`unique` needs an array, found {}",
            type_name(v)
        )));
    };
    let mut seen = HashSet::new();
    let out = items
        .iter()
        .filter(|e| seen.insert(canonical_json(e)))
        .cloned()
        .collect();
    Ok(Value::Array(out))
}

/// `keys(o)`: the object's keys, sorted by code point.
pub(super) fn keys(v: &Value) -> R<Value> {
    let Value::Object(o) = v else {
        return Err(type_error(format!(
            "`keys` needs an object, found {}",
            type_name(v)
        )));
    };
    let mut keys: Vec<&String> = o.keys().collect();
    keys.sort();
    Ok(Value::Array(
        keys.into_iter().map(|k| Value::String(k.clone())).collect(),
    ))
}

/// `coalesce(a, b, …)`: the first argument that is not null, else null.
pub(super) fn coalesce<'a>(args: &[Cow<'a, Value>]) -> Cow<'a, Value> {
    args.iter()
        .find(|a| !a.is_null())
        .cloned()
        .unwrap_or(Cow::Owned(Value::Null))
}

/// `digest(v)`: the SHA-256 hex digest of `v`'s canonical JSON text.
pub(super) fn digest(v: &Value) -> R<Value> {
    Ok(Value::String(canonical_digest(v)))
}

fn host_error(what: &str, e: crate::interp::HostError) -> EvalError {
    EvalError::ValidationError(format!("{what}: {e}"))
}

/// `file(path)`: what the host read.
pub(super) fn file(files: &mut dyn Files, path: &Value) -> R<FileRead> {
    let Value::String(p) = path else {
        return Err(type_error(format!(
            "`file` needs a string path, found {}",
            type_name(path)
        )));
    };
    files.read_file(p).map_err(|e| host_error("`file`", e))
}

/// `glob(pattern)`: the sorted workspace paths the host matched.
pub(super) fn glob(files: &mut dyn Files, pattern: &Value) -> R<Value> {
    let Value::String(p) = pattern else {
        return Err(type_error(format!(
            "`glob` needs a string pattern, found {}",
            type_name(pattern)
        )));
    };
    let paths = files.glob(p).map_err(|e| host_error("`glob`", e))?;
    Ok(Value::Array(paths.into_iter().map(Value::String).collect()))
}

/// One field of a `file(path)` value; `json` parses the text now, and a
/// file that is not JSON text is an error.
pub(super) fn file_field(f: &FileRead, name: &str) -> R<Value> {
    Ok(match name {
        "exists" => Value::Bool(f.exists),
        "size" => Value::from(f.size),
        "text" => f.text.clone().map_or(Value::Null, Value::String),
        "sha256" => f.sha256.clone().map_or(Value::Null, Value::String),
        "json" => file_json(f)?,
        other => {
            return Err(type_error(format!(
                "no field `{other}` (a `file()` value has {})",
                FILE_FIELDS.join(", ")
            )));
        }
    })
}

fn file_json(f: &FileRead) -> R<Value> {
    if !f.exists {
        return Ok(Value::Null);
    }
    let Some(text) = &f.text else {
        return Err(EvalError::ValidationError(format!(
            "`file({:?}).json`: the file is not UTF-8 text of at most 8 MiB",
            f.path
        )));
    };
    let v: Value = serde_json::from_str(text).map_err(|e| {
        EvalError::ValidationError(format!("`file({:?}).json`: not valid JSON: {e}", f.path))
    })?;
    if value::deeper_than(&v, MAX_DEPTH) {
        return Err(EvalError::ResourceLimit(format!(
            "`file({:?}).json` is nested deeper than {MAX_DEPTH} levels",
            f.path
        )));
    }
    Ok(v)
}

/// The whole `file(path)` value as an object (when it is used as one):
/// `json` is null when the text does not parse (read `.json` itself to
/// have the parse error reported).
pub(super) fn file_object(f: &FileRead) -> Value {
    let mut o = serde_json::Map::new();
    for name in FILE_FIELDS {
        let v = file_field(f, name).unwrap_or(Value::Null);
        o.insert((*name).to_owned(), v);
    }
    Value::Object(o)
}
