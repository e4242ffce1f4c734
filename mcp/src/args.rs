//! Request validation: every tool declares its fields (a canonical name, the
//! older alias, whether it is required, the JSON type it takes) and this
//! module checks raw arguments against that list.
//!
//! Owns: refusing unknown fields with the list of accepted ones, missing
//! required fields, wrong JSON types, and conflicting aliases (`runId` and
//! `flow_id` with different values), plus the JSON schema advertised in
//! `tools/list`, derived from the same list so the two never disagree.
//! Must never: interpret a field's value beyond its JSON type.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::JsonObject;
use serde_json::{Value, json};

/// The JSON type a field takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Str,
    /// An object.
    Obj,
    /// A string or an object (a spec: YAML text or the parsed object).
    StrOrObj,
    /// A boolean.
    Bool,
    /// An array.
    Arr,
    /// Anything.
    Any,
}

impl Kind {
    fn accepts(self, v: &Value) -> bool {
        match self {
            Kind::Str => v.is_string(),
            Kind::Obj => v.is_object(),
            Kind::StrOrObj => v.is_string() || v.is_object(),
            Kind::Bool => v.is_boolean(),
            Kind::Arr => v.is_array(),
            Kind::Any => true,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Kind::Str => "a string",
            Kind::Obj => "an object",
            Kind::StrOrObj => "a string (YAML text) or an object",
            Kind::Bool => "true or false",
            Kind::Arr => "an array",
            Kind::Any => "any JSON value",
        }
    }

    fn schema(self) -> Value {
        match self {
            Kind::Str => json!({"type": "string"}),
            Kind::Obj => json!({"type": "object"}),
            Kind::StrOrObj => json!({"type": ["string", "object"]}),
            Kind::Bool => json!({"type": "boolean"}),
            Kind::Arr => json!({"type": "array"}),
            Kind::Any => json!({}),
        }
    }
}

/// One request field.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The name in the newest engine's style (`runId`).
    pub name: &'static str,
    /// The older name accepted as well (`flow_id`), if any.
    pub alias: Option<&'static str>,
    /// Whether the field must be present.
    pub required: bool,
    /// Its JSON type.
    pub kind: Kind,
    /// What it means (the schema description).
    pub doc: &'static str,
}

impl Field {
    /// A required field.
    pub const fn req(name: &'static str, kind: Kind, doc: &'static str) -> Field {
        Field {
            name,
            alias: None,
            required: true,
            kind,
            doc,
        }
    }

    /// An optional field.
    pub const fn opt(name: &'static str, kind: Kind, doc: &'static str) -> Field {
        Field {
            name,
            alias: None,
            required: false,
            kind,
            doc,
        }
    }

    /// The same field, also accepted under `alias`.
    pub const fn or(self, alias: &'static str) -> Field {
        Field {
            alias: Some(alias),
            ..self
        }
    }

    fn shown(&self) -> String {
        match self.alias {
            Some(a) => format!("`{}` (or `{a}`)", self.name),
            None => format!("`{}`", self.name),
        }
    }
}

/// Validated arguments, keyed by canonical name.
#[derive(Debug, Default)]
pub struct Args(BTreeMap<&'static str, Value>);

impl Args {
    /// A field's value (absent, or JSON null, gives `None`).
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    /// A string field.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_str)
    }

    /// A boolean field (`false` when absent).
    pub fn flag(&self, name: &str) -> bool {
        self.get(name).and_then(Value::as_bool).unwrap_or(false)
    }

    /// A required string field (validation already made sure it is there).
    pub fn req_str(&self, name: &str) -> &str {
        self.str(name).unwrap_or_default()
    }
}

fn accepted(fields: &[Field]) -> String {
    fields
        .iter()
        .map(Field::shown)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks `raw` against `fields`; the error is a sentence for the client.
pub fn parse(tool: &str, fields: &[Field], raw: &JsonObject) -> Result<Args, String> {
    let mut out = BTreeMap::new();
    for (key, value) in raw {
        let Some(f) = fields
            .iter()
            .find(|f| f.name == key || f.alias == Some(key.as_str()))
        else {
            return Err(format!(
                "unknown field `{key}` for {tool}; accepted fields: {}",
                accepted(fields)
            ));
        };
        if value.is_null() && !f.required {
            continue;
        }
        if !f.kind.accepts(value) {
            return Err(format!(
                "field `{key}` of {tool} must be {}",
                f.kind.describe()
            ));
        }
        if let Some(prev) = out.get(f.name)
            && prev != value
        {
            return Err(format!(
                "{tool} got both `{}` and `{}` with different values; send one of them",
                f.name,
                f.alias.unwrap_or(f.name)
            ));
        }
        out.insert(f.name, value.clone());
    }
    let missing: Vec<String> = fields
        .iter()
        .filter(|f| f.required && !out.contains_key(f.name))
        .map(Field::shown)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{tool} is missing required field{} {}; accepted fields: {}",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            accepted(fields)
        ));
    }
    Ok(Args(out))
}

/// The JSON schema of a field list: the current (camelCase) names, with
/// every required one listed; the older snake_case aliases stay accepted by
/// [`parse`] but are not advertised, so a client that validates against the
/// schema is told exactly what to send.
pub fn schema(fields: &[Field]) -> Arc<JsonObject> {
    let mut props = serde_json::Map::new();
    let mut required = Vec::new();
    for f in fields {
        let mut s = f.kind.schema();
        s["description"] = Value::from(match f.alias {
            Some(a) => format!("{} (older name, still accepted: `{a}`)", f.doc),
            None => f.doc.to_string(),
        });
        props.insert(f.name.into(), s);
        if f.required {
            required.push(Value::from(f.name));
        }
    }
    let mut obj = JsonObject::new();
    obj.insert("type".into(), "object".into());
    obj.insert("properties".into(), Value::Object(props));
    if !required.is_empty() {
        obj.insert("required".into(), Value::Array(required));
    }
    obj.insert("additionalProperties".into(), Value::Bool(false));
    Arc::new(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: &[Field] = &[
        Field::req("runId", Kind::Str, "run").or("flow_id"),
        Field::opt("note", Kind::Str, "note"),
    ];

    fn obj(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn aliases_unknown_and_missing() {
        let a = parse("t", FIELDS, &obj(json!({"flow_id": "r1"}))).unwrap();
        assert_eq!(a.str("runId"), Some("r1"));
        let e = parse("t", FIELDS, &obj(json!({"runId": "r", "epoch": 1}))).unwrap_err();
        assert!(e.contains("unknown field `epoch`") && e.contains("`runId` (or `flow_id`)"));
        let e = parse("t", FIELDS, &obj(json!({}))).unwrap_err();
        assert!(e.contains("missing required field `runId`"), "{e}");
        let e = parse("t", FIELDS, &obj(json!({"runId": 3}))).unwrap_err();
        assert!(e.contains("must be a string"));
        let e = parse("t", FIELDS, &obj(json!({"runId": "a", "flow_id": "b"}))).unwrap_err();
        assert!(e.contains("different values"));
    }
}
