#!/usr/bin/python3
"""gen_beam.py — reference fixture for `attnscope generate --beams N` (beam search).

What it does: runs a torch beam search with the semantics of Hugging Face transformers'
generate (num_beams > 1, do_sample False, batch of one: generation/utils.py _beam_search,
generation/beam_search.py BeamSearchScorer and BeamHypotheses, logits_process.py
ForcedBOSTokenLogitsProcessor / ForcedEOSTokenLogitsProcessor) over the random fixture
models of gen_encdec.py (bart_tiny, t5_tiny) and gen_llama.py (llama), using their torch
forwards (each step the whole sequence again), and writes tests/ref/fixtures/beam/beam.json:
one entry per case with the options, the model folder and config overrides (forced
bos/eos, an eos list), the returned sequences (prompt included, the end id appended as
transformers' finalize does), their sums of log-probabilities and scores
(sum / generated_length^length_penalty), and for each returned sequence the attention rows
of the forward over it at the positions that chose each generated token:
  self_rows  [R][S][L][H][T]  decoder (or causal LM) self-attention
  cross_rows [R][S][L][H][Ts] encoder-decoder cross-attention
It also records the smallest gap between adjacent live candidate scores at every
selection boundary and refuses a case where it is under MIN_GAP (a near-tie another float
order could flip; exact ties, -inf of the forced tokens and the -1e9 start of the idle
beams, order by index in both).

What it does not: use the transformers library (not installed here), sample, batch.

Run (deterministic; rewrites the fixture):
    /usr/bin/python3 tests/ref/gen_beam.py
"""
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_encdec  # noqa: E402
import gen_llama  # noqa: E402
from gen_models import st_read  # noqa: E402

MODELS = os.path.join(HERE, "fixtures", "models")
OUT = os.path.join(HERE, "fixtures", "beam", "beam.json")
MIN_GAP = 1e-4

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

# name, model folder, config overrides, prompt (source for encoder-decoders), options
CASES = [
    ("bart_b4", "bart_tiny", {}, [0, 17, 45, 9, 88, 23, 2],
     dict(beams=4, max_new=8, length_penalty=1.0, early_stopping=False, num_return=3)),
    ("bart_b3_lp2_early", "bart_tiny", {"eos_token_id": 81}, [0, 5, 77, 12, 3, 96, 2],
     dict(beams=3, max_new=10, length_penalty=2.0, early_stopping=True, num_return=3)),
    ("bart_forced_bos", "bart_tiny", {"forced_bos_token_id": 0, "forced_eos_token_id": None},
     [0, 33, 61, 8, 2], dict(beams=5, max_new=7, length_penalty=0.5, early_stopping=False, num_return=2)),
    ("t5_b4", "t5_tiny", {"eos_token_id": 76}, [40, 41, 52, 63, 7, 1],
     dict(beams=4, max_new=9, length_penalty=1.0, early_stopping=False, num_return=4)),
    ("t5_b2_neg_lp", "t5_tiny", {"eos_token_id": 73}, [13, 27, 90, 4, 1],
     dict(beams=2, max_new=12, length_penalty=-0.5, early_stopping=False, num_return=1)),
    ("llama_b3", "llama", {}, [1, 5, 9, 13],
     dict(beams=3, max_new=7, length_penalty=1.0, early_stopping=False, num_return=3)),
    ("llama_eos_list", "llama", {"eos_token_id": [2, 52, 30]}, [1, 5, 9, 13],
     dict(beams=4, max_new=8, length_penalty=1.3, early_stopping=False, num_return=2)),
    # bad_words_ids: a single id, pairs (41 may not follow 41; 68 after 41), and [eos] (left out)
    ("bart_bad_words", "bart_tiny", {"bad_words_ids": [[58], [41, 41], [41, 68], [2]]}, [0, 17, 45, 9, 88, 23, 2],
     dict(beams=4, max_new=8, length_penalty=1.0, early_stopping=False, num_return=3)),
    ("t5_bad_words", "t5_tiny", {"bad_words_ids": [[73, 73], [0, 73]]}, [40, 41, 52, 63, 7, 1],
     dict(beams=3, max_new=6, length_penalty=1.0, early_stopping=False, num_return=2)),
]


