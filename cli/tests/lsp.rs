//! `stratumc lsp` end to end, as a real process: a JSON-RPC session over
//! stdio compared with `stratumc check --format json`, the exit statuses of
//! the shutdown protocol, and a real editor as the client — headless Neovim
//! (Debian's `neovim` package; CI installs it) running the README's
//! set-up snippet unchanged.

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lsp_server::{Message, Notification, Request, RequestId};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_stratumc");

/// A spec with two mistakes, one on a line whose text before the mistake is
/// non-ASCII (two emoji are four UTF-16 units and eight bytes).
const BAD_SPEC: &str = r#"# Résumé 中文 😀: non-ASCII text before the positions that matter
version: 1
contracts:
  Draft: {body: string, tags: "string[]"}
  Out: {text: string}
flows:
  entry: main
  main:
    input: {goal: string}
    output: {from: "${polish.output}", contract: Otu}
    steps:
      - id: draft
        do: "Écris 中文 😀 ${input.goal}"
        out: Draft
      - id: polish
        after: [draft]
        do: "😀😀 é ${draft.output.bdy} 中文"
        out: Out
"#;

/// Only a guard against a hung child (it is killed and the test fails);
/// nothing is timed.
const HANG: Duration = Duration::from_secs(180);

/// Kills a child that outlives [`HANG`].
struct Watchdog {
    done: Arc<Mutex<bool>>,
}

impl Watchdog {
    fn new(child: Arc<Mutex<Child>>) -> Watchdog {
        let done = Arc::new(Mutex::new(false));
        let flag = Arc::clone(&done);
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < HANG {
                std::thread::sleep(Duration::from_millis(100));
                if *flag.lock().unwrap() {
                    return;
                }
            }
            let _ = child.lock().unwrap().kill();
        });
        Watchdog { done }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        *self.done.lock().unwrap() = true;
    }
}

/// `stratumc lsp` as a child process, spoken to with LSP framing.
struct Server {
    child: Arc<Mutex<Child>>,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: i32,
    _watchdog: Watchdog,
}

impl Server {
    fn start() -> Server {
        let mut child = Command::new(BIN)
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("stratumc lsp starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let child = Arc::new(Mutex::new(child));
        let mut server = Server {
            _watchdog: Watchdog::new(Arc::clone(&child)),
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        let init = server.request("initialize", json!({"capabilities": {}}));
        assert!(init["capabilities"]["hoverProvider"] == true, "{init}");
        server.notify("initialized", json!({}));
        server
    }

    fn send(&mut self, message: Message) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        message.write(stdin).expect("the server reads stdin");
        stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(Message::Notification(Notification::new(
            method.into(),
            params,
        )));
    }

    fn recv(&mut self) -> Message {
        Message::read(&mut self.stdout)
            .expect("framing is valid")
            .expect("the server did not close stdout")
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = RequestId::from(self.next_id);
        self.send(Message::Request(Request::new(
            id.clone(),
            method.into(),
            params,
        )));
        loop {
            if let Message::Response(r) = self.recv()
                && r.id == id
            {
                return r.response_result.expect("the request succeeds");
            }
        }
    }

    fn diagnostics(&mut self) -> Value {
        loop {
            if let Message::Notification(n) = self.recv()
                && n.method == "textDocument/publishDiagnostics"
            {
                return n.params;
            }
        }
    }

    /// Closes stdin (if still open) and returns the exit status.
    fn wait(mut self) -> i32 {
        drop(self.stdin.take());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.stdout, &mut rest);
        let status = self.child.lock().unwrap().wait().unwrap();
        status.code().expect("the server exited by itself")
    }
}

/// The UTF-16 column of a 1-based char column on a 1-based line.
fn utf16_column(text: &str, line: u64, char_column: u64) -> u64 {
    let l = text.lines().nth(line as usize - 1).unwrap();
    l.chars()
        .take(char_column as usize - 1)
        .map(|c| c.len_utf16() as u64)
        .sum()
}

