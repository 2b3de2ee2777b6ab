"""The data-parallel ring in rank order: a row's ring is charged its slowest *neighbour* link in column
order (NCCL's connectRings), not its slowest pair. Exact = brute force where the order matters, the
bounds stay valid, the former pair model is an upper bound, and the simulator agrees."""
import dataclasses

import numpy as np
import pytest

import planner
from planner.config import ParallelConfig
from planner.costs.iteration import build_problem, evaluate
from planner.mapping.anneal import anneal
from planner.mapping.bounds import head_bound, path_lower_bound_int, row0_sets
from planner.mapping.bruteforce import all_placements, dp_costs, dp_costs_pairs, path_costs, set_rings
from planner.mapping.cpsat import canonical, solve_exact
from planner.mapping.problem import Layout, ring_bottleneck_bound, ring_order_bound
from planner.mapping.units import int_objective
from planner.simulator import agreement, simulate


def _slow_pairs_spec(make_spec, nodes, seed, slow):
    spec = make_spec(nodes=nodes, seed=seed, gbs=64, layers=24, spread=(0.8, 1.0))
    for a, b in slow:
        spec.cluster.bandwidth[a, b] = spec.cluster.bandwidth[b, a] = 0.5
    return spec


def _ring_spec(make_spec, k):
    """(spec, config, layout) with K >= 4 columns and slow pairs that a ring order can keep off its
    neighbour links (RING_CASES)."""
    if k == 0:
        # 1 row x 4 columns on 4 nodes: the diagonals 0-2 and 1-3 are slow, the ring 0-1-2-3 avoids both
        spec = _slow_pairs_spec(make_spec, 4, 1, [(0, 2), (1, 3)])
        return spec, ParallelConfig(8, 1, 4, 1, 16, "1f1b", 1, "selective"), Layout(1, 1, 1, 4)
    if k in (1, 2):
        # 2 rows x 4 columns on 8 nodes (and on 9: a spare node), slow pairs scattered
        n, seed = ((8, 2), (9, 3))[k - 1]
        # sequence parallel: the p2p message is 1/tp of the stage output, as these cases were tuned with (without it
        # Megatron-Core sends the whole tensor, and case 2's row-0 sets under the optimum outgrow HEAD_SETS_MAX)
        spec = _slow_pairs_spec(make_spec, n, seed, [(0, 2), (1, 3), (4, 6), (5, 7), (0, 5)])
        return spec, ParallelConfig(8, 2, 4, 1, 16, "1f1b", 1, "selective", 0, True), Layout(1, 1, 2, 4)
    # 1 row x 5 columns on 6 nodes, random heterogeneous links
    spec = make_spec(nodes=6, seed=4, gbs=80, layers=24)
    return spec, ParallelConfig(8, 1, 5, 1, 16, "1f1b", 1, "selective"), Layout(1, 1, 1, 5)


RING_CASES = [0, 1, 2, 3]       # 1 x 4 on 4 nodes, 2 x 4 on 8 and on 9 nodes, 1 x 5 on 6 nodes


def _ring_case(make_spec, k):
    spec, cfg, lay = _ring_spec(make_spec, k)
    return build_problem(spec, cfg, lay)


def _ring_cases(make_spec):
    for k in RING_CASES:
        yield _ring_case(make_spec, k)


def test_ring_order_matters(make_spec, optimum):
    """On some cases the ring order avoids a slow pair: the optimum beats the pair model's optimum."""
    strictly = 0
    for prob in _ring_cases(make_spec):
        best, _ = optimum(prob)
        P = all_placements(prob)
        pair_best = (prob.const + path_costs(prob, P).max(axis=1) + dp_costs_pairs(prob, P).max(axis=1)).min()
        strictly += best < pair_best - 1e-9                 # the order avoids a slow pair here
    assert strictly >= 2


