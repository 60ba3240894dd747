#!/usr/bin/env python3
"""fuzz.py — seeded mutation fuzzing of attnscope's untrusted inputs, run by ctest on the
ASan+UBSan build (tests named fuzz_*; `make test`).

Modes (one per ctest test):
  files   mutates one file of a model folder (config.json, tokenizer.json,
          tokenizer_config.json, vocab.txt / vocab.json / merges.txt: JSON-aware value
          swaps, key deletions, byte flips, truncations; model.safetensors: byte flips and
          truncations) and runs `attnscope run` on it
  text    hostile text and sentence pairs (invalid UTF-8, control and combining
          characters, special-token strings, very long inputs) and hostile --ids lists
  import  mutates the tokens / saliency / dependency JSON, CoNLL-U and npz files of
          `attnscope import`
  attention  mutates the .npy members (header dict: dtype, shape, order; data: NaN, inf,
          negative bits; tokens: code points that are not scalar values) of the npz files
          of tests/ref/gen_npz_attention.py, drops or renames members, rewrites the archive
          with valid CRCs and runs `attnscope serve --attention` on it with GETs of its runs
  db      mutates an analysis database (cells set to odd values or NULL, rows deleted,
          tables dropped, bytes flipped) and runs `attnscope report`, `export`, or `serve
          --db` with a GET of every database route
  tokenizer  mutates a SentencePiece Unigram tokenizer.json (tests/ref/unigram_tokenizers.py
          variants): the Precompiled charsmap's binary table (header, trie units, strings,
          truncation), vocab pieces and scores, unk_id / byte_fallback, or any JSON value;
          or a T5 folder's spiece.model (protobuf bytes) / tokenizer_config.json, or a
          Marian folder's vocab.json / source.spm / target.spm; and runs `attnscope run` on
          hostile text with it (a Marian folder: as source and target)
  corpus  mutates an SST-2 TSV and a CoNLL-U corpus (fields swapped for odd values, lines
          deleted, duplicated or made huge, bytes flipped, truncation) and runs
          `attnscope analyze`, `pretrain` (a tiny model, 2 steps) or `vocab` on them
  http    malformed and hostile requests to a real `attnscope serve` (API, database
          routes, generation with hostile options on a causal LM and an encoder-decoder
          model, raw byte-mutated requests)

A case fails when the binary crashes or is killed, when a sanitizer reports, when it runs
longer than --timeout seconds, when a failing command's error is not exactly one line
(warning lines aside) or holds a control character, or (http, db) when the server dies or
answers 500 (db: other than naming a damaged database page). Every failing input is kept
in --keep DIR for replay. What it does not do: coverage guidance (no libFuzzer with gcc);
the corpus is the committed fixtures plus shipped models.

Usage: fuzz.py MODE --bin BUILD/attnscope --work DIR [--n N] [--seed S] [--keep DIR]
  --work: folder with the models of tests/ref/make_analysis_db.sh (bert-sst, distil-sst,
  analysis.sqlite), of tests/browser/make_gpt2_model.mjs (gpt2) and of
  tests/cli/make_bpe_model.mjs (spm: the Llama-2 tokenizer; ug-NAME: the Unigram variants of
  tests/ref/unigram_tokenizers.py; ug-marian: marian_tiny with tests/ref/fixtures/marian_spm),
  made by run.sh.
"""
import argparse
import base64
import json
import os
import random
import shutil
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))

WEIRD = [None, -1, 0, 1, 2, 3, 7, 64, 65536, 2**31 - 1, 2**31, 2**63, -2**63, 1e308, -1e-9,
         0.5, '', 'gelu', 'relu', 'x' * 3000, [], {}, True, False, [1, 2], 'NaN',
         [[1, 2], [3]], [-5, 9999999], {'a': None}]

PIECES = ['hello', 'world', '[SEP]', '[CLS]', '[MASK]', '<s>', '</s>', '<mask>', '<|endoftext|>',
          '##ing', 'Ġthe', 'café', 'naïve', '日本語', '😀👍🏽', '\u200b', '\u0301', '\ufeff',
          '\t', '\r\n', ' ', '  ', '.', '...', '--', '\\', '"', "'", '%s%n', '\x01', '\x7f',
          'ﬁ', 'Ⅻ', 'İ', 'ß', 'ΣΑΣ', '\U0010ffff', 'a' * 300, '1234567890' * 20,
          '▁', '▁the', '<0x41>', '<unk>', '\U00020000', '\U000e0001',
          '\uff21\uff22', '\uff76\uff9e', '\u2460', '\u337b', '\u00bd', 'e\u0301\u0301', '\u3000']


