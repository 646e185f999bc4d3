#!/usr/bin/env bash
# One device call for FP8 routed experts (issue 19), after tools/device/pack.sh: every CUDA test
# (the FP8 MoE kernels and the FP8 fixture through the golden suite included), then
# `strata bench --roofline` of the 40-layer Qwen3.5-35B-A3B shape with bf16 and with FP8 experts
# (tools/device/qwen3_5_35b_a3b_fp8: the published quantization_config) in the same call, and
# `strata bench` (the engine) on both at batch 1 and 64. Stops starting new steps after
# SECONDS (default 540). Logs go to $OUT.
# Usage: bash tools/device/fp8_check.sh [SECONDS]
set -uo pipefail
deadline=$((SECONDS + ${1:-540}))
out=${OUT:-/tmp/strata-out}
mkdir -p "$out" /tmp/strata-dev
tar xJf .dev/devbin.tar.xz -C /tmp/strata-dev
bin=/tmp/strata-dev/devbin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if [ "$(pwd -P)" != /work/main ] && [ ! -e /work/main ]; then mkdir -p /work && ln -s "$(pwd -P)" /work/main; fi
[ -e models/default/model.safetensors ] || tar xJf models/default/weights.tar.xz -C models/default model.safetensors
left() { echo $((deadline - SECONDS)); }
step() {  # step NAME LIMIT COMMAND...: runs when LIMIT seconds are left, within them
  local name=$1 limit=$2
  shift 2
  if [ "$(left)" -lt "$limit" ]; then echo "== $name: skipped ($(left) s left)"; return; fi
  echo "== $name"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "   rc $? after $SECONDS s"
}
step fp8_tests 120 "$bin/strata_cuda_tests" --gtest_filter='CudaMoeFp8*:*Fp8*:Fixtures/CudaGolden.*/3'
grep -E "^\[  (FAILED|PASSED) |fp8 fixture|qwen3_5_moe_fp8_tiny" "$out/fp8_tests.log" | head -30
step roofline_bf16 150 "$bin/strata" bench --roofline --model tools/device/qwen3_5_35b_a3b --load-format dummy \
  --batches 1,16,64,256 --prefill 8192 --steps 16 --out "$out/roofline_bf16.md"
step roofline_fp8 150 "$bin/strata" bench --roofline --model tools/device/qwen3_5_35b_a3b_fp8 --load-format dummy \
  --batches 1,16,64,256 --prefill 8192 --steps 16 --out "$out/roofline_fp8.md"
grep -E "decode|prefill|GB|weights" "$out"/roofline_*.log | head -40
for m in qwen3_5_35b_a3b qwen3_5_35b_a3b_fp8; do
  for b in 1 64; do
    step "engine_${m}_b$b" 120 "$bin/strata" bench --model tools/device/$m --load-format dummy --device cuda \
      --num-prompts $b --input-len 1024 --output-len 128 --temperature 0
    grep -E "throughput|TPOT|decode-only|error" "$out/engine_${m}_b$b.log"
  done
done
step cuda_tests 300 "$bin/strata_cuda_tests"
grep -E "^\[  (FAILED|PASSED) |tests ran" "$out/cuda_tests.log" | head -30
tar czf "$out/logs.tgz" -C "$out" --exclude logs.tgz . 2>/dev/null
