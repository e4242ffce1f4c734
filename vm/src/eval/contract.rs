//! Contract checks at run time: does a JSON value satisfy a record (a
//! contract or a flow input) or a field type (reference v1-language §2.5,
//! decision C7: an `integer` is a finite number with no fraction).
//!
//! Owns: strictness at every record level (unknown keys fail), optional vs
//! required (optional accepts absent or `null`; required rejects `null`),
//! and the path-naming errors ([`ContractError`]: `output.items[2].name:
//! expected string, found number`).
//! Must never: panic, or follow a value deeper than [`MAX_DEPTH`] levels
//! (the walk recurses once per container level of the value, so that bound
//! also bounds the recursion, even for a hostile plan whose records refer
//! to themselves).

use std::fmt::Write as _;

use super::value::{MAX_DEPTH, Value, type_name, write_json_string};
use crate::plan::{BaseType, Plan, StrId, TypeDef};

/// Where a value breaks its contract and how. Displays as
/// `<path>: <problem>` (`output.items[2].name: expected string, found number`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct ContractError {
    /// The value's path from the root (`output.items[2].name`, `input`).
    pub path: String,
    /// What is wrong there.
    pub problem: Problem,
}

/// What is wrong with a value at a [`ContractError`]'s path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Another type or value was expected (`expected string, found number`,
    /// `expected integer, found 1.5`, `expected one of "a", "b", found "c"`).
    #[error("expected {expected}, found {found}")]
    Expected {
        /// The type or the values allowed.
        expected: String,
        /// The type found, or the value itself for integers and enums.
        found: String,
    },
    /// A required field is absent.
    #[error("missing required field `{0}`")]
    MissingField(String),
    /// A field the record does not declare (records are strict).
    #[error("unknown field `{0}`")]
    UnknownField(String),
    /// The value nests deeper than [`MAX_DEPTH`] levels.
    #[error("value nested deeper than {} levels", MAX_DEPTH)]
    TooDeep,
    /// The plan names a record it does not have.
    #[error("unknown contract #{0}")]
    UnknownContract(u32),
}

type R = Result<(), ContractError>;

/// Checks `v` against record `record` of `plan`; paths start at `output`.
pub fn check_record(plan: &Plan, record: u32, v: &Value) -> R {
    check_record_at(plan, record, v, "output")
}

/// [`check_record`] with another name for the root (`input`, `with`, …).
pub fn check_record_at(plan: &Plan, record: u32, v: &Value, root: &str) -> R {
    let mut w = Walk {
        plan,
        root,
        path: Vec::new(),
    };
    w.record(record, v, 0)
}

/// Checks `v` against a field type; `optional` accepts `null`. Paths
/// start at `output`.
pub fn check_type(plan: &Plan, ty: &TypeDef, optional: bool, v: &Value) -> R {
    let mut w = Walk {
        plan,
        root: "output",
        path: Vec::new(),
    };
    w.ty(ty, optional, v, 0)
}

enum Seg<'v> {
    Field(&'v str),
    Index(usize),
}

struct Walk<'p, 'v> {
    plan: &'p Plan,
    root: &'p str,
    path: Vec<Seg<'v>>,
}