def mutate_json(o, rng):
    """One random edit somewhere inside a parsed JSON value (in place): delete a key or
    element, replace it by a WEIRD value, or recurse into it."""
    if not isinstance(o, (dict, list)) or not o:
        return
    k = rng.choice(list(o)) if isinstance(o, dict) else rng.randrange(len(o))
    r = rng.random()
    if r < 0.15:
        del o[k]
    elif r < 0.6 or not isinstance(o[k], (dict, list)):
        o[k] = rng.choice(WEIRD)
    else:
        mutate_json(o[k], rng)


def mutate_bytes(b, rng):
    b = bytearray(b)
    if rng.random() < 0.3 and len(b) > 1:
        return bytes(b[:rng.randrange(len(b))])
    for _ in range(rng.randint(1, 8)):
        if b:
            b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def mutate_file(path, rng):
    data = open(path, 'rb').read()
    if path.endswith('.json') and rng.random() < 0.8:
        try:
            o = json.loads(data)
            for _ in range(rng.randint(1, 3)):
                mutate_json(o, rng)
            data = json.dumps(o).encode()
        except ValueError:
            data = mutate_bytes(data, rng)
    else:
        data = mutate_bytes(data, rng)
    with open(path, 'wb') as f:
        f.write(data)


FIELDS = ['', '_', '0', '-1', '1', '2', '99999', '2147483648', '1-2', '3.1', 'root', 'x' * 5000,
          '\u00e9', '1\t2', 'nan', '# text = ', '\r']


def mutate_lines(path, rng):
    """Line-level edits of a TSV / CoNLL-U file, else byte flips or truncation."""
    data = open(path, 'rb').read()
    if rng.random() < 0.25:
        data = mutate_bytes(data, rng)
    else:
        lines = data.decode('utf-8').split('\n')
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(lines))
            r = rng.random()
            if r < 0.5:
                cols = lines[i].split('\t')
                cols[rng.randrange(len(cols))] = rng.choice(FIELDS)
                lines[i] = '\t'.join(cols)
            elif r < 0.65:
                del lines[i]
            elif r < 0.8:
                lines.insert(i, lines[i])
            else:
                lines.insert(i, rng.choice(FIELDS) * rng.randint(1, 20000))
            if not lines:
                lines = ['']
        data = '\n'.join(lines).encode('utf-8')
    with open(path, 'wb') as f:
        f.write(data)


SQL_VALUES = [None, -1, 0, 1, 7, 2**31, 2**62, -2**63, 1e308, -1e-300, 3.5, '', 'x', 'NaN', 'x' * 10000,
              b'', b'\x00\x01\x02', b'\xff' * 7, '[1,2', '{"a":']


def mutate_db(path, rng):
    """SQL-level edits of an SQLite file (constraint violations skipped), or byte flips."""
    if rng.random() < 0.2:
        data = open(path, 'rb').read()
        b = bytearray(data)
        for _ in range(rng.randint(1, 16)):  # mostly past the 100-byte header
            b[rng.randrange(100 if rng.random() < 0.9 else 0, len(b))] = rng.randrange(256)
        with open(path, 'wb') as f:
            f.write(bytes(b[:rng.randrange(len(b))] if rng.random() < 0.2 else b))
        return
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        for _ in range(rng.randint(1, 4)):
            t = rng.choice(tables)
            cols = [(r[1], r[5]) for r in con.execute(f'PRAGMA table_info("{t}")')]
            pk = [c for c, k in sorted(cols, key=lambda x: x[1]) if k] or ['rowid']
            rows = con.execute(f'SELECT {", ".join(pk)} FROM "{t}" ORDER BY {", ".join(pk)}').fetchall()
            r = rng.random()
            try:
                if r < 0.03:
                    con.execute(f'DROP TABLE "{t}"')
                    tables.remove(t)
                elif not rows:
                    continue
                elif r < 0.2:
                    row = rng.choice(rows)
                    con.execute(f'DELETE FROM "{t}" WHERE ' + ' AND '.join(f'{c} IS ?' for c in pk), row)
                else:
                    row = rng.choice(rows)
                    col = rng.choice(cols)[0]
                    con.execute(f'UPDATE "{t}" SET "{col}" = ? WHERE ' + ' AND '.join(f'{c} IS ?' for c in pk),
                                (rng.choice(SQL_VALUES),) + tuple(row))
            except sqlite3.Error:
                pass
        con.commit()
    finally:
        con.close()


