//! The value rules of `stratum.toml`, one function each (ranges,
//! non-empty names, http(s) URLs, argv and env names, tables keyed by name).
//!
//! Owns: every rule about one value, used by serde's `deserialize_with`.
//! Must never: know which section a value is in beyond its own key.

use super::*;

// ---------------------------------------------------------------------------
// Value rules (one each)

/// A number the key's rule refuses.
pub(super) fn refused<E: de::Error>(n: f64, expected: &str) -> E {
    E::invalid_value(de::Unexpected::Float(n), &expected)
}

pub(super) fn number<'de, D: Deserializer<'de>>(
    d: D,
    ok: impl Fn(f64) -> bool,
    expected: &str,
) -> Result<Option<f64>, D::Error> {
    let n = f64::deserialize(d)?;
    if ok(n) {
        Ok(Some(n))
    } else {
        Err(refused(n, expected))
    }
}

pub(super) fn probability<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(d, |p| (0.0..=1.0).contains(&p), "between 0 and 1")
}

pub(super) fn non_negative<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(d, |n| n.is_finite() && n >= 0.0, "a finite number ≥ 0")
}

pub(super) fn temperature<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(
        d,
        |t| t.is_finite() && (0.0..=2.0).contains(&t),
        "between 0 and 2",
    )
}

pub(super) fn integer<'de, D: Deserializer<'de>>(
    d: D,
    range: RangeInclusive<u64>,
) -> Result<Option<u64>, D::Error> {
    let n = u64::deserialize(d)?;
    if range.contains(&n) {
        Ok(Some(n))
    } else {
        let expected = match range.end() {
            &u64::MAX => format!("at least {}", range.start()),
            end => format!("between {} and {end}", range.start()),
        };
        Err(de::Error::invalid_value(
            de::Unexpected::Unsigned(n),
            &expected.as_str(),
        ))
    }
}

pub(super) fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    integer(d, 1..=u64::MAX)
}

pub(super) fn judge_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    integer(d, 1..=MAX_JUDGE_TIMEOUT_MS)
}

/// One of a [`Choice`]'s names.
pub(super) fn choice<'de, D: Deserializer<'de>, T: Choice>(d: D) -> Result<Option<T>, D::Error> {
    let s = String::deserialize(d)?;
    T::from_name(&s).map(Some).ok_or_else(|| {
        let names = quoted(T::NAMES);
        de::Error::invalid_value(
            de::Unexpected::Str(&s),
            &format!("a {} ({names}){}", T::WHAT, mean(&s, T::NAMES)).as_str(),
        )
    })
}

/// A list of non-empty tool names (`["Read", "Bash(git diff:*)"]`).
pub(super) fn tool_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    if let Some(bad) = v.iter().find(|t| t.trim().is_empty() || t.contains(',')) {
        return Err(de::Error::invalid_value(
            de::Unexpected::Str(bad),
            &"a list of tool names, each non-empty and without a comma",
        ));
    }
    Ok(Some(v))
}

pub(super) fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim().is_empty() {
        return Err(de::Error::invalid_value(
            de::Unexpected::Str(&s),
            &"a non-empty string",
        ));
    }
    Ok(Some(s))
}

pub(super) fn http_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    if !(s.starts_with("http://") || s.starts_with("https://")) {
        return Err(de::Error::invalid_value(
            de::Unexpected::Str(&s),
            &"a URL that starts with http:// or https://",
        ));
    }
    Ok(Some(s))
}

/// `[store] url`: a location `crate::store::StoreLocation::parse` reads
/// (never echoed in the error: it could hold a password).
pub(super) fn store_url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    match crate::store::StoreLocation::parse(&s, "the value") {
        Ok(_) => Ok(s),
        Err(e) => Err(de::Error::custom(match e {
            crate::store::StoreError::Io(m) => m,
            other => other.to_string(),
        })),
    }
}

/// Whether `name` can name a judge: a letter, then letters, digits, `_` or
/// `-` (a bare TOML key, and a name a spec can write).
pub fn is_judge_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

