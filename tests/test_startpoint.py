"""Where the searches start (startpoint.py): each row's ring in its best cyclic order where rows are confined to
groups of nodes; the rank order elsewhere."""
import itertools

import numpy as np
import pytest

from planner.mapping import portfolio, startpoint, work
from planner.mapping.anneal import anneal
from planner.mapping.problem import Layout, MappingProblem


def _bottleneck(cost):
    """The least slowest link over every cyclic order (brute force, node 0 first)."""
    K = len(cost)
    return min(max(cost[o[k], o[(k + 1) % K]] for k in range(K))
               for o in ((0, *q) for q in itertools.permutations(range(1, K))))


@pytest.mark.parametrize("K", [4, 5, 6, 7])
def test_best_ring_is_the_least_bottleneck_cycle(K):
    rng = np.random.default_rng(K)
    for _ in range(20):
        c = rng.uniform(1, 10, (K, K))
        c = np.maximum(c, c.T)
        np.fill_diagonal(c, 0.0)
        order, nodes = startpoint.best_ring(c)
        assert sorted(order) == list(range(K)) and nodes > 0
        assert max(c[order[k], order[(k + 1) % K]] for k in range(K)) == pytest.approx(_bottleneck(c))


def _pods(R, K, bad, seed=0):
    """Racks of 4 nodes, two racks per row in rank order; nodes `bad` have degraded NICs (every link out of their
    rack 20x slower)."""
    rng = np.random.default_rng(seed)
    n = R * K
    rack = np.arange(n) // 4
    same = rack[:, None] == rack[None, :]
    bw = np.where(same, 50 * (1 - 0.1 * rng.uniform(size=(n, n))), 25 * (1 - 0.2 * rng.uniform(size=(n, n))))
    for v in bad:
        bw[v, ~same[v]] = bw[~same[v], v] = 1.25
    np.fill_diagonal(bw, np.inf)
    hop = 0.05 / bw + 0.05 / bw.T
    ring = np.broadcast_to(2 * (K - 1) / K / bw, (R, n, n)).copy()
    return MappingProblem(Layout(1, 1, R, K), np.arange(n), hop, None, np.zeros(R), ring, 0.0)


def test_a_degraded_node_at_a_rack_boundary_is_moved_inside_its_rack():
    """Rank order, row 1 = nodes 8-15: node 12 (degraded) sits next to node 11 of the other rack. The start keeps
    every row's nodes and puts 12 between two of its rack-mates; the slowest ring drops ~20x."""
    p = _pods(4, 8, bad=[12, 31])
    assert p.rows_confined() and startpoint.applies([p])
    a0 = p.rank_order()
    with work.metered() as m:
        a = startpoint.initial([p])
    assert m.used_s > 0
    assert [sorted(r) for r in a.tolist()] == [sorted(r) for r in a0.tolist()]
    assert p.dp_costs(a).max() < p.dp_costs(a0).max() / 10
    # and the search keeps it: the portfolio ends far below where an anneal from the rank order ends
    r = portfolio.solve([p], time_limit_s=2, seed=0)
    plain = anneal(p, seed=0, iterations=portfolio.work_budget(2, [p])[0], init=a0)
    assert r.objective < 0.5 * plain.objective


def test_the_rank_order_stays_where_rows_are_not_confined():
    rng = np.random.default_rng(1)
    bw = 25 * (1 - rng.uniform(0, 0.25, (32, 32)))
    np.fill_diagonal(bw, np.inf)
    p = MappingProblem(Layout(1, 1, 4, 8), np.arange(32), 0.05 / bw + 0.05 / bw.T, None, np.zeros(4),
                       np.broadcast_to(1.75 / bw, (4, 32, 32)).copy(), 0.0)
    with work.metered() as m:
        a = startpoint.initial([p])
    assert not startpoint.applies([p]) and np.array_equal(a, p.rank_order()) and m.used_s == 0


def test_the_start_never_takes_the_annealers_iterations_or_exceeds_the_budget():
    """8 x 16 at a 1 s limit: the start's search charged ~0.18 work s where the annealer's share, less the row order's
    reservation, was 0.12: the annealer ran one iteration and the solve charged 0.41 work s of its 0.35. Its search is
    now capped at half of what the annealer has (the rows it cannot afford keep the rank order); at 10 s nothing
    binds and the start is the same."""
    p = _pods(8, 16, bad=[12, 31, 70, 101])
    assert startpoint.applies([p])
    T = 1.0
    with work.metered() as m:
        full = startpoint.initial([p])
    room = portfolio._anneal_work(T, [p]) - portfolio._row_order_work([p], portfolio._anneal_work(T, [p]))
    assert m.used_s > 0.5 * room                      # uncapped, it would take more than half the annealer's work
    r = portfolio.solve([p], time_limit_s=T, seed=0)
    assert r.work["iterations"] >= work.iterations_for(0.5 * room, 8, 1) - 1
    assert r.work_s <= work.WORK_PER_S * T + 1e-9
    with work.metered() as m2:
        capped = startpoint.initial([p], budget_s=0.5 * room)
    assert 0 < m2.used_s <= 0.5 * room
    assert p.objective(capped) <= p.objective(p.rank_order())
    with work.metered() as m3:
        same = startpoint.initial([p], budget_s=10 * m.used_s)
    assert np.array_equal(same, full) and m3.used_s == m.used_s


def test_the_exact_method_takes_the_starts_work_off_its_budget(monkeypatch):
    """method="exact" gave CP-SAT the whole budget after the start's search had charged its part: over budget."""
    p = _pods(2, 8, bad=[4])
    assert startpoint.applies([p])
    seen = {}
    real = portfolio.solve_exact

    def spy(probs, *, time_limit_s, **kw):
        seen["budget"] = time_limit_s
        return real(probs, time_limit_s=time_limit_s, **kw)
    monkeypatch.setattr(portfolio, "solve_exact", spy)
    with work.metered() as m:
        startpoint.initial([p])
    assert m.used_s > 0
    portfolio.solve([p], time_limit_s=1.0, seed=0, method="exact")
    assert seen["budget"] == pytest.approx(work.WORK_PER_S * 1.0 - m.used_s, rel=1e-12)


def test_a_start_with_one_way_back_is_searched_in_few_nodes():
    """16 nodes, racks of 4; nodes 0 and 3 (rack 0) only reach their rack-mates, everyone else reaches everyone
    else. A cycle exists (1 - 0 - 3 - 2 inside rack 0), and the search starts at node 0, which has only one free
    neighbour left to close the cycle once it has left: kept for last, the search needs few nodes (it once ran 1M
    without a cycle)."""
    K = 16
    rack = np.arange(K) // 4
    adj = np.ones((K, K), dtype=bool)
    for v in (0, 3):
        adj[v] = adj[:, v] = rack == 0
    np.fill_diagonal(adj, False)
    masks = [int(sum(1 << w for w in np.flatnonzero(adj[v]))) for v in range(K)]
    cyc, used = startpoint._cycle(masks, K, startpoint.DFS_NODES)
    assert cyc is not None and used < 100
    assert sorted(cyc) == list(range(K)) and all(adj[cyc[k], cyc[(k + 1) % K]] for k in range(K))
