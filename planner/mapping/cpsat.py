"""Exact mapping with CP-SAT: blocks -> nodes, minimising slowest pipeline path + slowest DP ring.

Formulation (stronger than Pipette's integer node variables with element constraints):
- x[b, n] = block b on node n; one node per block, at most one block per node.
- each pipeline hop e = (u, v) costs c_e >= sum_m c[n,m] x[v,m] - M_n (1 - x[u,n]) from either end, and at
  least the cheapest link of its end nodes (compact: N rows per hop and end).
- the slowest data-parallel ring is a ladder of level literals lvl[k] <=> T_dp >= v[k]. The ring of
  row i runs in column order (MappingProblem.dp_costs), over the links of blocks (i, j), (i, j+1 mod K).
  With K <= 3 columns those are all pairs of the row, so a pair of nodes in one row forces its level
  by a clause (not u_n or not u_m or lvl[k]); clauses propagate far better than big-M rows. With K >= 4
  the clause is on the two neighbour blocks: (not x[i,j][n] or not x[i,j+1][q] or lvl[k])
  (RING_FORM "ladder"; "bigm" = the compact big-M rows of the pipeline hops).
- symmetry: with K <= 3 every column order is a rotation or reflection of the ring, so the columns
  are ordered by their row-0 node; with K >= 4 only the ring's rotations and reflection leave the
  objective unchanged: column 0 holds the smallest row-0 node and pos0[1] < pos0[K-1]. A hint is
  put in that form first (canonical), else CP-SAT discards it as infeasible.
- pre-solve (one scenario, or the worst case over several; with an incumbent): every better placement
  has slowest ring <= U - P_LB, P_LB a path-cover lower bound (bounds.py), so row pairs above that cap
  are forbidden (as ring neighbours when K >= 4) and tpp >= P_LB is a cut. On grids that use every node the
  row decomposition (rows.py: every row a ring under that cap) is tried first, then the column decomposition
  (columns.py) when the row-0 sets under the incumbent are enumerated: each proves, or hands CP-SAT a better
  hint and bound.
Costs are integers in units of 0.1 us (units.py); the reported objective is recomputed in floating point.
Several scenarios (bandwidth snapshots) give the robust problem: minimise the worst (or the mean).
Measurements behind these choices: docs/notes/solver.md ("Solver design measurements").
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.mapping import bounds, rows, work
from planner.mapping.columns import solve_columns
from planner.mapping.problem import MappingProblem, robust_const, robust_lower_bound, robust_objective
from planner.mapping.result import MappingResult
from planner.mapping.sat import Debug, new_solver, solve
from planner.mapping.units import (
    UNIT,
    cutoff_int,
    has_pace,
    int_objective,
    int_pace_tables,
    pace_slack,
    rounding_slack,
    to_units,
)

EXACT_MAX_NODES = 64     # callers: up to this many nodes CP-SAT proves mappings; beyond, it only bounds them
RING_FORM = "ladder"     # the ring term with K >= 4 columns: "ladder" or "bigm" (solve_exact's ring_form)
COLUMNS = True           # try the column decomposition (columns.py) first when the row-0 sets are enumerated
COLUMN_SHARE = 0.75      # of the time limit
COLUMN_CPSAT_MIN = 10.0  # seconds (at most half the limit) left to CP-SAT whatever the decomposition takes
COLUMN_SETS_MAX = 5000   # row-0 sets the decomposition takes on (sorted by ring; most are skipped by their floor)
ROWS = True              # try the row decomposition (rows.py) first on grids that use every node
ROWS_SHARE = 0.5         # of the time limit (work)
# Subsolvers left out of the grid model's portfolio when it carries a pace. CP-SAT 9.15's core-based worker creeps
# the bound up a few units per step on the pace's wide integer terms (the tiny 6-node 1F1B column at a cutoff: 4
# units a step, ~0.27 deterministic s in 20 s of wall), and interleave_search runs every task of a batch to its end, so
# an INFEASIBLE that default_lp proved at 0.03 s came back at the wall limit (docs/notes/solver.md, "Paced proofs:
# the core worker").
PACED_IGNORE = ("core",)
# with an incumbent, row 0 must hold one of the row-0 sets (exact, tested); off: fixing the heads did not make
# the path part easier to prove
ROW0_TABLE = False


def solve_exact(problems: list[MappingProblem] | MappingProblem, *, time_limit_s: float = 10.0, seed: int = 0,
                hint: np.ndarray | None = None, robust: str = "worst", workers: int = 2,
                cutoff: float | None = None, ring_cap: bool = True,
                wall_limit_s: float | None = None, ring_form: str | None = None,
                debug: Debug | None = None) -> MappingResult:
    """cutoff (seconds): only mappings strictly better than this are of interest; if CP-SAT proves
    there are none, the result has status "PRUNED" and bound = cutoff (branch and bound across configs).
    ring_cap: with an incumbent (hint or cutoff), restrict the search to placements whose slowest ring
    leaves room for a path at least as long as a path lower bound (exact; see bounds.ring_cap).
    wall_limit_s: a wall-clock safety stop other than time_limit_s. Given, the call is work-limited: time_limit_s
    is work (work.py) for the whole call — pre-solve bounds, the column decomposition and the final CP-SAT run
    share it and charge what they spend — so the answer does not depend on the machine's load unless the safety
    stop fires. Not given, time_limit_s is also the wall-clock limit of the whole call (the old behaviour).
    debug: export the model / extra solver parameters (sat.Debug; default: the environment)."""
    with work.metered() as spent:
        r = _solve_exact(problems, time_limit_s=time_limit_s, seed=seed, hint=hint, robust=robust,
                         workers=workers, cutoff=cutoff, ring_cap=ring_cap, wall_limit_s=wall_limit_s,
                         ring_form=ring_form, debug=debug, spent=spent)
    r.work_s = spent.used_s
    return r


def _solve_exact(problems, *, time_limit_s, seed, hint, robust, workers, cutoff, ring_cap, wall_limit_s,
                 ring_form, debug, spent) -> MappingResult:
    probs = problems if isinstance(problems, list) else [problems]
    p0 = probs[0]
    R, K, N = p0.layout.rows, p0.layout.cols, p0.n
    t0 = time.perf_counter()
    if R * K == 1 or N == 1:
        a = np.zeros((R, K), dtype=int)
        obj = robust_objective(probs, a, robust)
        return MappingResult(a, obj, obj, "OPTIMAL", time.perf_counter() - t0, "exact")
    if K == 1 and p0.wrap is None and not has_pace(probs):     # the circuit model has no row positions for a pace
        return _solve_single_column(probs, time_limit_s=time_limit_s, seed=seed, hint=hint, robust=robust,
                                    workers=workers, cutoff=cutoff, t0=t0, debug=debug, wall_limit_s=wall_limit_s)
    if hint is not None:
        # a hint in another column order would violate the symmetry breaking and be discarded by CP-SAT
        hint = canonical(np.asarray(hint))
    pre = _presolve(probs, hint=hint, cutoff=cutoff, robust=robust, ring_cap=ring_cap,
                    time_limit_s=time_limit_s, seed=seed, t0=t0, wall_limit_s=wall_limit_s)
    if isinstance(pre, MappingResult):
        return pre

    build = grid_build_s(R, K, N, p0.wrap is not None, len(probs), has_pace(probs),
                         any(p.pace is not None and p.pace.planes for p in probs))
    wall_left = None if wall_limit_s is None else wall_limit_s - (time.perf_counter() - t0)
    if build > time_limit_s - spent.used_s or (wall_left is not None and build > wall_left):
        # the model would take longer to build than the work (or the wall clock) left: answer with what the
        # pre-solve has, as a CP-SAT call that found nothing (8 x 16 nodes: about 30 s of building)
        if wall_left is not None and build > wall_left and build <= time_limit_s - spent.used_s:
            work.note_wall()
        return _unbuilt_result(probs, hint if pre.better is None else pre.better, pre, robust,
                               time.perf_counter() - t0)
    g = _assignment_model(R, K, N, wrap=p0.wrap is not None)
    if pre.allowed is not None:
        _add_ring_slice(g, pre.allowed)
    if ROW0_TABLE and pre.row0:
        _add_row0_table(g, pre.row0)
    scen_obj = [_scenario_objective(g, p, pre.path_lbs[s], pre.slice_caps[s], ring_form or RING_FORM)
                for s, p in enumerate(probs)]
    # head_lb is not a cut (obj >= head_lb): it changed CP-SAT's search for the worse; it only raises the bound
    _add_objective(g.model, scen_obj, robust, None if cutoff is None else cutoff_int(cutoff, probs, robust))

    # in cutoff mode the hint (never better than the incumbent) violates the cutoff; OR-Tools 9.15
    # aborts the process ("Check failed: heuristics.fixed_search") on such a hint with
    # interleave_search, so it is only kept as the fallback answer. A placement the decomposition found
    # beats the limit: a solution of the model in either mode, and the fallback answer.
    if pre.better is not None:
        hint = pre.better
    if hint is not None and (cutoff is None or pre.better is not None):
        _add_hint(g, hint)

    ignore = PACED_IGNORE if has_pace(probs) else ()
    if wall_limit_s is not None:
        # work-limited: what the pre-solve charged is deducted, never the seconds it took
        solver = new_solver(max(0.05, time_limit_s - spent.used_s), workers, seed,
                            wall_s=max(0.05, wall_limit_s - (time.perf_counter() - t0)), ignore=ignore)
    else:
        # the caller's limit covers this whole call: model building and the pre-solve ran out of it
        solver = new_solver(max(0.05, time_limit_s - (time.perf_counter() - t0)), workers, seed, ignore=ignore)
    st = solve(solver, g.model, debug)
    return _grid_result(g, solver, st, probs, robust=robust, hint=hint, cutoff=cutoff, pre=pre,
                        wall=time.perf_counter() - t0, time_limit_s=time_limit_s)


# --- pre-solve: bounds, the ring slice and the column decomposition -------------------------------------------

@dataclass
class _Presolve:
    """What the pre-solve hands the model; only the binding scenario is sliced (see _presolve)."""
    slice_caps: list                       # per scenario: the ring cap (None: not sliced)
    path_lbs: list                         # per scenario: P_LB, a cut on tpp (0: none)
    per_scenario: bool                     # every better placement keeps each scenario under the limit
    allowed: list | None = None            # allowed[i][n]: node n may sit in row i (the sliced scenario)
    row0: list | None = None               # the row-0 sets under the limit (None: too many, or not asked)
    head_lb: int = 0                       # a lower bound on the integer objective (0: none)
    better: np.ndarray | None = None       # a placement under the limit (canonical), as a hint


def _presolve(probs, *, hint, cutoff, robust, ring_cap, time_limit_s, seed, t0,
              wall_limit_s=None) -> _Presolve | MappingResult:
    """With an incumbent (hint or cutoff): the ring slice and path bound of the binding scenario, the head
    bound, and the column decomposition, which may answer outright (a MappingResult)."""
    p0 = probs[0]
    R, K = p0.layout.rows, p0.layout.cols
    # the slice needs every better placement to keep each scenario's objective under the limit: one
    # scenario, or the worst case over several (the mean lets one scenario exceed it)
    per_scenario = len(probs) == 1 or robust == "worst"
    pre = _Presolve([None] * len(probs), [0] * len(probs), per_scenario)
    if not (ring_cap and K > 1 and per_scenario and (hint is not None or cutoff is not None)):
        return pre
    limit_int = (cutoff_int(cutoff, probs, robust) if cutoff is not None
                 else max(int_objective(p, hint) for p in probs))
    # any one scenario's slice is valid for the worst case; the pre-solve bounds cost seconds per scenario,
    # so only the binding one is sliced: the hint's slowest, else the one with the highest bound
    s_ = 0 if len(probs) == 1 else int(np.argmax(
        [int_objective(p, hint) for p in probs] if hint is not None else [p.lower_bound() for p in probs]))
    p = probs[s_]
    cut = bounds.ring_cap(p, limit_int, time_limit_s, seed)
    pre.path_lbs[s_] = cut.path_lb
    # the row and column decompositions score paths as sums of hops: without the lock step's pace they would prove
    # from a model that lacks it, so they stay off where it is (the path bounds below stay valid: the pace is >= 0)
    decompose = not has_pace(probs)
    if ROWS and decompose and len(probs) == 1 and rows.applies(p):
        wall = None if wall_limit_s is None else wall_limit_s - (time.perf_counter() - t0)
        out = rows.solve_rows(p, limit_int, cut.path_lb, ROWS_SHARE * time_limit_s, bounds.emb_floor(p),
                              wall_s=max(0.05, time_limit_s - (time.perf_counter() - t0)) if wall is None
                              else max(0.05, wall))
        if out is not None and out.proved:
            return _columns_answer(probs, out, hint, cutoff, robust, time.perf_counter() - t0)
        if out is not None:
            pre.head_lb = max(pre.head_lb, out.bound)
            if out.assign is not None:
                # what follows searches under this placement's value (it is the incumbent now)
                pre.better = canonical(out.assign)
                limit_int = out.value
    pre.row0 = bounds.row0_sets(p, limit_int - cut.path_lb - bounds.emb_floor(p))
    pre.head_lb = max(pre.head_lb, bounds.head_bound(p, limit_int, cut.path_lb, time_limit_s, seed, sets=pre.row0) or 0)
    if cutoff is not None and pre.head_lb > limit_int:
        # no row-0 set leaves room for a path under the cutoff: nothing strictly better exists
        return _pruned(probs, hint, cutoff, robust, time.perf_counter() - t0)
    if COLUMNS and decompose and len(probs) == 1 and R > 1:
        wall = None if wall_limit_s is None else wall_limit_s - (time.perf_counter() - t0)
        out = _try_columns(p, pre, limit_int, cut.path_lb, time_limit_s, seed, wall)
        if out is not None and out.proved and (out.assign is not None or pre.better is None):
            return _columns_answer(probs, out, hint, cutoff, robust, time.perf_counter() - t0)
        if out is not None:
            pre.head_lb = max(pre.head_lb, out.bound)
            if out.assign is not None:
                pre.better = canonical(out.assign)
    if cut.cap is not None:
        pre.slice_caps[s_], pre.allowed = cut.cap, cut.allowed
    return pre


def _try_columns(p, pre: _Presolve, limit_int, path_lb, time_limit_s, seed, wall_s=None):
    """The column decomposition over the row-0 sets under the limit (columns.solve_columns); None: no sets."""
    sets = pre.row0
    if sets is None:
        # more sets than the head bound takes: the decomposition skips every set whose floor is over the
        # incumbent once it has one, so a loose incumbent (many sets) costs little more
        sets = bounds.row0_sets(p, limit_int - path_lb - bounds.emb_floor(p), limit=COLUMN_SETS_MAX)
    if not sets:
        return None
    # CP-SAT keeps at least COLUMN_CPSAT_MIN of the limit: when the decomposition does not finish, short
    # limits still get CP-SAT's incumbents
    share = max(0.0, min(COLUMN_SHARE * time_limit_s, time_limit_s - min(COLUMN_CPSAT_MIN, 0.5 * time_limit_s)))
    # work-limited (wall_s given): the share is work and the wall clock a safety stop over what is left
    return solve_columns(p, sets, limit_int, lambda a_: int_objective(p, a_), share, seed, path_floor=path_lb,
                         wall_s=None if wall_s is None else max(0.05, wall_s))


def _columns_answer(probs, out, hint, cutoff, robust, wall) -> MappingResult:
    """The decomposition proved: its placement is optimal, or nothing beats the limit (the hint is optimal,
    or the candidate is pruned)."""
    p = probs[0]
    R = p.layout.rows
    if out.assign is not None:
        a = canonical(out.assign)
        obj = robust_objective(probs, a, robust)
        bound = float(p.const + out.value * UNIT - rounding_slack(R, pace_slack(probs)) * UNIT)
        return MappingResult(a, obj, min(bound, obj), "OPTIMAL", wall, "exact")
    if cutoff is not None:
        return _pruned(probs, hint, cutoff, robust, wall)
    # hint mode, nothing at or under the hint's own value beyond it: the hint is optimal
    a = hint.copy()
    obj = robust_objective(probs, a, robust)
    bound = float(p.const + (out.bound - 1) * UNIT - rounding_slack(R, pace_slack(probs)) * UNIT)
    return MappingResult(a, obj, min(bound, obj), "OPTIMAL", wall, "exact")


def _pruned(probs, hint, cutoff, robust, wall) -> MappingResult:
    """Nothing strictly better than the cutoff exists; the hint (if any) stays the answer."""
    a = hint.copy() if hint is not None else None
    obj = robust_objective(probs, a, robust) if a is not None else float("inf")
    return MappingResult(a, obj, float(cutoff), "PRUNED", wall, "exact")


# --- the assignment model ------------------------------------------------------------------------------------

@dataclass
class _Grid:
    """The assignment model's variables, shared by every scenario (only the costs differ)."""
    model: cp_model.CpModel
    R: int
    K: int
    N: int
    blocks: list                # (i, j) per block index
    bid: dict                   # (i, j) -> block index
    x: list                     # x[b][n]: block b on node n
    use: list                   # use[i][n]: node n hosts a block of row i (a literal: ring conflicts are clauses)
    hops: list                  # ((i, j), (i+1, j)) per pipeline hop
    wraps: list                 # ((R-1, j), (0, j)) per wrap hop (interleaved schedules)


