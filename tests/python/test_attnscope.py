#!/usr/bin/python3
"""test_attnscope.py — the Python package (python/attnscope) against the CLI and the C
headers: every array equals `attnscope run --format npz` bit for bit (fixture BERT and
GPT-2 on ids, the shipped models on text and pairs, partial captures); arrays are views
of the run's memory (no copy) that keep it alive; engine errors raise attnscope.Error
with the CLI's one-line message; two threads run forwards at once; saliency equals
`attnscope saliency --format json` and attribute `attnscope attribute --format npz`;
encoder-decoder runs (BART, T5 on ids with target_ids; BART with a tokenizer on text with
target) hold the npz's encoder_/decoder_/cross_ arrays and decoder inputs, equal to
`attnscope run --target(-ids)`, and their head / model views embed the three kinds;
generate (GPT-2 greedy and sampled, BART beam search, T5 greedy) gives `attnscope generate
--out`'s ids, scores and attention rows exactly, and its printed text;
analyze + open_db equal `attnscope export`; the
ctypes structures match the headers (offsets printed by a compiled C program); the
shared library exports exactly the public API; the notebook views embed the bundle and
the run, and the bertviz drop-in embeds the same data.

Usage: ATTNSCOPE_BIN=build/attnscope ATTNSCOPE_LIB=build/libattnscope.so \
       /usr/bin/python3 tests/python/test_attnscope.py
"""
import base64
import ctypes
import gc
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import attnscope  # noqa: E402
from attnscope import _lib, core, views  # noqa: E402

BIN = os.environ.get("ATTNSCOPE_BIN", os.path.join(ROOT, "build", "attnscope"))
FIX = os.path.join(ROOT, "tests", "ref", "fixtures", "models")
SST2 = os.path.join(ROOT, "models", "attnscope-sst2")
DEMO = os.path.join(ROOT, "models", "demo-bert")


def cli(*args, check=True):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError("attnscope %s: %s" % (" ".join(args), p.stderr))
    return p


def bart_with_tokenizer(d):
    """bart_tiny with a ten-token byte-level BPE tokenizer.json (tests/cli/test_encdec.sh's),
    in folder d; returns d."""
    os.makedirs(d, exist_ok=True)
    src = os.path.join(FIX, "bart_tiny")
    with open(os.path.join(src, "config.json")) as f, open(os.path.join(d, "config.json"), "w") as g:
        g.write(f.read())
    os.symlink(os.path.join(src, "model.safetensors"), os.path.join(d, "model.safetensors"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4, "b": 5, "\u0120": 6, "ab": 7, "\u0120b": 8, "\u0120a": 9}
    special = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                "special": True} for c, i in list(vocab.items())[:4]]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special, "normalizer": None,
           "pre_tokenizer": bl, "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                                                   "trim_offsets": True, "add_prefix_space": False},
           "decoder": dict(bl, add_prefix_space=True),
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": ["a b", "\u0120 b", "\u0120 a"]}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    return d


def cli_npz(model, *args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "run.npz")
        cli("run", "--model", model, *args, "--format", "npz", "--out", out, "--quiet")
        with np.load(out) as z:
            return {k: z[k] for k in z.files}


