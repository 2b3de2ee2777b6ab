"""Megatron-Core 1F1B's waited calls walked in the mapping objective (iteration.lock_step_walk_parts, two or more
stages a node): the walk's (lockstep.lock_step_time) exposed hops per row boundary, its linear part on the sum, its
steep part levelled in Pace.steep; screening's relaxation; one stage a node keeps the closed form."""
from __future__ import annotations

import numpy as np
import pytest
from walked_cases import (
    CASES,
    check_exact_and_incremental,
    check_relaxation_under,
    column_hops,
    het_spec,
    one_slow_pair,
    spec_on,
    walked_problem,
)

from planner.config import ParallelConfig
from planner.costs import default_costs
from planner.costs.iteration import (
    bound_differs,
    build_problem,
    compute_const,
)
from planner.costs.lockstep import lock_step_time
from planner.mapping import work
from planner.mapping.anneal import anneal
from planner.mapping.bruteforce import all_placements, brute_force
from planner.mapping.cpsat import solve_exact
from planner.mapping.incremental import SwapEvaluator
from planner.mapping.problem import Layout, robust_lower_bound, robust_objective


def _problem(spec, case, bound_only=False):
    return walked_problem(spec, case, "1f1b", bound_only)


def _walks(spec, cfg, prob, assign):
    """Each column's exposed hops as the walk takes them: lock_step_time on its mapped hops (the slower direction
    between nodes, NVLink inside one) less without hops; and compute_const."""
    st, cols = column_hops(spec, cfg, prob, assign, max)
    f, b, m = [s.forward for s in st], [s.backward for s in st], cfg.num_microbatches
    out = [lock_step_time(f, b, m, cs) - lock_step_time(f, b, m) for cs in cols]
    return np.array(out), compute_const(spec, cfg, default_costs(spec.cluster), st)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("bw, factor", [(2.0, 0.5), (2.0, 0.1), (0.5, 0.2), (25.0, 0.3)])
def test_objective_is_the_walk_with_one_slow_boundary(make_spec, case, bw, factor):
    """Equal links but one slow pair: a column holds at most one boundary off the typical hop, above it, so every
    column's path is the walk's exposed hops exactly (stage compute + lock_step_time's exposed p2p), also where
    the typical hop itself is past knees (bw 0.5: hops several times a stage's f + b)."""
    spec = spec_on(make_spec, case[0], one_slow_pair(case[0], bw, factor))
    cfg, prob = _problem(spec, case)
    assert prob.wrap is None
    if bw < 25.0:
        assert prob.pace is not None and len(prob.pace.steep) == prob.layout.rows - 1 and not prob.pace.lin
    else:       # fast links: every curve one line (the ramp's 2 crossings), the sum alone (build_problem drops it)
        assert prob.pace is None
    P = all_placements(prob)
    rng = np.random.default_rng(0)
    seen = []
    for k in rng.choice(len(P), size=min(40, len(P)), replace=False):
        walk, cc = _walks(spec, cfg, prob, P[k])
        # exact up to float noise on the iteration (the pieces are secants over 1e-6 of the range)
        assert np.allclose(prob.path_costs(P[k]) + prob.const - cc, walk, rtol=1e-8, atol=1e-9 * cc)
        seen += walk.tolist()
    assert max(seen) > min(seen) + 1e-9     # some placements put the slow pair on a row boundary


def test_curves_rise_at_most_two_crossings_a_micro_batch(make_spec):
    """The relaxation's margin assumes a boundary's curve rises at most 2 m per unit hop (each of its transfers
    once on a path); here well past the knees (hops ~10x a stage's f + b)."""
    spec = spec_on(make_spec, 6, one_slow_pair(6, 0.2, 0.2))
    cfg, prob = _problem(spec, CASES[1])
    lrow = prob.hop[0, 1] / prob.pace.c[0, 1]
    top = max(float(pc[:, 0].max()) for pc in prob.pace.steep) + lrow
    assert cfg.num_microbatches < top <= 2 * cfg.num_microbatches + 1e-6


