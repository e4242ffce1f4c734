#!/usr/bin/env python3
"""End-to-end tests of `stratumc mcp` with the official Python MCP SDK.

Usage: python3 mcp/tests/e2e.py [path/to/stratumc]   (default: target/debug/stratumc)

Every test starts real `stratumc mcp` processes over stdio (with a temporary
STRATUM_HOME) and drives complete flows with real tool calls, the way a coding
agent does. Run from `cli/tests/mcp.rs` (`cargo test -p stratumc`), which passes
the binary cargo built. Exit status 0 when every test passed; prints one line per
test and a summary `e2e: N passed, M failed`.
"""

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

try:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
except ImportError:  # the Rust driver turns this exit code into a clear failure
    print("e2e: the Python MCP SDK is missing: run `python3 -m pip install mcp`", file=sys.stderr)
    sys.exit(3)

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "target" / "debug" / "stratumc").resolve()
HOME = Path(tempfile.mkdtemp(prefix="stratum-mcp-e2e-"))
TIMEOUT = 60

# ----- specs -------------------------------------------------------------------------

LINEAR = """version: 1
contracts:
  Draft: {title: string, words: integer}
  Final: {message: string}
flows:
  entry: main
  main:
    input: {topic: string}
    output: {from: "${publish.output}", contract: Final}
    steps:
      - id: draft
        do: "Draft a post about ${input.topic}."
        out: Draft
        ensure:
          - expr: "result.words > 10"
      - id: measure
        after: [draft]
        set: {title: "result.draft.title", words: "result.draft.words"}
        out: Draft
      - id: publish
        after: [measure]
        do: "Publish ${measure.output.title} (${measure.output.words} words)."
        out: Final
"""

ITERATE = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${work.output}", contract: R}
    steps:
      - id: work
        do: "improve the text until it says ok"
        out: R
        iterate: {max: 3, until: "result.value == 'ok'"}
"""

GATE = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${finish.output}", contract: R}
    max_rounds: 2
    steps:
      - id: build
        do: "build it"
        out: R
      - id: review
        after: [build]
        gate: {on_approve: null, on_revise: build, on_kill: null}
      - id: finish
        after: [review]
        do: "finish"
        out: R
"""

ON_FAIL = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${finish.output}", contract: R}
    steps:
      - id: primary
        do: "primary"
        out: R
        attempts: 1
        on_fail: fallback
      - id: fallback
        do: "fallback"
        out: R
      - id: finish
        after: [fallback]
        do: "finish"
        out: R
"""

FANOUT = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {items: "string[]"}
    output: {from: "${sum.output}", contract: R}
    steps:
      - id: fan
        attempts: 2
        fanout:
          over: "${input.items}"
          concurrency: 2
          isolation: none
          require: all
          merge: sequential
          dispatch: consumer
          steps:
            - do: "inspect ${item}"
              out: R
              ensure:
                - expr: "result.value == item"
      - id: sum
        after: [fan]
        do: "summarise ${fan.output}"
        out: R
"""

SUBFLOW = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {name: string}
    output: {from: "${finish.output}", contract: R}
    steps:
      - id: wrap
        run: summarize
        with: {name: "hello ${input.name}"}
      - id: finish
        after: [wrap]
        do: "publish ${wrap.output.value}"
        out: R
  summarize:
    input: {name: string}
    output: {from: "${digest.output}", contract: R}
    steps:
      - id: digest
        do: "digest ${input.name}"
        out: R
"""

TWO_STEPS = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${second.output}", contract: R}
    steps:
      - id: first
        do: "first"
        out: R
      - id: second
        after: [first]
        do: "second"
        out: R
"""

THREE_STEPS = TWO_STEPS.replace('${second.output}', '${third.output}') + """      - id: third
        after: [second]
        do: "third"
        out: R
"""

BUDGET = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${work.output}", contract: R}
    budget: {tokens: 100}
    steps:
      - id: work
        do: "work"
        out: R
"""

FILES = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${write.output}", contract: R}
    steps:
      - id: write
        do: "write notes.md containing the word owl"
        out: R
        ensure:
          - file_contains: {path: "notes.md", text: "owl"}
"""

# X4 artifacts and an X5 scored judge (`[judges.local]` in the workspace's stratum.toml)
JUDGED = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {topic: string, dir: string}
    output: {from: "${write.output}", contract: R}
    steps:
      - id: write
        do: "write ${input.dir}/notes.md and figures about ${input.topic}"
        out: R
        artifacts: ["${input.dir}/notes.md", "${input.dir}/figs/*.png"]
        ensure:
          - judged:
              rubric: "The notes on ${input.topic} are complete."
              threshold: 0.7
              judge: local
              inputs: ["${input.dir}/notes.md"]
        attempts: 2