@pytest.mark.parametrize("k", RING_CASES)
def test_exact_equals_brute_force_in_ring_order(make_spec, optimum, k):
    prob = _ring_case(make_spec, k)
    best, best_a = optimum(prob)
    assert prob.lower_bound() <= best + 1e-12
    for hint in (None, prob.rank_order(), best_a, best_a[:, ::-1]):
        ex = solve_exact(prob, time_limit_s=20, hint=hint)
        assert ex.status == "OPTIMAL" and ex.objective == pytest.approx(best, rel=1e-9)
        assert ex.bound <= best + 1e-9
    assert solve_exact(prob, time_limit_s=20, hint=best_a, ring_cap=False).objective == pytest.approx(best)
    assert solve_exact(prob, time_limit_s=20, ring_form="bigm").objective == pytest.approx(best)
    pr = solve_exact(prob, time_limit_s=20, hint=prob.rank_order(), cutoff=best)
    assert pr.status == "PRUNED" and pr.bound == best
    ok = solve_exact(prob, time_limit_s=20, hint=prob.rank_order(), cutoff=best + 1e-6)
    assert ok.status == "OPTIMAL" and ok.objective == pytest.approx(best, rel=1e-9)
    quick = solve_exact(prob, time_limit_s=1e-4, hint=prob.rank_order())
    assert quick.bound <= best + 1e-9
    assert anneal(prob, seed=1).objective >= best - 1e-12


