"""Where the searches start: Megatron's rank order, with each row's ring in its best cyclic order where rings confine
rows to groups of nodes.

The rank order puts row i on nodes iK .. iK + K - 1 in that order; cluster files number nodes along the topology,
so a row holds whole racks, but its ring closes across rack boundaries wherever the numbering puts them. A node with
a degraded NIC at such a boundary makes that row's ring the slowest of all by 6-7x, and no searcher leaves it: the
annealer's swaps, the LNS and the two-row re-solve all stayed within 1% of 590 ms on the three-tier family
(benchmarks/mapping_family.py --family pod, 4 x 8) where the rank order with each ring reordered starts at 150-180
ms and the portfolio then ends at 135 (docs/notes/solver.md, "Where the search starts").

ring_first() keeps each row's nodes and gives it the cyclic order with the least slowest link: the least threshold
(bisection over the row's link costs) at which a Hamiltonian cycle of links under it is found by a depth-first
search (Warnsdorff's order: the candidate with fewest onward links first; a node left with fewer than two usable
links prunes, and so does a start with no neighbour left to close the cycle; its last such neighbour is kept for
last), each search capped at DFS_NODES nodes (a cap reached counts as no cycle: the order found is only less good),
on the first scenario's ring tables. A row keeps its rank order unless the new ring is strictly faster. Applied
only where problem.rows_confined (elsewhere the start is the rank order, unchanged), and kept only if the whole
(robust) objective is strictly lower. Deterministic; its search nodes are charged (work.py), within the budget the
caller gives.
"""
from __future__ import annotations

import numpy as np

from planner.mapping import work
from planner.mapping.problem import robust_objective

DFS_NODES = 400             # per threshold tried, per row
TRY_NODES = 20              # a threshold tried costs as much as this many search nodes (its graph built)
MIN_COLS = 4                # a ring of 2 or 3 nodes has one cyclic order
MAX_COLS = 62               # the search's neighbour sets are 64-bit masks


def applies(problems) -> bool:
    p = (problems if isinstance(problems, list) else [problems])[0]
    return MIN_COLS <= p.layout.cols <= MAX_COLS and p.rows_confined()


def degrees_ok(adj: list[int], rest: int, ends: int) -> bool:
    """Every node left (`rest`, a bitmask) still has two neighbours among the nodes left and the path's two ends
    (`ends`): else no Hamiltonian cycle completes (the pruning of _cycle and anchor._pinned_cycle)."""
    m = rest
    while m:
        w = (m & -m).bit_length() - 1
        m &= m - 1
        if (adj[w] & (rest | ends)).bit_count() < 2:
            return False
    return True


def _cycle(adj: list[int], K: int, cap: int) -> tuple[list[int] | None, int]:
    """(a Hamiltonian cycle of the K-node graph given as neighbour bitmasks, or None; search nodes used)."""
    full = (1 << K) - 1
    first = 0
    order, used = [first], 1 << first
    count = 0

    def dfs(u: int, used: int) -> bool:
        nonlocal count
        count += 1
        if count > cap:
            return False
        if used == full:
            return bool(adj[u] & (1 << first))
        rest = full & ~used
        if not degrees_ok(adj, rest, (1 << u) | (1 << first)):
            return False
        # the cycle closes at `first`: with one neighbour of it left, that node must come last
        closers = adj[first] & rest
        if not closers:
            return False
        last = closers if (closers & (closers - 1)) == 0 and rest != closers else 0
        cands = []
        m = adj[u] & rest & ~last
        while m:
            w = (m & -m).bit_length() - 1
            m &= m - 1
            cands.append((bin(adj[w] & rest).count("1"), w))
        for _, w in sorted(cands):
            order.append(w)
            if dfs(w, used | (1 << w)):
                return True
            order.pop()
            if count > cap:
                return False
        return False

    found = dfs(first, used)
    return (list(order) if found else None), count


def best_ring(cost: np.ndarray, max_nodes: float = float("inf")) -> tuple[list[int], int]:
    """(a cyclic order of the K nodes whose slowest link is as low as the capped searches find; search nodes, at most
    `max_nodes`: the bisection stops where the next threshold's search might not fit, and keeps what it found)."""
    K = cost.shape[0]
    vals = np.unique(cost[np.triu_indices(K, 1)])
    lo, hi, best, nodes = 0, len(vals) - 1, list(range(K)), 0
    while lo < hi:
        room = max_nodes - nodes - TRY_NODES        # a search capped at `cap` counts up to cap + 1 nodes
        if room < 2:
            break
        mid = (lo + hi) // 2
        below = (cost <= vals[mid]) & ~np.eye(K, dtype=bool)
        adj = [int(x) for x in (below.astype(np.uint64) << np.arange(K, dtype=np.uint64)).sum(axis=1)]
        cyc, used = _cycle(adj, K, int(min(DFS_NODES, room - 1)))
        nodes += used + TRY_NODES
        if cyc is None:
            lo = mid + 1
        else:
            hi, best = mid, cyc
    return best, nodes


def ring_first(problems, assign: np.ndarray, budget_s: float = float("inf")) -> np.ndarray:
    """`assign` with each row's nodes in the cyclic order best_ring finds for that row's ring (kept where not
    strictly faster); charges its search, at most `budget_s` work seconds (the rows it cannot afford keep theirs)."""
    probs = problems if isinstance(problems, list) else [problems]
    p = probs[0]
    a = np.asarray(assign).copy()
    R, K = a.shape
    nodes, max_nodes = 0, budget_s / work.RING_DFS_NODE_WORK_S
    for i in range(R):
        c = p._dp_sym[i][np.ix_(a[i], a[i])]
        order, used = best_ring(c, max_nodes - nodes)
        nodes += used
        old = max(c[k, (k + 1) % K] for k in range(K))
        new = max(c[order[k], order[(k + 1) % K]] for k in range(K))
        if new < old:
            a[i] = a[i][order]
    work.charge(nodes * work.RING_DFS_NODE_WORK_S)
    return a


def initial(problems, robust: str = "worst", budget_s: float = float("inf")) -> np.ndarray:
    """The searches' start: the rank order, or where rows are confined (applies) its rings reordered if that is
    strictly better; the search charges at most `budget_s` work seconds."""
    probs = problems if isinstance(problems, list) else [problems]
    a = probs[0].rank_order()
    if not applies(probs):
        return a
    b = ring_first(probs, a, budget_s)
    return b if robust_objective(probs, b, robust) < robust_objective(probs, a, robust) else a
