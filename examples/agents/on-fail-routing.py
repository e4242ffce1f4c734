#!/usr/bin/env python3
"""Scripted agent for examples/on-fail-routing.stratum.yaml.

`generate` fails on every attempt (2), so `on_fail` routes to `recover`, which
sees the failure in `previousFailure` and repairs the workspace; `verify` is
skipped (its `when` reads the failed `generate`), and `publish` runs after both
branches. With STRATUM_SCENARIO=happy, `generate` succeeds instead, `verify`
runs and `recover` never does.
"""
import json
import os
import sys

entry = json.load(sys.stdin)
step = entry["id"]
happy = os.environ.get("STRATUM_SCENARIO") == "happy"


def reply(doc):
    json.dump(doc, sys.stdout)
    sys.exit(0)


if step == "generate":
    if happy:
        reply({"output": {"ok": True, "details": "generated wc.py; 6 unit tests pass"}})
    reply({"failure": "unit tests failed on attempt %d: 2 of 6 failing" % entry["attempt"]})
if step == "verify":
    reply({"output": {"ok": True, "details": "built, ran ruff and mypy: clean"}})
if step == "recover":
    why = (entry.get("previousFailure") or {}).get("reason", "unknown failure")
    reply({"output": {"ok": True, "details": "repaired the workspace after: " + why}})
if step == "publish":
    reply({"output": {"ok": True, "details": "opened pull request #42"}})
reply({"failure": "unexpected step " + step})
