//! Unit tests of the IDE API on a small two-flow spec whose first lines hold
//! non-ASCII text (byte offsets, never chars).

use super::*;

const SPEC: &str = "# é 中文: a comment before every cursor
version: 1
contracts:
  Draft:
    text: string
    score: number
  Review:
    drafts: Draft[]
    ok: boolean
flows:
  entry: main
  helper:
    input:
      topic: string
    output:
      from: \"${write.output}\"
      contract: Draft
    steps:
      - id: write
        do: \"Write about ${input.topic}\"
        out: Draft
  main:
    input:
      topic: string
    output:
      from: \"${review.output}\"
      contract: Review
    steps:
      - id: draft # 中文
        do: \"Draft ${input.topic} (é)\"
        out: Draft
        ensure:
          - expr: \"result.score >= 0.5\"
      - id: sub
        run: helper
        with:
          topic: \"${input.topic}\"
      - id: review
        after: [draft, sub]
        when: \"result.draft.score > 0.1\"
        do: \"Review ${draft.output.text} and ${sub.output.text}\"
        out: Review
";

fn open(text: &str) -> (Db, FileId) {
    let mut db = Db::new();
    let file = db.set_text("t.stratum.yaml", text.to_string());
    (db, file)
}

/// Byte offset of the `nth` occurrence of `needle`, plus `delta`.
fn at(text: &str, needle: &str, nth: usize, delta: usize) -> u32 {
    let mut from = 0;
    for _ in 0..nth {
        from += text[from..].find(needle).expect("needle") + 1;
    }
    (from + text[from..].find(needle).expect("needle") + delta) as u32
}

fn apply(text: &str, edits: &[TextEdit]) -> String {
    let mut edits = edits.to_vec();
    edits.sort_by_key(|e| std::cmp::Reverse(e.span.start));
    let mut out = text.to_string();
    for e in edits {
        out.replace_range(e.span.range(), &e.text);
    }
    out
}

fn slice(text: &str, s: Span) -> &str {
    &text[s.range()]
}

#[test]
fn the_fixture_is_valid() {
    let (db, file) = open(SPEC);
    assert_eq!(diagnostics(&db, file), Vec::new());
    assert!(crate::db::file_analysis(&db, file).ir.is_some());
}

#[test]
fn definition_of_step_uses() {
    let (db, file) = open(SPEC);
    let decl = at(SPEC, "id: draft", 0, 4);
    for (needle, nth, delta) in [
        ("[draft", 0, 1),
        ("result.draft", 0, 8),
        ("${draft.output", 0, 3),
        ("id: draft", 0, 5),
    ] {
        let off = at(SPEC, needle, nth, delta);
        let got = definition(&db, file, off).expect(needle);
        assert_eq!(got.start, decl, "{needle}");
        assert_eq!(slice(SPEC, got), "draft");
    }
}

#[test]
fn definition_of_contracts_flows_inputs_and_fields() {
    let (db, file) = open(SPEC);
    // `out: Draft` → the contract
    let got = definition(&db, file, at(SPEC, "out: Draft", 0, 6)).unwrap();
    assert_eq!(got.start, at(SPEC, "  Draft:", 0, 2));
    // `Draft[]` inside a type string
    let got = definition(&db, file, at(SPEC, "Draft[]", 0, 1)).unwrap();
    assert_eq!(got.start, at(SPEC, "  Draft:", 0, 2));
    // `run: helper` → the flow
    let got = definition(&db, file, at(SPEC, "run: helper", 0, 6)).unwrap();
    assert_eq!(got.start, at(SPEC, "  helper:", 0, 2));
    // `${input.topic}` in main → main's input field
    let got = definition(&db, file, at(SPEC, "${input.topic} (é)", 0, 9)).unwrap();
    assert_eq!(got.start, at(SPEC, "topic: string", 1, 0));
    // `result.score` → the contract field
    let got = definition(&db, file, at(SPEC, "result.score", 0, 8)).unwrap();
    assert_eq!(got.start, at(SPEC, "score: number", 0, 0));
    // `with: topic` → the callee's input
    let got = definition(&db, file, at(SPEC, "topic: \"${input", 0, 1)).unwrap();
    assert_eq!(got.start, at(SPEC, "topic: string", 0, 0));
}

