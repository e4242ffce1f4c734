#!/usr/bin/env bash
# Seeds fuzz/corpus/ (git-ignored) from the repository's own inputs:
#   front_end   <- examples/*.stratum.yaml, examples/*/*.stratum.yaml and the
#                  conformance corpus (tests/conformance/**/*.yaml), whole files
#   expr_parser <- every line of grammar/test_data/**, plus the expression and
#                  template strings quoted in the examples
# Usage: fuzz/seed-corpus.sh   (from anywhere; idempotent)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
fe="$here/corpus/front_end"
ex="$here/corpus/expr_parser"
mkdir -p "$fe" "$ex"
for f in "$root"/examples/*.stratum.yaml "$root"/examples/*/*.stratum.yaml; do
  cp "$f" "$fe/$(basename "$f")"
done
while IFS= read -r f; do # conformance cases: passing and failing, 1.1 included
  rel=${f#"$root"/tests/conformance/}
  cp "$f" "$fe/conformance-${rel//\//-}"
done < <(find "$root"/tests/conformance -name '*.yaml' | sort)
n=0
emit() { # one seed file per distinct line
  n=$((n + 1))
  printf '%s' "$1" > "$ex/seed-$n"
}
while IFS= read -r line; do
  [ -n "$line" ] && emit "$line"
done < <(cat "$root"/grammar/test_data/*/* 2>/dev/null | sort -u)
# quoted scalars of the examples: "..." values (exprs, whens, templates)
while IFS= read -r line; do
  emit "$line"
done < <(grep -ho '"[^"]*"' "$root"/examples/*.stratum.yaml "$root"/examples/*/*.stratum.yaml | sed 's/^"//; s/"$//' | sort -u)
echo "seeded $(ls "$fe" | wc -l) front_end and $(ls "$ex" | wc -l) expr_parser inputs"
