#!/usr/bin/env bash
# The GPU call of step S5 of docs/plans/fp4_kernels.md (NVFP4 / MXFP4 experts kept compressed):
# makes the NVFP4 golden fixture (tools/fixtures/make_fixtures_qwen3_5_nvfp4.py, its bytes checked
# against `strata quantize --format nvfp4` of the same source) and puts it in tests/fixtures, and
# the MXFP4 one the same way at the same time (both on the CPU); runs
# the FP4 MoE op tests, the MoE and FP8 tests and the CUDA goldens (the new fixture among them);
# then `bench --roofline` bf16 / NVFP4 / MXFP4 in one run (the 35B-A3B shape, 40 layers on an
# H200, 20 on an H100) and the engine at batch 1, bf16 against NVFP4. Only if the FP4 op tests
# pass does it time FP4. Everything lands in $OUT/logs.tgz (the fixtures in o/fx_nvfp4, o/fx_mxfp4).
# Here first: tools/device/pack.sh, tools/device/slim_tree.sh
# (and remove models/default/weights.tar.xz and models/default/reference for room); then, with the
# `device` tool carrying .dev/devbin.tar.xz: bash tools/device/fp4_check.sh
set -uo pipefail
S=$SECONDS
O=/tmp/o; mkdir -p $O /tmp/strata-dev /tmp/fla
snap() { tar czf "$OUT/logs.tgz" -C /tmp o 2>/dev/null; }
tar xJf .dev/devbin.tar.xz -C /tmp/strata-dev
bin=/tmp/strata-dev/devbin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
[ -e /work/main ] || { mkdir -p /work && ln -s "$(pwd -P)" /work/main; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $O/gpu.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
L=20; [ "$mem" -gt 100000 ] && L=40
python3 - $L <<'PY'
import json, os, sys
n = int(sys.argv[1])
for f in ["", "_fp8", "_nvfp4", "_mxfp4"]:
    c = json.load(open(f"tools/device/qwen3_5_35b_a3b{f}/config.json"))
    c["num_hidden_layers"] = n; c["layer_types"] = c["layer_types"][:n]
    os.makedirs(f"/tmp/m{f}", exist_ok=True); json.dump(c, open(f"/tmp/m{f}/config.json", "w"), indent=1)
PY
fixture() {  # fixture FORMAT: make it, check its bytes against strata quantize's, put it in tests/fixtures
  local f=$1 mk=tools/fixtures/make_fixtures_qwen3_5_nvfp4.py
  timeout 200 python3 $mk $O/fx_$f --format $f --bf16-source /tmp/src_$f > $O/fx_$f.log 2>&1; echo "$f fixture rc $?"
  tail -3 $O/fx_$f.log
  [ -f $O/fx_$f/model.safetensors ] || return
  timeout 30 $bin/strata quantize --model /tmp/src_$f --out /tmp/q_$f --format $f > $O/fxq_$f.log 2>&1
  timeout 60 python3 $mk $O/fx_$f --format $f --check-against /tmp/q_$f >> $O/fxq_$f.log 2>&1; echo "$f check rc $?"
  tail -2 $O/fxq_$f.log
  rm -rf tests/fixtures/qwen3_5_moe_${f}_tiny && cp -r $O/fx_$f tests/fixtures/qwen3_5_moe_${f}_tiny
  python3 -c "import json; r=json.load(open('$O/fx_$f/reference.json')); print({k: r[k] for k in r if k in ('${f}_matrices','router_min_gap','logits_std','seed')}, 'margin', min(r['greedy_margins']))"
}
echo "layers $L; == fixtures ($SECONDS s)"
fixture mxfp4 > $O/mxfp4_fixture.txt 2>&1 &
fixture nvfp4
wait; cat $O/mxfp4_fixture.txt
snap
echo "== tests ($SECONDS s)"
timeout 300 $bin/strata_cuda_tests --gtest_filter='CudaMoeFp4.*:CudaMixer.Moe*:CudaMoeFp8.*:Fixtures/CudaGolden.*:CudaGoldenFp8*:CudaGoldenNvfp4*:CudaGoldenMxfp4*' > $O/tests.log 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Which is|Expected|mismatch|nvfp4" $O/tests.log | head -40; snap
fp4ok=1; grep -q "FAILED  \] CudaMoeFp4" $O/tests.log && fp4ok=0
r() {  # r NAME MODEL FLAGS...
  local name=$1 m=$2; shift 2
  [ $((SECONDS - S)) -lt 440 ] || { echo "skip $name (time)"; return; }
  echo "== roofline $name ($SECONDS s)"
  timeout 90 $bin/strata bench --roofline --model $m --load-format dummy "$@" > $O/roof_$name.log 2>&1; echo "rc $?"
  grep -E "^(decode|prefill) |rror|fail" $O/roof_$name.log | head -8; snap
}
R="--batches 1,64,256 --prefill 2048,8192 --steps 8"
r bf16 /tmp/m $R
if [ $fp4ok = 1 ]; then r nvfp4 /tmp/m_nvfp4 $R; r mxfp4 /tmp/m_mxfp4 $R; fi
e() {  # e NAME MODEL FLAGS...
  local n=$1 m=$2; shift 2
  [ $((SECONDS - S)) -lt 500 ] || { echo "skip engine $n (time)"; return; }
  echo "== engine $n ($SECONDS s)"
  timeout 45 $bin/strata bench --model $m --load-format dummy --device cuda --temperature 0 "$@" > $O/engine_$n.log 2>&1
  echo "rc $?"; grep -E "throughput|TTFT|TPOT|error" $O/engine_$n.log; snap
}
if [ $fp4ok = 1 ]; then
  e b1_bf16 /tmp/m --num-prompts 1 --input-len 1024 --output-len 256
  e b1_nvfp4 /tmp/m_nvfp4 --num-prompts 1 --input-len 1024 --output-len 256
fi
echo "done at $SECONDS s"; snap
