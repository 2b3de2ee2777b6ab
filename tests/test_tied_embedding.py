"""The tied-embedding gradient all-reduce (GPT, pp > 1): after the data-parallel sync, each column's first-
and last-stage GPUs all-reduce the word embedding's gradient. The estimate charges the slowest column's pair,
exact = brute force with it, V-shapes and untied models have none, and the simulator agrees."""
import dataclasses

import numpy as np
import pytest

from planner.config import ParallelConfig
from planner.costs import default_costs
from planner.costs.comm import ring_allreduce_time
from planner.costs.iteration import build_problem, evaluate
from planner.mapping.bruteforce import brute_force
from planner.mapping.cpsat import solve_exact
from planner.mapping.problem import Layout
from planner.simulator import simulate


def _untied(spec):
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, tied_embeddings=False))


def test_pair_cost_and_where_it_applies(make_spec):
    spec = make_spec(nodes=4, seed=3, gbs=64)
    assert spec.model.tied_embeddings                     # the tiny model is GPT: tied by default
    costs = default_costs(spec.cluster)
    cfg = ParallelConfig(8, 4, 1, 1, 64, "1f1b", 1, "selective")
    lay = Layout(1, 1, 4, 1)
    prob = build_problem(spec, cfg, lay, costs)
    B = spec.cluster.bandwidth
    # the whole padded word embedding's gradient (Megatron pads 50257 to a multiple of 128 * tp: 51200 at tp 8), bf16
    nbytes = 51200 * spec.model.hidden_size / cfg.tp * 2
    share = spec.cluster.rail_share(lay.b * cfg.tp)
    want = ring_allreduce_time(nbytes, 2, min(B[0, 3], B[3, 0]) * costs.comm.inter_efficiency * share,
                               spec.cluster.inter.latency_us)
    assert prob.emb[0, 3] == pytest.approx(want) and prob.emb[3, 0] == pytest.approx(want)
    a = np.array([[0], [1], [2], [3]])
    assert prob.objective(a) == pytest.approx(prob.const + prob.path_costs(a).max() + prob.dp_costs(a).max()
                                              + want)
    untied = build_problem(_untied(spec), cfg, lay, costs)
    assert untied.emb is None and untied.objective(a) == pytest.approx(prob.objective(a) - want)
    # V-shapes keep the first and the last stage on device 0: nothing to all-reduce
    assert build_problem(spec, ParallelConfig(8, 4, 1, 1, 64, "v-half", 2, "selective"), lay, costs).emb is None
    # both ends in one node (4 stages per node): NVLink, mapping-independent, in the constant
    one = build_problem(make_spec(nodes=1, seed=3, gbs=64), ParallelConfig(2, 4, 1, 1, 64, "1f1b", 1, "selective"),
                        Layout(4, 1, 1, 1), costs)
    one_untied = build_problem(_untied(make_spec(nodes=1, seed=3, gbs=64)),
                               ParallelConfig(2, 4, 1, 1, 64, "1f1b", 1, "selective"), Layout(4, 1, 1, 1), costs)
    nbytes2 = 50432 * spec.model.hidden_size / 2 * 2          # tp 2: the vocabulary padded to a multiple of 256
    assert one.emb is None and one.const == pytest.approx(
        one_untied.const + costs.comm.intra_allreduce_time(nbytes2, 2, spec.cluster))


def test_exact_avoids_a_slow_first_last_pair(make_spec):
    """A 3-row, 2-column grid where one pair is slow: the embedding term alone decides where the ends go;
    exact = brute force, with and without the term, and the estimate reports it."""
    spec = make_spec(nodes=6, seed=5, gbs=48, spread=(0.9, 1.0))
    for a_, b_ in ((0, 5), (1, 4)):
        spec.cluster.bandwidth[a_, b_] = spec.cluster.bandwidth[b_, a_] = 0.2
    cfg = ParallelConfig(8, 3, 2, 1, 24, "1f1b", 1, "selective")
    lay = Layout(1, 1, 3, 2)
    for s in (spec, _untied(spec)):
        prob = build_problem(s, cfg, lay)
        best, best_a = brute_force(prob)
        for hint in (None, prob.rank_order()):
            ex = solve_exact(prob, time_limit_s=20, hint=hint)
            assert ex.status == "OPTIMAL" and ex.objective == pytest.approx(best, rel=1e-9)
            assert ex.bound <= best + 1e-9
        assert prob.lower_bound() <= best + 1e-12
        assert solve_exact(prob, time_limit_s=20, hint=prob.rank_order(), cutoff=best).status == "PRUNED"
    est = evaluate(spec, cfg, build_problem(spec, cfg, lay), best_a)
    assert est.emb_comm_s > 0 and est.as_dict()["emb_comm_s"] == est.emb_comm_s
    # a single column (the circuit model): the path's two ends pay the term
    cfg1 = ParallelConfig(8, 4, 1, 1, 48, "1f1b", 1, "selective")
    prob1 = build_problem(spec, cfg1, Layout(1, 1, 4, 1))
    best1, _ = brute_force(prob1)
    assert solve_exact(prob1, time_limit_s=20).objective == pytest.approx(best1, rel=1e-9)


def test_simulator_charges_the_same_all_reduce(make_spec):
    spec = make_spec(nodes=4, seed=7, gbs=64)
    costs = default_costs(spec.cluster)
    cfg = ParallelConfig(8, 4, 1, 1, 64, "1f1b", 1, "selective")
    lay = Layout(1, 1, 4, 1)
    a = np.array([[2], [0], [1], [3]])
    est_t = evaluate(spec, cfg, build_problem(spec, cfg, lay, costs), a, costs)
    est_u = evaluate(_untied(spec), cfg, build_problem(_untied(spec), cfg, lay, costs), a, costs)
    sim_t = simulate(spec, cfg, costs=costs, layout=lay, assign=a)
    sim_u = simulate(_untied(spec), cfg, costs=costs, layout=lay, assign=a)
    d_est = est_t.iteration_s - est_u.iteration_s
    d_sim = sim_t.iteration_s - sim_u.iteration_s
    assert d_est == pytest.approx(est_t.emb_comm_s) and d_est > 0
    # the first and last stage are the slowest to finish their DP sync here (no DP: they sync at once), so the
    # simulator adds the same pair time
    assert d_sim == pytest.approx(d_est, rel=1e-6)
