#!/bin/sh
# Checkpoint load speed from a warm page cache: a synthetic BF16 Qwen3.5-MoE checkpoint
# (bench/synthetic_checkpoint.py; default 8 layers, 128 experts per expert, 2 shards: 8.5 GB)
# loaded by `strata logits` on each device. Prints the loader's closing line
# ("loaded DIR: X GB in T s, R GB/s") and the command's wall time.
#   bench/load_bench.sh BUILD_DIR [OUT_DIR] [LAYERS] [EXPERTS] [fused|per-expert] ["cpu cuda"]
set -eu
bin=$1/strata
out=${2:-/tmp/strata_load_bench}
layers=${3:-8}
experts=${4:-128}
layout=${5:-per-expert}
devices=${6:-cpu cuda}
[ -f "$out/config.json" ] || python3 "$(dirname "$0")/synthetic_checkpoint.py" "$out" "$layers" "$experts" "$layout" 2
cat "$out"/*.safetensors > /dev/null  # into the page cache
for d in $devices; do
  start=$(date +%s.%N)
  "$bin" logits --model "$out" --device "$d" --ids 1 --out "$out/logits_$d.npy" 2>&1 | grep -E "^loaded|error" || true
  echo "$d: logits command $(awk "BEGIN { print $(date +%s.%N) - $start }") s (load + one token)"
done