def test_pair_model_is_an_upper_bound_of_the_ring(make_spec):
    rng = np.random.default_rng(0)
    seen = 0
    for prob in _ring_cases(make_spec):
        R, K, N = prob.layout.rows, prob.layout.cols, prob.n
        for _ in range(200):
            a = rng.permutation(N)[:R * K].reshape(R, K)
            assert np.all(prob.dp_costs_pairs(a) >= prob.dp_costs(a) - 1e-15)
            # the model's integer objective is the ring's too
            assert int_objective(prob, a) * 1e-7 + prob.const == pytest.approx(prob.objective(a), abs=(R + 3) * 1e-7)
            seen += 1
    for K in (1, 2, 3):       # with K <= 3 the ring holds every pair: the two models agree
        spec = make_spec(nodes=6, seed=K, gbs=96, layers=24)
        prob = build_problem(spec, ParallelConfig(8, 2, K, 1, 96 // K, "1f1b", 1, "selective"), Layout(1, 1, 2, K))
        for _ in range(50):
            a = rng.permutation(6)[:2 * K].reshape(2, K)
            assert prob.dp_costs_pairs(a) == pytest.approx(prob.dp_costs(a))
    assert seen >= 800


def test_ring_order_bound_and_row0_sets_are_valid(costs_cases):
    tight = 0
    for n, k, c in costs_cases((4, 8), (2, 6)):
        best = min(set_rings(c, k).values())     # every k-set's best cycle's slowest link
        bound = ring_order_bound(c, k)
        assert bound <= best + 1e-12
        if k <= 3:
            assert bound == ring_bottleneck_bound(c, k)
        tight += bound == best
        # the row-0 sets of a problem with this cost (integer units) are exactly the sets under the threshold
        prob = type("P", (), {})()
        prob.layout, prob.n = Layout(1, 1, 2, k), n
        prob.dp_link = np.stack([c * 1e-7, c * 1e-7])
        prob.dp_base = np.zeros(2)
        ci = np.rint(c).astype(np.int64)
        thr = int(np.sort(ci[np.triu_indices(n, 1)])[len(ci) // 2])
        sets = row0_sets(prob, thr, limit=10 ** 6)
        want = sorted((int(r), s) for s, r in set_rings(ci, k).items())
        want = [w for w in want if w[0] <= thr]
        assert sets == want
    assert tight >= 15


@pytest.mark.parametrize("k", [k for k in RING_CASES if k in (1, 2)])     # the cases with 2 rows
def test_head_bound_is_valid_in_ring_order(make_spec, int_values, k):
    prob = _ring_case(make_spec, k)
    assert prob.layout.rows >= 2
    best = int(int_values(prob)[0].min())
    plb = path_lower_bound_int(prob)
    for limit in (best, best - 1, best + 10 ** 4):
        hb = head_bound(prob, limit, plb, 10.0, 0)
        # a loose limit may leave too many row-0 sets to bound (None: no bound, which is valid)
        assert (hb is not None or limit > best) and (hb is None or hb <= min(best, limit + 1))


def test_canonical_keeps_the_objective(make_spec):
    rng = np.random.default_rng(1)
    for prob in _ring_cases(make_spec):
        R, K, N = prob.layout.rows, prob.layout.cols, prob.n
        for _ in range(30):
            a = rng.permutation(N)[:R * K].reshape(R, K)
            c = canonical(a)
            assert prob.objective(c) == pytest.approx(prob.objective(a), rel=1e-12)
            assert c[0, 0] == c[0].min() and c[0, 1] < c[0, K - 1]


def test_simulator_runs_the_ring_in_dp_order():
    """4 columns on a heterogeneous matrix: a slow pair that is not a ring neighbour costs nothing, on a
    neighbour link it slows the all-reduce; the simulator and the estimate agree on both."""
    spec = planner.load_spec("specs/gpt3-13b-a100-128.yaml")
    rng = np.random.default_rng(0)
    bw = spec.cluster.bandwidth * rng.uniform(0.85, 1.0, size=spec.cluster.bandwidth.shape)
    bw = np.minimum(bw, bw.T)
    bw[0, 2] = bw[2, 0] = bw[0, 2] * 0.1                  # slow between nodes 0 and 2
    np.fill_diagonal(bw, 0)
    het = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, bandwidth=bw))
    cfg = ParallelConfig(8, 4, 4, 1, 128, "1f1b")
    lay = Layout(1, 1, 4, 4)
    base = np.arange(16).reshape(4, 4)
    apart = base.copy()                                    # row 0: 0 1 2 3, ring links 0-1 1-2 2-3 3-0
    beside = base.copy()
    beside[0] = [0, 2, 1, 3]                               # ring links 0-2 ... : the slow pair is a neighbour
    prob = build_problem(het, cfg, lay)
    ests = {k: evaluate(het, cfg, prob, a) for k, a in (("apart", apart), ("beside", beside))}
    sims = {k: simulate(het, cfg, layout=lay, assign=a) for k, a in (("apart", apart), ("beside", beside))}
    assert prob.dp_costs_pairs(apart).max() == pytest.approx(prob.dp_costs_pairs(beside).max())   # the pair model
    assert sims["beside"].dp_comm_s > sims["apart"].dp_comm_s * 1.5
    for k in ests:
        assert abs(agreement(sims[k], ests[k])) <= 0.05, (k, sims[k].iteration_s, ests[k].iteration_s)
    d_sim = sims["beside"].iteration_s - sims["apart"].iteration_s
    d_est = ests["beside"].iteration_s - ests["apart"].iteration_s
    assert d_est > 0 and d_est == pytest.approx(d_sim, rel=0.33)


@pytest.mark.parametrize("k", RING_CASES)
def test_row0_table_keeps_the_exact_optimum(make_spec, optimum, monkeypatch, k):
    """The optional cut "row 0 holds one of the row-0 sets under the cap" (off by default) is exact."""
    import planner.mapping.cpsat as C
    monkeypatch.setattr(C, "ROW0_TABLE", True)
    prob = _ring_case(make_spec, k)
    best, best_a = optimum(prob)
    for hint in (prob.rank_order(), best_a):
        ex = C.solve_exact(prob, time_limit_s=20, hint=hint)
        assert ex.status == "OPTIMAL" and ex.objective == pytest.approx(best, rel=1e-9)
    pr = C.solve_exact(prob, time_limit_s=20, hint=prob.rank_order(), cutoff=best)
    assert pr.status == "PRUNED"


# the ring cases of at most 8 nodes (9 nodes x 3 snapshots: kept out, as when brute force was a plain loop)
ROBUST_CASES = [0, 1, 3]


def _robust_case(make_spec, make_snapshots, k):
    """Case k's three snapshots; one generator draws them for the cases in order, as a loop over them would."""
    rng = np.random.default_rng(8)
    for j in ROBUST_CASES:
        spec, cfg, lay = _ring_spec(make_spec, j)
        mats = make_snapshots(spec.cluster.bandwidth, 3, 0.6, 1.0, rng)
        if j == k:
            return [build_problem(spec, cfg, lay, bandwidth=m) for m in mats]


def test_robust_cases_are_enough():
    assert len(ROBUST_CASES) >= 3


@pytest.mark.parametrize("k", ROBUST_CASES)
def test_robust_worst_slice_and_cutoff_equal_brute_force(make_spec, make_snapshots, optimum, k):
    """With several snapshots and robust='worst', the ring slice, the path cut and the head bound are
    taken per scenario (every better placement keeps each scenario under the limit): exact = brute force
    from any hint, and a cutoff at the optimum is refuted (PRUNED) while one just above finds it."""
    probs = _robust_case(make_spec, make_snapshots, k)
    assert probs[0].n <= 8
    best, best_a = optimum(probs, "worst")
    for hint in (None, probs[0].rank_order(), best_a):
        ex = solve_exact(probs, time_limit_s=20, hint=hint, robust="worst")
        assert ex.status == "OPTIMAL" and ex.objective == pytest.approx(best, rel=1e-9)
        assert ex.bound <= best + 1e-9
    pr = solve_exact(probs, time_limit_s=20, hint=probs[0].rank_order(), cutoff=best, robust="worst")
    assert pr.status == "PRUNED" and pr.bound == best
    ok = solve_exact(probs, time_limit_s=20, hint=probs[0].rank_order(), cutoff=best + 1e-6, robust="worst")
    assert ok.status == "OPTIMAL" and ok.objective == pytest.approx(best, rel=1e-9)


def test_node_floors_are_valid_and_see_a_slow_node(make_spec, optimum):
    """node_ring_floor / node_path_floor: every used node has ring neighbours and a hop, so a slow node
    that no row choice can leave out bounds the slowest ring and column. Valid against brute force on
    grids with and without spare nodes; strictly above the core bounds when one node is slow."""
    cases = [(4, 1, Layout(1, 1, 1, 4), (8, 1, 4)), (6, 2, Layout(1, 1, 2, 3), (8, 2, 3)),
             (8, 3, Layout(1, 1, 2, 4), (8, 2, 4)), (7, 4, Layout(1, 1, 2, 3), (8, 2, 3)),
             (5, 6, Layout(1, 1, 1, 4), (8, 1, 4)),
             (6, 5, Layout(1, 1, 3, 2), (8, 3, 2))]
    stronger = 0
    for n, seed, lay, (tp, pp, dp) in cases:
        for slow in (False, True):
            spec = make_spec(nodes=n, seed=seed, gbs=48 if dp == 3 else 64, layers=24, spread=(0.7, 1.0))
            if slow:                                   # node 0's links are all slow
                spec.cluster.bandwidth[0, 1:] *= 0.25
                spec.cluster.bandwidth[1:, 0] *= 0.25
            gbs = spec.training.global_batch_size
            prob = build_problem(spec, ParallelConfig(tp, pp, dp, 1, gbs // dp, "1f1b", 1, "selective"), lay)
            R, K = lay.rows, lay.cols
            P = all_placements(prob)
            assert prob.node_ring_floor() <= dp_costs(prob, P).max(axis=1).min() + 1e-12
            assert prob.node_path_floor() <= path_costs(prob, P).max(axis=1).min() + 1e-12
            best, _ = optimum(prob)
            assert prob.lower_bound() <= best + 1e-12
            if slow and n == R * K:
                core_ring = max(prob.dp_base[i] + ring_order_bound(np.maximum(prob.dp_link[i], prob.dp_link[i].T), K)
                                for i in range(R))
                stronger += prob.node_ring_floor() > core_ring + 1e-12
    assert stronger >= 2


def test_rows_sharing_a_ring_table_are_bounded_once_with_the_same_numbers():
    """Rows of one stage size share their ring tables: the per-row ring bounds are computed once per distinct
    table (problem._distinct) and equal, bit for bit, what each row's own computation gives."""
    import numpy as np

    from planner.mapping.problem import Layout, MappingProblem, _distinct, node_ring_floor, ring_order_bound
    rng = np.random.default_rng(4)
    n, R, K = 12, 4, 3
    a, b = rng.uniform(1, 5, (n, n)), rng.uniform(1, 5, (n, n))
    link = np.stack([a, b, a.copy(), b.copy()])
    base = np.array([0.1, 0.2, 0.3, 0.0])
    assert _distinct(link) == [0, 1, 0, 1]
    p = MappingProblem(Layout(1, 1, R, K), np.arange(n), rng.uniform(1, 2, (n, n)), None, base, link, 0.0)
    ring = max(max(base[i] + ring_order_bound(np.maximum(link[i], link[i].T), K) for i in range(R)),
               p.node_ring_floor())
    assert p._separate[0] == ring
    slow = None
    for i in range(R):            # node_ring_floor row by row, as it was written before the tables were shared
        c = np.maximum(link[i], link[i].T)
        c = np.where(np.eye(n, dtype=bool), c.max() + 1, c)
        v = base[i] + np.sort(c, axis=1)[:, 1]
        slow = v if slow is None else np.minimum(slow, v)
    assert node_ring_floor(base, link, K, 0) == np.sort(slow)[::-1][0]
