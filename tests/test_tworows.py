"""tworows.py: a pair's model finds the best re-placement of its two rows (brute force on small grids), improve
never makes the plan worse, is deterministic and charges its work."""
import itertools

import numpy as np
import pytest

from planner.mapping import tworows, work
from planner.mapping.problem import Layout, MappingProblem


def _problem(R, K, seed):
    rng = np.random.default_rng(seed)
    N = R * K
    hop = rng.uniform(1.0, 2.0, (N, N))
    dp = rng.uniform(1.0, 3.0, (R, N, N))
    return MappingProblem(Layout(1, 1, R, K), np.arange(N), hop, None, rng.uniform(0.0, 0.5, R), dp, 0.0)


@pytest.mark.parametrize("R,K,rows,seed", [(3, 3, (0, 1), 0), (3, 3, (0, 2), 1), (4, 3, (1, 2), 2)])
def test_pair_is_optimal(R, K, rows, seed, monkeypatch):
    monkeypatch.setattr(tworows, "CALL_DTIME", 5.0)
    p = _problem(R, K, seed)
    a = np.random.default_rng(seed).permutation(R * K).reshape(R, K)
    I = list(rows)
    best = np.inf
    for perm in itertools.permutations(a[I].ravel()):
        b = a.copy()
        b[I] = np.reshape(perm, (2, K))
        best = min(best, p.objective(b))
    got = tworows.solve_pair(p, a, rows)
    assert sorted(got.ravel()) == list(range(R * K))
    assert np.array_equal(np.delete(got, I, axis=0), np.delete(a, I, axis=0))
    assert p.objective(got) == pytest.approx(best, rel=1e-6)


def test_improve_never_worse_deterministic_charged():
    p = _problem(4, 4, 7)
    a = np.arange(16).reshape(4, 4)
    with work.metered() as m:
        b, calls, moved = tworows.improve(p, a, budget_s=1.0)
    assert 1 <= calls and m.used_s >= calls * (work.CPSAT_CALL_WORK_S + work.ROWS2_BUILD_WORK_S)
    assert m.used_s <= 1.0 + tworows.CALL_DTIME + 0.2
    assert p.objective(b) <= p.objective(a) and (moved == 0) == np.array_equal(a, b)
    b2, _, _ = tworows.improve(p, a, budget_s=1.0)
    assert np.array_equal(b, b2)
    assert tworows.applies(p) and not tworows.applies([p, p])


def test_cp_sat_stops_on_its_deterministic_time_not_on_the_clock(monkeypatch):
    """A pair's CP-SAT call ends on CALL_DTIME of deterministic time; the wall clock is only the caller's safety stop
    (a wall limit of CALL_DTIME seconds would end a loaded run first and make the plan depend on the load)."""
    from planner.mapping import sat
    seen = []
    real = sat.new_solver

    def spy(dtime, workers, seed, wall_s=None):
        seen.append((dtime, wall_s))
        return real(dtime, workers, seed, wall_s=wall_s)
    monkeypatch.setattr(sat, "new_solver", spy)
    p = _problem(3, 3, 0)
    a = np.arange(9).reshape(3, 3)
    tworows.improve(p, a, budget_s=tworows.call_work(3, (0, 1)))
    first = len(seen)
    tworows.improve(p, a, budget_s=tworows.call_work(3, (0, 1)), wall_left=lambda: 7.5)
    assert 1 <= first < len(seen)
    assert all(s == (tworows.CALL_DTIME, tworows.WALL_UNSET_S) for s in seen[:first])
    assert tworows.WALL_UNSET_S > 100 * tworows.CALL_DTIME
    assert all(s == (tworows.CALL_DTIME, 7.5) for s in seen[first:])


