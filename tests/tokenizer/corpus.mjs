// Deterministic test corpus for the tokenizer: generate_corpus(seed) returns >= 2,000 varied
// strings (English, code, CJK, emoji, combining marks, NFC/NFD pairs, whitespace, digits,
// special tokens typed into text, punctuation, contractions, mixed scripts, very long words).

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

const WORDS = (
  'the of and to in is you that it he was for on are as with his they at be this have from ' +
  'or one had by word but not what all were we when your can said there use an each which she ' +
  'do how their if will up other about out many then them these so some her would make like him ' +
  'into time has look two more write go see number no way could people my than first water been ' +
  'call who oil its now find long down day did get come made may part tokenizer inference engine ' +
  'quantization attention transformer kernel throughput latency benchmark merges vocabulary ' +
  'Hello World OpenAI HuggingFace Rust C++ Python JSON UTF-8 BPE GPU CUDA naïve café résumé'
).split(' ');
const CONTRACTIONS = ["it's", "don't", "THEY'RE", "we've", "I'm", "you'll", "he'd", "'S", "'s",
  "can't", "won't", "Y'ALL", "o'clock", "rock'n'roll", "'ll", "'Ve", "'M", "'D", "'ſ", "'ſt",
  "'K", "ʼs", "’s", "isn’t", "'tis", "''s", "'''"];
const CJK = ['我们今天去公园散步。', '人工智能正在改变世界，', '这是一个测试句子！', '東京は日本の首都です。',
  'ひらがなとカタカナ、そして漢字。', 'コンピュータ・サイエンス', '한국어 문장입니다.', '안녕하세요 세계',
  '中文、日本語、한국어を混ぜる', '機械学習モデルの推論エンジン', '「引用」『二重』【括弧】', '１２３４５６７８９０',
  '㐀㐁㐂', '𠀀𠀁𪚥', '〇一二三四五', 'ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ'];
const EMOJI = ['😀', '😂', '🤖', '👍', '👍🏽', '👍🏿', '👨‍👩‍👧‍👦', '👩🏽‍💻', '🏳️‍🌈', '🇺🇸', '🇯🇵🇫🇷',
  '1️⃣', '#️⃣', '❤️', '❤', '☺️', '🧑🏻‍🤝‍🧑🏿', '🫠', '🦀', '🔥🔥🔥', '👁️‍🗨️', '🤷‍♀️', '🏴󠁧󠁢󠁳󠁣󠁴󠁿'];
const COMBINING = ['e\u0301', 'a\u0323\u0307', 'a\u0307\u0323', 'o\u0308\u0304', 'n\u0303',
  'Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f',
  'q\u0307\u0323', '\u0301', '\u0301\u0301x', 'A\u030a', 'i\u0307', '\u1100\u1161\u11a8',
  '\u1112\u1161\u11ab\u1100\u1173\u11af', '\u0915\u093c', '\u0928\u093c', '\u2126', '\u212b',
  '\u0387', 'ﬁ', 'ǅ', '\u0344', '\u0f73', 'e\u0301\u0327', 'c\u0327\u0301'];
const NFC_PAIRS = [['é', 'e\u0301'], ['Å', 'A\u030a'], ['ñ', 'n\u0303'], ['한', '\u1112\u1161\u11ab'],
  ['ệ', 'e\u0323\u0302'], ['ǖ', 'u\u0308\u0304'], ['Ω', '\u2126'], ['ḱ', 'k\u0301'],
  ['क़', '\u0915\u093c'], ['ἀ', '\u03b1\u0313'], ['ö', 'o\u0308'], ['가', '\u1100\u1161']];
const WS = [' ', '  ', '\t', '\n', '\r\n', '\r', '\n\n', '   \n', ' \t ', '\u00a0', '\u2000',
  '\u2003', '\u200a', '\u3000', '\u0085', '\u180e', '\u2028', '\u2029', '\u200b', '\ufeff',
  '\u000b', '\u000c', '\u202f', '\u205f', '\u1680', '\t\t\t', '        ', '\n \n'];
const DIGITS = ['0', '7', '42', '123', '1234', '12345', '3.14159', '1,000,000', '2024-06-01',
  '+1 (555) 010-9999', '0x1F', '1e-9', '٣٤٥', '۱۲۳', '१२३', '１２３', '²', '½', 'Ⅻ', '①②',
  '99999999999999999999', '٠١٢٣٤٥٦٧٨٩', '𝟘𝟙𝟚', '1.0.0-beta+exp.sha.5114f85'];