def _assignment_model(R: int, K: int, N: int, wrap: bool) -> _Grid:
    m = cp_model.CpModel()
    blocks = [(i, j) for i in range(R) for j in range(K)]
    bid = {b: k for k, b in enumerate(blocks)}
    x = [[m.new_bool_var(f"x{k}_{n}") for n in range(N)] for k in range(len(blocks))]
    for k in range(len(blocks)):
        m.add_exactly_one(x[k])
    for n in range(N):
        m.add_at_most_one(x[k][n] for k in range(len(blocks)))
    _add_column_symmetry(m, x, bid, K, N)
    hops = [((i, j), (i + 1, j)) for j in range(K) for i in range(R - 1)]
    wraps = [((R - 1, j), (0, j)) for j in range(K)] if (wrap and R > 1) else []
    use = []
    for i in range(R):
        row = []
        for n in range(N):
            b = m.new_bool_var("")
            m.add(b == sum(x[bid[(i, j)]][n] for j in range(K)))
            row.append(b)
        use.append(row)
    return _Grid(m, R, K, N, blocks, bid, x, use, hops, wraps)


def _add_column_symmetry(m, x, bid, K, N) -> None:
    """The ring is unchanged by its rotations and reflection (with K <= 3 that is every column order), the
    paths by any column permutation: fix the order by the row-0 nodes (canonical gives the same form)."""
    pos0 = [sum(n * x[bid[(0, j)]][n] for n in range(N)) for j in range(K)]
    if K <= 3:
        for j in range(K - 1):
            m.add(pos0[j] < pos0[j + 1])
    else:
        for j in range(1, K):
            m.add(pos0[0] < pos0[j])
        m.add(pos0[1] < pos0[K - 1])


