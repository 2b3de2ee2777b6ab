"""Small grids shared by the walked-objective tests (tests/test_lock_step_objective.py, tests/test_zb_h1_objective.py):
two or more stages a node on several node rows, so each stage touches at most one row boundary."""
from __future__ import annotations

import dataclasses

import numpy as np

from planner.config import ParallelConfig
from planner.costs.iteration import build_problem
from planner.mapping.problem import Layout

# (nodes, tp, pp, dp, a), a >= 2: two rows of 2 x 2 blocks, three rows of two columns, a column of four rows and a
# spare node
CASES = [(4, 2, 4, 4, 2), (6, 2, 6, 4, 2), (5, 4, 8, 1, 2)]


def spec_on(make_spec, nodes, bw):
    """A small spec whose cluster has the bandwidth matrix bw."""
    spec = make_spec(nodes=nodes, gbs=64, layers=24)
    return dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, bandwidth=np.asarray(bw, float)))


def walked_problem(spec, case, schedule, bound_only=False):
    """(cfg, build_problem) of a CASES entry under `schedule` (selective recompute, the batch over dp)."""
    n, tp, pp, dp, a = case
    cfg = ParallelConfig(tp, pp, dp, 1, spec.training.global_batch_size // dp, schedule, 1, "selective")
    b = 8 // tp // a
    lay = Layout(a, b, pp // a, dp // b)
    return cfg, build_problem(spec, cfg, lay, bound_only=bound_only)