def test_a_stop_at_the_safety_stop_is_recorded(monkeypatch):
    """The portfolio's two-row phase stopped by the wall clock says so (stopped_by wall), never 'work'."""
    from planner.mapping import portfolio
    p = _problem(4, 5, 3)            # 20 nodes: the two-row phase's range, one scenario, rows alike
    p = MappingProblem(p.layout, p.nodes, p.hop, None, np.zeros(4), p.dp_link, 0.0)
    assert portfolio._two_rows_share([p]) > 0
    calls = iter([10.0, 10.0] + [0.0] * 1000)        # the clock runs out right after the phase starts
    with work.metered() as m:
        portfolio._two_rows([p], 10.0, 0, np.arange(20).reshape(4, 5), lambda: next(calls), {})
    assert m.wall_hit


def test_exact_share_goes_to_two_rows_only_where_they_run():
    """At 17-32 nodes with the two-row re-solve on, the exact phase keeps EXACT_PROBE_SHARE and the two-row phase
    gets the rest of its share; with pipeline slack (no two-row phase) the exact phase keeps EXACT_SHARE_LARGE."""
    from planner.mapping import portfolio
    p = _problem(4, 5, 3)
    alike = MappingProblem(p.layout, p.nodes, p.hop, None, np.zeros(4), p.dp_link, 0.0)
    slack = MappingProblem(p.layout, p.nodes, p.hop, None, -0.01 * np.arange(4), p.dp_link, 0.0)
    assert portfolio._exact_share([alike]) == portfolio.EXACT_PROBE_SHARE < portfolio.EXACT_SHARE_LARGE
    assert portfolio._two_rows_share([alike]) + portfolio._handed_share([alike]) == pytest.approx(
        portfolio.TWO_ROWS_SHARE + portfolio.EXACT_SHARE_LARGE - portfolio.EXACT_PROBE_SHARE)
    assert portfolio._exact_share([slack]) == portfolio.EXACT_SHARE_LARGE and portfolio._two_rows_share([slack]) == 0
    assert portfolio._handed_share([slack]) == 0
    iters, exact_w = portfolio.work_budget(10.0, alike)
    total = work.WORK_PER_S * 10.0
    # the annealer's share is what it was before: only the exact phase's moved
    assert iters == work.iterations_for((1 - portfolio.EXACT_SHARE_LARGE - portfolio.TWO_ROWS_SHARE) * total, 4)
    assert exact_w == pytest.approx(portfolio.EXACT_PROBE_SHARE * total)


def _spy_pairs(monkeypatch, proved=False):
    """_solve_pair replaced by one that never moves (proved: and says it proved so); the calls it saw."""
    seen = []

    def spy(p, a, rows, *, seed=0, wall_s=None):
        seen.append((rows, seed))
        return a.copy(), proved, 0.01
    monkeypatch.setattr(tworows, "_solve_pair", spy)
    return seen


def test_each_round_of_pairs_gets_its_own_seed(monkeypatch):
    """Round r of the pairs runs CP-SAT on seed + r, so a stalled round is not repeated move for move."""
    seen = _spy_pairs(monkeypatch)
    p = _problem(3, 3, 0)
    _, calls, moved = tworows.improve(p, np.arange(9).reshape(3, 3), budget_s=100 * tworows.call_work(3, (0, 1)),
                                      seed=5)
    assert moved == 0 and calls == tworows.STALL_ROUNDS * 3           # 3 pairs, STALL_ROUNDS rounds, then it stops
    assert [s for _, s in seen] == [5, 5, 5, 6, 6, 6]


def test_pairs_apart_first_and_no_call_on_a_proved_pair(monkeypatch):
    """The pairs of rows apart (paths linear in the placement) come before the adjacent ones; a pair CP-SAT proved
    optimal on the current placement is not called again on it (its call would return its hint)."""
    seen = _spy_pairs(monkeypatch, proved=True)
    p = _problem(4, 3, 1)
    _, calls, moved = tworows.improve(p, np.arange(12).reshape(4, 3), budget_s=100 * tworows.call_work(3, (0, 1)))
    assert moved == 0 and calls == 6 == len(seen)                    # each of the 6 pairs once, then it stops
    order = [rows for rows, _ in seen]
    assert sorted(order[:3]) == [(0, 2), (0, 3), (1, 3)] and sorted(order[3:]) == [(0, 1), (1, 2), (2, 3)]
    seen2 = _spy_pairs(monkeypatch, proved=False)
    _, calls, _ = tworows.improve(p, np.arange(12).reshape(4, 3), budget_s=100 * tworows.call_work(3, (0, 1)))
    assert calls == tworows.STALL_ROUNDS * 6 == len(seen2)            # not proved: every round retries them