def canonical(a: np.ndarray) -> np.ndarray:
    """The column order the model's symmetry breaking allows, same objective: K <= 3 columns sorted by
    their row-0 node; K >= 4 rotated so that column 0 holds the smallest row-0 node, then reflected
    (column 0 kept, the rest reversed) if a[0, 1] > a[0, K-1]."""
    a = np.asarray(a)
    K = a.shape[1]
    if K <= 3:
        return a[:, np.argsort(a[0], kind="stable")]
    a = np.roll(a, -int(np.argmin(a[0])), axis=1)
    if a[0, 1] > a[0, K - 1]:
        a = a[:, [0] + list(range(K - 1, 0, -1))]
    return a


def _add_ring_slice(g: _Grid, allowed) -> None:
    """The ring slice's nodes: a node without enough partners under the cap in row i may not sit there."""
    for i in range(g.R):
        for n in range(g.N):
            if not allowed[i][n]:
                g.model.add(g.use[i][n] == 0)


def _add_row0_table(g: _Grid, row0) -> None:
    """Row 0 holds one of the enumerated row-0 sets (exact: the list is complete when row0_sets returns one)."""
    m = g.model
    sel = [m.new_bool_var("") for _ in row0]
    m.add_exactly_one(sel)
    for lit, (_, S) in zip(sel, row0, strict=True):
        for n in S:
            m.add_implication(lit, g.use[0][n])
    inset = {n for _, S in row0 for n in S}
    for n in range(g.N):
        if n not in inset:
            m.add(g.use[0][n] == 0)


