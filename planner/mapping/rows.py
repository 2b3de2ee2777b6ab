"""Exact mapping by row decomposition: every row is a ring of fast links, the rows are stacked into columns.

Why: where every row's data-parallel ring counts alike (issue #10's family: dp_base equal, no pipeline slack), the
row-0 arguments of the pre-solve (ring slice, head bound, column decomposition) bound one of R equally heavy rings,
and CP-SAT's LP sees the slowest ring and the slowest column only through the assignment variables: 16-node
instances kept 1.5-3.5% gaps. But with an incumbent U and a valid bound P_LB on the slowest column's path, every
better placement has slowest ring <= cap = U - P_LB (- the embedding floor), so each row's node set is a ring, in
column order, of links under the cap, and under that cap the fast-link graph is sparse: on the family's 16-node
instances 100-340 oriented 4-cycles and 3-600 ways to split the nodes into 4 of them. So:
1. cycles: every K-cycle of nodes (up to rotation and reflection) whose links fit under the cap in some row;
2. partitions: every split of the nodes into R node sets that carry such a cycle (an exact cover, branching on the
   lowest uncovered node); a partition's ring floor is the largest over its sets of their cheapest cycle;
3. arrangements: per partition, lowest floor first, a branch and bound over the rows 0..R-1 (which set, which of
   its cycles, which rotation or reflection of it; row 0's is fixed: the columns' rotations and reflection leave
   the objective unchanged), vectorised over all partial arrangements of one depth, pruned when the slowest ring
   so far + the slowest partial column + what the rows still to come cost at least exceeds the limit.
Every placement under the limit is an arrangement of some partition, so when the partitions run out below the
limit the best one found is optimal (or nothing beats the limit). Costs are the integer units of units.py, scored
as units.int_objective scores them. Only for grids that use every node (N = R x K) and one scenario.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.mapping import work
from planner.mapping.units import to_units

CYCLE_CAP = 200_000        # oriented cycles under the cap; more: the decomposition does not apply
PART_NODES_CAP = 200_000   # exact-cover search nodes; more: it does not apply
PART_CAP = 50_000          # partitions; more: it does not apply
MAX_MASK = 62              # nodes that fit an int64 mask


@dataclass
class RowsOutcome:
    assign: np.ndarray | None   # the best placement found under the limit (None: none)
    value: int | None           # its integer objective
    proved: bool                # every placement with objective <= the final limit was examined
    bound: int                  # a valid lower bound on every placement's integer objective (at most limit + 1)
    work_s: float = 0.0         # work seconds charged (work.py)
    wall_stop: bool = False     # the wall-clock safety stop ended it
    cycles: int = 0             # oriented cycles under the cap
    partitions: int = 0         # partitions into R of their node sets
    examined: int = 0           # partitions whose arrangements were searched


def applies(p) -> bool:
    """The decomposition covers grids of R >= 2 rows and K >= 2 columns that use every node (at most MAX_MASK)."""
    L = p.layout
    return L.rows >= 2 and L.cols >= 2 and p.n == L.rows * L.cols and p.n <= MAX_MASK


def ring_tables(p) -> np.ndarray:
    """R x N x N: row i's ring charge of link (n, q) in integer units, base included (units.int_objective)."""
    base = to_units(p.dp_base)
    out = []
    for i in range(p.layout.rows):
        lc = to_units(p.dp_link[i])
        out.append(int(base[i]) + np.maximum(lc, lc.T))
    return np.stack(out)


def dihedral(K: int) -> np.ndarray:
    """The distinct rotations and reflections of K positions in a ring (G x K; row 0 the identity)."""
    j = np.arange(K)
    perms = [tuple((j + r) % K) for r in range(K)] + [tuple((r - j) % K) for r in range(K)]
    return np.array(list(dict.fromkeys(perms)), dtype=np.int64)