const SPECIALS = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>',
  '<tool_call>', '</tool_call>', '<|fim_prefix|>', '<|vision_pad|>', '<|im_start', 'im_end|>',
  '<|im_start|><|im_end|>', '<<|im_start|>|>', '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>',
  '<｜User｜>', '<｜Assistant｜>', '<｜tool▁calls▁begin｜>', '<｜tool▁sep｜>', '<｜fim▁hole｜>',
  '<｜▁pad▁｜>', '<｜begin▁of▁sentence', '<s>', '</s>', '[MASK]', '<sw>', '<unk>', '<pad>'];
const PUNCT = ['...', '!!!', '?!', '“quoted”', '‘single’', '«guillemets»', '— dash –', '•',
  '(parens)', '[brackets]', '{braces}', '<tag attr="v">', '&amp;', '@user', '#hashtag',
  'https://example.com/path?q=1&r=two#frag', 'user@example.org', '**bold**', '`code`', '~~~',
  '¿Qué?', '¡Hola!', '…', '‽', '§4.2', '©®™', '±×÷', '≤≥≠', '→←↔', '∀x∈ℝ', '$', '€£¥', '%'];
const SCRIPTS = ['مرحبا بالعالم', 'اَلْعَرَبِيَّةُ', 'שָׁלוֹם עוֹלָם', 'नमस्ते दुनिया', 'क्षत्रिय', 'สวัสดีชาวโลก',
  'Привет, мир!', 'Ελληνικά: καλημέρα', 'ქართული', 'Հայերեն', 'தமிழ்', 'বাংলা', 'ગુજરાતી',
  'ᚠᛇᚻ', 'ꦗꦮ', 'Tiếng Việt có dấu', 'Ṁǖḽṫḯ ḓḭḁḉṙḭṭḭḉṡ', 'ʻŌlelo Hawaiʻi', 'ⴰⵣⵓⵍ', '𐌰𐌱𐌲',
  'ܫܠܡܐ', 'ދިވެހި', 'ᐊᐃᑦ', 'Ꭰ Ꭱ Ꭲ', 'ᜆᜄᜎᜓ', 'אבג123דהו', 'abcمرحباdef', 'Ωmega İstanbul ı'];
const CODE = [
  'def f(x):\n    return x * 2\n',
  'int main(int argc, char** argv) {\n\tprintf("%d\\n", argc);\n\treturn 0;\n}\n',
  'const x = [1, 2, 3].map((v) => v ** 2);  // squares',
  '{"key": "value", "n": 12345, "arr": [true, false, null]}',
  '<html>\n  <body class="main">\n    <p>Hi &nbsp; there</p>\n  </body>\n</html>',
  'SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC;',
  'for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }',
  '#include <vector>\ntemplate <class T>\nusing Vec = std::vector<T>;',
  '    if __name__ == "__main__":\r\n        main()\r\n',
  'fn main() -> Result<(), Box<dyn Error>> { println!("{:?}", v); Ok(()) }',
  '$ ls -la /usr/lib | grep -E "^d" > out.txt 2>&1',
  'x=1;y=2;z=x+y;print(z)', '\t\tindented\twith\ttabs\n\t\t\tmore',
  '/* block comment */ // line comment\n# shell comment',
  'λx.λy.x y', 'a_b_c = __init__(self, *args, **kwargs)', 'camelCaseIdentifierName',
  'snake_case_name_42', 'SCREAMING_SNAKE', 'kebab-case-name', 'path/to/file.cpp:123:45'];

