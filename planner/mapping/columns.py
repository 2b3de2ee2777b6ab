"""Exact mapping by column decomposition: fix row 0, enumerate each column's paths, cover the nodes.

Why: on grids of K >= 2 columns the slowest data-parallel ring is almost always row 0's (it has no
pipeline slack), so an incumbent leaves room for very few row-0 sets (often one or two). What is left
is a min-max partition of the other nodes into K paths hanging off those heads, plus the tied-embedding
pair at each path's end. CP-SAT's assignment model bounds that through an LP that only sees the sum of
the paths (the column balance is what is hard), and it did not close 32-node instances.

Here, for one row-0 set H with its best ring r0(H):
1. every path from each head h through R-1 other nodes whose cost fits under the limit is enumerated by
   a dynamic programme over (node set, last node), keeping the cheapest order per (set, end) and the
   (cost, embedding) Pareto front over ends (`column_items`);
2. a set-partitioning cover (one item per head, every node in at most one item, a ladder for the slowest
   embedding pair) says whether some choice keeps r0 + max path + max embedding under the limit (`_cover`:
   exact propagation, a depth-first search, then CP-SAT). Set partitioning sees balance: its LP is
   infeasible just below the optimum where the assignment model's LP falls short;
3. both drop the rings of rows 1..R-1, so this is a relaxation: a cover found is scored by the real
   objective (every cyclic order of the heads); when the rings spoil its cheapest orders, its node sets are
   solved exactly (`_best_with_sets`) and the combination is excluded (a no-good). Each cover either lowers
   the limit or is excluded, so when none is left nothing with row 0 = H beats the limit.
The limit of the enumeration is probed upwards from H's floor, since its size grows steeply with the limit.
Costs are the integer units of units.py (0.1 us), so the answers agree with the CP-SAT model's.
Measurements behind the constants: docs/notes/solver.md ("Solver design measurements").
"""
from __future__ import annotations

import itertools
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.mapping import work
from planner.mapping.sat import run
from planner.mapping.units import to_units

STATE_CAP = 6_000_000     # DP states in one layer; more: give up on the row-0 set (bounds memory)
ITEM_CAP = 6_000_000      # items over all heads for one row-0 set; more: give up on it
CHUNK = 200_000           # states extended at once (memory: CHUNK x nodes)
MAX_MASK = 62             # nodes outside row 0 that fit an int64 mask
PROBE_STEPS = 64          # the first upward probe of a row-0 set: floor + (limit - floor) / PROBE_STEPS
PROBE_GROWTH = 2.0        # each further probe's step (and, once probes are large, its enumeration's size)
THREADS = 4               # path enumerations run at once (memory grows with them)
PROBE_SMALL = 50_000      # items below which a probe is cheap whatever its size
DFS_NODES = 3000          # the depth-first cover heuristic's budget before CP-SAT takes over
DFS_BREADTH = 40          # items tried per node of that search
MAX_ORDER_K = 8           # cyclic orders of row 0 tried when scoring a cover: (K-1)! of them


@dataclass
class Items:
    """The candidate columns of one head: node set (bit mask over `rest`), cost (path incl. wrap), the
    embedding pair's cost at the end node, and the end node (index into rest)."""
    mask: np.ndarray
    cost: np.ndarray
    emb: np.ndarray
    last: np.ndarray
    # the DP's layers, to read a path back: per layer (state last node, parent index)
    layers: list


