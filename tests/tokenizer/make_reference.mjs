// Writes the reference outputs of HF tokenizers' Rust core (node bindings @anush008/tokenizers)
// for the test corpus: data/corpus.jsonl (one JSON string a line) and data/<name>.jsonl per
// tokenizer. Run after setup.sh: `node make_reference.mjs`. The C++ test compares against these.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { generate_corpus } from './corpus.mjs';
import { tokenizer_paths } from './tokenizers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const { Tokenizer } = require('@anush008/tokenizers');

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Ids are stored compactly as text: each id is little-endian base-32 digits; digit d is written
// as ALPHABET[d] when more digits follow and ALPHABET[32 + d] for the last one.
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_';
function pack(ids) {
  let s = '';
  for (let v of ids) {
    while (v >= 32) {
      s += ALPHABET[v & 31];
      v >>>= 5;
    }
    s += ALPHABET[32 + v];
  }
  return s;
}

const eq = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);

async function main() {
  const corpus = generate_corpus(1234);
  const data = path.join(here, 'data');
  fs.mkdirSync(data, { recursive: true });
  fs.writeFileSync(path.join(data, 'corpus.jsonl'), corpus.map((s) => JSON.stringify(s)).join('\n') + '\n');
  for (const [name, file] of Object.entries(tokenizer_paths(here))) {
    const tok = Tokenizer.fromFile(file);
    // The synthetic tokenizers check features, not coverage: every third string is enough.
    const stride = name.startsWith('synth_') ? 3 : 1;
    const first = (await tok.encode('a b', null, { addSpecialTokens: false })).getIds();
    const first_sp = (await tok.encode('a b', null, { addSpecialTokens: true })).getIds();
    let k0 = 0;
    while (k0 + first.length <= first_sp.length && !eq(first_sp.slice(k0, k0 + first.length), first)) ++k0;
    const prefix = first_sp.slice(0, k0), suffix = first_sp.slice(k0 + first.length);
    const lines = [JSON.stringify({ tokenizer: name, strings: corpus.length, stride, prefix, suffix })];
    for (let i = 0; i < corpus.length; i += stride) {
      const text = corpus[i];
      const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      const ids_special = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      const decoded = await tok.decode(ids, false);
      const decoded_skip = await tok.decode(ids, true);
      const rec = { ids: pack(ids) };
      if (!eq([...prefix, ...ids, ...suffix], ids_special)) rec.ids_special = pack(ids_special);
      if (decoded !== text) rec.decode = decoded;
      if (decoded_skip !== decoded) rec.decode_skip = decoded_skip;
      lines.push(JSON.stringify(rec));
    }
    // Random id sequences: decode must agree, including split multi-byte characters.
    const vocab = tok.getVocab(true);
    const size = Object.values(vocab).reduce((m, v) => Math.max(m, v), 0) + 1;
    const single = Object.entries(vocab).filter(([t]) => [...t].length === 1 || /^<0x[0-9A-F]{2}>$/.test(t))
      .map(([, id]) => id);
    const special = [];
    for (const [t, id] of Object.entries(vocab)) if (/^<[|｜].*[|｜]>$|^<\/?s>$|^\[MASK\]$/.test(t)) special.push(id);
    const rnd = mulberry32(99);
    const pick = (a) => a[Math.floor(rnd() * a.length)];
    for (let k = 0; k < 400; ++k) {
      const n = 1 + Math.floor(rnd() * 24);
      const ids = [];
      for (let j = 0; j < n; ++j) {
        const r = rnd();
        if (r < 0.45) ids.push(pick(single));
        else if (r < 0.9) ids.push(Math.floor(rnd() * size));
        else if (r < 0.98 && special.length) ids.push(pick(special));
        else ids.push(size + Math.floor(rnd() * 1000));  // unknown id: dropped
      }
      const text = await tok.decode(ids, false);
      const skip = await tok.decode(ids, true);
      const rec = { decode_ids: pack(ids), text };
      if (skip !== text) rec.text_skip = skip;
      lines.push(JSON.stringify(rec));
    }
    fs.writeFileSync(path.join(data, `${name}.jsonl`), lines.join('\n') + '\n');
    console.log(`${name}: ${corpus.length} strings`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
