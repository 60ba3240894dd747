"""gen_npz.py — fixtures for the .npz reader (src/io/npz_read.c) and for
`attnscope import --attention FILE --tokens FILE ...` (src/analysis/import.c).

Writes, with Debian's /usr/bin/python3 NumPy (deterministic):
  tests/ref/fixtures/npz/stored.npz    numpy.savez: 'attentions' (1,2,3,4) = arange(24)/8 - 1,
                                       and 'other' (3,) = [1, 2, 3]          (STORED entries)
  tests/ref/fixtures/npz/deflated.npz  numpy.savez_compressed: 'attentions' (2,3,40,40) =
                                       ((arange(9600) * 37) % 101) / 64     (DEFLATED entry)
  tests/ref/fixtures/npz/single.npz    numpy.savez(array): one array, named 'arr_0'
  tests/ref/fixtures/npz/f64.npz       'attentions' as float64 (must be rejected)
  tests/ref/fixtures/import_files/NNNN.*  the sentences of tests/ref/fixtures/analysis/import
      (written by gen_analysis.py) re-exported the way a PyTorch user would: NNNN.npz
      (even: savez with a second array; odd: savez_compressed), NNNN.tokens.json (tokens,
      special_tokens_mask, text, words, word_ids, label, prediction), NNNN.saliency.json
      (one row of T numbers per class) and the parse as NNNN.conllu (even) or NNNN.deps.json
      (odd). tests/cli/test_import.sh checks that importing these gives exactly the scores of
      `import --dir` on the original folder.
Run: /usr/bin/python3 tests/ref/gen_npz.py
"""
import glob, json, os
import numpy as np

ROOT = os.path.dirname(os.path.abspath(__file__))
NPZ = os.path.join(ROOT, "fixtures", "npz")
IMF = os.path.join(ROOT, "fixtures", "import_files")
SRC = os.path.join(ROOT, "fixtures", "analysis", "import")


def npz_fixtures():
    os.makedirs(NPZ, exist_ok=True)
    a = (np.arange(24, dtype=np.float32) / 8 - 1).reshape(1, 2, 3, 4)
    np.savez(os.path.join(NPZ, "stored.npz"), attentions=a, other=np.array([1, 2, 3], np.float32))
    b = (((np.arange(9600) * 37) % 101) / 64).astype(np.float32).reshape(2, 3, 40, 40)
    np.savez_compressed(os.path.join(NPZ, "deflated.npz"), attentions=b)
    np.savez(os.path.join(NPZ, "single.npz"), np.full((2, 2), 0.5, np.float32))
    np.savez(os.path.join(NPZ, "f64.npz"), attentions=a.astype(np.float64))


def word_ids(tokens, words):
    """Token -> word index by spelling the words out (## pieces continue a word)."""
    out, w, c = [], 0, 0
    for t in tokens:
        if t in ("[CLS]", "[SEP]"):
            out.append(None)
            continue
        p = t[2:] if t.startswith("##") else t
        while c == len(words[w]):
            w, c = w + 1, 0
        out.append(w)
        assert words[w][c:c + len(p)] == p, (tokens, words)
        c += len(p)
    return out


def import_fixtures():
    os.makedirs(IMF, exist_ok=True)
    for old in glob.glob(os.path.join(IMF, "*")):
        os.remove(old)
    for k, jp in enumerate(sorted(glob.glob(os.path.join(SRC, "*.json")))):
        name = os.path.basename(jp)[:-5]
        d = json.load(open(jp))
        A = np.load(os.path.join(SRC, name + ".attention.npy"))
        tokens = d["tokens"]
        words = d["dependencies"]["words"]
        if k % 2 == 0:
            np.savez(os.path.join(IMF, name + ".npz"), attentions=A, hidden=np.zeros(4, np.float32))
        else:
            np.savez_compressed(os.path.join(IMF, name + ".npz"), attentions=A)
        tok = {"tokens": tokens, "special_tokens_mask": [int(t in ("[CLS]", "[SEP]")) for t in tokens],
               "text": d["sentence"], "words": words, "word_ids": word_ids(tokens, words),
               "label": d["label"], "prediction": d["predicted_label"]}
        json.dump(tok, open(os.path.join(IMF, name + ".tokens.json"), "w"))
        classes = [c for c in d["saliency"][0] if c != "token"]
        sal = [[s[c] for s in d["saliency"]] for c in classes]
        json.dump({"saliency": sal}, open(os.path.join(IMF, name + ".saliency.json"), "w"))
        deps = d["dependencies"]
        if k % 2 == 0:
            head = {e["child"]: e["parent"] for e in deps["list"]}
            rel = {e["child"]: e["relation"] for e in deps["list"]}
            with open(os.path.join(IMF, name + ".conllu"), "w") as f:
                f.write("# text = %s\n" % " ".join(words))
                for w, form in enumerate(words):
                    h = 0 if head[w] is None else head[w] + 1
                    f.write("%d\t%s\t%s\tX\tX\t_\t%d\t%s\t_\t_\n" % (w + 1, form, form, h, rel[w]))
                f.write("\n")
        else:
            json.dump(deps, open(os.path.join(IMF, name + ".deps.json"), "w"))


if __name__ == "__main__":
    npz_fixtures()
    import_fixtures()