"""

BAD_SPECS = {
    "unknown-field": "version: 1\nflows:\n  entry: main\n  main:\n    input: {}\n    stepz: []\n",
    "bad-ref": LINEAR.replace("${measure.output.title}", "${nosuch.output.title}"),
    "bad-yaml": "version: 1\nflows: [\n",
    "bad-expr": LINEAR.replace("result.words > 10", "result.words >> 10"),
}

# ----- harness -----------------------------------------------------------------------


class ToolError(AssertionError):
    pass


class Client:
    """One `stratumc mcp` process and an initialized client session."""

    def __init__(self, session, pidfile):
        self.s = session
        self.pidfile = pidfile

    @property
    def pid(self):
        return int(Path(self.pidfile).read_text().strip())

    async def call(self, tool, args):
        r = await asyncio.wait_for(self.s.call_tool(tool, args), TIMEOUT)
        text = r.content[0].text if r.content else ""
        return bool(r.is_error), r.structured_content, text

    async def ok(self, tool, args):
        is_error, data, text = await self.call(tool, args)
        if is_error:
            raise ToolError(f"{tool} failed: {text}")
        assert json.loads(text) == data, f"{tool}: text and structured content differ"
        return data

    async def err(self, tool, args, error_type=None, contains=None):
        is_error, data, text = await self.call(tool, args)
        assert is_error, f"{tool} should fail but returned {json.dumps(data)[:400]}"
        assert text.startswith("error: "), text
        assert data["status"] == "error", data
        if error_type:
            assert data["error_type"] == error_type, f"expected {error_type}, got {data}"
        if contains:
            assert contains in data["message"], f"{contains!r} not in {data['message']!r}"
        return data

    async def done(self, env, step, result, token=None):
        entry = ready_entry(env, step)
        return await self.ok("stratum_step_done", {
            "runId": env["runId"], "stepId": step,
            "dispatchToken": token or entry["dispatchToken"], "result": result})

    async def gate(self, env, step, decision, **extra):
        g = next(g for g in env["gates"] if g["stepId"] == step)
        return await self.ok("stratum_gate_resolve", {
            "runId": env["runId"], "stepId": step, "gateToken": g["gateToken"],
            "decision": decision, **extra})


def ready_entry(env, step):
    for e in env["ready"]:
        if e["id"] == step:
            return e
    raise AssertionError(f"{step} is not ready: {[e['id'] for e in env['ready']]} ({env['status']})")


def ready_ids(env):
    return sorted(e["id"] for e in env["ready"])


@contextlib.asynccontextmanager
async def server(home=None, env=None):
    """Starts `stratumc mcp` (through sh so the test knows its pid) and initializes a session
    (`env`: more variables for the server)."""
    pidfile = tempfile.mktemp(prefix="pid-", dir=HOME)
    env = dict(os.environ, STRATUM_HOME=str(home or HOME / "store"), **(env or {}))
    params = StdioServerParameters(
        command="sh", args=["-c", f'echo $$ > "{pidfile}"; exec "{BINARY}" mcp'], env=env,
        cwd=str(REPO))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await asyncio.wait_for(session.initialize(), TIMEOUT)
            yield Client(session, pidfile)


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn

# ----- tests -------------------------------------------------------------------------


@test
async def tools_are_listed_and_teach_the_protocol():
    async with server() as c:
        tools = {t.name: t for t in (await c.s.list_tools()).tools}
        assert sorted(tools) == sorted([
            "stratum_validate", "stratum_plan", "stratum_step_done", "stratum_gate_resolve",
            "stratum_audit", "stratum_commit", "stratum_revert", "stratum_resume",
            "stratum_flow_cancel", "stratum_cost", "stratum_usage_report",
            "stratum_compile_speckit", "stratum_retry",
            "stratum_agent_run", "stratum_agent_poll", "stratum_cancel_agent_run",
            "stratum_flow_run_bg", "stratum_flow_poll", "stratum_flow_cancel_bg",
            "stratum_guard_register", "stratum_guard_transition", "stratum_guard_history",
            "stratum_guard_upgrade", "stratum_guard_override", "stratum_guard_migrate",
            "stratum_guard_apply_upgrade"]), sorted(tools)
        assert "call this first" in tools["stratum_plan"].description
        assert "dispatchToken" in tools["stratum_step_done"].description
        assert "violations" in tools["stratum_step_done"].description
        assert "gateToken" in tools["stratum_gate_resolve"].description
        schema = tools["stratum_step_done"].input_schema
        props = schema["properties"]
        # current names are listed and required; the older aliases are accepted (see
        # spec_as_object_and_older_field_names) but not advertised
        assert {"runId", "stepId", "dispatchToken", "result"} <= set(props), props
        assert not {"flow_id", "step_id"} & set(props), props
        assert {"runId", "stepId"} <= set(schema["required"]), schema
        assert {"runId", "from", "spec"} <= set(tools["stratum_retry"].input_schema["properties"])
        for name in ["stratum_audit", "stratum_resume", "stratum_flow_cancel", "stratum_retry"]:
            assert "runId" in tools[name].input_schema["required"], name


@test
async def linear_flow_completes():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": LINEAR, "input": {"topic": "owls"}})
        assert env["status"] == "ready" and env["runId"] and len(env["planHash"]) == 64
        e = ready_entry(env, "draft")
        assert e["do"] == "Draft a post about owls."
        assert e["contract"]["root"] == "Draft" and e["ensure"] == [{"expr": "result.words > 10"}]
        assert e["attempt"] == 1 and e["dispatch"] == "step"
        env = await c.done(env, "draft", {"output": {"title": "Owls", "words": 120}})
        e = ready_entry(env, "publish")
        assert e["do"] == "Publish Owls (120 words).", e["do"]
        env = await c.done(env, "publish", {"message": "posted"})
        assert env["status"] == "completed" and env["output"] == {"message": "posted"}, env
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        kinds = [ev["type"] for ev in audit["events"]]
        assert kinds[0] == "planned" and kinds[-1] == "completed", kinds
        assert audit["status"] == "completed"


@test
async def spec_as_object_and_older_field_names():
    spec = {"version": 1, "contracts": {"R": {"value": "string"}},
            "flows": {"entry": "main", "main": {
                "input": {"who": "string"}, "output": {"from": "${a.output}", "contract": "R"},
                "steps": [{"id": "a", "do": "greet ${input.who}", "out": "R"}]}}}
    async with server() as c:
        v = await c.ok("stratum_validate", {"spec": spec})
        assert v["status"] == "valid", v
        # `portable` adds one warning per language 1.1 addition (here a cost hint); still valid
        hinted = json.loads(json.dumps(spec))
        hinted["flows"]["main"]["steps"][0]["cost"] = {"tokens": 100}
        p = await c.ok("stratum_validate", {"spec": hinted, "portable": True})
        assert p["status"] == "valid" and [d["code"] for d in p["diagnostics"]] == ["S0906"], p
        p = await c.ok("stratum_validate", {"spec": hinted})
        assert p["diagnostics"] == [], p
        env = await c.ok("stratum_plan", {"spec": spec, "inputs": {"who": "Ada"}})
        e = ready_entry(env, "a")
        assert e["do"] == "greet Ada"
        env = await c.ok("stratum_step_done", {"flow_id": env["runId"], "step_id": "a",
                                               "dispatchToken": e["dispatchToken"],
                                               "result": {"value": "hi"}})
        assert env["status"] == "completed" and env["output"] == {"value": "hi"}


@test
async def retry_reports_violations():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": LINEAR, "input": {"topic": "owls"}})
        # contract violation: a field missing and one of the wrong type
        env = await c.done(env, "draft", {"output": {"title": 3}})
        e = ready_entry(env, "draft")
        assert e["attempt"] == 2 and e["attemptsLeft"] == 0, e
        pf = e["previousFailure"]
        assert pf["attempt"] == 1 and pf["violations"], pf
        # the retry satisfies the contract but not the ensure: out of attempts, the run fails
        env = await c.done(env, "draft", {"output": {"title": "Owls", "words": 3}})
        assert env["status"] == "failed", env
        assert "result.words > 10" in env["failure"]["reason"], env["failure"]
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": LINEAR, "input": {"topic": "owls"}})
        env = await c.done(env, "draft", {"output": {"title": "Owls", "words": 3}})
        e = ready_entry(env, "draft")
        v = e["previousFailure"]["violations"]
        assert v and v[0]["kind"] == "ensure" and v[0]["expr"] == "result.words > 10", v
        env = await c.done(env, "draft", {"title": "Owls", "words": 30})
        assert ready_ids(env) == ["publish"]


@test
async def retry_reuses_what_succeeded():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": LINEAR, "input": {"topic": "owls"}})
        old = env["runId"]
        # still running: refused, with the status in the message
        await c.err("stratum_retry", {"runId": old}, "run_not_finished", "is running")
        env = await c.done(env, "draft", {"output": {"title": "Owls", "words": 120}})
        env = await c.done(env, "publish", {"failure": "the publisher is down"})
        env = await c.done(env, "publish", {"failure": "the publisher is down"})
        assert env["status"] == "failed", env
        # snake_case accepted like the other tools; draft is reused, publish is handed out
        new = await c.ok("stratum_retry", {"flow_id": old})
        assert new["runId"] != old and ready_ids(new) == ["publish"], new
        assert ready_entry(new, "publish")["do"] == "Publish Owls (120 words)."
        new = await c.done(new, "publish", {"message": "posted"})
        assert new["status"] == "completed" and new["output"] == {"message": "posted"}, new
        audit = await c.ok("stratum_audit", {"runId": new["runId"]})
        reused = [ev for ev in audit["events"] if ev["type"] == "step_reused"]
        assert [ev["stepId"] for ev in reused] == ["draft"], audit["events"]
        assert reused[0]["detail"]["fromRun"] == old
        assert not [ev for ev in audit["events"] if ev["type"] == "ready" and ev.get("stepId") == "draft"]
        old_audit = await c.ok("stratum_audit", {"runId": old})
        assert old_audit["status"] == "failed"
        assert old_audit["events"][-1]["type"] == "retried", old_audit["events"][-1]
        assert old_audit["events"][-1]["detail"]["run"] == new["runId"]
        # from: draft runs again; a changed spec is compiled and used
        again = await c.ok("stratum_retry", {"runId": old, "from": "draft",
                                             "spec": LINEAR.replace("Draft a post", "Write a post")})
        assert ready_entry(again, "draft")["do"] == "Write a post about owls.", again
        await c.err("stratum_retry", {"runId": old, "from": "drafts"}, "invalid_step", "did you mean `draft`?")


@test
async def iterate_feeds_back_until():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": ITERATE})
        env = await c.done(env, "work", {"value": "draft 1"})
        e = ready_entry(env, "work")
        assert "iterate until" in e["previousFailure"]["reason"], e
        env = await c.done(env, "work", {"value": "ok"})
        assert env["status"] == "completed" and env["output"] == {"value": "ok"}


@test
async def gate_approve_revise_kill():
    async with server() as c:
        # approve
        env = await c.ok("stratum_plan", {"spec": GATE})
        env = await c.done(env, "build", {"value": "v1"})
        assert env["status"] == "running" and env["ready"] == [], env
        g = env["gates"][0]
        assert g["stepId"] == "review" and g["gateToken"] and "round" in g and "maxRounds" in g, g
        env = await c.gate(env, "review", "approve", rationale="looks good", resolved_by="ada")
        env = await c.done(env, "finish", {"value": "shipped"})
        assert env["status"] == "completed"
        # revise, then approve (older names: outcome, note, user_id)
        env = await c.ok("stratum_plan", {"spec": GATE})
        env = await c.done(env, "build", {"value": "v1"})
        old_token = env["gates"][0]["gateToken"]
        env = await c.gate(env, "review", "revise")
        e = ready_entry(env, "build")
        env = await c.done(env, "build", {"value": "v2"})
        g = env["gates"][0]
        assert g["gateToken"] != old_token and g["round"] >= 1, g
        await c.err("stratum_gate_resolve", {"runId": env["runId"], "stepId": "review",
                                             "gateToken": old_token, "decision": "approve"},
                    "stale_token")
        env = await c.ok("stratum_gate_resolve", {"flow_id": env["runId"], "step_id": "review",
                                                  "gateToken": g["gateToken"], "outcome": "approve",
                                                  "note": "better", "user_id": "ada"})
        assert ready_ids(env) == ["finish"]
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        assert [ev["type"] for ev in audit["events"]].count("gate_resolved") == 2
        # kill (on_kill: null ends the run `killed`)
        env = await c.ok("stratum_plan", {"spec": GATE})
        env = await c.done(env, "build", {"value": "v1"})
        env = await c.gate(env, "review", "kill")
        assert env["status"] == "killed", env


@test
async def on_fail_routes_to_fallback():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": ON_FAIL})
        env = await c.done(env, "primary", {"failure": "the API is down"})
        e = ready_entry(env, "fallback")
        assert e["previousFailure"]["reason"] == "the API is down", e
        env = await c.done(env, "fallback", {"value": "cached"})
        env = await c.done(env, "finish", {"value": "end"})
        assert env["status"] == "completed" and env["output"] == {"value": "end"}
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        assert any(ev["type"] == "routed" for ev in audit["events"])


@test
async def consumer_fanout():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": FANOUT, "input": {"items": ["a", "b", "c"]}})
        assert ready_ids(env) == ["fan/0", "fan/1"], ready_ids(env)  # concurrency 2
        e = ready_entry(env, "fan/0")
        assert e["item"] == "a" and e["itemIndex"] == 0 and e["dispatch"] == "consumer", e
        env = await c.done(env, "fan/1", {"value": "wrong"})  # ensure fails: retried
        e1 = ready_entry(env, "fan/1")
        assert e1["attempt"] == 2 and e1["previousFailure"]["violations"], e1
        env = await c.done(env, "fan/0", {"value": "a"})
        env = await c.done(env, "fan/1", {"value": "b"})
        env = await c.done(env, "fan/2", {"value": "c"})
        e = ready_entry(env, "sum")
        assert "a" in e["do"] and "c" in e["do"], e["do"]
        env = await c.done(env, "sum", {"value": "3 items"})
        assert env["status"] == "completed"


@test
async def engine_fanout_runs_configured_commands_or_falls_back():
    spec = FANOUT.replace("dispatch: consumer", "dispatch: engine")
    # no [agents.claude] command: the items go to the client, marked engine-fallback
    bare = Path(tempfile.mkdtemp(prefix="ws-", dir=HOME))
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": spec, "input": {"items": ["a", "b"]},
                                          "workspaceRoot": str(bare)})
        assert ready_ids(env) == ["fan/0", "fan/1"], ready_ids(env)
        assert all(e["dispatch"] == "engine-fallback" for e in env["ready"]), env["ready"]
        env = await c.done(env, "fan/0", {"value": "a"})
        env = await c.done(env, "fan/1", {"value": "b"})
        assert ready_ids(env) == ["sum"], ready_ids(env)
    # a command configured in the workspace's stratum.toml: the server runs every item itself
    ws = Path(tempfile.mkdtemp(prefix="ws-", dir=HOME))
    (ws / "agent.py").write_text(
        "import json, os, sys\n"
        "e = json.load(sys.stdin)\n"
        "open(os.environ['STRATUM_STEP_ID'].replace('/', '-') + '.done', 'w').write(e['do'])\n"
        "print(json.dumps({'output': {'value': e['item']}}))\n")
    (ws / "stratum.toml").write_text('[agents.claude]\ncommand = "python3 agent.py"\n')
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": spec, "input": {"items": ["a", "b", "c"]},
                                          "workspaceRoot": str(ws)})
        # the server runs them off the request path: poll until they are done
        deadline = time.monotonic() + TIMEOUT
        while env.get("running") and time.monotonic() < deadline:
            assert ready_ids(env) == [], env
            await asyncio.sleep(0.1)
            env = await c.ok("stratum_audit", {"runId": env["runId"]})
        assert ready_ids(env) == ["sum"], env
        assert sorted(p.name for p in ws.glob("*.done")) == ["fan-0.done", "fan-1.done", "fan-2.done"]
        assert (ws / "fan-2.done").read_text() == "inspect c"
        env = await c.done(env, "sum", {"value": "3 items"})
        assert env["status"] == "completed", env


@test
async def sub_flow():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": SUBFLOW, "input": {"name": "Ada"}})
        e = ready_entry(env, "wrap/digest")
        assert e["do"] == "digest hello Ada", e
        env = await c.done(env, "wrap/digest", {"value": "digested"})
        e = ready_entry(env, "finish")
        assert e["do"] == "publish digested", e
        env = await c.done(env, "finish", {"value": "published"})
        assert env["status"] == "completed"


@test
async def commit_and_revert():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": THREE_STEPS})
        run = env["runId"]
        env = await c.done(env, "first", {"value": "1"})
        r = await c.ok("stratum_commit", {"runId": run, "label": "after-first"})
        assert r["status"] == "committed" and r["flow_id"] == run and r["checkpoints"] == ["after-first"], r
        old = ready_entry(env, "second")["dispatchToken"]
        env = await c.done(env, "second", {"value": "2"})
        assert ready_ids(env) == ["third"]
        env = await c.ok("stratum_revert", {"flow_id": run, "label": "after-first"})
        assert env["reverted_to"] == "after-first" and ready_ids(env) == ["second"], env
        new = ready_entry(env, "second")["dispatchToken"]
        assert new != old
        await c.err("stratum_step_done", {"runId": run, "stepId": "second", "dispatchToken": old,
                                          "result": {"value": "x"}}, "stale_token")
        d = await c.err("stratum_revert", {"runId": run, "label": "nope"}, "checkpoint_not_found")
        assert "after-first" in d["message"], d
        assert "after-first" in d["available"], d
        await c.err("stratum_commit", {"runId": run, "label": "  "}, "invalid_label")
        env = await c.done(env, "second", {"value": "2b"})
        env = await c.done(env, "third", {"value": "3"})
        assert env["status"] == "completed"
        audit = await c.ok("stratum_audit", {"runId": run})
        assert "checkpoint_reverted" in [ev["type"] for ev in audit["events"]]


@test
async def budget_exhaustion():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": BUDGET})
        assert env["ledger"]["budget"], env["ledger"]
        env = await c.done(env, "work", {"output": {"value": "x"}, "usage": {"tokens": 500}})
        assert env["status"] == "budget_exhausted", env
        assert "budget" in env["failure"]["reason"], env["failure"]
        assert env["ledger"]["spent"]["tokens"] == 500, env["ledger"]


@test
async def usage_receipts():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": BUDGET})
        run = env["runId"]
        receipt = {"dispatchId": "sub-1", "stepId": "work", "source": "e2e",
                   "usage": {"tokens": 10}}
        out = await c.ok("stratum_usage_report", {"runId": run, "receipt": receipt})
        assert out["status"] == "ok" and out["seq"] == 1, out
        assert out["ledger"]["spent"]["tokens"] == 10, out
        again = await c.ok("stratum_usage_report", {"flow_id": run, "receipt": receipt})
        assert again["status"] == "duplicate" and again["seq"] == 1, again
        assert again["ledger"] == out["ledger"], (again, out)
        await c.err("stratum_usage_report", {"runId": run, "receipt": {
            "dispatchId": "x", "source": "e2e", "usage": {"usd": 1}}}, "invalid_receipt", "usdSource")
        await c.err("stratum_usage_report", {"runId": run, "receipt": {
            "dispatchId": "y", "stepId": "nope", "source": "e2e", "usage": {"tokens": 1}}},
            "invalid_step")
        # over the flow budget: the run ends budget_exhausted
        out = await c.ok("stratum_usage_report", {"runId": run, "receipt": {
            "dispatchId": "sub-2", "source": "e2e", "usage": {"tokens": 1000}}})
        assert out["budget"] == "flow_exhausted" and out["runStatus"] == "budget_exhausted", out
        audit = await c.ok("stratum_audit", {"runId": run})
        debits = [ev for ev in audit["events"] if ev["type"] == "usage_debit"]
        assert [d["detail"]["dispatchId"] for d in debits] == ["sub-1", "sub-2"], debits


@test
async def cancellation():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": TWO_STEPS})
        run, e = env["runId"], ready_entry(env, "first")
        out = await c.ok("stratum_flow_cancel", {"runId": run})
        assert out["status"] == "cancelled", out
        assert out["flowSettled"] and out["acknowledged"] and out["reason"] is None, out
        again = await c.ok("stratum_flow_cancel", {"runId": run})
        assert again["flowSettled"] and not again["acknowledged"], again
        assert again["reason"] == "already_cancelled", again
        await c.err("stratum_step_done", {"runId": run, "stepId": "first",
                                          "dispatchToken": e["dispatchToken"],
                                          "result": {"value": "late"}}, "flow_cancelled")
        await c.err("stratum_resume", {"runId": run}, "flow_cancelled")
        await c.err("stratum_commit", {"runId": run, "label": "x"}, "flow_cancelled")
        audit = await c.ok("stratum_audit", {"runId": run})
        assert audit["status"] == "cancelled"
        # cancelling a finished run leaves it as it is
        env = await c.ok("stratum_plan", {"spec": ITERATE})
        env = await c.done(env, "work", {"value": "ok"})
        out = await c.ok("stratum_flow_cancel", {"runId": env["runId"]})
        assert out["status"] == "completed", out
        assert not out["flowSettled"] and out["reason"] == "already_completed", out


@test
async def stale_tokens_change_nothing():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": TWO_STEPS})
        run, e = env["runId"], ready_entry(env, "first")
        before = await c.ok("stratum_audit", {"runId": run})
        d = await c.err("stratum_step_done", {"runId": run, "stepId": "first",
                                              "dispatchToken": "d9-bogus", "result": {"value": "x"}},
                        "stale_token")
        assert d["message"], d
        await c.err("stratum_step_done", {"runId": run, "stepId": "second",
                                          "dispatchToken": e["dispatchToken"],
                                          "result": {"value": "x"}}, "not_awaiting")
        after = await c.ok("stratum_audit", {"runId": run})
        assert after == before, "a refused report changed the run"
        env2 = await c.done(env, "first", {"value": "1"})
        # the same report again: the step is no longer awaiting
        await c.err("stratum_step_done", {"runId": run, "stepId": "first",
                                          "dispatchToken": e["dispatchToken"],
                                          "result": {"value": "1"}}, "not_awaiting")
        assert ready_ids(env2) == ["second"]


@test
async def malformed_requests_are_refused_clearly():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": TWO_STEPS})
        run, e = env["runId"], ready_entry(env, "first")
        base = {"runId": run, "stepId": "first", "dispatchToken": e["dispatchToken"],
                "result": {"value": "x"}}
        d = await c.err("stratum_step_done", {**base, "epoch": 0}, "invalid_request",
                        "unknown field `epoch`")
        assert "`runId` (or `flow_id`)" in d["message"] and "`dispatchToken`" in d["message"], d
        d = await c.err("stratum_step_done", {k: v for k, v in base.items() if k != "dispatchToken"},
                        "invalid_request", "missing required field `dispatchToken`")
        await c.err("stratum_step_done", {**base, "stepId": 7}, "invalid_request", "must be a string")
        await c.err("stratum_step_done", {**base, "flow_id": "other"}, "invalid_request",
                    "different values")
        await c.err("stratum_step_done", {**base, "result": "done"}, "invalid_report")
        await c.err("stratum_step_done", {**base, "result": {"output": {"value": "x"}, "extra": 1}},
                    "invalid_report", "unknown field `extra`")
        await c.err("stratum_step_done", {**base, "runId": "run-nosuch"}, "flow_not_found")
        await c.err("stratum_gate_resolve", {"runId": run, "stepId": "first", "gateToken": "g",
                                             "decision": "maybe"})
        await c.err("stratum_plan", {"spec": TWO_STEPS, "input": []}, "invalid_request",
                    "must be an object")
        await c.err("stratum_plan", {}, "invalid_request", "missing required field `spec`")
        await c.err("stratum_audit", {"runId": run, "verbose": True}, "invalid_request",
                    "accepted fields: `runId` (or `flow_id`)")
        d = await c.err("stratum_plan", {"spec": BAD_SPECS["bad-ref"]}, "spec_validation_failed")
        assert d["diagnostics"] and d["diagnostics"][0]["code"].startswith("S"), d
        d = await c.err("stratum_plan", {"spec": LINEAR, "input": {"topic": 5}},
                        "input_validation_failed")
        d = await c.err("stratum_plan", {"spec": LINEAR, "input": {"topic": "x"}, "flow": "nope"},
                        "unknown_flow")
        # none of that touched the run
        env2 = await c.done(env, "first", {"value": "ok"})
        assert ready_ids(env2) == ["second"]


@test
async def restart_mid_flow():
    home = HOME / "restart"
    crashed = False
    try:
        async with server(home) as c1:
            env = await c1.ok("stratum_plan", {"spec": THREE_STEPS})
            run = env["runId"]
            env = await c1.done(env, "first", {"value": "1"})
            token = ready_entry(env, "second")["dispatchToken"]
            os.kill(c1.pid, signal.SIGKILL)  # a crash: no clean shutdown
            crashed = True
            await c1.call("stratum_audit", {"runId": run})  # the server is gone
    except Exception:  # noqa: BLE001 — the client notices the dead server in its own way
        pass
    assert crashed
    async with server(home) as c2:
        env = await c2.ok("stratum_resume", {"runId": run})
        assert ready_ids(env) == ["second"], env
        assert ready_entry(env, "second")["dispatchToken"] == token  # tokens survive
        env = await c2.done(env, "second", {"value": "2"})
        env = await c2.done(env, "third", {"value": "3"})
        assert env["status"] == "completed" and env["output"] == {"value": "3"}
        audit = await c2.ok("stratum_audit", {"runId": run})
        assert "resumed" in [ev["type"] for ev in audit["events"]]


@test
async def two_servers_share_one_store():
    home = HOME / "shared"
    async with server(home) as a, server(home) as b:
        env = await a.ok("stratum_plan", {"spec": TWO_STEPS})
        run, token = env["runId"], ready_entry(env, "first")["dispatchToken"]
        env_b = await b.ok("stratum_resume", {"runId": run})
        assert ready_entry(env_b, "first")["dispatchToken"] == token
        env = await a.done(env, "first", {"value": "from a"})
        # b reports the same issuance: exactly one report wins
        await b.err("stratum_step_done", {"runId": run, "stepId": "first", "dispatchToken": token,
                                          "result": {"value": "from b"}}, "not_awaiting")
        env = await b.done(env, "second", {"value": "2"})
        assert env["status"] == "completed"
        # a second run on b does not disturb a
        other = await b.ok("stratum_plan", {"spec": ITERATE})
        assert other["runId"] != run


@test
async def socket_stdio_serves_a_flow():
    """Clients built on libuv (Node.js hosts, Python on uvloop) give the server a
    Unix socket pair for stdin and one for stdout instead of pipes: the same
    protocol works over them, and the server ends when the client hangs up."""
    def run():
        ins, outs = socket.socketpair(), socket.socketpair()
        env = dict(os.environ, STRATUM_HOME=str(HOME / "sockets"))
        p = subprocess.Popen([str(BINARY), "mcp"], stdin=ins[1], stdout=outs[1], env=env, cwd=str(REPO))
        ins[1].close()
        outs[1].close()
        to_server, from_server = ins[0], outs[0].makefile("rb")
        outs[0].settimeout(TIMEOUT)
        try:
            n = 0

            def request(method, params):
                nonlocal n
                n += 1
                to_server.sendall(json.dumps({"jsonrpc": "2.0", "id": n, "method": method,
                                              "params": params}).encode() + b"\n")
                msg = json.loads(from_server.readline())
                assert msg.get("id") == n and "result" in msg, msg
                return msg["result"]

            def tool(name, args):
                r = request("tools/call", {"name": name, "arguments": args})
                assert not r.get("isError"), r
                assert json.loads(r["content"][0]["text"]) == r["structuredContent"]
                return r["structuredContent"]

            init = request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                          "clientInfo": {"name": "e2e-sockets", "version": "0"}})
            assert init["serverInfo"]["name"] == "stratumc", init
            to_server.sendall(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            names = {t["name"] for t in request("tools/list", {})["tools"]}
            assert "stratum_step_done" in names, names
            env = tool("stratum_plan", {"spec": THREE_STEPS})
            for step in ["first", "second", "third"]:
                e = ready_entry(env, step)
                env = tool("stratum_step_done", {"runId": env["runId"], "stepId": step,
                                                 "dispatchToken": e["dispatchToken"],
                                                 "result": {"value": step}})
            assert env["status"] == "completed" and env["output"] == {"value": "third"}, env
            to_server.close()  # hang up: the server sees end of input and exits
            assert p.wait(TIMEOUT) == 0
        finally:
            to_server.close()
            from_server.close()
            outs[0].close()
            if p.poll() is None:
                p.kill()
                p.wait()
    await asyncio.to_thread(run)


@test
async def file_predicates_use_the_workspace_root():
    ws = Path(tempfile.mkdtemp(prefix="ws-", dir=HOME))
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": FILES, "workspaceRoot": str(ws)})
        env = await c.done(env, "write", {"value": "not written yet"})
        e = ready_entry(env, "write")
        assert e["previousFailure"]["violations"], e
        (ws / "notes.md").write_text("an owl\n")
        env = await c.done(env, "write", {"value": "written"})
        assert env["status"] == "completed", env
        await c.err("stratum_plan", {"spec": FILES, "workspaceRoot": str(ws / "missing")},
                    "invalid_request")


@contextlib.contextmanager
def fake_judge():
    """The research example's loopback OpenAI-style judge; yields its port."""
    port_file = Path(tempfile.mkdtemp(prefix="judge-", dir=HOME)) / "port"
    script = REPO / "examples" / "research-pipeline" / "judge" / "fake-openai-judge.py"
    proc = subprocess.Popen([sys.executable, str(script), "--port-file", str(port_file)],
                            stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not port_file.is_file():
            assert proc.poll() is None and time.monotonic() < deadline, "the fake judge did not start"
            time.sleep(0.05)
        yield int(port_file.read_text().strip())
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)


