//! The `matches` pattern rules: the safe-shape filter of reference v1-language
//! §7.8 and compilation with the `regex` crate under size limits. The compiler
//! checks literal patterns with [`check_pattern`]; the evaluator runs the same
//! filter on every pattern at run time, so the rule lives here only.
//!
//! Owns: which patterns are safe to run, the pattern length limit, and the
//! compile limits (256 KiB program, nesting 32).
//! Must never: run a pattern that did not pass the filter, or panic.

/// Longest pattern accepted, in characters (Unicode scalar values, decision C7).
pub const MAX_PATTERN_CHARS: usize = 256;

/// Longest `matches` input accepted, in characters.
pub const MAX_INPUT_CHARS: usize = 4096;

/// Validates a pattern: the length limit, the safe-shape filter and
/// compilability. The message says what is wrong.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.chars().count() > MAX_PATTERN_CHARS {
        return Err(format!(
            "patterns are limited to {MAX_PATTERN_CHARS} characters"
        ));
    }
    check_shape(pattern)?;
    compile(pattern).map(|_| ())
}

/// Compiles a pattern (which must have passed [`check_shape`]) with the
/// size and nesting limits; the error is the last line of the `regex`
/// crate's message.
pub fn compile(pattern: &str) -> Result<::regex::Regex, String> {
    ::regex::RegexBuilder::new(pattern)
        .size_limit(256 * 1024)
        .nest_limit(32)
        .build()
        .map_err(|e| {
            let text = e.to_string();
            text.lines()
                .last()
                .unwrap_or("invalid pattern")
                .trim()
                .to_string()
        })
}

/// The safe-shape filter of reference §7.8 (no length limit, no compilation).
///
/// Groups are transparent for adjacency: `(a*)(a*)` has two quantified atoms
/// next to each other. A quantified group may not contain a quantifier or an
/// alternation (`(a+)+`, `(a|aa)+`).
pub fn check_shape(pattern: &str) -> Result<(), String> {
    if pattern.contains("(?") {
        return Err(
            "`(?` constructs (lookaround, named or non-capturing groups, flags) are not allowed"
                .into(),
        );
    }
    struct Group {
        has_quant: bool,
        prev_at_open: bool,
    }
    let b: Vec<char> = pattern.chars().collect();
    let mut groups: Vec<Group> = Vec::new();
    let mut prev_quantified = false;
    let mut quantifiers = 0usize;
    let mut i = 0;
    // length of a quantifier (with an optional lazy `?`) at `at`
    let quantifier = |at: usize| -> Option<usize> {
        let len = match b.get(at)? {
            '*' | '+' | '?' => 1,
            '{' => brace_quantifier(&b[at..])?,
            _ => return None,
        };
        Some(if b.get(at + len) == Some(&'?') {
            len + 1
        } else {
            len
        })
    };
    while i < b.len() {
        let c = b[i];
        let atom_end = match c {
            '\\' => {
                let Some(&n) = b.get(i + 1) else {
                    return Err("a trailing `\\`".into());
                };
                if n.is_ascii_digit() && n != '0' {
                    return Err("backreferences are not allowed".into());
                }
                i + 2
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
                    return Err("an unterminated `[...]` class".into());
                }
                j + 1
            }
            '(' => {
                groups.push(Group {
                    has_quant: false,
                    prev_at_open: prev_quantified,
                });
                i += 1;
                continue;
            }
            '|' => {
                if let Some(g) = groups.last_mut() {
                    g.has_quant = true;
                }
                prev_quantified = false;
                i += 1;
                continue;
            }
            ')' => {
                let Some(g) = groups.pop() else {
                    return Err("an unbalanced `)`".into());
                };
                match quantifier(i + 1) {
                    Some(len) => {
                        if g.has_quant {
                            return Err("a quantified group that contains a quantifier or an alternation (nested repetition)".into());
                        }
                        if g.prev_at_open {
                            return Err("two quantified parts next to each other (catastrophic backtracking risk)".into());
                        }
                        quantifiers += 1;
                        prev_quantified = true;
                        if let Some(parent) = groups.last_mut() {
                            parent.has_quant = true;
                        }
                        i += 1 + len;
                    }
                    None => {
                        if let Some(parent) = groups.last_mut() {
                            parent.has_quant |= g.has_quant;
                        }
                        i += 1;
                    }
                }
                continue;
            }
            '*' | '+' | '?' => return Err(format!("a `{c}` with nothing to repeat")),
            '{' => return Err("a `{` that is not a quantifier after an atom".into()),
            _ => i + 1,
        };
        match quantifier(atom_end) {
            Some(len) => {
                if b.get(atom_end) == Some(&'{') && brace_quantifier(&b[atom_end..]).is_none() {
                    return Err(
                        "a `{` that is not a valid `{m}`, `{m,}` or `{m,n}` quantifier".into(),
                    );
                }
                if prev_quantified {
                    return Err(
                        "two quantified parts next to each other (catastrophic backtracking risk)"
                            .into(),
                    );
                }
                quantifiers += 1;
                prev_quantified = true;
                if let Some(g) = groups.last_mut() {
                    g.has_quant = true;
                }
                i = atom_end + len;
            }
            None => {
                if b.get(atom_end) == Some(&'{') {
                    return Err(
                        "a `{` that is not a valid `{m}`, `{m,}` or `{m,n}` quantifier".into(),
                    );
                }
                prev_quantified = false;
                i = atom_end;
            }
        }
        if quantifiers > 32 {
            return Err("more than 32 quantifiers".into());
        }
    }
    if !groups.is_empty() {
        return Err("an unbalanced `(`".into());
    }
    Ok(())
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
    fn shape_alone_does_not_compile() {
        assert!(check_shape("[z-a]").is_ok());
        assert!(check_pattern("[z-a]").is_err());
        assert!(compile("a{2,3}").is_ok_and(|r| r.is_match("xaay")));
    }
}