def cycles_under(link: np.ndarray, K: int, cap: int):
    """Every K-cycle of nodes, up to rotation and reflection, whose K links (ring order, wrap included) all cost
    <= cap in at least one row: (C x K nodes starting at their least node, R x C slowest link per row). K = 2: one
    pair, whose one link the ring uses both ways. None: more than CYCLE_CAP paths at some length."""
    R, N, _ = link.shape
    low = link.min(axis=0)
    adj = low <= cap
    np.fill_diagonal(adj, False)
    P = np.arange(N, dtype=np.int64)[:, None]
    for _ in range(K - 1):
        s, q = np.nonzero(adj[P[:, -1]] & (np.arange(N)[None, :] > P[:, :1]))
        keep = (P[s] != q[:, None]).all(axis=1)
        P = np.concatenate([P[s[keep]], q[keep, None]], axis=1)
        work.charge(len(P) / work.ROWS_ITEMS_PER_S)
        if len(P) > CYCLE_CAP:
            return None
    P = P[adj[P[:, -1], P[:, 0]]]
    if K >= 3:
        P = P[P[:, 1] < P[:, -1]]                 # one of each cycle and its reflection
    nxt = np.roll(P, -1, axis=1)
    val = link[:, P, nxt].max(axis=2) if len(P) else np.zeros((R, 0), dtype=np.int64)
    ok = (val <= cap).any(axis=0)
    return P[ok], val[:, ok]


def partitions(masks: np.ndarray, floors: np.ndarray, N: int, R: int, limit_ring: int):
    """Every split of the N nodes into R of the node sets `masks` (distinct int64 bit masks) whose floors are all
    <= limit_ring: a list of (floor = the largest floor of its sets, tuple of set indices). None: more than
    PART_NODES_CAP search nodes or PART_CAP partitions."""
    full = (1 << N) - 1
    by_low = {}
    for k in np.argsort(floors, kind="stable"):
        if floors[k] <= limit_ring:
            m = int(masks[k])
            by_low.setdefault(m & -m, []).append((m, int(k)))
    out, nodes = [], [0]

    class _Over(Exception):
        pass

    def rec(cov, chosen, fl):
        nodes[0] += 1
        if nodes[0] > PART_NODES_CAP or len(out) > PART_CAP:
            raise _Over
        if cov == full:
            out.append((fl, tuple(chosen)))
            return
        free = ~cov & full
        for m, k in by_low.get(free & -free, []):
            if not m & cov:
                rec(cov | m, chosen + [k], max(fl, int(floors[k])))

    try:
        rec(0, [], 0)
    except _Over:
        return None
    finally:
        work.charge(nodes[0] * work.ROWS_NODE_WORK_S)
    return out


def _arrangements(sets, cyc, val, D, hop, wrap, emb, ring_floor, limit, rem, ef):
    """The best placement of one partition with integer objective <= limit: (value, R x K assignment) or None,
    and the partial arrangements scored (for the work charge). sets: the partition's set indices; cyc[s]: the
    cycles (node arrays) on set s; val[s]: their R x c slowest links per row; D: the ring's rotations and
    reflections; rem[d]: what the hops after row d cost at least (wrap included); ef: the embedding floor."""
    R, K = len(sets), D.shape[1]
    # candidates per row d: (set slot, cycle index within the set, alignment) -> nodes by column, ring value
    cand = []
    for d in range(R):
        slot, nodes, ring = [], [], []
        for t, s in enumerate(sets):
            for c in range(len(cyc[s])):
                v = int(val[s][d, c])
                if v + ef > limit:
                    continue
                al = D[:1] if d == 0 else D
                for g in al:
                    slot.append(t)
                    nodes.append(cyc[s][c][g])
                    ring.append(v)
        cand.append((np.array(slot, dtype=np.int64), np.array(nodes, dtype=np.int64).reshape(-1, K),
                     np.array(ring, dtype=np.int64), ))
    slot0, nodes0, ring0 = cand[0]
    used = np.left_shift(1, slot0)
    first = nodes0
    last = nodes0
    part = np.zeros((len(slot0), K), dtype=np.int64)
    ring = np.maximum(ring0, ring_floor)
    hist = np.arange(len(slot0))[:, None]
    scored = len(slot0)
    keep = ring + rem[0] + ef <= limit
    used, first, last, part, ring, hist = used[keep], first[keep], last[keep], part[keep], ring[keep], hist[keep]
    for d in range(1, R):
        if not len(used):
            return None, scored
        slot, nodes, rv = cand[d]
        if not len(slot):
            return None, scored
        ok = (used[:, None] >> slot[None, :]) & 1 == 0
        si, ci = np.nonzero(ok)
        scored += len(si)
        p_new = part[si] + hop[last[si], nodes[ci]]
        r_new = np.maximum(ring[si], rv[ci])
        tail = p_new
        if d == R - 1 and wrap is not None:
            tail = p_new + wrap[nodes[ci], first[si]]
        e = emb[first[si], nodes[ci]].max(axis=1) if (d == R - 1 and emb is not None) else ef
        score = r_new + tail.max(axis=1) + (rem[d] if d < R - 1 else 0) + e
        keep = score <= limit
        si, ci = si[keep], ci[keep]
        used = used[si] | np.left_shift(1, slot[ci])
        first, last, part, ring = first[si], nodes[ci], p_new[keep], r_new[keep]
        hist = np.concatenate([hist[si], ci[:, None]], axis=1)
        if d == R - 1:
            if not len(si):
                return None, scored
            sc = score[keep]
            b = int(np.argmin(sc))                 # the first of the best: deterministic
            a = np.stack([cand[r][1][hist[b, r]] for r in range(R)])
            return (int(sc[b]), a), scored
    return None, scored


