//! File URIs ↔ paths.
//!
//! Owns: decoding `file://` URIs into the path used as the document's key in
//! the compiler's database (lsp-types 0.97's `Uri` keeps the path
//! percent-encoded), and the reverse for tests and tools.
//! Must never: touch the file system.

use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};

/// The path of a `file:` URI (`file:///a%20b/%C3%A9.yaml` → `/a b/é.yaml`),
/// or `None` for other schemes, remote hosts and undecodable paths.
pub fn to_path(uri: &str) -> Option<String> {
    let rest = strip_prefix_ignore_case(uri, "file://")?;
    // the authority: empty or `localhost`
    let path = if rest.starts_with('/') {
        rest
    } else {
        let slash = rest.find('/')?;
        let host = &rest[..slash];
        if !host.eq_ignore_ascii_case("localhost") {
            return None;
        }
        &rest[slash..]
    };
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let decoded = percent_decode_str(path).decode_utf8().ok()?.into_owned();
    // `file:///C:/x` names `C:/x` on Windows
    let bytes = decoded.as_bytes();
    if bytes.len() >= 3 && bytes[0] == b'/' && bytes[1].is_ascii_alphabetic() && bytes[2] == b':' {
        return Some(decoded[1..].to_string());
    }
    Some(decoded)
}

/// The key of a document: its file path, or the URI itself for other schemes
/// (`untitled:`), so every open document has one.
pub fn key(uri: &str) -> String {
    to_path(uri).unwrap_or_else(|| uri.to_string())
}

/// Characters escaped in a path segment of a URI.
const PATH: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// The `file://` URI of an absolute path.
pub fn from_path(path: &str) -> String {
    let path = path.replace('\\', "/");
    let lead = if path.starts_with('/') { "" } else { "/" };
    format!("file://{lead}{}", utf8_percent_encode(&path, PATH))
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_percent_escapes_and_hosts() {
        assert_eq!(
            to_path("file:///a%20b/%C3%A9.stratum.yaml").as_deref(),
            Some("/a b/é.stratum.yaml")
        );
        assert_eq!(
            to_path("file://localhost/x.yaml").as_deref(),
            Some("/x.yaml")
        );
        assert_eq!(to_path("FILE:///x").as_deref(), Some("/x"));
        assert_eq!(
            to_path("file:///c%3A/w/x.yaml").as_deref(),
            Some("c:/w/x.yaml")
        );
        assert_eq!(to_path("file://server/share/x"), None);
        assert_eq!(to_path("untitled:Untitled-1"), None);
        assert_eq!(to_path("file:///bad%FF"), None);
        assert_eq!(key("untitled:Untitled-1"), "untitled:Untitled-1");
    }

    #[test]
    fn encoding_round_trips() {
        for path in [
            "/tmp/a b/é 中文 😀.stratum.yaml",
            "/x/100%#?.yaml",
            "/plain",
        ] {
            let uri = from_path(path);
            assert!(uri.parse::<lsp_types::Uri>().is_ok(), "{uri}");
            assert_eq!(to_path(&uri).as_deref(), Some(path));
        }
    }
}
