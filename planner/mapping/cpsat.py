"""Exact mapping with CP-SAT: blocks -> nodes, minimising slowest pipeline path + slowest DP ring.

Formulation (stronger than Pipette's integer node variables with element constraints):
- x[b, n] = block b on node n; one node per block, at most one block per node.
- each pipeline hop e = (u, v) costs c_e >= sum_m c[n,m] x[v,m] - M_n (1 - x[u,n]) (compact; N rows per
  hop). The transportation linearisation y[e,n,m] (strong=True) has a tighter LP but N^2 variables
  per hop; measured on 16-node instances it proved optimality 2-5x slower, so compact is the default.
- the slowest data-parallel ring is a ladder of level literals lvl[k] <=> T_dp >= v[k]; a pair of
  nodes in one row forces its level by a clause (not u_n or not u_m or lvl[k]). Measured: 30 s -> 6 s
  to prove a 16-node instance against the big-M form T >= L (u_n + u_m - 1).
- symmetry: columns (replica groups) are interchangeable, so their row-0 nodes are ordered.
Costs are integers in units of 0.1 us; the reported objective is recomputed in floating point.
Several scenarios (bandwidth snapshots) give the robust problem: minimise the worst (or the mean).
"""
from __future__ import annotations

import time

import numpy as np
from ortools.sat.python import cp_model

from planner.mapping.problem import MappingProblem, ring_bottleneck_bound
from planner.mapping.result import MappingResult

UNIT = 1e-7                     # seconds per integer cost unit


def _int(a) -> np.ndarray:
    return np.rint(np.asarray(a) / UNIT).astype(np.int64)


