#!/usr/bin/env bash
# A device call carries the working tree, 64 MiB at most with what it carries besides (the
# devbin). The tracked tree is close to that alone, so before a call that runs only the CUDA
# tests and benchmarks this takes out of the working tree (not out of git) what no GPU run reads:
# the DeepSeek-V4 fixtures, the tokenizer reference strings and the grammar corpus. With
# --deepseek (a call for the DeepSeek-V4 CUDA tests) it keeps the DeepSeek-V4 fixtures and takes
# out the default model instead. After the call, `tools/device/slim_tree.sh --restore` brings
# them back from git. Usage: tools/device/slim_tree.sh [--deepseek | --restore]
set -euo pipefail
cd "$(dirname "$0")/../.."
deepseek=(tests/fixtures/deepseek_v4_tiny tests/fixtures/deepseek_v4_topk_all tests/fixtures/deepseek_v4_quant
          tests/fixtures/deepseek_v4_hf_tiny)
rest=(tests/tokenizer/data tests/grammar/corpus.json)
default_model=(models/default/weights.tar.xz models/default/reference)
if [ "${1:-}" = --restore ]; then
  git checkout -- "${deepseek[@]}" "${rest[@]}" "${default_model[@]}"
  echo "slim_tree.sh: restored ${deepseek[*]} ${rest[*]} ${default_model[*]}"
  exit 0
fi
if [ "${1:-}" = --deepseek ]; then
  paths=("${default_model[@]}" "${rest[@]}")
else
  paths=("${deepseek[@]}" "${rest[@]}")
fi
rm -rf "${paths[@]}"
kib=$( (git ls-files -z | xargs -0 du -ck 2>/dev/null || true) | tail -1 | cut -f1)
echo "slim_tree.sh: removed ${paths[*]} from the working tree; what remains of the tracked tree: ${kib} KiB (restore: $0 --restore)"
