"""The Python package from an installed wheel: check, build, cost, run with
Python agents and gates, and the run store shared with the `stratumc`
command (the console script of the same wheel)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import stratumc
from conftest import ONE_STEP, cli


def types(result: stratumc.RunResult) -> list[str]:
    return [e["type"] for e in result.audit]


# -- check, build, cost ------------------------------------------------------


def test_check_gives_typed_diagnostics_for_text_and_files(one_step: Path) -> None:
    assert stratumc.check(one_step) == []
    assert stratumc.check(str(one_step)) == []
    bad = ONE_STEP.replace("agent: claude", "agent: nobody")
    [d] = stratumc.check(bad)
    assert (d.code, d.severity, d.is_error, d.path) == ("S0104", "error", True, None)
    assert d.line == bad.splitlines().index("        agent: nobody") + 1
    assert bad.encode()[d.start : d.end] == b"nobody"
    assert "nobody" in d.message
    on_disk = one_step.with_name("bad.stratum.yaml")
    on_disk.write_text(bad)
    [d] = stratumc.check(on_disk)
    assert d.path == str(on_disk)


def test_check_of_a_missing_file_is_a_stratum_error(home: Path) -> None:
    with pytest.raises(stratumc.StratumError, match="missing.stratum.yaml"):
        stratumc.check(Path("missing.stratum.yaml"))


def test_build_gives_the_plan_and_writes_it(one_step: Path) -> None:
    plan = stratumc.build(one_step)
    assert len(plan.hash) == 64 and plan.path is None and plan.data
    out = one_step.with_name("one.stratumc")
    written = stratumc.build(one_step, output=out)
    assert written.path == str(out) and out.read_bytes() == plan.data
    assert written.hash == plan.hash
    # the CLI builds the same plan
    assert cli("build", str(one_step), "-o", str(out)).stdout.strip() == plan.hash
    with pytest.raises(stratumc.SpecError) as e:
        stratumc.build(ONE_STEP.replace("agent: claude", "agent: nobody"))
    assert [d.code for d in e.value.diagnostics] == ["S0104"]


def test_cost_is_the_cli_estimate(one_step: Path) -> None:
    doc = stratumc.cost(one_step, inputs={"text": "great release"})
    assert doc["version"] == 1 and doc["flow"] == "classify"
    assert [s["id"] for s in doc["steps"]] == ["label"]
    assert doc["dispatches"]["min"] == 1 and doc["dispatches"]["worst"] == 2
    by_cli = cli("cost", str(one_step), "--inputs", '{"text": "great release"}', "--format", "json")
    assert json.loads(by_cli.stdout) == doc
    with pytest.raises(stratumc.StratumError, match="no flow `nope`"):
        stratumc.cost(one_step, flow="nope")


# -- run -------------------------------------------------------------------------


def test_a_flow_runs_with_a_python_agent(one_step: Path, home: Path) -> None:
    seen: list[dict[str, Any]] = []

    def claude(entry: dict[str, Any]) -> dict[str, Any]:
        seen.append(entry)
        return {"output": {"label": "positive"}}

    result = stratumc.run(one_step, {"text": "great release"}, agents={"claude": claude})
    assert result.completed and result.output == {"label": "positive"}
    assert [e["id"] for e in seen] == ["label"]
    assert seen[0]["do"] == "Classify great release" and seen[0]["agent"] == "claude"
    assert types(result)[0] == "planned" and types(result)[-1] == "completed"
    assert (home / "stratum.db").exists()


def test_a_failing_agent_is_retried_by_the_steps_rules(one_step: Path) -> None:
    answers = [{"failure": "model overloaded"}, {"output": {"label": "negative"}}]

    result = stratumc.run(
        one_step, {"text": "x"}, agents={"claude": lambda entry: answers[entry["attempt"] - 1]}
    )
    assert result.completed and result.output == {"label": "negative"}
    results = [e for e in result.audit if e["type"] == "result"]
    assert len(results) == 2 and "model overloaded" in json.dumps(results[0])


def test_an_exception_in_an_agent_is_a_failure_report(one_step: Path) -> None:
    def claude(entry: dict[str, Any]) -> dict[str, Any]:
        raise ValueError(f"boom on attempt {entry['attempt']}")

    result = stratumc.run(one_step, {"text": "x"}, agents={"claude": claude})
    assert result.status == "failed" and result.output is None
    assert result.failure is not None
    audit = json.dumps(result.audit)
    for attempt in (1, 2):
        assert f"the agent `claude` raised ValueError: boom on attempt {attempt}" in audit


def test_malformed_results_and_missing_agents_fail_the_dispatch(one_step: Path) -> None:
    result = stratumc.run(one_step, {"text": "x"}, agents={"claude": lambda e: {"label": float("nan")}})
    assert result.status == "failed"
    assert "returned a value that is not JSON" in json.dumps(result.audit)
    result = stratumc.run(one_step, {"text": "x"}, agents={"codex": lambda e: {"output": {}}})
    assert result.status == "failed"
    assert "no Python callable for agent `claude`" in json.dumps(result.audit)


def test_a_gate_is_decided_by_on_gate(gated: Path) -> None:
    calls: list[int] = []
    gates: list[dict[str, Any]] = []

    def claude(entry: dict[str, Any]) -> dict[str, Any]:
        calls.append(entry["attempt"])
        return {"output": {"result": f"draft {len(calls)}"}}

    def on_gate(gate: dict[str, Any]) -> stratumc.GateDecision | str:
        gates.append(gate)
        if len(gates) == 1:
            return {"decision": "revise", "note": "shorter"}
        return "approve"

    result = stratumc.run(gated, {"text": "a poem"}, agents={"claude": claude}, on_gate=on_gate)
    assert result.completed and result.output == {"result": "draft 2"}
    assert [g["stepId"] for g in gates] == ["review", "review"]
    decided = [e["detail"] for e in result.audit if e["type"] == "gate_resolved"]
    assert [(d["decision"], d["resolvedBy"]) for d in decided] == [("revise", "python"), ("approve", "python")]
    assert decided[0]["note"] == "shorter"


def test_a_refused_decision_is_a_stratum_error(gated: Path) -> None:
    with pytest.raises(stratumc.StratumError, match="review"):
        stratumc.run(
            gated,
            {"text": "x"},
            agents={"claude": lambda e: {"output": {"result": "r"}}},
            on_gate=lambda g: "maybe",
        )


def test_a_spec_with_errors_is_not_run(home: Path) -> None:
    with pytest.raises(stratumc.SpecError) as e:
        stratumc.run(ONE_STEP.replace("agent: claude", "agent: nobody"), agents={})
    assert [d.code for d in e.value.diagnostics] == ["S0104"]


# -- the store shared with the CLI ------------------------------------------------


def test_a_run_started_in_python_is_the_clis(gated: Path, tmp_path: Path) -> None:
    store = tmp_path / "elsewhere"
    result = stratumc.run(
        gated, {"text": "x"}, agents={"claude": lambda e: {"output": {"result": "r"}}}, store=store
    )
    # no on_gate: the run waits at the gate, in the store given
    assert result.status == "running" and [g["stepId"] for g in result.gates] == ["review"]
    flow = cli("query", "flow", result.run_id, "--format", "json", home=store)
    assert flow.returncode == 0, flow.stderr
    assert result.run_id in flow.stdout and "review" in flow.stdout
    gates = cli("query", "gates", "--format", "json", home=store)
    assert result.run_id in gates.stdout
    # the CLI continues it: approves the gate and completes the run
    resumed = cli("run", "--resume", result.run_id, "--gate", "approve", "--format", "json", home=store)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "completed"


def test_a_store_url_puts_the_run_in_that_store(one_step: Path, tmp_path: Path) -> None:
    db = tmp_path / "team" / "runs.db"
    db.parent.mkdir()
    result = stratumc.run(
        one_step, {"text": "x"}, agents={"claude": lambda e: {"output": {"label": "a"}}}, store=f"sqlite:{db}"
    )
    assert result.status == "completed"
    assert db.exists()
    # the CLI finds it through STRATUM_STORE, and not in the default home
    env = {"STRATUM_STORE": f"sqlite:{db}"}
    flow = cli("query", "flow", result.run_id, "--format", "json", home=tmp_path / "other", env=env)
    assert flow.returncode == 0, flow.stderr
    assert json.loads(flow.stdout)["run"]["status"] == "completed"
    missing = cli("query", "flow", result.run_id, home=tmp_path / "other")
    assert missing.returncode != 0


@pytest.mark.skipif(not os.environ.get("STRATUM_TEST_PG"), reason="needs STRATUM_TEST_PG (scripts/pg-server.sh)")
def test_a_postgres_url_puts_the_run_in_postgresql(one_step: Path, tmp_path: Path) -> None:
    url = os.environ["STRATUM_TEST_PG"]
    result = stratumc.run(
        one_step, {"text": "x"}, agents={"claude": lambda e: {"output": {"label": "pg"}}}, store=url
    )
    assert result.status == "completed"
    flow = cli("query", "flow", result.run_id, "--format", "json", home=tmp_path / "m2", env={"STRATUM_STORE": url})
    assert flow.returncode == 0, flow.stderr
    assert json.loads(flow.stdout)["run"]["status"] == "completed"


def test_a_bad_store_url_is_a_stratum_error(one_step: Path) -> None:
    with pytest.raises(stratumc.StratumError, match="password"):
        stratumc.run(one_step, {"text": "x"}, agents={}, store="postgres://me:secret@db/runs")


def test_keyboard_interrupt_stops_the_run_durably(one_step: Path, home: Path) -> None:
    def claude(entry: dict[str, Any]) -> dict[str, Any]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stratumc.run(one_step, {"text": "x"}, agents={"claude": claude})
    [run] = json.loads(cli("query", "flows", "--format", "json").stdout)["runs"]
    run_id = run["runId"]
    assert run["status"] == "running"
    events = cli("query", "events", run_id, "--format", "json").stdout
    assert "driver_interrupted" in events
    # the lease was released: resuming at once continues the same dispatch
    result = stratumc.resume(run_id, agents={"claude": lambda e: {"output": {"label": "ok"}}})
    assert result.completed and result.output == {"label": "ok"}
    assert types(result).count("resumed") == 1


# -- the command ---------------------------------------------------------------


def test_the_command_is_the_rust_main(one_step: Path) -> None:
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"stratumc {stratumc.__version__}"
    assert cli("check", str(one_step)).returncode == 0
    bad = one_step.with_name("bad.stratum.yaml")
    bad.write_text(ONE_STEP.replace("agent: claude", "agent: nobody"))
    checked = cli("check", str(bad))
    assert checked.returncode == 1 and "S0104" in checked.stdout
    assert cli("no-such-command").returncode == 2


def test_a_detached_run_is_driven_by_this_package(one_step: Path) -> None:
    agent = """echo '{"output": {"label": "l"}}'"""
    started = cli(
        "run", str(one_step), "--inputs", '{"text": "x"}', "--agent", agent, "--detach", "--format", "json"
    )
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["runId"]
    # `watch` follows the run until it ends: the driver (python -m stratumc) completes it
    watched = cli("watch", run_id)
    assert watched.returncode == 0, watched.stdout + watched.stderr
