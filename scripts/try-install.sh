#!/usr/bin/env bash
# Tries the README's install path as a new user would: `cargo install
# --path cli` into a fresh temporary prefix, with a fresh HOME and
# STRATUM_HOME, then uses the installed binary from PATH only — version,
# `init` and `check` of the starter project, the research preset, shell
# completions and a man page — and reports the installed binary's size.
# A manual check, not part of CI. (The second install path of issue 20, a
# Python wheel, does not exist yet.)
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

echo "== cargo install --path cli (into $prefix)"
CARGO_TARGET_DIR=$target cargo install --quiet --locked --force --path "$repo/cli" --root "$prefix"

# from here on: a new user's shell, with only the installed binary on PATH
export HOME=$work/home STRATUM_HOME=$work/home/.stratum
export PATH=$prefix/bin:/usr/bin:/bin
mkdir -p "$HOME"
cd "$HOME"
bin=$(command -v stratumc)
[ "$bin" = "$prefix/bin/stratumc" ] || { echo "error: stratumc on PATH is $bin" >&2; exit 1; }

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
size=$(stat -c %s "$bin")
echo "== installed binary: $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.1f MB", s / 1e6 }'))"