class TestArrays(unittest.TestCase):
    """Every array of a run equals the CLI's npz, bit for bit."""

    def assert_same(self, r, z):
        """Every array of the npz is an attribute of r with the same dtype, shape and bytes, and
        every captured tensor of r is in the npz."""
        strings = {"tokens": r.token_pieces, "token_text": r.token_text}
        for name, want in z.items():
            if name in strings:
                self.assertEqual(strings[name], [str(s) for s in want], name)
                continue
            got = getattr(r, name, None)
            self.assertIsNotNone(got, "%s is in the npz but not in the Result" % name)
            self.assertEqual((got.dtype, got.shape), (want.dtype, want.shape), name)
            self.assertEqual(got.tobytes(), want.tobytes(), "%s differs from the npz" % name)
        self.assertLessEqual(set(r.arrays()), set(z))
        self.assertEqual(len(r.tokens), r.sizes["tokens"])

    def test_fixture_models_on_ids(self):
        for name, ids in (("bert", [2, 17, 33, 5, 91, 3]), ("gpt2", [11, 40, 7, 93, 2, 64, 5]),
                          ("llama", [1, 5, 9, 13, 7, 22, 3]), ("mistral_swa", [1, 8, 30, 2, 44, 17, 9, 5]),
                          ("gemma2", [2, 11, 40, 7, 3, 19, 52])):
            with self.subTest(model=name):
                m = attnscope.load(os.path.join(FIX, name))
                r = m.run_ids(ids)
                self.assert_same(r, cli_npz(m.path, "--ids", ",".join(map(str, ids))))
                r = m.run_ids(ids, type_ids=[0] * len(ids))
                self.assert_same(r, cli_npz(m.path, "--ids", ",".join(map(str, ids)),
                                            "--type-ids", ",".join("0" * len(ids))))

    def test_text_and_pairs(self):
        for path in (SST2, DEMO):
            if not os.path.isdir(path):
                continue
            m = attnscope.load(path)
            with self.subTest(model=path, kind="single"):
                r = m.run("the movie was surprisingly good .")
                self.assert_same(r, cli_npz(path, "--text", "the movie was surprisingly good ."))
                self.assertEqual(r.tokens, json.loads(cli("run", "--model", path, "--text",
                                                          "the movie was surprisingly good .",
                                                          "--format", "json", "--capture", "attn").stdout)["tokens"])
            with self.subTest(model=path, kind="pair"):
                r = m.run("the movie was good .", text_b="i would watch it again .")
                self.assert_same(r, cli_npz(path, "--text", "the movie was good .", "--text-b",
                                            "i would watch it again ."))
                self.assertTrue(any(t["segment"] == 1 for t in r.tokens))

    def test_grouped_query_heads(self):
        """A grouped-query model (2 key/value heads for 4 query heads): kv_group, and one head."""
        path = os.path.join(FIX, "mistral_swa")
        m = attnscope.load(path)
        r = m.run_ids([1, 8, 30, 2, 44, 17, 9, 5], head=3)
        self.assert_same(r, cli_npz(path, "--ids", "1,8,30,2,44,17,9,5", "--head", "3"))
        self.assertEqual(list(r.kv_group), [1])
        self.assertEqual(list(m.run_ids([1, 2, 3]).kv_group), [0, 0, 1, 1])

    def test_save_npz_is_the_cli_file(self):
        """Result.save_npz is the library's npz writer: the CLI's file, byte for byte."""
        m = attnscope.load(SST2)
        with tempfile.TemporaryDirectory() as d:
            mine, cli_out = os.path.join(d, "py.npz"), os.path.join(d, "cli.npz")
            m.run("the movie was good .", text_b="i liked it .", capture="attn,hidden").save_npz(mine)
            cli("run", "--model", SST2, "--text", "the movie was good .", "--text-b", "i liked it .",
                "--capture", "attn,hidden", "--format", "npz", "--out", cli_out)
            with open(mine, "rb") as a, open(cli_out, "rb") as b:
                self.assertEqual(a.read(), b.read())
            with self.assertRaisesRegex(attnscope.Error, "cannot"):
                m.run("a").save_npz(os.path.join(d, "no-such-dir", "x.npz"))

    def test_stats_and_thumbnails(self):
        """capture="stats,thumbs": the head statistics and the pooled thumbnails of a long-input
        run, bit for bit the CLI's npz, and each thumbnail block's max / mean of the dense weights."""
        path = os.path.join(FIX, "llama")
        ids = [1 + (7 * i) % 50 for i in range(70)]
        m = attnscope.load(path)
        r = m.run_ids(ids, capture="stats,thumbs")
        self.assert_same(r, cli_npz(path, "--ids", ",".join(map(str, ids)), "--capture", "stats,thumbs"))
        self.assertIsNone(r.attentions)
        L, H = r.sizes["layers"], r.sizes["heads"]
        self.assertEqual(r.thumbnails_max.shape, (L, H, 64, 64))
        a = m.run_ids(ids, capture="attn").attentions
        edges = [b * 70 // 64 for b in range(65)]
        for l, h, bi, bj in ((0, 0, 0, 0), (L - 1, H - 1, 63, 10), (1 % L, 0, 40, 39)):
            blk = a[l, h, edges[bi]:edges[bi + 1], edges[bj]:edges[bj + 1]]
            self.assertAlmostEqual(float(r.thumbnails_max[l, h, bi, bj]), float(blk.max()), places=6)
            self.assertAlmostEqual(float(r.thumbnails_mean[l, h, bi, bj]), float(blk.astype(np.float64).mean()), places=6)

    def test_partial_capture(self):
        m = attnscope.load(SST2)
        r = m.run("a fine film .", layer=2, head=1, capture="attn,qkv")
        z = cli_npz(SST2, "--text", "a fine film .", "--layer", "2", "--head", "1", "--capture", "attn,qkv")
        self.assert_same(r, z)
        self.assertEqual(r.attentions.shape[:2], (1, 1))
        self.assertIsNone(r.attention_scores)
        self.assertEqual(list(r.layers), [2])


class TestMemory(unittest.TestCase):
    """Arrays are views of the run's one block; the run lives while any array does."""

    def test_views_of_the_run(self):
        m = attnscope.load(SST2)
        r = m.run("the plot was thin but the acting was great .")
        L, H, T, _ = r.attentions.shape
        for name, a in r.arrays().items():
            self.assertFalse(a.flags["OWNDATA"], name)
            self.assertIs(a.base.owner, r._owner, name)
        run_ptr = r._owner.ptr
        for l in range(L):
            for h in range(H):
                addr = _lib.lib().as_run_attn(run_ptr, l, h)
                self.assertEqual(r.attentions[l, h].ctypes.data, addr)
                other = np.ctypeslib.as_array((ctypes.c_float * (T * T)).from_address(addr)).reshape(T, T)
                self.assertTrue(np.shares_memory(other, r.attentions))
        for l in range(L):  # scores too: the run's own pointers, not copies
            for h in range(H):
                self.assertEqual(r.attention_scores[l, h].ctypes.data, _lib.lib().as_run_scores(run_ptr, l, h))

    def test_run_freed_when_no_array_is_left(self):
        m = attnscope.load(SST2)
        gc.collect()
        live0 = core._RunOwner.live
        r = m.run("keep me alive .")
        a = r.attentions
        want = a.copy()
        del r
        gc.collect()
        self.assertEqual(core._RunOwner.live, live0 + 1, "an array keeps the run")
        self.assertTrue(np.array_equal(a, want))
        del a
        gc.collect()
        self.assertEqual(core._RunOwner.live, live0, "run freed with its last array")


class TestErrors(unittest.TestCase):
    """attnscope.Error carries the engine's one-line message (the CLI prints the same)."""

    def cli_error(self, *args):
        p = cli("run", *args, "--format", "npz", "--out", os.path.join(tempfile.gettempdir(), "x.npz"), check=False)
        self.assertEqual(p.returncode, 2)
        return p.stderr.strip().removeprefix("attnscope: ")

    def test_messages(self):
        missing = os.path.join(ROOT, "models", "no-such-model")
        with self.assertRaises(attnscope.Error) as e:
            attnscope.load(missing)
        self.assertEqual(str(e.exception), self.cli_error("--model", missing, "--text", "a"))
        self.assertEqual(e.exception.code, 2)
        m = attnscope.load(SST2)
        for kw, args in (({"text": ""}, ("--text", "")),
                         ({"text": "a", "layer": 9}, ("--text", "a", "--layer", "9"))):
            with self.subTest(args=args), self.assertRaises(attnscope.Error) as e:
                m.run(**kw)
            self.assertEqual(str(e.exception), self.cli_error("--model", SST2, *args))
            self.assertNotIn("\n", str(e.exception))
        fx = attnscope.load(os.path.join(FIX, "bert"))
        with self.assertRaises(attnscope.Error) as e:
            fx.run("a")
        self.assertEqual(str(e.exception), self.cli_error("--model", fx.path, "--text", "a"))
        with self.assertRaises(attnscope.Error) as e:
            fx.run_ids([1, 99999])
        self.assertEqual(str(e.exception), self.cli_error("--model", fx.path, "--ids", "1,99999"))
        with self.assertRaisesRegex(attnscope.Error, "bad capture 'nope'"):
            m.run("a", capture="nope")


class TestThreads(unittest.TestCase):
    def test_two_threads_run_forwards(self):
        """ctypes releases the GIL in as_forward: two Python threads run forwards at once and
        both finish with the same arrays as a run alone."""
        m = attnscope.load(SST2)
        text = " ".join(["the film is long and the jokes are old but the cast is warm ."] * 6)
        alone = m.run(text, threads=1).attentions.copy()
        out, errs = {}, []

        def work(k):
            try:
                for _ in range(3):
                    out[k] = m.run(text, threads=1).attentions.copy()
            except Exception as e:  # reported below
                errs.append(e)
        ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)
        self.assertFalse(any(t.is_alive() for t in ts), "a forward thread did not finish")
        self.assertEqual(errs, [])
        for k in range(2):
            self.assertEqual(out[k].tobytes(), alone.tobytes())


