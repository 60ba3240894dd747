"""_lib.py — libattnscope.so through ctypes: finding the library, the C structures of
include/attnscope.h, include/attnscope/analysis.h, generate.h and beam.h mirrored field by
field, and the prototypes of the functions the package calls. Nothing here owns memory;
core.py and generation.py do.

as_run and as_model stay opaque pointers (read through as_run_arrays, as_run_attn, ...). The
structures mirrored here must match the headers; tests/python/test_attnscope.py compiles a small C
program that prints every mirrored field's offset and compares them with these.
"""
import ctypes
import ctypes.util
import os

AS_ERR_MSG_MAX = 512
AS_MAX_LAYERS = 256
AS_MAX_EOS_IDS = 8
AS_MAX_BAD_WORDS = 64
AS_MAX_BAD_WORD_LEN = 8
AS_MAX_ROPE_PAIRS = 256
# as_run_arrays writes AS_RUN_N_ARRAYS entries (9 today); the package passes room for
# RUN_ARRAYS_ROOM and reads the entries that have a name, so a header that adds arrays
# needs no change here (as_run itself stays opaque: its fields are read through functions)
RUN_ARRAYS_ROOM = 64

CAP = {"attn": 1, "scores": 2, "qkv": 4, "hidden": 8, "logits": 16, "stats": 32, "thumbs": 64, "all": 31}
ARCH_NAMES = ("bert", "roberta", "distilbert", "gpt2", "llama", "bart", "t5")
ACT_NAMES = ("gelu", "gelu_new", "relu", "silu")
DTYPE_NAMES = ("F32", "F16", "BF16", "I64", "I32", "other")
HEAD_BITS = {"classifier": 1, "mlm": 2, "lm": 4}
SAL_METHODS = ("grad", "gxi", "ig")
ATTR_METHODS = ("rollout", "flow", "norm", "grad", "importance", "norm2", "alti")  # attr_method order


class Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * AS_ERR_MSG_MAX)]


class Config(ctypes.Structure):
    """as_config (include/attnscope.h)."""
    _fields_ = [
        ("arch", ctypes.c_int), ("model_type", ctypes.c_char * 32), ("n_layer", ctypes.c_int),
        ("n_head", ctypes.c_int), ("d_model", ctypes.c_int), ("d_head", ctypes.c_int), ("d_ff", ctypes.c_int),
        ("d_embed", ctypes.c_int), ("vocab_size", ctypes.c_int), ("max_pos", ctypes.c_int),
        ("type_vocab", ctypes.c_int), ("pad_token_id", ctypes.c_int), ("causal", ctypes.c_int),
        ("ln_eps", ctypes.c_float), ("act", ctypes.c_int), ("num_labels", ctypes.c_int),
        ("id2label", ctypes.POINTER(ctypes.c_char_p)), ("sinusoidal_pos", ctypes.c_int),
        ("attn_unscaled", ctypes.c_int), ("attn_layer_scale", ctypes.c_int),
        ("n_kv_head", ctypes.c_int), ("rms_norm", ctypes.c_int), ("norm_add_one", ctypes.c_int),
        ("post_norms", ctypes.c_int), ("gated_mlp", ctypes.c_int), ("qkv_bias", ctypes.c_int),
        ("o_bias", ctypes.c_int), ("mlp_bias", ctypes.c_int), ("qk_norm", ctypes.c_int),
        ("tie_word_embeddings", ctypes.c_int), ("emb_scale", ctypes.c_float), ("query_scale", ctypes.c_float),
        ("attn_softcap", ctypes.c_float), ("final_softcap", ctypes.c_float), ("rope_dim", ctypes.c_int),
        ("rope_theta", ctypes.c_float), ("rope_local_theta", ctypes.c_float), ("rope_scaling", ctypes.c_int),
        ("rope_factor", ctypes.c_float), ("rope_low_freq_factor", ctypes.c_float),
        ("rope_high_freq_factor", ctypes.c_float), ("rope_orig_max_pos", ctypes.c_int),
        ("yarn_beta_fast", ctypes.c_float), ("yarn_beta_slow", ctypes.c_float), ("rope_attn_factor", ctypes.c_float),
        ("rope_short_factor", ctypes.c_float * AS_MAX_ROPE_PAIRS), ("rope_long_factor", ctypes.c_float * AS_MAX_ROPE_PAIRS),
        ("sliding_window", ctypes.c_int), ("layer_sliding", ctypes.c_ubyte * AS_MAX_LAYERS),
        ("bos_token_id", ctypes.c_int), ("eos_token_id", ctypes.c_int),
        ("n_dec_layer", ctypes.c_int), ("decoder_start_token_id", ctypes.c_int), ("pre_norm", ctypes.c_int),
        ("layernorm_embedding", ctypes.c_int), ("rel_buckets", ctypes.c_int), ("rel_max_distance", ctypes.c_int),
        ("head_in_scale", ctypes.c_float), ("n_eos_ids", ctypes.c_int), ("eos_ids", ctypes.c_int * AS_MAX_EOS_IDS),
        ("forced_bos_token_id", ctypes.c_int), ("forced_eos_token_id", ctypes.c_int),
        ("n_bad_words", ctypes.c_int), ("bad_word_len", ctypes.c_int * AS_MAX_BAD_WORDS),
        ("bad_words", (ctypes.c_int32 * AS_MAX_BAD_WORD_LEN) * AS_MAX_BAD_WORDS),
    ]


