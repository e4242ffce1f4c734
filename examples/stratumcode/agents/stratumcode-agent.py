#!/usr/bin/env python3
"""The scripted agent of the StratumCode example: one command for every state.

    stratumc run stratumcode.stratum.yaml --inputs @inputs.json \\
        --agent "python3 agents/stratumcode-agent.py"

It reads one ready entry (JSON) on stdin, with the repository under repair
as its working directory (the workspace root, or the item's worktree: the
entry's `cwd`), dispatches on the state named by the entry's `id`
(`analyze`, `investigation/pass`, `design`, `plan`, `implement/N`,
`validate`), makes REAL edits where the state is meant to edit, and prints
`{"output": {...}}` or `{"failure": "..."}`.

The repository is the small Python project of ../project (textstats:
`count_words` should ignore case and punctuation, three unit tests fail).

  analyze             the task contract; reads, never writes
  investigation/pass  reads textstats/wordcount.py and the tests; the first
                      pass asks the user a question with three candidate
                      answers (`pending_decision`), later passes are ready
  design              the approach, following the user's choice (the task
                      carries it); `gaps` names a missing code fact when asked
  plan                two plan steps, each with the files it may write:
                      IS1 modifies textstats/wordcount.py, IS2 creates
                      CHANGELOG.md
  implement/N         applies plan step N: real edits of its files only
  validate            reads the tree and reports; the runtime runs the tests

Every dispatch appends one JSON line to $STRATUMCODE_AGENT_LOG (default
<workspace>/../agent-log.jsonl, outside the repository, so the log is never
a change of the tree) before it does anything:
  {"id", "attempt", "previousFailure"?, "previousRevise"?, "previousRoute"?}

Behaviour knobs, read from $STRATUMCODE_AGENT_CONFIG (a JSON file; default:
every state behaves):
  {"implement": {"stray_edit_first": true,   # IS1's first attempt also edits
                                             #   README.md (out of its scope)
                 "partial_fix_first": true,  # IS1 folds case but keeps
                                             #   punctuation until the entry
                                             #   carries previousRoute
                 "fail_is2": true},          # IS2 reports a failure (writes
                                             #   nothing)
   "design":    {"gap": "always" | "once"},  # report a code-fact gap
   "plan":      {"refuse_when_routed": true}}# fail when re-entered by a route
Standard library only.
"""
import json
import os
import re
import sys


class Failure(Exception):
    """The state cannot do its work; reported as {"failure": ...}."""


