//! Spanned YAML loading on top of `saphyr-parser`'s event stream.
//!
//! Owns: turning text into a [`Node`] tree where every key, scalar and
//! container carries a byte [`Span`]; YAML 1.2 core-schema scalar resolution;
//! refusing duplicate keys, several documents, custom tags and complex keys;
//! bounding alias expansion (in nodes and in bytes of text) and nesting depth; the map from offsets inside a
//! decoded scalar back to file offsets. Loading in cached pieces (the
//! incremental path) is [`chunked`].
//! Must never: know the Stratum schema (that is `syntax`), or hand-parse YAML
//! (the tokenizer and parser are saphyr's).

pub mod chunked;

use saphyr_parser::{Event, Parser, ScalarStyle, Span as YSpan};

use crate::diagnostics::{Code, Diagnostic};
use crate::source::Span;

/// Most nodes that alias expansion may produce (billion-laughs guard).
pub const ALIAS_LIMIT: usize = 100_000;
/// Most bytes of text (string scalars and mapping keys) that alias
/// expansion may produce: one large anchored scalar repeated is few nodes
/// but many bytes.
pub const ALIAS_BYTES_LIMIT: usize = 64 * 1024 * 1024;
/// Deepest nesting of collections accepted.
pub const MAX_DEPTH: usize = 64;

/// How a scalar was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Plain (unquoted).
    Plain,
    /// `'...'`.
    SingleQuoted,
    /// `"..."`.
    DoubleQuoted,
    /// `|` block.
    Literal,
    /// `>` block.
    Folded,
}

/// A string scalar together with where and how it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Str {
    /// The decoded value.
    pub text: String,
    /// The scalar in the file (quotes included).
    pub span: Span,
    /// How it was written.
    pub style: Style,
}

/// A YAML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `null`, `~` or empty.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// Any number (YAML ints and floats are IEEE doubles here, as in the original).
    Number(f64),
    /// A string scalar.
    String(Str),
    /// A sequence.
    Sequence(Vec<Node>),
    /// A mapping, in document order.
    Mapping(Vec<Entry>),
}

/// One key/value pair of a mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key text and its span.
    pub key: Str,
    /// The value.
    pub value: Node,
}

/// A YAML node with its span.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The value.
    pub value: Value,
    /// Where it is.
    pub span: Span,
}

