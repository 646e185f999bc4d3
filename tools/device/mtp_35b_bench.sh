#!/usr/bin/env bash
# MTP speculative decoding on the Qwen3.5-35B-A3B shape (issue 17), on the GPU machine with the
# devbin of tools/device/pack.sh unpacked in /tmp/strata-dev: `strata bench` (the engine) with
# dummy weights (the MTP head included: mtp_num_hidden_layers 1), greedy, 1024-token prompts, at
# batch 1 with K = 0, 1, 3 and at batch 16 with none, fixed K = 3 and dynamic K = 3. Random weights
# accept almost nothing, so these numbers are the cost of speculating: a step's time against a
# decode step's, per verify and head forward. MODEL defaults to the 40-layer shape; on a GPU of
# less than 100 GB give a cut one (tools/device/session_check.sh makes 20-layer configs).
# Usage: bash tools/device/mtp_35b_bench.sh [MODEL_DIR]   (logs in $OUT/mtp35-*.log)
set -uo pipefail
out=${OUT:-/tmp/strata-out}
bin=${STRATA_BIN:-/tmp/strata-dev/devbin}
model=${1:-tools/device/qwen3_5_35b_a3b}
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
run() {  # run NAME BATCH SPEC_JSON
  local name=$1 b=$2 spec=$3 flags=()
  [ -n "$spec" ] && flags=(--speculative-config "$spec")
  timeout 150 "$bin/strata" bench --model "$model" --load-format dummy --device cuda --num-prompts "$b" \
    --input-len 1024 --output-len 64 --temperature 0 "${flags[@]}" >"$out/mtp35-$name.log" 2>&1
  echo "== $name (batch $b) rc $?"
  grep -E "TPOT|decode-only|speculative|tokens per target|error|Error" "$out/mtp35-$name.log"
}
run b1-k0 1 ""
run b1-k1 1 '{"method": "mtp", "num_speculative_tokens": 1}'
run b1-k3 1 '{"method": "mtp", "num_speculative_tokens": 3}'
run b16-k0 16 ""
run b16-k3 16 '{"method": "mtp", "num_speculative_tokens": 3}'
run b16-dyn3 16 '{"method": "mtp", "num_speculative_tokens": 3, "draft_length": "dynamic"}'
