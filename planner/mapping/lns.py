"""Large-neighbourhood search with exact repair: many grid positions re-placed at once, optimally (issue #10).

A step frees one grid position in each column (its row drawn from the seeded generator; an end of the slowest ring
link among them), in some columns a second one (DOUBLE_SHARE), no two next to each other in a row's ring or a
column, and re-places the freed nodes and the spare nodes on the freed positions and the spare slots. Why one
assignment problem covers it: every freed position's neighbours (above and below in its column, left and right in
its row's ring) stay, so what a node costs there (its column's path, its two ring links, its column's embedding
pair) depends on that node alone, and a placement's objective is const + max(P0, max_s path_s) + max(D0, max_s
ring_s) + max(E0, max_s emb_s) over a one-to-one assignment (P0, D0, E0: the columns, links and pairs that keep
their nodes); a column with two freed positions is charged twice each one's change (an upper bound: the sum of two
changes is at most twice the larger). For a target (P_t, D_t) the pairs under it are the allowed ones, and scipy's
linear_sum_assignment finds a placement using only allowed pairs, if there is one, that also lowers the columns
and rings near their maxima (the annealer's tie score). Targets tried, in order: the next lower ring value (the
paths kept), the next lower path (the rings kept), the current values (as good, fewer columns and rings near the
maxima). A step keeps its placement only if the objective falls, or stays with a lower tie score: the search
never gets worse.

Where the annealer needs a chain of uphill swaps to move a block off the slowest link (its neighbours there must
fit too), a step moves up to 2K blocks at once. Measured on issue #10's family (docs/notes/solver.md, "LNS after
the anneal"): at 64-128 nodes, after the anneal, it lowers the objective more per unit of work than annealing
longer; at 32 nodes (4 x 8) it found next to nothing.

One scenario only (a robust objective is a max or mean over scenarios of such sums: not one assignment), grids
of K >= 3 columns. Deterministic: the generator's draws and scipy's assignment; each step charges
work.lns_step_work (a budget of steps, never a clock).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from planner.mapping import work
from planner.mapping.incremental import tie_score
from planner.mapping.problem import MappingProblem

# of the columns: a second freed position (its path then takes the sum of two changes: each is allowed half the
# column's slack, so the tables bound the objective from above instead of scoring it exactly)
DOUBLE_SHARE = 0.5
PER_COLUMN = 2              # freed positions per column, at most
TIE_LEVEL = 0.95           # the tie score's level (anneal.TIE_LEVEL's meaning): columns and rings above 0.95 x max
_BLOCKED = 1e9             # an assignment cost for a pair over the target


def applies(problems) -> bool:
    """One scenario and at least three columns, without the lock step's pace (its repair tables sum a column's hops:
    MappingProblem.pace is a max over them)."""
    probs = problems if isinstance(problems, list) else [problems]
    return len(probs) == 1 and probs[0].layout.cols >= 3 and probs[0].pace is None


def improve(p: MappingProblem, assign: np.ndarray, *, steps: int, seed: int = 0) -> tuple[np.ndarray, int]:
    """Run `steps` LNS steps from `assign` (R x K nodes): (the final assignment, steps that changed it). Its
    objective is never above assign's. Charges work.lns_step_work per step."""
    R, K = p.layout.rows, p.layout.cols
    a = np.asarray(assign).reshape(R, K).copy()
    used = set(a.ravel().tolist())
    spares = np.array([n for n in range(p.n) if n not in used], dtype=np.int64)
    rng = np.random.default_rng(seed)
    moved = 0
    for _ in range(steps):
        a, spares, ok, m = _step(p, a, spares, rng)
        moved += ok
        work.charge(work.lns_step_work(R * K, m))
    return a, moved


