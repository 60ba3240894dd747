#!/usr/bin/python3
"""gen_marian_spm.py — fixture for Marian's SentencePiece tokenization (MarianTokenizer).

What it does: trains two small Unigram SentencePiece models with Debian's `spm_train`
(package sentencepiece; add_dummy_prefix, remove extra whitespace; the source with the
nmt_nfkc normalizer, the target with identity, no charsmap) on synthetic corpora written here (an English-like source; a German-like target
with umlauts, ß and a few CJK characters the source never sees), builds vocab.json as Marian
folders ship it (one piece -> id map for both sides: "</s>" 0, "<unk>" 1, the source pieces,
then the target pieces not already in it, "<pad>" last; every 23rd source piece is left out
so it maps to <unk>), and writes the expected ids of a few hundred varied lines (Unicode
normalization, digits, whitespace runs, tabs, CJK, emoji, accents) for both sides, computed
as transformers' MarianTokenizer does with Debian's python3-sentencepiece:
    ids = [vocab.get(p, vocab["<unk>"]) for p in spm.encode(text, out_type=str)] + [vocab["</s>"]]
(an unknown character's piece is its surface text, which may still be in vocab.json through
the other side's pieces). Writes tests/ref/fixtures/marian_spm/{source.spm, target.spm,
vocab.json, expected.json}.

What it does not: use transformers (not installed here); lines with ">>xx<<" language codes
or with the special tokens' text ("</s>", "<unk>", "<pad>"), which MarianTokenizer handles
before SentencePiece, are left out of the lines.

Run (deterministic; rewrites the folder):
    /usr/bin/python3 tests/ref/gen_marian_spm.py
"""
import json
import os
import random
import shutil
import subprocess
import tempfile

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "marian_spm")

EN = ("the a of and to in is was it for on with as his that he at by from this had not are but be they "
      "house garden river morning evening window table letter friend mother father sister brother king "
      "queen city country water light night day year time people world life hand eye word work school "
      "small large old young happy quiet bright dark early late quickly slowly never always often "
      "walked talked wrote read opened closed found lost gave took made came went saw heard knew thought "
      "café naïve résumé coöperate façade").split()
DE = ("der die das und zu in ist war es für auf mit als sein dass er bei von dies hatte nicht sind aber "
      "Haus Garten Fluss Morgen Abend Fenster Tisch Brief Freund Mutter Vater Schwester Bruder König "
      "Königin Stadt Land Wasser Licht Nacht Tag Jahr Zeit Leute Welt Leben Hand Auge Wort Arbeit Schule "
      "klein groß alt jung glücklich ruhig hell dunkel früh spät schnell langsam nie immer oft über "
      "ging sprach schrieb las öffnete schloss fand verlor gab nahm machte kam sah hörte wusste dachte "
      "Straße Fuß weiß heißen Grüße Übung Ärger Öl 東京 日本 学校 水 山 川").split()
PUNCT = [".", ",", "!", "?", ";", ":", "-", "(", ")", "\"", "'"]


def corpus(words, rng, n):
    lines = []
    for _ in range(n):
        k = rng.randint(3, 14)
        ws = [rng.choice(words) for _ in range(k)]
        if rng.random() < 0.3:
            ws.insert(rng.randint(0, k), str(rng.randint(0, 99999)))
        if rng.random() < 0.2:
            ws[0] = ws[0].capitalize()
        s = " ".join(ws)
        if rng.random() < 0.3:
            i = rng.randint(1, len(s))
            s = s[:i] + rng.choice(PUNCT) + s[i:]
        lines.append(s + rng.choice([".", "!", "?", ""]))
    return lines