class Encoding(ctypes.Structure):
    """as_encoding."""
    _fields_ = [
        ("n", ctypes.c_int), ("ids", ctypes.POINTER(ctypes.c_int32)), ("type_ids", ctypes.POINTER(ctypes.c_int32)),
        ("mask", ctypes.POINTER(ctypes.c_int32)), ("start", ctypes.POINTER(ctypes.c_int32)),
        ("end", ctypes.POINTER(ctypes.c_int32)), ("seq", ctypes.POINTER(ctypes.c_int8)),
        ("pieces", ctypes.POINTER(ctypes.c_char_p)), ("n_warnings", ctypes.c_int), ("warning", ctypes.c_char * 256),
        ("type_ids_given", ctypes.c_int),
    ]


class EncodeOpts(ctypes.Structure):
    _fields_ = [("max_len", ctypes.c_int), ("truncate", ctypes.c_int)]


class CaptureSpec(ctypes.Structure):
    _fields_ = [("what", ctypes.c_uint), ("layer", ctypes.c_int), ("head", ctypes.c_int),
                ("threads", ctypes.c_int), ("ablate", ctypes.c_uint), ("intervene", ctypes.c_void_p)]


class RunArray(ctypes.Structure):
    """as_run_array."""
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * 4)]


class SalOpts(ctypes.Structure):
    """sal_opts (include/attnscope/analysis.h)."""
    _fields_ = [("method", ctypes.c_int), ("target", ctypes.c_int), ("steps", ctypes.c_int),
                ("attn_out", ctypes.POINTER(ctypes.c_float)), ("threads", ctypes.c_int)]


class SalResult(ctypes.Structure):
    """sal_result."""
    _fields_ = [
        ("method", ctypes.c_int), ("T", ctypes.c_int), ("C", ctypes.c_int), ("target", ctypes.c_int),
        ("predicted", ctypes.c_int), ("scores", ctypes.POINTER(ctypes.c_float)),
        ("logits", ctypes.POINTER(ctypes.c_float)), ("probs", ctypes.POINTER(ctypes.c_float)),
        ("steps", ctypes.c_int), ("ig_sum", ctypes.c_float), ("ig_delta", ctypes.c_float), ("ig_gap", ctypes.c_float),
    ]


class AttrOpts(ctypes.Structure):
    """attr_opts (include/attnscope/analysis.h)."""
    _fields_ = [("method", ctypes.c_int), ("target", ctypes.c_int), ("position", ctypes.c_int),
                ("threads", ctypes.c_int), ("layers", ctypes.c_int)]


