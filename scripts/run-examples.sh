#!/usr/bin/env bash
# Runs every example spec (examples/*.stratum.yaml) to completion under
# `stratumc run` with its scripted agent, and prints one line per example with
# the final status.
#
# Per example NAME:
#   spec       examples/NAME.stratum.yaml
#   inputs     examples/inputs/NAME.json
#   agent      python3 examples/agents/NAME.py (examples/agents/contract-agent.py
#              when there is none)
#   workspace  a temporary copy of examples/workspaces/NAME/ (an empty dir when
#              there is none); a stratum.toml in it gets the fake judge's port
# All runs share one fresh STRATUM_HOME and one fake judge
# (examples/agents/fake-judge.py) listening on a free port for the whole script.
# Gates are decided with `--gate $GATE` (default approve).
#
# Usage: scripts/run-examples.sh [NAME...]
# env:   STRATUMC=path/to/stratumc (default: cargo build, then target/debug/stratumc)
#        GATE=approve|revise|kill  VERBOSE=1 (show each run's stderr)
# Exit status: 0 when every example completed, 1 otherwise (2 on setup errors).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
gate=${GATE:-approve}
python=${PYTHON:-$(python3 -c "import sys; print(sys.executable)")}

if [[ -n "${STRATUMC:-}" ]]; then
  bin=$STRATUMC
else
  cargo build --quiet -p stratumc --bin stratumc
  bin="${CARGO_TARGET_DIR:-$root/target}/debug/stratumc"
fi

if [[ $# -gt 0 ]]; then
  names=("$@")
else
  names=()
  for spec in examples/*.stratum.yaml; do
    names+=("$(basename "$spec" .stratum.yaml)")
  done
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/run-examples.XXXXXX")
judge_pid=
cleanup() {
  if [[ -n "$judge_pid" ]]; then
    kill "$judge_pid" 2>/dev/null || true
    wait "$judge_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

export STRATUM_HOME="$tmp/home"
mkdir -p "$STRATUM_HOME"

# the fake judge, on a port the OS picks (port 0), reported through a file
"$python" "$root/examples/agents/fake-judge.py" 0 --port-file "$tmp/judge.port" \
  --log "$tmp/judge.log" >/dev/null 2>"$tmp/judge.err" &
judge_pid=$!
for _ in $(seq 100); do
  [[ -s "$tmp/judge.port" ]] && break
  if ! kill -0 "$judge_pid" 2>/dev/null; then break; fi
  sleep 0.05
done
if [[ ! -s "$tmp/judge.port" ]]; then
  echo "error: the fake judge did not start:" >&2
  cat "$tmp/judge.err" >&2
  exit 2
fi
port=$(tr -d '[:space:]' < "$tmp/judge.port")

failed=0
for name in "${names[@]}"; do
  spec="examples/$name.stratum.yaml"
  inputs="examples/inputs/$name.json"
  if [[ ! -f "$spec" || ! -f "$inputs" ]]; then
    printf '%-20s missing (%s or %s)\n' "$name" "$spec" "$inputs"
    failed=1
    continue
  fi
  agent="$root/examples/agents/$name.py"
  [[ -f "$agent" ]] || agent="$root/examples/agents/contract-agent.py"

  ws="$tmp/ws/$name"
  mkdir -p "$ws"
  if [[ -d "examples/workspaces/$name" ]]; then
    cp -R "examples/workspaces/$name/." "$ws/"
  fi
  if [[ -f "$ws/stratum.toml" ]]; then
    sed -E -i.bak "s#http://127\.0\.0\.1:[0-9]+#http://127.0.0.1:$port#" "$ws/stratum.toml"
    rm -f "$ws/stratum.toml.bak"
  fi

  set +e
  "$bin" run "$spec" --inputs "@$inputs" --agent "'$python' '$agent'" \
    --workspace "$ws" --gate "$gate" --format json \
    >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
  code=$?
  set -e
  status=$("$python" -c 'import json,sys
try:
    print(json.load(open(sys.argv[1]))["status"])
except Exception:
    print("no-json")' "$tmp/$name.out")
  run_id=$(sed -n 's/^run: //p' "$tmp/$name.err" | head -n 1)
  printf '%-20s %-10s exit %d  %s\n' "$name" "$status" "$code" "${run_id:-}"
  if [[ "${VERBOSE:-}" == 1 ]]; then
    sed 's/^/    /' "$tmp/$name.err"
  fi
  if [[ "$status" != completed || $code -ne 0 ]]; then
    failed=1
    if [[ "${VERBOSE:-}" != 1 ]]; then
      tail -n 5 "$tmp/$name.err" | sed 's/^/    /'
    fi
  fi
done

if [[ -s "$tmp/judge.log" ]]; then
  echo "fake judge: $(wc -l < "$tmp/judge.log" | tr -d ' ') verdict(s) on port $port"
fi
exit "$failed"
