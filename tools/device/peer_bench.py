#!/usr/bin/env python3
"""The public kernels strata's prefill ops are measured against, on the Qwen3.5-35B-A3B layer
shapes, timed on this GPU with CUDA events (median of --reps after warm-up).

  gated_delta_rule   flash-linear-attention's chunk_gated_delta_rule (Triton; q/k l2-normalised
                     in the kernel, 16 key heads, 32 value heads of 128 x 128, an initial state
                     in and the final state out, as strata's op)
  attention          torch SDPA, causal, 16 query / 2 KV heads of 256, cuDNN and flash backends
  moe                torch._grouped_mm (CUTLASS): tokens sorted by expert, gate/up GEMM, silu-mul,
                     down GEMM (the gather and the weighted combine timed apart), top 8 of 256
                     experts under uniform routing, 2048 -> 2 x 512 -> 2048
  causal_conv1d      the memory floor: conv dim 8192 read and written once in bf16 at the copy
                     bandwidth measured here

Writes one JSON object {op: {tokens: microseconds per layer}} to --out and prints it.
Usage: PYTHONPATH=<dir holding fla/> python3 peer_bench.py --tokens 2048,8192 --out peers.json
"""
import argparse
import json

import torch
import torch.nn.functional as F


def timed(fn, reps):
    """Median microseconds of fn, replayed from a CUDA graph when it can be captured (so that
    Python and Triton launch overhead is not counted against a peer), else called eagerly."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    run = fn
    try:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
            with torch.cuda.graph(graph):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        run = graph.replay
    except Exception:  # noqa: BLE001 - data-dependent shapes and the like: time eagerly
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3)
    times.sort()
    return times[len(times) // 2]


def gdn(t, reps):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    dev = "cuda"
    q = torch.randn(1, t, 16, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, t, 16, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, t, 32, 128, device=dev, dtype=torch.bfloat16)
    g = -F.softplus(torch.randn(1, t, 32, device=dev, dtype=torch.float32)) * 0.1
    beta = torch.rand(1, t, 32, device=dev, dtype=torch.float32).to(torch.bfloat16)
    h0 = torch.zeros(1, 32, 128, 128, device=dev, dtype=torch.float32)

    def run():
        chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                               use_qk_l2norm_in_kernel=True)

    return timed(run, reps)


def attention(t, reps, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 16, t, 256, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 2, t, 256, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 2, t, 256, device="cuda", dtype=torch.bfloat16)
    b = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]

    def run():
        with sdpa_kernel(b):
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    return timed(run, reps)


def moe(t, reps):
    e, top, h, f = 256, 8, 2048, 512
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(e, h, 2 * f, device="cuda", dtype=torch.bfloat16) * 0.02
    w2 = torch.randn(e, f, h, device="cuda", dtype=torch.bfloat16) * 0.02
    ids = torch.stack([torch.randperm(e, device="cuda")[:top] for _ in range(t)])
    wts = torch.rand(t, top, device="cuda", dtype=torch.float32)
    order = torch.argsort(ids.flatten(), stable=True)
    counts = torch.bincount(ids.flatten(), minlength=e)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    rows = order // top
    xs = x[rows]

    def gemms():
        gu = torch._grouped_mm(xs, w1, offs=offs)
        a = F.silu(gu[:, :f]) * gu[:, f:]
        return torch._grouped_mm(a, w2, offs=offs)

    def full():
        y = gemms() * wts.flatten()[order].unsqueeze(1).to(torch.bfloat16)
        out = torch.zeros(t, h, device="cuda", dtype=torch.float32)
        out.index_add_(0, rows, y.float())
        return out

    return timed(gemms, reps), timed(lambda: (x[rows], full()), reps)


def copy_gbs():
    a = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    b = torch.empty_like(a)
    us = timed(lambda: b.copy_(a), 10)
    return 2 * a.numel() / (us * 1e-6) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="2048,8192")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default="peers.json")
    args = ap.parse_args()
    tokens = [int(x) for x in args.tokens.split(",")]
    gbs = copy_gbs()
    res = {"copy_gbs": gbs}
    for t in tokens:
        r = res.setdefault(str(t), {})
        try:
            r["gated_delta_rule fla"] = gdn(t, args.reps)
        except Exception as ex:  # noqa: BLE001 - report and go on with the other peers
            print(f"fla at {t}: {ex!r}")
        for b in ("cudnn", "flash"):
            try:
                r[f"attention sdpa-{b}"] = attention(t, args.reps, b)
            except Exception as ex:  # noqa: BLE001
                print(f"sdpa {b} at {t}: {ex!r}")
        gm, full = moe(t, args.reps)
        r["moe grouped_mm (gemms + silu-mul)"] = gm
        r["moe grouped_mm (gather + gemms + combine)"] = full
        r["causal_conv1d floor"] = 2 * t * 8192 * 2 / (gbs * 1e9) * 1e6
        print(t, json.dumps(r))
    json.dump(res, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
