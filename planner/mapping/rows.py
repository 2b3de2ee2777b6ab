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

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from planner.mapping import work
from planner.mapping.units import to_units

CYCLE_CAP = 200_000        # oriented cycles under the cap; more: the decomposition does not apply
PART_CAP = 50_000          # partitions; more: it does not apply
# the partition search's most work: ENUM_SHARE of the budget, at most ENUM_MAX_S (the family's 16-node instances
# need <= 0.2 at a 10 s limit; 8 x 4 grids and rows with pipeline slack need far more: left to the other solvers)
ENUM_SHARE = 0.5
ENUM_MAX_S = 1.0
PAIR_CYCLES_MAX = 3000     # cycles up to which the sets' pair costs (a cycles x cycles table) are computed
PAIR_ROWS_MAX = 7          # rows up to which each partition's cheapest set order is found by trying them all
SLICE_FIRST = 7            # the first slice of the ring: the 8 lowest set floors (then 16, 32, ...)
STEP_CAP = 2_000_000       # partial arrangements of one partition at one depth; more: that partition stays open
MAX_MASK = 62              # nodes that fit an int64 mask
MAX_ROWS = 8               # rows: an arrangement search keeps a table per subset of the partition's sets (2^R)


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
    """The decomposition covers grids of 2..MAX_ROWS rows and K >= 2 columns that use every node (at most
    MAX_MASK)."""
    L = p.layout
    # (not with the lock step's pace, MappingProblem.pace: its enumeration scores paths as sums of hops)
    return (2 <= L.rows <= MAX_ROWS and L.cols >= 2 and p.n == L.rows * L.cols and p.n <= MAX_MASK
            and getattr(p, "pace", None) is None)


def ring_tables(p) -> np.ndarray:
    """R x N x N: row i's ring charge of link (n, q) in integer units, base included (units.int_objective)."""
    base = to_units(p.dp_base)
    # each link charged both ways: the objective's own symmetric table (rounding is monotone, so the max commutes)
    return np.stack([int(base[i]) + to_units(p._dp_sym[i]) for i in range(p.layout.rows)])


def dihedral(K: int) -> np.ndarray:
    """The distinct rotations and reflections of K positions in a ring (G x K; row 0 the identity)."""
    j = np.arange(K)
    perms = [tuple((j + r) % K) for r in range(K)] + [tuple((r - j) % K) for r in range(K)]
    return np.array(list(dict.fromkeys(perms)), dtype=np.int64)


def cycles_under(link: np.ndarray, K: int, cap: int, max_paths: int = CYCLE_CAP):
    """Every K-cycle of nodes, up to rotation and reflection, whose K links (ring order, wrap included) all cost
    <= cap in at least one row: (C x K nodes starting at their least node, R x C slowest link per row). K = 2: one
    pair, whose one link the ring uses both ways. None: more than max_paths paths at some length."""
    R, N, _ = link.shape
    low = link.min(axis=0)
    adj = low <= cap
    np.fill_diagonal(adj, False)
    P = np.arange(N, dtype=np.int64)[:, None]
    for _ in range(K - 1):
        ext = adj[P[:, -1]] & (np.arange(N)[None, :] > P[:, :1])
        if int(ext.sum()) > max_paths:            # (an upper bound on the next layer) before building it
            return None
        s, q = np.nonzero(ext)
        keep = (P[s] != q[:, None]).all(axis=1)
        P = np.concatenate([P[s[keep]], q[keep, None]], axis=1)
        work.charge(len(P) / work.ROWS_ITEMS_PER_S)
    P = P[adj[P[:, -1], P[:, 0]]]
    if K >= 3:
        P = P[P[:, 1] < P[:, -1]]                 # one of each cycle and its reflection
    nxt = np.roll(P, -1, axis=1)
    val = link[:, P, nxt].max(axis=2) if len(P) else np.zeros((R, 0), dtype=np.int64)
    ok = (val <= cap).any(axis=0)
    return P[ok], val[:, ok]