def column_items(hop: np.ndarray, wrap: np.ndarray | None, emb: np.ndarray | None, head: int,
                 rest: list[int], R: int, limit_rel: int, emb_floor: int = 0,
                 max_states: int | None = None) -> Items | None:
    """Every path head -> R-1 distinct nodes of `rest` with path + wrap + max(its embedding pair, emb_floor)
    <= limit_rel (integer units), the cheapest order per (node set, end), then the Pareto front over ends of
    (cost, embedding); embeddings are reported raised to emb_floor. emb_floor: what the slowest column's
    embedding pair costs at least (every head's cheapest pair), so each path has that much less room.
    None: more than STATE_CAP states in a layer, or more than max_states states extended over all layers (what the
    caller's work left pays for: an enumeration grows steeply with the limit, so one probe could outrun it)."""
    M = len(rest)
    r = np.asarray(rest)
    C = hop[np.ix_(r, r)].astype(np.int64)
    sym = np.minimum(C, C.T).astype(np.int64)
    pair = np.sort(sym[np.triu_indices(M, 1)]) if M > 1 else np.zeros(0, dtype=np.int64)
    # the k cheapest pairs bound the k hops still to come (distinct pairs)
    rem = np.concatenate([[0], np.cumsum(pair)])
    wr = wrap[r, head].astype(np.int64) if wrap is not None else np.zeros(M, dtype=np.int64)
    em = emb[head, r].astype(np.int64) if emb is not None else np.zeros(M, dtype=np.int64)
    em = np.maximum(em, emb_floor)
    tail_min = int((wr + em).min()) if M else 0
    bit = np.left_shift(np.int64(1), np.arange(M, dtype=np.int64))
    cost = hop[head, r].astype(np.int64)
    last = np.arange(M)
    S = bit.copy()

    # the cheapest walk of h more hops from each node, ending with its wrap and embedding pair (nodes may
    # repeat, so a bound): W[h][v] = min over q != v of C[v, q] + W[h-1][q]
    Cx = C + np.where(np.eye(M, dtype=bool), 1 << 40, 0)
    W = [wr + em]
    for _ in range(R - 2):
        W.append((Cx + W[-1][None, :]).min(axis=1))

    def lb(k_done):                           # per last node: what the R-1-k_done hops still to come cost
        h = R - 1 - k_done
        return np.maximum(W[h], int(rem[min(h, len(rem) - 1)]) + tail_min)

    keep = cost + lb(1)[last] <= limit_rel
    S, last, cost = S[keep], last[keep], cost[keep]
    layers = [(last, np.full(len(last), -1))]
    nodes = np.arange(M)
    extended = len(S)
    for k in range(2, R):
        parts = []
        bound = limit_rel - lb(k)[None, :]
        size = 0
        for s0 in range(0, len(S), CHUNK):
            Sc, lc, cc = S[s0:s0 + CHUNK], last[s0:s0 + CHUNK], cost[s0:s0 + CHUNK]
            nc = cc[:, None] + C[lc][:, nodes]
            ok = ((Sc[:, None] >> nodes[None, :]) & 1) == 0
            ok &= nc <= bound
            si, vi = np.nonzero(ok)
            # the cheapest per (set, last node) within the chunk first: keeps memory near the layer's size
            part = _cheapest(Sc[si] | bit[vi], vi.astype(np.int8), nc[si, vi], (si + s0).astype(np.int32), M)
            size += len(part[0])
            if size > 2 * STATE_CAP or max_states is not None and extended + size > max_states:
                return None
            parts.append(part)
        if parts:
            S, last, cost, par = _cheapest(*[np.concatenate([p[f] for p in parts]) for f in range(4)], M)
        else:
            S = cost = np.zeros(0, dtype=np.int64)
            last, par = np.zeros(0, dtype=np.int8), np.zeros(0, dtype=np.int32)
        if len(S) > STATE_CAP:
            return None
        extended += len(S)
        layers.append((last, par))
    total = cost + wr[last]
    eb = em[last]
    ok = total + eb <= limit_rel
    idx = np.flatnonzero(ok)
    S, total, eb = S[idx], total[idx], eb[idx]
    # the Pareto front over ends per node set: sort by (set, cost, embedding); keep an end only if its
    # embedding beats every cheaper end of the same set
    span = int(total.max()) - int(total.min()) + 1 if len(total) else 1
    if len(S) and (int(S.max()) + 1) * span < (1 << 62):
        # one int64 sort by (set, cost); ties in cost may keep a dominated end (harmless: one more item)
        o = np.argsort(S * span + (total - int(total.min())), kind="stable")
    else:
        o = np.lexsort((eb, total, S))
    S, total, eb, idx = S[o], total[o], eb[o], idx[o]
    if len(S):
        g = np.concatenate([[0], np.cumsum(S[1:] != S[:-1])])
        big = int(eb.max() - eb.min()) + 1
        w = eb + (g[-1] - g) * big
        cm = np.minimum.accumulate(w)
        keep = np.ones(len(S), dtype=bool)
        keep[1:] = (g[1:] != g[:-1]) | (w[1:] < cm[:-1])
        S, total, eb, idx = S[keep], total[keep], eb[keep], idx[keep]
    return Items(S, total, eb, idx, layers)


