"""Event/dependency-driven timing of a schedule: start and end of every operation, and memory.

Every op has at most two predecessors: the previous op of its device (device order) and one data
predecessor (the op whose output it consumes), with an edge latency (the p2p send on the mapped link,
zero on the same device). The engine walks devices with a ready stack: a device runs its list until it
meets an op whose data predecessor has not ended, registers itself as that op's waiter and yields;
the predecessor's end wakes it. Every op is touched once, so the cost is O(ops) in plain Python on
flat lists; dependency arrays are built with numpy. Ops left when no device can move = deadlock.

Memory needs no timing: a device's ops are sequential, so its live activations are the prefix sum
of (allocated at op start) - (freed at op end) in device order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.simulator.ops import B, F, R, Schedule, W


class DeadlockError(RuntimeError):
    pass


@dataclass(frozen=True)
class Graph:
    """Flat arrays over all ops, device-major (device d's ops are offs[d]:offs[d+1])."""
    offs: np.ndarray
    dev: np.ndarray
    kind: np.ndarray
    mb: np.ndarray
    chunk: np.ndarray
    stage: np.ndarray
    pred: np.ndarray        # index of the data predecessor, -1 if none
    edge: np.ndarray        # latency of the pred edge: 0 none, 1 forward into stage, 2 backward into stage


def build_graph(sched: Schedule) -> Graph:
    p, m, S = sched.p, sched.m, sched.stages
    lens = np.array([len(k) for k in sched.kinds])
    offs = np.zeros(p + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    N = int(offs[-1])
    kind = np.concatenate(sched.kinds).astype(np.int64)
    mb = np.concatenate(sched.mbs).astype(np.int64)
    chunk = np.concatenate(sched.chunks).astype(np.int64)
    dev = np.repeat(np.arange(p), lens)
    stage = sched.stage_of()[dev, chunk]
    idx = np.full((4, S, m), -1, np.int64)
    idx[kind, stage, mb] = np.arange(N)
    # every (kind, stage, micro-batch) the schedule needs must appear exactly once
    need = [F, B] + ([W] if sched.split else []) + ([R] if sched.recompute else [])
    counts = np.zeros((4, S, m), np.int64)
    np.add.at(counts, (kind, stage, mb), 1)
    for k in range(4):
        want = 1 if k in need else 0
        if not np.all(counts[k] == want):
            raise ValueError(f"schedule {sched.name}: op {'FBWR'[k]} missing or repeated")
    pred = np.full(N, -1, np.int64)
    edge = np.zeros(N, np.int64)
    isf = kind == F
    fm = isf & (stage > 0)
    pred[fm] = idx[F, stage[fm] - 1, mb[fm]]
    edge[fm] = 1
    # the op that receives the output gradient of stage s (B of s+1, or the loss after F on the last stage)
    isb = kind == B
    grad_src = np.where(stage < S - 1, idx[B, np.minimum(stage + 1, S - 1), mb], idx[F, S - 1, mb])
    grad_edge = np.where(stage < S - 1, 2, 0)
    if sched.recompute:
        isr = kind == R
        if sched.early_recompute:       # R only needs its own forward; B waits for the gradient
            pred[isr] = idx[F, stage[isr], mb[isr]]
            pred[isb], edge[isb] = grad_src[isb], grad_edge[isb]
        else:                           # Megatron: recompute starts when the gradient arrives
            pred[isr], edge[isr] = grad_src[isr], grad_edge[isr]
            pred[isb] = idx[R, stage[isb], mb[isb]]
    else:
        pred[isb], edge[isb] = grad_src[isb], grad_edge[isb]
    isw = kind == W
    pred[isw] = idx[B, stage[isw], mb[isw]]
    return Graph(offs, dev, kind, mb, chunk, stage, pred, edge)


def run(offs: list, pred: list, lat: list, dur: list) -> tuple[list, list]:
    """Start and end of every op. offs/pred/lat/dur are plain lists (fast indexing)."""
    D = len(offs) - 1
    N = offs[-1]
    end = [-1.0] * N
    start = [0.0] * N
    waiter = [-1] * N
    ptr = offs[:-1]
    stop = offs[1:]
    free = [0.0] * D
    stack = list(range(D - 1, -1, -1))
    while stack:
        d = stack.pop()
        i = ptr[d]
        e = stop[d]
        t = free[d]
        while i < e:
            p = pred[i]
            if p >= 0:
                pe = end[p]
                if pe < 0.0:
                    waiter[p] = d
                    break
                pe += lat[i]
                if pe > t:
                    t = pe
            start[i] = t
            t += dur[i]
            end[i] = t
            w = waiter[i]
            if w >= 0:
                stack.append(w)
            i += 1
        ptr[d] = i
        free[d] = t
    left = [d for d in range(D) if ptr[d] < stop[d]]
    if left:
        d = left[0]
        raise DeadlockError(f"deadlock: devices {left[:8]} stuck; device {d} waits at op {ptr[d] - offs[d]}")
    return start, end


def memory_deltas(g: Graph, split: bool, act: np.ndarray, transient: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(allocated at start, freed at end) per op, bytes. act/transient are (p, v) per chunk and micro-batch.
    transient is the backward's working set: held from the recompute op (R) to the end of its backward when the
    schedule has R ops, else during the backward alone."""
    a = act[g.dev, g.chunk]
    tr = transient[g.dev, g.chunk]
    isb = g.kind == B
    held_from = R if np.any(g.kind == R) else B
    alloc = np.where(g.kind == F, a, 0.0) + np.where(g.kind == held_from, tr, 0.0)
    free = np.zeros_like(alloc)
    # activations go with the last op that reads them: W when split, else B; the working set goes with B
    free[isb] = tr[isb] + (0.0 if split else a[isb])
    if split:
        isw = g.kind == W
        free[isw] = a[isw]
    return alloc, free


def peak_activation(g: Graph, alloc: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Per device: the most activation bytes live at once."""
    net = alloc - free
    cum = np.cumsum(net)
    before = cum - net                       # live before each op, counted from op 0 of device 0
    base = np.r_[0.0, cum][g.offs[:-1]]      # live before the device's first op
    level = before - np.repeat(base, np.diff(g.offs)) + alloc
    out = np.zeros(len(g.offs) - 1)
    np.maximum.at(out, g.dev, level)
    return out


def peak_inflight(g: Graph, split: bool, v: int) -> np.ndarray:
    """Per device: the peak of live activations in micro-batches of the device's whole layer set
    (each chunk counts 1/v), the unit of planner.schedules.inflight_microbatches."""
    p = len(g.offs) - 1
    alloc, free = memory_deltas(g, split, np.full((p, v), 1.0 / v), np.zeros((p, v)))
    return peak_activation(g, alloc, free)
