//! The language server driven in-process over `Connection::memory()`: every
//! capability, on lines whose text before the cursor is non-ASCII (`é`,
//! `中文`, and `😀`, which is two UTF-16 units), plus the protocol's edges
//! (bad requests, unknown methods, shutdown and exit).

mod support;

use lsp_server::{ErrorCode, Message, Notification, Request, RequestId};
use lsp_types::notification::{DidCloseTextDocument, Exit};
use lsp_types::request::{
    CodeActionRequest, Completion, DocumentSymbolRequest, FoldingRangeRequest, GotoDefinition,
    HoverRequest, PrepareRenameRequest, References, Rename, Shutdown,
};
use lsp_types::{
    CodeActionContext, CodeActionOrCommand, CodeActionParams, CompletionParams, CompletionResponse,
    DiagnosticSeverity, DidCloseTextDocumentParams, DocumentSymbol, DocumentSymbolParams,
    DocumentSymbolResponse, FoldingRangeParams, GotoDefinitionParams, GotoDefinitionResponse,
    HoverContents, HoverParams, NumberOrString, Position, PrepareRenameResponse, Range,
    ReferenceContext, ReferenceParams, RenameParams, TextDocumentContentChangeEvent,
    TextDocumentIdentifier, TextEdit, Uri, WorkspaceEdit,
};
use stratum_lsp::Ending;
use support::{Client, at, pos, range, text_of, uri};

/// A valid spec whose interesting lines start with non-ASCII text.
const SPEC: &str = r#"# Résumé 中文 😀: non-ASCII text before the positions that matter
version: 1
contracts:
  Draft: {body: string, tags: "string[]"}
  Out: {text: string}
flows:
  entry: main
  main:
    input: {goal: string}
    output: {from: "${polish.output}", contract: Out}
    steps:
      - id: draft
        do: "Écris 中文 😀 ${input.goal}"
        out: Draft
      - id: polish
        after: [draft]
        do: "😀😀 é ${draft.output.body} 中文"
        out: Out
"#;

/// The same spec with two mistakes: a contract and a field name misspelt.
fn bad_spec() -> String {
    SPEC.replace("draft.output.body", "draft.output.bdy")
        .replace("contract: Out}", "contract: Otu}")
}

fn no_work_done() -> lsp_types::WorkDoneProgressParams {
    Default::default()
}

fn partial() -> lsp_types::PartialResultParams {
    Default::default()
}

fn doc(uri: &Uri) -> TextDocumentIdentifier {
    TextDocumentIdentifier::new(uri.clone())
}

/// Applies text edits (LSP ranges) to a text, the slow, obvious way.
fn apply(text: &str, edits: &[TextEdit]) -> String {
    let mut edits = edits.to_vec();
    // back to front, so earlier ranges stay valid
    edits.sort_by_key(|e| std::cmp::Reverse((e.range.start.line, e.range.start.character)));
    let mut out = text.to_string();
    for e in edits {
        let before = text_of(&out, Range::new(Position::new(0, 0), e.range.start));
        let removed = text_of(&out, e.range);
        let start = before.len();
        out.replace_range(start..start + removed.len(), &e.new_text);
    }
    out
}

// `Uri` hashes its text; clippy sees the parser's internal cells
#[allow(clippy::mutable_key_type)]
fn only_edits(edit: &WorkspaceEdit, uri: &Uri) -> Vec<TextEdit> {
    let changes = edit.changes.as_ref().expect("the edit uses `changes`");
    assert_eq!(changes.len(), 1, "edits touch only the open document");
    changes[uri].clone()
}

#[test]
fn initialize_announces_every_capability() {
    let client = Client::start();
    let caps = &client.init["capabilities"];
    for key in [
        "hoverProvider",
        "definitionProvider",
        "referencesProvider",
        "renameProvider",
        "completionProvider",
        "documentSymbolProvider",
        "foldingRangeProvider",
        "codeActionProvider",
    ] {
        assert!(!caps[key].is_null(), "{key} is missing from {caps:#}");
    }
    assert_eq!(caps["positionEncoding"], "utf-16");
    assert_eq!(caps["textDocumentSync"]["change"], 2, "incremental sync");
    assert_eq!(caps["renameProvider"]["prepareProvider"], true);
    let triggers = caps["completionProvider"]["triggerCharacters"].to_string();
    for c in [".", "$", "{"] {
        assert!(triggers.contains(c), "{triggers}");
    }
    assert_eq!(client.init["serverInfo"]["name"], "stratumc");
    assert_eq!(client.shutdown(), Ending::Clean);
}