def _free(R: int, K: int, ci: int, pick: int, u: np.ndarray) -> np.ndarray:
    """The positions a step frees (R x K mask; u: PER_COLUMN x K + 1 uniforms): (ci, pick), then around the ring a
    row per column drawn from those not freed in either neighbouring column; then, PER_COLUMN - 1 times, in each
    column with probability DOUBLE_SHARE one more, not next to a freed one in its column (rows 0 and R-1 count as
    next to each other: the wrap hop and the embedding pair join them) nor in its row's ring."""
    F = np.zeros((R, K), bool)
    F[ci, pick] = True
    order = [(pick + t) % K for t in range(K)]
    for j in order[1:]:
        opts = [i for i in range(R) if not (F[i, (j - 1) % K] or F[i, (j + 1) % K])]
        if opts:
            F[opts[int(u[j] * len(opts))], j] = True
    for r in range(1, PER_COLUMN):
        for j in order:
            x = u[r * K + j]
            if x >= DOUBLE_SHARE or R < 3 or not F[:, j].any():
                continue
            taken = F[:, j] | np.roll(F[:, j], 1) | np.roll(F[:, j], -1)     # cyclic: 0 and R-1 are neighbours
            opts = [i for i in range(R) if not (taken[i] or F[i, (j - 1) % K] or F[i, (j + 1) % K])]
            if opts:
                F[opts[int(x / DOUBLE_SHARE * len(opts))], j] = True
    return F


def _tie(p: MappingProblem, a: np.ndarray) -> float:
    path = p.path_costs(a) if p.layout.rows > 1 else np.zeros(1)
    return tie_score(path.tolist(), TIE_LEVEL) + tie_score(p.dp_costs(a).tolist(), TIE_LEVEL)


@dataclass
class _Tables:
    """What each node to place costs on each freed position or spare slot (rows: the g freed positions, then the
    spare slots, which cost nothing; columns: the nodes xs), and the maxima over what keeps its nodes."""
    rs: np.ndarray          # rows of the freed positions
    cs: np.ndarray          # their columns
    xs: np.ndarray          # the nodes to place: the freed ones, then the spares
    pc: np.ndarray          # m x m: the column's path with that node there (-inf: a spare slot)
    rc: np.ndarray          # m x m: the slower of its two ring links, the row's dp_base included
    ec: np.ndarray          # m x m: the column's embedding pair
    P0: float               # the slowest path of a column with no freed position (-inf: none)
    D0: float               # the slowest link with no freed end
    E0: float               # the slowest embedding pair of a column with no freed position


def tables(p: MappingProblem, a: np.ndarray, F: np.ndarray, spares: np.ndarray) -> _Tables:
    """The assignment problem of freeing the positions of mask F (no two next to each other in a row's ring or a
    column; at most two per column, not rows 0 and R-1 together): any one-to-one placement of xs on the freed
    positions and the spare slots scores at most const + max(P0, its pc) + max(D0, its rc) + max(E0, its ec),
    exactly where no column has two freed positions (tests/test_lns.py). A column with two: each position's pc is
    the path with twice that position's change (the sum of two changes is at most twice the larger one)."""
    R, K = a.shape
    cols = np.arange(K)
    hop, sym, base = p.hop, p._dp_sym, p.dp_base
    wrap = p.wrap if (p.wrap is not None and R > 1) else None
    emb = p.emb if (p.emb is not None and R > 1) else None
    path = p.path_costs(a) if R > 1 else np.zeros(K)
    links = base[:, None] + sym[np.arange(R)[:, None], a, a[:, (cols + 1) % K]]      # link (i, j)-(i, j+1)
    embv = emb[a[0], a[R - 1]] if emb is not None else np.zeros(K)
    cs, rs = np.nonzero(F.T)                                       # column by column
    per_col = F.sum(axis=0)
    sel = per_col > 0
    xs = np.concatenate([a[rs, cs], spares]).astype(np.int64)
    g, m = len(cs), len(cs) + len(spares)
    kept = ~(F | np.roll(F, -1, axis=1))                   # links with no freed end
    D0 = float(links[kept].max()) if kept.any() else -np.inf
    P0 = float(path[~sel].max()) if (~sel).any() else -np.inf
    E0 = float(embv[~sel].max()) if (~sel).any() else -np.inf
    pc, rc, ec = (np.full((m, m), -np.inf) for _ in range(3))
    X = xs[None, :]
    up, dn = rs > 0, rs < R - 1
    above, below = a[np.maximum(rs - 1, 0), cs], a[np.minimum(rs + 1, R - 1), cs]
    cur = a[rs, cs]
    # the change of the position's column path with node x there
    t = np.where(up[:, None], hop[above[:, None], X], 0.0) + np.where(dn[:, None], hop[X, below[:, None]], 0.0) \
        - (np.where(up, hop[above, cur], 0.0) + np.where(dn, hop[cur, below], 0.0))[:, None]
    if wrap is not None:                                           # row R-1 -> row 0 of the same column
        top, bot = a[0, cs], a[R - 1, cs]
        t = t - np.where((rs == 0) | (rs == R - 1), wrap[bot, top], 0.0)[:, None] \
            + np.where((rs == 0)[:, None], wrap[bot[:, None], X], 0.0) \
            + np.where((rs == R - 1)[:, None], wrap[X, top[:, None]], 0.0)
    if R > 1:
        pc[:g] = path[cs][:, None] + per_col[cs][:, None] * t
    left, right = a[rs, (cs - 1) % K], a[rs, (cs + 1) % K]
    rc[:g] = base[rs][:, None] + np.maximum(sym[rs[:, None], left[:, None], X], sym[rs[:, None], X, right[:, None]])
    if emb is not None:
        ec[:g] = np.where((rs == 0)[:, None], emb[X, a[R - 1, cs][:, None]],
                          np.where((rs == R - 1)[:, None], emb[a[0, cs][:, None], X], embv[cs][:, None]))
    return _Tables(rs, cs, xs, pc, rc, ec, P0, D0, E0)


