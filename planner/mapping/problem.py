"""The mapping problem and its objective: one pure function that every solver scores plans with.

Structure (Pipette §IV, made node-level): tensor groups never leave a node, and each node holds
one *block* of a stages x b data-parallel replicas (a*b*tp = GPUs per node). Blocks form a grid of
rows (stage groups) x columns (replica groups); a mapping puts each block on a distinct node.
Only links between nodes are choices: the pipeline hops between consecutive rows of a column,
the wrap-around hop of interleaved schedules, the data-parallel ring of each row, and (tied embeddings)
the gradient all-reduce between each column's first- and last-stage nodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, cached_property

import numpy as np


@dataclass(frozen=True)
class Layout:
    a: int          # consecutive pipeline stages per node
    b: int          # data-parallel replicas per node
    rows: int       # pp // a
    cols: int       # dp // b
    span: int = 1   # nodes one block occupies: > 1 only when a replica's tp x cp group is wider than a node (a = b = 1;
    #                 the block's nodes are an aligned run of `span` consecutive nodes, in rank order)

    @property
    def blocks(self) -> int:
        return self.rows * self.cols

    def label(self) -> str:
        return f"{self.a}x{self.b}" + (f"/{self.span}n" if self.span > 1 else "")


def layouts(tp: int, pp: int, dp: int, gpus_per_node: int, shard: int = 0) -> list[Layout]:
    """All block shapes that tile the config onto whole nodes. `tp` is the width of a replica of a stage (tp * cp);
    wider than a node (a multiple of it): one block per (stage, replica) on tp / gpus_per_node consecutive nodes.
    HSDP (ZeRO-3 with a shard group of 1 < shard < dp
    replicas): only those whose node holds whole shard groups (b % shard == 0), so the per-layer all-gathers and
    reduce-scatters stay on NVLink and the replicate all-reduce is the row's ring over the columns
    (docs/notes/fsdp.md)."""
    if tp > gpus_per_node and tp % gpus_per_node == 0:
        return [] if 1 < shard < dp else [Layout(1, 1, pp, dp, tp // gpus_per_node)]
    if gpus_per_node % tp:
        return []
    slots = gpus_per_node // tp
    if (pp * dp) % slots:
        return []
    out = []
    for a in range(1, slots + 1):
        if slots % a:
            continue
        b = slots // a
        if pp % a == 0 and dp % b == 0 and not (1 < shard < dp and b % shard):
            out.append(Layout(a, b, pp // a, dp // b))
    return out


@dataclass(eq=False)
class Pace:
    """Megatron-Core 1F1B's lock step on a column's mapped hops (pipeline.lock_step_p2p_s, whose bottleneck part this
    is): every steady-state micro-batch runs at the pace of the slowest stage with its two boundary hops, so one slow
    link counts in full, not at its share of a sum. Per column, with h_r = c[node of row r, node of row r + 1]:
      pace = W * max(base, max_r (e[r] + h_r), max_i (f[i] + h_(i-1) + h_i)) + sum_(r in lin) h_r
    e[r]: the stages touching only row boundary r (a row's last stage, or the next row's first; NVLink hops in),
    f[i]: those touching both boundaries of row i (one stage a node), base: those touching none; each the greatest
    d[s] (t[s] - t[k] <= 0) of its stages, -inf where none. lin: the row boundaries of the slowest stage k (its own
    exchange, charged once). build_problem puts the ramp's 2 sum(c) in `hop`, the NVLink hops in `const`."""
    c: np.ndarray            # N x N, a row boundary's one-way hop in the lock step (its slower direction), symmetric
    weight: float            # W = max(m - 2, 0)
    base: float
    e: np.ndarray            # R - 1
    f: np.ndarray            # R (only rows 1 .. R-2 can be finite)
    lin: tuple[int, ...]     # row boundaries charged once (at most two)
    # per boundary (the R - 1 row boundaries, then the wrap R-1 -> 0) a convex piecewise-linear bottleneck in its hop,
    # max_q (slope_q c + intercept_q) with slopes >= 0 (pieces: n x 2 arrays), also in the max: interleaved's steep
    # parts (iteration.interleaved_problem_parts), and waited 1F1B's with two or more stages a node (its R - 1 row
    # boundaries, no wrap: iteration.lock_step_walk_parts); () for 1F1B's closed form (one stage a node)
    steep: tuple = ()
    steep_c: tuple = field(init=False, default=())   # each boundary's pieces on c (N x N): what every solver reads
    # per row i with one stage a node (interleaved, three rows or more; waited 1F1B past LOCK_STEP_A1_WALK), also in
    # the max: planes under the walk's joint curve in the row's two boundaries, alpha h_(i-1) + beta h_i + gamma
    # (h_(-1): the wrap; rows n x 3, alpha and beta integers, weight 1): their rises add in part, which the
    # per-boundary max misses (iteration.pair_planes). A row with one boundary (no wrap: rows 0 and R - 1) has none:
    # an empty (0 x 3) array, which every solver skips
    planes: tuple = ()

    def __post_init__(self):
        # what the exact models and floors rely on: c symmetric (the floors read its upper triangle), and some term
        # >= 0, the slowest stage's own (d = 0 plus its NVLink hops; a steep pace's base 0), so that a pace is never
        # negative (CP-SAT's pace variable starts at 0, and the pre-solve's path bounds leave the pace out as >= 0)
        if not np.array_equal(self.c, self.c.T):
            raise ValueError("Pace.c must be symmetric (a boundary's hop is its slower direction)")
        terms = np.r_[self.base, self.e, self.f]
        if not (terms[np.isfinite(terms)] >= 0).any():
            raise ValueError("Pace needs a term >= 0 (the slowest stage's own, d = 0)")
        if self.steep:
            # the exact models take a steep pace's boundaries alone (cpsat._path_term, units.int_pace)
            if np.isfinite(self.e).any() or np.isfinite(self.f).any() or self.lin:
                raise ValueError("a Pace with steep parts carries no e, f or lin terms")
            self.steep_c = tuple(steep_table(pc, self.c) for pc in self.steep)
        if self.planes:
            # the exact models put the planes on raw hop variables with integer coefficients (cpsat._path_term)
            if not self.steep or self.weight != 1.0 or len(self.planes) != len(self.f):
                raise ValueError("Pace planes need a steep pace of weight 1, one entry per row")
            for q in self.planes:
                if q.ndim != 2 or q.shape[1] != 3 or not np.array_equal(q[:, :2], np.rint(q[:, :2])):
                    raise ValueError("Pace planes: rows (alpha, beta, gamma), alpha and beta integers")

    def costs(self, assign: np.ndarray) -> np.ndarray:
        """Each column's pace term (K)."""
        h = self.c[assign[:-1], assign[1:]]                          # R-1 x K
        best = np.maximum(self.base, (self.e[:, None] + h).max(axis=0))
        if assign.shape[0] > 2 and np.isfinite(self.f).any():
            best = np.maximum(best, (self.f[1:-1, None] + h[:-1] + h[1:]).max(axis=0))
        if self.steep_c:
            R = assign.shape[0]
            for r, t in enumerate(self.steep_c):
                best = np.maximum(best, t[assign[r], assign[(r + 1) % R]])
            for i, q in enumerate(self.planes):
                if len(q):
                    best = np.maximum(best, plane_value(q, self.c[assign[i - 1], assign[i]],
                                                        self.c[assign[i], assign[(i + 1) % R]]))
        out = self.weight * best
        for r in self.lin:
            out = out + h[r]
        return out

    def floor(self) -> float:
        """A valid lower bound on every column's pace (pace_floor on this Pace's floats)."""
        n = len(self.c)
        if n < 2:
            return 0.0
        iu = np.triu_indices(n, 1)
        pairs = np.sort(self.c[iu])
        k = min(len(self.e), len(pairs)) - 1
        st = steep_floors(self.steep_c, iu, k)
        best = pace_floor(self.base, self.e, self.f, float(pairs[0]), float(pairs[k]), st)
        return float(self.weight * best + len(self.lin) * float(pairs[0]))