def hostile_text(rng):
    if rng.random() < 0.2:
        return bytes(rng.randrange(1, 256) for _ in range(rng.randint(1, 400)))
    s = ''.join(rng.choice(PIECES) + rng.choice(['', ' ']) for _ in range(rng.randint(1, 80)))
    b = s.encode('utf-8')
    if rng.random() < 0.25 and b:
        b = bytearray(b)
        b[rng.randrange(len(b))] = rng.choice([0x80, 0xc0, 0xff, 0xed, 0xf4, 0xf8])
        b = bytes(b)
    return b


class Checker:
    """Runs one case and records failures."""

    def __init__(self, args):
        self.args = args
        self.failures = 0
        self.cases = 0
        self.exit_codes = {}

    def fail(self, what, keep_dir=None, detail=''):
        self.failures += 1
        msg = f'FAIL case {self.cases}: {what}'
        if keep_dir and self.args.keep:
            dst = os.path.join(self.args.keep, f'case{self.cases}')
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(keep_dir, dst)
            msg += f' (input kept in {dst})'
        print(msg + ('\n  ' + detail.strip().replace('\n', '\n  ') if detail else ''))

    def run(self, cmd, keep_dir=None):
        self.cases += 1
        try:
            r = subprocess.run(cmd, capture_output=True, timeout=self.args.timeout)
        except subprocess.TimeoutExpired:
            self.fail(f'no result within {self.args.timeout} s: {cmd[:6]}', keep_dir)
            return
        self.check_exit(r.returncode, r.stderr.decode(errors='replace'), keep_dir)

    def check_exit(self, code, err, keep_dir, ok=(0, 1, 2)):
        """Judges a finished command by its exit status and its stderr."""
        self.exit_codes[code] = self.exit_codes.get(code, 0) + 1
        if 'Sanitizer' in err or 'runtime error' in err:
            self.fail('sanitizer report', keep_dir, err[-1500:])
        elif code not in ok:
            self.fail(f'exit status {code}', keep_dir, err[-800:])
        elif code != 0 and len([l for l in err.rstrip('\n').split('\n') if 'warning:' not in l]) != 1:
            self.fail('error is not one line (besides warnings)', keep_dir, err[:600])
        elif any(c < ' ' and c != '\n' or c == '\x7f' for c in err):
            self.fail('control character in the error output', keep_dir, repr(err[:600]))


UNIGRAM_VARIANTS = ('t5', 'xlmr', 'albert', 'new_spm', 'byte_fallback', 'nfkc_lower')


def models(work):
    out = [os.path.join(ROOT, 'models', m) for m in ('attnscope-sst2', 'attnscope-mlm')]
    out = [m for m in out if os.path.isdir(m)]
    out += [os.path.join(work, m) for m in ('bert-sst', 'distil-sst', 'gpt2', 'spm', 'ug-t5', 'ug-albert')]
    return out


def mutate_charsmap(pc, rng):
    """Edits the binary table of a Precompiled normalizer (base64 in the JSON)."""
    raw = bytearray(base64.b64decode(pc['precompiled_charsmap']))
    trie = struct.unpack('<I', raw[:4])[0] // 4
    k = rng.random()
    if k < 0.2:
        raw[0:4] = struct.pack('<I', rng.choice([0, 3, 4, 8, len(raw), len(raw) - 4, 2**32 - 4, 2**31,
                                                   rng.randrange(len(raw))]))
    elif k < 0.6:
        for _ in range(rng.randint(1, 40)):
            i = 4 + 4 * rng.randrange(max(trie, 1))
            u = rng.getrandbits(32) if rng.random() < 0.5 else struct.unpack('<I', raw[i:i + 4])[0] ^ (1 << rng.randrange(32))
            raw[i:i + 4] = struct.pack('<I', u)
    elif k < 0.8 and len(raw) > 4 + 4 * trie:
        for _ in range(rng.randint(1, 20)):
            raw[rng.randrange(4 + 4 * trie, len(raw))] = rng.choice([0, 0x80, 0xbf, 0xc0, 0xe2, 0xf4, 0xff, 0x41])
    else:
        raw = bytearray(mutate_bytes(bytes(raw), rng))
    enc = base64.b64encode(bytes(raw)).decode()
    pc['precompiled_charsmap'] = enc if rng.random() < 0.9 else enc[:rng.randrange(len(enc) + 1)] + rng.choice(['', '=', '!', '\n'])


