#!/usr/bin/env python3
"""transformers itself in bf16 against fp32 on the trained default model, on the 32 prompts of
tests/cuda/default_model_prompts.json with 64 greedy tokens each: the peer's answer to "can bf16
activations give fp32's greedy text?", measured the way CudaDefaultModel measures strata's CUDA
path (the largest logit difference on the fp32 greedy path, teacher-forced, against the largest
logit; and on how many prompts the free-running bf16 text equals fp32's).
Usage (GPU machine): python3 tools/device/hf_bf16_vs_fp32.py [models/default]"""
import json
import sys

import torch
from transformers import Qwen3_5MoeForCausalLM

model_dir = sys.argv[1] if len(sys.argv) > 1 else "models/default"
prompts = json.load(open("tests/cuda/default_model_prompts.json"))["prompts"]
steps = 64


def load(dtype):
    m = Qwen3_5MoeForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager").to("cuda").eval()
    return m


@torch.no_grad()
def greedy(model, ids):
    ids = list(ids)
    out = model(torch.tensor([ids], device="cuda"), use_cache=True)
    for _ in range(steps):
        ids.append(int(torch.argmax(out.logits[0, -1].float())))
        out = model(torch.tensor([[ids[-1]]], device="cuda"), past_key_values=out.past_key_values, use_cache=True)
    return ids


@torch.no_grad()
def logits_of(model, ids):
    return model(torch.tensor([ids], device="cuda")).logits[0].float()


fp32 = load(torch.float32)
want = [greedy(fp32, p["ids"]) for p in prompts]
ref = [logits_of(fp32, w) for w in want]
del fp32
bf16 = load(torch.bfloat16)
same = 0
max_d = 0.0
max_logit = 0.0
clear = 0
clear_equal = 0
for p, w, r in zip(prompts, want, ref):
    got = greedy(bf16, p["ids"])
    same += got == w
    b = logits_of(bf16, w)
    start = len(p["ids"]) - 1
    for t in range(start, len(w) - 1):
        d = float((b[t] - r[t]).abs().max())
        max_d = max(max_d, d)
        max_logit = max(max_logit, float(r[t].abs().max()))
        top2 = torch.topk(r[t], 2).values
        margin = float(top2[0] - top2[1])
        if margin > 2 * d:
            clear += 1
            clear_equal += int(torch.argmax(b[t])) == int(torch.argmax(r[t]))
print(f"transformers bf16 against fp32, default model, {len(prompts)} prompts x {steps} greedy tokens: "
      f"max |d logit| {max_d:.4f} against max |logit| {max_logit:.2f} ({100 * max_d / max_logit:.1f}%); "
      f"{clear_equal} of {clear} clear-margin picks equal; free-running bf16 text equals fp32's on "
      f"{same} of {len(prompts)} prompts")