def solve_rows(p, limit_int: int, path_lb: int, time_limit_s: float, emb_floor: int = 0,
               wall_s: float | None = None) -> RowsOutcome | None:
    """Search every placement of p with integer objective <= limit_int (units.int_objective), best first; path_lb:
    a valid lower bound on the slowest column's path (wrap hop left out), emb_floor: on the slowest embedding pair.
    time_limit_s: work (work.py); wall_s: the wall-clock safety stop (default none). None: the decomposition does
    not apply (see `applies`) or its enumeration is too large."""
    if not applies(p):
        return None
    with work.metered() as spent:
        out = _solve_rows(p, limit_int, path_lb, time_limit_s, emb_floor, wall_s, spent)
    if out is not None:
        out.work_s = spent.used_s
    return out


def _solve_rows(p, limit_int, path_lb, time_limit_s, ef, wall_s, spent):
    t0 = time.perf_counter()
    R, K, N = p.layout.rows, p.layout.cols, p.n
    link = ring_tables(p)
    ring_floor = int(to_units(p.dp_base).max())
    cap = limit_int - path_lb - ef
    found = cycles_under(link, K, cap)
    if found is None:
        return None
    P, val = found
    bit = np.left_shift(np.int64(1), P).sum(axis=1)
    masks, inv = np.unique(bit, return_inverse=True)
    cyc = [P[inv == s] for s in range(len(masks))]
    vals = [val[:, inv == s] for s in range(len(masks))]
    floors = np.array([int(max(ring_floor, v.min())) for v in vals], dtype=np.int64)
    parts = partitions(masks, floors, N, R, cap)
    if parts is None:
        return None
    parts.sort()
    hop = to_units(p.hop)
    wrap = to_units(p.wrap) if p.wrap is not None else None
    emb = to_units(p.emb) if p.emb is not None else None
    off = ~np.eye(N, dtype=bool)
    hmin = int(hop[off].min())
    wmin = int(wrap[off].min()) if wrap is not None else 0
    # what the hops after row d cost at least, and never less than the path bound minus the hops so far
    rem = np.array([(R - 1 - d) * hmin + wmin for d in range(R)], dtype=np.int64)
    rem[0] = max(int(rem[0]), path_lb + wmin)
    D = dihedral(K)
    best_a, best_v, limit = None, None, limit_int
    examined = 0
    open_floor = None
    wall_stop = False
    for fl, sets in parts:
        if fl + path_lb + ef > limit:
            break
        if spent.used_s >= time_limit_s:
            open_floor = fl + path_lb + ef
            break
        if wall_s is not None and time.perf_counter() - t0 >= wall_s:
            wall_stop = True
            work.note_wall()
            open_floor = fl + path_lb + ef
            break
        r, scored = _arrangements(sets, cyc, vals, D, hop, wrap, emb, ring_floor, limit, rem, ef)
        work.charge(scored / work.ROWS_ITEMS_PER_S)
        examined += 1
        if r is not None:
            best_v, best_a = r
            limit = best_v - 1
    bound = best_v if best_v is not None else limit_int + 1
    if open_floor is not None:
        bound = min(bound, open_floor)
    return RowsOutcome(best_a, best_v, open_floor is None, int(bound), wall_stop=wall_stop, cycles=len(P),
                       partitions=len(parts), examined=examined)

