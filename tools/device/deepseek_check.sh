#!/usr/bin/env bash
# One device call for DeepSeek-V4 on CUDA (issue 18), after tools/device/pack.sh and
# `tools/device/slim_tree.sh --deepseek` (which keeps the DeepSeek-V4 fixtures and leaves the
# default model out): the family's op tests against the CPU at the Flash shapes, then its
# fixtures through the CUDA model in every mode. Logs go to $OUT (logs.tgz holds them all).
set -uo pipefail
# shellcheck source=tools/device/devbin_env.sh
source tools/device/devbin_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
timeout 300 "$bin/strata_cuda_tests" --gtest_filter='CudaDeepseekV4*' >"$out/ops.log" 2>&1
echo "op tests rc $?"
grep -E "^\[  (FAILED|PASSED)|Failure|rel err|ids differ" "$out/ops.log" | head -60
timeout 300 "$bin/strata_cuda_tests" --gtest_filter='*CudaGoldenDeepseekV4*' >"$out/golden.log" 2>&1
echo "golden tests rc $?"
grep -E "^\[  (FAILED|PASSED)|Failure|max\|d\||greedy" "$out/golden.log" | head -40
(cd "$out" && tar czf logs.tgz ./*.log)
