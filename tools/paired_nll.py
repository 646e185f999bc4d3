#!/usr/bin/env python3
"""Compares two `strata perplexity --nll-file` outputs of the same text and windows (e.g. bf16 and
FP8 weights) token by token: the mean NLL difference B - A with its standard error (paired: the
same tokens, so far tighter than either run's own +/-), and the perplexity ratio exp(that).

usage: python3 tools/paired_nll.py A.txt B.txt      (plain python3 standard library)
"""
import math
import sys


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            index, token, nll = line.split()
            rows.append((int(index), int(token), float(nll)))
    return rows


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().split("\n\n")[-1])
    a, b = read(sys.argv[1]), read(sys.argv[2])
    if [r[:2] for r in a] != [r[:2] for r in b]:
        sys.exit("paired_nll: the two files do not score the same tokens (same --file, --ctx-size, flags?)")
    d = [rb[2] - ra[2] for ra, rb in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n) if n > 1 else 0.0
    print(f"tokens: {n}")
    print(f"mean NLL difference (B - A): {mean:+.6f} +/- {se:.6f} nats/token")
    print(f"PPL ratio B / A: {math.exp(mean):.5f} ({math.exp(mean - 2 * se):.5f} .. {math.exp(mean + 2 * se):.5f}, +/- 2 se)")


if __name__ == "__main__":
    main()
