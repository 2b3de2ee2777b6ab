"""lns.py: the assignment problem of a step scores every placement exactly, a step never makes the plan worse,
the search is deterministic and charges its work."""
import itertools
import os
import sys

import numpy as np
import pytest

from planner.mapping import lns, work
from planner.mapping.problem import Layout, MappingProblem

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from mapping_family import family_problem


def _rich(R, K, N, seed):
    """A problem with every term the tables cover: wrap hop, tied embedding, per-row dp_base, spare nodes."""
    rng = np.random.default_rng(seed)
    hop, wrap, emb = (rng.uniform(1.0, 2.0, (N, N)) for _ in range(3))
    dp = rng.uniform(1.0, 3.0, (R, N, N))
    return MappingProblem(Layout(1, 1, R, K), np.arange(N), hop, wrap, rng.uniform(0.0, 0.5, R), dp, 0.7, emb)


@pytest.mark.parametrize("R,K,N,seed,double", [(3, 4, 14, 0, 0.0), (2, 3, 6, 1, 0.5), (4, 3, 13, 2, 0.0),
                                                (1, 5, 7, 3, 0.5), (5, 3, 15, 4, 1.0), (4, 4, 17, 5, 1.0)])
def test_tables_score_every_placement(R, K, N, seed, double, monkeypatch):
    """Exactly with one freed position per column; an upper bound with two."""
    monkeypatch.setattr(lns, "DOUBLE_SHARE", double)
    p = _rich(R, K, N, seed)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(N)
    a, spares = perm[:R * K].reshape(R, K), np.sort(perm[R * K:])
    F = lns._free(R, K, int(rng.integers(R)), int(rng.integers(K)), rng.random(lns.PER_COLUMN * K + 1))
    tb = lns.tables(p, a, F, spares)
    g = len(tb.cs)
    two = F.sum(axis=0).max() == 2
    assert g >= 1 and two == (double == 1.0)
    for sigma in itertools.islice(itertools.permutations(range(len(tb.xs))), 300):
        b = a.copy()
        for slot, x in enumerate(sigma):
            if slot < g:
                b[tb.rs[slot], tb.cs[slot]] = tb.xs[x]
        idx = (np.arange(len(sigma)), np.array(sigma))
        pm = max(tb.P0, tb.pc[idx].max()) if R > 1 else 0.0
        dm, em = max(tb.D0, tb.rc[idx].max()), max(tb.E0, tb.ec[idx].max())
        scored = p.const + pm + dm + (em if np.isfinite(em) else 0.0)
        if two:
            assert scored >= p.objective(b) - 1e-12
        else:
            assert scored == pytest.approx(p.objective(b), rel=1e-12)


def test_freed_positions_are_never_neighbours():
    rng = np.random.default_rng(0)
    for R, K in [(2, 3), (2, 5), (3, 8), (8, 16), (1, 6), (5, 4)]:
        for _ in range(20):
            ci, cj = int(rng.integers(R)), int(rng.integers(K))
            F = lns._free(R, K, ci, cj, rng.random(lns.PER_COLUMN * K + 1))
            assert F[ci, cj]
            assert not (F & np.roll(F, -1, axis=1)).any()                # ring neighbours
            assert not (F[1:] & F[:-1]).any() and F.sum(axis=0).max() <= lns.PER_COLUMN   # column neighbours
            assert not (R > 1 and (F[0] & F[R - 1]).any())                # the wrap hop / embedding pair


@pytest.mark.parametrize("R,K,N,seed", [(4, 8, 32, 5), (3, 5, 18, 6)])
def test_never_worse_and_deterministic(R, K, N, seed):
    p = family_problem(R, K, seed) if N == R * K else _rich(R, K, N, seed)
    start = np.random.default_rng(seed).permutation(N)[:R * K].reshape(R, K)
    with work.metered() as m:
        a, moved = lns.improve(p, start, steps=150, seed=1)
    b, _ = lns.improve(p, start, steps=150, seed=1)
    assert np.array_equal(a, b)
    p.check(a)
    assert moved > 0 and p.objective(a) < p.objective(start)
    assert m.used_s > 0
    # and from its own result it never gets worse, step by step
    v = p.objective(a)
    for k in range(20):
        a, _ = lns.improve(p, a, steps=5, seed=k)
        assert p.objective(a) <= v
        v = p.objective(a)
