//! Tests of the host: the workspace file jail with its evidence, the
//! `[judge]` configuration, and the judge client against a fake
//! OpenAI-compatible server on 127.0.0.1 (loopback only).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use stratum_vm::config::Config;
use stratum_vm::host::{
    FileEvidence, JailError, JudgeConfig, MAX_FILE_BYTES, NO_JUDGE_REASON, Refusal, StakesConfig,
    Workspace, judge, parse_verdict,
};
use stratum_vm::plan::Stakes;

/// The judge runner of a `stratum.toml` text, as the host gets it.
fn judge_config_from_toml(text: &str) -> Result<Option<JudgeConfig>, String> {
    Config::from_toml(text)
        .map(|c| c.judge_runner())
        .map_err(|e| e.to_string())
}

fn setup() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(root.join("src/deep")).unwrap();
    std::fs::write(root.join("src/x.ts"), "export const x = 1;\n").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "top secret").unwrap();
    let ws = Workspace::new(&root).unwrap();
    (dir, ws)
}

fn hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

// --- the jail ------------------------------------------------------------------

#[test]
fn workspace_root_must_be_an_existing_directory() {
    let dir = tempfile::tempdir().unwrap();
    assert!(Workspace::new(dir.path().join("missing")).is_err());
    std::fs::write(dir.path().join("f"), "").unwrap();
    let err = Workspace::new(dir.path().join("f"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a directory"), "{err}");
}

#[test]
fn file_exists_records_evidence() {
    let (_dir, ws) = setup();
    let content = b"export const x = 1;\n";
    assert_eq!(
        ws.file_exists("src/x.ts").unwrap(),
        FileEvidence {
            path: "src/x.ts".into(),
            exists: true,
            size: Some(content.len() as u64),
            blake3: Some(hash(content)),
            note: None,
            sha256: None,
        }
    );
    // Lexical normalization: `a/../x`, `./`, doubled separators.
    let ev = ws.file_exists("src/deep/../x.ts").unwrap();
    assert!(ev.exists);
    assert_eq!(ev.path, "src/x.ts");
    assert_eq!(ws.file_exists("./src//x.ts").unwrap().path, "src/x.ts");
    let missing = ws.file_exists("src/nope.ts").unwrap();
    assert!(!missing.exists);
    assert_eq!((missing.size, missing.blake3), (None, None));
    // A directory, the root itself and a path through a file are not files.
    assert!(!ws.file_exists("src").unwrap().exists);
    assert!(!ws.file_exists("src/..").unwrap().exists);
    assert_eq!(ws.file_exists(".").unwrap().path, ".");
    assert!(!ws.file_exists("src/x.ts/inner").unwrap().exists);
}

#[test]
fn jail_refuses_bad_paths() {
    let (_dir, ws) = setup();
    for (path, why) in [
        ("", "empty"),
        ("src/\0x", "NUL"),
        ("/etc/passwd", "absolute"),
        ("\\etc\\passwd", "absolute"),
        ("C:\\Windows\\x", "absolute"),
        ("c:x", "absolute"),
        ("\\\\server\\share\\x", "absolute"),
        ("../secret.txt", "leaves the workspace root"),
        ("a/../..", "leaves the workspace root"),
        ("src/../../secret.txt", "leaves the workspace root"),
        ("..\\secret.txt", "leaves the workspace root"),
        ("..", "leaves the workspace root"),
    ] {
        let err = ws.file_exists(path).unwrap_err().to_string();
        assert!(err.contains(why), "{path:?}: {err}");
        let err = ws.file_contains(path, "x").unwrap_err().to_string();
        assert!(err.contains(why), "{path:?}: {err}");
    }
}

#[cfg(unix)]
#[test]
fn symlinks_leading_outside_are_refused_and_inside_are_fine() {
    use std::os::unix::fs::symlink;
    let (dir, ws) = setup();
    let root = ws.root().to_path_buf();
    symlink(dir.path().join("secret.txt"), root.join("out-file")).unwrap();
    symlink(dir.path(), root.join("out-dir")).unwrap();
    symlink(root.join("src/x.ts"), root.join("in-file")).unwrap();
    symlink("src", root.join("in-dir")).unwrap();
    symlink("nowhere", root.join("dangling")).unwrap();

    for path in [
        "out-file",
        "out-dir/secret.txt",
        "out-dir/missing.txt",
        "out-dir",
    ] {
        let err = ws.file_exists(path).unwrap_err().to_string();
        assert!(err.contains("outside the workspace root"), "{path}: {err}");
        let err = ws.file_contains(path, "secret").unwrap_err().to_string();
        assert!(err.contains("outside the workspace root"), "{path}: {err}");
    }
    let ev = ws.file_exists("in-file").unwrap();
    assert!(ev.exists);
    assert_eq!(ev.path, "in-file", "evidence keeps the path as written");
    assert!(ws.file_contains("in-dir/x.ts", "export").unwrap().0);
    assert!(!ws.file_exists("dangling").unwrap().exists);
    assert!(!ws.file_contains("in-dir/missing", "x").unwrap().0);
}

#[cfg(unix)]
#[test]
fn a_symlink_is_followed_when_its_target_as_text_stays_inside() {
    use std::os::unix::fs::symlink;
    let (dir, ws) = setup();
    let root = ws.root().to_path_buf();
    // `../ws/src` leaves the root and comes back: followed (the kernel's
    // RESOLVE_BENEATH refuses it; the jail's own walk decides)
    symlink("../ws/src", root.join("back")).unwrap();
    assert!(ws.file_contains("back/x.ts", "export").unwrap().0);
    // a sibling whose name starts like the root's is outside
    std::fs::create_dir_all(dir.path().join("ws-other")).unwrap();
    std::fs::write(dir.path().join("ws-other/x.ts"), "export").unwrap();
    symlink("../ws-other", root.join("sibling")).unwrap();
    let err = ws.file_contains("sibling/x.ts", "export").unwrap_err();
    assert!(
        matches!(
            err,
            JailError::Refused {
                why: Refusal::Outside,
                ..
            }
        ),
        "{err}"
    );
    // a chain of links inside ends at the file
    symlink("back", root.join("chain")).unwrap();
    assert_eq!(ws.file_exists("chain/x.ts").unwrap().size, Some(20));
}

#[test]
fn file_contains_is_a_case_sensitive_substring() {
    let (_dir, ws) = setup();
    let (yes, ev) = ws.file_contains("src/x.ts", "export const").unwrap();
    assert!(yes);
    assert_eq!(ev.blake3, Some(hash(b"export const x = 1;\n")));
    assert_eq!(ev.size, Some(20));
    assert!(!ws.file_contains("src/x.ts", "EXPORT").unwrap().0);
    assert!(ws.file_contains("src/x.ts", "").unwrap().0);
    let (no, ev) = ws.file_contains("src/missing.ts", "x").unwrap();
    assert!(!no);
    assert!(!ev.exists);
    let (no, ev) = ws.file_contains("src", "x").unwrap();
    assert!(!no);
    assert_eq!(ev.note.as_deref(), Some("not a regular file"));
}

#[test]
fn invalid_utf8_is_false_with_evidence() {
    let (_dir, ws) = setup();
    let bytes = b"abc\xff\xfeexport";
    std::fs::write(ws.root().join("bin.dat"), bytes).unwrap();
    let (found, ev) = ws.file_contains("bin.dat", "export").unwrap();
    assert!(!found);
    assert!(ev.exists);
    assert_eq!(ev.blake3, Some(hash(bytes)));
    assert!(
        ev.note
            .unwrap()
            .contains("not valid UTF-8 (invalid byte at offset 3)")
    );
    assert!(ws.file_exists("bin.dat").unwrap().exists);
}

#[test]
fn huge_files_are_refused() {
    let (_dir, ws) = setup();
    let path = ws.root().join("huge.log");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(17 * 1024 * 1024).unwrap(); // sparse
    let err = ws.file_contains("huge.log", "x").unwrap_err().to_string();
    assert!(err.contains("over the 16 MiB limit"), "{err}");
    let ev = ws.file_exists("huge.log").unwrap();
    assert!(ev.exists);
    assert_eq!(ev.size, Some(17 * 1024 * 1024));
    assert_eq!(ev.blake3, None, "not hashed");
    // Exactly at the limit is fine.
    let f = std::fs::File::create(ws.root().join("edge.log")).unwrap();
    f.set_len(MAX_FILE_BYTES).unwrap();
    let (found, ev) = ws.file_contains("edge.log", "x").unwrap();
    assert!(!found);
    assert_eq!(ev.size, Some(MAX_FILE_BYTES));
}

#[cfg(unix)]
#[test]
fn a_fifo_is_not_opened() {
    let (_dir, ws) = setup();
    let fifo = ws.root().join("pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return; // no mkfifo here
    }
    // Opening a FIFO for reading would block forever; both answer false.
    assert!(!ws.file_exists("pipe").unwrap().exists);
    assert!(!ws.file_contains("pipe", "x").unwrap().0);
}

#[test]
fn evidence_serializes_for_the_audit() {
    let (_dir, ws) = setup();
    let ev = ws.file_exists("src/x.ts").unwrap();
    let v = serde_json::to_value(&ev).unwrap();
    assert_eq!(v["path"], "src/x.ts");
    assert_eq!(v["exists"], true);
    assert_eq!(v["size"], 20);
    assert_eq!(v["blake3"].as_str().unwrap().len(), 64);
}

// --- judge configuration -------------------------------------------------------

// --- file() and glob() (language 1.1, X3) ------------------------------------

#[test]
fn file_reads_text_json_and_sha256_with_evidence() {
    let (dir, ws) = setup();
    let root = dir.path().join("ws");
    std::fs::write(root.join("data.json"), "{\"ok\": true}").unwrap();
    let (read, ev) = ws.read_file("src/../data.json").unwrap();
    assert_eq!(read.path, "data.json");
    assert!(read.exists);
    assert_eq!(read.size, 12);
    assert_eq!(read.text.as_deref(), Some("{\"ok\": true}"));
    let sha = stratum_vm::eval::sha256_hex(b"{\"ok\": true}");
    assert_eq!(read.sha256.as_deref(), Some(sha.as_str()));
    assert_eq!(ev.sha256.as_deref(), Some(sha.as_str()));
    assert_eq!(ev.blake3, Some(hash(b"{\"ok\": true}")));
    // missing and non-regular: exists false, nothing read
    let (read, ev) = ws.read_file("nope.md").unwrap();
    assert!(!read.exists && read.text.is_none() && read.sha256.is_none());
    assert_eq!(ev.note.as_deref(), Some("no such file"));
    assert!(!ws.read_file("src").unwrap().0.exists);
}

#[test]
fn file_text_is_null_for_non_utf8_and_large_files() {
    let (dir, ws) = setup();
    let root = dir.path().join("ws");
    std::fs::write(root.join("bin"), [0xff, 0xfe, 0x00]).unwrap();
    let (read, ev) = ws.read_file("bin").unwrap();
    assert!(read.exists && read.text.is_none());
    assert!(read.sha256.is_some(), "binary files are still hashed");
    assert!(ev.note.unwrap().contains("not UTF-8"));
    // over 8 MiB: hashed, no text
    let f = std::fs::File::create(root.join("big.txt")).unwrap();
    f.set_len(stratum_vm::interp::MAX_TEXT_BYTES + 1).unwrap();
    let (read, _) = ws.read_file("big.txt").unwrap();
    assert_eq!(read.size, stratum_vm::interp::MAX_TEXT_BYTES + 1);
    assert!(read.text.is_none() && read.sha256.is_some());
    // exactly 8 MiB: text
    let f = std::fs::File::create(root.join("edge.txt")).unwrap();
    f.set_len(stratum_vm::interp::MAX_TEXT_BYTES).unwrap();
    assert!(ws.read_file("edge.txt").unwrap().0.text.is_some());
    // over 64 MiB: neither hashed nor read (sparse, so cheap)
    let f = std::fs::File::create(root.join("huge.bin")).unwrap();
    f.set_len(stratum_vm::interp::MAX_HASH_BYTES + 1).unwrap();
    let (read, ev) = ws.read_file("huge.bin").unwrap();
    assert!(read.exists && read.sha256.is_none() && read.text.is_none());
    assert_eq!(ev.size, Some(stratum_vm::interp::MAX_HASH_BYTES + 1));
    assert!(ev.note.unwrap().contains("not hashed"));
}

#[test]
fn file_is_jailed_like_file_exists() {
    let (dir, ws) = setup();
    let root = dir.path().join("ws");
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("leak")).unwrap();
    for bad in ["leak", "../secret.txt", "/etc/passwd", ""] {
        assert!(
            matches!(ws.read_file(bad), Err(JailError::Refused { .. })),
            "{bad}"
        );
    }
}

#[test]
fn glob_is_sorted_relative_and_jailed() {
    let (dir, ws) = setup();
    let root = dir.path().join("ws");
    std::fs::write(root.join("b.md"), "").unwrap();
    std::fs::write(root.join("a.md"), "").unwrap();
    std::fs::write(root.join("src/deep/z.md"), "").unwrap();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/HEAD.md"), "").unwrap();
    // links are neither matched nor walked into, inside or outside the root
    std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
    std::os::unix::fs::symlink(root.join("a.md"), root.join("c.md")).unwrap();
    std::fs::write(dir.path().join("outside.md"), "").unwrap();
    assert_eq!(ws.glob("*.md").unwrap(), ["a.md", "b.md"]);
    assert_eq!(
        ws.glob("**/*.md").unwrap(),
        ["a.md", "b.md", "src/deep/z.md"]
    );
    assert_eq!(ws.glob("src/*").unwrap(), ["src/x.ts"]);
    assert_eq!(ws.glob("src/**").unwrap(), ["src/deep/z.md", "src/x.ts"]);
    assert!(ws.glob("nothing/*").unwrap().is_empty());
    for bad in ["/etc/*", "../*", "src/../../*", "", "a[", "\\x"] {
        let e = ws.glob(bad).unwrap_err();
        assert!(matches!(e, JailError::BadGlob { .. }), "{bad}: {e}");
    }
}

#[test]
fn glob_refuses_more_than_ten_thousand_matches() {
    let (dir, ws) = setup();
    let many = dir.path().join("ws/many");
    std::fs::create_dir_all(&many).unwrap();
    for i in 0..stratum_vm::interp::MAX_GLOB_MATCHES {
        std::fs::write(many.join(format!("{i}.txt")), "").unwrap();
    }
    assert_eq!(
        ws.glob("many/*.txt").unwrap().len(),
        stratum_vm::interp::MAX_GLOB_MATCHES
    );
    std::fs::write(many.join("last.txt"), "").unwrap();
    let e = ws.glob("many/*.txt").unwrap_err();
    assert!(matches!(e, JailError::TooMany { .. }), "{e}");
    assert!(e.to_string().contains("more than 10000 files"), "{e}");
}

#[test]
fn judge_config_is_read_from_stratum_toml() {
    assert_eq!(judge_config_from_toml("").unwrap(), None);
    // one reader for every consumer: a table the file does not have is refused
    // (the judge used to ignore it while the cost model refused it)
    assert!(judge_config_from_toml("[other]\nx = 1\n").is_err());
    let cfg = judge_config_from_toml(
        r#"
        [judge]
        url = "http://127.0.0.1:11434/v1"
        model = "qwen2.5:7b"
        api_key_env = "OPENAI_API_KEY"
        timeout_ms = 5000

        [judge.stakes.paranoid]
        model = "qwen2.5:32b"
        temperature = 0.2

        [judge.stakes.cheap]
        temperature = 0.0
        "#,
    )
    .unwrap()
    .unwrap();
    assert_eq!(cfg.url, "http://127.0.0.1:11434/v1");
    assert_eq!(cfg.model, "qwen2.5:7b");
    assert_eq!(cfg.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
    assert_eq!(cfg.timeout_ms, 5000);
    assert_eq!(
        cfg.per_stakes[&Stakes::Paranoid],
        StakesConfig {
            model: Some("qwen2.5:32b".into()),
            temperature: Some(0.2)
        }
    );
    assert_eq!(cfg.per_stakes[&Stakes::Cheap].model, None);
    let minimal =
        judge_config_from_toml("[judge]\nurl = \"https://x.example/v1\"\nmodel = \"m\"\n")
            .unwrap()
            .unwrap();
    assert_eq!(minimal.timeout_ms, 60_000);
    assert!(minimal.per_stakes.is_empty());
}

#[test]
fn bad_judge_config_is_refused_with_a_reason() {
    for (text, why) in [
        ("[judge]\nmodel = \"m\"\n", "url"),
        ("[judge]\nurl = \"ftp://x\"\nmodel = \"m\"\n", "http://"),
        (
            "[judge]\nurl = \"http://x\"\nmodel = \" \"\n",
            "`judge.model` must be a non-empty string",
        ),
        (
            "[judge]\nurl = \"http://x\"\nmodel = \"m\"\nmodle = 1\n",
            "modle",
        ),
        (
            "[judge]\nurl = \"http://x\"\nmodel = \"m\"\ntimeout_ms = 0\n",
            "timeout_ms",
        ),
        (
            "[judge]\nurl = \"http://x\"\nmodel = \"m\"\n[judge.stakes.huge]\n",
            "unknown stakes `huge`",
        ),
        (
            "[judge]\nurl = \"http://x\"\nmodel = \"m\"\n[judge.stakes.cheap]\ntemperature = 9.0\n",
            "temperature",
        ),
        ("[judge\n", "stratum.toml"),
    ] {
        let err = judge_config_from_toml(text).unwrap_err();
        assert!(err.contains(why), "{text:?}: {err}");
    }
}

#[test]
fn the_fail_closed_reason_is_clear() {
    assert!(NO_JUDGE_REASON.contains("requires a configured judge"));
}

// --- verdict parsing -------------------------------------------------------------

#[test]
fn verdicts_are_parsed_strictly() {
    assert_eq!(
        parse_verdict(r#"{"holds": true, "reason": "all there"}"#).unwrap(),
        (true, "all there".to_owned())
    );
    assert_eq!(
        parse_verdict("```json\n{\"holds\": false, \"reason\": \"missing\"}\n```").unwrap(),
        (false, "missing".to_owned())
    );
    assert_eq!(
        parse_verdict("  ```\n{\"holds\": true, \"reason\": \"ok\", \"confidence\": 0.9}\n```  ")
            .unwrap(),
        (true, "ok".to_owned())
    );
    for bad in [
        "",
        "yes",
        "The statement holds. {\"holds\": true, \"reason\": \"x\"}",
        r#"{"holds": "true", "reason": "x"}"#,
        r#"{"holds": 1, "reason": "x"}"#,
        r#"{"holds": true}"#,
        r#"{"holds": true, "reason": null}"#,
        r#"[true, "x"]"#,
        "```json\n{\"holds\": true, \"reason\": \"x\"}",
        "```json {\"holds\": true, \"reason\": \"x\"}```",
    ] {
        let err = parse_verdict(bad).unwrap_err().to_string();
        assert!(err.contains("malformed outcome"), "{bad:?}: {err}");
    }
}

// --- the judge against a fake OpenAI-compatible server -----------------------------

enum Reply {
    /// Status and body.
    Http(u16, String),
    /// Read the request, then answer nothing for this long.
    Stall(Duration),
}

/// Serves one request on 127.0.0.1:0; sends back the request (head, body).
fn fake_server(reply: Reply) -> (String, mpsc::Receiver<(String, Value)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let mut reader = BufReader::new(stream);
        let mut head = String::new();
        let mut content_length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                content_length = v.trim().parse().unwrap_or(0);
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0u8; content_length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let _ = tx.send((head, serde_json::from_slice(&body).unwrap_or(Value::Null)));
        let mut stream = reader.into_inner();
        match reply {
            Reply::Http(status, body) => {
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            Reply::Stall(d) => std::thread::sleep(d),
        }
    });
    (url, rx)
}

fn completion(content: &str) -> String {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "fake-model:1b",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    })
    .to_string()
}

