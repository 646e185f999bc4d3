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

const eq = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);

async function main() {
  const corpus = generate_corpus(1234);
  const data = path.join(here, 'data');
  fs.mkdirSync(data, { recursive: true });
  fs.writeFileSync(path.join(data, 'corpus.jsonl'), corpus.map((s) => JSON.stringify(s)).join('\n') + '\n');
  for (const [name, file] of Object.entries(tokenizer_paths(here))) {
    const tok = Tokenizer.fromFile(file);
    const lines = [JSON.stringify({ tokenizer: name, strings: corpus.length })];
    for (let i = 0; i < corpus.length; ++i) {
      const text = corpus[i];
      const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      const ids_special = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      const decoded = await tok.decode(ids, false);
      const decoded_skip = await tok.decode(ids, true);
      const rec = { i, ids };
      if (!eq(ids, ids_special)) rec.ids_special = ids_special;
      if (decoded !== text) rec.decode = decoded;
      if (decoded_skip !== decoded) rec.decode_skip = decoded_skip;
      lines.push(JSON.stringify(rec));
    }
    // Random id sequences: decode must agree, including split multi-byte characters.
    const vocab = tok.getVocab(true);
    const size = Object.values(vocab).reduce((m, v) => Math.max(m, v), 0) + 1;
    const single = Object.entries(vocab).filter(([t]) => [...t].length === 1).map(([, id]) => id);
    const special = [];
    for (const [t, id] of Object.entries(vocab)) if (/^<[|｜].*[|｜]>$|^<\/?s>$|^\[MASK\]$/.test(t)) special.push(id);
    const rnd = mulberry32(99);
    const pick = (a) => a[Math.floor(rnd() * a.length)];
    for (let k = 0; k < 600; ++k) {
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
      const rec = { decode_ids: ids, text };
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
