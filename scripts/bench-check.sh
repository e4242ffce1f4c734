#!/usr/bin/env bash
# Whole-process timing of `stratumc check FILE` on generated specs.
#
# Builds the release CLI and the `gen_spec` example, writes specs of 10, 100,
# 1000 and 10000 steps (stratum_compiler::testgen::generate_spec) into a temp
# dir, checks that each passes, then times `stratumc check` on each: with
# hyperfine when it is installed (apt-get install hyperfine), else with a bash
# loop over `date +%s%N`. Prints the median wall time per size in ms.
#
# Usage: scripts/bench-check.sh        env: SIZES="10 100" RUNS=20 WARMUP=3
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
read -r -a sizes <<< "${SIZES:-10 100 1000 10000}"
runs=${RUNS:-20}
warmup=${WARMUP:-3}
target=${CARGO_TARGET_DIR:-$root/target}

echo "building release binaries..." >&2
cargo build --release --quiet -p stratumc --bin stratumc
cargo build --release --quiet -p stratum-compiler --example gen_spec
bin="$target/release/stratumc"
gen="$target/release/examples/gen_spec"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

for n in "${sizes[@]}"; do
  f="$tmp/steps-$n.stratum.yaml"
  "$gen" "$n" > "$f"
  if ! "$bin" check "$f" > "$tmp/check-$n.out" 2>&1; then
    echo "error: the generated spec of $n steps does not pass \`stratumc check\`:" >&2
    head -40 "$tmp/check-$n.out" >&2
    exit 1
  fi
  printf '%6s steps: %9s bytes\n' "$n" "$(wc -c < "$f")" >&2
done

median_ms() { # reads nanosecond samples, one a line; prints the median in ms
  sort -n | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.2f", m / 1e6 }'
}

if command -v hyperfine > /dev/null; then
  list=$(IFS=,; echo "${sizes[*]}")
  hyperfine --shell=none --warmup "$warmup" --runs "$runs" --export-json "$tmp/hyperfine.json" \
    --parameter-list n "$list" "$bin check $tmp/steps-{n}.stratum.yaml" >&2
  echo
  echo "median wall time of \`stratumc check\` (hyperfine, $runs runs):"
  if command -v python3 > /dev/null; then
    python3 - "$tmp/hyperfine.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    n = r["parameters"]["n"]
    print(f"  {n:>6} steps: median {r['median'] * 1e3:9.2f} ms   mean {r['mean'] * 1e3:9.2f} ms   min {r['min'] * 1e3:9.2f} ms")
PY
  else
    cat "$tmp/hyperfine.json"
  fi
else
  echo "hyperfine not found: timing with a bash loop ($runs runs after $warmup warm-up runs)" >&2
  echo "median wall time of \`stratumc check\` (bash loop, $runs runs):"
  for n in "${sizes[@]}"; do
    f="$tmp/steps-$n.stratum.yaml"
    for _ in $(seq "$warmup"); do "$bin" check "$f" > /dev/null; done
    for _ in $(seq "$runs"); do
      t0=$(date +%s%N)
      "$bin" check "$f" > /dev/null
      t1=$(date +%s%N)
      echo $((t1 - t0))
    done > "$tmp/times-$n"
    printf '  %6s steps: median %9s ms\n' "$n" "$(median_ms < "$tmp/times-$n")"
  done
fi
