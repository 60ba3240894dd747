#!/usr/bin/env python3
"""unigram_tokenizers.py — the SentencePiece Unigram tokenizer.json files the Unigram tests
use, written the way transformers' convert_slow_tokenizer.py converts T5, XLM-R and ALBERT
SentencePiece models (vocab [[piece, score]], unk_id, the model's precompiled_charsmap in a
Precompiled normalizer, Metaspace, TemplateProcessing).

  --from-model M.model OUT.json   (dev only) converts a SentencePiece model file, as
      `spm_train --model_type=unigram` (Debian package sentencepiece) writes it, into the
      committed T5-style base file tests/ref/fixtures/unigram/tokenizer.json. The committed
      model was trained once (on this repository's docs and README of the day plus a few
      hundred multilingual lines; not meant to be regenerated) with
        spm_train --input=corpus.txt --model_prefix=ug --vocab_size=3000
          --model_type=unigram --character_coverage=0.9995 --pad_id=0 --eos_id=1
          --unk_id=2 --bos_id=-1 --byte_fallback=true --num_threads=1
      so its charsmap is SentencePiece 0.1.97's table for nmt_nfkc, the rule T5, XLM-R and
      ALBERT were trained with (older SentencePiece versions' tables may differ in details)
  --variants BASE.json DIR        writes DIR/NAME/tokenizer.json for every variant below
      (tests/unit/test_unigram.c and gen_unigram_fixtures.mjs both call this)

Variants (name: what it exercises):
  t5          Sequence[Precompiled, Replace(Regex " {2,}", " ")], Sequence[WhitespaceSplit,
              Metaspace(always)], "$A </s>", <extra_id_N> added tokens (the base as is)
  xlmr        fairseq ids (<s> <pad> </s> <unk> first, <mask> last with lstrip), Metaspace
              (always, split), "<s> $A </s>" / "<s> $A </s> </s> $B </s>"
  albert      Replace ``/'' -> ", NFKD, StripAccents, Lowercase, Precompiled, Replace(Regex),
              Metaspace, [CLS] $A [SEP] with type ids
  new_spm     transformers >= 4.4x SpmConverter: Precompiled, Strip(right), Replace(Regex
              " {2,}", "▁"), Metaspace(first, split)
  byte_fallback  t5 with byte_fallback true (unknown characters as <0xNN> pieces)
  nfkc_lower  Sequence[NFKC, Lowercase], WhitespaceSplit only, no unk fusing surprises
  spiece, spiece_first  a T5 folder without tokenizer.json: spiece.model (the committed
              fixtures/unigram/spiece.model, the model the base was converted from) and
              tokenizer_config.json (T5Tokenizer, 10 extra ids; legacy false for _first);
              beside each, NAME_json/tokenizer.json is what transformers' T5 converter
              (SpmConverter: Precompiled, Strip(right), Replace(Regex " {2,}", "▁"),
              Metaspace always / first) writes for it: the reference the engine's reading
              of spiece.model is compared with
It does not test anything itself.
"""
import base64
import copy
import json
import os
import struct
import sys


def _varint(b, i):
    x = s = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return x, i


def _fields(b):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = _varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f'wire type {w}')
        yield f, w, v


def read_model(path):
    """pieces [(piece, score, type)], precompiled_charsmap bytes, unk id of a ModelProto."""
    pieces, charsmap, unk = [], b'', 0
    for f, _, v in _fields(open(path, 'rb').read()):
        if f == 1:  # SentencePiece
            p, sc, ty = '', 0.0, 1
            for g, _, x in _fields(v):
                if g == 1:
                    p = x.decode('utf-8')
                elif g == 2:
                    sc = struct.unpack('<f', x)[0]
                elif g == 3:
                    ty = x
            pieces.append((p, sc, ty))
        elif f == 3:  # NormalizerSpec
            for g, _, x in _fields(v):
                if g == 2:
                    charsmap = x
    unk = next(i for i, (_, _, ty) in enumerate(pieces) if ty == 2)
    return pieces, charsmap, unk


def added(id_, content, lstrip=False):
    return {'id': id_, 'content': content, 'single_word': False, 'lstrip': lstrip, 'rstrip': False,
            'normalized': False, 'special': True}