def _het(make_spec, n, seed):
    return het_spec(make_spec, n, seed)


def test_exact_equals_brute_force_bounds_hold_and_swaps_track(make_spec, optimum):
    probs = check_exact_and_incremental(make_spec, optimum, "1f1b")
    assert all(max(len(t) for t in p.pace.steep) > 1 for p in probs)      # past a knee somewhere on each grid


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seed", [1, 3])
def test_bound_only_relaxation_stays_under_the_full_objective(make_spec, case, seed):
    """check_relaxation_under, and the relaxation gives up at most the pace (its steep parts) on any placement."""
    prob, full_obj, cheap_obj, P = check_relaxation_under(_het(make_spec, case[0], seed), case, "1f1b")
    assert (full_obj - cheap_obj).max() <= float(max(prob.pace.costs(a).max() for a in P)) + 1e-4 * full_obj.max()


def test_one_stage_a_node_keeps_the_closed_form_below_its_threshold(make_spec, monkeypatch):
    """a == 1 with hops under LOCK_STEP_A1_WALK of a stage (and always on two rows): lock_step_problem_parts' closed
    form (Pace's e / f / lin terms, no steep part), bound_only the same problem (tests/test_pace.py checks its values
    against lock_step_p2p_s)."""
    import planner.costs.iteration as it
    spec = _het(make_spec, 6, 1)
    cfg = ParallelConfig(4, 3, 4, 1, 16, "1f1b", 1, "selective")
    lay = Layout(1, 2, 3, 2)
    assert build_problem(spec, cfg, lay).pace.steep          # this spec's hops pass the threshold: walked
    monkeypatch.setattr(it, "LOCK_STEP_A1_WALK", float("inf"))
    a, b = build_problem(spec, cfg, lay), build_problem(spec, cfg, lay, bound_only=True)
    assert a.pace is not None and not a.pace.steep and np.isfinite(a.pace.e).any()
    assert a.const == b.const and np.array_equal(a.hop, b.hop) and np.array_equal(a.pace.c, b.pace.c)
    two = Layout(1, 2, 2, 2)
    assert not bound_differs(spec, ParallelConfig(4, 2, 4, 1, 16, "1f1b", 1, "selective"), two)


def test_one_stage_gate():
    """lock_step_one_stage_walked: one stage a node on 3 rows or more (a search's allowance bounds the deep ones'
    builds: tests/test_walk_allowance.py), and a lower-quartile candidate hop of at least LOCK_STEP_A1_WALK of the
    fastest stage's F + B; never where no pair has a link."""
    from planner.costs.iteration import (
        LOCK_STEP_A1_WALK,
        lock_step_one_stage_walked,
        one_stage_typical_hop,
    )
    rng = np.random.default_rng(0)
    ow = rng.uniform(0.01, 0.03, (6, 6))
    np.fill_diagonal(ow, 0.0)
    typ = one_stage_typical_hop(ow)
    pair = np.maximum(ow, ow.T)[~np.eye(6, dtype=bool)]
    assert typ == pytest.approx(np.quantile(pair, 0.25))
    t = [typ / LOCK_STEP_A1_WALK * 0.999] * 4          # the hop just past the threshold of these stages
    assert lock_step_one_stage_walked(Layout(1, 1, 4, 1), t, ow)
    assert not lock_step_one_stage_walked(Layout(1, 1, 4, 1), [x * 1.01 / 0.999 for x in t], ow)
    assert not lock_step_one_stage_walked(Layout(2, 1, 2, 1), t, ow)      # two stages a node: the walk without
    assert not lock_step_one_stage_walked(Layout(1, 1, 2, 1), t, ow)      # two rows: one boundary
    for deep in (16, 64):
        assert lock_step_one_stage_walked(Layout(1, 1, deep, 1), [t[0]] * deep, ow)
    none = np.full((6, 6), np.inf)
    np.fill_diagonal(none, 0.0)
    assert not lock_step_one_stage_walked(Layout(1, 1, 4, 1), t, none)