def steep_table(pieces, c: np.ndarray) -> np.ndarray:
    """A boundary's steep part on every pair's hop c: max_q (slope_q c + intercept_q) (Pace.steep)."""
    pc = np.asarray(pieces, dtype=float)
    with np.errstate(invalid="ignore"):          # a pair without a link (inf) stays inf at slope 0
        t = np.max(pc[:, 0, None, None] * c[None] + pc[:, 1, None, None], axis=0)
    return np.where(np.isinf(c), np.inf, t)


def plane_value(q, h1, h2):
    """A row's planes (Pace.planes) on its two boundaries' hops h1 (row i - 1 to i), h2 (row i to i + 1), floats or
    arrays: max_k (alpha_k h1 + beta_k h2 + gamma_k), inf where either hop is (no link). The one home of the planes'
    value in seconds (Pace.costs, the annealer's incremental score)."""
    h1, h2 = np.asarray(h1, float), np.asarray(h2, float)
    with np.errstate(invalid="ignore"):
        v = np.max(q[:, 0:1] * h1[None] + q[:, 1:2] * h2[None] + q[:, 2:3], axis=0)
    return np.where(np.isinf(h1) | np.isinf(h2), np.inf, v)


def steep_floors(tables, iu, k: int):
    """Per boundary (low, high) of its steep table: at the cheapest pair and at the (k+1)-th cheapest (a table is
    nondecreasing in the hop, so its sorted values are its values at the sorted hops); None without one."""
    if not tables:
        return None
    out = []
    for t in tables:
        v = np.sort(t[iu])
        out.append((v[0].item(), v[k].item()))
    return out


