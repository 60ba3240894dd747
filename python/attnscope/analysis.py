"""analysis.py — corpus analysis (the library's an_analyze / an_import_dir, as `attnscope
analyze` / `import --dir` run them) and a reader of the analysis database (SQLite,
schema in docs/analysis.md, "Store") into lists of dicts and numpy arrays.

The reader opens the database read-only with Python's sqlite3; it writes nothing (a
version-1 database must be upgraded first by `attnscope report --db FILE`).
"""
import ctypes
import json
import os
import sqlite3
import stat
import tempfile
import urllib.parse

import numpy as np

from . import _lib
from ._lib import lib
from .core import Error, Model, _bytes, _check

STORE_SCHEMA_VERSION = 7


def _opts(model=None, sst2=None, conllu=None, limit=0, threads=0, chunk=0, explain=-1, min_rel=0, progress=False,
          quiet=True, precision="f32"):
    if precision not in Model.PRECISIONS:
        raise Error("precision must be 'f32' or 'bf16', not %r" % (precision,))
    return _lib.new(_lib.AnOpts, model_dir=_bytes(model and os.fspath(model), "model"),
                    sst2=_bytes(sst2 and os.fspath(sst2), "sst2"),
                    conllu=_bytes(conllu and os.fspath(conllu), "conllu"),
                    limit=int(limit), threads=int(threads), chunk=int(chunk), explain=int(explain),
                    min_rel=int(min_rel), progress=1 if progress else 0, quiet=1 if quiet else 0,
                    precision=Model.PRECISIONS.index(precision))


def analyze(model, db, sst2=None, conllu=None, limit=0, threads=0, chunk=0, explain=-1, min_rel=0, progress=False,
            quiet=True, precision="f32"):
    """Analyzes the model folder on the corpora (an SST-2 TSV and/or a CoNLL-U file) into the
    database db, exactly as `attnscope analyze` (resumable: a second call continues or does
    nothing). limit: sentences per corpus (0 = all); chunk: sentences per transaction (0 =
    16); explain: sentences with concentration + ablation (-1 = 64); min_rel: instances a
    relation needs (0 = 100); precision: "f32" or "bf16" (a run of its own). Returns db.
    Raises Error with the engine's message."""
    if sst2 is None and conllu is None:
        raise Error("analyze needs sst2 and/or conllu")
    o = _opts(model, sst2, conllu, limit, threads, chunk, explain, min_rel, progress, quiet, precision)
    err = _lib.new(_lib.Error)
    _check(lib().an_analyze(_bytes(os.fspath(db), "db"), ctypes.byref(o), ctypes.byref(err)), err)
    return db


def import_dir(folder, db, limit=0, chunk=0, min_rel=0, progress=False, quiet=True):
    """Imports a folder of NNNN.attention.npy + NNNN.json files (`attnscope import --dir`)."""
    o = _opts(limit=limit, chunk=chunk, min_rel=min_rel, progress=progress, quiet=quiet)
    err = _lib.new(_lib.Error)
    _check(lib().an_import_dir(_bytes(os.fspath(db), "db"), _bytes(os.fspath(folder), "folder"), ctypes.byref(o),
                               ctypes.byref(err)), err)
    return db


def open_db(path):
    """Opens an analysis database read-only (Database). Raises Error when it is missing, not
    a regular file, not an attnscope database or of another schema version."""
    return Database(path)


