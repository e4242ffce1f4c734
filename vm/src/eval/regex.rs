//! The `matches` pattern rules: the safe-shape filter of reference v1-language
//! §7.8 and compilation with the `regex` crate under size limits. The compiler
//! checks literal patterns with [`check_pattern`]; the evaluator runs the same
//! filter on every pattern at run time, so the rule lives here only.
//!
//! Owns: which patterns are safe to run, the pattern length limit, the
//! compile limits (256 KiB program, nesting 32), and why a pattern is
//! refused ([`PatternError`]).
//! Must never: run a pattern that did not pass the filter, or panic.

/// Longest pattern accepted, in characters (Unicode scalar values, decision C7).
pub const MAX_PATTERN_CHARS: usize = 256;

/// Longest `matches` input accepted, in bytes (8 MiB, language 1.1 X3: as
/// large as a `file(path).text`; the engine is linear in the input).
pub const MAX_INPUT_BYTES: usize = 8 * 1024 * 1024;

/// Why a pattern is refused. Displays as the reason the compiler's
/// diagnostic and the evaluator's `validation_error` quote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Longer than [`MAX_PATTERN_CHARS`] characters.
    #[error("patterns are limited to {} characters", MAX_PATTERN_CHARS)]
    TooLong,
    /// A `(?` construct.
    #[error("`(?` constructs (lookaround, named or non-capturing groups, flags) are not allowed")]
    QuestionGroup,
    /// A `\` at the end.
    #[error("a trailing `\\`")]
    TrailingBackslash,
    /// `\1` … `\9`.
    #[error("backreferences are not allowed")]
    Backreference,
    /// A `[` with no `]`.
    #[error("an unterminated `[...]` class")]
    UnterminatedClass,
    /// A `)` with no `(`.
    #[error("an unbalanced `)`")]
    UnbalancedClose,
    /// A `(` with no `)`.
    #[error("an unbalanced `(`")]
    UnbalancedOpen,
    /// `(a+)+`, `(a|aa)+`.
    #[error("a quantified group that contains a quantifier or an alternation (nested repetition)")]
    NestedRepetition,
    /// `a*a*`, `(a*)(a*)`.
    #[error("two quantified parts next to each other (catastrophic backtracking risk)")]
    AdjacentQuantifiers,
    /// A `*`, `+` or `?` after no atom.
    #[error("a `{0}` with nothing to repeat")]
    NothingToRepeat(char),
    /// A `{` where no atom precedes it.
    #[error("a `{{` that is not a quantifier after an atom")]
    StrayBrace,
    /// A `{` after an atom that is not `{m}`, `{m,}` or `{m,n}`.
    #[error("a `{{` that is not a valid `{{m}}`, `{{m,}}` or `{{m,n}}` quantifier")]
    BadBrace,
    /// More than 32 quantifiers.
    #[error("more than 32 quantifiers")]
    TooManyQuantifiers,
    /// The `regex` crate refused it: the last line of its message.
    #[error("{0}")]
    Invalid(String),
}

/// Validates a pattern: the length limit, the safe-shape filter and
/// compilability. The error says what is wrong.
pub fn check_pattern(pattern: &str) -> Result<(), PatternError> {
    if pattern.chars().count() > MAX_PATTERN_CHARS {
        return Err(PatternError::TooLong);
    }
    check_shape(pattern)?;
    compile(pattern).map(|_| ())
}

/// Compiles a pattern (which must have passed [`check_shape`]) with the
/// size and nesting limits; the error holds the last line of the `regex`
/// crate's message.
pub fn compile(pattern: &str) -> Result<::regex::Regex, PatternError> {
    ::regex::RegexBuilder::new(pattern)
        .size_limit(256 * 1024)
        .nest_limit(32)
        .build()
        .map_err(|e| {
            let text = e.to_string();
            PatternError::Invalid(
                text.lines()
                    .last()
                    .unwrap_or("invalid pattern")
                    .trim()
                    .to_string(),
            )
        })
}

