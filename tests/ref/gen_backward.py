#!/usr/bin/python3
"""gen_backward.py — autograd reference fixtures for attnscope's backward pass and
gradient saliency (tests/unit/test_backward.c, tests/unit/test_saliency.c).

What it does: builds tiny random (seeded) BERT, RoBERTa and DistilBERT models with
Hugging Face's exact tensor names and config.json keys, carrying both a sequence
classifier and a masked-LM head (decoder tied to the word embeddings), writes each as
a model folder (config.json + model.safetensors, F32), runs a faithful torch
re-implementation of Hugging Face's eager modeling code in eval mode (dropout off)
on a batch of B = 2 sequences of T = 7 tokens (the second right-padded by 2), and
writes with autograd, in float64 from the stored float32 weights:
  - the losses: mean cross-entropy of the classifier, mean cross-entropy of the MLM
    head over the positions whose label is not -100, and the logits of both;
  - d(loss_cls + loss_mlm)/d every parameter ("grad." + the HF name);
  - d loss / d embedding output (input of layer 0, after the embedding LayerNorm)
    and d loss / d (word + position + segment embeddings) = d loss / d word vectors;
  - for the BERT model only, saliency of one unpadded sentence pair: gradient of the
    predicted class's logit w.r.t. the word-embedding vectors reduced by the L1 norm
    (vanilla gradient, Simonyan et al. 2013), gradient x input summed over the
    embedding dimension, and integrated gradients (Sundararajan et al. 2017) with an
    all-zero baseline on the word vectors and the Riemann midpoint rule (IG_STEPS).
into tests/ref/fixtures/backward/<arch>/expected.safetensors.

What it does not: use the `transformers` library (not installed here), model dropout,
or write tokenizer files (the tests build batches from raw ids).

Run (deterministic; rewrites tests/ref/fixtures/backward/):
    /usr/bin/python3 tests/ref/gen_backward.py

Sources re-implemented (transformers v4.3x, eager attention):
  models/bert/modeling_bert.py  BertEmbeddings, BertSelfAttention (additive mask
      (1 - mask) * finfo(float32).min), BertSelfOutput, BertIntermediate, BertOutput,
      BertPooler (tanh on token 0), BertForSequenceClassification, BertLMPredictionHead
  models/roberta/modeling_roberta.py  create_position_ids_from_input_ids,
      RobertaClassificationHead (dense + tanh + out_proj), RobertaLMHead (gelu)
  models/distilbert/modeling_distilbert.py  Embeddings (no segments),
      MultiHeadSelfAttention (masked_fill finfo.min), FFN, pre_classifier + ReLU,
      vocab_transform + gelu + vocab_layer_norm + vocab_projector
"""
import json
import math
import os
import shutil
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "backward")
FMIN = torch.finfo(torch.float32).min
IG_STEPS = 16
DT = torch.float64

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

# ---------------------------------------------------------------- safetensors


def st_write(path, tensors):
    """Writes a safetensors file: u64 LE header length, JSON header padded with
    spaces to a multiple of 8, then the tensors' bytes in the order given.
    tensors: list of (name, tensor, dtype) with dtype F32 or I32."""
    header, blobs, off = {}, [], 0
    for name, t, dtype in tensors:
        t = t.detach().contiguous().cpu()
        if dtype == "I32":
            b = t.to(torch.int64).numpy().astype("<i4").tobytes()
        else:
            b = t.to(torch.float64).numpy().astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------- model

def gelu(x):  # transformers GELUActivation == erf form
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def layer_norm(x, g, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, eps)


def linear(x, P, base):
    return x @ P[base + ".weight"].T + P[base + ".bias"]


