"""gen_topk.py — reference for the sparse top-k attention rows (src/analysis/topk.c).

Reads the PyTorch attention probabilities that tests/ref/gen_models.py stored in the model
fixtures' expected.safetensors (Hugging Face eager attention, float32) and writes
tests/ref/fixtures/topk/expected.json: for every layer, head and query row of each case,
the K strongest keys (strongest first, ties to the lower index, keys of weight 0 never
listed, unused slots index -1 weight 0), their weights, and the remaining mass (float64 sum
of every other key's weight). tests/unit/test_topk.c compares an_topk_head with it.
Cases: gpt2 (causal: early rows have fewer than K keys), bert padded (padding keys),
llama long (RoPE, grouped-query attention), mistral_swa long (sliding window).
Run: /usr/bin/python3 tests/ref/gen_topk.py (deterministic; numpy only).
"""
import json, os, struct
import numpy as np

ROOT = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(ROOT, "fixtures", "models")
OUT = os.path.join(ROOT, "fixtures", "topk")
K = 5
CASES = [("gpt2", "single"), ("bert", "padded"), ("llama", "long"), ("mistral_swa", "long")]


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, v in head.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "I32": np.int32}.get(v["dtype"])
        if dt is None:
            continue
        a, b = v["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(v["shape"])
    return out


def topk_row(row):
    order = sorted((j for j in range(len(row)) if row[j] > 0), key=lambda j: (-float(row[j]), j))
    keep = order[:K]
    idx = keep + [-1] * (K - len(keep))
    w = [float(row[j]) for j in keep] + [0.0] * (K - len(keep))
    rest = float(sum(np.float64(row[j]) for j in order[K:]))
    # the comparison asks for exact indices: no near-tie among the ranks that decide them
    ws = [float(row[j]) for j in order[:K + 1]]
    gap = min([a - b for a, b in zip(ws, ws[1:])], default=1.0)
    return idx, w, rest, gap


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = []
    for model, case in CASES:
        ex = read_safetensors(os.path.join(MODELS, model, "expected.safetensors"))
        A = ex[case + ".attentions"]  # (L, H, T, T)
        L, H, T, _ = A.shape
        idx, w, rest, gap = [], [], [], 1.0
        for l in range(L):
            for h in range(H):
                for i in range(T):
                    a, b, c, g = topk_row(A[l, h, i])
                    idx += a
                    w += b
                    rest.append(c)
                    gap = min(gap, g)
        print("%s/%s: L=%d H=%d T=%d smallest gap between ranked weights %.2e" % (model, case, L, H, T, gap))
        # weights within 1e-6 of these cannot swap two ranks more than 2e-6 apart
        assert gap > 2e-6, "near tie: indices would not be comparable exactly"
        cases.append({"model": model, "case": case, "layers": L, "heads": H, "tokens": T,
                      "index": idx, "weight": [float("%.9g" % x) for x in w],
                      "rest": [float("%.9g" % x) for x in rest]})
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"k": K, "cases": cases}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