class TestModel(unittest.TestCase):
    def assert_same_encdec(self, r, z):
        """An encoder-decoder Result against the CLI's npz: every array, strings included."""
        self.assertTrue(r.encoder_decoder)
        strings = {"tokens": r.encoder_tokens, "token_text": np.array(r.token_text)}
        for name, want in z.items():
            got = strings.get(name, getattr(r, name, None))
            self.assertIsNotNone(got, "%s is in the npz but not in the Result" % name)
            self.assertEqual((got.dtype, got.shape), (want.dtype, want.shape), name)
            self.assertEqual(got.tobytes(), want.tobytes(), "%s differs from the npz" % name)
        self.assertLessEqual(set(r.arrays()), set(z))
        self.assertEqual(len(r.decoder_token_dicts), r.sizes["decoder_tokens"])

    def test_encoder_decoder(self):
        src, tgt = [0, 17, 45, 9, 88, 23, 2], [2, 0, 31, 64, 7]
        for name in ("bart_tiny", "t5_tiny"):
            with self.subTest(model=name):
                m = attnscope.load(os.path.join(FIX, name))
                r = m.run_ids(src, target_ids=tgt)
                z = cli_npz(m.path, "--ids", ",".join(map(str, src)), "--target-ids", ",".join(map(str, tgt)))
                self.assert_same_encdec(r, z)
                self.assertEqual(r.cross_attentions.shape, (3, 3, len(tgt), len(src)))
                self.assertEqual(list(r.decoder_input_ids), tgt)
                with tempfile.TemporaryDirectory() as d:
                    out = r.save_npz(os.path.join(d, "r.npz"))
                    with np.load(out) as y:
                        self.assertEqual(sorted(y.files), sorted(z))
        with tempfile.TemporaryDirectory() as d:
            m = attnscope.load(bart_with_tokenizer(os.path.join(d, "bart")))
            r = m.run("ab ba", target="ba ab")
            self.assert_same_encdec(r, cli_npz(m.path, "--text", "ab ba", "--target", "ba ab"))
            self.assertEqual(list(r.decoder_input_ids), [2, 0, 5, 4, 6, 7])  # shifted right
            self.assertEqual(list(r.decoder_tokens), ["</s>", "<s>", "b", "a", "\u0120", "ab"])
            self.assertEqual(list(r.encoder_tokens), ["<s>", "ab", "\u0120b", "a", "</s>"])
            self.assertEqual(r.target, "ba ab")
            with self.assertRaisesRegex(attnscope.Error, "encoder-decoder model .*give the decoder input"):
                m.run("ab ba")
            with self.assertRaisesRegex(attnscope.Error, "one of them"):
                m.run("ab ba", target="ab", target_ids=[2, 0])
            with self.assertRaisesRegex(attnscope.Error, "outside the vocabulary"):
                m.run("ab ba", target_ids=[2, 500])
        with self.assertRaisesRegex(attnscope.Error, "not an encoder-decoder model"):
            attnscope.load(os.path.join(FIX, "bert")).run_ids([2, 17, 3], target_ids=[1])

    def test_config(self):
        m = attnscope.load(SST2)
        with open(os.path.join(SST2, "config.json")) as f:
            cfg = json.load(f)
        c = m.config
        self.assertEqual(c["n_layer"], cfg["num_hidden_layers"])
        self.assertEqual(c["n_head"], cfg["num_attention_heads"])
        self.assertEqual(c["d_model"], cfg["hidden_size"])
        self.assertEqual(c["model_type"], "bert")
        self.assertEqual(c["arch"], "bert")
        self.assertEqual(c["id2label"], [cfg["id2label"][str(i)] for i in range(len(cfg["id2label"]))])
        self.assertIn("classifier", c["heads_present"])
        self.assertTrue(c["tokenizer"])
        g = attnscope.load(os.path.join(FIX, "gpt2")).config
        self.assertEqual((g["arch"], g["causal"], g["tokenizer"]), ("gpt2", 1, False))

    def test_saliency_equals_cli(self):
        m = attnscope.load(SST2)
        text = "a gorgeous , witty , seductive movie ."
        for method in ("grad", "gxi", "ig"):
            with self.subTest(method=method):
                s = m.saliency(text, method=method, target=0)
                j = json.loads(cli("saliency", "--model", SST2, "--text", text, "--method", method, "--target", "0",
                                   "--format", "json").stdout)
                self.assertEqual((s["target"], s["predicted"]), (j["target"], j["predicted"]))
                self.assertEqual(s["labels"], j["labels"])
                want = np.array([t["score"] for t in j["tokens"]], np.float32)
                np.testing.assert_allclose(s["scores"], want, rtol=2e-6, atol=1e-30)  # JSON keeps 7 digits
                np.testing.assert_allclose(s["probs"], np.array(j["probs"], np.float32), rtol=2e-6)
        self.assertEqual(m.saliency(text, target="POSITIVE")["target"], 1)
        gpt2 = os.path.join(FIX, "gpt2")
        with self.assertRaises(attnscope.Error) as e:
            attnscope.load(gpt2).saliency(None, ids=[1, 2, 3])
        p = cli("saliency", "--model", gpt2, "--ids", "1,2,3", check=False)
        self.assertEqual(str(e.exception), p.stderr.strip().removeprefix("attnscope: "))

    def test_precision_bf16(self):
        """load(..., precision="bf16"): saliency equals `attnscope saliency --precision bf16`; it
        and the attention differ from F32 by BF16 rounding only; a bad precision raises Error."""
        text = "a gorgeous , witty , seductive movie ."
        mb, mf = attnscope.load(SST2, precision="bf16"), attnscope.load(SST2)
        self.assertEqual((mb.precision, mf.precision), ("bf16", "f32"))
        sb, sf = mb.saliency(text, target=1), mf.saliency(text, target=1)
        j = json.loads(cli("saliency", "--model", SST2, "--text", text, "--target", "1", "--format", "json",
                           "--precision", "bf16").stdout)
        np.testing.assert_allclose(sb["scores"], np.array([t["score"] for t in j["tokens"]], np.float32),
                                   rtol=2e-6, atol=1e-30)
        d = np.abs(sb["scores"] - sf["scores"]).max()
        self.assertTrue(0 < d <= 0.05 * np.abs(sf["scores"]).max(), d)
        ab, af = mb.run(text).arrays()["attentions"], mf.run(text).arrays()["attentions"]
        self.assertTrue(0 < np.abs(ab - af).max() <= 0.03, np.abs(ab - af).max())
        with self.assertRaises(attnscope.Error):
            attnscope.load(SST2, precision="fp16")


class TestGenerate(unittest.TestCase):
    """Model.generate against `attnscope generate --out FILE.npz` on the same prompt and options."""

    def cli_npz(self, model, *args):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "g.npz")
            p = cli("generate", "--model", model, *args, "--out", out, "--quiet")
            with np.load(out) as z:
                return {k: z[k] for k in z.files}, p.stdout.splitlines()

    def test_causal_greedy_and_sampled_equal_cli(self):
        m = attnscope.load(os.path.join(FIX, "gpt2"))
        for opts, kw in (([], {}), (["--top-k", "4", "--temperature", "1.5", "--seed", "3"],
                                    dict(top_k=4, temperature=1.5, seed=3))):
            z, _ = self.cli_npz(os.path.join(FIX, "gpt2"), "--ids", "1,5,9,13", "--max-new", "5", "--top", "6", *opts)
            g = m.generate(ids=[1, 5, 9, 13], max_new=5, top=6, **kw)
            np.testing.assert_array_equal(g.probs, z["generation_probs"])
            np.testing.assert_array_equal(g.top_ids, z["generation_top_ids"])
            np.testing.assert_array_equal(g.top_probs, z["generation_top_probs"])
            self.assertEqual(g.prompt_length, int(z["prompt_length"][0]))
            np.testing.assert_array_equal(g.generated_ids, z["generated_ids"])
            np.testing.assert_array_equal(g.attentions, z["generation_attentions"])  # the same steps: exact
            self.assertIsNone(g.cross_attentions)
            self.assertIsNone(g.score)
            self.assertEqual(len(g.tokens), len(g.ids))
        # the final sequence's forward gives each step's row (the steps ran on a cache) and its
        # distribution: softmax of the logits at the choosing position (no processors here)
        r = g.result(capture="attn,logits")
        P = g.prompt_length
        for s in range(g.steps):
            np.testing.assert_allclose(g.attentions[s], r.attentions[:, :, P - 1 + s, :], rtol=0, atol=1e-6)
            lg = r.logits[P - 1 + s].astype(np.float64)
            p = np.exp(lg - lg.max())
            p /= p.sum()
            np.testing.assert_allclose(g.top_probs[s], p[g.top_ids[s]], rtol=0, atol=1e-6)
            self.assertAlmostEqual(float(g.probs[s]), p[g.generated_ids[s]], delta=1e-6)
            np.testing.assert_array_equal(g.top_ids[s], np.argsort(-p, kind="stable")[:6])

    def test_encoder_decoder_beams_equal_cli(self):
        bart = os.path.join(FIX, "bart_tiny")
        z, _ = self.cli_npz(bart, "--ids", "0,17,45,9,88,23,2", "--max-new", "8", "--beams", "4", "--num-return", "3",
                            "--length-penalty", "0.5")
        g = attnscope.load(bart).generate(ids=[0, 17, 45, 9, 88, 23, 2], max_new=8, beams=4, num_return=3,
                                          length_penalty=0.5)
        self.assertEqual(len(g.hypotheses), 3)
        self.assertIs(g.hypotheses[0], g)
        P = g.prompt_length
        for r, h in enumerate(g.hypotheses):
            n = int(z["beam_lengths"][r])
            np.testing.assert_array_equal(h.ids, z["beam_sequences"][r, :n])
            self.assertEqual(np.float32(h.score), z["beam_scores"][r])
            self.assertEqual(np.float32(h.sum_logprobs), z["beam_sum_logprobs"][r])
            np.testing.assert_array_equal(h.attentions, z["beam_attentions"][r, :n - P, :, :, :n])
            np.testing.assert_array_equal(h.cross_attentions, z["beam_cross_attentions"][r, :n - P])
            np.testing.assert_array_equal(h.source_ids, z["input_ids"])
        self.assertGreaterEqual(g.hypotheses[0].score, g.hypotheses[1].score)

    def test_encoder_decoder_greedy_equals_cli(self):
        t5 = os.path.join(FIX, "t5_tiny")
        z, _ = self.cli_npz(t5, "--ids", "40,41,52,63,7,1", "--max-new", "6")
        g = attnscope.load(t5).generate(ids=[40, 41, 52, 63, 7, 1], max_new=6)
        P = g.prompt_length
        np.testing.assert_array_equal(g.generated_ids, z["generated_ids"])
        np.testing.assert_array_equal(g.cross_attentions, z["generation_cross_attentions"])
        # the decoder's rows: the npz's run is the forward over the same sequence
        for s in range(g.steps):
            np.testing.assert_array_equal(g.attentions[s], z["decoder_attentions"][:, :, P - 1 + s, :])
        self.assertEqual([t["id"] for t in g.source_tokens], [40, 41, 52, 63, 7, 1])

    def test_text_equals_the_cli_lines(self):
        with tempfile.TemporaryDirectory() as d:
            bart = bart_with_tokenizer(os.path.join(d, "bart"))
            m = attnscope.load(bart)
            p = cli("generate", "--model", bart, "--text", "ab a b", "--max-new", "5", "--beams", "3",
                    "--num-return", "2", "--quiet")
            g = m.generate(text="ab a b", max_new=5, beams=3, num_return=2)
            self.assertEqual([h.text for h in g.hypotheses], p.stdout.split("\n")[:2])
            self.assertEqual(g.source_tokens[0]["text"], "<s>")

    def test_bad_options_raise_error(self):
        m = attnscope.load(os.path.join(FIX, "gpt2"))
        for kw, what in ((dict(beams=2, temperature=1.0), "beam search does not sample"),
                         (dict(beams=2, seed=4), "seed"), (dict(num_return=2), "beam search only"),
                         (dict(beams=2, num_return=3), "num_return"), (dict(beams=17), "beams"),
                         (dict(top_k=3), "temperature above 0"), (dict(target_ids=[1]), "not an encoder-decoder"),
                         (dict(max_new=0), "max_new"), (dict(top=21), "top"), (dict(beams=2, top=3), "top")):
            with self.assertRaisesRegex(attnscope.Error, what):
                m.generate(ids=[1, 5], **kw)
        with self.assertRaisesRegex(attnscope.Error, "exactly one of text and ids"):
            m.generate()
        with self.assertRaisesRegex(attnscope.Error, "no causal-LM head"):
            attnscope.load(SST2).generate(text="a fine film")
        with self.assertRaisesRegex(attnscope.Error, "outside the vocabulary|vocabulary"):
            m.generate(ids=[1, 10 ** 6])


