"""Exhaustive search over all block placements: the reference for tests on tiny instances.

Every placement is scored at once with numpy (the same formulas as MappingProblem and units.int_objective),
so a 9-node, 8-block grid (362,880 placements) takes about a second. brute_force re-scores the near-best
placements with MappingProblem.objective itself, so its answer is exactly the first optimal placement in
itertools.permutations order, as a plain loop over the placements would give.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from planner.mapping.problem import MappingProblem, robust_objective
from planner.mapping.units import int_pace, to_units


@functools.lru_cache(maxsize=16)
def placements(rows: int, cols: int, n: int) -> np.ndarray:
    """Every assignment of rows x cols blocks to distinct nodes of n (P x rows x cols), in
    itertools.permutations order. Read-only (shared between calls)."""
    P = np.array(list(itertools.permutations(range(n), rows * cols)), dtype=np.int64).reshape(-1, rows, cols)
    P.flags.writeable = False
    return P


def all_placements(problem: MappingProblem) -> np.ndarray:
    L = problem.layout
    return placements(L.rows, L.cols, problem.n)


def path_costs(problem: MappingProblem, P: np.ndarray) -> np.ndarray:
    """MappingProblem.path_costs of every placement (P x K)."""
    R = problem.layout.rows
    path = problem.hop[P[:, :-1], P[:, 1:]].sum(axis=1) if R > 1 else np.zeros((len(P), P.shape[2]))
    if problem.wrap is not None and R > 1:
        path = path + problem.wrap[P[:, R - 1], P[:, 0]]
    if problem.pace is not None and R > 1:
        path = path + np.stack([problem.pace.costs(a) for a in P]) if len(P) else path
    return path


def dp_costs(problem: MappingProblem, P: np.ndarray) -> np.ndarray:
    """MappingProblem.dp_costs of every placement (P x R): each row's ring in column order."""
    _, R, K = P.shape
    if K == 1:
        return np.broadcast_to(problem.dp_base.astype(float), (len(P), R))
    nxt = np.roll(P, -1, axis=2)
    rows = np.arange(R)[None, :, None]
    ring = np.maximum(problem.dp_link[rows, P, nxt], problem.dp_link[rows, nxt, P])
    return problem.dp_base + ring.max(axis=2)


def dp_costs_pairs(problem: MappingProblem, P: np.ndarray) -> np.ndarray:
    """MappingProblem.dp_costs_pairs of every placement (P x R): each row's slowest pair of nodes."""
    _, R, K = P.shape
    if K == 1:
        return np.broadcast_to(problem.dp_base.astype(float), (len(P), R))
    rows = np.arange(R)[None, :, None, None]
    ring = problem.dp_link[rows, P[:, :, :, None], P[:, :, None, :]]
    return problem.dp_base + ring.reshape(len(P), R, -1).max(axis=2)


def emb_costs(problem: MappingProblem, P: np.ndarray) -> np.ndarray:
    """MappingProblem.emb_costs of every placement (P x K)."""
    if problem.emb is None or problem.layout.rows < 2:
        return np.zeros((len(P), P.shape[2]))
    return problem.emb[P[:, 0], P[:, -1]]


def objectives(problem: MappingProblem, P: np.ndarray) -> np.ndarray:
    """MappingProblem.objective of every placement."""
    return (problem.const + path_costs(problem, P).max(axis=1) + dp_costs(problem, P).max(axis=1)
            + emb_costs(problem, P).max(axis=1))


def brute_force(problems: list[MappingProblem] | MappingProblem, robust: str = "worst") -> tuple[float, np.ndarray]:
    """The optimum (value, assignment) over every placement: of one problem, or of several scenarios
    (their worst case, or their mean)."""
    probs = problems if isinstance(problems, list) else [problems]
    P = all_placements(probs[0])
    vals = np.stack([objectives(p, P) for p in probs])
    v = vals.mean(axis=0) if robust == "mean" else vals.max(axis=0)
    low = float(v.min())
    best, best_a = float("inf"), None
    for k in np.flatnonzero(v <= low + 1e-9 * max(1.0, abs(low))):
        val = robust_objective(probs, P[k], robust)
        if val < best:
            best, best_a = val, P[k]
    return best, best_a.copy()


def int_path_costs(problem: MappingProblem, P: np.ndarray, wrap: bool = True) -> np.ndarray:
    """Every placement's column paths in integer units (P x K), as the CP-SAT model scores them."""
    hop = to_units(problem.hop)
    path = hop[P[:, :-1], P[:, 1:]].sum(axis=1)
    if wrap and problem.wrap is not None:
        path = path + to_units(problem.wrap)[P[:, -1], P[:, 0]]
    if problem.pace is not None and problem.layout.rows > 1:
        path = path + np.stack([int_pace(problem, a) for a in P]) if len(P) else path
    return path


def int_objectives(problem: MappingProblem, P: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every placement's integer objective (units.int_objective) and the placements (all by default)."""
    P = all_placements(problem) if P is None else P
    R = problem.layout.rows
    base = to_units(problem.dp_base)
    ring = np.full(len(P), int(base.max()))
    for i in range(R):
        lc = to_units(problem.dp_link[i])
        c = np.maximum(lc, lc.T)
        ring = np.maximum(ring, base[i] + c[P[:, i], np.roll(P[:, i], -1, axis=1)].max(axis=1))
    emb = to_units(problem.emb)[P[:, 0], P[:, -1]].max(axis=1) if problem.emb is not None else 0
    return int_path_costs(problem, P).max(axis=1) + ring + emb, P


def column_paths(hop: np.ndarray, wrap: np.ndarray | None, emb: np.ndarray | None, head: int, rest: list[int],
                 R: int):
    """Every column from `head` through R-1 distinct nodes of `rest`: (path + wrap cost, embedding pair at its
    end (0 without), the node set after the head), in integer units (the column decomposition's items)."""
    out = []
    for path in itertools.permutations(rest, R - 1):
        nodes = (head,) + path
        c = int(sum(hop[nodes[i], nodes[i + 1]] for i in range(R - 1)))
        c += int(wrap[nodes[-1], head]) if wrap is not None else 0
        out.append((c, int(emb[head, nodes[-1]]) if emb is not None else 0, frozenset(path)))
    return out


def set_bottlenecks(cost: np.ndarray, k: int) -> dict[tuple, float]:
    """Every k-set of nodes: its slowest pair."""
    return {s: max(cost[a, b] for a, b in itertools.combinations(s, 2))
            for s in itertools.combinations(range(cost.shape[0]), k)}


def set_rings(cost: np.ndarray, k: int) -> dict[tuple, float]:
    """Every k-set of nodes: the slowest link of its best ring (cycle) order."""
    return {s: min(max(cost[o[j], o[(j + 1) % k]] for j in range(k)) for o in itertools.permutations(s)
                   if o[0] == s[0])
            for s in itertools.combinations(range(cost.shape[0]), k)}
