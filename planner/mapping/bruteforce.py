"""Exhaustive search over all block placements: the reference for tests on tiny instances."""
from __future__ import annotations

import itertools

import numpy as np

from planner.mapping.problem import MappingProblem


def brute_force(problem: MappingProblem) -> tuple[float, np.ndarray]:
    R, K, N = problem.layout.rows, problem.layout.cols, problem.n
    best, best_a = float("inf"), None
    for perm in itertools.permutations(range(N), R * K):
        a = np.array(perm).reshape(R, K)
        v = problem.objective(a)
        if v < best:
            best, best_a = v, a
    return best, best_a
