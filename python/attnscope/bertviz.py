"""bertviz.py — a drop-in for bertviz's head_view and model_view: the same arguments
(attention as a tuple of per-layer [1, H, T, T] arrays, tokens, sentence_b_start,
prettify_tokens, layer / heads, include_layers / include_heads, html_action), drawn by
attnscope's views offline (views.py) instead of bertviz's JavaScript from a CDN.

    from attnscope.bertviz import head_view, model_view
    out = model(**inputs, output_attentions=True)      # any framework
    head_view(out.attentions, tokens)

The arrays may be numpy arrays or anything with .detach() / .numpy() (PyTorch, TF).
An encoder-decoder's encoder_attention, decoder_attention and cross_attention (with
encoder_tokens, decoder_tokens) become one page with an Encoder / Decoder / Cross
selector; cross attention is drawn over the encoder's tokens (A) then the decoder's (B),
its links going from decoder queries to encoder keys.
"""
import re

import numpy as np

from .core import Error
from .views import ViewData, _as_numpy, _show

_SPECIAL = re.compile(r"^(\[[A-Z]+\]|<[^<>\s]+>|<\|[^|]+\|>)$")


def _tokens(tokens, sentence_b_start, prettify_tokens):
    out = []
    for i, t in enumerate(tokens):
        t = str(t)
        text = t.replace("Ġ", " ").replace("▁", " ").replace("</w>", "") if prettify_tokens else t
        seg = 1 if sentence_b_start is not None and i >= sentence_b_start else 0
        raw = text.encode("utf-8")
        out.append({"i": i, "id": -1, "piece": t, "text": text, "bytes": raw.hex(), "start": -1, "end": -1,
                    "type_id": seg, "segment": seg, "special": bool(_SPECIAL.match(t))})
    return out


def _stack(attention, what="attention", square=True):
    """attention (a tuple of per-layer [1, heads, Q, K] arrays, or one array [layers, 1,
    heads, Q, K]) as float32 [layers, heads, Q, K]; Q == K unless square is False."""
    if attention is None:
        raise Error("%s is required (a tuple of per-layer [1, heads, T, T] arrays)" % what)
    layers = list(attention) if isinstance(attention, (list, tuple)) else list(_as_numpy(attention, what))
    arrs = []
    for l, a in enumerate(layers):
        a = _as_numpy(a, "%s[%d]" % (what, l))
        if a.ndim == 4:
            if a.shape[0] != 1:
                raise Error("%s[%d] has batch size %d; give one input (batch size 1)" % (what, l, a.shape[0]))
            a = a[0]
        if a.ndim != 3 or (square and a.shape[1] != a.shape[2]):
            raise Error("%s[%d] must be [1, heads, %s], not %s" % (what, l, "T, T" if square else "T_dec, T_enc",
                                                                   list(a.shape)))
        arrs.append(a)
    if not arrs or any(a.shape != arrs[0].shape for a in arrs):
        raise Error("%s: every layer must have the same [heads, %s] shape" % (what, "T, T" if square else "Q, K"))
    return np.stack(arrs)


def _select(ids, n, what):
    if ids is None:
        return list(range(n))
    ids = [int(i) for i in ids]
    if not ids or any(not 0 <= i < n for i in ids):
        raise Error("%s %s out of range (0..%d)" % (what, ids, n - 1))
    return ids


def _check_tokens(tokens, n, what, name):
    if tokens is None or len(tokens) != n:
        raise Error("%s: %s for %s over %d positions" % (
            name, "missing" if tokens is None else "%d tokens" % len(tokens), what, n))


def _data(attention, tokens, sentence_b_start, prettify_tokens, include_layers, include_heads, causal=False,
          label="bertviz input", what="attention", tokens_name="tokens"):
    a = _stack(attention, what)
    _check_tokens(tokens, a.shape[2], what, tokens_name)
    lay = _select(include_layers, a.shape[0], "include_layers")
    hd = _select(include_heads, a.shape[1], "include_heads")
    a = a[lay][:, hd]
    return ViewData(a, _tokens(tokens, sentence_b_start, prettify_tokens), model=label, causal=causal,
                    layer_ids=lay, head_ids=hd)


def _cross_data(cross_attention, encoder_tokens, decoder_tokens, prettify_tokens, include_layers, include_heads):
    """Cross attention [layers, heads, T_dec, T_enc] as a square view over the encoder's
    tokens (segment A) then the decoder's (segment B): decoder rows hold the cross
    attention over the encoder's columns, every other entry is 0 (the head view's B→A)."""
    c = _stack(cross_attention, "cross_attention", square=False)
    _check_tokens(decoder_tokens, c.shape[2], "cross_attention's queries", "decoder_tokens")
    _check_tokens(encoder_tokens, c.shape[3], "cross_attention's keys", "encoder_tokens")
    lay = _select(include_layers, c.shape[0], "include_layers")
    hd = _select(include_heads, c.shape[1], "include_heads")
    c = c[lay][:, hd]
    Te, Td = c.shape[3], c.shape[2]
    a = np.zeros(c.shape[:2] + (Te + Td, Te + Td), dtype=np.float32)
    a[:, :, Te:, :Te] = c
    toks = list(encoder_tokens) + list(decoder_tokens)
    return ViewData(a, _tokens(toks, Te, prettify_tokens), model="cross: decoder (B) → encoder (A)",
                    layer_ids=lay, head_ids=hd)