def load(folder, over):
    d = os.path.join(MODELS, folder)
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    c.update(over)
    return c, st_read(os.path.join(d, "model.safetensors"))


def gen_settings(c):
    """eos ids, forced bos, forced eos as transformers' generate takes them from the config."""
    eos = c.get("eos_token_id")
    eos = [] if eos is None else (eos if isinstance(eos, list) else [eos])
    defaults = {"bart": 2, "mbart": 2, "marian": 0}
    fe = c["forced_eos_token_id"] if "forced_eos_token_id" in c else defaults.get(c["model_type"])
    # NoBadWordsLogitsProcessor leaves out a sequence that is just an eos id
    bad = [w for w in c.get("bad_words_ids") or [] if not (len(w) == 1 and w[0] in eos)]
    return eos, c.get("forced_bos_token_id"), fe, bad


def ban(lp, ids, bad):
    """SequenceBiasLogitsProcessor with -inf: the last id of each sequence whose other ids end
    ids (a sequence longer than ids is skipped)."""
    for w in bad:
        if len(w) > len(ids):
            continue
        if len(w) == 1 or ids[-(len(w) - 1):] == w[:-1]:
            lp[w[-1]] = -math.inf
    return lp


class Model:
    def __init__(self, folder, over, prompt):
        self.c, self.P = load(folder, over)
        self.kind = self.c["model_type"]
        self.encdec = self.kind in ("bart", "t5")
        if self.encdec:
            self.src = torch.tensor(prompt)
            self.start = [self.c["decoder_start_token_id"]]
        else:
            self.start = list(prompt)

    def forward(self, ids):
        """(logits (T, V), self attentions (L, H, T, T), cross (L, H, T, Ts) or None)."""
        t = torch.tensor(ids)
        with torch.no_grad():
            if self.encdec:
                r = gen_encdec.forward(self.P, self.kind, self.src, torch.ones_like(self.src), t)
                return r["logits"], r["decoder_attentions"], r["cross_attentions"]
            r = gen_llama.forward(self.P, self.c, "model.", t, torch.ones_like(t), "lm")
            return r["logits"], r["attentions"], None


class Hyps:
    """BeamHypotheses: the finished hypotheses (score, ids, ended by eos, insertion order)."""

    def __init__(self, n, lp, early, prompt_len):
        self.n, self.lp, self.early, self.pl = n, lp, early, prompt_len
        self.beams, self.worst, self.added = [], 1e9, 0

    def add(self, ids, sum_lp, gen_len, eos):
        score = sum_lp / (gen_len ** self.lp)
        if len(self.beams) < self.n or score > self.worst:
            self.beams.append((score, list(ids), eos, sum_lp, self.added))
            self.added += 1
            if len(self.beams) > self.n:
                order = sorted((b[0], i) for i, b in enumerate(self.beams))
                del self.beams[order[0][1]]
                self.worst = order[1][0]
            else:
                self.worst = min(score, self.worst)

    def done(self, best_sum, cur_len):
        if len(self.beams) < self.n:
            return False
        if self.early:
            return True
        return self.worst >= best_sum / ((cur_len - self.pl) ** self.lp)


