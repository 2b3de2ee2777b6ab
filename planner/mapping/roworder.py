"""The order of whole rows: which group of nodes serves which pipeline stage group (a move no swap makes).

Where fast rings confine each row to one group of nodes (racks behind an oversubscribed spine; problem.rows_confined),
the annealer's moves cannot move a row: one swap puts a node of another rack into two rings and slows both ~4x,
while the gain needs all K blocks of two rows exchanged at once. So a rack with slow uplinks can stay in the middle
of the pipeline, where every column enters and leaves it through slow links: on the two-tier family
(benchmarks/mapping_family.py --family rack, 8 x 8) every searcher ended 8-9% above the plan with that rack at an end
(docs/notes/solver.md, "The order of whole rows").

improve() permutes the rows of a placement, each row keeping its nodes and column order: every order when R <=
EXHAUSTIVE_ROWS, else a descent over swaps and segment reversals of rows. Candidates are ranked by a vectorised
objective (the same terms as MappingProblem.objective over the permuted rows); the best is kept only if
robust_objective says it is strictly lower, so the result is never worse. Deterministic (first best in a fixed
order); its work is charged per cost term evaluated (work.py) and bounded beforehand (work_bound).
"""
from __future__ import annotations

import functools
import itertools
from math import factorial

import numpy as np

from planner.mapping import work
from planner.mapping.problem import robust_objective

EXHAUSTIVE_ROWS = 8         # up to this many rows, every order (8! = 40,320)
MAX_PASSES = 32             # the descent's passes above it (each takes the best improving move, or ends)
CHUNK = 4096                # orders scored at once (memory: CHUNK x R x K floats per gather)
# a (row order, row) is charged as at least this many columns: the scorer's gathers cost ~32-50 ns per (order, row)
# whatever K up to 8 (measured at 8 x 2 .. 16 x 8, 64 x 2, load ~1), 16-21 ns per column term at K = 2 against the
# 20 ns charged per term (work.ROW_ORDER_TERM_WORK_S, set on 8 x 8 .. 16 x 16); from 8 columns on nothing changes
MIN_TERM_COLS = 8


def applies(problems) -> bool:
    p = (problems if isinstance(problems, list) else [problems])[0]
    return p.layout.rows >= 2 and p.layout.cols >= 2 and p.rows_confined()


def _moves(R: int) -> np.ndarray:
    """The descent's neighbours of the identity order: every swap of two rows, every reversal of >= 3 rows."""
    out = []
    for i in range(R):
        for j in range(i + 1, R):
            s = np.arange(R)
            s[i], s[j] = j, i
            out.append(s)
            if j - i >= 2:
                r = np.arange(R)
                r[i:j + 1] = r[i:j + 1][::-1]
                out.append(r)
    return np.array(out)


@functools.cache
def _orders(R: int) -> np.ndarray:
    """Every order of R rows, in itertools.permutations order (read-only, built once)."""
    a = np.array(list(itertools.permutations(range(R))), dtype=np.intp).reshape(-1, R)
    a.setflags(write=False)
    return a


def _terms(R: int, K: int, scenarios: int, orders: int) -> int:
    return orders * R * max(K, MIN_TERM_COLS) * scenarios


def work_bound(problems) -> float:
    """Work seconds improve() may charge on these problems (its exhaustive search, or MAX_PASSES passes)."""
    probs = problems if isinstance(problems, list) else [problems]
    R, K = probs[0].layout.rows, probs[0].layout.cols
    orders = factorial(R) if R <= EXHAUSTIVE_ROWS else MAX_PASSES * len(_moves(R))
    return _terms(R, K, len(probs), orders) * work.ROW_ORDER_TERM_WORK_S


class _Scorer:
    """The objective of a placement's rows in any order, per scenario, from tables over (row, row, column)."""

    def __init__(self, probs, a: np.ndarray, robust: str):
        R, K = a.shape
        self.robust, self.R = robust, R
        nxt = np.roll(np.arange(K), -1)
        self.tabs = []
        for p in probs:
            hop = p.hop[a[:, None, :], a[None, :, :]]                               # [u, v, j]: row u above row v
            wrap = p.wrap[a[:, None, :], a[None, :, :]] if (p.wrap is not None and R > 1) else None
            emb = p.emb[a[:, None, :], a[None, :, :]].max(axis=2) if (p.emb is not None and R > 1) else None
            # [i, u]: row u's ring at row i (one column: no ring, as dp_costs has it; dp_link's diagonal unread)
            links = p._dp_sym[:, a, a[:, nxt]].max(axis=2) if K > 1 else np.zeros((R, R))
            ring = np.asarray(p.dp_base, dtype=float)[:, None] + links
            self.tabs.append((float(p.const), hop, wrap, emb, ring))

    def __call__(self, orders: np.ndarray) -> np.ndarray:
        vals = []
        rows = np.arange(self.R)[None, :]
        for const, hop, wrap, emb, ring in self.tabs:
            path = hop[orders[:, :-1], orders[:, 1:]].sum(axis=1) if self.R > 1 else 0.0
            if wrap is not None:
                path = path + wrap[orders[:, -1], orders[:, 0]]
            v = const + path.max(axis=1) + ring[rows, orders].max(axis=1)
            if emb is not None:
                v = v + emb[orders[:, 0], orders[:, -1]]
            vals.append(v)
        vals = np.array(vals)
        return vals.mean(axis=0) if self.robust == "mean" else vals.max(axis=0)


def improve(problems, assign: np.ndarray, robust: str = "worst") -> tuple[np.ndarray, bool]:
    """(placement, moved): the rows of `assign` in the best order found; `assign` itself unless strictly beaten."""
    probs = problems if isinstance(problems, list) else [problems]
    a = np.asarray(assign)
    R, K = a.shape
    if R < 2:
        return a, False                              # one row: one order
    score = _Scorer(probs, a, robust)
    if R <= EXHAUSTIVE_ROWS:
        best_v, best = np.inf, np.arange(R)          # the order as it is, unless some order scores lower
        every = _orders(R)
        for c in range(0, len(every), CHUNK):
            chunk = every[c:c + CHUNK]
            v = score(chunk)
            k = int(np.argmin(v))
            if v[k] < best_v:
                best_v, best = float(v[k]), chunk[k]
        work.charge(_terms(R, K, len(probs), factorial(R)) * work.ROW_ORDER_TERM_WORK_S)
    else:
        moves, order = _moves(R), np.arange(R)
        cur = float(score(order[None, :])[0])
        for _ in range(MAX_PASSES):
            cand = order[moves]
            v = score(cand)
            work.charge(_terms(R, K, len(probs), len(moves)) * work.ROW_ORDER_TERM_WORK_S)
            k = int(np.argmin(v))
            if not v[k] < cur:
                break
            order, cur = cand[k], float(v[k])
        best = order
    new = a[best]
    if robust_objective(probs, new, robust) < robust_objective(probs, a, robust):
        return new.copy(), True
    return a, False
