"""The public mapping entry point: a deterministic portfolio of the annealer and CP-SAT (issue #10).

solve(problems, time_limit_s=T, seed=s) turns T into work (work.py: WORK_PER_S work seconds per second) and
runs, on that one budget:
  1. the annealer (anneal.py) from the hint or Megatron's rank order (its rings reordered where rows are confined to
     groups of nodes: startpoint.py), on its share of the iterations;
  2. above EXACT_NODES nodes (one scenario, >= 3 columns: lns.applies; every row's ring alike, no pipeline slack:
     _rings_alike), large-neighbourhood search with exact repair (lns.py) from the annealer's plan, on LNS_SHARE
     of the work (taken from the annealer's share: on issue #10's family at 64-128 nodes it lowers the objective
     more per unit of work than annealing longer; at 32 nodes it found nothing; docs/notes/solver.md "LNS after
     the anneal"). Above TWO_ROWS_NODES, an LNS that has not lowered the objective in its first LNS_PROBE_STEPS steps
     hands the rest of its work to a reheated anneal from its plan (a second chain started from the first one's best);
     (between 2 and 3: the two-row re-solve, tworows.py, where it applies; then, where rings confine rows to groups
     of nodes (problem.rows_confined: racks behind a spine), the best order of whole rows (roworder.py), on work
     reserved from the annealer's share; on near-uniform links it does not run and nothing else moves; then, where
     rows are confined and some node has few fast peers (a degraded NIC), the weak nodes' pass (anchor.py: each
     given its fast peers as ring and column neighbours), on ANCHOR_SHARE of the work reserved the same way);
  3. up to EXACT_NODES candidate nodes, cpsat.solve_exact (pre-solve bounds, the column decomposition, the
     assignment model) with the annealer's incumbent as hint, on the rest of the work (EXACT_SHARE of it up to
     SMALL_NODES nodes, EXACT_SHARE_LARGE above, only EXACT_PROBE_SHARE where the two-row re-solve runs and gets
     the rest): OPTIMAL ends the search,
     otherwise its bound is kept and a better placement it finds replaces the incumbent (never a worse one).
Above EXACT_NODES the portfolio is the annealer (and the LNS) on the whole budget. With a cutoff (branch and bound
across configurations: only placements strictly better than it matter) and an exact phase, the annealer is skipped
and the exact model gets the whole budget (it proves "nothing better", usually at once).

Determinism: the search is limited by work, never by a clock read during the search: anneal iterations, CP-SAT
deterministic time (interleave_search, fixed workers and seed: sat.new_solver) and the decomposition's enumerated
paths (columns.solve_columns). The wall clock is only a safety stop (wall_limit_s, default WALL_SAFETY x T); the
result records which limit ended the search (stopped_by: "proof", "work" or "wall"). Same seed, same problem:
same plan, unless the safety stop fires (then stopped_by says "wall").
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from planner import interrupt
from planner.mapping import anchor, lns, roworder, startpoint, tworows, work
from planner.mapping.anneal import anneal
from planner.mapping.cpsat import solve_exact
from planner.mapping.problem import robust_lower_bound, robust_objective
from planner.mapping.result import MappingResult
from planner.mapping.units import has_pace

WALL_SAFETY = 1.0                # the wall-clock safety stop, in units of time_limit_s
EXACT_SHARE = 0.7                # of the work: the exact phase (pre-solve, decomposition, CP-SAT), up to SMALL_NODES
SMALL_NODES = 16
# from SMALL_NODES + 1 to EXACT_NODES nodes: on issue #10's family (tuning seeds 0-2) the exact phase returned its
# hint at 32 nodes, while the shipped 32-node specs are proved by it in a fraction of this share (docs/notes/solver.md)
EXACT_SHARE_LARGE = 0.3
# the exact phase runs up to this many candidate nodes: it proves the shipped 32-node plans; at 64 nodes on issue
# #10's family it returned its hint unchanged, and building its model took most of a 10 s limit
EXACT_NODES = 32
WALL_NEAR = 0.05                 # seconds before the safety stop that count as reaching it
# the exact phase is not started with less than this share of the limit left on the clock: building its model and
# bounds is not interruptible and took 3.8 s at 32 nodes under heavy load, so a late start overran the limit by
# 12-20%. Only a machine far slower than the calibration (work.py) leaves this little, so the search was already
# the clock's (stopped_by "wall")
EXACT_WALL_FLOOR = 0.2
# of the work, above EXACT_NODES nodes where lns.applies: the LNS after the anneal (tuning seeds 100 101 0-2 24 of
# issue #10's family; docs/notes/solver.md "LNS after the anneal"). 0.2 at the first calibration; 0.35 since the
# annealer's rate was recalibrated on the slowest machine: mean 117.43 / 117.32 / 117.05 / 117.57 ms at 8 x 16 and
# 111.99 / 112.03 / 111.94 / 112.20 at 8 x 8 for 0.2 / 0.28 / 0.35 / 0.5 ("The annealer recalibrated ...")
LNS_SHARE = 0.35
LNS_CHUNK = 200                  # LNS steps between looks at the safety stop
# where no two-row re-solve follows (above TWO_ROWS_NODES), an LNS that has not lowered the objective after this many
# steps hands the rest of its work to a reheated anneal from its plan. Tuning seeds of issue #10's family (100 101
# 0-2 24 30-41): at 8 x 16 the first 200 steps lowered it on 18 of 18; on the shipped clusters' matrices
# (a100-128x8-het 8 x 16) it lowered nothing in all its steps, where a long chain's result depends on its seed by up
# to 2% and a second chain from the first one's best pays. At 8 x 8 (the two-row re-solve after the LNS) the reheat
# lost on each tuning seed where it fired (42-61: 46, 49, 60 by 0.38, 0.35, 0.15 ms; 56 equal), so it is not used
# there (docs/notes/solver.md "A stalled LNS hands its work to a reheat")
LNS_PROBE_STEPS = 400
# of the work, from SMALL_NODES + 1 to EXACT_NODES nodes where tworows.applies and the rings count alike: two rows
# re-solved exactly after the anneal (tworows.py), taken from the annealer's share. 0.45 at the first calibration;
# 0.3 since the annealer's rate was recalibrated on the slowest machine (half the iterations per work second): on the
# 4 x 8 tuning seeds 100 101 0-8 24 the mean was 94.52 / 94.03 / 93.78 / 93.79 / 93.93 ms at 0.45 / 0.35 / 0.3 /
# 0.25 / 0.2 (docs/notes/solver.md "The annealer recalibrated on the slowest machine")
TWO_ROWS_SHARE = 0.3
# from SMALL_NODES + 1 to EXACT_NODES nodes where the two-row re-solve applies: the exact phase keeps only this share
# (it still runs last, and proves what it can on it) and the rest of EXACT_SHARE_LARGE goes to two-row calls. On
# issue #10's family at 4 x 8 the exact phase never improved the two-row result on the tuning seeds (it spent
# 1.2-1.5 work s to return its hint), and no shipped plan reaches it with the two-row re-solve on (pipeline slack,
# or at most 16 nodes): docs/notes/solver.md "The exact phase's share to the two-row re-solve"
EXACT_PROBE_SHARE = 0.1
# from EXACT_NODES + 1 to TWO_ROWS_NODES nodes (8 x 8 on the family: after the LNS, tuning seeds -0.24% on average;
# larger grids not tried: there the LNS alone beats anneal~)
TWO_ROWS_SHARE_LARGE = 0.25
TWO_ROWS_NODES = 64
# a search space this small (placements of the blocks on the candidate nodes) gets at most ANNEAL_PER_PLACEMENT
# anneal iterations per placement: a 2 x 2 layout on 4 nodes has 24, and annealed for the full share of a 10 s
# limit (~200,000 iterations, 4 s of wall) before the exact phase proved it in milliseconds. Above SMALL_SPACE
# placements (8 nodes: 40,320) the cap never binds.
SMALL_SPACE = 5040
ANNEAL_PER_PLACEMENT = 50
# the row-order pass (roworder.py) and the start's search (startpoint.py) each take at most this fraction of the
# annealer's work (the start: of what the pass leaves it): at a short limit the pass is skipped and the start's search
# stops early, rather than leave the annealer one iteration and the solve above its budget (8 x 16 racks at 1 s: 0.41
# work s charged of 0.35). At the benchmarks' 10 s neither binds.
PASS_MAX_FRACTION = 0.5
# of the work, where rows are confined and some node has few fast peers (anchor.applies): the weak nodes' pass
# (anchor.py) after the row order, reserved from the annealer's share (elsewhere nothing moves)
ANCHOR_SHARE = 0.05


@dataclass
class PortfolioResult(MappingResult):
    stopped_by: str = "work"                       # proof | work | wall: which limit ended the search
    work: dict = field(default_factory=dict)       # iterations, exact_work_s, improvements


def work_budget(time_limit_s: float, problems) -> tuple[int, float]:
    """time_limit_s -> (anneal iterations, work seconds of the exact phase) on `problems` (one MappingProblem
    or its scenarios): the work a user's --time-limit buys. Up to EXACT_NODES nodes EXACT_SHARE of it goes to
    the exact model; the annealer alone (method="anneal") gets the same iterations as the portfolio's
    annealer, so the portfolio, which starts with that very anneal, is never worse than it."""
    probs = problems if isinstance(problems, list) else [problems]
    p0 = probs[0]
    total = work.WORK_PER_S * time_limit_s
    exact = _exact_share(probs)
    anneal_w = _anneal_work(time_limit_s, probs)
    iters = work.iterations_for(anneal_w - _row_order_work(probs, anneal_w) - _anchor_work(time_limit_s, probs),
                                p0.layout.rows, len(probs), has_pace(probs))
    space = placements(p0)
    if space <= SMALL_SPACE:
        iters = min(iters, ANNEAL_PER_PLACEMENT * space)
    return iters, float(exact * total)


def _anneal_work(time_limit_s: float, probs) -> float:
    """The annealer's share of the work in work seconds, before the row order's reservation and the start's search
    come off it."""
    total = work.WORK_PER_S * time_limit_s
    exact = _exact_share(probs)
    # what the exact phase hands the two-row phase leaves the annealer's share as it was (the same anneal)
    # (summed first, as before the hand-off, so that the iteration count rounds the same)
    left = 1.0 - (exact + _handed_share(probs)) - _lns_share(probs) - _two_rows_share(probs)
    return left * total


def _row_order_work(probs, anneal_w: float = float("inf")) -> float:
    """The work the row-order pass may charge (roworder.work_bound), reserved from the annealer's share `anneal_w`
    where it runs (_row_order_on); 0 elsewhere, so nothing else moves there."""
    return roworder.work_bound(probs) if _row_order_on(probs, anneal_w) else 0.0


def _anchor_work(time_limit_s: float, probs) -> float:
    """The work the weak nodes' pass may charge: ANCHOR_SHARE of the work where anchor.applies and that pays for at
    least one of its candidates; 0 elsewhere (nothing reserved, nothing moves)."""
    w = ANCHOR_SHARE * work.WORK_PER_S * time_limit_s
    p0 = probs[0]
    return w if anchor.applies(probs) and w >= anchor.entry_work(p0.n) + anchor.candidate_work(p0.layout.cols) else 0.0


def _row_order_on(probs, anneal_w: float = float("inf")) -> bool:
    """Rows confined to groups of nodes (roworder.applies), and the pass's bound within PASS_MAX_FRACTION of the
    annealer's share `anneal_w` (at a short limit it would leave the annealer nothing and the solve over budget)."""
    return probs[0].layout.blocks > 1 and roworder.applies(probs) and \
        roworder.work_bound(probs) <= PASS_MAX_FRACTION * anneal_w


