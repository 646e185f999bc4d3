#!/usr/bin/env bash
# Runs on the GPU machine: Nsight Compute's speed-of-light, memory, warp-stall and occupancy
# sections for N decode kernels (batch 1, Qwen3.5-35B-A3B dummy) whose names match REGEX, after
# skipping SKIP matching launches. Usage: bash tools/device/profile_kernels.sh REGEX [SKIP] [N]
set -euo pipefail
regex=$1
skip=${2:-500}
count=${3:-40}
out=${OUT:-/tmp/strata-out}
mkdir -p "$out" /tmp/strata-dev
tar xJf .dev/devbin.tar.xz -C /tmp/strata-dev
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
/usr/local/cuda/bin/ncu --kernel-name "regex:$regex" --launch-skip "$skip" --launch-count "$count" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
  --section Occupancy --clock-control none /tmp/strata-dev/devbin/strata bench --roofline \
  --model tools/device/qwen3_5_35b_a3b --load-format dummy --batches 1 --prefill "" --no-breakdown --steps 2 \
  >"$out/ncu_sections.txt" 2>&1
grep -c "gpu__time_duration\|Duration" "$out/ncu_sections.txt" || true