def _cheapest(S, last, cost, par, M):
    """Keep the cheapest state per (node set, last node)."""
    key = S * M + last
    if not len(key):
        return S, last, cost, par
    c0 = int(cost.min())
    span = int(cost.max()) - c0 + 1
    if (int(key.max()) + 1) * span < (1 << 62):
        o = np.argsort(key * span + (cost - c0))      # one int64 sort: much faster than lexsort
    else:
        o = np.lexsort((cost, key))
    key = key[o]
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    o = o[first]
    return S[o], last[o], cost[o], par[o]


def read_path(items: Items, i: int, rest: list[int]) -> list[int]:
    """The nodes (of the problem) of item i's path after its head, in order."""
    k = int(items.last[i])
    out = []
    for layer in range(len(items.layers) - 1, -1, -1):
        last, par = items.layers[layer]
        out.append(rest[int(last[k])])
        k = int(par[k])
    return out[::-1]


def _reduce(items: list[Items], ok: list[np.ndarray], M: int, exact_cover: bool) -> list[np.ndarray] | None:
    """Propagate the cover's easy consequences before CP-SAT sees it (its presolve does the same, far more
    slowly on large item sets): nodes every remaining item of one head holds are that head's, so other
    heads' items holding them go; with an exact cover, a node only one head can still cover makes that head's
    items without it go. Returns the surviving index arrays, or None when some head or node is left out."""
    alive = [np.flatnonzero(o) for o in ok]
    nodes = np.arange(M)
    while True:
        if any(len(a) == 0 for a in alive):
            return None
        changed = False
        # nodes reserved by a head: held by every one of its items
        own = [int(np.bitwise_and.reduce(it.mask[a])) for it, a in zip(items, alive, strict=True)]
        for h, (it, a) in enumerate(zip(items, alive, strict=True)):
            other = 0
            for g, o in enumerate(own):
                if g != h:
                    other |= o
            if other:
                keep = (it.mask[a] & other) == 0
                if not keep.all():
                    alive[h] = a[keep]
                    changed = True
        if exact_cover:
            held = np.array([int(np.bitwise_or.reduce(it.mask[a])) if len(a) else 0
                             for it, a in zip(items, alive, strict=True)], dtype=np.int64)
            by = ((held[:, None] >> nodes[None, :]) & 1).astype(bool)     # K x M: head can still cover node
            cnt = by.sum(axis=0)
            if (cnt == 0).any():
                return None
            for n in np.flatnonzero(cnt == 1):
                h = int(np.flatnonzero(by[:, n])[0])
                a = alive[h]
                keep = ((items[h].mask[a] >> n) & 1).astype(bool)
                if not keep.all():
                    alive[h] = a[keep]
                    changed = True
        if not changed:
            return alive


class _Stop(Exception):
    pass


