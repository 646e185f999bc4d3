"""Whether the FP8 fixture's CUDA error in its W8A8 modes (full, chunked:64) is the activations'
quantisation: HF fp32 eager on the fixture's dequantised weights, once as the fixture's reference
defines it, once with the input of every projection that strata's CUDA path runs W8A8 quantised
first (per row and 128 columns to e4m3, scale amax / 448, as ops::quantize_fp8_rows): GDN's
in_proj_qkv and in_proj_z (not in_proj_b/a, whose bf16 rows take x unquantised), attention q/k/v
and o_proj, GDN out_proj, and the routed experts' gate/up input. Not emulated: the experts' down
input (inside HF's expert loop) and bf16 rounding. Prints the CUDA full-mode logits' error against
both, in the golden test's units (max, rms, median per-position max, and their ratio to the
reference's std), and how far the emulation moves HF.

usage (GPU machine, transformers 5.17): python3 tools/device/fp8_w8a8_hf_check.py FIXTURE_DIR CUDA_FULL.npy
(CUDA_FULL.npy: `strata logits --model FIXTURE_DIR --ids <reference.json prompt_ids> --mode full
--device cuda --out CUDA_FULL.npy`)
"""
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from make_fixtures_qwen3_5_fp8 import BLOCK, E4M3_MAX, dequantise  # noqa: E402

W8A8_INPUTS = ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "self_attn.q_proj", "self_attn.k_proj",
               "self_attn.v_proj", "self_attn.o_proj", "linear_attn.out_proj")


def quantise_rows(x):
    """x [..., K] -> its per-row, per-128-column e4m3 quantisation, dequantised (f32)."""
    shape = x.shape
    k = shape[-1]
    g = math.ceil(k / BLOCK)
    pad = torch.zeros(*shape[:-1], g * BLOCK, dtype=torch.float32)
    pad[..., :k] = x.float()
    blocks = pad.view(*shape[:-1], g, BLOCK)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    q = (blocks / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32) * scale
    return q.view(*shape[:-1], g * BLOCK)[..., :k].to(x.dtype)


def load(folder):
    c = json.load(open(folder + "/config.json"))
    c.pop("quantization_config", None)
    cfg = transformers.Qwen3_5MoeTextConfig(**{k: v for k, v in c.items() if k not in ("architectures",)})
    cfg._attn_implementation = "eager"
    model = transformers.Qwen3_5MoeForCausalLM(cfg).float().eval()
    t = load_file(folder + "/model.safetensors")
    sd = {}
    experts = {}
    for k, v in t.items():
        if k.endswith("_scale_inv"):
            continue
        w = dequantise(v, t[k + "_scale_inv"]) if v.dtype == torch.float8_e4m3fn else v.to(torch.float32)
        if ".mlp.experts." in k:  # per-expert tensors: model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight
            base, rest = k.split(".mlp.experts.")
            e, proj = rest.split(".")[:2]
            experts.setdefault(base, {})[(int(e), proj)] = w
        else:
            sd[k] = w
    for base, parts in experts.items():
        n = 1 + max(e for e, _ in parts)
        sd[base + ".mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([parts[(e, "gate_proj")], parts[(e, "up_proj")]]) for e in range(n)])
        sd[base + ".mlp.experts.down_proj"] = torch.stack([parts[(e, "down_proj")] for e in range(n)])
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    return model


def profile(got, ref):
    d = np.abs(got - ref)
    std = max(1.0, float(ref.std()))
    return (f"max {d.max():.4g} ({d.max() / std:.3g} std), rms {np.sqrt((d ** 2).mean()):.4g} "
            f"({np.sqrt((d ** 2).mean()) / std:.3g} std), median per-position max {np.median(d.max(axis=1)):.4g} "
            f"({np.median(d.max(axis=1)) / std:.3g} std)")


def quantise_input(module, args, kwargs):
    if args:
        return (quantise_rows(args[0]),) + tuple(args[1:]), kwargs
    kwargs = dict(kwargs)
    kwargs["hidden_states"] = quantise_rows(kwargs["hidden_states"])
    return args, kwargs


def main():
    folder, cuda_full = sys.argv[1], sys.argv[2]
    torch.set_grad_enabled(False)
    ids = json.load(open(folder + "/reference.json"))["prompt_ids"]
    ref = np.load(folder + "/logits.npy")
    got = np.load(cuda_full)
    model = load(folder)
    plain = model(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    hooks = []
    for name, m in model.named_modules():
        w8a8 = any(name.endswith(s) for s in W8A8_INPUTS) or name.endswith("mlp.experts")
        if w8a8:
            hooks.append(m.register_forward_pre_hook(quantise_input, with_kwargs=True))
    print(f"{len(hooks)} modules take quantised inputs")
    emulated = model(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    print("HF full (dequantised weights) against the fixture's reference:", profile(plain, ref))
    print("HF with W8A8 inputs against the fixture's reference:         ", profile(emulated, ref))
    print("CUDA full against the fixture's reference:                   ", profile(got, ref))
    print("CUDA full against HF with W8A8 inputs:                       ", profile(got, emulated))


if __name__ == "__main__":
    main()