def train(lines, prefix, vocab, rule):
    with tempfile.TemporaryDirectory() as d:
        txt = os.path.join(d, "corpus.txt")
        with open(txt, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        # relative paths: the model records its trainer's options, so the file is the same on every run
        subprocess.run(["spm_train", "--input=corpus.txt", "--model_prefix=m",
                        f"--vocab_size={vocab}", "--model_type=unigram", "--character_coverage=1.0",
                        f"--normalization_rule_name={rule}", "--num_threads=1", "--seed_sentencepiece_size=100000",
                        "--shuffle_input_sentence=false",
                        "--minloglevel=2"], check=True, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.copy(os.path.join(d, "m.model"), prefix)


def test_lines(rng):
    fixed = [
        "Hello world", "the old house", "  leading spaces", "trailing spaces   ", "\tTabs\tbetween\twords\t",
        "many     spaces     inside", "a\u3000ideographic\u3000space", "non\u00a0breaking\u00a0space",
        "digits 0123456789 and 3.14159", "１２３ fullwidth ＡＢＣ", "ﬁne ﬂow ligatures", "① ② ③ circled",
        "Straße und Fuß", "Übung macht den Meister", "東京 und 日本", "学校の先生", "emoji 😀 and 🎉🎉",
        "👍🏽 skin tone", "ÀÉÎÕÜ accents", "café naïve résumé", "e\u0301 combining accent", "Ω ≈ ∑ math",
        "ΑΒΓ Greek", "Привет мир", "مرحبا", "שלום", "x" * 60, "a", ".", "!?!?", "   ", "mixed\nnewline",
        "zero\u200bwidth", "soft\u00adhyphen", "ＨＥＬＬＯ　ＷＯＲＬＤ", "Ⅷ roman", "ｶﾀｶﾅ halfwidth",
        "don't can't won't", "e-mail@example.com", "http://x.y/z?q=1&r=2", "$100 €50 £20 ¥1000",
        "1,000,000.00", "(parentheses) [brackets] {braces}", "quotes \"double\" 'single' «guillemets»",
    ]
    alphabet = EN + DE + ["😀", "🎉", "東", "京", "ß", "Ä", "ｱ", "①", "ﬁ", "\u3000", "\u00a0", "\t", "  ", "123",
                          "4.5", "Ωmega", "ñ", "ç", "ø", "å", "—", "…", "“", "”"]
    out = list(fixed)
    while len(out) < 300:
        k = rng.randint(1, 12)
        parts = [rng.choice(alphabet) for _ in range(k)]
        seps = [rng.choice([" ", " ", " ", "", "  ", "\t", ", "]) for _ in range(k)]
        s = "".join(p + q for p, q in zip(parts, seps))
        if rng.random() < 0.2:
            s = " " + s
        if s.strip(" \t\u3000\u00a0") or rng.random() < 0.05:
            out.append(s)
    return [s for s in out if s and ">>" not in s and "</s>" not in s and "<unk>" not in s and "<pad>" not in s]


def main():
    rng = random.Random(20261202)
    os.makedirs(OUT, exist_ok=True)
    src_spm, tgt_spm = os.path.join(OUT, "source.spm"), os.path.join(OUT, "target.spm")
    train(corpus(EN, rng, 3000), src_spm, 300, "nmt_nfkc")
    train(corpus(DE, rng, 3000), tgt_spm, 360, "identity")
    sp_s, sp_t = spm.SentencePieceProcessor(model_file=src_spm), spm.SentencePieceProcessor(model_file=tgt_spm)
    vocab = {"</s>": 0, "<unk>": 1}
    specials = {"<unk>", "<s>", "</s>"}
    for i in range(sp_s.get_piece_size()):
        p = sp_s.id_to_piece(i)
        if p not in specials and p not in vocab and i % 23 != 0:
            vocab[p] = len(vocab)
    for i in range(sp_t.get_piece_size()):
        p = sp_t.id_to_piece(i)
        if p not in specials and p not in vocab:
            vocab[p] = len(vocab)
    vocab["<pad>"] = len(vocab)
    with open(os.path.join(OUT, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=1)
        f.write("\n")
    unk, eos = vocab["<unk>"], vocab["</s>"]
    lines = test_lines(rng)
    exp = {"generator": "tests/ref/gen_marian_spm.py", "lines": lines, "source": [], "target": []}
    n_unk = n_surface = 0
    for s in lines:
        for side, sp in (("source", sp_s), ("target", sp_t)):
            pieces = sp.encode(s, out_type=str)
            ids = [vocab.get(p, unk) for p in pieces] + [eos]
            exp[side].append(ids)
            n_unk += sum(i == unk for i in ids)
            n_surface += sum(sp.piece_to_id(p) == sp.unk_id() and p in vocab for p in pieces)
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(exp, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{len(lines)} lines, vocab.json {len(vocab)} pieces, {n_unk} <unk> ids, "
          f"{n_surface} unknown pieces found in vocab.json by their surface")


if __name__ == "__main__":
    main()
