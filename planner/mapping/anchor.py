"""Weak nodes anchored: a node with few fast peers (a degraded NIC) given its fast peers as ring and column
neighbours, a move no swap makes.

On the three-tier family (benchmarks/mapping_family.py --family pod: racks of 4 in pods of 16, one node in eight
with a degraded NIC, every link of it out of its rack 8-20x slower) the portfolio ended 14% above a plan built by
hand on pod 4 x 8 seed 10 (docs/notes/solver.md, "The three-tier family's gap is partly the search's"): there each
degraded node sits between two rack-mates in its row's ring and over (or under) its last rack-mate in its column,
so its column takes at most one slow hop. Reaching that from the search's plan takes a node moved to the next row,
one node of that row moved back, and both rows' rings reordered around them at once; any single swap puts a node of
another rack into a ring (slower ring) or leaves the path as slow as before, and the maximum path does not fall
until every weak node on a slow column is done: the annealer, the LNS and the two-row calls all stayed there.

improve() visits the weak nodes (weak_nodes: the WEAK_RANK-th cheapest hop dearer than WEAK_FACTOR x the median
node's), slowest first. For weak node v at (row i, column j), an adjacent row i2, one of v's PEERS cheapest peers c
(not there already) and each node x of row i2: c goes to (i2, j), x to c's old place, the node at (i2, j) to x's (c
already in row i2: moved within it). Every row touched gets a cyclic order with the anchored columns pinned (a
depth-first search, DFS_NODES nodes per try): under the plan's slowest ring if one is found there, else at the least
level above it that the bisection finds, never at a level that could not beat the plan (cap). The best candidate is
kept if it lowers (paths from the slowest, then the slowest ring): a weak node's column counts as progress even
where another column still holds the maximum; v and c are then pinned. The pass returns the plan with the least
whole (robust) objective after any of its moves, if strictly lower than its start's: never worse. Deterministic
(fixed orders, first best); its work is charged per try, search node (by the row's width above 8 columns), scored
candidate and its entry (work.py), and it stops before a candidate that might not fit the budget the caller gives.
Tuned on the pod family's seeds 0-2 and 10 only (docs/notes/solver.md, "Weak nodes anchored").
"""
from __future__ import annotations

import math

import numpy as np

from planner.mapping import work
from planner.mapping.problem import robust_objective
from planner.mapping.startpoint import degrees_ok

WEAK_RANK = 4               # a node inside the grid has two ring and two column neighbours
WEAK_FACTOR = 2.0           # weak: its WEAK_RANK-th cheapest hop over this many times the median node's
PEERS = 3                   # a weak node's cheapest peers tried as its column neighbour
DFS_NODES = 400             # per threshold tried, per row (as startpoint.py)
MIN_COLS = 4                # a ring of 2 or 3 nodes has one cyclic order
MAX_COLS = 62               # the search's neighbour sets are 64-bit masks


def weak_nodes(p) -> list[int]:
    """Nodes whose WEAK_RANK-th cheapest hop (either direction) costs more than WEAK_FACTOR x the median node's,
    slowest first: nodes with few fast peers."""
    if p.n <= WEAK_RANK:
        return []
    hs = np.minimum(p.hop, p.hop.T).astype(float)
    np.fill_diagonal(hs, np.inf)
    kth = np.sort(hs, axis=1)[:, WEAK_RANK - 1]
    med = float(np.median(kth))
    return [int(v) for v in sorted(range(p.n), key=lambda v: (-kth[v], v)) if kth[v] > WEAK_FACTOR * med]


def applies(problems) -> bool:
    """Rows confined to groups of nodes (problem.rows_confined) and some weak node."""
    p = (problems if isinstance(problems, list) else [problems])[0]
    L = p.layout
    return L.rows >= 2 and MIN_COLS <= L.cols <= MAX_COLS and p.rows_confined() and bool(weak_nodes(p))