@test
async def artifacts_and_scored_verdicts_are_audited():
    ws = Path(tempfile.mkdtemp(prefix="ws-", dir=HOME))
    with fake_judge() as port:
        (ws / "stratum.toml").write_text(
            f'[judges.local]\nurl = "http://127.0.0.1:{port}/v1"\nmodel = "fake"\n')
        (ws / "out" / "figs").mkdir(parents=True)
        (ws / "out" / "figs" / "a.png").write_bytes(b"png")
        async with server() as c:
            env = await c.ok("stratum_plan", {"spec": JUDGED, "workspaceRoot": str(ws),
                                              "input": {"topic": "owls", "dir": "out"}})
            e = ready_entry(env, "write")
            assert e["do"] == "write out/notes.md and figures about owls", e["do"]
            # the scored ensure, rendered: rubric and input paths are templates
            assert e["ensure"] == [{"judged": {
                "rubric": "The notes on owls are complete.", "threshold": 0.7, "judge": "local",
                "inputs": ["out/notes.md"]}}], e["ensure"]
            # a weak draft: the judge scores it 0.3 < 0.7, the step is handed out again
            (ws / "out" / "notes.md").write_text("owls [weak]\n")
            env = await c.done(env, "write", {"output": {"value": "draft"}})
            v = ready_entry(env, "write")["previousFailure"]["violations"]
            assert [(x["kind"], x["score"], x["threshold"]) for x in v] == [("judged", 0.3, 0.7)], v
            notes = b"owls hoot at night\n"
            (ws / "out" / "notes.md").write_bytes(notes)
            env = await c.done(env, "write", {"output": {"value": "notes"}})
            assert env["status"] == "completed", env
            run = env["runId"]
            audit = await c.ok("stratum_audit", {"runId": run})
            judged = [ev["detail"] for ev in audit["events"] if ev["type"] == "judged"]
            assert [(j["score"], j["threshold"], j["holds"], j["judge"]) for j in judged] == [
                (0.3, 0.7, False, "local"), (0.9, 0.7, True, "local")], judged
            assert all(j["stakes"] == "scored" and j["reasons"] for j in judged), judged
            digest = {"path": "out/notes.md", "size": len(notes), "sha256": hashlib.sha256(notes).hexdigest()}
            assert judged[1]["inputs"] == [digest], judged[1]
            recorded = [ev for ev in audit["events"] if ev["type"] == "artifacts_recorded"]
            assert len(recorded) == 1 and recorded[0]["stepId"] == "write", recorded
            png = {"path": "out/figs/a.png", "size": 3, "sha256": hashlib.sha256(b"png").hexdigest()}
            manifest = recorded[0]["detail"]
            assert (manifest["attempt"], manifest["files"]) == (2, [png, digest]), manifest
            assert len(manifest["digest"]) == 64, manifest
            assert audit["manifests"] == [manifest], audit["manifests"]
            # retried from the step: handed out again with the same rendered ensure
            again = await c.ok("stratum_retry", {"runId": run, "from": "write"})
            assert ready_ids(again) == ["write"], again
            assert ready_entry(again, "write")["ensure"] == e["ensure"]


