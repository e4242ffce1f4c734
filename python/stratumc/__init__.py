"""stratumc from Python: check, build, cost and run Stratum workflow specs.

The same Rust code as the ``stratumc`` command runs in this process (no
subprocess): ``check`` gives a spec's diagnostics, ``build`` its plan,
``cost`` the estimate of ``stratumc cost --format json``, and ``run`` drives
a flow whose agents are Python callables, in the same run store as the
command line (``stratumc watch``, ``query`` and ``run --resume`` see it).
The ``stratumc`` command installed with this package is :func:`main`.
See docs/python.md.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Optional, TypedDict, Union

from . import _native
from ._native import StratumError

__all__ = [
    "Diagnostic",
    "Label",
    "Plan",
    "RunResult",
    "SpecError",
    "StratumError",
    "GateDecision",
    "check",
    "build",
    "cost",
    "run",
    "resume",
    "main",
    "__version__",
]

__version__: str = _native.version()

Source = Union[str, "os.PathLike[str]"]
"""A spec: a path (``pathlib.Path``, or a ``str`` naming an existing file
without a line break) or the spec's text (any other ``str``)."""


@dataclass(frozen=True)
class Label:
    """A secondary location of a diagnostic."""

    message: str
    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class Diagnostic:
    """One problem in a spec, as ``stratumc check --format json`` reports it.

    ``line`` and ``column`` are 1-based (columns in characters), ``start`` and
    ``end`` the byte span; ``path`` is ``None`` for a spec given as text.
    """

    code: str
    severity: Literal["error", "warning"]
    message: str
    line: int
    column: int
    end_line: int
    end_column: int
    start: int
    end: int
    path: Optional[str]
    labels: tuple[Label, ...] = ()
    notes: tuple[str, ...] = ()
    help: Optional[str] = None

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def __str__(self) -> str:
        where = f"{self.path or '<text>'}:{self.line}:{self.column}"
        return f"{where}: {self.severity}[{self.code}]: {self.message}"


class SpecError(StratumError):
    """The spec has errors; nothing was built, estimated or run.

    ``diagnostics`` lists every problem (errors and warnings).
    """

    diagnostics: list[Diagnostic]

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        errors = [d for d in diagnostics if d.is_error]
        shown = "\n".join(str(d) for d in errors[:5])
        more = f"\n... and {len(errors) - 5} more" if len(errors) > 5 else ""
        super().__init__(f"the spec has {len(errors)} error(s):\n{shown}{more}")


@dataclass(frozen=True)
class Plan:
    """A built plan: its hash, its bytes (a ``.stratumc`` file) and where it
    was written (``None`` unless ``output`` was given)."""

    hash: str
    data: bytes
    path: Optional[str]
    diagnostics: list[Diagnostic] = field(default_factory=list)


class GateDecision(TypedDict, total=False):
    """What ``on_gate`` may return instead of a bare decision string."""

    decision: Literal["approve", "revise", "kill"]
    note: str
    choice: str


AgentResult = Mapping[str, Any]
"""What an agent returns: ``{"output": ...}`` or ``{"failure": "why"}``
(optionally ``usage`` and ``telemetry``), as a command agent prints it."""

Agent = Callable[[dict[str, Any]], AgentResult]
Decider = Callable[[dict[str, Any]], Union[str, GateDecision, None]]


@dataclass(frozen=True)
class RunResult:
    """How a call of :func:`run` left the run.

    ``status`` is the engine's (``completed``, ``failed``, ``killed``,
    ``cancelled``, ``budget_exhausted``, ``paused``; ``running`` when it
    waits at a gate that was not decided: ``gates`` lists them). ``audit``
    is the run's whole event log. The run stays in the store under
    ``run_id``.
    """

    run_id: str
    status: str
    output: Any
    failure: Optional[dict[str, Any]]
    gates: list[dict[str, Any]]
    audit: list[dict[str, Any]]
    warnings: list[str]
    log: list[str]

    @property
    def completed(self) -> bool:
        return self.status == "completed"


