"""Improvement and proof of the screened candidates, most promising first.

The incumbent is optimised to a proof; every other candidate only has to be shown unable to beat it
(a CP-SAT cutoff, usually fast). Beyond EXACT_MAX_NODES (method auto), or with method anneal, the
candidates are annealed further instead.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from planner import interrupt
from planner.mapping.anneal import anneal
from planner.mapping.cpsat import EXACT_MAX_NODES, solve_exact
from planner.mapping.result import MappingResult
from planner.search.screen import Candidate


@dataclass
class Proof:
    best: Candidate
    proved: int               # candidates CP-SAT settled (proved optimal, or unable to beat the incumbent)
    exact_calls: int


def prove(cands: list[Candidate], best: Candidate, *, method: str, seed: int, robust: str,
          deadline: float) -> Proof:
    """Improve or settle each candidate within the deadline; sorts `cands` by objective and updates their
    results in place. Returns the best candidate after it."""
    cands.sort(key=lambda c: c.result.objective)
    run_exact = method in ("exact", "auto")
    proved = 0
    exact_calls = 0
    for c in cands:
        if (c.result.bound >= best.result.objective or deadline - time.perf_counter() <= 0.05
                or interrupt.requested()):
            continue
        n = c.probs[0].n
        if not run_exact or (method == "auto" and n > EXACT_MAX_NODES):
            res = anneal(c.probs, seed=seed, init=c.result.assign, robust=robust,
                         time_limit_s=deadline - time.perf_counter())
            if res.objective < c.result.objective:
                c.result = MappingResult(res.assign, res.objective, c.result.bound, res.status, res.wall_s,
                                         res.method)
        else:
            budget = max(0.05, deadline - time.perf_counter())
            is_best = c is best
            exact_calls += 1
            ex = solve_exact(c.probs, time_limit_s=budget, seed=seed, hint=c.result.assign, robust=robust,
                             cutoff=None if is_best else best.result.objective)
            if ex.status == "PRUNED":
                c.result = MappingResult(c.result.assign, c.result.objective, ex.bound, c.result.status,
                                         ex.wall_s, "exact")
                proved += 1
            elif ex.objective <= c.result.objective + 1e-12:
                c.result = ex
                proved += ex.status == "OPTIMAL"
            else:
                c.result = MappingResult(c.result.assign, c.result.objective, max(ex.bound, c.result.bound),
                                         c.result.status, ex.wall_s, "exact")
        if c.result.objective < best.result.objective:
            best = c
    return Proof(best, proved, exact_calls)
