#!/usr/bin/env python3
"""Per-kernel GPU time of one decode step, from an `ncu --csv` log of `strata bench --roofline`.

A step ends with the argmax's last kernel; the table covers the last complete step (a CUDA-graph
replay when the bench ran with graphs). ncu runs each kernel alone, so the sum is the step's
time without launch gaps or overlap. Usage: kernel_times.py NCU_CSV [--last-marker NAME]
"""
import collections
import csv
import re
import sys


def main() -> None:
    path = sys.argv[1]
    marker = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--last-marker" else "argmax_final_kernel"
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    header, rows = rows[0], rows[1:]
    name_i, block_i, grid_i = header.index("Kernel Name"), header.index("Block Size"), header.index("Grid Size")
    unit_i, value_i = header.index("Metric Unit"), header.index("Metric Value")
    ends = [i for i, r in enumerate(rows) if marker in r[name_i]]
    if len(ends) < 2:
        sys.exit(f"kernel_times: fewer than two '{marker}' kernels in {path}")
    step = rows[ends[-2] + 1 : ends[-1] + 1]
    scale = {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
    by_kernel = collections.defaultdict(lambda: [0, 0.0])
    total = 0.0
    for r in step:
        name = re.sub(r"\(.*", "", r[name_i]).replace("void ", "")
        name = re.sub(r"strata::(ops::cuda::)?(<unnamed>|\(anonymous namespace\))::", "", name)
        us = float(r[value_i].replace(",", "")) * scale.get(r[unit_i], 1.0)
        entry = by_kernel[(name, r[grid_i], r[block_i])]
        entry[0] += 1
        entry[1] += us
        total += us
    print(f"{len(step)} kernels, {total:.1f} us of kernel time in one step\n")
    print("| kernel | grid | block | calls | us/step | us/call | share |\n|---|---|---|---:|---:|---:|---:|")
    for (name, grid, block), (calls, us) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {grid} | {block} | {calls} | {us:.1f} | {us / calls:.2f} | {100 * us / total:.1f}% |")


if __name__ == "__main__":
    main()
