"""Pre-solve bounds of the exact mapping model, all in integer cost units (units.py).

Computed before the CP-SAT model is built: they slice the search (ring_cap), bound what the model's LP does
not see (path_lower_bound_int, ring_floor) and decide which row-0 node sets are worth searching (row0_sets,
head_bound). Each is valid: what it excludes scores worse than the given limit.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from ortools.sat.python import cp_model

from planner.mapping.problem import MappingProblem, core, node_ring_floor, ring_degree, ring_order_bound
from planner.mapping.sat import new_solver, run
from planner.mapping.units import UNIT, int_pace_floor, to_units

HEAD_SETS_MAX = 64        # row-0 sets worth a path bound of their own; more: no head bound
ROW0_STEPS_MAX = 200000   # ring enumeration steps for the row-0 sets (K >= 4); more: no head bound


def emb_floor(p: MappingProblem) -> int:
    """The cheapest tied-embedding pair: every column pays at least that; 0 without one."""
    if p.emb is None or p.layout.rows < 2 or p.n < 2:
        return 0
    return int(to_units(p.emb)[~np.eye(p.n, dtype=bool)].min())


def emb_floor_heads(p: MappingProblem, heads) -> int:
    """With row 0 holding `heads`, each head's column ends on another node of the grid outside row 0: the
    slowest column pays at least max over heads of that head's cheapest such pair."""
    if p.emb is None or p.layout.rows < 2:
        return 0
    ec = to_units(p.emb)
    hs = {int(h) for h in heads}
    rest = [q for q in range(p.n) if q not in hs]
    if not rest:
        return 0
    return int(max(ec[h, rest].min() for h in hs))


