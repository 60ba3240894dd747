#!/usr/bin/env bash
# The tools are clients of the library: every #include "..." in src/cli and src/server
# names a header next to the including file (cli.h, reply.h, ...), the server's entry
# point from the CLI (../server/server.h), or the library's public headers
# (attnscope.h, attnscope/*.h) -- never a library-internal header under src/ (the
# build does not put src/ on the tools' include path; this also catches a relative
# path around it). Usage: test_layering.sh [BINARY] (the binary is not used).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
fails=0
for f in "$ROOT"/src/cli/*.[ch] "$ROOT"/src/server/*.[ch]; do
  dir=$(dirname "$f")
  while IFS= read -r inc; do
    case "$inc" in
      attnscope.h | attnscope/*.h | ../server/server.h) continue ;;
      */*) ;;
      *) [ -f "$dir/$inc" ] && continue ;;
    esac
    echo "FAIL: ${f#$ROOT/} includes \"$inc\": the tools may use include/ and their own headers only"
    fails=$((fails + 1))
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
if [ "$fails" -eq 0 ]; then echo "ok: src/cli and src/server include only include/ and their own headers"; fi
exit $((fails > 0))