def solve_exact(problems: list[MappingProblem] | MappingProblem, *, time_limit_s: float = 10.0, seed: int = 0,
                hint: np.ndarray | None = None, robust: str = "worst", workers: int = 2,
                strong: bool | None = None, both_sides: bool = True,
                cutoff: float | None = None) -> MappingResult:
    """cutoff (seconds): only mappings strictly better than this are of interest; if CP-SAT proves
    there are none, the result has status "PRUNED" and bound = cutoff (branch and bound across configs)."""
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
    if K == 1 and p0.wrap is None:
        return _solve_single_column(probs, time_limit_s=time_limit_s, seed=seed, hint=hint, robust=robust,
                                    workers=workers, cutoff=cutoff, t0=t0)

    m = cp_model.CpModel()
    blocks = [(i, j) for i in range(R) for j in range(K)]
    bid = {b: k for k, b in enumerate(blocks)}
    x = [[m.NewBoolVar(f"x{k}_{n}") for n in range(N)] for k in range(len(blocks))]
    for k in range(len(blocks)):
        m.AddExactlyOne(x[k])
    for n in range(N):
        m.AddAtMostOne(x[k][n] for k in range(len(blocks)))
    # columns are interchangeable: order them by the node of their row-0 block
    pos0 = [sum(n * x[bid[(0, j)]][n] for n in range(N)) for j in range(K)]
    for j in range(K - 1):
        m.Add(pos0[j] < pos0[j + 1])

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

    scen_obj = []
    for p in probs:
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
        base = _int(p.dp_base)
        if K > 1:
            tdp = _bottleneck_levels(m, p, base, use_b, R, N)
            # the k-core bound per row, as a cut: CP-SAT's LP does not see it
            for i in range(R):
                lc = np.maximum(p.dp_link[i], p.dp_link[i].T)
                m.Add(tdp >= int(base[i]) + int(np.floor(ring_bottleneck_bound(lc, K) / UNIT)))
        else:
            tdp = m.NewIntVar(int(base.min()), int(base.max()), "tdp")
            for i in range(R):
                m.Add(tdp >= int(base[i]))
        scen_obj.append(tpp + tdp)

    # objective(scenario) = const + tpp + tdp
    _objective(m, scen_obj, robust, None if cutoff is None else
               int(np.floor((cutoff - _const(probs, robust)) / UNIT)) - 1)

    # in cutoff mode the hint (never better than the incumbent) violates the cutoff; OR-Tools 9.15
    # aborts the process ("Check failed: heuristics.fixed_search") on such a hint with
    # interleave_search, so it is only kept as the fallback answer
    if hint is not None and cutoff is None:
        for k, (i, j) in enumerate(blocks):
            for n in range(N):
                m.AddHint(x[k][n], int(hint[i, j] == n))

    solver = _solver(time_limit_s, workers, seed)
    st = solver.Solve(m)
    wall = time.perf_counter() - t0
    if st == cp_model.INFEASIBLE and cutoff is not None:
        a = hint.copy() if hint is not None else None
        obj = _score(probs, a, robust) if a is not None else float("inf")
        return MappingResult(a, obj, float(cutoff), "PRUNED", wall, "exact")
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if hint is not None:
            obj = _score(probs, hint, robust)
            return MappingResult(hint.copy(), obj, _bound(probs, robust), "TIME_LIMIT", wall, "exact")
        raise RuntimeError(f"CP-SAT found no mapping in {time_limit_s}s (status {solver.StatusName(st)})")
    a = np.zeros((R, K), dtype=int)
    for k, (i, j) in enumerate(blocks):
        a[i, j] = next(n for n in range(N) if solver.BooleanValue(x[k][n]))
    obj = _score(probs, a, robust)
    const = _const(probs, robust)
    bound_int = solver.BestObjectiveBound()
    nscen = len(probs) if (robust == "mean" and len(probs) > 1) else 1
    # rounding to 0.1 us per term: allow the bound that slack so it stays valid
    terms = (R + len(wraps) // max(1, K) + 2) * len(probs)
    bound = const + bound_int * UNIT / nscen - terms * UNIT
    status = "OPTIMAL" if st == cp_model.OPTIMAL else "FEASIBLE"
    if hint is not None:
        hobj = _score(probs, hint, robust)
        if hobj < obj:
            a, obj = hint.copy(), hobj
    return MappingResult(a, obj, min(bound, obj), status, wall, "exact")


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
        objs.append(sum(int(c[n, q]) * lit[(n, q)] for n in range(N) for q in range(N) if n != q and c[n, q]))
    # objective = const + path + the rows' fixed rings (one column: no inter-node ring)
    _objective(m, objs, robust, None if cutoff is None else
               int(np.floor((cutoff - _const(probs, robust)) / UNIT)) - 1
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
    solver = _solver(time_limit_s, workers, seed)
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
    bound = _const(probs, robust) + dpmax + solver.BestObjectiveBound() * UNIT / nscen - (R + 2) * UNIT
    if hint is not None and _score(probs, hint, robust) < obj:
        a, obj = hint.copy(), _score(probs, hint, robust)
    return MappingResult(a, obj, min(bound, obj), "OPTIMAL" if st == cp_model.OPTIMAL else "FEASIBLE", wall,
                         "exact")


def _bottleneck_levels(m, p, base, use_b, R, N):
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
    levels = sorted(v for v in vals if v > floor)
    lvl = [m.NewBoolVar("") for _ in levels]
    for k in range(len(lvl) - 1):
        m.AddImplication(lvl[k + 1], lvl[k])
    index = {v: k for k, v in enumerate(levels)}
    for v, i, n, q in pairs:
        if v > floor:
            m.AddBoolOr([use_b[i][n].Not(), use_b[i][q].Not(), lvl[index[v]]])
    tdp = m.NewIntVar(floor, max([floor] + levels), "tdp")
    prev = floor
    steps = []
    for k, v in enumerate(levels):
        steps.append((v - prev) * lvl[k])
        prev = v
    m.Add(tdp == floor + sum(steps))
    return tdp


def _score(probs, a, robust) -> float:
    vals = [p.objective(a) for p in probs]
    return float(np.mean(vals) if robust == "mean" else max(vals))


def _const(probs, robust) -> float:
    vals = [p.const for p in probs]
    return float(np.mean(vals) if robust == "mean" else min(vals))


def _bound(probs, robust) -> float:
    vals = [p.lower_bound() for p in probs]
    return float(np.mean(vals) if robust == "mean" else max(vals))
