//! Unit tests of the `stratum.toml` reader, merge and canonical text.

use super::*;

fn err(text: &str) -> String {
    Config::from_toml(text).unwrap_err().to_string()
}

#[test]
fn one_file_serves_every_consumer() {
    let c = Config::from_toml(
        "[agents.codex]\ncommand = \"codex exec\"\ntimeout_ms = 90000\ntokens = 5\n\
         [agents.claude]\ntokens = 1\np_success = 1\n\
         [judge]\nurl = \"http://x\"\nmodel = \"m\"\nusd = 0.5\n\
         [judge.stakes.paranoid]\nmodel = \"big\"\n",
    )
    .unwrap();
    assert_eq!(
        c.commands(),
        BTreeMap::from([(Agent::Codex, "codex exec".to_owned())])
    );
    assert_eq!(c.agents[&Agent::Codex].timeout_ms, Some(90_000));
    assert_eq!(c.agents[&Agent::Claude].figures().tokens, Some(1.0));
    assert_eq!(c.agents[&Agent::Claude].figures().p_success, Some(1.0));
    let j = c.judge_runner().unwrap();
    assert_eq!((j.url.as_str(), j.model.as_str()), ("http://x", "m"));
    assert_eq!(j.timeout_ms, DEFAULT_JUDGE_TIMEOUT_MS);
    assert_eq!(
        j.per_stakes[&Stakes::Paranoid].model.as_deref(),
        Some("big")
    );
    assert_eq!(c.judge.unwrap().figures().usd, Some(0.5));
    assert_eq!(Config::from_toml("").unwrap(), Config::default());
    // cost figures only: no runner
    let c = Config::from_toml("[judge]\nusd = 0\n").unwrap();
    assert_eq!(c.judge_runner(), None);
}

#[test]
fn unknown_agents_tables_and_keys_are_refused_with_the_line() {
    let e = err("# x\n[agents.cladue]\ncommand = \"c\"\n");
    assert_eq!(
        e,
        "stratum.toml, line 2: unknown agent `cladue` in `[agents.cladue]`; the agent names are `claude`, `codex` (did you mean `claude`?)"
    );
    let e = err("[agents.gpt]\nusd = 1\n");
    assert!(
        e.contains("unknown agent `gpt`") && !e.contains("did you mean"),
        "{e}"
    );
    let e = err("[agents.claude]\ncomand = \"x\"\n");
    assert!(
        e.starts_with("stratum.toml, line 2: unknown key `agents.claude.comand`; expected one of `command`, `timeout_ms`")
            && e.ends_with("(did you mean `command`?)"),
        "{e}"
    );
    assert!(err("[stroe]\n").contains("unknown table `stroe`"));
    let e = err("[judge.stakes.paranoi]\n");
    assert!(
        e.contains("unknown stakes `paranoi`") && e.contains("`paranoid`?"),
        "{e}"
    );
}

#[test]
fn values_are_checked_once_here() {
    for (text, want) in [
        (
            "[agents.codex]\np_success = 2\n",
            "line 2: `agents.codex.p_success` must be between 0 and 1, found 2",
        ),
        (
            "[agents.codex]\nusd = -1\n",
            "`agents.codex.usd` must be a finite number ≥ 0, found -1",
        ),
        (
            "[agents.codex]\nms = \"slow\"\n",
            "`agents.codex.ms` must be a number, found a string",
        ),
        (
            "[agents.codex]\ncommand = \" \"\n",
            "`agents.codex.command` must be a non-empty string, found \" \"",
        ),
        (
            "[agents.codex]\ncommand = 3\n",
            "`agents.codex.command` must be a string, found an integer",
        ),
        (
            "[agents.codex]\ntimeout_ms = 0\n",
            "`agents.codex.timeout_ms` must be at least 1, found 0",
        ),
        (
            "[agents.codex]\ntimeout_ms = -5\n",
            "`agents.codex.timeout_ms` must be a non-negative integer",
        ),
        ("agents = 1", "`agents` must be a table, found an integer"),
        (
            "[judge]\nurl = \"ftp://x\"\nmodel = \"m\"\n",
            "`judge.url` must be a URL that starts with http:// or https://",
        ),
        (
            "[judge]\nmodel = \"m\"\n",
            "`[judge]` configures a judge runner but has no `url`",
        ),
        ("[judge]\nurl = \"http://x\"\n", "has no `model`"),
        (
            "[judge]\nurl = \"http://x\"\nmodel = \"m\"\ntimeout_ms = 600001\n",
            "between 1 and 600000, found 600001",
        ),
        (
            "[judge.stakes.cheap]\ntemperature = 9.5\n",
            "`judge.stakes.cheap.temperature` must be between 0 and 2, found 9.5",
        ),
        ("[judge\n", "invalid TOML in stratum.toml, line 1:"),
    ] {
        let e = err(text);
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn the_file_near_a_root_wins_over_none() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(FILE_NAME),
        "[agents.codex]\ncommand = \"x\"\n",
    )
    .unwrap();
    let c = load_near(Some(dir.path())).unwrap();
    assert_eq!(c.commands()[&Agent::Codex], "x");
    let e = load_file(&dir.path().join("nowhere.toml")).unwrap_err();
    assert!(matches!(e, ConfigError::Io { .. }), "{e}");
    let other = dir.path().join("other.toml");
    std::fs::write(&other, "\n[agents.codex]\nusd = \"a lot\"\n").unwrap();
    let e = load_file(&other).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}, line 3: ", other.display())),
        "{e}"
    );
}