def metaspace(scheme='always', split=True):
    return {'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': scheme, 'split': split}


def template(single, pair, specials):
    def items(spec):
        out = []
        for s in spec.split():
            name, _, ty = s.partition(':')
            ty = int(ty or 0)
            key = 'Sequence' if name in ('$A', '$B') else 'SpecialToken'
            out.append({key: {'id': name[1:] if key == 'Sequence' else name, 'type_id': ty}})
        return out
    return {'type': 'TemplateProcessing', 'single': items(single), 'pair': items(pair),
            'special_tokens': {k: {'id': k, 'ids': [v], 'tokens': [k]} for k, v in specials.items()}}


def from_model(path, out):
    """The T5Converter's tokenizer.json for a SentencePiece Unigram model."""
    pieces, charsmap, unk = read_model(path)
    vocab = [[p, float(sc)] for p, sc, _ in pieces]
    n_extra = 10
    vocab += [[f'<extra_id_{i}>', 0.0] for i in range(n_extra - 1, -1, -1)]
    toks = [added(i, p) for i, (p, _, ty) in enumerate(pieces) if ty in (2, 3)]
    toks += [added(len(pieces) + k, vocab[len(pieces) + k][0]) for k in range(n_extra)]
    eos = next(i for i, (p, _, _) in enumerate(pieces) if p == '</s>')
    j = {
        'version': '1.0', 'truncation': None, 'padding': None, 'added_tokens': toks,
        'normalizer': {'type': 'Sequence', 'normalizers': [
            {'type': 'Precompiled', 'precompiled_charsmap': base64.b64encode(charsmap).decode()},
            {'type': 'Replace', 'pattern': {'Regex': ' {2,}'}, 'content': ' '}]},
        'pre_tokenizer': {'type': 'Sequence', 'pretokenizers': [{'type': 'WhitespaceSplit'}, metaspace()]},
        'post_processor': template('$A:0 </s>:0', '$A:0 </s>:0 $B:0 </s>:0', {'</s>': eos}),
        'decoder': metaspace(),
        'model': {'type': 'Unigram', 'unk_id': unk, 'vocab': vocab, 'byte_fallback': False},
    }
    write(j, out)


def t5_fast(path, n_extra, legacy):
    """What transformers' T5Converter writes for a SentencePiece Unigram model."""
    pieces, charsmap, unk = read_model(path)
    vocab = [[p, float(sc)] for p, sc, _ in pieces]
    vocab += [[f'<extra_id_{i}>', 0.0] for i in range(n_extra - 1, -1, -1)]
    toks = [dict(added(i, p), special=ty != 4) for i, (p, _, ty) in enumerate(pieces) if ty in (2, 3, 4)]
    toks += [added(len(pieces) + k, vocab[len(pieces) + k][0]) for k in range(n_extra)]
    eos = next(i for i, (p, _, _) in enumerate(pieces) if p == '</s>')
    steps = [{'type': 'Precompiled', 'precompiled_charsmap': base64.b64encode(charsmap).decode()}] if charsmap else []
    steps += [{'type': 'Strip', 'strip_left': False, 'strip_right': True},
              {'type': 'Replace', 'pattern': {'Regex': ' {2,}'}, 'content': '\u2581'}]
    scheme = 'always' if legacy else 'first'
    return {
        'version': '1.0', 'truncation': None, 'padding': None, 'added_tokens': toks,
        'normalizer': {'type': 'Sequence', 'normalizers': steps},
        'pre_tokenizer': metaspace(scheme), 'decoder': metaspace(scheme),
        'post_processor': template('$A:0 </s>:0', '$A:0 </s>:0 $B:0 </s>:0', {'</s>': eos}),
        'model': {'type': 'Unigram', 'unk_id': unk, 'vocab': vocab, 'byte_fallback': False},
    }


