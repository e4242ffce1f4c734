//! The task compiler of seed 000 (任务编译器): spec-kit task files
//! (`tasks/*.md`) → a Stratum v1 spec.
//!
//! Owns: parsing a task file (`# Task: [P] title`, a description, an
//! `## Acceptance Criteria` checklist), compiling criteria (`file X exists` →
//! `file_exists`, `file X contains "Y"` → `file_contains`, `tests pass` and
//! `no lint errors` → boolean result fields `tests_pass` / `lint_clean` of the
//! step's contract with an `expr` ensure on each, anything else → the step's
//! task text), the dependency rules of the seed (a sequential task follows
//! the previous task; consecutive `[P]` tasks share one predecessor and have
//! no edges between them; the next sequential task follows every task of the
//! group), and writing the spec as YAML text.
//! Must never: read files (callers hand it `(file name, text)` pairs), or
//! emit a spec that `stratumc check` would reject — the unit tests check
//! every output with [`crate::analyze`].
//!
//! Decisions the seed leaves open:
//! - files are taken in natural order of their names (`2-x.md` before `10-y.md`);
//! - a step id is the file stem in lower case with every other character
//!   turned into `_` (`T001-Setup DB.md` → `t001_setup_db`), prefixed with
//!   `t_` when it does not start with a letter;
//! - a literal `${` in task text becomes `$ {` (v1 templates have no escape);
//! - when the last tasks form a parallel group, a final `set` step `done`
//!   collects their summaries as the flow output.

use std::cmp::Ordering;
use std::fmt::Write as _;

use crate::syntax::decode::is_step_id;

/// Default flow name (seed 000).
pub const DEFAULT_FLOW: &str = "tasks";

/// Why a task directory does not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No task files were given.
    NoTasks,
    /// Two files give the same step id.
    StepIdCollision {
        /// The step id.
        id: String,
        /// The files.
        files: [String; 2],
    },
    /// A file (or the flow name) cannot be compiled.
    Compile {
        /// The file (empty for the flow name).
        file: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl Error {
    /// The `error_type` of the MCP tool (`no_tasks`, `step_id_collision`, `compile_error`).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::NoTasks => "no_tasks",
            Error::StepIdCollision { .. } => "step_id_collision",
            Error::Compile { .. } => "compile_error",
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoTasks => write!(
                f,
                "no task files: a spec-kit tasks directory holds one `*.md` file per task, starting with `# Task: <title>`"
            ),
            Error::StepIdCollision { id, files } => write!(
                f,
                "{} and {} both give the step id `{id}`: rename one of the files",
                files[0], files[1]
            ),
            Error::Compile { file, message } if file.is_empty() => write!(f, "{message}"),
            Error::Compile { file, message } => write!(f, "{file}: {message}"),
        }
    }
}

/// A compiled criterion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Criterion {
    /// `file X exists`.
    FileExists(String),
    /// `file X contains Y`.
    FileContains {
        /// The file.
        path: String,
        /// The text.
        text: String,
    },
    /// `tests pass`.
    TestsPass,
    /// `no lint errors`.
    LintClean,
    /// Anything else: judged by the agent, written into the task.
    FreeForm(String),
}

/// One task, as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The file name.
    pub file: String,
    /// The step id.
    pub id: String,
    /// The title (without `[P]`).
    pub title: String,
    /// `[P]` in the title.
    pub parallel: bool,
    /// The text between the title and the criteria.
    pub description: String,
    /// Criteria in file order (original text, compiled form).
    pub criteria: Vec<(String, Criterion)>,
    /// Steps this one runs after.
    pub after: Vec<String>,
}

impl Task {
    /// The ensure predicates as short text (`file_exists("x")`, `result.tests_pass == true`).
    pub fn ensures(&self) -> Vec<String> {
        self.criteria
            .iter()
            .filter_map(|(_, c)| match c {
                Criterion::FileExists(p) => Some(format!("file_exists({})", quote(p))),
                Criterion::FileContains { path, text } => {
                    Some(format!("file_contains({}, {})", quote(path), quote(text)))
                }
                Criterion::TestsPass => Some("result.tests_pass == true".into()),
                Criterion::LintClean => Some("result.lint_clean == true".into()),
                Criterion::FreeForm(_) => None,
            })
            .collect()
    }

