"""Megatron-Core 1F1B's lock step in the mapping objective (MappingProblem.pace): with one stage a node the objective
is the closed form pipeline.lock_step_p2p_s on the column's mapped hops (two or more: the walk, Pace.steep,
tests/test_lock_step_objective.py), and every solver scores it alike."""
from __future__ import annotations

import numpy as np
import pytest
from swap_checks import assert_exact_is_the_optimum, assert_swaps_track_objective

from planner.config import ParallelConfig
from planner.costs import default_costs
from planner.costs.iteration import build_problem, stage_times
from planner.costs.pipeline import lock_step_p2p_s
from planner.mapping.anneal import anneal
from planner.mapping.bruteforce import all_placements
from planner.mapping.cpsat import solve_exact
from planner.mapping.problem import Layout, MappingProblem
from planner.mapping.units import int_objective, rounding_slack


def _het_spec(make_spec, nodes, seed):
    """The tiny spec with one slow node (~0.4 of the others' bandwidth on every link, as the drift cluster's node 0)."""
    spec = make_spec(nodes=nodes, seed=seed, gbs=64, layers=24)
    bw = np.array(spec.cluster.bandwidth, dtype=float)
    bw[seed % nodes, :] *= 0.4
    bw[:, seed % nodes] *= 0.4
    bw[1 % nodes, 0] *= 0.7                  # one asymmetric link: a boundary's hop is its slower direction
    import dataclasses
    return dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, bandwidth=bw))


@pytest.fixture(autouse=True)
def _closed_form(monkeypatch):
    # this file is about the closed form: its links are slow enough that three rows or more would take the walk
    # with planes (iteration.lock_step_one_stage_walked; tests/test_lock_step_objective.py checks that form)
    import planner.costs.iteration as it
    monkeypatch.setattr(it, "LOCK_STEP_A1_WALK", float("inf"))


# (nodes, tp, pp, dp, layout a) small het grids: 2 x 2 and 3 x 2 blocks, one with a spare node; a = 1 only: two or
# more stages a node take the walk (tests/test_lock_step_objective.py; this file's a = 2 case, (6, 2, 6, 4, 2), has
# links fast enough there that its curves are lines and it carries no pace)
CASES = [(4, 4, 2, 4, 1), (6, 4, 3, 4, 1), (5, 8, 4, 1, 1), (7, 4, 3, 4, 1)]


