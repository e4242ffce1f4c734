#!/usr/bin/env python3
"""Scripted agent for examples/code-review.stratum.yaml.

- `plan`: one FileTask per file of the change set (read from the task text,
  where the spec interpolates ${input.files}).
- `review_files/<k>` stage 0 (codex): findings for `item.path`; stage 1
  (claude): re-checks the findings interpolated into its task text
  (${prev.findings}) and drops the low-severity ones as false positives, so
  `len(result.findings) <= len(prev.findings)` holds.
- `audit` (only with depth "thorough"): the workspace already holds
  build/audit.md with a "## Summary" heading.
- `report`: merges the reviews from its task text; nothing is high or
  critical, so the verdict is approve with blocking 0. Its judged ensure needs
  a judge (examples/agents/fake-judge.py in scripts/run-examples.sh).
"""
import json
import sys

entry = json.load(sys.stdin)
step = entry["id"]
text = entry.get("do", "")
decoder = json.JSONDecoder()


def reply(output, tokens=400):
    json.dump({"output": output, "usage": {"tokens": tokens, "usd": 0.004}}, sys.stdout)
    sys.exit(0)


def json_after(marker, default):
    """The JSON value that follows `marker` in the task text."""
    at = text.find(marker)
    if at < 0:
        return default
    try:
        value, _ = decoder.raw_decode(text[at + len(marker):].lstrip())
        return value
    except ValueError:
        return default


FOCUS = {"lib.rs": "logic", "main.rs": "security"}
FINDINGS = {
    "src/lib.rs": [
        {"line": 12, "severity": "low", "message": "unused import"},
        {"line": 48, "severity": "medium", "message": "off-by-one in the chunk loop"},
    ],
    "src/main.rs": [
        {"line": 7, "severity": "medium", "message": "the exit code ignores a failed flush"},
    ],
}

if step == "plan":
    files = json_after("change set ", [])
    reply({"files": [{"path": p, "focus": FOCUS.get(p.split("/")[-1], "performance")} for p in files]})

if step.startswith("review_files/"):
    path = entry["item"]["path"]
    if entry["stage"] == 0:
        reply({"path": path, "findings": FINDINGS.get(path, [])})
    prev = json_after("these findings in %s: " % path, FINDINGS.get(path, []))
    kept = [f for f in prev if f.get("severity") != "low"]
    reply({"path": path, "findings": kept})

if step == "audit":
    reply({"done": True, "report": "build/audit.md"})

if step == "report":
    reviews = json_after("Merge the per-file reviews ", [])
    if isinstance(reviews, dict):
        reviews = [reviews]
    findings = [
        (r.get("path"), f)
        for r in reviews if isinstance(r, dict)
        for f in r.get("findings", [])
    ]
    blocking = [(p, f) for p, f in findings if f.get("severity") in ("high", "critical")]
    reopen = sorted({p for p, _ in blocking})
    summary = "%d finding(s) in %d file(s); %d blocking." % (len(findings), len(reviews), len(blocking))
    if blocking:
        summary += " Blocking: " + "; ".join("%s:%d %s" % (p, f["line"], f["message"]) for p, f in blocking)
    reply({
        "summary": summary,
        "verdict": "request_changes" if blocking else "approve",
        "blocking": len(blocking),
        "reopen": [{"path": p, "focus": "logic"} for p in reopen],
    })

json.dump({"failure": "unexpected step " + step}, sys.stdout)
