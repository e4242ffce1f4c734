//! Renderers of diagnostics for CI systems: SARIF 2.1.0 (code-scanning
//! services such as GitHub's read it) and GitHub Actions workflow commands
//! (`::error file=…,line=…::message`, shown as annotations on a pull request).
//!
//! Owns: the mapping of [`Diagnostic`]s, their files and the code catalogue
//! onto those two formats, and the escaping each format needs.
//! Must never: filter, reorder or reword diagnostics (a format may join the
//! notes and help onto the message, in order), or decide validity.

use serde::Serialize;

use super::{Code, Diagnostic, Severity};
use crate::source::{LineIndex, Span};

/// One checked file and what was found in it.
pub struct CheckedFile<'a> {
    /// The path as the user named it (relative paths stay relative).
    pub path: &'a str,
    /// The file's text.
    pub text: &'a str,
    /// Its line index.
    pub lines: &'a LineIndex,
    /// Its diagnostics, in report order.
    pub diagnostics: &'a [Diagnostic],
}

/// The `$schema` of every SARIF document written here.
pub const SARIF_SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

#[derive(Serialize)]
struct SarifLog<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    version: &'static str,
    runs: [SarifRun<'a>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SarifRun<'a> {
    tool: Tool,
    invocations: [Invocation; 1],
    artifacts: Vec<Artifact>,
    results: Vec<SarifResult<'a>>,
    column_kind: &'static str,
}

#[derive(Serialize)]
struct Tool {
    driver: Driver,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Driver {
    name: &'static str,
    version: String,
    semantic_version: String,
    rules: Vec<Rule>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    id: &'static str,
    name: String,
    short_description: Text,
    full_description: Text,
    help: Markdown,
    default_configuration: Configuration,
}

#[derive(Serialize)]
struct Text {
    text: String,
}

#[derive(Serialize)]
struct Markdown {
    text: &'static str,
    markdown: &'static str,
}

#[derive(Serialize)]
struct Configuration {
    level: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Invocation {
    execution_successful: bool,
    tool_execution_notifications: Vec<Notification>,
}

#[derive(Serialize)]
struct Notification {
    level: &'static str,
    message: Text,
}

#[derive(Serialize)]
struct Artifact {
    location: ArtifactLocation,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SarifResult<'a> {
    rule_id: &'static str,
    rule_index: usize,
    level: &'static str,
    message: Text,
    locations: [Location<'a>; 1],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    related_locations: Vec<Location<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Location<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<usize>,
    physical_location: PhysicalLocation,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<TextRef<'a>>,
}

#[derive(Serialize)]
struct TextRef<'a> {
    text: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PhysicalLocation {
    artifact_location: ArtifactLocation,
    region: Region,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactLocation {
    uri: String,
    index: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Region {
    start_line: u32,
    start_column: u32,
    end_line: u32,
    end_column: u32,
}

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

/// The message with its notes and help appended, one per line, as the
/// human renderer prints them under the snippet.
fn full_message(d: &Diagnostic) -> String {
    let mut text = d.message.clone();
    for n in &d.notes {
        text.push_str("\nnote: ");
        text.push_str(n);
    }
    if let Some(h) = &d.help {
        text.push_str("\nhelp: ");
        text.push_str(h);
    }
    text
}

/// A path as a URI reference (RFC 3986): relative paths stay relative (code
/// scanning resolves them against the checkout), absolute ones become
/// `file://` URIs; every byte outside the unreserved set and `/` is
/// percent-encoded.
pub fn path_uri(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    if path.starts_with('/') {
        out.push_str("file://");
    }
    for b in path.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn region(file: &CheckedFile<'_>, span: Span) -> Region {
    let a = file.lines.line_col(file.text, span.start);
    let b = file.lines.line_col(file.text, span.end);
    // SARIF regions are never empty-backwards; an empty span marks one column.
    let end_column = if (b.line, b.column) <= (a.line, a.column) {
        a.column + 1
    } else {
        b.column
    };
    Region {
        start_line: a.line,
        start_column: a.column,
        end_line: b.line.max(a.line),
        end_column,
    }
}

/// The SARIF 2.1.0 log of one `stratumc check` invocation.
///
/// `problems` are the files that could not be read or found (tool execution
/// notifications; they make the invocation unsuccessful). The rules are the
/// codes that occur, each with its title and `stratumc explain` text.
pub fn sarif(files: &[CheckedFile<'_>], problems: &[String], tool_version: &str) -> String {
    let mut codes: Vec<Code> = files
        .iter()
        .flat_map(|f| f.diagnostics.iter().map(|d| d.code))
        .collect();
    codes.sort();
    codes.dedup();
    let rules = codes.iter().map(|&c| rule(c)).collect();
    let artifacts = files
        .iter()
        .enumerate()
        .map(|(index, f)| Artifact {
            location: ArtifactLocation {
                uri: path_uri(f.path),
                index,
            },
        })
        .collect();
    let mut results = Vec::new();
    for (index, f) in files.iter().enumerate() {
        for d in f.diagnostics {
            results.push(result(f, index, d, &codes));
        }
    }
    let log = SarifLog {
        schema: SARIF_SCHEMA,
        version: "2.1.0",
        runs: [SarifRun {
            tool: Tool {
                driver: Driver {
                    name: "stratumc",
                    version: tool_version.to_string(),
                    semantic_version: tool_version.to_string(),
                    rules,
                },
            },
            invocations: [Invocation {
                execution_successful: problems.is_empty(),
                tool_execution_notifications: problems
                    .iter()
                    .map(|p| Notification {
                        level: "error",
                        message: Text { text: p.clone() },
                    })
                    .collect(),
            }],
            artifacts,
            results,
            column_kind: "unicodeCodePoints",
        }],
    };
    // Serialising plain structs of strings and integers cannot fail.
    serde_json::to_string_pretty(&log).expect("the SARIF structs hold only strings and integers")
}

fn rule(c: Code) -> Rule {
    Rule {
        id: c.as_str(),
        name: format!("{c:?}"),
        short_description: Text {
            text: c.title().to_string(),
        },
        full_description: Text {
            text: format!("{}: {}", c.as_str(), c.title()),
        },
        help: Markdown {
            text: c.explanation(),
            markdown: c.explanation(),
        },
        default_configuration: Configuration {
            level: level(c.severity()),
        },
    }
}

fn result<'a>(
    f: &CheckedFile<'a>,
    index: usize,
    d: &'a Diagnostic,
    codes: &[Code],
) -> SarifResult<'a> {
    let at = |span: Span| PhysicalLocation {
        artifact_location: ArtifactLocation {
            uri: path_uri(f.path),
            index,
        },
        region: region(f, span),
    };
    SarifResult {
        rule_id: d.code.as_str(),
        // `codes` holds every code of every diagnostic (built from them).
        rule_index: codes.binary_search(&d.code).unwrap_or(0),
        level: level(d.severity),
        message: Text {
            text: full_message(d),
        },
        locations: [Location {
            id: None,
            physical_location: at(d.span),
            message: d.span_label.as_deref().map(|text| TextRef { text }),
        }],
        related_locations: d
            .labels
            .iter()
            .enumerate()
            .map(|(i, l)| Location {
                id: Some(i + 1),
                physical_location: at(l.span),
                message: Some(TextRef { text: &l.message }),
            })
            .collect(),
    }
}

/// Escapes the data part of a workflow command (after `::`).
fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a property value of a workflow command (`file=`, `title=`).
fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// GitHub Actions workflow commands, one line per diagnostic:
/// `::error file=F,line=L,endLine=L2,col=C,endColumn=C2,title=S0305 title::message`.
pub fn github(file: &CheckedFile<'_>) -> String {
    let mut out = String::new();
    for d in file.diagnostics {
        let r = region(file, d.span);
        out.push_str(&format!(
            "::{} file={},line={},endLine={},col={},endColumn={},title={}::{}\n",
            level(d.severity),
            escape_property(file.path),
            r.start_line,
            r.end_line,
            r.start_column,
            r.end_column,
            escape_property(&format!("{} {}", d.code.as_str(), d.code.title())),
            escape_data(&full_message(d)),
        ));
    }
    out
}

/// A problem that is not about a spec's content (an unreadable file) as a
/// workflow command.
pub fn github_problem(message: &str) -> String {
    format!("::error title=stratumc::{}\n", escape_data(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Span;

    fn diag() -> Diagnostic {
        Diagnostic::new(Code::ALL[0], Span::new(4, 9), "bad, really: bad")
            .with_note("a note")
            .with_help("fix it")
    }

    #[test]
    fn uris_are_relative_or_file_and_encoded() {
        assert_eq!(path_uri("a b/c%.stratum.yaml"), "a%20b/c%25.stratum.yaml");
        assert_eq!(path_uri("/x/ä.yaml"), "file:///x/%C3%A4.yaml");
    }

    #[test]
    fn github_lines_escape_properties_and_data() {
        let text = "abc\ndefghij\n";
        let lines = LineIndex::new(text);
        let ds = [diag()];
        let f = CheckedFile {
            path: "dir,x/a:b.yaml",
            text,
            lines: &lines,
            diagnostics: &ds,
        };
        let line = github(&f);
        assert!(
            line.starts_with(
                "::error file=dir%2Cx/a%3Ab.yaml,line=2,endLine=2,col=1,endColumn=6,title="
            ),
            "{line}"
        );
        assert!(
            line.ends_with("::bad, really: bad%0Anote: a note%0Ahelp: fix it\n"),
            "{line}"
        );
        assert_eq!(line.lines().count(), 1);
    }

    #[test]
    fn sarif_names_each_rule_once_and_points_results_at_them() {
        let text = "abc\ndefghij\n";
        let lines = LineIndex::new(text);
        let ds = [diag(), diag()];
        let f = CheckedFile {
            path: "a.stratum.yaml",
            text,
            lines: &lines,
            diagnostics: &ds,
        };
        let doc: serde_json::Value =
            serde_json::from_str(&sarif(&[f], &["cannot read b".into()], "1.2.3")).unwrap();
        let run = &doc["runs"][0];
        assert_eq!(run["tool"]["driver"]["rules"].as_array().unwrap().len(), 1);
        assert_eq!(run["results"].as_array().unwrap().len(), 2);
        assert_eq!(run["results"][1]["ruleIndex"], 0);
        assert_eq!(
            run["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"],
            2
        );
        assert_eq!(run["invocations"][0]["executionSuccessful"], false);
    }
}