def partitions(masks: np.ndarray, floors: np.ndarray, N: int, limit_ring: int, max_work_s: float = 1.0):
    """Every split of the N nodes into node sets of `masks` (distinct int64 bit masks) whose floors are all
    <= limit_ring, by the set that holds the lowest uncovered node: a list of (floor = the largest floor of its
    sets, tuple of set indices). None: its work (search nodes and sets scanned) would exceed max_work_s, or more
    than PART_CAP partitions."""
    full = (1 << N) - 1
    by_low = {}
    for k in np.argsort(floors, kind="stable"):
        if floors[k] <= limit_ring:
            m = int(masks[k])
            by_low.setdefault(m & -m, []).append((m, int(k)))
    out, count = [], [0, 0]                    # search nodes, sets scanned
    max_nodes = max_work_s / work.ROWS_NODE_WORK_S

    class _Over(Exception):
        pass

    def rec(cov, chosen, fl):
        count[0] += 1
        if count[0] + count[1] * work.ROWS_SCAN_WORK_S / work.ROWS_NODE_WORK_S > max_nodes or len(out) > PART_CAP:
            raise _Over
        if cov == full:
            out.append((fl, tuple(chosen)))
            return
        free = ~cov & full
        cand = by_low.get(free & -free, ())
        count[1] += len(cand)
        for m, k in cand:
            if not m & cov:
                rec(cov | m, chosen + [k], max(fl, int(floors[k])))

    try:
        rec(0, [], 0)
    except _Over:
        return None
    finally:
        work.charge(count[0] * work.ROWS_NODE_WORK_S + count[1] * work.ROWS_SCAN_WORK_S)
    return out


def pair_costs(P: np.ndarray, start: np.ndarray, hop: np.ndarray, D: np.ndarray) -> np.ndarray:
    """S x S: the least total of the K hops from set a's row to set b's row when b sits right under a, over the
    cycles on each set and the ring's rotations and reflections between them (every column's hop between the
    two rows is one of those K). P: the cycles grouped by set, start: each set's first cycle."""
    best = None
    for g in D:
        c = hop[P[:, 0][:, None], P[:, g[0]][None, :]].copy()
        for j in range(1, P.shape[1]):
            c += hop[P[:, j][:, None], P[:, g[j]][None, :]]
        best = c if best is None else np.minimum(best, c)
    return np.minimum.reduceat(np.minimum.reduceat(best, start, axis=0), start, axis=1)


