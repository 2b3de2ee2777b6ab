"""The order of whole rows (roworder.py): scored as MappingProblem.objective scores it, never worse, the best order
on small grids, and run by the portfolio only where rings confine rows to groups of nodes."""
import itertools

import numpy as np
import pytest

from planner.mapping import portfolio, roworder, work
from planner.mapping.problem import Layout, MappingProblem, robust_objective


def _racks(R, K, seed, slow_rack=None, wrap=False, emb=False, spare=0):
    """R racks of K nodes (+ spare nodes in a last rack): fast links inside a rack, slow across; one rack's uplinks
    slower still."""
    rng = np.random.default_rng(seed)
    n = R * K + spare
    rack = np.arange(n) // K
    same = rack[:, None] == rack[None, :]
    bw = np.where(same, 50 * (1 - 0.1 * rng.uniform(size=(n, n))), 12.5 * (1 - 0.25 * rng.uniform(size=(n, n))))
    if slow_rack is not None:
        out = (rack == slow_rack)[:, None] & ~same
        bw[out | out.T] = 5.0
    np.fill_diagonal(bw, np.inf)
    hop = 0.05 / bw + 0.05 / bw.T
    ring = np.broadcast_to(2 * (K - 1) / K / bw, (R, n, n)).copy()
    return MappingProblem(Layout(1, 1, R, K), np.arange(n), hop, hop * 0.7 if wrap else None,
                          rng.uniform(0, 0.01, R), ring, 0.5, hop * 0.3 if emb else None)


@pytest.mark.parametrize("wrap, emb", [(False, False), (True, False), (False, True), (True, True)])
def test_scorer_is_the_objective_and_improve_finds_the_best_order(wrap, emb):
    p = _racks(4, 3, seed=1, slow_rack=1, wrap=wrap, emb=emb, spare=2)
    a = np.arange(12).reshape(4, 3)[[0, 1, 3, 2]]
    score = roworder._Scorer([p], a, "worst")
    orders = np.array(list(itertools.permutations(range(4))))
    v = score(orders)
    objs = np.array([p.objective(a[o]) for o in orders])
    assert np.allclose(v, objs, rtol=1e-12, atol=0)
    with work.metered() as m:
        b, moved = roworder.improve([p], a)
    assert p.objective(b) == pytest.approx(objs.min(), rel=1e-12)
    assert moved == (p.objective(a) > objs.min() * (1 + 1e-12))
    assert m.used_s == pytest.approx(roworder.work_bound([p]))          # charged as bounded beforehand


