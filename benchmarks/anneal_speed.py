"""Annealer iterations per second on issue #10's family (docs/notes/solver.md, "A faster annealer and the 32-node
share"): 20,000 iterations of anneal() from rank order per grid; the "cost-1 rate" divides out
work.iteration_cost, the figure work.ANNEAL_ITERS_PER_S is calibrated against. Run on two commits side by side
to measure a speed-up:  python benchmarks/anneal_speed.py
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from mapping_family import family_problem

from planner.mapping import work
from planner.mapping.anneal import anneal

CASES = [((1, 16), 1), ((2, 4), 1), ((4, 4), 1), ((4, 8), 1), ((8, 8), 1), ((8, 16), 1), ((16, 8), 1),
         ((4, 8), 5), ((8, 4), 3)]      # (grid, scenarios: family seeds 0.. as bandwidth snapshots)
ITERATIONS = 20000


def main() -> None:
    for (R, C), sc in CASES:
        probs = [family_problem(R, C, s) for s in range(sc)]
        t = time.perf_counter()
        anneal(probs if sc > 1 else probs[0], seed=0, iterations=ITERATIONS, init=probs[0].rank_order())
        rate = ITERATIONS / (time.perf_counter() - t)
        print(f"{R}x{C} scenarios {sc}: {rate:,.0f} it/s, cost-1 rate {rate * work.iteration_cost(R, sc):,.0f}",
              flush=True)


if __name__ == "__main__":
    main()
