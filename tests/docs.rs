//! Every spec shown in the documentation checks as the documentation claims.
//!
//! Owns: finding the ```yaml blocks of `README.md` and `docs/**/*.md` that
//! are specs (the first line that is not a comment starts with `version:`,
//! or the block is preceded by a `<!-- check: ... -->` marker), running the
//! checker on each, and comparing with the claim. The claims, written on the
//! line before the block (blank lines between are allowed):
//! - no marker: the block checks clean (no error, no warning);
//! - `<!-- check: ok -->`: the same, for a block the first-line rule misses;
//! - `<!-- check: fails S0305 -->` (one or more codes, comma-separated): the
//!   block has errors, and the codes of its errors are exactly those;
//! - `<!-- check: warns S0315 -->`: no error, and the codes of its warnings
//!   are exactly those;
//! - `<!-- check: skip -->`: a spec-looking block that is not checked (a
//!   fragment shown for its shape);
//! - without a marker, a spec whose lines carry `# <- S0305` comments (the
//!   form the explanations of `stratumc explain` use, which generate
//!   `docs/diagnostics.md`) claims that the checker reports exactly those
//!   codes, errors and warnings together.
//!
//! Blocks are checked as `stratumc check` checks a file with no
//! `stratum.toml` near it (no environment: commands and judges unknown).
//!
//! Also: the language reference links every diagnostic code of the
//! catalogue, every relative link and anchor resolves, and nothing points at
//! files outside the repository.
//!
//! Must never: know a language rule; the checker decides, this only compares.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use stratum_compiler::analysis::analyze;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What a block claims about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Claim {
    Clean,
    Fails(BTreeSet<String>),
    Warns(BTreeSet<String>),
    Reports(BTreeSet<String>),
    Skip,
}

/// One YAML block: where it is, its text, and the claim (None: not a spec).
struct Block {
    file: String,
    line: usize,
    text: String,
    claim: Option<Claim>,
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            markdown_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "md") {
            out.push(p);
        }
    }
}

/// Parses a `<!-- check: ... -->` marker; `Err` for a malformed one.
fn parse_marker(line: &str) -> Option<Result<Claim, String>> {
    let body = line
        .trim()
        .strip_prefix("<!-- check:")?
        .strip_suffix("-->")?
        .trim();
    let (word, rest) = body.split_once(' ').unwrap_or((body, ""));
    let codes = || -> Result<BTreeSet<String>, String> {
        let set: BTreeSet<String> = rest
            .split(',')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect();
        let well_formed = |c: &String| {
            c.len() == 5 && c.starts_with('S') && c[1..].bytes().all(|b| b.is_ascii_digit())
        };
        if set.is_empty() || !set.iter().all(well_formed) {
            return Err(format!("`{}` names no code like S0305", line.trim()));
        }
        Ok(set)
    };
    Some(match word {
        "ok" => Ok(Claim::Clean),
        "skip" => Ok(Claim::Skip),
        "fails" => codes().map(Claim::Fails),
        "warns" => codes().map(Claim::Warns),
        _ => Err(format!(
            "`{}`: the marker is ok, skip, fails CODES or warns CODES",
            line.trim()
        )),
    })
}

/// The codes named by `# <- S0305` comments in a block.
fn pointed_codes(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let mut rest = line;
        while let Some(i) = rest.find("# <- ") {
            rest = &rest[i + 5..];
            for word in rest.split(|c: char| c == ',' || c.is_whitespace()) {
                if word.len() == 5
                    && word.starts_with('S')
                    && word[1..].bytes().all(|b| b.is_ascii_digit())
                {
                    out.insert(word.to_string());
                } else if !word.is_empty() {
                    break;
                }
            }
        }
    }
    out
}

/// Whether a block's first line that is not a comment starts with `version:`.
fn looks_like_spec(text: &str) -> bool {
    text.lines()
        .map(str::trim_start)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .is_some_and(|l| l.starts_with("version:"))
}

fn blocks_of(file: &str, text: &str, errors: &mut Vec<String>) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        if !fence.starts_with("```") {
            i += 1;
            continue;
        }
        let indent = lines[i].len() - fence.len();
        let is_yaml = matches!(fence.trim_end(), "```yaml" | "```yml");
        let start = i;
        i += 1;
        let mut body = String::new();
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            body.push_str(lines[i].get(indent..).unwrap_or(lines[i].trim_start()));
            body.push('\n');
            i += 1;
        }
        i += 1;
        if !is_yaml {
            continue;
        }
        let marker = lines[..start]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| parse_marker(l));
        let claim = match marker {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                errors.push(format!("{file}:{}: {e}", start + 1));
                None
            }
            None if looks_like_spec(&body) => {
                let pointed = pointed_codes(&body);
                Some(if pointed.is_empty() {
                    Claim::Clean
                } else {
                    Claim::Reports(pointed)
                })
            }
            None => None,
        };
        out.push(Block {
            file: file.to_string(),
            line: start + 1,
            text: body,
            claim,
        });
    }
    out
}