fn cfg(text: &str) -> Config {
    Config::from_toml(text).unwrap()
}

const OPERATOR: &str = "[agents.claude]\ncommand = \"claude -p\"\ntimeout_ms = 600000\n\
    [agents.codex]\ncommand = \"codex exec\"\n\
    [judge]\nurl = \"http://judge.op/v1\"\nmodel = \"m\"\ntimeout_ms = 30000\n";

#[test]
fn the_canonical_text_reads_back_to_the_same_config() {
    let c = cfg(
        "[agents.codex]\ncommand = \"a \\\"b\\\"\\n\"\ntimeout_ms = 5\nusd = 0.1\ntokens = 1\n\
         [agents.claude]\n\
         [judge]\nurl = \"http://x\"\nmodel = \"m\"\napi_key_env = \"K\"\np_success = 1e-7\n\
         [judge.stakes.paranoid]\nmodel = \"big\"\ntemperature = 0.5\n",
    );
    let text = c.to_toml();
    assert_eq!(cfg(&text), c, "{text}");
    assert_eq!(text, cfg(&text).to_toml(), "canonical: one text per config");
    assert!(
        text.starts_with("[agents.claude]\n[agents.codex]\ncommand = "),
        "{text}"
    );
    assert_eq!(cfg("").to_toml(), "");
    let frozen = Resolved {
        config: c,
        ..Resolved::default()
    }
    .freeze();
    assert_eq!(
        frozen.hash,
        blake3::hash(text.as_bytes()).to_hex().to_string()
    );
}

#[test]
fn the_operator_wins_and_the_workspace_may_only_narrow() {
    let op = cfg(OPERATOR);
    // no judge and cost figures only: the operator's judge and commands stand
    let m = merge(&op, &cfg("[agents.codex]\nusd = 2\n[judge]\nusd = 0\n")).unwrap();
    assert_eq!(m.judge_runner(), op.judge_runner());
    assert_eq!(m.commands(), op.commands());
    assert_eq!(m.agents[&Agent::Codex].usd, Some(2.0));
    // narrowing: a subset of the commands (unchanged), shorter timeouts
    let m = merge(
        &op,
        &cfg(
            "[agents.codex]\ncommand = \"codex exec\"\ntimeout_ms = 1000\n\
              [judge]\nurl = \"http://judge.op/v1\"\ntimeout_ms = 500\nmodel = \"m\"\n",
        ),
    )
    .unwrap();
    assert_eq!(
        m.commands(),
        BTreeMap::from([(Agent::Codex, "codex exec".to_owned())])
    );
    assert_eq!(m.agent_timeout(Agent::Codex).as_millis(), 1000);
    assert_eq!(m.judge_runner().unwrap().timeout_ms, 500);
    assert_eq!(m.judge_runner().unwrap().url, "http://judge.op/v1");
}

