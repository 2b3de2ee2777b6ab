"""Closed-form facts about pipeline schedules, shared by the latency model and the memory model.

The op-level simulator (planner.simulate) is the judge of these formulas; tests check them
against it. Times are per micro-batch for *all* layers a device holds (all its chunks):
f = forward, b = backward (input grad + weight grad, recompute included), w = weight-grad part of b.
"""
from __future__ import annotations

import math

from planner.config import V_SHAPES


def chunks_per_device(schedule: str, vpp: int) -> int:
    if schedule == "interleaved":
        return vpp
    if schedule in V_SHAPES:
        return 2
    return 1


def compute_time(schedule: str, pp: int, m: int, v: int, f: float, b: float, w: float) -> float:
    """Iteration compute time of the slowest device, pipeline bubbles included, no communication."""
    if pp == 1:
        return m * (f + b)
    if schedule in ("gpipe", "1f1b"):
        return (m + pp - 1) * (f + b)
    if schedule == "interleaved":
        return m * (f + b) + (pp - 1) * (f + b) / v
    if schedule == "zb-h1":
        return m * (f + b) + (pp - 1) * max(f + b - 2 * w, 0.0)
    # V-shape (seed 001): two chunks per device in a V; bubbles shrink as memory grows.
    half_f, half_b, half_w = f / 2, b / 2, w / 2
    if schedule == "v-zb":
        return m * (f + b) + (pp - 1) * max(half_f + half_b - 2 * half_w, 0.0) / 2
    if schedule == "v-half":
        return m * (f + b) + (pp - 1) * max(half_f + half_b - 2 * half_w, 0.0)
    if schedule == "v-min":
        return m * (f + b) + (pp - 1) * (half_f + half_b)
    raise ValueError(f"unknown schedule {schedule!r}")


def inflight_microbatches(schedule: str, pp: int, m: int, v: int, stage: int) -> float:
    """Activations a device holds at its peak, in micro-batches of its full layer set."""
    if schedule == "gpipe":
        return float(m)
    if schedule in ("1f1b", "zb-h1"):
        return float(min(pp - stage, m))
    if schedule == "interleaved":
        chunks = (v - 1) * pp + 2 * (pp - stage - 1) + 1   # Megatron warm-up count, plus the one in flight
        return min(chunks, m * v) / v
    # V-shape: balanced across devices; fractions of 1F1B's first-stage peak (pp) per seed 001.
    frac = {"v-zb": 1.0, "v-half": 0.5, "v-min": 1.0 / 3.0}[schedule]
    return float(min(m, math.ceil(frac * pp) + (0 if schedule == "v-zb" else 1)))


def p2p_hops(schedule: str, pp: int, v: int) -> tuple[int, int]:
    """(traversals of the stage 0 -> pp-1 path, wrap-around hops pp-1 -> 0) per micro-batch, one direction."""
    if schedule == "interleaved":
        return v, v - 1
    if schedule in V_SHAPES:
        return 2, 0        # down the V and back up the same links, the turn is on one device
    return 1, 0
