"""views.py — the explorer's head, model and neuron views (the Svelte app of web/), the head
overview of an analysis database and the generation view of Model.generate's result, in a
notebook cell or a standalone HTML file, fully offline.

The page is one HTML document: the built web bundle (CMake builds it into
<build>/web-dist; its script and stylesheet are inlined, nothing is fetched) and the run,
embedded as the server's binary tensor container (docs/server.md: "ASTB", JSON header,
data) in base64 inside <script id="attnscope-data" type="application/octet-stream">,
its attention apart, one base64 <script class="attnscope-layer"> element per layer, so
the view is drawn before the browser has read the other layers (standalone_html);
web/src/api/embedded.ts reads it instead of the HTTP API. Attention is embedded as
float16 (what the server sends the head and model views); the neuron view's q, k and
scores as float32 (it prints exact values), and for a rotary model q and k before RoPE.
In a notebook the bundle is shown in an <iframe srcdoc>, so its styles and scripts stay
inside the frame; the run's elements sit beside the frame in the notebook's document,
where the frame reads them (cell_html).

With server="http://127.0.0.1:8080" the views are instead an iframe on a running
`attnscope serve` (for inputs too big to embed); nothing is embedded then. The server's
pages may be framed only by the origins of its --frame-ancestors (e.g. `attnscope serve
--model M --frame-ancestors http://localhost:8888` for Jupyter there).
"""
import base64
import html
import json
import os
import re
import struct
import urllib.parse
import uuid

import numpy as np

from . import _lib
from ._lib import lib
from .core import Error, Result

VIEWS = ("head", "model", "neuron", "overview", "generation")


# ---- the web bundle ---------------------------------------------------------------------

def find_web_dist():
    """The built web front end (a folder with index.html and assets/): $ATTNSCOPE_WEB, else
    web-dist next to libattnscope.so, else <repo>/build*/web-dist, else <repo>/web/dist.
    Raises Error naming where it looked."""
    tried = []
    env = os.environ.get("ATTNSCOPE_WEB")
    cands = [env] if env else []
    if not env:
        try:
            cands.append(os.path.join(os.path.dirname(os.path.abspath(_lib.find_library())), "web-dist"))
        except OSError:
            pass
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        cands += [os.path.join(root, b, "web-dist") for b in ("build", "build-py", "build-release")]
        cands.append(os.path.join(root, "web", "dist"))
    for c in cands:
        tried.append(c)
        if os.path.isfile(os.path.join(c, "index.html")):
            return c
    raise Error("the built web front end was not found (looked at %s); build attnscope with cmake "
                "(it builds web/ into <build>/web-dist) or set ATTNSCOPE_WEB" % ", ".join(tried))


_bundle_cache = {}


def _script_safe(js):
    """js made safe inside an inline <script>: '</script' and '<!--' only occur in string
    literals of the bundle, where '\\x3C' is the same '<'."""
    return re.sub(r"<(?=/script|!--)", r"\\x3C", js, flags=re.I)


def web_bundle():
    """(js, css) of the built front end, read from its index.html's references."""
    dist = find_web_dist()
    index = os.path.join(dist, "index.html")
    key = (dist, os.path.getmtime(index))
    if key not in _bundle_cache:
        text = open(index, encoding="utf-8").read()
        js = re.findall(r'<script[^>]*\ssrc="([^"]+)"', text)
        css = re.findall(r'<link[^>]*rel="stylesheet"[^>]*href="([^"]+)"', text)
        if not js:
            raise Error("%s: no script in the built front end (a notice page? build with npm)" % index)

        def read(ref):
            p = os.path.join(dist, ref.lstrip("/"))
            if not os.path.isfile(p):
                raise Error("%s: missing asset %s" % (index, ref))
            return open(p, encoding="utf-8").read()
        _bundle_cache.clear()
        _bundle_cache[key] = ("\n".join(_script_safe(read(r)) for r in js), "\n".join(read(r) for r in css))
    return _bundle_cache[key]


# ---- the embedded run -------------------------------------------------------------------

