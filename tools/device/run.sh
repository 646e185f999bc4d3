#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .dev/devbin.tar.xz carried along (made by
# tools/device/pack.sh). Usage: bash tools/device/run.sh tests|golden|bench|all [extra bench flags]
# Logs and results go to $OUT (the device tool brings them back).
set -uo pipefail
mode=${1:-all}
shift || true
out=${OUT:-/tmp/strata-out}
mkdir -p "$out" /tmp/strata-dev
tar xJf "${STRATA_DEVBIN:-.dev/devbin.tar.xz}" -C /tmp/strata-dev
bin=/tmp/strata-dev/devbin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# The binaries were configured in /work/main and find the test fixtures through that path.
if [ "$(pwd -P)" != /work/main ] && [ ! -e /work/main ]; then mkdir -p /work && ln -s "$(pwd -P)" /work/main; fi
ldd "$bin/strata_cuda_tests" | grep "not found" && echo "run.sh: missing shared libraries" >&2
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
status=0
if [ "$mode" = tests ] || [ "$mode" = all ]; then
  timeout 150 "$bin/strata_cuda_tests" --gtest_filter='CudaDense*:CudaMixer*' 2>&1 | tee "$out/op_tests.log" | tail -40
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$mode" = golden ] || [ "$mode" = all ]; then
  timeout 150 "$bin/strata_cuda_tests" --gtest_filter='Fixtures/CudaGolden*' 2>&1 | tee "$out/golden.log" | \
    grep -E "cuda |OK|FAILED|PASSED|Failure|expected|Which|max" | head -80
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  timeout 240 "$bin/strata" bench --roofline --model tools/device/qwen3_5_35b_a3b --load-format dummy \
    --out "$out/roofline.md" "$@" 2>&1 | tee "$out/bench.log" | tail -70
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit $status
