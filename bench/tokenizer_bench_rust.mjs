// Encodes a text file with HF tokenizers' Rust core (node bindings), one document at a time,
// single-threaded, and prints MB/s. Usage: node bench/tokenizer_bench_rust.mjs MODEL_DIR FILE
// [CHUNK_BYTES] [REPEAT]. Documents are cut after the first newline past CHUNK_BYTES, as
// `strata bench-tokenizer --chunk` does.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'tests', 'tokenizer', 'package.json'));
const { Tokenizer } = require('@anush008/tokenizers');

const [dir, file, chunkArg = '0', repeatArg = '3'] = process.argv.slice(2);
const chunk = Number(chunkArg), repeat = Number(repeatArg);
const buf = fs.readFileSync(file);
const docs = [];
for (let pos = 0; pos < buf.length;) {
  let end = chunk === 0 ? buf.length : buf.indexOf(10, Math.min(buf.length, pos + chunk));
  end = end < 0 ? buf.length : Math.min(buf.length, end + 1);
  docs.push(buf.subarray(pos, end).toString('utf8'));
  pos = end;
}
const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
// CPU time of the process (the encode runs on one libuv worker while the main thread waits) is
// the measure, since the machine may be shared; wall time is shown too.
let best = Infinity, best_cpu = Infinity, tokens = 0;
for (let r = 0; r < repeat; ++r) {
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  tokens = 0;
  for (const d of docs) tokens += (await tok.encode(d, null, { addSpecialTokens: false })).getIds().length;
  const c = process.cpuUsage(c0);
  best_cpu = Math.min(best_cpu, (c.user + c.system) / 1e6);
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
}
const mb = buf.length / 1e6;
console.log(`rust:   ${mb.toFixed(2)} MB in ${docs.length} documents, ${tokens} tokens, ` +
  `cpu ${best_cpu.toFixed(3)} s, ${(mb / best_cpu).toFixed(2)} MB/s ` +
  `(wall ${best.toFixed(3)} s, ${(mb / best).toFixed(2)} MB/s)`);