#[test]
fn diagnostics_on_open_carry_code_range_message_and_help() {
    let mut client = Client::start();
    let u = uri("diagnostics.stratum.yaml");
    let text = bad_spec();
    let published = client.open(&u, &text);
    assert_eq!(published.version, Some(1));
    let ds = published.diagnostics;
    assert_eq!(ds.len(), 2, "{ds:#?}");

    let contract = &ds[0];
    assert_eq!(contract.code, Some(NumberOrString::String("S0202".into())));
    assert_eq!(contract.range, range(&text, "Otu", 0));
    assert_eq!(contract.message, "unknown contract `Otu`");
    assert_eq!(contract.severity, Some(DiagnosticSeverity::ERROR));
    assert_eq!(contract.source.as_deref(), Some("stratumc"));
    // no link: there is no public location for the explanations to point to
    assert_eq!(contract.code_description, None);

    let field = &ds[1];
    assert_eq!(field.code, Some(NumberOrString::String("S0403".into())));
    // `😀😀 é ` before the reference: the emoji count two UTF-16 units each
    assert_eq!(field.range.start, Position::new(16, 35));
    assert_eq!(text_of(&text, field.range), "bdy");
    assert_eq!(field.message, "`draft.output` (Draft) has no field `bdy`");
    let related = field
        .related_information
        .as_ref()
        .expect("the help is related information");
    assert!(
        related
            .iter()
            .any(|r| r.message == "help: did you mean `body`?" && r.location.range == field.range),
        "{related:#?}"
    );
    assert_eq!(client.shutdown(), Ending::Clean);
}

#[test]
fn secondary_labels_become_related_information() {
    let mut client = Client::start();
    let u = uri("labels.stratum.yaml");
    // a duplicate step id: the first declaration is a secondary label
    let text = SPEC.replace("- id: polish", "- id: draft");
    let ds = client.open(&u, &text).diagnostics;
    let with_labels: Vec<_> = ds
        .iter()
        .filter(|d| {
            d.related_information
                .iter()
                .flatten()
                .any(|r| !r.message.starts_with("help:") && !r.message.starts_with("note:"))
        })
        .collect();
    assert!(
        !with_labels.is_empty(),
        "no diagnostic with a label in {ds:#?}"
    );
    for d in with_labels {
        for r in d.related_information.iter().flatten() {
            assert_eq!(r.location.uri, u);
            assert!(
                !text_of(&text, r.location.range).is_empty()
                    || r.location.range.start == r.location.range.end
            );
        }
    }
    client.shutdown();
}

#[test]
fn incremental_and_full_changes_republish_every_time() {
    let mut client = Client::start();
    let u = uri("change.stratum.yaml");
    let text = bad_spec();
    assert_eq!(client.open(&u, &text).diagnostics.len(), 2);

    // fix `bdy` with an incremental edit whose range is in UTF-16 units
    let fixed = client.change(
        &u,
        2,
        vec![TextDocumentContentChangeEvent {
            range: Some(range(&text, "bdy", 0)),
            range_length: None,
            text: "body".into(),
        }],
    );
    let codes: Vec<_> = fixed.diagnostics.iter().map(|d| d.code.clone()).collect();
    assert_eq!(codes, [Some(NumberOrString::String("S0202".into()))]);

    // two edits in one notification: the second is relative to the first's result
    let text = text.replace("draft.output.bdy", "draft.output.body");
    let after_first = text.replace("contract: Otu}", "contract: Ou}");
    let clean = client.change(
        &u,
        3,
        vec![
            TextDocumentContentChangeEvent {
                range: Some(range(&text, "Otu", 0)),
                range_length: None,
                text: "Ou".into(),
            },
            TextDocumentContentChangeEvent {
                range: Some(range(&after_first, "Ou}", 0)),
                range_length: None,
                text: "Out}".into(),
            },
        ],
    );
    assert_eq!(clean.diagnostics, []);

    // an unchanged full text still publishes (an empty list, again)
    let again = client.change(
        &u,
        4,
        vec![TextDocumentContentChangeEvent {
            range: None,
            range_length: None,
            text: SPEC.into(),
        }],
    );
    assert_eq!(again.diagnostics, []);

    // closing clears the diagnostics
    client.notify::<DidCloseTextDocument>(DidCloseTextDocumentParams {
        text_document: doc(&u),
    });
    let closed = client.next_diagnostics();
    assert_eq!(closed.uri, u);
    assert_eq!(closed.diagnostics, []);
    assert_eq!(client.shutdown(), Ending::Clean);
}

