//! Template rendering at run time (reference v1-language §5.6): full-value
//! references keep their type, a `do` task's single reference must be a
//! string, interpolation inserts JavaScript text.
//!
//! Owns: walking a reference path through a value, the three
//! [`TemplateMode`]s, and the interpolation text of each value type
//! (string as is, `null` empty, numbers and booleans as JavaScript text,
//! arrays and objects as compact JSON), and the size limit of the text it
//! builds ([`MAX_VALUE_BYTES`], an error past it), and why a rendering
//! fails ([`RenderError`]).
//! Must never: re-scan substituted text for `${…}` (inserted values are
//! verbatim), read bindings other than through [`RefValues`], or panic.

use std::borrow::Cow;

use super::value::{MAX_VALUE_BYTES, Value, compact_json_within, js_string, too_large_message};
use crate::plan::{PieceDef, Plan, RefDef, RefTarget, Seg, TemplateDef, TemplateMode};

/// The message of a reference that resolves to nothing.
pub const UNAVAILABLE: &str = "reference output is unavailable (the source may have been skipped)";

/// The message of a `do` task whose single reference is not a string.
pub const NOT_A_STRING: &str = "do task must render to a string";

/// Why a template could not be rendered. Displays as the reason a step's
/// attempt fails with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A full-value template that is not exactly one reference (only a
    /// malformed plan has one).
    #[error("a full-value template must be exactly one reference")]
    NotOneReference,
    /// A reference resolves to nothing ([`UNAVAILABLE`]).
    #[error("{}", UNAVAILABLE)]
    Unavailable,
    /// A `do` task's single reference is not a string ([`NOT_A_STRING`]).
    #[error("{}", NOT_A_STRING)]
    NotAString,
    /// A text piece names a string the plan does not have.
    #[error("template text #{0} is out of range")]
    TextOutOfRange(u32),
    /// The text would pass [`MAX_VALUE_BYTES`].
    #[error("resource_limit: {}", too_large_message("the template", None))]
    TooLarge,
}

/// The values references start from.
pub trait RefValues {
    /// The value of a reference target (`None`: no value, e.g. a skipped
    /// step or an unmaterialized carry variable). Borrow when the value is
    /// stored; own it when it has to be computed.
    fn value(&self, target: RefTarget) -> Option<Cow<'_, Value>>;
}

/// The value a reference points at, or `None` when any piece of the path
/// is missing (absent field, index out of range, traversal through a
/// non-container).
pub fn resolve<'v>(plan: &Plan, r: &RefDef, refs: &'v dyn RefValues) -> Option<Cow<'v, Value>> {
    let mut v = refs.value(r.target)?;
    for seg in &r.path {
        v = match (seg, v) {
            (Seg::Field(name), Cow::Borrowed(Value::Object(o))) => {
                Cow::Borrowed(o.get(plan.strings.get(*name as usize)?)?)
            }
            (Seg::Field(name), Cow::Owned(Value::Object(mut o))) => {
                Cow::Owned(o.remove(plan.strings.get(*name as usize)?)?)
            }
            (Seg::Index(i), Cow::Borrowed(Value::Array(a))) => Cow::Borrowed(a.get(*i as usize)?),
            (Seg::Index(i), Cow::Owned(Value::Array(mut a))) => {
                let i = *i as usize;
                if i >= a.len() {
                    return None;
                }
                Cow::Owned(a.swap_remove(i))
            }
            _ => return None,
        };
    }
    Some(v)
}

/// Renders template `t` of a flow of `plan`.
pub fn render(plan: &Plan, t: &TemplateDef, refs: &dyn RefValues) -> Result<Value, RenderError> {
    if t.mode != TemplateMode::Interpolate {
        let [PieceDef::Ref(r)] = t.pieces.as_slice() else {
            return Err(RenderError::NotOneReference);
        };
        let v = resolve(plan, r, refs).ok_or(RenderError::Unavailable)?;
        return match (t.mode, &*v) {
            (TemplateMode::FullValueString, Value::String(_)) | (TemplateMode::FullValue, _) => {
                Ok(v.into_owned())
            }
            _ => Err(RenderError::NotAString),
        };
    }
    let mut out = String::new();
    for p in &t.pieces {
        match p {
            PieceDef::Text(s) => match plan.strings.get(*s as usize) {
                Some(s) => push_within(&mut out, s)?,
                None => return Err(RenderError::TextOutOfRange(*s)),
            },
            PieceDef::Ref(r) => match &*resolve(plan, r, refs).ok_or(RenderError::Unavailable)? {
                Value::String(s) => push_within(&mut out, s)?,
                Value::Null => {}
                v @ (Value::Array(_) | Value::Object(_)) => {
                    let room = MAX_VALUE_BYTES - out.len();
                    let text = compact_json_within(v, room).ok_or(RenderError::TooLarge)?;
                    out.push_str(&text);
                }
                v => push_within(&mut out, &js_string(v))?,
            },
        }
    }
    Ok(Value::String(out))
}

/// Appends `s`, unless the text would pass [`MAX_VALUE_BYTES`].
fn push_within(out: &mut String, s: &str) -> Result<(), RenderError> {
    if out.len().saturating_add(s.len()) > MAX_VALUE_BYTES {
        return Err(RenderError::TooLarge);
    }
    out.push_str(s);
    Ok(())
}