pub(super) fn command_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    integer(d, 1..=MAX_COMMAND_TIMEOUT_MS)
}

pub(super) fn output_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    integer(d, 1..=MAX_COMMAND_OUTPUT_BYTES)
}

/// `argv`: a non-empty array of strings whose program is not empty.
pub(super) fn command_argv<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let argv = Vec::<String>::deserialize(d)?;
    match argv.first() {
        Some(program) if !program.trim().is_empty() => Ok(argv),
        _ => Err(de::Error::invalid_value(
            de::Unexpected::Seq,
            &"a non-empty array whose first element names the program, e.g. [\"python3\", \"-m\", \"pytest\"]",
        )),
    }
}

/// Whether `name` can name an environment variable passed to a command:
/// a letter or `_`, then letters, digits or `_`.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `env`: variable names.
pub(super) fn env_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    if let Some(bad) = names.iter().find(|n| !is_env_name(n)) {
        return Err(de::Error::invalid_value(
            de::Unexpected::Str(bad),
            &"an environment variable name: a letter or `_`, then letters, digits or `_`",
        ));
    }
    Ok(names)
}

/// `[commands.NAME]`: a table of command tables keyed by command names
/// (the same names as judges).
pub(super) fn command_tables<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, CommandSection>, D::Error> {
    struct Tables;
    impl<'de> Visitor<'de> for Tables {
        type Value = BTreeMap<String, CommandSection>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a table of `[commands.NAME]` tables")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = map.next_key::<String>()? {
                if !is_judge_name(&k) {
                    return Err(de::Error::invalid_value(
                        de::Unexpected::Str(&k),
                        &"a command name: a letter, then letters, digits, `_` or `-`",
                    ));
                }
                out.insert(k, map.next_value()?);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Tables)
}

/// `[judges.NAME]`: a table of judge tables keyed by judge names.
pub(super) fn judge_tables<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, JudgeSection>, D::Error> {
    struct Tables;
    impl<'de> Visitor<'de> for Tables {
        type Value = BTreeMap<String, JudgeSection>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a table of `[judges.NAME]` tables")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = map.next_key::<String>()? {
                if !is_judge_name(&k) {
                    return Err(de::Error::invalid_value(
                        de::Unexpected::Str(&k),
                        &"a judge name: a letter, then letters, digits, `_` or `-`",
                    ));
                }
                out.insert(k, map.next_value()?);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Tables)
}

/// The enums whose tables are keyed by name.
pub(super) trait Named: Sized + Copy + Ord {
    const WHAT: &'static str;
    const NAMES: &'static [&'static str];
    fn from_name(name: &str) -> Option<Self>;
}

impl Named for Agent {
    const WHAT: &'static str = Agent::WHAT;
    const NAMES: &'static [&'static str] = Agent::NAMES;
    fn from_name(name: &str) -> Option<Self> {
        Agent::from_name(name)
    }
}

impl Named for Stakes {
    const WHAT: &'static str = Stakes::WHAT;
    const NAMES: &'static [&'static str] = Stakes::NAMES;
    fn from_name(name: &str) -> Option<Self> {
        Stakes::from_name(name)
    }
}

/// A table of tables keyed by the names of `K`.
pub(super) fn by_name<'de, D, K, V>(d: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Named,
    V: Deserialize<'de>,
{
    struct Tables<K, V>(std::marker::PhantomData<(K, V)>);
    impl<'de, K: Named, V: Deserialize<'de>> Visitor<'de> for Tables<K, V> {
        type Value = BTreeMap<K, V>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a table of `[{}.NAME]` tables", K::WHAT)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = map.next_key_seed(NameSeed::<K>(std::marker::PhantomData))? {
                out.insert(k, map.next_value()?);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Tables(std::marker::PhantomData))
}

pub(super) struct NameSeed<K>(pub(super) std::marker::PhantomData<K>);

impl<'de, K: Named> DeserializeSeed<'de> for NameSeed<K> {
    type Value = K;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
        let name = String::deserialize(d)?;
        K::from_name(&name).ok_or_else(|| de::Error::unknown_variant(&name, K::NAMES))
    }
}
