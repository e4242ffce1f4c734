//! Positions between the compiler and the protocol: byte offsets ↔ LSP
//! UTF-16 positions.
//!
//! Owns: [`LineMap`], the one place where a byte offset (`Span`) becomes an
//! LSP `Position`/`Range` and back. Out-of-range or mid-character positions
//! from a client are clamped (to the line end, the text end, or the start of
//! the character), never rejected or allowed to panic.
//! Must never: know about diagnostics, documents or the protocol's messages;
//! the rest of the crate never counts UTF-16 units itself.

use line_index::{LineCol, LineIndex, TextSize, WideEncoding, WideLineCol};
use lsp_types::{Position, Range};
use stratum_compiler::Span;

/// Line table of one text, for converting positions both ways.
#[derive(Debug, Clone)]
pub struct LineMap {
    index: LineIndex,
    len: u32,
}

impl LineMap {
    /// Indexes `text`. A text of 4 GiB or more (which `line-index` refuses
    /// with a panic; no JSON message could carry it anyway) is indexed as
    /// empty, so every position clamps to the start.
    pub fn new(text: &str) -> LineMap {
        let text = if text.len() < u32::MAX as usize {
            text
        } else {
            ""
        };
        LineMap {
            index: LineIndex::new(text),
            len: text.len() as u32,
        }
    }

    /// The LSP position (UTF-16 column) of a byte offset in `text`.
    /// The offset is clamped into the text and back onto a char boundary.
    pub fn position(&self, text: &str, offset: u32) -> Position {
        let offset = floor_char_boundary(text, offset.min(self.len));
        let utf8 = self
            .index
            .try_line_col(TextSize::from(offset))
            .unwrap_or(LineCol { line: 0, col: 0 });
        let wide = self
            .index
            .to_wide(WideEncoding::Utf16, utf8)
            .unwrap_or(WideLineCol {
                line: utf8.line,
                col: utf8.col,
            });
        Position::new(wide.line, wide.col)
    }

    /// The LSP range of a byte span.
    pub fn range(&self, text: &str, span: Span) -> Range {
        Range::new(
            self.position(text, span.start),
            self.position(text, span.end),
        )
    }

    /// The byte offset of an LSP position. A line past the end gives the end
    /// of the text; a column past the end of its line gives the line's end
    /// (before its line break); a column inside a surrogate pair gives the
    /// start of that character.
    pub fn offset(&self, text: &str, position: Position) -> u32 {
        let Some(line) = self.index.line(position.line) else {
            return self.len;
        };
        let line_start = u32::from(line.start());
        let line_text = text
            .get(usize::from(line.start())..usize::from(line.end()))
            .unwrap_or("");
        let content = line_text
            .strip_suffix('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .unwrap_or(line_text);
        let line_end = line_start + content.len() as u32;
        let utf8 = self.index.to_utf8(
            WideEncoding::Utf16,
            WideLineCol {
                line: position.line,
                col: position.character,
            },
        );
        let offset = match utf8 {
            Some(lc) => line_start.saturating_add(lc.col).min(line_end),
            None => line_end,
        };
        floor_char_boundary(text, offset)
    }

    /// The byte span of an LSP range (backwards ranges are swapped).
    pub fn span(&self, text: &str, range: Range) -> Span {
        Span::new(self.offset(text, range.start), self.offset(text, range.end))
    }
}

/// The largest char boundary of `text` at or before `offset`.
fn floor_char_boundary(text: &str, offset: u32) -> u32 {
    let mut at = (offset as usize).min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) {
        let map = LineMap::new(text);
        for (offset, _) in text.char_indices().chain([(text.len(), ' ')]) {
            if text[..offset].ends_with('\r') {
                continue; // between `\r` and `\n`: not addressable in LSP
            }
            let pos = map.position(text, offset as u32);
            assert_eq!(map.offset(text, pos), offset as u32, "{text:?} at {offset}");
        }
    }

    #[test]
    fn utf16_columns_count_surrogate_pairs_as_two() {
        let text = "a: é中文😀x\nb\n";
        let map = LineMap::new(text);
        let x = text.find('x').unwrap() as u32;
        // a : space = 3, é = 1, 中文 = 2, 😀 = 2
        assert_eq!(map.position(text, x), Position::new(0, 8));
        assert_eq!(map.offset(text, Position::new(0, 8)), x);
        let b = text.find('b').unwrap() as u32;
        assert_eq!(map.position(text, b), Position::new(1, 0));
        round_trip(text);
        round_trip("é\r\n😀😀\n\n中");
        round_trip("");
    }

    #[test]
    fn client_positions_are_clamped() {
        let text = "ab😀\ncd\r\nlast";
        let map = LineMap::new(text);
        // inside the surrogate pair: the start of the emoji
        assert_eq!(map.offset(text, Position::new(0, 3)), 2);
        // past the line end: before the line break
        assert_eq!(map.offset(text, Position::new(0, 99)), 6);
        assert_eq!(map.offset(text, Position::new(1, 99)), 9);
        // past the last line: the end of the text
        assert_eq!(map.offset(text, Position::new(7, 0)), text.len() as u32);
        assert_eq!(map.offset(text, Position::new(2, 99)), text.len() as u32);
        // offsets past the end or inside a char
        assert_eq!(map.position(text, 999), Position::new(2, 4));
        assert_eq!(map.position(text, 3), Position::new(0, 2));
    }
}
