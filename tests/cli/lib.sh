# lib.sh — what the CLI test scripts share; sourced by each (`. "$(dirname "$0")/lib.sh"`)
# after `set -u`. Sets ROOT (the repository), TMP (a temporary folder removed at exit; a
# script that needs more at exit sets its own trap, which replaces this one) and fails
# (the failure count), and defines:
#   ok MSG / fail MSG      print "ok: MSG" / "FAIL: MSG" (fail counts it)
#   need_sqlite3           exits 1 naming the package when the sqlite3 CLI is missing
#   make_marian_tiny DIR   a Marian folder in DIR: the marian_tiny fixture's weights, the
#                          marian_spm fixture's source.spm / target.spm, and its vocab.json
#                          cut to the model's 101 ids (<pad> = 100)
#   expect STATUS PATTERN -- ARGS...
#                          runs "$BIN" ARGS (OMP_NUM_THREADS=1, under `timeout
#                          ${EXPECT_TIMEOUT:-60}` seconds, stdin
#                          from /dev/null), checks the exit status and, for a non-zero
#                          one, that stderr has exactly one line besides warnings and that
#                          it contains PATTERN; a run still going at the timeout fails
# It does not run anything itself.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
need_sqlite3() {
  command -v sqlite3 >/dev/null || { echo "FAIL: sqlite3 CLI missing (make deps installs Debian's sqlite3)"; exit 1; }
}
make_marian_tiny() {
  local d=$1 fx=$ROOT/tests/ref/fixtures
  mkdir -p "$d"
  cp "$fx/models/marian_tiny/config.json" "$fx/models/marian_tiny/model.safetensors" "$fx/marian_spm/source.spm" \
    "$fx/marian_spm/target.spm" "$d/"
  /usr/bin/python3 - "$fx/marian_spm/vocab.json" "$d/vocab.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1], encoding="utf-8"))
cut = {p: i for p, i in v.items() if i < 100}
cut["<pad>"] = 100
json.dump(cut, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
}
expect() {
  local want=$1 pat=$2; shift 3
  OMP_NUM_THREADS=1 timeout "${EXPECT_TIMEOUT:-60}" "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  local got=$?
  if [ "$got" = 124 ]; then
    fail "attnscope $* -> still running after ${EXPECT_TIMEOUT:-60} s"; return
  fi
  if [ "$got" != "$want" ]; then
    fail "attnscope $* -> exit $got, want $want: $(head -c 300 "$TMP/err")"; return
  fi
  if [ "$want" != 0 ]; then
    if ! grep -q -- "$pat" "$TMP/err"; then
      fail "attnscope $* -> stderr lacks '$pat': $(head -c 300 "$TMP/err")"; return
    fi
    if [ "$(grep -vc 'warning' "$TMP/err")" -gt 1 ]; then
      fail "attnscope $* -> error is not one line: $(head -c 600 "$TMP/err")"; return
    fi
  fi
  echo "ok: attnscope $* -> $got"
}
