"""Exact mapping with CP-SAT: blocks -> nodes, minimising slowest pipeline path + slowest DP ring.

Formulation (stronger than Pipette's integer node variables with element constraints):
- x[b, n] = block b on node n; one node per block, at most one block per node.
- each pipeline hop e = (u, v) costs c_e >= sum_m c[n,m] x[v,m] - M_n (1 - x[u,n]) (compact; N rows per
  hop). The transportation linearisation y[e,n,m] (strong=True) has a tighter LP but N^2 variables
  per hop; measured on 16-node instances it proved optimality 2-5x slower, so compact is the default.
- the slowest data-parallel ring is a ladder of level literals lvl[k] <=> T_dp >= v[k]. The ring of
  row i runs in column order (MappingProblem.dp_costs), over the links of blocks (i, j), (i, j+1 mod K).
  With K <= 3 columns those are all pairs of the row, so a pair of nodes in one row forces its level
  by a clause (not u_n or not u_m or lvl[k]) (measured: 30 s -> 6 s to prove a 16-node instance
  against the big-M form T >= L (u_n + u_m - 1)). With K >= 4 the clause is on the two neighbour
  blocks: (not x[i,j][n] or not x[i,j+1][q] or lvl[k]) (ring_form="ladder"; "bigm" = the compact
  big-M rows of the pipeline hops, measured slower: see docs/notes/solver.md).
- symmetry: with K <= 3 every column order is a rotation or reflection of the ring, so the columns
  are ordered by their row-0 node; with K >= 4 only the ring's rotations and reflection leave the
  objective unchanged: column 0 holds the smallest row-0 node and pos0[1] < pos0[K-1]. A hint is
  put in that form first (_canonical), else CP-SAT discards it as infeasible.
- ring slice (one scenario, or the worst case over several; with an incumbent): every better placement
  has slowest ring <= U - P_LB,
  P_LB a path-cover lower bound (path_lower_bound_int), so row pairs above that cap are forbidden (as
  ring neighbours when K >= 4) and tpp >= P_LB is a cut. Measured on 64 nodes (deterministic time 20): mapping gap 6.5% -> 0.32%.
- column decomposition (columns.py, tried first when the row-0 sets under the incumbent are enumerated): fix
  row 0, enumerate each column's paths, decide a set-partitioning cover; it proves or hands CP-SAT a better
  hint and bound. Measured: the 32-node benchmark instances proved in 6-25 s (were unproved at 60 s).
Costs are integers in units of 0.1 us; the reported objective is recomputed in floating point.
Several scenarios (bandwidth snapshots) give the robust problem: minimise the worst (or the mean).
"""
from __future__ import annotations

import time

import numpy as np
from ortools.sat.python import cp_model

from planner.mapping.columns import solve_columns
from planner.mapping.problem import (
    MappingProblem,
    core,
    node_ring_floor,
    ring_degree,
    ring_order_bound,
)
from planner.mapping.result import MappingResult

UNIT = 1e-7                     # seconds per integer cost unit
RING_FORM = "ladder"            # the ring term with K >= 4 columns: "ladder" or "bigm" (solve_exact's ring_form)


def _int(a) -> np.ndarray:
    return np.rint(np.asarray(a) / UNIT).astype(np.int64)


