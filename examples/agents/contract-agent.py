#!/usr/bin/env python3
"""A scripted agent for `stratumc run`: reads one ready entry (JSON) on stdin
and prints a result that satisfies the entry's output contract.

Values are chosen so that the examples' ensures hold: strings are non-empty,
numbers are 0.9 (integers 1), booleans true, enums take their first value
(or a value named in STRATUM_PREFER, comma-separated), lists hold one element.
With no contract the result is {"output": {"done": true}}.
"""
import json
import os
import sys

PREFER = [p for p in os.environ.get("STRATUM_PREFER", "").split(",") if p]


def value(ty, contracts, depth=0):
    optional = ty.endswith("?")
    ty = ty.rstrip("?")
    if ty.endswith("[]"):
        return [value(ty[:-2], contracts, depth + 1)]
    if ty.startswith("(") and ty.endswith(")"):
        ty = ty[1:-1]
    if ty == "string":
        return "ok"
    if ty == "integer":
        return 1
    if ty == "number":
        return 0.9
    if ty == "boolean":
        return True
    if ty == "object":
        return {}
    if ty == "array":
        return []
    if "|" in ty:
        options = ty.split("|")
        for p in PREFER:
            if p in options:
                return p
        return options[0]
    if ty in contracts and depth < 8:
        return record(ty, contracts, depth + 1)
    return None if optional else "ok"


def record(name, contracts, depth=0):
    return {field: value(t, contracts, depth) for field, t in contracts[name].items()}


entry = json.load(sys.stdin)
contract = entry.get("contract")
if contract:
    out = record(contract["root"], contract["contracts"])
else:
    out = {"done": True}
json.dump({"output": out, "usage": {"tokens": 100}}, sys.stdout)