#[test]
fn edits_inside_multibyte_text_keep_positions_right() {
    let mut client = Client::start();
    let u = uri("multibyte-edit.stratum.yaml");
    client.open(&u, SPEC);
    // replace `中文` (2 UTF-16 units) on the `do:` line of `polish` by an emoji
    let r = range(SPEC, "中文\"", 0);
    let r = Range::new(r.start, Position::new(r.start.line, r.start.character + 2));
    let d = client.change(
        &u,
        2,
        vec![TextDocumentContentChangeEvent {
            range: Some(r),
            range_length: None,
            text: "😀 ${draft.output.nope}".into(),
        }],
    );
    let new_text = SPEC.replacen("中文\"", "😀 ${draft.output.nope}\"", 1);
    assert_eq!(d.diagnostics.len(), 1, "{:#?}", d.diagnostics);
    assert_eq!(text_of(&new_text, d.diagnostics[0].range), "nope");
    client.shutdown();
}

#[test]
fn hover_shows_the_referenced_step_and_field() {
    let mut client = Client::start();
    let u = uri("hover.stratum.yaml");
    client.open(&u, SPEC);
    let hover = |client: &mut Client, needle: &str, nth: usize| {
        let mut p = pos(SPEC, needle, nth);
        p.character += 1; // inside the word
        client
            .request::<HoverRequest>(HoverParams {
                text_document_position_params: at(&u, p),
                work_done_progress_params: no_work_done(),
            })
            .expect("hover succeeds")
            .unwrap_or_else(|| panic!("no hover on {needle:?}"))
    };
    // the step in `${draft.output.body}`, after `😀😀 é `
    let h = hover(&mut client, "draft.output", 0);
    let HoverContents::Markup(m) = &h.contents else {
        panic!("markdown expected: {h:?}")
    };
    assert!(
        m.value.contains("Draft"),
        "the step's out contract: {}",
        m.value
    );
    let r = h.range.expect("a hover range");
    assert!(
        SPEC.lines()
            .nth(r.start.line as usize)
            .unwrap()
            .contains("😀😀")
    );
    assert!(text_of(SPEC, r).contains("draft"), "{:?}", text_of(SPEC, r));

    // the field `body` of that reference: its type
    let h = hover(&mut client, "body}", 0);
    let HoverContents::Markup(m) = &h.contents else {
        panic!("markdown expected: {h:?}")
    };
    assert!(m.value.contains("string"), "{}", m.value);

    // nothing to say on a comment
    let none = client
        .request::<HoverRequest>(HoverParams {
            text_document_position_params: at(&u, Position::new(0, 3)),
            work_done_progress_params: no_work_done(),
        })
        .expect("hover succeeds");
    assert!(none.is_none(), "{none:?}");
    client.shutdown();
}

