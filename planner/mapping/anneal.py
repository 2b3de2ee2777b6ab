"""Simulated annealing over the same objective as the exact solver (MappingProblem.objective).

The state is Pipette's "string": a permutation of all candidate nodes whose first R*K entries
hold the blocks in rank order (the rest are spare nodes). Moves: migrate (remove one element
and insert it elsewhere), swap, reverse a substring (Pipette §IV), plus targeted swaps that move
a block of the current critical column or row (ours). Deterministic: an iteration budget and a
seeded generator; the wall-clock limit is only a safety stop.
"""
from __future__ import annotations

import math
import time

import numpy as np

from planner import interrupt
from planner.mapping import work
from planner.mapping.problem import MappingProblem, robust_lower_bound, robust_objective
from planner.mapping.result import MappingResult

T_START_SCALE = 2.0        # initial temperature: this many times the mean |delta| of 30 random moves
T_END_RATIO = 1e-4         # final / initial temperature (geometric cooling over the iteration budget)
TARGETED_SHARE = 0.3       # of the moves: a block of the critical column or row swapped elsewhere


def default_iterations(problem: MappingProblem) -> int:
    return int(min(60000, 2000 + 300 * problem.n))


def anneal(problems, *, seed: int = 0, iterations: int | None = None, time_limit_s: float = 60.0,
           init: np.ndarray | None = None, robust: str = "worst", style: str = "planner",
           alpha: float = 0.999, cooling: str = "iterations") -> MappingResult:
    """style="planner": our schedule (geometric cooling over the iteration budget, targeted moves);
    style="pipette": Pipette's published settings (T *= alpha each step, random moves, run to the time limit).
    cooling="time": temperature follows elapsed / time_limit instead of the iteration count (equal-time
    benchmarks; not deterministic)."""
    probs = problems if isinstance(problems, list) else [problems]
    p0 = probs[0]
    R, K, N = p0.layout.rows, p0.layout.cols, p0.n
    nb = R * K
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    s = np.arange(N)
    if init is not None:
        used = init.ravel().tolist()
        s = np.array(used + [n for n in range(N) if n not in set(used)])
    if nb == 1 and N == 1:
        a = s[:1].reshape(1, 1)
        v = robust_objective(probs, a, robust)
        return MappingResult(a, v, p0.lower_bound(), "HEURISTIC", 0.0, "anneal")

    def val(state):
        return robust_objective(probs, state[:nb].reshape(R, K), robust)

    cur = val(s)
    best, best_s = cur, s.copy()
    # initial temperature from the spread of random move deltas
    deltas = []
    for _ in range(30):
        deltas.append(abs(val(_random_move(s, rng, N)) - cur))
    t_start = (np.mean(deltas) or 1e-6) * T_START_SCALE
    if style == "pipette":
        iterations = iterations or 10 ** 9          # runs until its time limit, as published
    else:
        iterations = iterations or default_iterations(p0)
    t_end = t_start * T_END_RATIO
    cool = (t_end / t_start) ** (1.0 / max(1, iterations)) if style == "planner" else alpha
    temp = t_start
    ran = 0
    for it in range(iterations):
        if (it & 255) == 0 and (time.perf_counter() - t0 > time_limit_s or interrupt.requested()):
            if not interrupt.requested():
                work.note_wall()        # the clock, not the iteration budget, ended it
            break
        ran = it + 1
        if style == "planner" and rng.random() < TARGETED_SHARE:
            cand = _targeted_move(s, rng, probs[0], R, K, N)
        else:
            cand = _random_move(s, rng, N)
        v = val(cand)
        if v <= cur or rng.random() < math.exp(-(v - cur) / max(temp, 1e-15)):
            s, cur = cand, v
            if v < best:
                best, best_s = v, cand.copy()
        if cooling == "time" and style == "planner":
            if (it & 63) == 0:
                frac = min(1.0, (time.perf_counter() - t0) / time_limit_s)
                temp = t_start * (t_end / t_start) ** frac
        else:
            temp *= cool
    work.charge(work.anneal_work(ran, R, len(probs)))      # the iterations run (all of them unless the wall stop fired)
    a = best_s[:nb].reshape(R, K)
    bound = robust_lower_bound(probs, robust)
    return MappingResult(a.copy(), best, min(bound, best), "HEURISTIC", time.perf_counter() - t0,
                         "anneal" if style == "planner" else "anneal-pipette")


def _random_move(s, rng, N):
    c = s.copy()
    i, j = rng.integers(0, N, size=2)
    if i == j:
        j = (i + 1) % N
    kind = rng.integers(0, 3)
    if kind == 0:                       # swap
        c[i], c[j] = c[j], c[i]
    elif kind == 1:                     # migrate: remove at i, insert at j
        c = _migrate(s, i, j)
    else:                               # reverse substring
        lo, hi = min(i, j), max(i, j)
        c[lo:hi + 1] = c[lo:hi + 1][::-1]
    return c


def _migrate(s, i, j):
    """np.insert(np.delete(s, i), j, s[i]) by slicing (the two calls cost more than the rest of an iteration)."""
    c = s.copy()
    if i < j:
        c[i:j] = s[i + 1:j + 1]
    else:
        c[j + 1:i + 1] = s[j:i]
    c[j] = s[i]
    return c


def _targeted_move(s, rng, p: MappingProblem, R, K, N):
    """Swap a block of the critical column (slowest path) or critical row (slowest ring) elsewhere."""
    a = s[:R * K].reshape(R, K)
    c = s.copy()
    if rng.random() < 0.5 and R > 1:
        j = int(np.argmax(p.path_costs(a)))
        i = int(rng.integers(0, R))
        src = i * K + j
    else:
        i = int(np.argmax(p.dp_costs(a)))
        src = i * K + int(rng.integers(0, K))
    dst = int(rng.integers(0, N))
    if dst == src:
        dst = (dst + 1) % N
    c[src], c[dst] = c[dst], c[src]
    return c
