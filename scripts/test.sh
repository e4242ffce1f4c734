#!/usr/bin/env bash
# The test command of the README: installs what the end-to-end tests drive
# (the official Python MCP SDK and jsonschema from PyPI; Neovim for the
# language-server editor test and Graphviz for SVG graphs, from Debian's
# packages, when they are missing), then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet mcp jsonschema

if ! command -v nvim >/dev/null 2>&1 || ! command -v dot >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "error: nvim and dot (graphviz) are needed by the tests; install the Debian packages neovim and graphviz" >&2
            exit 2
        fi
        sudo="sudo"
    fi
    $sudo apt-get update -qq >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq neovim graphviz >/dev/null
fi

cargo test --workspace "$@"
