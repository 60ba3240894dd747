#!/usr/bin/python3
"""gen_param_grads.py — autograd reference parameter gradients for the engine's backward
pass (training on the one forward, every family).

What it does: for the fixtures in FIXTURES (tests/ref/fixtures/models/<name>, written by
gen_models.py / gen_llama.py), case "single" only, re-runs the reference forward that
gen_grads.py uses (make_runner) with every parameter tensor of model.safetensors as a
float64 leaf, the word embeddings looked up from the table inside the graph

    E (T, De) = word_embedding_table[input_ids]

and writes with torch.autograd, in float64, into <fixture>/param_grads.safetensors:

    <name>  F32 (same shape)  d objective / d <name>, for EVERY tensor of model.safetensors,
                              under the same name

The objective is gen_grads.py's (OBJECTIVE, the same targets; its value is checked against
grads.safetensors' single.objective). The embedding table's gradient is the total: the
looked-up rows (scattered and summed over repeated ids) plus, where the LM head is tied
(GPT-2, llama3_scaled, gemma2, gemma3), the head's use of the table. Parameters the
objective does not read get exact zeros (bert: the MLM head cls.predictions.*, unused by
its classifier objective; every model: position / type rows not looked up).

Self-checks (asserted, numbers printed):
  - the objective equals grads.safetensors' single.objective (F32) within 1e-5 relative;
  - the table gradient equals grads.safetensors' single.d_word_embeds scattered onto the
    looked-up rows (index_add) plus the head's part (the table's gradient with the rows
    taken as a constant; exactly 0 where untied), within 1e-5 of the table gradient's max;
  - central finite differences in float64 (step 1e-4) against autograd, relative error
    < 1e-5, on FD_ENTRIES random entries of FD_PARAMS parameters per fixture: the embedding
    table (tied models: one entry from a row that is not looked up, reached by the head
    only) plus random other tensors; entries are drawn among those whose |gradient| is at
    least 1e-2 of the tensor's max (a relative error on a cancelled near-zero gradient
    measures the step, not the gradient);
  - the float32 gradient against the float64 one, max|diff| / max|grad| per tensor, the
    worst printed.

Run (deterministic): /usr/bin/python3 tests/ref/gen_param_grads.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# gen_grads sets torch to 1 thread and deterministic algorithms on import
from gen_grads import MODELS_DIR, OBJECTIVE, load, make_runner, objective, targets_of  # noqa: E402
from gen_models import st_read, st_write  # noqa: E402

GENERATOR = "tests/ref/gen_param_grads.py"
CASE = "single"
FIXTURES = ("bert", "distilbert", "roberta", "gpt2", "llama", "llama3_scaled", "qwen3",
            "gemma2", "gemma3", "phi3", "mistral_swa", "llama_cls")
FD_STEP = 1e-4
FD_TOL = 1e-5
FD_PARAMS = 4          # the table + 3 random other tensors (with a nonzero gradient)
FD_ENTRIES = 5
FD_MIN_FRAC = 1e-2     # FD entries: |grad| >= FD_MIN_FRAC * max|grad| of the tensor
REF_TOL = 1e-5         # vs grads.safetensors (F32)
NULL_FRAC = 1e-12      # null_of
TOTAL_MAX = 2_000_000


def param_grads(run, P, table, ids, tt, mask, kind, dtype, rows_const=False):
    """objective, {name: d objective / d name} (zeros where unused), targets; in dtype.
    rows_const: the looked-up rows as a constant (the table's gradient is then the tied
    head's part alone; a check)."""
    Pd = {k: v.to(dtype).requires_grad_(True) for k, v in P.items()}
    E = Pd[table][ids]  # in the graph: the rows' gradient reaches the table
    if rows_const:
        E = E.detach()
    logits, _ = run(Pd, ids, tt, mask, E)
    tgt = targets_of(kind, logits.shape[-1], ids)
    obj = objective(logits, tgt, kind, mask)
    names = list(Pd)
    g = torch.autograd.grad(obj, [Pd[k] for k in names], allow_unused=True)
    out = {k: (torch.zeros_like(Pd[k]) if x is None else x).detach() for k, x in zip(names, g)}
    return obj.detach(), out, tgt


def null_of(G):
    """Tensors whose gradient is 0 up to float64 rounding (max|g| <= NULL_FRAC * the largest
    |g| of the model): unused ones (exact zeros) and the BERT-family attention key biases
    (q . b_k is the same for every key, and the softmax ignores a per-row constant)."""
    top = max(v.abs().max().item() for v in G.values())
    return sorted(k for k, v in G.items() if v.abs().max().item() <= NULL_FRAC * top)


def eval_obj(run, Pd, table, ids, tt, mask, tgt, kind):
    logits, _ = run(Pd, ids, tt, mask, Pd[table][ids])
    return objective(logits, tgt, kind, mask).item()


def fd_check(run, P, table, ids, tt, mask, tgt, kind, G, tied, gen):
    """Central differences in float64; returns [(name, index, autograd, fd, rel)]."""
    P64 = {k: v.to(torch.float64) for k, v in P.items()}
    others = sorted(k for k in G if k != table and k not in null_of(G))
    pick = torch.randperm(len(others), generator=gen)[: FD_PARAMS - 1].tolist()
    rows_used = set(ids.tolist())
    res = []
    with torch.no_grad():
        for name in [table] + [others[i] for i in sorted(pick)]:
            g = G[name].reshape(-1)
            ok = torch.nonzero(g.abs() >= FD_MIN_FRAC * g.abs().max())[:, 0]
            idx = ok[torch.randperm(len(ok), generator=gen)[:FD_ENTRIES]].tolist()
            if name == table and tied:  # one entry reached by the tied head only
                De = G[name].shape[1]
                head_only = [i for i in ok.tolist() if i // De not in rows_used]
                assert head_only, name
                idx[-1] = head_only[torch.randint(len(head_only), (1,), generator=gen).item()]
            for i in idx:
                f = []
                for s in (FD_STEP, -FD_STEP):
                    Pp = dict(P64)
                    w = P64[name].clone()
                    w.view(-1)[i] += s
                    Pp[name] = w
                    f.append(eval_obj(run, Pp, table, ids, tt, mask, tgt, kind))
                fd = (f[0] - f[1]) / (2 * FD_STEP)
                ad = g[i].item()
                den = max(abs(fd), abs(ad))
                res.append((name, i, ad, fd, abs(fd - ad) / den if den > 0 else 0.0))
    return res


def main():
    gen = torch.Generator().manual_seed(5151)
    total, worst = 0, {"fd": 0.0, "f32": 0.0, "f32null": 0.0, "ref": 0.0}
    for name in FIXTURES:
        c, P, exp, meta = load(name)
        table, run = make_runner(c, P, meta)
        kind = meta["logits_head"]
        ids = exp[f"{CASE}.input_ids"].long()
        mask = exp[f"{CASE}.attention_mask"].long()
        tt = exp[f"{CASE}.token_type_ids"].long()
        # the head reads the table: GPT-2, tied LLaMA-family lm heads, the BERT MLM decoder
        tied = kind == "mlm" or (kind == "lm" and "lm_head.weight" not in P)
        o64, G64, tgt = param_grads(run, P, table, ids, tt, mask, kind, torch.float64)
        o32, G32, _ = param_grads(run, P, table, ids, tt, mask, kind, torch.float32)
        assert set(G64) == set(P) and all(G64[k].shape == P[k].shape for k in P)

        # the same objective and the same looked-up rows' gradient as grads.safetensors
        ref = st_read(os.path.join(MODELS_DIR, name, "grads.safetensors"))
        ro = ref[f"{CASE}.objective"].double().item()
        assert abs(o64.item() - ro) <= REF_TOL * max(1.0, abs(ro)), (name, o64.item(), ro)
        assert torch.equal(ref[f"{CASE}.targets"].long().reshape(-1), tgt.reshape(-1)), name
        dE = ref[f"{CASE}.d_word_embeds"].double()
        rows = torch.zeros_like(G64[table]).index_add_(0, ids, dE)
        head = param_grads(run, P, table, ids, tt, mask, kind, torch.float64,
                           rows_const=True)[1][table]
        assert tied or head.abs().max() == 0, name
        d_rows = (G64[table] - rows - head).abs().max().item() / G64[table].abs().max().item()
        assert d_rows <= REF_TOL, (name, d_rows)
        worst["ref"] = max(worst["ref"], d_rows)

        res = fd_check(run, P, table, ids, tt, mask, tgt, kind, G64, tied, gen)
        fd = max(r[4] for r in res)
        assert fd < FD_TOL, (name, [r for r in res if r[4] >= FD_TOL])
        # float32 vs float64: per tensor, relative to its max; null tensors relative to
        # the model's largest |g| (their float32 values are rounding noise around 0)
        null = null_of(G64)
        top = max(v.abs().max().item() for v in G64.values())
        n32 = max((G32[k].double() - G64[k]).abs().max().item() / G64[k].abs().max().item()
                  for k in G64 if k not in null)
        n32null = max([(G32[k].double() - G64[k]).abs().max().item() / top for k in null] + [0.0])
        assert n32null < 1e-5, (name, n32null)
        worst["fd"], worst["f32"] = max(worst["fd"], fd), max(worst["f32"], n32)
        worst["f32null"] = max(worst["f32null"], n32null)
        print(f"{name:14s} {kind:10s} {'tied  ' if tied else 'untied'} tensors {len(G64):3d} "
              f"obj {o64.item():+10.5f}  |g|max {top:.3e}  table - rows - head {d_rows:.1e}  "
              f"fd rel {fd:.1e} ({len(res)} entries: {', '.join(sorted(set(r[0] for r in res)))})  "
              f"f32 noise {n32:.1e}"
              + (f"  null (f32 {n32null:.1e} of max): {', '.join(null)}" if null else ""))
        path = os.path.join(MODELS_DIR, name, "param_grads.safetensors")
        st_write(path, [(k, G64[k], "F32") for k in sorted(G64)],
                 {"generator": GENERATOR, "case": CASE, "objective": OBJECTIVE,
                  "table": table, "tied": str(tied)})
        total += os.path.getsize(path)
    print(f"worst: fd rel {worst['fd']:.1e}  table - grads.safetensors rows - head "
          f"{worst['ref']:.1e}  f32 vs f64 (per tensor, relative to its max) {worst['f32']:.1e}, "
          f"null tensors (relative to the model's max) {worst['f32null']:.1e}")
    print(f"wrote param_grads.safetensors into {len(FIXTURES)} fixtures, {total} bytes")
    assert total < TOTAL_MAX


if __name__ == "__main__":
    main()