/// The safe-shape filter of reference §7.8 (no length limit, no compilation).
///
/// Groups are transparent for adjacency: `(a*)(a*)` has two quantified atoms
/// next to each other. A quantified group may not contain a quantifier or an
/// alternation (`(a+)+`, `(a|aa)+`).
pub fn check_shape(pattern: &str) -> Result<(), PatternError> {
    if pattern.contains("(?") {
        return Err(PatternError::QuestionGroup);
    }
    let mut s = Shape {
        b: pattern.chars().collect(),
        groups: Vec::new(),
        prev_quantified: false,
        quantifiers: 0,
    };
    let mut i = 0;
    while i < s.b.len() {
        i = match s.b[i] {
            '(' => {
                s.open_group();
                i + 1
            }
            '|' => {
                s.alternation();
                i + 1
            }
            ')' => s.close_group(i)?,
            c @ ('*' | '+' | '?') => return Err(PatternError::NothingToRepeat(c)),
            '{' => return Err(PatternError::StrayBrace),
            _ => {
                let end = s.atom_end(i)?;
                let next = s.after_atom(end)?;
                if s.quantifiers > 32 {
                    return Err(PatternError::TooManyQuantifiers);
                }
                next
            }
        };
    }
    if !s.groups.is_empty() {
        return Err(PatternError::UnbalancedOpen);
    }
    Ok(())
}

/// An open group of the shape filter.
struct Group {
    /// It contains a quantifier or an alternation.
    has_quant: bool,
    /// The part before its `(` was quantified.
    prev_at_open: bool,
}

/// The state of the shape filter's scan over a pattern's characters.
struct Shape {
    b: Vec<char>,
    groups: Vec<Group>,
    /// The last part (atom or group) was quantified.
    prev_quantified: bool,
    quantifiers: usize,
}

impl Shape {
    /// Length of a quantifier (with an optional lazy `?`) at `at`.
    fn quantifier(&self, at: usize) -> Option<usize> {
        let len = match self.b.get(at)? {
            '*' | '+' | '?' => 1,
            '{' => brace_quantifier(&self.b[at..])?,
            _ => return None,
        };
        Some(if self.b.get(at + len) == Some(&'?') {
            len + 1
        } else {
            len
        })
    }

    fn open_group(&mut self) {
        self.groups.push(Group {
            has_quant: false,
            prev_at_open: self.prev_quantified,
        });
    }

    fn alternation(&mut self) {
        if let Some(g) = self.groups.last_mut() {
            g.has_quant = true;
        }
        self.prev_quantified = false;
    }

    /// The `)` at `i` and its quantifier; the index after them.
    fn close_group(&mut self, i: usize) -> Result<usize, PatternError> {
        let Some(g) = self.groups.pop() else {
            return Err(PatternError::UnbalancedClose);
        };
        let Some(len) = self.quantifier(i + 1) else {
            if let Some(parent) = self.groups.last_mut() {
                parent.has_quant |= g.has_quant;
            }
            return Ok(i + 1);
        };
        if g.has_quant {
            return Err(PatternError::NestedRepetition);
        }
        if g.prev_at_open {
            return Err(PatternError::AdjacentQuantifiers);
        }
        self.quantifiers += 1;
        self.prev_quantified = true;
        if let Some(parent) = self.groups.last_mut() {
            parent.has_quant = true;
        }
        Ok(i + 1 + len)
    }

    /// The end of the atom (escape, class or character) at `i`.
    fn atom_end(&self, i: usize) -> Result<usize, PatternError> {
        let b = &self.b;
        match b[i] {
            '\\' => {
                let Some(&n) = b.get(i + 1) else {
                    return Err(PatternError::TrailingBackslash);
                };
                if n.is_ascii_digit() && n != '0' {
                    return Err(PatternError::Backreference);
                }
                Ok(i + 2)
            }
            '[' => {
                let mut j = i + 1;
                if b.get(j) == Some(&'^') {
                    j += 1;
                }
                if b.get(j) == Some(&']') {
                    j += 1;
                }
                while j < b.len() && b[j] != ']' {
                    if b[j] == '\\' {
                        j += 1;
                    }
                    j += 1;
                }
                if j >= b.len() {
                    return Err(PatternError::UnterminatedClass);
                }
                Ok(j + 1)
            }
            _ => Ok(i + 1),
        }
    }

    /// The quantifier (if any) after the atom ending at `atom_end`; the
    /// index after it.
    fn after_atom(&mut self, atom_end: usize) -> Result<usize, PatternError> {
        let brace = self.b.get(atom_end) == Some(&'{');
        let Some(len) = self.quantifier(atom_end) else {
            if brace {
                return Err(PatternError::BadBrace);
            }
            self.prev_quantified = false;
            return Ok(atom_end);
        };
        if brace && brace_quantifier(&self.b[atom_end..]).is_none() {
            return Err(PatternError::BadBrace);
        }
        if self.prev_quantified {
            return Err(PatternError::AdjacentQuantifiers);
        }
        self.quantifiers += 1;
        self.prev_quantified = true;
        if let Some(g) = self.groups.last_mut() {
            g.has_quant = true;
        }
        Ok(atom_end + len)
    }
}

