"""core.py — models, runs, saliency and attribution over libattnscope (ctypes; see _lib.py).

A Result's arrays are numpy views over the run's own memory (the as_run's one block):
nothing is copied. Every array's base is a small holder that keeps the run alive, and the
run is freed (as_run_free) when the Result and every array taken from it are gone.
The forward, the tokenizer and saliency run inside the library with the GIL released
(ctypes.CDLL), so several Python threads can run forwards at once.
"""
import ctypes
import functools
import json
import os
import threading

import numpy as np

from . import _lib
from ._lib import lib


class Error(Exception):
    """An error of the engine: its one-line message (str(e)) and code (2 bad input, 1 internal)."""

    def __init__(self, msg, code=2):
        super().__init__(msg)
        self.code = code


def _check(status, err):
    if status != 0:
        raise Error(err.msg.decode("utf-8", errors="replace"), status)


def _encoding_or_raise(status, enc, err):
    """enc when status is AS_OK; else frees what enc holds and raises Error."""
    if status != 0:
        lib().as_encoding_free(ctypes.byref(enc))
        _check(status, err)
    return enc


def _bytes(s, what):
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    if not isinstance(s, str):
        raise TypeError("%s must be a str, not %s" % (what, type(s).__name__))
    return s.encode("utf-8", errors="surrogateescape")


class _RunOwner:
    """Owns one as_run and the encoding it was run on (and an encoder-decoder run's decoder
    input, dec); frees them when the last reference goes (the Result, or any array taken
    from it)."""
    live = 0  # runs not yet freed (the tests read it)
    _lock = threading.Lock()

    def __init__(self, model, enc, dec=None):
        self.model = model  # the run's tokens and npz need it; kept alive with the run
        self.enc = enc
        self.dec = dec
        self.ptr = ctypes.c_void_p()

    def forward(self, spec):
        err = _lib.new(_lib.Error)
        if self.dec is not None:
            st = lib().as_forward_seq2seq(self.model._ptr, ctypes.byref(self.enc), ctypes.byref(self.dec),
                                          ctypes.byref(spec), ctypes.byref(self.ptr), ctypes.byref(err))
        else:
            st = lib().as_forward(self.model._ptr, ctypes.byref(self.enc), ctypes.byref(spec), ctypes.byref(self.ptr),
                                  ctypes.byref(err))
        _check(st, err)
        with _RunOwner._lock:
            _RunOwner.live += 1

    def __del__(self):
        dll = _lib._lib  # None only if the library was never loaded (or at interpreter exit)
        if dll is None:
            return
        if self.ptr:
            dll.as_run_free(self.ptr)
            self.ptr = ctypes.c_void_p()
            with _RunOwner._lock:
                _RunOwner.live -= 1
        if self.enc is not None:
            dll.as_encoding_free(ctypes.byref(self.enc))
            self.enc = None
        if getattr(self, "dec", None) is not None:
            dll.as_encoding_free(ctypes.byref(self.dec))
            self.dec = None


class _View:
    """numpy's view of run memory (__array_interface__), holding the run's owner."""

    def __init__(self, owner, addr, shape):
        self.owner = owner
        self.__array_interface__ = {"shape": tuple(int(s) for s in shape), "typestr": "<f4",
                                    "data": (addr, False), "version": 3}


def _parse_capture(capture):
    if isinstance(capture, int):
        return capture
    what = 0
    parts = capture if isinstance(capture, (list, tuple)) else str(capture).split(",")
    for p in parts:
        p = p.strip()
        if p not in _lib.CAP:
            raise Error("bad capture '%s' (all, attn, scores, qkv, hidden, logits, stats, thumbs)" % p)
        what |= _lib.CAP[p]
    if not what:
        raise Error("bad capture '%s' (all, attn, scores, qkv, hidden, logits, stats, thumbs)" % capture)
    return what