def _problem(make_spec, case, seed=0):
    n, tp, pp, dp, a = case
    spec = _het_spec(make_spec, n, seed)
    cfg = ParallelConfig(tp, pp, dp, 1, spec.training.global_batch_size // dp, "1f1b", 1, "selective")
    b = 8 // tp // a
    lay = Layout(a, b, pp // a, dp // b)
    return spec, cfg, build_problem(spec, cfg, lay)


def _replay_hops(spec, cfg, prob, assign):
    """Each stage boundary's hop as the replay sees it (NVLink inside a node, the mapped link's slower direction
    between nodes), from the problem's own one-way times."""
    from planner.costs.iteration import p2p_inter_s, p2p_intra_s, p2p_message_bytes, p2p_share
    costs = default_costs(spec.cluster)
    msg = p2p_message_bytes(spec, cfg)
    intra = p2p_intra_s(spec, msg, costs)
    bw = spec.cluster.bandwidth
    share = p2p_share(spec, cfg, prob.layout.b)
    out = []
    for j in range(assign.shape[1]):
        nodes = [int(prob.nodes[assign[s // prob.layout.a, j]]) for s in range(cfg.pp)]
        cs = []
        for s in range(cfg.pp - 1):
            u, v = nodes[s], nodes[s + 1]
            cs.append(intra if u == v else max(p2p_inter_s(spec, msg, bw[u, v], costs, share),
                                               p2p_inter_s(spec, msg, bw[v, u], costs, share)))
        out.append(cs)
    return out


@pytest.mark.parametrize("case", CASES[:3])
def test_objective_is_the_lock_step_on_the_mapped_hops(make_spec, case):
    """objective - (the same problem without p2p) == lock_step_p2p_s(t, mapped hops, m) on the slowest column, for
    every placement of a small het grid (one stage a node)."""
    spec, cfg, prob = _problem(make_spec, case)
    assert prob.pace is not None and prob.wrap is None
    st = stage_times(spec, cfg, default_costs(spec.cluster))
    t = [s.forward + s.backward for s in st]
    P = all_placements(prob)
    rng = np.random.default_rng(0)
    checked = 0
    for k in rng.choice(len(P), size=min(60, len(P)), replace=False):
        a = P[k]
        path = prob.path_costs(a)
        want = [lock_step_p2p_s(t, cs, cfg.num_microbatches) for cs in _replay_hops(spec, cfg, prob, a)]
        # const holds the NVLink part (and the compute); the mapped part is each column's path
        nvl = prob.const - _compute_const(spec, cfg)
        assert np.allclose(path + nvl, want, rtol=1e-12, atol=1e-15)
        checked += 1
    assert checked >= 20


def _compute_const(spec, cfg):
    from planner.costs.iteration import compute_const
    costs = default_costs(spec.cluster)
    return compute_const(spec, cfg, costs, stage_times(spec, cfg, costs))


@pytest.mark.parametrize("case", CASES)
def test_exact_equals_brute_force_with_the_pace(make_spec, optimum, int_values, case):
    _, _, prob = _problem(make_spec, case)
    best, best_a = optimum(prob)
    assert_exact_is_the_optimum(prob, best, best_a)
    vals, P = int_values(prob)
    slack = rounding_slack(prob.layout.rows, True)
    # the integer objective stays within its slack of the true one
    for k in np.linspace(0, len(P) - 1, 25).astype(int):
        assert abs(int(vals[k]) * 1e-7 - (prob.objective(P[k]) - prob.const)) <= slack * 1e-7
    assert int_objective(prob, best_a) == int(vals[np.flatnonzero((P == best_a).all(axis=(1, 2)))[0]])
    pr = solve_exact(prob, time_limit_s=20, hint=prob.rank_order(), cutoff=best)
    assert pr.status == "PRUNED"
    assert anneal(prob, seed=1).objective >= best - 1e-12


def test_the_pace_changes_the_optimum(make_spec, optimum):
    """One slow node: the pace puts it where it costs least, which a sum of hops may not (the objective differs
    from the sum's, and the sum's optimum is not always the pace's)."""
    diff = 0
    for seed in range(4):
        _, _, prob = _problem(make_spec, CASES[1], seed)
        best, best_a = optimum(prob)
        lin = MappingProblem(prob.layout, prob.nodes, prob.hop, None, prob.dp_base, prob.dp_link, prob.const,
                             prob.emb)
        _, lin_a = optimum(lin)
        assert prob.objective(lin_a) >= best - 1e-12
        diff += prob.objective(lin_a) > best + 1e-9
        assert prob.objective(best_a) > lin.objective(best_a)      # the pace adds time
    assert diff >= 1


def test_incremental_score_equals_the_objective_after_random_swaps(make_spec):
    for case in CASES:
        _, _, prob = _problem(make_spec, case)
        assert_swaps_track_objective(prob)


def test_no_pace_without_the_lock_step(make_spec):
    """Plans that do not run Megatron-Core's waited calls, or whose stages share one node, keep the sum of hops."""
    spec = _het_spec(make_spec, 4, 0)
    gbs = spec.training.global_batch_size
    il = build_problem(spec, ParallelConfig(4, 4, 4, 1, gbs // 4, "interleaved", 2, "selective"), Layout(1, 2, 4, 2))
    assert il.pace is not None and il.pace.steep       # interleaved: its walk's steep parts (branch ipace2)
    one_row = build_problem(spec, ParallelConfig(2, 4, 4, 1, gbs // 4, "1f1b", 1, "selective"), Layout(4, 1, 1, 4))
    assert one_row.pace is None


def test_problems_without_the_pace_score_and_solve_as_before(make_spec):
    """Issue #10's family and the other schedules' problems carry no pace: their objective, bound and solve are
    bit for bit those of the commit before the pace (895ee17, values computed there)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from mapping_family import family_problem

    from planner.mapping import solve
    p = family_problem(4, 4, 0)
    assert p.pace is None
    assert p.objective(p.rank_order()) == 0.21418685886908786 and p.lower_bound() == 0.08347121770940881
    r = solve(p, time_limit_s=1.0, seed=0)
    assert (r.objective, r.status) == (0.08580672826345417, "OPTIMAL")
    assert r.assign.ravel().tolist() == [2, 4, 12, 10, 7, 8, 5, 1, 13, 9, 6, 0, 14, 11, 15, 3]
    spec = make_spec(nodes=4, seed=3, gbs=64, layers=24)
    gbs = spec.training.global_batch_size
    # the interleaved problem pinned here before (0.353080420693538, OPTIMAL) now carries its walk's steep parts
    # (Pace.steep, branch ipace2): tests/test_ipace.py checks it against the walk and brute force
    q = build_problem(spec, ParallelConfig(2, 2, 8, 1, gbs // 8, "interleaved", 2, "selective"), Layout(1, 4, 2, 2))
    assert q.pace is not None and q.pace.steep
    r = solve(q, time_limit_s=1.0, seed=0)
    assert r.status == "OPTIMAL" and r.objective <= q.objective(q.rank_order())


def test_a_pace_outside_its_contract_is_refused():
    """The exact model's pace variable starts at 0 and the floors read c's upper triangle: a Pace with every term
    negative (no slowest stage with d = 0) or an asymmetric c would make CP-SAT and brute force disagree, so it is
    refused where it is made; build_problem's paces meet both."""
    from planner.mapping.problem import Pace
    c = np.array([[0.0, 1e-3, 2e-3], [1e-3, 0.0, 3e-3], [2e-3, 3e-3, 0.0]])
    Pace(c, 2.0, -np.inf, np.array([0.0]), np.full(2, -np.inf), (0,))
    with pytest.raises(ValueError, match="term >= 0"):
        Pace(c, 2.0, -1e-3, np.array([-2e-3]), np.full(2, -np.inf), ())
    asym = c.copy()
    asym[0, 1] = 5e-3
    with pytest.raises(ValueError, match="symmetric"):
        Pace(asym, 2.0, 0.0, np.array([-1e-3]), np.full(2, -np.inf), ())


def test_the_paced_single_column_cutoff_is_refuted(make_spec, optimum, monkeypatch):
    """The 6-node, one-column 1F1B problem of tests/test_mapping.py's cutoff test, with its pace: a cutoff at the
    brute-force optimum is PRUNED, one just above it (past the rounding margin) finds the optimum, and both the plain
    and the cutoff solves leave CP-SAT's core worker out (cpsat.PACED_IGNORE: it held the INFEASIBLE answer back to the
    wall limit, docs/notes/solver.md)."""
    from planner.mapping import cpsat, layouts, sat
    from planner.mapping.units import UNIT
    seen = []
    real = sat.new_solver

    def spy(*args, **kw):
        s = real(*args, **kw)
        seen.append(list(s.parameters.ignore_subsolvers))
        return s
    monkeypatch.setattr(cpsat, "new_solver", spy)
    spec = make_spec(nodes=6, seed=2, gbs=96)
    cfg = ParallelConfig(4, 6, 2, 1, 48, "1f1b", 1, "selective")
    lay = next(lay for lay in layouts(4, 6, 2, 8) if lay.cols == 1)
    prob = build_problem(spec, cfg, lay)
    assert prob.pace is not None and lay.rows == 6
    best, best_a = optimum(prob)
    hint = prob.rank_order()
    assert prob.objective(hint) > best + 1e-9                     # the hint is no answer: the cutoff must refute
    r = solve_exact(prob, time_limit_s=10, hint=hint, cutoff=best)
    assert r.status == "PRUNED" and r.bound == best
    margin = 2 * rounding_slack(lay.rows, True) * UNIT
    r = solve_exact(prob, time_limit_s=10, hint=hint, cutoff=best + margin)
    assert r.status == "OPTIMAL" and r.objective == pytest.approx(best, rel=1e-12)
    r = solve_exact(prob, time_limit_s=10, hint=hint, cutoff=best, wall_limit_s=10)      # work-limited, as a solve
    assert r.status == "PRUNED"
    ex = solve_exact(prob, time_limit_s=10)
    assert ex.status == "OPTIMAL" and ex.objective == pytest.approx(best, rel=1e-12) and ex.bound <= best + 1e-12
    assert seen and all("core" in s for s in seen)
    # the problem without its pace takes the circuit model and keeps the full portfolio
    seen.clear()
    import dataclasses
    plain = dataclasses.replace(prob, pace=None)
    solve_exact(plain, time_limit_s=10, hint=hint)
    assert seen == [[]]
