//! The syntax layer: the v1 schema as a spanned tree, and its decoder.
//!
//! Owns: [`ast`] (plain data) and [`decode`] (YAML tree → AST).
//! Must never: resolve names or types.

pub mod ast;
pub mod decode;