def placements(p, limit: int | None = None) -> int:
    """Ways to put the problem's blocks on distinct candidate nodes, n! / (n - blocks)!, counted up to `limit`
    (default SMALL_SPACE; anything larger returns limit + 1)."""
    limit = SMALL_SPACE if limit is None else limit
    k = 1
    for i in range(p.layout.blocks):
        k *= p.n - i
        if k > limit:
            return limit + 1
    return k


def lns_steps(time_limit_s: float, problems) -> int:
    """LNS steps (lns.py) the portfolio runs after its anneal: LNS_SHARE of the work above EXACT_NODES nodes where
    lns.applies, else none."""
    probs = problems if isinstance(problems, list) else [problems]
    share = _lns_share(probs)
    if share <= 0:
        return 0
    return int(share * work.WORK_PER_S * time_limit_s / _lns_step_work(probs[0]))


def _lns_step_work(p0) -> float:
    """Work seconds charged per LNS step in the budget: a step places up to 2K freed nodes and the spares; charged
    as the mean of one and two per column."""
    size = int(1.5 * p0.layout.cols) + p0.n - p0.layout.blocks
    return work.lns_step_work(p0.layout.blocks, size)


def _lns_share(probs) -> float:
    p0 = probs[0]
    return LNS_SHARE if (p0.n > EXACT_NODES and p0.layout.blocks > 1 and lns.applies(probs) and _rings_alike(p0)) \
        else 0.0


