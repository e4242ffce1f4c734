//! The four deterministic built-ins of STRAT-GUARD, as statements: exactly
//! one call of `server_file_exists('rel/path')`, `git_commit_exists('<sha>')`,
//! `command_exit_zero(['argv', …])` or `verdict_receipt_clean('<ledger_ref>')`
//! with literal arguments.
//!
//! Owns: the grammar of a deterministic statement and its parser (quoted
//! strings in `'` or `"`, where `\` escapes the quote or itself; one list of
//! strings for `command_exit_zero`; whitespace around tokens).
//! Must never: evaluate a statement as code, accept anything but one call
//! with literal arguments, or do I/O (evaluation is `evidence`'s).

use std::fmt;

/// The longest statement parsed (characters).
pub const MAX_STATEMENT_CHARS: usize = 4096;

/// A parsed deterministic statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Builtin {
    /// A regular file at this path beneath `workspace_root`.
    ServerFileExists(String),
    /// A commit object with this (hexadecimal) name in the workspace's repository.
    GitCommitExists(String),
    /// This argv, declared in `stratum.toml`'s `[commands]`, exits 0.
    CommandExitZero(Vec<String>),
    /// An earlier applied, clean entry of a ledger.
    VerdictReceiptClean(String),
}

/// The built-ins' names.
pub const NAMES: [&str; 4] = [
    "server_file_exists",
    "git_commit_exists",
    "command_exit_zero",
    "verdict_receipt_clean",
];

/// Why a statement is not a deterministic built-in call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuiltinError {
    #[error("the statement is longer than {MAX_STATEMENT_CHARS} characters")]
    TooLong,
    #[error("`{0}` is not a deterministic built-in (use one of {names})", names = NAMES.join(", "))]
    UnknownFunction(String),
    #[error("expected {expected} at character {at}")]
    Expected { expected: &'static str, at: usize },
    #[error("a string starting at character {0} is not closed")]
    UnclosedString(usize),
    #[error("`{function}` takes {wants}")]
    WrongArgument {
        function: &'static str,
        wants: &'static str,
    },
    #[error("`git_commit_exists` takes a commit name of 4 to 64 hexadecimal digits, not `{0}`")]
    BadSha(String),
    #[error("text after the call at character {0} (a statement is exactly one call)")]
    Trailing(usize),
}

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quote = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
        match self {
            Builtin::ServerFileExists(p) => write!(f, "server_file_exists({})", quote(p)),
            Builtin::GitCommitExists(s) => write!(f, "git_commit_exists({})", quote(s)),
            Builtin::CommandExitZero(argv) => {
                let items: Vec<String> = argv.iter().map(|a| quote(a)).collect();
                write!(f, "command_exit_zero([{}])", items.join(", "))
            }
            Builtin::VerdictReceiptClean(r) => write!(f, "verdict_receipt_clean({})", quote(r)),
        }
    }
}

/// An argument as written.
enum Arg {
    Str(String),
    List(Vec<String>),
}

struct Cursor<'a> {
    chars: Vec<char>,
    at: usize,
    _text: &'a str,
}

impl Cursor<'_> {
    fn skip_ws(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn eat(&mut self, c: char, expected: &'static str) -> Result<(), BuiltinError> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(BuiltinError::Expected {
                expected,
                at: self.at + 1,
            })
        }
    }

    fn ident(&mut self) -> String {
        self.skip_ws();
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            self.at += 1;
        }
        self.chars[start..self.at].iter().collect()
    }

    fn string(&mut self) -> Result<String, BuiltinError> {
        self.skip_ws();
        let start = self.at;
        let quote = match self.peek() {
            Some(q @ ('\'' | '"')) => q,
            _ => {
                return Err(BuiltinError::Expected {
                    expected: "a quoted string",
                    at: self.at + 1,
                });
            }
        };
        self.at += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err(BuiltinError::UnclosedString(start + 1)),
                Some('\\') => match self.chars.get(self.at + 1) {
                    Some(&c) if c == quote || c == '\\' => {
                        out.push(c);
                        self.at += 2;
                    }
                    _ => {
                        return Err(BuiltinError::Expected {
                            expected: "`\\\\` or an escaped quote after `\\`",
                            at: self.at + 1,
                        });
                    }
                },
                Some(c) if c == quote => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(c) => {
                    out.push(c);
                    self.at += 1;
                }
            }
        }
    }

    fn arg(&mut self) -> Result<Arg, BuiltinError> {
        self.skip_ws();
        if self.peek() != Some('[') {
            return self.string().map(Arg::Str);
        }
        self.at += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(']') {
            self.at += 1;
            return Ok(Arg::List(items));
        }
        loop {
            items.push(self.string()?);
            self.skip_ws();
            match self.peek() {
                Some(',') => self.at += 1,
                Some(']') => {
                    self.at += 1;
                    return Ok(Arg::List(items));
                }
                _ => {
                    return Err(BuiltinError::Expected {
                        expected: "`,` or `]`",
                        at: self.at + 1,
                    });
                }
            }
        }
    }
}

