"""The LNS step's cost in annealer iterations (the rule behind work.LNS_STEP_ITERS and work.LNS_NODE_ITERS).

Per grid of issue #10's family (and one with spare nodes): the annealer's cost-1 iterations per second (100,000
iterations; cost = work.iteration_cost) and LNS steps per second (lns.improve from that anneal's plan), both timed
in this process, and a step's cost in cost-1 iterations = (iterations/s x cost) / steps/s, against the charge
(work.lns_step_work x work.ANNEAL_ITERS_PER_S). Run two copies side by side for the two-solves-at-once figure.

Run:  python benchmarks/lns_speed.py [--grids 4x8 8x8 8x16 16x8] [--steps 2000]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from mapping_family import family_problem

from planner.mapping import lns, work
from planner.mapping.anneal import anneal
from planner.mapping.problem import Layout, MappingProblem


def with_spares(p: MappingProblem, extra: int, seed: int) -> MappingProblem:
    """The same grid over extra more candidate nodes (links drawn like the family's)."""
    big = family_problem(1, p.n + extra, seed)
    R, K = p.layout.rows, p.layout.cols
    q = family_problem(R, K, seed)
    hop = big.hop
    ring = big.dp_link[0] * (2.0 * (K - 1) / K) / (2.0 * (p.n + extra - 1) / (p.n + extra))
    return MappingProblem(Layout(1, 1, R, K), np.arange(p.n + extra), hop, None, q.dp_base,
                          np.broadcast_to(ring, (R,) + ring.shape).copy(), 0.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--grids", nargs="+", default=["4x8", "8x8", "8x16", "16x8", "4x8+8"])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--iters", type=int, default=100_000)
    args = ap.parse_args()
    print(f"{'grid':>7} {'iters/s':>8} {'cost-1/s':>9} {'steps/s':>8} {'size':>4} {'it/step':>8} {'charged':>8} "
          f"{'moved':>6}")
    for g in args.grids:
        shape, _, extra = g.partition("+")
        R, K = (int(x) for x in shape.split("x"))
        p = family_problem(R, K, 1)
        if extra:
            p = with_spares(p, int(extra), 1)
        t = time.perf_counter()
        r = anneal(p, seed=0, iterations=args.iters, init=p.rank_order(), time_limit_s=1e9)
        rate = args.iters / (time.perf_counter() - t) * work.iteration_cost(R, 1)
        with work.metered() as m:
            t = time.perf_counter()
            _, moved = lns.improve(p, r.assign, steps=args.steps, seed=0)
            steps_s = args.steps / (time.perf_counter() - t)
        size = int(1.5 * K) + p.n - R * K           # the mean: one or two freed per column, the spares
        print(f"{g:>7} {rate / work.iteration_cost(R, 1):>8.0f} {rate:>9.0f} {steps_s:>8.0f} {size:>4} "
              f"{rate / steps_s:>8.1f} {m.used_s / args.steps * work.ANNEAL_ITERS_PER_S:>8.1f} {moved:>6}",
              flush=True)


if __name__ == "__main__":
    main()