#[test]
fn definition_and_references_of_a_step_id() {
    let mut client = Client::start();
    let u = uri("navigation.stratum.yaml");
    client.open(&u, SPEC);
    let use_site = pos(SPEC, "draft.output", 0);
    let def = client
        .request::<GotoDefinition>(GotoDefinitionParams {
            text_document_position_params: at(&u, use_site),
            work_done_progress_params: no_work_done(),
            partial_result_params: partial(),
        })
        .expect("definition succeeds");
    let declaration = range(SPEC, "draft\n", 0);
    let declaration = Range::new(
        declaration.start,
        Position::new(declaration.start.line, declaration.start.character + 5),
    );
    match def {
        Some(GotoDefinitionResponse::Scalar(loc)) => {
            assert_eq!(loc.uri, u);
            assert_eq!(loc.range, declaration);
        }
        other => panic!("expected one location, got {other:?}"),
    }

    let refs = client
        .request::<References>(ReferenceParams {
            text_document_position: at(&u, use_site),
            work_done_progress_params: no_work_done(),
            partial_result_params: partial(),
            context: ReferenceContext {
                include_declaration: true,
            },
        })
        .expect("references succeed")
        .expect("some references");
    let mut ranges: Vec<Range> = refs.iter().map(|l| l.range).collect();
    ranges.sort_by_key(|r| (r.start.line, r.start.character));
    let expected = vec![
        declaration,
        range(SPEC, "draft]", 0).pipe_trim(5),
        range(SPEC, "draft.output", 0).pipe_trim(5),
    ];
    assert_eq!(ranges, expected);
    for r in &ranges {
        assert_eq!(text_of(SPEC, *r), "draft");
    }

    let without = client
        .request::<References>(ReferenceParams {
            text_document_position: at(&u, use_site),
            work_done_progress_params: no_work_done(),
            partial_result_params: partial(),
            context: ReferenceContext {
                include_declaration: false,
            },
        })
        .expect("references succeed")
        .unwrap_or_default();
    assert_eq!(without.len(), 2);
    assert!(without.iter().all(|l| l.range != declaration));
    client.shutdown();
}

trait Trim {
    fn pipe_trim(self, units: u32) -> Range;
}

impl Trim for Range {
    /// The first `units` UTF-16 units of a one-line range.
    fn pipe_trim(self, units: u32) -> Range {
        Range::new(
            self.start,
            Position::new(self.start.line, self.start.character + units),
        )
    }
}

#[test]
fn rename_a_step_everywhere_and_refuse_a_taken_name() {
    let mut client = Client::start();
    let u = uri("rename.stratum.yaml");
    client.open(&u, SPEC);
    let use_site = pos(SPEC, "draft.output", 0);
    let prepared = client
        .request::<PrepareRenameRequest>(at(&u, use_site))
        .expect("prepareRename succeeds")
        .expect("a step id can be renamed");
    match prepared {
        PrepareRenameResponse::RangeWithPlaceholder {
            range: r,
            placeholder,
        } => {
            assert_eq!(placeholder, "draft");
            assert_eq!(text_of(SPEC, r), "draft");
        }
        other => panic!("unexpected {other:?}"),
    }

    let edit = client
        .request::<Rename>(RenameParams {
            text_document_position: at(&u, use_site),
            new_name: "brouillon".into(),
            work_done_progress_params: no_work_done(),
        })
        .expect("rename succeeds")
        .expect("an edit");
    let edits = only_edits(&edit, &u);
    assert_eq!(edits.len(), 3, "{edits:#?}");
    let renamed = apply(SPEC, &edits);
    assert!(renamed.contains("- id: brouillon"));
    assert!(renamed.contains("after: [brouillon]"));
    assert!(renamed.contains("😀😀 é ${brouillon.output.body} 中文"));
    assert!(!renamed.contains("draft\n") && !renamed.contains("draft."));
    // the renamed spec is still valid
    let u2 = uri("renamed.stratum.yaml");
    assert_eq!(client.open(&u2, &renamed).diagnostics, []);

    // a name another step already has is refused with the compiler's reason
    let refused = client.request::<Rename>(RenameParams {
        text_document_position: at(&u, use_site),
        new_name: "polish".into(),
        work_done_progress_params: no_work_done(),
    });
    let e = refused.expect_err("renaming onto a taken name fails");
    assert_eq!(e.code, ErrorCode::RequestFailed as i32);
    assert!(!e.message.is_empty());

    // nothing to rename on `version`
    let nothing = client
        .request::<PrepareRenameRequest>(at(&u, pos(SPEC, "version", 0)))
        .expect("prepareRename succeeds");
    assert!(nothing.is_none(), "{nothing:?}");
    client.shutdown();
}