class Result:
    """One forward: the captured tensors as numpy arrays named as `attnscope run --format npz`
    writes them (attentions [L,H,T,T], attention_scores, queries, keys, values [L,H,T,Dh],
    hidden_states [L_run+1,T,D], logits, head_stats [L,H,8], thumbnails_max and thumbnails_mean
    [L,H,S,S] with S = min(T, 64); None when not captured), the input arrays
    (input_ids, token_type_ids, attention_mask, offsets, layers, heads, score_scale,
    kv_group, token_pieces, token_text) and tokens, the list of token dicts of the JSON output.

    An encoder-decoder run (Model.run with target= or target_ids=; encoder_decoder True) has
    the npz's names of its three kinds instead: encoder_attentions [Le,H,Ts,Ts],
    decoder_attentions [Ld,H,Tt,Tt], cross_attentions [Ld,H,Tt,Ts] (rows: decoder tokens,
    columns: source tokens), their *_attention_scores, *_queries, *_keys, *_values (cross_keys
    and cross_values [Ld,H,Ts,Dh], from the encoder's output), encoder_hidden_states,
    decoder_hidden_states, logits [Tt,V]; the decoder's input decoder_input_ids,
    decoder_attention_mask, decoder_tokens and decoder_token_text (the npz's pieces and
    texts, numpy str arrays), encoder_tokens (the source's pieces: the npz's tokens) and
    decoder_token_dicts (token dicts as tokens)."""

    def __init__(self, model, owner, text, text_b, layer, head, target=None):
        self.model = model
        self.text, self.text_b = text, text_b
        self.target = target
        self._owner = owner
        run_ptr, enc = owner.ptr, owner.enc
        c = model.config
        T = enc.n
        self.encoder_decoder = owner.dec is not None
        self.sizes = {"tokens": T, "layers": c["n_layer"], "heads": c["n_head"], "d_model": c["d_model"],
                      "d_head": c["d_head"]}
        arr = (_lib.RunArray * _lib.RUN_ARRAYS_ROOM)()
        if self.encoder_decoder:
            lib().as_run_all_arrays(run_ptr, arr)
            self._decoder_inputs(owner.dec, c)
        else:
            lib().as_run_arrays(run_ptr, arr)
        self._names = []
        for a in arr:
            if not a.name:
                break
            name = a.name.decode()
            self._names.append(name)
            view = np.asarray(_View(self._owner, a.data, a.shape[:a.ndim])) if a.data else None
            setattr(self, name, view)
        # the captured layers and heads, as the capture spec asked (npz: layers, heads)
        self.layers = np.array([layer] if layer is not None else range(c["n_layer"]), dtype=np.int32)
        self.heads = np.array([head] if head is not None else range(c["n_head"]), dtype=np.int32)
        self.kv_group = np.array([lib().as_run_kv_group(run_ptr, int(h)) for h in self.heads], dtype=np.int32)
        hs = getattr(self, "encoder_hidden_states" if self.encoder_decoder else "hidden_states", None)
        self.layers_run = hs.shape[0] - 1 if hs is not None else None
        self.input_ids = np.ctypeslib.as_array(enc.ids, (T,)).copy()
        self.token_type_ids = np.ctypeslib.as_array(enc.type_ids, (T,)).copy()
        self.attention_mask = np.ctypeslib.as_array(enc.mask, (T,)).copy()
        off = np.full((T, 2), -1, np.int32)
        if enc.start:
            off[:, 0] = np.ctypeslib.as_array(enc.start, (T,))
        if enc.end:
            off[:, 1] = np.ctypeslib.as_array(enc.end, (T,))
        self.offsets = off
        cfg = lib().as_model_config(model._ptr)
        self.score_scale = np.array([lib().as_attn_scale(cfg, int(l)) for l in self.layers], np.float32)
        self.warning = enc.warning.decode("utf-8", errors="replace") if enc.n_warnings else None

    def _decoder_inputs(self, dec, c):
        """The decoder's input arrays of an encoder-decoder run (copies; the npz's names)."""
        Tt = dec.n
        self.sizes.update(decoder_tokens=Tt, decoder_layers=c["n_dec_layer"])
        self.decoder_input_ids = np.ctypeslib.as_array(dec.ids, (Tt,)).copy()
        self.decoder_attention_mask = np.ctypeslib.as_array(dec.mask, (Tt,)).copy()
        self.decoder_token_dicts = json.loads(_lib.take_string(lib().as_tokens_json(self.model._ptr,
                                                                                    ctypes.byref(dec))))
        self.decoder_tokens = np.array([dec.pieces[i].decode("utf-8", errors="replace") if dec.pieces else ""
                                        for i in range(Tt)])
        self.decoder_token_text = np.array([t["text"] for t in self.decoder_token_dicts])

    @functools.cached_property
    def encoder_tokens(self):
        """An encoder-decoder run's source pieces (the npz's tokens), as a numpy str array."""
        return np.array(self.token_pieces)

    # The token lists are made on first use (O(T) Python objects), so a run costs O(1) in
    # Python per captured array; the encoding they read lives as long as the run.
    @functools.cached_property
    def tokens(self):
        """The token dicts of `attnscope run`'s JSON (as_tokens_json)."""
        o = self._owner
        return json.loads(_lib.take_string(lib().as_tokens_json(self.model._ptr, ctypes.byref(o.enc))))

    @functools.cached_property
    def token_pieces(self):
        """The npz's tokens: each token's piece."""
        enc = self._owner.enc
        return [enc.pieces[i].decode("utf-8", errors="replace") for i in range(enc.n)]

    @functools.cached_property
    def token_text(self):
        """The npz's token_text: each token's readable text."""
        return [t["text"] for t in self.tokens]

    @property
    def nbytes(self):
        """Bytes of the captured tensors (the run's memory, not copied)."""
        return sum(a.nbytes for a in self.arrays().values())

    def save_npz(self, path):
        """Writes the run as `attnscope run --format npz` does (as_run_write_npz: the same
        writer, so the same bytes); returns path. Raises Error when path cannot be written."""
        o = self._owner
        err = _lib.new(_lib.Error)
        if o.dec is not None:
            st = lib().as_run_write_npz_seq2seq(self.model._ptr, ctypes.byref(o.enc), ctypes.byref(o.dec), o.ptr,
                                                _bytes(os.fspath(path), "path"), ctypes.byref(err))
        else:
            st = lib().as_run_write_npz(self.model._ptr, ctypes.byref(o.enc), o.ptr, _bytes(os.fspath(path), "path"),
                                        ctypes.byref(err))
        _check(st, err)
        return path

    def arrays(self):
        """{name: array} of every captured tensor, in the npz's order (views, not copies)."""
        return {n: getattr(self, n) for n in self._names if getattr(self, n) is not None}

    def __repr__(self):
        caught = ", ".join("%s%s" % (n, list(a.shape)) for n, a in self.arrays().items())
        return "<attnscope.Result %d tokens: %s>" % (self.sizes["tokens"], caught)


