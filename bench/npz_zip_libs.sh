#!/usr/bin/env bash
# npz_zip_libs.sh — measures attnscope's own ZIP writer and reader (src/io/npz.c,
# npz_read.c) against Debian's libzip and minizip: speed and peak memory writing and
# reading a BERT-base capture at 512 tokens, what each does with hostile archives, and
# opening an archive of a million entries (bench/npz_zip_libs.c says what each mode
# does). The figures are in the header comments of npz.c and npz_read.c.
# Usage: bench/npz_zip_libs.sh BUILD_DIR [BIG=1 for the 5.4 GB zip64 write too].
# Needs: apt-get install libzip-dev libminizip-dev (not in `make deps`: a one-off
# measurement), python3-numpy. Writes into a temporary folder under $TMPDIR.
set -eu
B=${1:?usage: npz_zip_libs.sh BUILD_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pkg-config --exists libzip minizip || { echo "npz_zip_libs: needs libzip-dev and libminizip-dev"; exit 77; }
cc -O2 -std=gnu11 -I"$ROOT/src" -I"$ROOT/include" "$ROOT/bench/npz_zip_libs.c" "$B/libattnscope.a" \
  $(pkg-config --libs libzip minizip) -lz -lm -lpthread -o "$T/zl"
echo "== write, 3 runs (best of each is what counts; the disk is shared)"
for r in 1 2 3; do for m in own minizip libzip; do "$T/zl" write-$m "$T/cap_$m.npz"; done; done
"$T/zl" write-libzip-copy "$T/cap_copy.npz"
/usr/bin/python3 - "$T" <<'PY'
import numpy as np, sys
o = np.load(sys.argv[1] + "/cap_own.npz")
for m in ("minizip", "libzip", "copy"):
    z = np.load(f"{sys.argv[1]}/cap_{m}.npz")
    assert sorted(z.files) == sorted(o.files) and all((z[k] == o[k]).all() for k in o.files), m
print("numpy.load: the three archives hold the same arrays")
PY
echo "== read the 151 MB attentions entry, 3 runs"
for r in 1 2 3; do for m in own minizip libzip; do "$T/zl" read-$m "$T/cap_$m.npz"; done; done
rm -f "$T"/cap_*.npz
echo "== hostile archives"
/usr/bin/python3 - "$T" <<'PY'
import io, struct, sys, warnings, zipfile
import numpy as np
warnings.simplefilter("ignore")
d = sys.argv[1]
def npy(a):
    b = io.BytesIO(); np.save(b, a); return b.getvalue()
good, other = npy(np.arange(6, dtype="<f4").reshape(2, 3)), npy(np.full((2, 3), 7, dtype="<f4"))
def zf(entries, method=zipfile.ZIP_STORED):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", method) as z:
        for n, x in entries: z.writestr(n, x)
    return bytearray(b.getvalue())
open(f"{d}/dup.npz", "wb").write(zf([("attentions.npy", good), ("attentions.npy", other)]))
t = zf([("attentions.npy", good)]); t += b"GARBAGE-AFTER-END"; open(f"{d}/trailing.npz", "wb").write(t)
t = zf([("attentions.npy", good)]); struct.pack_into("<H", t, 8, 8); open(f"{d}/local_method.npz", "wb").write(t)
t = zf([("attentions.npy", good)]); t[30] = ord("X"); open(f"{d}/local_name.npz", "wb").write(t)
open(f"{d}/bomb.npz", "wb").write(zf([("attentions.npy", npy(np.zeros((4096, 4096), dtype="<f4")))], zipfile.ZIP_DEFLATED))
t = zf([("attentions.npy", good)]); e = t.rfind(b"PK\x05\x06"); cd = struct.unpack_from("<I", t, e + 16)[0]
struct.pack_into("<I", t, cd + 42, cd); open(f"{d}/offset.npz", "wb").write(t)
with zipfile.ZipFile(f"{d}/many.npz", "w") as z:
    for i in range(1000000): z.writestr("a%07d.npy" % i, b"")
PY
for f in dup trailing local_method local_name bomb offset; do
  "$T/zl" hostile "$T/$f.npz"
  printf '%-16s own:     ' "$f.npz"; "$T/zl" read-own "$T/$f.npz" 2>&1 | sed "s|$T/||" || true
done
echo "== an archive of 1,000,000 entries"
"$T/zl" many libzip "$T/many.npz"; "$T/zl" many minizip "$T/many.npz"
/usr/bin/time -f "own: refused in %e s, peak RSS %M KB" "$T/zl" read-own "$T/many.npz" || true
if [ "${BIG:-0}" = 1 ]; then
  echo "== 5.4 GB archive (zip64)"
  for m in own minizip; do BIG=1 "$T/zl" write-$m "$T/big_$m.npz"; "$T/zl" read-own "$T/big_$m.npz"; rm -f "$T/big_$m.npz"; done
fi
