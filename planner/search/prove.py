"""Improvement and proof of the screened candidates, most promising first, through planner.mapping.solve.

Up to EXACT_NODES nodes an exact search (the portfolio: the annealer, then the exact model hinted with its result)
gets the work left: the incumbent's to prove it, every other candidate's to show it unable to beat it (a CP-SAT
cutoff, usually fast). Beyond EXACT_NODES, or with method anneal, each open candidate, the incumbent too, is
annealed on its share of the open candidates' work, and what settled candidates leave goes round again (ROUNDS).
Work, not the clock, decides how far each call goes (mapping/work.py); the wall clock is a safety stop.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from planner import interrupt
from planner.mapping import portfolio, work
from planner.mapping import solve as solve_mapping
from planner.mapping.result import MappingResult
from planner.search.screen import Candidate

# how the command line's --method maps onto planner.mapping.solve's methods
MAPPING_METHOD = {"auto": "auto", "exact": "exact", "anneal": "anneal"}
ROUNDS = 3            # passes over the open candidates (a later one only with work an annealed share left unused)
ROUND_MIN = 0.05      # of the budget: less left than this ends the passes


@dataclass
class Proof:
    best: Candidate
    proved: int               # candidates CP-SAT settled (proved optimal, or unable to beat the incumbent)
    exact_calls: int
    wall_stop: bool = False   # the wall-clock safety stop ended a mapping search (the plan may depend on the load)


def prove(cands: list[Candidate], best: Candidate, *, method: str, seed: int, robust: str,
          budget: float, spent, deadline: float) -> Proof:
    """Improve or settle each candidate on the work left (budget - spent.used_s work seconds); sorts `cands` by
    objective and updates their results in place. Returns the best candidate after it. Up to ROUNDS passes: work an
    annealed candidate's share left unused (the candidates after it settled) goes round the open ones again, each
    pass's anneals on their own seed (seed + pass)."""
    mmethod = MAPPING_METHOD[method]
    proved = exact_calls = 0
    wall_stop = False

    def exact_of(c: Candidate) -> bool:
        return mmethod == "exact" or (mmethod == "auto" and c.probs[0].n <= portfolio.EXACT_NODES)

    for rnd in range(ROUNDS):
        # again over the open candidates while an annealed one's share went unused (those after it settled once
        # the incumbent improved: the 175B het spec stopped at 14.6 of its 21 work s)
        if rnd and (budget - spent.used_s < ROUND_MIN * budget or wall_stop or interrupt.requested()
                    or not any(c.result.bound < best.result.objective - 1e-12 and not exact_of(c) for c in cands)):
            break
        cands.sort(key=lambda c: c.result.objective)
        todo = list(cands)
        for k, c in enumerate(todo):
            # settled: nothing 1e-12 s better exists (a bound summed in another order differs in the last bit;
            # taken as open, it cost the 405B spec 20 work s of search for nothing)
            if c.result.bound >= best.result.objective - 1e-12 or interrupt.requested():
                continue
            left = budget - spent.used_s
            if left <= 0:
                break
            if time.perf_counter() >= deadline:
                wall_stop = True
                break
            is_best = c is best
            exact = exact_of(c)
            if rnd and exact:
                continue        # an exact search had everything left in its pass: another gets no further
            # an exact search (a proof, or a cutoff's refutation) may use everything left; an annealed one (no
            # proof to reach) gets its share of the open candidates', the incumbent too: a challenger whose bound
            # is under the incumbent can still win (the 175B het spec's v12, bound 15.004, was never annealed past
            # screening while the incumbent v6 took the whole budget to 15.183; docs/notes/solver.md, "Paced
            # problems")
            open_left = sum(1 for d in todo[k:] if d.result.bound < best.result.objective - 1e-12
                            and not (rnd and exact_of(d)))
            share = left if exact else left / max(1, open_left)
            r = solve_mapping(c.probs, time_limit_s=share / work.WORK_PER_S, seed=seed + rnd, method=mmethod,
                              robust=robust, hint=c.result.assign, cutoff=None if is_best else best.result.objective,
                              wall_limit_s=max(0.02, deadline - time.perf_counter()))
            wall_stop |= r.stopped_by == "wall"
            exact_calls += r.work.get("exact_work_s", 0.0) > 0 or mmethod == "exact"
            if r.status == "PRUNED":
                c.result = MappingResult(c.result.assign, c.result.objective, r.bound, c.result.status, r.wall_s,
                                         "exact")
                proved += 1
            elif r.objective <= c.result.objective + 1e-12:
                c.result = MappingResult(r.assign, r.objective, max(r.bound, c.result.bound), r.status, r.wall_s,
                                         r.method)
                proved += r.status == "OPTIMAL"
            else:
                c.result = MappingResult(c.result.assign, c.result.objective, max(r.bound, c.result.bound),
                                         c.result.status, r.wall_s, r.method)
            if c.result.objective < best.result.objective:
                best = c
    return Proof(best, proved, exact_calls, wall_stop)