def _step(p: MappingProblem, a: np.ndarray, spares: np.ndarray, rng):
    """One step: (assignment, spares, changed?, size of the assignment problem)."""
    R, K = a.shape
    cols = np.arange(K)
    links = p.dp_base[:, None] + p._dp_sym[np.arange(R)[:, None], a, a[:, (cols + 1) % K]]
    ci, cj = np.unravel_index(int(np.argmax(links)), links.shape)
    u = rng.random(PER_COLUMN * K + 1)
    F = _free(R, K, int(ci), int(cj) if u[-1] < 0.5 else int((cj + 1) % K), u)
    tb = tables(p, a, F, spares)
    pc, rc, ec = tb.pc, tb.rc, tb.ec
    g, m = len(tb.cs), len(tb.xs)
    # the current placement: xs[i] on row i of the tables (the diagonal)
    P = max(tb.P0, np.diagonal(pc).max()) if R > 1 else 0.0
    D, E = max(tb.D0, np.diagonal(rc).max()), max(tb.E0, np.diagonal(ec).max())
    before = p.objective(a)
    tie0 = None
    tries = []
    lower_d = rc[(rc < D) & (rc >= tb.D0)]
    if tb.D0 < D and len(lower_d):
        tries.append((P, float(lower_d.max())))       # a slower link off the ring, the paths kept
    lower_p = pc[(pc < P) & (pc >= tb.P0)]
    if tb.P0 < P and len(lower_p):
        tries.append((float(lower_p.max()), D))       # a slower column faster, the rings kept
    tries.append((P, D))                              # as good, fewer columns and rings near the maxima
    for Pt, Dt in tries:
        ok = (pc <= Pt) & (rc <= Dt) & (ec <= E)
        if not (ok.any(axis=0).all() and ok.any(axis=1).all()):
            continue
        cost = np.where(ok, np.clip(pc - TIE_LEVEL * Pt, 0.0, None) / max(Pt, 1e-30)
                        + np.clip(rc - TIE_LEVEL * Dt, 0.0, None) / max(Dt, 1e-30), _BLOCKED)
        r_, c_ = linear_sum_assignment(cost)
        if cost[r_, c_].max() >= _BLOCKED:
            continue
        b = a.copy()
        grid = r_ < g
        b[tb.rs[r_[grid]], tb.cs[r_[grid]]] = tb.xs[c_[grid]]
        v = p.objective(b)
        if v > before:
            continue
        if v == before:
            tie0 = _tie(p, a) if tie0 is None else tie0
            if _tie(p, b) >= tie0:
                continue
        return b, np.sort(tb.xs[c_[~grid]]), True, m
    return a, spares, False, m