class AttrResult(ctypes.Structure):
    """attr_result."""
    _fields_ = [
        ("method", ctypes.c_int), ("T", ctypes.c_int), ("L", ctypes.c_int), ("H", ctypes.c_int),
        ("ndim", ctypes.c_int), ("shape", ctypes.c_int64 * 4), ("data", ctypes.POINTER(ctypes.c_float)),
        ("target", ctypes.c_int), ("position", ctypes.c_int), ("logit", ctypes.c_float),
    ]


class AnOpts(ctypes.Structure):
    """an_opts."""
    _fields_ = [
        ("model_dir", ctypes.c_char_p), ("sst2", ctypes.c_char_p), ("conllu", ctypes.c_char_p),
        ("limit", ctypes.c_int), ("threads", ctypes.c_int), ("chunk", ctypes.c_int), ("explain", ctypes.c_int),
        ("min_rel", ctypes.c_int), ("progress", ctypes.c_int), ("quiet", ctypes.c_int), ("topk", ctypes.c_int),
        ("source", ctypes.c_char_p), ("target", ctypes.c_char_p), ("gold", ctypes.c_char_p),
        ("precision", ctypes.c_int),
    ]


class GenOpts(ctypes.Structure):
    """gen_opts (include/attnscope/generate.h)."""
    _fields_ = [("max_new", ctypes.c_int), ("temperature", ctypes.c_double), ("top_k", ctypes.c_int),
                ("seed", ctypes.c_uint64), ("stop_eos", ctypes.c_int), ("rows", ctypes.c_int),
                ("threads", ctypes.c_int), ("full_forward", ctypes.c_int), ("probs", ctypes.c_int),
                ("top", ctypes.c_int)]


class GenResult(ctypes.Structure):
    """gen_result."""
    _fields_ = [("prompt_len", ctypes.c_int), ("steps", ctypes.c_int), ("L", ctypes.c_int), ("H", ctypes.c_int),
                ("T", ctypes.c_int), ("K", ctypes.c_int), ("cached", ctypes.c_int),
                ("ids", ctypes.POINTER(ctypes.c_int32)), ("gen", ctypes.POINTER(ctypes.c_int32)),
                ("rows", ctypes.POINTER(ctypes.c_float)), ("probs", ctypes.POINTER(ctypes.c_float)),
                ("top", ctypes.c_int), ("top_ids", ctypes.POINTER(ctypes.c_int32)),
                ("top_probs", ctypes.POINTER(ctypes.c_float))]


class BeamOpts(ctypes.Structure):
    """gen_beam_opts (include/attnscope/beam.h)."""
    _fields_ = [("beams", ctypes.c_int), ("num_return", ctypes.c_int), ("early_stopping", ctypes.c_int),
                ("length_penalty", ctypes.c_double), ("threads", ctypes.c_int), ("full_forward", ctypes.c_int)]


class BeamResult(ctypes.Structure):
    """gen_beam_result."""
    _fields_ = [("n", ctypes.c_int), ("cap", ctypes.c_int), ("ids", ctypes.POINTER(ctypes.c_int32)),
                ("len", ctypes.POINTER(ctypes.c_int)), ("sum_logprobs", ctypes.POINTER(ctypes.c_float)),
                ("score", ctypes.POINTER(ctypes.c_double))]


class BeamRows(ctypes.Structure):
    """gen_beam_rows."""
    _fields_ = [("R", ctypes.c_int), ("pl", ctypes.c_int), ("L", ctypes.c_int), ("H", ctypes.c_int),
                ("Ts", ctypes.c_int), ("Tmax", ctypes.c_int), ("Smax", ctypes.c_int),
                ("seqs", ctypes.POINTER(ctypes.c_int32)), ("lens", ctypes.POINTER(ctypes.c_int32)),
                ("scores", ctypes.POINTER(ctypes.c_float)), ("sums", ctypes.POINTER(ctypes.c_float)),
                ("rows", ctypes.POINTER(ctypes.c_float)), ("xrows", ctypes.POINTER(ctypes.c_float)),
                ("best", ctypes.POINTER(ctypes.c_float)), ("xbest", ctypes.POINTER(ctypes.c_float))]