def pace_floor(base, e, f, low, high, steep=None):
    """A lower bound on a column's max(base, max_r (e[r] + h_r), max_i (f[i] + h_(i-1) + h_i)) (Pace's bottleneck,
    before its weight), floats or integer units alike (-inf / None: no such term): every hop is at least the cheapest
    pair `low`, and the column's R - 1 hops join distinct node pairs, so one of them, at some boundary r, is at least
    the (R-1)-th cheapest pair `high`; the terms through r then count it. steep: per boundary (wrap last) its steep
    part's (low, high) values (steep_floors; nondecreasing in the hop, so the same argument holds)."""
    def ok(v):
        return v is not None and v != -np.inf
    R = len(e) + 1
    terms = [base] if ok(base) else []
    terms += [v + low for v in e if ok(v)] + [v + 2 * low for v in f if ok(v)]
    if steep:
        terms += [lo for lo, _ in steep]
    at = []
    for r in range(R - 1):                              # the slowest hop at boundary r
        t = ([e[r] + high] if ok(e[r]) else []) + ([f[r] + low + high] if r >= 1 and ok(f[r]) else []) + \
            ([f[r + 1] + high + low] if r + 1 <= R - 2 and ok(f[r + 1]) else []) + \
            ([steep[r][1]] if steep else [])
        if t:
            at.append(max(t))
        else:                                           # no stage's term reads boundary r
            at = []
            break
    if at:
        terms.append(min(at))
    return max(terms)