fn complete(client: &mut Client, u: &Uri, p: Position) -> Vec<lsp_types::CompletionItem> {
    let r = client
        .request::<Completion>(CompletionParams {
            text_document_position: at(u, p),
            work_done_progress_params: no_work_done(),
            partial_result_params: partial(),
            context: None,
        })
        .expect("completion succeeds");
    match r {
        Some(CompletionResponse::Array(items)) => items,
        Some(CompletionResponse::List(list)) => list.items,
        None => Vec::new(),
    }
}

#[test]
fn completion_of_fields_after_a_step_output_and_of_step_ids() {
    let mut client = Client::start();
    let u = uri("completion.stratum.yaml");
    // the user has typed `${draft.output.` after non-ASCII text
    let text = SPEC.replace("${draft.output.body}", "${draft.output.");
    client.open(&u, &text);
    let mut p = pos(&text, "${draft.output.", 0);
    p.character += "${draft.output.".len() as u32;
    let labels: Vec<String> = complete(&mut client, &u, p)
        .into_iter()
        .map(|c| c.label)
        .collect();
    assert!(labels.contains(&"body".to_string()), "{labels:?}");
    assert!(labels.contains(&"tags".to_string()), "{labels:?}");

    // step ids inside `after: [` of `polish`
    let text = SPEC.replace("after: [draft]", "after: []");
    let u2 = uri("completion-after.stratum.yaml");
    client.open(&u2, &text);
    let mut p = pos(&text, "after: [", 0);
    p.character += "after: [".len() as u32;
    let items = complete(&mut client, &u2, p);
    assert!(
        items.iter().any(|c| c.label == "draft" && c.kind == Some(lsp_types::CompletionItemKind::REFERENCE)),
        "{items:#?}"
    );
    client.shutdown();
}

#[test]
fn document_symbols_are_nested_and_folding_covers_steps() {
    let mut client = Client::start();
    let u = uri("symbols.stratum.yaml");
    client.open(&u, SPEC);
    let symbols = client
        .request::<DocumentSymbolRequest>(DocumentSymbolParams {
            text_document: doc(&u),
            work_done_progress_params: no_work_done(),
            partial_result_params: partial(),
        })
        .expect("documentSymbol succeeds");
    let Some(DocumentSymbolResponse::Nested(symbols)) = symbols else {
        panic!("nested symbols expected: {symbols:?}")
    };
    let names: Vec<&str> = symbols.iter().map(|s| s.name.as_str()).collect();
    for n in ["Draft", "Out", "main"] {
        assert!(names.contains(&n), "{names:?}");
    }
    fn find<'a>(symbols: &'a [DocumentSymbol], name: &str) -> Option<&'a DocumentSymbol> {
        symbols.iter().find_map(|s| {
            if s.name == name {
                Some(s)
            } else {
                find(s.children.as_deref().unwrap_or_default(), name)
            }
        })
    }
    let main = find(&symbols, "main").unwrap();
    let polish = find(main.children.as_deref().unwrap_or_default(), "polish")
        .expect("the step `polish` is inside the flow `main`");
    assert_eq!(text_of(SPEC, polish.selection_range), "polish");
    // the step's range covers its `do:` line with the emoji
    assert!(
        polish.range.start.line <= 14 && polish.range.end.line >= 16,
        "{:?}",
        polish.range
    );
    for s in &symbols {
        assert!(s.range.start <= s.selection_range.start && s.selection_range.end <= s.range.end);
    }

    let folds = client
        .request::<FoldingRangeRequest>(FoldingRangeParams {
            text_document: doc(&u),
            work_done_progress_params: no_work_done(),
            partial_result_params: partial(),
        })
        .expect("foldingRange succeeds")
        .expect("folding ranges");
    // the flow `main` (line 7) and the step `draft` (line 11) fold
    assert!(
        folds.iter().any(|f| f.start_line == 7 && f.end_line >= 16),
        "{folds:#?}"
    );
    assert!(
        folds.iter().any(|f| f.start_line == 11 && f.end_line == 13),
        "{folds:#?}"
    );
    assert!(folds.iter().all(|f| f.end_line > f.start_line));
    client.shutdown();
}