impl Node {
    /// A short human name of the node's type, as used in "expected X, found Y".
    pub fn type_name(&self) -> &'static str {
        match &self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Sequence(_) => "a list",
            Value::Mapping(_) => "a mapping",
        }
    }

    /// The mapping entries, if this is a mapping.
    pub fn as_mapping(&self) -> Option<&[Entry]> {
        match &self.value {
            Value::Mapping(m) => Some(m),
            _ => None,
        }
    }

    /// The string, if this is a string scalar.
    pub fn as_str(&self) -> Option<&Str> {
        match &self.value {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

/// Converts saphyr's character indexes to byte offsets.
struct Offsets {
    /// Byte offset of each char index; empty when the text is ASCII.
    table: Vec<u32>,
    len: u32,
}

impl Offsets {
    fn new(text: &str) -> Offsets {
        let table = if text.is_ascii() {
            Vec::new()
        } else {
            let mut t: Vec<u32> = text.char_indices().map(|(i, _)| i as u32).collect();
            t.push(text.len() as u32);
            t
        };
        Offsets {
            table,
            len: text.len() as u32,
        }
    }

    fn byte(&self, char_index: usize) -> u32 {
        if self.table.is_empty() {
            (char_index as u32).min(self.len)
        } else {
            self.table.get(char_index).copied().unwrap_or(self.len)
        }
    }

    fn span(&self, s: YSpan) -> Span {
        Span::new(self.byte(s.start.index()), self.byte(s.end.index()))
    }
}

/// The result of loading: a tree when the text is well-formed YAML, plus diagnostics.
#[derive(Debug)]
pub struct Loaded {
    /// The document, or `None` when the text is not usable YAML.
    pub root: Option<Node>,
    /// Problems found while reading.
    pub diagnostics: Vec<Diagnostic>,
}

enum Frame {
    Seq {
        items: Vec<Node>,
        start: Span,
        anchor: usize,
    },
    Map {
        entries: Vec<Entry>,
        pending_key: Option<Str>,
        start: Span,
        anchor: usize,
    },
}

/// Loads one YAML document from `text`.
pub fn load(text: &str) -> Loaded {
    load_noting_anchors(text).0
}

/// Loading stopped: the diagnostic saying why is in the loader; the tree is
/// dropped.
struct Stop;

/// The state of one load: open collections, anchors, what aliases may still
/// expand to.
struct Loader<'t> {
    text: &'t str,
    offsets: Offsets,
    diagnostics: Vec<Diagnostic>,
    stack: Vec<Frame>,
    anchors: std::collections::HashMap<usize, Node>,
    /// Nodes that aliases may still produce ([`ALIAS_LIMIT`] at the start).
    alias_nodes: usize,
    /// Bytes of text that aliases may still produce ([`ALIAS_BYTES_LIMIT`]).
    alias_bytes: usize,
    documents: usize,
    root: Option<Node>,
    /// Whether the text had any anchor or alias.
    anchored: bool,
}

/// [`load`], and whether the text had any anchor or alias.
fn load_noting_anchors(text: &str) -> (Loaded, bool) {
    let mut loader = Loader {
        text,
        offsets: Offsets::new(text),
        diagnostics: Vec::new(),
        stack: Vec::new(),
        anchors: std::collections::HashMap::new(),
        alias_nodes: ALIAS_LIMIT,
        alias_bytes: ALIAS_BYTES_LIMIT,
        documents: 0,
        root: None,
        anchored: false,
    };
    let mut failed = false;
    for event in Parser::new_from_str(text) {
        let step = match event {
            Ok((event, yspan)) => loader.event(event, yspan),
            Err(err) => Err(loader.scan_error(&err)),
        };
        if step.is_err() {
            failed = true;
            break;
        }
    }
    let root = if failed { None } else { loader.root };
    let loaded = Loaded {
        root,
        diagnostics: loader.diagnostics,
    };
    (loaded, loader.anchored)
}

impl Loader<'_> {
    /// Records why loading stops.
    fn fail(&mut self, d: Diagnostic) -> Stop {
        self.diagnostics.push(d);
        Stop
    }

    fn scan_error(&mut self, err: &saphyr_parser::ScanError) -> Stop {
        let at = self.offsets.byte(err.marker().index());
        let span = Span::new(at, next_char_end(self.text, at));
        if err.info().contains("recursion limit") {
            return self.fail(too_deep(span));
        }
        self.fail(
            Diagnostic::new(
                Code::YamlSyntax,
                span,
                format!("invalid YAML: {}", err.info()),
            )
            .with_help("fix the YAML syntax first; every other check needs a well-formed document"),
        )
    }

    /// Handles one parser event: opens or closes a collection, or attaches a
    /// finished node to its parent.
    fn event(&mut self, event: Event<'_>, yspan: YSpan) -> Result<(), Stop> {
        let span = self.offsets.span(yspan);
        let node = match event {
            Event::DocumentStart(_) => return self.document(span),
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {
                return Ok(());
            }
            Event::SequenceStart(anchor, tag) => {
                return self.open(anchor, tag.as_deref(), span, false);
            }
            Event::MappingStart(anchor, tag) => {
                return self.open(anchor, tag.as_deref(), span, true);
            }
            Event::SequenceEnd | Event::MappingEnd => match self.close(span) {
                Some(node) => node,
                None => return Ok(()),
            },
            Event::Alias(id) => self.alias(id, span)?,
            Event::Scalar(value, style, anchor, tag) => {
                self.anchored |= anchor != 0;
                let node = resolve_scalar(&value, style, tag.as_deref(), span)
                    .map_err(|d| self.fail(*d))?;
                remember(&mut self.anchors, anchor, &node);
                node
            }
        };
        self.attach(node)
    }

    fn document(&mut self, span: Span) -> Result<(), Stop> {
        self.documents += 1;
        if self.documents > 1 {
            return Err(self.fail(
                Diagnostic::new(
                    Code::MultipleDocuments,
                    span,
                    "a spec file holds exactly one YAML document",
                )
                .with_help("move the other document to its own file"),
            ));
        }
        Ok(())
    }

    fn open(
        &mut self,
        anchor: usize,
        tag: Option<&saphyr_parser::Tag>,
        span: Span,
        mapping: bool,
    ) -> Result<(), Stop> {
        self.anchored |= anchor != 0;
        let core = if mapping { "!!map" } else { "!!seq" };
        if let Some(d) = refuse_opening(tag, span, core, self.stack.len()) {
            return Err(self.fail(d));
        }
        self.stack.push(if mapping {
            Frame::Map {
                entries: Vec::new(),
                pending_key: None,
                start: span,
                anchor,
            }
        } else {
            Frame::Seq {
                items: Vec::new(),
                start: span,
                anchor,
            }
        });
        Ok(())
    }

    /// Closes the innermost collection (`None` when nothing is open).
    fn close(&mut self, span: Span) -> Option<Node> {
        let (value, start, end, anchor) = match self.stack.pop()? {
            Frame::Seq {
                items,
                start,
                anchor,
            } => {
                let end = items.last().map_or(start.end, |n| n.span.end);
                (Value::Sequence(items), start, end, anchor)
            }
            Frame::Map {
                entries,
                start,
                anchor,
                ..
            } => {
                let end = entries
                    .last()
                    .map_or(start.end, |e| e.value.span.end.max(e.key.span.end));
                (Value::Mapping(entries), start, end, anchor)
            }
        };
        let node = Node {
            value,
            span: Span::new(start.start, end.max(span.end)),
        };
        remember(&mut self.anchors, anchor, &node);
        Some(node)
    }

    /// The copy of an anchored node, charged to both alias budgets.
    fn alias(&mut self, id: usize, span: Span) -> Result<Node, Stop> {
        self.anchored = true;
        let Some(target) = self.anchors.get(&id) else {
            return Err(self.fail(Diagnostic::new(
                Code::YamlSyntax,
                span,
                "alias refers to an unknown anchor",
            )));
        };
        let size = measure(target, self.alias_nodes, self.alias_bytes);
        if size.nodes > self.alias_nodes {
            return Err(self.fail(
                Diagnostic::new(
                    Code::AliasLimit,
                    span,
                    format!("YAML aliases expand to more than {ALIAS_LIMIT} nodes"),
                )
                .with_help("write the repeated parts out, or use fewer nested aliases"),
            ));
        }
        if size.bytes > self.alias_bytes {
            return Err(self.fail(
                Diagnostic::new(
                    Code::AliasBytesLimit,
                    span,
                    format!(
                        "YAML aliases expand to more than {} MiB ({ALIAS_BYTES_LIMIT} bytes) of text",
                        ALIAS_BYTES_LIMIT >> 20
                    ),
                )
                .with_help("do not repeat large text through aliases: write it once, or move it to a workspace file"),
            ));
        }
        self.alias_nodes -= size.nodes;
        self.alias_bytes -= size.bytes;
        let mut node = target.clone();
        node.span = span;
        Ok(node)
    }

    /// Puts a finished node into the open collection (or makes it the root).
    fn attach(&mut self, node: Node) -> Result<(), Stop> {
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries,
                pending_key,
                ..
            }) => match pending_key.take() {
                None => match key_of(&node) {
                    Ok(key) => *pending_key = Some(key),
                    Err(d) => return Err(self.fail(*d)),
                },
                Some(key) => match entries.iter().find(|e| e.key.text == key.text) {
                    Some(first) => {
                        let d = duplicate_key(&key, first.key.span);
                        self.diagnostics.push(d);
                    }
                    None => entries.push(Entry { key, value: node }),
                },
            },
        }
        Ok(())
    }
}

