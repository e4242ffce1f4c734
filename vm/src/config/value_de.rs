//! The small deserializer over toml's spanned values that gives every
//! error its dotted key path and line.
//!
//! Owns: walking `DeValue`s for serde and turning serde's errors into
//! [`Problem`]s.
//! Must never: accept a value serde did not ask for, or lose a span.

use super::*;

// ---------------------------------------------------------------------------
// The deserializer: toml's spanned values, errors with path and span

/// An error while deserializing: the problem, the path (innermost key
/// first) and the byte span of the innermost key or value it concerns.
#[derive(Debug)]
pub(super) struct DeError {
    pub(super) problem: Problem,
    pub(super) path: Vec<String>,
    pub(super) span: Option<Range<usize>>,
}

impl DeError {
    pub(super) fn new(problem: Problem) -> Self {
        DeError {
            problem,
            path: Vec::new(),
            span: None,
        }
    }

    /// The error seen from the table that holds `key`, at `span`.
    pub(super) fn within(mut self, key: &str, span: Range<usize>) -> Self {
        self.path.push(key.to_owned());
        self.span.get_or_insert(span);
        self
    }

    pub(super) fn located(mut self, text: &str) -> ConfigError {
        self.path.reverse();
        ConfigError::Key {
            file: FILE_NAME.to_owned(),
            path: self.path.join("."),
            line: self.span.map(|s| line_of(text, s.start)),
            problem: self.problem,
        }
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.problem)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError::new(Problem::Other(msg.to_string()))
    }

    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        let found = match unexp {
            de::Unexpected::Float(f) => f.to_string(),
            de::Unexpected::Unsigned(u) => u.to_string(),
            de::Unexpected::Signed(i) => i.to_string(),
            de::Unexpected::Str(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        DeError::new(Problem::Invalid {
            expected: exp.to_string(),
            found,
        })
    }

    fn unknown_field(_field: &str, expected: &'static [&'static str]) -> Self {
        DeError::new(Problem::UnknownKey { expected })
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        let what = if expected == Agent::NAMES {
            Agent::WHAT
        } else if expected == Stakes::NAMES {
            Stakes::WHAT
        } else {
            "name"
        };
        DeError::new(Problem::UnknownName { what, expected })
    }

    fn missing_field(field: &'static str) -> Self {
        DeError::new(Problem::Missing(field))
    }

    fn invalid_type(unexp: de::Unexpected<'_>, _exp: &dyn de::Expected) -> Self {
        DeError::new(Problem::Other(format!("unexpected {unexp}")))
    }
}

pub(super) fn type_of(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a datetime",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// One spanned toml value.
pub(super) struct ValueDe<'a, 'i>(pub(super) &'a Spanned<DeValue<'i>>);

impl ValueDe<'_, '_> {
    pub(super) fn wrong(&self, expected: &'static str) -> DeError {
        DeError::new(Problem::WrongType {
            expected,
            found: type_of(self.0.get_ref()),
        })
    }

    pub(super) fn integer(&self) -> Option<i128> {
        match self.0.get_ref() {
            DeValue::Integer(i) => i128::from_str_radix(i.as_str(), i.radix()).ok(),
            _ => None,
        }
    }

    pub(super) fn number(&self) -> Option<f64> {
        match self.0.get_ref() {
            DeValue::Float(f) => f.as_str().parse().ok(),
            DeValue::Integer(_) => self.integer().map(|i| i as f64),
            _ => None,
        }
    }
}

impl<'de> Deserializer<'de> for ValueDe<'_, '_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.get_ref() {
            DeValue::String(s) => visitor.visit_str(s),
            DeValue::Integer(_) => match self.integer().and_then(|i| i64::try_from(i).ok()) {
                Some(i) => visitor.visit_i64(i),
                None => Err(self.wrong("an integer that fits in 64 bits")),
            },
            DeValue::Float(_) => visitor.visit_f64(self.number().unwrap_or(f64::NAN)),
            DeValue::Boolean(b) => visitor.visit_bool(*b),
            DeValue::Datetime(d) => visitor.visit_string(d.to_string()),
            DeValue::Array(a) => {
                let items = a.iter().map(ValueDe);
                visitor.visit_seq(de::value::SeqDeserializer::new(items))
            }
            DeValue::Table(t) => visitor.visit_map(TableAccess::new(t)),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.number() {
            Some(n) => visitor.visit_f64(n),
            None => Err(self.wrong("a number")),
        }
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.integer().and_then(|i| u64::try_from(i).ok()) {
            Some(n) => visitor.visit_u64(n),
            None => Err(self.wrong("a non-negative integer")),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.get_ref() {
            DeValue::String(s) => visitor.visit_str(s),
            _ => Err(self.wrong("a string")),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.get_ref() {
            DeValue::Array(a) => {
                let items = a.iter().map(ValueDe);
                visitor.visit_seq(de::value::SeqDeserializer::new(items))
            }
            _ => Err(self.wrong("an array")),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.get_ref() {
            DeValue::Table(t) => visitor.visit_map(TableAccess::new(t)),
            _ => Err(self.wrong("a table")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_some(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u128 f32 char bytes byte_buf unit
        unit_struct newtype_struct tuple tuple_struct enum identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, DeError> for ValueDe<'_, '_> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

/// The entries of one table; every error below an entry gets the entry's key
/// prepended to its path.
pub(super) struct TableAccess<'a, 'i> {
    pub(super) entries: Vec<(
        &'a Spanned<toml::de::DeString<'i>>,
        &'a Spanned<DeValue<'i>>,
    )>,
    pub(super) next: usize,
}

impl<'a, 'i> TableAccess<'a, 'i> {
    pub(super) fn new(table: &'a DeTable<'i>) -> Self {
        TableAccess {
            entries: table.iter().collect(),
            next: 0,
        }
    }
}

impl<'de> MapAccess<'de> for TableAccess<'_, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, _)) = self.entries.get(self.next) else {
            return Ok(None);
        };
        let name: &str = key.get_ref();
        seed.deserialize(de::value::StrDeserializer::<DeError>::new(name))
            .map(Some)
            .map_err(|e| e.within(name, key.span()))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let Some((key, value)) = self.entries.get(self.next) else {
            return Err(DeError::new(Problem::Other(
                "a value was asked for past the table's end".to_owned(),
            )));
        };
        self.next += 1;
        seed.deserialize(ValueDe(value))
            .map_err(|e| e.within(key.get_ref(), value.span()))
    }
}
