"""Checks the pace tests share (1F1B's lock step, interleaved's steep pace): the annealer's incremental scorer against
the full objective, and the exact model against brute force with every bound under the optimum."""
import numpy as np
import pytest

from planner.mapping.cpsat import solve_exact
from planner.mapping.incremental import SwapEvaluator
from planner.mapping.units import int_pace, int_pace_floor


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


def assert_exact_is_the_optimum(prob, best: float, best_a: np.ndarray):
    """CP-SAT proves brute force's optimum `best` (placement best_a), and every bound stays under it: CP-SAT's, the
    problem's cheap lower bound, the pace's floor in floats and in integer units."""
    ex = solve_exact(prob, time_limit_s=20)
    assert ex.status == "OPTIMAL"
    assert ex.objective == pytest.approx(best, rel=1e-9)
    assert ex.bound <= best + 1e-9
    assert prob.lower_bound() <= best + 1e-12
    assert int_pace_floor(prob) <= int(int_pace(prob, best_a).min())
    assert prob.pace.floor() <= float(prob.pace.costs(best_a).min()) + 1e-15