#[test]
fn connector_keys_are_read_frozen_checked_and_only_repeated_by_a_workspace() {
    let text = "[agents.claude]\nconnector = \"claude-code\"\nmodel = \"opus\"\n\
                allowed_tools = [\"Read\", \"Bash(git diff:*)\"]\npermission_mode = \"plan\"\nmax_turns = 3\n\
                [agents.codex]\nconnector = \"codex\"\nsandbox = \"workspace-write\"\nreasoning_effort = \"high\"\n";
    let c = cfg(text);
    let (kind, s) = c.agents[&Agent::Claude].connector_settings().unwrap();
    assert_eq!(kind, ConnectorKind::ClaudeCode);
    assert_eq!(s.allowed_tools, ["Read", "Bash(git diff:*)"]);
    assert_eq!(s.permission_mode, Some(PermissionMode::Plan));
    assert_eq!(
        c.agents[&Agent::Codex].sandbox,
        Some(Sandbox::WorkspaceWrite)
    );
    // frozen into a run and read back unchanged
    assert_eq!(cfg(&c.to_toml()), c, "{}", c.to_toml());
    for (bad, want) in [
        ("[agents.claude]\nconnector = \"claude\"\n", "claude-code"),
        (
            "[agents.claude]\nconnector = \"codex\"\ncommand = \"x\"\n",
            "not both",
        ),
        ("[agents.claude]\nmodel = \"m\"\n", "connector setting"),
        (
            "[agents.codex]\nconnector = \"codex\"\nmax_turns = 2\n",
            "`max_turns` is a setting of `connector = \"claude-code\"`, not of `codex`",
        ),
        (
            "[agents.claude]\nconnector = \"claude-code\"\nsandbox = \"read-only\"\n",
            "setting of `connector = \"codex\"`",
        ),
        (
            "[agents.claude]\nconnector = \"claude-code\"\npermission_mode = \"yolo\"\n",
            "bypassPermissions",
        ),
        (
            "[agents.claude]\nconnector = \"claude-code\"\nallowed_tools = [\"A,B\"]\n",
            "without a comma",
        ),
    ] {
        let e = err(bad);
        assert!(e.contains(want), "{bad}: {e}");
    }
    // a workspace may repeat the operator's connector keys, not change or add one
    assert!(
        merge(
            &c,
            &cfg("[agents.claude]\nconnector = \"claude-code\"\nmodel = \"opus\"\n")
        )
        .is_ok()
    );
    let w = cfg(
        "[agents.claude]\nconnector = \"claude-code\"\nmodel = \"haiku\"\npermission_mode = \"bypassPermissions\"\n",
    );
    let bad = merge(&c, &w).unwrap_err();
    let paths: Vec<&str> = bad.iter().map(|b| b.path.as_str()).collect();
    assert_eq!(
        paths,
        ["agents.claude.model", "agents.claude.permission_mode"]
    );
    let bad = merge(&cfg(""), &cfg("[agents.codex]\nconnector = \"codex\"\n")).unwrap_err();
    assert_eq!(bad[0].path, "agents.codex.connector");
}

#[test]
fn a_workspace_that_widens_is_refused_key_by_key() {
    let op = cfg(OPERATOR);
    let w = cfg("[agents.claude]\ncommand = \"evil\"\ntimeout_ms = 600001\n\
                 [judge]\nurl = \"http://judge.agent/v1\"\nmodel = \"m\"\ntimeout_ms = 60000\n\
                 [judge.stakes.cheap]\nmodel = \"tiny\"\n");
    let bad = merge(&op, &w).unwrap_err();
    let paths: Vec<&str> = bad.iter().map(|b| b.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "agents.claude.command",
            "agents.claude.timeout_ms",
            "judge.url",
            "judge.timeout_ms",
            "judge.stakes.cheap.model"
        ]
    );
    assert_eq!(
        bad[2].to_string(),
        "`judge.url` = \"http://judge.agent/v1\" (the operator's: \"http://judge.op/v1\"; it may only repeat the operator's value)"
    );
    // a command the operator does not give, a judge the operator does not configure
    let op = cfg("[agents.claude]\ncommand = \"claude -p\"\n");
    let bad = merge(
        &op,
        &cfg("[agents.codex]\ncommand = \"x\"\n[judge]\nurl = \"http://j\"\nmodel = \"m\"\n"),
    )
    .unwrap_err();
    assert_eq!(bad[0].path, "agents.codex.command");
    assert!(
        bad[0]
            .to_string()
            .contains("the operator's: none; it cannot add one"),
        "{}",
        bad[0]
    );
    assert!(
        bad[1]
            .to_string()
            .contains("the operator configures no judge"),
        "{}",
        bad[1]
    );
    // the default timeouts are the operator's limit when it names none
    let bad = merge(&op, &cfg("[agents.claude]\ntimeout_ms = 1800001\n")).unwrap_err();
    assert_eq!(bad[0].operator.as_deref(), Some("1800000"));
}