def write_spiece(model, out):
    """DIR/spiece{,_first}/ (spiece.model + tokenizer_config.json) and their _json twins."""
    for name, legacy in (('spiece', True), ('spiece_first', False)):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(model, 'rb') as f, open(os.path.join(d, 'spiece.model'), 'wb') as g:
            g.write(f.read())
        with open(os.path.join(d, 'tokenizer_config.json'), 'w') as f:
            json.dump({'tokenizer_class': 'T5Tokenizer', 'extra_ids': 10, 'legacy': legacy}, f)
        write(t5_fast(model, 10, legacy), os.path.join(out, name + '_json', 'tokenizer.json'))


def write(j, out):
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, 'w', encoding='utf-8') as f:
        json.dump(j, f, ensure_ascii=False, separators=(',', ':'))
        f.write('\n')


def _remap(base, head, tail, skip):
    """base's vocab with its first `skip` pieces replaced by `head` and `tail` appended."""
    pieces = base['model']['vocab'][skip:]
    pieces = [p for p in pieces if not p[0].startswith('<extra_id_')]
    return [[p, 0.0] for p in head] + pieces + [[p, 0.0] for p in tail]


def variants(base):
    out = {'t5': base}
    regex = {'type': 'Replace', 'pattern': {'Regex': ' {2,}'}, 'content': ' '}
    pre = base['normalizer']['normalizers'][0]

    x = copy.deepcopy(base)  # XLMRobertaConverter
    x['model']['vocab'] = _remap(base, ['<s>', '<pad>', '</s>', '<unk>'], ['<mask>'], 3)
    n = len(x['model']['vocab'])
    x['model']['unk_id'] = 3
    x['added_tokens'] = [added(i, p) for i, p in enumerate(['<s>', '<pad>', '</s>', '<unk>'])] + [added(n - 1, '<mask>', True)]
    x['normalizer'] = {'type': 'Sequence', 'normalizers': [pre, regex]}
    x['pre_tokenizer'] = metaspace()
    x['post_processor'] = template('<s>:0 $A:0 </s>:0', '<s>:0 $A:0 </s>:0 </s>:0 $B:0 </s>:0', {'<s>': 0, '</s>': 2})
    out['xlmr'] = x

    a = copy.deepcopy(base)  # AlbertConverter (keep_accents False, do_lower_case True)
    a['model']['vocab'] = _remap(base, ['<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]'], [], 3)
    a['model']['unk_id'] = 1
    a['added_tokens'] = [added(i, p) for i, p in enumerate(['<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]'])]
    a['normalizer'] = {'type': 'Sequence', 'normalizers': [
        {'type': 'Replace', 'pattern': {'String': '``'}, 'content': '"'},
        {'type': 'Replace', 'pattern': {'String': "''"}, 'content': '"'},
        {'type': 'NFKD'}, {'type': 'StripAccents'}, {'type': 'Lowercase'}, pre, regex]}
    a['pre_tokenizer'] = metaspace()
    a['post_processor'] = template('[CLS]:0 $A:0 [SEP]:0', '[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1', {'[CLS]': 2, '[SEP]': 3})
    out['albert'] = a

    s = copy.deepcopy(base)  # SpmConverter of recent transformers
    s['normalizer'] = {'type': 'Sequence', 'normalizers': [
        pre, {'type': 'Strip', 'strip_left': False, 'strip_right': True},
        {'type': 'Replace', 'pattern': {'Regex': ' {2,}'}, 'content': '\u2581'}]}
    s['pre_tokenizer'] = metaspace('first', True)
    out['new_spm'] = s

    b = copy.deepcopy(base)
    b['model']['byte_fallback'] = True
    out['byte_fallback'] = b

    k = copy.deepcopy(base)
    k['normalizer'] = {'type': 'Sequence', 'normalizers': [{'type': 'NFKC'}, {'type': 'Lowercase'}]}
    k['pre_tokenizer'] = {'type': 'WhitespaceSplit'}
    out['nfkc_lower'] = k
    return out


def main():
    if len(sys.argv) == 4 and sys.argv[1] == '--from-model':
        from_model(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == '--variants':
        base = json.load(open(sys.argv[2], encoding='utf-8'))
        for name, j in variants(base).items():
            write(j, os.path.join(sys.argv[3], name, 'tokenizer.json'))
        model = os.path.join(os.path.dirname(os.path.abspath(sys.argv[2])), 'spiece.model')
        if os.path.exists(model):
            write_spiece(model, sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main()