def _dfs_cover(items: list[Items], alive: list[np.ndarray], M: int, limit_rel: int, exact_cover: bool,
               max_nodes: int = DFS_NODES, breadth: int = DFS_BREADTH, nogoods=frozenset()):
    """A quick depth-first search for a cover (heuristic: a budget of nodes, cheapest items first); covers
    are plentiful well above the optimum, where CP-SAT's search was slow on large item sets. nogoods:
    node-set combinations (one mask per head) not to return. Returns the chosen item index per head, or None
    (not found: no conclusion)."""
    full = (1 << M) - 1
    K = len(items)
    # per head, the surviving items sorted by cost
    data = []
    for it, a in zip(items, alive, strict=True):
        o = a[np.argsort(it.cost[a], kind="stable")]
        data.append((o, it.mask[o], it.cost[o], it.emb[o]))
    # branch on the node fewest items hold first (slow nodes fit few paths)
    held = np.zeros(M, dtype=np.int64)
    for _, mk, _, _ in data:
        held += ((mk[:, None] >> np.arange(M)[None, :]) & 1).sum(axis=0)
    node_order = [int(n) for n in np.argsort(held, kind="stable")]
    count = [0]

    def rec(covered, left, C, E, picked=()):
        count[0] += 1
        if count[0] > max_nodes:
            raise _Stop
        cand = {}
        for h in left:
            _, mk, co, em = data[h]
            ok = ((mk & covered) == 0) & (np.maximum(co, C) + np.maximum(em, E) <= limit_rel)
            cand[h] = np.flatnonzero(ok)
            if not len(cand[h]):
                return None
        if len(left) == 1:
            h = left[0]
            c = cand[h]
            if exact_cover:
                c = c[data[h][1][c] == (full ^ covered)]
            if not nogoods:
                return [(h, int(c[0]))] if len(c) else None
            masks = dict(picked)
            for i in c[:breadth]:
                masks[h] = int(data[h][1][i])
                if tuple(masks[g] for g in range(K)) not in nogoods:
                    return [(h, int(i))]
            return None
        if exact_cover:
            n = next(q for q in node_order if not (covered >> q) & 1)
            br = []
            for h in left:
                c = cand[h]
                c = c[((data[h][1][c] >> n) & 1).astype(bool)]
                br += [(int(data[h][2][i]), h, int(i)) for i in c[:breadth]]
            br.sort()
        else:
            h = left[0]
            br = [(0, h, int(i)) for i in cand[h][:breadth]]
        for _, h, i in br[:breadth]:
            r = rec(covered | int(data[h][1][i]), [g for g in left if g != h],
                    max(C, int(data[h][2][i])), max(E, int(data[h][3][i])), picked + ((h, int(data[h][1][i])),))
            if r is not None:
                return [(h, i)] + r
        return None

    try:
        r = rec(0, list(range(K)), 0, 0)
    except _Stop:
        r = None
    finally:
        work.charge(count[0] * work.DFS_NODE_WORK_S)
    if r is None:
        return None
    out = [0] * K
    for h, i in r:
        out[h] = int(data[h][0][i])
    return out


