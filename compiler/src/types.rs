//! The contract type language and the static types of values.
//!
//! Owns: parsing type strings (`string?`, `(a|b)[]`, `Review[]`, …) exactly in
//! the order of reference §2.2; [`FieldType`]/[`Type`] used by the checked IR,
//! reference typing and expression checking; structural compatibility.
//! Must never: report diagnostics itself (callers turn `Err` into one) or
//! look at YAML.

use serde::Serialize;

/// Index of a record (a contract, or a flow's input) in the type table.
pub type RecordId = usize;

/// A parsed type string, before contract names are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeExpr {
    /// `string`.
    String,
    /// `integer`.
    Integer,
    /// `number`.
    Number,
    /// `boolean`.
    Boolean,
    /// `object` (untyped map).
    Object,
    /// `array` (untyped list).
    Array,
    /// `a|b|c`.
    Enum(Vec<String>),
    /// `T[]`.
    List(Box<TypeExpr>),
    /// `Name` (a contract reference).
    Named(String),
}

/// Parses a type string; returns the type and whether it is optional.
///
/// The order of the rules is normative (reference §2.2): `a|b[]` is an array
/// of enum, `(string)[]` an array of the literal word `string`.
pub fn parse_type(text: &str) -> Result<(TypeExpr, bool), String> {
    let (rest, optional) = match text.strip_suffix('?') {
        Some(r) => (r, true),
        None => (text, false),
    };
    if rest.is_empty() || rest.ends_with('?') {
        return Err(if rest.ends_with('?') {
            "only one `?` is allowed".into()
        } else {
            "the type is empty".into()
        });
    }
    parse_base(rest).map(|t| (t, optional))
}

fn parse_base(t: &str) -> Result<TypeExpr, String> {
    if let Some(inner) = t.strip_prefix('(').and_then(|r| r.strip_suffix(")[]"))
        && !inner.is_empty()
        && !inner.contains(['(', ')'])
    {
        let pieces: Vec<String> = inner.split('|').map(str::to_string).collect();
        if pieces.iter().any(String::is_empty) {
            return Err("an enum has an empty value".into());
        }
        return Ok(TypeExpr::List(Box::new(TypeExpr::Enum(pieces))));
    }
    if let Some(prefix) = t.strip_suffix("[]") {
        if prefix.ends_with('?') {
            return Err(
                "list items cannot be optional (`T?[]`); write `T[]?` for an optional list".into(),
            );
        }
        if prefix.is_empty() {
            return Err("`[]` needs an item type before it".into());
        }
        return parse_base(prefix).map(|inner| TypeExpr::List(Box::new(inner)));
    }
    match t {
        "object" => return Ok(TypeExpr::Object),
        "array" => return Ok(TypeExpr::Array),
        "string" => return Ok(TypeExpr::String),
        "integer" => return Ok(TypeExpr::Integer),
        "number" => return Ok(TypeExpr::Number),
        "boolean" => return Ok(TypeExpr::Boolean),
        _ => {}
    }
    if t.contains('|') {
        let pieces: Vec<String> = t.split('|').map(str::to_string).collect();
        if pieces.iter().any(String::is_empty) {
            return Err("an enum has an empty value".into());
        }
        if pieces.iter().any(|p| p.contains(['[', ']', '(', ')'])) {
            return Err("enum values cannot contain `[`, `]`, `(` or `)`".into());
        }
        return Ok(TypeExpr::Enum(pieces));
    }
    let mut chars = t.chars();
    if matches!(chars.next(), Some('A'..='Z'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Ok(TypeExpr::Named(t.to_string()));
    }
    Err(format!("`{t}` is not a type"))
}

/// A resolved field type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldType {
    /// The type.
    pub ty: Ty,
    /// `T?`: absent or null allowed.
    pub optional: bool,
}

/// A resolved contract type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "of", rename_all = "snake_case")]
pub enum Ty {
    /// `string`.
    String,
    /// `integer`.
    Integer,
    /// `number`.
    Number,
    /// `boolean`.
    Boolean,
    /// `object`.
    Object,
    /// `array`.
    Array,
    /// An enum of literal strings.
    Enum(Vec<String>),
    /// `T[]`.
    List(Box<Ty>),
    /// A record (contract or flow input).
    Record(RecordId),
    /// A type that could not be resolved (already reported): accepts anything.
    Error,
}

