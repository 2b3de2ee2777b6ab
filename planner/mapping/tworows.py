"""Two rows re-solved exactly, the other rows fixed (issue #10): a neighbourhood that moves ring neighbours together.

After the anneal on 4 x 8 grids of issue #10's family every ring sits within ~0.3% of the slowest, and lowering the
maximum needs neighbours in a ring moved together, which the LNS's assignment neighbourhood (lns.py) excludes. A
step here frees the 2K nodes of rows i and j and lets CP-SAT choose both rings (cyclic orders), which nodes go to
which row and the column alignment, minimising max(paths) + max(rings) with every other row kept:
  - x[u, q]: node u on freed position q (a permutation of the 2K nodes on the 2K positions);
  - each column's path: fixed hops, linear terms next to a fixed row, and y[u, v] >= x[u, q] + x[v, q'] - 1 where
    two freed rows are next to each other (exact at the optimum: the objective only pushes y down);
  - rings: only links slower than the other rows' slowest ring (D_fix) matter; slower than the current maximum they
    are forbidden (two-literal clauses), in between order-encoded levels L_w (D >= w), so the model stays small
    where the rings are close (4 x 8: a handful of levels).
The current placement is the hint and a result is kept only if its objective is strictly lower: never worse.

One scenario, no spare node, no wrap hop, no tied embedding (issue #10's family; `applies`). Deterministic: CP-SAT
on a deterministic-time limit with fixed workers (sat.new_solver), pairs taken in a fixed order; each model's
building is charged by its size (model_work) on top of sat.run's charge (work.py).
"""
from __future__ import annotations

import itertools

import numpy as np
from ortools.sat.python import cp_model

from planner.mapping import sat, work
from planner.mapping.problem import MappingProblem

SCALE = 1e7                 # seconds -> integer units of the model (0.1 us: costs are ms)
CALL_DTIME = 0.15           # deterministic seconds per pair's model (tuning seeds: 0.1 too short to improve much)
WORKERS = 2
STALL_ROUNDS = 2            # full rounds of pairs without a move that end the search (each round a new seed)


def applies(problems) -> bool:
    probs = problems if isinstance(problems, list) else [problems]
    p = probs[0]
    R, K = p.layout.rows, p.layout.cols
    return (len(probs) == 1 and R >= 2 and K >= 3 and p.n == R * K and p.wrap is None and p.emb is None)


WALL_UNSET_S = 3600.0     # no safety stop given: CP-SAT's wall limit far beyond any call's deterministic time


def model_work(K: int, rows: tuple[int, int] | None = None) -> float:
    """Work seconds of building the model of `rows` on K columns (None: the smallest, two rows apart): 2K x 2K
    placement literals, and where the rows are adjacent 2K (2K - 1) path literals per column."""
    n = 2 * K
    size = n * n + (K * n * (n - 1) if rows is not None and abs(rows[0] - rows[1]) == 1 else 0)
    return max(work.ROWS2_MODEL_WORK_S, work.ROWS2_VAR_WORK_S * size)


def call_work(K: int = 0, rows: tuple[int, int] | None = None) -> float:
    """Work seconds one pair's solve may charge: its deterministic time, the call's fixed cost, the model build."""
    return CALL_DTIME + work.CPSAT_CALL_WORK_S + model_work(K, rows)


def improve(p: MappingProblem, assign: np.ndarray, *, budget_s: float, seed: int = 0,
            stop=lambda: False, wall_left=None) -> tuple[np.ndarray, int, int]:
    """Row pairs (0, 1), (0, 2), ... cyclically, each re-solved on CALL_DTIME, while budget_s covers one more call
    and one of the last STALL_ROUNDS full rounds of pairs changed something (round r on CP-SAT seed seed + r):
    (assignment, calls, improvements). wall_left: seconds to
    the caller's safety stop, CP-SAT's wall limit (default none: its deterministic time alone ends a call, as it
    must for the same answer on any load)."""
    R, K = p.layout.rows, p.layout.cols
    a = np.asarray(assign).reshape(R, K).copy()
    # the slowest rings' pairs first (on 8 x 8 a budget covers a few of the 28 pairs)
    ring = p.dp_costs(a)
    pairs = sorted(itertools.combinations(range(R), 2), key=lambda ij: (-max(ring[list(ij)]), -min(ring[list(ij)]), ij))
    calls = moved = since = 0
    spent = 0.0
    while (spent + call_work(K, pairs[calls % len(pairs)]) <= budget_s + 1e-12 and since < STALL_ROUNDS * len(pairs)
           and not stop()):
        i, j = pairs[calls % len(pairs)]
        with work.metered() as m:
            work.charge(model_work(K, (i, j)))
            # each round of pairs its own CP-SAT seed: a pair that found nothing last round may find a move now
            b = solve_pair(p, a, (i, j), seed=seed + calls // len(pairs),
                           wall_s=WALL_UNSET_S if wall_left is None else max(0.02, wall_left()))
        spent += m.used_s
        calls += 1
        if p.objective(b) < p.objective(a):
            a, moved, since = b, moved + 1, 0
        else:
            since += 1
    return a, calls, moved


