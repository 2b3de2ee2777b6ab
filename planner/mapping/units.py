"""The integer cost units of the exact solvers: seconds scaled to 0.1 us.

CP-SAT needs integer coefficients; the column decomposition (columns.py) and the pre-solve bounds
(bounds.py) use the same units so that their answers agree with the model's. Every cost term is rounded
on its own, so integer objectives and the floating-point MappingProblem.objective differ by up to one
unit per term (rounding_slack); the reported objective is always recomputed in floating point.
"""
from __future__ import annotations

import numpy as np

from planner.mapping.problem import MappingProblem, robust_const

UNIT = 1e-7                     # seconds per integer cost unit


def to_units(a) -> np.ndarray:
    """Seconds (scalar or array) -> integer cost units."""
    return np.rint(np.asarray(a) / UNIT).astype(np.int64)


def rounding_slack(rows: int) -> int:
    """Units an integer objective may lie below the true one: one per rounded term (the R-1 hops, the
    wrap, a row's base and link, the embedding pair)."""
    return rows + 3


def int_objective(p: MappingProblem, a: np.ndarray) -> int:
    """The model's integer objective (tpp + tdp + temb, units) of an assignment, as the model scores it."""
    R, K = a.shape
    hop_c = to_units(p.hop)
    path = hop_c[a[:-1], a[1:]].sum(axis=0) if R > 1 else np.zeros(K, dtype=np.int64)
    if p.wrap is not None and R > 1:
        path = path + to_units(p.wrap)[a[R - 1], a[0]]
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
    return int(np.floor((cutoff - robust_const(probs, robust)) / UNIT)) - rounding_slack(R)
