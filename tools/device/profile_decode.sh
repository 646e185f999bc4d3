#!/usr/bin/env bash
# Runs on the GPU machine: per-kernel times of one batch-B decode step of the Qwen3.5-35B-A3B
# dummy model under Nsight Compute (each kernel timed alone, clocks and caches left as they are).
# Usage: bash tools/device/profile_decode.sh [BATCH]   (needs .dev/devbin.tar.xz, see pack.sh)
set -euo pipefail
batch=${1:-1}
out=${OUT:-/tmp/strata-out}
mkdir -p "$out" /tmp/strata-dev
tar xJf .dev/devbin.tar.xz -C /tmp/strata-dev
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
/usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
  --log-file /tmp/ncu_b$batch.csv /tmp/strata-dev/devbin/strata bench --roofline --model tools/device/qwen3_5_35b_a3b \
  --load-format dummy --batches "$batch" --prefill "" --no-breakdown --steps 2 >/dev/null 2>&1
python3 tools/device/kernel_times.py /tmp/ncu_b$batch.csv | tee "$out/kernels_b$batch.md"