def _container(meta, tensors, apart=(), row_scale=0):
    """The binary tensor container of docs/server.md: b"ASTB", uint32 LE header length N, N
    bytes of JSON (space-padded so 8 + N is a multiple of 8), then each tensor 8-aligned.
    A tensor named in `apart` (L, ...) is only described: its entry says "chunks": L (one
    page element per index of its first axis, each nbytes / L bytes) and the container
    holds none of its bytes (offset 0). row_scale (bytes): the u8 tensor given apart is
    scaled per row ("row_scale": true): each element begins with the float32 factors of
    its rows, value = byte * factor, and nbytes counts them."""
    entries, blobs, off = [], [], 0
    for name, a in tensors:
        dt = {np.dtype("<f2"): "f16", np.dtype("<f4"): "f32", np.dtype("u1"): "u8"}[a.dtype]
        entries.append({"name": name, "dtype": dt, "shape": list(a.shape), "offset": off, "nbytes": a.nbytes})
        if dt == "u8":  # value = zero + scale * byte, as the server's u8 (docs/server.md)
            entries[-1].update(scale=1 / 255, zero=0)
        if name in apart:
            entries[-1].update(offset=0, chunks=int(a.shape[0]))
            if row_scale and dt == "u8":
                entries[-1].update(row_scale=True, nbytes=a.nbytes + row_scale)
                del entries[-1]["scale"], entries[-1]["zero"]
            continue
        raw = np.ascontiguousarray(a).tobytes()
        pad = (-len(raw)) % 8
        blobs += [raw, b"\0" * pad]
        off += len(raw) + pad
    head = json.dumps({"version": 1, "meta": meta, "tensors": entries}, ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8")
    head += b" " * ((-(8 + len(head))) % 8)
    return b"ASTB" + struct.pack("<I", len(head)) + head + b"".join(blobs)


def _as_numpy(a, what):
    """a as a float32 numpy array: numpy arrays, lists, or tensors with .detach()/.numpy()."""
    if hasattr(a, "detach"):
        a = a.detach()
    if hasattr(a, "cpu") and not isinstance(a, np.ndarray):
        a = a.cpu()
    if hasattr(a, "numpy") and not isinstance(a, np.ndarray):
        a = a.numpy()
    try:
        return np.asarray(a, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise Error("%s: not an array of numbers (%s)" % (what, e)) from None


class ViewData:
    """What a view embeds: attention [L, H, T, T], the tokens (token dicts), and for the
    neuron view q, k [L, H, T, Dh], scores [L, H, T, T] and the factor on q.k per layer."""

    def __init__(self, attention, tokens, model="", text="", text_b=None, causal=False, queries=None, keys=None,
                 scores=None, scale=None, layer_ids=None, head_ids=None, config=None, kv_group=None,
                 queries_pre_rope=None, keys_pre_rope=None):
        a = _as_numpy(attention, "attention")
        if a.ndim != 4 or a.shape[2] != a.shape[3]:
            raise Error("attention must be [layers, heads, T, T], not %s" % (list(a.shape),))
        L, H, T, _ = a.shape
        if len(tokens) != T:
            raise Error("%d tokens for attention over %d positions" % (len(tokens), T))
        self.attention, self.tokens = a, tokens
        self.model, self.text, self.text_b, self.causal = model, text or "", text_b, bool(causal)
        self.queries, self.keys, self.scores = queries, keys, scores
        self.queries_pre_rope, self.keys_pre_rope = queries_pre_rope, keys_pre_rope
        self.d_head = int(queries.shape[3]) if queries is not None else 0
        self.scale = [float(s) for s in scale] if scale is not None else (
            [1.0 / np.sqrt(self.d_head)] * L if self.d_head else [1.0] * L)
        self.layer_ids = list(layer_ids) if layer_ids is not None else list(range(L))
        self.head_ids = list(head_ids) if head_ids is not None else list(range(H))
        self.config = config or {}
        self.kv_group = [int(g) for g in kv_group] if kv_group is not None else list(range(H))

    def block(self):
        """The run's block as the server describes it (docs/api/api.schema.json, Block), for
        the embedded layers and heads; a model's config gives grouped-query heads, sliding
        windows, soft-caps and the rotary embedding, raw arrays none of them."""
        c = self.config
        slide = c.get("layer_sliding") or []
        win = [int(c.get("sliding_window", 0)) if l < len(slide) and slide[l] else 0 for l in self.layer_ids]
        rope = None
        if c.get("rope_dim"):
            local = c.get("rope_local_theta") or 0.0
            rope = {"dim": c["rope_dim"], "theta": c["rope_theta"], "local_theta": local or None,
                    "layer_theta": [local if (local and w) else c["rope_theta"] for w in win],
                    "scaling": ("none", "linear", "llama3", "yarn", "dynamic", "longrope")[c.get("rope_scaling", 0)],
                    "factor": c.get("rope_factor") if c.get("rope_scaling") else None}
        return {"n_kv_head": int(c.get("n_kv_head") or len(self.head_ids)), "kv_group": self.kv_group,
                "causal": self.causal, "window": win, "scale": self.scale,
                "attn_softcap": float(c.get("attn_softcap", 0.0)), "final_softcap": float(c.get("final_softcap", 0.0)),
                "rope": rope}

    @classmethod
    def from_result(cls, r, layers=None, neuron=False):
        """The view data of a Result: its attentions (every layer and head must be captured,
        or give the subset with layers=[...]), and q, k, scores for the neuron view."""
        if r.attentions is None:
            raise Error("the run has no attentions: run with capture='all' or 'attn'")
        need = [("queries", r.queries), ("keys", r.keys), ("attention_scores", r.attention_scores)] if neuron else []
        for n, a in need:
            if a is None:
                raise Error("the neuron view needs %s: run with capture='all' or 'attn,scores,qkv'" % n)
        lay = np.arange(r.attentions.shape[0]) if layers is None else np.asarray(layers, dtype=int)
        if lay.size == 0 or lay.min() < 0 or lay.max() >= r.attentions.shape[0]:
            raise Error("layers %s: the run has %d captured layers" % (list(lay), r.attentions.shape[0]))
        cfg = r.model.config
        sel = (lambda a: a[lay]) if layers is not None else (lambda a: a)
        pre_q, pre_k = getattr(r, "queries_pre_rope", None), getattr(r, "keys_pre_rope", None)
        return cls(sel(r.attentions), r.tokens, model=r.model.name, text=r.text, text_b=r.text_b,
                   causal=bool(cfg["causal"]),
                   queries=sel(r.queries) if neuron else None, keys=sel(r.keys) if neuron else None,
                   scores=sel(r.attention_scores) if neuron else None, scale=sel(r.score_scale),
                   queries_pre_rope=sel(pre_q) if neuron and pre_q is not None else None,
                   keys_pre_rope=sel(pre_k) if neuron and pre_k is not None else None,
                   layer_ids=[int(r.layers[i]) for i in lay], head_ids=[int(h) for h in r.heads], config=cfg,
                   kv_group=r.kv_group)

    def blob(self, view, layer=0, head=0, heads=None, token=-1, lang=None, dtype="f16", part=None, apart=False):
        """The container of the view (bytes). apart=True: (container, chunks), the attention
        left out of the container and given as one bytes object per layer instead."""
        L, H, T, _ = self.attention.shape
        views = ["head", "model"] + (["neuron"] if self.queries is not None else [])
        if view not in views:
            raise Error("view '%s' needs q, k and scores: use neuron_view()" % view if view == "neuron"
                        else "unknown view '%s' (head, model, neuron)" % view)
        if not 0 <= layer < L:
            raise Error("layer %d out of range (0..%d)" % (layer, L - 1))
        if not 0 <= head < H:
            raise Error("head %d out of range (0..%d)" % (head, H - 1))
        if heads is not None and any(not 0 <= h < H for h in heads):
            raise Error("heads %s out of range (0..%d)" % (list(heads), H - 1))
        block = self.block()
        run = {"id": "embedded", "model": self.model, "arch": self.config.get("arch", "bert"),
               "model_type": self.config.get("model_type", ""), "cached": False, "text": self.text,
               "text_b": self.text_b, "ids": None, "causal": self.causal,
               "sizes": {"tokens": T, "layers": L, "heads": H, "kv_heads": block["n_kv_head"],
                         "d_model": int(self.config.get("d_model", 0)), "d_head": self.d_head},
               "block": block, "tokens": self.tokens, "warning": None}
        meta = {"run": run, "view": view, "views": views, "layer": int(layer), "head": int(head),
                "heads": None if heads is None else [int(h) for h in heads], "token": int(token),
                "scale": self.scale, "layer_ids": self.layer_ids, "head_ids": self.head_ids, "lang": lang,
                "part": part,
                "qk": {"kv_group": block["kv_group"], "window": block["window"], "rope": block["rope"] is not None,
                       "softcap": block["attn_softcap"]}}
        if dtype not in ("f16", "f32", "u8", "u8row"):
            raise Error("dtype must be f16, f32, u8 or u8row, not '%s'" % dtype)
        rows = None
        if dtype == "u8":  # probabilities in [0, 1] as bytes: steps of 1/255
            att = np.rint(np.clip(self.attention, 0, 1) * 255).astype("u1")
        elif dtype == "u8row":  # bytes per query row: value = byte * rows[l, h, i], rows = row max / 255
            mx = self.attention.max(axis=-1, keepdims=True)
            mx = np.where(mx > 0, mx, 1).astype(np.float32)
            att = np.rint(np.clip(self.attention / mx, 0, 1) * 255).astype("u1")
            rows = (mx[..., 0] / 255).astype("<f4")
            if not apart:
                raise Error("dtype 'u8row' is written in per-layer elements only")
        else:
            att = self.attention.astype("<f2" if dtype == "f16" else "<f4")
        tensors = [("attention", att)]
        if self.queries is not None:
            tensors += [("q", np.asarray(self.queries, "<f4")), ("k", np.asarray(self.keys, "<f4")),
                        ("scores", np.asarray(self.scores, "<f4"))]
            if self.queries_pre_rope is not None and self.keys_pre_rope is not None:
                tensors += [("q_pre_rope", np.asarray(self.queries_pre_rope, "<f4")),
                            ("k_pre_rope", np.asarray(self.keys_pre_rope, "<f4"))]
        if not apart:
            return _container(meta, tensors)
        if rows is None:
            return _container(meta, tensors, apart=("attention",)), [np.ascontiguousarray(x).tobytes() for x in att]
        # each layer: its row factors (H, T) float32, then its bytes (H, T, T)
        c = _container(meta, tensors, apart=("attention",), row_scale=rows.nbytes)
        return c, [rows[l].tobytes() + np.ascontiguousarray(att[l]).tobytes() for l in range(L)]


# ---- the page ---------------------------------------------------------------------------

def _part_blob(label, d, view, layer=0, head=0, heads=None, **kw):
    """One part of a page of several (an encoder-decoder's encoder, decoder and cross
    attention): the layer, head and heads asked for, where the part has them."""
    L, H = d.attention.shape[:2]
    hs = None if heads is None else [h for h in heads if 0 <= h < H] or None
    return d.blob(view, layer=min(layer, L - 1), head=min(head, H - 1), heads=hs, part=label, **kw)


_LAYER_TAG = '<script type="application/octet-stream" class="attnscope-layer" data-part="%d" data-layer="%d">%s</script>\n'


def _page_parts(data, view, title=None, **kw):
    """The pieces of a page (see standalone_html): (head, containers, first, js, rest): the
    document up to <div id="app"> as (before, after) the end of <head>, the containers'
    elements, the shown layer's element, the bundle's script and the other layers' elements."""
    js, css = web_bundle()
    first, rest = "", []
    if isinstance(data, (OverviewData, GenerationData)):
        blobs, name = [data.blob(view, **kw)], data.model or "attention"
    else:
        runs = data if isinstance(data, list) else [(None, data)]
        name = " / ".join(label for label, _ in runs) if isinstance(data, list) else (data.model or "attention")
        blobs = []
        for p, (label, d) in enumerate(runs):
            b, chunks = (_part_blob(label, d, view, apart=True, **kw) if isinstance(data, list)
                         else d.blob(view, apart=True, **kw))
            blobs.append(b)
            shown = json.loads(b[8:8 + struct.unpack("<I", b[4:8])[0]])["meta"]["layer"]
            for l in sorted(range(len(chunks)), key=lambda l: (abs(l - shown), l)):
                tag = _LAYER_TAG % (p, l, base64.b64encode(chunks[l]).decode("ascii"))
                if p == 0 and l == shown:
                    first = tag
                else:
                    rest.append(tag)
    tags = ["<script %s type=\"application/octet-stream\">%s</script>\n" % (
        "id=\"attnscope-data\"" if i == 0 else "class=\"attnscope-data-part\"", base64.b64encode(b).decode("ascii"))
        for i, b in enumerate(blobs)]
    title = title or "attnscope %s view: %s" % (view, name)
    head = ("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<title>%s</title>\n<style>\n%s\n</style>\n" % (html.escape(title), css),
            "</head>\n<body>\n<div id=\"app\"></div>\n")
    script = "<script type=\"module\" async>\n%s\n</script>\n" % js
    return head, "".join(tags), first, script, "".join(rest)


def standalone_html(data, view, title=None, **kw):
    """The whole page: bundle and run inlined; opens no connection. data: a ViewData or
    OverviewData, or a list of (label, ViewData) shown with a selector (the first in
    #attnscope-data, the others in .attnscope-data-part elements).

    The page is drawn while the browser still parses it: each run's attention is one
    <script class="attnscope-layer" data-part=P data-layer=L> element per layer. The
    containers, the layer shown first and the bundle (an async module: it runs as soon
    as the parser yields, not at the end of the document) come first; the other layers
    follow, nearest the shown one first, and become selectable as they arrive
    (web/src/api/embedded.ts)."""
    head, tags, first, script, rest = _page_parts(data, view, title, **kw)
    return head[0] + head[1] + tags + first + script + rest + "</body>\n</html>\n"


def cell_html(data, view, height, title=None, **kw):
    """A notebook cell's output: the page's bundle in an <iframe srcdoc> (its styles and
    scripts stay in the frame), the run's elements beside it in the notebook's own
    document, in a <div id=KEY> that the frame reads (<meta name="attnscope-data-from"
    content=KEY>; a srcdoc frame has the notebook's origin). So the notebook parses the
    data once, as raw text, instead of inside an attribute and then again in the frame;
    the containers and the shown layer come before the frame, the other layers after it."""
    head, tags, first, script, rest = _page_parts(data, view, title, **kw)
    key = "attnscope-%s" % uuid.uuid4().hex
    page = head[0] + "<meta name=\"attnscope-data-from\" content=\"%s\">\n" % key + head[1] + script + "</body>\n</html>\n"
    return ('<div class="attnscope-cell" id="%s">\n<div hidden>\n%s%s</div>\n<iframe srcdoc="%s" '
            'style="width:100%%;height:%dpx;border:0" title="attnscope %s view"></iframe>\n<div hidden>\n%s</div>\n'
            '</div>') % (key, tags, first, html.escape(page, quote=True), height, view, rest)


class OverviewData:
    """What the head overview embeds: one finished analysis run of a database (as GET
    /api/v1/db/runs lists it) and its per-head scores (as GET .../heads gives them). No
    tensor: the page's container holds only this meta."""

    def __init__(self, db, run=None):
        from .analysis import Database
        d = db if isinstance(db, Database) else Database(db)
        try:
            self.run = d.db_run(run)
            self.heads = d.heads_response(self.run["id"])
            self.db = os.path.basename(d.path)
        finally:
            if d is not db:
                d.close()
        self.model = self.run["name"]

    def blob(self, view, layer=0, head=0, lang=None):
        L, H = self.heads["layers"], self.heads["heads"]
        if not 0 <= layer < L:
            raise Error("layer %d out of range (0..%d)" % (layer, L - 1))
        if not 0 <= head < H:
            raise Error("head %d out of range (0..%d)" % (head, H - 1))
        meta = {"view": "overview", "db": self.db, "run": self.run, "heads": self.heads, "layer": int(layer),
                "head": int(head), "lang": lang}
        return _container(meta, [])


class GenerationData:
    """What the generation view embeds: a Generation (generation.py) as the server's generate
    route replies it (docs/server.md, POST /api/v1/generate): meta GenerateMeta and tensors
    attention, cross_attention (encoder-decoder models), beam_attention and
    beam_cross_attention (beam search returning several), all float32."""

    def __init__(self, g):
        self.g = g
        self.model = g.model.name

    def blob(self, view, layer=0, head=0, lang=None):
        g = self.g
        S, L, H, T = g.attentions.shape
        if not 0 <= layer < L:
            raise Error("layer %d out of range (0..%d)" % (layer, L - 1))
        if not 0 <= head < H:
            raise Error("head %d out of range (0..%d)" % (head, H - 1))
        seq = lambda h: dict(ids=h.ids.tolist(), generated_ids=h.generated_ids.tolist(), tokens=h.tokens)
        meta = dict(seq(g), view="generation", layer=int(layer), head=int(head), lang=lang, model=self.model,
                    prompt_length=g.prompt_length, steps=S, layers=L, heads=H, encoder_decoder=g.encoder_decoder)
        meta.update(temperature=0.0, top_k=0, seed=0, stop_at_eos=False, beams=1)
        meta.update(g.options)
        tensors = [("attention", g.attentions)]
        if g.encoder_decoder:
            meta.update(source_ids=g.source_ids.tolist(), source_tokens=g.source_tokens)
            tensors.append(("cross_attention", g.cross_attentions))
        if g.probs is not None:  # greedy and sampled: each step's probabilities, as the route's meta
            meta["probs"] = g.probs.tolist()
            if g.top_ids is not None:
                meta["candidates"] = [[dict(id=int(i), text=_lib.take_string(lib().as_model_token_text(g.model._ptr, int(i)))
                                            or "", prob=float(p)) for i, p in zip(ids, ps) if i >= 0]
                                      for ids, ps in zip(g.top_ids, g.top_probs)]
        if g.score is not None:
            meta["hypotheses"] = [dict(seq(h), score=h.score, sum_logprobs=h.sum_logprobs) for h in g.hypotheses]
        if len(g.hypotheses) > 1:  # every hypothesis' rows, zero after its end (the route's beam_*)
            P, R = g.prompt_length, len(g.hypotheses)
            Tmax = max(len(h.ids) for h in g.hypotheses)
            rows = np.zeros((R, Tmax - P, L, H, Tmax), np.float32)
            xrows = np.zeros((R, Tmax - P, L, H, len(g.source_ids)), np.float32) if g.encoder_decoder else None
            for r, h in enumerate(g.hypotheses):
                rows[r, :h.steps, :, :, :len(h.ids)] = h.attentions
                if xrows is not None:
                    xrows[r, :h.steps] = h.cross_attentions
            tensors.append(("beam_attention", rows))
            if xrows is not None:
                tensors.append(("beam_cross_attention", xrows))
        return _container(meta, [(n, np.ascontiguousarray(a, dtype=np.float32)) for n, a in tensors])


class View:
    """A view of one run: shown by Jupyter (_repr_html_: an <iframe srcdoc> holding the
    standalone page, or an iframe on a running server), html() the standalone page,
    save(path) writes it."""

    def __init__(self, view, data=None, server=None, server_query=None, height=None, **kw):
        self.view, self.data, self.server, self.kw = view, data, server, kw
        self._query = server_query
        if isinstance(data, OverviewData):  # the controls, then one 64 px row per layer
            self.height = height or min(1000, 140 + 64 * data.heads["layers"])
        elif isinstance(data, GenerationData):  # the strips, then the grid's 40 px rows
            self.height = height or min(1000, 300 + 40 * data.g.attentions.shape[1])
        else:
            T = _tokens_of(data) if data is not None else 32
            self.height = height or min(900, 260 + 18 * T)
        self._html = None

    def html(self):
        """The standalone HTML document (str)."""
        if self.server:
            raise Error("a server view has no standalone page (it shows %s)" % self.server)
        if self._html is None:
            self._html = standalone_html(self.data, self.view, **self.kw)
        return self._html

    def save(self, path):
        """Writes the standalone page to path; returns path."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.html())
        return path

    def url(self):
        return "%s/?%s" % (self.server.rstrip("/"), urllib.parse.urlencode(self._query))

    def _repr_html_(self):
        if self.server:
            u = html.escape(self.url())
            return ('<iframe src="%s" style="width:100%%;height:%dpx;border:1px solid #ddd" '
                    'title="attnscope %s view"></iframe>\n<p style="font-size:12px;color:#666">'
                    '<a href="%s" target="_blank" rel="noopener">open in a new tab</a> (an empty frame: start the '
                    'server with <code>--frame-ancestors</code> naming this notebook\'s origin)</p>') % (
                        u, max(self.height, 700), self.view, u)
        return cell_html(self.data, self.view, self.height, **self.kw)

    def __repr__(self):
        if isinstance(self.data, GenerationData):
            return "<attnscope generation view (%r)>" % (self.data.g,)
        where = self.server or ("run %d of %s" % (self.data.run["id"], self.data.db) if isinstance(
            self.data, OverviewData) else "%d tokens embedded" % _tokens_of(self.data))
        return "<attnscope %s view (%s)>" % (self.view, where)


def _tokens_of(data):
    """The most tokens of a ViewData or of a list of (label, ViewData)."""
    return max(d.attention.shape[2] for _, d in data) if isinstance(data, list) else data.attention.shape[2]


def _server_query(r, view, layer, head, token):
    if not isinstance(r, Result) or r.text is None:
        raise Error("server= shows a run of text (Model.run), not of ids or raw arrays")
    q = {"model": r.model.name, "text": r.text, "view": view, "layer": layer, "head": head}
    if r.text_b:
        q["text_b"] = r.text_b
    if r.encoder_decoder:  # the decoder's input: the target text, else the decoder input ids
        q["target"] = r.target if r.target is not None else ",".join(str(int(i)) for i in r.decoder_input_ids)
    if token >= 0:
        q["token"] = token
    return q


def _kind_view_data(r, kind, layers):
    """The neuron view's data of one self-attention kind of an encoder-decoder Result: the
    encoder's (over the source tokens) or the decoder's (causal, over the decoder's input),
    its attentions, queries, keys and scores. Every layer of these families has the same
    scale on q.k (BART, mBART, Marian: Dh^-0.5; T5: 1), the run's first. Cross-attention
    (queries and keys of two sequences) is not embedded: attnscope serve shows it."""
    if kind not in ("encoder", "decoder"):
        raise Error("neuron_view kind='%s': an encoder-decoder run's neuron view embeds kind='encoder' or 'decoder' "
                    "(cross-attention's: use attnscope serve)" % kind)
    arr = {n: getattr(r, "%s_%s" % (kind, n), None) for n in ("attentions", "queries", "keys", "attention_scores")}
    for n, a in arr.items():
        if a is None:
            raise Error("the neuron view needs %s_%s: run with capture='all' or 'attn,scores,qkv'" % (kind, n))
    L = arr["attentions"].shape[0]
    lay = np.arange(L) if layers is None else np.asarray(layers, dtype=int)
    if lay.size == 0 or lay.min() < 0 or lay.max() >= L:
        raise Error("layers %s: the run's %s has %d layers" % (list(lay), kind, L))
    return ViewData(arr["attentions"][lay], r.tokens if kind == "encoder" else r.decoder_token_dicts,
                    model="%s: %s" % (r.model.name, kind), text=r.text, causal=kind == "decoder",
                    queries=arr["queries"][lay], keys=arr["keys"][lay], scores=arr["attention_scores"][lay],
                    scale=[float(r.score_scale[0])] * lay.size, layer_ids=[int(l) for l in lay],
                    head_ids=[int(h) for h in r.heads], config=r.model.config, kv_group=r.kv_group)


def _show(r, view, layer, head, heads, token, layers, html_action, server, lang, height, dtype, kind="encoder"):
    if html_action not in ("view", "return"):
        raise Error("html_action must be 'view' or 'return', not '%s'" % html_action)
    if server:
        if html_action == "return":
            raise Error("html_action='return' needs the embedded page, not server=")
        q = _server_query(r, view, layer, head, token)
        if view == "neuron" and r.encoder_decoder and kind != "encoder":
            q["kind"] = kind
        return View(view, server=server, server_query=q, height=height)
    if isinstance(r, Result) and r.encoder_decoder and view == "neuron":
        r = _kind_view_data(r, kind, layers)
    elif isinstance(r, Result) and r.encoder_decoder:  # Encoder / Decoder / Cross parts, as the bertviz drop-in's
        from .bertviz import result_parts
        r = result_parts(r, layers)
    data = r if isinstance(r, (ViewData, list)) else ViewData.from_result(r, layers=layers, neuron=view == "neuron")
    v = View(view, data, height=height, layer=layer, head=head, heads=heads, token=token, lang=lang, dtype=dtype)
    return v.html() if html_action == "return" else v


def head_view(r, layer=0, heads=None, token=-1, layers=None, html_action="view", server=None, lang=None, height=None,
              dtype="f16"):
    """bertviz's head view of run r (a Result with attentions): returns a View (Jupyter shows
    it), or with html_action="return" the standalone HTML page (str). layer: the layer shown
    first; heads: the heads shown (None = all); token: a pinned query; layers: embed only
    these layers (renumbered 0..); server: show a running `attnscope serve` instead (started
    with --frame-ancestors naming the notebook's origin);
    dtype: attention as "f16" (default), "f32", "u8" (steps of 1/255: half the size of
    f16, but near-uniform rows of diffuse heads tie) or "u8row" (bytes scaled by each
    query row's largest weight: the size of u8, steps of max/255 per row)."""
    return _show(r, "head", layer, 0, heads, token, layers, html_action, server, lang, height, dtype)


def model_view(r, layer=0, head=0, layers=None, html_action="view", server=None, lang=None, height=None, dtype="f16"):
    """bertviz's model view of run r: every layer x head as a thumbnail (click one to open it
    large); (layer, head) is the selected head, which the neuron view tab shows. Arguments
    as head_view."""
    return _show(r, "model", layer, head, None, -1, layers, html_action, server, lang, height, dtype)


def neuron_view(r, layer=0, head=0, token=-1, layers=None, html_action="view", server=None, lang=None, height=None,
                dtype="f16", kind="encoder"):
    """bertviz's neuron view of run r (needs queries, keys and attention_scores: capture
    'all'): q, k, q x k, the scores and the softmax of one query. It embeds q, k and scores
    as float32, by default of the layer shown only (layers=None: [layer], shown as layer 0;
    give layers=[...] to embed more). An encoder-decoder run shows the self-attention of
    kind "encoder" or "decoder" (cross-attention: server=). Arguments as head_view."""
    if layers is None and not server and not isinstance(r, ViewData):
        layers, layer = [layer], 0
    return _show(r, "neuron", layer, head, None, token, layers, html_action, server, lang, height, dtype, kind)


def overview(db, run=None, layer=0, head=0, html_action="view", lang=None, height=None):
    """Dodrio's head overview of an analysis database (a path or a Database): every layer x
    head of a finished run (run=None: the newest) as a glyph coloured by its syntactic and
    semantic scores and sized by importance, with the exact scores in a tooltip, sorting
    and filtering; (layer, head) is the head selected first. Returns a View (Jupyter shows
    it), or with html_action="return" the standalone HTML page (str). The page embeds the
    run and its per-head results only (a few kB per head), not the database."""
    if html_action not in ("view", "return"):
        raise Error("html_action must be 'view' or 'return', not '%s'" % html_action)
    v = View("overview", OverviewData(db, run), height=height, layer=layer, head=head, lang=lang)
    return v.html() if html_action == "return" else v


def generation_view(g, layer=0, head=0, html_action="view", lang=None, height=None):
    """The explorer's generation view of a Generation (Model.generate) in the notebook: step
    through the generated tokens and see which tokens before each one (and, for an
    encoder-decoder model, which source tokens) its choosing position attended to, every
    head at once in a grid; beam hypotheses ranked by score, each with its own rows.
    (layer, head) is the head shown first. Returns a View (Jupyter shows it), or with
    html_action="return" the standalone HTML page (str). The rows are embedded as float32,
    as the server's generate route sends them."""
    if html_action not in ("view", "return"):
        raise Error("html_action must be 'view' or 'return', not '%s'" % html_action)
    from .generation import Generation
    if not isinstance(g, Generation):
        raise Error("generation_view takes an attnscope.Generation (Model.generate), not %s" % type(g).__name__)
    v = View("generation", GenerationData(g), height=height, layer=layer, head=head, lang=lang)
    return v.html() if html_action == "return" else v
