#!/usr/bin/python3
"""torch_ref.py — the PyTorch reference side of the benchmark: one BERT forward with
full capture (queries, keys, values, scores, probabilities and hidden states of every
layer, plus logits), using the same eager re-implementation of Hugging Face's BERT as
the parity fixtures (tests/ref/gen_models.py:bert_forward), in torch.no_grad().
Prints the median and minimum ms over --repeat runs after one warm-up, and peak RSS.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_ref.py --model DIR --tokens 128 --threads 1
"""
import argparse, json, os, resource, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
import torch  # noqa: E402
from gen_models import bert_forward, st_read  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(a.threads)
    c = json.load(open(os.path.join(a.model, "config.json")))
    P = st_read(os.path.join(a.model, "model.safetensors"))
    g = torch.Generator().manual_seed(12345)
    ids = torch.randint(5, c["vocab_size"], (a.tokens,), generator=g)
    tt = torch.zeros(a.tokens, dtype=torch.long)
    mask = torch.ones(a.tokens, dtype=torch.long)
    times = []
    with torch.no_grad():
        for r in range(a.repeat + 1):
            t0 = time.perf_counter()
            out = bert_forward(P, c, "bert.", ids, tt, mask)
            dt = (time.perf_counter() - t0) * 1e3
            del out
            if r:
                times.append(dt)
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("median_ms %.2f  min_ms %.2f  peak_rss_mb %.1f  threads %d  torch %s"
          % (med, times[0], rss, a.threads, torch.__version__))


if __name__ == "__main__":
    main()
