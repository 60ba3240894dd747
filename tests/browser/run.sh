#!/usr/bin/env bash
# run.sh — runs one browser test file of the explorer (`make deps node-deps` install
# Debian's chromium and playwright-core from the pinned lockfile here); it drives
# the real `attnscope serve` with it.
# Usage: bash tests/browser/run.sh path/to/attnscope [TEST.mjs]  (default explorer.test.mjs)
set -euo pipefail
BIN=${1:?usage: run.sh path/to/attnscope}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x /usr/bin/chromium ] || { echo "FAIL: /usr/bin/chromium missing (make deps installs Debian's chromium)"; exit 1; }
[ -d "$HERE/node_modules/playwright-core" ] || { echo "FAIL: playwright-core missing in tests/browser (make node-deps installs it)"; exit 1; }
ATTNSCOPE_BIN=$(realpath "$BIN") exec node --test --test-reporter=spec "$HERE/${2:-explorer.test.mjs}"
