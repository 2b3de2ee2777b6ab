"""planner.mapping.solve (portfolio.py): exact on small instances, never worse than the annealer alone on the
same work, deterministic (work limits, not the clock), and the result says which limit ended the search."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from planner.mapping import portfolio, solve, work_budget
from planner.mapping.bruteforce import brute_force

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from mapping_family import family_problem


@pytest.fixture(autouse=True)
def _work_decides(monkeypatch):
    """A generous safety stop: the work limits end every search here, whatever the machine's load (the
    behaviour under test; the wall clock is only a safety stop)."""
    monkeypatch.setattr(portfolio, "WALL_SAFETY", 100.0)


def _two_scenarios(rows, cols, seed):
    """A robust problem: the family instance and a second bandwidth snapshot of it (seed + 50)."""
    return [family_problem(rows, cols, seed), family_problem(rows, cols, seed + 50)]


@pytest.mark.parametrize("rows,cols,seed", [(2, 3, 0), (3, 2, 1), (2, 4, 2)])
def test_equals_brute_force_on_small_family_instances(rows, cols, seed):
    p = family_problem(rows, cols, seed)
    opt, _ = brute_force(p)
    r = solve(p, time_limit_s=1.0, seed=0)
    assert r.objective == pytest.approx(opt, rel=1e-9)
    assert r.bound <= opt + 1e-12
    assert r.status == "OPTIMAL" and r.stopped_by == "proof"


@pytest.mark.parametrize("robust", ["worst", "mean"])
def test_robust_equals_brute_force(robust):
    probs = _two_scenarios(2, 3, 3)
    opt, _ = brute_force(probs, robust=robust)
    r = solve(probs, time_limit_s=1.0, seed=0, robust=robust)
    assert r.objective == pytest.approx(opt, rel=1e-9)
    assert r.bound <= opt + 1e-12


@pytest.mark.parametrize("rows,cols,seed", [(2, 4, 0), (3, 3, 1), (4, 4, 2), (4, 5, 0)])
def test_never_worse_than_anneal_alone_on_the_same_budget(rows, cols, seed):
    p = family_problem(rows, cols, seed)
    alone = solve(p, time_limit_s=0.5, seed=0, method="anneal")
    port = solve(p, time_limit_s=0.5, seed=0)
    assert alone.work["iterations"] == work_budget(0.5, p)[0]
    assert port.objective <= alone.objective + 1e-12
    assert port.bound <= port.objective


def test_same_seed_same_assignment():
    p = family_problem(4, 5, 7)           # 4 x 4 instances are proved at this limit since the row decomposition
    a = solve(p, time_limit_s=0.5, seed=3)
    b = solve(p, time_limit_s=0.5, seed=3)
    assert a.stopped_by == b.stopped_by == "work"
    assert np.array_equal(a.assign, b.assign) and a.objective == b.objective and a.bound == b.bound
    assert a.work == b.work


def test_the_result_says_which_limit_ended_it(monkeypatch):
    monkeypatch.setattr(portfolio, "EXACT_NODES", 16)
    p = family_problem(4, 5, 0)                       # above EXACT_NODES: the annealer's iterations end it
    r = solve(p, time_limit_s=0.2, seed=0)
    assert r.stopped_by == "work" and r.status == "HEURISTIC"
    assert r.work["iterations"] == work_budget(0.2, p)[0]
    monkeypatch.setattr(portfolio, "WALL_SAFETY", 0.0)   # the safety stop at once: the clock ends it
    r = solve(p, time_limit_s=0.2, seed=0)
    assert r.stopped_by == "wall"
    p.check(r.assign)


def _burn(n):
    """n CPU-burning processes (the load of other jobs); the caller terminates them."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


@pytest.mark.slow
def test_same_plan_on_a_loaded_machine():
    """Work, not the clock, decides: the same problem and seed give the same result with 3 CPU-burning
    processes beside it (the exact phase runs: 16 nodes, pre-solve, column decomposition, CP-SAT)."""
    p = family_problem(4, 4, 5)
    quiet = solve(p, time_limit_s=0.6, seed=1, wall_limit_s=60.0)
    procs = _burn(3)
    try:
        busy = solve(p, time_limit_s=0.6, seed=1, wall_limit_s=60.0)
    finally:
        for q in procs:
            q.kill()
            q.wait()
    assert quiet.stopped_by != "wall" and busy.stopped_by == quiet.stopped_by
    assert quiet.work["exact_work_s"] > 0
    assert np.array_equal(quiet.assign, busy.assign)
    assert (quiet.objective, quiet.bound, quiet.status, quiet.work) == (busy.objective, busy.bound, busy.status,
                                                                        busy.work)
    assert quiet.work_s == busy.work_s