def _scenario_objective(g: _Grid, p: MappingProblem, path_lb: int, slice_cap, ring_form: str):
    """One scenario's integer objective tpp + tdp + temb (its const left out)."""
    tpp = _path_term(g, p)
    if path_lb:
        g.model.add(tpp >= path_lb)          # the path-cover bound, as a cut the LP does not find itself
    base = to_units(p.dp_base)
    if g.K == 1:
        tdp = _ring_fixed(g, base)
    else:
        if g.K <= 3:
            tdp = _ring_pairs_ladder(g, p, base, slice_cap)
        elif ring_form == "bigm":
            tdp = _ring_neighbours_bigm(g, p, base, slice_cap)
        else:
            tdp = _ring_neighbours_ladder(g, p, base, slice_cap)
        # the ring-core bound per row, as a cut: CP-SAT's LP does not see it
        g.model.add(tdp >= bounds.ring_floor(p))
    temb = 0
    if p.emb is not None and g.R > 1:
        temb = _emb_levels(g.model, to_units(p.emb),
                           [(g.x[g.bid[(0, j)]], g.x[g.bid[(g.R - 1, j)]]) for j in range(g.K)])
    return tpp + tdp + temb


def _path_term(g: _Grid, p: MappingProblem):
    """tpp >= every column's hops (and wrap hop): each hop in the compact big-M form, from both ends. With the lock
    step's pace (units.int_pace): per column a pace variable >= each of its affine terms over the boundaries' scaled
    hops (a second big-M hop variable per boundary), added to the column's sum; the slowest stage's own boundary hops
    (`lin`) ride on those boundaries' sum terms. Exact when minimising: nothing pushes a pace above its largest term."""
    m, N, x, bid = g.model, g.N, g.x, g.bid
    hop_c = to_units(p.hop)
    wrap_c = to_units(p.wrap) if p.wrap is not None else None
    pace = int_pace_tables(p) if (p.pace is not None and g.R > 1) else None
    cap = int(hop_c.max() * (g.R - 1) + (wrap_c.max() if wrap_c is not None else 0)) + 1
    if pace is not None:
        terms_max = [v for v in [pace.base] + pace.e + pace.f if v is not None] + [int(t.max()) for t in pace.s]
        lmax = int(pace.l.max())
        terms_max += [max(0, a) * lmax + max(0, b) * lmax + g for q in pace.q for a, b, g in q]
        cap += max(0, max(terms_max)) + 2 * int(pace.h.max()) + len(pace.lin) * int(pace.l.max()) + 1
    tpp = m.new_int_var(0, cap, "tpp")
    for j in range(g.K):
        terms, ph, raw = [], [], []
        for e in [h for h in g.hops if h[0][1] == j] + [w for w in g.wraps if w[0][1] == j]:
            c = wrap_c if e in g.wraps else hop_c
            if pace is not None and e not in g.wraps and e[0][0] in pace.lin:
                c = c + pace.l                      # the slowest stage's own exchange over this boundary, once
            terms.append(_hop_var(m, x, bid, e, c, N))
            if pace is not None and pace.s:         # the boundary's steep table (the wrap's last), a hop var each
                ph.append(_hop_var(m, x, bid, e, pace.s[len(ph)], N))
            elif pace is not None and e not in g.wraps:
                ph.append(_hop_var(m, x, bid, e, pace.h, N))
            if pace is not None and pace.q:         # the raw hop, pinned both ways: a plane's coefficient may be < 0
                raw.append(_hop_var(m, x, bid, e, pace.l, N, exact=True))
        if pace is not None:
            pj = m.new_int_var(0, cap, "")
            if pace.base is not None:
                m.add(pj >= pace.base)
            for v in ph if pace.s else []:
                m.add(pj >= v)
            for i, q in enumerate(pace.q):          # row i's planes on its boundary above (the wrap: row 0) and below
                # (1F1B's end rows have none: no wrap)
                for a, b, g0 in q:
                    m.add(pj >= a * raw[(i - 1) % g.R] + b * raw[i] + g0)
            for r in range(g.R - 1):
                if pace.e[r] is not None:
                    m.add(pj >= pace.e[r] + ph[r])
            for i in range(1, g.R - 1):
                if pace.f[i] is not None:
                    m.add(pj >= pace.f[i] + ph[i - 1] + ph[i])
            terms.append(pj)
        m.add(tpp >= sum(terms))
    return tpp