def test_the_slow_rack_goes_to_an_end_of_the_pipeline():
    """Rows in racks, the rack with slow uplinks in the middle: every column crosses its uplinks twice; at an end,
    once. No single swap gets there (it breaks two rings); the row order does."""
    p = _racks(4, 4, seed=3, slow_rack=2)
    a = np.arange(16).reshape(4, 4)                  # row i = rack i: rack 2 is third of four
    b, moved = roworder.improve([p], a)
    assert moved and (b[0, 0] // 4 == 2 or b[-1, 0] // 4 == 2)
    assert p.objective(b) - p.const < 0.9 * (p.objective(a) - p.const)


def test_robust_mean_and_worst_are_scored_over_the_scenarios():
    ps = [_racks(3, 3, seed=s, slow_rack=1) for s in (5, 6)]
    a = np.arange(9).reshape(3, 3)
    for robust in ("worst", "mean"):
        score = roworder._Scorer(ps, a, robust)
        orders = np.array(list(itertools.permutations(range(3))))
        assert np.allclose(score(orders), [robust_objective(ps, a[o], robust) for o in orders], rtol=1e-12, atol=0)


def test_descent_above_the_exhaustive_size_is_never_worse_and_deterministic():
    R = roworder.EXHAUSTIVE_ROWS + 2
    p = _racks(R, 2, seed=7, slow_rack=4)
    a = np.arange(2 * R).reshape(R, 2)
    with work.metered() as m:
        b, moved = roworder.improve([p], a)
    c, _ = roworder.improve([p], a)
    assert moved and np.array_equal(b, c) and p.objective(b) < p.objective(a)
    assert 0 < m.used_s <= roworder.work_bound([p])
    assert sorted(b.ravel().tolist()) == list(range(2 * R))


def test_the_portfolio_runs_it_only_where_rows_are_confined():
    """Racks: the pass runs (its work reserved from the annealer's iterations); near-uniform links: it does not, and
    the annealer's iterations are what they were without it."""
    rack = _racks(4, 4, seed=3, slow_rack=2)
    assert rack.rows_confined() and portfolio._row_order_on([rack])
    rng = np.random.default_rng(0)
    bw = 25 * (1 - rng.uniform(0, 0.25, (16, 16)))
    np.fill_diagonal(bw, np.inf)
    flat = MappingProblem(Layout(1, 1, 4, 4), np.arange(16), 0.05 / bw + 0.05 / bw.T, None, np.zeros(4),
                          np.broadcast_to(1.5 / bw, (4, 16, 16)).copy(), 0.0)
    assert not flat.rows_confined() and portfolio._row_order_work([flat]) == 0.0
    left = 1.0 - portfolio._exact_share([flat]) - portfolio._handed_share([flat]) - portfolio._lns_share([flat]) \
        - portfolio._two_rows_share([flat])
    assert portfolio.work_budget(10, [flat])[0] == work.iterations_for(left * work.WORK_PER_S * 10, 4, 1)
    r = portfolio.solve([rack], time_limit_s=2, seed=0)
    a = rack.rank_order()
    assert r.objective <= rack.objective(roworder.improve([rack], a)[0]) + 1e-12


def test_one_row_or_one_column_or_no_finite_order_is_left_as_it_is():
    """Direct calls on shapes the portfolio never passes (it runs the pass only where roworder.applies): one row (no
    order to choose; it raised AttributeError), one column (the scorer added dp_link's diagonal, which the objective
    never charges: no ring), and links all infinite (no order scored finite; it raised ValueError)."""
    one_row = _racks(1, 4, seed=2)
    a = np.arange(4).reshape(1, 4)
    b, moved = roworder.improve([one_row], a)
    assert not moved and np.array_equal(b, a)
    col = _racks(4, 1, seed=2, spare=2)
    col.dp_link[:, np.arange(6), np.arange(6)] = 9.0          # a diagonal the objective does not read
    a = np.arange(4).reshape(4, 1)
    orders = np.array(list(itertools.permutations(range(4))))
    assert np.allclose(roworder._Scorer([col], a, "worst")(orders), [col.objective(a[o]) for o in orders],
                       rtol=1e-12, atol=0)
    dead = _racks(3, 2, seed=2)
    dead.hop[:] = np.inf
    a = np.arange(6).reshape(3, 2)
    b, moved = roworder.improve([dead], a)
    assert not moved and np.array_equal(b, a)


def test_the_pass_never_takes_more_than_half_the_annealers_share():
    """At a short limit the pass's bound (8 x 16: 40,320 orders, 0.103 work s) exceeded the annealer's share (0.0875
    at 0.25 s): the annealer got one iteration and the solve charged 0.149 work s of its 0.0875. It is skipped (and
    nothing reserved) where its bound is above half that share; at 10 s it runs as before."""
    p = _racks(8, 16, seed=4, slow_rack=3)
    assert roworder.applies([p])
    T = 0.25
    share = portfolio._anneal_work(T, [p])
    assert roworder.work_bound([p]) > 0.5 * share
    assert portfolio._row_order_work([p], share) == 0.0
    iters, _ = portfolio.work_budget(T, [p])
    assert iters == work.iterations_for(share, 8, 1)
    r = portfolio.solve([p], time_limit_s=T, seed=0)
    assert "row_order_moves" not in r.work and r.work["iterations"] > 1
    assert r.work_s <= work.WORK_PER_S * T + 1e-9
    big = portfolio._anneal_work(10, [p])
    assert portfolio._row_order_work([p], big) == roworder.work_bound([p])


def test_narrow_grids_are_charged_per_order_and_row_not_less():
    """The scorer's cost is per (order, row): a gather of K columns, 32-50 ns measured at K = 2 .. 8 whatever K
    (16-21 ns per column term at K = 2, against 20 ns charged: no margin for a slower machine with two solves). A
    narrow grid is charged at least as a grid of MIN_TERM_COLS columns; improve charges what
    work_bound says."""
    narrow, wide = _racks(8, 2, seed=5, slow_rack=3), _racks(8, roworder.MIN_TERM_COLS, seed=5, slow_rack=3)
    assert roworder.work_bound([narrow]) >= roworder.work_bound([wide]) > 0
    with work.metered() as m:
        roworder.improve([narrow], narrow.rank_order())
    assert m.used_s == pytest.approx(roworder.work_bound([narrow]))
    R = roworder.EXHAUSTIVE_ROWS + 4
    tall = _racks(R, 2, seed=6, slow_rack=5)
    with work.metered() as m:
        roworder.improve([tall], tall.rank_order())
    assert 0 < m.used_s <= roworder.work_bound([tall])
