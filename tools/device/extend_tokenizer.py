#!/usr/bin/env python3
"""Copies the bundled default model's tokenizer into a checkpoint folder that has none (a
--load-format dummy folder on the GPU machine), its vocabulary padded with unreachable filler
tokens up to the model's vocab_size, so that `strata serve` can load it and decode every id. Its normalizer (NFC, which needs ICU,
absent on the GPU machine) is dropped: the serving benchmarks send token ids.
Usage: python3 tools/device/extend_tokenizer.py MODEL_DIR"""
import json
import shutil
import sys

src = "models/default"
dst = sys.argv[1]
config = json.load(open(f"{dst}/config.json"))
vocab_size = config.get("text_config", config)["vocab_size"]
tok = json.load(open(f"{src}/tokenizer.json"))
used = set(tok["model"]["vocab"].values()) | {t["id"] for t in tok.get("added_tokens", [])}
for i in range(vocab_size):
    if i not in used:
        tok["model"]["vocab"][f"filler{i}"] = i
tok["normalizer"] = None
json.dump(tok, open(f"{dst}/tokenizer.json", "w"))
shutil.copy(f"{src}/tokenizer_config.json", f"{dst}/tokenizer_config.json")
