"""The mapping problem and its objective: one pure function that every solver scores plans with.

Structure (Pipette §IV, made node-level): tensor groups never leave a node, and each node holds
one *block* of a stages x b data-parallel replicas (a*b*tp = GPUs per node). Blocks form a grid of
rows (stage groups) x columns (replica groups); a mapping puts each block on a distinct node.
Only links between nodes are choices: the pipeline hops between consecutive rows of a column,
the wrap-around hop of interleaved schedules, and the data-parallel ring of each row.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Layout:
    a: int          # consecutive pipeline stages per node
    b: int          # data-parallel replicas per node
    rows: int       # pp // a
    cols: int       # dp // b

    @property
    def blocks(self) -> int:
        return self.rows * self.cols

    def label(self) -> str:
        return f"{self.a}x{self.b}"


def layouts(tp: int, pp: int, dp: int, gpus_per_node: int) -> list[Layout]:
    """All block shapes that tile the config onto whole nodes."""
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
        if pp % a == 0 and dp % b == 0:
            out.append(Layout(a, b, pp // a, dp // b))
    return out


@dataclass(eq=False)
class MappingProblem:
    """Everything a solver needs: costs in seconds with their schedule coefficients folded in.

    objective(assign) = const + max_j path_j + max_i dp_i, where
      path_j = sum_i hop[assign[i,j], assign[i+1,j]] + wrap[assign[R-1,j], assign[0,j]]
      dp_i   = dp_base[i] + max_{j<j'} dp_link[i][assign[i,j], assign[i,j']]   (cols > 1)
    """
    layout: Layout
    nodes: np.ndarray        # physical node index of each candidate node (len N)
    hop: np.ndarray          # N x N, cost of one inter-row hop (both directions, path coefficient in)
    wrap: np.ndarray | None  # N x N, wrap-around hop (row R-1 -> row 0), or None
    dp_base: np.ndarray      # R, data-parallel time of a row without its inter-node ring, minus its slack
    dp_link: np.ndarray      # R x N x N, inter-node ring time of row i if that pair is its slowest link
    const: float             # everything the mapping does not change

    @property
    def n(self) -> int:
        return len(self.nodes)

    def path_costs(self, assign: np.ndarray) -> np.ndarray:
        R = self.layout.rows
        p = self.hop[assign[:-1], assign[1:]].sum(axis=0) if R > 1 else np.zeros(assign.shape[1])
        if self.wrap is not None and R > 1:
            p = p + self.wrap[assign[R - 1], assign[0]]
        return p

    def dp_costs(self, assign: np.ndarray) -> np.ndarray:
        R, K = assign.shape
        if K == 1:
            return self.dp_base.astype(float)
        rows = np.arange(R)[:, None, None]
        ring = self.dp_link[rows, assign[:, :, None], assign[:, None, :]]     # R x K x K
        return self.dp_base + ring.reshape(R, -1).max(axis=1)

    def objective(self, assign: np.ndarray) -> float:
        return float(self.const + self.path_costs(assign).max() + self.dp_costs(assign).max())

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
        pairs. Ring: in row i every node has K-1 partners, so the slowest pair is at least
        min over nodes of its (K-1)-th cheapest partner.
        """
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
            for i in range(L.rows):
                c = np.maximum(self.dp_link[i], self.dp_link[i].T)
                c = np.where(off, c, np.inf)
                kth = np.sort(c, axis=1)[:, L.cols - 2]          # (K-1)-th cheapest partner of each node
                dp[i] += float(kth.min())
        return float(self.const + path + dp.max())


def worker_table(layout: Layout, assign: np.ndarray, tp: int, nodes: np.ndarray) -> list[dict]:
    """Every logical worker (stage, tp_rank, dp_rank) -> (node, local gpu), in Megatron rank order."""
    pp, dp = layout.rows * layout.a, layout.cols * layout.b
    out = []
    for stage in range(pp):
        i, sa = divmod(stage, layout.a)
        for d in range(dp):
            j, db = divmod(d, layout.b)
            node = int(nodes[assign[i, j]])
            for t in range(tp):
                out.append({"stage": stage, "tp_rank": t, "dp_rank": d, "node": node,
                            "gpu": t + tp * (db + layout.b * sa)})
    out.sort(key=lambda w: (w["stage"], w["dp_rank"], w["tp_rank"]))   # rank = tp + tp*(dp + dp*stage)
    return out
