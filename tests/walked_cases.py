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


def het_spec(make_spec, nodes, seed, spread=(0.02, 0.3)):
    """A small spec on heterogeneous links (conftest's make_spec: each link drawn `spread` below its nominal)."""
    return make_spec(nodes=nodes, gbs=64, layers=24, seed=seed, spread=spread)


def check_exact_and_incremental(make_spec, optimum, schedule):
    """On every CASES grid (het links): CP-SAT proves brute force's optimum with valid bounds, and the annealer's
    incremental score tracks the objective over random swaps; returns the problems (for schedule-specific checks)."""
    from swap_checks import assert_exact_is_the_optimum, assert_swaps_track_objective
    out = []
    for case in CASES:
        _, prob = walked_problem(het_spec(make_spec, case[0], 1), case, schedule)
        assert prob.pace is not None
        best, best_a = optimum(prob)
        assert_exact_is_the_optimum(prob, best, best_a)
        _, prob2 = walked_problem(het_spec(make_spec, case[0], 2), case, schedule)
        assert_swaps_track_objective(prob2)
        out.append(prob)
    return out


def check_relaxation_under(spec, case, schedule):
    """build_problem's bound_only relaxation (screening's): bound_differs says so, the same hops, no pace, a const no
    larger, its objective at most the full one on every placement, its bound at most the full problem's and the
    optimum. Returns (full problem, full objectives, relaxed objectives, placements)."""
    from planner.costs.iteration import bound_differs
    from planner.mapping.bruteforce import all_placements
    cfg, prob = walked_problem(spec, case, schedule)
    assert bound_differs(spec, cfg, prob.layout)
    _, cheap = walked_problem(spec, case, schedule, bound_only=True)
    assert cheap.pace is None and np.array_equal(cheap.hop, prob.hop) and cheap.const <= prob.const
    P = all_placements(prob)
    full_obj = np.array([prob.objective(a) for a in P])
    cheap_obj = np.array([cheap.objective(a) for a in P])
    assert np.all(cheap_obj <= full_obj)
    assert cheap.lower_bound() <= prob.lower_bound() + 1e-12
    assert cheap.lower_bound() <= full_obj.min()
    return prob, full_obj, cheap_obj, P


def one_slow_pair(nodes, bw, factor):
    """Equal links of bw but the pair (0, 1): bw x factor one way, 0.8 of that the other (asymmetric)."""
    out = np.full((nodes, nodes), bw)
    np.fill_diagonal(out, 0.0)
    out[0, 1] = out[1, 0] = bw * factor
    out[1, 0] *= 0.8
    return out


def column_hops(spec, cfg, prob, assign, pair):
    """(stage times, [per column its stage boundaries' one-way hops]): NVLink's inside a node, between nodes
    pair(down, up) of the two directions' p2p times (max: the lock step's slower direction; a mean: ZB-H1's)."""
    from planner.costs import default_costs
    from planner.costs.iteration import p2p_inter_s, p2p_intra_s, p2p_message_bytes, p2p_share, stage_times
    costs = default_costs(spec.cluster)
    st = stage_times(spec, cfg, costs)
    msg = p2p_message_bytes(spec, cfg)
    intra = p2p_intra_s(spec, msg, costs)
    bw, share = spec.cluster.bandwidth, p2p_share(spec, cfg, prob.layout.b)
    cols = []
    for j in range(assign.shape[1]):
        nodes = [int(prob.nodes[assign[s // prob.layout.a, j]]) for s in range(cfg.pp)]
        cols.append([intra if u == v else pair(p2p_inter_s(spec, msg, bw[u, v], costs, share),
                                               p2p_inter_s(spec, msg, bw[v, u], costs, share))
                     for u, v in zip(nodes, nodes[1:])])
    return st, cols
