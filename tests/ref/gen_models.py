#!/usr/bin/python3
"""gen_models.py — numerical reference fixtures for attnscope's forward pass.

What it does: builds small random (seeded) BERT / RoBERTa / DistilBERT / GPT-2
models with Hugging Face's exact tensor names, shapes and config.json keys, writes
each as a Hugging Face model folder (config.json + model.safetensors), runs a
faithful torch re-implementation of Hugging Face's eager modeling code on three
inputs per model (a single sentence, a sentence pair, a right-padded sequence) and
writes every internal the C engine captures to expected.safetensors.

Independent cross-check: before anything is written, every layer's output and
attention probabilities are recomputed with torch's own nn.TransformerEncoderLayer
/ nn.MultiheadAttention loaded from the same weights, and must agree within 1e-5
(hidden states) and 1e-6 (attention probabilities).

What it does not: use the `transformers` library (not installed here), write
tokenizer files (the parity test builds encodings from raw ids), or train anything.

Run (deterministic; rewrites tests/ref/fixtures/models/):
    /usr/bin/python3 tests/ref/gen_models.py

Sources for the semantics re-implemented below (transformers v4.3x, eager attention):
  models/bert/modeling_bert.py        BertEmbeddings, BertSelfAttention, BertPooler,
                                      BertPredictionHeadTransform, BertLMPredictionHead
  models/roberta/modeling_roberta.py  create_position_ids_from_input_ids,
                                      RobertaClassificationHead
  models/distilbert/modeling_distilbert.py  Embeddings, MultiHeadSelfAttention, FFN
  models/gpt2/modeling_gpt2.py        GPT2Attention._attn, GPT2MLP, GPT2Model.forward
  modeling_utils.get_extended_attention_mask: (1 - mask) * finfo(float32).min
  activations.NewGELUActivation (gelu_new, tanh form), GELUActivation (erf form)
"""
import json
import math
import os
import shutil
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "models")
FMIN = torch.finfo(torch.float32).min

# Cross-check tolerances against torch's own transformer layer.
XCHECK_HIDDEN_TOL = 1e-5
XCHECK_ATTN_TOL = 1e-6

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


# ---------------------------------------------------------------- safetensors

ST_DTYPES = {"F32": "<f4", "F16": "<f2", "I32": "<i4"}


def tensor_bytes(t, dtype):
    """Little-endian bytes of tensor t stored as safetensors dtype."""
    t = t.detach().contiguous().cpu()
    if dtype == "BF16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    if dtype == "I32":
        return t.to(torch.int64).numpy().astype("<i4").tobytes()
    return t.to(torch.float32).numpy().astype(ST_DTYPES[dtype]).tobytes()


def st_write(path, tensors, metadata=None):
    """Writes a safetensors file: u64 LE header length, JSON header padded with
    spaces to a multiple of 8, then the tensors' bytes in the order given.
    tensors: list of (name, torch tensor, dtype string)."""
    header = {}
    blobs = []
    off = 0
    for name, t, dtype in tensors:
        b = tensor_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def st_read(path):
    """Reads back a safetensors file written above (used to verify round trips)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b0, b1 = info["data_offsets"]
        raw = data[base + b0:base + b1]
        if info["dtype"] == "BF16":
            a = np.frombuffer(raw, dtype="<i2").copy()
            t = torch.from_numpy(a).view(torch.bfloat16).float()
        else:
            t = torch.from_numpy(np.frombuffer(raw, dtype=ST_DTYPES[info["dtype"]]).copy())
        out[name] = t.reshape(info["shape"])
    return out


# ---------------------------------------------------------------- activations

def gelu_erf(x):  # transformers GELUActivation == F.gelu (erf form)
    return F.gelu(x)


def gelu_new(x):  # transformers NewGELUActivation (tanh approximation)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def ext_mask(mask):
    """modeling_utils.get_extended_attention_mask: (1, 1, 1, T) additive mask."""
    m = mask[None, None, None, :].to(torch.float32)
    return (1.0 - m) * FMIN


# ---------------------------------------------------------------- random weights

class Init:
    """Seeded random weights. Scales are larger than HF's 0.02 init so attention is
    peaked (not near-uniform) and every tensor matters numerically."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def normal(self, shape, std, mean=0.0):
        return torch.randn(shape, generator=self.g, dtype=torch.float32) * std + mean

    def linear(self, P, base, n_out, n_in, std=None):  # nn.Linear: weight (out, in)
        std = std if std is not None else 1.0 / math.sqrt(n_in)
        P[base + ".weight"] = self.normal((n_out, n_in), std)
        P[base + ".bias"] = self.normal((n_out,), 0.1)

    def conv1d(self, P, base, n_in, n_out, std=None):  # GPT-2 Conv1D: weight (in, out)
        std = std if std is not None else 1.0 / math.sqrt(n_in)
        P[base + ".weight"] = self.normal((n_in, n_out), std)
        P[base + ".bias"] = self.normal((n_out,), 0.1)

    def ln(self, P, base, n, w="weight", b="bias"):
        P[base + "." + w] = self.normal((n,), 0.1, 1.0)
        P[base + "." + b] = self.normal((n,), 0.1)


QK_STD = 0.3  # query/key projections: scores of a few units -> clearly non-uniform attention