def _hop_var(m, x, bid, e, c, N, exact: bool = False):
    """A hop e = (u, v) of cost table c (units) in the compact big-M form, from both ends (at least its cost: exact
    when minimising a sum; `exact`: also at most, for a coefficient of either sign)."""
    ce = m.new_int_var(0, int(c.max()), "")
    u, v = bid[e[0]], bid[e[1]]
    for n in range(N):
        big = int(c[n].max())
        m.add(ce >= sum(int(c[n, q]) * x[v][q] for q in range(N) if q != n) - big * (1 - x[u][n]))
        if exact:
            m.add(ce <= sum(int(c[n, q]) * x[v][q] for q in range(N) if q != n) + int(c.max()) * (1 - x[u][n]))
        big = int(c[:, n].max())
        m.add(ce >= sum(int(c[q, n]) * x[u][q] for q in range(N) if q != n) - big * (1 - x[v][n]))
    # a hop leaving (entering) node n costs at least n's cheapest link
    cm = np.where(np.eye(N, dtype=bool), np.iinfo(np.int64).max, c)
    m.add(ce >= sum(int(cm[n].min()) * x[u][n] for n in range(N)))
    m.add(ce >= sum(int(cm[:, n].min()) * x[v][n] for n in range(N)))
    return ce


def _ring_fixed(g: _Grid, base):
    """One column (with a wrap hop): no inter-node ring, each row's base only."""
    tdp = g.model.new_int_var(int(base.min()), int(base.max()), "tdp")
    for i in range(g.R):
        g.model.add(tdp >= int(base[i]))
    return tdp


