#!/usr/bin/env bash
# test_align_analyze.sh — `attnscope analyze --source --target --gold` on an encoder-decoder
# model (tests/cli/align_model.py) over the first pairs of data/align: table encdec_heads
# holds every encoder, decoder and cross-attention head; encoder and decoder statistics
# equal the mean over pairs of `attnscope run --capture stats` (encoder_head_stats,
# decoder_head_stats), cross-attention's entropy, first-token mass and largest weight equal
# a NumPy computation from run's cross_attentions, its AER equals `attnscope align`'s; a
# second analyze does nothing; report and export show the run; a schema version 5
# database is upgraded in place to 7; with --topk each pair's cross-attention top-k equals
# NumPy's from the dense cross_attentions, and the server's topk / topk-all routes serve it
# with kind=cross (400 for a run without cross-attention); errors exit 2 with one line.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
need_sqlite3
PY=/usr/bin/python3
D=$ROOT/data/align
M=$TMP/m
$PY "$ROOT/tests/cli/align_model.py" "$M" || { fail "align_model.py"; exit 1; }
N=5
head -n $N "$D/en-de.en" >"$TMP/s.en"; head -n $N "$D/en-de.de" >"$TMP/s.de"; head -n $N "$D/en-de.align" >"$TMP/s.align"
for i in $(seq 1 $N); do
  "$BIN" run --model "$M" --text "$(sed -n "${i}p" "$TMP/s.en")" --target "$(sed -n "${i}p" "$TMP/s.de")" \
    --capture attn,stats --out "$TMP/p$i.npz" || fail "run pair $i"
done
expect 0 "" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/s.align" --format json --out "$TMP/a.json"
expect 0 "" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/s.align" --db "$TMP/a.db"
sqlite3 -json "$TMP/a.db" "SELECT * FROM encdec_heads ORDER BY kind, layer, head" >"$TMP/rows.json"
$PY - "$TMP" $N <<'PY' && ok "encdec_heads = run's statistics, NumPy cross statistics and align's AER" || fail "encdec_heads values"
import json, sys
import numpy as np
tmp, n = sys.argv[1], int(sys.argv[2])
rows = {(r["kind"], r["layer"], r["head"]): r for r in json.load(open(f"{tmp}/rows.json"))}
assert len(rows) == 2 * 3 + 3 * 3 + 3 * 3, len(rows)
z = [np.load(f"{tmp}/p{i + 1}.npz") for i in range(n)]
cols = ["entropy", "sink", "self", "prev", "next", "dist", "spread", "max"]
for kind, arr in (("encoder", "encoder_head_stats"), ("decoder", "decoder_head_stats")):
    ref = np.mean([zz[arr] for zz in z], axis=0)  # (L, H, 8)
    for (l, h), v in np.ndenumerate(ref[..., 0]):
        r = rows[(kind, l, h)]
        assert r["n_sentences"] == n and r["aer"] is None
        for c, name in enumerate(cols):
            assert abs(r[name] - ref[l, h, c]) < 1e-5, (kind, l, h, name, r[name], ref[l, h, c])