class TestAttribute(unittest.TestCase):
    def test_attribute_equals_cli(self):
        """Model.attribute equals `attnscope attribute --format npz` (one thread each) for
        every method, on a text pair of the shipped classifier and on the GPT-2 fixture's
        ids with a target token and position; its errors are the CLI's. The package's
        "grad" (gradient-weighted attention) is the CLI's "grad-attn"."""
        m = attnscope.load(SST2)
        gpt2 = os.path.join(FIX, "gpt2")
        g = attnscope.load(gpt2)
        cases = [(m, SST2, ["--text", "the movie was not good .", "--text-b", "but the actors were great ."],
                  dict(text="the movie was not good .", text_b="but the actors were great ."), {}),
                 (g, gpt2, ["--ids", "40,53,11,111,6,29,53,49,17"], dict(text=None, ids=[40, 53, 11, 111, 6, 29, 53, 49, 17]),
                  dict(target=5, position=3))]
        with tempfile.TemporaryDirectory() as d:
            for model, path, inp, kw, tp in cases:
                for method in _lib.ATTR_METHODS:
                    with self.subTest(model=path, method=method):
                        grad = method in ("grad", "importance")
                        extra = ["--target", str(tp["target"]), "--position", str(tp["position"])] if grad and tp else []
                        out = os.path.join(d, "a.npz")
                        name = "grad-attn" if method == "grad" else method
                        cli("attribute", "--model", path, *inp, "--method", name, *extra, "--threads", "1",
                            "--format", "npz", "--out", out)
                        a = model.attribute(**kw, method=method, threads=1, **(tp if grad else {}))
                        with np.load(out) as z:
                            np.testing.assert_array_equal(a["data"], z[name])
                            self.assertEqual([t["id"] for t in a["tokens"]], list(z["input_ids"]))
                            if grad:
                                self.assertEqual((a["target"], a["position"]), (z["target"][0], z["position"][0]))
                                self.assertEqual(np.float32(a["logit"]), z["logit"][0])
        self.assertEqual(m.attribute("a good film .", method="grad", target="POSITIVE")["target"], 1)
        with self.assertRaises(attnscope.Error) as e:
            m.attribute("a good film .", method="grad", position=1)
        p = cli("attribute", "--model", SST2, "--text", "a good film .", "--method", "grad-attn", "--position", "1", check=False)
        self.assertEqual(str(e.exception), p.stderr.strip().removeprefix("attnscope: "))


def small_corpora(d):
    sst, cu = os.path.join(d, "sst.tsv"), os.path.join(d, "ud.conllu")
    with open(sst, "w") as f:
        f.write("sentence\tlabel\n")
        for i in range(12):
            f.write("it is a good film number %d .\t1\nthe story was not funny at all %d .\t0\n" % (i, i))
    with open(cu, "w") as f:
        for i in range(12):
            f.write("# text = The cat sat %d.\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n"
                    "2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_\n"
                    "4\t%d\t%d\tNUM\tCD\t_\t3\tobj\t_\tSpaceAfter=No\n5\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_\n\n"
                    % (i, i, i))
    return sst, cu


class TestAnalysis(unittest.TestCase):
    def test_analyze_and_read_equal_export(self):
        with tempfile.TemporaryDirectory() as d:
            sst, cu = small_corpora(d)
            db = os.path.join(d, "a.sqlite")
            attnscope.analyze(SST2, db, sst2=sst, conllu=cu, limit=10, threads=1, chunk=4, explain=4, min_rel=2)
            out = os.path.join(d, "heads.json")
            cli("export", "--db", db, "--out", out)
            with open(out) as f:
                exp = json.load(f)["models"][0]
            with attnscope.open_db(db) as h:
                self.assertEqual([r["status"] for r in h.runs], ["done"])
                self.assertEqual(len(h.sentences()), exp["n_sentences"])
                pairs = h.head_pairs()
                # export prints 9 significant digits (JSON_REAL_PRECISION(9)): equal to that
                np.testing.assert_allclose(pairs, np.array(exp["head_jsd"], dtype=float), rtol=1e-8, atol=0)
                heads = h.heads()
                self.assertEqual(len(heads), exp["n_layer"] * exp["n_head"])
                cols = exp["heads"]["columns"]  # export format 2
                for c in ("importance", "semantic", "syntactic", "cls", "entropy", "confidence", "n_links",
                          "head_importance", "head_importance_norm", "norm_sink_ratio", "alti_contribution"):
                    want = np.array([np.nan if v is None else v for v in cols[c]], dtype=float)
                    np.testing.assert_allclose(h.head_matrix(c).ravel(), want, rtol=1e-8, atol=0, err_msg=c)
                self.assertEqual([x["pattern"] for x in heads], cols["pattern"])
            with self.assertRaisesRegex(attnscope.Error, "analyze needs sst2 and/or conllu"):
                attnscope.analyze(SST2, db)
            # precision="bf16": a second run beside the f32 one, its entropies close but not equal
            attnscope.analyze(SST2, db, sst2=sst, conllu=cu, limit=10, threads=1, chunk=4, explain=4, min_rel=2,
                              precision="bf16")
            with attnscope.open_db(db) as h:
                self.assertEqual(len(h.runs), 2)
                (f32,) = [r for r in h.runs if "precision" not in r["params"]]
                (bf16,) = [r for r in h.runs if r["params"].get("precision") == "bf16"]
                a, b = h.head_matrix("entropy", run=f32["id"]), h.head_matrix("entropy", run=bf16["id"])
                rel = np.abs(a - b).max() / np.abs(a).max()
                self.assertTrue(0 < rel < 0.01, rel)
            with self.assertRaisesRegex(attnscope.Error, "precision must be 'f32' or 'bf16', not 'f16'"):
                attnscope.analyze(SST2, db, sst2=sst, precision="f16")
            with self.assertRaises(attnscope.Error) as e:
                attnscope.analyze(SST2, db, sst2=os.path.join(d, "missing.tsv"))
            p = cli("analyze", "--model", SST2, "--sst2", os.path.join(d, "missing.tsv"), "--db", db, check=False)
            self.assertEqual(str(e.exception), p.stderr.strip().removeprefix("attnscope: "))
            with self.assertRaisesRegex(attnscope.Error, "not a regular file"):
                attnscope.open_db(d)