def mutate_unigram(path, rng):
    """One structure-aware edit of a Unigram tokenizer.json, else JSON-aware ones."""
    j = json.load(open(path, encoding='utf-8'))
    nm = j.get('normalizer') or {}
    steps = nm.get('normalizers', [nm]) if isinstance(nm, dict) else []
    pcs = [n for n in steps if isinstance(n, dict) and n.get('type') == 'Precompiled']
    vocab = j['model']['vocab']
    r = rng.random()
    if r < 0.45 and pcs:
        mutate_charsmap(pcs[0], rng)
    elif r < 0.7:
        for _ in range(rng.randint(1, 5)):
            i = rng.randrange(len(vocab))
            k = rng.random()
            if k < 0.4:
                vocab[i][1] = rng.choice([1e308, -1e308, 0, 0.0, 5, 100.0, -1e-300, 2**63, -2**63])
            elif k < 0.8:
                vocab[i][0] = rng.choice(PIECES + ['', vocab[rng.randrange(len(vocab))][0], '\u2581' * 50])
            elif k < 0.9:
                del vocab[i]
            else:
                vocab.append([rng.choice(PIECES), rng.choice([0.0, -1.0, 3.0])])
    elif r < 0.85:
        j['model'][rng.choice(['unk_id', 'byte_fallback'])] = rng.choice(WEIRD + [len(vocab) - 1, len(vocab)])
    else:
        for _ in range(rng.randint(1, 3)):
            mutate_json(j, rng)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(j, f)


