"""A check the pace tests share: the annealer's incremental scorer against the full objective."""
import numpy as np
import pytest

from planner.mapping.incremental import SwapEvaluator


def assert_swaps_track_objective(prob, swaps: int = 200, seed: int = 7):
    """The annealer's incremental scorer (SwapEvaluator) equals prob.objective after every proposed swap and every
    accepted one, from a random string (the pace's and the steep pace's tests share it)."""
    n, blocks = prob.n, prob.layout.blocks
    R, K = prob.layout.rows, prob.layout.cols
    rng = np.random.default_rng(seed)
    ev = SwapEvaluator([prob], list(rng.permutation(n)), tie_level=0.9)
    for _ in range(swaps):
        p, q = (int(x) for x in rng.choice(n, 2, replace=False))
        v = ev.propose_swap(p, q)
        s = list(ev.state)
        s[p], s[q] = s[q], s[p]
        assert v == pytest.approx(prob.objective(np.array(s[:blocks]).reshape(R, K)), rel=1e-12, abs=1e-15)
        if rng.random() < 0.5:
            ev.accept()
        assert ev.value == pytest.approx(prob.objective(np.array(ev.state[:blocks]).reshape(R, K)),
                                         rel=1e-12, abs=1e-15)