class TestAbi(unittest.TestCase):
    def test_struct_layout_matches_headers(self):
        """Each mirrored field's offset and each struct's size, printed by C, equal ctypes'."""
        lines = ['#include "attnscope.h"', '#include "attnscope/analysis.h"', '#include "attnscope/beam.h"',
                 '#include "attnscope/generate.h"', "#include <stddef.h>",
                 "#include <stdio.h>", "int main(void) {"]
        want = []
        for cls, cname in _lib.STRUCTS:
            lines.append('printf("%%s %%zu\\n", "%s", sizeof(%s));' % (cname, cname))
            want.append("%s %d" % (cname, ctypes.sizeof(cls)))
            for f in cls._fields_:
                lines.append('printf("%%s.%%s %%zu\\n", "%s", "%s", offsetof(%s, %s));' % (cname, f[0], cname, f[0]))
                want.append("%s.%s %d" % (cname, f[0], getattr(cls, f[0]).offset))
        lines.append("return 0; }")
        with tempfile.TemporaryDirectory() as d:
            src, exe = os.path.join(d, "abi.c"), os.path.join(d, "abi")
            with open(src, "w") as f:
                f.write("\n".join(lines))
            subprocess.run(["cc", "-I", os.path.join(ROOT, "include"), "-o", exe, src], check=True)
            got = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split("\n")[:-1]
        self.assertEqual(got, want, "python/attnscope/_lib.py mirrors these structures: make its _fields_ "
                                    "follow the header (first differing line above)")

    def test_exports_only_the_public_api(self):
        so = _lib.find_library()
        names = set(subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True,
                                   check=True).stdout.split()[2::3])
        build = os.path.dirname(os.path.abspath(so))
        with open(os.path.join(build, "attnscope.map")) as f:
            mp = f.read()
        public = set(re.findall(r"^\s+([A-Za-z_]\w*);", mp, re.M))
        self.assertTrue(names, "no exported symbol")
        self.assertLessEqual(names, public, "exported but not in the public headers")
        for f in ("as_model_load", "as_forward", "as_run_arrays", "sal_compute", "an_analyze", "as_run_write_npz"):
            self.assertIn(f, names)


def decode_page(page, part=0):
    """(meta, {name: array}) of the run embedded in a standalone page (part: the run's
    index on a page of several); a tensor given apart ("chunks": L) is read from the
    page's layer elements of that part."""
    m = re.search(r'<script id="attnscope-data" type="application/octet-stream">([A-Za-z0-9+/=]+)</script>', page)
    raw = base64.b64decode(m.group(1))
    assert raw[:4] == b"ASTB"
    n = struct.unpack("<I", raw[4:8])[0]
    assert (8 + n) % 8 == 0
    head = json.loads(raw[8:8 + n])
    out = {}
    for t in head["tensors"]:
        dt = {"f16": "<f2", "f32": "<f4", "u8": "u1"}[t["dtype"]]
        b = raw[8 + n + t["offset"]: 8 + n + t["offset"] + t["nbytes"]]
        if "chunks" in t:
            layers = {int(l): base64.b64decode(x) for l, x in re.findall(
                r'<script type="application/octet-stream" class="attnscope-layer" data-part="%d" '
                r'data-layer="(\d+)">([A-Za-z0-9+/=]*)</script>' % part, page)}
            assert sorted(layers) == list(range(t["chunks"])), sorted(layers)
            if t.get("row_scale"):  # each layer: float32 factors (H, T), then bytes (H, T, T)
                f = [np.frombuffer(layers[l][:4 * t["shape"][1] * t["shape"][2]], "<f4") for l in range(t["chunks"])]
                q = [np.frombuffer(layers[l][4 * t["shape"][1] * t["shape"][2]:], "u1") for l in range(t["chunks"])]
                out[t["name"]] = (np.stack(q).reshape(t["shape"]) * np.stack(f).reshape(t["shape"][:3] + [1])).astype(np.float64)
                continue
            b = b"".join(layers[l] for l in range(t["chunks"]))
        a = np.frombuffer(b, dtype=dt).reshape(t["shape"])
        out[t["name"]] = t["zero"] + t["scale"] * a.astype(np.float64) if dt == "u1" else a
    return head["meta"], out