def bert_params(init, c, pre, classifier, mlm, pooler, roberta_head=False, C=0):
    D, Fd, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    De = c.get("embedding_size", D)  # ELECTRA: embeddings of width De, projected to D
    P = {}
    P[pre + "embeddings.word_embeddings.weight"] = init.normal((V, De), 1.0)
    P[pre + "embeddings.position_embeddings.weight"] = init.normal((c["max_position_embeddings"], De), 0.5)
    P[pre + "embeddings.token_type_embeddings.weight"] = init.normal((c["type_vocab_size"], De), 0.5)
    init.ln(P, pre + "embeddings.LayerNorm", De)
    if De != D:
        init.linear(P, pre + "embeddings_project", D, De)
    for l in range(c["num_hidden_layers"]):
        b = f"{pre}encoder.layer.{l}."
        init.linear(P, b + "attention.self.query", D, D, QK_STD)
        init.linear(P, b + "attention.self.key", D, D, QK_STD)
        init.linear(P, b + "attention.self.value", D, D)
        init.linear(P, b + "attention.output.dense", D, D)
        init.ln(P, b + "attention.output.LayerNorm", D)
        init.linear(P, b + "intermediate.dense", Fd, D)
        init.linear(P, b + "output.dense", D, Fd)
        init.ln(P, b + "output.LayerNorm", D)
    if pooler:
        init.linear(P, pre + "pooler.dense", D, D)
    if classifier:
        if roberta_head:
            init.linear(P, "classifier.dense", D, D)
            init.linear(P, "classifier.out_proj", C, D)
        else:
            init.linear(P, "classifier", C, D)
    if mlm:
        init.linear(P, "cls.predictions.transform.dense", D, D)
        init.ln(P, "cls.predictions.transform.LayerNorm", D)
        P["cls.predictions.bias"] = init.normal((V,), 0.1)
    return P


def distilbert_params(init, c):
    D, Fd, V = c["dim"], c["hidden_dim"], c["vocab_size"]
    P = {}
    p = "distilbert."
    P[p + "embeddings.word_embeddings.weight"] = init.normal((V, D), 1.0)
    P[p + "embeddings.position_embeddings.weight"] = init.normal((c["max_position_embeddings"], D), 0.5)
    init.ln(P, p + "embeddings.LayerNorm", D)
    for l in range(c["n_layers"]):
        b = f"{p}transformer.layer.{l}."
        init.linear(P, b + "attention.q_lin", D, D, QK_STD)
        init.linear(P, b + "attention.k_lin", D, D, QK_STD)
        init.linear(P, b + "attention.v_lin", D, D)
        init.linear(P, b + "attention.out_lin", D, D)
        init.ln(P, b + "sa_layer_norm", D)
        init.linear(P, b + "ffn.lin1", Fd, D)
        init.linear(P, b + "ffn.lin2", D, Fd)
        init.ln(P, b + "output_layer_norm", D)
    init.linear(P, "pre_classifier", D, D)
    init.linear(P, "classifier", c["num_labels"], D)
    return P


def gpt2_params(init, c):
    D, V = c["n_embd"], c["vocab_size"]
    Fd = c["n_inner"] or 4 * D
    P = {}
    p = "transformer."
    P[p + "wte.weight"] = init.normal((V, D), 0.7)
    P[p + "wpe.weight"] = init.normal((c["n_positions"], D), 0.3)
    for l in range(c["n_layer"]):
        b = f"{p}h.{l}."
        init.ln(P, b + "ln_1", D)
        w = torch.cat([init.normal((D, D), QK_STD), init.normal((D, D), QK_STD),
                       init.normal((D, D), 1.0 / math.sqrt(D))], dim=1)
        P[b + "attn.c_attn.weight"] = w  # Conv1D (D, 3D): q | k | v along the output dim
        P[b + "attn.c_attn.bias"] = init.normal((3 * D,), 0.1)
        init.conv1d(P, b + "attn.c_proj", D, D)
        init.ln(P, b + "ln_2", D)
        init.conv1d(P, b + "mlp.c_fc", D, Fd)
        init.conv1d(P, b + "mlp.c_proj", Fd, D)
    init.ln(P, p + "ln_f", D)
    return P


# ---------------------------------------------------------------- HF re-implementations
# Each returns a dict: attentions (L,H,T,T), attention_scores (L,H,T,T), queries /
# keys / values (L,H,T,Dh), hidden_states (L+1,T,D), logits, plus "_layer_in" (the
# input of every layer, for the cross-check).

