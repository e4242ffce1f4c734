//! Loading a YAML text in pieces that a cache can keep: the incremental path
//! of the language server.
//!
//! Owns: cutting a text into *chunks* — a block-sequence item that starts a
//! line (`- ` after some spaces) with every following line that is blank, a
//! comment or indented deeper, up to the first token of the next line at the
//! item's indentation or less — and a *skeleton*: the text with each chunk
//! replaced by a one-line placeholder item (`- ~`); loading the pieces with
//! [`super::load`] and putting each chunk's item in its placeholder's place,
//! with file positions. Every step is checked, and whenever the pieces might
//! not load exactly as the whole text does (a directive, a tab where
//! indentation is read, an anchor or alias anywhere, any diagnostic, a
//! placeholder that did not load as a null item, nesting near the limit)
//! [`load_with`] loads the whole text instead.
//! Must never: give a tree or diagnostics that differ from `load(text)`, or
//! read YAML syntax beyond line starts and indentation (saphyr parses).
//!
//! Why the pieces load alike: the skeleton and the text are equal up to a
//! chunk, so the parser reaches the chunk's `-` in the same state; the
//! item's lines are all indented deeper than its `-`, so they parse alike
//! whatever encloses the sequence; and the chunk ends where the whole text's
//! parser would close the item (the next token at that indentation or
//! less), which is where the placeholder's item closes in the skeleton.

use std::sync::Arc;

use super::{Loaded, MAX_DEPTH, Node, Value, load, load_noting_anchors};
use crate::source::Span;

/// Most chunks a text is cut into; a text with more is loaded whole (the
/// database keeps this many loaded chunks, so more could not all
/// stay cached, and a chunk costs more to load alone than inside its text).
pub const MAX_CHUNKS: usize = 16_384;

/// One chunk: where it is in the text and where its placeholder is in the
/// skeleton.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Where the chunk starts in the text (a line start).
    pub start: u32,
    /// Where it ends: the first token after the item, or the end of the text.
    pub end: u32,
    /// Spaces before the item's `-`.
    indent: u32,
    /// Where the placeholder starts in the skeleton.
    ph_start: u32,
    /// Where the placeholder ends in the skeleton (it corresponds to `end`).
    ph_end: u32,
}

impl Chunk {
    /// Where the placeholder's `~` is in the skeleton.
    fn tilde(&self) -> u32 {
        self.ph_start + self.indent + 2
    }
}

/// A text cut into chunks, and the rest of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The text with every chunk replaced by its placeholder.
    pub skeleton: String,
    /// The chunks, in text order.
    pub chunks: Vec<Chunk>,
}

/// What a line is, as far as cutting needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Only spaces (and a line break).
    Blank,
    /// A comment after the indentation.
    Comment,
    /// A block-sequence item: `-` then a space or the line's end.
    Item,
    /// Anything else.
    Other,
}

/// Cuts `text` into chunks at the outermost block-sequence items that start
/// a line. `None` when the text has no chunk, more than [`MAX_CHUNKS`], or a
/// feature that cutting could misread (a byte-order mark, a directive line, a
/// tab after the indentation).
pub fn cut(text: &str) -> Option<Cut> {
    if text.starts_with('\u{feff}') || u32::try_from(text.len()).is_err() {
        return None;
    }
    // (start, indent, kind) of every line
    let mut lines: Vec<(u32, u32, Kind)> = Vec::new();
    let mut start = 0usize;
    for line in text.split_inclusive('\n') {
        let indent = line.bytes().take_while(|&b| b == b' ').count();
        let rest = line[indent..].trim_end_matches('\n').trim_end_matches('\r');
        let kind = if rest.is_empty() {
            Kind::Blank
        } else if rest.starts_with('\t') || (indent == 0 && rest.starts_with('%')) {
            return None;
        } else if rest.starts_with('#') {
            Kind::Comment
        } else if rest == "-" || rest.starts_with("- ") {
            Kind::Item
        } else {
            Kind::Other
        };
        lines.push((start as u32, indent as u32, kind));
        start += line.len();
    }

    let mut skeleton = String::with_capacity(text.len() / 4);
    let mut chunks = Vec::new();
    let mut copied = 0usize;
    let mut i = 0;
    while i < lines.len() {
        let (line_start, indent, kind) = lines[i];
        if kind != Kind::Item {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < lines.len()
            && (matches!(lines[j].2, Kind::Blank | Kind::Comment) || lines[j].1 > indent)
        {
            j += 1;
        }
        let (end, next_indent) = match lines.get(j) {
            Some(&(s, ind, _)) => (s + ind, ind),
            None => (text.len() as u32, 0),
        };
        let ph_start = if copied > line_start as usize {
            // the previous placeholder ends with this line's indentation
            skeleton.len() as u32 - indent
        } else {
            skeleton.push_str(&text[copied..line_start as usize]);
            let at = skeleton.len() as u32;
            push_spaces(&mut skeleton, indent);
            at
        };
        skeleton.push_str("- ~\n");
        push_spaces(&mut skeleton, next_indent);
        chunks.push(Chunk {
            start: line_start,
            end,
            indent,
            ph_start,
            ph_end: skeleton.len() as u32,
        });
        copied = end as usize;
        i = j;
    }
    if chunks.is_empty() || chunks.len() > MAX_CHUNKS {
        return None;
    }
    skeleton.push_str(&text[copied..]);
    Some(Cut { skeleton, chunks })
}

fn push_spaces(s: &mut String, n: u32) {
    s.extend(std::iter::repeat_n(' ', n as usize));
}

/// A chunk loaded on its own: its item, with spans counted from the chunk's
/// start.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    node: Node,
    /// How deeply collections nest in the item (0 for a scalar).
    depth: usize,
}