#[test]
fn references_of_a_step() {
    let (db, file) = open(SPEC);
    let refs = references(&db, file, at(SPEC, "id: draft", 0, 5), true);
    assert_eq!(refs.len(), 4, "{refs:?}");
    assert!(refs.iter().all(|s| slice(SPEC, *s) == "draft"));
    let uses = references(&db, file, at(SPEC, "id: draft", 0, 5), false);
    assert_eq!(uses.len(), 3);
}

#[test]
fn hover_shows_types_and_step_summaries() {
    let (db, file) = open(SPEC);
    let h = hover(&db, file, at(SPEC, "result.score", 0, 9)).unwrap();
    assert!(h.markdown.contains("score: number"), "{}", h.markdown);
    assert_eq!(slice(SPEC, h.range), "score");
    let h = hover(&db, file, at(SPEC, "${draft.output.text}", 0, 16)).unwrap();
    assert!(h.markdown.contains("text: string"), "{}", h.markdown);
    let h = hover(&db, file, at(SPEC, "${sub.output.text}", 0, 0)).unwrap();
    assert!(
        h.markdown.contains("${sub.output.text}: string"),
        "{}",
        h.markdown
    );
    let h = hover(&db, file, at(SPEC, "result.draft", 0, 2)).unwrap();
    assert!(
        h.markdown.contains("result: step outputs"),
        "{}",
        h.markdown
    );
    let h = hover(&db, file, at(SPEC, "id: draft", 0, 6)).unwrap();
    for part in [
        "step `draft`",
        "`do`",
        "agent: `claude`",
        "out: `Draft`",
        "attempts: 2",
        "worst-case dispatches: 2",
    ] {
        assert!(h.markdown.contains(part), "{part} in {}", h.markdown);
    }
    let h = hover(&db, file, at(SPEC, "  Draft:", 0, 3)).unwrap();
    assert!(h.markdown.contains("text: string"), "{}", h.markdown);
    let h = hover(&db, file, at(SPEC, "ok: boolean", 0, 0)).unwrap();
    assert!(h.markdown.contains("ok: boolean"), "{}", h.markdown);
}

#[test]
fn rename_steps_contracts_and_flows() {
    let (db, file) = open(SPEC);
    for (needle, delta, new, count) in [
        ("[draft", 1, "first", 4),
        ("  Draft:", 2, "Essay", 5),
        ("run: helper", 6, "assist", 2),
    ] {
        let off = at(SPEC, needle, 0, delta);
        let span = prepare_rename(&db, file, off).expect(needle);
        assert!(span.start <= off && off <= span.end);
        let edits = rename(&db, file, off, new).expect(needle);
        assert_eq!(edits.len(), count, "{needle}: {edits:?}");
        let renamed = apply(SPEC, &edits);
        let (db2, f2) = open(&renamed);
        assert_eq!(diagnostics(&db2, f2), Vec::new(), "{renamed}");
        assert!(renamed.contains(new));
    }
}

#[test]
fn rename_refuses_bad_and_taken_names() {
    let (db, file) = open(SPEC);
    let step = at(SPEC, "id: draft", 0, 5);
    assert!(
        rename(&db, file, step, "Bad Name")
            .unwrap_err()
            .contains("not a valid step id")
    );
    assert!(
        rename(&db, file, step, "review")
            .unwrap_err()
            .contains("already has a step")
    );
    let contract = at(SPEC, "  Draft:", 0, 2);
    assert!(
        rename(&db, file, contract, "Review")
            .unwrap_err()
            .contains("already exists")
    );
    assert!(
        rename(&db, file, contract, "string")
            .unwrap_err()
            .contains("built-in")
    );
    assert!(
        rename(&db, file, contract, "essay")
            .unwrap_err()
            .contains("uppercase")
    );
    let flow = at(SPEC, "  helper:", 0, 2);
    assert!(
        rename(&db, file, flow, "main")
            .unwrap_err()
            .contains("already exists")
    );
    assert!(rename(&db, file, flow, "entry").is_err());
    assert!(rename(&db, file, at(SPEC, "version", 0, 1), "x").is_err());
    assert_eq!(prepare_rename(&db, file, at(SPEC, "version", 0, 1)), None);
}