def heads(x, H):  # (1, T, D) -> (1, H, T, Dh), transpose_for_scores
    b, t, d = x.shape
    return x.view(b, t, H, d // H).permute(0, 2, 1, 3)


def merge(x):  # (1, H, T, Dh) -> (1, T, D)
    b, h, t, dh = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(b, t, h * dh)


def collect(rec):
    out = {k: torch.stack(v)[:, 0] for k, v in rec.items()}  # drop the batch dim
    return out


def bert_forward(P, c, pre, ids, tt, mask, roberta=False, head="classifier", electra=False,
                 word_embeds=None):
    """BertModel / RobertaModel + a head, eager attention, eval mode.
    word_embeds: (T, De) rows used instead of the word-embedding lookup (gen_grads.py)."""
    H, L, eps = c["num_attention_heads"], c["num_hidden_layers"], c["layer_norm_eps"]
    D = c["hidden_size"]
    T = ids.shape[0]
    ids_b, tt_b = ids[None], tt[None]
    if roberta:  # create_position_ids_from_input_ids
        pad = c["pad_token_id"]
        m = ids_b.ne(pad).int()
        pos = (torch.cumsum(m, dim=1).type_as(m) * m).long() + pad
    else:
        pos = torch.arange(T)[None]
    g = lambda n: P[pre + n]
    emb = F.embedding(ids_b, g("embeddings.word_embeddings.weight")) if word_embeds is None else word_embeds[None]
    emb = emb + F.embedding(tt_b, g("embeddings.token_type_embeddings.weight"))
    emb = emb + F.embedding(pos, g("embeddings.position_embeddings.weight"))
    h = F.layer_norm(emb, (emb.shape[-1],), g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"), eps)
    if pre + "embeddings_project.weight" in P:  # ElectraModel.embeddings_project
        h = F.linear(h, g("embeddings_project.weight"), g("embeddings_project.bias"))
    am = ext_mask(mask)
    rec = {k: [] for k in ("attentions", "attention_scores", "queries", "keys", "values")}
    hs, layer_in = [h], []
    for l in range(L):
        b = f"encoder.layer.{l}."
        lin = lambda x, n: F.linear(x, g(b + n + ".weight"), g(b + n + ".bias"))
        layer_in.append(h)
        q = heads(lin(h, "attention.self.query"), H)
        k = heads(lin(h, "attention.self.key"), H)
        v = heads(lin(h, "attention.self.value"), H)
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D // H)
        s = s + am
        p = F.softmax(s, dim=-1)
        ctx = merge(torch.matmul(p, v))
        a = F.layer_norm(lin(ctx, "attention.output.dense") + h, (D,),
                         g(b + "attention.output.LayerNorm.weight"), g(b + "attention.output.LayerNorm.bias"), eps)
        i = gelu_erf(lin(a, "intermediate.dense"))
        h = F.layer_norm(lin(i, "output.dense") + a, (D,),
                         g(b + "output.LayerNorm.weight"), g(b + "output.LayerNorm.bias"), eps)
        for key, val in zip(rec, (p, s, q, k, v)):
            rec[key].append(val)
        hs.append(h)
    out = collect(rec)
    out["_probs"] = rec["attentions"]  # per layer, in the graph (gen_grads.py)
    out["hidden_states"] = torch.stack(hs)[:, 0]
    out["_layer_in"] = layer_in
    if head == "classifier" and not roberta and not electra:  # BertPooler + BertForSequenceClassification
        pooled = torch.tanh(F.linear(h[:, 0], g("pooler.dense.weight"), g("pooler.dense.bias")))
        out["logits"] = F.linear(pooled, P["classifier.weight"], P["classifier.bias"])  # (1, C)
    elif head == "classifier" and electra:  # ElectraClassificationHead: dense, gelu, out_proj
        x = gelu_erf(F.linear(h[:, 0], P["classifier.dense.weight"], P["classifier.dense.bias"]))
        out["logits"] = F.linear(x, P["classifier.out_proj.weight"], P["classifier.out_proj.bias"])
    elif head == "classifier":  # RobertaClassificationHead on <s>
        x = torch.tanh(F.linear(h[:, 0], P["classifier.dense.weight"], P["classifier.dense.bias"]))
        out["logits"] = F.linear(x, P["classifier.out_proj.weight"], P["classifier.out_proj.bias"])
    else:  # BertOnlyMLMHead: transform (dense, act, LayerNorm) + decoder tied to word embeddings
        x = gelu_erf(F.linear(h[0], P["cls.predictions.transform.dense.weight"],
                              P["cls.predictions.transform.dense.bias"]))
        x = F.layer_norm(x, (D,), P["cls.predictions.transform.LayerNorm.weight"],
                         P["cls.predictions.transform.LayerNorm.bias"], eps)
        out["logits"] = F.linear(x, g("embeddings.word_embeddings.weight"), P["cls.predictions.bias"])  # (T, V)
    return out


def distilbert_forward(P, c, ids, mask, word_embeds=None):
    """DistilBertForSequenceClassification, eval mode. LayerNorm eps is hard-coded
    to 1e-12 in modeling_distilbert.py (no config key). word_embeds: as in bert_forward."""
    H, L, D, eps = c["n_heads"], c["n_layers"], c["dim"], 1e-12
    T = ids.shape[0]
    p = "distilbert."
    g = lambda n: P[p + n]
    emb = F.embedding(ids[None], g("embeddings.word_embeddings.weight")) if word_embeds is None else word_embeds[None]
    emb = emb + F.embedding(torch.arange(T)[None], g("embeddings.position_embeddings.weight"))
    h = F.layer_norm(emb, (D,), g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"), eps)
    masked = (mask == 0).view(1, 1, 1, T)
    rec = {k: [] for k in ("attentions", "attention_scores", "queries", "keys", "values")}
    hs, layer_in = [h], []
    for l in range(L):
        b = f"transformer.layer.{l}."
        lin = lambda x, n: F.linear(x, g(b + n + ".weight"), g(b + n + ".bias"))
        layer_in.append(h)
        q = heads(lin(h, "attention.q_lin"), H)
        k = heads(lin(h, "attention.k_lin"), H)
        v = heads(lin(h, "attention.v_lin"), H)
        s = torch.matmul(q / math.sqrt(D // H), k.transpose(2, 3))  # q scaled first, as HF
        s = s.masked_fill(masked.expand_as(s), torch.tensor(FMIN))  # masked_fill, not additive
        pr = F.softmax(s, dim=-1)
        ctx = merge(torch.matmul(pr, v))
        a = F.layer_norm(lin(ctx, "attention.out_lin") + h, (D,), g(b + "sa_layer_norm.weight"),
                         g(b + "sa_layer_norm.bias"), eps)
        f = lin(gelu_erf(lin(a, "ffn.lin1")), "ffn.lin2")
        h = F.layer_norm(f + a, (D,), g(b + "output_layer_norm.weight"), g(b + "output_layer_norm.bias"), eps)
        for key, val in zip(rec, (pr, s, q, k, v)):
            rec[key].append(val)
        hs.append(h)
    out = collect(rec)
    out["_probs"] = rec["attentions"]  # per layer, in the graph (gen_grads.py)
    out["hidden_states"] = torch.stack(hs)[:, 0]
    out["_layer_in"] = layer_in
    x = F.relu(F.linear(h[:, 0], P["pre_classifier.weight"], P["pre_classifier.bias"]))
    out["logits"] = F.linear(x, P["classifier.weight"], P["classifier.bias"])  # (1, C)
    return out


def gpt2_forward(P, c, ids, mask, tt=None, word_embeds=None):
    """GPT2LMHeadModel, eval mode, eager attention. hidden_states as HF returns them:
    L+1 entries, the last one after ln_f (the others are block inputs, no ln_f).
    tt: token_type_ids when passed (GPT2Model: hidden += wte(token_type_ids)).
    word_embeds: (T, D) rows used instead of the wte lookup of ids (gen_grads.py)."""
    H, L, D, eps = c["n_head"], c["n_layer"], c["n_embd"], c["layer_norm_epsilon"]
    T = ids.shape[0]
    p = "transformer."
    g = lambda n: P[p + n]
    we = F.embedding(ids[None], g("wte.weight")) if word_embeds is None else word_embeds[None]
    h = we + F.embedding(torch.arange(T)[None], g("wpe.weight"))
    if tt is not None:
        h = h + F.embedding(tt[None], g("wte.weight"))
    causal = torch.tril(torch.ones((T, T), dtype=torch.bool)).view(1, 1, T, T)
    am = ext_mask(mask)
    conv = lambda x, n: torch.addmm(g(n + ".bias"), x.view(-1, x.size(-1)), g(n + ".weight")).view(
        x.shape[:-1] + (g(n + ".bias").shape[0],))  # Conv1D
    rec = {k: [] for k in ("attentions", "attention_scores", "queries", "keys", "values")}
    hs, layer_in = [], []
    for l in range(L):
        b = f"h.{l}."
        hs.append(h)
        layer_in.append(h)
        x = F.layer_norm(h, (D,), g(b + "ln_1.weight"), g(b + "ln_1.bias"), eps)
        q, k, v = conv(x, b + "attn.c_attn").split(D, dim=2)
        q, k, v = heads(q, H), heads(k, H), heads(v, H)
        w = torch.matmul(q, k.transpose(-1, -2))
        if c["scale_attn_weights"]:
            w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)
        if c["scale_attn_by_inverse_layer_idx"]:
            w = w / float(l + 1)
        w = torch.where(causal, w.to(w.dtype), torch.full([], FMIN, dtype=w.dtype))
        w = w + am  # causal-and-pad entries become -inf here (finfo.min + finfo.min), as in HF
        pr = F.softmax(w, dim=-1)
        a = conv(merge(torch.matmul(pr, v)), b + "attn.c_proj")
        h = a + h
        x = F.layer_norm(h, (D,), g(b + "ln_2.weight"), g(b + "ln_2.bias"), eps)
        h = h + conv(gelu_new(conv(x, b + "mlp.c_fc")), b + "mlp.c_proj")
        for key, val in zip(rec, (pr, w, q, k, v)):
            rec[key].append(val)
    h_last = h
    h = F.layer_norm(h, (D,), g("ln_f.weight"), g("ln_f.bias"), eps)
    hs.append(h)
    out = collect(rec)
    out["_probs"] = rec["attentions"]  # per layer, in the graph (gen_grads.py)
    out["hidden_states"] = torch.stack(hs)[:, 0]
    out["_layer_in"] = layer_in
    out["_last_block_out"] = h_last
    out["logits"] = F.linear(h[0], g("wte.weight"))  # lm_head tied to wte, no bias: (T, V)
    return out


# ---------------------------------------------------------------- cross-check with torch.nn

def torch_layer(D, H, Fd, eps, act, norm_first, qkv_w, qkv_b, o_w, o_b, f1_w, f1_b, f2_w, f2_b,
                n1, n2):
    """nn.TransformerEncoderLayer holding one HF layer's weights (nn.Linear layout)."""
    lay = nn.TransformerEncoderLayer(D, H, Fd, dropout=0.0, activation=act, layer_norm_eps=eps,
                                     batch_first=True, norm_first=norm_first)
    lay.eval()
    with torch.no_grad():
        lay.self_attn.in_proj_weight.copy_(qkv_w)
        lay.self_attn.in_proj_bias.copy_(qkv_b)
        lay.self_attn.out_proj.weight.copy_(o_w)
        lay.self_attn.out_proj.bias.copy_(o_b)
        lay.linear1.weight.copy_(f1_w)
        lay.linear1.bias.copy_(f1_b)
        lay.linear2.weight.copy_(f2_w)
        lay.linear2.bias.copy_(f2_b)
        lay.norm1.weight.copy_(n1[0])
        lay.norm1.bias.copy_(n1[1])
        lay.norm2.weight.copy_(n2[0])
        lay.norm2.bias.copy_(n2[1])
    return lay


def torch_layers(arch, P, c, pre):
    layers = []
    if arch in ("bert", "roberta"):
        D, H, Fd, L, eps = (c["hidden_size"], c["num_attention_heads"], c["intermediate_size"],
                            c["num_hidden_layers"], c["layer_norm_eps"])
        for l in range(L):
            b = f"{pre}encoder.layer.{l}."
            g = lambda n: P[b + n]
            layers.append(torch_layer(
                D, H, Fd, eps, "gelu", False,
                torch.cat([g("attention.self.query.weight"), g("attention.self.key.weight"),
                           g("attention.self.value.weight")]),
                torch.cat([g("attention.self.query.bias"), g("attention.self.key.bias"),
                           g("attention.self.value.bias")]),
                g("attention.output.dense.weight"), g("attention.output.dense.bias"),
                g("intermediate.dense.weight"), g("intermediate.dense.bias"),
                g("output.dense.weight"), g("output.dense.bias"),
                (g("attention.output.LayerNorm.weight"), g("attention.output.LayerNorm.bias")),
                (g("output.LayerNorm.weight"), g("output.LayerNorm.bias"))))
    elif arch == "distilbert":
        D, H, Fd, L = c["dim"], c["n_heads"], c["hidden_dim"], c["n_layers"]
        for l in range(L):
            b = f"distilbert.transformer.layer.{l}."
            g = lambda n: P[b + n]
            layers.append(torch_layer(
                D, H, Fd, 1e-12, "gelu", False,
                torch.cat([g("attention.q_lin.weight"), g("attention.k_lin.weight"), g("attention.v_lin.weight")]),
                torch.cat([g("attention.q_lin.bias"), g("attention.k_lin.bias"), g("attention.v_lin.bias")]),
                g("attention.out_lin.weight"), g("attention.out_lin.bias"),
                g("ffn.lin1.weight"), g("ffn.lin1.bias"), g("ffn.lin2.weight"), g("ffn.lin2.bias"),
                (g("sa_layer_norm.weight"), g("sa_layer_norm.bias")),
                (g("output_layer_norm.weight"), g("output_layer_norm.bias"))))
    else:  # gpt2: pre-LN; Conv1D weights are (in, out) -> transpose to nn.Linear layout
        D, H, L, eps = c["n_embd"], c["n_head"], c["n_layer"], c["layer_norm_epsilon"]
        Fd = c["n_inner"] or 4 * D
        for l in range(L):
            b = f"transformer.h.{l}."
            g = lambda n: P[b + n]
            # nn.MultiheadAttention always divides by sqrt(Dh): fold the model's own factor
            # (scale_attn_weights, scale_attn_by_inverse_layer_idx) into the query projection
            f = (1.0 if c["scale_attn_weights"] else math.sqrt(D // H))
            f /= (l + 1) if c["scale_attn_by_inverse_layer_idx"] else 1
            qf = torch.cat([torch.full((D,), f), torch.ones(2 * D)])
            layers.append(torch_layer(
                D, H, Fd, eps, gelu_new, True,
                g("attn.c_attn.weight").t() * qf[:, None], g("attn.c_attn.bias") * qf,
                g("attn.c_proj.weight").t(), g("attn.c_proj.bias"),
                g("mlp.c_fc.weight").t(), g("mlp.c_fc.bias"),
                g("mlp.c_proj.weight").t(), g("mlp.c_proj.bias"),
                (g("ln_1.weight"), g("ln_1.bias")), (g("ln_2.weight"), g("ln_2.bias"))))
    return layers


def cross_check(arch, P, c, pre, ref, mask, label):
    """Recomputes every layer with nn.TransformerEncoderLayer and its attention
    probabilities with nn.MultiheadAttention (need_weights=True,
    average_attn_weights=False), starting from the reference's layer inputs.

    Masking differs in form, not in result: torch masks padded keys with -inf
    (key_padding_mask) and future keys with -inf (attn_mask), HF adds / fills
    finfo(float32).min. Both give probabilities of exactly 0 after softmax (every row
    keeps at least one allowed key), so probabilities and hidden states are compared
    everywhere, padded rows included. Pre-softmax scores are NOT cross-checked here
    because masked entries legitimately differ (-inf vs finfo.min); where allowed
    they are q.k/sqrt(Dh), checked implicitly through the probabilities.
    Runs with autograd enabled so TransformerEncoderLayer takes its plain Python
    path (the fused inference fast path is another kernel, not needed here)."""
    layers = torch_layers(arch, P, c, pre)
    T = mask.shape[0]
    kpm = (mask == 0)[None]  # (1, T) True = ignore
    causal = None
    if arch == "gpt2":
        causal = torch.triu(torch.ones((T, T), dtype=torch.bool), diagonal=1)  # True = not allowed
    worst_h, worst_a = 0.0, 0.0
    h = ref["_layer_in"][0]
    for l, lay in enumerate(layers):
        with torch.enable_grad():
            x_attn = lay.norm1(h) if arch == "gpt2" else h
            _, probs = lay.self_attn(x_attn, x_attn, x_attn, key_padding_mask=kpm, attn_mask=causal,
                                     need_weights=True, average_attn_weights=False)
            h = lay(h, src_mask=causal, src_key_padding_mask=kpm)
        probs, h = probs.detach(), h.detach()
        da = (probs[0] - ref["attentions"][l]).abs().max().item()
        if arch == "gpt2" and l == len(layers) - 1:
            want = ref["_last_block_out"][0]
            dh = (h[0] - want).abs().max().item()
            # and HF's last hidden_states entry is ln_f of that block output
            lnf = F.layer_norm(h[0], (c["n_embd"],), P["transformer.ln_f.weight"],
                               P["transformer.ln_f.bias"], c["layer_norm_epsilon"])
            dh = max(dh, (lnf - ref["hidden_states"][l + 1]).abs().max().item())
        else:
            dh = (h[0] - ref["hidden_states"][l + 1]).abs().max().item()
        worst_a, worst_h = max(worst_a, da), max(worst_h, dh)
        # continue from the reference's own input for the next layer so errors do not compound
        if l + 1 < len(layers):
            h = ref["_layer_in"][l + 1]
    assert worst_h <= XCHECK_HIDDEN_TOL, f"{label}: cross-check hidden max|diff| {worst_h:.3g}"
    assert worst_a <= XCHECK_ATTN_TOL, f"{label}: cross-check attention max|diff| {worst_a:.3g}"
    # the probabilities must be proper rows with zeros where masked
    assert (ref["attentions"].sum(-1) - 1).abs().max().item() < 1e-5
    if (mask == 0).any():
        assert ref["attentions"][..., mask == 0].abs().max().item() == 0.0
    return worst_h, worst_a


# ---------------------------------------------------------------- fixtures

def round_to(P, dtype):
    """Rounds every weight to the storage dtype and back to f32: the reference is
    computed from exactly the values the C engine will read."""
    if dtype == "F32":
        return P
    td = torch.float16 if dtype == "F16" else torch.bfloat16
    return {k: v.to(td).to(torch.float32) for k, v in P.items()}


def bert_config(V, D, H, L, Fd, C, pos=64, model_type="bert", arch="BertForSequenceClassification"):
    c = {
        "architectures": [arch],
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": D,
        "initializer_range": 0.02,
        "intermediate_size": Fd,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": pos,
        "model_type": model_type,
        "num_attention_heads": H,
        "num_hidden_layers": L,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
        "transformers_version": "4.38.2",
        "type_vocab_size": 2,
        "use_cache": True,
        "vocab_size": V,
    }
    if C:
        labels = ["negative", "neutral", "positive"][:C] if C <= 3 else [f"LABEL_{i}" for i in range(C)]
        c["id2label"] = {str(i): n for i, n in enumerate(labels)}
        c["label2id"] = {n: i for i, n in enumerate(labels)}
    return c


def inputs_wordpiece(g, V, cls=2, sep=3, pad=0, lo=5):
    """[CLS] a [SEP] / [CLS] a [SEP] b [SEP] (types 0..0 1..1) / right-padded."""
    r = lambda n: torch.randint(lo, V, (n,), generator=g)
    one = torch.tensor
    single = torch.cat([one([cls]), r(8), one([sep])])                      # T = 10
    pa, pb = r(6), r(5)
    pair = torch.cat([one([cls]), pa, one([sep]), pb, one([sep])])          # T = 14
    pair_tt = torch.cat([torch.zeros(8, dtype=torch.long), torch.ones(6, dtype=torch.long)])
    padded = torch.cat([one([cls]), r(7), one([sep]), one([pad] * 3)])      # T = 12, 3 pads
    return [
        ("single", single, torch.zeros_like(single), torch.ones_like(single)),
        ("pair", pair, pair_tt, torch.ones_like(pair)),
        ("padded", padded, torch.zeros_like(padded), (padded != pad).long()),
    ]


def inputs_roberta(g, V, bos=0, pad=1, eos=2, lo=4):
    """<s> a </s> / <s> a </s></s> b </s> (types all 0) / right-padded with <pad>=1."""
    r = lambda n: torch.randint(lo, V, (n,), generator=g)
    one = torch.tensor
    single = torch.cat([one([bos]), r(9), one([eos])])                              # T = 11
    pair = torch.cat([one([bos]), r(5), one([eos, eos]), r(4), one([eos])])         # T = 13
    padded = torch.cat([one([bos]), r(6), one([eos]), one([pad] * 4)])              # T = 12, 4 pads
    mask = torch.cat([torch.ones(8, dtype=torch.long), torch.zeros(4, dtype=torch.long)])
    z = torch.zeros_like
    return [
        ("single", single, z(single), torch.ones_like(single)),
        ("pair", pair, z(pair), torch.ones_like(pair)),
        ("padded", padded, z(padded), mask),
    ]


def inputs_gpt2(g, V, eos):
    """No special tokens: a / a + b (types 0) / right-padded with <|endoftext|> / "typed":
    token_type_ids passed to the model (any ids < V; GPT2Model adds wte[type id])."""
    r = lambda n: torch.randint(0, V - 1, (n,), generator=g)
    single = r(9)                                                        # T = 9
    pair = torch.cat([r(6), r(7)])                                       # T = 13
    padded = torch.cat([r(8), torch.tensor([eos] * 3)])                  # T = 11, 3 pads
    mask = torch.cat([torch.ones(8, dtype=torch.long), torch.zeros(3, dtype=torch.long)])
    typed = r(10)                                                        # T = 10
    typed_tt = torch.cat([torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.long), r(4)])
    z = torch.zeros_like
    return [
        ("single", single, z(single), torch.ones_like(single)),
        ("pair", pair, z(pair), torch.ones_like(pair)),
        ("padded", padded, z(padded), mask),
        ("typed", typed, typed_tt, torch.ones_like(typed)),
    ]


def make_bert(name, seed, dtype="F32", prefixed=True):
    init = Init(seed)
    V, D, H, L, Fd, C = 112, 32, 4, 2, 64, 3
    if prefixed:
        c = bert_config(V, D, H, L, Fd, C)
        pre = "bert."
        P = bert_params(init, c, pre, classifier=True, mlm=True, pooler=True, C=C)
        head = "classifier"
    else:
        c = bert_config(V, D, H, L, Fd, 0, arch="BertForMaskedLM")
        pre = ""
        P = bert_params(init, c, pre, classifier=False, mlm=True, pooler=False)
        head = "mlm"
    c["torch_dtype"] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
    P = round_to(P, dtype)
    g = torch.Generator().manual_seed(seed + 1)
    cases = []
    for case, ids, tt, mask in inputs_wordpiece(g, V):
        ref = bert_forward(P, c, pre, ids, tt, mask, head=head)
        cases.append((case, ids, tt, mask, ref))
    return dict(name=name, arch="bert", config=c, params=P, pre=pre, dtype=dtype, cases=cases,
                logits_head=head)


def make_electra(name, seed):
    """ELECTRA discriminator layout (model_type electra, prefix electra.): embedding width
    16 projected to hidden width 32 by embeddings_project; ElectraClassificationHead."""
    init = Init(seed)
    V, D, H, L, Fd, C = 112, 32, 4, 2, 64, 2
    c = bert_config(V, D, H, L, Fd, C, model_type="electra", arch="ElectraForSequenceClassification")
    c["embedding_size"] = 16
    pre = "electra."
    P = bert_params(init, c, pre, classifier=True, mlm=False, pooler=False, roberta_head=True, C=C)
    g = torch.Generator().manual_seed(seed + 1)
    cases = []
    for case, ids, tt, mask in inputs_wordpiece(g, V):
        ref = bert_forward(P, c, pre, ids, tt, mask, head="classifier", electra=True)
        cases.append((case, ids, tt, mask, ref))
    return dict(name=name, arch="bert", config=c, params=P, pre=pre, dtype="F32", cases=cases,
                logits_head="classifier")


def make_roberta(name, seed):
    init = Init(seed)
    V, D, H, L, Fd, C, maxlen = 120, 32, 4, 2, 64, 2, 64
    c = bert_config(V, D, H, L, Fd, C, pos=maxlen + 2, model_type="roberta",
                    arch="RobertaForSequenceClassification")
    c.update({"bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1, "layer_norm_eps": 1e-5,
              "type_vocab_size": 1})
    c["id2label"] = {"0": "NEGATIVE", "1": "POSITIVE"}
    c["label2id"] = {"NEGATIVE": 0, "POSITIVE": 1}
    P = bert_params(init, c, "roberta.", classifier=True, mlm=False, pooler=False, roberta_head=True, C=C)
    g = torch.Generator().manual_seed(seed + 1)
    cases = []
    for case, ids, tt, mask in inputs_roberta(g, V):
        ref = bert_forward(P, c, "roberta.", ids, tt, mask, roberta=True)
        cases.append((case, ids, tt, mask, ref))
    return dict(name=name, arch="roberta", config=c, params=P, pre="roberta.", dtype="F32",
                cases=cases, logits_head="classifier")


def make_distilbert(name, seed):
    init = Init(seed)
    V, D, H, L, Fd = 112, 32, 4, 2, 64
    c = {
        "activation": "gelu",
        "architectures": ["DistilBertForSequenceClassification"],
        "attention_dropout": 0.1,
        "dim": D,
        "dropout": 0.1,
        "hidden_dim": Fd,
        "id2label": {"0": "NEGATIVE", "1": "POSITIVE"},
        "initializer_range": 0.02,
        "label2id": {"NEGATIVE": 0, "POSITIVE": 1},
        "max_position_embeddings": 64,
        "model_type": "distilbert",
        "n_heads": H,
        "n_layers": L,
        "pad_token_id": 0,
        "qa_dropout": 0.1,
        "seq_classif_dropout": 0.2,
        "sinusoidal_pos_embds": False,
        "tie_weights_": True,
        "torch_dtype": "float32",
        "transformers_version": "4.38.2",
        "vocab_size": V,
    }
    c["num_labels"] = 2
    P = distilbert_params(init, c)
    del c["num_labels"]  # HF derives it from id2label; not written to config.json
    g = torch.Generator().manual_seed(seed + 1)
    cases = []
    for case, ids, tt, mask in inputs_wordpiece(g, V):
        tt = torch.zeros_like(ids)  # DistilBERT has no segment embeddings
        ref = distilbert_forward(P, c, ids, mask)
        cases.append((case, ids, tt, mask, ref))
    return dict(name=name, arch="distilbert", config=c, params=P, pre="distilbert.", dtype="F32",
                cases=cases, logits_head="classifier")


def make_gpt2(name, seed, dtype="F32", scale_weights=True, inverse_layer=False):
    init = Init(seed)
    V, D, H, L = 116, 32, 4, 3
    c = {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": V - 1,
        "embd_pdrop": 0.1,
        "eos_token_id": V - 1,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": 64,
        "n_embd": D,
        "n_head": H,
        "n_inner": None,
        "n_layer": L,
        "n_positions": 64,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": inverse_layer,
        "scale_attn_weights": scale_weights,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
        "transformers_version": "4.38.2",
        "use_cache": True,
        "vocab_size": V,
    }
    P = round_to(gpt2_params(init, c), dtype)
    g = torch.Generator().manual_seed(seed + 1)
    cases = []
    for case, ids, tt, mask in inputs_gpt2(g, V, eos=V - 1):
        ref = gpt2_forward(P, c, ids, mask, tt if case == "typed" else None)
        cases.append((case, ids, tt, mask, ref))
    return dict(name=name, arch="gpt2", config=c, params=P, pre="transformer.", dtype=dtype,
                cases=cases, logits_head="lm")


EXPECTED_KEYS = ("attentions", "attention_scores", "queries", "keys", "values", "hidden_states",
                 "logits")


def fixture_generator(d):
    """The generator named in a fixture folder's expected.safetensors metadata, or None."""
    p = os.path.join(d, "expected.safetensors")
    if not os.path.exists(p):
        return None
    with open(p, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)).get("__metadata__", {}).get("generator")


def write_fixture(fx):
    d = os.path.join(OUT_DIR, fx["name"])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(fx["config"], f, indent=2, sort_keys=True)
        f.write("\n")
    names = sorted(fx["params"])
    st_write(os.path.join(d, "model.safetensors"),
             [(n, fx["params"][n], fx["dtype"]) for n in names],
             {"format": "pt"})
    # round trip: the stored weights are exactly the ones the reference used
    back = st_read(os.path.join(d, "model.safetensors"))
    for n in names:
        assert torch.equal(back[n], fx["params"][n]), n
    tensors = []
    for case, ids, tt, mask, ref in fx["cases"]:
        tensors += [(f"{case}.input_ids", ids, "I32"), (f"{case}.token_type_ids", tt, "I32"),
                    (f"{case}.attention_mask", mask, "I32")]
        tensors += [(f"{case}.{k}", ref[k], "F32") for k in EXPECTED_KEYS]
    c = fx["config"]
    L = c.get("num_hidden_layers", c.get("n_layers", c.get("n_layer")))
    meta = {"arch": fx["arch"], "dtype": fx["dtype"], "logits_head": fx["logits_head"],
            "cases": ",".join(cc[0] for cc in fx["cases"]), "n_layer": L,
            "generator": "tests/ref/gen_models.py"}
    st_write(os.path.join(d, "expected.safetensors"), tensors, meta)


def main():
    fixtures = [
        make_bert("bert", 1001),
        make_bert("bert_noprefix_mlm", 1002, prefixed=False),
        make_roberta("roberta", 1003),
        make_distilbert("distilbert", 1004),
        make_gpt2("gpt2", 1005),
        make_bert("bert_f16", 1001, dtype="F16"),
        make_bert("bert_bf16", 1001, dtype="BF16"),
        make_gpt2("gpt2_f16", 1005, dtype="F16"),
        make_electra("electra", 1006),
        # both GPT-2 attention-scaling options (Mistral's GPT-2 runs set the second)
        make_gpt2("gpt2_scaling", 1007, scale_weights=False, inverse_layer=True),
    ]
    if os.path.isdir(OUT_DIR):
        # only the folders this script wrote (gen_llama.py writes others here)
        for entry in os.listdir(OUT_DIR):
            p = os.path.join(OUT_DIR, entry)
            if os.path.isdir(p) and fixture_generator(p) in (None, "tests/ref/gen_models.py"):
                shutil.rmtree(p)
    os.makedirs(OUT_DIR, exist_ok=True)
    for fx in fixtures:
        for case, ids, tt, mask, ref in fx["cases"]:
            label = f"{fx['name']}/{case}"
            dh, da = cross_check(fx["arch"], fx["params"], fx["config"], fx["pre"], ref, mask, label)
            a = ref["attentions"]
            print(f"{label:28s} T={ids.shape[0]:2d} cross-check hidden {dh:.2e} attn {da:.2e}  "
                  f"max attn prob {a.max().item():.3f}  mean row max {a.max(-1).values.mean().item():.3f}")
        write_fixture(fx)
    total = 0
    for root, _, files in os.walk(OUT_DIR):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    print(f"wrote {len(fixtures)} fixtures to {OUT_DIR}, {total} bytes")


if __name__ == "__main__":
    main()