ONE_STAGE = [(6, 4, 4, 2, 1), (5, 8, 4, 1, 1)]      # (nodes, tp, pp, dp, a): one stage a node, four rows


@pytest.mark.parametrize("case", ONE_STAGE)
def test_one_stage_a_node_walked_with_planes(make_spec, optimum, case):
    """a == 1, hops past LOCK_STEP_A1_WALK of a stage, four rows: each boundary's walked curve (steep, no wrap) and
    the two interior rows' planes (the end rows, one boundary each, none). On every placement within 3% of the walk
    on its mapped hops (the closed form: 4-9% off on such hops, benchmarks/lock_step_one_stage_probe.py); CP-SAT proves
    brute force's optimum with valid bounds, the annealer's incremental score tracks it, and screening's relaxation
    stays under it."""
    from swap_checks import assert_exact_is_the_optimum, assert_swaps_track_objective
    spec = _het(make_spec, case[0], 1)
    cfg, prob = walked_problem(spec, case, "1f1b")
    pc = prob.pace
    assert pc is not None and len(pc.steep) == prob.layout.rows - 1 and len(pc.planes) == prob.layout.rows
    assert len(pc.planes[0]) == 0 and len(pc.planes[-1]) == 0 and all(len(q) for q in pc.planes[1:-1])
    errs = []
    for a in all_placements(prob):
        walk, cc = _walks(spec, cfg, prob, a)
        errs += list((prob.path_costs(a) + prob.const) / (cc + walk) - 1)
    assert max(abs(e) for e in errs) <= 0.03, (min(errs), max(errs))
    best, best_a = optimum(prob)
    assert_exact_is_the_optimum(prob, best, best_a)
    assert_swaps_track_objective(walked_problem(_het(make_spec, case[0], 2), case, "1f1b")[1])
    # screening's relaxation: no pace, the same hops, under the full objective everywhere (its const may be the
    # larger: the levelled pace's least value at the typical hop moves into it)
    assert bound_differs(spec, cfg, prob.layout)
    _, cheap = walked_problem(spec, case, "1f1b", bound_only=True)
    assert cheap.pace is None and np.array_equal(cheap.hop, prob.hop)
    P = all_placements(prob)
    assert all(cheap.objective(a) <= prob.objective(a) for a in P)
    assert cheap.lower_bound() <= best + 1e-12


