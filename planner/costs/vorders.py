"""The op orders and chunk placement that the estimate's walk (costs/vwalk.py), the closed forms (costs/pipeline.py)
and the simulator (simulator/orders.py, vblocks.py) share: seed 001's stable pattern of V-Min / V-Half, PyTorch's
ScheduleZBVZeroBubble order (torchtitan's V-ZB), 1F1B's and ZB-H1's orders, and how per-rank times go on a V's chunks.
A module of its own below both, so that the walk can take the simulator's order builders without an import cycle.
"""
from __future__ import annotations

import numpy as np

_F, _B, _W = 0, 1, 2       # simulator/ops.py's op kinds (asserted there: orders.py)


def pytorch_zbv_order(p: int, m: int) -> list:
    """PyTorch pipelining's ScheduleZBVZeroBubble order, which torchtitan runs for v-zb (ZeRO-3 plans): per rank a list
    of (kind 0 F / 1 B / 2 W, micro-batch, chunk), the paper's hand-made ZB-V (F = B = W), fixed whatever the real times
    (pytorch/pytorch@1fd7abc2 torch/distributed/pipelining/schedules.py, _calculate_single_rank_operations). Rank r:
    2(p - r) - 1 forwards of chunk 0, r pairs (F chunk 1, F chunk 0), p - r triples (F, B, W of chunk 1); then F0 B0
    W0 F1 B1 W1 per micro-batch; the cool-down r pairs (B0, B1), p - r pairs (B0, W0), the chunk-1 W's left, the
    chunk-0 W's left. Built for max(2p - 1, m) micro-batches, the ops of those beyond m dropped (as PyTorch replaces
    them by None): below 2p - 1 micro-batches the order keeps the holes. The replay (simulator/orders.py) and the
    estimate (vwalk.v_walk) both run it."""
    return [_pytorch_zbv_rank(p, r, m) for r in range(p)]


def _pytorch_zbv_rank(p: int, r: int, m: int) -> list:
    n = max(2 * p - 1, m)
    ops = []
    cnt = {"f0": 0, "f1": 0, "b0": 0, "b1": 0}

    def put(kind, c, key):
        ops.append((kind, cnt[key], c))
        cnt[key] += 1

    for _ in range(2 * (p - r) - 1):
        put(0, 0, "f0")
    for _ in range(r):
        put(0, 1, "f1")
        put(0, 0, "f0")
    for _ in range(p - r):
        put(0, 1, "f1")
        ops.append((1, cnt["b1"], 1))
        put(2, 1, "b1")
    while cnt["f1"] < cnt["f0"] or cnt["f0"] < n:
        if cnt["f0"] < n:
            put(0, 0, "f0")
        ops.append((1, cnt["b0"], 0))
        put(2, 0, "b0")
        put(0, 1, "f1")
        ops.append((1, cnt["b1"], 1))
        put(2, 1, "b1")
    w0, w1 = cnt["b0"], cnt["b1"]
    for _ in range(r):
        put(1, 0, "b0")
        put(1, 1, "b1")
    for _ in range(p - r):
        put(1, 0, "b0")
        ops.append((2, w0, 0))
        w0 += 1
    ops += [(2, j, 1) for j in range(w1, cnt["b1"])] + [(2, j, 0) for j in range(w0, cnt["b0"])]
    return [o for o in ops if o[1] < m]


def v_chunk_times(x) -> list:
    """Per-chunk times [(chunk 0, chunk 1) per device] of a V from per-rank times x (one of f, b, w), as the replay
    places them on even stages (simulator.replay._chunk_times): each chunk half of the lightest rank's time, the rest
    of a middle rank on its own chunks, rank 0's (embedding) on device 0's chunk 0, rank p - 1's (output layer and
    loss) on device 0's chunk 1, the last stage of the V."""
    x = list(map(float, x))
    p, base = len(x), min(x)
    out = [[base / 2, base / 2] for _ in range(p)]
    out[0][0] += x[0] - base
    out[0][1] += x[-1] - base
    for d in range(1, p - 1):
        out[d] = [t + (x[d] - base) / 2 for t in out[d]]
    return out


def stable_pattern(name: str, p: int) -> list:
    """Slots of micro-batch 0's [F chunk 0, F chunk 1, B chunk 1, B chunk 0] per device in seed 001's V-Min / V-Half
    steady state, micro-batch j at + 6j (zbv_greedy.py stable_pattern_v_min / stable_pattern_v_half @39f2c186); the
    order's builder (simulator/vblocks.py) reads it."""
    if name == "v-min":
        gap = 2 if p % 3 == 0 else 0
        return [[i, 2 * p - i - 1, 2 * p + gap + i, 4 * p + gap - i - 1] for i in range(p)]
    gap = 3 if p % 2 == 0 else 0
    return [[2 * i, 3 * p - i - 2, 3 * p + gap + 2 * i - 1, 6 * p + gap - i - 2] for i in range(p)]


def one_f_one_b_order(p: int, m: int) -> list:
    """1F1B's order: per device (kinds, micro-batches, chunks) arrays, F = 0 and B = 1 (simulator/ops.py)."""
    out = []
    for d in range(p):
        w = min(p - d - 1, m)
        steady = m - w
        kinds = np.empty(2 * m, np.int64)
        mbs = np.empty(2 * m, np.int64)
        kinds[:w] = _F
        mbs[:w] = np.arange(w)
        # steady state: F(w+k), B(k) for k < steady
        kinds[w:w + 2 * steady:2] = _F
        mbs[w:w + 2 * steady:2] = np.arange(w, m)
        kinds[w + 1:w + 2 * steady:2] = _B
        mbs[w + 1:w + 2 * steady:2] = np.arange(steady)
        kinds[w + 2 * steady:] = _B
        mbs[w + 2 * steady:] = np.arange(steady, m)
        out.append((kinds, mbs, np.zeros(2 * m, np.int64)))
    return out


def zb_h1_order(p: int, m: int) -> list:
    """ZB-H1 (zero-bubble paper): 1F1B's order of F and B, with W split off; stage i runs W(j) after
    B(j + i), so later stages (which hold fewer activations in 1F1B) delay their W into the bubbles
    while every stage holds at most p micro-batches, 1F1B's peak."""
    out = []
    for d, (kinds, mbs, _chs) in enumerate(one_f_one_b_order(p, m)):
        isb = kinds == _B
        nb = int(isb.sum())
        # after the k-th B comes W(k - d) when k >= d; the last d W's close the list
        extra = np.zeros(len(kinds), np.int64)
        bidx = np.flatnonzero(isb)
        k = np.arange(nb)
        has = k >= d
        extra[bidx[has]] = 1
        pos = np.arange(len(kinds)) + np.r_[0, np.cumsum(extra)[:-1]]
        n = len(kinds) + m
        nk = np.empty(n, np.int64)
        nm = np.empty(n, np.int64)
        nk[pos], nm[pos] = kinds, mbs
        wpos = pos[bidx[has]] + 1
        nk[wpos], nm[wpos] = _W, mbs[bidx[has]] - d
        tail = np.arange(n - (m - int(has.sum())), n)
        nk[tail], nm[tail] = _W, np.arange(m - len(tail), m)
        out.append((nk, nm, np.zeros(n, np.int64)))
    return out