fn labels(items: &[CompletionItem]) -> Vec<&str> {
    items.iter().map(|i| i.label.as_str()).collect()
}

#[test]
fn completion_of_fields_after_a_dot() {
    // `${draft.output.` with the cursor after the dot
    let text = SPEC.replace("${draft.output.text}", "${draft.output.}");
    let (db, file) = open(&text);
    let got = completion(&db, file, at(&text, "${draft.output.}", 0, 15));
    assert_eq!(labels(&got), ["text", "score"]);
    // `result.` in an ensure: the step's own output fields
    let text = SPEC.replace("result.score >= 0.5", "result.");
    let (db, file) = open(&text);
    let got = completion(&db, file, at(&text, "result.\"", 0, 7));
    assert_eq!(labels(&got), ["text", "score"]);
    // `result.` in a when: step ids
    let text = SPEC.replace("result.draft.score > 0.1", "result.dr");
    let (db, file) = open(&text);
    let got = completion(&db, file, at(&text, "result.dr", 0, 9));
    assert!(labels(&got).contains(&"draft"), "{got:?}");
    // X1: `steps.` in a when: step ids; `steps.<id>.`: the state's members
    let text = SPEC.replace("result.draft.score > 0.1", "steps.dr");
    let (db, file) = open(&text);
    let got = completion(&db, file, at(&text, "steps.dr", 0, 8));
    assert!(labels(&got).contains(&"draft"), "{got:?}");
    let text = SPEC.replace("result.draft.score > 0.1", "steps.draft.st");
    let (db, file) = open(&text);
    let got = completion(&db, file, at(&text, "steps.draft.st", 0, 14));
    assert_eq!(labels(&got), ["status", "output", "failure", "attempts"]);
    // `${input.`
    let text = SPEC.replace("Draft ${input.topic}", "Draft ${input.");
    let (db, file) = open(&text);
    let got = completion(&db, file, at(&text, "${input. (", 0, 8));
    assert_eq!(labels(&got), ["topic"]);
}

#[test]
fn completion_of_names_keys_and_functions() {
    let (db, file) = open(SPEC);
    let got = completion(&db, file, at(SPEC, "out: Review", 0, 5));
    assert_eq!(labels(&got), ["Draft", "Review"]);
    let got = completion(&db, file, at(SPEC, "run: helper", 0, 5));
    assert_eq!(labels(&got), ["helper", "main"]);
    let got = completion(&db, file, at(SPEC, "after: [draft, sub]", 0, 15));
    assert!(labels(&got).contains(&"draft"));
    let text = SPEC.replace("${draft.output.text}", "${}");
    let (db2, f2) = open(&text);
    let got = completion(&db2, f2, at(&text, "${}", 0, 2));
    assert!(
        labels(&got).contains(&"draft") && labels(&got).contains(&"input"),
        "{got:?}"
    );
    // keys of a do step
    let text = SPEC.replace("        out: Review\n", "        out: Review\n        \n");
    let (db3, f3) = open(&text);
    let got = completion(&db3, f3, at(&text, "out: Review\n", 0, 20));
    assert!(
        labels(&got).contains(&"ensure") && labels(&got).contains(&"agent"),
        "{got:?}"
    );
    assert!(!labels(&got).contains(&"with"));
    // expression start: bindings and builtins from the checker's table
    let got = completion(&db, file, at(SPEC, "expr: ", 0, 6));
    assert!(
        labels(&got).contains(&"result")
            && labels(&got).contains(&"steps")
            && labels(&got).contains(&"len"),
        "{got:?}"
    );
}

