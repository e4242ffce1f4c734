#!/usr/bin/env python3
"""Scripted agent for examples/five-constructs.stratum.yaml.

Answers `analyze`, the `inspect` fanout items (one per input item; the result's
`path` echoes the item, as the ensure `result.path == item` demands; the item
"faster search" fails its first attempt to show a per-item retry), the called
flow's `write_summary` (step id `child/write_summary`; judged, so a judge must
be configured) and `finish`.
"""
import json
import sys

entry = json.load(sys.stdin)
step = entry["id"]


def reply(output, tokens=200):
    json.dump({"output": output, "usage": {"tokens": tokens, "usd": 0.002}}, sys.stdout)
    sys.exit(0)


if step == "analyze":
    reply({"summary": "Release notes: fixes the login redirect and speeds up search.", "score": 3})
if step.startswith("inspect/"):
    item = entry["item"]
    if item == "faster search" and entry["attempt"] == 1:
        json.dump({"failure": "timed out reading the search index"}, sys.stdout)
        sys.exit(0)
    reply({"path": item, "verdict": "ok", "notes": "no problems found in " + item})
if step.split("/")[-1] == "write_summary":
    reply({"message": "Fixes the login redirect and makes search faster. Low risk (3/10)."})
if step == "finish":
    reply({"message": "Posted the review comment on the release notes pull request."})
json.dump({"failure": "unexpected step " + step}, sys.stdout)