def _pinned_cycle(adj: list[int], K: int, pins: dict[int, int], cap: int) -> tuple[list[int] | None, int]:
    """(out[t] = the node at column t: a cycle of the K-node graph `adj` (neighbour bitmasks) with node pins[t] at
    every pinned column t, or None; search nodes used, at most cap + 1). At least one pin."""
    full = (1 << K) - 1
    s = min(pins)
    cols = [(s + t) % K for t in range(K)]
    pinned = 0
    for w in pins.values():
        pinned |= 1 << w
    first = pins[s]
    order = [first]
    count = 0

    def dfs(t: int, u: int, used: int) -> bool:
        nonlocal count
        count += 1
        if count > cap:
            return False
        if t == K:
            return bool(adj[u] & (1 << first))
        rest = full & ~used
        if not degrees_ok(adj, rest, (1 << u) | (1 << first)):
            return False
        col = cols[t]
        m = adj[u] & rest & ((1 << pins[col]) if col in pins else ~pinned)
        nxt = first if t == K - 1 else pins.get(cols[t + 1])       # the next column's node, if fixed
        if nxt is not None:
            m &= adj[nxt]
        cands = []
        while m:
            w = (m & -m).bit_length() - 1
            m &= m - 1
            cands.append(((adj[w] & rest).bit_count(), w))     # Warnsdorff: fewest onward links first
        for _, w in sorted(cands):
            order.append(w)
            if dfs(t + 1, w, used | (1 << w)):
                return True
            order.pop()
            if count > cap:
                return False
        return False

    if not dfs(1, first, 1 << first):
        return None, count
    out = [0] * K
    for t, w in enumerate(order):
        out[cols[t]] = w
    return out, count


def node_work(K: int) -> float:
    """Work seconds of one node of the pinned search on a row of K columns (its checks scan the row's free nodes)."""
    return work.ANCHOR_NODE_WORK_S * max(1.0, K / work.ANCHOR_NODE_COLS)


def entry_work(n: int) -> float:
    """Work seconds of the pass's entry on n nodes (weak_nodes sorts every node's hops; the start scored)."""
    return work.ANCHOR_PAIR_WORK_S * n * n