def _parts(attention, tokens, sentence_b_start, prettify_tokens, include_layers, include_heads, encoder_attention,
           decoder_attention, cross_attention, encoder_tokens, decoder_tokens):
    """The attention to show: one ViewData, or for an encoder-decoder a list of
    (label, ViewData) for each of encoder, decoder and cross attention given."""
    encdec = {"encoder_attention": encoder_attention, "decoder_attention": decoder_attention,
              "cross_attention": cross_attention}
    if all(v is None for v in encdec.values()):
        for k, v in (("encoder_tokens", encoder_tokens), ("decoder_tokens", decoder_tokens)):
            if v is not None:
                raise Error("%s given without encoder_attention, decoder_attention or cross_attention" % k)
        return _data(attention, tokens, sentence_b_start, prettify_tokens, include_layers, include_heads)
    if attention is not None or tokens is not None:
        raise Error("give either attention and tokens, or encoder_attention / decoder_attention / cross_attention "
                    "with encoder_tokens / decoder_tokens, not both")
    parts = []
    if encoder_attention is not None:
        parts.append(("Encoder", _data(encoder_attention, encoder_tokens, None, prettify_tokens, include_layers,
                                       include_heads, label="encoder", what="encoder_attention",
                                       tokens_name="encoder_tokens")))
    if decoder_attention is not None:
        parts.append(("Decoder", _data(decoder_attention, decoder_tokens, None, prettify_tokens, include_layers,
                                       include_heads, causal=True, label="decoder", what="decoder_attention",
                                       tokens_name="decoder_tokens")))
    if cross_attention is not None:
        parts.append(("Cross", _cross_data(cross_attention, encoder_tokens, decoder_tokens, prettify_tokens,
                                           include_layers, include_heads)))
    return parts


def result_parts(r, layers=None):
    """The parts of an encoder-decoder Result (Model.run with target=): Encoder, Decoder and
    Cross as the drop-in's encoder_attention / decoder_attention / cross_attention make
    them, with the run's own token dicts (the cross part's: the source's, segment 0, then
    the decoder's, segment 1). layers: embed only these layers of each part."""
    for n in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        if getattr(r, n, None) is None:
            raise Error("the run has no %s: run with capture='all' or 'attn'" % n)
    parts = _parts(None, None, None, True, layers, None, r.encoder_attentions[:, None], r.decoder_attentions[:, None],
                   r.cross_attentions[:, None], list(r.encoder_tokens), list(r.decoder_tokens))
    enc, dec = r.tokens, r.decoder_token_dicts

    def seg(ts, s, off):
        return [dict(t, i=off + k, segment=s, type_id=s) for k, t in enumerate(ts)]
    toks = {"Encoder": enc, "Decoder": seg(dec, 0, 0), "Cross": seg(enc, 0, 0) + seg(dec, 1, len(enc))}
    for label, d in parts:
        d.tokens = toks[label]
        d.model = "%s: %s" % (r.model.name, d.model)
        d.text = r.text or ""
    return parts


def _display(v, html_action):
    if html_action == "return":
        return v
    try:
        from IPython.display import display
    except ImportError:
        return v
    display(v)
    return None


def head_view(attention=None, tokens=None, sentence_b_start=None, prettify_tokens=True, layer=None, heads=None,
              encoder_attention=None, decoder_attention=None, cross_attention=None, encoder_tokens=None,
              decoder_tokens=None, include_layers=None, html_action="view"):
    """bertviz.head_view: shows (html_action="view", in IPython) or returns the standalone
    HTML page (html_action="return"). layer and heads use the model's numbering. An
    encoder-decoder's encoder_attention / decoder_attention (per layer [1, H, T, T]) and
    cross_attention ([1, H, T_dec, T_enc]), with encoder_tokens / decoder_tokens, are
    shown with an Encoder / Decoder / Cross selector."""
    d = _parts(attention, tokens, sentence_b_start, prettify_tokens, include_layers, None, encoder_attention,
               decoder_attention, cross_attention, encoder_tokens, decoder_tokens)
    first = d[0][1] if isinstance(d, list) else d
    li = first.layer_ids.index(layer) if layer is not None and layer in first.layer_ids else 0
    hs = None if heads is None else [int(h) for h in heads]
    return _display(_show(d, "head", li, 0, hs, -1, None, html_action, None, None, None, "f16"), html_action)


def model_view(attention=None, tokens=None, sentence_b_start=None, prettify_tokens=True, display_mode="dark",
               encoder_attention=None, decoder_attention=None, cross_attention=None, encoder_tokens=None,
               decoder_tokens=None, include_layers=None, include_heads=None, html_action="view"):
    """bertviz.model_view: every included layer x head as a thumbnail. display_mode is
    accepted and ignored (attnscope's views are drawn on white). Encoder-decoder
    arguments as head_view."""
    d = _parts(attention, tokens, sentence_b_start, prettify_tokens, include_layers, include_heads,
               encoder_attention, decoder_attention, cross_attention, encoder_tokens, decoder_tokens)
    return _display(_show(d, "model", 0, 0, None, -1, None, html_action, None, None, None, "f16"), html_action)