def _source(spec: Source) -> tuple[Optional[str], Optional[str]]:
    """(path, text) of a spec argument."""
    if isinstance(spec, os.PathLike):
        return os.fspath(spec), None
    if not isinstance(spec, str):
        raise TypeError(f"a spec is a path or its text, not {type(spec).__name__}")
    if "\n" not in spec and os.path.isfile(spec):
        return spec, None
    return None, spec


def _path(p: Optional[Source]) -> Optional[str]:
    return None if p is None else os.fspath(p)


def _diagnostics(items: list[dict[str, Any]]) -> list[Diagnostic]:
    out = []
    for d in items:
        labels = tuple(Label(**label) for label in d.get("labels", []))
        out.append(
            Diagnostic(
                code=d["code"],
                severity=d["severity"],
                message=d["message"],
                line=d["line"],
                column=d["column"],
                end_line=d["end_line"],
                end_column=d["end_column"],
                start=d["start"],
                end=d["end"],
                path=d["path"],
                labels=labels,
                notes=tuple(d.get("notes", [])),
                help=d.get("help"),
            )
        )
    return out


def _inputs(inputs: Optional[Mapping[str, Any]]) -> Optional[str]:
    if inputs is None:
        return None
    if not isinstance(inputs, Mapping):
        raise TypeError(f"inputs must be a dict (the flow's input), not {type(inputs).__name__}")
    return json.dumps(dict(inputs), allow_nan=False)


def check(spec: Source, *, portable: bool = False) -> list[Diagnostic]:
    """The diagnostics of a spec (empty: it is valid). ``portable`` adds the
    warnings of ``stratumc check --portable``. Raises :class:`StratumError`
    when the file cannot be read."""
    path, text = _source(spec)
    doc = json.loads(_native.check(path=path, text=text, portable=portable))
    if doc.get("environment_error"):
        import warnings

        warnings.warn(
            f"checked without its stratum.toml: {doc['environment_error']}", stacklevel=2
        )
    return _diagnostics(doc["diagnostics"])


def build(spec: Source, *, output: Optional[Source] = None) -> Plan:
    """Compiles a spec to its plan; with ``output``, writes the plan file
    there (as ``stratumc build -o``). Raises :class:`SpecError` when the
    spec has errors."""
    path, text = _source(spec)
    doc_text, data = _native.build(path=path, text=text, output=_path(output))
    doc = json.loads(doc_text)
    diagnostics = _diagnostics(doc["diagnostics"])
    if data is None:
        raise SpecError(diagnostics)
    return Plan(hash=doc["hash"], data=data, path=doc["written"], diagnostics=diagnostics)


def cost(
    spec: Source,
    inputs: Optional[Mapping[str, Any]] = None,
    *,
    flow: Optional[str] = None,
    config: Optional[Source] = None,
    history: bool = False,
    store: Optional[Source] = None,
) -> dict[str, Any]:
    """The estimate of ``stratumc cost --format json`` (dispatches, tokens,
    dollars, time, per step, against the declared budget). ``config`` is the
    ``stratum.toml`` of the agent profiles (default: ``./stratum.toml`` when
    it exists); ``history`` uses the past runs in ``store`` (default
    ``$STRATUM_HOME``). Raises :class:`SpecError` when the spec has errors."""
    path, text = _source(spec)
    doc = json.loads(
        _native.cost(
            path=path,
            text=text,
            inputs=_inputs(inputs),
            flow=flow,
            config=_path(config),
            history=history,
            store=_path(store),
        )
    )
    if "diagnostics" in doc:
        raise SpecError(_diagnostics(doc["diagnostics"]))
    result: dict[str, Any] = doc["cost"]
    return result


def _dispatcher(agents: Mapping[str, Agent]) -> Callable[[str, str], str]:
    def dispatch(agent: str, entry: str) -> str:
        fn = agents.get(agent)
        if fn is None:
            names = ", ".join(f"`{n}`" for n in sorted(agents)) or "none"
            return json.dumps(
                {
                    "failure": f"no Python callable for agent `{agent}` (agents given: {names}); "
                    f"pass agents={{{agent!r}: fn}} to stratumc.run"
                }
            )
        try:
            result = fn(json.loads(entry))
        except Exception as e:  # KeyboardInterrupt and SystemExit stop the run instead
            return json.dumps({"failure": f"the agent `{agent}` raised {type(e).__name__}: {e}"})
        try:
            return json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as e:
            return json.dumps(
                {"failure": f"the agent `{agent}` returned a value that is not JSON: {e}"}
            )

    return dispatch


