#!/usr/bin/env bash
# One device call for the draft chain (engine_spec_chain.cpp), after tools/device/pack.sh: its
# CUDA tests (the chain's ops against the CPU, head graphs with fed tokens and shifted positions,
# CUDA speculation), MTP on the default model at batch 1 with K = 0..3 (tools/device/spec_bench.sh),
# then every other CUDA test (but the DeepSeek-V4 goldens, whose fixtures slim_tree.sh leaves out:
# tools/device/deepseek_check.sh runs them). Logs go to $OUT (logs.tgz holds them all).
# Usage: bash tools/device/chain_check.sh [KS] [BATCHES]   (defaults 1,2,3 and 1)
set -uo pipefail
# shellcheck source=tools/device/devbin_env.sh
source tools/device/devbin_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
chain='CudaSpecChain.*:CudaDefaultModel.*Graphs*:CudaSpeculative.*'
timeout 200 "$bin/strata_cuda_tests" --gtest_filter="$chain" >"$out/chain_tests.log" 2>&1
echo "chain tests rc $?"
grep -E "^\[  (FAILED|PASSED)|Failure|chain|CUDA speculation|head graphs" "$out/chain_tests.log" | head -30
STRATA_BIN=$bin timeout 200 bash tools/device/spec_bench.sh "${1:-1,2,3}" "${2:-1}" | tee "$out/spec_bench.log"
timeout 200 "$bin/strata_cuda_tests" --gtest_filter="-$chain:*CudaGoldenDeepseekV4*" >"$out/other_tests.log" 2>&1
echo "other tests rc $?"
grep -E "^\[  (FAILED|PASSED)|^\[  SKIPPED|tests ran" "$out/other_tests.log" | head
(cd "$out" && tar czf logs.tgz ./*.log)