def _ring_pairs_ladder(g: _Grid, p: MappingProblem, base, cap=None):
    """K <= 3: the ring holds every pair of the row. Slowest ring as a ladder of level literals
    lvl[k] <=> T_dp >= v[k]; a pair of nodes in row i whose ring time reaches v[k] forces lvl[k] by a
    clause (not u_in or not u_im or lvl[k]); above the slice's cap the pair may not share a row."""
    m, N = g.model, g.N
    vals = {int(v) for v in base}
    pairs = []
    for i in range(g.R):
        lc = to_units(p.dp_link[i])
        for n in range(N):
            for q in range(n + 1, N):
                v = int(base[i]) + int(max(lc[n, q], lc[q, n]))
                pairs.append((v, i, n, q))
                vals.add(v)
    floor = int(max(base))                    # row 0 has no slack: T_dp >= its base always
    levels, lvl, index = _ladder(m, vals, floor, cap)
    for v, i, n, q in pairs:
        if cap is not None and v > cap:
            m.add_bool_or([~g.use[i][n], ~g.use[i][q]])
        elif v > floor:
            m.add_bool_or([~g.use[i][n], ~g.use[i][q], lvl[index[v]]])
    return _ladder_sum(m, levels, lvl, floor)


def _ring_neighbours_ladder(g: _Grid, p: MappingProblem, base, cap=None):
    """K >= 4: the ring in column order, as a ladder of level literals lvl[k] <=> T_dp >= v[k]:
    neighbour blocks (i, j), (i, j+1 mod K) on nodes n, q force the level of that link by a clause
    (not x[i,j][n] or not x[i,j+1][q] or lvl[k]); above the slice's cap the two may not be neighbours."""
    m, N = g.model, g.N
    floor = int(max(base))
    cost = []
    vals = {int(v) for v in base}
    for i in range(g.R):
        lc = to_units(p.dp_link[i])
        c = int(base[i]) + np.maximum(lc, lc.T)
        cost.append(c)
        vals.update(int(v) for v in np.unique(c[~np.eye(N, dtype=bool)]))
    levels, lvl, index = _ladder(m, vals, floor, cap)
    for i in range(g.R):
        c = cost[i]
        for j in range(g.K):
            u, w = g.x[g.bid[(i, j)]], g.x[g.bid[(i, (j + 1) % g.K)]]
            for n in range(N):
                for q in range(N):
                    if n == q:
                        continue
                    v = int(c[n, q])
                    if cap is not None and v > cap:
                        m.add_bool_or([~u[n], ~w[q]])
                    elif v > floor:
                        m.add_bool_or([~u[n], ~w[q], lvl[index[v]]])
    return _ladder_sum(m, levels, lvl, floor)


def _ring_neighbours_bigm(g: _Grid, p: MappingProblem, base, cap=None):
    """K >= 4: the ring in column order in the compact big-M form of the pipeline hops: the link e of
    neighbour blocks u = (i, j), v = (i, j+1 mod K) costs c_e >= sum_q c[n,q] x[v][q] - M_n (1 - x[u][n])
    (and from v's side); T_dp >= base_i + c_e. Above the slice's cap the two may not be neighbours."""
    m, N = g.model, g.N
    floor = int(max(base))
    tdp = m.new_int_var(floor, 1 << 40, "tdp")
    for i in range(g.R):
        lc = to_units(p.dp_link[i])
        c = np.maximum(lc, lc.T)
        np.fill_diagonal(c, 0)
        for j in range(g.K):
            u, w = g.x[g.bid[(i, j)]], g.x[g.bid[(i, (j + 1) % g.K)]]
            ce = m.new_int_var(0, int(c.max()), "")
            for n in range(N):
                big = int(c[n].max())
                m.add(ce >= sum(int(c[n, q]) * w[q] for q in range(N) if q != n and c[n, q]) - big * (1 - u[n]))
                m.add(ce >= sum(int(c[q, n]) * u[q] for q in range(N) if q != n and c[q, n]) - big * (1 - w[n]))
                if cap is not None:
                    for q in range(N):
                        if q != n and int(base[i]) + int(c[n, q]) > cap:
                            m.add_bool_or([~u[n], ~w[q]])
            m.add(tdp >= int(base[i]) + ce)
    return tdp


def _emb_levels(m, ec, ends):
    """Slowest tied-embedding all-reduce as a ladder of level literals (as the ring; big-M rows made CP-SAT
    creep up the bound unit by unit). `ec` is the integer pair cost; `ends` lists, per column, (first-stage
    literals by node, last-stage literals by node): nodes n, q at the two ends force the pair's level by
    (not first[n] or not last[q] or lvl[k])."""
    N = ec.shape[0]
    off = ~np.eye(N, dtype=bool)
    floor = int(ec[off].min())
    levels, lvl, index = _ladder(m, {int(v) for v in np.unique(ec[off])}, floor, None)
    for first, last in ends:
        for n in range(N):
            for q in range(N):
                if q != n and int(ec[n, q]) > floor:
                    m.add_bool_or([~first[n], ~last[q], lvl[index[int(ec[n, q])]]])
    return _ladder_sum(m, levels, lvl, floor)


def _ladder(m, vals, floor, cap):
    """Level literals lvl[k] <=> T >= levels[k] (implied downwards) over the values above floor (and
    at most cap); index maps a value to its level."""
    levels = sorted(v for v in vals if v > floor and (cap is None or v <= cap))
    lvl = [m.new_bool_var("") for _ in levels]
    for k in range(len(lvl) - 1):
        m.add_implication(lvl[k + 1], lvl[k])
    return levels, lvl, {v: k for k, v in enumerate(levels)}


