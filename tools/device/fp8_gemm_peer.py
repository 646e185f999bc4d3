#!/usr/bin/env python3
"""FP8 block-scale GEMMs (DeepSeek style: activations per 1 x 128, weights per 128 x 128) against
bf16 ones, through PyTorch's scaled_mm (cuBLASLt's VEC128_32F / BLK128x128_32F scale modes on
Hopper), on the Qwen3.5-35B-A3B dense projections' shapes (issue 19: which rows an FP8 dense path
should take cuBLASLt for, and how fast it is). Times are CUDA-event means over many launches; the
activations' quantisation is timed apart (torch ops, an upper bound for a fused kernel). Checks
each FP8 product against the dequantised operands' product in fp32.

usage: python3 tools/device/fp8_gemm_peer.py [ROWS...]   (default 1 8 16 64 256 2048 8192)
"""
import sys

import torch
import torch.nn.functional as F

E4M3_MAX = 448.0
SHAPES = [  # (name, N, K)
    ("GDN in_proj_qkvz", 12288, 2048),
    ("attention qkv", 9216, 2048),
    ("out_proj / o_proj", 2048, 4096),
    ("shared expert down", 2048, 512),
]


def quantise_rows(x):
    """x [M, K] -> e4m3 codes and f32 scales [M, K / 128] (one per 1 x 128 group)."""
    m, k = x.shape
    g = x.float().view(m, k // 128, 128)
    scale = (g.abs().amax(dim=2) / E4M3_MAX).clamp(min=1e-12)
    return (g / scale[:, :, None]).to(torch.float8_e4m3fn).view(m, k), scale


def quantise_blocks(w):
    """w [N, K] -> e4m3 codes and f32 scales [N / 128, K / 128] (one per 128 x 128 block)."""
    n, k = w.shape
    b = w.float().view(n // 128, 128, k // 128, 128)
    scale = (b.abs().amax(dim=(1, 3)) / E4M3_MAX).clamp(min=1e-12)
    return (b / scale[:, None, :, None]).to(torch.float8_e4m3fn).view(n, k), scale


def scaled_mm(xq, xs, wq, ws):
    """xq [M, K] e4m3 (M a multiple of 4), xs [M, K / 128]; wq [N, K], ws [N / 128, K / 128]."""
    a_scale = xs.t().contiguous().t()  # outer-dim-major, as cuBLASLt's VEC128_32F wants
    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        return F.scaled_mm(xq, wq.t(), a_scale, F.ScalingType.BlockWise1x128, ws.t(),
                           F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)
    return torch._scaled_mm(xq, wq.t(), a_scale, ws.t(), out_dtype=torch.bfloat16)


def bench(fn, iters=200):
    for _ in range(10):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters * 1000.0  # us


def main():
    rows = [int(a) for a in sys.argv[1:]] or [1, 8, 16, 64, 256, 2048, 8192]
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print("| projection | N x K | rows | bf16 us | FP8 us | bf16 / FP8 | quantise x us | max rel err |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, n, k in SHAPES:
        w = torch.randn(n, k, device="cuda") * 0.02
        wb = w.to(torch.bfloat16)
        wq, ws = quantise_blocks(w)
        w_deq = (wq.float().view(n // 128, 128, k // 128, 128) * ws[:, None, :, None]).view(n, k)
        for m in rows:
            mp = (m + 3) // 4 * 4
            x = torch.randn(mp, k, device="cuda").to(torch.bfloat16)
            xq, xs = quantise_rows(x)
            try:
                y = scaled_mm(xq, xs, wq, ws)
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"| {name} | {n} x {k} | {m} | | error: {str(e).splitlines()[0][:80]} | | | |")
                continue
            x_deq = (xq.float().view(mp, k // 128, 128) * xs[:, :, None]).view(mp, k)
            ref = x_deq @ w_deq.t()
            err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
            t_bf16 = bench(lambda: x[:m] @ wb.t())
            t_fp8 = bench(lambda: scaled_mm(xq, xs, wq, ws))
            t_q = bench(lambda: quantise_rows(x))
            print(f"| {name} | {n} x {k} | {m} | {t_bf16:.1f} | {t_fp8:.1f} | {t_bf16 / t_fp8:.2f} | {t_q:.1f} | "
                  f"{err:.2e} |")


if __name__ == "__main__":
    main()
