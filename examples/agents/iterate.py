#!/usr/bin/env python3
"""Scripted agent for examples/iterate.stratum.yaml.

`improve` iterates: each dispatch after a failed `until` carries the iteration
number in previousFailure.violations[].iteration. The draft's quality climbs
0.6, 0.8, 0.96 and the open question is answered on the third draft, so
`until` (quality >= 0.95 and no open questions) holds on iteration 3 of 5.
The ensure file_exists docs/design.md is met by the workspace
examples/workspaces/iterate/.
"""
import json
import sys

entry = json.load(sys.stdin)
if entry["id"] != "improve":
    json.dump({"failure": "unexpected step " + entry["id"]}, sys.stdout)
    sys.exit(0)

done = 0
for v in (entry.get("previousFailure") or {}).get("violations") or []:
    if v.get("kind") == "iterate":
        done = max(done, int(v.get("iteration", 0)))
drafts = [
    {"text": "Compilers: tokens fall / ...", "quality": 0.6,
     "open_questions": ["which compiler phase?", "5-7-5 strictly?"]},
    {"text": "Tokens fall like rain / parsed into trees / ...", "quality": 0.8,
     "open_questions": ["5-7-5 strictly?"]},
    {"text": "Tokens fall like rain / the parser grows a tall tree / code blooms from its leaves",
     "quality": 0.96, "open_questions": []},
]
out = drafts[min(done, len(drafts) - 1)]
json.dump({"output": out, "usage": {"tokens": 1500, "usd": 0.01}}, sys.stdout)