def test_cutoff_prunes_what_cannot_beat_it():
    """Branch and bound across configurations: with a cutoff at the optimum nothing strictly better exists."""
    p = family_problem(2, 3, 0)
    opt, _ = brute_force(p)
    r = solve(p, time_limit_s=1.0, seed=0, cutoff=opt)
    assert r.status == "PRUNED" and r.bound == opt and r.stopped_by == "proof"


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="method"):
        solve(family_problem(2, 2, 0), time_limit_s=0.1, method="magic")


def test_exact_phase_not_started_near_the_safety_stop(monkeypatch):
    """With under EXACT_WALL_FLOOR of the limit left after the anneal (a machine far slower than the
    calibration), the exact phase, whose model building does not look at the clock, is skipped and the result
    says the clock ended the search."""
    real_anneal = portfolio.anneal

    def slow_anneal(*a, **k):
        r = real_anneal(*a, **k)
        deadline = t_start + 1.0
        while time.perf_counter() < deadline - 0.1:
            pass                                    # the anneal "took" until 10% of the limit is left
        return r

    def no_exact(*a, **k):
        raise AssertionError("the exact phase started near the safety stop")

    monkeypatch.setattr(portfolio, "anneal", slow_anneal)
    monkeypatch.setattr(portfolio, "solve_exact", no_exact)
    p = family_problem(2, 4, 0)
    t_start = time.perf_counter()
    r = solve(p, time_limit_s=1.0, seed=0, wall_limit_s=1.0)
    assert r.stopped_by == "wall" and r.status == "HEURISTIC"
    assert r.objective == pytest.approx(p.objective(r.assign))


def test_lns_after_the_anneal_never_worse_and_deterministic(monkeypatch):
    """Above EXACT_NODES (lowered here) the LNS runs on its share after the anneal: never worse than the annealer
    alone on the same iterations, the same plan twice, its steps in the record."""
    monkeypatch.setattr(portfolio, "EXACT_NODES", 16)
    p = family_problem(4, 5, 3)
    alone = solve(p, time_limit_s=0.3, seed=0, method="anneal")
    a = solve(p, time_limit_s=0.3, seed=0)
    b = solve(p, time_limit_s=0.3, seed=0)
    assert a.work["lns_steps"] == portfolio.lns_steps(0.3, p) > 0
    assert a.work["iterations"] == alone.work["iterations"] == work_budget(0.3, p)[0]
    assert a.objective <= alone.objective + 1e-12
    assert np.array_equal(a.assign, b.assign) and a.work == b.work and a.stopped_by == b.stopped_by == "work"
    p.check(a.assign)
    p.dp_base = np.array([0.0, -0.01, -0.02, -0.03])      # pipeline slack: one row's ring dominates, no LNS
    assert portfolio.lns_steps(0.3, p) == 0 and work_budget(0.3, p)[0] > a.work["iterations"]


def _spy_anneal(monkeypatch):
    """Record every anneal the portfolio runs: (init, iterations, result)."""
    calls, real = [], portfolio.anneal

    def spy(probs, **kw):
        r = real(probs, **kw)
        calls.append((None if kw.get("init") is None else np.asarray(kw["init"]).copy(), kw["iterations"], r))
        return r
    monkeypatch.setattr(portfolio, "anneal", spy)
    return calls


def _small_lns(monkeypatch, two_rows_nodes):
    """The LNS (and the probe) on a 20-node instance: EXACT_NODES lowered, the probe after two short chunks."""
    monkeypatch.setattr(portfolio, "EXACT_NODES", 16)
    monkeypatch.setattr(portfolio, "TWO_ROWS_NODES", two_rows_nodes)
    monkeypatch.setattr(portfolio, "LNS_CHUNK", 10)
    monkeypatch.setattr(portfolio, "LNS_PROBE_STEPS", 20)


