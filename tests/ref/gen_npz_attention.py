"""gen_npz_attention.py — the .npz files of tests/ref/fixtures/npz_attention: attention
computed outside attnscope, as `attnscope serve --attention FILE.npz` reads it
(include/attnscope/attn_npz.h), and files it must refuse.

  run_like.npz      the layout of `attnscope run --format npz` (savez_compressed): q and k
                    of 2 layers x 3 heads at 6 tokens, scores = q k^T / sqrt(4),
                    attention = softmax(scores) by PyTorch; tokens, token_text,
                    input_ids, token_type_ids, layers, heads, kv_group, score_scale
  bertviz_f16.npz   bertviz-style arrays (savez): attention float16 [2, 1, 2, 5, 5], causal,
                    tokens as a unicode array with a non-ASCII token, sentence_b_start 3;
                    expected_f32 holds the float16 weights as float32 (what the server sends)
  bad_*.npz         one defect each (the tests check the message names it): negative and
                    NaN weights, token count, no tokens, 3-D or integer attention, a
                    queries shape, object (pickled) tokens, no attention, 300 layers, a
                    kv_group out of range, layers of the wrong length, sentence_b_start past T, a lone surrogate in a
                    token, NaN scores; and a file that is not a ZIP archive

Run with Debian's Python (python3-torch, python3-numpy):
    /usr/bin/python3 tests/ref/gen_npz_attention.py
"""
import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "npz_attention")


def run_like():
    g = torch.Generator().manual_seed(18)
    L, H, T, Dh = 2, 3, 6, 4
    q = torch.randn(L, H, T, Dh, generator=g)
    k = torch.randn(L, H, T, Dh, generator=g)
    scores = q @ k.transpose(-1, -2) / Dh ** 0.5
    att = torch.softmax(scores, dim=-1)
    tokens = np.array(["[CLS]", "the", "cat", "sat", "##s", "[SEP]"])
    return dict(attentions=att.numpy(), tokens=tokens, token_text=np.array(["[CLS]", "the", "cat", "sat", "s", "[SEP]"]),
                input_ids=np.array([101, 1996, 4937, 2938, 2015, 102], dtype=np.int32),
                token_type_ids=np.zeros(T, dtype=np.int32), layers=np.arange(L, dtype=np.int32),
                heads=np.arange(H, dtype=np.int32), kv_group=np.arange(H, dtype=np.int32),
                queries=q.numpy(), keys=k.numpy(), attention_scores=scores.numpy(),
                score_scale=np.full(L, Dh ** -0.5, dtype=np.float32))


def bertviz_f16():
    g = torch.Generator().manual_seed(7)
    L, H, T = 2, 2, 5
    s = torch.randn(L, 1, H, T, T, generator=g)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    att = torch.softmax(s, dim=-1).to(torch.float16)
    return dict(attention=att.numpy(), tokens=np.array(["<s>", "Ġcafé", "Ġau", "Ġlait", "</s>"]),
                sentence_b_start=np.int64(3), expected_f32=att.float().numpy()[:, 0])


def main():
    os.makedirs(OUT, exist_ok=True)
    good = run_like()
    np.savez_compressed(os.path.join(OUT, "run_like.npz"), **good)
    np.savez(os.path.join(OUT, "bertviz_f16.npz"), **bertviz_f16())
    base = dict(attentions=good["attentions"], tokens=good["tokens"])
    neg = good["attentions"].copy()
    neg[1, 2, 3, 4] = -0.25
    nan = good["attentions"].copy()
    nan[0, 1, 2, 0] = np.nan
    bad = {
        "bad_negative": dict(base, attentions=neg),
        "bad_nan": dict(base, attentions=nan),
        "bad_tokens_count": dict(base, tokens=good["tokens"][:5]),
        "bad_no_tokens": dict(attentions=good["attentions"]),
        "bad_shape": dict(base, attentions=good["attentions"][0]),
        "bad_int_weights": dict(base, attentions=(good["attentions"] * 100).astype(np.int32)),
        "bad_queries_shape": dict(base, queries=good["queries"][:, :, :5]),
        "bad_object_tokens": dict(base, tokens=np.array(["a", 1, None, "b", "c", "d"], dtype=object)),
        "bad_no_attention": dict(tokens=good["tokens"]),
        "bad_too_many_layers": dict(attentions=np.ones((300, 1, 1, 1), dtype=np.float32), tokens=np.array(["a"])),
        "bad_kv_group": dict(base, kv_group=np.array([0, 1, 3], dtype=np.int64)),
        "bad_sentence_b": dict(attention=good["attentions"], tokens=good["tokens"], sentence_b_start=np.int64(99)),
        "bad_surrogate": dict(base, tokens=np.array(["a", "b", "\ud800", "c", "d", "e"])),
        "bad_layers": dict(base, layers=np.arange(3, dtype=np.int32)),
        "bad_scores_nan": dict(base, queries=good["queries"], keys=good["keys"],
                               attention_scores=np.full_like(good["attention_scores"], np.nan)),
    }
    for name, arrays in bad.items():
        np.savez(os.path.join(OUT, name + ".npz"), **arrays)
    with open(os.path.join(OUT, "bad_not_npz.npz"), "w") as f:
        f.write("not a zip archive\n")


if __name__ == "__main__":
    main()