ent, sink, mx = [], [], []
for zz in z:
    A = zz["cross_attentions"].astype(np.float64)  # (L, H, Tt, Ts)
    keep = zz["decoder_attention_mask"] > 0
    A = A[:, :, keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        e = -np.where(A > 0, A * np.log(A), 0).sum(-1)
    ent.append(e.mean(-1)); sink.append(A[..., 0].mean(-1)); mx.append(A.max(-1).mean(-1))
ent, sink, mx = (np.mean(x, axis=0) for x in (ent, sink, mx))
aer = json.load(open(f"{tmp}/a.json"))["aer"]
for l in range(3):
    for h in range(3):
        r = rows[("cross", l, h)]
        assert abs(r["entropy"] - ent[l, h]) < 1e-5 and abs(r["sink"] - sink[l, h]) < 1e-6 and abs(r["max"] - mx[l, h]) < 1e-6, r
        assert r["self"] is None and r["prev"] is None and r["dist"] is None
        assert abs(r["aer"] - aer[l][h]) < 1e-6, (r["aer"], aer[l][h])
        assert abs(1 - (r["hit_sure"] + r["hit_possible"]) / (r["links"] + r["sure"]) - r["aer"]) < 1e-12
PY
expect 0 "" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/s.align" --db "$TMP/a.db"
grep -q "nothing to do" "$TMP/out" && ok "second analyze: nothing to do" || fail "second analyze: $(cat "$TMP/out")"
expect 0 "" -- report --db "$TMP/a.db"
grep -q "^  cross-attention:" "$TMP/out" && grep -q "^    lowest aer " "$TMP/out" && grep -q "^  decoder self-attention:" "$TMP/out" &&
  ok "report: the three kinds and the lowest AER" || fail "report: $(cat "$TMP/out")"
expect 0 "" -- export --db "$TMP/a.db" --out "$TMP/e.json"
$PY -c "
import json, sys; m = json.load(open(sys.argv[1]))['models'][0]; a = json.load(open(sys.argv[2]))['aer']
e = m['encdec_heads']
assert (e['encoder']['layers'], e['decoder']['layers'], e['cross']['layers'], e['cross']['heads']) == (2, 3, 3, 3)
assert all(abs(x - y) < 1e-6 for x, y in zip(e['cross']['columns']['aer'], sum(a, [])))
assert e['encoder']['columns']['aer'] == [None] * 6 and len(e['decoder']['columns']['prev']) == 9
" "$TMP/e.json" "$TMP/a.json" && ok "export: encdec_heads" || fail "export encdec_heads"
# without gold: statistics, no AER; another run in the same database
expect 0 "" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --db "$TMP/a.db" --quiet
[ "$(sqlite3 "$TMP/a.db" "SELECT count(*), count(aer) FROM encdec_heads WHERE run=2")" = "24|0" ] && ok "no gold: no AER" || fail "no gold"
# a schema version 5 database (no encdec_heads) is upgraded in place
cp "$TMP/a.db" "$TMP/v5.db"
sqlite3 "$TMP/v5.db" "DROP TABLE encdec_heads; UPDATE meta SET value='5' WHERE key='schema_version'"
expect 0 "" -- report --db "$TMP/v5.db"
[ "$(sqlite3 "$TMP/v5.db" "SELECT value FROM meta WHERE key='schema_version'; SELECT count(*) FROM encdec_heads; SELECT count(*) FROM topk_cross")" = "7
0
0" ] && ok "version 5 upgraded to 7" || fail "upgrade"
# cross-attention top-k: analyze --topk 4 stores each pair's target rows over source keys in
# topk_cross, equal to NumPy's top-4 of run's dense cross_attentions; the server's topk and
# topk-all routes serve them with kind=cross; kind=cross of a run without cross-attention
# (an SST-2 analysis of models/attnscope-sst2 in the same database) and a bad kind are 400s
expect 0 "" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --db "$TMP/k.db" --topk 4 --quiet
[ "$(sqlite3 "$TMP/k.db" "SELECT json_extract(params, '$.topk'), (SELECT count(*) FROM topk_cross) FROM runs WHERE id=1")" = "4|$((N * 9))" ] &&
  ok "analyze --topk 4: params.topk, a row per pair, decoder layer and head" || fail "topk_cross rows: $(sqlite3 "$TMP/k.db" "SELECT params FROM runs")"
printf 'sentence\tlabel\nthe film was good .\t1\na dull , tired story .\t0\n' >"$TMP/sst.tsv"
expect 0 "" -- analyze --model "$ROOT/models/attnscope-sst2" --sst2 "$TMP/sst.tsv" --db "$TMP/k.db" --explain 0 --topk 2 --threads 1 --quiet
$PY - "$TMP" $N "$BIN" "$M" <<'PY' && ok "topk_cross and the kind=cross routes = NumPy's top-4 of the dense cross-attention; 400s" || fail "cross-attention top-k"
import json, re, sqlite3, struct, subprocess, sys, urllib.error, urllib.request
import numpy as np
tmp, n, binary, model = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
K = 4

def ref(A):
    """NumPy's top-K of each row of A (rows, keys): indices (ties: lower first), weights, rest."""
    ri, rw, rest = np.full((A.shape[0], K), -1), np.zeros((A.shape[0], K), np.float32), np.zeros(A.shape[0])
    for i, row in enumerate(A):
        order = [j for j in np.lexsort((np.arange(row.size), -row.astype(np.float64))) if row[j] > 0][:K]
        ri[i, :len(order)] = order
        rw[i, :len(order)] = row[order]
        rest[i] = row[row > 0].astype(np.float64).sum() - row[order].astype(np.float64).sum()
    return ri, rw, rest

def check(A, ix, w, rest, what):
    ri, rw, rr = ref(A)
    for i in range(A.shape[0]):
        for s in range(K):
            if ix[i][s] != ri[i, s]:  # a near-tie may order either way
                assert ri[i, s] >= 0 and ix[i][s] >= 0 and abs(A[i, ri[i, s]] - A[i, ix[i][s]]) <= 1e-6, (what, i, s, ix[i], ri[i])
        assert np.abs(np.asarray(w[i]) - rw[i]).max() <= 1e-6, (what, i, w[i], rw[i])
        assert abs(rest[i] - rr[i]) <= 1e-6, (what, i, rest[i], rr[i])

db = sqlite3.connect(f"{tmp}/k.db")
dense = [np.load(f"{tmp}/p{s + 1}.npz")["cross_attentions"] for s in range(n)]  # (Ld, H, Tt, Ts)
for sent, l, h, k, nq, nk, blob in db.execute("SELECT sent, layer, head, k, n_query, n_key, rows FROM topk_cross WHERE run=1"):
    A = dense[sent][l, h]
    assert (k, nq, nk) == (K, A.shape[0], A.shape[1]), (k, nq, nk, A.shape)
    rows = [struct.unpack(f"<{K}i{K}ff", blob[i * (8 * K + 4):(i + 1) * (8 * K + 4)]) for i in range(nq)]
    check(A, [r[:K] for r in rows], [r[K:2 * K] for r in rows], [r[2 * K] for r in rows], ("stored", sent, l, h))

srv = subprocess.Popen([binary, "serve", "--model", model, "--db", f"{tmp}/k.db", "--port", "0"], stdout=subprocess.PIPE, text=True)
try:
    base = "http://127.0.0.1:%s/api/v1/db/runs" % re.search(r"listening on http://[^:]+:(\d+)/", srv.stdout.readline()).group(1)
    def get(path):
        try:
            with urllib.request.urlopen(base + path) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
    def tensors(buf):
        h = json.loads(buf[8:8 + struct.unpack("<I", buf[4:8])[0]])
        off = 8 + struct.unpack("<I", buf[4:8])[0]
        return h["meta"], {t["name"]: np.frombuffer(buf[off + t["offset"]:off + t["offset"] + t["nbytes"]], np.float32).reshape(t["shape"]) for t in h["tensors"]}
    for sent in range(n):
        st, buf = get(f"/1/sentences/{sent}/topk-all?kind=cross")
        assert st == 200, (st, buf[:200])
        meta, t = tensors(buf)
        Ld, H, Tt, Ts = dense[sent].shape
        assert (meta["kind"], meta["layers"], meta["heads"], meta["tokens"], meta["keys"], meta["k"]) == ("cross", Ld, H, Tt, Ts, K), meta
        assert t["index"].shape == (Ld, H, Tt, K)
        for l in range(Ld):
            for h in range(H):
                check(dense[sent][l, h], t["index"][l, h].astype(int).tolist(), t["weight"][l, h], t["rest"][l, h], ("topk-all", sent, l, h))
    st, buf = get("/1/sentences/2/topk?kind=cross&layer=2&head=1&query=3")
    row = json.loads(buf)
    assert st == 200 and row["kind"] == "cross" and row["keys"] == dense[2].shape[3], (st, row)
    check(dense[2][2, 1][3:4], [row["index"]], [row["weight"]], [row["rest"]], "topk")
    for path, code, words in [("/2/sentences/0/topk-all?kind=cross", 400, "no cross-attention"),
                              ("/2/sentences/0/topk?kind=cross&layer=0&head=0&query=0", 400, "no cross-attention"),
                              ("/1/sentences/0/topk-all?kind=decoder", 400, "query 'kind'"),
                              ("/1/sentences/0/topk?kind=cross&layer=3&head=0&query=0", 400, "query 'layer'"),
                              ("/1/sentences/0/topk-all", 404, "no top-k row"),
                              ("/1/sentences/9/topk-all?kind=cross", 404, "no cross-attention top-k row")]:
        st, buf = get(path)
        assert st == code and words in json.loads(buf)["error"], (path, st, buf)
    st, buf = get("/2/sentences/0/topk-all")
    assert st == 200 and tensors(buf)[0]["kind"] == "encoder", st
finally:
    srv.terminate()
    srv.wait()
PY
# errors
expect 2 "give --source FILE and --target FILE together" -- analyze --model "$M" --source "$TMP/s.en" --db "$TMP/x.db"
expect 2 "--gold needs --source FILE and --target FILE" -- analyze --model "$M" --conllu "$TMP/s.en" --gold "$TMP/s.align" --db "$TMP/x.db"
expect 2 "do not go with --sst2" -- analyze --model "$M" --sst2 "$TMP/s.en" --source "$TMP/s.en" --target "$TMP/s.de" --db "$TMP/x.db"
expect 2 "not an encoder-decoder model" -- analyze --model "$ROOT/tests/ref/fixtures/models/bert" --source "$TMP/s.en" --target "$TMP/s.de" --db "$TMP/x.db"
head -n 3 "$TMP/s.de" >"$TMP/short.de"
expect 2 "has 5 lines but" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/short.de" --db "$TMP/x.db"
sed '2s/$/ 0-40/' "$TMP/s.align" >"$TMP/bad.align"
expect 2 "bad.align:2: pair 7 '0-40': target index 40 is outside" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/bad.align" --db "$TMP/x.db"
exit $((fails > 0))