fn duplicate_key(key: &Str, first: Span) -> Diagnostic {
    Diagnostic::new(
        Code::DuplicateKey,
        key.span,
        format!("duplicate key `{}`", key.text),
    )
    .with_span_label("defined again here")
    .with_label(first, "first defined here")
    .with_help("remove one of the two entries; YAML mappings cannot repeat a key")
}

fn next_char_end(text: &str, at: u32) -> u32 {
    let at = at as usize;
    match text.get(at..).and_then(|rest| rest.chars().next()) {
        Some(c) => (at + c.len_utf8()) as u32,
        None => at as u32,
    }
}

/// Why a collection cannot be opened here (a tag, or `open` collections
/// already enclose it), if it cannot.
fn refuse_opening(
    tag: Option<&saphyr_parser::Tag>,
    span: Span,
    core: &str,
    open: usize,
) -> Option<Diagnostic> {
    check_tag(tag, span, Some(core)).or_else(|| (open >= MAX_DEPTH).then(|| too_deep(span)))
}

fn too_deep(span: Span) -> Diagnostic {
    Diagnostic::new(
        Code::NestingTooDeep,
        span,
        format!("YAML nested more than {MAX_DEPTH} levels deep"),
    )
    .with_help("a Stratum spec never needs this depth; flatten the structure")
}