def _cover(items: list[Items], M: int, limit_rel: int, exact_cover: bool, time_limit_s: float, seed: int,
           nogoods=frozenset(), wall_s: float | None = None):
    """One item per head, every node of rest in at most one (exactly one when exact_cover), and
    max cost + max embedding <= limit_rel, avoiding the node-set combinations in nogoods (one mask per
    head). time_limit_s: CP-SAT's deterministic time; wall_s: its wall-clock safety stop (default the same).
    Returns (status, chosen item index per head or None)."""
    alive = _reduce(items, [it.cost + it.emb <= limit_rel for it in items], M, exact_cover)
    if alive is None:
        return "INFEASIBLE", None
    quick = _dfs_cover(items, alive, M, limit_rel, exact_cover, nogoods=nogoods)
    if quick is not None:
        return "FEASIBLE", quick
    m = cp_model.CpModel()
    pr = m.proto
    sel, per_node = [], [[] for _ in range(M)]
    embv = sorted({int(v) for it, a in zip(items, alive, strict=True) for v in np.unique(it.emb[a])})
    off = 0
    for it, ids in zip(items, alive, strict=True):
        var = np.arange(off, off + len(ids))
        for _ in range(len(ids)):
            v = pr.variables.add()
            v.domain.extend([0, 1])
        off += len(ids)
        ct = pr.constraints.add()
        ct.exactly_one.literals.extend(var.tolist())
        bits = ((it.mask[ids][:, None] >> np.arange(M)[None, :]) & 1).astype(bool)
        for n in range(M):
            per_node[n].append(var[bits[:, n]])
        sel.append((ids, var))
    for n in range(M):
        lits = np.concatenate(per_node[n]).tolist()
        ct = pr.constraints.add()
        if exact_cover:
            ct.exactly_one.literals.extend(lits)
        else:
            ct.at_most_one.literals.extend(lits)
    for key in nogoods:
        # not all of these node sets together: sum over heads of their items on that set <= K - 1
        lits = np.concatenate([var[it.mask[ids] == key[h]]
                               for h, (it, (ids, var)) in enumerate(zip(items, sel, strict=True))])
        ct = pr.constraints.add()
        ct.linear.vars.extend(lits.tolist())
        ct.linear.coeffs.extend([1] * len(lits))
        ct.linear.domain.extend([0, len(items) - 1])
    if len(embv) > 1:
        # E >= embv[k] <=> ge[k]; an item forces its embedding's level, and forbids every level that
        # would leave its path over the limit: sum(items of head h at level k) <= ge[k], and
        # sum(items of head h whose first forbidden level is k) + ge[k] <= 1 (at most one item per head)
        ge = list(range(off, off + len(embv) - 1))      # levels 1.. (level 0 is the floor, always on)
        for _ in ge:
            v = pr.variables.add()
            v.domain.extend([0, 1])
        for k in range(len(ge) - 1):
            ct = pr.constraints.add()                  # ge[k+1] -> ge[k]
            ct.linear.vars.extend([ge[k + 1], ge[k]])
            ct.linear.coeffs.extend([1, -1])
            ct.linear.domain.extend([-(1 << 40), 0])
        ev = np.asarray(embv)
        for it, (ids, var) in zip(items, sel, strict=True):
            lev = np.searchsorted(ev, it.emb[ids])                         # its own level
            forb = np.searchsorted(ev, limit_rel - it.cost[ids], side="right")  # first level over the limit
            for k in range(1, len(embv)):
                need = var[lev == k]
                if len(need):
                    ct = pr.constraints.add()
                    ct.linear.vars.extend(need.tolist() + [ge[k - 1]])
                    ct.linear.coeffs.extend([1] * len(need) + [-1])
                    ct.linear.domain.extend([-(1 << 40), 0])
                bad = var[forb == k]
                if len(bad):
                    ct = pr.constraints.add()
                    ct.linear.vars.extend(bad.tolist() + [ge[k - 1]])
                    ct.linear.coeffs.extend([1] * (len(bad) + 1))
                    ct.linear.domain.extend([-(1 << 40), 1])
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = float(time_limit_s if wall_s is None else wall_s)
    prm.max_deterministic_time = float(time_limit_s)
    # one worker (deterministic) and no presolve: on these models (many items, a few dozen rows) presolve
    # took most of the time, and infeasibility shows at the root either way
    prm.num_workers = 1
    prm.cp_model_presolve = False
    prm.random_seed = int(seed)
    st = run(solver, m)
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        vals = np.asarray(solver.response_proto.solution)
        chosen = [int(ids[np.flatnonzero(vals[var])[0]]) for ids, var in sel]
        return "FEASIBLE", chosen
    return ("INFEASIBLE" if st == cp_model.INFEASIBLE else "UNKNOWN"), None


def _items_all(hop, wrap, emb, H, rest, R, limit_rel, ef, max_states=None):
    """column_items for every head, on up to THREADS threads (numpy's sorts and arithmetic release the GIL)."""
    def one(h):
        return column_items(hop, wrap, emb, h, rest, R, limit_rel, ef, max_states)
    workers = min(len(H), THREADS, os.cpu_count() or 1)
    if workers <= 1:
        return [one(h) for h in H]
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(one, H))


def _next_step(seen, step):
    """The next probe's step: the enumeration grows about exponentially in the limit until it saturates, and
    each probe costs about its size, so aim at PROBE_GROWTH times the last probe's items (the rate from the
    last two probes), at most PROBE_GROWTH times the last step; first probes: PROBE_GROWTH times the step."""
    grow = int(step * PROBE_GROWTH) + 1
    if len(seen) < 2 or seen[-1][1] < PROBE_SMALL:
        return grow
    (t1, n1), (t2, n2) = seen[-2], seen[-1]
    rate = np.log(n2 / n1) / max(1, t2 - t1)
    if rate <= 0:
        return grow
    return int(max(1, min(grow, np.log(PROBE_GROWTH) / rate)))