/// What the checker says about a block, against its claim (`None`: as claimed).
fn verdict(block: &Block, claim: &Claim) -> Option<String> {
    let analysis = analyze(&block.text);
    let errs: BTreeSet<String> = analysis
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.code.as_str().to_string())
        .collect();
    let warns: BTreeSet<String> = analysis
        .diagnostics
        .iter()
        .filter(|d| !d.is_error())
        .map(|d| d.code.as_str().to_string())
        .collect();
    let found = || {
        analysis
            .diagnostics
            .iter()
            .map(|d| {
                let at = analysis.lines.line_col(&analysis.text, d.span.start);
                format!("line {} {}: {}", at.line, d.code.as_str(), d.message)
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let ok = match claim {
        Claim::Skip => true,
        Claim::Clean => errs.is_empty() && warns.is_empty(),
        Claim::Fails(codes) => !errs.is_empty() && errs == *codes,
        Claim::Warns(codes) => errs.is_empty() && warns == *codes,
        Claim::Reports(codes) => errs.union(&warns).cloned().collect::<BTreeSet<_>>() == *codes,
    };
    (!ok).then(|| {
        format!(
            "{}:{}: the block claims {:?} but the checker found [{}]",
            block.file,
            block.line,
            claim,
            found()
        )
    })
}

fn all_blocks(errors: &mut Vec<String>) -> Vec<Block> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    markdown_files(&root.join("docs"), &mut files);
    let mut out = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(&root)
            .unwrap_or(&f)
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("reading {rel}: {e}"));
        out.extend(blocks_of(&rel, &text, errors));
    }
    out
}

#[test]
fn every_spec_in_the_docs_checks_as_claimed() {
    let mut errors = Vec::new();
    let blocks = all_blocks(&mut errors);
    let specs: Vec<&Block> = blocks.iter().filter(|b| b.claim.is_some()).collect();
    for b in &specs {
        if let Some(claim) = &b.claim
            && let Some(e) = verdict(b, claim)
        {
            errors.push(e);
        }
    }
    assert!(
        errors.is_empty(),
        "{} of {} spec blocks in the docs do not check as claimed:\n{}",
        errors.len(),
        specs.len(),
        errors.join("\n")
    );
    // The guide and the references are built from checked examples: a test
    // that found none would check nothing.
    assert!(
        specs.len() >= 10,
        "only {} spec blocks found in the docs",
        specs.len()
    );
}

#[test]
fn markers_are_read_as_written() {
    let text = "<!-- check: fails S0305, S0404 -->\n\n```yaml\nsteps: []\n```\n\
                ```yaml\n# a comment\nversion: 1\n```\n```yaml\nkey: 1\n```\n\
                <!-- check: warns S0315 -->\n```yaml\nversion: 1\n```\n\
                ```yaml\nversion: 2   # <- S0105\n```\n";
    let mut errors = Vec::new();
    let blocks = blocks_of("t.md", text, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let claims: Vec<Option<Claim>> = blocks.into_iter().map(|b| b.claim).collect();
    let set = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        claims,
        vec![
            Some(Claim::Fails(set(&["S0305", "S0404"]))),
            Some(Claim::Clean),
            None,
            Some(Claim::Warns(set(&["S0315"]))),
            Some(Claim::Reports(set(&["S0105"]))),
        ]
    );
    let mut errors = Vec::new();
    blocks_of(
        "t.md",
        "<!-- check: fails -->\n```yaml\nversion: 1\n```\n",
        &mut errors,
    );
    assert_eq!(errors.len(), 1, "a fails marker without a code is refused");
}

#[test]
fn a_wrong_claim_is_reported() {
    let block = Block {
        file: "t.md".into(),
        line: 1,
        text: "version: 2\ncontracts: {}\nflows: {entry: main}\n".into(),
        claim: None,
    };
    assert!(verdict(&block, &Claim::Clean).is_some());
    let ok = Block {
        text: "version: 1\n".into(),
        ..block
    };
    assert!(verdict(&ok, &Claim::Fails(["S0999".to_string()].into())).is_some());
}

#[test]
fn the_language_reference_links_every_code() {
    let path = root().join("docs/reference/language.md");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let missing: Vec<&str> = stratum_compiler::diagnostics::Code::ALL
        .iter()
        .map(|c| c.as_str())
        .filter(|c| !text.contains(&format!("(../diagnostics.md#{})", c.to_lowercase())))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/reference/language.md does not link these codes (add them to its \"Static rules\" table): {missing:?}"
    );
}

