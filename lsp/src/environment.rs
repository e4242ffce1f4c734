//! The environment input of each open document: the `stratum.toml` near it.
//!
//! Owns: finding a document's `stratum.toml` exactly as `stratumc check`
//! does (`CheckEnv::near_spec`: beside the file, else in the
//! server's current directory) and telling which file events concern it.
//! Must never: decide what the configuration means to a check (the
//! compiler's [`CheckEnv`] does), or read the document's text from disk.

use std::path::Path;

use lsp_types::Uri;
use stratum_compiler::env::CheckEnv;

use crate::uri;

/// The name of the file the environment comes from.
const FILE_NAME: &str = "stratum.toml";

/// The environment of the document at `uri`, and why its `stratum.toml`
/// could not be used when it could not (then it is no environment, as for
/// `stratumc check`). A document that is not a file (`untitled:`) has no
/// directory: only the current directory's file applies, as for a bare name.
pub fn near(doc: &Uri) -> (CheckEnv, Option<String>) {
    let path = uri::to_path(doc.as_str()).unwrap_or_default();
    let (env, unreadable) = CheckEnv::near_spec(Path::new(&path));
    let why =
        unreadable.map(|why| format!("{} is checked without its {FILE_NAME}: {why}", doc.as_str()));
    (env, why)
}

/// Whether a changed file (`workspace/didChangeWatchedFiles`) may be the
/// `stratum.toml` of some document.
pub fn is_config(changed: &Uri) -> bool {
    uri::to_path(changed.as_str())
        .is_some_and(|p| Path::new(&p).file_name().is_some_and(|n| n == FILE_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stratum_toml_is_a_config() {
        let u = |s: &str| s.parse::<Uri>().expect("a valid URI");
        assert!(is_config(&u("file:///w/stratum.toml")));
        assert!(!is_config(&u("file:///w/other.toml")));
        assert!(!is_config(&u("file:///w/stratum.toml.bak")));
        assert!(!is_config(&u("untitled:stratum.toml")));
    }
}
