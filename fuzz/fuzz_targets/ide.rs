//! Fuzz target: the language server's analysis (`stratum_compiler::ide`) on
//! arbitrary text and cursors, through the incremental database.
//!
//! Owns: feeding a text (then an edited copy of it, as an editor would) to
//! one `Db`, and asking every IDE query at a few cursors derived from the
//! input, asserting: no panic; the diagnostics equal `analyze` (the
//! incremental path adds nothing and loses nothing); every returned span lies
//! inside the text.
//! Must never: filter or repair inputs (a panic anywhere is a finding).

#![no_main]

use libfuzzer_sys::fuzz_target;
use stratum_compiler::analysis::analyze;
use stratum_compiler::ide::{self, Db};
use stratum_compiler::source::Span;

fn inside(text: &str, s: &Span) -> bool {
    s.start <= s.end && (s.end as usize) <= text.len()
}

fn probe(db: &Db, text: &str, seed: &[u8]) {
    let file = db.file("fuzz.stratum.yaml").expect("the file was just set");
    assert_eq!(ide::diagnostics(db, file), analyze(text).diagnostics);
    for s in ide::symbols(db, file) {
        assert!(inside(text, &s.range));
    }
    for s in ide::folding(db, file) {
        assert!(inside(text, &s));
    }
    let len = text.len() as u32;
    for a in ide::code_actions(db, file, Span::new(0, len)) {
        assert!(a.edits.iter().all(|e| inside(text, &e.span)));
    }
    for b in seed.iter().take(4) {
        let mut o = if len == 0 { 0 } else { u32::from(*b) * len / 255 };
        while o > 0 && !text.is_char_boundary(o as usize) {
            o -= 1;
        }
        if let Some(h) = ide::hover(db, file, o) {
            assert!(inside(text, &h.range));
        }
        if let Some(d) = ide::definition(db, file, o) {
            assert!(inside(text, &d));
        }
        assert!(ide::references(db, file, o, true).iter().all(|s| inside(text, s)));
        if ide::prepare_rename(db, file, o).is_some()
            && let Ok(edits) = ide::rename(db, file, o, "renamed_x")
        {
            assert!(edits.iter().all(|e| inside(text, &e.span)));
        }
        let _ = ide::completion(db, file, o);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut db = Db::new();
    db.set_text("fuzz.stratum.yaml", text.to_string());
    probe(&db, text, data);
    // an edit: drop the middle character, as a keystroke would
    let mut mid = text.len() / 2;
    while mid > 0 && !text.is_char_boundary(mid) {
        mid -= 1;
    }
    let mut edited = text.to_string();
    if mid < edited.len() {
        edited.remove(mid);
    }
    db.set_text("fuzz.stratum.yaml", edited.clone());
    probe(&db, &edited, data.get(4..).unwrap_or(&[]));
});
