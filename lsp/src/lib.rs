//! stratum-lsp: the language server of stratumc (`stratumc lsp`).
//!
//! Owns: the LSP protocol edge: the closed set of events ([`event`]), the
//! main loop and shutdown ([`server`]), one handler per method
//! ([`handlers`]), the open documents ([`documents`]) and their
//! environment input ([`environment`]: the `stratum.toml` near each), UTF-16 position
//! conversion ([`convert`], the only place that counts UTF-16 units) and
//! file URIs ([`uri`]).
//! Must never: implement a language rule (everything comes from
//! `stratum_compiler::ide`), or write to stdout outside the protocol.

pub mod convert;
mod documents;
mod environment;
mod event;
mod handlers;
mod server;
pub mod uri;

pub use server::{Ending, capabilities, run_stdio, serve};