#[test]
fn code_actions_fix_did_you_mean_mistakes() {
    let mut client = Client::start();
    let u = uri("actions.stratum.yaml");
    let text = bad_spec();
    let ds = client.open(&u, &text).diagnostics;
    for (needle, fixed) in [("bdy", "draft.output.body"), ("Otu", "contract: Out}")] {
        let r = range(&text, needle, 0);
        let actions = client
            .request::<CodeActionRequest>(CodeActionParams {
                text_document: doc(&u),
                range: r,
                context: CodeActionContext {
                    diagnostics: ds.iter().filter(|d| d.range == r).cloned().collect(),
                    only: None,
                    trigger_kind: None,
                },
                work_done_progress_params: no_work_done(),
                partial_result_params: partial(),
            })
            .expect("codeAction succeeds")
            .unwrap_or_default();
        let action = actions
            .iter()
            .find_map(|a| match a {
                CodeActionOrCommand::CodeAction(a) => Some(a),
                CodeActionOrCommand::Command(_) => None,
            })
            .unwrap_or_else(|| panic!("no quick fix for {needle}: {actions:#?}"));
        assert_eq!(action.kind, Some(lsp_types::CodeActionKind::QUICKFIX));
        let attached = action.diagnostics.as_deref().unwrap_or_default();
        assert_eq!(
            attached.len(),
            1,
            "the action names the diagnostic it fixes"
        );
        let result = apply(&text, &only_edits(action.edit.as_ref().unwrap(), &u));
        assert!(result.contains(fixed), "{result}");
    }
    client.shutdown();
}

#[test]
fn positions_past_the_end_or_inside_an_emoji_are_clamped_not_fatal() {
    let mut client = Client::start();
    let u = uri("clamp.stratum.yaml");
    client.open(&u, SPEC);
    let emoji = pos(SPEC, "😀😀", 0);
    for p in [
        Position::new(emoji.line, emoji.character + 1), // between the two UTF-16 units
        Position::new(emoji.line, 10_000),
        Position::new(10_000, 3),
        Position::new(u32::MAX, u32::MAX),
    ] {
        client
            .request::<HoverRequest>(HoverParams {
                text_document_position_params: at(&u, p),
                work_done_progress_params: no_work_done(),
            })
            .expect("hover succeeds");
        let _ = complete(&mut client, &u, p);
    }
    // an edit with an out-of-range range appends at the end instead of failing
    let d = client.change(
        &u,
        2,
        vec![TextDocumentContentChangeEvent {
            range: Some(Range::new(Position::new(500, 0), Position::new(600, 0))),
            range_length: None,
            text: "# the end\n".into(),
        }],
    );
    assert_eq!(d.diagnostics, []);
    assert_eq!(client.shutdown(), Ending::Clean);
}

#[test]
fn bad_requests_get_errors_and_the_server_keeps_serving() {
    let mut client = Client::start();
    let u = uri("errors.stratum.yaml");
    // a document that is not open
    let e = client
        .request::<HoverRequest>(HoverParams {
            text_document_position_params: at(
                &uri("never-opened.stratum.yaml"),
                Position::new(0, 0),
            ),
            work_done_progress_params: no_work_done(),
        })
        .expect_err("not open");
    assert_eq!(e.code, ErrorCode::InvalidParams as i32);
    assert!(e.message.contains("not open"), "{}", e.message);

    // parameters of the wrong shape
    let r = client.raw_request("textDocument/hover", serde_json::json!({"textDocument": 7}));
    assert_eq!(
        r.response_result.expect_err("an error").code,
        ErrorCode::InvalidParams as i32
    );

    // a second `initialize`
    let r = client.raw_request("initialize", serde_json::json!({"capabilities": {}}));
    assert_eq!(
        r.response_result.expect_err("an error").code,
        ErrorCode::InvalidRequest as i32
    );

    // a method the server does not have
    let r = client.raw_request(
        "workspace/executeCommand",
        serde_json::json!({"command": "x"}),
    );
    assert_eq!(
        r.response_result.expect_err("an error").code,
        ErrorCode::MethodNotFound as i32
    );

    // notifications with garbage, or unknown ones, are ignored
    client.send(Message::Notification(Notification::new(
        "textDocument/didOpen".into(),
        serde_json::json!({"nonsense": true}),
    )));
    client.send(Message::Notification(Notification::new(
        "$/unknown".into(),
        serde_json::json!(null),
    )));
    client.send(Message::Notification(Notification::new(
        "textDocument/didChange".into(),
        serde_json::json!({"textDocument": {"uri": "file:///not/open", "version": 2}, "contentChanges": []}),
    )));

    // still alive: an open gets its diagnostics
    assert_eq!(client.open(&u, SPEC).diagnostics, []);

    // after `shutdown`, requests are refused; `exit` ends cleanly
    client.request::<Shutdown>(()).expect("shutdown succeeds");
    let r = client.raw_request("textDocument/hover", serde_json::json!({}));
    assert_eq!(
        r.response_result.expect_err("an error").code,
        ErrorCode::InvalidRequest as i32
    );
    client.notify::<Exit>(());
    assert_eq!(client.join(), Ending::Clean);
}