def solve_exact(problems: list[MappingProblem] | MappingProblem, *, time_limit_s: float = 10.0, seed: int = 0,
                hint: np.ndarray | None = None, robust: str = "worst", workers: int = 2,
                strong: bool | None = None, both_sides: bool = True,
                cutoff: float | None = None, ring_cap: bool = True,
                wall_limit_s: float | None = None, ring_form: str | None = None) -> MappingResult:
    """cutoff (seconds): only mappings strictly better than this are of interest; if CP-SAT proves
    there are none, the result has status "PRUNED" and bound = cutoff (branch and bound across configs).
    ring_cap: with one scenario and an incumbent (hint or cutoff), restrict the search to placements
    whose slowest ring leaves room for a path at least as long as a path lower bound (exact; see
    _ring_cap).
    wall_limit_s: a wall-clock stop other than time_limit_s (benchmarks: a deterministic-time limit
    with a generous wall clock, so that figures do not depend on the machine's load)."""
    probs = problems if isinstance(problems, list) else [problems]
    p0 = probs[0]
    L, N = p0.layout, p0.n
    R, K = L.rows, L.cols
    t0 = time.perf_counter()
    if R * K == 1 or N == 1:
        a = np.zeros((R, K), dtype=int)
        obj = _score(probs, a, robust)
        return MappingResult(a, obj, obj, "OPTIMAL", time.perf_counter() - t0, "exact")
    strong = bool(strong)
    ring_form = ring_form or RING_FORM
    if K == 1 and p0.wrap is None:
        return _solve_single_column(probs, time_limit_s=time_limit_s, seed=seed, hint=hint, robust=robust,
                                    workers=workers, cutoff=cutoff, t0=t0)

    if hint is not None:
        # the model fixes the column order's symmetry (see _canonical); a hint in another form would
        # violate that symmetry breaking and be discarded by CP-SAT (same objective, reordered)
        hint = _canonical(np.asarray(hint))
    m = cp_model.CpModel()
    blocks = [(i, j) for i in range(R) for j in range(K)]
    bid = {b: k for k, b in enumerate(blocks)}
    x = [[m.NewBoolVar(f"x{k}_{n}") for n in range(N)] for k in range(len(blocks))]
    for k in range(len(blocks)):
        m.AddExactlyOne(x[k])
    for n in range(N):
        m.AddAtMostOne(x[k][n] for k in range(len(blocks)))
    # symmetry of the column order: the ring is unchanged by its rotations and reflection (with K <= 3
    # that is every order), and the paths by any column permutation
    pos0 = [sum(n * x[bid[(0, j)]][n] for n in range(N)) for j in range(K)]
    if K <= 3:
        for j in range(K - 1):
            m.Add(pos0[j] < pos0[j + 1])
    else:
        for j in range(1, K):
            m.Add(pos0[0] < pos0[j])
        m.Add(pos0[1] < pos0[K - 1])

    # the hop structure is shared by every scenario; only its costs differ
    hops = [((i, j), (i + 1, j)) for j in range(K) for i in range(R - 1)]
    wraps = [((R - 1, j), (0, j)) for j in range(K)] if (p0.wrap is not None and R > 1) else []
    off = [(n, q) for n in range(N) for q in range(N) if n != q]
    ys = {}
    if strong:
        for e in hops + wraps:
            u, v = bid[e[0]], bid[e[1]]
            y = {(n, q): m.NewBoolVar("") for (n, q) in off}
            for n in range(N):
                m.Add(sum(y[(n, q)] for q in range(N) if q != n) == x[u][n])
                m.Add(sum(y[(q, n)] for q in range(N) if q != n) == x[v][n])
            ys[e] = y
    # use_b[i][n]: node n hosts a block of row i (a literal, so ring conflicts become clauses)
    use_b = []
    for i in range(R):
        row = []
        for n in range(N):
            b = m.NewBoolVar("")
            m.Add(b == sum(x[bid[(i, j)]][n] for j in range(K)))
            row.append(b)
        use_b.append(row)

    # per scenario: the ring slice's cap and P_LB (None / 0: not sliced)
    slice_caps, path_lbs, head_lb = [None] * len(probs), [0] * len(probs), 0
    better = None                    # a placement the column decomposition found under the limit (a hint)
    # the slice needs every better placement to keep each scenario's objective under the limit: one
    # scenario, or the worst case over several (the mean lets one scenario exceed it)
    per_scenario = len(probs) == 1 or robust == "worst"
    if ring_cap and K > 1 and per_scenario and (hint is not None or cutoff is not None):
        limit_int = (_cutoff_int(cutoff, probs, robust) if cutoff is not None
                     else max(_int_objective(p, hint) for p in probs))
        # any one scenario's slice is valid for the worst case; the pre-solve bounds cost 0.3-2 s per scenario
        # (slicing all 5 of the drift spec's was slower), so only the binding one is sliced: the hint's
        # slowest, else the one with the highest bound
        s_ = 0 if len(probs) == 1 else int(np.argmax(
            [_int_objective(p, hint) for p in probs] if hint is not None else [p.lower_bound() for p in probs]))
        p = probs[s_]
        cut = _ring_cap(p, limit_int, time_limit_s, seed)
        path_lbs[s_] = cut[2]
        row0 = _row0_sets(p, limit_int - cut[2] - _emb_floor(p))
        head_lb = _head_bound(p, limit_int, cut[2], time_limit_s, seed, sets=row0) or 0
        if cutoff is not None and head_lb > limit_int:
            # no row-0 set leaves room for a path under the cutoff: nothing strictly better exists
            a = hint.copy() if hint is not None else None
            return MappingResult(a, _score(probs, a, robust) if a is not None else float("inf"),
                                 float(cutoff), "PRUNED", time.perf_counter() - t0, "exact")
        use_columns = COLUMNS and len(probs) == 1 and R > 1
        col_sets = row0
        if use_columns and row0 is None:
            # more sets than the head bound takes: the decomposition skips every set whose floor is over the
            # incumbent once it has one, so a loose incumbent (many sets) costs little more
            col_sets = _row0_sets(p, limit_int - cut[2] - _emb_floor(p), limit=COLUMN_SETS_MAX)
        if use_columns and col_sets:
            # CP-SAT keeps at least COLUMN_CPSAT_MIN of the limit: when the decomposition does not finish (it
            # needs ~25 s on the 32-node GPT-3 175B instance), short limits still get CP-SAT's incumbents
            share = max(0.0, min(COLUMN_SHARE * time_limit_s,
                                 time_limit_s - min(COLUMN_CPSAT_MIN, 0.5 * time_limit_s)))
            out = solve_columns(p, col_sets, limit_int, lambda a_: _int_objective(p, a_), share,
                                seed, path_floor=cut[2])
            if out is not None and out.proved:
                wall = time.perf_counter() - t0
                if out.assign is not None:
                    a = _canonical(out.assign)
                    obj = _score(probs, a, robust)
                    bound = float(p.const + out.value * UNIT - (R + 3) * UNIT)
                    return MappingResult(a, obj, min(bound, obj), "OPTIMAL", wall, "exact")
                a = hint.copy() if hint is not None else None
                if cutoff is not None:
                    return MappingResult(a, _score(probs, a, robust) if a is not None else float("inf"),
                                         float(cutoff), "PRUNED", wall, "exact")
                # hint mode, nothing at or under the hint's own value beyond it: the hint is optimal
                obj = _score(probs, a, robust)
                bound = float(p.const + (out.bound - 1) * UNIT - (R + 3) * UNIT)
                return MappingResult(a, obj, min(bound, obj), "OPTIMAL", wall, "exact")
            if out is not None:
                head_lb = max(head_lb, out.bound)
                if out.assign is not None:
                    better = _canonical(out.assign)
        if cut[0] is not None:
            slice_caps[s_], allowed = cut[0], cut[1]
            for i in range(R):
                for n in range(N):
                    if not allowed[i][n]:
                        m.Add(use_b[i][n] == 0)
        if ROW0_TABLE and row0:
            # every placement worth searching has its row-0 ring <= limit_int - P_LB, so row 0 holds one of
            # the enumerated sets (exact: the list is complete when _row0_sets returns one)
            sel = [m.NewBoolVar("") for _ in row0]
            m.AddExactlyOne(sel)
            for lit, (_, S) in zip(sel, row0):
                for n in S:
                    m.AddImplication(lit, use_b[0][n])
            inset = {n for _, S in row0 for n in S}
            for n in range(N):
                if n not in inset:
                    m.Add(use_b[0][n] == 0)

    scen_obj = []
    for s_, p in enumerate(probs):
        path_lb, slice_cap = path_lbs[s_], slice_caps[s_]
        hop_c = _int(p.hop)
        wrap_c = _int(p.wrap) if p.wrap is not None else None
        cap = int(hop_c.max() * (R - 1) + (wrap_c.max() if wrap_c is not None else 0)) + 1
        tpp = m.NewIntVar(0, cap, "tpp")
        for j in range(K):
            terms = []
            for e in [h for h in hops if h[0][1] == j] + [w for w in wraps if w[0][1] == j]:
                c = wrap_c if e in wraps else hop_c
                if strong:
                    terms.append(sum(int(c[n, q]) * ys[e][(n, q)] for (n, q) in off if c[n, q]))
                else:
                    ce = m.NewIntVar(0, int(c.max()), "")
                    u, v = bid[e[0]], bid[e[1]]
                    for n in range(N):
                        big = int(c[n].max())
                        m.Add(ce >= sum(int(c[n, q]) * x[v][q] for q in range(N) if q != n) - big * (1 - x[u][n]))
                        if both_sides:
                            big = int(c[:, n].max())
                            m.Add(ce >= sum(int(c[q, n]) * x[u][q] for q in range(N) if q != n)
                                  - big * (1 - x[v][n]))
                    if both_sides:   # a hop leaving (entering) node n costs at least n's cheapest link
                        cm = np.where(np.eye(N, dtype=bool), np.iinfo(np.int64).max, c)
                        m.Add(ce >= sum(int(cm[n].min()) * x[u][n] for n in range(N)))
                        m.Add(ce >= sum(int(cm[:, n].min()) * x[v][n] for n in range(N)))
                    terms.append(ce)
            m.Add(tpp >= sum(terms))
        if path_lb:
            m.Add(tpp >= path_lb)          # the path-cover bound, as a cut the LP does not find itself
        base = _int(p.dp_base)
        if K > 1:
            if K <= 3:
                tdp = _bottleneck_levels(m, p, base, use_b, R, N, slice_cap)
            elif ring_form == "bigm":
                tdp = _ring_bigm(m, p, base, x, bid, R, K, N, slice_cap)
            else:
                tdp = _ring_levels(m, p, base, x, bid, R, K, N, slice_cap)
            # the ring-core bound per row, as a cut: CP-SAT's LP does not see it
            m.Add(tdp >= _ring_floor(p))
        else:
            tdp = m.NewIntVar(int(base.min()), int(base.max()), "tdp")
            for i in range(R):
                m.Add(tdp >= int(base[i]))
        temb = (_emb_levels(m, _int(p.emb), [(x[bid[(0, j)]], x[bid[(R - 1, j)]]) for j in range(K)])
                if (p.emb is not None and R > 1) else 0)
        scen_obj.append(tpp + tdp + temb)
    # head_lb is not added as a cut (obj >= head_lb): measured on the 32-node benchmark instance it changed
    # CP-SAT's search for the worse (579.11 vs 578.90 ms in deterministic time 40); it only raises the bound

    # objective(scenario) = const + tpp + tdp
    _objective(m, scen_obj, robust, None if cutoff is None else
               _cutoff_int(cutoff, probs, robust))

    # in cutoff mode the hint (never better than the incumbent) violates the cutoff; OR-Tools 9.15
    # aborts the process ("Check failed: heuristics.fixed_search") on such a hint with
    # interleave_search, so it is only kept as the fallback answer
    if better is not None:
        # it beats the limit, so it is a solution of the model in either mode; it is also the fallback answer
        hint = better
    if hint is not None and (cutoff is None or better is not None):
        for k, (i, j) in enumerate(blocks):
            for n in range(N):
                m.AddHint(x[k][n], int(hint[i, j] == n))

    if wall_limit_s is not None:
        solver = _solver(time_limit_s, workers, seed)
        solver.parameters.max_time_in_seconds = float(wall_limit_s)
    else:
        # the caller's limit covers this whole call: model building and the path bound ran out of it
        solver = _solver(max(0.05, time_limit_s - (time.perf_counter() - t0)), workers, seed)
    st = solver.Solve(m)
    wall = time.perf_counter() - t0
    if st == cp_model.INFEASIBLE and cutoff is not None:
        a = hint.copy() if hint is not None else None
        obj = _score(probs, a, robust) if a is not None else float("inf")
        return MappingResult(a, obj, float(cutoff), "PRUNED", wall, "exact")
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if hint is not None:
            obj = _score(probs, hint, robust)
            bound = _bound(probs, robust)
            if cutoff is None and per_scenario and st == cp_model.UNKNOWN:
                # the hint is a solution of the model, so CP-SAT's bound holds even without a solution
                # of its own (in the slice too: what the slice cuts is worse than the hint)
                bound = max(bound, _const(probs, robust) + solver.BestObjectiveBound() * UNIT - (R + 3) * UNIT)
                for s_, p in enumerate(probs):
                    if slice_caps[s_] is not None or path_lbs[s_]:
                        bound = max(bound, float(p.const + (path_lbs[s_] + _ring_floor(p)) * UNIT - (R + 3) * UNIT))
                if head_lb:
                    bound = max(bound, float(p0.const + head_lb * UNIT - (R + 3) * UNIT))
            return MappingResult(hint.copy(), obj, min(bound, obj), "TIME_LIMIT", wall, "exact")
        raise RuntimeError(f"CP-SAT found no mapping in {time_limit_s}s (status {solver.StatusName(st)})")
    a = np.zeros((R, K), dtype=int)
    for k, (i, j) in enumerate(blocks):
        a[i, j] = next(n for n in range(N) if solver.BooleanValue(x[k][n]))
    obj = _score(probs, a, robust)
    const = _const(probs, robust)
    bound_int = max(solver.BestObjectiveBound(), head_lb)
    nscen = len(probs) if (robust == "mean" and len(probs) > 1) else 1
    # rounding to 0.1 us per term: allow the bound that slack so it stays valid
    terms = (R + len(wraps) // max(1, K) + 3) * len(probs)
    bound = const + bound_int * UNIT / nscen - terms * UNIT
    status = "OPTIMAL" if st == cp_model.OPTIMAL else "FEASIBLE"
    if hint is not None:
        hobj = _score(probs, hint, robust)
        if hobj < obj:
            a, obj = hint.copy(), hobj
    return MappingResult(a, obj, min(bound, obj), status, wall, "exact")


def _cutoff_int(cutoff: float, probs, robust: str) -> int:
    """The integer objective a placement must stay under to count as strictly better than `cutoff`.
    Every cost term is rounded to 0.1 us on its own (the hops, the wrap, a row's base and link, the
    embedding pair), so a placement within that many units of the cutoff is a tie, not an improvement
    (the same order as solve's absolute tolerance, 20 us); without the margin CP-SAT may return the
    incumbent's own twin as 'better' by rounding."""
    R = probs[0].layout.rows
    return int(np.floor((cutoff - _const(probs, robust)) / UNIT)) - (R + 3)


def _objective(m, objs, robust: str, limit: int | None) -> None:
    """Minimise one scenario, the mean or the worst; with a limit, demand every scenario (or the
    mean) strictly under the incumbent (the limit already excludes it)."""
    if limit is not None:
        if robust == "mean" and len(objs) > 1:
            m.Add(sum(objs) <= limit * len(objs))
        else:
            for o in objs:
                m.Add(o <= limit)
    if len(objs) == 1:
        m.Minimize(objs[0])
    elif robust == "mean":
        m.Minimize(sum(objs))
    else:
        z = m.NewIntVar(-(1 << 40), 1 << 40, "worst")
        for o in objs:
            m.Add(z >= o)
        m.Minimize(z)


def _solver(time_limit_s: float, workers: int, seed: int) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = float(time_limit_s)
    prm.num_workers = max(1, workers)
    prm.random_seed = int(seed)
    prm.interleave_search = True           # deterministic portfolio: same seed, same answer
    prm.max_deterministic_time = float(time_limit_s)
    return solver


def _solve_single_column(probs, *, time_limit_s, seed, hint, robust, workers, cutoff, t0) -> MappingResult:
    """One replica column (K = 1, no wrap link): the mapping is a Hamiltonian path through R of the
    N nodes, stage 0 first. CP-SAT's circuit constraint over the nodes plus a depot (whose arcs mark
    the path's ends; a node's self-loop means it stays idle) is far stronger than assignment
    variables: the 16-node, 16-row case that the general model could not prove in 30 s."""
    p0 = probs[0]
    R, N = p0.layout.rows, p0.n
    m = cp_model.CpModel()
    D = N
    arcs, lit = [], {}
    for n in range(N):
        for q in range(N):
            if n != q:
                lit[(n, q)] = m.NewBoolVar("")
                arcs.append((n, q, lit[(n, q)]))
        lit[("s", n)] = m.NewBoolVar("")
        lit[("e", n)] = m.NewBoolVar("")
        arcs.append((D, n, lit[("s", n)]))
        arcs.append((n, D, lit[("e", n)]))
        if N > R:
            lit[("idle", n)] = m.NewBoolVar("")
            arcs.append((n, n, lit[("idle", n)]))
    m.AddCircuit(arcs)
    if N > R:
        m.Add(sum(lit[("idle", n)] for n in range(N)) == N - R)
    objs = []
    for p in probs:
        c = _int(p.hop)
        path = sum(int(c[n, q]) * lit[(n, q)] for n in range(N) for q in range(N) if n != q and c[n, q])
        if p.emb is not None and R > 1:
            # tied-embedding all-reduce between the path's two ends (first and last stage)
            path = path + _emb_levels(m, _int(p.emb), [([lit[("s", n)] for n in range(N)],
                                                         [lit[("e", n)] for n in range(N)])])
        objs.append(path)
    # objective = const + path + the rows' fixed rings (one column: no inter-node ring)
    _objective(m, objs, robust, None if cutoff is None else
               _cutoff_int(cutoff, probs, robust)
               - int(_int(max(p.dp_base.max() for p in probs))))
    if hint is not None and cutoff is None:
        order = [int(v) for v in hint[:, 0]]
        on = {(order[i], order[i + 1]) for i in range(R - 1)}
        for (key, v) in lit.items():
            if key[0] == "s":
                m.AddHint(v, key[1] == order[0])
            elif key[0] == "e":
                m.AddHint(v, key[1] == order[-1])
            elif key[0] == "idle":
                m.AddHint(v, key[1] not in order)
            else:
                m.AddHint(v, key in on)
    solver = _solver(max(0.05, time_limit_s - (time.perf_counter() - t0)), workers, seed)
    st = solver.Solve(m)
    wall = time.perf_counter() - t0
    if st == cp_model.INFEASIBLE and cutoff is not None:
        a = hint.copy() if hint is not None else None
        return MappingResult(a, _score(probs, a, robust) if a is not None else float("inf"), float(cutoff),
                             "PRUNED", wall, "exact")
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if hint is not None:
            return MappingResult(hint.copy(), _score(probs, hint, robust), _bound(probs, robust), "TIME_LIMIT",
                                 wall, "exact")
        raise RuntimeError(f"CP-SAT found no mapping in {time_limit_s}s (status {solver.StatusName(st)})")
    start = next(n for n in range(N) if solver.BooleanValue(lit[("s", n)]))
    order = [start]
    while len(order) < R:
        cur = order[-1]
        order.append(next(q for q in range(N) if q != cur and solver.BooleanValue(lit[(cur, q)])))
    a = np.array(order).reshape(R, 1)
    obj = _score(probs, a, robust)
    nscen = len(probs) if (robust == "mean" and len(probs) > 1) else 1
    dpmax = float(min(p.dp_base.max() for p in probs))
    bound = _const(probs, robust) + dpmax + solver.BestObjectiveBound() * UNIT / nscen - (R + 3) * UNIT
    if hint is not None and _score(probs, hint, robust) < obj:
        a, obj = hint.copy(), _score(probs, hint, robust)
    return MappingResult(a, obj, min(bound, obj), "OPTIMAL" if st == cp_model.OPTIMAL else "FEASIBLE", wall,
                         "exact")


def _bottleneck_levels(m, p, base, use_b, R, N, cap=None):
    """Slowest data-parallel ring as a ladder of level literals: lvl[k] <=> T_dp >= v[k].

    A pair of nodes in row i whose ring time reaches v[k] forces lvl[k] by a clause
    (not u_in or not u_im or lvl[k]); clauses propagate far better than big-M rows.
    """
    vals = {int(v) for v in base}
    pairs = []
    for i in range(R):
        lc = _int(p.dp_link[i])
        for n in range(N):
            for q in range(n + 1, N):
                v = int(base[i]) + int(max(lc[n, q], lc[q, n]))
                pairs.append((v, i, n, q))
                vals.add(v)
    floor = int(max(base))                    # row 0 has no slack: T_dp >= its base always
    levels, lvl, index = _ladder(m, vals, floor, cap)
    for v, i, n, q in pairs:
        if cap is not None and v > cap:      # outside the slice: the pair may not share a row
            m.AddBoolOr([use_b[i][n].Not(), use_b[i][q].Not()])
        elif v > floor:
            m.AddBoolOr([use_b[i][n].Not(), use_b[i][q].Not(), lvl[index[v]]])
    return _ladder_sum(m, levels, lvl, floor)


def _ladder(m, vals, floor, cap):
    """Level literals lvl[k] <=> T_dp >= levels[k] (implied downwards) over the values above floor (and
    at most cap); index maps a value to its level."""
    levels = sorted(v for v in vals if v > floor and (cap is None or v <= cap))
    lvl = [m.NewBoolVar("") for _ in levels]
    for k in range(len(lvl) - 1):
        m.AddImplication(lvl[k + 1], lvl[k])
    return levels, lvl, {v: k for k, v in enumerate(levels)}


def _ladder_sum(m, levels, lvl, floor):
    """T_dp = floor + the steps of the levels switched on."""
    tdp = m.NewIntVar(floor, max([floor] + levels), "tdp")
    prev = floor
    steps = []
    for k, v in enumerate(levels):
        steps.append((v - prev) * lvl[k])
        prev = v
    m.Add(tdp == floor + sum(steps))
    return tdp


def _ring_levels(m, p, base, x, bid, R, K, N, cap=None):
    """Slowest ring in column order (K >= 4) as a ladder of level literals lvl[k] <=> T_dp >= v[k]:
    neighbour blocks (i, j), (i, j+1 mod K) on nodes n, q force the level of that link by a clause
    (not x[i,j][n] or not x[i,j+1][q] or lvl[k]); above the slice's cap the two may not be neighbours."""
    floor = int(max(base))
    cost = []
    vals = {int(v) for v in base}
    for i in range(R):
        lc = _int(p.dp_link[i])
        c = int(base[i]) + np.maximum(lc, lc.T)
        cost.append(c)
        vals.update(int(v) for v in np.unique(c[~np.eye(N, dtype=bool)]))
    levels, lvl, index = _ladder(m, vals, floor, cap)
    for i in range(R):
        c = cost[i]
        for j in range(K):
            u, w = x[bid[(i, j)]], x[bid[(i, (j + 1) % K)]]
            for n in range(N):
                for q in range(N):
                    if n == q:
                        continue
                    v = int(c[n, q])
                    if cap is not None and v > cap:
                        m.AddBoolOr([u[n].Not(), w[q].Not()])
                    elif v > floor:
                        m.AddBoolOr([u[n].Not(), w[q].Not(), lvl[index[v]]])
    return _ladder_sum(m, levels, lvl, floor)


def _emb_levels(m, ec, ends):
    """Slowest tied-embedding all-reduce as a ladder of level literals (as the ring). `ec` is the integer
    pair cost; `ends` lists, per column, (first-stage literals by node, last-stage literals by node): nodes
    n, q at the two ends force the pair's level by (not first[n] or not last[q] or lvl[k]). Measured on tiny
    grids: big-M rows for this term made CP-SAT's core worker creep up the bound unit by unit (a 2 x 2 grid
    on 6 nodes: 15 s wall to prove); the ladder steps level by level."""
    N = ec.shape[0]
    off = ~np.eye(N, dtype=bool)
    floor = int(ec[off].min())
    levels, lvl, index = _ladder(m, {int(v) for v in np.unique(ec[off])}, floor, None)
    for first, last in ends:
        for n in range(N):
            for q in range(N):
                if q != n and int(ec[n, q]) > floor:
                    m.AddBoolOr([first[n].Not(), last[q].Not(), lvl[index[int(ec[n, q])]]])
    return _ladder_sum(m, levels, lvl, floor)


def _ring_bigm(m, p, base, x, bid, R, K, N, cap=None):
    """Slowest ring in column order (K >= 4) in the compact big-M form of the pipeline hops: the link
    e of neighbour blocks u = (i, j), v = (i, j+1 mod K) costs c_e >= sum_q c[n,q] x[v][q] - M_n (1 - x[u][n])
    (and from v's side); T_dp >= base_i + c_e. Above the slice's cap the two may not be neighbours."""
    floor = int(max(base))
    tdp = m.NewIntVar(floor, 1 << 40, "tdp")
    for i in range(R):
        lc = _int(p.dp_link[i])
        c = np.maximum(lc, lc.T)
        np.fill_diagonal(c, 0)
        for j in range(K):
            u, w = x[bid[(i, j)]], x[bid[(i, (j + 1) % K)]]
            ce = m.NewIntVar(0, int(c.max()), "")
            for n in range(N):
                big = int(c[n].max())
                m.Add(ce >= sum(int(c[n, q]) * w[q] for q in range(N) if q != n and c[n, q]) - big * (1 - u[n]))
                m.Add(ce >= sum(int(c[q, n]) * u[q] for q in range(N) if q != n and c[q, n]) - big * (1 - w[n]))
                if cap is not None:
                    for q in range(N):
                        if q != n and int(base[i]) + int(c[n, q]) > cap:
                            m.AddBoolOr([u[n].Not(), w[q].Not()])
            m.Add(tdp >= int(base[i]) + ce)
    return tdp


def _canonical(a: np.ndarray) -> np.ndarray:
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


def _score(probs, a, robust) -> float:
    vals = [p.objective(a) for p in probs]
    return float(np.mean(vals) if robust == "mean" else max(vals))


def _const(probs, robust) -> float:
    vals = [p.const for p in probs]
    return float(np.mean(vals) if robust == "mean" else min(vals))


def _bound(probs, robust) -> float:
    vals = [p.lower_bound() for p in probs]
    return float(np.mean(vals) if robust == "mean" else max(vals))


def _int_objective(p: MappingProblem, a: np.ndarray) -> int:
    """The model's integer objective (tpp + tdp, 0.1 us units) of an assignment, as the model scores it."""
    R, K = a.shape
    hop_c = _int(p.hop)
    path = hop_c[a[:-1], a[1:]].sum(axis=0) if R > 1 else np.zeros(K, dtype=np.int64)
    if p.wrap is not None and R > 1:
        path = path + _int(p.wrap)[a[R - 1], a[0]]
    base = _int(p.dp_base)
    ring = int(base.max())
    if K > 1:
        for i in range(R):
            lc = _int(p.dp_link[i])
            for j in range(K):                     # the ring in column order: neighbour links only
                n, q = a[i, j], a[i, (j + 1) % K]
                ring = max(ring, int(base[i]) + int(max(lc[n, q], lc[q, n])))
    emb = 0
    if p.emb is not None and R > 1:
        emb = int(_int(p.emb)[a[0], a[R - 1]].max())
    return int(path.max()) + ring + emb


def _emb_floor(p: MappingProblem) -> int:
    """The cheapest tied-embedding pair (integer units): every column pays at least that; 0 without one."""
    if p.emb is None or p.layout.rows < 2 or p.n < 2:
        return 0
    return int(_int(p.emb)[~np.eye(p.n, dtype=bool)].min())


def _emb_floor_heads(p: MappingProblem, heads) -> int:
    """With row 0 holding `heads`, each head's column ends on another node of the grid outside row 0: the
    slowest column pays at least max over heads of that head's cheapest such pair (integer units)."""
    if p.emb is None or p.layout.rows < 2:
        return 0
    ec = _int(p.emb)
    hs = {int(h) for h in heads}
    rest = [q for q in range(p.n) if q not in hs]
    if not rest:
        return 0
    return int(max(ec[h, rest].min() for h in hs))


def path_lower_bound_int(p: MappingProblem, time_limit_s: float = 1.0, seed: int = 0, heads=None) -> int:
    """A valid lower bound on the slowest column's path (integer units), wrap hop left out.

    The K columns are K vertex-disjoint paths through R*K of the N nodes, so their total cost is at
    least the cheapest cover of R*K nodes by K disjoint paths (lengths free), and the slowest column
    at least that total / K. CP-SAT's multiple-circuit constraint (a depot with K routes, a node's
    self-loop leaves it out) solves it or bounds it; whatever bound it reaches in the time is valid.
    Never below the R-1 cheapest pairs (MappingProblem.lower_bound's path part).
    heads: the K nodes of row 0, when known; the paths then start there (and nowhere else), which
    raises the bound (32-node benchmark instance: 18.67 ms free, 19.10 / 19.12 ms for its two best
    row-0 sets).
    """
    L, N = p.layout, p.n
    R, K = L.rows, L.cols
    if R <= 1 or N <= 1:
        return 0
    c = _int(p.hop)
    pair = np.minimum(c, c.T)[np.triu_indices(N, 1)]
    cheap = int(np.sort(pair)[:R - 1].sum())
    m = cp_model.CpModel()
    arcs, cost, starts, visit = [], [], [], []
    for n in range(N):
        s_, e_ = m.NewBoolVar(""), m.NewBoolVar("")
        arcs += [(0, n + 1, s_), (n + 1, 0, e_)]
        starts.append(s_)
        if heads is not None:
            m.Add(s_ == int(n in heads))
        if N > R * K:
            idle = m.NewBoolVar("")
            arcs.append((n + 1, n + 1, idle))
            visit.append(idle)
        for q in range(N):
            if q != n:
                g = m.NewBoolVar("")
                arcs.append((n + 1, q + 1, g))
                if heads is not None and q in heads:
                    m.Add(g == 0)             # a head is entered from the depot only
                if c[n, q]:
                    cost.append(int(c[n, q]) * g)
    m.AddMultipleCircuit(arcs)
    m.Add(sum(starts) == K)
    if visit:
        m.Add(sum(visit) == N - R * K)
    m.Minimize(sum(cost))
    solver = _solver(time_limit_s, 1, seed)
    # deterministic time decides (same bound, same slice on any load); the wall clock is only a safety stop
    solver.parameters.max_time_in_seconds = 4 * float(time_limit_s) + 1.0
    st = solver.Solve(m)
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        total = int(np.floor(solver.BestObjectiveBound()))
        return max(cheap, -(-total // K))
    return cheap


def _ring_cap(p: MappingProblem, limit_int: int, time_limit_s: float, seed: int):
    """The slice of placements worth searching: every placement with objective <= limit_int has
    slowest ring tdp <= limit_int - P_LB (P_LB a path lower bound), so pairs of nodes whose ring time
    in row i exceeds that cap may not be ring neighbours in row i (K <= 3: may not share row i), and a
    node with fewer than min(K-1, 2) partners under the cap in row i (outside that core: a ring node has
    two distinct neighbours when K >= 3) may not sit in row i. Exact: what is cut has objective > limit_int.
    Returns (cap, allowed[i][n], P_LB); cap and allowed are None when the cap cuts nothing."""
    L, N = p.layout, p.n
    R, K = L.rows, L.cols
    plb = path_lower_bound_int(p, time_limit_s=min(2.0, max(0.2, 0.05 * time_limit_s)), seed=seed)
    cap = limit_int - plb - _emb_floor(p)
    base = _int(p.dp_base)
    allowed = []
    cuts = False
    for i in range(R):
        lc = _int(p.dp_link[i])
        ok = (int(base[i]) + np.maximum(lc, lc.T)) <= cap
        np.fill_diagonal(ok, False)
        cuts = cuts or not ok[~np.eye(N, dtype=bool)].all()
        allowed.append(core(ok, ring_degree(K)))
    if not cuts:
        return None, None, plb
    return cap, allowed, plb


COLUMNS = True          # try the column decomposition (columns.py) first when the row-0 sets are enumerated
COLUMN_SHARE = 0.75     # of the time limit
COLUMN_CPSAT_MIN = 10.0  # seconds (at most half the limit) left to CP-SAT whatever the decomposition takes
COLUMN_SETS_MAX = 5000  # row-0 sets the decomposition takes on (sorted by ring; most are skipped by their floor)

HEAD_SETS_MAX = 64      # row-0 sets worth a path bound of their own; more: no head bound
# with an incumbent, row 0 must hold one of the row-0 sets (exact). Off: measured on the 32-node benchmark
# (one set under the cap) the whole search proved optimality in 1 of 3 seeds against 2 of 3 without it
ROW0_TABLE = False


ROW0_STEPS_MAX = 200000  # ring enumeration steps for the row-0 sets (K >= 4); more: no head bound


def _row0_sets(p: MappingProblem, thr: int, limit: int = HEAD_SETS_MAX):
    """Every K-set of nodes whose row-0 ring (base + its slowest link, integer units, the best ring
    order of the set) is <= thr, as (ring, set) sorted by ring; None if there are more than limit of
    them. K <= 3: the ring is every pair (cliques); K >= 4: cycles through the set."""
    K, N = p.layout.cols, p.n
    lc = _int(p.dp_link[0])
    val = int(_int(p.dp_base)[0]) + np.maximum(lc, lc.T)
    adj = val <= thr
    np.fill_diagonal(adj, False)
    if K >= 4:
        return _row0_rings(val, adj, K, int(_int(p.dp_base)[0]), limit)
    out = []

    def grow(chosen, cand, ring):
        if len(out) > limit:
            return
        if len(chosen) == K:
            out.append((ring, tuple(chosen)))
            return
        for k, n in enumerate(cand):
            if len(chosen) + len(cand) - k < K:
                break
            grow(chosen + [n], [q for q in cand[k + 1:] if adj[n, q]],
                 max([ring] + [int(val[c, n]) for c in chosen]))

    grow([], list(range(N)), int(_int(p.dp_base)[0]))
    if len(out) > limit:
        return None
    out.sort()
    return out


def _row0_rings(val, adj, K, base0, limit):
    """K-sets with a ring (Hamiltonian cycle) on edges of adj, each with its best slowest link: cycles
    from their smallest node s through nodes > s, closed back to s. None past limit sets or
    ROW0_STEPS_MAX steps."""
    alive = core(adj, 2)
    best = {}
    steps = 0
    for s in np.flatnonzero(alive):
        s = int(s)
        stack = [(s, (s,), base0)]
        while stack:
            steps += 1
            if steps > ROW0_STEPS_MAX:
                return None
            u, path, ring = stack.pop()
            if len(path) == K:
                if adj[u, s]:
                    key = tuple(sorted(path))
                    r = max(ring, int(val[u, s]))
                    if r < best.get(key, r + 1):
                        best[key] = r
                        if len(best) > limit:
                            return None
                continue
            for w in np.flatnonzero(adj[u] & alive):
                w = int(w)
                if w > s and w not in path:
                    stack.append((w, path + (w,), max(ring, int(val[u, w]))))
    return sorted((r, S) for S, r in best.items())


def _head_bound(p: MappingProblem, limit_int: int, plb: int, time_limit_s: float, seed: int,
                sets=False) -> int | None:
    """A lower bound on the model's integer objective (tpp + tdp + temb) of every placement, from its row-0
    set S: objective >= ring_0(S) + path bound with heads S + S's tied-embedding floor (_emb_floor_heads).
    A set whose cheap bound (ring_0(S) + plb + embedding floor) exceeds limit_int cannot beat it, so the
    result is min(that bound, limit_int + 1). The budget goes to the sets with the least cheap bound first;
    sets left without a path bound of their own count at their cheap bound (never below what is returned).
    None: too many sets to try."""
    K = p.layout.cols
    if K <= 1 or p.layout.rows <= 1:
        return None
    if sets is False:                              # not given: enumerate them (None: too many)
        sets = _row0_sets(p, limit_int - plb - _emb_floor(p))
    if sets is None:
        return None
    best = limit_int + 1
    each = min(2.0, max(0.2, 0.05 * time_limit_s))
    spent, budget = 0.0, 0.1 * time_limit_s
    ef = _emb_floor(p)                             # every placement also pays its cheapest embedding pair
    # each set's cheap bound (its ring + the free path bound + its heads' embedding floor), cheapest first:
    # the path bound with fixed heads goes to the most promising sets, and when the budget runs out the
    # rest are bounded by the next cheap bound (sorted, so it is the least of theirs)
    cheap = sorted((ring + plb + max(ef, _emb_floor_heads(p, S)), ring, S) for ring, S in sets)
    for cb, ring, S in cheap:
        if cb >= best:
            break
        if spent + each > budget:
            best = min(best, cb)
            break
        best = min(best, cb - plb + max(plb, path_lower_bound_int(p, time_limit_s=each, seed=seed,
                                                                 heads=set(S))))
        spent += each
    return int(best)


def _ring_floor(p: MappingProblem) -> int:
    """A valid lower bound on the slowest ring (integer units): every row's base plus its ring-core bound."""
    R, K = p.layout.rows, p.layout.cols
    base = _int(p.dp_base)
    if K <= 1:
        return int(base.max())
    core_floor = max(int(base[i]) + int(np.floor(ring_order_bound(
        np.maximum(p.dp_link[i], p.dp_link[i].T), K) / UNIT)) for i in range(R))
    return int(max(core_floor, node_ring_floor(base, _int(p.dp_link), K, p.n - p.layout.blocks)))
