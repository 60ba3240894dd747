"""bertviz.py — a drop-in for bertviz's head_view and model_view: the same arguments
(attention as a tuple of per-layer [1, H, T, T] arrays, tokens, sentence_b_start,
prettify_tokens, layer / heads, include_layers / include_heads, html_action), drawn by
attnscope's views offline (views.py) instead of bertviz's JavaScript from a CDN.

    from attnscope.bertviz import head_view, model_view
    out = model(**inputs, output_attentions=True)      # any framework
    head_view(out.attentions, tokens)

The arrays may be numpy arrays or anything with .detach() / .numpy() (PyTorch, TF).
Encoder-decoder arguments (encoder_attention, ...) are refused with an Error.
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


def _stack(attention):
    if attention is None:
        raise Error("attention is required (a tuple of per-layer [1, heads, T, T] arrays)")
    layers = list(attention) if isinstance(attention, (list, tuple)) else list(_as_numpy(attention, "attention"))
    arrs = []
    for l, a in enumerate(layers):
        a = _as_numpy(a, "attention[%d]" % l)
        if a.ndim == 4:
            if a.shape[0] != 1:
                raise Error("attention[%d] has batch size %d; give one input (batch size 1)" % (l, a.shape[0]))
            a = a[0]
        if a.ndim != 3 or a.shape[1] != a.shape[2]:
            raise Error("attention[%d] must be [1, heads, T, T], not %s" % (l, list(a.shape)))
        arrs.append(a)
    if not arrs or any(a.shape != arrs[0].shape for a in arrs):
        raise Error("attention: every layer must have the same [heads, T, T] shape")
    return np.stack(arrs)


def _refuse(**kw):
    for k, v in kw.items():
        if v is not None:
            raise Error("%s: encoder-decoder attention is not supported by attnscope's views" % k)


def _select(ids, n, what):
    if ids is None:
        return list(range(n))
    ids = [int(i) for i in ids]
    if not ids or any(not 0 <= i < n for i in ids):
        raise Error("%s %s out of range (0..%d)" % (what, ids, n - 1))
    return ids


def _data(attention, tokens, sentence_b_start, prettify_tokens, include_layers, include_heads):
    a = _stack(attention)
    if tokens is None or len(tokens) != a.shape[2]:
        raise Error("tokens: %s for attention over %d positions" % (
            "missing" if tokens is None else "%d tokens" % len(tokens), a.shape[2]))
    lay = _select(include_layers, a.shape[0], "include_layers")
    hd = _select(include_heads, a.shape[1], "include_heads")
    a = a[lay][:, hd]
    return ViewData(a, _tokens(tokens, sentence_b_start, prettify_tokens), model="bertviz input",
                    layer_ids=lay, head_ids=hd)


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
    HTML page (html_action="return"). layer and heads use the model's numbering."""
    _refuse(encoder_attention=encoder_attention, decoder_attention=decoder_attention,
            cross_attention=cross_attention, encoder_tokens=encoder_tokens, decoder_tokens=decoder_tokens)
    d = _data(attention, tokens, sentence_b_start, prettify_tokens, include_layers, None)
    li = d.layer_ids.index(layer) if layer is not None and layer in d.layer_ids else 0
    hs = None if heads is None else [int(h) for h in heads]
    return _display(_show(d, "head", li, 0, hs, -1, None, html_action, None, None, None, "f16"), html_action)


def model_view(attention=None, tokens=None, sentence_b_start=None, prettify_tokens=True, display_mode="dark",
               encoder_attention=None, decoder_attention=None, cross_attention=None, encoder_tokens=None,
               decoder_tokens=None, include_layers=None, include_heads=None, html_action="view"):
    """bertviz.model_view: every included layer x head as a thumbnail. display_mode is
    accepted and ignored (attnscope's views are drawn on white)."""
    _refuse(encoder_attention=encoder_attention, decoder_attention=decoder_attention,
            cross_attention=cross_attention, encoder_tokens=encoder_tokens, decoder_tokens=decoder_tokens)
    d = _data(attention, tokens, sentence_b_start, prettify_tokens, include_layers, include_heads)
    return _display(_show(d, "model", 0, 0, None, -1, None, html_action, None, None, None, "f16"), html_action)