def test_a_stalled_lns_hands_the_rest_of_its_work_to_a_reheat(monkeypatch):
    """An LNS that has not lowered the objective after LNS_PROBE_STEPS steps (here one that never moves) stops, and
    the work of its remaining steps goes to a second anneal started from its plan: never worse, deterministic."""
    _small_lns(monkeypatch, two_rows_nodes=16)
    monkeypatch.setattr(portfolio.lns, "improve", lambda p, a, *, steps, seed=0: (np.asarray(a).copy(), 0))
    calls = _spy_anneal(monkeypatch)
    p = family_problem(4, 5, 3)
    steps = portfolio.lns_steps(0.3, p)
    assert steps > 20
    a = solve(p, time_limit_s=0.3, seed=0)
    first, second = calls[0][2], calls[1]
    assert len(calls) == 2 and np.array_equal(second[0], first.assign)
    left = (steps - 20) * portfolio._lns_step_work(p)
    assert second[1] == a.work["reheat_iterations"] == portfolio.work.iterations_for(left, p.layout.rows)
    assert a.work["lns_steps"] == 20
    assert a.objective <= first.objective + 1e-12 and a.objective == pytest.approx(p.objective(a.assign))
    b = solve(p, time_limit_s=0.3, seed=0)
    assert np.array_equal(a.assign, b.assign) and a.work == b.work


def test_no_reheat_where_the_two_row_re_solve_follows(monkeypatch):
    """Up to TWO_ROWS_NODES the two-row re-solve follows the LNS, and a stalled LNS runs all its steps (on the
    8 x 8 tuning seeds the reheat lost there)."""
    _small_lns(monkeypatch, two_rows_nodes=64)
    monkeypatch.setattr(portfolio.lns, "improve", lambda p, a, *, steps, seed=0: (np.asarray(a).copy(), 0))
    calls = _spy_anneal(monkeypatch)
    p = family_problem(4, 5, 3)
    a = solve(p, time_limit_s=0.3, seed=0)
    assert len(calls) == 1 and "reheat_iterations" not in a.work
    assert a.work["lns_steps"] == portfolio.lns_steps(0.3, p)


def test_exact_model_too_large_to_build_in_the_budget_is_not_built(monkeypatch):
    """--method exact on 128 nodes: the grid model's Python build (about 30 s at 8 x 16) is estimated first
    (cpsat.grid_build_s) and skipped when it exceeds the work left; the answer is the incumbent, TIME_LIMIT. A model
    that fits the budget is built as before."""
    from planner.mapping import cpsat
    built = []
    real = cpsat._assignment_model
    monkeypatch.setattr(cpsat, "_assignment_model", lambda *a, **k: built.append(a) or real(*a, **k))
    big = family_problem(8, 16, 0)
    assert cpsat.grid_build_s(8, 16, 128, False) > 10.0
    hint = big.rank_order()
    r = cpsat.solve_exact(big, time_limit_s=1.0, wall_limit_s=60, hint=hint, ring_cap=False)
    assert not built and r.status == "TIME_LIMIT" and r.objective <= big.objective(hint) + 1e-12
    assert r.bound <= r.objective
    small = family_problem(2, 4, 0)
    r = cpsat.solve_exact(small, time_limit_s=2.0, wall_limit_s=60, hint=small.rank_order(), ring_cap=False)
    assert built and r.status == "OPTIMAL"


def test_a_tiny_search_space_is_not_annealed_far_past_its_size(monkeypatch):
    p = family_problem(2, 2, 0)                       # 4 blocks on 4 nodes: 24 placements
    assert portfolio.placements(p) == 24
    assert work_budget(10.0, p)[0] == portfolio.ANNEAL_PER_PLACEMENT * 24
    r = solve(p, time_limit_s=10.0, seed=0)
    assert r.status == "OPTIMAL" and r.objective == pytest.approx(brute_force(p)[0], rel=1e-9)
    assert r.work["iterations"] == portfolio.ANNEAL_PER_PLACEMENT * 24
    big = family_problem(3, 3, 0)                     # 9! placements: the cap does not bind
    assert portfolio.placements(big) == portfolio.SMALL_SPACE + 1
    capped = work_budget(10.0, big)[0], work_budget(10.0, p)[0]
    monkeypatch.setattr(portfolio, "SMALL_SPACE", 0)  # no cap anywhere
    assert work_budget(10.0, big)[0] == capped[0]
    assert work_budget(10.0, p)[0] > 100 * capped[1]
