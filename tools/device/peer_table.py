#!/usr/bin/env python3
"""strata's per-op prefill times (the breakdown tables in a `strata bench --roofline` log) next to
the peers of peer_bench.py, as a markdown table of microseconds per layer and their ratio.
Usage: peer_table.py BENCH_LOG PEERS_JSON
"""
import json
import re
import sys

# strata op (the breakdown's name up to the first space) -> the peers it is compared with
PEERS = {
    "gated_delta_rule": ["gated_delta_rule fla"],
    "paged_attention_gated": ["attention sdpa-cudnn", "attention sdpa-flash"],
    "moe_experts_shared": ["moe grouped_mm (gemms + silu-mul)", "moe grouped_mm (gather + gemms + combine)"],
    "causal_conv1d": ["causal_conv1d floor"],
}


def strata_ops(log):
    """{tokens: {op: us per call}} from the prefill breakdowns."""
    res, cur = {}, None
    for line in open(log):
        m = re.match(r"per-op GPU time, prefill (\d+) tokens", line)
        if m:
            cur = res.setdefault(m.group(1), {})
            continue
        if cur is None:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].isdigit() and int(cells[1]) > 0:
            name = cells[0].split(" ")[0]
            calls, us = int(cells[1]), float(cells[2])
            old = cur.get(name)
            cur[name] = (old[0] + calls, old[1] + us) if old else (calls, us)
        elif not line.startswith("|"):
            cur = None
    return {t: {op: us / calls for op, (calls, us) in ops.items()} for t, ops in res.items()}


def main():
    ours = strata_ops(sys.argv[1])
    peers = json.load(open(sys.argv[2]))
    print("| op | tokens | strata us/layer | peer | peer us/layer | strata / peer |")
    print("|---|---:|---:|---|---:|---:|")
    for op, names in PEERS.items():
        for t in sorted(ours, key=int):
            us = ours[t].get(op)
            for name in names:
                p = peers.get(t, {}).get(name)
                if us is None or p is None:
                    continue
                print(f"| {op} | {t} | {us:.0f} | {name} | {p:.0f} | {us / p:.2f}x |")
    print(f"\ncopy bandwidth measured by the peer run: {peers.get('copy_gbs', 0):.0f} GB/s; strata's "
          "moe_experts_shared includes the shared expert, the grouped_mm peer does not.")


if __name__ == "__main__":
    main()