#[test]
fn symbols_and_folding() {
    let (db, file) = open(SPEC);
    let syms = symbols(&db, file);
    let names: Vec<&str> = syms.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["Draft", "Review", "helper", "main"]);
    let main = &syms[3];
    let kids: Vec<&str> = main.children.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(kids, ["topic", "draft", "sub", "review"]);
    assert_eq!(slice(SPEC, main.selection), "main");
    assert!(slice(SPEC, main.range).trim_end().ends_with("out: Review"));
    let folds = folding(&db, file);
    assert_eq!(folds.len(), 2 + 2 + 4);
}

#[test]
fn code_actions_apply_did_you_mean() {
    let text = SPEC.replace("after: [draft, sub]", "after: [drfat, sub]");
    let (db, file) = open(&text);
    let off = at(&text, "drfat", 0, 0);
    let actions = code_actions(&db, file, Span::new(off, off + 5));
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0].edits[0].text, "draft");
    let fixed = apply(&text, &actions[0].edits);
    assert_eq!(fixed, SPEC);
    assert!(code_actions(&db, file, Span::at(0)).is_empty());
}

#[test]
fn x3_lambda_parameters_hover_with_their_element_type_and_builtins_complete() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/conformance/ext/x3-lambda-ok.stratum.yaml"
    ))
    .unwrap();
    let (db, file) = open(&text);
    // the parameter `p` of `all(result.refs, p -> …)` is a `Ref`
    let h = hover(&db, file, at(&text, "p -> matches", 0, 0)).unwrap();
    assert!(h.markdown.contains("p: Ref"), "{}", h.markdown);
    // and so is its use in the body
    let h = hover(&db, file, at(&text, "p.doi", 0, 0)).unwrap();
    assert!(h.markdown.contains("p: Ref"), "{}", h.markdown);
    let got = completion(&db, file, at(&text, "expr: ", 0, 6));
    let map = got
        .iter()
        .find(|c| c.label == "map")
        .expect("map is offered");
    assert!(
        map.detail.as_deref().unwrap_or("").contains("p -> value"),
        "{map:?}"
    );
}

// ----- language 1.1 part one (X1-X8) ------------------------------------------