#[test]
fn a_run_gets_the_merged_files_and_later_keeps_its_frozen_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (op_file, ws) = (dir.path().join("operator.toml"), dir.path().join("ws"));
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(&op_file, OPERATOR).unwrap();
    std::fs::write(
        ws.join(FILE_NAME),
        "[agents.codex]\ncommand = \"codex exec\"\n",
    )
    .unwrap();
    let r = for_run(Some(&op_file), Some(&ws)).unwrap();
    assert_eq!(r.config.commands().len(), 1);
    assert_eq!(
        r.sources(),
        [
            op_file.display().to_string(),
            ws.join(FILE_NAME).display().to_string()
        ]
    );
    let frozen = r.freeze();
    // unchanged files: no warning
    let now = of_run("run-1", Some(&frozen.text), Some(&op_file), Some(&ws)).unwrap();
    assert_eq!((now.config, now.warnings), (r.config.clone(), vec![]));
    // the agent re-points the judge: refused for a new run, ignored for this one
    std::fs::write(
        ws.join(FILE_NAME),
        "[judge]\nurl = \"http://judge.agent/v1\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let e = for_run(Some(&op_file), Some(&ws)).unwrap_err().to_string();
    assert!(
        e.contains("may only narrow the operator's configuration") && e.contains("`judge.url`"),
        "{e}"
    );
    let later = of_run("run-1", Some(&frozen.text), Some(&op_file), Some(&ws)).unwrap();
    assert_eq!(later.config, r.config);
    assert_eq!(later.warnings.len(), 1);
    assert!(
        later.warnings[0].contains("refused") && later.warnings[0].contains("ignored"),
        "{:?}",
        later.warnings
    );
    // without an operator file the workspace's change is a difference, named
    let later = of_run("run-1", Some(&frozen.text), None, Some(&ws)).unwrap();
    assert_eq!(later.config, r.config);
    assert!(
        later.warnings[0]
            .contains("`judge.url`: \"http://judge.op/v1\" → \"http://judge.agent/v1\""),
        "{:?}",
        later.warnings
    );
    // a damaged frozen copy is an error naming the run
    let e = of_run("run-1", Some("[x"), None, Some(&ws))
        .unwrap_err()
        .to_string();
    assert!(e.contains("the configuration frozen into run run-1"), "{e}");
}

