//! Pure evaluation over JSON values: expressions (bytecode chunks), output
//! contracts, templates and `matches` patterns — everything the interpreter
//! computes from values without touching the run store or the outside world.
//!
//! Owns: [`value`] (equality, truthiness, JavaScript text forms), [`expr`]
//! (the bytecode evaluator and its error codes), [`contract`] (strict
//! record checks), [`template`] (rendering), [`regex`] (the `matches`
//! safe-shape filter, shared with the compiler's static check), `forms`
//! (the X3 built-ins: lambda forms, `unique`, `keys`, `coalesce`,
//! `digest`, the values of `file()` and `glob()`).
//! Must never: perform I/O (file functions go through [`expr::Files`]),
//! keep state between calls, or panic on any plan or value.

pub mod contract;
pub mod expr;
mod forms;
pub mod regex;
pub mod template;
pub mod value;

pub use contract::{ContractError, Problem, check_record, check_type};
pub use expr::{
    Bindings, EvalError, Files, NO_RECEIPTS, NoFiles, ResultBinding, StepOutputs, StepStates, eval,
    eval_bool, eval_with_steps,
};
pub use forms::FILE_FIELDS;
pub use regex::PatternError;
pub use template::{RefValues, RenderError, render};
pub use value::{
    Value, canonical_digest, canonical_json, compact_json, equal, js_number, sha256_hex, truthy,
    type_name,
};
