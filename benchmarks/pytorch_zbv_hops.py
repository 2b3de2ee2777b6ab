"""torchtitan's V-ZB (ZeRO-3 plans: PyTorch's ScheduleZBVZeroBubble order) with hops on uniform stages: the estimate
(stage_compute_time(..., pytorch=True) plus the hop charge) against the replay.

    python benchmarks/pytorch_zbv_hops.py

Grid: p 2, 3, 4, 5, 6, 8, 10; per-device f : b : w 1 : 2 : 0.66, 1 : 2.6 : 0.5, 1 : 3 : 0.3, 1 : 1.3 : 0.13,
1 : 1 : 0.5, 1 : 1.5 : 1, 1 : 4 : 1.5 and five drawn (b 1-5, w 3-80% of b; b holds w); m = p, p + 1, 2p - 1, 2p, 3p,
4p, 5p + 1, 8p; a hop of 0.1, 0.3, 1, 2, 4 chunk forwards. "old" charges the seed's V-ZB constant, 2.5 traversals of
the path (5 (p - 1) c in all, pipeline.p2p_hops), "new" the walk with and without hops (vwalk.v_walk_p2p_s; pytorch_zbv_p2p_s before branch vwalk); "hops alone" puts the charge on the order's
own makespan without hops (pytorch_zbv_time), which leaves out the compute form's residual from 2p micro-batches.
Prints p5 / median / p95 and the extremes of estimate / replay - 1 (docs/notes/simulator.md, "torchtitan's V-ZB
hops").
"""
from __future__ import annotations

import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from planner.costs.pipeline import pytorch_zbv_time, stage_compute_time
from planner.costs.vwalk import v_walk_p2p_s
from planner.simulator import simulate_uniform

RATIOS = [(1, 2, 0.66), (1, 2.6, 0.5), (1, 3, 0.3), (1, 1.3, 0.13), (1, 1, 0.5), (1, 1.5, 1), (1, 4, 1.5)]


def main() -> int:
    rng = random.Random(3)
    ratios = RATIOS + [(1, x, x * y) for x, y in [(rng.uniform(1, 5), rng.uniform(0.03, 0.8)) for _ in range(5)]]
    gaps: dict = {k: [] for k in ("old", "new", "hops alone")}
    big = {k: [] for k in ("old", "new")}            # hops over one chunk forward
    for f, b, w in ratios:
        for p in (2, 3, 4, 5, 6, 8, 10):
            fs, bs, ws = [f] * p, [b] * p, [w] * p
            for m in sorted({p, p + 1, 2 * p - 1, 2 * p, 3 * p, 4 * p, 5 * p + 1, 8 * p}):
                comp = stage_compute_time("v-zb", p, m, 2, fs, bs, ws, pytorch=True)
                for hop in (0.1, 0.3, 1, 2, 4):
                    c = hop * f / 2
                    sim = simulate_uniform("v-zb", p, m, 2, f=f, b=b, w=w, comm=c, pytorch=True).compute_s
                    h = v_walk_p2p_s("v-zb", fs, bs, ws, m, c, pytorch=True)
                    old, new = (comp + 5 * (p - 1) * c) / sim - 1, (comp + h) / sim - 1
                    gaps["old"].append(old)
                    gaps["new"].append(new)
                    gaps["hops alone"].append((pytorch_zbv_time(fs, bs, ws, m) + h) / sim - 1)
                    if hop > 1:
                        big["old"].append(old)
                        big["new"].append(new)
    for name, d in (("all hops", gaps), ("hops of 2-4 chunk F's", big)):
        for k, g in d.items():
            print(spread_line(f"{name}, {k:10s}", g))
    return 0


def spread_line(label: str, gaps, digits: int = 2) -> str:
    """One line of relative gaps (fractions) in %: n, p5, median, p95, min, max (vmin_hops.py prints the same)."""
    a = 100 * np.array(gaps)
    q = np.percentile(a, [5, 50, 95])
    f = f"+.{digits}f"
    return (f"{label} n={a.size}: p5 {q[0]:{f}}% median {q[1]:{f}}% p95 {q[2]:{f}}% "
            f"min {a.min():{f}}% max {a.max():{f}}%")


if __name__ == "__main__":
    sys.exit(main())