    /// The free-form criteria (left to the agent's judgment).
    pub fn judgment(&self) -> Vec<String> {
        self.criteria
            .iter()
            .filter_map(|(_, c)| match c {
                Criterion::FreeForm(t) => Some(t.clone()),
                _ => None,
            })
            .collect()
    }

    fn tests(&self) -> bool {
        self.criteria
            .iter()
            .any(|(_, c)| *c == Criterion::TestsPass)
    }

    fn lint(&self) -> bool {
        self.criteria
            .iter()
            .any(|(_, c)| *c == Criterion::LintClean)
    }

    /// The contract of the step's result.
    fn contract(&self) -> &'static str {
        match (self.tests(), self.lint()) {
            (false, false) => "TaskResult",
            (true, false) => "TestedTaskResult",
            (false, true) => "LintedTaskResult",
            (true, true) => "CheckedTaskResult",
        }
    }
}

/// The compiled spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// The flow name.
    pub flow_name: String,
    /// The tasks in execution-file order, with their dependencies.
    pub tasks: Vec<Task>,
    /// The spec, as YAML text.
    pub yaml: String,
}

fn quote(s: &str) -> String {
    // A JSON string is a valid YAML double-quoted scalar.
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// Natural order: digit runs compare as numbers.
fn natural(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.chars().peekable(), b.chars().peekable());
    loop {
        match (x.peek().copied(), y.peek().copied()) {
            (None, None) => return a.cmp(b),
            (None, _) => return Ordering::Less,
            (_, None) => return Ordering::Greater,
            (Some(c), Some(d)) if c.is_ascii_digit() && d.is_ascii_digit() => {
                let mut n = String::new();
                while let Some(c) = x.peek().copied().filter(char::is_ascii_digit) {
                    n.push(c);
                    x.next();
                }
                let mut m = String::new();
                while let Some(d) = y.peek().copied().filter(char::is_ascii_digit) {
                    m.push(d);
                    y.next();
                }
                let (n, m) = (n.trim_start_matches('0'), m.trim_start_matches('0'));
                let o = n.len().cmp(&m.len()).then_with(|| n.cmp(m));
                if o != Ordering::Equal {
                    return o;
                }
            }
            (Some(c), Some(d)) => {
                if c != d {
                    return c.cmp(&d);
                }
                x.next();
                y.next();
            }
        }
    }
}

/// The step id of a task file.
pub fn step_id(file: &str) -> String {
    let stem = file.strip_suffix(".md").unwrap_or(file);
    let mut id: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if !id.starts_with(|c: char| c.is_ascii_lowercase()) {
        id.insert_str(0, "t_");
    }
    id
}

fn strip_quotes(s: &str) -> &str {
    let s = s.trim();
    for (open, close) in [('"', '"'), ('\'', '\''), ('`', '`'), ('“', '”')] {
        if let Some(inner) = s.strip_prefix(open).and_then(|r| r.strip_suffix(close))
            && !inner.is_empty()
        {
            return inner;
        }
    }
    s
}

/// Compiles one criterion line (the text after `- [ ]`).
pub fn criterion(text: &str) -> Criterion {
    let t = text.trim().trim_end_matches('.').trim();
    // ASCII lower case keeps byte offsets equal between `t` and `lower`
    let lower = t.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "tests pass" | "all tests pass" | "the tests pass"
    ) {
        return Criterion::TestsPass;
    }
    if matches!(lower.as_str(), "no lint errors" | "no linting errors") {
        return Criterion::LintClean;
    }
    if let Some(rest_lower) = lower.strip_prefix("file ") {
        let rest = &t["file ".len()..];
        if let Some(path) = rest_lower
            .strip_suffix(" exists")
            .map(|p| strip_quotes(&rest[..p.len()]))
            && !path.is_empty()
            && !path.contains(char::is_whitespace)
        {
            return Criterion::FileExists(path.to_string());
        }
        if let Some(at) = rest_lower.find(" contains ") {
            let path = strip_quotes(&rest[..at]);
            let needle = strip_quotes(&rest[at + " contains ".len()..]);
            if !path.is_empty() && !path.contains(char::is_whitespace) && !needle.is_empty() {
                return Criterion::FileContains {
                    path: path.to_string(),
                    text: needle.to_string(),
                };
            }
        }
    }
    Criterion::FreeForm(text.trim().to_string())
}