fn remember(anchors: &mut std::collections::HashMap<usize, Node>, anchor: usize, node: &Node) {
    if anchor != 0 {
        anchors.insert(anchor, node.clone());
    }
}

/// The size of a tree: nodes (a mapping entry counts its key and its value)
/// and bytes of text (string scalars and keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Size {
    nodes: usize,
    bytes: usize,
}

/// Measures a tree, stopping once it has more than `nodes` nodes or
/// `bytes` bytes (the answer is then past the bound, not exact).
fn measure(node: &Node, nodes: usize, bytes: usize) -> Size {
    let mut size = Size { nodes: 0, bytes: 0 };
    let mut todo = vec![node];
    while let Some(n) = todo.pop() {
        size.nodes += 1;
        match &n.value {
            Value::Sequence(items) => todo.extend(items.iter()),
            Value::Mapping(entries) => {
                size.nodes += entries.len();
                for e in entries {
                    size.bytes += e.key.text.len();
                    todo.push(&e.value);
                }
            }
            Value::String(s) => size.bytes += s.text.len(),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
        if size.nodes > nodes || size.bytes > bytes {
            return size;
        }
    }
    size
}

fn key_of(node: &Node) -> Result<Str, Box<Diagnostic>> {
    let text = match &node.value {
        Value::String(s) => return Ok(s.clone()),
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format_number(*n),
        Value::Sequence(_) | Value::Mapping(_) => {
            return Err(Box::new(
                Diagnostic::new(
                    Code::ComplexKey,
                    node.span,
                    "mapping keys must be plain scalars",
                )
                .with_help("use a string as the key"),
            ));
        }
    };
    Ok(Str {
        text,
        span: node.span,
        style: Style::Plain,
    })
}

/// Formats a number the way the original engine prints it (`1` not `1.0`).
pub fn format_number(n: f64) -> String {
    if n.is_finite() && n.fract() == 0.0 && n.abs() < 1e21 {
        format!("{}", n as i64)
    } else if n.is_nan() {
        "NaN".to_string()
    } else if n.is_infinite() {
        if n > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        format!("{n}")
    }
}

fn check_tag(
    tag: Option<&saphyr_parser::Tag>,
    span: Span,
    allowed: Option<&str>,
) -> Option<Diagnostic> {
    let tag = tag?;
    let full = format!("{}{}", tag.handle, tag.suffix);
    let core = tag.handle == "!!" || tag.handle == "tag:yaml.org,2002:";
    if core && allowed.is_some_and(|a| a.trim_start_matches("!!") == tag.suffix) {
        return None;
    }
    Some(
        Diagnostic::new(
            Code::UnsupportedTag,
            span,
            format!("YAML tag `{full}` is not allowed here"),
        )
        .with_help("remove the tag; specs use plain YAML values"),
    )
}

fn resolve_scalar(
    value: &str,
    style: ScalarStyle,
    tag: Option<&saphyr_parser::Tag>,
    span: Span,
) -> Result<Node, Box<Diagnostic>> {
    let style = match style {
        ScalarStyle::Plain => Style::Plain,
        ScalarStyle::SingleQuoted => Style::SingleQuoted,
        ScalarStyle::DoubleQuoted => Style::DoubleQuoted,
        ScalarStyle::Literal => Style::Literal,
        ScalarStyle::Folded => Style::Folded,
    };
    let string = || Node {
        value: Value::String(Str {
            text: value.to_string(),
            span,
            style,
        }),
        span,
    };
    if let Some(tag) = tag {
        let core = tag.handle == "!!" || tag.handle == "tag:yaml.org,2002:";
        let resolved = if core {
            match tag.suffix.as_str() {
                "str" => Some(string()),
                "null" => matches!(value, "" | "~" | "null" | "Null" | "NULL").then_some(Node {
                    value: Value::Null,
                    span,
                }),
                "bool" => plain_bool(value).map(|b| Node {
                    value: Value::Bool(b),
                    span,
                }),
                "int" | "float" => plain_number(value).map(|n| Node {
                    value: Value::Number(n),
                    span,
                }),
                _ => None,
            }
        } else {
            None
        };
        return resolved.ok_or_else(|| {
            Box::new(
                Diagnostic::new(
                    Code::UnsupportedTag,
                    span,
                    format!(
                        "YAML tag `{}{}` is not allowed here",
                        tag.handle, tag.suffix
                    ),
                )
                .with_help("remove the tag; specs use plain YAML values"),
            )
        });
    }
    if style != Style::Plain {
        return Ok(string());
    }
    if matches!(value, "" | "~" | "null" | "Null" | "NULL") {
        return Ok(Node {
            value: Value::Null,
            span,
        });
    }
    if let Some(b) = plain_bool(value) {
        return Ok(Node {
            value: Value::Bool(b),
            span,
        });
    }
    if let Some(n) = plain_number(value) {
        return Ok(Node {
            value: Value::Number(n),
            span,
        });
    }
    Ok(string())
}

fn plain_bool(v: &str) -> Option<bool> {
    match v {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// YAML 1.2 core-schema numbers.
fn plain_number(v: &str) -> Option<f64> {
    match v {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    if let Some(hex) = v.strip_prefix("0x") {
        return (!hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| {
            u64::from_str_radix(hex, 16)
                .map(|n| n as f64)
                .unwrap_or(f64::INFINITY)
        });
    }
    if let Some(oct) = v.strip_prefix("0o") {
        return (!oct.is_empty() && oct.bytes().all(|b| (b'0'..=b'7').contains(&b))).then(|| {
            u64::from_str_radix(oct, 8)
                .map(|n| n as f64)
                .unwrap_or(f64::INFINITY)
        });
    }
    // [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
    let b = v.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    let mut frac_digits = 0;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        frac_digits = i - s;
    }
    if int_digits == 0 && frac_digits == 0 {
        return None;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == s {
            return None;
        }
    }
    if i != b.len() {
        return None;
    }
    v.parse::<f64>().ok()
}

/// Maps byte offsets inside a decoded scalar value to byte offsets in the file.
///
/// Built once per scalar (linear in its length) and then queried in O(1), so
/// a scalar with thousands of references costs linear time overall.
#[derive(Debug, Clone)]
pub enum OffsetMap {
    /// The value is the raw text shifted by this many bytes (plain or simply quoted scalars).
    Shift {
        /// File offset of the value's first byte.
        base: u32,
        /// Value length.
        len: u32,
    },
    /// One file offset per value byte, plus one for the end.
    Table(Vec<u32>),
    /// The value and the source could not be aligned: everything maps to the scalar's start.
    Start(u32),
}

impl OffsetMap {
    /// Builds the map by walking the decoded text and the raw source together:
    /// equal characters advance both; quotes, indentation and folded line
    /// breaks advance the source only; a double-quoted escape maps its decoded
    /// character to the backslash.
    pub fn new(source: &str, s: &Str) -> OffsetMap {
        let Some(raw) = source.get(s.span.range()) else {
            return OffsetMap::Start(s.span.start);
        };
        if s.style == Style::Plain && raw == s.text {
            return OffsetMap::Shift {
                base: s.span.start,
                len: s.text.len() as u32,
            };
        }
        if matches!(s.style, Style::SingleQuoted | Style::DoubleQuoted)
            && raw.len() == s.text.len() + 2
            && raw.get(1..raw.len() - 1) == Some(s.text.as_str())
        {
            return OffsetMap::Shift {
                base: s.span.start + 1,
                len: s.text.len() as u32,
            };
        }
        let raw_chars: Vec<(usize, char)> = raw.char_indices().collect();
        let mut table = vec![s.span.start; s.text.len() + 1];
        let mut j = usize::from(
            matches!(s.style, Style::SingleQuoted | Style::DoubleQuoted) && !raw_chars.is_empty(),
        );
        for (i, c) in s.text.char_indices() {
            let mut matched = None;
            while j < raw_chars.len() {
                let (pos, rc) = raw_chars[j];
                if s.style == Style::DoubleQuoted && rc == '\\' {
                    let (decoded, len) = decode_escape(&raw_chars[j..]);
                    j += len.max(1);
                    match decoded {
                        Some(d) if d == c => {
                            matched = Some(pos);
                            break;
                        }
                        _ => continue,
                    }
                }
                if s.style == Style::SingleQuoted && rc == '\'' && c == '\'' {
                    j += 2;
                    matched = Some(pos);
                    break;
                }
                j += 1;
                if rc == c {
                    matched = Some(pos);
                    break;
                }
            }
            let Some(pos) = matched else {
                return OffsetMap::Start(s.span.start);
            };
            for b in 0..c.len_utf8() {
                table[i + b] = s.span.start + pos as u32;
            }
        }
        // the end: just after the last matched character (a closing quote is excluded)
        let end = raw_chars.get(j).map_or(raw.len(), |&(p, _)| p);
        table[s.text.len()] = s.span.start + end as u32;
        OffsetMap::Table(table)
    }

    /// The file offset of value offset `offset` (clamped to the value's end).
    pub fn at(&self, offset: u32) -> u32 {
        match self {
            OffsetMap::Shift { base, len } => base + offset.min(*len),
            OffsetMap::Table(t) => t.get(offset as usize).or(t.last()).copied().unwrap_or(0),
            OffsetMap::Start(s) => *s,
        }
    }
}

/// Maps one byte offset inside a decoded scalar value to the file (builds an
/// [`OffsetMap`]; callers mapping many offsets of one scalar keep the map).
pub fn map_offset(source: &str, s: &Str, offset: u32) -> u32 {
    OffsetMap::new(source, s).at(offset)
}

/// Decodes one double-quoted escape; returns the char (if any) and how many chars it used.
fn decode_escape(chars: &[(usize, char)]) -> (Option<char>, usize) {
    let Some(&(_, kind)) = chars.get(1) else {
        return (None, 1);
    };
    let hex = |n: usize| -> (Option<char>, usize) {
        let digits: String = chars.iter().skip(2).take(n).map(|&(_, c)| c).collect();
        let c = u32::from_str_radix(&digits, 16)
            .ok()
            .and_then(char::from_u32);
        (c, 2 + n)
    };
    match kind {
        '0' => (Some('\0'), 2),
        'a' => (Some('\x07'), 2),
        'b' => (Some('\x08'), 2),
        't' | '\t' => (Some('\t'), 2),
        'n' => (Some('\n'), 2),
        'v' => (Some('\x0b'), 2),
        'f' => (Some('\x0c'), 2),
        'r' => (Some('\r'), 2),
        'e' => (Some('\x1b'), 2),
        ' ' => (Some(' '), 2),
        '"' => (Some('"'), 2),
        '/' => (Some('/'), 2),
        '\\' => (Some('\\'), 2),
        'N' => (Some('\u{85}'), 2),
        '_' => (Some('\u{a0}'), 2),
        'L' => (Some('\u{2028}'), 2),
        'P' => (Some('\u{2029}'), 2),
        'x' => hex(2),
        'u' => hex(4),
        'U' => hex(8),
        '\n' | '\r' => (None, 2),
        _ => (None, 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        let l = load(text);
        assert!(l.diagnostics.is_empty(), "{:?}", l.diagnostics);
        l.root.unwrap()
    }

    fn codes(text: &str) -> Vec<&'static str> {
        load(text)
            .diagnostics
            .iter()
            .map(|d| d.code.as_str())
            .collect()
    }

    #[test]
    fn scalars_follow_the_core_schema() {
        let r = root("a: yes\nb: 1.0\nc: ~\nd: True\ne: '1'\nf: .inf\ng: 0x1F\n");
        let m = r.as_mapping().unwrap();
        assert!(matches!(m[0].value.value, Value::String(_)));
        assert_eq!(m[1].value.value, Value::Number(1.0));
        assert_eq!(m[2].value.value, Value::Null);
        assert_eq!(m[3].value.value, Value::Bool(true));
        assert!(matches!(m[4].value.value, Value::String(_)));
        assert_eq!(m[5].value.value, Value::Number(f64::INFINITY));
        assert_eq!(m[6].value.value, Value::Number(31.0));
    }

    #[test]
    fn spans_are_bytes() {
        let text = "é: \"été\"\n";
        let r = root(text);
        let m = r.as_mapping().unwrap();
        assert_eq!(&text[m[0].key.span.range()], "é");
        assert_eq!(&text[m[0].value.span.range()], "\"été\"");
    }

    #[test]
    fn refusals() {
        assert_eq!(codes("a: 1\na: 2\n"), vec!["S0003"]);
        assert_eq!(codes("a: 1\n---\nb: 2\n"), vec!["S0004"]);
        assert_eq!(codes("a: !foo 1\n"), vec!["S0007"]);
        assert_eq!(codes("? [a]\n: 1\n"), vec!["S0008"]);
        assert_eq!(codes("a: [1\n"), vec!["S0002"]);
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(codes(&deep), vec!["S0006"]);
    }

    #[test]
    fn alias_bombs_are_bounded() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert_eq!(codes(&text), vec!["S0005"]);
        // small aliases are fine
        assert!(codes("a: &x {b: 1}\nc: *x\n").is_empty());
    }

    #[test]
    fn aliases_of_large_text_are_bounded_in_bytes() {
        // few nodes (under the node limit), many bytes: 1 MiB × 65 > 64 MiB
        let big = "x".repeat(1 << 20);
        let uses = vec!["*a"; 65].join(", ");
        let text = format!("a: &a {big}\nb: [{uses}]\n");
        let loaded = load(&text);
        let found: Vec<_> = loaded.diagnostics.iter().map(|d| d.code.as_str()).collect();
        assert_eq!(found, vec!["S0010"]);
        assert!(loaded.root.is_none());
        // the alias that crosses the budget is the one reported: the 65th
        let d = &loaded.diagnostics[0];
        let at = d.span.start as usize;
        assert_eq!(&text[at..at + 2], "*a");
        assert_eq!(text[..at].matches("*a").count(), 64);
        // 64 copies are exactly at the budget: accepted
        let uses = vec!["*a"; 64].join(", ");
        let text = format!("a: &a {big}\nb: [{uses}]\n");
        assert!(codes(&text).is_empty());
        // keys count too
        let key = "k".repeat(1 << 20);
        let uses = vec!["*m"; 65].join(", ");
        let text = format!("m: &m {{{key}: 1}}\nb: [{uses}]\n");
        assert_eq!(codes(&text), vec!["S0010"]);
    }

    #[test]
    fn measure_stops_past_either_bound() {
        let r = root("a: [x, yy, {zzz: 1}]\n");
        let full = measure(&r, usize::MAX, usize::MAX);
        // root map, key entry, seq, x, yy, inner map, its entry, 1
        assert_eq!(
            full,
            Size {
                nodes: 8,
                bytes: 1 + 1 + 2 + 3
            }
        );
        assert!(measure(&r, 3, usize::MAX).nodes > 3);
        assert!(measure(&r, usize::MAX, 2).bytes > 2);
    }

    #[test]
    fn offsets_map_into_every_style() {
        let cases = [
            ("k: result.x > 1\n", "result.x > 1"),
            ("k: \"result.x > 1\"\n", "result.x > 1"),
            ("k: 'a'' > 1'\n", "a' > 1"),
            ("k: \"\\u00e9 > 1\"\n", "é > 1"),
            ("k: |\n  result.x\n  > 1\n", "result.x\n> 1\n"),
            ("k: >\n  result.x\n  > 1\n", "result.x > 1\n"),
            ("k: result.x\n  > 1\n", "result.x > 1"),
        ];
        for (text, value) in cases {
            let r = root(text);
            let s = r.as_mapping().unwrap()[0].value.as_str().unwrap().clone();
            assert_eq!(s.text, value, "{text:?}");
            // the `1` at the end maps onto a `1` in the file
            let one = s.text.rfind('1').unwrap() as u32;
            let at = map_offset(text, &s, one) as usize;
            assert_eq!(&text[at..at + 1], "1", "{text:?}");
            let gt = s.text.find('>').unwrap() as u32;
            let at = map_offset(text, &s, gt) as usize;
            assert_eq!(&text[at..at + 1], ">", "{text:?}");
        }
    }
}
