#!/usr/bin/env bash
# Whether the FP8 fixture's CUDA error against HF is the FP8 kernels' or bf16's: on the GPU
# machine, after tools/device/pack.sh (devbin unpacked in /tmp/strata-dev), writes the fixture's
# weights dequantised to f32 as a plain checkpoint (/tmp/fp8deq), runs `strata logits` on both
# folders on CUDA (full and stepwise) and on the CPU, and prints each one's max, rms and median
# per-position max error against the fixture's HF logits, with the worst positions
# (tests/cuda/cuda_golden_test.cpp quotes its result). Logs to $OUT/fp8_diag.log when run so.
# Usage: bash tools/device/fp8_fixture_bf16_check.sh
set -uo pipefail
out=${OUT:-/tmp/strata-out}; mkdir -p "$out"
bin=/tmp/strata-dev/devbin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fx=tests/fixtures/qwen3_5_moe_fp8_tiny
deq=/tmp/fp8deq; mkdir -p $deq
python3 - $fx $deq <<'PY'
import json, sys, torch
from safetensors.torch import load_file, save_file
src, dst = sys.argv[1], sys.argv[2]
t = load_file(src + "/model.safetensors")
o = {}
for k, v in t.items():
    if k.endswith("_scale_inv"): continue
    if v.dtype == torch.float8_e4m3fn:
        s = t[k + "_scale_inv"]
        n, kk = v.shape
        sc = s.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :kk]
        o[k] = (v.to(torch.float32) * sc).contiguous()
    else:
        o[k] = v.to(torch.float32)
save_file(o, dst + "/model.safetensors")
c = json.load(open(src + "/config.json")); c.pop("quantization_config", None)
json.dump(c, open(dst + "/config.json", "w"), indent=1)
PY
ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$fx/reference.json'))['prompt_ids'])))")
for m in full stepwise; do
  $bin/strata logits --model $fx --ids $ids --out /tmp/fp8_cuda_$m.npy --mode $m --device cuda
  $bin/strata logits --model $deq --ids $ids --out /tmp/deq_cuda_$m.npy --mode $m --device cuda
done
$bin/strata logits --model $deq --ids $ids --out /tmp/deq_cpu.npy --device cpu
$bin/strata logits --model $fx --ids $ids --out /tmp/fp8_cpu.npy --device cpu
python3 - $fx <<'PY'
import numpy as np, sys
ref = np.load(sys.argv[1] + "/logits.npy").astype(np.float64)
ref = ref.reshape(-1, ref.shape[-1])
for name in ["fp8_cpu", "deq_cpu", "fp8_cuda_full", "deq_cuda_full", "fp8_cuda_stepwise", "deq_cuda_stepwise"]:
    x = np.load(f"/tmp/{name}.npy").astype(np.float64).reshape(ref.shape)
    d = np.abs(x - ref); pm = d.max(1)
    worst = np.argsort(-pm)[:5]
    print(f"{name:20s} max {d.max():.4f} rms {np.sqrt((d**2).mean()):.4f} median-pos-max {np.median(pm):.4f} worst positions {list(worst)} {[round(pm[i],3) for i in worst]}")
a = np.load("/tmp/fp8_cuda_full.npy").reshape(ref.shape); b = np.load("/tmp/deq_cuda_full.npy").reshape(ref.shape)
print("fp8 vs deq cuda full: max", np.abs(a - b).max())
PY
