#!/usr/bin/env bash
# An A/B of two strata builds on NVFP4 experts (issue 19, docs/plans/fp4_kernels.md): .dev/devbin_main.tar.xz
# (tools/device/pack.sh of main) against .dev/devbin_v.tar.xz (STRATA_DEVBIN=.dev/devbin_v.tar.xz
# tools/device/pack.sh --no-build after `git apply docs/plans/fp4_moe_variants.patch` and a build):
# (1) bench --roofline batch 1 and prefill 2k / 4k / 8k, 20 layers of the NVFP4 35B-A3B config, main,
# v, main, v; (2) the variant's `CudaMoeFp4.*`; (3) ncu of main's batch-1 MoE GEMVs, NVFP4 and bf16 (4 layers).
# Carry both archives; results in $OUT/logs.tgz.
set -uo pipefail
S=$SECONDS
O=/tmp/o; rm -rf $O; mkdir -p $O /tmp/main /tmp/v
snap() { tar czf "$OUT/logs.tgz" -C /tmp o 2>/dev/null; }
tar xJf .dev/devbin_main.tar.xz -C /tmp/main; tar xJf .dev/devbin_v.tar.xz -C /tmp/v
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
[ -e /work/main ] || { mkdir -p /work && ln -s "$(pwd -P)" /work/main; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
python3 - <<'PY'
import json, os
for f, n in [("", 4), ("_nvfp4", 4), ("_nvfp4", 20)]:
    c = json.load(open(f"tools/device/qwen3_5_35b_a3b{f}/config.json"))
    c["num_hidden_layers"] = n; c["layer_types"] = c["layer_types"][:n]
    d = f"/tmp/m{f}_{n}"; os.makedirs(d, exist_ok=True); json.dump(c, open(d + "/config.json", "w"), indent=1)
PY
for b in main v main v; do
  echo "== roofline $b ($SECONDS s)"
  timeout 60 /tmp/$b/devbin/strata bench --roofline --model /tmp/m_nvfp4_20 --load-format dummy --batches 1 --steps 4 \
    --prefill 2048,4096,8192 >> $O/roof_$b.log 2>&1; echo "rc $?"
  grep -E "^(decode|prefill) " $O/roof_$b.log | tail -4; snap
done
echo "== V tests ($SECONDS s)"
timeout 150 /tmp/v/devbin/strata_cuda_tests --gtest_filter='CudaMoeFp4.*' > $O/tests_v.log 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|OK \]|Failure|error" $O/tests_v.log | head -20; snap
command -v ncu >/dev/null || { echo "no ncu"; exit 0; }
for f in _nvfp4 ""; do
  [ $((SECONDS - S)) -lt 420 ] || break
  echo "== ncu m$f ($SECONDS s)"
  timeout 80 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats \
    -k regex:"gate_up_gemv|down_combine" -s 8 -c 2 \
    /tmp/main/devbin/strata bench --roofline --model /tmp/m${f}_4 --load-format dummy --batches 1 --steps 2 --prefill "" > $O/ncu$f.log 2>&1
  echo "rc $?"
  grep -E "gate_up_gemv|down_combine|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|Executed Ipc A|No Eligible|Warp Cycles Per Issued" $O/ncu$f.log | cut -c1-160 | head -40
  snap
done
echo "done at $SECONDS s"; snap