#[test]
fn exit_without_shutdown_is_abrupt() {
    let client = Client::start();
    client.notify::<Exit>(());
    assert_eq!(client.join(), Ending::Abrupt);
}

#[test]
fn requests_before_initialize_are_refused() {
    let (server_conn, conn) = lsp_server::Connection::memory();
    let server = std::thread::spawn(move || stratum_lsp::serve(&server_conn));
    conn.sender
        .send(Message::Request(Request::new(
            RequestId::from(1),
            "textDocument/hover".into(),
            serde_json::json!({}),
        )))
        .unwrap();
    let Message::Response(r) = conn.receiver.recv().unwrap() else {
        panic!("a response expected")
    };
    assert_eq!(
        r.response_result.unwrap_err().code,
        ErrorCode::ServerNotInitialized as i32
    );
    drop(conn);
    assert!(
        server.join().unwrap().is_err(),
        "the client left before initializing"
    );
}

#[test]
fn contracts_navigate_and_rename_across_their_uses() {
    let mut client = Client::start();
    let u = uri("contracts.stratum.yaml");
    client.open(&u, SPEC);
    // `out: Draft` of the step whose `do` has `中文 😀`
    let use_site = pos(SPEC, "out: Draft", 0);
    let use_site = Position::new(use_site.line, use_site.character + 6);
    let def = client
        .request::<GotoDefinition>(GotoDefinitionParams {
            text_document_position_params: at(&u, use_site),
            work_done_progress_params: no_work_done(),
            partial_result_params: partial(),
        })
        .expect("definition succeeds");
    let Some(GotoDefinitionResponse::Scalar(loc)) = def else {
        panic!("expected one location, got {def:?}")
    };
    assert_eq!(loc.range, range(SPEC, "Draft", 0));

    let edit = client
        .request::<Rename>(RenameParams {
            text_document_position: at(&u, use_site),
            new_name: "Brouillon".into(),
            work_done_progress_params: no_work_done(),
        })
        .expect("rename succeeds")
        .expect("an edit");
    let renamed = apply(SPEC, &only_edits(&edit, &u));
    assert!(renamed.contains("  Brouillon: {body: string"), "{renamed}");
    assert!(renamed.contains("out: Brouillon"), "{renamed}");
    assert!(!renamed.contains("Draft"), "{renamed}");
    let u2 = uri("contracts-renamed.stratum.yaml");
    assert_eq!(client.open(&u2, &renamed).diagnostics, []);
    client.shutdown();
}

#[test]
fn completion_after_the_dollar_trigger_offers_references() {
    let mut client = Client::start();
    let u = uri("dollar.stratum.yaml");
    // the user typed `${` after `😀😀 é ` in the `polish` step
    let text = SPEC.replace("${draft.output.body} 中文", "${ 中文");
    client.open(&u, &text);
    let mut p = pos(&text, "${ 中文", 0);
    p.character += 2;
    let labels: Vec<String> = complete(&mut client, &u, p)
        .into_iter()
        .map(|c| c.label)
        .collect();
    for expected in ["draft", "input"] {
        assert!(
            labels.iter().any(|l| l == expected),
            "{expected} missing from {labels:?}"
        );
    }
    client.shutdown();
}