impl<'v> Walk<'_, 'v> {
    fn fail(&self, problem: Problem) -> R {
        let mut at = self.root.to_string();
        for s in &self.path {
            match s {
                Seg::Field(f) => {
                    at.push('.');
                    at.push_str(f);
                }
                Seg::Index(i) => {
                    let _ = write!(at, "[{i}]");
                }
            }
        }
        Err(ContractError { path: at, problem })
    }

    fn expected(&self, expected: String, found: String) -> R {
        self.fail(Problem::Expected { expected, found })
    }

    fn mismatch(&self, want: &str, v: &Value) -> R {
        self.expected(want.to_string(), type_name(v).to_string())
    }

    /// `depth`: containers entered so far.
    fn enter(&self, depth: usize) -> Result<usize, ContractError> {
        if depth >= MAX_DEPTH {
            self.fail(Problem::TooDeep)?;
        }
        Ok(depth + 1)
    }

    fn record(&mut self, r: u32, v: &'v Value, depth: usize) -> R {
        let Some(rec) = self.plan.records.get(r as usize) else {
            return self.fail(Problem::UnknownContract(r));
        };
        let Value::Object(o) = v else {
            return self.mismatch("object", v);
        };
        let depth = self.enter(depth)?;
        for f in &rec.fields {
            let name = self.plan.str(f.name);
            match o.get_key_value(name) {
                None if f.optional => {}
                None => return self.fail(Problem::MissingField(name.to_string())),
                Some((k, fv)) => {
                    self.path.push(Seg::Field(k));
                    self.ty(&f.ty, f.optional, fv, depth)?;
                    self.path.pop();
                }
            }
        }
        if let Some(k) = o.keys().find(|k| {
            !rec.fields
                .iter()
                .any(|f| self.plan.str(f.name) == k.as_str())
        }) {
            return self.fail(Problem::UnknownField(k.clone()));
        }
        Ok(())
    }

    fn ty(&mut self, ty: &TypeDef, optional: bool, v: &'v Value, depth: usize) -> R {
        if optional && v.is_null() {
            return Ok(());
        }
        self.levels(ty, ty.list_depth, v, depth)
    }

    /// `levels` list levels around `ty.base`.
    fn levels(&mut self, ty: &TypeDef, levels: u8, v: &'v Value, depth: usize) -> R {
        if levels == 0 {
            return self.base(&ty.base, v, depth);
        }
        let Value::Array(items) = v else {
            return self.mismatch("array", v);
        };
        let depth = self.enter(depth)?;
        for (i, e) in items.iter().enumerate() {
            self.path.push(Seg::Index(i));
            self.levels(ty, levels - 1, e, depth)?;
            self.path.pop();
        }
        Ok(())
    }

    fn base(&mut self, base: &BaseType, v: &'v Value, depth: usize) -> R {
        match (base, v) {
            (BaseType::String, Value::String(_))
            | (BaseType::Number, Value::Number(_))
            | (BaseType::Boolean, Value::Bool(_))
            | (BaseType::Object, Value::Object(_))
            | (BaseType::Array, Value::Array(_)) => Ok(()),
            (BaseType::Integer, Value::Number(n)) => match n.as_f64() {
                Some(x) if x.is_finite() && x.fract() == 0.0 => Ok(()),
                _ => self.expected("integer".to_string(), n.to_string()),
            },
            (BaseType::Enum(values), Value::String(s)) => self.one_of(values, s),
            (BaseType::Record(r), _) => self.record(*r, v, depth),
            (BaseType::String, _) => self.mismatch("string", v),
            (BaseType::Integer, _) => self.mismatch("integer", v),
            (BaseType::Number, _) => self.mismatch("number", v),
            (BaseType::Boolean, _) => self.mismatch("boolean", v),
            (BaseType::Object, _) => self.mismatch("object", v),
            (BaseType::Array, _) => self.mismatch("array", v),
            (BaseType::Enum(_), _) => self.mismatch("string", v),
        }
    }

    /// An enum's string: one of `values` (the found text is cut at 40
    /// characters).
    fn one_of(&self, values: &[StrId], s: &str) -> R {
        if values.iter().any(|id| self.plan.str(*id) == s) {
            return Ok(());
        }
        let mut want = String::from("one of ");
        for (i, id) in values.iter().enumerate() {
            if i > 0 {
                want.push_str(", ");
            }
            write_json_string(&mut want, self.plan.str(*id));
        }
        let mut found = String::new();
        let cut: String = s.chars().take(40).collect();
        write_json_string(&mut found, &cut);
        if cut.len() < s.len() {
            found.push('…');
        }
        self.expected(want, found)
    }
}
