#!/usr/bin/env bash
# MTP speculative decoding on CUDA against plain decoding, on the GPU machine with the devbin of
# tools/device/pack.sh (unpacked here when run.sh has not): `strata bench` on the bundled default
# model (its trained one-layer MTP head; weights unpacked from weights.tar.xz when missing), greedy, random
# 32-token prompts, 256 output tokens at batch 1 and 128 at batch 8, eos ignored, with K = 0
# (no speculation) and each K given. Prints per run the TPOT, the decode-only step time, the
# acceptance line and the tokens per target forward; logs go to $OUT/spec-bK-kN.log.
# Usage: bash tools/device/spec_bench.sh [KS] [BATCHES] [ENGINE FLAGS]   (defaults 1,2,3 and 1,8;
# e.g. --temperature 1 in the flags for sampled runs; the flags replace --temperature 0)
set -uo pipefail
out=${OUT:-/tmp/strata-out}
bin=${STRATA_BIN:-/tmp/strata-dev/devbin}
ks=${1:-1,2,3}
batches=${2:-1,8}
flags=${3:---temperature 0}
model=models/default
mkdir -p "$out"
if [ ! -x "$bin/strata" ]; then  # not unpacked by run.sh yet
  mkdir -p /tmp/strata-dev && tar xJf "${STRATA_DEVBIN:-.dev/devbin.tar.xz}" -C /tmp/strata-dev || exit 1
fi
[ -e "$model/model.safetensors" ] || tar xJf "$model/weights.tar.xz" -C "$model" model.safetensors || exit 1
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for b in ${batches//,/ }; do
  len=$([ "$b" = 1 ] && echo 256 || echo 128)
  for k in 0 ${ks//,/ }; do
    spec=()
    [ "$k" = 0 ] || spec=(--speculative-config "{\"method\": \"mtp\", \"num_speculative_tokens\": $k}")
    log="$out/spec-b$b-k$k.log"
    # shellcheck disable=SC2086  # flags are separate words
    timeout 300 "$bin/strata" bench --model "$model" --device cuda --num-prompts "$b" --input-len 32 \
      --output-len "$len" --max-model-len 512 $flags "${spec[@]}" >"$log" 2>&1
    echo "== batch $b, K = $k"
    grep -E "throughput|TPOT|decode-only|speculative|tokens per target|error|Error" "$log"
  done
done
