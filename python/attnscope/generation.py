"""generation.py — Model.generate: a causal LM's continuation of a prompt, or an
encoder-decoder model's output for a source, greedy, sampled or by beam search, on the
library's generation (include/attnscope/generate.h, beam.h: the steps of `attnscope
generate`), with every generated token's attention rows as numpy arrays (copies; the
library's buffers are freed before generate returns).

What it does not: draw (views.generation_view does; Generation.result() gives the final
sequence's Result for the other notebook views), batch prompts, or apply repetition
penalties.
"""
import ctypes

import numpy as np

from . import _lib
from ._lib import lib
from .core import Error, _check, _encoding_or_raise


class Generation:
    """One generated sequence.

    ids (np.int32 [T]): the prompt (an encoder-decoder model's decoder start), then the
    generated ids; prompt_length; generated_ids [steps]; tokens (token dicts of the
    sequence, as Result.tokens); text (the sequence's text: BOS, padding and
    end-of-sequence ids left out, as `attnscope generate` prints it); generated_text.

    attentions (np.float32 [steps, L, H, T]): at step s every layer's and head's attention
    row of the position prompt_length - 1 + s (the one that chose generated token s) over
    the tokens before it, keys after it 0 (`generation_attentions` of `attnscope generate
    --out`; an encoder-decoder model's decoder self-attention). cross_attentions
    ([steps, L, H, Ts]) the same positions' cross-attention over the source (None for a
    causal LM); source_ids, source_tokens the source's.

    Greedy and sampled generation: probs (np.float32 [steps]) the probability the model gave
    each chosen token (softmax of its logits after the configured processors, before
    temperature and top-k), and with generate(top=N) top_ids (np.int32 [steps, N], -1 past a
    smaller vocabulary) and top_probs, each step's most probable ids (None otherwise).

    Beam search: score and sum_logprobs (None otherwise), and hypotheses, every returned
    hypothesis (best first; hypotheses[0] is this one)."""

    def __init__(self, model, ids, prompt_length, attentions, cross, source):
        self.model = model
        self.ids = ids
        self.prompt_length = int(prompt_length)
        self.generated_ids = ids[prompt_length:]
        self.attentions = attentions
        self.cross_attentions = cross
        self._source = source  # (ids, token dicts) of an encoder-decoder model's source, else None
        self.score = self.sum_logprobs = None
        self.probs = self.top_ids = self.top_probs = None
        self.hypotheses = [self]
        self.options = {}  # the decoding options generate used (generation_view's page states them)

    @property
    def steps(self):
        return len(self.generated_ids)

    @property
    def encoder_decoder(self):
        return self._source is not None

    @property
    def source_ids(self):
        return None if self._source is None else self._source[0]

    @property
    def source_tokens(self):
        return None if self._source is None else self._source[1]

    @property
    def tokens(self):
        return _tokens(self.model, self.ids)

    @property
    def text(self):
        return _text(self.model, self.ids)

    @property
    def generated_text(self):
        return _text(self.model, self.generated_ids)

    def result(self, capture="all", threads=0):
        """The forward over the final sequence (Model.run_ids; an encoder-decoder model's on
        the source with this sequence as the decoder's input), for the notebook views."""
        if self._source is not None:
            return self.model.run_ids(self._source[0], capture=capture, threads=threads, target_ids=self.ids)
        return self.model.run_ids(self.ids, capture=capture, threads=threads)

    def __repr__(self):
        extra = "" if self.score is None else ", score %.4f" % self.score
        return "<attnscope.Generation %d + %d tokens%s%s>" % (
            self.prompt_length, self.steps, ", encoder-decoder" if self._source is not None else "", extra)


def _ids_encoding(model, ids):
    ids32 = np.ascontiguousarray(np.asarray(ids, dtype=np.int32))
    enc = _lib.new(_lib.Encoding)
    err = _lib.new(_lib.Error)
    st = lib().as_encoding_from_ids(model._ptr, ids32.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), None,
                                    int(ids32.size), ctypes.byref(enc), ctypes.byref(err))
    return _encoding_or_raise(st, enc, err)


def _tokens(model, ids):
    import json
    enc = _ids_encoding(model, ids)
    try:
        return json.loads(_lib.take_string(lib().as_tokens_json(model._ptr, ctypes.byref(enc))))
    finally:
        lib().as_encoding_free(ctypes.byref(enc))