def head_orders(H, K):
    """Every cyclic order of the heads up to rotation (the first head fixed)."""
    H = list(H)
    if K > MAX_ORDER_K:
        return [tuple(H)]
    return [(H[0],) + p for p in itertools.permutations(H[1:])]


def _best_with_sets(p, H, sets: dict, hop, wrap, emb, time_limit_s: float, seed: int,
                    wall_s: float | None = None):
    """The best placement (integer objective, assignment) with row 0 = the heads H, in any column order, and
    each head's column through exactly the nodes sets[h], in any order: the exact answer for one cover whose
    cheapest orders the rows' rings spoil. A small CP-SAT model per column order of the heads (up to the
    ring's rotation and reflection, which leave the objective unchanged). None: not proved in the time.
    time_limit_s: deterministic time (work), wall_s: the wall-clock safety stop (default the same)."""
    K = p.layout.cols
    t0 = time.perf_counter()
    wall_s = time_limit_s if wall_s is None else wall_s
    best = None
    with work.metered() as spent:
        for order in head_orders(H, K):
            if K >= 3 and order[1] > order[-1]:
                continue                                   # the reflection of an order already tried
            left = time_limit_s - spent.used_s
            wall_left = wall_s - (time.perf_counter() - t0)
            if left <= 0 or wall_left <= 0:
                return None
            r = _best_for_order(p, order, sets, hop, wrap, emb, left, wall_left, seed)
            if r is None:
                return None
            if best is None or r[0] < best[0]:
                best = r
    return best


def _best_for_order(p, order, sets: dict, hop, wrap, emb, left: float, wall_left: float, seed: int):
    """_best_with_sets for one column order of the heads: (integer objective, assignment), None if unproved."""
    R, K = p.layout.rows, p.layout.cols
    base = to_units(p.dp_base)
    link = [np.maximum(to_units(p.dp_link[i]), to_units(p.dp_link[i]).T) for i in range(R)]
    m = cp_model.CpModel()
    cols = [sets[h] for h in order]
    z = {(j, i, n): m.new_bool_var("") for j in range(K) for i in range(1, R) for n in cols[j]}
    for j in range(K):
        for i in range(1, R):
            m.add_exactly_one(z[j, i, n] for n in cols[j])
        for n in cols[j]:
            m.add_exactly_one(z[j, i, n] for i in range(1, R))
    at = {}                                        # (j, i) -> {node: literal}; row 0 holds the head
    for j, h in enumerate(order):
        at[j, 0] = {h: None}
        for i in range(1, R):
            at[j, i] = {n: z[j, i, n] for n in cols[j]}
    top = int(hop.max()) * R + (int(wrap.max()) if wrap is not None else 0)
    P = m.new_int_var(0, top, "P")
    for j, h in enumerate(order):
        terms = [sum(int(hop[h, n]) * lit for n, lit in at[j, 1].items())]
        for i in range(1, R - 1):
            for n, a_ in at[j, i].items():
                for q, b_ in at[j, i + 1].items():
                    if q != n and hop[n, q]:
                        w = m.new_bool_var("")
                        m.add_bool_or([~a_, ~b_, w])
                        terms.append(int(hop[n, q]) * w)
        if wrap is not None:
            terms.append(sum(int(wrap[n, h]) * lit for n, lit in at[j, R - 1].items()))
        m.add(P >= sum(terms))
    r0 = max(int(base[0]) + int(link[0][order[j], order[(j + 1) % K]]) for j in range(K))
    D = m.new_int_var(int(base.max()), 1 << 40, "D")
    m.add(D >= r0)
    for i in range(1, R):
        for j in range(K):
            for n, a_ in at[j, i].items():
                for q, b_ in at[(j + 1) % K, i].items():
                    m.add(D >= int(base[i]) + int(link[i][n, q])).only_enforce_if([a_, b_])
    E = 0
    if emb is not None:
        E = m.new_int_var(0, int(emb.max()), "E")
        for j, h in enumerate(order):
            for n, lit in at[j, R - 1].items():
                m.add(E >= int(emb[h, n])).only_enforce_if(lit)
    m.minimize(P + D + E)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = int(seed)
    solver.parameters.max_deterministic_time = float(left)
    solver.parameters.max_time_in_seconds = float(wall_left)
    st = run(solver, m)
    if st != cp_model.OPTIMAL:
        return None
    a = np.zeros((R, K), dtype=int)
    for j, h in enumerate(order):
        a[0, j] = h
        for i in range(1, R):
            a[i, j] = next(n for n, lit in at[j, i].items() if solver.boolean_value(lit))
    return round(solver.objective_value), a