/// A record: the fields of a contract or of a flow's input. Always closed (strict).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Record {
    /// Contract name, or `input of <flow>`.
    pub name: String,
    /// Fields in declaration order.
    pub fields: Vec<(String, FieldType)>,
}

impl Record {
    /// The type of a field.
    pub fn field(&self, name: &str) -> Option<&FieldType> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

/// The static type of a value in a reference or an expression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "of", rename_all = "snake_case")]
pub enum Type {
    /// Unknown: every operation is allowed.
    Any,
    /// `null`.
    Null,
    /// A boolean.
    Bool,
    /// A number (integers included).
    Number,
    /// A string.
    String,
    /// A string from a closed set.
    Enum(Vec<String>),
    /// A list of the given element type (`Any` for `array`).
    List(Box<Type>),
    /// An open object (`object`).
    Object,
    /// A closed record.
    Record(RecordId),
    /// `result` in `when`/`set`: step id → output (of the given flow index).
    Steps(usize),
    /// `steps` (X1): step id → the step's state (of the given flow index).
    StepStates(usize),
    /// `steps.<id>` (X1): the state of step `<id>` (a step index of the flow
    /// being checked): `status`, `output`, `failure`, `attempts`.
    StepState(usize),
    /// A step's failure (X1): `{reason: string, violations: [..]}` or `null`.
    Failure,
}

impl Type {
    /// The static type of values of a contract type.
    pub fn of(ty: &Ty) -> Type {
        match ty {
            Ty::String => Type::String,
            Ty::Integer | Ty::Number => Type::Number,
            Ty::Boolean => Type::Bool,
            Ty::Object => Type::Object,
            Ty::Array => Type::List(Box::new(Type::Any)),
            Ty::Enum(v) => Type::Enum(v.clone()),
            Ty::List(t) => Type::List(Box::new(Type::of(t))),
            Ty::Record(r) => Type::Record(*r),
            Ty::Error => Type::Any,
        }
    }

    /// Whether this is string-like (string or enum).
    pub fn is_stringy(&self) -> bool {
        matches!(self, Type::String | Type::Enum(_))
    }

    /// Whether this is an object-like value (keys can be tested with `in`).
    pub fn is_objecty(&self) -> bool {
        matches!(
            self,
            Type::Object
                | Type::Record(_)
                | Type::Steps(_)
                | Type::StepStates(_)
                | Type::StepState(_)
                | Type::Failure
        )
    }
}

/// The record table every type refers into.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TypeTable {
    /// Records: contracts first (declaration order), then flow inputs.
    pub records: Vec<Record>,
}

impl TypeTable {
    /// How a type is written in specs and messages.
    pub fn display(&self, t: &Type) -> String {
        match t {
            Type::Any => "any".into(),
            Type::Null => "null".into(),
            Type::Bool => "boolean".into(),
            Type::Number => "number".into(),
            Type::String => "string".into(),
            Type::Enum(v) => v.join("|"),
            Type::List(inner) => match **inner {
                Type::Any => "array".into(),
                Type::Enum(_) => format!("({})[]", self.display(inner)),
                _ => format!("{}[]", self.display(inner)),
            },
            Type::Object => "object".into(),
            Type::Record(r) => self
                .records
                .get(*r)
                .map_or_else(|| "record".into(), |r| r.name.clone()),
            Type::Steps(_) => "step outputs".into(),
            Type::StepStates(_) => "step states".into(),
            Type::StepState(_) => "step state".into(),
            Type::Failure => "failure".into(),
        }
    }

    /// How a contract type is written.
    pub fn display_ty(&self, t: &FieldType) -> String {
        let base = self.display(&Type::of(&t.ty));
        let base = if t.ty == Ty::Integer {
            "integer".to_string()
        } else {
            base
        };
        if t.optional { format!("{base}?") } else { base }
    }

    /// Whether two records have the same fields with the same types (structurally).
    pub fn same_record(&self, a: RecordId, b: RecordId) -> bool {
        self.same_record_depth(a, b, 0)
    }