def _two_rows_on(probs) -> bool:
    p0 = probs[0]
    return SMALL_NODES < p0.n <= TWO_ROWS_NODES and tworows.applies(probs) and _rings_alike(p0)


def _exact_share(probs) -> float:
    """The exact phase's share of the work, less what it hands the two-row phase (_handed_share)."""
    n = probs[0].n
    share = EXACT_SHARE if n <= SMALL_NODES else (EXACT_SHARE_LARGE if n <= EXACT_NODES else 0.0)
    return share - _handed_share(probs)


def _handed_share(probs) -> float:
    """What the exact phase hands the two-row phase: all of EXACT_SHARE_LARGE but EXACT_PROBE_SHARE where both
    run (17-32 nodes, the two-row re-solve on); else nothing."""
    return EXACT_SHARE_LARGE - EXACT_PROBE_SHARE if probs[0].n <= EXACT_NODES and _two_rows_on(probs) else 0.0


def _two_rows_share(probs) -> float:
    """The two-row phase's own share, taken from the annealer's (its budget adds _handed_share)."""
    if not _two_rows_on(probs):
        return 0.0
    return TWO_ROWS_SHARE if probs[0].n <= EXACT_NODES else TWO_ROWS_SHARE_LARGE


def _rings_alike(p) -> bool:
    """Every row's ring counts alike (one dp_base: no pipeline slack), so many rows and columns can be near the
    maxima at once: where the LNS's moves of many blocks pay. With slack, one row's ring dominates (its node set is
    the search), and the annealer's moves on the critical row did better per unit of work: the 128-node shipped
    spec gpt3-175b lost 2.8% of its mapping part to the LNS's share (docs/notes/solver.md "LNS after the anneal")."""
    base = np.asarray(p.dp_base, dtype=float)
    return bool(np.all(np.abs(base - base[0]) <= 1e-9))


