#!/usr/bin/env bash
# Runs on the GPU machine: shows that train.py resumes from its own checkpoint. A short run
# writes its checkpoint; a second run resumes from it and must report "resumed ...: step N",
# continue counting from step N and keep the optimizer's state (its loss continues, it does not
# restart from the initialisation's). A mechanism check on a small corpus (any English text in
# build_corpus.py's corpus_{train,heldout}.txt.xz layout), not a training run of the model.
# usage: bash tools/train/resume_check.sh [CORPUS_DIR (.dev/train_check)] [SECONDS_PER_RUN (25)]
set -euo pipefail
corpus=${1:-.dev/train_check}
secs=${2:-25}
out=${OUT:-/tmp/strata-train-out}
work=/tmp/strata-resume-check
mkdir -p "$out"
rm -rf "$work"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
timeout 200 python3 tools/train/train_tokenizer.py --corpus-dir "$corpus" --work "$work" >"$out/resume_tokenizer.log" 2>&1
stop=$(( $(date +%s) + 400 ))
common=(--work "$work" --stop-at "$stop" --train-seconds "$secs" --ckpt "$work/last.pt" --val-tokens 16384
        --eval-every 10 --schedule-seconds $(( 2 * secs )))
timeout 200 python3 tools/train/train.py "${common[@]}" --out "$work/run1" 2>&1 | tee "$out/resume_run1.log" | grep -E "step|resumed|checkpoint|loss" | tail -4
timeout 200 python3 tools/train/train.py "${common[@]}" --out "$work/run2" --resume "$work/last.pt" 2>&1 | tee "$out/resume_run2.log" | grep -E "step|resumed|checkpoint|loss" | head -3
tail -4 "$out/resume_run2.log"
cp "$work/run1/metrics.json" "$out/resume_metrics_run1.json"
cp "$work/run2/metrics.json" "$out/resume_metrics_run2.json"
