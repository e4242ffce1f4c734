"""A typed use of the API for `mypy --strict` (scripts/test.sh): the stubs
and annotations of the package must accept it. Not a test module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import stratumc


def agent(entry: dict[str, Any]) -> dict[str, Any]:
    return {"output": {"label": entry["do"]}}


def on_gate(gate: dict[str, Any]) -> stratumc.GateDecision:
    return {"decision": "approve", "note": f"round {gate['round']}"}


def use(spec: Path) -> str:
    problems: list[stratumc.Diagnostic] = stratumc.check(spec)
    errors = [f"{d.path}:{d.line}:{d.column} {d.code} {d.message}" for d in problems if d.is_error]
    plan: stratumc.Plan = stratumc.build(spec, output=spec.with_suffix(".stratumc"))
    estimate: dict[str, Any] = stratumc.cost(spec, {"text": "x"}, flow=None)
    result: stratumc.RunResult = stratumc.run(
        spec, {"text": "x"}, agents={"claude": agent}, store=Path("/tmp/state"), on_gate=on_gate
    )
    again = stratumc.resume(result.run_id, agents={"claude": agent}, on_gate=lambda g: "kill")
    try:
        stratumc.run(str(spec), agents={})
    except stratumc.SpecError as e:
        errors.extend(str(d) for d in e.diagnostics)
    except stratumc.StratumError as e:
        errors.append(str(e))
    return f"{plan.hash} {estimate['version']} {again.status} {len(errors)}"
