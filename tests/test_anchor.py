"""The weak nodes' pass (anchor.py): a node with few fast peers (a degraded NIC) given them as ring and column
neighbours."""
import itertools

import numpy as np
import pytest
from test_startpoint import _pods

from planner.mapping import anchor, portfolio, startpoint, work
from planner.mapping.problem import Layout, MappingProblem


def _brute(adj, K, pins):
    """Some order with the pins whose cyclic links are all in the graph (brute force), or None."""
    for perm in itertools.permutations(range(K)):
        if any(perm[c] != w for c, w in pins.items()):
            continue
        if all(adj[perm[t]] >> perm[(t + 1) % K] & 1 for t in range(K)):
            return perm
    return None


@pytest.mark.parametrize("K", [4, 5, 6])
def test_pinned_cycle_finds_a_cycle_with_the_pins_exactly_when_one_exists(K):
    rng = np.random.default_rng(K)
    for _ in range(60):
        g = rng.uniform(size=(K, K)) < rng.uniform(0.4, 0.9)
        g = (g | g.T) & ~np.eye(K, dtype=bool)
        adj = [int(sum(1 << w for w in range(K) if g[u, w])) for u in range(K)]
        cols = rng.choice(K, size=int(rng.integers(1, 3)), replace=False)
        nodes = rng.choice(K, size=len(cols), replace=False)
        pins = {int(c): int(w) for c, w in zip(cols, nodes)}
        out, used = anchor._pinned_cycle(adj, K, pins, 10 ** 6)
        want = _brute(adj, K, pins)
        assert (out is None) == (want is None) and used > 0
        if out is not None:
            assert sorted(out) == list(range(K))
            assert all(out[c] == w for c, w in pins.items())
            assert all(g[out[t], out[(t + 1) % K]] for t in range(K))


def test_weak_nodes_are_the_degraded_ones_and_none_on_uniform_links():
    p = _pods(4, 8, bad=[4, 21])
    assert anchor.weak_nodes(p) == [4, 21] and anchor.applies([p])
    rng = np.random.default_rng(1)
    bw = 25 * (1 - rng.uniform(0, 0.25, (32, 32)))
    np.fill_diagonal(bw, np.inf)
    q = MappingProblem(Layout(1, 1, 4, 8), np.arange(32), 0.05 / bw + 0.05 / bw.T, None, np.zeros(4),
                       np.broadcast_to(1.75 / bw, (4, 32, 32)).copy(), 0.0)
    assert anchor.weak_nodes(q) == [] and not anchor.applies([q])
    assert portfolio._anchor_work(10, [q]) == 0.0      # nothing reserved there: the annealer's iterations as before


@pytest.mark.parametrize("bad", [4, 13, 21])
def test_a_degraded_node_gets_rack_mates_as_ring_and_column_neighbours(bad):
    """The start (whole racks in rows, each ring in its best order) puts the degraded node between two rack-mates
    but under / over nodes of other racks: its column takes one or two slow hops. The pass brings a rack-mate into its
    column and keeps its ring neighbours rack-mates; the plan is a valid placement, cheaper, and the same twice."""
    p = _pods(4, 8, bad=[bad])
    a = startpoint.initial([p])
    rack = lambda n: int(n) // 4   # noqa: E731
    with work.metered() as m:
        b, moved = anchor.improve([p], a)
    b2, _ = anchor.improve([p], a.copy())
    p.check(b)
    assert moved and np.array_equal(b, b2) and m.used_s > 0
    assert p.objective(b) < p.objective(a)
    (i, j), = np.argwhere(b == bad)
    K, R = b.shape[1], b.shape[0]
    assert rack(b[i, (j - 1) % K]) == rack(bad) == rack(b[i, (j + 1) % K])
    assert any(rack(b[i2, j]) == rack(bad) for i2 in (i - 1, i + 1) if 0 <= i2 < R)
    (i0, j0), = np.argwhere(a == bad)
    assert not any(rack(a[i2, j0]) == rack(bad) for i2 in (i0 - 1, i0 + 1) if 0 <= i2 < R)    # the start had none


def test_never_worse_and_within_its_budget():
    p = _pods(4, 8, bad=[4, 13, 21])
    a = startpoint.initial([p])
    per = anchor.candidate_work(8)
    with work.metered() as m:
        b, moved = anchor.improve([p], a, budget_s=0.5 * per)       # not one candidate affordable
    assert not moved and b is a and m.used_s == 0
    for budget in (2 * per, 5 * per, 1.0):
        with work.metered() as m:
            b, _ = anchor.improve([p], a, budget_s=budget)
        assert m.used_s <= budget and p.objective(b) <= p.objective(a)


def test_the_portfolio_runs_it_on_its_reserved_work():
    p = _pods(4, 8, bad=[13])
    iters_with = portfolio.work_budget(5, [p])[0]
    r = portfolio.solve([p], time_limit_s=5, seed=0)
    assert "anchor_moves" in r.work and r.work_s <= work.WORK_PER_S * 5 * 1.0001
    saved = portfolio.ANCHOR_SHARE
    try:
        portfolio.ANCHOR_SHARE = 0.0
        assert portfolio.work_budget(5, [p])[0] > iters_with     # the reservation came off the annealer's share
    finally:
        portfolio.ANCHOR_SHARE = saved


@pytest.mark.parametrize("seed", range(6))
def test_every_plan_it_returns_is_a_placement(seed):
    """Random starts on instances with several degraded nodes (some sharing a rack): whatever the moves (a peer from
    another row, or from the target row itself), the result holds every node once and is never worse."""
    rng = np.random.default_rng(seed)
    bad = sorted(rng.choice(32, size=4, replace=False).tolist())
    p = _pods(4, 8, bad=bad, seed=seed)
    for a in (startpoint.initial([p]), rng.permutation(32).reshape(4, 8)):
        b, moved = anchor.improve([p], a)
        p.check(b)
        assert sorted(b.ravel().tolist()) == sorted(a.ravel().tolist())
        assert p.objective(b) <= p.objective(a) and moved == (p.objective(b) < p.objective(a))


def test_the_charge_follows_the_row_width(monkeypatch):
    """A node of the pinned search scans the row's free nodes, so on 32 columns it costs about four times what it
    does on 8 (measured 9 us against 3 us): the charge per node scales with K / 8 above 8 columns (it was flat, and a
    16 x 32 pass took 1.4-2.4 s of wall per work second charged), and the entry (the weak nodes' sort of all n^2
    hops) is charged too."""
    p = _pods(4, 32, bad=[5, 40, 77, 100], seed=1)
    a = startpoint.initial([p])
    nodes = []
    search = anchor._pinned_cycle

    def counted(*args):
        out, used = search(*args)
        nodes.append(used)
        return out, used

    monkeypatch.setattr(anchor, "_pinned_cycle", counted)
    with work.metered() as m:
        anchor.improve([p], a, budget_s=0.5)
    assert sum(nodes) > 0
    assert m.used_s >= sum(nodes) * work.ANCHOR_NODE_WORK_S * 32 / 8 + work.ANCHOR_PAIR_WORK_S * p.n ** 2 - 1e-12
    assert m.used_s <= 0.5
