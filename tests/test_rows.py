"""The row decomposition (planner/mapping/rows.py): its cycles are the rings under the cap, and solve_rows' answers
and bounds equal brute force over the integer objective on tiny grids that use every node (per-row ring tables and
bases, asymmetric hops, the wrap hop, tied embeddings), under any limit and any budget."""
import itertools

import numpy as np
import pytest

from planner.mapping import rows
from planner.mapping.bounds import emb_floor, path_lower_bound_int
from planner.mapping.bruteforce import int_objectives
from planner.mapping.cpsat import solve_exact
from planner.mapping.problem import Layout, MappingProblem
from planner.mapping.units import int_objective


def _problem(R, K, seed, wrap=False, emb=False):
    """A random grid of R x K blocks on R x K nodes; costs in seconds (units of 0.1 us). Ring tables differ per
    row, and so do the rows' bases (slack); hops are asymmetric."""
    rng = np.random.default_rng(seed)
    N = R * K

    def mat(lo, hi):
        m = rng.uniform(lo, hi, size=(N, N)) * 1e-3
        np.fill_diagonal(m, 0.0)
        return m
    link = np.stack([mat(60, 80) for _ in range(R)])
    base = rng.choice([0.0, 0.0, 0.004, 0.01], size=R)
    return MappingProblem(Layout(1, 1, R, K), np.arange(N), mat(4, 6), mat(3, 5) if wrap else None, base, link,
                          0.0, mat(1, 3) if emb else None)


CASES = [(2, 2, 0, False, False), (2, 3, 1, False, False), (3, 2, 2, True, False), (2, 4, 3, False, True),
         (4, 2, 4, False, False), (2, 4, 5, True, True), (4, 2, 6, False, True), (3, 2, 7, False, False)]


@pytest.mark.parametrize("R,K,seed,wrap,emb", CASES)
def test_solve_rows_equals_brute_force(R, K, seed, wrap, emb, monkeypatch):
    """From a random placement's value it finds the optimum and proves it; asked for better than the optimum it
    finds nothing and says so; with a path bound of 0 or a real one; cut short by its budget, its bound stays valid.
    Odd seeds slice the ring from its lowest level up (one level more per slice at first)."""
    if seed % 2:
        monkeypatch.setattr(rows, "SLICE_FIRST", 0)
    p = _problem(R, K, seed, wrap, emb)
    vals, _ = int_objectives(p)
    opt = int(vals.min())
    ef = emb_floor(p)
    start = int_objective(p, np.random.default_rng(seed).permutation(R * K).reshape(R, K))
    for plb in (0, path_lower_bound_int(p, 0.2)):
        for limit in (start, opt, opt - 1):
            out = rows.solve_rows(p, limit, plb, 30.0, ef)
            assert out is not None and out.proved
            if limit >= opt:
                assert out.value == opt == int_objective(p, out.assign)
                p.check(out.assign)
            else:
                assert out.assign is None and out.bound == limit + 1
        for budget in (0.0, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3):
            short = rows.solve_rows(p, start, plb, budget, ef)
            assert short is None or short.bound <= opt
            assert short is None or short.assign is None or short.value == int_objective(p, short.assign)


def test_partitions_too_large_to_search_stay_open(monkeypatch):
    """A partition whose arrangements exceed the step cap is not searched: the answer is not proved and the bound
    stays at most the optimum."""
    monkeypatch.setattr(rows, "STEP_CAP", 1)
    for R, K, seed, wrap, emb in CASES[:5]:
        p = _problem(R, K, seed, wrap, emb)
        opt = int(int_objectives(p)[0].min())
        out = rows.solve_rows(p, int_objective(p, p.rank_order()), 0, 30.0, emb_floor(p))
        assert not out.proved and out.bound <= opt


def test_cycles_are_the_rings_under_the_cap():
    """Every K-set's cyclic orders (up to rotation and reflection) whose links fit some row's cap, each once, with
    its slowest link per row."""
    p = _problem(2, 4, 11)
    link = rows.ring_tables(p)
    for cap in np.quantile(link[:, ~np.eye(8, dtype=bool)], [0.2, 0.5, 0.9]).astype(int):
        P, val = rows.cycles_under(link, 4, int(cap))
        got = {tuple(c) for c in P.tolist()}
        want = set()
        for S in itertools.combinations(range(8), 4):
            for o in itertools.permutations(S[1:]):
                c = (S[0],) + o
                if c[1] > c[-1]:
                    continue
                v = [max(link[i][c[j], c[(j + 1) % 4]] for j in range(4)) for i in range(2)]
                if min(v) <= cap:
                    want.add(c)
        assert got == want
        for c, v in zip(P.tolist(), val.T.tolist(), strict=True):
            assert v == [max(int(link[i][c[j], c[(j + 1) % 4]]) for j in range(4)) for i in range(2)]


def test_solve_exact_proves_through_the_rows(monkeypatch):
    """solve_exact answers from the decomposition (OPTIMAL, the brute-force optimum) and, with the optimum as the
    cutoff, prunes."""
    import planner.mapping.cpsat as C
    calls = []
    orig = rows.solve_rows

    def spy(*a, **k):
        out = orig(*a, **k)
        calls.append(out is not None and out.proved)
        return out
    monkeypatch.setattr(C.rows, "solve_rows", spy)
    p = _problem(2, 4, 9, emb=True)
    vals, _ = int_objectives(p)
    ex = solve_exact(p, time_limit_s=5, hint=p.rank_order(), wall_limit_s=30)
    assert ex.status == "OPTIMAL" and int_objective(p, ex.assign) == int(vals.min())
    best = p.objective(ex.assign)
    assert ex.bound <= best
    assert solve_exact(p, time_limit_s=5, hint=p.rank_order(), cutoff=best, wall_limit_s=30).status == "PRUNED"
    assert calls == [True, True]