@test
async def validate_matches_check_on_the_conformance_corpus():
    corpus = REPO / "tests" / "conformance"
    out = subprocess.run([str(BINARY), "check", "--format", "json", str(corpus)],
                         capture_output=True, text=True, cwd=REPO)
    files = json.loads(out.stdout)["files"]
    assert len(files) > 100, len(files)
    async with server() as c:
        compared = 0
        for f in files:
            try:
                text = Path(f["path"]).read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # JSON strings cannot carry bytes that are not UTF-8
            compared += 1
            v = await c.ok("stratum_validate", {"spec": text})
            assert v["diagnostics"] == f["diagnostics"], f"{f['path']}: diagnostics differ"
            assert v["status"] == ("invalid" if f["errors"] else "valid"), f["path"]
            # the manual's shape: `valid`, and the errors as a list (the count as errorCount)
            assert v["valid"] == (f["errors"] == 0) and v["errorCount"] == f["errors"], f["path"]
            assert v["errors"] == [d for d in f["diagnostics"] if d["severity"] == "error"], f["path"]
        assert compared > 100, compared
        # and a few bad specs written here
        for name, text in BAD_SPECS.items():
            p = HOME / f"{name}.stratum.yaml"
            p.write_text(text)
            out = subprocess.run([str(BINARY), "check", "--format", "json", str(p)],
                                 capture_output=True, text=True)
            want = json.loads(out.stdout)["files"][0]["diagnostics"]
            v = await c.ok("stratum_validate", {"spec": text})
            assert v["status"] == "invalid" and want and v["diagnostics"] == want, name