fn config(url: &str) -> JudgeConfig {
    JudgeConfig {
        url: url.to_owned(),
        model: "base-model".to_owned(),
        api_key_env: None,
        timeout_ms: 5_000,
        per_stakes: Default::default(),
    }
}

fn context() -> Value {
    json!({"result": {"summary": "kept all 3 requirements"}, "input": {"reqs": 3}})
}

#[test]
fn judge_reports_holds_true_with_model_and_tokens() {
    let (url, rx) = fake_server(Reply::Http(
        200,
        completion(r#"{"holds": true, "reason": "all requirements kept"}"#),
    ));
    let out = judge(
        &config(&url),
        "No requirement was dropped",
        "default",
        &context(),
    )
    .unwrap();
    assert!(out.holds);
    assert_eq!(out.reason, "all requirements kept");
    assert_eq!(out.model, "fake-model:1b");
    assert_eq!(out.tokens, Some(120));
    let (head, body) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        head.starts_with("POST /v1/chat/completions HTTP/1.1"),
        "{head}"
    );
    assert!(!head.to_ascii_lowercase().contains("authorization"));
    assert_eq!(body["model"], "base-model");
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["messages"][0]["role"], "system");
    let user = body["messages"][1]["content"].as_str().unwrap();
    assert!(user.contains("No requirement was dropped"), "{user}");
    assert!(user.contains("kept all 3 requirements"), "{user}");
}

