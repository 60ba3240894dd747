"""npz.py — attention computed elsewhere, read from an .npz file into the views' data
(views.ViewData), so that head_view, model_view and neuron_view show it offline:

    v = attnscope.read_npz("run.npz")       # `attnscope run --format npz`, or arrays of your own
    attnscope.head_view(v); attnscope.model_view(v)

Two layouts are read. One is the file `attnscope run --format npz` writes: attentions
[L, H, T, T], tokens (and token_text, token_type_ids, layers, heads, kv_group, and
queries, keys, attention_scores, score_scale for the neuron view). The other is
bertviz-style arrays: attention [L, 1, H, T, T] or [L, H, T, T] (a stacked tuple of
per-layer outputs) with tokens, and an optional sentence_b_start. The file is opened
without pickles. Every array read is checked: shape, the tokens' count, finite values
and non-negative weights.

What it does not: run a model, or write anything. A file that is not such an npz raises
Error with one line naming the file and what is wrong.
"""
import os
import zipfile

import numpy as np

from .core import Error
from .views import ViewData

# Largest attention read (floats): a BERT-base-shaped run at 2048 tokens.
NPZ_MAX_ATTENTION_FLOATS = 12 * 12 * 2048 * 2048


def _tokens(path, z, T):
    """The token dicts of the file: pieces from tokens, text from token_text, segments
    from token_type_ids (or sentence_b_start)."""
    from .bertviz import _tokens as bertviz_tokens
    if "tokens" not in z.files:
        raise Error("%s: no 'tokens' array (the token strings, one per position)" % path)
    pieces = z["tokens"]
    if pieces.ndim != 1 or pieces.dtype.kind not in "US" or len(pieces) != T:
        raise Error("%s: 'tokens' must be %d strings, not %s of %s" % (path, T, pieces.dtype, list(pieces.shape)))
    b = int(z["sentence_b_start"]) if "sentence_b_start" in z.files else None
    out = bertviz_tokens([str(p) for p in pieces], b, prettify_tokens=True)
    text = z["token_text"] if "token_text" in z.files else None
    types = z["token_type_ids"] if "token_type_ids" in z.files else None
    for i, t in enumerate(out):
        if text is not None and len(text) == T:
            t["text"] = str(text[i])
        if types is not None and types.shape == (T,):
            t["segment"] = t["type_id"] = int(types[i] != 0)
    return out


def _attention(path, z):
    key = "attentions" if "attentions" in z.files else "attention" if "attention" in z.files else None
    if key is None:
        raise Error("%s: no 'attentions' array (float [layers, heads, T, T]; bertviz-style 'attention' "
                    "[layers, 1, heads, T, T] also works)" % path)
    a = z[key]
    if a.ndim == 5 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 4 or a.shape[2] != a.shape[3] or 0 in a.shape:
        raise Error("%s: '%s' must be [layers, heads, T, T], not %s" % (path, key, list(a.shape)))
    if a.size > NPZ_MAX_ATTENTION_FLOATS:
        raise Error("%s: '%s' has %d weights, more than NPZ_MAX_ATTENTION_FLOATS (%d)" % (
            path, key, a.size, NPZ_MAX_ATTENTION_FLOATS))
    if a.dtype.kind != "f":
        raise Error("%s: '%s' must hold floats, not %s" % (path, key, a.dtype))
    a = a.astype(np.float32, copy=False)
    if not np.isfinite(a).all() or (a < 0).any():
        raise Error("%s: '%s' holds weights that are not finite or are negative" % (path, key))
    return a


def _optional(path, z, name, shape):
    """Array name when the file has it with that shape (None entries are free), else None."""
    if name not in z.files:
        return None
    a = z[name]
    if a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
        raise Error("%s: '%s' must be %s, not %s" % (path, name, ["*" if s is None else s for s in shape],
                                                     list(a.shape)))
    return a


def read_npz(path, model=None, causal=None):
    """The attention of an .npz file as view data (ViewData) for head_view, model_view and,
    when the file has queries, keys and attention_scores, neuron_view. model: the name
    shown (default: the file's name); causal: whether the attention is causal (None:
    when no weight lies above the diagonal). Raises Error naming the file and the problem."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise Error("%s: no such file" % path)
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise Error("%s: not an npz file (%s)" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__)) \
            from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise Error("%s: not an npz file (a single .npy array)" % path)
    try:
        with z:
            a = _attention(path, z)
            L, H, T, _ = a.shape
            tokens = _tokens(path, z, T)
            layers = _optional(path, z, "layers", (L,))
            heads = _optional(path, z, "heads", (H,))
            kv = _optional(path, z, "kv_group", (H,))
            q = _optional(path, z, "queries", (L, H, T, None))
            k = _optional(path, z, "keys", (L, H, T, None))
            s = _optional(path, z, "attention_scores", (L, H, T, T))
            scale = _optional(path, z, "score_scale", (L,))
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise Error("%s: damaged npz (%s)" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__)) from None
    neuron = q is not None and k is not None and s is not None and q.shape == k.shape
    if causal is None:
        causal = T > 1 and not np.triu(a, 1).any()
    return ViewData(a, tokens, model=model or os.path.basename(path), causal=causal,
                    queries=q.astype(np.float32) if neuron else None, keys=k.astype(np.float32) if neuron else None,
                    scores=s.astype(np.float32) if neuron else None,
                    scale=scale if scale is not None else None,
                    layer_ids=[int(x) for x in layers] if layers is not None else None,
                    head_ids=[int(x) for x in heads] if heads is not None else None,
                    kv_group=[int(x) for x in kv] if kv is not None else None,
                    config={"n_kv_head": len(set(int(x) for x in kv))} if kv is not None else None)