EXTERNAL = re.compile(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*[\"']?(https?:)?//", re.I)


class TestViews(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            views.find_web_dist()
        except attnscope.Error as e:  # a build without the front end (-DAS_WEB=OFF or no npm)
            raise unittest.SkipTest(str(e))

    def test_generation_view_page(self):
        """generation_view embeds the generate route's container: its meta and float32 rows are the Generation's."""
        g = attnscope.load(os.path.join(FIX, "gpt2")).generate(ids=[1, 5, 9], max_new=4, top_k=3, temperature=1.2,
                                                                seed=5)
        page = attnscope.generation_view(g, layer=1, head=2, html_action="return")
        self.assertIsNone(EXTERNAL.search(page))
        meta, arr = decode_page(page)
        self.assertEqual((meta["view"], meta["layer"], meta["head"]), ("generation", 1, 2))
        self.assertEqual((meta["temperature"], meta["top_k"], meta["seed"], meta["beams"]), (1.2, 3, 5, 1))
        self.assertEqual(meta["ids"], g.ids.tolist())
        self.assertFalse(meta["encoder_decoder"])
        self.assertEqual(list(arr), ["attention"])
        np.testing.assert_array_equal(arr["attention"], g.attentions)
        self.assertEqual(meta["probs"], g.probs.tolist())
        self.assertNotIn("candidates", meta)
        g = attnscope.load(os.path.join(FIX, "gpt2")).generate(ids=[1, 5, 9], max_new=3, top=4)
        meta, _ = decode_page(attnscope.generation_view(g, html_action="return"))
        self.assertEqual([[c["id"] for c in s] for s in meta["candidates"]], g.top_ids.tolist())
        self.assertEqual([[c["prob"] for c in s] for s in meta["candidates"]], g.top_probs.tolist())
        b = attnscope.load(os.path.join(FIX, "bart_tiny")).generate(ids=[0, 17, 45, 9, 88, 23, 2], max_new=6, beams=3,
                                                                     num_return=3, length_penalty=0.5)
        meta, arr = decode_page(attnscope.generation_view(b, html_action="return"))
        self.assertEqual(list(arr), ["attention", "cross_attention", "beam_attention", "beam_cross_attention"])
        self.assertEqual([h["ids"] for h in meta["hypotheses"]], [h.ids.tolist() for h in b.hypotheses])
        self.assertEqual((meta["length_penalty"], meta["stop_at_eos"]), (0.5, True))
        self.assertEqual(meta["source_ids"], [0, 17, 45, 9, 88, 23, 2])
        np.testing.assert_array_equal(arr["cross_attention"], b.cross_attentions)
        for r, h in enumerate(b.hypotheses):
            np.testing.assert_array_equal(arr["beam_attention"][r, :h.steps, :, :, :len(h.ids)], h.attentions)
            np.testing.assert_array_equal(arr["beam_cross_attention"][r, :h.steps], h.cross_attentions)
            self.assertFalse(arr["beam_attention"][r, h.steps:].any())
        with self.assertRaisesRegex(attnscope.Error, "layer 9 out of range"):
            attnscope.generation_view(b, layer=9, html_action="return")
        with self.assertRaisesRegex(attnscope.Error, "takes an attnscope.Generation"):
            attnscope.generation_view(b.result())

    def test_head_view_page(self):
        m = attnscope.load(SST2)
        r = m.run("the movie was good .", text_b="i liked it .")
        page = attnscope.head_view(r, layer=2, html_action="return")
        js, css = views.web_bundle()
        self.assertIn(js, page)
        self.assertIn(css, page)
        self.assertIsNone(EXTERNAL.search(page), "a reference to another origin")
        self.assertNotRegex(page, r"<script[^>]*\ssrc=|<link[^>]*\shref=")
        meta, t = decode_page(page)
        self.assertEqual(meta["view"], "head")
        self.assertEqual(meta["layer"], 2)
        # the shown layer's element before the bundle, the others after it, nearest first
        at = [page.index('data-layer="%d"' % l) for l in range(4)]
        self.assertLess(at[2], page.index('<script type="module" async>'))
        self.assertLess(page.index('<script type="module" async>'), min(at[1], at[3]))
        self.assertLess(max(at[1], at[3]), at[0])
        self.assertEqual(meta["run"]["tokens"], r.tokens)
        self.assertEqual(t["attention"].tobytes(), r.attentions.astype("<f2").tobytes())
        self.assertNotIn("q", t)
        meta, t = decode_page(attnscope.head_view(r, dtype="u8", html_action="return"))
        self.assertLessEqual(np.abs(t["attention"] - r.attentions).max(), 0.5 / 255 + 1e-7)
        meta, t = decode_page(attnscope.head_view(r, dtype="u8row", html_action="return"))
        mx = r.attentions.max(axis=-1, keepdims=True)
        self.assertLessEqual((np.abs(t["attention"] - r.attentions) / mx).max(), 0.5 / 255 + 1e-6)
        np.testing.assert_allclose(t["attention"].max(axis=-1), mx[..., 0], rtol=1e-6)  # each row's largest: 255 steps
        with self.assertRaisesRegex(attnscope.Error, "dtype must be f16, f32, u8 or u8row"):
            attnscope.head_view(r, dtype="f64", html_action="return")
        v = attnscope.head_view(r)
        self.assertIn("srcdoc=", v._repr_html_())
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(open(v.save(os.path.join(d, "h.html")), encoding="utf-8").read(), v.html())

    def test_neuron_view_embeds_qk(self):
        m = attnscope.load(SST2)
        r = m.run("a fine film .")
        meta, t = decode_page(attnscope.neuron_view(r, layer=1, head=3, html_action="return"))
        self.assertEqual(meta["views"], ["head", "model", "neuron"])
        # by default the layer shown only, renumbered 0
        self.assertEqual((meta["layer"], meta["head"], meta["layer_ids"]), (0, 3, [1]))
        self.assertEqual(t["q"].tobytes(), r.queries[[1]].tobytes())
        self.assertEqual(t["k"].tobytes(), r.keys[[1]].tobytes())
        self.assertEqual(t["scores"].tobytes(), r.attention_scores[[1]].tobytes())
        self.assertEqual(t["attention"].tobytes(), r.attentions[[1]].astype("<f2").tobytes())
        self.assertEqual(meta["scale"], [float(r.score_scale[1])])
        meta, t = decode_page(attnscope.neuron_view(r, layer=2, layers=range(4), html_action="return"))
        self.assertEqual((meta["layer"], meta["layer_ids"]), (2, [0, 1, 2, 3]))
        self.assertEqual(t["scores"].tobytes(), r.attention_scores.tobytes())
        self.assertEqual(meta["qk"]["kv_group"], [0, 1, 2, 3])
        self.assertEqual(meta["run"]["block"]["scale"], [float(s) for s in r.score_scale])
        with self.assertRaisesRegex(attnscope.Error, "neuron view needs queries"):
            attnscope.neuron_view(m.run("a fine film .", capture="attn"))
        with self.assertRaisesRegex(attnscope.Error, "layer 7 out of range"):
            attnscope.head_view(r, layer=7, html_action="return")

    def test_neuron_view_of_a_rotary_model(self):
        """Mistral with a sliding window: q and k before RoPE embedded, the block from the config."""
        m = attnscope.load(os.path.join(FIX, "mistral_swa"))
        r = m.run_ids([1, 8, 30, 2, 44, 17, 9, 5, 12, 40])
        meta, t = decode_page(attnscope.neuron_view(r, layers=range(r.attentions.shape[0]), html_action="return"))
        self.assertEqual(t["q_pre_rope"].tobytes(), r.queries_pre_rope.tobytes())
        self.assertEqual(t["k_pre_rope"].tobytes(), r.keys_pre_rope.tobytes())
        b, c = meta["run"]["block"], m.config
        want = [c["sliding_window"] if c["layer_sliding"][l] else 0 for l in range(c["n_layer"])]
        self.assertEqual(b["window"], want)
        self.assertEqual((b["n_kv_head"], b["kv_group"], b["causal"]), (2, [0, 0, 1, 1], True))
        self.assertEqual(b["rope"]["dim"], c["rope_dim"])
        self.assertEqual(meta["qk"], {"kv_group": [0, 0, 1, 1], "window": b["window"], "rope": True, "softcap": 0.0})

    def test_server_iframe(self):
        m = attnscope.load(SST2)
        r = m.run("the movie was good .")
        h = attnscope.model_view(r, server="http://127.0.0.1:8080")._repr_html_()
        self.assertIn('src="http://127.0.0.1:8080/?model=attnscope-sst2&amp;text=the+movie+was+good+.&amp;view=model',
                      h)
        self.assertNotIn("attnscope-data", h)
        self.assertIn('<a href="http://127.0.0.1:8080/?model=attnscope-sst2&amp;', h)
        # the server's pages may be framed by the origins of --frame-ancestors only; bad ones are refused
        for bad, msg in (("http://a; script-src *", "character 0x3b is not allowed"),
                         ("http://a'", "character 0x27 is not allowed"), ("  ", "expected 1 to 256 bytes")):
            p = cli("serve", "--model", SST2, "--port", "0", "--frame-ancestors", bad, check=False)
            self.assertEqual(p.returncode, 2)
            self.assertEqual(p.stderr, "attnscope: serve: --frame-ancestors: %s%s\n" % (
                msg, " (give origins separated by spaces, e.g. http://localhost:8888)" if "0x" in msg else " of origins"))

    def test_overview_page(self):
        fixture = os.path.join(ROOT, "tests", "ref", "fixtures", "analysis", "import")
        with tempfile.TemporaryDirectory() as d:
            db = os.path.join(d, "a.sqlite")
            attnscope.import_dir(fixture, db)
            out = os.path.join(d, "heads.json")
            cli("export", "--db", db, "--out", out)
            with open(out) as f:
                exp = json.load(f)["models"][0]
            page = attnscope.overview(db, layer=1, head=2, html_action="return")
            meta, tensors = decode_page(page)
            self.assertEqual(tensors, {})
            self.assertEqual((meta["view"], meta["db"], meta["layer"], meta["head"]), ("overview", "a.sqlite", 1, 2))
            self.assertEqual(meta["heads"], exp["heads"], "the heads are the export's (and the server's) body")
            run = meta["run"]
            self.assertEqual((run["id"], run["layers"], run["heads"], run["source"], run["status"]),
                             (exp["run"], exp["n_layer"], exp["n_head"], "import", "done"))
            self.assertEqual((run["n_sentences"], run["name"], run["attention"]), (exp["n_sentences"], "import", None))
            js, css = views.web_bundle()
            self.assertIn(js, page)
            self.assertIsNone(EXTERNAL.search(page))
            with attnscope.open_db(db) as h:
                v = attnscope.overview(h)  # a Database works too, and stays open
                self.assertEqual(h.heads_response()["columns"]["importance"], exp["heads"]["columns"]["importance"])
            self.assertTrue(v._repr_html_().startswith('<div class="attnscope-cell" id="attnscope-'))
            self.assertEqual(repr(v), "<attnscope overview view (run 1 of a.sqlite)>")
            with self.assertRaisesRegex(attnscope.Error, r"layer 2 out of range \(0..1\)"):
                attnscope.overview(db, layer=2, html_action="return")
            with self.assertRaisesRegex(attnscope.Error, "no run 7"):
                attnscope.overview(db, run=7)
            with self.assertRaisesRegex(attnscope.Error, "cannot open the analysis database"):
                attnscope.overview(os.path.join(d, "missing.sqlite"))

    def test_read_npz(self):
        with tempfile.TemporaryDirectory() as d:
            run = os.path.join(d, "run.npz")
            cli("run", "--model", SST2, "--text", "the movie was good .", "--text-b", "i liked it .", "--format", "npz",
                "--out", run, "--quiet")
            with np.load(run) as z:
                att, toks, types, scores = z["attentions"], list(z["tokens"]), z["token_type_ids"], z["attention_scores"]
            v = attnscope.read_npz(run)
            self.assertEqual((v.model, v.causal), ("run.npz", False))
            meta, t = decode_page(attnscope.head_view(v, layer=2, html_action="return"))
            self.assertEqual(t["attention"].tobytes(), att.astype("<f2").tobytes())
            self.assertEqual(meta["layer"], 2)
            self.assertEqual([x["piece"] for x in meta["run"]["tokens"]], toks)
            self.assertEqual([x["segment"] for x in meta["run"]["tokens"]], [int(x) for x in types])
            self.assertEqual(sum(x["special"] for x in meta["run"]["tokens"]), 3)  # [CLS] and two [SEP]
            meta, t = decode_page(attnscope.neuron_view(v, layer=1, head=3, token=4, html_action="return"))
            self.assertEqual((meta["layer"], meta["head"], meta["views"]), (1, 3, ["head", "model", "neuron"]))
            self.assertEqual(t["scores"].tobytes(), scores.astype("<f4").tobytes())
            # bertviz-style: the stacked tuple of per-layer [1, H, T, T] outputs, with sentence_b_start
            bv = os.path.join(d, "bv.npz")
            np.savez(bv, attention=att[:, None], tokens=np.array(toks), sentence_b_start=np.int64(7))
            meta, t = decode_page(attnscope.model_view(attnscope.read_npz(bv, model="mine"), html_action="return"))
            self.assertEqual(t["attention"].tobytes(), att.astype("<f2").tobytes())
            self.assertEqual((meta["run"]["model"], meta["views"]), ("mine", ["head", "model"]))
            self.assertEqual([x["segment"] for x in meta["run"]["tokens"]], [int(x) for x in types])
            causal = os.path.join(d, "causal.npz")
            np.savez(causal, attentions=np.tril(att), tokens=np.array(toks))
            self.assertTrue(attnscope.read_npz(causal).causal)
            # bad files: one line naming the file and the problem
            bad = {"missing.npz": None, "text.npz": b"not a zip", "noatt.npz": {"tokens": np.array(toks)},
                   "shape.npz": {"attentions": att[0], "tokens": np.array(toks)},
                   "count.npz": {"attentions": att, "tokens": np.array(toks[:-1])},
                   "negative.npz": {"attentions": -att, "tokens": np.array(toks)},
                   "nan.npz": {"attentions": att * np.nan, "tokens": np.array(toks)},
                   "ints.npz": {"attentions": att.astype(np.int32), "tokens": np.array(toks)},
                   "pickle.npz": {"attentions": att, "tokens": np.array(toks, dtype=object)}}
            want = {"missing.npz": "no such file", "text.npz": "not an npz file", "noatt.npz": "no 'attentions' array",
                    "shape.npz": r"'attentions' must be \[layers, heads, T, T\], not \[4, 12, 12\]",
                    "count.npz": "'tokens' must be 12 strings", "negative.npz": "'attentions' holds weights that are not finite or are negative",
                    "nan.npz": "'attentions' holds weights that are not finite or are negative",
                    "ints.npz": "'attentions' must hold floats, not int32",
                    "pickle.npz": "damaged npz"}
            for name, content in bad.items():
                f = os.path.join(d, name)
                if isinstance(content, bytes):
                    with open(f, "wb") as h:
                        h.write(content)
                elif content is not None:
                    np.savez(f, **content)
                with self.subTest(file=name), self.assertRaisesRegex(attnscope.Error, "^%s: %s" % (re.escape(f),
                                                                                                   want[name])) as e:
                    attnscope.read_npz(f)
                self.assertNotIn("\n", str(e.exception))

    def test_encoder_decoder_views(self):
        m = attnscope.load(os.path.join(FIX, "bart_tiny"))
        r = m.run_ids([0, 17, 45, 9, 2], target_ids=[2, 0, 31])
        for fn, view in ((attnscope.head_view, "head"), (attnscope.model_view, "model")):
            page = fn(r, html_action="return")
            blobs = re.findall(r'<script (?:id="attnscope-data"|class="attnscope-data-part") '
                               r'type="application/octet-stream">([A-Za-z0-9+/=]+)</script>', page)
            parts = [decode_page('<script id="attnscope-data" type="application/octet-stream">%s</script>' % b + page,
                                 part=i) for i, b in enumerate(blobs)]
            self.assertEqual([p["part"] for p, _ in parts], ["Encoder", "Decoder", "Cross"], view)
            self.assertEqual([p["view"] for p, _ in parts], [view] * 3)
            self.assertEqual([p["run"]["causal"] for p, _ in parts], [False, True, False])
            self.assertEqual(parts[0][1]["attention"].tobytes(), r.encoder_attentions.astype("<f2").tobytes())
            self.assertEqual(parts[1][1]["attention"].tobytes(), r.decoder_attentions.astype("<f2").tobytes())
            c = parts[2][1]["attention"]  # decoder rows (after the 5 source tokens) over the source's columns
            self.assertEqual(c.shape, (3, 3, 8, 8))
            self.assertEqual(c[:, :, 5:, :5].tobytes(), r.cross_attentions.astype("<f2").tobytes())
            self.assertEqual([t["segment"] for t in parts[2][0]["run"]["tokens"]], [0] * 5 + [1] * 3)
            self.assertEqual([t["id"] for t in parts[2][0]["run"]["tokens"]], [0, 17, 45, 9, 2, 2, 0, 31])
        # the neuron view of the encoder's or the decoder's self-attention: its q, k, scores
        # and attention, causal for the decoder, the scale on q.k the scores were made with
        a = m.run_ids([0, 17, 45, 9, 2], target_ids=[2, 0, 31], capture="all")
        for kind, L, T, toks in (("encoder", 2, 5, [0, 17, 45, 9, 2]), ("decoder", 3, 3, [2, 0, 31])):
            q, k = getattr(a, kind + "_queries"), getattr(a, kind + "_keys")
            sc, att = getattr(a, kind + "_attention_scores"), getattr(a, kind + "_attentions")
            meta, t = decode_page(attnscope.neuron_view(a, layer=L - 1, head=2, kind=kind, html_action="return"))
            self.assertEqual(meta["views"], ["head", "model", "neuron"])
            self.assertEqual((meta["layer"], meta["head"], meta["layer_ids"]), (0, 2, [L - 1]))
            self.assertEqual(t["q"].tobytes(), q[[L - 1]].tobytes())
            self.assertEqual(t["k"].tobytes(), k[[L - 1]].tobytes())
            self.assertEqual(t["scores"].tobytes(), sc[[L - 1]].tobytes())
            self.assertEqual(t["attention"].tobytes(), att[[L - 1]].astype("<f2").tobytes())
            self.assertEqual([x["id"] for x in meta["run"]["tokens"]], toks)
            self.assertEqual(meta["run"]["block"]["causal"], kind == "decoder")
            s = meta["scale"][0]
            for l in range(L):
                for h in range(3):
                    want = (q[l, h] @ k[l, h].T) * s
                    keep = np.tril(np.ones((T, T), bool)) if kind == "decoder" else np.ones((T, T), bool)
                    self.assertLess(float(np.abs(sc[l, h][keep] - want[keep]).max()), 1e-5, (kind, l, h))
        with self.assertRaisesRegex(attnscope.Error, "kind='cross'.*use attnscope serve"):
            attnscope.neuron_view(a, kind="cross", html_action="return")
        with self.assertRaisesRegex(attnscope.Error, "neuron view needs decoder_queries"):
            attnscope.neuron_view(m.run_ids([0, 17, 2], target_ids=[2, 0], capture="attn"), kind="decoder",
                                  html_action="return")
        with tempfile.TemporaryDirectory() as d:  # server=: the URL carries the target
            t = attnscope.load(bart_with_tokenizer(os.path.join(d, "bart"))).run("ab ba", target="ba ab")
            u = attnscope.head_view(t, server="http://127.0.0.1:8080").url()
            self.assertIn("target=ba+ab", u)
            u = attnscope.neuron_view(t, kind="cross", server="http://127.0.0.1:8080").url()
            self.assertIn("kind=cross", u)

    def test_bertviz_drop_in(self):
        from attnscope.bertviz import head_view, model_view
        m = attnscope.load(SST2)
        r = m.run("the movie was good .", text_b="i liked it .")

        class Tensor:  # what torch gives: .detach().numpy()
            def __init__(self, a):
                self.a = a

            def detach(self):
                return self

            def numpy(self):
                return self.a
        att = tuple(Tensor(r.attentions[l][None]) for l in range(r.attentions.shape[0]))
        toks = [t["piece"] for t in r.tokens]
        b = toks.index("[SEP]") + 1
        page = head_view(att, toks, sentence_b_start=b, layer=1, heads=[0, 2], html_action="return")
        meta, t = decode_page(page)
        self.assertEqual(t["attention"].tobytes(), r.attentions.astype("<f2").tobytes())
        self.assertEqual((meta["layer"], meta["heads"]), (1, [0, 2]))
        self.assertEqual([x["segment"] for x in meta["run"]["tokens"]], [x["segment"] for x in r.tokens])
        self.assertEqual([x["special"] for x in meta["run"]["tokens"]], [x["special"] for x in r.tokens])
        meta, t = decode_page(model_view(att, toks, include_layers=[1, 3], include_heads=[2], html_action="return"))
        self.assertEqual(t["attention"].tobytes(), r.attentions[[1, 3]][:, [2]].astype("<f2").tobytes())
        self.assertEqual((meta["layer_ids"], meta["head_ids"]), ([1, 3], [2]))
        gp = head_view([np.full((1, 2, 3, 3), 1 / 3)], ["Ġthe", "Ġcat", "<|endoftext|>"], html_action="return")
        meta, _ = decode_page(gp)
        self.assertEqual([x["text"] for x in meta["run"]["tokens"]], [" the", " cat", "<|endoftext|>"])
        with self.assertRaisesRegex(attnscope.Error, "batch size 2"):
            head_view([np.zeros((2, 2, 3, 3))], ["a", "b", "c"], html_action="return")
        with self.assertRaisesRegex(attnscope.Error, "2 tokens for attention over 3 positions"):
            head_view([np.zeros((1, 2, 3, 3))], ["a", "b"], html_action="return")
        # an encoder-decoder (per layer [1, H, T, T]; cross [1, H, T_dec, T_enc]): one part each, the
        # cross attention over the encoder's tokens (segment 0) then the decoder's (segment 1)
        rng = np.random.default_rng(0)
        enc = [rng.random((1, 2, 4, 4), dtype=np.float32) for _ in range(3)]
        dec = [np.tril(rng.random((1, 2, 3, 3), dtype=np.float32)) for _ in range(3)]
        cross = [rng.random((1, 2, 3, 4), dtype=np.float32) for _ in range(3)]
        et, dt = ["▁a", "▁b", "▁c", "</s>"], ["<pad>", "▁x", "▁y"]
        page = model_view(encoder_attention=enc, decoder_attention=dec, cross_attention=cross, encoder_tokens=et,
                          decoder_tokens=dt, include_layers=[0, 2], html_action="return")
        blobs = re.findall(r'<script (?:id="attnscope-data"|class="attnscope-data-part") '
                           r'type="application/octet-stream">([A-Za-z0-9+/=]+)</script>', page)
        self.assertEqual(len(blobs), 3)
        parts = [decode_page('<script id="attnscope-data" type="application/octet-stream">%s</script>' % b + page, part=i)
                 for i, b in enumerate(blobs)]
        self.assertEqual([m["part"] for m, _ in parts], ["Encoder", "Decoder", "Cross"])
        self.assertEqual([m["run"]["causal"] for m, _ in parts], [False, True, False])
        self.assertEqual([m["layer_ids"] for m, _ in parts], [[0, 2]] * 3)
        f16 = lambda a: np.stack([a[l][0] for l in (0, 2)]).astype("<f2")  # noqa: E731
        self.assertEqual(parts[0][1]["attention"].tobytes(), f16(enc).tobytes())
        self.assertEqual(parts[1][1]["attention"].tobytes(), f16(dec).tobytes())
        c = parts[2][1]["attention"]
        self.assertEqual(c.shape, (2, 2, 7, 7))
        self.assertEqual(c[:, :, 4:, :4].tobytes(), f16(cross).tobytes())
        self.assertEqual(np.count_nonzero(c[:, :, :4]) + np.count_nonzero(c[:, :, 4:, 4:]), 0)
        self.assertEqual([x["text"] for x in parts[2][0]["run"]["tokens"]], [" a", " b", " c", "</s>", "<pad>", " x", " y"])
        self.assertEqual([x["segment"] for x in parts[2][0]["run"]["tokens"]], [0] * 4 + [1] * 3)
        only = head_view(cross_attention=cross, encoder_tokens=et, decoder_tokens=dt, layer=2, html_action="return")
        meta, _ = decode_page(only)
        self.assertEqual((meta["part"], meta["layer"]), ("Cross", 2))
        with self.assertRaisesRegex(attnscope.Error, "either attention and tokens, or encoder_attention"):
            head_view(att, toks, encoder_attention=enc, encoder_tokens=et, html_action="return")
        with self.assertRaisesRegex(attnscope.Error, "decoder_tokens: missing for cross_attention's queries over 3"):
            head_view(cross_attention=cross, encoder_tokens=et, html_action="return")
        with self.assertRaisesRegex(attnscope.Error, "encoder_tokens: 3 tokens for encoder_attention over 4"):
            head_view(encoder_attention=enc, encoder_tokens=et[:3], html_action="return")
        with self.assertRaisesRegex(attnscope.Error, r"decoder_attention\[0\] must be \[1, heads, T, T\]"):
            head_view(decoder_attention=cross, decoder_tokens=dt, html_action="return")
        with self.assertRaisesRegex(attnscope.Error, "encoder_tokens given without"):
            head_view(att, toks, encoder_tokens=et, html_action="return")


if __name__ == "__main__":
    attnscope.set_quiet(True)
    unittest.main(verbosity=2)
