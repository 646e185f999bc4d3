#!/usr/bin/env bash
# Runs on the GPU machine: strata's prefill ops against their public peers on the same shapes in
# one run (the 40-layer Qwen3.5-35B-A3B dummy, prefill of 2048 and 8192 tokens), printing
# $OUT/peer_table.md. FLA comes from a snapshot of its repository, carried as FLA_TAR (default
# .dev/fla.tar.xz, made here by `git -C <flash-linear-attention clone> archive HEAD fla | xz`).
# Usage: bash tools/device/peer_bench.sh [FLA_TAR] [TOKENS]   (needs .dev/devbin.tar.xz)
set -uo pipefail
out=${OUT:-/tmp/strata-out}
fla=${1:-.dev/fla.tar.xz}
tokens=${2:-2048,8192}
mkdir -p "$out" /tmp/strata-dev /tmp/fla
tar xJf "${STRATA_DEVBIN:-.dev/devbin.tar.xz}" -C /tmp/strata-dev
tar xJf "$fla" -C /tmp/fla
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
/tmp/strata-dev/devbin/strata bench --roofline --model tools/device/qwen3_5_35b_a3b --load-format dummy \
  --batches 256 --prefill "$tokens" --steps 8 --out "$out/roofline.md" >"$out/bench.log" 2>&1 || echo "strata bench failed"
PYTHONPATH=/tmp/fla PYTHONUNBUFFERED=1 python3 tools/device/peer_bench.py --tokens "$tokens" --out "$out/peers.json" \
  >"$out/peers.log" 2>&1 || { echo "peer_bench.py failed:"; tail -20 "$out/peers.log"; }
python3 tools/device/peer_table.py "$out/bench.log" "$out/peers.json" | tee "$out/peer_table.md"
