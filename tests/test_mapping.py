import numpy as np
import pytest

from planner.config import ParallelConfig
from planner.costs.iteration import build_problem
from planner.mapping import layouts
from planner.mapping.anneal import _migrate, anneal
from planner.mapping.bounds import head_bound, path_lower_bound_int, ring_cap
from planner.mapping.bruteforce import all_placements, int_path_costs, set_bottlenecks
from planner.mapping.cpsat import solve_exact
from planner.mapping.problem import MappingProblem, ring_bottleneck_bound
from planner.mapping.sat import Debug
from planner.mapping.units import UNIT, has_pace, int_objective, rounding_slack

CASES = [  # nodes, (tp, pp, dp), schedule, vpp
    (4, (2, 4, 4), "1f1b", 1),
    (6, (8, 3, 2), "1f1b", 1),
    (6, (4, 2, 6), "1f1b", 1),
    (5, (8, 5, 1), "1f1b", 1),
    (4, (8, 4, 1), "interleaved", 2),
    (6, (4, 6, 2), "interleaved", 2),
    (6, (8, 1, 6), "1f1b", 1),
    (6, (4, 6, 2), "v-half", 2),
]
# every (case, layout) of CASES
INSTANCES = [(k, lay) for k, (_, (tp, pp, dp), _, _) in enumerate(CASES) for lay in layouts(tp, pp, dp, 8)]

# multi-column grids (K > 1), with and without spare nodes, where the ring slice can cut: (nodes, tp, pp, dp, seed,
# layout)
GRID_CASES = [(6, (4, 2, 4)), (7, (4, 4, 2)), (8, (4, 4, 4)), (6, (4, 2, 6))]
GRIDS = [(n, tp, pp, dp, seed, lay) for k, (n, (tp, pp, dp)) in enumerate(GRID_CASES) for seed in (k, 40 + k)
         for lay in layouts(tp, pp, dp, 8) if lay.cols > 1 and lay.rows > 1]