@test
async def cost_matches_the_cli():
    async with server() as c:
        for spec, inputs in [(REPO / "examples" / "five-constructs.stratum.yaml",
                              {"topic": "t", "items": ["a", "b", "c"]}),
                             (REPO / "examples" / "iterate.stratum.yaml", None)]:
            args = [str(BINARY), "cost", "--format", "json", str(spec)]
            req = {"spec": spec.read_text()}
            if inputs is not None:
                args += ["--inputs", json.dumps(inputs)]
                req["input"] = inputs
            want = json.loads(subprocess.run(args, capture_output=True, text=True, cwd=REPO).stdout)
            got = await c.ok("stratum_cost", req)
            assert got == want, f"{spec.name}: {json.dumps(got)[:300]} != {json.dumps(want)[:300]}"
        await c.err("stratum_cost", {"spec": BAD_SPECS["bad-ref"]}, "spec_validation_failed")

@test
async def compile_speckit_matches_the_cli_and_plans():
    fixtures = REPO / "cli" / "tests" / "fixtures" / "speckit"
    async with server() as c:
        for name, flow in [("sequential", None), ("parallel", "build"), ("criteria", None)]:
            args = [str(BINARY), "compile-speckit", str(fixtures / name)]
            req = {"tasks_dir": str(fixtures / name)}
            if flow:
                args += ["--flow", flow]
                req["flow_name"] = flow
            want = subprocess.run(args, capture_output=True, text=True, cwd=REPO).stdout
            got = await c.ok("stratum_compile_speckit", req)
            assert got["status"] == "ok" and got["yaml"] == want, name
            assert got["flow_name"] == (flow or "tasks"), got["flow_name"]
            v = await c.ok("stratum_validate", {"spec": got["yaml"]})
            assert v["status"] == "valid" and v["warnings"] == 0, v
        # the steps list says what each task became
        got = await c.ok("stratum_compile_speckit", {"tasks_dir": str(fixtures / "parallel")})
        steps = {s["id"]: s for s in got["steps"]}
        assert steps["t_02_auth"]["parallel"] is True and steps["t_02_auth"]["after"] == ["t_01_schema"]
        assert steps["t_05_integrate"]["after"] == ["t_02_auth", "t_03_billing", "t_04_search"]
        assert 'file_contains("src/auth/middleware.ts", "verifyToken")' in steps["t_02_auth"]["ensures"]
        crit = await c.ok("stratum_compile_speckit", {"tasks_dir": str(fixtures / "criteria")})
        assert crit["steps"][0]["judgment"] == ["Error messages are user-friendly"], crit["steps"]
        # the generated spec runs: plan it and see the first task
        env = await c.ok("stratum_plan", {"spec": got["yaml"], "input": {}})
        assert ready_ids(env) == ["t_01_schema"], env
        # bad directories
        await c.err("stratum_compile_speckit", {"tasks_dir": str(fixtures / "nope")},
                    "directory_not_found", "no directory")
        await c.err("stratum_compile_speckit", {"tasks_dir": str(fixtures / "bad-empty")}, "no_tasks")
        bad = await c.err("stratum_compile_speckit", {"tasks_dir": str(fixtures / "bad-unparseable")},
                          "compile_error", "02-no-heading.md")
        assert len(bad["errors"]) == 2 and "03-bad-criteria.md" in bad["errors"][1]["message"], bad
        await c.err("stratum_compile_speckit", {"tasks_dir": str(fixtures / "sequential"), "flow": "x"},
                    "invalid_request", "accepted fields")


def agent_workspace():
    """A workspace whose stratum.toml gives `codex` a command agent (it reads its entry
    on stdin and answers with it) and `claude` one that hangs, writing its pid first."""
    ws = Path(tempfile.mkdtemp(prefix="agents-", dir=HOME))
    (ws / "echo.py").write_text(
        "import json, sys\n"
        "e = json.loads(sys.stdin.readline())\n"
        "print(json.dumps({'output': {'task': e['task'], 'contract': e['contract']}, 'usage': {'tokens': 3}}))\n")
    (ws / "stratum.toml").write_text(
        '[agents.codex]\ncommand = "python3 echo.py"\n\n'
        '[agents.claude]\ncommand = "echo $$ > agent.pid; exec sleep 60"\n')
    return ws