GEN_MAX_BEAMS = 16
GEN_MAX_TOP = 20


# Bytes of zeros after every structure the package allocates: a field the header appends
# later (options: 0 = default; results: written by C) lands there instead of past the
# allocation, until the mirror above follows the header (the layout test says when).
STRUCT_SLACK = 512


def new(cls, **fields):
    """A zeroed cls with STRUCT_SLACK spare bytes after it, fields set."""
    obj = cls.from_buffer(bytearray(ctypes.sizeof(cls) + STRUCT_SLACK))
    for k, v in fields.items():
        setattr(obj, k, v)
    return obj


# (struct, C name) pairs the layout test checks against the header
STRUCTS = [(Error, "as_error"), (Config, "as_config"), (Encoding, "as_encoding"), (EncodeOpts, "as_encode_opts"),
           (CaptureSpec, "as_capture_spec"), (RunArray, "as_run_array"), (SalOpts, "sal_opts"),
           (SalResult, "sal_result"), (AttrOpts, "attr_opts"), (AttrResult, "attr_result"), (AnOpts, "an_opts"),
           (GenOpts, "gen_opts"), (GenResult, "gen_result"), (BeamOpts, "gen_beam_opts"),
           (BeamResult, "gen_beam_result"), (BeamRows, "gen_beam_rows")]

_P = ctypes.POINTER
_PROTOS = {
    # name: (restype, argtypes)
    "as_model_load": (ctypes.c_int, [ctypes.c_char_p, _P(ctypes.c_void_p), _P(Error)]),
    "as_model_free": (None, [ctypes.c_void_p]),
    "as_model_set_precision": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, _P(Error)]),
    "as_model_precision": (ctypes.c_int, [ctypes.c_void_p]),
    "as_model_config": (_P(Config), [ctypes.c_void_p]),
    "as_model_heads": (ctypes.c_uint, [ctypes.c_void_p]),
    "as_model_dtype": (ctypes.c_int, [ctypes.c_void_p]),
    "as_model_n_params": (ctypes.c_size_t, [ctypes.c_void_p]),
    "as_model_dir": (ctypes.c_char_p, [ctypes.c_void_p]),
    "as_model_max_tokens": (ctypes.c_int, [ctypes.c_void_p]),
    "as_model_has_tokenizer": (ctypes.c_int, [ctypes.c_void_p]),
    "as_model_tokenizer_problem": (ctypes.c_char_p, [ctypes.c_void_p]),
    "as_model_token_text": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int32]),
    "as_encode": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, _P(EncodeOpts), _P(Encoding),
                                 _P(Error)]),
    "as_encoding_from_ids": (ctypes.c_int, [ctypes.c_void_p, _P(ctypes.c_int32), _P(ctypes.c_int32), ctypes.c_int,
                                            _P(Encoding), _P(Error)]),
    "as_encoding_free": (None, [_P(Encoding)]),
    "as_tokens_json": (ctypes.c_void_p, [ctypes.c_void_p, _P(Encoding)]),
    "as_forward": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), _P(CaptureSpec), _P(ctypes.c_void_p), _P(Error)]),
    "as_run_free": (None, [ctypes.c_void_p]),
    "as_run_attn": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]),
    "as_run_scores": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]),
    "as_run_kv_group": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "as_run_arrays": (None, [ctypes.c_void_p, RunArray * RUN_ARRAYS_ROOM]),
    "as_forward_seq2seq": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), _P(Encoding), _P(CaptureSpec),
                                          _P(ctypes.c_void_p), _P(Error)]),
    "as_seq2seq_shift_target": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), _P(Encoding), _P(Error)]),
    "as_run_all_arrays": (ctypes.c_int, [ctypes.c_void_p, RunArray * RUN_ARRAYS_ROOM]),
    "as_run_write_npz_seq2seq": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), _P(Encoding), ctypes.c_void_p,
                                                ctypes.c_char_p, _P(Error)]),
    "as_run_write_npz": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), ctypes.c_void_p, ctypes.c_char_p, _P(Error)]),
    "as_attn_scale": (ctypes.c_float, [_P(Config), ctypes.c_int]),
    "as_set_quiet": (None, [ctypes.c_int]),
    "sal_compute": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), _P(SalOpts), _P(SalResult), _P(Error)]),
    "sal_result_free": (None, [_P(SalResult)]),
    "attr_compute": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), _P(AttrOpts), _P(AttrResult), _P(Error)]),
    "attr_result_free": (None, [_P(AttrResult)]),
    "gen_generate": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), _P(ctypes.c_int32), ctypes.c_int, _P(GenOpts),
                                    _P(GenResult), _P(Error)]),
    "gen_result_free": (None, [_P(GenResult)]),
    "gen_beam_search": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), _P(ctypes.c_int32), ctypes.c_int, ctypes.c_int,
                                       _P(BeamOpts), _P(BeamResult), _P(Error)]),
    "gen_beam_result_free": (None, [_P(BeamResult)]),
    "gen_beam_rows_init": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), _P(BeamResult), ctypes.c_int, ctypes.c_int,
                                          ctypes.c_int, _P(BeamRows), _P(Error)]),
    "gen_result_rows": (ctypes.c_int, [ctypes.c_void_p, _P(Encoding), _P(GenResult), ctypes.c_int, _P(BeamRows),
                                       _P(Error)]),
    "gen_beam_rows_free": (None, [_P(BeamRows)]),
    "gen_is_eos": (ctypes.c_int, [_P(Config), ctypes.c_int]),
    "an_analyze": (ctypes.c_int, [ctypes.c_char_p, _P(AnOpts), _P(Error)]),
    "an_import_dir": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, _P(AnOpts), _P(Error)]),
    "an_export_db": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, _P(Error)]),
}


