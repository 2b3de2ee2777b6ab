"""V-ZB op order as the seed's code builds it (sail-sg/zero-bubble-pipeline-parallelism).

Seed 001's runtime (megatron/core/pipeline_parallel/zerobubble/runtime.py @39f2c186, the V branch with
`zero_bubble_v_schedule_mem_setup` zb) builds V-ZB with `scheduler/zbv.py`'s PipelineGraph: first at unit times
(F = B = W = 1000, comm 1), then, once its timers have profiled a few iterations, again with the profiled per-chunk
times (each stage's mean over its chunks, the median over stages; microseconds, comm max(c, 1)). Its memory model:
F allocates 34h + 5as per token and layer, B frees all but the 32h that W still reads, W frees those 32h (h hidden
size, a heads, s sequence length); the cap is 2p F's (`max_mem=None`). This is a port of that builder
(scheduler/zbv.py @39f2c186, `try_v_schedule` and the best of its four fill_b / fill_f tries, `create_schedule`),
run at the profiled times: the order the seed runs after its warm-up iterations.

What the order does (docs/notes/simulator.md, "V-ZB follows the seed's order"): no repeating bubble at any
F : B : W seen (the makespan is m per-device work plus a ramp independent of m from m = 2p on), and the peak in the
simulator's memory model (a chunk's activations held until its W) within 2p chunk activations except for
p < m < 2p, where the seed's cheap pending W lets it start one more micro-batch.

Cost: O(p * m * p) per try and a few tries; ~0.5 s at p 8, m 512. Cached per (p, m, times).
"""
from __future__ import annotations

import functools
from collections import deque

import numpy as np

from planner.simulator.ops import B, F, W


def seed_memory(hidden: int, heads: int, seq: int) -> tuple[int, int, int]:
    """(F, B, W) activation deltas per token and layer in the seed's model (runtime.py
    get_zero_bubble_forward_backward_func): F 34h + 5as, B frees all but the 32h W reads, W frees those."""
    f = 34 * hidden + 5 * heads * seq
    return f, -(f - 32 * hidden), -32 * hidden


DEFAULT_MODEL = (4096, 32, 4096)    # h, a, s of a 7-8B model at 4k tokens; the order hardly depends on it (notes)


def _one(p: int, m: int, cost: tuple, c: int, mem: tuple, max_mem: int, fill_f: bool, fill_b: bool,
         approved: list | None):
    """One pass of try_v_schedule (no recursion)."""
    count = [[0] * 6 for _ in range(p)]
    end = [-1] * (6 * p * m)           # integers throughout, as the seed's (exact ties)
    cur = [0] * p
    used = [0] * p
    stage_bubble = [0] * p
    pending = [deque() for _ in range(p)]
    sched = [[] for _ in range(p)]
    approved = approved or [-1] * p
    max_approved = max(approved)

    def gid(cat, chunk, stage, micro):
        return ((cat * 2 + chunk) * p + stage) * m + micro

    def max_bubble(stage=-1):
        out = max(stage_bubble + [0])
        if stage >= 0:
            out = max(out, max_approved - approved[stage])
        return out

    def put(cat, chunk, stage):
        t = no_bubble = cur[stage] + cost[cat]
        k = count[stage][cat * 2 + chunk]
        if k >= m:
            raise AssertionError("zbv: more ops than micro-batches")
        if chunk == 1 and cat < 2 and stage < p - 1:
            t = max(t, end[gid(cat, chunk, stage + 1, k)] + c + cost[cat])
        if chunk == 0 and cat < 2 and stage > 0:
            t = max(t, end[gid(cat, chunk, stage - 1, k)] + c + cost[cat])
        if count[stage][0] > 0:
            stage_bubble[stage] += t - no_bubble
        end[gid(cat, chunk, stage, k)] = t
        cur[stage] = t
        used[stage] += mem[cat]
        sched[stage].append((cat, chunk, k))
        if cat == 1:
            pending[stage].append(chunk)
        count[stage][cat * 2 + chunk] += 1

    def put_w(stage):
        put(2, pending[stage].popleft(), stage)

    # warm-up: chunk 0 forwards down the V, then chunk 1 forwards back up with as many chunk 0's as fit
    for i in range(p):
        put(0, 0, i)
    for i in range(p - 1, -1, -1):
        if i == p - 1:
            put(0, 1, i)
            continue
        due = end[gid(0, 1, i + 1, 0)] + c
        while used[i] + mem[0] * (2 + 2 * i) <= max_mem and cur[i] + cost[0] <= due and count[i][0] < m:
            for j in range(i + 1):
                put(0, 0, j)
        put(0, 1, i)
    it = 0
    for i in range(1, p):
        while count[i][0] + count[i][1] < count[i - 1][0] + count[i - 1][1] or count[i][1] <= count[i - 1][1] < m:
            for j in range(p - 1, i - 1, -1):
                if count[j][it] < m:
                    put(0, it, j)
            it = 1 - it

    for _ in range(2 * m):
        for i in range(p):                       # memory before each B
            while used[i] + mem[1] > max_mem:
                put_w(i)
        b0, b1 = [], []
        for i in range(p):
            if count[i][3] >= count[i][2]:
                b0.append(i)
            elif i == p - 1:
                b1.append(i)
            elif end[gid(1, 1, i + 1, count[i][3])] >= 0 or count[i][2] >= m:
                b1.append(i)
            else:
                b0.append(i)
        for i, ch in [(i, 1) for i in reversed(b1)] + [(i, 0) for i in b0]:
            dep = -1
            if ch == 1 and i < p - 1:
                dep = gid(1, 1, i + 1, count[i][3])
            if ch == 0 and i > 0:
                dep = gid(1, 0, i - 1, count[i][2])
            while pending[i] and dep >= 0 and end[dep] + c >= cur[i] + cost[2]:
                put_w(i)                          # fill the wait for the gradient with W's
            if pending[i] and end[dep] + c - cur[i] > max_bubble(i) - stage_bubble[i] and (ch == 1 or fill_b):
                put_w(i)
            put(1, ch, i)
        for i in range(p):
            if count[i][1] >= m:
                continue
            item = None
            if count[i][1] >= count[i][0]:
                item = 0
            elif i == p - 1:
                item = 1
            elif end[gid(0, 1, i + 1, count[i][1])] >= 0:
                item = 1
            elif count[i][0] < m and (i == 0 or end[gid(0, 0, i - 1, count[i][0])] >= 0):
                item = 0
            if item is None:
                continue
            while used[i] + mem[0] > max_mem:
                put_w(i)
            dep = -1
            if item == 0 and i > 0:
                dep = gid(0, 0, i - 1, count[i][0])
            if item == 1 and i < p - 1:
                dep = gid(0, 1, i + 1, count[i][1])
            while pending[i] and dep >= 0 and end[dep] + c >= cur[i] + cost[2]:
                put_w(i)
            if pending[i] and end[dep] + c - cur[i] > max_bubble(i) - stage_bubble[i] and fill_f:
                put_w(i)
            put(0, item, i)
    for i in range(p):
        while pending[i]:
            put_w(i)
    return sched, stage_bubble