#[test]
fn stdio_session_publishes_what_check_reports_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad é.stratum.yaml");
    std::fs::write(&path, BAD_SPEC).unwrap();

    let check = Command::new(BIN)
        .args(["check", "--format", "json"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    let expected = report["files"][0]["diagnostics"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(expected.len(), 2);

    let mut server = Server::start();
    let uri = format!(
        "file://{}",
        path.display()
            .to_string()
            .replace(' ', "%20")
            .replace('é', "%C3%A9")
    );
    server.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "yaml", "version": 1, "text": BAD_SPEC}}),
    );
    let published = server.diagnostics();
    assert_eq!(published["uri"], uri);
    let got = published["diagnostics"].as_array().unwrap();
    assert_eq!(got.len(), expected.len(), "{published:#}");
    for (e, g) in expected.iter().zip(got) {
        assert_eq!(g["code"], e["code"]);
        assert_eq!(g["message"], e["message"]);
        assert_eq!(g["source"], "stratumc");
        let severity = if e["severity"] == "error" { 1 } else { 2 };
        assert_eq!(g["severity"], severity);
        let (line, col) = (e["line"].as_u64().unwrap(), e["column"].as_u64().unwrap());
        let (end_line, end_col) = (
            e["end_line"].as_u64().unwrap(),
            e["end_column"].as_u64().unwrap(),
        );
        assert_eq!(g["range"]["start"]["line"], line - 1);
        assert_eq!(
            g["range"]["start"]["character"],
            utf16_column(BAD_SPEC, line, col)
        );
        assert_eq!(g["range"]["end"]["line"], end_line - 1);
        assert_eq!(
            g["range"]["end"]["character"],
            utf16_column(BAD_SPEC, end_line, end_col)
        );
        if let Some(help) = e["help"].as_str() {
            let related = g["relatedInformation"].to_string();
            assert!(related.contains(help), "{related}");
        }
    }
    // the emoji line: check's char column 34 is UTF-16 character 35 (0-based)
    assert_eq!(
        got[1]["range"]["start"],
        json!({"line": 16, "character": 35})
    );

    assert_eq!(server.request("shutdown", Value::Null), Value::Null);
    server.notify("exit", Value::Null);
    assert_eq!(server.wait(), 0, "exit after shutdown is status 0");
}

#[test]
fn exit_without_shutdown_is_status_1_and_a_closed_stdin_ends_the_server() {
    let mut server = Server::start();
    server.notify("exit", Value::Null);
    assert_eq!(server.wait(), 1);

    // the editor dies: stdin closes without shutdown or exit
    let server = Server::start();
    assert_eq!(server.wait(), 1);
}

fn find_nvim() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("nvim"))
            .find(|p| p.is_file())
    })
}

/// The Lua block of the README's Neovim set-up, unchanged.
fn readme_snippet() -> String {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(readme).unwrap();
    let section = readme
        .split("**Neovim**")
        .nth(1)
        .expect("the README has a **Neovim** set-up");
    let block = section
        .split("```lua\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the Neovim set-up has a ```lua block");
    block.to_string()
}

/// What the test does in Neovim after the README's snippet: open the spec,
/// wait for diagnostics, fix one mistake by editing the buffer (incremental
/// sync), go to a definition, rename a step, stop the server; everything
/// observed is written to a JSON file. Any Lua error is written there too,
/// and Neovim always quits.
const DRIVER: &str = r#"
local out, spec = OUT_PATH, SPEC_PATH
local result = {}
local ok, err = pcall(function()
  vim.cmd('edit ' .. vim.fn.fnameescape(spec))
  local buf = vim.api.nvim_get_current_buf()
  result.filetype = vim.bo[buf].filetype
  local function diagnostics()
    local list = {}
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      table.insert(list, { code = d.code, lnum = d.lnum, col = d.col, end_lnum = d.end_lnum,
        end_col = d.end_col, message = d.message, source = d.source, severity = d.severity })
    end
    table.sort(list, function(a, b) return a.lnum < b.lnum end)
    return list
  end
  result.got_diagnostics = vim.wait(60000, function() return #vim.diagnostic.get(buf) >= 2 end, 20)
  result.diagnostics = diagnostics()

  -- fix `bdy` -> `body` in the buffer; the client sends an incremental change
  local row = vim.fn.search('output\\.bdy') - 1
  local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, true)[1]
  local s, e = line:find('bdy', 1, true)
  vim.api.nvim_buf_set_text(buf, row, s - 1, row, e, { 'body' })
  result.got_update = vim.wait(60000, function() return #vim.diagnostic.get(buf) == 1 end, 20)
  result.after_fix = diagnostics()

  -- go to the definition of `draft` in `${draft.output.body}`
  local lnum = vim.fn.search('\\${draft\\.output')
  vim.api.nvim_win_set_cursor(0, { lnum, vim.fn.col('.') + 1 })
  local responses = vim.lsp.buf_request_sync(buf, 'textDocument/definition',
    vim.lsp.util.make_position_params(), 30000) or {}
  for _, r in pairs(responses) do
    result.definition = r.result or r.err
  end

  -- rename the step through the editor's own rename (prepareRename, then the edit)
  vim.lsp.buf.rename('brouillon')
  result.renamed = vim.wait(30000, function()
    return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, true), '\n'):find('brouillon.output', 1, true) ~= nil
  end, 20)
  result.text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, true), '\n')

  -- stop: shutdown + exit
  for _, client in pairs(vim.lsp.get_active_clients()) do client.stop() end
  result.stopped = vim.wait(30000, function() return #vim.lsp.get_active_clients() == 0 end, 20)
end)
result.ok = ok
result.error = err and tostring(err) or nil
vim.fn.writefile({ vim.fn.json_encode(result) }, out)
vim.cmd('qa!')
"#;