def _candidates():
    env = os.environ.get("ATTNSCOPE_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    # an installed package (python/install_venv.py, `make python`) carries its library
    yield os.path.join(here, "lib", "libattnscope.so")
    root = os.path.dirname(os.path.dirname(here))
    # the build folders of the repository (this package lives in <repo>/python/attnscope)
    for b in ("build", "build-py", "build-release"):
        yield os.path.join(root, b, "libattnscope.so")
    found = ctypes.util.find_library("attnscope")
    if found:
        yield found


def find_library():
    """Path of libattnscope.so: $ATTNSCOPE_LIB, else the installed package's
    attnscope/lib/libattnscope.so, else <repo>/build*/libattnscope.so, else the system's.
    Raises OSError naming where it looked."""
    tried = []
    for c in _candidates():
        tried.append(c)
        if os.path.isfile(c) or (not os.path.dirname(c) and c):
            return c
    raise OSError("attnscope: libattnscope.so not found (looked at %s); build it with cmake "
                  "(-DAS_SHARED=ON, the default) or set ATTNSCOPE_LIB" % ", ".join(tried))


_lib = None


def lib():
    """The loaded library with its prototypes set (loaded once)."""
    global _lib
    if _lib is None:
        path = find_library()
        dll = ctypes.CDLL(path)  # CDLL: the GIL is released during every call
        for name, (res, args) in _PROTOS.items():
            f = getattr(dll, name)
            f.restype = res
            f.argtypes = args
        dll.path = path
        _lib = dll
    return _lib


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def take_string(ptr):
    """The NUL-terminated UTF-8 string at ptr (malloc'd by the library), freed; None for NULL."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", errors="replace")
    finally:
        _libc.free(ptr)