def _best(p: int, m: int, cost: tuple, c: int, mem: tuple) -> list:
    """zbv.PipelineGraph.create_schedule's choice: the least max bubble over fill_b, fill_f in (True, False); each
    try_v_schedule re-runs itself with the stage bubbles it found as approved bubbles while its max bubble keeps
    falling, and returns the last that fell (the seed's recursion, unrolled)."""
    max_mem = 2 * p * mem[0]                    # max_mem=None: f_mem * n_stage * 2 (integers, as the seed's)
    best = None
    for fill_b in (True, False):
        for fill_f in (True, False):
            sched, sb = _one(p, m, cost, c, mem, max_mem, fill_f, fill_b, None)
            bubble = max(sb + [0])
            while True:
                nxt, nsb = _one(p, m, cost, c, mem, max_mem, fill_f, fill_b, sb)
                nb = max(nsb + [0])
                if not nb < bubble:
                    break
                sched, sb, bubble = nxt, nsb, nb
            if best is None or bubble < best[1]:
                best = (sched, bubble)
    return best[0]


def _us(x: float) -> int:
    """A time as the seed's profiler reports it: whole microseconds, at least 1 (runtime.py avg_then_mid)."""
    return max(int(round(x * 1e6)), 1)


@functools.lru_cache(maxsize=16)
def _order_cached(p: int, m: int, cost: tuple, c: int, mem: tuple) -> tuple:
    out = []
    for dev in _best(p, m, cost, c, mem):
        # the seed's B / W chunk 0 is the model's second chunk (create_schedule: max_chunks - 1 - chunk)
        kind = np.array([(F, B, W)[cat] for cat, _ch, _j in dev], np.int64)
        chunk = np.array([ch if cat == 0 else 1 - ch for cat, ch, _j in dev], np.int64)
        mb = np.array([j for _cat, _ch, j in dev], np.int64)
        for a in (kind, chunk, mb):
            a.flags.writeable = False
        out.append((kind, mb, chunk))
    return tuple(out)


def zbv_order(p: int, m: int, f: float, b: float, w: float, comm: float = 0.0,
              model: tuple[int, int, int] = DEFAULT_MODEL) -> list:
    """V-ZB per-device op arrays (kind, micro-batch, chunk) as the seed's runtime builds them from profiled per-chunk
    times f, b (input gradient), w in seconds and the one-way p2p time comm; chunk 0 is stage d, chunk 1 stage
    2p - 1 - d (ops.stage_table). model: (hidden size, attention heads, sequence length) for the seed's memory
    model."""
    return zbv_order_of(p, m, builder_key(f, b, w, comm, model))


def builder_key(f: float, b: float, w: float, comm: float = 0.0, model: tuple[int, int, int] = DEFAULT_MODEL) -> tuple:
    """What the seed's builder reads of zbv_order's arguments: per-chunk times and comm as its profiler reports them
    (whole microseconds) and its memory model; plans alike there share one order (costs/vwalk.py caches by it)."""
    return (_us(f), _us(b), _us(w)), _us(comm), seed_memory(*model)


def zbv_order_of(p: int, m: int, key: tuple) -> list:
    """zbv_order from its builder_key."""
    return list(_order_cached(p, m, *key))