def path_lower_bound_int(p: MappingProblem, time_limit_s: float = 1.0, seed: int = 0, heads=None) -> int:
    """A valid lower bound on the slowest column's path, wrap hop left out.

    The K columns are K vertex-disjoint paths through R*K of the N nodes, so their total cost is at
    least the cheapest cover of R*K nodes by K disjoint paths (lengths free), and the slowest column
    at least that total / K. CP-SAT's multiple-circuit constraint (a depot with K routes, a node's
    self-loop leaves it out) solves it or bounds it; whatever bound it reaches in the time is valid.
    Never below the R-1 cheapest pairs (MappingProblem.lower_bound's path part).
    heads: the K nodes of row 0, when known; the paths then start there (and nowhere else), which
    raises the bound.
    """
    L, N = p.layout, p.n
    R, K = L.rows, L.cols
    if R <= 1 or N <= 1:
        return 0
    c = to_units(p.hop)
    pair = np.minimum(c, c.T)[np.triu_indices(N, 1)]
    # the lock step's pace (MappingProblem.pace) rides on every column's sum: at least its floor on each
    pf = int_pace_floor(p)
    cheap = int(np.sort(pair)[:R - 1].sum()) + pf
    m = cp_model.CpModel()
    arcs, cost, starts, visit = [], [], [], []
    for n in range(N):
        s_, e_ = m.new_bool_var(""), m.new_bool_var("")
        arcs += [(0, n + 1, s_), (n + 1, 0, e_)]
        starts.append(s_)
        if heads is not None:
            m.add(s_ == int(n in heads))
        if N > R * K:
            idle = m.new_bool_var("")
            arcs.append((n + 1, n + 1, idle))
            visit.append(idle)
        for q in range(N):
            if q != n:
                g = m.new_bool_var("")
                arcs.append((n + 1, q + 1, g))
                if heads is not None and q in heads:
                    m.add(g == 0)             # a head is entered from the depot only
                if c[n, q]:
                    cost.append(int(c[n, q]) * g)
    m.add_multiple_circuit(arcs)
    m.add(sum(starts) == K)
    if visit:
        m.add(sum(visit) == N - R * K)
    m.minimize(sum(cost))
    solver = new_solver(time_limit_s, 1, seed)
    # deterministic time decides (same bound, same slice on any load); the wall clock is only a safety stop
    solver.parameters.max_time_in_seconds = 4 * float(time_limit_s) + 1.0
    st = run(solver, m)
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        total = int(np.floor(solver.best_objective_bound))
        return max(cheap, -(-total // K) + pf)
    return cheap


class RingCap(NamedTuple):
    cap: int | None                 # the slowest ring any placement under the limit can have; None: cuts nothing
    allowed: list | None            # allowed[i][n]: node n may sit in row i; None: cuts nothing
    path_lb: int                    # the path lower bound (P_LB) the cap leaves room for


def ring_cap(p: MappingProblem, limit_int: int, time_limit_s: float, seed: int) -> RingCap:
    """The slice of placements worth searching: every placement with objective <= limit_int has
    slowest ring tdp <= limit_int - P_LB (P_LB a path lower bound), so pairs of nodes whose ring time
    in row i exceeds that cap may not be ring neighbours in row i (K <= 3: may not share row i), and a
    node with fewer than min(K-1, 2) partners under the cap in row i (outside that core: a ring node has
    two distinct neighbours when K >= 3) may not sit in row i. Exact: what is cut has objective > limit_int."""
    L, N = p.layout, p.n
    R, K = L.rows, L.cols
    plb = path_lower_bound_int(p, time_limit_s=min(2.0, max(0.2, 0.05 * time_limit_s)), seed=seed)
    cap = limit_int - plb - emb_floor(p)
    base = to_units(p.dp_base)
    allowed = []
    cuts = False
    for i in range(R):
        lc = to_units(p.dp_link[i])
        ok = (int(base[i]) + np.maximum(lc, lc.T)) <= cap
        np.fill_diagonal(ok, False)
        cuts = cuts or not ok[~np.eye(N, dtype=bool)].all()
        allowed.append(core(ok, ring_degree(K)))
    if not cuts:
        return RingCap(None, None, plb)
    return RingCap(cap, allowed, plb)


def row0_sets(p: MappingProblem, thr: int, limit: int = HEAD_SETS_MAX):
    """Every K-set of nodes whose row-0 ring (base + its slowest link, the best ring order of the set) is
    <= thr, as (ring, set) sorted by ring; None if there are more than limit of them. K <= 3: the ring is
    every pair (cliques); K >= 4: cycles through the set."""
    K, N = p.layout.cols, p.n
    lc = to_units(p.dp_link[0])
    val = int(to_units(p.dp_base)[0]) + np.maximum(lc, lc.T)
    adj = val <= thr
    np.fill_diagonal(adj, False)
    if K >= 4:
        return _row0_rings(val, adj, K, int(to_units(p.dp_base)[0]), limit)
    out = []

    def grow(chosen, cand, ring):
        if len(out) > limit:
            return
        if len(chosen) == K:
            out.append((ring, tuple(chosen)))
            return
        for k, n in enumerate(cand):
            if len(chosen) + len(cand) - k < K:
                break
            grow(chosen + [n], [q for q in cand[k + 1:] if adj[n, q]],
                 max([ring] + [int(val[c, n]) for c in chosen]))

    grow([], list(range(N)), int(to_units(p.dp_base)[0]))
    if len(out) > limit:
        return None
    out.sort()
    return out


def _row0_rings(val, adj, K, base0, limit):
    """K-sets with a ring (Hamiltonian cycle) on edges of adj, each with its best slowest link: cycles
    from their smallest node s through nodes > s, closed back to s. None past limit sets or
    ROW0_STEPS_MAX steps."""
    alive = core(adj, 2)
    best = {}
    steps = 0
    for s in np.flatnonzero(alive):
        s = int(s)
        stack = [(s, (s,), base0)]
        while stack:
            steps += 1
            if steps > ROW0_STEPS_MAX:
                return None
            u, path, ring = stack.pop()
            if len(path) == K:
                if adj[u, s]:
                    key = tuple(sorted(path))
                    r = max(ring, int(val[u, s]))
                    if r < best.get(key, r + 1):
                        best[key] = r
                        if len(best) > limit:
                            return None
                continue
            for w in np.flatnonzero(adj[u] & alive):
                w = int(w)
                if w > s and w not in path:
                    stack.append((w, path + (w,), max(ring, int(val[u, w]))))
    return sorted((r, S) for S, r in best.items())


def head_bound(p: MappingProblem, limit_int: int, plb: int, time_limit_s: float, seed: int,
               sets=False) -> int | None:
    """A lower bound on the model's integer objective (tpp + tdp + temb) of every placement, from its row-0
    set S: objective >= ring_0(S) + path bound with heads S + S's tied-embedding floor (emb_floor_heads).
    A set whose cheap bound (ring_0(S) + plb + embedding floor) exceeds limit_int cannot beat it, so the
    result is min(that bound, limit_int + 1). The budget goes to the sets with the least cheap bound first;
    sets left without a path bound of their own count at their cheap bound (never below what is returned).
    sets: the row0_sets under the limit when already enumerated (None: too many). Returns None: too many
    sets to try."""
    K = p.layout.cols
    if K <= 1 or p.layout.rows <= 1:
        return None
    if sets is False:                              # not given: enumerate them (None: too many)
        sets = row0_sets(p, limit_int - plb - emb_floor(p))
    if sets is None:
        return None
    best = limit_int + 1
    each = min(2.0, max(0.2, 0.05 * time_limit_s))
    spent, budget = 0.0, 0.1 * time_limit_s
    ef = emb_floor(p)                              # every placement also pays its cheapest embedding pair
    # each set's cheap bound (its ring + the free path bound + its heads' embedding floor), cheapest first:
    # the path bound with fixed heads goes to the most promising sets, and when the budget runs out the
    # rest are bounded by the next cheap bound (sorted, so it is the least of theirs)
    cheap = sorted((ring + plb + max(ef, emb_floor_heads(p, S)), ring, S) for ring, S in sets)
    for cb, _ring, S in cheap:
        if cb >= best:
            break
        if spent + each > budget:
            best = min(best, cb)
            break
        best = min(best, cb - plb + max(plb, path_lower_bound_int(p, time_limit_s=each, seed=seed,
                                                                 heads=set(S))))
        spent += each
    return int(best)


def ring_floor(p: MappingProblem) -> int:
    """A valid lower bound on the slowest ring: every row's base plus its ring-core bound, or the node floor."""
    R, K = p.layout.rows, p.layout.cols
    base = to_units(p.dp_base)
    if K <= 1:
        return int(base.max())
    core_floor = max(int(base[i]) + int(np.floor(ring_order_bound(
        np.maximum(p.dp_link[i], p.dp_link[i].T), K) / UNIT)) for i in range(R))
    return int(max(core_floor, node_ring_floor(base, to_units(p.dp_link), K, p.n - p.layout.blocks)))