def case_dirs(n, prefix):
    """Yields n times the path of a folder that does not exist yet (the caller makes it),
    the previous case's removed; everything removed at the end."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    d = os.path.join(tmp, 'case')
    try:
        for _ in range(n):
            shutil.rmtree(d, ignore_errors=True)
            yield d
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def mode_files(args, rng, chk):
    for d in case_dirs(args.n, 'fuzz-files-'):
        shutil.copytree(rng.choice(models(args.work)), d)
        files = sorted(f for f in os.listdir(d) if f.endswith(('.json', '.txt', '.safetensors')))
        mutate_file(os.path.join(d, rng.choice(files)), rng)
        text = rng.choice(['hello world', 'The café, naïve! 123', 'a ' * 50, 'x y z [SEP] [MASK]'])
        chk.run([args.bin, 'run', '--model', d, '--text', text, '--threads', '1'], d)


def mode_tokenizer(args, rng, chk):
    for d in case_dirs(args.n, 'fuzz-tokenizer-'):
        v = rng.choice(UNIGRAM_VARIANTS + ('spiece', 'marian'))
        shutil.copytree(os.path.join(args.work, 'ug-' + v), d)
        if v == 'marian':  # vocab.json + source.spm + target.spm: one of them
            mutate_file(os.path.join(d, rng.choice(['vocab.json', 'source.spm', 'source.spm', 'target.spm'])), rng)
        elif v != 'spiece':
            mutate_unigram(os.path.join(d, 'tokenizer.json'), rng)
        else:  # a T5 folder with only spiece.model: its protobuf bytes or tokenizer_config.json
            mutate_file(os.path.join(d, rng.choice(['spiece.model'] * 4 + ['tokenizer_config.json'])), rng)
        text = hostile_text(rng).replace(b'\0', b'') or b'x'
        target = ['--target', text] if v == 'marian' else []
        chk.run([args.bin, 'run', '--model', d, '--text', text, *target, '--threads', '1'], d)


def mode_text(args, rng, chk):
    for _ in range(args.n):
        m = rng.choice(models(args.work))
        cmd = [args.bin, 'run', '--model', m, '--threads', '1']
        if rng.random() < 0.15:
            ids = [rng.choice([-1, 0, 1, 2, 3, 5, 100, 2**31 - 1, 2**40]) for _ in range(rng.randint(0, 300))]
            cmd += ['--ids', ','.join(map(str, ids)) + rng.choice(['', ',', ',,', 'x'])]
        else:
            cmd += ['--text', hostile_text(rng).replace(b'\0', b'')]
            if rng.random() < 0.3:
                cmd += ['--text-b', hostile_text(rng).replace(b'\0', b'')]
        if rng.random() < 0.3:
            cmd.append('--no-truncate')
        chk.run(cmd)


def mode_import(args, rng, chk):
    src = os.path.join(ROOT, 'tests', 'ref', 'fixtures', 'import_files')
    keys = sorted({f[:4] for f in os.listdir(src)})
    for d in case_dirs(args.n, 'fuzz-import-'):
        os.makedirs(d)
        k = rng.choice(keys)
        files = sorted(f for f in os.listdir(src) if f.startswith(k))
        for f in files:
            shutil.copy(os.path.join(src, f), d)
        mutate_file(os.path.join(d, rng.choice(files)), rng)
        deps = [f for f in files if f.endswith(('.conllu', 'deps.json'))][0]
        chk.run([args.bin, 'import', '--attention', f'{d}/{k}.npz', '--tokens', f'{d}/{k}.tokens.json',
                 '--saliency', f'{d}/{k}.saliency.json', '--dependencies', f'{d}/{deps}',
                 '--db', f'{d}/x.sqlite', '--quiet'], d)


def mutate_npy(data, rng, name):
    """A mutated .npy image: its header dict (dtype, shape, order) or its data bytes; for
    the tokens, code points that are not Unicode scalar values."""
    hl = 10 + int.from_bytes(data[8:10], 'little') if data[:6] == b'\x93NUMPY' and data[6] == 1 else 0
    head, body = data[:hl], data[hl:]
    r = rng.random()
    if hl and r < 0.45:
        descr = rng.choice(['<f4', '<f2', '<f8', '<i4', '<i8', '|u1', '|b1', '|O', '>f4', '<U3', '<U0', '|S2',
                            '<U5000', '<c8', '<f16', 'V8'])
        shape = rng.choice(['()', '(0,)', '(1,)', '(6,)', '(3, 6, 6)', '(2, 3, 6, 6)', '(2, 1, 3, 6, 6)',
                            '(99999999,)', '(1099511627776, 1)', '(2, 3, 6, 4)', '(300, 1, 1, 1)', '(2, 3, 5, 5)'])
        d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
            descr if rng.random() < 0.5 else _field(head, 'descr'), rng.choice(['False', 'False', 'True']),
            shape if rng.random() < 0.6 else _field(head, 'shape'))
        d = d.encode()
        d += b' ' * ((64 - (10 + len(d) + 1) % 64) % 64) + b'\n'
        return b'\x93NUMPY\x01\x00' + len(d).to_bytes(2, 'little') + d + body
    if name == 'tokens' and r < 0.6:
        cps = [rng.choice([0x41, 0xD800, 0xDFFF, 0x110000, 0xFFFFFFFF, 0x20AC, 0x1F600, 0]) for _ in range(len(body) // 4)]
        return head + b''.join(c.to_bytes(4, 'little') for c in cps)
    if r < 0.8 and body:
        b = bytearray(body)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] = rng.choice([0x00, 0x7f, 0x80, 0xff, 0xfc, rng.randrange(256)])  # NaN/inf/negative bits
        return head + bytes(b)
    return mutate_bytes(data, rng)


def _field(head, key):
    """The value text of key in a .npy header dict ('descr' quoted, 'shape' a tuple)."""
    h = head[10:].decode('latin-1')
    i = h.find(f"'{key}':")
    if i < 0:
        return "'<f4'" if key == 'descr' else '()'
    v = h[i + len(key) + 3:].lstrip()
    end = v.find(')') + 1 if key == 'shape' else v.find("'", 1) + 1
    return v[:end] if key == 'shape' else v[1:end - 1]


def mode_attention(args, rng, chk):
    """`attnscope serve --attention FILE.npz` on a mutated fixture of
    tests/ref/gen_npz_attention.py, rewritten with valid CRCs so the .npy and array checks
    are reached: a refused file must be a one-line error with exit 2, an accepted one is
    served (GET of its run, attention, qk, attribution) without a crash or a 500."""
    import zipfile
    src = os.path.join(ROOT, 'tests', 'ref', 'fixtures', 'npz_attention')
    for d in case_dirs(args.n, 'fuzz-attention-'):
        os.makedirs(d)
        with zipfile.ZipFile(os.path.join(src, rng.choice(['run_like.npz', 'bertviz_f16.npz'])), 'r') as z:
            members = {n[:-4]: z.read(n) for n in z.namelist()}
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            k = rng.choice(sorted(members))
            if r < 0.1 and len(members) > 1:
                del members[k]
            elif r < 0.2:
                members[rng.choice(['attention', 'attentions', 'tokens', 'queries', 'sentence_b_start', 'kv_group'])] = members[k]
            else:
                members[k] = mutate_npy(members[k], rng, k)
        path = os.path.join(d, 'a.npz')
        with zipfile.ZipFile(path, 'w', rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])) as z:
            for k, v in members.items():
                z.writestr(k + '.npy', v)

        def requests(port):
            r = http_send(port, http_req('GET', '/api/v1/models'), args.timeout)
            for run in json.loads(r.split(b'\r\n\r\n', 1)[1])['imported']:
                L, H = run['sizes']['layers'], run['sizes']['heads']
                for p in ['', f'/attention?layers=0-{L - 1}&heads=0-{H - 1}&dtype=f16', '/attention?pool=8&dtype=u8',
                          f'/qk?layer={L - 1}&head={H - 1}', '/attribution?method=rollout', '/tile?layer=0&head=0']:
                    yield http_req('GET', f'/api/v1/runs/{run["id"]}{p}')

        serve_and_get(args, chk, ['--attention', path], requests, keep_dir=d)


def mode_corpus(args, rng, chk):
    for d in case_dirs(args.n, 'fuzz-corpus-'):
        os.makedirs(d)
        tsv, ud = os.path.join(d, 'sst.tsv'), os.path.join(d, 'ud.conllu')
        shutil.copy(os.path.join(args.work, 'sst.tsv'), tsv)
        shutil.copy(os.path.join(args.work, 'ud.conllu'), ud)
        mutate_lines(rng.choice([tsv, ud]), rng)
        r = rng.random()
        if r < 0.6:
            cmd = [args.bin, 'analyze', '--model', os.path.join(args.work, 'bert-sst'), '--sst2', tsv,
                   '--conllu', ud, '--db', os.path.join(d, 'a.sqlite'), '--limit', '20', '--explain', '2',
                   '--quiet', '--threads', '1']
        elif r < 0.8:
            cmd = [args.bin, 'pretrain', '--corpus', f'{tsv},{ud}', '--vocab',
                   os.path.join(args.work, 'bert-sst', 'vocab.txt'), '--out', os.path.join(d, 'pt'),
                   '--layers', '1', '--width', '16', '--heads', '2', '--ff', '32', '--max-len', '32',
                   '--steps', '2', '--batch', '2', '--threads', '1', '--log-every', '1']
        else:
            cmd = [args.bin, 'vocab', '--corpus', f'{tsv},{ud}', '--size', '200', '--out', os.path.join(d, 'v.txt')]
        chk.run(cmd, d)


def mode_db(args, rng, chk):
    routes = ['/api/v1/db/runs', '/api/v1/db/runs/1', '/api/v1/db/runs/1/heads', '/api/v1/db/runs/2/pairs',
              '/api/v1/db/runs/1/relations?top=3', '/api/v1/db/runs/1/sentences?offset=0&limit=50',
              '/api/v1/db/runs/1/sentences?q=film&relation=nsubj&correct=1', '/api/v1/db/runs/1/sentences/0',
              '/api/v1/db/runs/2/sentences/1', '/api/v1/db/runs/1/sentences/0/parents?layer=0&head=1',
              '/api/v1/db/runs/1/sentences/2/attention?layers=0-1&heads=0-3&dtype=f32', '/api/v1/models']
    for d in case_dirs(args.n, 'fuzz-db-'):
        os.makedirs(d)
        db = os.path.join(d, 'a.sqlite')
        shutil.copy(os.path.join(args.work, 'analysis.sqlite'), db)
        mutate_db(db, rng)
        r = rng.random()
        if r < 0.35:
            chk.run([args.bin, 'report', '--db', db, '--top', '3'], d)
        elif r < 0.7:
            chk.run([args.bin, 'export', '--db', db, '--out', os.path.join(d, 'h.json')], d)
        else:
            serve_and_get(args, chk, ['--model', os.path.join(args.work, 'bert-sst'),
                                      '--model', os.path.join(args.work, 'distil-sst'), '--db', db],
                          lambda port: (http_req('GET', p) for p in routes), d, damaged_db_ok=True)


def serve_and_get(args, chk, serve_args, requests, keep_dir=None, damaged_db_ok=False):
    """Starts `attnscope serve` with serve_args (a failing start must be a one-line error)
    and sends the raw requests that requests(port) yields, one case each. Fails on a dead
    or hanging server, a sanitizer report, or a 500 — with damaged_db_ok, except the
    one-line `{"error": "database ..."}` of a damaged database page, a server-side failure
    that surfaces when a request reads that page."""
    log_path = os.path.join(tempfile.gettempdir(), f'fuzz-serve-{os.getpid()}.log')
    with open(log_path, 'w') as log:
        srv = subprocess.Popen([args.bin, 'serve', '--port', '0', '--threads', '1'] + serve_args,
                               stdout=subprocess.PIPE, stderr=log)
    try:
        line = srv.stdout.readline().decode()
        if 'listening on' not in line:
            chk.cases += 1
            srv.wait(timeout=args.timeout)
            chk.check_exit(srv.returncode, open(log_path, errors='replace').read(), keep_dir, ok=(1, 2))
            return
        port = int(line.strip().rstrip('/').rsplit(':', 1)[1])
        for raw in requests(port):
            chk.cases += 1
            try:
                out = http_send(port, raw, args.timeout)
            except OSError as e:
                out = b''
                if isinstance(e, socket.timeout):
                    chk.fail(f'no answer within {args.timeout} s: {raw[:120]!r}', keep_dir)
            status = out[9:12].decode(errors='replace')
            chk.exit_codes[status] = chk.exit_codes.get(status, 0) + 1
            if srv.poll() is not None:
                chk.fail(f'server died on {raw[:300]!r}', keep_dir)
                break
            body = out.split(b'\r\n\r\n', 1)[-1]
            if status == '500' and not (damaged_db_ok and body.startswith(b'{"error":"database ') and
                                        b'\n' not in body):
                chk.fail(f'500 on {raw[:200]!r}', keep_dir, out[-300:].decode(errors='replace'))
    finally:
        if srv.poll() is None:
            srv.terminate()
            try:
                srv.wait(timeout=30)
            except subprocess.TimeoutExpired:
                srv.kill()
                chk.fail('server did not stop on SIGTERM', keep_dir)
        err = open(log_path, errors='replace').read()
        os.unlink(log_path)
        if 'Sanitizer' in err or 'runtime error' in err:
            chk.fail('sanitizer report in the server', keep_dir, err[-2000:])


def http_send(port, raw, timeout):
    s = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    try:
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)
        out = b''
        while True:
            b = s.recv(65536)
            if not b:
                return out
            out += b
    finally:
        s.close()


def http_req(method, path, body=None):
    h = f'{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n'
    if body is not None:
        h += f'Content-Length: {len(body)}\r\nContent-Type: application/json\r\n'
    return h.encode() + b'\r\n' + (body or b'')


def mode_http(args, rng, chk):
    vals = ['0', '1', '-1', '3', '99999999999999999999', '1-2', '0-3', '3-0', 'a', '', '%00', '%ff',
            '1e3', '0x10', '-', '--1', '1,2', '128', '8', '7', 'f16', 'f32', 'f64', 'NaN', ' 1', 'é', "'",
            'rollout', 'flow', 'norm', 'grad', 'importance', '0,1', '0,,1', '256', '257', '2-5']

    def body():
        o = {'model': rng.choice(['bert-sst', 'gpt2', 'x', None, 1]),
             'text': rng.choice(['a [MASK] b', '', 'x ' * 3000, 'é' * 300, None, 1, ['a']]),
             'text_b': rng.choice([None, 'b', '', 2]), 'k': rng.choice([None, 0, 1, 50, 51, -1, '5', 1e9]),
             'ids': rng.choice([None, None, [1, 2, 3], [], [-1], [1.5], 'x', [2 ** 31], [2 ** 63], [0] * 600, [5] * 40]),
             'capture': rng.choice([None, None, 'auto', 'dense', 'stats,qkv', 'stats', 1, ['dense']])}
        for k in list(o):
            if rng.random() < 0.2:
                del o[k]
        b = json.dumps(o).encode()
        return mutate_bytes(b, rng) if rng.random() < 0.3 else b

    def gen_body():
        o = {'model': rng.choice(['gpt2', 'bart_tiny', 'bert-sst', None]),
             'text': rng.choice(['a good', '', 'é' * 40, None, 3]),
             'ids': rng.choice([None, [0, 17, 45, 2], [], [-1], [2 ** 31], [5] * 600, 'x']),
             'target_ids': rng.choice([None, None, [2], [2, 0], [], [10 ** 6], [2] * 600]),
             'max_new': rng.choice([None, 1, 3, 0, 129, -1, 1.5, '2']),
             'beams': rng.choice([None, 1, 2, 3, 16, 17, 0, -1, 2.0]),
             'num_return': rng.choice([None, 1, 2, 3, 17, 0]),
             'length_penalty': rng.choice([None, 1.0, -10, 10.5, 'x', 1e308]),
             'early_stopping': rng.choice([None, True, 0, 'yes']),
             'temperature': rng.choice([None, 0, 0.7, -1, 101]), 'top_k': rng.choice([None, 1, 5, 0]),
             'seed': rng.choice([None, 0, 7, -1, 2 ** 40]), 'stop_at_eos': rng.choice([None, True, 1]),
             'dtype': rng.choice([None, 'f16', 'u8'])}
        for k in list(o):
            if rng.random() < 0.4:
                del o[k]
        b = json.dumps(o).encode()
        return mutate_bytes(b, rng) if rng.random() < 0.2 else b

    def requests(port):
        r = http_send(port, http_req('POST', '/api/v1/run', json.dumps(
            {'model': 'bert-sst', 'text': 'a good film .', 'text_b': 'it was bad .'}).encode()), args.timeout)
        rid = json.loads(r.split(b'\r\n\r\n', 1)[1])['id']
        r = http_send(port, http_req('POST', '/api/v1/run', json.dumps(
            {'model': 'gpt2', 'text': 'a good film .', 'capture': 'stats,qkv'}).encode()), args.timeout)
        lid = json.loads(r.split(b'\r\n\r\n', 1)[1])['id']  # a long run: no T x T kept
        paths = [f'/api/v1/runs/{rid}/attention?layers={{v}}&heads={{v}}&dtype={{v}}&pool={{v}}',
                 f'/api/v1/runs/{rid}/qk?layer={{v}}&head={{v}}', '/api/v1/runs/{v}',
                 f'/api/v1/runs/{rid}/attribution?method={{v}}&target={{v}}&position={{v}}&dtype={{v}}',
                 f'/api/v1/runs/{rid}/attribution?method={{v}}',
                 f'/api/v1/runs/{rid}/tile?layer={{v}}&head={{v}}&rows={{v}}&cols={{v}}&n={{v}}&exclude={{v}}&dtype={{v}}',
                 f'/api/v1/runs/{lid}/tile?layer={{v}}&head={{v}}&rows={{v}}&cols={{v}}&n={{v}}&exclude={{v}}',
                 f'/api/v1/runs/{lid}/tile?layer=0&head=0&rows={{v}}&exclude={{v}}', f'/api/v1/runs/{{v}}/stats',
                 f'/api/v1/runs/{lid}/stats?dtype={{v}}', f'/api/v1/runs/{lid}/attention?layers={{v}}&pool={{v}}',
                 f'/api/v1/runs/{lid}/qk?layer={{v}}&head={{v}}', f'/api/v1/runs/{lid}/attribution?method={{v}}',
                 '/api/v1/db/runs/{v}', '/api/v1/db/runs/{v}/heads', '/api/v1/db/runs/{v}/pairs',
                 '/api/v1/db/runs/1/relations?top={v}',
                 '/api/v1/db/runs/1/sentences?offset={v}&limit={v}&q={v}&corpus={v}&relation={v}'
                 '&correct={v}&confidence={v}',
                 '/api/v1/db/runs/{v}/sentences/{v}', '/api/v1/db/runs/1/sentences/{v}/parents?layer={v}&head={v}',
                 '/api/v1/db/runs/{v}/sentences/{v}/attention?layers={v}&heads={v}&dtype={v}',
                 '/api/v1/models', '/assets/{v}', '/{v}']
        for _ in range(args.n):
            r = rng.random()
            if r < 0.5:
                path = rng.choice(paths)
                while '{v}' in path:
                    path = path.replace('{v}', urllib.parse.quote(rng.choice(vals), safe='-,'), 1)
                yield http_req('GET', path)
            elif r < 0.7:
                yield http_req('POST', rng.choice(['/api/v1/run', '/api/v1/mlm']), body())
            elif r < 0.8:
                yield http_req('POST', '/api/v1/generate', gen_body())
            else:
                yield mutate_bytes(http_req(rng.choice(['GET', 'POST', 'PUT', 'DELETE', 'HEAD', 'OPTIONS']),
                                            rng.choice(['/api/v1/run', '/api/v1/models', '/']),
                                            body() if rng.random() < 0.5 else None), rng)

    serve_and_get(args, chk, ['--model', os.path.join(args.work, 'bert-sst'), '--model',
                              os.path.join(args.work, 'gpt2'), '--model',
                              os.path.join(ROOT, 'tests', 'ref', 'fixtures', 'models', 'bart_tiny'), '--db',
                              os.path.join(args.work, 'analysis.sqlite')],
                  requests)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('mode', choices=['files', 'text', 'tokenizer', 'import', 'attention', 'corpus', 'db', 'http'])
    ap.add_argument('--bin', required=True)
    ap.add_argument('--work', required=True)
    ap.add_argument('--n', type=int, default=100)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--timeout', type=int, default=120)
    ap.add_argument('--keep', default='')
    args = ap.parse_args()
    rng = random.Random(f'{args.mode}:{args.seed}')
    chk = Checker(args)
    t0 = time.time()
    {'files': mode_files, 'text': mode_text, 'tokenizer': mode_tokenizer, 'import': mode_import, 'attention': mode_attention,
     'corpus': mode_corpus,
     'db': mode_db, 'http': mode_http}[args.mode](args, rng, chk)
    seen = ', '.join(f'{k}: {v}' for k, v in sorted(chk.exit_codes.items(), key=lambda kv: str(kv[0])))
    print(f'fuzz {args.mode}: {chk.cases} cases in {time.time() - t0:.0f} s, {chk.failures} failures '
          f'({"statuses" if args.mode == "http" else "exit codes"} {seen})')
    sys.exit(1 if chk.failures else 0)


if __name__ == '__main__':
    main()
