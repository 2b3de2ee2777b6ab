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
on a deterministic-time limit with fixed workers (sat.new_solver), pairs chosen by a descent whose choices depend
only on the placements found (improve); each model's building is charged by what it built (build_work) on top of
sat.run's charge (work.py).
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
# CP-SAT's presolve probing off: on an adjacent pair's model (~2,200 Booleans) it took the whole 0.15 deterministic s
# and the call ended UNKNOWN; off, 4 x 8 tuning seeds -0.1% on average (docs/notes/solver.md, "Cheaper two-row calls")
PROBING_LEVEL = 0
STALL_ROUNDS = 2            # rounds of pairs in a row without a move that end the search (each round a new seed)


def applies(problems) -> bool:
    probs = problems if isinstance(problems, list) else [problems]
    p = probs[0]
    R, K = p.layout.rows, p.layout.cols
    # its models sum a column's hops: without the lock step's pace (MappingProblem.pace) it would steer by another
    # objective, so the annealer keeps that share there
    return (len(probs) == 1 and R >= 2 and K >= 3 and p.n == R * K and p.wrap is None and p.emb is None
            and p.pace is None)


WALL_UNSET_S = 3600.0     # no safety stop given: CP-SAT's wall limit far beyond any call's deterministic time


def model_items(K: int, rows: tuple[int, int] | None = None) -> int:
    """At most how many variables and constraints _solve_pair builds for `rows` on K columns (None: two rows apart),
    before it is built: on n = 2K nodes, n x n placement literals and 2n exactly-one constraints, P, D and their K + 1
    constraints, at most one ring clause per row, column and ordered node pair (2K n (n - 1)), at most one level
    literal and implication per distinct link weight of the two rows (4 n (n - 1)), and where the rows are adjacent
    one path literal and its constraint per column and ordered pair (2K n (n - 1)). An upper bound, so that the
    budget's test of a pair's first call (call_work) is never below what the call then charges (build_work)."""
    n = 2 * K
    pairs = n * (n - 1)
    adjacent = rows is not None and abs(rows[0] - rows[1]) == 1
    return n * n + 2 * n + K + 3 + 2 * K * pairs + 4 * pairs + (2 * K * pairs if adjacent else 0)


def model_work(K: int, rows: tuple[int, int] | None = None) -> float:
    """The work seconds of building the model of `rows` on K columns, bounded before it is built: build_work's
    rates over model_items."""
    return work.ROWS2_BUILD_WORK_S + work.ROWS2_ITEM_WORK_S * model_items(K, rows)


def call_work(K: int, rows: tuple[int, int] | None = None) -> float:
    """Work seconds one pair's solve may charge before its model is built (the budget's test of a pair's first call):
    its deterministic time, the call's fixed cost, model_work."""
    return CALL_DTIME + work.CPSAT_CALL_WORK_S + model_work(K, rows)


def improve(p: MappingProblem, assign: np.ndarray, *, budget_s: float, seed: int = 0,
            stop=lambda: False, wall_left=None) -> tuple[np.ndarray, int, int]:
    """A descent over the row pairs, each call re-solving one pair on CALL_DTIME, while budget_s covers one more
    call: (assignment, calls, improvements). Each call goes to the first pair in the order below not yet tried on
    the current placement; once every pair has been tried on it, a new round (CP-SAT seed seed + round) retries
    those not proved optimal on it, and STALL_ROUNDS rounds in a row without a move end the search (so does a
    placement on which every pair is proved optimal: a call there would return its hint). The order: pairs of
    rows apart first (their paths are linear in the placement and CP-SAT often proves them within the call), then
    adjacent pairs (paths on products of placements, a weak LP, few moves), each group the slowest rings' pairs
    first. wall_left: seconds to the caller's safety stop, CP-SAT's wall limit (default none: its deterministic
    time alone ends a call, as it must for the same answer on any load)."""
    R, K = p.layout.rows, p.layout.cols
    a = np.asarray(assign).reshape(R, K).copy()
    ring = p.dp_costs(a)
    pairs = sorted(itertools.combinations(range(R), 2),
                   key=lambda ij: (ij[1] == ij[0] + 1, -max(ring[list(ij)]), -min(ring[list(ij)]), ij))
    calls = moved = rnd = quiet = 0
    spent = 0.0
    built = {}                 # pair -> its model's last build charge (the next call's estimate)
    tried, proved = {}, {}     # pair -> the placement (bytes) it was last tried on / proved optimal on
    while not stop():
        cur = a.tobytes()
        todo = [ij for ij in pairs if tried.get(ij) != cur]
        if not todo:
            quiet += 1
            if quiet >= STALL_ROUNDS:
                break
            rnd += 1
            tried = dict(proved)
            todo = [ij for ij in pairs if tried.get(ij) != cur]
            if not todo:
                break                 # every pair proved optimal on this placement
        ij = todo[0]
        est = CALL_DTIME + work.CPSAT_CALL_WORK_S + built[ij] if ij in built else call_work(K, ij)
        if spent + est > budget_s + 1e-12:
            break
        with work.metered() as m:
            b, opt, built[ij] = _solve_pair(p, a, ij, seed=seed + rnd,
                                            wall_s=WALL_UNSET_S if wall_left is None else max(0.02, wall_left()))
        spent += m.used_s
        calls += 1
        if p.objective(b) < p.objective(a):
            a, moved, quiet = b, moved + 1, 0
        if opt or a.tobytes() == cur:
            tried[ij] = a.tobytes()       # moved and proved there, or not moved: not called on it again this round
        if opt:
            proved[ij] = a.tobytes()
    return a, calls, moved


def solve_pair(p: MappingProblem, a: np.ndarray, rows: tuple[int, int], *, seed: int = 0,
               wall_s: float = None) -> np.ndarray:
    """Rows `rows` of `a` re-placed by CP-SAT (the others fixed) on CALL_DTIME: its best placement found (the
    current one, the hint, if nothing better)."""
    return _solve_pair(p, a, rows, seed=seed, wall_s=wall_s)[0]


def build_work(m: cp_model.CpModel) -> float:
    """Work seconds of having built model m: ROWS2_BUILD_WORK_S and ROWS2_ITEM_WORK_S per variable and constraint
    (work.py). By what was built, not by the grid: on the family a pair of rows apart has 600-2,800 items (the ring
    clauses depend on how close the rings are), an adjacent pair ~4,400, and the fixed 0.07 charged before cost a
    4 x 8 pair of rows apart 2-7x its build."""
    pr = m.Proto()
    return work.ROWS2_BUILD_WORK_S + work.ROWS2_ITEM_WORK_S * (len(pr.variables) + len(pr.constraints))


def _solve_pair(p: MappingProblem, a: np.ndarray, rows: tuple[int, int], *, seed: int = 0,
                wall_s: float = None) -> tuple[np.ndarray, bool, float]:
    """solve_pair, whether CP-SAT proved its placement optimal (OPTIMAL), and the model's build charge
    (build_work, charged here with the call's)."""
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
    solver.parameters.cp_model_probing_level = PROBING_LEVEL
    built = build_work(m)
    work.charge(built)
    st = sat.run(solver, m)
    b = a.copy()
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return b, False, built
    for u in range(n):
        for k, (r, c) in enumerate(pos):
            if solver.boolean_value(x[u][k]):
                b[r, c] = X[u]
    return b, st == cp_model.OPTIMAL, built