fn compile_error(file: &str, message: impl Into<String>) -> Error {
    Error::Compile {
        file: file.to_string(),
        message: message.into(),
    }
}

/// Parses one task file.
pub fn parse_task(file: &str, text: &str) -> Result<Task, Error> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text
        .lines()
        .enumerate()
        .skip_while(|(_, l)| l.trim().is_empty());
    let Some((_, first)) = lines.next() else {
        return Err(compile_error(
            file,
            "the file is empty; a task starts with a heading `# Task: <title>`",
        ));
    };
    let heading = first.trim();
    let Some(title) = heading
        .strip_prefix("# ")
        .map(str::trim)
        .and_then(|h| h.strip_prefix("Task:").or_else(|| h.strip_prefix("task:")))
    else {
        return Err(compile_error(
            file,
            format!(
                "the first line must be a heading `# Task: <title>` (e.g. `# Task: [P] Implement authentication`), found `{}`",
                heading.chars().take(60).collect::<String>()
            ),
        ));
    };
    let mut title = title.trim().to_string();
    let parallel = title.contains("[P]");
    if parallel {
        title = title.replace("[P]", " ");
        title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    if title.is_empty() {
        return Err(compile_error(
            file,
            "the task has no title: write it after `# Task:`",
        ));
    }
    let mut description = Vec::new();
    let mut criteria = Vec::new();
    let mut in_criteria = false;
    for (n, line) in lines {
        let trimmed = line.trim();
        if let Some(h) = trimmed.strip_prefix("## ") {
            in_criteria = h
                .trim()
                .trim_end_matches(':')
                .eq_ignore_ascii_case("acceptance criteria");
            if !in_criteria {
                description.push(line.to_string());
            }
            continue;
        }
        if trimmed.starts_with("# ") {
            return Err(compile_error(
                file,
                format!(
                    "line {}: a second `#` heading; one file holds one task (use `##` for sections)",
                    n + 1
                ),
            ));
        }
        if !in_criteria {
            description.push(line.to_string());
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        let item = trimmed
            .strip_prefix("- ")
            .or_else(|| trimmed.strip_prefix("* "))
            .map(str::trim_start);
        let Some(item) = item else {
            return Err(compile_error(
                file,
                format!(
                    "line {}: acceptance criteria are list items (`- [ ] file src/x.ts exists`), found `{}`",
                    n + 1,
                    trimmed.chars().take(60).collect::<String>()
                ),
            ));
        };
        let item = ["[ ]", "[x]", "[X]"]
            .iter()
            .find_map(|b| item.strip_prefix(b))
            .unwrap_or(item)
            .trim();
        if item.is_empty() {
            return Err(compile_error(
                file,
                format!("line {}: an empty acceptance criterion", n + 1),
            ));
        }
        criteria.push((item.to_string(), criterion(item)));
    }
    let description = description.join("\n").trim().to_string();
    Ok(Task {
        file: file.to_string(),
        id: step_id(file),
        title,
        parallel,
        description,
        criteria,
        after: Vec::new(),
    })
}

fn valid_flow_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Compiles task files (`(file name, markdown text)`, any order) into a spec.
/// All unparseable files are reported, not only the first.
pub fn compile(
    files: &[(String, String)],
    flow_name: Option<&str>,
) -> Result<Compiled, Vec<Error>> {
    let flow_name = flow_name.unwrap_or(DEFAULT_FLOW);
    let mut errors = Vec::new();
    if !valid_flow_name(flow_name) || flow_name == "entry" {
        errors.push(compile_error(
            "",
            format!("invalid flow name `{flow_name}`: use letters, digits, `_` and `-`, starting with a letter (and not `entry`)"),
        ));
    }
    if files.is_empty() {
        errors.push(Error::NoTasks);
        return Err(errors);
    }
    let mut sorted: Vec<&(String, String)> = files.iter().collect();
    sorted.sort_by(|a, b| natural(&a.0, &b.0));
    let mut tasks: Vec<Task> = Vec::new();
    for (file, text) in sorted {
        match parse_task(file, text) {
            Ok(t) => {
                if let Some(other) = tasks.iter().find(|o| o.id == t.id) {
                    errors.push(Error::StepIdCollision {
                        id: t.id.clone(),
                        files: [other.file.clone(), t.file.clone()],
                    });
                } else if t.id == "done" {
                    errors.push(compile_error(
                        file,
                        "the step id `done` is reserved for the generated final step: rename the file",
                    ));
                } else {
                    debug_assert!(is_step_id(&t.id));
                    tasks.push(t);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // dependencies (seed 000, 依赖图)
    let mut frontier: Vec<String> = Vec::new();
    let mut base: Vec<String> = Vec::new();
    let mut in_group = false;
    for t in &mut tasks {
        if t.parallel {
            if !in_group {
                base = std::mem::take(&mut frontier);
                in_group = true;
            }
            t.after = base.clone();
            frontier.push(t.id.clone());
        } else {
            t.after = std::mem::take(&mut frontier);
            frontier = vec![t.id.clone()];
            in_group = false;
        }
    }
    let yaml = emit(flow_name, &tasks, &frontier);
    Ok(Compiled {
        flow_name: flow_name.to_string(),
        tasks,
        yaml,
    })
}

fn task_text(t: &Task) -> String {
    let mut s = t.title.clone();
    if !t.description.is_empty() {
        s.push_str("\n\n");
        s.push_str(&t.description);
    }
    if !t.criteria.is_empty() {
        s.push_str("\n\nAcceptance criteria:");
        for (text, _) in &t.criteria {
            s.push_str("\n- ");
            s.push_str(text);
        }
    }
    let mut fields = vec!["`summary` (what you did)"];
    if t.tests() {
        fields.push("`tests_pass` (true when the test suite passes)");
    }
    if t.lint() {
        fields.push("`lint_clean` (true when the linter reports no errors)");
    }
    let _ = write!(s, "\n\nReport {}.", fields.join(", "));
    // v1 templates have no escape for a literal `${`
    s.replace("${", "$ {")
}

/// A YAML scalar for `text` at `indent`: a literal block when it reads well, else a quoted string.
fn scalar(text: &str, indent: usize) -> String {
    let plain_lines = text
        .chars()
        .all(|c| c == '\n' || c == '\t' || !c.is_control())
        && !text.starts_with([' ', '\t', '\n'])
        && !text.contains('\u{feff}')
        && text.contains('\n');
    if !plain_lines {
        return quote(text);
    }
    let pad = " ".repeat(indent);
    let mut s = String::from("|-");
    for line in text.lines() {
        s.push('\n');
        if !line.trim().is_empty() {
            s.push_str(&pad);
            s.push_str(line.trim_end());
        }
    }
    s
}

fn emit(flow: &str, tasks: &[Task], sinks: &[String]) -> String {
    let mut y = String::new();
    let _ = writeln!(
        y,
        "# Generated by `stratumc compile-speckit` from {} task file{}; edit the task files, not this spec.",
        tasks.len(),
        if tasks.len() == 1 { "" } else { "s" }
    );
    y.push_str("version: 1\ncontracts:\n");
    let mut used: Vec<&str> = Vec::new();
    for t in tasks {
        if !used.contains(&t.contract()) {
            used.push(t.contract());
        }
    }
    for c in [
        "TaskResult",
        "TestedTaskResult",
        "LintedTaskResult",
        "CheckedTaskResult",
    ] {
        if !used.contains(&c) {
            continue;
        }
        let _ = writeln!(y, "  {c}:\n    summary: string");
        if c == "TestedTaskResult" || c == "CheckedTaskResult" {
            y.push_str("    tests_pass: boolean\n");
        }
        if c == "LintedTaskResult" || c == "CheckedTaskResult" {
            y.push_str("    lint_clean: boolean\n");
        }
    }
    let final_set = sinks.len() > 1;
    if final_set {
        y.push_str("  TasksDone:\n");
        for s in sinks {
            let _ = writeln!(y, "    {s}: string");
        }
    }
    let _ = writeln!(y, "flows:\n  entry: {flow}\n  {flow}:\n    input: {{}}");
    if final_set {
        y.push_str("    output:\n      from: \"${done.output}\"\n      contract: TasksDone\n");
    } else {
        let last = tasks
            .iter()
            .find(|t| sinks.first() == Some(&t.id))
            .or(tasks.last());
        if let Some(last) = last {
            let _ = writeln!(
                y,
                "    output:\n      from: \"${{{}.output}}\"\n      contract: {}",
                last.id,
                last.contract()
            );
        }
    }
    y.push_str("    steps:\n");
    for t in tasks {
        let _ = writeln!(y, "      - id: {}", t.id);
        if !t.after.is_empty() {
            let _ = writeln!(y, "        after: [{}]", t.after.join(", "));
        }
        let _ = writeln!(y, "        do: {}", scalar(&task_text(t), 10));
        let _ = writeln!(y, "        out: {}", t.contract());
        let mut ensures = Vec::new();
        for (_, c) in &t.criteria {
            match c {
                Criterion::FileExists(p) => ensures.push(format!("file_exists: {}", quote(p))),
                Criterion::FileContains { path, text } => ensures.push(format!(
                    "file_contains: {{path: {}, text: {}}}",
                    quote(path),
                    quote(text)
                )),
                Criterion::TestsPass => {
                    ensures.push("expr: \"result.tests_pass == true\"".to_string())
                }
                Criterion::LintClean => {
                    ensures.push("expr: \"result.lint_clean == true\"".to_string())
                }
                Criterion::FreeForm(_) => {}
            }
        }
        let mut seen = std::collections::HashSet::new();
        ensures.retain(|e| seen.insert(e.clone()));
        if !ensures.is_empty() {
            y.push_str("        ensure:\n");
            for e in ensures {
                let _ = writeln!(y, "          - {e}");
            }
        }
    }
    if final_set {
        let _ = writeln!(
            y,
            "      - id: done\n        after: [{}]\n        set:",
            sinks.join(", ")
        );
        for s in sinks {
            let _ = writeln!(y, "          {s}: \"result.{s}.summary\"");
        }
        y.push_str("        out: TasksDone\n");
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> (String, String) {
        (name.to_string(), text.to_string())
    }

    fn after(c: &Compiled) -> Vec<(String, Vec<String>)> {
        c.tasks
            .iter()
            .map(|t| (t.id.clone(), t.after.clone()))
            .collect()
    }

    fn checks(c: &Compiled) {
        let a = crate::analyze(&c.yaml);
        assert!(
            a.diagnostics.is_empty(),
            "{:?}\n{}",
            a.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>(),
            c.yaml
        );
    }

    #[test]
    fn criteria_forms() {
        assert_eq!(
            criterion("file src/auth/middleware.ts exists"),
            Criterion::FileExists("src/auth/middleware.ts".into())
        );
        assert_eq!(
            criterion("File `a b.txt` exists"),
            Criterion::FreeForm("File `a b.txt` exists".into())
        );
        assert_eq!(
            criterion("file src/a.ts contains \"verifyToken\""),
            Criterion::FileContains {
                path: "src/a.ts".into(),
                text: "verifyToken".into()
            }
        );
        assert_eq!(criterion("Tests pass."), Criterion::TestsPass);
        assert_eq!(criterion("no lint errors"), Criterion::LintClean);
        // non-ASCII text never splits a character
        assert_eq!(
            criterion("file İİİ.txt contains \"ß\""),
            Criterion::FileContains {
                path: "İİİ.txt".into(),
                text: "ß".into()
            }
        );
        assert_eq!(
            criterion("Error messages are user-friendly"),
            Criterion::FreeForm("Error messages are user-friendly".into())
        );
    }

    #[test]
    fn dependency_rules_of_the_seed() {
        let t = |title: &str| format!("# Task: {title}\n");
        let c = compile(
            &[
                file("1-a.md", &t("A")),
                file("2-b.md", &t("[P] B")),
                file("3-c.md", &t("[P] C")),
                file("4-d.md", &t("D")),
                file("10-e.md", &t("[P] E")),
                file("5-f.md", &t("[P] F")),
            ],
            None,
        )
        .unwrap();
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            after(&c),
            [
                ("t_1_a".to_string(), v(&[])),
                ("t_2_b".into(), v(&["t_1_a"])),
                ("t_3_c".into(), v(&["t_1_a"])),
                ("t_4_d".into(), v(&["t_2_b", "t_3_c"])),
                ("t_5_f".into(), v(&["t_4_d"])),
                ("t_10_e".into(), v(&["t_4_d"])),
            ]
        );
        assert!(
            c.yaml
                .contains("- id: done\n        after: [t_5_f, t_10_e]"),
            "{}",
            c.yaml
        );
        checks(&c);
    }

    #[test]
    fn every_output_checks_clean() {
        let c = compile(
            &[file(
                "setup.md",
                "# Task: Set up ${HOME}\n\nUse `x: y` and \"quotes\".\n\n## Acceptance Criteria\n\n- [ ] file a.txt exists\n- [x] file a.txt contains \"hello: ${world}\"\n- [ ] tests pass\n- [ ] no lint errors\n- [ ] Looks good\n",
            )],
            Some("build"),
        )
        .unwrap();
        assert_eq!(c.tasks[0].ensures().len(), 4);
        assert_eq!(c.tasks[0].judgment(), ["Looks good"]);
        assert!(c.yaml.contains("Set up $ {HOME}"), "{}", c.yaml);
        checks(&c);
    }

    #[test]
    fn bad_input_is_reported_per_file() {
        assert_eq!(compile(&[], None).unwrap_err(), [Error::NoTasks]);
        let e = compile(
            &[
                file("a.md", "no heading\n"),
                file("b.md", ""),
                file("c.md", "# Task: x\n## Acceptance Criteria\nnot a list\n"),
            ],
            Some("bad name"),
        )
        .unwrap_err();
        let kinds: Vec<&str> = e.iter().map(Error::kind).collect();
        assert_eq!(kinds, ["compile_error"; 4], "{e:?}");
        assert!(
            e[0].to_string().starts_with("invalid flow name `bad name`"),
            "{}",
            e[0]
        );
        assert!(
            e[1].to_string().starts_with("a.md: the first line must be"),
            "{}",
            e[1]
        );
        assert!(
            e[2].to_string().starts_with("b.md: the file is empty"),
            "{}",
            e[2]
        );
        assert!(
            e[3].to_string()
                .starts_with("c.md: line 3: acceptance criteria are list items"),
            "{}",
            e[3]
        );
        let e = compile(
            &[file("A.md", "# Task: x\n"), file("a.md", "# Task: y\n")],
            None,
        )
        .unwrap_err();
        assert_eq!(
            e,
            [Error::StepIdCollision {
                id: "a".into(),
                files: ["A.md".into(), "a.md".into()]
            }]
        );
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["10-a.md", "2-b.md", "1-c.md", "b.md", "a.md"];
        v.sort_by(|a, b| natural(a, b));
        assert_eq!(v, ["1-c.md", "2-b.md", "10-a.md", "a.md", "b.md"]);
    }
}