def candidate_work(K: int) -> float:
    """The most work seconds one candidate can charge: three rows re-ringed, each its check, its try at the slowest
    ring and a full bisection of capped tries."""
    tries = math.ceil(math.log2(K * (K - 1) // 2 + 1)) + 2
    return 3 * tries * (work.ANCHOR_TRY_WORK_S + (DFS_NODES + 1) * node_work(K)) + work.ANCHOR_EVAL_WORK_S


def improve(problems, assign: np.ndarray, robust: str = "worst",
            budget_s: float = float("inf")) -> tuple[np.ndarray, bool]:
    """(placement, moved): `assign` with its weak nodes anchored (see the module's docstring), or `assign` itself
    unless strictly beaten. Charges at most `budget_s` work seconds (it stops before a candidate that might not fit).
    Scores candidates on the first scenario's tables; the final test is the robust objective."""
    probs = problems if isinstance(problems, list) else [problems]
    p = probs[0]
    a0 = np.asarray(assign)
    R, K = a0.shape
    per_cand = candidate_work(K)
    spent = entry_work(p.n)
    if spent + per_cand > budget_s:             # not one candidate affordable: nothing done, nothing charged
        return a0, False
    a = a0.copy()
    hs = np.minimum(p.hop, p.hop.T)
    obj0 = robust_objective(probs, a0, robust)
    # a ring at or above this cannot beat `assign` whatever the paths (the first scenario's path bound)
    cap = obj0 - p._separate[1] - p.const
    anchored: set[tuple[int, int]] = set()

    def key(b):
        return tuple(np.sort(p.path_costs(b))[::-1].tolist()), float(p.dp_costs(b).max())

    def ring(b, i, pins) -> bool:
        """Row i of b in a cyclic order with `pins` (columns) kept: under the current slowest ring if one is found
        there, else the least-bottleneck order found under `cap` (a bisection above it); False: none."""
        nonlocal spent
        row = b[i]
        c = p._dp_sym[i][np.ix_(row, row)]
        off = ~np.eye(K, dtype=bool)
        vals = np.unique(c[np.triu_indices(K, 1)])
        vals = vals[vals + p.dp_base[i] < cap]
        spent += work.ANCHOR_TRY_WORK_S
        if not len(vals) or ((c <= vals[-1]) & off).sum(axis=1).min() < 2:
            return False                        # some node has fewer than two links under the cap: no cycle
        loc = {int(n): k for k, n in enumerate(row)}
        pin = {j: loc[int(row[j])] for j in pins} or {0: loc[int(row[0])]}

        def cycle(level):
            nonlocal spent
            below = (c <= level) & off
            adj = [int(x) for x in (below.astype(np.uint64) << np.arange(K, dtype=np.uint64)).sum(axis=1)]
            order, used = _pinned_cycle(adj, K, pin, DFS_NODES)
            spent += work.ANCHOR_TRY_WORK_S + used * node_w
            return order

        k = int(np.searchsorted(vals, D - p.dp_base[i], side="right"))   # vals[:k]: as fast as the slowest ring
        found = cycle(vals[k - 1]) if k else None
        if found is None:                       # none as fast: the least level above it found
            lo, hi = k, len(vals) - 1
            while lo <= hi:
                mid = (lo + hi) // 2
                order = cycle(vals[mid])
                if order is None:
                    lo = mid + 1
                else:
                    hi, found = mid - 1, order
        if found is None:
            return False
        b[i] = row[found]
        return True

    node_w = node_work(K)
    keep, keep_v = a0, obj0
    cur = key(a)
    D = float(p.dp_costs(a).max())             # the slowest ring now
    placed = set(a.ravel().tolist())
    for v in weak_nodes(p):
        if spent + per_cand > budget_s:         # no candidate affordable any more (spent only grows)
            break
        if v not in placed:
            continue
        i, j = (int(x) for x in np.argwhere(a == v)[0])
        best, best_key, best_pin = None, cur, None
        peers = [int(x) for x in np.argsort(hs[v], kind="stable")[:PEERS + 1] if x != v][:PEERS]
        for i2 in (i - 1, i + 1):
            if not 0 <= i2 < R or (i2, j) in anchored:
                continue
            o = int(a[i2, j])
            for c in peers:
                if hs[v, c] >= hs[v, o] or c not in placed:
                    continue
                ic, jc = (int(x) for x in np.argwhere(a == c)[0])
                if (ic, jc) in anchored:
                    continue
                # c from another row: each node x of row i2 tried in its place; from row i2: moved within it
                for jx in (range(K) if ic != i2 else [jc]):
                    if (i2, jx) in anchored and ic != i2:
                        continue
                    if spent + per_cand > budget_s:
                        break
                    b = a.copy()
                    if ic == i2:
                        b[i2, jc], b[i2, j] = o, c
                    else:
                        b[i2, jx] = o
                        b[ic, jc], b[i2, j] = a[i2, jx], c
                    pins = anchored | {(i, j), (i2, j)}
                    if not all(ring(b, r, [jj for (ii, jj) in pins if ii == r]) for r in sorted({i, i2, ic})):
                        continue
                    spent += work.ANCHOR_EVAL_WORK_S
                    k = key(b)
                    if k < best_key:
                        best, best_key, best_pin = b, k, (i2, j)
        if best is not None:
            a, cur = best, best_key
            D = float(p.dp_costs(a).max())
            anchored |= {(i, j), best_pin}
            v_a = robust_objective(probs, a, robust)
            spent += work.ANCHOR_EVAL_WORK_S
            if v_a < keep_v:                    # the best plan along the way (a later move may raise the paths)
                keep, keep_v = a, v_a
    work.charge(spent)
    return (keep, True) if keep is not a0 else (a0, False)