/// A spec whose `judged` ensure names the judge `locl` (S0325 when the
/// `stratum.toml` near it has other judges).
const JUDGED_SPEC: &str = r#"version: 1
contracts:
  Draft: {text: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${write.output}", contract: Draft}
    steps:
      - id: write
        do: "Écris 中文"
        out: Draft
        ensure:
          - judged:
              rubric: "Score the draft."
              threshold: 0.5
              judge: locl
"#;

/// What `stratumc check` reports for `path` (its codes, ranges and messages).
fn as_check_reports(path: &std::path::Path, text: &str) -> Vec<(String, String)> {
    use stratum_compiler::env::CheckEnv;
    let (env, _) = CheckEnv::near_spec(path);
    stratum_compiler::analysis::analyze_with(text, &env)
        .diagnostics
        .iter()
        .map(|d| (d.code.as_str().to_string(), d.message.clone()))
        .collect()
}

fn reports(published: &lsp_types::PublishDiagnosticsParams) -> Vec<(String, String)> {
    published
        .diagnostics
        .iter()
        .map(|d| {
            let code = match &d.code {
                Some(NumberOrString::String(c)) => c.clone(),
                other => panic!("a string code, got {other:?}"),
            };
            (code, d.message.clone())
        })
        .collect()
}

fn watched_change(client: &Client, toml: &std::path::Path) {
    use lsp_types::notification::DidChangeWatchedFiles;
    let uri: Uri = stratum_lsp::uri::from_path(&toml.display().to_string())
        .parse()
        .expect("a valid URI");
    client.notify::<DidChangeWatchedFiles>(lsp_types::DidChangeWatchedFilesParams {
        changes: vec![lsp_types::FileEvent::new(
            uri,
            lsp_types::FileChangeType::CHANGED,
        )],
    });
}

#[test]
fn unknown_judge_names_come_from_the_stratum_toml_beside_the_document_and_follow_its_changes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let spec = dir.path().join("judged.stratum.yaml");
    let toml = dir.path().join("stratum.toml");
    std::fs::write(&spec, JUDGED_SPEC).expect("spec written");
    let judges = |names: &[&str]| {
        let tables: Vec<String> = names
            .iter()
            .map(|n| format!("[judges.{n}]\nurl = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n"))
            .collect();
        std::fs::write(&toml, tables.join("\n")).expect("stratum.toml written");
    };
    judges(&["local"]);
    let mut client = Client::start();
    let u: Uri = stratum_lsp::uri::from_path(&spec.display().to_string())
        .parse()
        .expect("a valid URI");

    let published = client.open(&u, JUDGED_SPEC);
    let want = as_check_reports(&spec, JUDGED_SPEC);
    assert_eq!(reports(&published), want);
    let [d] = &published.diagnostics[..] else {
        panic!("one diagnostic: {:#?}", published.diagnostics)
    };
    assert_eq!(d.code, Some(NumberOrString::String("S0325".into())));
    assert_eq!(d.severity, Some(DiagnosticSeverity::WARNING));
    assert_eq!(d.range, range(JUDGED_SPEC, "locl", 0));

    // the judge is added: the warning goes away
    judges(&["local", "locl"]);
    watched_change(&client, &toml);
    let published = client.next_diagnostics();
    assert_eq!(published.uri, u);
    assert_eq!(reports(&published), as_check_reports(&spec, JUDGED_SPEC));
    assert!(
        published.diagnostics.is_empty(),
        "{:#?}",
        published.diagnostics
    );

    // the toml removed: no environment, so S0325 is not checked (as `check`)
    std::fs::remove_file(&toml).expect("stratum.toml removed");
    watched_change(&client, &toml);
    let published = client.next_diagnostics();
    assert!(
        published.diagnostics.is_empty(),
        "{:#?}",
        published.diagnostics
    );
    assert_eq!(reports(&published), as_check_reports(&spec, JUDGED_SPEC));

    // written back without `locl`: the warning is back
    judges(&["local"]);
    watched_change(&client, &toml);
    let published = client.next_diagnostics();
    assert_eq!(reports(&published), want);
    assert_eq!(client.shutdown(), Ending::Clean);
}