class Spec:
    def __init__(self, arch):
        self.arch = arch
        self.L, self.H, self.D, self.F, self.V, self.C = 2, 2, 16, 32, 50, 3
        self.P = 20
        self.eps = 1e-12
        self.pad = 1 if arch == "roberta" else 0
        self.TV = 0 if arch == "distilbert" else (1 if arch == "roberta" else 2)
        self.pre = {"bert": "bert.", "roberta": "roberta.", "distilbert": "distilbert."}[arch]

    def names(self, l):
        """HF names of layer l's sub-modules: q, k, v, o, ln1, ff1, ff2, ln2."""
        if self.arch == "distilbert":
            b = f"{self.pre}transformer.layer.{l}."
            return [b + s for s in ("attention.q_lin", "attention.k_lin", "attention.v_lin",
                                    "attention.out_lin", "sa_layer_norm", "ffn.lin1", "ffn.lin2",
                                    "output_layer_norm")]
        b = f"{self.pre}encoder.layer.{l}."
        return [b + s for s in ("attention.self.query", "attention.self.key", "attention.self.value",
                                "attention.output.dense", "attention.output.LayerNorm",
                                "intermediate.dense", "output.dense", "output.LayerNorm")]

    def heads(self):
        """(pre-classifier, classifier, mlm dense, mlm layer norm, mlm bias)."""
        if self.arch == "bert":
            return ("bert.pooler.dense", "classifier", "cls.predictions.transform.dense",
                    "cls.predictions.transform.LayerNorm", "cls.predictions.bias")
        if self.arch == "roberta":
            return ("classifier.dense", "classifier.out_proj", "lm_head.dense", "lm_head.layer_norm",
                    "lm_head.bias")
        return ("pre_classifier", "classifier", "vocab_transform", "vocab_layer_norm",
                "vocab_projector.bias")


def make_params(s, seed):
    """Random parameters with HF names (order = insertion order); float32 values."""
    g = torch.Generator().manual_seed(seed)
    P = {}

    def n(shape, std):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * std

    def lin(base, o, i):
        P[base + ".weight"] = n((o, i), 0.25)
        P[base + ".bias"] = n((o,), 0.1)

    def ln(base, d):
        P[base + ".weight"] = 1.0 + n((d,), 0.1)
        P[base + ".bias"] = n((d,), 0.1)

    D, F, V = s.D, s.F, s.V
    P[s.pre + "embeddings.word_embeddings.weight"] = n((V, D), 0.5)
    P[s.pre + "embeddings.position_embeddings.weight"] = n((s.P, D), 0.3)
    if s.TV:
        P[s.pre + "embeddings.token_type_embeddings.weight"] = n((s.TV, D), 0.3)
    ln(s.pre + "embeddings.LayerNorm", D)
    for l in range(s.L):
        q, k, v, o, ln1, f1, f2, ln2 = s.names(l)
        for b in (q, k, v, o):
            lin(b, D, D)
        ln(ln1, D)
        lin(f1, F, D)
        lin(f2, D, F)
        ln(ln2, D)
    pc, cl, md, mln, mb = s.heads()
    lin(pc, D, D)
    lin(cl, s.C, D)
    lin(md, D, D)
    ln(mln, D)
    P[mb] = n((V,), 0.1)
    return P


def positions(s, ids):
    if s.arch == "roberta":  # create_position_ids_from_input_ids
        m = (ids != s.pad).long()
        return torch.cumsum(m, dim=1) * m + s.pad
    return torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)


def forward(s, P, ids, tt, mask, word_vecs=None, keep=None):
    """Returns (cls logits (B, C), final hidden (B, T, D), embedding output x0,
    embedding sum e). word_vecs (B, T, D) replaces the word-embedding lookup."""
    pre = s.pre
    B, T = ids.shape
    H, D = s.H, s.D
    Dh = D // H
    w = P[pre + "embeddings.word_embeddings.weight"][ids] if word_vecs is None else word_vecs
    e = w + P[pre + "embeddings.position_embeddings.weight"][positions(s, ids)]
    if s.TV:
        e = e + P[pre + "embeddings.token_type_embeddings.weight"][tt]
    if keep is not None:
        e.retain_grad()
        keep["e"] = e
    x = layer_norm(e, P[pre + "embeddings.LayerNorm.weight"], P[pre + "embeddings.LayerNorm.bias"], s.eps)
    if keep is not None:
        x.retain_grad()
        keep["x0"] = x
    ext = (1.0 - mask[:, None, None, :].to(DT)) * FMIN  # get_extended_attention_mask
    for l in range(s.L):
        q, k, v, o, ln1, f1, f2, ln2 = s.names(l)

        def heads(t):  # transpose_for_scores: (B, T, D) -> (B, H, T, Dh)
            return t.view(B, T, H, Dh).permute(0, 2, 1, 3)

        Q, K, Vv = heads(linear(x, P, q)), heads(linear(x, P, k)), heads(linear(x, P, v))
        if s.arch == "distilbert":  # q / sqrt(Dh), then masked_fill(finfo.min)
            sc = (Q / math.sqrt(Dh)) @ K.transpose(-1, -2)
            sc = sc.masked_fill((mask == 0)[:, None, None, :], FMIN)
        else:
            sc = Q @ K.transpose(-1, -2) / math.sqrt(Dh) + ext
        p = torch.softmax(sc, dim=-1)
        ctx = (p @ Vv).permute(0, 2, 1, 3).reshape(B, T, D)
        x = layer_norm(linear(ctx, P, o) + x, P[ln1 + ".weight"], P[ln1 + ".bias"], s.eps)
        h = gelu(linear(x, P, f1))
        x = layer_norm(linear(h, P, f2) + x, P[ln2 + ".weight"], P[ln2 + ".bias"], s.eps)
    pc, cl, md, mln, mb = s.heads()
    h0 = linear(x[:, 0], P, pc)
    h0 = torch.relu(h0) if s.arch == "distilbert" else torch.tanh(h0)
    return linear(h0, P, cl), x, keep