def partition_path_bounds(parts: np.ndarray, pair: np.ndarray, K: int) -> np.ndarray:
    """Per partition (rows: its R set indices), a lower bound on its slowest column's path (wrap left out): the
    K columns' hops sum to at least the cheapest order of its sets (the pair costs along it), so the slowest
    column costs at least that sum / K."""
    R = parts.shape[1]
    best = None
    for o in itertools.permutations(range(R)):
        c = sum(pair[parts[:, o[k]], parts[:, o[k + 1]]] for k in range(R - 1))
        best = c if best is None else np.minimum(best, c)
    return -(-best // K)


def _tails(pm: list[int], hop: np.ndarray, wmin: int) -> tuple[np.ndarray, np.ndarray]:
    """What a column still costs at least once some of the partition's sets are placed: per mask u of placed sets
    (bit t: set pm[t]) and per last node n, the next hop's cheapest link from n into the sets not placed (nxt), and
    the cheapest link among those sets (further hops, inner); both inf when none is left."""
    R, N = len(pm), hop.shape[0]
    big = np.int64(1) << 40
    nodes = np.arange(N)
    h = np.where(np.eye(N, dtype=bool), big, hop)
    nxt = np.full((1 << R, N), big, dtype=np.int64)
    inner = np.full(1 << R, big, dtype=np.int64)
    for u in range(1 << R):
        left = 0
        for t in range(R):
            if not (u >> t) & 1:
                left |= pm[t]
        if not left:
            continue
        on = ((left >> nodes) & 1).astype(bool)
        nxt[u] = h[:, on].min(axis=1)
        inner[u] = h[np.ix_(on, on)].min() if on.sum() > 1 else big
    return nxt, inner


def _arrangements(sets, pm, cyc, val, D, hop, wrap, emb, ring_floor, limit, path_lb, ef, max_items):
    """The best placement of one partition with integer objective <= limit: ((value, R x K assignment) or None,
    partial arrangements scored (the work charge), complete: False when a depth held more than max_items partial
    arrangements, so the partition was left unsearched). sets: the partition's set indices, pm their node masks;
    cyc[s]: the cycles (node arrays) on set s; val[s]: their R x c slowest links per row; D: the ring's rotations
    and reflections; path_lb: a bound on the slowest column's path; ef: the embedding floor."""
    R, K = len(sets), D.shape[1]
    off = ~np.eye(hop.shape[0], dtype=bool)
    wmin = int(wrap[off].min()) if wrap is not None else 0
    nxt, inner = _tails(pm, hop, wmin)
    # candidates per row d: (set slot, cycle index within the set, alignment) -> nodes by column, ring value
    cand = []
    for d in range(R):
        G = D[:1] if d == 0 else D
        slot, nodes, ring = [], [], []
        for t, s in enumerate(sets):            # per set: its cycles under the limit x the alignments, cycle-major
            v = np.asarray(val[s][d], dtype=np.int64)
            keep = v + path_lb + ef <= limit
            c = np.asarray(cyc[s], dtype=np.int64).reshape(-1, K)[keep]
            slot.append(np.full(len(c) * len(G), t, dtype=np.int64))
            nodes.append(c[:, G].reshape(-1, K))
            ring.append(np.repeat(v[keep], len(G)))
        cand.append((np.concatenate(slot), np.concatenate(nodes), np.concatenate(ring)))
    slot, nodes, rv = cand[0]
    used = np.left_shift(1, slot)
    first = last = nodes
    part = np.zeros((len(slot), K), dtype=np.int64)
    ring = np.maximum(rv, ring_floor)
    hist = np.arange(len(slot))[:, None]
    scored = len(slot)
    for d in range(1, R):
        slot, nodes, rv = cand[d]
        if not len(used) or not len(slot):
            return None, scored, True
        # the pairs (partial arrangement, candidate of a set it has not placed), counted per set before the
        # used x candidates table is built: that table alone can run to 1e9 entries (two-tier networks: 2,520
        # fast 8-cycles inside a rack of 8)
        per_set = np.bincount(slot, minlength=R)
        free = np.array([int(np.count_nonzero((used >> t) & 1 == 0)) for t in range(R)], dtype=np.int64)
        if int(per_set @ free) > max_items:
            return None, scored, False
        ok = (used[:, None] >> slot[None, :]) & 1 == 0
        si, ci = np.nonzero(ok)
        scored += len(si)
        u_new = used[si] | np.left_shift(1, slot[ci])
        p_new = part[si] + hop[last[si], nodes[ci]]
        r_new = np.maximum(ring[si], rv[ci])
        if d < R - 1:
            # each column's next hop leaves its last node for a set not placed yet; the hops after it are at
            # least the cheapest link among those sets; then the wrap
            lb = p_new + nxt[u_new][np.arange(len(si))[:, None], nodes[ci]] + (R - 2 - d) * inner[u_new][:, None]
            score = r_new + np.maximum(path_lb, lb.max(axis=1)) + wmin + ef
        else:
            tail = p_new + wrap[nodes[ci], first[si]] if wrap is not None else p_new
            e = emb[first[si], nodes[ci]].max(axis=1) if emb is not None else 0
            score = r_new + tail.max(axis=1) + e
        keep = score <= limit
        si, ci = si[keep], ci[keep]
        used, first, last, part, ring = u_new[keep], first[si], nodes[ci], p_new[keep], r_new[keep]
        hist = np.concatenate([hist[si], ci[:, None]], axis=1)
        if d == R - 1:
            if not len(si):
                return None, scored, True
            sc = score[keep]
            b = int(np.argmin(sc))                 # the first of the best: deterministic
            a = np.stack([cand[r][1][hist[b, r]] for r in range(R)])
            return (int(sc[b]), a), scored, True
    return None, scored, True


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
    K, N = p.layout.cols, p.n
    link = ring_tables(p)
    ring_floor = int(to_units(p.dp_base).max())
    cap = limit_int - path_lb - ef

    def items_left():
        """Enumerated or scored items the work left buys."""
        return max(0, int((time_limit_s - spent.used_s) * work.ROWS_ITEMS_PER_S))

    found = cycles_under(link, K, cap, min(CYCLE_CAP, items_left()))
    if found is None:
        return None
    P, val = found
    bit = np.left_shift(np.int64(1), P).sum(axis=1)
    masks, inv = np.unique(bit, return_inverse=True)
    inv = inv.ravel()
    order = np.argsort(inv, kind="stable")
    cut = np.cumsum(np.bincount(inv, minlength=len(masks)))[:-1]
    cyc = np.split(P[order], cut)
    vals = np.split(val[:, order], cut, axis=1)
    # a set's floor: its cheapest cycle in its cheapest row
    floors = (np.maximum(ring_floor, np.minimum.reduceat(val.min(axis=0)[order], np.concatenate([[0], cut])))
              if len(P) else np.zeros(0, dtype=np.int64))
    hop = to_units(p.hop)
    wrap = to_units(p.wrap) if p.wrap is not None else None
    emb = to_units(p.emb) if p.emb is not None else None
    D = dihedral(K)
    R = p.layout.rows
    pair = None
    if len(P) <= PAIR_CYCLES_MAX and R <= PAIR_ROWS_MAX:
        pair = pair_costs(P[order], np.concatenate([[0], cut]), hop, D)
        work.charge(len(P) ** 2 * len(D) * K * work.ROWS_PAIR_WORK_S)
    wmin = int(wrap[~np.eye(N, dtype=bool)].min()) if wrap is not None else 0
    best_a, best_v, limit = None, None, limit_int
    examined = n_parts = 0
    open_floor = None                          # the least bound of a partition left unsearched
    stopped = wall_stop = False

    def keep_open(b):
        nonlocal open_floor
        open_floor = b if open_floor is None else min(open_floor, b)

    enum_left = min(ENUM_MAX_S, ENUM_SHARE * time_limit_s)
    # slices of the ring: partitions whose floor is at most tau, tau rising over the sets' floors (the number of
    # sets under it doubling) up to the cap, which falls with every better placement; so a loose incumbent costs a
    # few small enumerations instead of one large one. Partitions of an earlier slice are not searched again.
    levels = np.unique(floors[floors <= cap])
    done_tau = None                            # every partition with floor <= done_tau has been enumerated
    i = min(len(levels) - 1, SLICE_FIRST)
    while len(levels) and not stopped:
        tau = min(int(levels[i]), limit - path_lb - ef)
        with work.metered() as enum:
            parts = partitions(masks, floors, N, tau, enum_left)
        enum_left -= enum.used_s
        if parts is None:
            if done_tau is None:
                return None
            stopped = True
            break
        n_parts = max(n_parts, len(parts))
        if done_tau is not None:
            parts = [(fl, sets) for fl, sets in parts if fl > done_tau]
        done_tau = tau
        # each partition's own path bound, when the pair costs are known; lowest bound first, so the search stops
        # at the first partition whose bound exceeds the limit
        plbs = (np.maximum(path_lb, partition_path_bounds(np.array([q for _, q in parts], dtype=np.int64)
                                                          .reshape(len(parts), R), pair, K))
                if pair is not None and parts else np.full(len(parts), path_lb, dtype=np.int64))
        work.charge(len(parts) * math.factorial(R) * R * work.ROWS_PAIR_WORK_S)
        for key, k in sorted((fl + int(pb), k) for k, ((fl, _), pb) in enumerate(zip(parts, plbs, strict=True))):
            lo = key + wmin + ef               # every arrangement of this partition and the ones after it
            if lo > limit:
                break
            if spent.used_s >= time_limit_s or (wall_s is not None and time.perf_counter() - t0 >= wall_s):
                if spent.used_s < time_limit_s:
                    wall_stop = True
                    work.note_wall()
                keep_open(lo)
                stopped = True
                break
            sets = parts[k][1]
            pm = [int(masks[s]) for s in sets]
            r, scored, complete = _arrangements(sets, pm, cyc, vals, D, hop, wrap, emb, ring_floor, limit,
                                                int(plbs[k]), ef, min(STEP_CAP, max(1, items_left())))
            work.charge(scored / work.ROWS_ITEMS_PER_S + work.ROWS_PART_WORK_S * max(1, (1 << R) // 16))
            examined += 1
            if not complete:
                keep_open(lo)
            elif r is not None:
                best_v, best_a = r
                limit = best_v - 1
        if tau >= limit - path_lb - ef or i == len(levels) - 1:
            break
        i = min(len(levels) - 1, 2 * i + 1)
    if stopped and done_tau is not None:
        # the partitions not enumerated yet hold a set above done_tau: at least the next level
        nxt = levels[levels > done_tau]
        if len(nxt):
            keep_open(int(nxt[0]) + path_lb + ef)
    bound = best_v if best_v is not None else limit_int + 1
    if open_floor is not None:
        bound = min(bound, open_floor)
    return RowsOutcome(best_a, best_v, open_floor is None, int(bound), wall_stop=wall_stop, cycles=len(P),
                       partitions=n_parts, examined=examined)
