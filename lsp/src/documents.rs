//! The open documents.
//!
//! Owns: the table URI → open document (its key in the compiler's database,
//! the client's version, the salsa file handle, the line map of its current
//! text), and applying the client's full and incremental text changes.
//! Must never: analyse text (the compiler's `ide` API does), or read files
//! from disk (the client's buffer is the truth while a document is open).

use std::collections::HashMap;

use lsp_types::{TextDocumentContentChangeEvent, Uri};
use stratum_compiler::ide::{Db, FileId};

use crate::convert::LineMap;
use crate::uri;

/// One document the client has open.
#[derive(Debug)]
pub struct Document {
    /// The key in the database: the decoded file path (or the URI for other schemes).
    pub key: String,
    /// The client's version of the text.
    pub version: i32,
    /// The database handle.
    pub file: FileId,
    /// Line map of the current text.
    pub lines: LineMap,
}

/// The open documents, by URI.
#[derive(Debug, Default)]
pub struct Documents {
    open: HashMap<Uri, Document>,
}

impl Documents {
    /// Opens (or re-opens) a document with its full text.
    pub fn open(&mut self, db: &mut Db, uri: Uri, version: i32, text: String) -> &Document {
        let key = uri::key(uri.as_str());
        let lines = LineMap::new(&text);
        let file = db.set_text(&key, text);
        let doc = Document {
            key,
            version,
            file,
            lines,
        };
        self.open.insert(uri.clone(), doc);
        &self.open[&uri]
    }

    /// Applies the client's changes in order (each one is relative to the
    /// text left by the previous one). `None` when the document is not open.
    pub fn change(
        &mut self,
        db: &mut Db,
        uri: &Uri,
        version: i32,
        changes: Vec<TextDocumentContentChangeEvent>,
    ) -> Option<&Document> {
        let doc = self.open.get_mut(uri)?;
        let mut text = db.text(doc.file).to_string();
        let mut lines = doc.lines.clone();
        for change in changes {
            match change.range {
                Some(range) => {
                    let span = lines.span(&text, range);
                    text.replace_range(span.range(), &change.text);
                }
                None => text = change.text,
            }
            lines = LineMap::new(&text);
        }
        doc.lines = lines;
        doc.version = version;
        doc.file = db.set_text(&doc.key, text);
        Some(doc)
    }

    /// Closes a document; its diagnostics should be cleared by the caller.
    pub fn close(&mut self, db: &mut Db, uri: &Uri) {
        if let Some(doc) = self.open.remove(uri) {
            // another URI may name the same file (`file://localhost/x`)
            if !self.open.values().any(|d| d.key == doc.key) {
                db.remove(&doc.key);
            }
        }
    }

    /// The URIs of the open documents, in no particular order.
    pub fn uris(&self) -> Vec<Uri> {
        self.open.keys().cloned().collect()
    }

    /// An open document.
    pub fn get(&self, uri: &Uri) -> Option<&Document> {
        self.open.get(uri)
    }
}
