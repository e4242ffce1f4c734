#!/usr/bin/env python3
"""Scripted agent for examples/minimal-classifier.stratum.yaml.

`classify_text` is unsure on its first attempt (confidence 0.55, which breaks
the ensure `result.confidence > 0.7`), so the run shows one retry; the second
attempt reads `previousFailure` and answers with confidence 0.92.
"""
import json
import sys

entry = json.load(sys.stdin)
if entry["id"] != "classify_text":
    json.dump({"failure": "unexpected step " + entry["id"]}, sys.stdout)
    sys.exit(0)

if entry["attempt"] == 1 and entry.get("previousFailure") is None:
    out = {"label": "positive", "confidence": 0.55}
else:
    out = {"label": "positive", "confidence": 0.92}
json.dump({"output": out, "usage": {"tokens": 120, "usd": 0.001, "ms": 40}}, sys.stdout)
