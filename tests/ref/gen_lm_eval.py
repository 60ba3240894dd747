#!/usr/bin/python3
"""gen_lm_eval.py — PyTorch reference for `attnscope eval --task lm` and `attnscope
generate` (tests/cli/test_lm_eval.sh).

What it does: builds a tiny random LlamaForCausalLM (2 layers, width 32, 4 query / 2 KV
heads, 64 positions; gen_llama.py's weights and forward, the torch re-implementation of
transformers' eager Llama) with a byte-level BPE tokenizer.json that has no merges (ids
0-2 are <s> </s> <pad>, id 3 + b is byte b, so the text's tokens are known here without
a tokenizer library) and writes it as tests/ref/fixtures/models/llama_bytes/. It then
  - packs heldout.txt as train-lm packs a corpus (each document: <s>, then its
    sentences' bytes joined by a line break; a blank line ends a document) and scores it
    in windows of seq tokens every stride tokens (the first window scores tokens
    1..seq-1, each later one the tokens after the previous window's end; the last window
    is moved back to be full), the mean cross-entropy from torch's cross_entropy, for
    (seq, stride) = (64, 32) (the defaults at 64 positions) and (16, 5); and the same
    with a <s> put in front of every window that does not start with one (seq - 1 text
    tokens a window: `--window-start bos`) for (64, 32) and (16, 5);
  - continues the prompt <s> "The cat" greedily by 12 tokens (argmax of the last
    position's logits, the whole prefix run again each step), asserting that every
    step's top two logits differ by more than GREEDY_MARGIN so float32 engines agree;
and writes expected.json (tokens, bytes, mean NLL, perplexity, bits per byte, the greedy
ids, and each greedy step's five most probable ids with their softmax probabilities). Checked here: the windows predict every token after the first exactly once.
What it does not: use the `transformers` library (not installed here).

Run (deterministic): /usr/bin/python3 tests/ref/gen_lm_eval.py
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_llama import base_config, forward, make_params  # noqa: E402
from gen_models import Init, st_write  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "models", "llama_bytes")
V = 3 + 256
GREEDY_MARGIN = 1e-3
PROMPT = "The cat"
N_NEW = 12
HELDOUT = """The cat sat on the mat.
A dog ran past the old gate, and the cat watched it go.
Rain fell all day on the quiet town.

It was a bright cold day in April.
The clocks were striking thirteen, or so it seemed.
Nobody in the house said a word.
"""

torch.set_num_threads(1)


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_json():
    b2u = bytes_to_unicode()
    vocab = {"<s>": 0, "</s>": 1, "<pad>": 2}
    for b in range(256):
        vocab[b2u[b]] = 3 + b
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(["<s>", "</s>", "<pad>"])]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def pack(text):
    """train-lm's packing: documents split at blank lines, <s> first, sentences joined by
    a line break; the byte count adds one byte before each sentence but the first."""
    ids, nbytes, first = [], 0, True
    for doc in [d for d in text.split("\n\n") if d.strip()]:
        sents = [s for s in doc.split("\n") if s.strip()]
        ids.append(0)
        for i, s in enumerate(sents):
            if i:
                ids.append(3 + 10)
            ids += [3 + b for b in s.encode()]
            nbytes += len(s.encode()) + (0 if first else 1)
            first = False
    return ids, nbytes


def logits_of(P, c, ids):
    t = torch.tensor(ids)
    return forward(P, c, "model.", t, torch.ones_like(t), "lm")["logits"]


def windowed_nll(P, c, ids, seq, stride, bos=None):
    n, done, begin, total, scored = len(ids), 1, 0, 0.0, []
    span = seq - (bos is not None)  # text tokens a window
    while done < n:
        end = min(begin + span, n)
        b = max(0, end - span)
        lead = 1 if bos is not None and ids[b] != bos else 0
        lg = logits_of(P, c, [bos] * lead + ids[b:end])
        tg = list(range(done, end))
        rows = torch.tensor([t - 1 - b + lead for t in tg])
        total += F.cross_entropy(lg[rows].double(), torch.tensor([ids[t] for t in tg]), reduction="sum").item()
        scored += tg
        done = end
        begin += stride
    assert scored == list(range(1, n)), "every token after the first predicted once"
    return total


def main():
    c = base_config("llama", "LlamaForCausalLM", V=V, D=32, H=4, Hkv=2, L=2, Fd=48, head_dim=8,
                    attention_bias=False, mlp_bias=False, pretraining_tp=1, max_position_embeddings=64,
                    bos_token_id=0, eos_token_id=1, pad_token_id=2, tie_word_embeddings=True)
    P = make_params(Init(1901), c, "model.")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    st_write(os.path.join(OUT, "model.safetensors"), [(k, P[k], "F32") for k in sorted(P)], {"format": "pt"})
    with open(os.path.join(OUT, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(), f, ensure_ascii=False)
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "add_bos_token": True,
                   "add_eos_token": False, "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
    with open(os.path.join(OUT, "heldout.txt"), "w") as f:
        f.write(HELDOUT)
    ids, nbytes = pack(HELDOUT)
    windows = []
    for seq, stride, start in ((64, 32, "text"), (16, 5, "text"), (64, 32, "bos"), (16, 5, "bos")):
        nll = windowed_nll(P, c, ids, seq, stride, 0 if start == "bos" else None)
        mean = nll / (len(ids) - 1)
        windows.append({"seq": seq, "stride": stride, "window_start": start, "nll": mean,
                        "perplexity": math.exp(mean), "bits_per_byte": nll / math.log(2) / nbytes})
        print(f"seq {seq} stride {stride} start {start}: {len(ids)} tokens, {nbytes} bytes, nll {mean:.6f}, "
              f"perplexity {math.exp(mean):.4f}")
    gen = [0] + [3 + b for b in PROMPT.encode()]
    prompt_len, margin, top5 = len(gen), float("inf"), []
    for _ in range(N_NEW):
        last = logits_of(P, c, gen)[-1].double()
        top = torch.topk(last, 2).values
        margin = min(margin, (top[0] - top[1]).item())
        p, i = torch.topk(torch.softmax(last, -1), 5)
        top5.append({"ids": i.tolist(), "probs": p.tolist()})
        gen.append(int(last.argmax()))
    assert margin > GREEDY_MARGIN, margin
    print(f"greedy: {gen[prompt_len:]} (smallest top-2 margin {margin:.4f})")
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"generator": "tests/ref/gen_lm_eval.py", "tokens": len(ids), "bytes": nbytes, "ids": ids,
                   "windows": windows, "prompt": PROMPT, "prompt_ids": gen[:prompt_len],
                   "greedy_ids": gen[prompt_len:], "greedy_top5": top5}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