#[test]
fn headless_neovim_runs_the_readme_setup() {
    let Some(nvim) = find_nvim() else {
        panic!(
            "`nvim` is not on PATH: this test drives the server from a real editor. \
             Install Debian's `neovim` package (`apt-get install -y neovim`); .ci/run does."
        );
    };
    let version = Command::new(&nvim).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("review 中文.stratum.yaml");
    std::fs::write(&spec, BAD_SPEC).unwrap();
    let out = dir.path().join("result.json");
    let lua = |p: &Path| format!("{:?}", p.display().to_string());
    let script = format!(
        "{}\n{}",
        readme_snippet(),
        DRIVER
            .replace("OUT_PATH", &lua(&out))
            .replace("SPEC_PATH", &lua(&spec))
    );
    let script_path = dir.path().join("driver.lua");
    std::fs::write(&script_path, script).unwrap();

    // `stratumc` on PATH, as the README asks; nothing outside the temp dir
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let child = Command::new(&nvim)
        .args(["--headless", "--clean", "-c"])
        .arg(format!("luafile {}", script_path.display()))
        .env("PATH", path)
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nvim starts");
    let child = Arc::new(Mutex::new(child));
    let watchdog = Watchdog::new(Arc::clone(&child));
    let output = loop {
        if let Some(status) = child.lock().unwrap().try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(watchdog);
    let log = std::fs::read_to_string(dir.path().join("cache/nvim/lsp.log")).unwrap_or_default();
    let result = std::fs::read_to_string(&out)
        .unwrap_or_else(|_| panic!("nvim ({version}) wrote no result ({output}); lsp.log:\n{log}"));
    let r: Value = serde_json::from_str(&result).unwrap();
    let context = format!("{version}\n{r:#}\nlsp.log:\n{log}");
    assert_eq!(r["ok"], true, "the Lua driver failed: {context}");
    assert_eq!(r["filetype"], "yaml.stratum", "{context}");
    assert_eq!(
        r["got_diagnostics"], true,
        "no diagnostics arrived: {context}"
    );

    // Neovim turns the server's UTF-16 columns into byte columns
    let byte_col = |needle: &str| -> (u64, u64) {
        let (i, line) = BAD_SPEC
            .lines()
            .enumerate()
            .find(|(_, l)| l.contains(needle))
            .unwrap();
        (i as u64, line.find(needle).unwrap() as u64)
    };
    let d = r["diagnostics"].as_array().unwrap();
    assert_eq!(d.len(), 2, "{context}");
    let (line, col) = byte_col("Otu}");
    assert_eq!(d[0]["code"], "S0202", "{context}");
    assert_eq!(
        (d[0]["lnum"].as_u64(), d[0]["col"].as_u64()),
        (Some(line), Some(col))
    );
    assert_eq!(d[0]["message"], "unknown contract `Otu`");
    assert_eq!(d[0]["source"], "stratumc");
    let (line, col) = byte_col("bdy}");
    assert_eq!(d[1]["code"], "S0403", "{context}");
    assert_eq!(
        (d[1]["lnum"].as_u64(), d[1]["col"].as_u64()),
        (Some(line), Some(col))
    );
    assert_eq!(d[1]["end_col"].as_u64(), Some(col + 3));
    assert_eq!(d[1]["message"], "`draft.output` (Draft) has no field `bdy`");
    assert_eq!(d[1]["severity"], 1, "vim.diagnostic.severity.ERROR");

    assert_eq!(
        r["got_update"], true,
        "the fix was not re-checked: {context}"
    );
    assert_eq!(r["after_fix"][0]["code"], "S0202", "{context}");

    let declaration = BAD_SPEC
        .lines()
        .position(|l| l.ends_with("- id: draft"))
        .unwrap() as u64;
    let def = &r["definition"];
    assert_eq!(
        def["range"]["start"]["line"].as_u64(),
        Some(declaration),
        "{context}"
    );
    assert_eq!(def["range"]["start"]["character"], 12, "{context}");
    assert_eq!(def["range"]["end"]["character"], 17, "{context}");
    let def_uri = def["uri"].as_str().unwrap_or_default();
    assert!(
        def_uri.starts_with("file:///") && def_uri.ends_with(".stratum.yaml"),
        "{context}"
    );

    assert_eq!(r["renamed"], true, "the rename was not applied: {context}");
    let text = r["text"].as_str().unwrap();
    assert!(
        text.contains("- id: brouillon") && text.contains("after: [brouillon]"),
        "{text}"
    );
    assert!(
        text.contains("😀😀 é ${brouillon.output.body} 中文"),
        "{text}"
    );

    assert_eq!(r["stopped"], true, "the server did not stop: {context}");
    assert!(output.success(), "nvim exited with {output}");
}