@dataclass(eq=False)
class MappingProblem:
    """Everything a solver needs: costs in seconds with their schedule coefficients folded in.

    objective(assign) = const + max_j path_j + max_i dp_i, where
      path_j = sum_i hop[assign[i,j], assign[i+1,j]] + wrap[assign[R-1,j], assign[0,j]] (+ pace_j: Pace)
      dp_i   = dp_base[i] + max_j dp_link[i][assign[i,j], assign[i,(j+1) mod K]]   (cols K > 1)
    The data-parallel ring runs in rank order (NCCL's connectRings joins node n to node n+1 in the
    communicator's rank order, and a Megatron DP group lists its ranks in dp_rank order = column order),
    so only the K neighbour links of row i's column order carry it (K = 2: one pair). Symmetric:
    each link is charged max(dp_link[n, q], dp_link[q, n]).
    """
    layout: Layout
    nodes: np.ndarray        # physical node index of each candidate node (len N)
    hop: np.ndarray          # N x N, cost of one inter-row hop (both directions, path coefficient in)
    wrap: np.ndarray | None  # N x N, wrap-around hop (row R-1 -> row 0), or None
    dp_base: np.ndarray      # R, data-parallel time of a row without its inter-node ring, minus its slack
    dp_link: np.ndarray      # R x N x N, inter-node ring time of row i if that link is its slowest neighbour link
    const: float             # everything the mapping does not change
    # N x N: the tied-embedding gradient all-reduce between a column's row-0 (first stage) and row R-1 (last
    # stage) nodes, after the data-parallel sync (Megatron's finalize_model_grads); None: no such term
    emb: np.ndarray | None = None
    # Megatron-Core 1F1B's lock step (Pace): a bottleneck over each column's hops, added to its path; None: none
    pace: Pace | None = None
    # the schedule's hops would be walked per mapped boundary, but their walks were over the search's work allowance
    # (costs.iteration.build_problems): charged at the typical hop's traversals instead
    walk_dropped: bool = False
    # a bound_only relaxation of walked hops: the typical hop's problem (walk_dropped), which its full build falls back
    # to past a search's allowance; screening bounds the layout under both (search.screen.layout_bound)
    typical: MappingProblem | None = None

    @property
    def n(self) -> int:
        return len(self.nodes)

    def path_costs(self, assign: np.ndarray) -> np.ndarray:
        R = self.layout.rows
        p = self.hop[assign[:-1], assign[1:]].sum(axis=0) if R > 1 else np.zeros(assign.shape[1])
        if self.wrap is not None and R > 1:
            p = p + self.wrap[assign[R - 1], assign[0]]
        if self.pace is not None and R > 1:
            p = p + self.pace.costs(assign)
        return p

    def dp_costs(self, assign: np.ndarray) -> np.ndarray:
        R, K = assign.shape
        if K == 1:
            return self.dp_base.astype(float)
        nxt = assign[:, _next_col(K)]                              # column (j + 1) mod K
        ring = self._dp_sym[_row_index(R), assign, nxt]            # R x K, max of both directions
        return self.dp_base + ring.max(axis=1)

    @cached_property
    def _dp_sym(self) -> np.ndarray:
        """max(dp_link[i, n, q], dp_link[i, q, n]): each ring link charged both ways (computed once; the annealer
        scores dp_costs tens of thousands of times)."""
        return np.maximum(self.dp_link, self.dp_link.transpose(0, 2, 1))

    def dp_costs_pairs(self, assign: np.ndarray) -> np.ndarray:
        """The former pair model (each row charged its slowest pair of nodes, any two): an upper bound on
        dp_costs for every column order; kept for comparisons and tests."""
        R, K = assign.shape
        if K == 1:
            return self.dp_base.astype(float)
        rows = np.arange(R)[:, None, None]
        ring = self.dp_link[rows, assign[:, :, None], assign[:, None, :]]     # R x K x K
        return self.dp_base + ring.reshape(R, -1).max(axis=1)

    def emb_costs(self, assign: np.ndarray) -> np.ndarray:
        """Each column's tied-embedding all-reduce (first-stage node, last-stage node); zeros without one."""
        if self.emb is None or self.layout.rows < 2:
            return np.zeros(assign.shape[1])
        return self.emb[assign[0], assign[-1]]

    def objective(self, assign: np.ndarray) -> float:
        return float(self.const + self.path_costs(assign).max() + self.dp_costs(assign).max()
                     + self.emb_costs(assign).max())

    def emb_floor(self) -> float:
        """A column's first and last stage sit on two distinct nodes: at least the cheapest pair."""
        if self.emb is None or self.layout.rows < 2 or self.n < 2:
            return 0.0
        return float(self.emb[~np.eye(self.n, dtype=bool)].min())

    def check(self, assign: np.ndarray) -> None:
        L = self.layout
        if assign.shape != (L.rows, L.cols):
            raise ValueError(f"assignment shape {assign.shape} != {(L.rows, L.cols)}")
        flat = assign.ravel()
        if len(set(flat.tolist())) != flat.size or flat.min() < 0 or flat.max() >= self.n:
            raise ValueError("assignment must put blocks on distinct valid nodes")

    def rank_order(self) -> np.ndarray:
        """Megatron's default: blocks in rank order (dp fastest, then pp) on nodes in order."""
        L = self.layout
        return np.arange(L.blocks).reshape(L.rows, L.cols)

    def lower_bound(self) -> float:
        """A cheap valid bound, no search.

        Path: a column's R-1 hops use distinct node pairs, so it costs at least the R-1 cheapest
        pairs. Ring: row i needs a K-cycle of nodes whose links are all fast enough (ring_order_bound).
        The two are also bounded together (coupled_ring_path): fast rings confine rows to groups of nodes
        whose hops between them may all be slow (racks behind a spine).
        """
        ring, path, wrap = self._separate
        both = coupled_ring_path(self, ring, path, wrap)
        if both > ring + path:
            return float(self.const + both + self.emb_floor())
        return float(self.const + path + ring + self.emb_floor())     # summed as before: bounds equal to the bit

    @cached_property
    def _separate(self) -> tuple[float, float, float]:
        """(ring, path, wrap): the separate bounds on the slowest ring and the slowest column path (wrap hop
        included), and the least wrap hop (0: none)."""
        L, N = self.layout, self.n
        off = ~np.eye(N, dtype=bool)
        path = 0.0
        if L.rows > 1 and N > 1:
            pair = np.minimum(self.hop, self.hop.T)[np.triu_indices(N, 1)]
            path = float(np.sort(pair)[:L.rows - 1].sum())
            if self.wrap is not None:
                path += float(self.wrap[off].min())
        dp = self.dp_base.astype(float).copy()
        if L.cols > 1:
            rob = {}
            for i, table in enumerate(_distinct(self._dp_sym)):
                if table not in rob:
                    rob[table] = ring_order_bound(self._dp_sym[table], L.cols)
                dp[i] += rob[table]
        wrap = float(self.wrap[off].min()) if (self.wrap is not None and L.rows > 1 and N > 1) else 0.0
        path = max(path, self.node_path_floor() + wrap)
        if self.pace is not None and L.rows > 1:
            path += self.pace.floor()        # the hops' floors above bound the sum; the pace is added to it
        ring = max(dp.max(), self.node_ring_floor())
        return float(ring), float(path), wrap

    def rows_confined(self) -> bool:
        """Rings at their own bound's level cannot all lie in one group of nodes: some row's ring needs nodes the
        others' fast links do not reach (racks behind a spine), so which row sits in which group, and the order of
        the groups along the pipeline, decide the paths (roworder.py). False on near-uniform links."""
        L = self.layout
        if L.rows < 2 or L.cols < 2:
            return False
        from scipy.sparse.csgraph import connected_components
        _, lab = connected_components(self._ring_level <= self._separate[0], directed=False)
        return int((np.bincount(lab) // L.cols).max()) < L.rows

    @cached_property
    def _ring_level(self) -> np.ndarray:
        """N x N: the least ring time a link can give a row, min_i (dp_base[i] + its ring table); inf on the diagonal.
        A row's ring costs D only if every link of it has a level <= D (rows_confined, coupled_ring_path)."""
        level = (self.dp_base[:, None, None] + self._dp_sym).min(axis=0)
        np.fill_diagonal(level, np.inf)
        level.setflags(write=False)      # shared by both readers
        return level

    def _spare(self) -> int:
        return self.n - self.layout.blocks

    def node_ring_floor(self) -> float:
        """Slowest-ring floor from the node that must sit somewhere (see node_ring_floor below)."""
        return node_ring_floor(self.dp_base, self.dp_link, self.layout.cols, self._spare())

    def node_path_floor(self) -> float:
        """Every node but the spares is in some column, whose R-1 hops are distinct node pairs, one of them
        at n (costing at least n's cheapest hop m_n): that column costs at least the R-2 cheapest pairs +
        max(m_n, the (R-1)-th cheapest pair); taken at the (spare+1)-th worst node. Wrap hop left out."""
        L, N = self.layout, self.n
        if L.rows <= 1 or N < 2:
            return 0.0
        sym = np.minimum(self.hop, self.hop.T).astype(float)
        pair = np.sort(sym[np.triu_indices(N, 1)])
        np.fill_diagonal(sym, np.inf)
        m = sym.min(axis=1)                       # cheapest hop at each node, either direction
        mn = float(np.sort(m)[::-1][self._spare()])
        return float(pair[:L.rows - 2].sum() + max(mn, pair[L.rows - 2]))


@cache
def _next_col(k: int) -> np.ndarray:
    a = np.roll(np.arange(k), -1)
    a.setflags(write=False)
    return a


@cache
def _row_index(r: int) -> np.ndarray:
    a = np.arange(r)[:, None]
    a.setflags(write=False)
    return a


def robust_objective(probs: list[MappingProblem], assign: np.ndarray, robust: str) -> float:
    """One plan scored over several scenarios (bandwidth snapshots): the mean (robust="mean") or the worst."""
    vals = [p.objective(assign) for p in probs]
    return float(np.mean(vals) if robust == "mean" else max(vals))


def robust_const(probs: list[MappingProblem], robust: str) -> float:
    """What no mapping changes, over the scenarios: the mean, else the least (valid under the worst case)."""
    vals = [p.const for p in probs]
    return float(np.mean(vals) if robust == "mean" else min(vals))


def robust_lower_bound(probs: list[MappingProblem], robust: str) -> float:
    """The cheap bound (MappingProblem.lower_bound) over the scenarios: the mean, else the greatest."""
    vals = [p.lower_bound() for p in probs]
    return float(np.mean(vals) if robust == "mean" else max(vals))


def scenario_summary(probs: list[MappingProblem], assign: np.ndarray) -> dict:
    """One plan on every scenario: mean, worst, each, and the mapping's part of the mean and the worst."""
    v = np.array([p.objective(assign) for p in probs])
    const = float(np.mean([p.const for p in probs]))
    return {"mean_s": float(v.mean()), "worst_s": float(v.max()), "per_snapshot_s": v.tolist(),
            "mapping_mean_s": float(v.mean() - const), "mapping_worst_s": float(v.max() - const)}


def node_ring_floor(dp_base: np.ndarray, dp_link: np.ndarray, k: int, spare: int):
    """A valid lower bound on the slowest ring (in the arrays' units; integers stay integers).

    Every node but the `spare` ones sits in some row's ring, where it has ring_degree(k) distinct
    neighbours: the slowest ring is at least, for the (spare+1)-th worst node n,
    min_i (dp_base[i] + the d-th cheapest link of n in row i). Strong when a few nodes are slow, which
    no choice of rows can leave out (ring_order_bound only needs *some* k fast nodes)."""
    d = ring_degree(k)
    n = dp_link.shape[1]
    if d == 0 or n < 2:
        return dp_base.max()
    per_node, kth = None, {}
    for i, table in enumerate(_distinct(dp_link)):
        if table not in kth:
            c = np.maximum(dp_link[table], dp_link[table].T)
            c = np.where(np.eye(n, dtype=bool), c.max() + 1, c)
            kth[table] = np.sort(c, axis=1)[:, d - 1]
        v = dp_base[i] + kth[table]
        per_node = v if per_node is None else np.minimum(per_node, v)
    return np.sort(per_node)[::-1][spare]


def _distinct(tables) -> list[int]:
    """For each row's table, the first row whose table is equal to it (bit for bit): rows of one stage size share
    their ring tables, and the per-row bounds computed once per distinct table are the same numbers."""
    first, out = {}, []
    for i in range(len(tables)):
        t = np.ascontiguousarray(tables[i])
        key = hash(t.tobytes())
        j = next((j for j in first.get(key, []) if np.array_equal(tables[j], t)), None)
        if j is None:
            first.setdefault(key, []).append(i)
            j = i
        out.append(j)
    return out


def coupled_ring_path(p: MappingProblem, ring: float, path: float, wrap: float) -> float:
    """A valid lower bound on (slowest ring + slowest column path), the two bounded together; `ring` and `path` are
    their separate bounds (lower_bound), `wrap` the least wrap hop (0: none). At least ring + path.

    If the slowest ring costs D, every link of row i's ring costs at most D - dp_base[i], so the row's K nodes lie
    in one connected component of the graph G(D) of node pairs with min_i (dp_base[i] + link) <= D. A component of
    s nodes holds at most floor(s / K) rows, so the R rows occupy at least m(D) components, and each column, one
    node per row, crosses between components on at least m(D) - 1 of its R - 1 hops (distinct node pairs): it
    costs at least the least sum of x cheapest crossing pairs and R - 1 - x cheapest pairs, x >= m(D) - 1. The
    bound is the least D + that path over D >= ring; it only changes where G(D) merges two components (the
    minimum spanning tree's edges). On a two-tier network the separate bounds take in-rack links for both, while
    in-rack rings force every hop across the spine (docs/notes/solver.md, "A coupled ring / path bound")."""
    L, N = p.layout, p.n
    R, K = L.rows, L.cols
    if R < 2 or K < 2 or N < 2:
        return ring + path
    from scipy.sparse.csgraph import minimum_spanning_tree
    iu = np.triu_indices(N, 1)
    pair = np.minimum(p.hop, p.hop.T)[iu]
    order = np.argsort(pair, kind="stable")
    ps, pa, pb = pair[order], iu[0][order], iu[1][order]
    cheap = np.concatenate([[0.0], np.cumsum(ps[:R - 1])])       # cheap[k]: the k cheapest pairs
    level = p._ring_level
    if not np.isfinite(level).any():
        return ring + path
    # G(D)'s components are those of the spanning tree's edges <= D; weights shifted > 0 (scipy drops zeros)
    w = level - level[np.isfinite(level)].min() + 1.0
    np.fill_diagonal(w, 0.0)
    t = minimum_spanning_tree(w).tocoo()
    edges = sorted(zip(level[t.row, t.col].tolist(), t.row.tolist(), t.col.tolist()))
    lab = np.arange(N)
    best, e = np.inf, 0
    D = ring
    while D + path < best:
        while e < len(edges) and edges[e][0] <= D:
            _, a, b = edges[e]
            la, lb = lab[a], lab[b]
            if la != lb:
                lab[lab == lb] = la
            e += 1
        cap = np.bincount(lab, minlength=N) // K
        fill = np.cumsum(np.sort(cap)[::-1])
        if fill[-1] >= R:
            m = int(np.searchsorted(fill, R)) + 1             # the fewest components that hold the R rows
            if m == 1:
                return float(min(best, D + path))
            crossing = lab[pa] != lab[pb]
            cross = np.concatenate([[0.0], np.cumsum(ps[crossing][:R - 1])])
            xs = range(m - 1, len(cross))                       # crossing hops taken: at least m - 1
            if len(xs):
                hops = min(cross[x] + cheap[R - 1 - x] for x in xs)
                hops = max(hops, _forced_tree(cap, fill[-1], R, lab, ps, pa, pb, crossing, cheap))
                best = min(best, D + max(path, hops + wrap))
        if e >= len(edges):
            break
        D = edges[e][0]
    return float(max(ring + path, best)) if np.isfinite(best) else float(ring + path)


def _forced_tree(cap, total, R, lab, ps, pa, pb, crossing, cheap) -> float:
    """coupled_ring_path's second path bound at one level: when every component that can hold a row must hold one
    (without it the others hold fewer than R rows), the rows occupy exactly those F components, and each column's
    crossing hops connect all of them: at least a spanning tree of F, each edge at its components' cheapest
    crossing pair, plus the R - |F| cheapest pairs for its other hops. 0 when some usable component is optional.
    What it adds: a component every column must enter through slow links (a rack with degraded uplinks)."""
    usable = np.flatnonzero(cap > 0)
    if len(usable) < 2 or np.any(total - cap[usable] >= R):
        return 0.0
    idx = np.full(len(cap), -1)
    idx[usable] = np.arange(len(usable))
    a, b = idx[lab[pa[crossing]]], idx[lab[pb[crossing]]]
    f = len(usable)
    w = np.full((f, f), np.inf)
    keep = (a >= 0) & (b >= 0)
    np.minimum.at(w, (a[keep], b[keep]), ps[crossing][keep])
    w = np.minimum(w, w.T)
    # Prim's tree over the f components (complete: every node pair has a hop)
    seen = np.zeros(f, dtype=bool)
    seen[0] = True
    dist, tree = w[0].copy(), 0.0
    for _ in range(f - 1):
        dist[seen] = np.inf
        j = int(np.argmin(dist))
        if not np.isfinite(dist[j]):
            return 0.0
        tree += float(dist[j])
        seen[j] = True
        dist = np.minimum(dist, w[j])
    return tree + float(cheap[R - f]) if R - f >= 0 else 0.0


def ring_degree(k: int) -> int:
    """Distinct ring neighbours of each node in a ring of k nodes: 0 (k = 1), 1 (k = 2), else 2."""
    return min(max(k - 1, 0), 2)


def core(adj: np.ndarray, d: int) -> np.ndarray:
    """The d-core of a graph (boolean adjacency, no self-loops): nodes left after peeling those with < d."""
    alive = np.ones(adj.shape[0], dtype=bool)
    while True:
        deg = (adj & alive[None, :]).sum(axis=1)
        drop = alive & (deg < d)
        if not drop.any():
            return alive
        alive &= ~drop


def ring_order_bound(cost: np.ndarray, k: int) -> float:
    """Smallest possible slowest link of a ring (cycle) through k of the nodes: a valid lower bound.

    A k-cycle whose links all cost <= tau lies in one connected component of the 2-core of the
    graph of pairs <= tau (k >= 3; k = 2: one edge, the 1-core). The bound is the least tau where
    some component of that core has at least k nodes (bisection over the sorted pair costs).
    For k = 3 the ring is every pair, as for ring_bottleneck_bound.
    """
    n = cost.shape[0]
    if k <= 1 or n < k:
        return 0.0
    vals = np.unique(cost[np.triu_indices(n, 1)])
    d = ring_degree(k)

    def ok(tau):
        adj = cost <= tau
        np.fill_diagonal(adj, False)
        alive = core(adj, d)
        seen = ~alive
        for s in np.flatnonzero(alive):
            if seen[s]:
                continue
            comp, stack = 0, [s]
            seen[s] = True
            while stack:
                u = stack.pop()
                comp += 1
                for w in np.flatnonzero(adj[u] & ~seen):
                    seen[w] = True
                    stack.append(w)
            if comp >= k:
                return True
        return False

    lo, hi = 0, len(vals) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(vals[mid]):
            hi = mid
        else:
            lo = mid + 1
    return float(vals[lo])


def ring_bottleneck_bound(cost: np.ndarray, k: int) -> float:
    """Smallest possible slowest pair among any k of the nodes (a valid lower bound, no search).
    (The former pair model's ring bound; a ring in rank order is bounded by ring_order_bound.)

    A k-set whose pairs all cost <= tau lies inside the (k-1)-core of the graph of pairs <= tau
    (every member has k-1 neighbours inside it). The bound is the least tau whose (k-1)-core has
    at least k nodes, found by bisection over the sorted pair costs with core peeling.
    """
    n = cost.shape[0]
    if k <= 1 or n < k:
        return 0.0
    vals = np.unique(cost[np.triu_indices(n, 1)])

    def core_size(tau):
        adj = cost <= tau
        np.fill_diagonal(adj, False)
        return int(core(adj, k - 1).sum())

    lo, hi = 0, len(vals) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if core_size(vals[mid]) >= k:
            hi = mid
        else:
            lo = mid + 1
    return float(vals[lo])


def physical_nodes(nodes, span: int) -> list[int]:
    """The physical nodes behind a problem's candidate nodes: each stands for `span` consecutive nodes."""
    return [int(n) + m for n in nodes for m in range(span)]


def worker_table(layout: Layout, assign: np.ndarray, tp: int, nodes: np.ndarray, cp: int = 1) -> list[dict]:
    """Every logical worker (stage, tp_rank, dp_rank[, cp_rank]) -> (node, local gpu), in Megatron rank order
    (tp-cp-dp-pp: a block's tp * cp GPUs per replica are consecutive; a block of span > 1 fills its nodes in that
    order). cp_rank only when cp > 1 (old tables)."""
    pp, dp = layout.rows * layout.a, layout.cols * layout.b
    per_node = layout.a * layout.b * tp * cp // layout.span
    out = []
    for stage in range(pp):
        i, sa = divmod(stage, layout.a)
        for d in range(dp):
            j, db = divmod(d, layout.b)
            node = int(nodes[assign[i, j]])
            for c in range(cp):
                for t in range(tp):
                    g = t + tp * (c + cp * (db + layout.b * sa))
                    w = {"stage": stage, "tp_rank": t, "dp_rank": d, "node": node + g // per_node,
                         "gpu": g % per_node}
                    if cp > 1:
                        w["cp_rank"] = c
                    out.append(w)
    # rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * stage))
    out.sort(key=lambda w: (w["stage"], w["dp_rank"], w.get("cp_rank", 0), w["tp_rank"]))
    return out