def read_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write_text(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def log_dispatch(path, entry):
    rec = {"id": entry.get("id"), "attempt": entry.get("attempt")}
    for key in ("previousFailure", "previousRevise", "previousRoute"):
        if entry.get(key) is not None:
            rec[key] = entry[key]
    line = (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write with O_APPEND: lines never interleave
    finally:
        os.close(fd)


def earlier_dispatches(path, entry_id):
    """How many dispatches of this id the log holds (this one excluded)."""
    n = 0
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    n += json.loads(line).get("id") == entry_id
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    return n


def task_field(task, name):
    """The value of a `name: value` line of the rendered task, or None."""
    m = re.search(r"(?m)^[ \t]*" + re.escape(name) + r":[ \t]*(.+?)[ \t]*$", task or "")
    return m.group(1) if m else None


# --------------------------------------------------------------------------
# the states

QUESTION = "Which words should count as equal?"
OPTIONS = [
    "fold case and strip surrounding punctuation",
    "fold case only",
    "keep words exactly as written",
]


def analyze(ctx):
    tests = read_text("tests/test_wordcount.py")
    criteria = re.findall(r"def (test_\w+)", tests)
    return {
        "intent": {"type": "bugfix",
                   "summary": "count_words must ignore case and surrounding punctuation"},
        "execution_mode": "implement",
        "acceptance_criteria": [{"id": "AC%d" % (i + 1), "text": name}
                                for i, name in enumerate(criteria)],
        "clues": [{"kind": "file", "value": "textstats/wordcount.py"}],
    }


def investigate(ctx):
    source = read_text("textstats/wordcount.py")
    observations = [{
        "id": "OBS1", "path": "textstats/wordcount.py",
        "summary": "count_words splits on whitespace and counts words verbatim",
        "excerpt": next((l.strip() for l in source.splitlines() if "split" in l), ""),
    }]
    revised = ctx.entry.get("previousRevise")
    asked = ctx.earlier > 0 or revised is not None
    if not asked:
        return {"summary": "the failing tests need a decision on word equality",
                "observations": observations, "next_step": "continue_investigation",
                "pending_decision": {"question": QUESTION, "options": OPTIONS}}
    decision = (revised or {}).get("choice") or (revised or {}).get("note")
    return {"summary": "root cause: no case folding, no punctuation stripping",
            "observations": observations, "next_step": "write_code",
            "pending_decision": None, "decision": decision}


def design(ctx):
    gap = ctx.knobs.get("gap")
    if gap == "always" or (gap == "once" and ctx.entry.get("previousRoute") is None):
        return {"summary": "cannot design yet", "approach": "",
                "gaps": [{"type": "code_fact",
                          "question": "where else is count_words called?"}]}
    choice = task_field(ctx.task, "choice") or OPTIONS[0]
    return {"summary": "normalize each word before counting (%s)" % choice,
            "approach": choice, "gaps": []}


def plan(ctx):
    if ctx.knobs.get("refuse_when_routed") and ctx.entry.get("previousRoute") is not None:
        raise Failure("plan: asked to plan again after a rollback; stopping here")
    return {"steps": [
        {"id": "IS1", "mode": "modify", "files": ["textstats/wordcount.py"],
         "action": "normalize words (casefold, strip punctuation) in count_words"},
        {"id": "IS2", "mode": "create", "files": ["CHANGELOG.md"],
         "action": "record the fix in CHANGELOG.md"},
    ]}


FULL_FIX = '''"""Word counts of a text."""

import string

_PUNCTUATION = string.punctuation + "\\u201c\\u201d\\u2018\\u2019"


def normalize(word):
    """A word as counted: case-folded, surrounding punctuation removed."""
    return word.strip(_PUNCTUATION).casefold()


def count_words(text):
    """How often each word occurs in `text`, as a dict (case and surrounding
    punctuation ignored)."""
    counts = {}
    for raw in text.split():
        word = normalize(raw)
        if word:
            counts[word] = counts.get(word, 0) + 1
    return counts


def top_words(text, n):
    """The `n` most frequent words, most frequent first (ties: alphabetical)."""
    counts = count_words(text)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [word for word, _ in ranked[:n]]
'''

PARTIAL_FIX = FULL_FIX.replace(
    "return word.strip(_PUNCTUATION).casefold()", "return word.casefold()")


def implement(ctx):
    step = ctx.entry.get("item") or {}
    sid = step.get("id")
    if sid == "IS1":
        partial = (ctx.knobs.get("partial_fix_first")
                   and ctx.entry.get("previousRoute") is None)
        wanted = PARTIAL_FIX if partial else FULL_FIX
        if read_text("textstats/wordcount.py") == wanted:
            # a retry after a violation: the in-scope work is still there
            return {"step": sid, "status": "already_satisfied",
                    "files": ["textstats/wordcount.py"],
                    "summary": "count_words already normalizes words"}
        write_text("textstats/wordcount.py", wanted)
        if ctx.knobs.get("stray_edit_first") and ctx.earlier == 0:
            readme = read_text("README.md")
            write_text("README.md", readme + "\nFixed by the agent.\n")
        return {"step": sid, "status": "applied",
                "files": ["textstats/wordcount.py"],
                "summary": "count_words normalizes words" + (" (case only)" if partial else "")}
    if sid == "IS2":
        if ctx.knobs.get("fail_is2"):
            raise Failure("IS2: the changelog format could not be confirmed")
        entry = "# Changelog\n\n- count_words ignores case and surrounding punctuation.\n"
        if os.path.exists("CHANGELOG.md") and read_text("CHANGELOG.md") == entry:
            return {"step": sid, "status": "already_satisfied", "files": ["CHANGELOG.md"],
                    "summary": "the changelog entry is there"}
        write_text("CHANGELOG.md", entry)
        return {"step": sid, "status": "applied", "files": ["CHANGELOG.md"],
                "summary": "changelog entry"}
    raise Failure("unknown plan step %r" % sid)


def validate(ctx):
    return {"summary": "the runtime ran the project's tests (see the receipts)",
            "verdict": "passed"}


HANDLERS = {
    "analyze": analyze,
    "pass": investigate,
    "design": design,
    "plan": plan,
    "implement": implement,
    "validate": validate,
}


def state_of(entry_id):
    """The state an id names: `investigation/pass` -> pass, `implement/0` ->
    implement, `design` -> design."""
    parts = (entry_id or "").split("/")
    if len(parts) > 1 and parts[-1].isdigit():
        return parts[-2]
    return parts[-1]


class Ctx:
    def __init__(self, entry, config, earlier):
        self.entry = entry
        self.task = entry.get("do", "")
        self.state = state_of(entry.get("id"))
        self.knobs = config.get(self.state, {}) or {}
        self.earlier = earlier


def main():
    try:
        entry = json.load(sys.stdin)
    except ValueError as e:
        print(json.dumps({"failure": "the ready entry is not JSON: %s" % e}))
        return 0
    if entry.get("cwd"):
        os.chdir(entry["cwd"])
    ws = os.getcwd()
    log = os.environ.get("STRATUMCODE_AGENT_LOG") or os.path.join(
        os.path.dirname(ws), "agent-log.jsonl")
    config_path = os.environ.get("STRATUMCODE_AGENT_CONFIG")
    config = (read_json(config_path, {}) if config_path else {}) or {}
    earlier = earlier_dispatches(log, entry.get("id"))
    log_dispatch(log, entry)
    ctx = Ctx(entry, config, earlier)
    try:
        if ctx.state not in HANDLERS:
            raise Failure("unknown state %r (expected one of %s)"
                          % (ctx.state, ", ".join(HANDLERS)))
        output = HANDLERS[ctx.state](ctx)
    except Failure as e:
        print(json.dumps({"failure": str(e)}))
        return 0
    print(json.dumps({"output": output}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
