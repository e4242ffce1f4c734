"""Shared fixtures: a fresh state directory and workspace per test, the
specs the tests run, and the installed `stratumc` command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GATED = """\
version: 1
contracts:
  Work:
    result: string
flows:
  entry: reviewed
  reviewed:
    input:
      text: string
    output:
      from: "${work.output}"
      contract: Work
    max_rounds: 3
    steps:
      - id: work
        do: "Write ${input.text}"
        agent: claude
        out: Work
        ensure:
          - expr: "result.result != ''"
        attempts: 2
      - id: review
        after: [work]
        gate:
          on_approve: null
          on_revise: work
          on_kill: null
"""

ONE_STEP = """\
version: 1
contracts:
  Label:
    label: string
flows:
  entry: classify
  classify:
    input:
      text: string
    output:
      from: "${label.output}"
      contract: Label
    steps:
      - id: label
        do: "Classify ${input.text}"
        agent: claude
        out: Label
        ensure:
          - expr: "result.label != ''"
        attempts: 2
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$STRATUM_HOME of the test (a new directory); the current directory is
    a workspace of its own without a stratum.toml."""
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("STRATUM_HOME", str(state))
    monkeypatch.chdir(work)
    return state


@pytest.fixture
def gated(home: Path) -> Path:
    path = Path.cwd() / "gated.stratum.yaml"
    path.write_text(GATED)
    return path


@pytest.fixture
def one_step(home: Path) -> Path:
    path = Path.cwd() / "one.stratum.yaml"
    path.write_text(ONE_STEP)
    return path


def stratumc_command() -> str:
    """The `stratumc` console script of the environment running the tests."""
    beside = Path(sys.executable).parent / "stratumc"
    if beside.exists():
        return str(beside)
    found = shutil.which("stratumc")
    assert found, "the stratumc command of the installed wheel is not on PATH"
    return found


def cli(
    *args: str, home: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs the installed `stratumc` with `args` (STRATUM_HOME=home when
    given, and the variables of `env` on top)."""
    env = dict(os.environ, **(env or {}))
    if home is not None:
        env["STRATUM_HOME"] = str(home)
    return subprocess.run(
        [stratumc_command(), *args], capture_output=True, text=True, env=env, timeout=120
    )