@dataclass
class ColumnsOutcome:
    assign: np.ndarray | None   # the best placement found (None: none better than the limit)
    value: int | None           # its integer objective
    proved: bool                # True: nothing with objective <= the final limit exists outside what was found
    bound: int                  # a valid lower bound on every placement's integer objective (at most limit + 1)
    wall_s: float
    work_s: float = 0.0         # work seconds spent (work.py): CP-SAT deterministic time + enumerated paths
    wall_stop: bool = False     # the wall-clock safety stop ended it (the answer then depends on the load)


def solve_columns(p, sets, limit_int: int, objective_int, time_limit_s: float, seed: int = 0,
                  path_floor: int = 0, wall_s: float | None = None) -> ColumnsOutcome | None:
    """Search every row-0 set in `sets` ((ring, set) pairs: every set whose row-0 ring leaves room under
    limit_int) for placements with integer objective <= limit_int, best first.

    objective_int(assign) scores a placement as the CP-SAT model does; path_floor is a valid lower bound on
    the slowest column's path. Per set H the limit t of the path enumeration is probed upwards from H's floor
    (ring + path_floor + embedding floor) in steps sized by the enumeration's growth (it grows steeply with
    t); at each t, covers under t are either better
    placements (the limit falls) or solved exactly on their node sets and excluded, until none is left and t
    rises. A set whose enumeration is too large, or that the time does not reach, keeps the floor its probes
    proved (every placement with that row 0 scores at least it). Returns None when the decomposition
    does not apply (R < 2, K < 2, too many nodes for a mask).
    time_limit_s is work (work.py): enumerated paths at COLUMN_ITEMS_PER_S plus CP-SAT's deterministic time,
    so how far the probes go does not depend on the load; wall_s (default: time_limit_s) is a safety stop."""
    with work.metered() as spent:
        out = _solve_columns(p, sets, limit_int, objective_int, time_limit_s, seed, path_floor,
                             time_limit_s if wall_s is None else wall_s, spent)
    if out is not None:
        out.work_s = spent.used_s
    return out


