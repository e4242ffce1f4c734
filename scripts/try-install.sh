#!/usr/bin/env bash
# Tries the README's two install paths as a new user would, and reports
# their sizes:
# 1. `cargo install --path cli` into a fresh temporary prefix;
# 2. the Python wheel: `maturin build --release`, then `pip install` of the
#    wheel into a fresh venv (what `pip install .` does, in two steps).
# Each is then used with a fresh HOME and STRATUM_HOME and only its own
# `stratumc` on PATH — version, `init` and `check` of the starter project,
# the research preset, shell completions and a man page; the wheel's also
# through its Python API (check, cost, and a run with a Python agent that
# the installed command then queries).
# A manual check, not part of CI.
#
# Usage: scripts/try-install.sh [WORK_DIR]   (default: a new /tmp/try-install.*)
# FRESH=1 builds in a target directory of its own (from scratch, ~10 min);
# by default the repository's target/ is reused, so only what changed is built.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d /tmp/try-install.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/prefix
target=$repo/target
[ "${FRESH:-}" = 1 ] && target=$work/target
python=$(command -v python3)

echo "== cargo install --path cli (into $prefix)"
CARGO_TARGET_DIR=$target cargo install --quiet --locked --force --path "$repo/cli" --root "$prefix"

echo "== maturin build --release (the wheel), pip install into $work/venv"
"$python" -m pip install --quiet 'maturin>=1.9.4,<2'
(cd "$repo" && CARGO_TARGET_DIR=$target "$python" -m maturin build --quiet --release --locked --out "$work/wheels")
wheel=$(ls "$work"/wheels/stratumc-*.whl)
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "$wheel"

# A new user's shell, with only one installed `stratumc` on PATH ($1: its
# directory), in a fresh HOME ($2).
try() {
    (
        export HOME=$2 STRATUM_HOME=$2/.stratum
        export PATH=$1:/usr/bin:/bin
        mkdir -p "$HOME"
        cd "$HOME"
        bin=$(command -v stratumc)
        [ "$bin" = "$1/stratumc" ] || { echo "error: stratumc on PATH is $bin" >&2; exit 1; }
        echo "== stratumc --version"
        stratumc --version
        echo "== stratumc init starter && stratumc check starter/"
        stratumc init starter
        stratumc check starter/
        echo "== stratumc init --preset research research && stratumc check research/"
        stratumc init --preset research research >/dev/null
        stratumc check research/
        echo "== completions and man page"
        stratumc completions bash | bash -n /dev/stdin && echo "bash completions parse"
        stratumc man | head -c 200 | grep -q '^\.ie' && echo "man page renders"
    )
}

echo "=== 1. the binary of cargo install"
try "$prefix/bin" "$work/home-cargo"
echo "=== 2. the wheel's command"
try "$work/venv/bin" "$work/home-wheel"
echo "== the wheel's Python API"
(
    export HOME=$work/home-wheel STRATUM_HOME=$work/home-wheel/.stratum
    export PATH=$work/venv/bin:/usr/bin:/bin
    cd "$HOME"
    python - <<'EOF'
import json, pathlib, subprocess, stratumc
spec = pathlib.Path("starter/spec.stratum.yaml")
inputs = json.loads(pathlib.Path("starter/inputs.json").read_text())
assert [d for d in stratumc.check(spec) if d.is_error] == []
print("cost: expected dispatches", stratumc.cost(spec, inputs)["dispatches"]["expected"])
summary = {"title": "t", "points": ["a", "b", "c"]}
result = stratumc.run(spec, inputs, agents={"claude": lambda entry: {"output": summary}})
assert result.completed and result.output == summary, result
flow = subprocess.run(["stratumc", "query", "flow", result.run_id], capture_output=True, text=True, check=True)
print("run", result.run_id, result.status, "; stratumc query flow sees it:", "completed" in flow.stdout)
EOF
)
bin_size=$(stat -c %s "$prefix/bin/stratumc")
wheel_size=$(stat -c %s "$wheel")
native=$(ls "$work"/venv/lib/python3*/site-packages/stratumc/_native*.so)
native_size=$(stat -c %s "$native")
mb() { awk -v s="$1" 'BEGIN { printf "%.1f MB", s / 1e6 }'; }
echo "== installed binary: $bin_size bytes ($(mb "$bin_size"))"
echo "== wheel $(basename "$wheel"): $wheel_size bytes ($(mb "$wheel_size")); installed extension: $native_size bytes ($(mb "$native_size"))"
