#!/usr/bin/env bash
# One device call for what a session built, after tools/device/pack.sh, in order of need, each
# step started only while its time limit fits before SECONDS (default 540) have passed:
#   1. the new CUDA tests: FP8 routed experts (CudaMoeFp8, the FP8 fixture through the golden
#      suite), the multi-token GDN step, verify and draft-head graphs, CUDA speculation;
#   2. `strata bench --roofline` of the 40-layer Qwen3.5-35B-A3B shape with bf16 and with FP8
#      experts (tools/device/qwen3_5_35b_a3b_fp8: the published quantization_config), decode at
#      batches 1, 16, 64, 256 with verify steps of K = 3 (graphs and eager) at 1 and 16;
#   3. MTP speculation on the default model at batch 1, K = 0, 1, 3 (tools/device/spec_bench.sh);
#   4. every CUDA test; 5. `strata bench` (the engine) bf16 and FP8 at batch 1 and 64.
# Logs go to $OUT (logs.tgz holds them all).
# Usage: bash tools/device/session_check.sh [SECONDS]
set -uo pipefail
deadline=$((SECONDS + ${1:-540}))
# shellcheck source=tools/device/devbin_env.sh
source tools/device/devbin_env.sh
left() { echo $((deadline - SECONDS)); }
step() {  # step NAME LIMIT COMMAND...: runs when LIMIT seconds are left, within them
  local name=$1 limit=$2
  shift 2
  if [ "$(left)" -lt "$limit" ]; then echo "== $name: skipped ($(left) s left)"; return; fi
  echo "== $name"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "   rc $? after $SECONDS s"
}
# The 40-layer bf16 shape needs about 70 GB of weights: on a GPU of less than 100 GB (an H100) both
# shapes are cut to their first 20 layers, the same for both, so that the ratio still holds.
bf16=tools/device/qwen3_5_35b_a3b
fp8=tools/device/qwen3_5_35b_a3b_fp8
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if [ "${mib:-0}" -lt 100000 ]; then
  for m in bf16 fp8; do
    dir=/tmp/strata-$m-20
    mkdir -p $dir
    python3 - "${!m}/config.json" $dir/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_hidden_layers"] = 20
c["layer_types"] = c["layer_types"][:20]
q = c.get("quantization_config")
if q:
    q["modules_to_not_convert"] = [n for n in q["modules_to_not_convert"]
                                   if not n.startswith("model.layers.") or int(n.split(".")[2]) < 20]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
    printf -v "$m" %s $dir
  done
  echo "== less than 100 GB of GPU memory: both shapes cut to 20 layers"
fi
step new_tests 150 "$bin/strata_cuda_tests" \
  --gtest_filter='CudaMoeFp8*:*Fp8*:Fixtures/CudaGolden.*/3:*SeveralTokens*:*PerTokenStates*:CudaDefaultModel.*Graphs*:*Speculat*'
grep -E "^\[  (FAILED|PASSED) |fp8 fixture|qwen3_5_moe_fp8_tiny|verify graphs|speculation|Failure" "$out/new_tests.log" | head -40
step roofline_bf16 150 "$bin/strata" bench --roofline --model $bf16 --load-format dummy \
  --batches 1,16,64,256 --prefill 8192 --steps 16 --verify 3 --out "$out/roofline_bf16.md"
step roofline_fp8 150 "$bin/strata" bench --roofline --model $fp8 --load-format dummy \
  --batches 1,16,64,256 --prefill 8192 --steps 16 --verify 3 --out "$out/roofline_fp8.md"
grep -E "^(decode|verify|prefill)|GB of weights" "$out"/roofline_*.log | head -40
step spec_bench 120 bash tools/device/spec_bench.sh 1,3 1
grep -E "==|TPOT|decode-only|speculative:|error" "$out/spec_bench.log" | head -30
step cuda_tests 300 "$bin/strata_cuda_tests"
grep -E "^\[  (FAILED|PASSED) |tests ran" "$out/cuda_tests.log" | head -30
for m in bf16 fp8; do
  for b in 1 64; do
    step "engine_${m}_b$b" 120 "$bin/strata" bench --model "${!m}" --load-format dummy --device cuda \
      --num-prompts $b --input-len 1024 --output-len 128 --temperature 0
    grep -E "throughput|TPOT|decode-only|error" "$out/engine_${m}_b$b.log"
  done
done
tar czf "$out/logs.tgz" -C "$out" --exclude logs.tgz . 2>/dev/null
