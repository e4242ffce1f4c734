#!/usr/bin/env bash
# Tries the README's VS Code set-up as a new user would, with code-server (VS
# Code in a browser) standing in for desktop VS Code, and checks it end to end
# in headless Chromium (editors/vscode/test/drive.js): the extension
# activates, diagnostics from `stratumc lsp` appear, hover and go to
# definition answer, and fixing the error clears the diagnostics.
# A manual check, not part of CI.
#
# Usage: scripts/try-vscode.sh [WORK_DIR]   (default: a new /tmp/try-vscode.*)
# A WORK_DIR from an earlier run reuses its installed tools (tools/).
# Needs: cargo, Node.js 20 with npm, chromium (Debian: apt install chromium),
# a C/C++ toolchain, python3 and the headers code-server's native modules
# build against (Debian: apt install libkrb5-dev libxkbfile-dev
# libsecret-1-dev pkg-config); ripgrep (apt install ripgrep) when GitHub is
# unreachable. Environment: CODE_SERVER_VERSION (default 4.100.3, the newest
# that runs on Node 20), PORT (default 18081), CHROMIUM (default
# /usr/bin/chromium), NO_BUILD=1 to use target/release/stratumc as it is.
# Screenshots: WORK_DIR/*.png. Logs: WORK_DIR/home/.local/share/code-server/logs.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d /tmp/try-vscode.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
code_server_version=${CODE_SERVER_VERSION:-4.100.3}
playwright_version=1.65.1
port=${PORT:-18081}
chromium=${CHROMIUM:-/usr/bin/chromium}
tools=$work/tools
home=$work/home # the HOME of every code-server command: nothing is written to yours
code_server() { mkdir -p "$home" && HOME=$home "$tools/node_modules/.bin/code-server" "$@"; }
step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }

step "release binary"
[ "${NO_BUILD:-}" = 1 ] || (cd "$repo" && cargo build --release -p stratumc)
"$repo/target/release/stratumc" --version

step "code-server $code_server_version and playwright-core $playwright_version into $work/tools"
if [ ! -x "$tools/node_modules/.bin/code-server" ] \
  || ! code_server --version 2>/dev/null | grep -q "^$code_server_version "; then
  mkdir -p "$tools/tmp"
  # code-server's postinstall runs `npm install` in its bundled VS Code, whose
  # @vscode/ripgrep downloads rg from api.github.com. Without GitHub, seed that
  # package's download cache (in $TMPDIR) with the system's rg instead; the
  # names are those of @vscode/ripgrep 1.15.11 (code-server 4.100.3).
  if ! curl -fsS -m 10 -o /dev/null https://api.github.com/ 2>/dev/null; then
    command -v rg >/dev/null || { echo "GitHub is unreachable: install ripgrep (apt install ripgrep)" >&2; exit 1; }
    mkdir -p "$tools/tmp/vscode-ripgrep-cache-1.15.11" "$tools/rg"
    cp "$(command -v rg)" "$tools/rg/rg"
    tar czf "$tools/tmp/vscode-ripgrep-cache-1.15.11/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" -C "$tools/rg" rg
  fi
  [ -f "$tools/package.json" ] || (cd "$tools" && npm init -y >/dev/null)
  # unsafe_perm: the postinstall refuses to run as root without it;
  # yes: it runs `npx node-gyp`, which must not stop to ask.
  (cd "$tools" && TMPDIR="$tools/tmp" npm_config_unsafe_perm=true npm_config_yes=true \
    npm install --no-audit --no-fund "code-server@$code_server_version" "playwright-core@$playwright_version")
fi
code_server --version

# A new user's home: the login shell puts the release binary on PATH (VS Code
# and code-server take PATH from a login shell, not from their parent).
step "a fresh HOME with stratumc on the login shell's PATH"
rm -rf "$home" "$work/workspace"
mkdir -p "$home/.local/share/code-server/User" "$home/.local/share/code-server/extensions"
printf 'export PATH="%s/target/release:$PATH"\n' "$repo" >"$home/.profile"
# Only to skip the welcome page and telemetry; the extension needs no settings.
printf '{ "workbench.startupEditor": "none", "telemetry.telemetryLevel": "off" }\n' \
  >"$home/.local/share/code-server/User/settings.json"

step "the README's steps in a copy of editors/vscode: npm ci, vsce package, --install-extension"
rm -rf "$work/vscode-extension"
cp -r "$repo/editors/vscode" "$work/vscode-extension"
rm -rf "$work/vscode-extension/node_modules" "$work/vscode-extension"/*.vsix
(cd "$work/vscode-extension" && npm ci --no-audit --no-fund \
  && npx --yes @vscode/vsce --version && npx --yes @vscode/vsce package)
# code-server's own CLI stands in for `code --install-extension`.
code_server --install-extension "$work/vscode-extension/stratumc-0.1.0.vsix"
code_server --list-extensions --show-versions

step "a workspace: a spec with an error and a valid example"
mkdir -p "$work/workspace"
cp "$repo/tests/conformance/refs/step-unknown-path.stratum.yaml" "$work/workspace/broken.stratum.yaml"
cp "$repo/examples/minimal-classifier.stratum.yaml" "$work/workspace/"

step "code-server on 127.0.0.1:$port"
HOME=$home setsid "$tools/node_modules/.bin/code-server" --auth none --bind-addr "127.0.0.1:$port" \
  --disable-telemetry --disable-update-check --disable-workspace-trust \
  "$work/workspace" >"$work/code-server.log" 2>&1 &
server=$!
trap 'kill -- -$server 2>/dev/null || true' EXIT
for _ in $(seq 60); do
  curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null && break
  sleep 1
done
curl -fsS "http://127.0.0.1:$port/healthz"
echo

step "drive it with headless Chromium"
CODE_URL="http://127.0.0.1:$port/" WORKSPACE="$work/workspace" SHOTS="$work" CHROMIUM="$chromium" \
  LOGS_DIR="$home/.local/share/code-server/logs" NODE_PATH="$tools/node_modules" \
  node "$repo/editors/vscode/test/drive.js"
step "done: screenshots in $work"