def _solve_columns(p, sets, limit_int, objective_int, time_limit_s, seed, path_floor, wall_s, spent):
    t0 = time.perf_counter()
    L, N = p.layout, p.n
    R, K = L.rows, L.cols
    if R < 2 or K < 2 or N - K > MAX_MASK or p.pace is not None:    # the pace: not a sum of hops, no proof here
        return None
    hop = to_units(p.hop)
    wrap = to_units(p.wrap) if p.wrap is not None else None
    emb = to_units(p.emb) if p.emb is not None else None
    exact_cover = N == R * K
    best_a, best_v = None, None
    limit = limit_int
    open_bound = None               # the least floor of a set left open

    wall_stop = False

    def left():
        """Work left; 0 once the wall-clock safety stop is reached."""
        nonlocal wall_stop
        if time.perf_counter() - t0 >= wall_s:
            wall_stop = True
            work.note_wall()
            return 0.0
        return time_limit_s - spent.used_s

    def wall_left():
        return max(0.01, wall_s - (time.perf_counter() - t0))

    def keep_open(b):
        nonlocal open_bound
        open_bound = b if open_bound is None else min(open_bound, b)

    for ring, H in sorted(sets):
        rest = [n for n in range(N) if n not in H]
        M = len(rest)
        # the slowest embedding pair is at least every head's cheapest pair outside row 0
        ef = max(int(emb[h, rest].min()) for h in H) if emb is not None else 0
        lo = ring + path_floor + ef          # every placement with row 0 = H scores at least lo
        if lo > limit:
            continue
        if left() <= 0:
            keep_open(lo)
            continue
        # Probe upwards: enumerate the paths under t, look for a cover under t. A cover is a better placement,
        # or the rows' rings spoil its cheapest orders: then its node sets are solved exactly (_best_with_sets)
        # and excluded (a no-good: no placement on them beats the limit any more). With no cover left under t,
        # nothing with row 0 = H scores t or less (the excluded ones score more than the limit): t + 1 is the
        # new floor, and the next probe goes up. The paths are only complete up to the t they were enumerated
        # for, so covers are never asked for above it.
        step = max(1, (limit - lo) // PROBE_STEPS)
        t = min(limit, lo + step)
        its, its_t = None, None
        seen = []                            # (limit, items) of the probes so far
        nogoods = set()
        while True:
            if its_t is None or t > its_t:
                # stop before a probe whose work would exceed what is left (its size: PROBE_GROWTH x the last)
                guess = PROBE_GROWTH * (seen[-1][1] if seen else 0) / work.COLUMN_ITEMS_PER_S
                if left() <= 0 or guess > left():
                    keep_open(lo)
                    break
                # each head's enumeration stops where the work left would not pay for it (the guess above reads
                # the growth of the last probes, which a steep step can outrun many times over)
                cap = int(left() * work.COLUMN_ITEMS_PER_S / len(H)) + 1
                its = _items_all(hop, wrap, emb, H, rest, R, t - ring, ef, cap)
                if any(it is None for it in its):
                    n_items = cap * len(H)          # given up part-way: charged as if it had run to its cap
                else:
                    n_items = max(1, sum(len(it.cost) for it in its))
                work.charge(n_items / work.COLUMN_ITEMS_PER_S)
                if any(it is None for it in its) or n_items > ITEM_CAP:
                    keep_open(lo)
                    break
                its_t = t
            if left() <= 0:
                keep_open(lo)
                break
            st, chosen = _cover(its, M, t - ring, exact_cover, left(), seed, frozenset(nogoods), wall_left())
            if st == "INFEASIBLE":
                if t >= limit:
                    break                    # nothing under the limit with row 0 = H
                lo = t + 1
                seen.append((t, n_items))
                step = _next_step(seen, step)
                t = min(limit, lo + step)
                continue
            if st != "FEASIBLE":
                keep_open(lo)
                break
            relaxed = ring + max(int(it.cost[c]) for it, c in zip(its, chosen, strict=True)) \
                + max(int(it.emb[c]) for it, c in zip(its, chosen, strict=True))
            cols = {h: [h] + read_path(it, c, rest) for h, it, c in zip(H, its, chosen, strict=True)}
            v_best, a_best = None, None
            for order in head_orders(H, K):
                a = np.array([cols[h] for h in order]).T
                v = objective_int(a)
                if v_best is None or v < v_best:
                    v_best, a_best = v, a
            if v_best > relaxed:
                exact = _best_with_sets(p, H, {h: cols[h][1:] for h in H}, hop, wrap, emb, left(), seed,
                                        wall_left()) if K <= MAX_ORDER_K else None
                if exact is None:
                    keep_open(lo)
                    break
                v_best, a_best = exact
                nogoods.add(tuple(int(it.mask[c]) for it, c in zip(its, chosen, strict=True)))
            if v_best <= limit:
                best_a, best_v, limit = a_best, v_best, v_best - 1
                t = min(t, limit)
                if limit < lo:
                    break                    # nothing with row 0 = H beats the new incumbent
    bound = best_v if best_v is not None else limit_int + 1
    if open_bound is not None:
        bound = min(bound, open_bound)
    return ColumnsOutcome(best_a, best_v, open_bound is None, bound, time.perf_counter() - t0, wall_stop=wall_stop)