def pid_dead(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def wait_for_pid(ws):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        text = (ws / "agent.pid").read_text().strip() if (ws / "agent.pid").exists() else ""
        if text:
            return int(text)
        await asyncio.sleep(0.05)
    raise AssertionError("the agent never started")


@test
async def agent_run_foreground_background_poll_and_cancel():
    ws = agent_workspace()
    async with server() as c:
        # foreground: the call returns the agent's settled record
        r = await c.ok("stratum_agent_run", {"agent": "codex", "prompt": "summarise",
                                             "contract": {"type": "object"}, "cwd": str(ws)})
        assert r["status"] == "completed" and r["done"] is True, r
        assert r["output"] == {"task": "summarise", "contract": {"type": "object"}}, r
        assert r["usage"]["tokens"] == 3 and r["pid"] == r["pgid"], r
        # background: a durable runId, polled to its end
        r = await c.ok("stratum_agent_run", {"agent": "codex", "prompt": "again", "cwd": str(ws),
                                             "background": True})
        assert r["status"] == "running" and r["background"] is True, r
        assert r["runId"] in r["completionInstructions"], r
        deadline = time.monotonic() + TIMEOUT
        while True:
            p = await c.ok("stratum_agent_poll", {"runId": r["runId"]})
            if p["done"]:
                break
            assert time.monotonic() < deadline, p
            await asyncio.sleep(0.1)
        assert p["status"] == "completed" and p["output"]["task"] == "again", p
        # a hanging background run is cancelled; its process is gone when the call returns
        r = await c.ok("stratum_agent_run", {"agent": "claude", "prompt": "wait", "cwd": str(ws),
                                             "background": True})
        pid = await wait_for_pid(ws)
        x = await c.ok("stratum_cancel_agent_run", {"runId": r["runId"]})
        assert x["status"] == "cancelled" and x["cancelled"] is True, x
        assert x["teardown"] == "reaped" and x["teardownConfirmed"] is True, x
        assert pid_dead(pid), pid
        x = await c.ok("stratum_cancel_agent_run", {"runId": r["runId"]})
        assert x["cancelled"] is False and x["reason"] == "already_cancelled", x
        # a flow link needs a cancellationId; an unknown run is refused
        await c.err("stratum_agent_run", {"agent": "codex", "prompt": "p", "cwd": str(ws),
                                          "flow": {"runId": "run-x"}}, "invalid_request", "cancellationId")
        await c.err("stratum_agent_poll", {"runId": "agent-none"}, "not_found")


@test
async def agent_run_foreground_cancelled_by_its_cancellation_id():
    ws = agent_workspace()
    (ws / "agent.pid").unlink(missing_ok=True)
    async with server() as c:
        call = asyncio.ensure_future(c.ok("stratum_agent_run", {
            "agent": "claude", "prompt": "wait", "cwd": str(ws), "cancellationId": "e2e-cancel-1"}))
        pid = await wait_for_pid(ws)
        x = await c.ok("stratum_cancel_agent_run", {"runId": "e2e-cancel-1"})
        assert x["teardownConfirmed"] is True and x["cancellationId"] == "e2e-cancel-1", x
        assert pid_dead(pid)
        res = await asyncio.wait_for(call, TIMEOUT)
        assert res["status"] == "cancelled" and "cancelled" in res["failure"], res


BG_SPEC = """version: 1
contracts:
  V:
    x: integer
flows:
  entry: two
  two:
    input: {}
    output:
      from: "${b.output}"
      contract: V
    steps:
      - id: a
        agent: codex
        do: "first"
        out: V
      - id: b
        agent: codex
        after: [a]
        do: "second"
        out: V
"""


@test
async def flow_run_bg_is_polled_to_completion_and_cancel_bg_stops_one():
    ws = Path(tempfile.mkdtemp(prefix="bg-", dir=HOME))
    (ws / "agent.py").write_text(
        "import json, os, sys, time\n"
        "e = json.load(sys.stdin)\n"
        "time.sleep(float(open('sleep').read()) if os.path.exists('sleep') else 0)\n"
        "print(json.dumps({'output': {'x': 1 if e['id'] == 'a' else 2}}))\n")
    (ws / "stratum.toml").write_text('[agents.codex]\ncommand = "python3 agent.py"\n')
    async with server() as c:
        env = await c.ok("stratum_flow_run_bg", {"spec": BG_SPEC, "input": {}, "workspaceRoot": str(ws)})
        assert env["background"] is True and env["driverPid"] > 0, env
        run = env["runId"]
        deadline = time.monotonic() + TIMEOUT
        while True:
            p = await c.ok("stratum_flow_poll", {"runId": run})
            if p["status"] == "completed":
                break
            assert time.monotonic() < deadline, p
            await asyncio.sleep(0.1)
        assert p["output"] == {"x": 2} and p["progress"] == {"done": 2, "total": 2}, p
        assert "ledger" in p, p
        audit = await c.ok("stratum_audit", {"runId": run})
        results = [e for e in audit["events"] if e["type"] == "result"]
        assert sorted(e["stepId"] for e in results) == ["a", "b"], results
        # a slow one is cancelled: the flow settles, the driver's agent is killed
        (ws / "sleep").write_text("30")
        env = await c.ok("stratum_flow_run_bg", {"spec": BG_SPEC, "input": {}, "workspaceRoot": str(ws)})
        run = env["runId"]
        deadline = time.monotonic() + TIMEOUT
        while True:
            p = await c.ok("stratum_flow_poll", {"runId": run})
            if p["driver"] is not None:
                break
            assert time.monotonic() < deadline, p
            await asyncio.sleep(0.1)
        assert p["driver"]["lapsed"] is False and p["status"] == "ready", p
        await asyncio.sleep(0.5)
        x = await c.ok("stratum_flow_cancel_bg", {"runId": run})
        assert x["status"] == "cancelled" and x["flowSettled"] is True, x
        assert all(a["teardownConfirmed"] for a in x["agentRuns"]), x
        deadline = time.monotonic() + TIMEOUT
        while (await c.ok("stratum_flow_poll", {"runId": run}))["driver"] is not None:
            assert time.monotonic() < deadline, "the driver kept its lease after the cancel"
            await asyncio.sleep(0.1)



# ----- issue 16 §3: the manual's and reference §2.3's shapes ---------------------------

AUDITED = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${finish.output}", contract: R}
    max_rounds: 2
    carry:
      last:
        initial: "${build.output.value}"
    steps:
      - id: build
        do: "build"
        out: R
      - id: review
        after: [build]
        gate: {on_approve: null, on_revise: build, on_kill: null}
      - id: wrap
        after: [review]
        run: child
        with: {name: "${build.output.value}"}
      - id: finish
        after: [wrap]
        do: "finish ${wrap.output.value}"
        out: R
  child:
    input: {name: string}
    output: {from: "${digest.output}", contract: R}
    steps:
      - id: digest
        do: "digest ${input.name}"
        out: R
"""


@test
async def every_input_schema_marks_its_required_fields_without_combinators():
    async with server() as c:
        tools = (await c.s.list_tools()).tools
        assert len(tools) >= 13, [t.name for t in tools]
        for t in tools:
            schema = t.input_schema
            assert schema["type"] == "object" and schema.get("additionalProperties") is False, t.name
            for k in ("anyOf", "oneOf", "allOf"):
                assert k not in schema, f"{t.name}: {k}"
            props = schema["properties"]
            # every required name is a listed property in the current style (no snake_case alias)
            for r in schema.get("required", []):
                assert r in props, (t.name, r)
            for alias in ("flow_id", "step_id", "user_id", "outcome", "note", "inputs"):
                assert alias not in props, (t.name, alias)
            if "runId" in props:
                assert "runId" in schema["required"], t.name
        by = {t.name: t.input_schema for t in tools}
        assert set(by["stratum_step_done"]["required"]) == {"runId", "stepId", "dispatchToken", "result"}
        # the manual's gate form: no gateToken needed
        assert set(by["stratum_gate_resolve"]["required"]) == {"runId", "stepId", "decision"}
        assert by["stratum_commit"]["required"] == ["runId", "label"]


@test
async def audit_commit_tokenless_gate_and_telemetry_shapes():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": AUDITED})
        run = env["runId"]
        first = await c.ok("stratum_commit", {"flow_id": run, "label": "start"})
        assert (first["step_number"], first["current_step_id"]) == (1, "build"), first
        telemetry = {"durationMs": 900, "model": "claude-sonnet-4-5", "effort": "high"}
        env = await c.done(env, "build", {"output": {"value": "v1"}, "usage": {"tokens": 5},
                                          "telemetry": telemetry})
        audit = await c.ok("stratum_audit", {"runId": run})
        assert audit["steps"]["review"]["gateToken"] == env["gates"][0]["gateToken"], audit["steps"]
        # the manual's gate_resolve: flow_id, step_id, outcome, rationale, no token
        env = await c.ok("stratum_gate_resolve", {"flow_id": run, "step_id": "review",
                                                  "outcome": "revise", "rationale": "again"})
        env = await c.done(env, "build", {"value": "v2"})
        # a second tokenless decision: still exactly one round waiting
        env = await c.ok("stratum_gate_resolve", {"runId": run, "stepId": "review", "decision": "approve"})
        second = await c.ok("stratum_commit", {"runId": run, "label": "after-review"})
        assert (second["step_number"], second["current_step_id"]) == (3, "wrap"), second
        # nothing waits now: a decision without a token is refused clearly
        await c.err("stratum_gate_resolve", {"runId": run, "stepId": "review", "decision": "approve"},
                    "not_awaiting", "without `gateToken`")
        env = await c.done(env, "wrap/digest", {"value": "d"})
        env = await c.done(env, "finish", {"value": "end"})
        assert env["status"] == "completed", env
        a = await c.ok("stratum_audit", {"runId": run})
        assert a["flow_name"] == "main" and (a["steps_completed"], a["total_steps"]) == (4, 4), a
        assert {k: a["steps"]["build"][k] for k in ("status", "attempts", "output")} == {
            "status": "succeeded", "attempts": 1, "output": {"value": "v2"}}, a["steps"]["build"]
        assert a["flowSpent"]["tokens"] == 5 and a["carry"] == {"last": "v2"}, (a["flowSpent"], a["carry"])
        assert [(r["decision"], r["round"], r.get("tokenless", False)) for r in a["rounds"]] == [
            ("revise", 0, True), ("approve", 1, True)], a["rounds"]
        assert [(t["step_id"], t["type"], t["status"]) for t in a["trace"]] == [
            ("build", "do", "succeeded"), ("review", "gate", "revise"), ("build", "do", "succeeded"),
            ("review", "gate", "approve"), ("wrap/digest", "do", "succeeded"), ("wrap", "run", "succeeded"),
            ("finish", "do", "succeeded")], a["trace"]
        assert a["child_audits"][0]["stepId"] == "wrap", a["child_audits"]
        assert a["child_audits"][0]["steps"]["wrap/digest"]["output"] == {"value": "d"}
        assert a["total_duration_ms"] >= 0 and a["round"] == 1
        seen = [ev for ev in a["events"] if ev["type"] == "telemetry"]
        assert [(ev["stepId"], ev["detail"]) for ev in seen] == [
            ("build", {"attempt": 1, "telemetry": telemetry})], seen
        d = await c.err("stratum_revert", {"runId": run, "label": "nope"}, "checkpoint_not_found")
        assert d["available"] == ["start", "after-review"], d


@test
async def cancel_reaps_the_commands_the_server_runs():
    ws = Path(tempfile.mkdtemp(prefix="ws-", dir=HOME))
    (ws / "stratum.toml").write_text('[agents.claude]\ncommand = "echo $$ > pid; exec sleep 1008"\n')
    spec = FANOUT.replace("dispatch: consumer", "dispatch: engine")
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": spec, "input": {"items": ["a"]}, "workspaceRoot": str(ws)})
        assert [r["id"] for r in env.get("running", [])] == ["fan/0"], env
        deadline = time.monotonic() + TIMEOUT
        while not (ws / "pid").is_file() or not (ws / "pid").read_text().endswith("\n"):
            assert time.monotonic() < deadline, "the command never started"
            await asyncio.sleep(0.05)
        pid = int((ws / "pid").read_text())
        out = await c.ok("stratum_flow_cancel", {"runId": env["runId"]})
        assert out["flowSettled"] and out["acknowledged"] and out["reason"] is None, out
        assert out["agents"] == {"signalled": 1, "reaped": 1, "unreaped": 0}, out
        # reaped: the process is gone (a zombie would still have /proc/PID/stat)
        assert not Path(f"/proc/{pid}").exists(), f"sleep 1008 (pid {pid}) outlived the cancel"
        again = await c.ok("stratum_flow_cancel", {"runId": env["runId"]})
        assert again["reason"] == "already_cancelled" and again["agents"]["signalled"] == 0, again


# ----- language 1.1 part two through the SDK (X9 routes, X10 options, X11 scope, X12 exec) --

ROUTE = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${check.output}", contract: R}
    steps:
      - id: draft
        do: "draft"
        out: R
      - id: check
        after: [draft]
        do: "check ${draft.output.value}"
        out: R
        attempts: 1
        route:
          - {when: "result.value == 'again'", goto: draft, max: 1, note: "check said ${check.output.value}"}
"""

OPTIONS = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${write.output}", contract: R}
    max_rounds: 2
    steps:
      - id: plan
        do: "plan"
        out: R
      - id: scope
        after: [plan]
        gate:
          on_approve: null
          on_revise: plan
          on_kill: null
          options: [narrow, broad]
      - id: write
        after: [scope]
        do: "write the ${scope.choice} paper"
        out: R
"""

SCOPED = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${patch.output}", contract: R}
    steps:
      - id: patch
        do: "fix src/lib.rs"
        out: R
        attempts: 2
        scope: {files: ["src/**"]}
        ensure:
          - expr: "len(changes()) == 1"
"""

EXEC = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${write.output}", contract: R}
    steps:
      - id: write
        do: "write report.md"
        out: R
        ensure:
          - exec: {run: made, args: ["report.md"]}
"""


@test
async def x9_route_goto_feeds_previous_route_back_within_max():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": ROUTE})
        env = await c.done(env, "draft", {"value": "first"})
        env = await c.done(env, "check", {"value": "again"})
        e = ready_entry(env, "draft")
        assert e["previousRoute"] == {"from": "check", "note": "check said again",
                                      "output": {"value": "again"}}, e
        env = await c.done(env, "draft", {"value": "second"})
        assert "previousRoute" not in ready_entry(env, "check"), env
        # the route has fired its max of 1: the step fails, the run with it
        env = await c.done(env, "check", {"value": "again"})
        assert env["status"] == "failed" and "route_exhausted" in env["failure"]["reason"], env
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        back = [ev for ev in audit["events"] if ev["type"] == "routed_back"]
        assert [(b["detail"]["from"], b["detail"]["to"], b["detail"]["count"], b["detail"]["max"])
                for b in back] == [("check", "draft", 1, 1)], back
        # a result the route does not take: the run completes
        env = await c.ok("stratum_plan", {"spec": ROUTE})
        env = await c.done(env, "draft", {"value": "x"})
        env = await c.done(env, "check", {"value": "fine"})
        assert env["status"] == "completed" and env["output"] == {"value": "fine"}, env


@test
async def x10_gate_options_take_a_choice():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": OPTIONS})
        env = await c.done(env, "plan", {"value": "p"})
        g = env["gates"][0]
        assert g["stepId"] == "scope" and g["options"] == ["narrow", "broad"], g
        d = await c.err("stratum_gate_resolve", {"runId": env["runId"], "stepId": "scope",
                                                 "gateToken": g["gateToken"], "decision": "approve",
                                                 "choice": "wide"}, "invalid_choice")
        assert "narrow" in d["message"] and "broad" in d["message"], d
        env = await c.gate(env, "scope", "approve", choice="broad", rationale="go big")
        assert ready_entry(env, "write")["do"] == "write the broad paper", env
        env = await c.done(env, "write", {"value": "paper"})
        assert env["status"] == "completed", env
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        assert [(r["stepId"], r["decision"], r["choice"]) for r in audit["rounds"]] == [
            ("scope", "approve", "broad")], audit["rounds"]


def git_repo():
    """A scratch git repository with src/lib.rs and README.md committed."""
    root = Path(tempfile.mkdtemp(prefix="repo-", dir=HOME))
    (root / "src").mkdir()
    (root / "src" / "lib.rs").write_text("fn a() {}\n")
    (root / "README.md").write_text("readme\n")
    git = ["git", "-c", "user.email=t@example.org", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(git + args, cwd=root, check=True, capture_output=True)
    return root


@test
async def x11_scope_violation_is_refused_and_put_back():
    root = git_repo()
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": SCOPED, "workspaceRoot": str(root)})
        e = ready_entry(env, "patch")
        assert e["scope"]["files"] == ["src/**"], e
        (root / "src" / "lib.rs").write_text("fn a() { fixed }\n")
        (root / "README.md").write_text("changed\n")  # outside the scope
        env = await c.done(env, "patch", {"value": "x"})
        v = ready_entry(env, "patch")["previousFailure"]["violations"]
        assert [(x["kind"], x["path"]) for x in v] == [("scope_violation", "README.md")], v
        assert (root / "README.md").read_text() == "readme\n", "the stray edit was not put back"
        (root / "src" / "lib.rs").write_text("fn a() { fixed again }\n")
        env = await c.done(env, "patch", {"value": "y"})
        assert env["status"] == "completed", env
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        assert [f["path"] for p in audit["patches"] for f in p["files"]] == ["src/lib.rs"], audit["patches"]
        assert any(ev["type"] == "scope_restored" for ev in audit["events"])


@test
async def x12_exec_ensure_receipts_are_in_the_audit():
    ws = Path(tempfile.mkdtemp(prefix="ws-", dir=HOME))
    (ws / "stratum.toml").write_text('[commands.made]\nargv = ["test", "-f"]\n')
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": EXEC, "workspaceRoot": str(ws)})
        e = ready_entry(env, "write")
        assert e["ensure"] == [{"exec": {"run": "made", "args": ["report.md"], "expect_exit": 0}}], e
        env = await c.done(env, "write", {"value": "not yet"})
        v = ready_entry(env, "write")["previousFailure"]["violations"]
        assert v[0]["kind"] == "exec" and v[0]["receipt"]["exit"] == 1, v
        (ws / "report.md").write_text("the report\n")
        env = await c.done(env, "write", {"value": "written"})
        assert env["status"] == "completed", env
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        ran = [(ev["stepId"], ev["detail"]["argv"], ev["detail"]["exit"])
               for ev in audit["events"] if ev["type"] == "command_ran"]
        assert ran == [("write", ["test", "-f", "report.md"], 1), ("write", ["test", "-f", "report.md"], 0)], ran
        assert [(r["step"], r["command"], r["exit"]) for r in audit["receipts"]] == [
            ("write", "made", 1), ("write", "made", 0)], audit["receipts"]


SLOW_EXEC = EXEC.replace("run: made", "run: slow")


@test
async def x12_long_checks_answer_checking_and_the_verdict_comes_with_the_next_call():
    ws = Path(tempfile.mkdtemp(prefix="ws-", dir=HOME))
    # the check takes 2.5 s; the server waits 300 ms before answering `checking`
    (ws / "stratum.toml").write_text(
        '[commands.slow]\nargv = ["sh", "-c", "sleep 2.5; test -f \\"$0\\""]\ntimeout_ms = 60000\n'
        '[commands.stuck]\nargv = ["sh", "-c", "echo $$ > stuck.pid; exec sleep 600"]\ntimeout_ms = 900000\n')
    (ws / "report.md").write_text("the report\n")
    async with server(env={"STRATUM_CHECK_WAIT_MS": "300"}) as c:
        env = await c.ok("stratum_plan", {"spec": SLOW_EXEC, "workspaceRoot": str(ws)})
        other = await c.ok("stratum_plan", {"spec": LINEAR, "inputs": {"topic": "x"}})
        first = await c.done(env, "write", {"value": "written"})
        assert first["status"] == "checking" and first["stepId"] == "write", first
        # the server answers another run while the check runs ...
        moved = await c.done(other, "draft", {"title": "t", "words": 50})
        assert ready_entry(moved, "publish"), moved
        # ... (the check is still running after it): a call that would change the
        # checked run is answered `checking` too, and reads go through
        again = await c.ok("stratum_resume", {"runId": env["runId"]})
        assert again["status"] == "checking", again
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        assert not any(ev["type"] == "command_ran" for ev in audit["events"]), "nothing recorded yet"
        for _ in range(120):
            await asyncio.sleep(0.25)
            after = await c.ok("stratum_resume", {"runId": env["runId"]})
            if after["status"] != "checking":
                break
        assert after["status"] == "completed", after
        # the verdict of the report, once, under `checked`
        assert after["checked"]["status"] == "completed", after
        assert "checked" not in await c.ok("stratum_resume", {"runId": env["runId"]})
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        assert [(r["command"], r["exit"]) for r in audit["receipts"]] == [("slow", 0)], audit["receipts"]

        # a cancel stops a check that would never end: its command is killed, nothing of the report recorded
        stuck = SLOW_EXEC.replace("run: slow", "run: stuck")
        env = await c.ok("stratum_plan", {"spec": stuck, "workspaceRoot": str(ws)})
        first = await c.done(env, "write", {"value": "written"})
        assert first["status"] == "checking", first
        for _ in range(200):
            if (ws / "stuck.pid").exists() and (ws / "stuck.pid").read_text().strip():
                break
            await asyncio.sleep(0.05)
        pid = int((ws / "stuck.pid").read_text())
        cancelled = await c.ok("stratum_flow_cancel", {"runId": env["runId"]})
        assert cancelled["status"] == "cancelled", cancelled
        gone = False
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                gone = True
                break
            await asyncio.sleep(0.1)
        assert gone, f"the check's command {pid} still runs after the cancel"
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        assert not any(ev["type"] in ("command_ran", "result") for ev in audit["events"]), audit["events"]


ENGINE_SLOW_EXEC = """version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {items: "string[]"}
    output: {from: "${sum.output}", contract: R}
    steps:
      - id: fan
        fanout:
          over: "${input.items}"
          concurrency: 1
          isolation: none
          require: all
          merge: sequential
          dispatch: engine
          steps:
            - do: "write report.md for ${item}"
              out: R
              ensure:
                - exec: {run: slow, args: ["report.md"]}
      - id: sum
        after: [fan]
        do: "summarise"
        out: R
"""


@test
async def x12_an_engine_workers_long_check_does_not_hold_the_server():
    ws = Path(tempfile.mkdtemp(prefix="ws-", dir=HOME))
    (ws / "stratum.toml").write_text(
        '[agents.claude]\ncommand = "echo \'{\\"output\\": {\\"value\\": \\"v\\"}}\'"\n'
        '[commands.slow]\nargv = ["sh", "-c", "touch checking.started; sleep 2.5; test -f \\"$0\\""]\ntimeout_ms = 60000\n')
    (ws / "report.md").write_text("the report\n")
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": ENGINE_SLOW_EXEC, "input": {"items": ["one"]},
                                          "workspaceRoot": str(ws)})
        assert env.get("running"), env
        for _ in range(200):
            if (ws / "checking.started").exists():
                break
            await asyncio.sleep(0.05)
        assert (ws / "checking.started").exists(), "the worker's check never started"
        # while the worker's check runs, the server answers: a new run, a read of this one
        other = await c.ok("stratum_plan", {"spec": LINEAR, "inputs": {"topic": "x"}})
        assert ready_entry(other, "draft"), other
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        assert not any(ev["type"] == "command_ran" for ev in audit["events"]), "the check had ended"
        for _ in range(120):
            await asyncio.sleep(0.25)
            after = await c.ok("stratum_resume", {"runId": env["runId"]})
            # `checking` while the worker's check runs; then the client's step
            if any(e["id"] == "sum" for e in after.get("ready", [])):
                break
        audit = await c.ok("stratum_audit", {"runId": env["runId"]})
        assert any(e["id"] == "sum" for e in after.get("ready", [])), [e["type"] for e in audit["events"]]
        assert [(r["command"], r["exit"]) for r in audit["receipts"]] == [("slow", 0)], audit["receipts"]


@test
async def audit_counts_iterate_cycles():
    async with server() as c:
        env = await c.ok("stratum_plan", {"spec": ITERATE})
        env = await c.done(env, "work", {"value": "draft 1"})
        env = await c.done(env, "work", {"value": "ok"})
        assert env["status"] == "completed", env
        a = await c.ok("stratum_audit", {"runId": env["runId"]})
        work = a["steps"]["work"]
        # one cycle asked for another try; both reports were attempts
        assert (work["status"], work["attempts"], work["iterations"]) == ("succeeded", 2, 1), work
        assert [(t["step_id"], t["status"]) for t in a["trace"]] == [
            ("work", "failed"), ("work", "succeeded")], a["trace"]


# ----- STRAT-GUARD (issue 17) ----------------------------------------------------------


def guard_workspace(toml):
    """A git repository with one commit and `toml` as its stratum.toml; (root, sha)."""
    root = Path(tempfile.mkdtemp(prefix="guard-ws-", dir=HOME))
    (root / "stratum.toml").write_text(toml)
    (root / "NOTES.md").write_text("notes\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    for args in (["init", "-q"], ["add", "NOTES.md"], ["commit", "-q", "-m", "first"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env)
    sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                         capture_output=True, text=True).stdout.strip()
    return root, sha


def feature_tracker(resource, root, sha, slow=False):
    """The README's worked example: planned -> in_progress -> review -> done."""
    start = ([{"id": "slow", "type": "deterministic", "statement": "command_exit_zero(['sleep', '1'])"}]
             if slow else [])
    return {
        "resourceId": resource,
        "graph": {"planned": ["in_progress"], "in_progress": ["review"], "review": ["done", "in_progress"]},
        "edgePredicates": {
            "planned->in_progress": start,
            "in_progress->review": [{"id": "committed", "type": "deterministic",
                                     "statement": f"git_commit_exists('{sha}')"}],
            "review->done": [{"id": "tests", "type": "deterministic", "statement": "command_exit_zero(['true'])"}],
        },
        "initial": "planned",
        "terminal": ["done"],
        "stakes": {"review->done": "paranoid"},
        "workspaceRoot": str(root),
    }


GUARD_TOML = '[commands.ok]\nargv = ["true"]\n[commands.slow]\nargv = ["sleep", "1"]\n'


@test
async def guard_register_transition_history():
    root, sha = guard_workspace(GUARD_TOML)
    async with server() as c:
        policy = feature_tracker("e2e:feat-1", root, sha)
        reg = await c.ok("stratum_guard_register", policy)
        assert reg["status"] == "registered" and reg["checksum"].startswith("sha256:"), reg
        again = await c.ok("stratum_guard_register", policy)
        assert again["status"] == "unchanged" and again["guard_id"] == reg["guard_id"], again
        changed = dict(policy, stakes={"review->done": "paranoid", "planned->in_progress": "cheap"})
        await c.err("stratum_guard_register", changed, "policy_exists", "stratum_guard_upgrade")
        bad = dict(policy, resourceId="e2e:bad", edgePredicates={
            "review->done": [{"id": "x", "type": "deterministic", "statement": "command_exit_zero(['rm', '-rf', '/'])"}]})
        await c.err("stratum_guard_register", bad, "undeclared_command", "[commands.NAME] argv")
        t = lambda a, b, **kw: c.ok("stratum_guard_transition", dict(
            {"resource_id": "e2e:feat-1", "from_state": a, "to_state": b, "resolved_by": "agent"}, **kw))
        illegal = await t("planned", "done")
        assert illegal["status"] == "refused" and illegal["refusal"]["code"] == "illegal_edge", illegal
        first = await t("planned", "in_progress", idempotency_key="k1")
        assert first["status"] == "applied" and first["current_state"] == "in_progress", first
        replay = await t("planned", "in_progress", idempotency_key="k1")
        assert replay["status"] == "replayed" and replay["ledger_ref"] == first["ledger_ref"], replay
        review = await t("in_progress", "review")
        assert review["status"] == "applied", review
        ev = review["verdict"]["predicates"][0]["evidence"]
        assert ev == {"kind": "commit", "sha": sha, "exists": True}, ev
        done = await t("review", "done")
        assert done["status"] == "applied" and done["verdict"]["predicates"][0]["evidence"]["exit"] == 0, done
        h = await c.ok("stratum_guard_history", {"resourceId": "e2e:feat-1"})
        assert h["current_state"] == "done" and h["graph_version"] == 1, h
        kinds = [(e["kind"], e["status"]) for e in h["ledger"]]
        assert kinds == [("registered", "applied"), ("transition", "refused"), ("transition", "applied"),
                         ("transition", "applied"), ("transition", "applied")], kinds
        assert all(e["prev"] == p["hash"] for p, e in zip(h["ledger"], h["ledger"][1:])), h["ledger"]
        # the CLI re-walks the same chain
        out = subprocess.run([str(BINARY), "guard", "verify", "e2e:feat-1"], capture_output=True, text=True,
                             env=dict(os.environ, STRATUM_HOME=str(HOME / "store")))
        assert out.returncode == 0 and "ok (5 entries)" in out.stdout, out


@test
async def guard_upgrade_is_additive_only():
    root, sha = guard_workspace(GUARD_TOML)
    async with server() as c:
        policy = feature_tracker("e2e:feat-up", root, sha)
        await c.ok("stratum_guard_register", policy)
        base = {"resourceId": "e2e:feat-up", "rationale": "add blocked",
                "newGraph": dict(policy["graph"], in_progress=["review", "blocked"], blocked=[]),
                "newEdgePredicates": policy["edgePredicates"], "newTerminal": ["done"], "newStakes": policy["stakes"]}
        up = await c.ok("stratum_guard_upgrade", base)
        assert up["status"] == "migrated" and up["graph_version"] == 2, up
        same = await c.ok("stratum_guard_upgrade", base)
        assert same["status"] == "unchanged" and "ledger_ref" not in same, same
        removed = dict(base, newGraph=dict(base["newGraph"], review=["done"]))
        await c.err("stratum_guard_upgrade", removed, "incompatible_policy_upgrade", "edge `review->in_progress` would be removed")
        loosened = dict(base, newStakes={})
        await c.err("stratum_guard_upgrade", loosened, "incompatible_policy_upgrade", "stakes of existing edge")


@test
async def guard_racing_transitions_from_two_servers():
    root, sha = guard_workspace(GUARD_TOML)
    async with server() as a, server() as b:
        await a.ok("stratum_guard_register", feature_tracker("e2e:race", root, sha, slow=True))
        args = {"resourceId": "e2e:race", "fromState": "planned", "toState": "in_progress", "resolvedBy": "agent"}
        ra, rb = await asyncio.gather(a.ok("stratum_guard_transition", args), b.ok("stratum_guard_transition", args))
        statuses = sorted([ra["status"], rb["status"]])
        assert statuses == ["applied", "refused"], (ra, rb)
        loser = ra if ra["status"] == "refused" else rb
        assert loser["refusal"]["code"] in ("stale", "wrong_state"), loser
        h = await b.ok("stratum_guard_history", {"resourceId": "e2e:race"})
        assert h["current_state"] == "in_progress" and len(h["ledger"]) == 3, h


@test
async def guard_signed_override_needs_the_installed_trust_root():
    root, sha = guard_workspace(GUARD_TOML)
    keys = Path(tempfile.mkdtemp(prefix="guard-keys-", dir=HOME))
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(keys / "alice")], check=True)
    prefix = Path(tempfile.mkdtemp(prefix="guard-prefix-", dir=HOME))
    (prefix / "bin").mkdir()
    (prefix / "share" / "stratumc").mkdir(parents=True)
    shutil.copy2(BINARY, prefix / "bin" / "stratumc")
    (prefix / "share" / "stratumc" / "guard-signers.allowed").write_text(
        "alice@example.com " + (keys / "alice.pub").read_text())
    store = HOME / "guard-signed-store"
    async with server(home=store) as plain:
        await plain.ok("stratum_guard_register", feature_tracker("e2e:signed", root, sha))
        req = {"resourceId": "e2e:signed", "fromState": "planned", "toState": "in_progress",
               "resolvedBy": "human", "rationale": "hotfix", "authorization": "x"}
        # the binary under test has no trust root: signed operations are unavailable
        await plain.err("stratum_guard_override", req, "signatures_unavailable")
    installed = prefix / "bin" / "stratumc"
    env = dict(os.environ, STRATUM_HOME=str(store))
    ask = json.dumps({"kind": "override", "resource_id": "e2e:signed", "from_state": "planned",
                      "to_state": "in_progress", "rationale": "hotfix"})
    payload = subprocess.run([str(installed), "guard", "authorize"], input=ask, capture_output=True,
                             text=True, env=env, check=True).stdout
    (keys / "payload").write_text(payload)
    subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "stratum-guard-override", "-f", str(keys / "alice"),
                    str(keys / "payload")], check=True, capture_output=True)
    sig = (keys / "payload.sig").read_text()
    params = StdioServerParameters(command=str(installed), args=["mcp"], env=env, cwd=str(REPO))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await asyncio.wait_for(session.initialize(), TIMEOUT)
            c = Client(session, "/dev/null")
            done = await c.ok("stratum_guard_override", dict(req, authorization=sig))
            assert done["current_state"] == "in_progress", done
            assert done["authorized_by"]["principal"] == "alice@example.com", done
            await c.err("stratum_guard_override", dict(req, authorization=sig), "invalid_request")
            h = await c.ok("stratum_guard_history", {"resource_id": "e2e:signed"})
            assert h["ledger"][-1]["kind"] == "deviation", h


# ----- main --------------------------------------------------------------------------


async def main():
    assert BINARY.is_file(), f"no binary at {BINARY}"
    passed, failed = 0, []
    only = os.environ.get("STRATUM_E2E_ONLY")
    for t in TESTS:
        if only and only not in t.__name__:
            continue
        started = time.perf_counter()
        try:
            await asyncio.wait_for(t(), 300)
            passed += 1
            print(f"ok   {t.__name__} ({(time.perf_counter() - started) * 1000:.0f} ms)")
        except BaseException as e:  # noqa: BLE001 — report every failure, then exit 1
            if isinstance(e, KeyboardInterrupt):
                raise
            failed.append(t.__name__)
            print(f"FAIL {t.__name__}: {e!r}")
            traceback.print_exc()
    print(f"e2e: {passed} passed, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        code = asyncio.run(main())
    finally:
        shutil.rmtree(HOME, ignore_errors=True)
    sys.exit(code)
