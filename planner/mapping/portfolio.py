"""The public mapping entry point: a deterministic portfolio of the annealer and CP-SAT (issue #10).

solve(problems, time_limit_s=T, seed=s) runs, on one shared budget:
  1. the annealer (anneal.py) from the hint or Megatron's rank order;
  2. on instances small enough for the exact model to prove (EXACT_NODES), cpsat.solve_exact with the
     annealer's incumbent as hint and EXACT_SHARE of the limit: OPTIMAL ends the search, otherwise its
     bound is kept and a better placement it finds replaces the incumbent (never a worse one).
Above EXACT_NODES the portfolio is the annealer on the whole budget: on issue #10's family neither the
exact model (it returns its hint unchanged), nor a column/row large-neighbourhood search repaired by CP-SAT,
nor cooler annealer restarts beat one anneal of the same work (docs/notes/solver.md, "Mapping portfolio").

Determinism: the search is limited by work, not by the clock. time_limit_s is turned into anneal
iterations (ANNEAL_ITERS_PER_S) and CP-SAT deterministic time (DTIME_PER_S), constants calibrated once
(docs/notes/solver.md, "Mapping portfolio"), never measured at run time; CP-SAT runs with the planner's
deterministic portfolio (sat.new_solver: interleave_search, a deterministic-time limit). The wall clock is
only a safety stop (WALL_SAFETY x the limit); the result records which limit ended the search (stopped_by:
"proof", "work" or "wall"). Same seed, same problem: same plan, unless the safety stop fires
(then stopped_by says "wall").

The exact phase runs without the ring slice and the column decomposition (ring_cap=False): the
decomposition sizes its probes from measured seconds per path (columns.solve_columns), so its answer
under a limit depends on the machine's load.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from planner import interrupt
from planner.mapping.anneal import anneal
from planner.mapping.cpsat import solve_exact
from planner.mapping.problem import robust_lower_bound, robust_objective
from planner.mapping.result import MappingResult

# Work per second of time_limit_s, calibrated once on the development machine (2 shared cores; see
# docs/notes/solver.md): the annealer ran 22.7k-25.9k iterations/s on the issue #10 family (16-128 nodes)
ANNEAL_ITERS_PER_S = 16000
DTIME_PER_S = 0.5                # CP-SAT deterministic time per second of the limit (exact model, 16 nodes)
WALL_SAFETY = 1.0                # the wall-clock safety stop, in units of time_limit_s
EXACT_SHARE = 0.3                # of the limit: the exact model (small instances), in deterministic time
EXACT_NODES = 16                 # the exact phase runs up to this many candidate nodes


@dataclass
class PortfolioResult(MappingResult):
    stopped_by: str = "work"                       # proof | work | wall
    work: dict = field(default_factory=dict)       # iterations, dtime, improvements


def work_budget(time_limit_s: float, nodes: int = EXACT_NODES + 1) -> tuple[int, float]:
    """time_limit_s -> (anneal iterations, CP-SAT deterministic time of the exact phase): the work a user's
    --time-limit buys. Up to EXACT_NODES nodes EXACT_SHARE of the limit goes to the exact model; the annealer
    alone (method="anneal") gets the same iterations, so the portfolio, which starts with that very anneal,
    is never worse than it."""
    share = EXACT_SHARE if nodes <= EXACT_NODES else 0.0
    return int(ANNEAL_ITERS_PER_S * (1.0 - share) * time_limit_s), float(DTIME_PER_S * share * time_limit_s)


def solve(problems, *, time_limit_s: float, seed: int = 0, method: str = "auto", robust: str = "worst",
          hint: np.ndarray | None = None) -> PortfolioResult:
    """Map blocks to nodes. method: "auto" (the portfolio), "anneal" (the annealer alone on the same
    iteration budget), "exact" (cpsat.solve_exact alone on the same deterministic time)."""
    probs = problems if isinstance(problems, list) else [problems]
    p0 = probs[0]
    t0 = time.perf_counter()
    deadline = t0 + WALL_SAFETY * time_limit_s
    iters, dtime = work_budget(time_limit_s, p0.n)
    init = np.asarray(hint) if hint is not None else p0.rank_order()
    if method == "anneal":
        r = anneal(probs, seed=seed, iterations=max(1, iters), time_limit_s=WALL_SAFETY * time_limit_s,
                   init=init, robust=robust)
        stop = "wall" if time.perf_counter() >= deadline else "work"
        return _result(r.assign, probs, robust, r.bound, "HEURISTIC", t0, "anneal", stop, {"iterations": iters})
    if method == "exact":
        dtime = DTIME_PER_S * time_limit_s
        r = solve_exact(probs, time_limit_s=dtime, wall_limit_s=WALL_SAFETY * time_limit_s, seed=seed,
                        hint=init, robust=robust, ring_cap=False)
        stop = "proof" if r.status == "OPTIMAL" else ("wall" if time.perf_counter() >= deadline else "work")
        return _result(r.assign, probs, robust, r.bound, r.status, t0, "exact", stop, {"dtime": dtime})
    if method != "auto":
        raise ValueError(f"unknown mapping method {method!r} (auto, anneal, exact)")

    work = {"iterations": 0, "dtime": 0.0, "improvements": 0}
    bound = robust_lower_bound(probs, robust)
    exact = dtime > 0 and p0.layout.blocks > 1

    def left():
        return deadline - time.perf_counter()

    it1 = max(1, iters)
    r = anneal(probs, seed=seed, iterations=it1, time_limit_s=max(0.0, left()), init=init, robust=robust)
    work["iterations"] += it1
    best, best_v = r.assign.copy(), r.objective
    if left() <= 0 or interrupt.requested():
        return _result(best, probs, robust, bound, "HEURISTIC", t0, "portfolio", "wall", work)

    if exact:
        d = dtime
        ex = solve_exact(probs, time_limit_s=d, wall_limit_s=max(0.05, left()), seed=seed, hint=best,
                         robust=robust, ring_cap=False)
        work["dtime"] += d
        bound = max(bound, ex.bound)
        if ex.objective < best_v:
            best, best_v = ex.assign.copy(), ex.objective
            work["improvements"] += 1
        if ex.status == "OPTIMAL":
            return _result(best, probs, robust, bound, "OPTIMAL", t0, "portfolio", "proof", work)

    stop = "wall" if left() <= 0 else "work"
    return _result(best, probs, robust, bound, "HEURISTIC", t0, "portfolio", stop, work)


def _result(assign, probs, robust, bound, status, t0, method, stopped_by, work) -> PortfolioResult:
    obj = robust_objective(probs, assign, robust)
    return PortfolioResult(np.asarray(assign).copy(), obj, min(bound, obj), status, time.perf_counter() - t0,
                           method, stopped_by=stopped_by, work=dict(work))