def test_models_are_charged_by_what_they_built(monkeypatch):
    """A call charges its model's build by its variables and constraints (build_work): two adjacent rows of 16
    columns (~65k items, ~0.7 s of CPU to build) far more than two rows apart of 4 x 8; improve charges each call
    that, its deterministic time and the fixed call cost."""
    from ortools.sat.python import cp_model

    from planner.mapping import sat
    charged = []
    real = tworows.build_work

    def spy(m):
        charged.append(real(m))
        return charged[-1]
    monkeypatch.setattr(tworows, "build_work", spy)
    monkeypatch.setattr(sat, "run", lambda solver, model: cp_model.UNKNOWN)   # no search: only the builds
    wide = _problem(2, 16, 3)
    with work.metered() as m:
        _, calls, _ = tworows.improve(wide, np.arange(32).reshape(2, 16), budget_s=10.0)
    assert calls == tworows.STALL_ROUNDS and m.used_s == pytest.approx(sum(charged))
    assert charged[0] > 0.5 and charged[0] <= tworows.model_work(16, (0, 1)) < 1.1 * charged[0]
    charged.clear()
    tworows.solve_pair(_problem(4, 8, 3), np.arange(32).reshape(4, 8), (0, 2))
    assert work.ROWS2_BUILD_WORK_S < charged[0] < 0.1


@pytest.mark.parametrize("R,K,rows,seed", [(2, 5, (0, 1), 0), (3, 4, (0, 2), 1), (3, 4, (1, 2), 2), (4, 6, (0, 3), 3),
                                           (4, 6, (2, 3), 4)])
def test_first_call_estimate_bounds_the_charge(R, K, rows, seed, monkeypatch):
    """The budget's test before a pair's first call (call_work) bounds what the call then charges for its build
    (build_work of the model built), so a first call that passes the test cannot overrun the budget by its build."""
    from ortools.sat.python import cp_model

    from planner.mapping import sat
    charged = []
    real = tworows.build_work
    monkeypatch.setattr(tworows, "build_work", lambda m: charged.append(real(m)) or charged[-1])
    monkeypatch.setattr(sat, "run", lambda solver, model: cp_model.UNKNOWN)
    p = _problem(R, K, seed)
    tworows.solve_pair(p, np.random.default_rng(seed).permutation(R * K).reshape(R, K), rows)
    assert 0 < charged[0] <= tworows.model_work(K, rows)


def test_a_pair_moved_and_proved_is_not_called_again_on_its_new_placement(monkeypatch):
    """A call that moves its pair and proves the new placement optimal marks the pair tried there: the next call goes
    to another pair, not back to the one just proved (its call would return its hint)."""
    seen = []
    p = _problem(3, 3, 0)
    a0 = np.arange(9).reshape(3, 3)
    rng = np.random.default_rng(0)
    better = next(b for b in (rng.permutation(9).reshape(3, 3) for _ in range(1000))
                  if p.objective(b) < p.objective(a0))

    def spy(p_, a, rows, *, seed=0, wall_s=None):
        seen.append((rows, a.tobytes()))
        if len(seen) == 1:
            return better.copy(), True, 0.01       # the first call moves and proves its pair optimal there
        return a.copy(), False, 0.01
    monkeypatch.setattr(tworows, "_solve_pair", spy)
    tworows.improve(p, a0, budget_s=100 * tworows.call_work(3, (0, 1)))
    first_pair = seen[0][0]
    assert (first_pair, better.tobytes()) not in seen[1:]
    assert len(seen) > 1
