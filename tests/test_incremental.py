"""The incremental swap evaluator (mapping/incremental.py) equals robust_objective after every swap."""
import numpy as np
import pytest

from planner.mapping.incremental import SwapEvaluator
from planner.mapping.problem import Layout, MappingProblem, robust_objective


def _problem(rng, R, K, N, wrap, emb):
    def mat():
        return rng.uniform(0.1, 2.0, size=(N, N))
    return MappingProblem(Layout(1, 1, R, K), np.arange(N), mat(), mat() if wrap else None,
                          rng.uniform(0.0, 1.0, size=R), rng.uniform(0.1, 2.0, size=(R, N, N)),
                          float(rng.uniform(1, 5)), mat() if emb else None)


@pytest.mark.parametrize("robust", ["worst", "mean"])
@pytest.mark.parametrize("scenarios", [1, 3])
@pytest.mark.parametrize("R,K,spare,wrap,emb", [(3, 4, 2, True, True), (4, 2, 0, False, True),
                                                (1, 5, 1, False, False), (5, 1, 2, True, False),
                                                (2, 3, 3, True, True)])
def test_swaps_match_robust_objective(robust, scenarios, R, K, spare, wrap, emb):
    rng = np.random.default_rng(R * 100 + K * 10 + spare + scenarios)
    N = R * K + spare
    probs = [_problem(rng, R, K, N, wrap, emb) for _ in range(scenarios)]
    s = rng.permutation(N)
    ev = SwapEvaluator(probs, s, robust, tie_level=0.9)
    assert ev.value == pytest.approx(robust_objective(probs, s[:R * K].reshape(R, K), robust), rel=1e-12)
    for _ in range(300):
        p, q = rng.choice(N, size=2, replace=False)
        v = ev.propose_swap(int(p), int(q))
        c = s.copy()
        c[p], c[q] = c[q], c[p]
        assert v == pytest.approx(robust_objective(probs, c[:R * K].reshape(R, K), robust), rel=1e-12)
        if rng.random() < 0.5:
            ev.accept()
            s = c
        assert ev.state == s.tolist()
        assert ev.value == pytest.approx(robust_objective(probs, s[:R * K].reshape(R, K), robust), rel=1e-12)
    a = s[:R * K].reshape(R, K)
    assert ev.tie == pytest.approx(sum(_excess(x.path_costs(a)) + _excess(x.dp_costs(a)) for x in probs), abs=1e-9)
    path = probs[0].path_costs(a)
    if R > 1:
        assert path[ev.critical_column()] == path.max() or scenarios > 1


def _excess(v, level=0.9):
    return float(np.clip(v - level * v.max(), 0.0, None).sum())
