#!/usr/bin/env bash
# Issue 17's batch table in one device call, after tools/device/pack.sh: the CUDA speculation
# tests, then `strata bench` (the engine, greedy, TPOT) without MTP, with a fixed K = 3 and with
# dynamic K <= 3:
#   - the Qwen3.5-35B-A3B shape cut to 20 layers (fits an H100), dummy weights (nothing is
#     accepted: speculation's worst case), 1,024-token prompts, 256 tokens, at batch 16 and 64;
#   - the default model (its trained MTP head: real acceptance), 32-token prompts, 2,000 tokens
#     at batch 1, 512 at 16 and 64.
# Each run starts only while half its time limit is left before SECONDS (default 560) have passed.
# Prints each run's TPOT and speculation counters; logs in $OUT/logs.tgz.
# Usage: bash tools/device/dynamic_k_bench.sh [SECONDS] [WHAT]   (WHAT: all (default); 35b or
# default: that model's runs alone, no tests)
set -uo pipefail
deadline=$((SECONDS + ${1:-560}))
what=${2:-all}
# shellcheck source=tools/device/devbin_env.sh
source tools/device/devbin_env.sh
logs=/tmp/dynk-logs
mkdir -p $logs
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $logs/gpu.txt
fixed='{"method": "mtp", "num_speculative_tokens": 3}'
dynamic='{"method": "mtp", "num_speculative_tokens": 3, "draft_length": "dynamic"}'
bench() {  # bench NAME LIMIT SPEC_JSON MODEL_FLAGS...: runs when half its LIMIT is left, within it
  local name=$1 limit=$2 spec=$3
  shift 3
  local flags=()
  [ -n "$spec" ] && flags=(--speculative-config "$spec")
  if [ $((deadline - SECONDS)) -lt $((limit / 2)) ]; then echo "== $name: skipped"; return; fi
  limit=$((limit < deadline - SECONDS ? limit : deadline - SECONDS))
  timeout "$limit" "$bin/strata" bench --device cuda --temperature 0 "$@" "${flags[@]}" >$logs/$name.log 2>&1
  echo "== $name rc $? ($SECONDS s)"
  grep -E "TPOT|speculative:|head forward|overlapped|measured cost|error|Error" $logs/$name.log | cut -c1-400
}
if [ "$what" = all ] && [ $((deadline - SECONDS)) -gt 150 ]; then
  timeout 150 "$bin/strata_cuda_tests" --gtest_filter='CudaSpec*:CudaEngineGraphs*:CudaEngineAsync*' >$logs/tests.log 2>&1
  echo "== CUDA speculation tests rc $?"
  grep -E "^\[  (PASSED|FAILED) |CUDA dynamic K|Failure" $logs/tests.log | cut -c1-400
fi
if [ "$what" != default ]; then
  m20=/tmp/strata-35b-20
  mkdir -p $m20
  python3 - tools/device/qwen3_5_35b_a3b/config.json $m20/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_hidden_layers"] = 20
c["layer_types"] = c["layer_types"][:20]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
  big=(--model $m20 --load-format dummy --input-len 1024 --output-len 256)
  for b in 16 64; do
    bench 35b-b$b-none 100 "" "${big[@]}" --num-prompts $b
    bench 35b-b$b-dyn3 110 "$dynamic" "${big[@]}" --num-prompts $b
  done
fi
if [ "$what" != 35b ]; then
  small=(--model models/default --input-len 32 --max-model-len 2100)
  for b in 1 16 64; do
    len=$([ $b = 1 ] && echo 2000 || echo 512)
    bench default-b$b-none 60 "" "${small[@]}" --num-prompts $b --output-len $len
    bench default-b$b-k3 60 "$fixed" "${small[@]}" --num-prompts $b --output-len $len
    bench default-b$b-dyn3 60 "$dynamic" "${small[@]}" --num-prompts $b --output-len $len
  done
fi
tar czf "$out/logs.tgz" -C $logs .