export function generate_corpus(seed = 1234) {
  const rnd = mulberry32(seed);
  const pick = (arr) => arr[Math.floor(rnd() * arr.length)];
  const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));
  const out = [];
  const add = (s) => out.push(s);

  // Fixed edge cases first.
  ['', ' ', '  ', '\n', '\r\n', '\t', 'a', 'A', '0', '\u00a0', '\u0085', '\u0301', '😀',
    "'s", "'S", "'ſ", 'Hello world', ' Hello', 'Hello ', '  leading and trailing  ',
    'a  b   c    d', 'x\u00a0y', 'end\n', '\n\nstart', 'tab\tsep', 'a\r\nb\rc\nd',
    '<|im_start|>', '<|endoftext|>', '<｜begin▁of▁sentence｜>', '<|im_end|>\u0301',
    '<｜User｜>\u0301', 'abc<|endoftext|>def', ' <|im_start|> ', '<|im_start|>user\nHi<|im_end|>',
    '<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>', '<|im_start|>\u00e9', '<s>x</s>',
    ' [MASK] ', 'a [MASK] b', 'a[MASK]b', ' <sw> ', 'x<sw>y', '<sw>', 'élan', 'e\u0301lan',
    '<|<|im_start|>', '<|im_start|im_start|>'].forEach(add);
  for (const [a, b] of NFC_PAIRS) { add(a); add(b); add(`word ${a}bc ${b}bc`); }
  for (const c of COMBINING) { add(c); add(`x${c}y`); add(` ${c} `); }
  for (const w of WS) { add(`a${w}b`); add(`${w}x${w}`); add(w.repeat(3)); add(`word${w}`); }
  for (const d of DIGITS) { add(d); add(`n=${d};`); add(` ${d} ${d}`); }
  for (const s of SPECIALS) { add(s); add(`text ${s} text`); add(`x${s}y`); add(`${s}\n${s}`); }
  for (const e of EMOJI) { add(e); add(`hi ${e}!`); add(e.repeat(3)); }
  for (const c of CONTRACTIONS) { add(c); add(`I said ${c} ok`); }
  for (const s of SCRIPTS) { add(s); add(` ${s}.`); }
  for (const c of CODE) add(c);
  for (const c of CJK) { add(c); add(`${c}abc ${c}`); }
  for (const p of PUNCT) { add(p); add(`word${p}word`); }

  // Very long words and runs.
  const longs = ['a'.repeat(1000), 'ab'.repeat(400), 'x'.repeat(3000), '1'.repeat(1000),
    ' '.repeat(500), '\n'.repeat(200), '中'.repeat(800), '😀'.repeat(300), 'é'.repeat(300),
    'e\u0301'.repeat(200), '-'.repeat(600), '<|im_start|>'.repeat(50), 'Supercalifragilistic'.repeat(40),
    'ÆØÅæøå'.repeat(100), 'ابجد'.repeat(200), 'สวัสดี'.repeat(100)];
  longs.forEach(add);
  for (let i = 0; i < 30; ++i) {
    let s = '';
    const n = int(200, 2500);
    const alpha = pick(['abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=',
      'aeiou', 'ぁあぃいぅうぇえぉお', '的一是不了人我在有他这', 'абвгдеёжзий', 'αβγδεζηθ']);
    const chars = [...alpha];
    for (let j = 0; j < n; ++j) s += pick(chars);
    add(s);
  }

  // Random sentences and mixtures.
  const sentence = () => {
    const n = int(3, 25);
    const parts = [];
    for (let j = 0; j < n; ++j) {
      const r = rnd();
      if (r < 0.55) parts.push(pick(WORDS));
      else if (r < 0.62) parts.push(pick(CONTRACTIONS));
      else if (r < 0.68) parts.push(pick(DIGITS));
      else if (r < 0.72) parts.push(pick(PUNCT));
      else if (r < 0.76) parts.push(pick(EMOJI));
      else if (r < 0.80) parts.push(pick(CJK));
      else if (r < 0.84) parts.push(pick(SCRIPTS));
      else if (r < 0.87) parts.push(pick(COMBINING));
      else if (r < 0.90) parts.push(pick(NFC_PAIRS)[int(0, 1)]);
      else if (r < 0.93) parts.push(pick(SPECIALS));
      else if (r < 0.96) parts.push(pick(WS));
      else parts.push(pick(WORDS).toUpperCase());
    }
    let s = '';
    for (const p of parts) s += p + (rnd() < 0.8 ? ' ' : pick(WS.concat(['', '', ',', '.'])));
    return rnd() < 0.5 ? s.trimEnd() : s;
  };
  while (out.length < 1900) add(sentence());
  // Code blocks with random indentation and mixed content.
  for (let i = 0; i < 150; ++i) {
    const lines = [];
    for (let j = int(2, 10); j > 0; --j) {
      const indent = pick(['', '  ', '    ', '\t', '\t\t', '        ']);
      lines.push(indent + pick(CODE).split('\n')[0] + pick(['', ' // ' + pick(WORDS), '  # ' + sentence()]));
    }
    add(lines.join(pick(['\n', '\r\n', '\n\n'])));
  }
  // Random code point soup over interesting ranges.
  const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff],
    [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe7f], [0x1100, 0x11ff],
    [0x2000, 0x206f], [0x2100, 0x214f], [0x3000, 0x30ff], [0x4e00, 0x4fff], [0xac00, 0xad00],
    [0xff00, 0xffef], [0x1f300, 0x1f64f], [0x1d400, 0x1d4ff], [0x20000, 0x2007f]];
  for (let i = 0; i < 200; ++i) {
    let s = '';
    for (let j = int(1, 60); j > 0; --j) {
      const [lo, hi] = pick(ranges);
      const cp = int(lo, hi);
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      s += String.fromCodePoint(cp);
    }
    add(s);
  }
  // Multi-line documents.
  for (let i = 0; i < 100; ++i) {
    const paras = [];
    for (let j = int(1, 5); j > 0; --j) paras.push(sentence() + ' ' + sentence());
    add(paras.join(pick(['\n\n', '\n', '\r\n\r\n', '\n \n'])));
  }
  return out;
}