class Model:
    """A loaded model folder (attnscope.load). Thread-safe for concurrent run()s: the model
    is only read by a forward."""

    PRECISIONS = ("f32", "bf16")  # as_precision's order

    def __init__(self, path, precision="f32"):
        self._ptr = None
        if precision not in self.PRECISIONS:
            raise Error("precision must be 'f32' or 'bf16', not %r" % (precision,))
        err = _lib.new(_lib.Error)
        p = ctypes.c_void_p()
        _check(lib().as_model_load(_bytes(os.fspath(path), "path"), ctypes.byref(p), ctypes.byref(err)), err)
        self._ptr = p
        self.path = os.fspath(path)
        if precision != "f32":
            _check(lib().as_model_set_precision(p, self.PRECISIONS.index(precision), ctypes.byref(err)), err)
        self.config = self._config()

    @property
    def precision(self):
        """'f32' or 'bf16': the arithmetic of the linear maps in run(), saliency() and
        attribute() (bf16: BF16 operands, F32 sums; docs/engine.md "Precision")."""
        return self.PRECISIONS[lib().as_model_precision(self._ptr)]

    def __del__(self):
        dll = _lib._lib
        if getattr(self, "_ptr", None) and dll is not None:
            dll.as_model_free(self._ptr)
            self._ptr = None

    def _config(self):
        L = lib()
        c = L.as_model_config(self._ptr).contents
        d = {}
        for name, _t in _lib.Config._fields_:
            v = getattr(c, name)
            if name == "id2label":
                v = [c.id2label[i].decode("utf-8", "replace") if c.id2label and c.id2label[i] else None
                     for i in range(c.num_labels)] if c.id2label else []
            elif name == "model_type":
                v = v.decode("utf-8", "replace")
            elif name == "layer_sliding":
                v = [int(x) for x in v[:c.n_layer]]
            elif name == "arch":
                v = _lib.ARCH_NAMES[v] if 0 <= v < len(_lib.ARCH_NAMES) else str(v)
            elif name == "act":
                v = _lib.ACT_NAMES[v] if 0 <= v < len(_lib.ACT_NAMES) else str(v)
            elif isinstance(v, float):
                v = float(np.float32(v))
            d[name] = v
        heads = L.as_model_heads(self._ptr)
        d["heads_present"] = [n for n, b in _lib.HEAD_BITS.items() if heads & b]
        d["dtype"] = _lib.DTYPE_NAMES[L.as_model_dtype(self._ptr)]
        d["n_params"] = int(L.as_model_n_params(self._ptr))
        d["max_tokens"] = L.as_model_max_tokens(self._ptr)
        d["tokenizer"] = bool(L.as_model_has_tokenizer(self._ptr))
        prob = L.as_model_tokenizer_problem(self._ptr)
        d["tokenizer_problem"] = prob.decode("utf-8", "replace") if prob else None
        d["dir"] = L.as_model_dir(self._ptr).decode("utf-8", "replace")
        return d

    @property
    def name(self):
        return os.path.basename(os.path.normpath(self.path))

    def __repr__(self):
        c = self.config
        return "<attnscope.Model %s: %s, %d layers x %d heads, width %d>" % (
            self.path, c["model_type"], c["n_layer"], c["n_head"], c["d_model"])

    # ---- encodings ----
    def _encode(self, text, text_b, max_tokens, truncate):
        if text is None:
            raise Error("text is required")
        enc = _lib.new(_lib.Encoding)
        err = _lib.new(_lib.Error)
        opts = _lib.new(_lib.EncodeOpts, max_len=int(max_tokens or 0), truncate=1 if truncate else 0)
        st = lib().as_encode(self._ptr, _bytes(text, "text"), _bytes(text_b, "text_b"), ctypes.byref(opts),
                             ctypes.byref(enc), ctypes.byref(err))
        return _encoding_or_raise(st, enc, err)

    def _encode_ids(self, ids, type_ids):
        ids = np.ascontiguousarray(np.asarray(ids, dtype=np.int64))
        if ids.ndim != 1:
            raise Error("ids must be a 1-d sequence of token ids")
        if np.any(ids < np.iinfo(np.int32).min) or np.any(ids > np.iinfo(np.int32).max):
            raise Error("ids: a token id is out of the 32-bit range")
        ids32 = np.ascontiguousarray(ids.astype(np.int32))
        tptr = None
        if type_ids is not None:
            t32 = np.ascontiguousarray(np.asarray(type_ids, dtype=np.int32))
            if t32.shape != ids32.shape:
                raise Error("type_ids: %d values for %d ids" % (t32.size, ids32.size))
            tptr = t32.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        enc = _lib.new(_lib.Encoding)
        err = _lib.new(_lib.Error)
        st = lib().as_encoding_from_ids(self._ptr, ids32.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), tptr,
                                        int(ids32.size), ctypes.byref(enc), ctypes.byref(err))
        return _encoding_or_raise(st, enc, err)

    def _decoder_input(self, target, target_ids):
        """An encoder-decoder model's decoder input: target encoded and shifted right (as
        `attnscope run --target`), or target_ids as given; None for other models. Raises
        Error when the model needs one and none (or both) is given, or gets one it cannot use."""
        encdec = self.config["n_dec_layer"] > 0
        if not encdec:
            if target is not None or target_ids is not None:
                raise Error("%s is not an encoder-decoder model (%s): target and target_ids do not apply"
                            % (self.name, self.config["model_type"]))
            return None
        if (target is None) == (target_ids is None):
            raise Error("%s is an encoder-decoder model (%s): give the decoder input with target= (text) or "
                        "target_ids= (ids), one of them" % (self.name, self.config["model_type"]))
        if target_ids is not None:
            return self._encode_ids(target_ids, None)
        labels = self._encode(target, None, 0, False)
        dec = _lib.new(_lib.Encoding)
        err = _lib.new(_lib.Error)
        try:
            st = lib().as_seq2seq_shift_target(self._ptr, ctypes.byref(labels), ctypes.byref(dec), ctypes.byref(err))
        finally:
            lib().as_encoding_free(ctypes.byref(labels))
        return _encoding_or_raise(st, dec, err)

    def _forward(self, enc, capture, layer, head, threads, text, text_b, target=None, target_ids=None):
        try:
            dec = self._decoder_input(target, target_ids)
        except Error:
            lib().as_encoding_free(ctypes.byref(enc))
            raise
        owner = _RunOwner(self, enc, dec)  # frees the encodings (and the run) on every path
        spec = _lib.new(_lib.CaptureSpec, what=_parse_capture(capture), layer=-1 if layer is None else int(layer),
                        head=-1 if head is None else int(head), threads=int(threads or 0), ablate=0)
        owner.forward(spec)
        return Result(self, owner, text, text_b, layer, head, target=target)

    def run(self, text, text_b=None, capture="all", layer=None, head=None, threads=0, max_tokens=0,
            truncate=True, target=None, target_ids=None):
        """Tokenizes text (and text_b) and runs the model, capturing `capture` ("all" or a
        comma list of attn, scores, qkv, hidden, logits) of every layer and head, or of
        `layer` / `head` only. threads 0 = every core. An encoder-decoder model (bart, mbart,
        marian, t5, mt5) needs the decoder's input: target (text, shifted right for teacher
        forcing) or target_ids (used as given). Returns a Result; raises Error with the
        engine's one-line message on bad input."""
        enc = self._encode(text, text_b, max_tokens, truncate)
        return self._forward(enc, capture, layer, head, threads, text, text_b, target, target_ids)

    def run_ids(self, ids, type_ids=None, capture="all", layer=None, head=None, threads=0, target=None,
                target_ids=None):
        """Runs raw token ids (and optional token type ids, as Hugging Face passes them);
        target / target_ids as in run()."""
        enc = self._encode_ids(ids, type_ids)
        return self._forward(enc, capture, layer, head, threads, None, None, target, target_ids)

    def generate(self, text=None, ids=None, max_new=20, temperature=0.0, top_k=0, seed=0, stop_at_eos=False,
                 beams=1, num_return=None, length_penalty=None, early_stopping=None, target_ids=None, threads=0,
                 top=0):
        """Generates up to max_new tokens after the prompt (text, or ids; exactly one), as
        `attnscope generate` does: a causal LM continues it; an encoder-decoder model reads it
        as its source and writes its decoder's sequence from decoder_start_token_id (or
        target_ids: mBART's target language code). temperature 0 is greedy, above 0 samples
        from softmax(logits / temperature) over the top_k most likely ids with the
        splitmix64 stream of seed (the CLI's tokens for the same seed); stop_at_eos ends at an
        end-of-sequence id. beams 2..16 is beam search as Hugging Face's generate with
        num_beams (num_return hypotheses, length_penalty, early_stopping; sampling options are
        then refused). top=N (0..20) keeps each greedy or sampled step's N most probable ids
        and their probabilities (Generation.top_ids, top_probs). Returns an attnscope.Generation (ids, tokens, text, attentions
        [steps, L, H, T], cross_attentions, and with beams its hypotheses and scores);
        raises Error with the engine's one-line message on bad input."""
        from .generation import generate
        return generate(self, text=text, ids=ids, max_new=max_new, temperature=temperature, top_k=top_k, seed=seed,
                        stop_at_eos=stop_at_eos, beams=beams, num_return=num_return, length_penalty=length_penalty,
                        early_stopping=early_stopping, target_ids=target_ids, threads=threads, top=top)

    def tokenize(self, text, text_b=None, max_tokens=0, truncate=True):
        """The tokens of text (and text_b) as the list of token dicts of `attnscope run`'s JSON."""
        enc = self._encode(text, text_b, max_tokens, truncate)
        try:
            return json.loads(_lib.take_string(lib().as_tokens_json(self._ptr, ctypes.byref(enc))))
        finally:
            lib().as_encoding_free(ctypes.byref(enc))

    def saliency(self, text, text_b=None, method="grad", target=None, steps=0, ids=None, threads=0):
        """Per-token saliency of the classifier's prediction (sal_compute): method "grad"
        (gradient L1 norm), "gxi" (gradient x input) or "ig" (integrated gradients, `steps`
        steps, 0 = 32); target = class index or label name (None = the predicted class);
        threads 0 = the library's default (every core; the scores do not depend on it).
        Returns a dict: method, target, predicted, labels, scores (np.float32 [T]), logits,
        probs, tokens (token dicts), and for ig: steps, ig_sum, ig_delta, ig_gap."""
        if method not in _lib.SAL_METHODS:
            raise Error("bad method '%s': expected grad, gxi or ig" % method)
        labels = self.config["id2label"]
        if isinstance(target, str):
            if target not in labels:
                raise Error("bad target '%s': expected a class index or label name" % target)
            target = labels.index(target)
        enc = self._encode_ids(ids, None) if ids is not None else self._encode(text, text_b, 0, True)
        res = _lib.new(_lib.SalResult)
        try:
            opts = _lib.new(_lib.SalOpts, method=_lib.SAL_METHODS.index(method),
                            target=-1 if target is None else int(target), steps=int(steps or 0), attn_out=None,
                            threads=int(threads or 0))
            err = _lib.new(_lib.Error)
            _check(lib().sal_compute(self._ptr, ctypes.byref(enc), ctypes.byref(opts), ctypes.byref(res),
                                     ctypes.byref(err)), err)
            out = {
                "method": method, "target": res.target, "predicted": res.predicted,
                "labels": [labels[i] if i < len(labels) and labels[i] else "LABEL_%d" % i for i in range(res.C)],
                "scores": np.ctypeslib.as_array(res.scores, (res.T,)).copy(),
                "logits": np.ctypeslib.as_array(res.logits, (res.C,)).copy(),
                "probs": np.ctypeslib.as_array(res.probs, (res.C,)).copy(),
                "tokens": json.loads(_lib.take_string(lib().as_tokens_json(self._ptr, ctypes.byref(enc)))),
            }
            if method == "ig":
                out.update(steps=res.steps, ig_sum=res.ig_sum, ig_delta=res.ig_delta, ig_gap=res.ig_gap)
            return out
        finally:
            lib().sal_result_free(ctypes.byref(res))
            lib().as_encoding_free(ctypes.byref(enc))


    def attribute(self, text, text_b=None, method="rollout", target=None, position=None, ids=None, threads=0):
        """Attribution past raw attention (attr_compute; docs/attribution.md): method
        "rollout" / "flow" / "grad" (np.float32 [T, T], rows = output tokens, columns = input
        tokens), "norm" ([L, H, T, T]), "norm2" / "alti" ([L, T, T]) or "importance" ([L, H]).
        grad and importance explain one logit: target = class index or label name of a
        classifier, token id of an LM / masked-LM head (None = the predicted one), position =
        the LM's row (None = the last token). Returns a dict: method, data, tokens (token dicts), and for grad /
        importance target, position, logit."""
        if method not in _lib.ATTR_METHODS:
            raise Error("bad method '%s': expected %s" % (method, ", ".join(_lib.ATTR_METHODS)))
        if isinstance(target, str):
            labels = self.config["id2label"]
            if target not in labels:
                raise Error("bad target '%s': expected a class index, label name or token id" % target)
            target = labels.index(target)
        enc = self._encode_ids(ids, None) if ids is not None else self._encode(text, text_b, 0, True)
        res = _lib.new(_lib.AttrResult)
        try:
            opts = _lib.new(_lib.AttrOpts, method=_lib.ATTR_METHODS.index(method),
                            target=-1 if target is None else int(target),
                            position=-1 if position is None else int(position), threads=int(threads or 0))
            err = _lib.new(_lib.Error)
            _check(lib().attr_compute(self._ptr, ctypes.byref(enc), ctypes.byref(opts), ctypes.byref(res),
                                      ctypes.byref(err)), err)
            shape = tuple(res.shape[i] for i in range(res.ndim))
            out = {"method": method, "data": np.ctypeslib.as_array(res.data, shape).copy(),
                   "tokens": json.loads(_lib.take_string(lib().as_tokens_json(self._ptr, ctypes.byref(enc))))}
            if method in ("grad", "importance"):
                out.update(target=res.target, position=res.position, logit=res.logit)
            return out
        finally:
            lib().attr_result_free(ctypes.byref(res))
            lib().as_encoding_free(ctypes.byref(enc))


def load(path, precision="f32"):
    """Loads a Hugging Face model folder (config.json, model.safetensors, tokenizer files).
    precision "bf16" multiplies in BF16 (faster on CPUs with AVX-512 BF16; attention good to
    about +-0.01). Raises Error naming the file, field or tensor."""
    return Model(path, precision)


def set_quiet(quiet=True):
    """Silences the engine's warnings on stderr (truncation, replaced UTF-8, ...)."""
    lib().as_set_quiet(1 if quiet else 0)
