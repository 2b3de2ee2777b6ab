"""The integer cost units of the exact solvers: seconds scaled to 0.1 us.

CP-SAT needs integer coefficients; the column decomposition (columns.py) and the pre-solve bounds
(bounds.py) use the same units so that their answers agree with the model's. Every cost term is rounded
on its own, so integer objectives and the floating-point MappingProblem.objective differ by up to one
unit per term (rounding_slack); the reported objective is always recomputed in floating point.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.mapping.problem import MappingProblem, pace_floor, robust_const, steep_floors

UNIT = 1e-7                     # seconds per integer cost unit


def to_units(a) -> np.ndarray:
    """Seconds (scalar or array) -> integer cost units."""
    return np.rint(np.asarray(a) / UNIT).astype(np.int64)


# units the integer pace (int_pace) may lie off the true one: its constant and two hops in the max, two `lin` hops
PACE_SLACK = 3


def rounding_slack(rows: int, pace: bool | int = False) -> int:
    """Units an integer objective may lie below the true one: one per rounded term (the R-1 hops, the
    wrap, a row's base and link, the embedding pair; the lock step's pace: PACE_SLACK, or `pace` units given as an
    int: pace_slack's, which counts Pace.planes too)."""
    return rows + 3 + (PACE_SLACK if pace is True else int(pace))


def has_pace(probs) -> bool:
    """Whether a problem (or any of its scenarios) carries the lock step's pace (MappingProblem.pace)."""
    probs = probs if isinstance(probs, list) else [probs]
    return any(p.pace is not None and p.layout.rows > 1 for p in probs)


def pace_slack(probs) -> int:
    """Units the integer pace may lie off the true one over the problems (0 without a pace): PACE_SLACK, or a plane's
    (Pace.planes: alpha l1 + beta l2 + g on hops rounded to units, each off by half a unit) if more."""
    probs = probs if isinstance(probs, list) else [probs]
    if not has_pace(probs):
        return 0
    out = PACE_SLACK
    for p in probs:
        for q in (p.pace.planes if p.pace is not None else ()):
            if len(q):
                out = max(out, int(np.ceil((np.abs(q[:, 0]) + np.abs(q[:, 1])).max() / 2)) + 1)
    return out


@dataclass(frozen=True)
class IntPace:
    """problem.Pace in integer units, as the exact models score it: per column
    max(base, max_r (e[r] + h_r), max_i (f[i] + h_(i-1) + h_i)) + sum_(r in lin) l_r, with h = the hop scaled by W
    and l the hop itself, each rounded on its own; None entries (-inf in Pace) take no part."""
    h: np.ndarray                    # N x N: to_units(W c)
    l: np.ndarray                    # N x N: to_units(c)
    base: int | None
    e: list                          # R - 1: int or None
    f: list                          # R: int or None
    lin: tuple
    s: tuple = ()                    # per boundary (wrap last): to_units(W Pace.steep_c[r]), each pair rounded alone
    q: tuple = ()                    # per row: Pace.planes as (alpha, beta, to_units(gamma)) ints, on the hops l


def int_pace_tables(p: MappingProblem) -> IntPace:
    pc = p.pace

    def u(x):
        return int(to_units(pc.weight * x)) if np.isfinite(x) else None
    return IntPace(to_units(pc.weight * pc.c), to_units(pc.c), u(pc.base), [u(x) for x in pc.e],
                   [u(x) for x in pc.f], tuple(pc.lin), tuple(to_units(pc.weight * t) for t in pc.steep_c),
                   tuple([(int(a), int(b), int(to_units(g))) for a, b, g in q] for q in pc.planes))


def int_pace_floor(p: MappingProblem) -> int:
    """A valid lower bound on every column's integer pace (0 without one): each mapped hop joins two distinct nodes,
    so costs at least the cheapest pair (Pace.floor in units)."""
    if p.pace is None or p.layout.rows < 2 or p.n < 2:
        return 0
    t = int_pace_tables(p)
    iu = np.triu_indices(p.n, 1)
    h = np.sort(t.h[iu])                # t.h is symmetric (Pace.c is)
    k = min(len(t.e), len(h)) - 1
    return int(pace_floor(t.base, t.e, t.f, int(h[0]), int(h[k]), steep_floors(t.s, iu, k))) + \
        len(t.lin) * int(t.l[iu].min())


def int_pace(p: MappingProblem, a: np.ndarray, tables: IntPace | None = None) -> np.ndarray:
    """Each column's integer pace (K), as the CP-SAT model scores it."""
    t = int_pace_tables(p) if tables is None else tables
    h = t.h[a[:-1], a[1:]]
    R = a.shape[0]
    best = np.full(a.shape[1], np.iinfo(np.int64).min, dtype=np.int64)
    if t.base is not None:
        best = np.maximum(best, t.base)
    for r in range(R - 1):
        if t.e[r] is not None:
            best = np.maximum(best, t.e[r] + h[r])
    for i in range(1, R - 1):
        if t.f[i] is not None:
            best = np.maximum(best, t.f[i] + h[i - 1] + h[i])
    for r, tab in enumerate(t.s):
        best = np.maximum(best, tab[a[r], a[(r + 1) % R]])
    for i, q in enumerate(t.q):
        h1, h2 = t.l[a[i - 1], a[i]], t.l[a[i], a[(i + 1) % R]]
        for x, y, g in q:
            best = np.maximum(best, x * h1 + y * h2 + g)
    for r in t.lin:
        best = best + t.l[a[r], a[r + 1]]
    return best


def int_objective(p: MappingProblem, a: np.ndarray) -> int:
    """The model's integer objective (tpp + tdp + temb, units) of an assignment, as the model scores it."""
    R, K = a.shape
    hop_c = to_units(p.hop)
    path = hop_c[a[:-1], a[1:]].sum(axis=0) if R > 1 else np.zeros(K, dtype=np.int64)
    if p.wrap is not None and R > 1:
        path = path + to_units(p.wrap)[a[R - 1], a[0]]
    if p.pace is not None and R > 1:
        path = path + int_pace(p, a)
    base = to_units(p.dp_base)
    ring = int(base.max())
    if K > 1:
        for i in range(R):
            lc = to_units(p.dp_link[i])
            for j in range(K):                     # the ring in column order: neighbour links only
                n, q = a[i, j], a[i, (j + 1) % K]
                ring = max(ring, int(base[i]) + int(max(lc[n, q], lc[q, n])))
    emb = 0
    if p.emb is not None and R > 1:
        emb = int(to_units(p.emb)[a[0], a[R - 1]].max())
    return int(path.max()) + ring + emb


def cutoff_int(cutoff: float, probs: list[MappingProblem], robust: str) -> int:
    """The integer objective a placement must stay under to count as strictly better than `cutoff`.
    A placement within the rounding slack of the cutoff is a tie, not an improvement (the same order as
    solve's absolute tolerance, 20 us); without the margin CP-SAT may return the incumbent's own twin
    as 'better' by rounding."""
    R = probs[0].layout.rows
    return int(np.floor((cutoff - robust_const(probs, robust)) / UNIT)) - rounding_slack(R, pace_slack(probs))