def solve(problems, *, time_limit_s: float, seed: int = 0, method: str = "auto", robust: str = "worst",
          hint: np.ndarray | None = None, cutoff: float | None = None,
          wall_limit_s: float | None = None) -> PortfolioResult:
    """Map blocks to nodes. method: "auto" (the portfolio), "anneal" (the annealer alone on the portfolio's
    iteration budget), "exact" (cpsat.solve_exact alone on the whole work budget). cutoff: only placements
    strictly better matter; status "PRUNED" (bound = cutoff) when the exact model proves there is none.
    wall_limit_s: the safety stop (default WALL_SAFETY x time_limit_s)."""
    if method not in ("auto", "anneal", "exact"):
        raise ValueError(f"unknown mapping method {method!r} (auto, anneal, exact)")
    probs = problems if isinstance(problems, list) else [problems]
    t0 = time.perf_counter()
    wall = WALL_SAFETY * time_limit_s if wall_limit_s is None else wall_limit_s
    with work.metered(deadline=t0 + wall) as spent:
        r = _run(probs, time_limit_s, seed, method, robust, hint, cutoff, t0 + wall)
    if spent.wall_hit and r.stopped_by != "proof":
        r.stopped_by = "wall"       # a solver inside stopped at the safety stop
    r.work_s = spent.used_s
    r.wall_s = time.perf_counter() - t0
    return r


