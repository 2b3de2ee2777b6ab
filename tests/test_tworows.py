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
    assert 1 <= calls and m.used_s >= calls * (work.CPSAT_CALL_WORK_S + work.ROWS2_MODEL_WORK_S)
    assert m.used_s <= 1.0 + tworows.CALL_DTIME + 0.2
    assert p.objective(b) <= p.objective(a) and (moved == 0) == np.array_equal(a, b)
    b2, _, _ = tworows.improve(p, a, budget_s=1.0)
    assert np.array_equal(b, b2)
    assert tworows.applies(p) and not tworows.applies([p, p])
