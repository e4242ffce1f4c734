//! Stand-in `claude` and `codex` executables that behave like the real
//! CLIs (issue 16 §1): they check their arguments (print mode, JSON output,
//! the settings, the prompt's task `produce x` and its contract schema with
//! a field `x`), print the documented JSON with usage, exit non-zero or hang
//! on demand (`STANDIN_MODE`). Shared by the connector tests and the agent
//! run tests.
//!
//! Owns: the stand-ins' text and installing them in a `bin/` directory.
//! Must never: assert on behaviour.

use std::path::Path;

/// The stand-in Claude Code CLI: `claude -p PROMPT --output-format json
/// [--model M] [--permission-mode P] [--max-turns N] [--allowedTools T...]`.
/// `STANDIN_MODE`: `ok` (default), `fail` (exit 1 with an error result),
/// `hang` (writes its pid to `STANDIN_PID`, sleeps). Its argv goes to
/// `STANDIN_ARGV` as JSON.
pub const CLAUDE: &str = r###"#!/usr/bin/env python3
import json, os, sys, time
a = sys.argv[1:]
json.dump(a, open(os.environ["STANDIN_ARGV"], "w"))
open(os.environ["STANDIN_ARGV"] + ".cwd", "w").write(os.getcwd())
if a[:1] != ["-p"] or a[2:4] != ["--output-format", "json"]:
    print("usage: claude -p PROMPT --output-format json", file=sys.stderr); sys.exit(64)
if not sys.stdin.isatty() and sys.stdin.read(1) != "":
    print("stdin was not closed", file=sys.stderr); sys.exit(65)
prompt = a[1]
if "## Output contract (JSON Schema)" not in prompt or '"x"' not in prompt or "produce x" not in prompt:
    print("the prompt lacks the task or the contract: " + prompt, file=sys.stderr); sys.exit(66)
mode = os.environ.get("STANDIN_MODE", "ok")
if mode == "retry":
    # the first attempt answers in prose; the retry must be told why it failed
    mode = "ok" if "## The previous attempt failed" in prompt and "not one JSON object" in prompt else "prose"
if mode == "hang":
    open(os.environ["STANDIN_PID"], "w").write(str(os.getpid()))
    time.sleep(60)
if mode == "fail":
    print(json.dumps({"type": "result", "subtype": "error_max_turns", "is_error": True, "result": "", "total_cost_usd": 0.01, "usage": {"input_tokens": 5, "output_tokens": 1}}))
    print("claude: reached the turn limit", file=sys.stderr)
    sys.exit(1)
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 900, "num_turns": 2,
  "result": "Done.\n" if mode == "prose" else "```json\n{\"output\": {\"x\": 7}}\n```", "session_id": "sess-1", "total_cost_usd": 0.125,
  "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 0}}))
"###;

/// The stand-in Codex CLI: `codex exec --json --sandbox S [--model M] [-c
/// model_reasoning_effort="E"] -- PROMPT`, JSONL events on stdout.
pub const CODEX: &str = r#"#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
json.dump(a, open(os.environ["STANDIN_ARGV"], "w"))
if a[:2] != ["exec", "--json"] or "--sandbox" not in a or a[-2] != "--":
    print("usage: codex exec --json --sandbox MODE -- PROMPT", file=sys.stderr); sys.exit(64)
if sys.stdin.read(1) != "":
    print("stdin was not closed", file=sys.stderr); sys.exit(65)
for ev in [
    {"type": "thread.started", "thread_id": "th-1"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "thinking"}},
    {"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": "{\"x\": 9}"}},
    {"type": "turn.completed", "usage": {"input_tokens": 1500, "cached_input_tokens": 500, "output_tokens": 500}},
]:
    print(json.dumps(ev))
"#;

/// Writes both stand-ins, executable, into `bin` (created if missing).
pub fn install(bin: &Path) {
    std::fs::create_dir_all(bin).unwrap();
    for (name, text) in [("claude", CLAUDE), ("codex", CODEX)] {
        let p = bin.join(name);
        std::fs::write(&p, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