class Database:
    """An analysis database, read-only. Each method takes a run id (default: the newest
    finished run)."""

    # head_scores and patterns columns read per head (docs/analysis.md, "Store")
    SCORE_COLUMNS = ("importance", "semantic", "syntactic", "syntactic_relation", "syntactic_dir", "cls", "sep",
                     "punct", "self", "prev", "next", "entropy", "entropy_norm", "n_sentences", "n_semantic",
                     "first", "induction", "head_importance", "head_importance_norm", "norm_sink_ratio",
                     "alti_contribution")
    PATTERN_COLUMNS = ("label", "confidence", "concentration", "n_links", "abl_token", "abl_position",
                       "abl_segment", "depends_on")

    def __init__(self, path):
        path = os.fspath(path)
        try:
            st = os.stat(path)
        except OSError as e:
            raise Error("%s: cannot open the analysis database (%s)" % (path, e.strerror)) from None
        if not stat.S_ISREG(st.st_mode):
            raise Error("%s: not a regular file" % path)
        self.path = path
        uri = "file:%s?mode=ro" % urllib.parse.quote(os.path.abspath(path))
        try:
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._db.row_factory = sqlite3.Row
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.Error as e:
            raise Error("%s: not an attnscope analysis database (%s)" % (path, e)) from None
        if row is None or str(row[0]) != str(STORE_SCHEMA_VERSION):
            raise Error("%s: schema version %s, expected %d (upgrade it with `attnscope report --db %s`)" % (
                path, None if row is None else row[0], STORE_SCHEMA_VERSION, path))

    def close(self):
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _rows(self, sql, args=()):
        try:
            return [dict(r) for r in self._db.execute(sql, args)]
        except sqlite3.Error as e:
            raise Error("%s: %s" % (self.path, e)) from None

    @property
    def runs(self):
        """Every run (finished or not) as a dict of the runs table; corpus and params parsed."""
        out = self._rows("SELECT * FROM runs ORDER BY id")
        for r in out:
            for k in ("corpus", "params"):
                if isinstance(r.get(k), str):
                    try:
                        r[k] = json.loads(r[k])
                    except ValueError:
                        pass
        return out

    def _run(self, run):
        runs = {r["id"]: r for r in self.runs}
        if run is None:
            done = [i for i, r in runs.items() if r["status"] == "done"]
            if not done:
                raise Error("%s: no finished run" % self.path)
            run = max(done)
        if run not in runs:
            raise Error("%s: no run %s" % (self.path, run))
        return runs[run]

    def heads(self, run=None):
        """One dict per head (layer, head order): layer, head, the head_scores columns and the
        pattern's (label, confidence, concentration, n_links, abl_*, depends_on); None where a
        head has no row or a value does not apply."""
        r = self._run(run)
        scores = {(x["layer"], x["head"]): x for x in self._rows("SELECT * FROM head_scores WHERE run = ?", (r["id"],))}
        pats = {(x["layer"], x["head"]): x for x in self._rows("SELECT * FROM patterns WHERE run = ?", (r["id"],))}
        out = []
        for layer in range(r["n_layer"]):
            for head in range(r["n_head"]):
                s, p = scores.get((layer, head), {}), pats.get((layer, head), {})
                d = {"layer": layer, "head": head}
                d.update({c: s.get(c) for c in self.SCORE_COLUMNS})
                d.update({("pattern" if c == "label" else c): p.get(c) for c in self.PATTERN_COLUMNS})
                out.append(d)
        return out

    def export(self):
        """The database as `attnscope export` writes it (an_export_db: every finished run's
        per-head results, relations and head-pair distances; reals to 9 significant
        digits), parsed. Raises Error with the engine's message."""
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "heads.json")
            err = _lib.new(_lib.Error)
            _check(lib().an_export_db(_bytes(self.path, "db"), _bytes(out, "out"), ctypes.byref(err)), err)
            with open(out, encoding="utf-8") as f:
                return json.load(f)

    def heads_response(self, run=None):
        """The per-head results of a finished run as the server's GET
        /api/v1/db/runs/{id}/heads gives them (columnar: {"run", "layers", "heads",
        "n_scored", "columns": {field: [L*H values, index layer*H + head]}}), written by the
        library's one writer of that body (store_heads_json, through an_export_db)."""
        r = self._run(run)
        for m in self.export()["models"]:
            if m["run"] == r["id"]:
                return m["heads"]
        raise Error("%s: run %d is not finished (status %s)" % (self.path, r["id"], r["status"]))

    def db_run(self, run=None):
        """Run `run` as the server's GET /api/v1/db/runs lists it (DbRun), with nothing served:
        model, attention and import_dir are None."""
        r = self._run(run)
        c = self._rows("SELECT (SELECT count(*) FROM sentences WHERE run = ?1) AS n_sent, "
                       "(SELECT count(*) FROM rel_totals WHERE run = ?1) AS n_rel, "
                       "(SELECT max(n_semantic) FROM head_scores WHERE run = ?1) AS n_sem", (r["id"],))[0]
        source = r.get("source") or "analyze"
        name = r["model_name"] or ""
        if source == "import" and name.startswith("import:"):
            name = name[7:]
        return {"id": r["id"], "model_name": r["model_name"], "name": os.path.basename(name.rstrip("/")) or name,
                "arch": r["arch"], "layers": r["n_layer"], "heads": r["n_head"], "d_head": r["d_head"],
                "corpus": r["corpus"], "params": r["params"], "version": r["version"], "n_total": r["n_total"],
                "n_done": r["n_done"], "status": r["status"], "created": r["created"], "finished": r["finished"],
                "n_sentences": c["n_sent"], "has_syntactic": (c["n_rel"] or 0) > 0,
                "has_semantic": (c["n_sem"] or 0) > 0, "source": source, "model": None, "attention": None,
                "import_dir": None}

    def head_matrix(self, column, run=None):
        """A numeric per-head column (importance, semantic, ..., confidence) as float64 [L, H];
        NaN where a head has no value."""
        r = self._run(run)
        key = "pattern" if column == "label" else column
        rows = self.heads(r["id"])
        if rows and key not in rows[0]:
            raise Error("unknown head column '%s'" % column)
        m = np.full((r["n_layer"], r["n_head"]), np.nan)
        for d in rows:
            v = d[key]
            if v is not None:
                if isinstance(v, str):
                    raise Error("head column '%s' is not numeric" % column)
                m[d["layer"], d["head"]] = v
        return m

    def head_pairs(self, run=None):
        """The head-pair Jensen-Shannon distances as float64 [L*H, L*H] (index layer*H + head),
        symmetric, diagonal 0, as `attnscope export` writes head_jsd; NaN for a missing pair."""
        r = self._run(run)
        H = r["n_head"]
        n = r["n_layer"] * H
        m = np.full((n, n), np.nan)
        np.fill_diagonal(m, 0.0)
        for x in self._rows("SELECT a_layer, a_head, b_layer, b_head, jsd FROM head_pairs WHERE run = ?", (r["id"],)):
            a, b = x["a_layer"] * H + x["a_head"], x["b_layer"] * H + x["b_head"]
            m[a, b] = m[b, a] = x["jsd"]
        return m

    def sentences(self, run=None):
        """The analysed sentences (sentences table rows) in index order."""
        r = self._run(run)
        return self._rows("SELECT * FROM sentences WHERE run = ? ORDER BY idx", (r["id"],))

    def relations(self, run=None):
        """rel_accuracy rows: relation, dir, layer, head, n, correct, accuracy, baseline, ..."""
        r = self._run(run)
        return self._rows("SELECT * FROM rel_accuracy WHERE run = ? ORDER BY relation, dir, layer, head", (r["id"],))
