#!/usr/bin/env bash
# The FP8 KV cache (--kv-cache-dtype fp8) on the GPU machine, after tools/device/run.sh has
# unpacked the devbin (`bash tools/device/run.sh none`): its CUDA tests (the op against the CPU,
# the fixtures in every mode, the engine with graphs), then `strata bench --roofline` on the
# 40-layer Qwen3.5-35B-A3B shape (dummy weights) with bf16 pages and with FP8 pages at long
# context (decode batches 1 and 16 over CONTEXT cached tokens, default 65536) and an 8k prefill.
# Logs go to $OUT. Usage: bash tools/device/kv_fp8_bench.sh [CONTEXT]
set -uo pipefail
out=${OUT:-/tmp/strata-out}
bin=/tmp/strata-dev/devbin
context=${1:-65536}
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
timeout 400 "$bin/strata_cuda_tests" --gtest_filter='CudaKvFp8*:CudaEngineFp8Kv*:CudaMixer.PagedAttention*' 2>&1 |
  tee "$out/kv_fp8_tests.log" | grep -E "^\[  (FAILED|PASSED) |rel err|fp8 KV|cuda engine" | tail -60
for kv in auto fp8; do
  timeout 300 "$bin/strata" bench --roofline --model tools/device/qwen3_5_35b_a3b --load-format dummy \
    --kv-cache-dtype "$kv" --batches 1,16 --context "$context" --steps 8 --prefill 8192 --no-breakdown \
    --out "$out/roofline_kv_$kv.md" 2>&1 | tee "$out/bench_kv_$kv.log" | tail -12
done