def solve_pair(p: MappingProblem, a: np.ndarray, rows: tuple[int, int], *, seed: int = 0,
               wall_s: float = None) -> np.ndarray:
    """Rows `rows` of `a` re-placed by CP-SAT (the others fixed) on CALL_DTIME: its best placement found (the
    current one, the hint, if nothing better)."""
    R, K = a.shape
    hop, sym, base = p.hop, p._dp_sym, p.dp_base
    I = sorted(rows)
    X = a[I].ravel()
    n = len(X)
    pos = [(r, c) for r in I for c in range(K)]
    pi = {q: k for k, q in enumerate(pos)}
    m = cp_model.CpModel()
    x = [[m.new_bool_var("") for _ in range(n)] for _ in range(n)]       # x[u][k]: node X[u] on pos[k]

    def ints(v):
        return int(round(float(v) * SCALE))

    for u in range(n):
        m.add_exactly_one(x[u])
    for k in range(n):
        m.add_exactly_one(x[u][k] for u in range(n))
    big = ints(hop.max() * R + sym.max() + base.max()) + 1
    P, D = m.new_int_var(0, big, "P"), m.new_int_var(0, big, "D")
    for c in range(K):
        terms, const = [], 0
        for r in range(R - 1):
            f0, f1 = (r, c) in pi, (r + 1, c) in pi
            if not (f0 or f1):
                const += ints(hop[a[r, c], a[r + 1, c]])
            elif f0 and not f1:
                terms += [(ints(hop[X[u], a[r + 1, c]]), x[u][pi[r, c]]) for u in range(n)]
            elif f1 and not f0:
                terms += [(ints(hop[a[r, c], X[u]]), x[u][pi[r + 1, c]]) for u in range(n)]
            else:
                for u, v in itertools.permutations(range(n), 2):
                    y = m.new_bool_var("")
                    m.add(y >= x[u][pi[r, c]] + x[v][pi[r + 1, c]] - 1)
                    terms.append((ints(hop[X[u], X[v]]), y))
        m.add(P >= const + sum(w * v for w, v in terms))
    dp = p.dp_costs(a)
    others = [r for r in range(R) if r not in I]
    d_fix, d_cur = ints(dp[others].max()) if others else 0, ints(dp.max())
    links = []
    for r in I:
        w_all = base[r] + sym[r][np.ix_(X, X)]
        us, vs = np.nonzero(w_all * SCALE > d_fix - 0.5)
        for c in range(K):
            k0, k1 = pi[r, c], pi[r, (c + 1) % K]
            links += [(ints(w_all[u, v]), x[u][k0], x[v][k1]) for u, v in zip(us.tolist(), vs.tolist()) if u != v]
    vals = sorted({w for w, _, _ in links if d_fix < w <= d_cur})
    level = {w: m.new_bool_var("") for w in vals}
    for w0, w1 in zip(vals, vals[1:]):
        m.add_implication(level[w1], level[w0])
    for w, xu, xv in links:
        if w > d_cur:
            m.add_bool_or([xu.Not(), xv.Not()])
        elif w > d_fix:
            m.add_bool_or([xu.Not(), xv.Not(), level[w]])
    steps, prev = [], d_fix
    for w in vals:
        steps.append((w - prev) * level[w])
        prev = w
    m.add(D == d_fix + sum(steps))
    m.minimize(P + D)
    for u in range(n):
        for k, (r, c) in enumerate(pos):
            m.add_hint(x[u][k], int(a[r, c] == X[u]))
    # the wall clock only as the caller's safety stop: a wall limit of CALL_DTIME seconds would end a loaded run
    # before its deterministic time and make the answer depend on the load
    solver = sat.new_solver(CALL_DTIME, WORKERS, seed, wall_s=WALL_UNSET_S if wall_s is None else wall_s)
    st = sat.run(solver, m)
    b = a.copy()
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return b
    for u in range(n):
        for k, (r, c) in enumerate(pos):
            if solver.boolean_value(x[u][k]):
                b[r, c] = X[u]
    return b
