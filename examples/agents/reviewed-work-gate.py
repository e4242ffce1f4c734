#!/usr/bin/env python3
"""Scripted agent for examples/reviewed-work-gate.stratum.yaml.

`work` rates its first attempt 0.6, which breaks `result.quality_score >= 0.8`,
and retries with 0.9; the judged ensure goes to the judge configured in the
workspace's stratum.toml (examples/agents/fake-judge.py in scripts/run-examples.sh).
A revise from the `review` gate sends `work` back with the gate's note in
`previousFailure`; the agent then says so in its summary.
"""
import json
import sys

entry = json.load(sys.stdin)
if entry["id"] != "work":
    json.dump({"failure": "unexpected step " + entry["id"]}, sys.stdout)
    sys.exit(0)

previous = entry.get("previousFailure") or {}
if entry["attempt"] == 1 and not previous:
    out = {"result": "draft: outlined the Q3 summary, figures still missing", "quality_score": 0.6}
else:
    out = {
        "result": "wrote the Q3 report summary (revenue, churn, hiring) in docs/q3-summary.md; no other files touched",
        "quality_score": 0.9,
    }
    if "revise" in json.dumps(previous):
        out["result"] += "; addressed the reviewer's notes"
json.dump({"output": out, "usage": {"tokens": 800, "usd": 0.01, "ms": 900}}, sys.stdout)