def _ladder_sum(m, levels, lvl, floor):
    """T = floor + the steps of the levels switched on."""
    t = m.new_int_var(floor, max([floor] + levels), "tdp")
    prev = floor
    steps = []
    for k, v in enumerate(levels):
        steps.append((v - prev) * lvl[k])
        prev = v
    m.add(t == floor + sum(steps))
    return t


def _add_objective(m, objs, robust: str, limit: int | None) -> None:
    """Minimise one scenario, the mean or the worst; with a limit, demand every scenario (or the
    mean) strictly under the incumbent (the limit already excludes it)."""
    if limit is not None:
        if robust == "mean" and len(objs) > 1:
            m.add(sum(objs) <= limit * len(objs))
        else:
            for o in objs:
                m.add(o <= limit)
    if len(objs) == 1:
        m.minimize(objs[0])
    elif robust == "mean":
        m.minimize(sum(objs))
    else:
        z = m.new_int_var(-(1 << 40), 1 << 40, "worst")
        for o in objs:
            m.add(z >= o)
        m.minimize(z)


def _add_hint(g: _Grid, hint: np.ndarray) -> None:
    for k, (i, j) in enumerate(g.blocks):
        for n in range(g.N):
            g.model.add_hint(g.x[k][n], int(hint[i, j] == n))


def _grid_result(g: _Grid, solver, st, probs, *, robust, hint, cutoff, pre: _Presolve, wall,
                 time_limit_s) -> MappingResult:
    R, K = g.R, g.K
    if st == cp_model.INFEASIBLE and cutoff is not None:
        return _pruned(probs, hint, cutoff, robust, wall)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if hint is None:
            raise RuntimeError(f"CP-SAT found no mapping in {time_limit_s}s (status {solver.status_name(st)})")
        obj = robust_objective(probs, hint, robust)
        bound = robust_lower_bound(probs, robust)
        if cutoff is None and pre.per_scenario and st == cp_model.UNKNOWN:
            bound = max(bound, _bound_without_solution(solver, probs, robust, pre))
        return MappingResult(hint.copy(), obj, min(bound, obj), "TIME_LIMIT", wall, "exact")
    a = np.zeros((R, K), dtype=int)
    for k, (i, j) in enumerate(g.blocks):
        a[i, j] = next(n for n in range(g.N) if solver.boolean_value(g.x[k][n]))
    obj = robust_objective(probs, a, robust)
    bound = _int_bound(probs, robust, max(solver.best_objective_bound, pre.head_lb))
    status = "OPTIMAL" if st == cp_model.OPTIMAL else "FEASIBLE"
    if hint is not None:
        hobj = robust_objective(probs, hint, robust)
        if hobj < obj:
            a, obj = hint.copy(), hobj
    return MappingResult(a, obj, min(bound, obj), status, wall, "exact")


# Building the grid model is Python work CP-SAT's deterministic time does not see; its path term dominates, two
# big-M constraints of N terms per node and hop (_path_term). Measured here (docs/notes/solver.md, "The exact model's
# build"): 6.9-8.6 us per such term from 4 x 4 to 8 x 16 nodes, with the assignment and ring parts folded in.
GRID_TERM_S = 9e-6


