"""Annealer iterations per second on issue #10's family (docs/notes/solver.md, "A faster annealer and the 32-node
share", "Incremental annealer"): ITERATIONS iterations of anneal() from rank order per grid and scenario count
(family seeds 0.. as bandwidth snapshots), setup included; the "cost-1 rate" divides out work.iteration_cost, the
figure work.ANNEAL_ITERS_PER_S is calibrated against (its docstring: the calibration rule). The rule asks for the
rate with two solves at once: run two copies side by side,
    python benchmarks/anneal_speed.py & python benchmarks/anneal_speed.py; wait
and read `uptime` before (the machine is shared).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from mapping_family import family_problem

from planner.mapping import work
from planner.mapping.anneal import anneal

GRIDS = [(1, 16), (4, 4), (4, 8), (8, 8), (8, 16), (16, 8)]
SCENARIOS = [1, 3]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=100000)
    ap.add_argument("--style", default="planner", choices=["planner", "pipette"])
    args = ap.parse_args()
    for sc in SCENARIOS:
        for R, C in GRIDS:
            probs = [family_problem(R, C, s) for s in range(sc)]
            t = time.perf_counter()
            anneal(probs if sc > 1 else probs[0], seed=0, iterations=args.iterations, init=probs[0].rank_order(),
                   style=args.style, time_limit_s=1e9)
            rate = args.iterations / (time.perf_counter() - t)
            print(f"{R}x{C} scenarios {sc}: {rate:,.0f} it/s, cost-1 rate {rate * work.iteration_cost(R, sc):,.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