def _run(probs, T, seed, method, robust, hint, cutoff, deadline) -> PortfolioResult:
    p0 = probs[0]
    iters, exact_w = work_budget(T, probs)
    start_w = 0.0
    if hint is not None:
        init = np.asarray(hint)
    else:
        # the rank order, its rings reordered where rows are confined (startpoint.py), its search within
        # PASS_MAX_FRACTION of the annealer's work left after the row order; what it charged comes off the annealer's
        # iterations (0 elsewhere: nothing moves there), or off the exact phase's budget where no anneal runs
        anneal_w = _anneal_work(T, probs)
        room = PASS_MAX_FRACTION * (anneal_w - _row_order_work(probs, anneal_w) - _anchor_work(T, probs))
        with work.metered() as m:
            init = startpoint.initial(probs, robust, budget_s=room)
        start_w = m.used_s
        if start_w > 0:
            iters = max(1, iters - work.iterations_for(start_w, p0.layout.rows, len(probs), has_pace(probs)))
    trivial = p0.layout.blocks <= 1

    def wall_left():
        return deadline - time.perf_counter()

    if method == "anneal" or (method == "auto" and trivial):
        r = anneal(probs, seed=seed, iterations=iters, time_limit_s=max(0.0, wall_left()), init=init, robust=robust)
        stop = "wall" if wall_left() <= 0 else "work"
        return _result(r.assign, probs, robust, r.bound, "HEURISTIC", method, stop, {"iterations": iters})
    if method == "exact":
        return _exact(probs, work.WORK_PER_S * T - start_w, seed, init, robust, cutoff, wall_left, None,
                      {"iterations": 0})

    info = {"iterations": 0, "exact_work_s": 0.0, "improvements": 0}
    if exact_w <= 0 or cutoff is None:
        r = anneal(probs, seed=seed, iterations=iters, time_limit_s=max(0.0, wall_left()), init=init, robust=robust)
        info["iterations"] = iters
        init, info = _lns(probs, T, seed, r.assign.copy(), wall_left, info)
        init, info = _two_rows(probs, T, seed, init, wall_left, info)
        if _row_order_on(probs, _anneal_work(T, probs)) and wall_left() > WALL_NEAR and not interrupt.requested():
            init, moved = roworder.improve(probs, init, robust)
            info = dict(info, row_order_moves=int(moved))
        init, info = _anchor(probs, T, init, robust, wall_left, info)
        if exact_w <= 0:                            # above EXACT_NODES: the annealer and the LNS
            stop = "wall" if wall_left() <= 0 else "work"
            return _result(init, probs, robust, r.bound, "HEURISTIC", method, stop, info)
        if wall_left() <= EXACT_WALL_FLOOR * T or interrupt.requested():
            if not interrupt.requested():
                work.note_wall()
            return _result(init, probs, robust, r.bound, "HEURISTIC", "portfolio", "wall", info)
        exact_budget = exact_w
    else:
        exact_budget = work.WORK_PER_S * T - start_w    # only "is there better than the cutoff?": all of it
    return _exact(probs, exact_budget, seed, init, robust, cutoff, wall_left, "portfolio", info)


def _anchor(probs, T, init, robust, wall_left, info):
    """The weak nodes' pass (anchor.py) on its reserved work, where it applies."""
    anchor_w = _anchor_work(T, probs)
    if anchor_w <= 0 or wall_left() <= WALL_NEAR or interrupt.requested():
        return init, info
    init, moved = anchor.improve(probs, init, robust, budget_s=anchor_w)
    return init, dict(info, anchor_moves=int(moved))