def _decider(on_gate: Decider) -> Callable[[str], Optional[str]]:
    def decide(gate: str) -> Optional[str]:
        answer = on_gate(json.loads(gate))
        if answer is None:
            return None
        if isinstance(answer, str):
            return json.dumps({"decision": answer})
        if isinstance(answer, Mapping):
            return json.dumps(dict(answer))
        raise TypeError(
            "on_gate must return a decision (\"approve\", \"revise\", \"kill\"), "
            f"a dict {{decision, note?, choice?}} or None, not {type(answer).__name__}"
        )

    return decide


def _result(text: str) -> RunResult:
    doc = json.loads(text)
    if "diagnostics" in doc:
        raise SpecError(_diagnostics(doc["diagnostics"]))
    return RunResult(
        run_id=doc["runId"],
        status=doc["status"],
        output=doc["output"],
        failure=doc["failure"],
        gates=doc["gates"],
        audit=doc["audit"],
        warnings=doc["warnings"],
        log=doc["log"],
    )


def run(
    spec: Source,
    inputs: Optional[Mapping[str, Any]] = None,
    *,
    agents: Mapping[str, Agent],
    store: Optional[Source] = None,
    on_gate: Optional[Decider] = None,
    flow: Optional[str] = None,
    workspace: Optional[Source] = None,
    config: Optional[Source] = None,
) -> RunResult:
    """Runs a flow of ``spec`` (a spec or a ``.stratumc`` plan) with Python
    callables as its agents, until it ends or waits at a gate nobody decides.

    Each callable of ``agents`` (by agent name) gets the ready entry as a
    dict (``id``, ``do``, ``agent``, ``attempt``, ...) and returns what a
    command agent prints: ``{"output": ...}`` or ``{"failure": "why"}``. An
    exception becomes a failure report with its message (the step's retry
    rules apply). ``on_gate`` gets each waiting gate as a dict and returns
    ``"approve"``, ``"revise"``, ``"kill"``, a :class:`GateDecision`, or
    ``None`` to leave it waiting; without it the run stops at its first
    gate. ``store`` is the state directory (default ``$STRATUM_HOME``), the
    one ``stratumc`` uses there, or a store URL as ``STRATUM_STORE`` takes
    it (``postgres://USER@HOST:PORT/DB``, ``sqlite:PATH``). Ctrl-C (KeyboardInterrupt) stops the run
    durably and is raised again: ``stratumc run --resume RUN`` or
    :func:`resume` continues it. Raises :class:`SpecError` for a spec with
    errors and :class:`StratumError` for other refusals.
    """
    path, text = _source(spec)
    return _result(
        _native.run(
            _dispatcher(agents),
            path=path,
            text=text,
            inputs=_inputs(inputs),
            decide=None if on_gate is None else _decider(on_gate),
            store=_path(store),
            flow=flow,
            workspace=_path(workspace),
            config=_path(config),
        )
    )


def resume(
    run_id: str,
    *,
    agents: Mapping[str, Agent],
    store: Optional[Source] = None,
    on_gate: Optional[Decider] = None,
    workspace: Optional[Source] = None,
    config: Optional[Source] = None,
) -> RunResult:
    """Continues run ``run_id`` (started by :func:`run` or ``stratumc run``)
    on its own plan, as ``stratumc run --resume RUN`` does, with Python
    callables as its agents."""
    return _result(
        _native.run(
            _dispatcher(agents),
            decide=None if on_gate is None else _decider(on_gate),
            store=_path(store),
            workspace=_path(workspace),
            config=_path(config),
            resume=run_id,
        )
    )


def main() -> None:
    """The ``stratumc`` command: the Rust command line, in this process.

    Ctrl-C is the command's own (as for the binary), and ``run --detach``
    starts its background driver as ``python -m stratumc``.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    code = _native.main(["stratumc", *sys.argv[1:]], [sys.executable, "-m", "stratumc"])
    sys.exit(code)