/// Parses a deterministic statement.
pub fn parse(text: &str) -> Result<Builtin, BuiltinError> {
    if text.chars().count() > MAX_STATEMENT_CHARS {
        return Err(BuiltinError::TooLong);
    }
    let mut c = Cursor {
        chars: text.chars().collect(),
        at: 0,
        _text: text,
    };
    let name = c.ident();
    let function = match NAMES.iter().find(|n| **n == name) {
        Some(n) => *n,
        None if name.is_empty() => {
            return Err(BuiltinError::Expected {
                expected: "a built-in name",
                at: c.at + 1,
            });
        }
        None => return Err(BuiltinError::UnknownFunction(name)),
    };
    c.eat('(', "`(`")?;
    let arg = c.arg()?;
    c.eat(')', "`)` (a built-in takes exactly one argument)")?;
    c.skip_ws();
    if c.at < c.chars.len() {
        return Err(BuiltinError::Trailing(c.at + 1));
    }
    let wrong = |wants| BuiltinError::WrongArgument { function, wants };
    match (function, arg) {
        ("server_file_exists", Arg::Str(p)) if !p.is_empty() => Ok(Builtin::ServerFileExists(p)),
        ("server_file_exists", _) => Err(wrong("one non-empty relative path in quotes")),
        ("git_commit_exists", Arg::Str(s)) => {
            if (4..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit()) {
                Ok(Builtin::GitCommitExists(s.to_ascii_lowercase()))
            } else {
                Err(BuiltinError::BadSha(s))
            }
        }
        ("git_commit_exists", _) => Err(wrong("one commit name in quotes")),
        ("command_exit_zero", Arg::List(argv)) if !argv.is_empty() => {
            Ok(Builtin::CommandExitZero(argv))
        }
        ("command_exit_zero", _) => Err(wrong(
            "one non-empty list of strings, e.g. ['make', 'test']",
        )),
        ("verdict_receipt_clean", Arg::Str(r)) if !r.is_empty() => {
            Ok(Builtin::VerdictReceiptClean(r))
        }
        _ => Err(wrong("one ledger_ref in quotes")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_calls_parse() {
        assert_eq!(
            parse("server_file_exists('docs/a b.md')"),
            Ok(Builtin::ServerFileExists("docs/a b.md".into()))
        );
        assert_eq!(
            parse(" git_commit_exists ( \"ABCDEF0\" ) "),
            Ok(Builtin::GitCommitExists("abcdef0".into()))
        );
        assert_eq!(
            parse("command_exit_zero(['make', \"te'st\", 'a\\'b'])"),
            Ok(Builtin::CommandExitZero(vec![
                "make".into(),
                "te'st".into(),
                "a'b".into()
            ]))
        );
        assert_eq!(
            parse("verdict_receipt_clean('sha256:00')"),
            Ok(Builtin::VerdictReceiptClean("sha256:00".into()))
        );
    }

    #[test]
    fn anything_but_one_literal_call_is_refused() {
        let bad = [
            "",
            "os.system('rm')",
            "server_file_exists(path)",
            "server_file_exists('a') and True",
            "server_file_exists('a', 'b')",
            "server_file_exists(['a'])",
            "server_file_exists('')",
            "command_exit_zero('make test')",
            "command_exit_zero([])",
            "git_commit_exists('HEAD')",
            "git_commit_exists('abc')",
            "verdict_receipt_clean('x'",
            "server_file_exists('unclosed)",
            "server_file_exists('a\\n')",
            "__import__('os')",
        ];
        for b in bad {
            assert!(parse(b).is_err(), "{b:?} parsed");
        }
        assert_eq!(
            parse("eval('1')"),
            Err(BuiltinError::UnknownFunction("eval".into()))
        );
        assert_eq!(
            parse("server_file_exists('a');x"),
            Err(BuiltinError::Trailing(24))
        );
    }

    #[test]
    fn display_parses_back_to_the_same_call() {
        for s in [
            "server_file_exists('it\\'s\\\\here')",
            "command_exit_zero(['sh', '-c', 'exit 0'])",
            "git_commit_exists('abcd')",
        ] {
            let b = parse(s).unwrap();
            assert_eq!(parse(&b.to_string()), Ok(b));
        }
    }
}