def _lns(probs, T, seed, init, wall_left, info):
    """The LNS after the anneal on its steps (none where it does not apply or the safety stop is near); if it has
    not lowered the objective after LNS_PROBE_STEPS steps, the rest of its work goes to _reheat."""
    steps = lns_steps(T, probs)
    if steps <= 0 or wall_left() <= WALL_NEAR or interrupt.requested():
        return init, info
    p0 = probs[0]
    start = p0.objective(init)
    reheat = not _two_rows_on(probs)
    # the steps in chunks, so the safety stop and a Ctrl-C are seen (a chunk is ~0.1 s of wall)
    done, moved, a = 0, 0, init
    while done < steps:
        until = LNS_PROBE_STEPS if done < LNS_PROBE_STEPS else steps     # a chunk ends at the probe
        n = min(LNS_CHUNK, until - done, steps - done)
        a, k = lns.improve(p0, a, steps=n, seed=seed * 1_000_003 + done)
        done, moved = done + n, moved + k
        if wall_left() <= WALL_NEAR or interrupt.requested():
            if not interrupt.requested():
                work.note_wall()
            break
        if done == LNS_PROBE_STEPS and done < steps and reheat and p0.objective(a) >= start:
            a, info = _reheat(probs, seed, a, (steps - done) * _lns_step_work(p0), wall_left, info)
            break
    info = dict(info, lns_steps=done, lns_moves=moved)
    return a, info


def _reheat(probs, seed, init, work_s, wall_left, info):
    """A second anneal from `init` on `work_s` work seconds (its own seed; its temperature starts from the spread
    of moves around `init`, as a first chain's does around its start); `init` is kept unless beaten."""
    iters = work.iterations_for(work_s, probs[0].layout.rows, len(probs), has_pace(probs))
    r = anneal(probs, seed=seed + 1, iterations=iters, time_limit_s=max(0.0, wall_left()), init=init)
    best = r.assign.copy() if r.objective < probs[0].objective(init) else init
    return best, dict(info, reheat_iterations=iters)


def _two_rows(probs, T, seed, init, wall_left, info):
    """Two rows re-solved exactly after the anneal (tworows.py) on their share of the work, if any."""
    share = _two_rows_share(probs) + _handed_share(probs)
    if share <= 0 or wall_left() <= WALL_NEAR or interrupt.requested():
        return init, info

    def stop():
        if interrupt.requested():
            return True
        if wall_left() <= WALL_NEAR:
            work.note_wall()              # the safety stop ended the search: the record says so
            return True
        return False
    a, calls, moved = tworows.improve(probs[0], init, budget_s=share * work.WORK_PER_S * T, seed=seed, stop=stop,
                                      wall_left=wall_left)
    return a, dict(info, two_row_calls=calls, two_row_moves=moved)


def _exact(probs, budget, seed, init, robust, cutoff, wall_left, method, info) -> PortfolioResult:
    """The exact phase on `budget` work seconds from the incumbent `init` (kept unless beaten)."""
    best_v = robust_objective(probs, init, robust)
    bound = robust_lower_bound(probs, robust)
    if wall_left() <= 0.02 or interrupt.requested():
        return _result(init, probs, robust, bound, "HEURISTIC", method or "exact", "wall", info)
    with work.metered() as m:
        ex = solve_exact(probs, time_limit_s=budget, wall_limit_s=max(0.02, wall_left()), seed=seed, hint=init,
                         robust=robust, cutoff=cutoff)
    info["exact_work_s"] = m.used_s
    # CP-SAT stops a little before a wall limit (OR-Tools' TimeLimit keeps a safety margin): near the deadline
    # counts as the safety stop (a work stop misread so only makes the record more cautious)
    stop = "wall" if wall_left() <= WALL_NEAR else "work"
    if ex.status == "PRUNED":
        r = _result(init, probs, robust, bound, "PRUNED", method or "exact", "proof", info)
        r.bound = float(cutoff)       # nothing strictly better than the cutoff exists
        return r
    best = init
    if ex.objective < best_v:
        best = ex.assign.copy()
        info["improvements"] = info.get("improvements", 0) + 1
    bound = max(bound, ex.bound)
    status = "OPTIMAL" if ex.status == "OPTIMAL" else ("HEURISTIC" if method else ex.status)
    return _result(best, probs, robust, bound, status, method or "exact", "proof" if status == "OPTIMAL" else stop,
                   info)


def _result(assign, probs, robust, bound, status, method, stopped_by, info) -> PortfolioResult:
    obj = robust_objective(probs, assign, robust)
    return PortfolioResult(np.asarray(assign).copy(), obj, min(bound, obj), status, 0.0, method,
                           stopped_by=stopped_by, work=dict(info))