def _text(model, ids):
    """The ids' token texts joined, special ids left out (as gen_print_text)."""
    c = model.config
    cfg = lib().as_model_config(model._ptr)
    skip = {c["bos_token_id"], c["pad_token_id"], c["eos_token_id"]}
    out = []
    for i in ids:
        i = int(i)
        if i in skip or lib().gen_is_eos(cfg, i):
            continue
        out.append(_lib.take_string(lib().as_model_token_text(model._ptr, i)) or "")
    return "".join(out)


def _floats(ptr, shape):
    n = int(np.prod(shape))
    if n == 0:
        return np.zeros(shape, np.float32)
    return np.ctypeslib.as_array(ptr, (n,)).reshape(shape).copy()


def _check_options(beams, num_return, length_penalty, early_stopping, temperature, top_k, seed, stop_at_eos):
    if not isinstance(beams, int) or not 1 <= beams <= _lib.GEN_MAX_BEAMS:
        raise Error("beams: expected an integer in [1, %d]" % _lib.GEN_MAX_BEAMS)
    if beams == 1:
        for name, v, default in (("num_return", num_return, None), ("length_penalty", length_penalty, None),
                                 ("early_stopping", early_stopping, None)):
            if v is not default:
                raise Error("%s applies to beam search only (beams 2 or more)" % name)
        if top_k and not temperature:
            raise Error("top_k: sampling from the top k needs a temperature above 0")
        return
    for name, v in (("temperature", temperature), ("top_k", top_k), ("seed", seed), ("stop_at_eos", stop_at_eos)):
        if v:
            raise Error("%s: beam search does not sample and always ends a hypothesis at an end-of-sequence id"
                        % name)
    if num_return is not None and not 1 <= num_return <= beams:
        raise Error("num_return: expected an integer in [1, beams = %d]" % beams)


def generate(model, text=None, ids=None, max_new=20, temperature=0.0, top_k=0, seed=0, stop_at_eos=False,
             beams=1, num_return=None, length_penalty=None, early_stopping=None, target_ids=None, threads=0, top=0):
    """Model.generate: see its docstring."""
    c = model.config
    if (text is None) == (ids is None):
        raise Error("give exactly one of text and ids")
    if not isinstance(max_new, int) or max_new < 1:
        raise Error("max_new: expected an integer >= 1")
    _check_options(beams, num_return, length_penalty, early_stopping, temperature, top_k, seed, stop_at_eos)
    if not isinstance(top, int) or not 0 <= top <= _lib.GEN_MAX_TOP:
        raise Error("top: expected an integer in [0, %d]" % _lib.GEN_MAX_TOP)
    if top and beams > 1:
        raise Error("top applies to greedy and sampled generation, not beam search")
    if "lm" not in c["heads_present"]:
        raise Error("%s: the model has no causal-LM head to generate with" % model.path)
    encdec = c["n_dec_layer"] > 0
    if target_ids is not None and not encdec:
        raise Error("%s is not an encoder-decoder model (%s): target_ids does not apply"
                    % (model.name, c["model_type"]))
    lp = 1.0 if length_penalty is None else float(length_penalty)
    options = dict(temperature=float(temperature), top_k=int(top_k or 0), seed=int(seed or 0),
                   stop_at_eos=bool(stop_at_eos) or beams > 1, beams=beams)
    if beams > 1:  # sampling options were refused above: they are 0
        options.update(length_penalty=lp, early_stopping=bool(early_stopping))
    enc = model._encode_ids(ids, None) if ids is not None else model._encode(text, None, 0, True)
    start = None
    try:
        if encdec:
            if target_ids is None and c["decoder_start_token_id"] < 0:
                raise Error("%s has no decoder_start_token_id: give the decoder's first ids as target_ids "
                            "(mBART: the target language code)" % model.name)
            start = _ids_encoding(model, target_ids if target_ids is not None else [c["decoder_start_token_id"]])
        src = ctypes.byref(enc) if encdec else None
        seq = start if encdec else enc
        source = None
        if encdec:
            source = (np.ctypeslib.as_array(enc.ids, (enc.n,)).copy(), _tokens(model, np.ctypeslib.as_array(
                enc.ids, (enc.n,))))
        if beams > 1:
            bo = _lib.new(_lib.BeamOpts, beams=beams, num_return=num_return or 1,
                          early_stopping=1 if early_stopping else 0, length_penalty=lp, threads=int(threads or 0))
            g = _beams(model, src, seq, max_new, bo, source)
        else:
            o = _lib.new(_lib.GenOpts, max_new=max_new, temperature=float(temperature), top_k=int(top_k or 0),
                         seed=int(seed), stop_eos=1 if stop_at_eos else 0, rows=1, threads=int(threads or 0),
                         probs=1, top=top)
            g = _sample(model, src, seq, o, source)
        for h in g.hypotheses:
            h.options = options
        return g
    finally:
        lib().as_encoding_free(ctypes.byref(enc))
        if start is not None:
            lib().as_encoding_free(ctypes.byref(start))


