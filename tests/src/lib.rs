//! The conformance harness: spec files with their expected diagnostics
//! written inside them as comments.
//!
//! Owns: reading expectations (`# error: S0305` trailing a line, or
//! `# error@7: S0601` on its own line), comparing them with what the
//! compiler reports, and the invariants every analysis must satisfy (spans in
//! bounds and on char boundaries; IR present exactly when there is no error).
//! Must never: know any language rule; it only compares.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use stratum_compiler::analysis::analyze_bytes_with;

/// One expected or actual diagnostic: (1-based line, severity, code).
pub type Key = (u32, String, String);

/// Expected diagnostics of a file, parsed from its comments.
pub fn expectations(text: &str) -> Vec<Key> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(pos) = comment_start(line) else {
            continue;
        };
        let comment = line[pos + 1..].trim();
        let Some((head, codes)) = comment.split_once(':') else {
            continue;
        };
        let head = head.trim();
        let (sev, at) = match head.split_once('@') {
            Some((s, n)) => match n.trim().parse::<u32>() {
                Ok(n) => (s.trim(), n),
                Err(_) => continue,
            },
            None => (head, i as u32 + 1),
        };
        if sev != "error" && sev != "warning" {
            continue;
        }
        let codes: Vec<&str> = codes.split(',').map(str::trim).collect();
        if codes.is_empty()
            || !codes.iter().all(|c| {
                c.len() == 5 && c.starts_with('S') && c[1..].bytes().all(|b| b.is_ascii_digit())
            })
        {
            continue;
        }
        for c in codes {
            out.push((at, sev.to_string(), c.to_string()));
        }
    }
    out.sort();
    out
}

/// Where a YAML comment starts on a line (a `#` at the start or after whitespace, outside quotes).
fn comment_start(line: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if (c == '"' || c == '\'')
                && (prev.is_whitespace() || matches!(prev, ':' | '[' | '{' | ',' | '-')) =>
            {
                quote = Some(c)
            }
            None if c == '#' && prev.is_whitespace() => return Some(i),
            None if c == '#' && i == 0 => return Some(i),
            None => {}
        }
        prev = c;
    }
    None
}

/// The outcome of one file.
#[derive(Debug)]
pub struct Outcome {
    /// The file.
    pub path: PathBuf,
    /// Expected but not reported.
    pub missing: Vec<Key>,
    /// Reported but not expected (with the message).
    pub unexpected: Vec<(Key, String)>,
    /// Broken invariants.
    pub invariant_errors: Vec<String>,
}

impl Outcome {
    /// Whether the file behaved as annotated.
    pub fn passed(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.invariant_errors.is_empty()
    }
}

/// Runs one file.
/// The environment input a case declares with a header line
/// `# env: judges=a,b` (the judge names of a `stratum.toml` near the spec;
/// `# env: judges=` is a stratum.toml without `[judges.NAME]`); no such line
/// is no environment.
///
/// `# env: commands=a,b` likewise names the `[commands.NAME]` (X12); a case
/// with either line has a stratum.toml, and a list it does not give is empty.
pub fn case_env(text: &str) -> stratum_compiler::env::CheckEnv {
    let names = |key: &str| {
        text.lines().find_map(|l| {
            let names = l.trim().strip_prefix(key)?;
            Some(
                names
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect::<std::collections::BTreeSet<String>>(),
            )
        })
    };
    let (judges, commands) = (names("# env: judges="), names("# env: commands="));
    if judges.is_none() && commands.is_none() {
        return stratum_compiler::env::CheckEnv::default();
    }
    stratum_compiler::env::CheckEnv {
        judges: Some(judges.unwrap_or_default()),
        commands: Some(commands.unwrap_or_default()),
    }
}

pub fn run_file(path: &Path) -> Outcome {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let env = case_env(&String::from_utf8_lossy(&bytes));
    let analysis = analyze_bytes_with(&bytes, &env);
    let text = &analysis.text;
    let mut invariant_errors = Vec::new();
    for d in &analysis.diagnostics {
        let spans = std::iter::once(d.span).chain(d.labels.iter().map(|l| l.span));
        for s in spans {
            if s.start > s.end
                || s.end as usize > text.len()
                || !text.is_char_boundary(s.start as usize)
                || !text.is_char_boundary(s.end as usize)
            {
                invariant_errors.push(format!("{} has a bad span {:?}", d.code.as_str(), s));
            }
        }
    }
    if analysis.error_count() == 0 && analysis.ir.is_none() {
        invariant_errors.push("no errors but no IR".into());
    }
    let mut expected: BTreeMap<Key, usize> = BTreeMap::new();
    for k in expectations(text) {
        *expected.entry(k).or_default() += 1;
    }
    let mut unexpected = Vec::new();
    for d in &analysis.diagnostics {
        let line = analysis.lines.line_col(text, d.span.start).line;
        let key = (
            line,
            d.severity.as_str().to_string(),
            d.code.as_str().to_string(),
        );
        match expected.get_mut(&key) {
            Some(n) if *n > 0 => *n -= 1,
            _ => unexpected.push((key, d.message.clone())),
        }
    }
    let missing = expected
        .into_iter()
        .flat_map(|(k, n)| std::iter::repeat_n(k, n))
        .collect();
    Outcome {
        path: path.to_path_buf(),
        missing,
        unexpected,
        invariant_errors,
    }
}

/// Every `*.stratum.yaml` below `dir`, sorted.
pub fn corpus(dir: &Path) -> Vec<PathBuf> {
    files_below(dir, |p| p.to_string_lossy().ends_with(".stratum.yaml"))
}

/// Every file below `dir` that `keep` accepts, sorted.
pub fn files_below(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if keep(&p) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A readable report of failures.
pub fn report(outcomes: &[&Outcome]) -> String {
    let mut s = String::new();
    for o in outcomes {
        s.push_str(&format!("\n{}\n", o.path.display()));
        for (l, sev, c) in &o.missing {
            s.push_str(&format!("  missing    line {l}: {sev}: {c}\n"));
        }
        for ((l, sev, c), msg) in &o.unexpected {
            s.push_str(&format!("  unexpected line {l}: {sev}: {c}  ({msg})\n"));
        }
        for e in &o.invariant_errors {
            s.push_str(&format!("  invariant  {e}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_annotations() {
        let text = "a: 1 # error: S0101, S0102\n# warning@1: S0611\nb: \"x # error: S0999\"\n";
        let keys = expectations(text);
        assert_eq!(
            keys,
            vec![
                (1, "error".into(), "S0101".into()),
                (1, "error".into(), "S0102".into()),
                (1, "warning".into(), "S0611".into()),
            ]
        );
    }
}
