#!/usr/bin/python3
"""make_checkpoint.py — writes a BERT-base-sized checkpoint with random weights
(config from ../shared/data/bert-base-uncased/config.json with max_position_embeddings
raised to POSITIONS = 1024, so the forward benchmark reaches 1024 tokens; F32
safetensors with Hugging Face names) to bench/out/bert-base-random/ for the benchmarks.
Not a test fixture (441 MB, gitignored). Deterministic. An existing checkpoint with
fewer positions is rewritten. The file is dropped from the page cache once written
(fsync + POSIX_FADV_DONTNEED), so its first reader takes it from disk in 2 MiB folios as it
would a downloaded checkpoint (pages cached by the writer stay 4 KiB ones)."""
import json, os, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
from gen_models import st_write  # noqa: E402  (the fixture generator's writer)
from configs import drop_from_page_cache  # noqa: E402
import torch  # noqa: E402

SRC = os.path.join(HERE, "..", "..", "shared", "data", "bert-base-uncased", "config.json")
OUT = os.path.join(HERE, "out", "bert-base-random")
POSITIONS = 1024


def main():
    if not os.path.exists(SRC):
        sys.exit("make_checkpoint: %s not found" % SRC)
    cfg = os.path.join(OUT, "config.json")
    if (os.path.exists(os.path.join(OUT, "model.safetensors")) and os.path.exists(cfg)
            and json.load(open(cfg)).get("max_position_embeddings", 0) >= POSITIONS):
        print("exists:", OUT)
        return
    c = json.load(open(SRC))
    c["max_position_embeddings"] = max(c["max_position_embeddings"], POSITIONS)
    V, D, L = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"]
    Fd, P, TV = c["intermediate_size"], c["max_position_embeddings"], c["type_vocab_size"]
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g) * 0.02
    t = {"bert.embeddings.word_embeddings.weight": r(V, D),
         "bert.embeddings.position_embeddings.weight": r(P, D),
         "bert.embeddings.token_type_embeddings.weight": r(TV, D),
         "bert.embeddings.LayerNorm.weight": torch.ones(D), "bert.embeddings.LayerNorm.bias": torch.zeros(D)}
    for l in range(L):
        p = "bert.encoder.layer.%d." % l
        for n, (o, i) in {"attention.self.query": (D, D), "attention.self.key": (D, D),
                          "attention.self.value": (D, D), "attention.output.dense": (D, D),
                          "intermediate.dense": (Fd, D), "output.dense": (D, Fd)}.items():
            t[p + n + ".weight"] = r(o, i)
            t[p + n + ".bias"] = r(o)
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + n + ".weight"] = torch.ones(D)
            t[p + n + ".bias"] = torch.zeros(D)
    # a sequence-classification head, so both sides also compute logits
    t["bert.pooler.dense.weight"], t["bert.pooler.dense.bias"] = r(D, D), r(D)
    t["classifier.weight"], t["classifier.bias"] = r(2, D), r(2)
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "model.safetensors")
    st_write(path, [(k, v, "F32") for k, v in t.items()])
    drop_from_page_cache(path)
    with open(cfg, "w") as f:
        json.dump(c, f, indent=2)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