/// The anchors a Markdown file offers: GitHub's heading slugs (lower case,
/// punctuation dropped, spaces to `-`, `-1`, `-2` for repeats) and explicit
/// `<a id="...">` anchors. Headings inside code fences do not count.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    let mut fenced = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("<a id=\"") {
            rest = &rest[i + 7..];
            if let Some(j) = rest.find('"') {
                out.insert(rest[..j].to_string());
            }
        }
        if let Some(h) = line.strip_prefix('#') {
            let title = h.trim_start_matches('#').trim();
            let slug: String = title
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            let n = seen.entry(slug.clone()).or_insert(0);
            out.insert(if *n == 0 {
                slug.clone()
            } else {
                format!("{slug}-{n}")
            });
            *n += 1;
        }
    }
    out
}

/// The relative link targets of a Markdown file outside code (`](target)`).
fn relative_links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(k) = rest.find("](") {
            rest = &rest[k + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if !target.contains("://") && !target.starts_with("mailto:") && !target.contains(' ') {
                out.push((i + 1, target.to_string()));
            }
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    markdown_files(&root.join("docs"), &mut files);
    let mut broken = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
        for (line, target) in relative_links(&text) {
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if path.is_empty() {
                f.clone()
            } else {
                f.parent().unwrap_or(&root).join(path)
            };
            if !dest.exists() {
                broken.push(format!("{rel}:{line}: `{target}`: no such file"));
                continue;
            }
            if !anchor.is_empty() && dest.extension().is_some_and(|e| e == "md") {
                let dest_text = std::fs::read_to_string(&dest).unwrap_or_default();
                if !anchors(&dest_text).contains(anchor) {
                    broken.push(format!("{rel}:{line}: `{target}`: no such anchor"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_the_github_slugs() {
    let a = anchors(
        "# X6 — Cost hints\n## Running: `stratumc run`\n## Running: `stratumc run`\n<a id=\"s0305\"></a>\n```\n# not a heading\n```\n",
    );
    let want: BTreeSet<String> = [
        "x6--cost-hints",
        "running-stratumc-run",
        "running-stratumc-run-1",
        "s0305",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(a, want);
}

#[test]
fn the_docs_point_nowhere_outside_the_repository() {
    // the design notes the project was built from live outside this
    // repository; a user has only what is here
    let outside = [
        "../shared/",
        "shared/LANGUAGE.md",
        "shared/EXTENSIONS.md",
        "shared/DESIGN.md",
        "LANGUAGE.md E",
        "LANGUAGE.md C",
        "EXTENSIONS.md",
        "DESIGN.md",
        "v1-language",
        "v1-runtime",
    ];
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    markdown_files(&root.join("docs"), &mut files);
    markdown_files(
        &root.join("compiler/src/diagnostics/explanations"),
        &mut files,
    );
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
        for (i, line) in text.lines().enumerate() {
            // an explanation's example of a path that leaves the workspace is not a pointer
            if line.contains("# <- S") {
                continue;
            }
            for pat in outside {
                if line.contains(pat) {
                    found.push(format!("{rel}:{}: `{pat}`", i + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "pointers outside the repository (link a page of docs/ instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_language_reference_names_every_key() {
    use stratum_compiler::syntax::decode as d;
    let text =
        std::fs::read_to_string(root().join("docs/reference/language.md")).unwrap_or_default();
    let tables: &[(&str, &[&str])] = &[
        ("the root", d::ROOT_FIELDS),
        ("a flow", d::FLOW_FIELDS),
        ("a step", d::STEP_FIELDS),
        ("a route entry", d::ROUTE_FIELDS),
        ("an on_fail entry", d::ON_FAIL_FIELDS),
        ("the constructs", d::CONSTRUCTS),
        ("a fanout stage", d::STAGE_FIELDS),
        ("scope", d::SCOPE_FIELDS),
        ("cost", d::COST_FIELDS),
        ("fanout", d::FANOUT_FIELDS),
        ("gate", d::GATE_FIELDS),
        ("budget", d::BUDGET_FIELDS),
        ("iterate", d::ITERATE_FIELDS),
        ("output", d::OUTPUT_FIELDS),
        ("carry", d::CARRY_FIELDS),
        ("file_contains", d::FILE_CONTAINS_FIELDS),
        ("judged", d::JUDGED_FIELDS),
        ("the predicate forms", d::PREDICATE_FORMS),
        ("evaluate", d::EVALUATE_FIELDS),
        ("exec", d::EXEC_FIELDS),
    ];
    let mut missing = Vec::new();
    for (place, keys) in tables {
        for key in *keys {
            if !text.contains(&format!("`{key}`")) {
                missing.push(format!("`{key}` of {place}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/reference/language.md does not name these keys: {}",
        missing.join(", ")
    );
}
