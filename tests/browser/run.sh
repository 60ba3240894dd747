#!/usr/bin/env bash
# run.sh — runs the browser tests of the explorer: installs what they need
# (Debian's chromium when missing, playwright-core from the pinned lockfile here),
# then drives the real `attnscope serve` with explorer.test.mjs.
# Usage: bash tests/browser/run.sh path/to/attnscope [TEST.mjs]  (default explorer.test.mjs;
#        issue 6 passes dodrio.test.mjs)
set -euo pipefail
BIN=${1:?usage: run.sh path/to/attnscope}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ ! -x /usr/bin/chromium ]; then
  echo "installing Debian package chromium"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
if [ ! -d "$HERE/node_modules/playwright-core" ] || [ "$HERE/package-lock.json" -nt "$HERE/node_modules" ]; then
  echo "installing npm packages (tests/browser)"
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error && touch node_modules)
fi
ATTNSCOPE_BIN=$(realpath "$BIN") exec node --test --test-reporter=spec "$HERE/${2:-explorer.test.mjs}"