def _sample(model, src, seq, o, source):
    """Greedy or sampled: the rows the steps computed (a causal LM's self-attention, an
    encoder-decoder model's cross-attention) and an encoder-decoder model's decoder rows from
    one forward over the output (gen_result_rows), and each step's probabilities."""
    g = _lib.new(_lib.GenResult)
    rows = _lib.new(_lib.BeamRows)
    err = _lib.new(_lib.Error)
    try:
        _check(lib().gen_generate(model._ptr, src, seq.ids, seq.n, ctypes.byref(o), ctypes.byref(g),
                                  ctypes.byref(err)), err)
        _check(lib().gen_result_rows(model._ptr, src, ctypes.byref(g), o.threads, ctypes.byref(rows),
                                     ctypes.byref(err)), err)
        shape = (g.steps, g.L, g.H)
        out = Generation(model, np.ctypeslib.as_array(g.ids, (g.T,)).copy(), g.prompt_len,
                         _floats(rows.best, shape + (g.T,)),
                         _floats(rows.xbest, shape + (rows.Ts,)) if src is not None else None, source)
        out.probs = _floats(g.probs, (g.steps,))
        if g.top:
            out.top_ids = np.ctypeslib.as_array(g.top_ids, (g.steps * g.top,)).reshape(g.steps, g.top).copy()
            out.top_probs = _floats(g.top_probs, (g.steps, g.top))
        return out
    finally:
        lib().gen_beam_rows_free(ctypes.byref(rows))
        lib().gen_result_free(ctypes.byref(g))


def _beams(model, src, seq, max_new, bo, source):
    """Beam search: every returned hypothesis with its rows (one forward over each)."""
    br = _lib.new(_lib.BeamResult)
    rows = _lib.new(_lib.BeamRows)
    err = _lib.new(_lib.Error)
    max_len = min(seq.n + max_new, model.config["max_tokens"])
    try:
        _check(lib().gen_beam_search(model._ptr, src, seq.ids, seq.n, max_len, ctypes.byref(bo), ctypes.byref(br),
                                     ctypes.byref(err)), err)
        _check(lib().gen_beam_rows_init(model._ptr, src, ctypes.byref(br), seq.n, bo.threads, 1, ctypes.byref(rows),
                                        ctypes.byref(err)), err)
        R, L, H, Ts, Tmax, Smax = rows.R, rows.L, rows.H, rows.Ts, rows.Tmax, rows.Smax
        seqs = np.ctypeslib.as_array(rows.seqs, (R, Tmax))
        self_all = _floats(rows.rows, (R, Smax, L, H, Tmax))
        cross_all = _floats(rows.xrows, (R, Smax, L, H, Ts)) if src is not None else None
        hyps = []
        for r in range(R):
            n = int(rows.lens[r])
            s = n - seq.n
            g = Generation(model, seqs[r, :n].copy(), seq.n, self_all[r, :s, :, :, :n].copy(),
                           cross_all[r, :s].copy() if cross_all is not None else None, source)
            g.score, g.sum_logprobs = float(rows.scores[r]), float(rows.sums[r])
            hyps.append(g)
        for g in hyps:
            g.hypotheses = hyps
        return hyps[0]
    finally:
        lib().gen_beam_rows_free(ctypes.byref(rows))
        lib().gen_beam_result_free(ctypes.byref(br))
