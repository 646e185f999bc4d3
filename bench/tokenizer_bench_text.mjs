// Writes about N MB (default 10) of mixed text (the tokenizer test corpus generator with
// successive seeds: English, code, CJK, emoji, combining marks, digits, ...) to the given file.
// The corpus's deliberately huge single words (1,000+ repeated characters) are left out so
// that the text stays like real documents.
import fs from 'node:fs';
import { generate_corpus } from '../tests/tokenizer/corpus.mjs';

const [out, mb = '10'] = process.argv.slice(2);
if (!out) {
  console.error('usage: node bench/tokenizer_bench_text.mjs OUT_FILE [MB]');
  process.exit(2);
}
const target = Number(mb) * 1e6;
const parts = [];
let size = 0;
for (let seed = 1; size < target; ++seed) {
  for (const s of generate_corpus(seed)) {
    if (s.length > 600 && !/\s/.test(s.slice(0, 600))) continue;
    const line = s + '\n';
    parts.push(line);
    size += Buffer.byteLength(line);
    if (size >= target) break;
  }
}
fs.writeFileSync(out, parts.join(''));
console.log(`${out}: ${(size / 1e6).toFixed(2)} MB`);