def grid_build_s(R: int, K: int, N: int, wrap: bool, scenarios: int = 1, pace: bool = False,
                 planes: bool = False) -> float:
    """Seconds (work or wall, 1:1, like the two-row models' build) the full grid model takes to build (the lock
    step's pace: a second set of hop rows, _path_term; Pace.planes (interleaved's, one-stage 1F1B's): a third, of raw
    hops pinned both ways, 1.5 rows each)."""
    hops = (R - 1) * K * (2 if pace else 1) + (K if wrap and R > 1 else 0) + (3 * R * K // 2 if planes else 0)
    return GRID_TERM_S * scenarios * hops * 2 * N * (N - 1)


def _unbuilt_result(probs, a, pre: _Presolve, robust, wall) -> MappingResult:
    """TIME_LIMIT with the incumbent (the hint, or the pre-solve's better placement; rank order without either) and
    the bounds the pre-solve proved."""
    p0 = probs[0]
    a = p0.rank_order() if a is None else np.asarray(a)
    obj = robust_objective(probs, a, robust)
    bound = robust_lower_bound(probs, robust)
    if pre.head_lb:
        bound = max(bound, _int_bound(probs, robust, pre.head_lb))
    return MappingResult(a.copy(), obj, min(bound, obj), "TIME_LIMIT", wall, "exact")


def _int_bound(probs, robust, bound_int) -> float:
    """A bound in seconds from a bound on the model's integer objective: the constant back, the mean over scenarios
    for robust "mean", and each term of each scenario's rounding allowed for, so that it stays valid."""
    p0 = probs[0]
    nscen = len(probs) if (robust == "mean" and len(probs) > 1) else 1
    terms = (p0.layout.rows + (1 if p0.wrap is not None and p0.layout.rows > 1 else 0) + 3
             + pace_slack(probs)) * len(probs)
    return robust_const(probs, robust) + bound_int * UNIT / nscen - terms * UNIT


def _bound_without_solution(solver, probs, robust, pre: _Presolve) -> float:
    """The hint is a solution of the model, so CP-SAT's bound holds even without a solution of its own (in
    the slice too: what the slice cuts is worse than the hint); so do the pre-solve bounds."""
    p0 = probs[0]
    R = p0.layout.rows
    slack = rounding_slack(R, pace_slack(probs))
    bound = robust_const(probs, robust) + solver.best_objective_bound * UNIT - slack * UNIT
    for s, p in enumerate(probs):
        if pre.slice_caps[s] is not None or pre.path_lbs[s]:
            bound = max(bound, float(p.const + (pre.path_lbs[s] + bounds.ring_floor(p)) * UNIT - slack * UNIT))
    if pre.head_lb:
        bound = max(bound, float(p0.const + pre.head_lb * UNIT - slack * UNIT))
    return bound


# --- one column: the circuit model ---------------------------------------------------------------------------

def _solve_single_column(probs, *, time_limit_s, seed, hint, robust, workers, cutoff, t0,
                         debug=None, wall_limit_s=None) -> MappingResult:
    """One replica column (K = 1, no wrap link): the mapping is a Hamiltonian path through R of the
    N nodes, stage 0 first. CP-SAT's circuit constraint over the nodes plus a depot (whose arcs mark
    the path's ends; a node's self-loop means it stays idle) is far stronger than assignment variables."""
    p0 = probs[0]
    R, N = p0.layout.rows, p0.n
    m, lit = _circuit_model(R, N)
    objs = [_circuit_objective(m, lit, p, R, N) for p in probs]
    # objective = const + path + the rows' fixed rings (one column: no inter-node ring)
    _add_objective(m, objs, robust, None if cutoff is None else
                   cutoff_int(cutoff, probs, robust) - int(to_units(max(p.dp_base.max() for p in probs))))
    if hint is not None and cutoff is None:
        _add_circuit_hint(m, lit, [int(v) for v in hint[:, 0]], R)
    if wall_limit_s is not None:       # work-limited (see solve_exact)
        solver = new_solver(time_limit_s, workers, seed, wall_s=max(0.05, wall_limit_s - (time.perf_counter() - t0)))
    else:
        solver = new_solver(max(0.05, time_limit_s - (time.perf_counter() - t0)), workers, seed)
    st = solve(solver, m, debug)
    wall = time.perf_counter() - t0
    if st == cp_model.INFEASIBLE and cutoff is not None:
        return _pruned(probs, hint, cutoff, robust, wall)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if hint is not None:
            return MappingResult(hint.copy(), robust_objective(probs, hint, robust),
                                 robust_lower_bound(probs, robust), "TIME_LIMIT", wall, "exact")
        raise RuntimeError(f"CP-SAT found no mapping in {time_limit_s}s (status {solver.status_name(st)})")
    start = next(n for n in range(N) if solver.boolean_value(lit[("s", n)]))
    order = [start]
    while len(order) < R:
        cur = order[-1]
        order.append(next(q for q in range(N) if q != cur and solver.boolean_value(lit[(cur, q)])))
    a = np.array(order).reshape(R, 1)
    obj = robust_objective(probs, a, robust)
    nscen = len(probs) if (robust == "mean" and len(probs) > 1) else 1
    dpmax = float(min(p.dp_base.max() for p in probs))
    bound = (robust_const(probs, robust) + dpmax + solver.best_objective_bound * UNIT / nscen
             - rounding_slack(R) * UNIT)
    if hint is not None and robust_objective(probs, hint, robust) < obj:
        a, obj = hint.copy(), robust_objective(probs, hint, robust)
    return MappingResult(a, obj, min(bound, obj), "OPTIMAL" if st == cp_model.OPTIMAL else "FEASIBLE", wall,
                         "exact")


def _circuit_model(R: int, N: int):
    """Arc literals lit[(n, q)], the depot's lit[("s", n)] / lit[("e", n)] (the path's ends) and, with spare
    nodes, lit[("idle", n)] (a self-loop: n stays out)."""
    m = cp_model.CpModel()
    D = N
    arcs, lit = [], {}
    for n in range(N):
        for q in range(N):
            if n != q:
                lit[(n, q)] = m.new_bool_var("")
                arcs.append((n, q, lit[(n, q)]))
        lit[("s", n)] = m.new_bool_var("")
        lit[("e", n)] = m.new_bool_var("")
        arcs.append((D, n, lit[("s", n)]))
        arcs.append((n, D, lit[("e", n)]))
        if N > R:
            lit[("idle", n)] = m.new_bool_var("")
            arcs.append((n, n, lit[("idle", n)]))
    m.add_circuit(arcs)
    if N > R:
        m.add(sum(lit[("idle", n)] for n in range(N)) == N - R)
    return m, lit


def _circuit_objective(m, lit, p: MappingProblem, R: int, N: int):
    """The path's hops, plus the tied-embedding all-reduce between its two ends (first and last stage)."""
    c = to_units(p.hop)
    path = sum(int(c[n, q]) * lit[(n, q)] for n in range(N) for q in range(N) if n != q and c[n, q])
    if p.emb is not None and R > 1:
        path = path + _emb_levels(m, to_units(p.emb), [([lit[("s", n)] for n in range(N)],
                                                         [lit[("e", n)] for n in range(N)])])
    return path


def _add_circuit_hint(m, lit, order: list[int], R: int) -> None:
    on = {(order[i], order[i + 1]) for i in range(R - 1)}
    for (key, v) in lit.items():
        if key[0] == "s":
            m.add_hint(v, key[1] == order[0])
        elif key[0] == "e":
            m.add_hint(v, key[1] == order[-1])
        elif key[0] == "idle":
            m.add_hint(v, key[1] not in order)
        else:
            m.add_hint(v, key in on)