#[test]
fn named_judges_are_read_frozen_and_checked() {
    let c = Config::from_toml(
        "[judge]\nurl = \"http://d/v1\"\nmodel = \"m\"\n\
         [judges.local]\nurl = \"http://127.0.0.1:11434/v1\"\nmodel = \"qwen\"\ntokens = 500\n\
         [judges.cheap-one]\nusd = 0\n",
    )
    .unwrap();
    let local = c.named_judge_runner("local").unwrap();
    assert_eq!(
        (local.url.as_str(), local.model.as_str(), local.timeout_ms),
        (
            "http://127.0.0.1:11434/v1",
            "qwen",
            DEFAULT_JUDGE_TIMEOUT_MS
        )
    );
    // cost figures only: a known name without a runner
    assert_eq!(c.named_judge_runner("cheap-one"), None);
    assert_eq!(c.judge_section(Some("local")).unwrap().tokens, Some(500.0));
    assert_eq!(c.judge_section(Some("nope")), c.judge.as_ref());
    let runners: Vec<Option<String>> = c.judge_runners().into_keys().collect();
    assert_eq!(runners, [None, Some("local".to_owned())]);
    // frozen text reads back equal
    assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
    for (text, needle) in [
        (
            "[judges.local]\nmodel = \"m\"\n",
            "`[judges.local]` configures a judge runner but has no `url`",
        ),
        (
            "[judges.local]\nurl = \"ftp://x\"\nmodel = \"m\"\n",
            "`judges.local.url` must be a URL",
        ),
        ("[judges.\"9x\"]\nusd = 1\n", "a judge name"),
        ("[judges.local]\nmodle = \"m\"\n", "did you mean `model`?"),
    ] {
        let e = Config::from_toml(text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn a_workspace_may_only_narrow_each_named_judge() {
    let op = Config::from_toml(
        "[judges.local]\nurl = \"http://127.0.0.1:11434/v1\"\nmodel = \"qwen\"\ntimeout_ms = 30000\n",
    )
    .unwrap();
    // repeating the operator's judge and shortening its timeout narrows it
    let ws = Config::from_toml(
        "[judges.local]\nurl = \"http://127.0.0.1:11434/v1\"\nmodel = \"qwen\"\ntimeout_ms = 500\nusd = 0\n",
    )
    .unwrap();
    let m = merge(&op, &ws).unwrap();
    assert_eq!(m.named_judge_runner("local").unwrap().timeout_ms, 500);
    assert_eq!(m.judges["local"].usd, Some(0.0));
    // a URL the operator did not allow, and a judge the operator does not have
    let ws = Config::from_toml(
        "[judges.local]\nurl = \"http://evil/v1\"\nmodel = \"qwen\"\n\
         [judges.extra]\nurl = \"http://x/v1\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let w = merge(&op, &ws).unwrap_err();
    let paths: Vec<&str> = w.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(
        paths,
        ["judges.extra.url", "judges.extra.model", "judges.local.url"]
    );
    assert!(w[0].rule.contains("the operator configures no judge"));
    // the default judge does not allow a named one
    let op = Config::from_toml("[judge]\nurl = \"http://x/v1\"\nmodel = \"m\"\n").unwrap();
    let ws = Config::from_toml("[judges.x]\nurl = \"http://x/v1\"\nmodel = \"m\"\n").unwrap();
    assert!(merge(&op, &ws).is_err());
}

#[test]
fn commands_are_read_with_defaults_frozen_and_checked() {
    let c = Config::from_toml(
        "[commands.test]\nargv = [\"python3\", \"-m\", \"pytest\", \"-q\"]\ntimeout_ms = 120000\nenv = [\"CI\", \"PATH\"]\n\
         [commands.lint]\nargv = [\"ruff\"]\nmax_output_bytes = 4096\n",
    )
    .unwrap();
    let test = c.command("test").unwrap();
    assert_eq!(test.argv, ["python3", "-m", "pytest", "-q"]);
    assert_eq!(test.timeout_ms, 120_000);
    assert_eq!(test.env, ["CI", "HOME", "LANG", "PATH"]);
    assert_eq!(test.max_output_bytes, DEFAULT_COMMAND_OUTPUT_BYTES);
    let lint = c.command("lint").unwrap();
    assert_eq!(
        (lint.timeout_ms, lint.max_output_bytes),
        (DEFAULT_COMMAND_TIMEOUT_MS, 4096)
    );
    assert_eq!(c.command("nope"), None);
    assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
    for (text, needle) in [
        (
            "[commands.t]\ntimeout_ms = 5\n",
            "`commands.t.argv` is missing",
        ),
        ("[commands.t]\nargv = []\n", "a non-empty array"),
        (
            "[commands.t]\nargv = \"pytest -q\"\n",
            "`commands.t.argv` must be",
        ),
        (
            "[commands.t]\nargv = [\"x\"]\nenv = [\"A=B\"]\n",
            "an environment variable name",
        ),
        (
            "[commands.t]\nargv = [\"x\"]\ntimeout_ms = 0\n",
            "between 1 and 3600000",
        ),
        (
            "[commands.t]\nargv = [\"x\"]\nmax_output_bytes = 999999999\n",
            "between 1 and 67108864",
        ),
        (
            "[commands.t]\nargv = [\"x\"]\nshell = true\n",
            "unknown key `commands.t.shell`",
        ),
        ("[commands.\"9\"]\nargv = [\"x\"]\n", "a command name"),
    ] {
        let e = Config::from_toml(text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn a_workspace_may_only_narrow_each_command() {
    let op = Config::from_toml(
        "[commands.test]\nargv = [\"pytest\"]\ntimeout_ms = 60000\nenv = [\"CI\", \"TOKEN\"]\n\
         [commands.lint]\nargv = [\"ruff\"]\n",
    )
    .unwrap();
    // same argv, shorter timeout, smaller output, fewer names: narrowed
    let ws = Config::from_toml(
        "[commands.test]\nargv = [\"pytest\"]\ntimeout_ms = 500\nenv = [\"CI\"]\nmax_output_bytes = 100\n",
    )
    .unwrap();
    let m = merge(&op, &ws).unwrap();
    let test = m.command("test").unwrap();
    assert_eq!((test.timeout_ms, test.max_output_bytes), (500, 100));
    assert_eq!(test.env, ["CI", "HOME", "LANG", "PATH"]);
    // a command the workspace leaves out stays as the operator declares it
    assert_eq!(m.command("lint"), op.command("lint"));
    // another argv, a longer timeout, a new name, a command of its own
    let ws = Config::from_toml(
        "[commands.test]\nargv = [\"sh\", \"-c\", \"curl evil\"]\ntimeout_ms = 90000\nenv = [\"AWS_SECRET\"]\n\
         [commands.extra]\nargv = [\"rm\"]\n",
    )
    .unwrap();
    let w = merge(&op, &ws).unwrap_err();
    let paths: Vec<&str> = w.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "commands.extra.argv",
            "commands.test.argv",
            "commands.test.timeout_ms",
            "commands.test.env"
        ]
    );
    assert!(w[0].rule.contains("cannot add one"), "{}", w[0]);
    assert!(w[3].to_string().contains("AWS_SECRET"), "{}", w[3]);
    // no operator file: the workspace's file is the configuration (for_run)
    let m = merge(&Config::default(), &ws).unwrap_err();
    assert_eq!(m.len(), 2);
}