/// A valid spec using the 1.1 keys: `dispatch_timeout_ms`, `timeout_ms`,
/// `cost`, `artifacts`, gate `prompt`/`show`, scored `judged`, `on_fail:
/// continue`, `steps.<id>` and `${<id>.status}`.
const SPEC_11: &str = "# é 中文
version: 1
contracts:
  Out: {text: string, tags: \"string[]\"}
flows:
  entry: main
  main:
    input: {topic: string}
    output: {from: \"${review.output}\", contract: Out}
    dispatch_timeout_ms: 60000
    max_rounds: 2
    steps:
      - id: draft
        do: \"Draft ${input.topic}\"
        out: Out
        timeout_ms: 1000
        cost:
          tokens: 100
        artifacts: [\"notes/${input.topic}.md\"]
        on_fail: continue
        ensure:
          - judged:
              rubric: \"Score it.\"
              threshold: 0.5
              judge: local
      - id: gate
        after: [draft]
        gate:
          on_approve: null
          on_revise: draft
          on_kill: null
          prompt: \"Approve ${draft.status}?\"
          show: [\"notes/${input.topic}.md\"]
      - id: review
        after: [gate]
        when: \"steps.draft.status == 'succeeded' && len(steps.draft.output.tags) > 0\"
        do: \"Review ${draft.output.text}\"
        out: Out
";

/// `text` with `needle`'s first occurrence replaced by `with`, and the
/// offset of the `@` in `with` (the cursor, removed).
fn typed(text: &str, needle: &str, with: &str) -> (String, u32) {
    let at = text.find(needle).expect("needle");
    let cursor = with.find('@').expect("a cursor in `with`");
    let mut out = text.to_string();
    out.replace_range(at..at + needle.len(), &with.replacen('@', "", 1));
    (out, (at + cursor) as u32)
}

#[test]
fn the_11_fixture_is_valid() {
    let (db, file) = open(SPEC_11);
    assert_eq!(diagnostics(&db, file), Vec::new());
}

#[test]
fn every_key_of_the_decoder_tables_has_a_hover_line() {
    let tables: [(Option<&str>, &[&str]); 19] = [
        (None, decode::ROOT_FIELDS),
        (None, decode::FLOW_FIELDS),
        (None, decode::STEP_FIELDS),
        (None, decode::STAGE_FIELDS),
        (None, decode::FANOUT_FIELDS),
        (None, decode::GATE_FIELDS),
        (None, decode::ITERATE_FIELDS),
        (Some("output"), decode::OUTPUT_FIELDS),
        (None, decode::CARRY_FIELDS),
        (Some("judged"), decode::JUDGED_FIELDS),
        (None, decode::PREDICATE_FORMS),
        (Some("judged"), decode::SCORED_FIELDS),
        (Some("cost"), decode::COST_FIELDS),
        (Some("budget"), decode::BUDGET_FIELDS),
        (Some("exec"), decode::EXEC_FIELDS),
        (Some("evaluate"), decode::EVALUATE_FIELDS),
        (Some("route"), decode::ROUTE_FIELDS),
        (Some("on_fail"), decode::ON_FAIL_FIELDS),
        (Some("scope"), decode::SCOPE_FIELDS),
    ];
    let missing: Vec<&str> = tables
        .iter()
        .flat_map(|(parent, keys)| keys.iter().map(move |k| (*parent, *k)))
        .filter(|(parent, k)| decode::key_doc(*parent, k).is_none())
        .map(|(_, k)| k)
        .collect();
    assert_eq!(missing, Vec::<&str>::new());
}

#[test]
fn hover_on_11_keys_shows_their_meaning_under_their_parent() {
    let (db, file) = open(SPEC_11);
    for (needle, nth, want) in [
        ("dispatch_timeout_ms:", 0, "X2: the default `timeout_ms`"),
        (
            "timeout_ms: 1000",
            0,
            "X2: the most milliseconds one dispatch",
        ),
        ("cost:", 0, "X6: expected cost of one attempt"),
        ("tokens: 100", 0, "X6: expected tokens"),
        ("artifacts:", 0, "X4: files"),
        ("prompt:", 0, "X4: a template the human reads"),
        ("show:", 0, "X4: templates"),
        ("rubric:", 0, "X5: how the judge scores"),
        ("threshold:", 0, "X5: the least score"),
        ("judge: local", 0, "X5: the `[judges.NAME]`"),
        ("on_fail:", 0, "`continue` (X1"),
    ] {
        let h = hover(&db, file, at(SPEC_11, needle, nth, 1)).expect(needle);
        let key = needle.split(':').next().unwrap_or_default();
        assert_eq!(slice(SPEC_11, h.range), key, "{needle}");
        assert!(h.markdown.contains(want), "{needle}: {}", h.markdown);
    }
    // `ms` means something else under `budget` than under `cost`
    assert_ne!(
        decode::key_doc(Some("budget"), "ms"),
        decode::key_doc(Some("cost"), "ms")
    );
}

#[test]
fn hover_on_a_builtin_shows_its_doc_line_and_steps_members_their_types() {
    let (db, file) = open(SPEC_11);
    let h = hover(&db, file, at(SPEC_11, "len(", 0, 1)).expect("builtin hover");
    assert_eq!(slice(SPEC_11, h.range), "len");
    assert!(h.markdown.contains("len(x) -> number"), "{}", h.markdown);
    let h = hover(&db, file, at(SPEC_11, "steps.draft.status", 0, 1)).expect("steps");
    assert!(h.markdown.starts_with("```\nsteps: "), "{}", h.markdown);
    let h = hover(&db, file, at(SPEC_11, "${draft.status}", 0, 9)).expect("template state");
    assert!(h.markdown.contains("succeeded"), "{}", h.markdown);
}

#[test]
fn completion_of_11_keys_in_flows_steps_cost_and_judged() {
    let (text, off) = typed(
        SPEC_11,
        "    dispatch_timeout_ms: 60000\n",
        "    dispatch_timeout_ms: 60000\n    @\n",
    );
    let (db, file) = open(&text);
    let got = completion(&db, file, off);
    assert!(labels(&got).contains(&"dispatch_timeout_ms"), "{got:?}");
    let item = got
        .iter()
        .find(|i| i.label == "dispatch_timeout_ms")
        .expect("key");
    assert!(item.detail.as_deref().is_some_and(|d| d.starts_with("X2")));

    let (text, off) = typed(
        SPEC_11,
        "        timeout_ms: 1000\n",
        "        timeout_ms: 1000\n        @\n",
    );
    let (db, file) = open(&text);
    let got = labels(&completion(&db, file, off)).join(" ");
    for k in ["timeout_ms", "cost", "artifacts", "on_fail"] {
        assert!(got.split(' ').any(|l| l == k), "{k}: {got}");
    }

    let (text, off) = typed(
        SPEC_11,
        "          tokens: 100\n",
        "          tokens: 100\n          @\n",
    );
    let (db, file) = open(&text);
    assert_eq!(labels(&completion(&db, file, off)), decode::COST_FIELDS);

    let (text, off) = typed(
        SPEC_11,
        "              threshold: 0.5\n",
        "              threshold: 0.5\n              @\n",
    );
    let (db, file) = open(&text);
    assert_eq!(labels(&completion(&db, file, off)), decode::JUDGED_FIELDS);

    let (text, off) = typed(
        SPEC_11,
        "          on_kill: null\n",
        "          on_kill: null\n          @\n",
    );
    let (db, file) = open(&text);
    let got = completion(&db, file, off);
    assert_eq!(labels(&got), decode::GATE_FIELDS);
    let prompt = got.iter().find(|i| i.label == "prompt").expect("prompt");
    assert!(
        prompt
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("X4"))
    );
}

#[test]
fn completion_of_on_fail_continue_and_of_configured_judge_names() {
    let (text, off) = typed(SPEC_11, "on_fail: continue", "on_fail: @");
    let (db, file) = open(&text);
    let got = completion(&db, file, off);
    assert!(labels(&got).contains(&"continue"), "{got:?}");
    assert!(labels(&got).contains(&"gate"), "step ids too: {got:?}");

    let (text, off) = typed(SPEC_11, "judge: local", "judge: @");
    let (mut db, file) = open(&text);
    assert_eq!(
        completion(&db, file, off),
        Vec::new(),
        "no environment, no names"
    );
    let env = crate::env::CheckEnv {
        judges: Some(["local", "strict"].map(String::from).into_iter().collect()),
        commands: None,
    };
    db.set_env(file, env);
    assert_eq!(labels(&completion(&db, file, off)), ["local", "strict"]);
}

#[test]
fn completion_of_steps_members_and_template_state() {
    const WHEN: &str = "\"steps.draft.status == 'succeeded' && len(steps.draft.output.tags) > 0\"";
    // `steps.` lists the step ids, `steps.<id>.` the state members
    let (text, off) = typed(SPEC_11, WHEN, "\"steps.@\"");
    let (db, file) = open(&text);
    assert_eq!(
        labels(&completion(&db, file, off)),
        ["draft", "gate", "review"]
    );
    let (text, off) = typed(SPEC_11, WHEN, "\"steps.draft.@\"");
    let (db, file) = open(&text);
    assert_eq!(
        labels(&completion(&db, file, off)),
        ["status", "output", "failure", "attempts"]
    );
    // `${<id>.` in a template: output and the state members (`note`: gates)
    let (text, off) = typed(SPEC_11, "Approve ${draft.status}?", "Approve ${draft.@");
    let (db, file) = open(&text);
    assert_eq!(
        labels(&completion(&db, file, off)),
        ["output", "status", "failure"]
    );
    let (text, off) = typed(SPEC_11, "Review ${draft.output.text}", "Review ${gate.@");
    let (db, file) = open(&text);
    assert_eq!(
        labels(&completion(&db, file, off)),
        ["output", "status", "failure", "note"]
    );
}

#[test]
fn hover_on_an_evaluate_step_names_its_command_and_the_result_rule() {
    const TEXT: &str = "version: 1
contracts:
  Done: {ok: boolean}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${build.output}\", contract: Done}
    steps:
      - id: triage
        evaluate: {command: triage, timeout_ms: 5000}
      - id: build
        after: [triage]
        do: \"fix ${triage.output.reason}\"
        out: Done
        ensure:
          - exec: {run: test}
          - expr: \"len(receipts()) == 1\"
";
    let (db, file) = open(TEXT);
    let h = hover(&db, file, at(TEXT, "id: triage", 0, 5)).unwrap();
    for part in [
        "step `triage`",
        "`evaluate`",
        "runs command `triage`",
        "at most 5000 ms",
        "every failure is terminal",
    ] {
        assert!(h.markdown.contains(part), "{part} in {}", h.markdown);
    }
}

#[test]
fn completion_offers_a_gates_choice_only_when_it_has_options() {
    // X10: `steps.<gate>.` lists `choice` for a gate with `options`
    let gate = "      - id: pick\n        after: [review]\n        gate:\n          on_approve: null\n          on_revise: null\n          on_kill: null\n          options: [a, b]\n      - id: last\n        after: [pick]\n        when: \"steps.pick.ch\"\n        do: \"Last\"\n        out: Draft\n";
    let text = format!("{SPEC}{gate}");
    let (db, file) = open(&text);
    let got = completion(&db, file, at(&text, "steps.pick.ch", 0, 13));
    assert_eq!(
        labels(&got),
        ["status", "output", "failure", "attempts", "choice"]
    );
    let plain = text.replace("          options: [a, b]\n", "");
    let (db, file) = open(&plain);
    let got = completion(&db, file, at(&plain, "steps.pick.ch", 0, 13));
    assert_eq!(labels(&got), ["status", "output", "failure", "attempts"]);
}

/// X9: a `goto` target (route or `on_fail`) is a step reference: hover
/// shows the step, completion after `goto: ` offers the steps, `failure`
/// in an `on_fail` entry's `when` hovers with its type.
#[test]
fn x9_goto_targets_hover_complete_and_failure_binds() {
    const X9: &str = "version: 1
contracts:
  Out: {ok: boolean}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${review.output}\", contract: Out}
    steps:
      - id: draft
        do: \"Draft\"
        out: Out
      - id: review
        do: \"Review ${draft.output.ok}\"
        out: Out
        route:
          - {when: \"!result.ok\", goto: draft, max: 2, note: \"again\"}
        on_fail:
          - {when: \"'conflict' in failure.reason\", goto: draft, max: 1}
          - continue
";
    let (db, file) = open(X9);
    let h = hover(&db, file, at(X9, "goto: draft, max: 2", 0, 7)).unwrap();
    assert!(h.markdown.contains("step `draft`"), "{}", h.markdown);
    let h = hover(&db, file, at(X9, "goto: draft, max: 1", 0, 7)).unwrap();
    assert!(h.markdown.contains("step `draft`"), "{}", h.markdown);
    let h = hover(&db, file, at(X9, "failure.reason", 0, 2)).unwrap();
    assert!(h.markdown.contains("failure:"), "{}", h.markdown);
    let got = completion(&db, file, at(X9, "goto: draft, max: 2", 0, 6));
    assert!(labels(&got).contains(&"draft"), "{:?}", labels(&got));
}