#[test]
fn judge_reports_holds_false_and_uses_the_stakes_tier() {
    let (url, rx) = fake_server(Reply::Http(
        200,
        json!({"choices": [{"message": {"content": "```json\n{\"holds\": false, \"reason\": \"req 2 dropped\"}\n```"}}]})
            .to_string(),
    ));
    let mut cfg = config(&format!("{url}/"));
    cfg.per_stakes.insert(
        Stakes::Paranoid,
        StakesConfig {
            model: Some("big-model".into()),
            temperature: Some(0.3),
        },
    );
    let out = judge(&cfg, "No requirement was dropped", "paranoid", &context()).unwrap();
    assert!(!out.holds);
    assert_eq!(out.reason, "req 2 dropped");
    assert_eq!(
        out.model, "big-model",
        "no model in the reply: the requested one"
    );
    assert_eq!(out.tokens, None);
    let (head, body) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(head.starts_with("POST /v1/chat/completions "), "{head}");
    assert_eq!(body["model"], "big-model");
    assert_eq!(body["temperature"], 0.3);
}

#[test]
fn judge_sends_the_api_key_from_the_named_variable() {
    // PATH is set in every test environment; it stands in for a key here.
    let key = std::env::var("PATH").unwrap();
    let (url, rx) = fake_server(Reply::Http(
        200,
        completion(r#"{"holds": true, "reason": "ok"}"#),
    ));
    let mut cfg = config(&url);
    cfg.api_key_env = Some("PATH".into());
    judge(&cfg, "s", "cheap", &context()).unwrap();
    let (head, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(head.contains(&format!("Bearer {key}")), "{head}");

    cfg.api_key_env = Some("STRATUM_TEST_VARIABLE_THAT_IS_NOT_SET".into());
    let err = judge(&cfg, "s", "cheap", &context())
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not set"), "{err}");
}

#[test]
fn judge_malformed_reply_is_an_error() {
    let (url, _rx) = fake_server(Reply::Http(200, completion("I think it holds.")));
    let err = judge(&config(&url), "s", "default", &context())
        .unwrap_err()
        .to_string();
    assert!(err.contains("malformed outcome"), "{err}");

    let (url, _rx) = fake_server(Reply::Http(200, r#"{"choices": []}"#.into()));
    let err = judge(&config(&url), "s", "default", &context())
        .unwrap_err()
        .to_string();
    assert!(err.contains("no choices[0].message.content"), "{err}");

    let (url, _rx) = fake_server(Reply::Http(200, "<html>".into()));
    let err = judge(&config(&url), "s", "default", &context())
        .unwrap_err()
        .to_string();
    assert!(err.contains("not JSON"), "{err}");
}

#[test]
fn judge_http_500_is_an_error() {
    let (url, _rx) = fake_server(Reply::Http(500, r#"{"error": "model crashed"}"#.into()));
    let err = judge(&config(&url), "s", "default", &context())
        .unwrap_err()
        .to_string();
    assert!(err.contains("HTTP 500"), "{err}");
    assert!(err.contains("model crashed"), "{err}");
}

#[test]
fn judge_timeout_is_an_error() {
    let (url, _rx) = fake_server(Reply::Stall(Duration::from_secs(3)));
    let mut cfg = config(&url);
    cfg.timeout_ms = 300;
    let err = judge(&cfg, "s", "default", &context())
        .unwrap_err()
        .to_string();
    assert!(err.contains("timed out after 300 ms"), "{err}");
}

#[test]
fn judge_unreachable_is_an_error() {
    // Bind and drop to get a port with nothing listening.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = judge(
        &config(&format!("http://127.0.0.1:{port}/v1")),
        "s",
        "default",
        &context(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("judge request to"), "{err}");
}

#[test]
fn scored_judge_sends_the_rubric_and_inputs_and_reads_the_score() {
    let (url, rx) = fake_server(Reply::Http(
        200,
        completion(r#"{"score": 0.75, "reasons": ["covers A", "misses B"]}"#),
    ));
    let inputs = [stratum_vm::host::JudgeInput {
        path: "sources.txt".into(),
        text: "Source A. Source B.".into(),
    }];
    let out =
        stratum_vm::host::judge_scored(&config(&url), "Score the coverage", &context(), &inputs)
            .unwrap();
    assert_eq!(out.score, 0.75);
    assert_eq!(out.reasons, ["covers A", "misses B"]);
    assert_eq!(out.model, "fake-model:1b");
    let (_, body) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    // a fresh context: one system and one user message
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(2));
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains(r#""score""#) && system.contains(r#""reasons""#),
        "{system}"
    );
    let user = body["messages"][1]["content"].as_str().unwrap();
    assert!(user.contains("Rubric: Score the coverage"), "{user}");
    assert!(user.contains("kept all 3 requirements"), "{user}");
    assert!(user.contains("Input file sources.txt"), "{user}");
    assert!(user.contains("Source A. Source B."), "{user}");
}

#[test]
fn scored_judge_malformed_or_out_of_range_score_is_an_error() {
    for content in [
        r#"{"score": 1.5, "reasons": []}"#,
        r#"{"score": "high", "reasons": []}"#,
        r#"{"score": 0.5, "reasons": "fine"}"#,
        r#"{"holds": true, "reason": "wrong form"}"#,
    ] {
        let (url, _rx) = fake_server(Reply::Http(200, completion(content)));
        let err = stratum_vm::host::judge_scored(&config(&url), "r", &context(), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("malformed score"), "{content}: {err}");
    }
}

#[test]
fn judge_inputs_are_jailed_capped_and_hashed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello").unwrap();
    std::fs::write(dir.path().join("big.txt"), vec![b'x'; 256 * 1024 + 1]).unwrap();
    let ws = stratum_vm::host::Workspace::new(dir.path()).unwrap();
    let (sent, digests) = stratum_vm::host::read_judge_inputs(&ws, &["a.txt".into()]).unwrap();
    assert_eq!(sent[0].text, "hello");
    assert_eq!(
        digests[0].sha256,
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    for (path, needle) in [
        ("big.txt", "over the limit of 262144 bytes"),
        ("missing.txt", "not a regular file"),
        ("../x", "leaves the workspace root"),
    ] {
        let err = stratum_vm::host::read_judge_inputs(&ws, &[path.into()]).unwrap_err();
        assert!(err.to_string().contains(needle), "{path}: {err}");
    }
}
