#!/usr/bin/env bash
# Trains strata's default model in ONE device call (the GPU machine; see tools/train/README.md):
# tokenizer -> tokenised corpus -> training under a wall-clock limit -> held-out evaluation ->
# export (HF reload check, fp32 reference) -> $OUT/default.tgz (split into 15 MB parts when
# larger) and $OUT/train.log.
#
# usage (repository root, .dev/train/corpus_{train,heldout}.txt.xz and corpus_stats.json
# carried):  bash tools/train/run_on_device.sh [--resume] [--total-s 560] [--reserve-s 120]
#            [-- extra train.py flags]
# --total-s: wall-clock budget of this whole script (the device call is killed at 600 s);
# --reserve-s: seconds kept after training for evaluation, export and packing.
# --resume: reuse the tokenizer, tokens and checkpoint of an earlier call on the same (still
# warm) machine, kept under .dev/ckpt/default (ignored by git, not carried, so it survives);
# with "-- --train-seconds 0" it only evaluates and exports that checkpoint.
set -euo pipefail
START=$(date +%s)
cd "$(dirname "$0")/../.."
RESUME=0
TOTAL_S=560
RESERVE_S=120
while [ $# -gt 0 ]; do
  case "$1" in
    --resume) RESUME=1 ;;
    --total-s) TOTAL_S=$2; shift ;;
    --reserve-s) RESERVE_S=$2; shift ;;
    --) shift; break ;;
    *) echo "run_on_device.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-/tmp/strata-train-out}
WORK=.dev/ckpt/default
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
elapsed() { echo $(( $(date +%s) - START )); }
stage() { echo "=== [$(elapsed)s] $*"; }

main() {
set -eEuo pipefail
trap 'echo "=== FAILED (exit $?) at line $LINENO after $(elapsed)s"' ERR
stage "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c 'import sys, torch, transformers, tokenizers, safetensors, numpy; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "numpy", numpy.__version__)'
nproc
ls -la .dev/train/
for f in corpus_train.txt.xz corpus_heldout.txt.xz; do
  [ -s ".dev/train/$f" ] || { echo "missing .dev/train/$f: carry it (see tools/train/README.md)"; exit 1; }
done

if [ "$RESUME" = 1 ] && [ -s "$WORK/tokenizer_stats.json" ] && [ -s "$WORK/train_ids.npy" ]; then
  stage "tokenizer: reusing $WORK (--resume)"
else
  stage "tokenizer + tokenisation"
  rm -rf "$WORK/tokenizer" "$WORK"/*.npy "$WORK/tokenizer_stats.json"
  timeout 240 python3 tools/train/train_tokenizer.py --corpus-dir .dev/train --work "$WORK"
fi

RESUME_ARGS=()
if [ "$RESUME" = 1 ]; then
  [ -s "$WORK/last.pt" ] || { echo "--resume: no checkpoint $WORK/last.pt on this machine"; exit 1; }
  RESUME_ARGS=(--resume "$WORK/last.pt")
fi
STOP_AT=$(( START + TOTAL_S - RESERVE_S ))
LEFT=$(( START + TOTAL_S - $(date +%s) - 5 ))
[ "$LEFT" -gt $(( RESERVE_S + 60 )) ] || { echo "only ${LEFT}s left before training"; exit 1; }
stage "training until $(( STOP_AT - START ))s, then evaluation and export (process limit ${LEFT}s)"
timeout "$LEFT" python3 tools/train/train.py --work "$WORK" --out "$WORK/default" \
  --stop-at "$STOP_AT" --ckpt "$WORK/last.pt" "${RESUME_ARGS[@]}" "$@"

stage "packing"
rm -f "$OUT"/default.tgz*
tar -czf "$OUT/default.tgz" -C "$WORK" default
cp "$WORK/default/README.md" "$OUT/README.md"
cp "$WORK/default/metrics.json" "$OUT/metrics.json"
size=$(stat -c %s "$OUT/default.tgz")
if [ "$size" -gt 16000000 ]; then
  split -b 15000000 -d -a 1 "$OUT/default.tgz" "$OUT/default.tgz.part"
  rm "$OUT/default.tgz"
fi
ls -la "$OUT" "$WORK/default" "$WORK/default/reference"
stage "done: unpack with  cat default.tgz* | tar -xz -C models/  (gives models/default)"
}

main "$@" 2>&1 | tee -a "$OUT/train.log"