def _mixed_scenarios(make_spec, case, seed):
    """Two bandwidth snapshots of one plan: fast even links, whose curves are lines (drop_flat: no pace), and slow
    het ones (a steep pace): build_problem decides per scenario."""
    n, tp, pp, dp, a = case
    spec = _het(make_spec, n, seed)
    cfg = ParallelConfig(tp, pp, dp, 1, 64 // dp, "1f1b", 1, "selective")
    lay = Layout(a, 8 // tp // a, pp // a, dp // (8 // tp // a))
    fast = np.full((n, n), 25.0) * np.random.default_rng(seed).uniform(0.98, 1.0, size=(n, n))
    np.fill_diagonal(fast, 0.0)
    probs = [build_problem(spec, cfg, lay, bandwidth=m) for m in (fast, spec.cluster.bandwidth)]
    assert [p.pace is not None for p in probs] == [False, True]
    return probs


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("robust", ["worst", "mean"])
def test_scenarios_with_and_without_a_pace(make_spec, case, robust):
    """drop_flat may leave one scenario of a robust solve without a pace and another with one: CP-SAT proves brute
    force's optimum over both, and the annealer's incremental scorer tracks the robust objective."""
    _check_robust(_mixed_scenarios(make_spec, case, 1), robust)


def _check_robust(probs, robust):
    """CP-SAT proves brute force's robust optimum over the scenarios with valid bounds, and the annealer's
    incremental scorer tracks the robust objective over random swaps."""
    best, _ = brute_force(probs, robust)
    ex = solve_exact(probs, robust=robust, time_limit_s=20)
    assert ex.status == "OPTIMAL" and ex.objective == pytest.approx(best, rel=1e-9) and ex.bound <= best + 1e-9
    assert robust_lower_bound(probs, robust) <= best + 1e-12
    rng = np.random.default_rng(3)
    R, K = probs[0].layout.rows, probs[0].layout.cols
    ev = SwapEvaluator(probs, list(rng.permutation(probs[0].n)), robust=robust, tie_level=0.9)
    for _ in range(100):
        p, q = (int(x) for x in rng.choice(probs[0].n, 2, replace=False))
        v = ev.propose_swap(p, q)
        s = list(ev.state)
        s[p], s[q] = s[q], s[p]
        assert v == pytest.approx(robust_objective(probs, np.array(s[:R * K]).reshape(R, K), robust), rel=1e-12)
        if rng.random() < 0.5:
            ev.accept()


@pytest.mark.parametrize("robust", ["worst", "mean"])
def test_one_stage_scenarios_closed_form_and_walked(make_spec, robust):
    """One stage a node, two snapshots: fast links keep the closed form (under LOCK_STEP_A1_WALK), slow ones take
    the walk with planes; CP-SAT proves brute force's robust optimum over both and the incremental scorer tracks it."""
    case = ONE_STAGE[0]
    spec = _het(make_spec, case[0], 1)
    n = case[0]
    fast = np.full((n, n), 2500.0) * np.random.default_rng(1).uniform(0.9, 1.0, size=(n, n))
    np.fill_diagonal(fast, 0.0)
    cfg, _ = walked_problem(spec, case, "1f1b")
    lay = Layout(1, 8 // case[1], case[2], case[3] // (8 // case[1]))
    probs = [build_problem(spec, cfg, lay, bandwidth=m) for m in (fast, spec.cluster.bandwidth)]
    assert not probs[0].pace.steep and np.isfinite(probs[0].pace.e).any()        # the closed form
    assert probs[1].pace.steep and probs[1].pace.planes                          # walked, with planes
    _check_robust(probs, robust)


def test_anneal_charges_a_pace_in_any_scenario(make_spec):
    """The annealer's work charge counts the pace when any scenario carries one (units.has_pace), not only when the
    first does: the same anneal charged the same whatever the scenarios' order (it was charged ~PACE_ITER_FACTOR
    less with the flat scenario first)."""
    probs = _mixed_scenarios(make_spec, CASES[1], 1)
    used = []
    for order in (probs, probs[::-1]):
        with work.metered() as m:
            anneal(order, seed=0, iterations=500)
        used.append(m.used_s)
    assert used[0] == used[1] == work.anneal_work(500, probs[0].layout.rows, 2, True)


@pytest.mark.parametrize("case", CASES[1:])     # three and four rows (two: one boundary, exact either way)
def test_one_fast_boundary_is_charged_on_the_safe_side(make_spec, case):
    """Equal slow links but one fast pair: a boundary below the typical hop keeps its levelled steep part at the
    largest typical one (the others' max), so a column is charged at least the walk, never under (docs/notes/
    simulator.md: "over where it falls below"; drop_flat's tolerance aside). Over by up to 7.8% of a column's
    iteration here (three rows), 3.1% of the objective (four rows, one column); ~10% at bw 2 in review 19's draws."""
    spec = spec_on(make_spec, case[0], one_slow_pair(case[0], 0.5, 4.0))
    cfg, prob = _problem(spec, case)
    P = all_placements(prob)
    over = []
    for k in np.random.default_rng(0).choice(len(P), size=min(40, len(P)), replace=False):
        walk, cc = _walks(spec, cfg, prob, P[k])
        over += (prob.path_costs(P[k]) + prob.const - cc - walk).tolist()
        assert np.all(prob.path_costs(P[k]) + prob.const - cc >= walk - 2e-9 * (1.0 + cc))
    assert prob.pace is not None and max(over) > 1e-3 * cc     # some column is charged over