/// Loads one chunk's text. `None` unless it loads, without any diagnostic,
/// anchor or alias, as a sequence of exactly one item.
pub fn load_item(chunk: &str) -> Option<Item> {
    let (loaded, anchored) = load_noting_anchors(chunk);
    if anchored || !loaded.diagnostics.is_empty() {
        return None;
    }
    let Value::Sequence(mut items) = loaded.root?.value else {
        return None;
    };
    if items.len() != 1 {
        return None;
    }
    let node = items.pop()?;
    let depth = depth(&node);
    Some(Item { node, depth })
}

fn depth(node: &Node) -> usize {
    match &node.value {
        Value::Sequence(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Mapping(entries) => 1 + entries.iter().map(|e| depth(&e.value)).max().unwrap_or(0),
        _ => 0,
    }
}

/// Loads `text` with the chunks' items from `items` (normally a cache of
/// [`load_item`] by chunk text): the same result as [`load`]`(text)`, which
/// it falls back to whenever the pieces do not fit.
pub fn load_with(text: &str, items: &dyn Fn(&str) -> Option<Arc<Item>>) -> Loaded {
    match splice(text, items) {
        Some(root) => Loaded {
            root: Some(root),
            diagnostics: Vec::new(),
        },
        None => load(text),
    }
}

/// The tree of `text` from the skeleton and the chunks' items, or `None`
/// when the pieces do not fit (then only [`load`] gives the answer).
pub fn splice(text: &str, items: &dyn Fn(&str) -> Option<Arc<Item>>) -> Option<Node> {
    let cut = cut(text)?;
    let (skeleton, anchored) = load_noting_anchors(&cut.skeleton);
    if anchored || !skeleton.diagnostics.is_empty() {
        return None;
    }
    let mut root = skeleton.root?;
    let loaded = cut
        .chunks
        .iter()
        .map(|c| items(&text[c.start as usize..c.end as usize]))
        .collect::<Option<Vec<_>>>()?;
    let mut placer = Placer {
        chunks: &cut.chunks,
        items: &loaded,
        placed: 0,
        fits: true,
    };
    placer.node(&mut root, 0);
    (placer.fits && placer.placed == cut.chunks.len()).then_some(root)
}

/// Moves a skeleton tree to file positions and puts the items in place.
struct Placer<'a> {
    chunks: &'a [Chunk],
    items: &'a [Arc<Item>],
    placed: usize,
    fits: bool,
}

