"""Stubs of the extension module `stratumc._native` (python/src/lib.rs).

Every function speaks JSON text; the package `stratumc` turns it into typed
classes. Not a public API: use `stratumc`.
"""

from typing import Callable, Optional

__all__ = ["StratumError", "build", "check", "cost", "main", "run", "version"]

class StratumError(Exception):
    """A refusal of stratumc: an unreadable file, a bad input, a store or engine error."""

def main(argv: list[str], program: list[str]) -> int: ...
def version() -> str: ...
def check(
    path: Optional[str] = None, text: Optional[str] = None, portable: bool = False
) -> str: ...
def build(
    path: Optional[str] = None, text: Optional[str] = None, output: Optional[str] = None
) -> tuple[str, Optional[bytes]]: ...
def cost(
    path: Optional[str] = None,
    text: Optional[str] = None,
    inputs: Optional[str] = None,
    flow: Optional[str] = None,
    config: Optional[str] = None,
    history: bool = False,
    store: Optional[str] = None,
) -> str: ...
def run(
    dispatch: Callable[[str, str], str],
    path: Optional[str] = None,
    text: Optional[str] = None,
    inputs: Optional[str] = None,
    decide: Optional[Callable[[str], Optional[str]]] = None,
    store: Optional[str] = None,
    flow: Optional[str] = None,
    workspace: Optional[str] = None,
    config: Optional[str] = None,
    resume: Optional[str] = None,
) -> str: ...
