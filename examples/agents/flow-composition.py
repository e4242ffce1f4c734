#!/usr/bin/env python3
"""Scripted agent for examples/flow-composition.stratum.yaml.

`test/run_tests` (the called flow's step) reports all tests passing; its file
ensures read build/reports/integration.xml, which the workspace
examples/workspaces/flow-composition/ already holds. `release` reports a
semver tag matching `^v[0-9]+[.][0-9]+[.][0-9]+$`; its first attempt reports
"v1.4" to show the `matches` ensure catching it and a retry.
"""
import json
import sys

entry = json.load(sys.stdin)
step = entry["id"]
if step.split("/")[-1] == "run_tests":
    out = {"all_passed": True, "failed": 0}
elif step == "release":
    version = "v1.4" if entry["attempt"] == 1 else "v1.4.0"
    out = {"status": "deployed", "version": version}
else:
    json.dump({"failure": "unexpected step " + step}, sys.stdout)
    sys.exit(0)
json.dump({"output": out, "usage": {"tokens": 300, "usd": 0.003}}, sys.stdout)