impl Placer<'_> {
    /// A skeleton offset as a file offset.
    fn map(&self, at: u32) -> u32 {
        let i = self.chunks.partition_point(|c| c.ph_start <= at);
        let Some(c) = i.checked_sub(1).map(|i| &self.chunks[i]) else {
            return at;
        };
        if at >= c.ph_end {
            at - c.ph_end + c.end
        } else if at - c.ph_start <= c.indent + 2 {
            // the indentation and `- ` are the chunk's own
            c.start + (at - c.ph_start)
        } else {
            c.end
        }
    }

    fn span(&self, s: &mut Span) {
        *s = Span::new(self.map(s.start), self.map(s.end));
    }

    /// The chunk whose placeholder `node` is, if it is one.
    fn placeholder(&self, node: &Node) -> Option<usize> {
        if node.value != Value::Null {
            return None;
        }
        let i = self
            .chunks
            .binary_search_by_key(&node.span.start, Chunk::tilde)
            .ok()?;
        (node.span.end == node.span.start + 1).then_some(i)
    }

    /// `node` sits inside `open` collections.
    fn node(&mut self, node: &mut Node, open: usize) {
        if let Some(i) = self.placeholder(node) {
            let item = &self.items[i];
            // `load` refuses to open a collection past MAX_DEPTH; stay clear
            if open + item.depth >= MAX_DEPTH {
                self.fits = false;
                return;
            }
            let mut placed = item.node.clone();
            shift(&mut placed, self.chunks[i].start);
            *node = placed;
            self.placed += 1;
            return;
        }
        self.span(&mut node.span);
        match &mut node.value {
            Value::Sequence(items) => {
                for item in items {
                    self.node(item, open + 1);
                }
            }
            Value::Mapping(entries) => {
                for e in entries {
                    self.span(&mut e.key.span);
                    self.node(&mut e.value, open + 1);
                }
            }
            Value::String(s) => self.span(&mut s.span),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

/// Moves every span of `node` by `by` bytes.
fn shift(node: &mut Node, by: u32) {
    let mv = |s: &mut Span| *s = Span::new(s.start + by, s.end + by);
    mv(&mut node.span);
    match &mut node.value {
        Value::Sequence(items) => items.iter_mut().for_each(|n| shift(n, by)),
        Value::Mapping(entries) => {
            for e in entries {
                mv(&mut e.key.span);
                shift(&mut e.value, by);
            }
        }
        Value::String(s) => mv(&mut s.span),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(chunk: &str) -> Option<Arc<Item>> {
        load_item(chunk).map(Arc::new)
    }

    /// Loads through the pieces and asserts they were used and equal `load`.
    fn same(text: &str) {
        let whole = load(text);
        let root = splice(text, &fresh);
        assert_eq!(root.as_ref(), whole.root.as_ref(), "{text:?}");
        assert!(root.is_some(), "the pieces were not used for {text:?}");
        assert!(whole.diagnostics.is_empty());
    }

    /// Asserts the pieces were refused and the fallback equals `load`.
    fn falls_back(text: &str) {
        assert!(splice(text, &fresh).is_none(), "{text:?}");
        let whole = load(text);
        let via = load_with(text, &fresh);
        assert_eq!(via.root, whole.root);
        assert_eq!(via.diagnostics, whole.diagnostics);
    }

    #[test]
    fn cuts_outermost_items_and_keeps_the_rest() {
        let text = "a: 1\nsteps:\n  - id: x\n    ensure:\n      - p\n  # note\n\n  - id: y\nb: 2\n";
        let cut = cut(text).unwrap();
        assert_eq!(cut.chunks.len(), 2);
        let pieces: Vec<&str> = cut
            .chunks
            .iter()
            .map(|c| &text[c.start as usize..c.end as usize])
            .collect();
        assert_eq!(
            pieces,
            [
                "  - id: x\n    ensure:\n      - p\n  # note\n\n  ",
                "  - id: y\n"
            ]
        );
        assert_eq!(cut.skeleton, "a: 1\nsteps:\n  - ~\n  - ~\nb: 2\n");
    }

    #[test]
    fn pieces_load_as_the_whole_text() {
        same(
            "steps:\n  - id: x\n    ensure: [a, b]\n  - id: y\n    prompt: |\n      line\n\n      more\n  - id: z\nnext: 1\n",
        );
        // indentless sequence, nested sequences, comments at column 0
        same("steps:\n- id: a\n# c\n- - 1\n  - 2\n- \n  k: v\nz: 0");
        // non-ASCII before and inside chunks, CRLF line ends
        same("é: 中文\r\nsteps:\r\n  - id: 'é'\r\n    x: \"中\"\r\n  - 2\r\n");
        // keep-chomped block scalar at the end of a chunk
        same("s:\n  - p: |+\n      a\n\n  - q\n");
        // no trailing line break
        same("s:\n  - a: 1\n  - b");
        // a document start marker before the chunks
        same("---\ns:\n  - a\n");
    }

    #[test]
    fn refuses_what_the_pieces_could_misread() {
        // an anchor in one chunk, its alias in another
        falls_back("s:\n  - &x a\n  - *x\n");
        // an anchor in the skeleton
        falls_back("a: &y 1\ns:\n  - b\n");
        // a directive
        falls_back("%YAML 1.2\n---\ns:\n  - a\n");
        // `- ` inside a block scalar of the skeleton
        falls_back("p: |\n  - not an item\nq: 1\n");
        // a quoted scalar that spans a `- ` line
        falls_back("p: \"a\n- b\"\nq: 1\n");
        // a duplicate key inside a chunk (a diagnostic)
        falls_back("s:\n  - a: 1\n    a: 2\n");
        // a syntax error inside a chunk
        falls_back("s:\n  - a: [1\n");
        // a tab after the indentation
        falls_back("s:\n  - a\n\t- b\n");
        // nothing to cut
        falls_back("a: 1\n");
        // too many chunks to keep
        falls_back(&"- a\n".repeat(MAX_CHUNKS + 1));
        same(&"- a\n".repeat(MAX_CHUNKS));
    }

    #[test]
    fn depth_near_the_limit_falls_back() {
        let mut text = String::new();
        for i in 0..MAX_DEPTH {
            text.push_str(&" ".repeat(i * 2));
            text.push_str("- \n");
        }
        let whole = load(&text);
        let via = load_with(&text, &fresh);
        assert_eq!(via.root, whole.root);
        assert_eq!(via.diagnostics, whole.diagnostics);
    }
}
