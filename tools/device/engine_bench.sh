#!/usr/bin/env bash
# The engine's speed beside the forward's, on the GPU machine, after tools/device/run.sh has
# unpacked the devbin: `strata bench --roofline` (the forward step at each decode batch) and
# `strata bench` (1024 prompt tokens and 128 output tokens a request, every request at once) at
# the same batches, on dummy weights of the Qwen3.5-35B-A3B shape cut to LAYERS layers, greedy,
# and at batch 256 also with temperature 1 / top-p 0.9 / top-k 50; then again with every prompt
# prefilled in the first step (--max-num-batched-tokens = batch x 1024), so that each decode step
# runs the whole batch and its time compares with the forward's, greedy and sampled at each batch. Logs go to $OUT.
# Usage: bash tools/device/engine_bench.sh [LAYERS] [BATCHES] [ENGINE FLAGS]   (defaults 8 and
# 1,8,64,256; the engine flags, e.g. --no-async-scheduling, go to every `bench` run and put "-x"
# in its log names)
set -uo pipefail
out=${OUT:-/tmp/strata-out}
bin=/tmp/strata-dev/devbin
layers=${1:-8}
batches=${2:-1,8,64,256}
flags=${3:-}
tag=${flags:+-x}
model=/tmp/strata-qwen3_5_35b_a3b-$layers
mkdir -p "$model" "$out"
python3 - "$layers" "$model" <<'PY'
import json, sys
c = json.load(open("tools/device/qwen3_5_35b_a3b/config.json"))
n = int(sys.argv[1])
c["num_hidden_layers"] = n
c["layer_types"] = c["layer_types"][:n]
json.dump(c, open(sys.argv[2] + "/config.json", "w"), indent=1)
PY
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
[ -n "$flags" ] || timeout 200 "$bin/strata" bench --roofline --model "$model" --load-format dummy --batches "$batches" \
  --prefill 1024 --out "$out/roofline-$layers.md" >"$out/roofline-$layers.log" 2>&1
[ -n "$flags" ] || grep -E "decode|prefill" "$out/roofline-$layers.log" | head -20
engine() {  # engine NAME BATCH FLAGS...
  local name=$1 b=$2
  shift 2
  # shellcheck disable=SC2086  # flags are separate words
  timeout 300 "$bin/strata" bench --model "$model" --load-format dummy --device cuda --num-prompts "$b" \
    --input-len 1024 --output-len 128 $flags "$@" >"$out/engine-$layers-$name$tag.log" 2>&1
  echo "== engine $name$tag (batch $b)"
  grep -E "throughput|TPOT|TTFT|decode-only|engine:|error" "$out/engine-$layers-$name$tag.log"
}
for b in ${batches//,/ }; do engine "b$b-greedy" "$b" --temperature 0; done
engine b256-sampled 256 --temperature 1 --top-p 0.9 --top-k 50
# Every prompt prefilled in the first step, so that the decode steps all run the whole batch.
for b in ${batches//,/ }; do
  engine "b$b-aligned-greedy" "$b" --temperature 0 --max-num-batched-tokens $((b * 1024)) --gpu-memory-utilization 0.5
done
for b in ${batches//,/ }; do
  engine "b$b-aligned-sampled" "$b" --temperature 1 --top-p 0.9 --top-k 50 --max-num-batched-tokens $((b * 1024)) \
    --gpu-memory-utilization 0.5
done