def beam_search(model, o):
    eos, fbos, feos, bad = gen_settings(model.c)
    nb, V = o["beams"], model.c["vocab_size"]
    prompt = model.start
    pl = len(prompt)
    max_len = pl + o["max_new"]
    keep = max(2, 1 + len(eos)) * nb
    beams = [list(prompt) for _ in range(nb)]
    bscore = torch.full((nb,), -1e9, dtype=torch.float32)
    bscore[0] = 0.0
    hyps = Hyps(nb, o["length_penalty"], o["early_stopping"], pl)
    cur, done, min_gap = pl, False, math.inf
    while not done and cur < max_len:
        rows = []
        for b in range(nb):
            logits = model.forward(beams[b])[0][-1]
            lp = ban(torch.log_softmax(logits, dim=-1), beams[b], bad)
            if cur == 1 and fbos is not None:
                lp = torch.full_like(lp, -math.inf)
                lp[fbos] = 0.0
            if cur == max_len - 1 and feos is not None:
                lp = torch.full_like(lp, -math.inf)
                lp[feos] = 0.0
            rows.append(lp + bscore[b])
        flat = torch.stack(rows).reshape(-1)
        vals, idx = torch.sort(flat, descending=True, stable=True)
        # the boundary the C code could order differently: adjacent live candidates up to keep + 1
        # (-inf from the forced tokens and the -1e9 of the initial beams tie exactly in both)
        finite = vals[torch.isfinite(vals) & (vals > -1e8)]
        upto = min(keep + 1, finite.numel())
        if upto > 1:
            gaps = (finite[: upto - 1] - finite[1:upto]).abs()
            min_gap = min(min_gap, float(gaps.min()))
        vals, idx = vals[:keep], idx[:keep]
        sel = []
        for r in range(keep):
            b, tok, s = int(idx[r]) // V, int(idx[r]) % V, vals[r]
            if tok in eos:
                if r < nb:
                    hyps.add(beams[b], float(s), cur + 1 - pl, True)
            else:
                sel.append((b, tok, s))
            if len(sel) == nb:
                break
        assert len(sel) == nb
        done = hyps.done(float(vals[0]), cur + 1)
        beams = [beams[b] + [tok] for b, tok, _ in sel]
        bscore = torch.stack([s for _, _, s in sel])
        cur += 1
    if not done:
        for b in range(nb):
            hyps.add(beams[b], float(bscore[b]), cur - pl, False)
    ranked = sorted(hyps.beams, key=lambda h: (h[0], h[4]))
    out = []
    for _ in range(min(o["num_return"], len(ranked))):
        score, ids, ended, sum_lp, _ = ranked.pop()
        if ended:
            ids = ids + [eos[0]]
        out.append(dict(ids=ids, score=score, sum_logprobs=sum_lp, eos=ended))
    return out, min_gap


def rows_of(model, ids, pl):
    _, att, cross = model.forward(ids)
    S = len(ids) - pl
    pos = [pl - 1 + s for s in range(S)]
    self_rows = att[:, :, pos, :].permute(2, 0, 1, 3)  # (S, L, H, T)
    cross_rows = None if cross is None else cross[:, :, pos, :].permute(2, 0, 1, 3)
    return self_rows, cross_rows


def nested(t):
    """(S, L, H, K) as nested lists, 9 significant digits (float32 needs 9 to round-trip)."""
    return [[[[float(f"{float(x):.9g}") for x in row] for row in h] for h in l] for l in t]


def main():
    cases = []
    for name, folder, over, prompt, o in CASES:
        model = Model(folder, over, prompt)
        hyps, gap = beam_search(model, o)
        assert gap >= MIN_GAP, f"{name}: adjacent candidate scores {gap:.2e} apart (a near-tie)"
        pl = len(model.start)
        for h in hyps:
            s, x = rows_of(model, h["ids"], pl)
            h["self_rows"] = nested(s)
            if x is not None:
                h["cross_rows"] = nested(x)
        n_eos = sum(h["eos"] for h in hyps)
        lens = [len(h["ids"]) - pl for h in hyps]
        print(f"{name}: {len(hyps)} returned, generated lengths {lens}, {n_eos} ended by eos, "
              f"best score {hyps[0]['score']:.6f}, smallest candidate gap {gap:.2e}")
        cases.append(dict(name=name, model=folder, config=over, prompt=prompt,
                          encoder_decoder=model.encdec, prompt_length=pl, **o, hypotheses=hyps))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": "tests/ref/gen_beam.py", "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