    fn same_record_depth(&self, a: RecordId, b: RecordId, depth: usize) -> bool {
        if a == b {
            return true;
        }
        if depth > 32 {
            return false;
        }
        let (Some(ra), Some(rb)) = (self.records.get(a), self.records.get(b)) else {
            return false;
        };
        ra.fields.len() == rb.fields.len()
            && ra.fields.iter().all(|(n, ta)| {
                rb.field(n).is_some_and(|tb| {
                    ta.optional == tb.optional && self.same_ty(&ta.ty, &tb.ty, depth + 1)
                })
            })
    }

    fn same_ty(&self, a: &Ty, b: &Ty, depth: usize) -> bool {
        match (a, b) {
            (Ty::Record(x), Ty::Record(y)) => self.same_record_depth(*x, *y, depth),
            (Ty::List(x), Ty::List(y)) => self.same_ty(x, y, depth),
            (Ty::Error, _) | (_, Ty::Error) => true,
            _ => a == b,
        }
    }

    /// Whether a value of static type `actual` can satisfy `expected`.
    ///
    /// Only answers `false` when no value of `actual` could ever fit.
    pub fn fits(&self, actual: &Type, expected: &FieldType) -> bool {
        if matches!(actual, Type::Null) {
            return expected.optional;
        }
        self.fits_ty(actual, &expected.ty, 0)
    }

    fn fits_ty(&self, actual: &Type, expected: &Ty, depth: usize) -> bool {
        if depth > 32 {
            return true;
        }
        match (actual, expected) {
            (Type::Any, _) | (_, Ty::Error) => true,
            (Type::String, Ty::String | Ty::Enum(_)) => true,
            (Type::Enum(_), Ty::String) => true,
            (Type::Enum(vals), Ty::Enum(allowed)) => vals.iter().all(|v| allowed.contains(v)),
            (Type::Number, Ty::Number | Ty::Integer) => true,
            (Type::Bool, Ty::Boolean) => true,
            (
                Type::Object
                | Type::Record(_)
                | Type::Steps(_)
                | Type::StepStates(_)
                | Type::StepState(_)
                | Type::Failure,
                Ty::Object,
            ) => true,
            (Type::Object, Ty::Record(_)) => true,
            (Type::Record(a), Ty::Record(b)) => self.same_record(*a, *b),
            (Type::List(_), Ty::Array) => true,
            (Type::List(inner), Ty::List(e)) => self.fits_ty(inner, e, depth + 1),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> (TypeExpr, bool) {
        parse_type(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn reference_table_2_3() {
        for s in [
            "string",
            "integer",
            "number",
            "boolean",
            "object",
            "array",
            "string[]",
            "string[][]",
            "object[]",
            "array[]",
            "Review",
            "Review?",
            "Review[]",
        ] {
            ok(s);
        }
        assert_eq!(ok("string?"), (TypeExpr::String, true));
        assert_eq!(
            ok("string[]?"),
            (TypeExpr::List(Box::new(TypeExpr::String)), true)
        );
        let e = |v: &[&str]| TypeExpr::Enum(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(ok("draft|final").0, e(&["draft", "final"]));
        assert_eq!(ok("draft|final?"), (e(&["draft", "final"]), true));
        assert_eq!(
            ok("(draft|final)[]").0,
            TypeExpr::List(Box::new(e(&["draft", "final"])))
        );
        assert_eq!(
            ok("draft|final[]").0,
            TypeExpr::List(Box::new(e(&["draft", "final"])))
        );
        assert_eq!(ok("(draft)[]").0, TypeExpr::List(Box::new(e(&["draft"]))));
        assert_eq!(ok("(string)[]").0, TypeExpr::List(Box::new(e(&["string"]))));
        assert_eq!(ok("string|integer").0, e(&["string", "integer"]));
        assert_eq!(ok("low | high").0, e(&["low ", " high"]));
        assert_eq!(
            ok("(a|b)[][]").0,
            TypeExpr::List(Box::new(TypeExpr::List(Box::new(e(&["a", "b"])))))
        );
        for bad in [
            "string??",
            "?",
            "",
            "string?[]",
            "(draft|final)",
            "draft",
            "a||b",
            "|a",
            "a|",
            "(a|b)?[]",
            "date",
            "int",
            "float",
            "any",
            "null",
            "Str ing",
        ] {
            assert!(parse_type(bad).is_err(), "{bad} should be invalid");
        }
    }
}
