//! One module per subcommand.
//!
//! Owns: the glue between arguments, files and the compiler's analysis API.
//! Must never: contain language rules.

pub mod build;
pub mod check;
pub mod explain;
