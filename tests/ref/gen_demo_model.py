#!/usr/bin/python3
"""gen_demo_model.py — builds models/demo-bert, the small checked-in model that
`make demo` runs until the C-trained default models exist.

What it is: a 2-layer, 4-head, width-64 BERT with RANDOM weights (seeded) and a
WordPiece vocabulary of our own (built here from ../shared/data/corpus/tinyshakespeare.txt
by word frequency: specials, single characters and their ## forms, then the most
frequent lower-cased words). Its attention is therefore not meaningful; it exists so
that the engine, tokenizer and CLI can be demonstrated on a real HF folder.
Stored in F16 (exercises the half-precision loader). Deterministic.

Run: /usr/bin/python3 tests/ref/gen_demo_model.py   (needs python3-torch, numpy)
"""
import collections, json, os, re, sys, unicodedata
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_models import st_write  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "models", "demo-bert")
CORPUS = os.path.join(ROOT, "..", "shared", "data", "corpus", "tinyshakespeare.txt")
V_TARGET = 2000
L, H, D, F, P = 2, 4, 64, 256, 128


def strip_accents(s):
    return "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")


def build_vocab(text):
    text = strip_accents(text.lower())
    words = re.findall(r"[a-z0-9]+|[^\sa-z0-9]", text)
    chars = sorted({c for w in words for c in w})
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = specials + chars + ["##" + c for c in chars if c.isalnum()]
    seen = set(vocab)
    for w, _ in collections.Counter(words).most_common():
        if len(vocab) >= V_TARGET:
            break
        if w not in seen and len(w) > 1:
            vocab.append(w)
            seen.add(w)
    return vocab


def main():
    if not os.path.exists(CORPUS):
        sys.exit("gen_demo_model: %s not found" % CORPUS)
    vocab = build_vocab(open(CORPUS, encoding="utf-8").read())
    V = len(vocab)
    rng = np.random.default_rng(20261130)
    def w(*shape, std=0.2):
        return (rng.standard_normal(shape) * std).astype(np.float16)
    t = {}
    t["bert.embeddings.word_embeddings.weight"] = w(V, D, std=0.5)
    t["bert.embeddings.position_embeddings.weight"] = w(P, D, std=0.5)
    t["bert.embeddings.token_type_embeddings.weight"] = w(2, D, std=0.5)
    t["bert.embeddings.LayerNorm.weight"] = np.ones(D, np.float16)
    t["bert.embeddings.LayerNorm.bias"] = np.zeros(D, np.float16)
    for l in range(L):
        p = "bert.encoder.layer.%d." % l
        for n in ["attention.self.query", "attention.self.key", "attention.self.value",
                  "attention.output.dense"]:
            t[p + n + ".weight"] = w(D, D)
            t[p + n + ".bias"] = w(D, std=0.02)
        t[p + "intermediate.dense.weight"] = w(F, D)
        t[p + "intermediate.dense.bias"] = w(F, std=0.02)
        t[p + "output.dense.weight"] = w(D, F, std=0.1)
        t[p + "output.dense.bias"] = w(D, std=0.02)
        for n in ["attention.output.LayerNorm", "output.LayerNorm"]:
            t[p + n + ".weight"] = np.ones(D, np.float16)
            t[p + n + ".bias"] = np.zeros(D, np.float16)
    os.makedirs(OUT, exist_ok=True)
    st_write(os.path.join(OUT, "model.safetensors"),
             [(k, torch.from_numpy(v.astype(np.float32)), "F16") for k, v in t.items()])
    cfg = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_act": "gelu",
           "hidden_size": D, "intermediate_size": F, "num_attention_heads": H,
           "num_hidden_layers": L, "max_position_embeddings": P, "type_vocab_size": 2,
           "vocab_size": V, "layer_norm_eps": 1e-12, "pad_token_id": 0,
           "torch_dtype": "float16", "attnscope_note": "random weights; demo only"}
    json.dump(cfg, open(os.path.join(OUT, "config.json"), "w"), indent=2)
    open(os.path.join(OUT, "vocab.txt"), "w", encoding="utf-8").write("\n".join(vocab) + "\n")
    json.dump({"do_lower_case": True, "model_max_length": P},
              open(os.path.join(OUT, "tokenizer_config.json"), "w"))
    print("wrote %s (V=%d)" % (OUT, V))


if __name__ == "__main__":
    main()