/// Length of a `{m}`, `{m,}` or `{m,n}` quantifier at the start of `b`.
fn brace_quantifier(b: &[char]) -> Option<usize> {
    let mut i = 1;
    let digits = |i: &mut usize| {
        let s = *i;
        while b.get(*i).is_some_and(char::is_ascii_digit) {
            *i += 1;
        }
        *i > s
    };
    if !digits(&mut i) {
        return None;
    }
    if b.get(i) == Some(&',') {
        i += 1;
        digits(&mut i);
    }
    (b.get(i) == Some(&'}')).then_some(i + 1)
}

#[cfg(test)]
mod tests {
    use super::check_pattern as regex_check;
    use super::{check_pattern, check_shape, compile};

    #[test]
    fn safe_shape_filter() {
        for ok in [
            "b",
            "abc",
            "a*ba+",
            ".*error.*",
            "^v[0-9]+\\.[0-9]+$",
            "x{2,3}",
        ] {
            assert!(regex_check(ok).is_ok(), "{ok}");
        }
        for bad in [
            "(?i)x", "\\1", "a*a*", ".*.*x", "x{", "{,5}", "(a", "a)", "[ab", "\\", "*a",
        ] {
            assert!(regex_check(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn safe_shape_filter_groups() {
        for bad in [
            "a*a+b",
            "[ab]+a?b",
            "a{0,99}a*",
            "(a*)(a*)",
            "a*(a*)b",
            "(ab)*(ab)*c",
            "(a+)+",
            "((a+))+",
            "(a|aa)+",
            "\\p{L}",
        ] {
            assert!(regex_check(bad).is_err(), "{bad}");
        }
        for ok in ["(ab)+c", "a+?b", "(a|b)c", "a*ba+"] {
            assert!(regex_check(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn length_limit_counts_characters() {
        assert!(check_pattern(&"a".repeat(256)).is_ok());
        assert!(check_pattern(&"a".repeat(257)).is_err());
        // 200 emoji are 400 UTF-16 units but 200 characters (C7)
        assert!(check_pattern(&"😀".repeat(200)).is_ok());
    }

    #[test]
    fn errors_say_what_is_wrong() {
        use super::PatternError as E;
        for (pattern, error, text) in [
            (
                "(?i)x",
                E::QuestionGroup,
                "`(?` constructs (lookaround, named or non-capturing groups, flags) are not allowed",
            ),
            ("a\\", E::TrailingBackslash, "a trailing `\\`"),
            ("(a)\\1", E::Backreference, "backreferences are not allowed"),
            ("[ab", E::UnterminatedClass, "an unterminated `[...]` class"),
            ("a)", E::UnbalancedClose, "an unbalanced `)`"),
            ("(a", E::UnbalancedOpen, "an unbalanced `(`"),
            (
                "(a+)+",
                E::NestedRepetition,
                "a quantified group that contains a quantifier or an alternation (nested repetition)",
            ),
            (
                "a*(b)+",
                E::AdjacentQuantifiers,
                "two quantified parts next to each other (catastrophic backtracking risk)",
            ),
            (
                "a*a*",
                E::AdjacentQuantifiers,
                "two quantified parts next to each other (catastrophic backtracking risk)",
            ),
            (
                "*a",
                E::NothingToRepeat('*'),
                "a `*` with nothing to repeat",
            ),
            (
                "{2}",
                E::StrayBrace,
                "a `{` that is not a quantifier after an atom",
            ),
            (
                "x{",
                E::BadBrace,
                "a `{` that is not a valid `{m}`, `{m,}` or `{m,n}` quantifier",
            ),
        ] {
            assert_eq!(check_shape(pattern), Err(error.clone()), "{pattern}");
            assert_eq!(error.to_string(), text);
        }
        let many = "ab+".repeat(33);
        assert_eq!(check_shape(&many[..3 * 32]), Ok(()));
        assert_eq!(check_shape(&many), Err(E::TooManyQuantifiers));
        assert_eq!(
            E::TooManyQuantifiers.to_string(),
            "more than 32 quantifiers"
        );
        let long = "a".repeat(257);
        assert_eq!(check_pattern(&long), Err(E::TooLong));
        assert_eq!(
            E::TooLong.to_string(),
            "patterns are limited to 256 characters"
        );
        let Err(E::Invalid(why)) = check_pattern("[z-a]") else {
            panic!("`[z-a]` passes the shape filter and fails to compile");
        };
        assert!(why.contains("invalid character class range"), "{why}");
    }

    #[test]
    fn shape_alone_does_not_compile() {
        assert!(check_shape("[z-a]").is_ok());
        assert!(check_pattern("[z-a]").is_err());
        assert!(compile("a{2,3}").is_ok_and(|r| r.is_match("xaay")));
    }
}