def mlm_logits(s, P, x):
    pc, cl, md, mln, mb = s.heads()
    t = gelu(linear(x, P, md))
    t = layer_norm(t, P[mln + ".weight"], P[mln + ".bias"], s.eps)
    return t @ P[s.pre + "embeddings.word_embeddings.weight"].T + P[mb]


def config(s):
    C = s.C
    labels = {"id2label": {str(i): f"class_{i}" for i in range(C)},
              "label2id": {f"class_{i}": i for i in range(C)}}
    if s.arch == "distilbert":
        c = {"architectures": ["DistilBertForSequenceClassification"], "model_type": "distilbert",
             "n_layers": s.L, "n_heads": s.H, "dim": s.D, "hidden_dim": s.F, "activation": "gelu",
             "max_position_embeddings": s.P, "vocab_size": s.V, "pad_token_id": s.pad,
             "sinusoidal_pos_embds": False, "dropout": 0.1, "attention_dropout": 0.1}
    else:
        c = {"architectures": ["BertForSequenceClassification" if s.arch == "bert"
                               else "RobertaForSequenceClassification"],
             "model_type": s.arch, "num_hidden_layers": s.L, "num_attention_heads": s.H,
             "hidden_size": s.D, "intermediate_size": s.F, "hidden_act": "gelu",
             "max_position_embeddings": s.P, "type_vocab_size": s.TV, "vocab_size": s.V,
             "layer_norm_eps": s.eps, "pad_token_id": s.pad, "hidden_dropout_prob": 0.1,
             "attention_probs_dropout_prob": 0.1}
    c.update(labels)
    return c


def batch(s, g):
    """B = 2, T = 7; sequence 1 right-padded by 2. Specials: BERT [CLS]=2 [SEP]=3,
    RoBERTa <s>=0 </s>=2, pad as configured."""
    T = 7
    lo = 5
    ids = torch.randint(lo, s.V, (2, T), generator=g)
    tt = torch.zeros(2, T, dtype=torch.long)
    mask = torch.ones(2, T, dtype=torch.long)
    cls, sep = (0, 2) if s.arch == "roberta" else (2, 3)
    ids[:, 0] = cls
    ids[0, 3] = sep
    ids[0, T - 1] = sep
    ids[1, T - 3] = sep
    ids[1, T - 2:] = s.pad
    mask[1, T - 2:] = 0
    if s.TV == 2:
        tt[0, 4:] = 1
    mlm = torch.full((2, T), -100, dtype=torch.long)
    mlm[0, 1] = int(torch.randint(0, s.V, (1,), generator=g))
    mlm[0, 5] = int(torch.randint(0, s.V, (1,), generator=g))
    mlm[1, 2] = int(torch.randint(0, s.V, (1,), generator=g))
    labels = torch.tensor([2, 0])
    return ids, tt, mask, labels, mlm