def _instance(make_spec, k, lay):
    n, (tp, pp, dp), sched, v = CASES[k]
    spec = make_spec(nodes=n, seed=k, gbs=96 if n == 6 else 64, layers=24)
    gbs = spec.training.global_batch_size
    return build_problem(spec, ParallelConfig(tp, pp, dp, 1, gbs // dp, sched, v, "selective"), lay)


def _grid(make_spec, n, tp, pp, dp, seed, lay):
    spec = make_spec(nodes=n, seed=seed, gbs=96 if dp in (6,) else 64, layers=24)
    gbs = spec.training.global_batch_size
    return build_problem(spec, ParallelConfig(tp, pp, dp, 1, gbs // dp, "1f1b", 1, "selective"), lay)


def _label(case):
    return "-".join(str(c) for c in case[:-1]) + f"-{case[-1].label()}"


def test_instance_lists_are_big_enough():
    assert len(INSTANCES) >= 12
    assert len(GRIDS) >= 6


@pytest.mark.parametrize("k, lay", INSTANCES, ids=[f"{k}-{lay.label()}" for k, lay in INSTANCES])
def test_exact_equals_brute_force_and_bounds_hold(make_spec, optimum, k, lay):
    prob = _instance(make_spec, k, lay)
    best, _ = optimum(prob)
    ex = solve_exact(prob, time_limit_s=20)
    assert ex.status == "OPTIMAL"
    assert ex.objective == pytest.approx(best, rel=1e-9)
    assert ex.bound <= best + 1e-9
    assert prob.lower_bound() <= best + 1e-12          # the cheap bound is valid
    sa = anneal(prob, seed=3)
    assert sa.objective >= ex.objective - 1e-12        # annealing never beats a proved optimum


def test_robust_worst_case_equals_brute_force(make_spec, make_snapshots, optimum):
    spec = make_spec(nodes=4, seed=11)
    cfg = ParallelConfig(2, 4, 4, 1, 16, "1f1b", 1, "selective")
    lay = layouts(2, 4, 4, 8)[0]
    mats = make_snapshots(spec.cluster.bandwidth, 3, 0.7, 1.3, np.random.default_rng(5))
    probs = [build_problem(spec, cfg, lay, bandwidth=m) for m in mats]
    ex = solve_exact(probs, time_limit_s=20, robust="worst")
    best, _ = optimum(probs, "worst")
    assert ex.objective == pytest.approx(best, rel=1e-9)


def test_anneal_is_deterministic(make_spec):
    spec = make_spec(nodes=6, seed=2, gbs=96)
    cfg = ParallelConfig(4, 6, 2, 1, 48, "1f1b", 1, "selective")
    prob = build_problem(spec, cfg, layouts(4, 6, 2, 8)[0])
    a, b = anneal(prob, seed=7), anneal(prob, seed=7)
    assert np.array_equal(a.assign, b.assign) and a.objective == b.objective


def test_objective_prefers_fast_links(make_spec):
    """A column through a slow link costs more than the same column on fast links."""
    spec = make_spec(nodes=2, seed=0, spread=(1.0, 1.0))
    spec.cluster.bandwidth[0, 1] = spec.cluster.bandwidth[1, 0] = 1.0    # one very slow link
    cfg = ParallelConfig(8, 2, 1, 1, 64, "1f1b", 1, "selective")
    prob = build_problem(spec, cfg, layouts(8, 2, 1, 8)[0])
    fast = make_spec(nodes=2, seed=0, spread=(1.0, 1.0))
    prob_fast = build_problem(fast, cfg, layouts(8, 2, 1, 8)[0])
    a = np.array([[0], [1]])
    assert prob.objective(a) > prob_fast.objective(a)


def test_ring_bottleneck_bound_is_valid_and_tight_on_small_cases(costs_cases):
    tight = 0
    for _, k, c in costs_cases((3, 8), (2, 5)):
        best = min(set_bottlenecks(c, k).values())
        bound = ring_bottleneck_bound(c, k)
        assert bound <= best + 1e-12
        tight += bound == best
    assert tight >= 20      # the k-core argument is exact for k <= 3 and usually close beyond


def test_cutoff_refutes_and_survives_an_infeasible_hint(make_spec, optimum):
    """A candidate that cannot beat the incumbent is PRUNED; the (worse) hint must not crash CP-SAT. GPipe: a sum of
    hops, what this test is about (Megatron-Core's 1F1B carries the lock step's pace: its cutoff on this problem is
    tests/test_pace.py's test_the_paced_single_column_cutoff_is_refuted)."""
    spec = make_spec(nodes=6, seed=2, gbs=96)
    cfg = ParallelConfig(4, 6, 2, 1, 48, "gpipe", 1, "selective")
    prob = build_problem(spec, cfg, layouts(4, 6, 2, 8)[0])
    best, _ = optimum(prob)
    hint = prob.rank_order()
    r = solve_exact(prob, time_limit_s=10, hint=hint, cutoff=best)          # nothing strictly better
    assert r.status == "PRUNED" and r.bound == best
    r = solve_exact(prob, time_limit_s=10, hint=hint, cutoff=prob.objective(hint) + 1.0)
    assert r.status == "OPTIMAL" and r.objective == pytest.approx(best)


def test_single_column_circuit_model_equals_brute_force(make_spec, optimum):
    """K = 1 grids go to the circuit formulation, spare nodes included (6 nodes, 4 or 5 rows). GPipe: 1F1B's lock-step
    pace takes K = 1 to the grid model (tests/test_pace.py)."""
    for seed, (tp, pp) in enumerate([(8, 4), (8, 5), (4, 4)]):
        spec = make_spec(nodes=6, seed=20 + seed, gbs=64, layers=40)
        cfg = ParallelConfig(tp, pp, 8 // tp if tp < 8 else 1, 1, 64 // (8 // tp if tp < 8 else 1), "gpipe", 1,
                             "selective")
        for lay in layouts(cfg.tp, cfg.pp, cfg.dp, 8):
            if lay.cols != 1:
                continue
            prob = build_problem(spec, cfg, lay)
            best, _ = optimum(prob)
            ex = solve_exact(prob, time_limit_s=10, hint=prob.rank_order())
            assert ex.status == "OPTIMAL" and ex.objective == pytest.approx(best, rel=1e-9)
            assert ex.bound <= best + 1e-9
            pr = solve_exact(prob, time_limit_s=10, hint=prob.rank_order(), cutoff=best)
            assert pr.status == "PRUNED"


@pytest.mark.parametrize("case", GRIDS, ids=[_label(c) for c in GRIDS])
def test_path_lower_bound_is_valid(make_spec, case):
    prob = _grid(make_spec, *case)
    best = int(int_path_costs(prob, all_placements(prob), wrap=False).max(axis=1).min())
    lb = path_lower_bound_int(prob)
    assert 0 < lb <= best


@pytest.mark.parametrize("case", GRIDS, ids=[_label(c) for c in GRIDS])
def test_ring_slice_keeps_the_exact_optimum(make_spec, optimum, case):
    """With an incumbent the model only searches the slice of placements whose ring leaves room for
    the path lower bound; on every tiny grid it still returns the brute-force optimum and refutes a
    cutoff at the optimum."""
    prob = _grid(make_spec, *case)
    best, best_a = optimum(prob)
    for hint in (prob.rank_order(), best_a):
        ex = solve_exact(prob, time_limit_s=20, hint=hint)
        assert ex.status == "OPTIMAL" and ex.objective == pytest.approx(best, rel=1e-9)
        assert ex.bound <= best + 1e-9
        plain = solve_exact(prob, time_limit_s=20, hint=hint, ring_cap=False)
        assert plain.objective == pytest.approx(best, rel=1e-9)
    pr = solve_exact(prob, time_limit_s=20, hint=prob.rank_order(), cutoff=best)
    assert pr.status == "PRUNED" and pr.bound == best
    # above the optimum by more than twice the rounding slack (a tie within it: units.cutoff_int); the lock step's
    # pace (1F1B) adds PACE_SLACK units
    margin = max(1e-6, 2 * rounding_slack(prob.layout.rows, has_pace(prob)) * UNIT)
    ok = solve_exact(prob, time_limit_s=20, hint=prob.rank_order(), cutoff=best + margin)
    assert ok.status == "OPTIMAL" and ok.objective == pytest.approx(best, rel=1e-9)
    quick = solve_exact(prob, time_limit_s=1e-4, hint=prob.rank_order())    # bound without a solve
    assert quick.bound <= best + 1e-9 and quick.objective >= best - 1e-9


def test_ring_slice_cuts_on_some_grids(make_spec, optimum):
    """The slice does cut on some of the tiny grids (so test_ring_slice_keeps_the_exact_optimum exercises it)."""
    cut_some = 0
    for case in GRIDS:
        prob = _grid(make_spec, *case)
        _, best_a = optimum(prob)
        cap, allowed, _ = ring_cap(prob, int_objective(prob, best_a), 10.0, 0)
        cut_some += cap is not None
    assert cut_some >= 3


def test_hint_in_any_column_order_is_a_solution_of_the_model(make_spec, optimum):
    """Columns are ordered by their row-0 node in the model; a hint in another order must still be
    usable: with every variable fixed to the hint, CP-SAT must find it (it was INFEASIBLE before)."""
    prob = _grid(make_spec, *GRIDS[0])
    best, best_a = optimum(prob)
    order = np.argsort(best_a[0])[::-1]                 # columns by decreasing row-0 node
    ex = solve_exact(prob, time_limit_s=10, hint=best_a[:, order], ring_cap=False,
                     debug=Debug(params="fix_variables_to_their_hinted_value: true"))
    assert ex.status in ("OPTIMAL", "FEASIBLE") and ex.objective == pytest.approx(best, rel=1e-9)


def test_debug_hook_exports_the_model(make_spec, tmp_path, monkeypatch):
    """PLANNER_CPSAT_EXPORT writes the model solved; PLANNER_CPSAT_PARAMS reaches the solver (an invalid
    parameter name is an error, so it is not silently dropped)."""
    prob = _grid(make_spec, *GRIDS[0])
    out = tmp_path / "model_{n}.pb.txt"
    monkeypatch.setenv("PLANNER_CPSAT_EXPORT", str(out))
    monkeypatch.setenv("PLANNER_CPSAT_PARAMS", "num_workers: 1")
    solve_exact(prob, time_limit_s=5)
    files = sorted(tmp_path.glob("model_*.pb.txt"))
    assert len(files) == 1 and "variables" in files[0].read_text()
    monkeypatch.setenv("PLANNER_CPSAT_PARAMS", "no_such_parameter: 1")
    with pytest.raises(ValueError):
        solve_exact(prob, time_limit_s=5)


@pytest.mark.parametrize("case", GRIDS, ids=[_label(c) for c in GRIDS])
def test_head_bound_is_valid(make_spec, int_values, case):
    """The path bound with row 0's nodes as the path starts, and the head bound built from it, never
    exceed what a placement with that row-0 set (or any placement) achieves, by brute force."""
    prob = _grid(make_spec, *case)
    vals, P = int_values(prob)
    path = int_path_costs(prob, P, wrap=False).max(axis=1)
    heads, inv = np.unique(np.sort(P[:, 0], axis=1), axis=0, return_inverse=True)
    best_path = np.full(len(heads), np.iinfo(np.int64).max)
    np.minimum.at(best_path, inv.ravel(), path)
    best_obj = int(vals.min())
    for key, bp in zip(heads, best_path, strict=True):
        assert path_lower_bound_int(prob, heads=set(key.tolist())) <= bp
    plb = path_lower_bound_int(prob)
    for limit in (best_obj, best_obj - 1, best_obj + 10 ** 4):
        hb = head_bound(prob, limit, plb, 10.0, 0)
        assert hb is not None and hb <= min(best_obj, limit + 1)


def test_migrate_is_delete_then_insert():
    s = np.arange(9)[::-1].copy()
    for i in range(9):
        for j in range(9):
            if i != j:
                assert _migrate(s, i, j).tolist() == np.insert(np.delete(s, i), j, s[i]).tolist()


def test_dp_costs_charge_each_ring_link_its_slower_direction():
    """dp_costs reads a cached symmetric table: it must equal the formula in MappingProblem's docstring."""
    rng = np.random.default_rng(3)
    R, K, N = 3, 4, 14
    link = rng.uniform(1.0, 2.0, size=(R, N, N))
    p = MappingProblem(layouts(8, R, K, 8)[0], np.arange(N), np.zeros((N, N)), None, np.arange(R) * 0.1, link, 0.0)
    for _ in range(20):
        a = rng.permutation(N)[:R * K].reshape(R, K)
        want = [0.1 * i + max(max(link[i, a[i, j], a[i, (j + 1) % K]], link[i, a[i, (j + 1) % K], a[i, j]])
                              for j in range(K)) for i in range(R)]
        assert np.allclose(p.dp_costs(a), want)
