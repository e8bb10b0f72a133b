#!/usr/bin/env python3
"""A GPU fault trace for `gpool sim --faults` (docs/health.md).

Faults arrive as a Poisson process at RATE per GPU-day on uniformly chosen
GPUs of a uniform cluster (`gpool sim --nodes N --gpus-per-node G` names its
nodes node-0000, node-0001, ...). Each is a GPU fallen off the bus (xid:79)
or an uncorrectable HBM error (ecc), in the proportions of Meta's Llama 3
report (faulty GPUs 30.1%, HBM3 17.2% of interruptions); an operator
restores the GPU REPAIR hours later. The default rate is that report's:
(30.1% + 17.2%) of 419 unexpected interruptions in 54 days on 16,384 GPUs,
2.24e-4 per GPU-day.

    python3 scripts/fault_trace.py --nodes 80 --gpus 8 --days 90 > faults.csv
"""

import argparse
import random


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--gpus", type=int, required=True, help="GPUs per node")
    p.add_argument("--days", type=float, required=True, help="span of the trace")
    p.add_argument("--rate", type=float, default=0.473 * 419 / (54 * 16384), help="faults per GPU-day")
    p.add_argument("--repair", type=float, default=24.0, help="hours until the GPU is restored")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    per_s = a.rate * a.nodes * a.gpus / 86400.0
    t, end = 0.0, a.days * 86400.0
    lines = []
    while per_s > 0:
        t += rng.expovariate(per_s)
        if t >= end:
            break
        node, gpu = rng.randrange(a.nodes), rng.randrange(a.gpus)
        kind = "xid:79" if rng.random() < 30.1 / 47.3 else "ecc"
        lines.append((t, f"node-{node:04d}", gpu, kind))
        lines.append((t + a.repair * 3600.0, f"node-{node:04d}", gpu, "restore"))
    print("at,node,gpu,fault")
    for t, node, gpu, kind in sorted(lines):
        print(f"{t:.0f},{node},{gpu},{kind}")


if __name__ == "__main__":
    main()