def make(arch, seed):
    s = Spec(arch)
    P32 = make_params(s, seed)
    P = {k: v.to(DT).requires_grad_(True) for k, v in P32.items()}
    g = torch.Generator().manual_seed(seed + 1)
    ids, tt, mask, labels, mlm = batch(s, g)
    keep = {}
    logits, x, keep = forward(s, P, ids, tt, mask, keep=keep)
    loss_cls = torch.nn.functional.cross_entropy(logits, labels)
    rows = (mlm != -100).nonzero(as_tuple=False)
    xm = x[rows[:, 0], rows[:, 1]]  # (M, D) in row-major order of (b, t)
    ml = mlm_logits(s, P, xm)
    loss_mlm = torch.nn.functional.cross_entropy(ml, mlm[rows[:, 0], rows[:, 1]])
    (loss_cls + loss_mlm).backward()

    d = os.path.join(OUT_DIR, arch)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config(s), f, indent=2, sort_keys=True)
    st_write(os.path.join(d, "model.safetensors"), [(k, v, "F32") for k, v in P32.items()])
    exp = [("in.ids", ids, "I32"), ("in.type_ids", tt, "I32"), ("in.mask", mask, "I32"),
           ("in.cls_labels", labels, "I32"), ("in.mlm_labels", mlm, "I32"),
           ("out.loss_cls", loss_cls.reshape(1), "F32"), ("out.loss_mlm", loss_mlm.reshape(1), "F32"),
           ("out.cls_logits", logits, "F32"), ("out.mlm_logits", ml, "F32"),
           ("grad.emb_out", keep["x0"].grad, "F32"), ("grad.emb_sum", keep["e"].grad, "F32")]
    exp += [("grad." + k, v.grad, "F32") for k, v in P.items()]
    if arch == "bert":
        exp += saliency(s, P, g)
    st_write(os.path.join(d, "expected.safetensors"), exp)
    print(f"{arch}: loss_cls {loss_cls.item():.6f} loss_mlm {loss_mlm.item():.6f} "
          f"{len(P)} parameter gradients")


def saliency(s, P, g):
    """Vanilla gradient (L1), gradient x input (signed sum) and integrated gradients
    (zero baseline, midpoint rule) for the predicted class of one sentence pair."""
    T = 7
    ids = torch.randint(5, s.V, (1, T), generator=g)
    ids[0, 0], ids[0, 3], ids[0, T - 1] = 2, 3, 3
    tt = torch.zeros(1, T, dtype=torch.long)
    tt[0, 4:] = 1
    mask = torch.ones(1, T, dtype=torch.long)
    Pd = {k: v.detach() for k, v in P.items()}
    wte = Pd[s.pre + "embeddings.word_embeddings.weight"]
    w = wte[ids].clone().requires_grad_(True)
    logits, _, _ = forward(s, Pd, ids, tt, mask, word_vecs=w)
    target = int(torch.argmax(logits[0]))
    logits[0, target].backward()
    grad = w.grad[0]
    sal_grad = grad.abs().sum(-1)
    sal_gxi = (grad * w.detach()[0]).sum(-1)
    # integrated gradients: attr = (x - x') * mean_k dF/dx(x' + a_k (x - x')), a_k = (k + 1/2) / m
    x = w.detach()
    tot = torch.zeros_like(x)
    for k in range(IG_STEPS):
        a = (k + 0.5) / IG_STEPS
        xi = (a * x).clone().requires_grad_(True)
        li, _, _ = forward(s, Pd, ids, tt, mask, word_vecs=xi)
        li[0, target].backward()
        tot += xi.grad
    sal_ig = (x * tot / IG_STEPS)[0].sum(-1)
    with torch.no_grad():
        base, _, _ = forward(s, Pd, ids, tt, mask, word_vecs=torch.zeros_like(x))
    print(f"  saliency: target {target} IG sum {sal_ig.sum().item():.6f} vs logit difference "
          f"{(logits[0, target] - base[0, target]).item():.6f}")
    return [("sal.ids", ids[0], "I32"), ("sal.type_ids", tt[0], "I32"),
            ("sal.logits", logits[0].detach(), "F32"), ("sal.target", torch.tensor([target]), "I32"),
            ("sal.grad", sal_grad, "F32"), ("sal.gxi", sal_gxi, "F32"), ("sal.ig", sal_ig, "F32"),
            ("sal.ig_steps", torch.tensor([IG_STEPS]), "I32"),
            ("sal.logit_base", base[0, target].reshape(1), "F32")]


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    make("bert", 11)
    make("roberta", 12)
    make("distilbert", 13)


if __name__ == "__main__":
    main()
