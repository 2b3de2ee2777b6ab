"""Closed-form facts about pipeline schedules, shared by the latency model and the memory model.

The op-level simulator (planner.simulate) is the judge of these formulas; tests/test_sim_closed_forms.py
checks them against it on uniform stages over a grid (tolerances stated there and in
docs/notes/simulator.md). Times are per micro-batch for *all* layers a device holds (all its chunks):
f = forward, b = backward (input grad + weight grad, recompute included), w = weight-grad part of b.

Exact (to rounding) against the simulator: gpipe, 1f1b, interleaved (m divisible by pp), zb-h1 (any m).
`stage_compute_time` takes per-stage times (stage 0 carries the embedding, the last stage the output
layer and the loss): steady state at the slowest stage, warm-up and cool-down at the others' own times;
for gpipe and 1f1b exact whenever the last stage is the slowest (the usual case), see its docstring.
V-Min / V-Half: the steady-state period of seed 001's order (v_period, exact on uniform stages) and a fitted
warm-up + cool-down (v_ramp). V-ZB: seed 001's order has no repeating bubble (period = the work), its ramp vzb_ramp.
PyTorch's V-ZB (torchtitan's, ZeRO-3 plans): its fixed order's makespan pytorch_zbv_time, period pytorch_zbv_period,
hops pytorch_zbv_p2p_s.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from planner.config import V_SHAPES, chunks_per_device  # noqa: F401  (chunks_per_device: re-exported)


def compute_time(schedule: str, pp: int, m: int, v: int, f: float, b: float, w: float) -> float:
    """Iteration compute time of the slowest device, pipeline bubbles included, no communication."""
    if pp == 1:
        return m * (f + b)
    if schedule in ("gpipe", "1f1b"):
        return (m + pp - 1) * (f + b)
    if schedule == "interleaved":
        return m * (f + b) + (pp - 1) * (f + b) / v
    if schedule == "zb-h1":
        # exact for the zero-bubble paper's order (stage i runs W(j) after B(j+i)): zb_h1_time; with fewer
        # micro-batches than stages, pp - m of the W's that would fill the cool-down have no micro-batch: they run
        # after it
        if m >= pp:
            return zb_h1_time([f] * pp, [b] * pp, [w] * pp, m)
        return m * (f + b) + (pp - 1) * max(f + b - 2 * w, 0.0) + (pp - m) * w
    if schedule == "v-zb":
        return m * (f + b) + vzb_ramp([(f, b, w)] * (pp - 1), w)
    if schedule in ("v-half", "v-min"):
        # per chunk F, B (input gradient), W: a device holds two chunks of f / 2, (b - w) / 2, w / 2
        F, Bi, Wc = f / 2, max(b - w, 0.0) / 2, w / 2
        T = v_period(schedule, pp, [F], [Bi], [Wc], f + b)
        return m * T + v_ramp(schedule, pp, f, b, w)
    raise ValueError(f"unknown schedule {schedule!r}")


def v_period(schedule: str, pp: int, F, B, W, work: float) -> float:
    """Steady-state period per micro-batch of V-Min / V-Half as seed 001's runtime runs them (a fixed order built at
    unit times: simulator/vblocks.py) with per-chunk times F, B (input gradient), W (lists over every chunk of
    every device) and `work`, the busiest device's F + B + W per micro-batch (both chunks).

    Derived from the order (exact against it on uniform stages, p >= 3; tests/test_vshape_agreement.py):
    V-Min runs its six slots in lock step, so a slot lasts the longest F or B: max(work, 6F, 6B), for p = 2
    max(work, 3(F + B), 4F + B + W, 4B + F + W); V-Half has no repeating bubble while W + 2B >= 2F and W + 2F >=
    2B (the seed's condition), else max(work, 4F + W, 4B + W)."""
    fmax, bmax = max(F), max(B)
    if schedule == "v-min":
        if pp == 2:
            return max(work, 3 * (fmax + bmax), max(4 * f + b + w for f, b, w in zip(F, B, W, strict=True)),
                       max(4 * b + f + w for f, b, w in zip(F, B, W, strict=True)))
        return max(work, 6 * fmax, 6 * bmax)
    return max(work, max(4 * f + w for f, w in zip(F, W, strict=True)),
               max(4 * b + w for b, w in zip(B, W, strict=True)))


def v_ramp(schedule: str, pp: int, f: float, b: float, w: float, others=None) -> float:
    """Warm-up + cool-down of V-Min / V-Half beyond m periods, per device times f, b (w included), w.
    others: the other devices' (f, b, w) (default pp - 1 copies of the same).

    Fitted to the seed's order (vblocks.py) over F:B:W in 1 : 0.7-1.8 : 0.3-1, p = 3..12, m = 4p: V-Min
    (p - 1)(f + b - w) - (f + b) / 2, V-Half (p - 1)(f + b - 3w/2) - (f + b) / 4, i.e. seed 001's 2/3 and 1/2 of 1F1B's
    bubble at F = B = W; within 3.4% (V-Min) and 2.5% (V-Half) of the makespan at m = 4p, the rest being the
    seed's p mod 3 (V-Min) and p mod 2 (V-Half) gaps in its stable pattern, which no smooth form follows.
    Never below 0: outside the fitted ratios (w above about half of f + b, at pp = 2) the fit would go negative and
    put the iteration under the busiest device's own work, which no order can. Loosest at m = p (-20 .. +30% there
    over a wider grid, within 10% from m of about 2p)."""
    others = [(f, b, w)] * (pp - 1) if others is None else others
    if schedule == "v-min":
        return max(sum(fi + bi - wi for fi, bi, wi in others) - (f + b) / 2, 0.0)
    return max(sum(fi + bi - 1.5 * wi for fi, bi, wi in others) - (f + b) / 4, 0.0)


def vzb_ramp(others, w: float) -> float:
    """V-ZB's warm-up + cool-down beyond m times the busiest device's work, as seed 001's order runs it
    (simulator/zbv.py, its zbv.py built at the profiled times). others: the other devices' per-device (f, b, w),
    b with w; w: the busiest device's.

    Per chunk F = f/2, B = (b - w)/2, W = w/2: max((p - 1) max(F, B), (p - 1) 2(B - W) - W). Fitted to the seed's
    order on uniform stages, zero communication, F : B : W in 1 : 0.4-6 : 0.02-1.5, p 2..8, m p..8p: exact where
    2(B - W) is the larger term (attention-heavy B, the last micro-batch's backward crossing the V), else up to 8%
    of the makespan under it when B < F at m < 2p, under 3% from m = 2p (tests/test_vshape_agreement.py). The
    makespan has no term growing with m beyond the work: the seed's order has no repeating bubble at these ratios
    (its greedy fills each device's waits with W's)."""
    a = sum(max(fi, bi - wi) / 2 for fi, bi, wi in others)
    c = sum(bi - 2 * wi for _fi, bi, wi in others) - w / 2
    return max(a, c, 0.0)


def _v_chunks(f: list, b: list, w: list) -> tuple[list, list, list]:
    """Per-chunk (F, B input gradient, W) of a V-shape's devices 1 .. pp-1 from per-rank times, as the simulator places
    them (simulator.replay._chunk_times): each middle rank's time split over its two chunks, rank pp-1 the lightest
    rank's (its extra, the output layer and loss, moved to device 0). Device 0's two end chunks (embedding; output
    layer and loss) are left out of the lock step: one heavier op per period is absorbed by its slack (the
    simulator: device 0's chunk 1 30% heavier leaves V-Min's period unchanged), and device 0's whole work still
    bounds the period."""
    p = len(f)
    bi = [max(x - y, 0.0) for x, y in zip(b, w, strict=True)]
    out = []
    for x in (f, bi, w):
        out.append([x[d] / 2 for d in range(1, p - 1)] + [min(x) / 2])
    return out[0], out[1], out[2]


def _v_devices(f: list, b: list, w: list) -> tuple[list, list, list]:
    """Per-device times of a V from per-rank ones: stage times come per pipeline rank (output layer on rank pp-1); in
    a V the last stage is on device 0, which holds both ends: rank pp-1's extra over the lightest rank moves there."""
    out = []
    for x in (f, b, w):
        x = list(x)
        extra = x[-1] - min(x)
        x[0] += extra
        x[-1] -= extra
        out.append(x)
    return out[0], out[1], out[2]


def stage_compute_time(schedule: str, pp: int, m: int, v: int, f, b, w, pytorch: bool = False) -> float:
    """Iteration compute time with per-stage (per-device) times f[i], b[i], w[i], bubbles included.

    The slowest device k runs m micro-batches back to back (m * (f_k + b_k)); every other device adds
    its own share of the fill and drain, not the slowest one's: each schedule's uniform bubble term
    with (pp - 1) * x replaced by the sum over the other devices of their x. Equal stages give exactly
    `compute_time`. For gpipe, 1f1b, interleaved and zb-h1 it never exceeds `compute_time` at the slowest
    stage (the old, pessimistic count, which charged every fill / drain slot at the slowest stage's time);
    for V-shapes it can, since device 0 holds both ends of the V (the old per-rank count missed that).

    Against the simulator (zero communication; stage 0 and the last stage heavier than the rest;
    tests/test_sim_closed_forms.py, STAGE_TOL): gpipe exact; 1f1b exact when the last stage is the slowest,
    up to +12% when stage 0 is (its warm-up forwards hide part of the round trip); interleaved exact (its order
    run: interleaved_time; the closed form with (f_i + b_i) / v fill slots was -5% .. +9%),
    zb-h1 exact when the last stage is the slowest and m >= pp (zb_h1_time), else 0 .. +12% (m < pp: 0 .. +15%),
    v-zb -0.1 .. +8%, v-half -10% .. +10%, v-min -14% .. +2%.
    Mapping-independent, so a valid constant of the objective.
    pytorch: PyTorch pipelining's order where it differs (ZeRO-3 plans are torchtitan's): its V-ZB below 2 pp
    micro-batches, whose makespan pytorch_zbv_time runs. From 2 pp the closed form follows it on uniform stages
    (0 .. -1.4%), not with heavier end ranks: +0.4 .. +9.6% over pytorch_zbv_time (p 2-8, m 2p-16p, first rank x1-1.3,
    last x1-1.5; review Nov 27), +5.8% at p 4, m 8 on llama3-8b-h100-fsdp-128's stage times (+3.0% at m 16).
    """
    f, b, w = (list(map(float, x)) for x in (f, b, w))
    if len(f) != pp:
        raise ValueError(f"{len(f)} stage times for pp={pp}")
    if pp == 1:
        return m * (f[0] + b[0])
    if schedule in ("v-half", "v-min"):
        chunks = _v_chunks(f, b, w)
    f0, b0, w0 = f, b, w            # per rank, before _v_devices moves the output layer's share to device 0
    if schedule in V_SHAPES:
        f, b, w = _v_devices(f, b, w)
    t = [fi + bi for fi, bi in zip(f, b, strict=True)]
    k = max(range(pp), key=lambda i: t[i])
    if schedule in ("gpipe", "1f1b"):
        x = t
    elif schedule == "interleaved" and m % pp == 0:    # Megatron-Core's order run on the chunks as the replay
        per = place_chunk_times(np.array([f, b]).T, v, (pp - 1, v - 1))     # places them
        return interleaved_time(per[..., 0], per[..., 1], m)
    elif schedule == "interleaved":      # m not a multiple of pp (Megatron-Core refuses it): the closed form
        x = [ti / v for ti in t]
    elif schedule == "zb-h1":
        if m >= pp and t[-1] >= t[k]:          # the usual case, the output layer and loss last: exact
            return zb_h1_time(f, b, w, m)
        x = [max(ti - 2 * wi, 0.0) for ti, wi in zip(t, w, strict=True)]
        if m < pp:            # compute_time's tail at stage 0's W, which runs last (0 .. +15% on the test grid)
            return m * t[k] + sum(x) - x[k] + (pp - m) * w[0]
    elif schedule == "v-zb" and pytorch and m < 2 * pp:
        return pytorch_zbv_time(f0, b0, w0, m)
    elif schedule == "v-zb":
        return m * t[k] + vzb_ramp([(f[i], b[i], w[i]) for i in range(pp) if i != k], w[k])
    elif schedule in ("v-half", "v-min"):
        return m * v_period(schedule, pp, *chunks, t[k]) + v_ramp(schedule, pp, f[k], b[k], w[k],
                                                               [(f[i], b[i], w[i]) for i in range(pp) if i != k])
    else:
        raise ValueError(f"unknown schedule {schedule!r}")
    return m * t[k] + sum(x) - x[k]


def place_chunk_times(arr, v: int, last: tuple[int, int], layers=None, rc_layers=None) -> np.ndarray:
    """(p, v, k) per-chunk times from per-device ones, arr (p, k) with columns (forward, backward, weight gradient,
    recompute), backward including recompute: how the replay places a device's StageTimes on its chunks
    (simulator.replay._chunk_times) and the estimate's interleaved order (interleaved_time) takes them. Each chunk
    gets 1/v of the lightest device's time; the rest of device 0 (the embedding) goes to its chunk 0, the rest of the
    last device (output layer, loss) to the last stage's chunk `last` = (device, chunk), a middle device's rest
    evenly over its chunks. `layers` (p, v): transformer layers of each chunk when the stages are uneven
    (Megatron-Core's first / last stage counts): then the least per-layer time of any device runs on each chunk by
    its layer count and each device's remainder goes as above. `rc_layers` (p, v): block recompute's re-run layers of
    each chunk (Megatron-Core checkpoints the first N layers of every model chunk, ParallelConfig.recomputed_chunk_
    layers): a device's recompute goes to its chunks by those counts, not by their layers."""
    arr = np.array(arr, float)
    p = len(arr)
    if rc_layers is not None:
        rc_dev = arr[:, 3].copy()
        arr[:, 1] -= rc_dev
        arr[:, 3] = 0.0
    if layers is not None and p > 1:
        lay = np.asarray(layers, float)
        unit = (arr / lay.sum(axis=1)[:, None]).min(axis=0)                             # per layer, (k,)
        extra = arr - lay.sum(axis=1)[:, None] * unit
        per = lay[:, :, None] * unit[None, None, :]                                      # (p, v, k)
    else:
        base = arr.min(axis=0) if p > 1 else arr[0] * 0.0
        extra = arr - base
        per = np.repeat((base / v)[None, None, :], p, axis=0).repeat(v, axis=1)       # (p, v, k)
    if p == 1:
        per[0, :, :] = arr[0] / v
    else:
        per[0, 0] += extra[0]                                     # embedding side (stage 0)
        per[last[0], last[1]] += extra[p - 1]                     # output layer + loss (last stage)
        for d in range(1, p - 1):                                 # anything else stays on its device
            per[d] += extra[d] / v
    if rc_layers is not None:
        rcl = np.asarray(rc_layers, float)
        tot = rcl.sum(axis=1)
        per[..., 3] = rcl * np.divide(rc_dev, tot, out=np.zeros(p), where=tot > 0)[:, None]
        per[..., 1] += per[..., 3]
    return per


def interleaved_order(p: int, m: int, v: int) -> list:
    """Megatron-Core's interleaved 1F1B as per-device (kind 0 = F / 1 = B, micro-batch, chunk) int arrays: micro-batches
    in groups of p, chunk-major within a group, the warm-up of inflight_microbatches (no all-forwards-first case at
    m == p since Megatron-LM 4295be1a); torch.distributed.pipelining's ScheduleInterleaved1F1B (torchtitan) runs the
    same order and count. The one home of the order: the simulator's (orders.build) and interleaved_time's."""
    total = m * v
    k = np.arange(total)
    mb = (k // (p * v)) * p + k % p
    fchunk = (k // p) % v
    bchunk = v - 1 - fchunk
    out = []
    for d in range(p):
        w = min((p - d - 1) * 2 + (v - 1) * p, total)
        steady = total - w
        kinds = np.empty(2 * total, np.int64)
        mbs = np.empty(2 * total, np.int64)
        chs = np.empty(2 * total, np.int64)
        kinds[:w], mbs[:w], chs[:w] = 0, mb[:w], fchunk[:w]
        s = slice(w, w + 2 * steady, 2)
        kinds[s], mbs[s], chs[s] = 0, mb[w:], fchunk[w:]
        s = slice(w + 1, w + 2 * steady, 2)
        kinds[s], mbs[s], chs[s] = 1, mb[:steady], bchunk[:steady]
        kinds[w + 2 * steady:], mbs[w + 2 * steady:], chs[w + 2 * steady:] = 1, mb[steady:], bchunk[steady:]
        out.append((kinds, mbs, chs))
    return out


def _interleaved_dag_sorted(p: int, m: int, v: int):
    """_interleaved_dag's arrays without its walk, or None: ops sorted by position, ties by device (ascending; in a
    cool-down, descending), which is a topological order when the data of an op comes from no later position and, at
    the same position, from the device before (a warm-up forward) or, in a cool-down, the device after; checked."""
    S, total = p * v, m * v
    order = interleaved_order(p, m, v)
    n = 2 * total
    kind = np.concatenate([o[0] for o in order])
    mb = np.concatenate([o[1] for o in order])
    stage = np.concatenate([o[2] * p + d for d, o in enumerate(order)])
    dev = np.repeat(np.arange(p), n)
    pos = np.tile(np.arange(n), p)
    warm = np.array([min((p - d - 1) * 2 + (v - 1) * p, total) for d in range(p)])
    cool = pos >= 2 * total - warm[dev]
    rank = pos * (2 * p) + np.where(cool, 2 * p - 1 - dev, dev)
    srt = np.argsort(rank, kind="stable")
    num = np.empty(p * n, np.int64)
    num[srt] = np.arange(1, p * n + 1)                        # op numbers, 1-based
    table = np.zeros((2, S, m), np.int64)
    table[kind, stage, mb] = num
    fwd = kind == 0
    dk = np.where(fwd, 0, np.where(stage < S - 1, 1, 0))
    ds = np.where(fwd, stage - 1, np.where(stage < S - 1, stage + 1, stage))
    has = ~(fwd & (stage == 0))
    dep = np.where(has, table[dk, np.clip(ds, 0, S - 1), mb], 0)
    prev = np.where(pos > 0, np.roll(num, 1), 0)
    if not (dep < num).all() or not (prev < num).all():
        return None
    hop_f = np.where(stage % p > 0, stage % p - 1, p - 1)       # the boundary into stage s, forward / backward
    hop_b = np.where(stage % p < p - 1, stage % p, p - 1)
    lat = np.where(has, np.where(fwd, hop_f, np.where(stage < S - 1, hop_b, p)), p)
    nxt = np.clip(stage + 1, 0, S - 1)
    prv = np.clip(stage - 1, 0, S - 1)
    out = np.where(fwd, np.where(stage < S - 1, np.where(nxt % p > 0, nxt % p - 1, p - 1), p),
                   np.where(stage > 0, np.where(prv % p < p - 1, prv % p, p - 1), p))
    dur = kind * S + dev * v + stage // p
    at = num.reshape(p, n)
    inv = np.empty(p * n, np.int64)
    inv[num - 1] = np.arange(p * n)
    return (prev[inv].tolist(), dep[inv].tolist(), lat[inv], dur[inv], out[inv], at, dev[inv], pos[inv])


def _interleaved_dag_walk(p: int, m: int, v: int) -> tuple:
    """_interleaved_dag's arrays (and each op's device and position) by the engine's walk."""
    S = p * v
    lists = [(k.tolist(), j.tolist(), ch.tolist()) for k, j, ch in interleaved_order(p, m, v)]
    # the boundary a hop into stage s crosses, forward (from s - 1) and backward (from s + 1); p - 1 is the wrap
    hop_in_f = [(s % p) - 1 if s % p else p - 1 for s in range(S)]
    hop_in_b = [s % p if s % p < p - 1 else p - 1 for s in range(S)]
    idx = [[[0] * m for _ in range(S)], [[0] * m for _ in range(S)]]      # [kind][stage][micro-batch] -> op number
    prev, dep, lat, dur, out, where = [], [], [], [], [], [(-1, 0)]
    waiting: dict = {}
    ptr, last = [0] * p, [0] * p
    ready = list(range(p - 1, -1, -1))
    while ready:
        d = ready.pop()
        kinds, mbs, chs = lists[d]
        n, i = len(kinds), ptr[d]
        while i < n:
            kind, j, k = kinds[i], mbs[i], chs[i]
            s = k * p + d
            if kind == 0:
                dk, ds, h = (0, s - 1, hop_in_f[s]) if s > 0 else (-1, 0, p)
            else:
                dk, ds, h = (1, s + 1, hop_in_b[s]) if s < S - 1 else (0, s, p)
            a = 0
            if dk >= 0:
                a = idx[dk][ds][j]
                if not a:
                    waiting[(dk, ds, j)] = d
                    break
            prev.append(last[d])
            dep.append(a)
            lat.append(h)
            dur.append(kind * S + d * v + k)
            # with blocking the sender holds the hop of its output's edge: F into s + 1, B into s - 1
            out.append((hop_in_f[s + 1] if s < S - 1 else p) if kind == 0 else (hop_in_b[s - 1] if s > 0 else p))
            last[d] = idx[kind][s][j] = len(prev)
            where.append((d, i))
            wkr = waiting.pop((kind, s, j), None)
            if wkr is not None:
                ready.append(wkr)
            i += 1
        ptr[d] = i
    if any(ptr[d] < len(lists[d][0]) for d in range(p)):
        raise ValueError(f"the interleaved order deadlocks at p={p}, m={m}, v={v}")
    wh = np.array(where)
    at = np.zeros((p, 2 * m * v), np.int64)
    at[wh[1:, 0], wh[1:, 1]] = np.arange(1, len(wh))
    return prev, dep, np.array(lat), np.array(dur), np.array(out), at, wh[1:, 0], wh[1:, 1]


@functools.lru_cache(maxsize=512)
def _interleaved_dag(p: int, m: int, v: int) -> tuple:
    """interleaved_order's ops as a DAG in one topological order, for _interleaved_makespan to time without a walk:
    per op (1-based; 0 stands for "none", time 0) its device's previous op, the op whose data it waits for, the hop
    slot that data crosses and the op's own chunk-time slot and output hop slot (hop slots: c[0 .. p-1], p for none).
    Built once per (p, m, v): sorted by position (_interleaved_dag_sorted, numpy, its order checked), else by the
    replay engine's walk (an op runs once its device's previous op has ended and its data has arrived), which also
    finds a deadlock; the search times many plans of a few shapes, and the walk's bookkeeping was ~5x the
    arithmetic (1.5 us an op). Also `at` (p, 2 m v):
    the op number at each position of each device's order, and `flat_cut`: whether every op outside the cool-down
    waits on nothing later in its neighbour's order and, from position w_0 + 2 on (device 0's warm-up w_0 and two),
    on nothing more than two positions back (the steady state's data comes from position x - 2 of the neighbour),
    and the cool-downs on nothing before the latest cut less two (device 0's cool-down, 2 m v - w_0): then a cut at
    one position of every device leaves a past that the future reads through the last two ops of each device only
    (_interleaved_steady)."""
    r = _interleaved_dag_sorted(p, m, v) or _interleaved_dag_walk(p, m, v)
    prev, dep, lat, dur, out, at, dev, pos = r
    total = m * v
    depa = np.array(dep)
    has = depa > 0
    gap = pos[has] - pos[depa[has] - 1]
    warm = np.array([min((p - d - 1) * 2 + (v - 1) * p, total) for d in range(p)])
    cpos, cdev = pos[has], dev[has]
    cool = cpos >= 2 * total - warm[cdev]
    # the latest cut is 2 total - w_0 (device 0's cool-down): cool-down ops wait on nothing before it less two
    flat_cut = bool((gap[~cool] >= 0).all() and (gap[~cool & (cpos >= warm[0] + 2)] <= 2).all()
                    and (cpos - gap)[cool].min(initial=2 * total) >= 2 * total - warm[0] - 2)
    return prev, dep, lat, dur, out, at, flat_cut


def _interleaved_ends(fc: tuple, bc: tuple, m: int, c: tuple, blocking: bool) -> list:
    """End times of interleaved_order's ops (numbered as _interleaved_dag's, [0] = 0) with per-chunk forward fc[d][k]
    and backward bc[d][k] (recompute included), hop c[d] one way between devices d and d + 1 (c[p - 1]: the wrap,
    device p - 1 to device 0), as the replay times them (simulator.engine.run): an op starts when its device's previous
    op has ended and its data has arrived, the hop after the producer's end; blocking (Megatron without
    overlap_p2p_comm, the replay's blocking_p2p): the producer is held for its send, and the data is there when it
    ends. Each op once, in the DAG's order, O(p v m)."""
    p, v = len(fc), len(fc[0])
    prev, dep, lat, dur, out, _, _ = _interleaved_dag(p, m, v)
    hops = np.array(c + (0.0,))
    times = np.concatenate([np.ravel(fc), np.ravel(bc)])[dur]
    if blocking:
        times = times + hops[out]
        waits = [0.0] * len(prev)
    else:
        waits = hops[lat].tolist()
    e = [0.0]
    put = e.append
    for a, b, w, t in zip(prev, dep, waits, times.tolist()):
        x, y = e[a], e[b] + w
        put((x if x > y else y) + t)
    return e


def _interleaved_makespan(fc: tuple, bc: tuple, m: int, c: tuple, blocking: bool) -> float:
    """Makespan of the whole order (_interleaved_ends)."""
    return max(_interleaved_ends(fc, bc, m, c, blocking))


STEADY_TOL = 1e-9     # relative: two states of the order equal up to a shift (rounding of sums along its paths)


def _interleaved_steady(fc: tuple, bc: tuple, n1: int, n: int, c: tuple, blocking: bool) -> tuple:
    """(the makespan of n groups of p micro-batches from the run of n1 (< n) groups, when that run reaches a periodic
    state, else None; the ops it timed). Max-plus argument: past the warm-ups (position w_0 + 2) the order is invariant
    under a shift of one group (2 p v positions a device, micro-batches + p), and a cut at one position P of every
    device leaves a past, equal in every run at least as long as far as the first cool-down, that the rest reads
    only through each device's last two ops before P (_interleaved_dag's flat_cut, checked on the DAG). So if that
    state X at P_t = P_0 + 2 p v t equals X at P_(t-q) plus one constant D in every entry, the run of m micro-batches
    ends D later than the run of m - q p (its rest after P_t is the other's after P_(t-q), shifted), for every m
    whose run holds P_t before its cool-down: T(n) = T(n1) + (n - n1) / q D. Entries equal to STEADY_TOL (relative):
    max-plus maps do not expand differences, so an error d in X moves each step's D by at most d."""
    p, v = len(fc), len(fc[0])
    total = n1 * p * v
    w0 = min(2 * (p - 1) + (v - 1) * p, total)
    period = 2 * p * v
    P0 = w0 + 2
    steps = (2 * total - w0 - P0) // period        # the last cut P_t at or before device 0's cool-down
    if steps < 1:
        return None, 0
    _, _, _, _, _, at, flat_cut = _interleaved_dag(p, n1 * p, v)
    if not flat_cut:
        return None, 0
    e = np.array(_interleaved_ends(fc, bc, n1 * p, c, blocking))
    pos = P0 - 2 + period * np.arange(steps + 1)[:, None] + np.array([0, 1])
    X = e[at[:, pos]].transpose(1, 0, 2).reshape(steps + 1, -1)      # (cuts, 2 p)
    for t in range(1, steps + 1):
        for q in (1, 2, 3):
            if q > t:
                break
            D = X[t] - X[t - q]
            if D.max() - D.min() <= STEADY_TOL * max(1.0, float(np.abs(X[t]).max())):
                r = (n - n1) % q
                base = e.max() if r == 0 else _interleaved_makespan(fc, bc, (n1 + r) * p, c, blocking)
                return float(base + (n - n1 - r) // q * D.mean()), (n1 + n1 + r) * 2 * p * v * p
    return None, n1 * 2 * p * v * p


INTERLEAVED_STEADY_CUTS = 3      # the first run of the steady-state test holds this many cuts (_interleaved_steady)


@functools.lru_cache(maxsize=4096)
def _interleaved_time(fc: tuple, bc: tuple, m: int, c: tuple, blocking: bool) -> tuple:
    """(interleaved_time's makespan, the ops its runs timed)."""
    # runs of the fewest groups that hold INTERLEAVED_STEADY_CUTS cuts past device 0's warm-up, then twice as many
    # ..., until one reaches a periodic state, while at most 3/4 of the order; else the whole order
    p, v = len(fc), len(fc[0])
    n = m // p
    w0 = 2 * (p - 1) + (v - 1) * p
    n1 = INTERLEAVED_STEADY_CUTS + -(-(2 * w0 + 2) // (2 * p * v))
    ops = 0
    while 4 * n1 <= 3 * n:
        t, k = _interleaved_steady(fc, bc, n1, n, c, blocking)
        ops += k
        if t is not None:
            return t, ops
        n1 *= 2
    return _interleaved_makespan(fc, bc, m, c, blocking), ops + 2 * m * v * p


def interleaved_time(fc, bc, m: int, c=0.0, blocking: bool = False) -> float:
    """Makespan of Megatron-Core's interleaved order (interleaved_order) on per-chunk forward and backward times fc,
    bc (p, v) (place_chunk_times; backward with recompute and weight gradient) and hops c one way, one per boundary
    (c[d] between devices d and d + 1, c[p - 1] the wrap from device p - 1 to 0) or one for all; blocking: without
    overlap_p2p_comm (p2p_blocking), each sender held for its transfer. Equal to the replay's pipeline makespan on the
    same chunk times and hops (tests/test_interleaved_order.py). m a multiple of p (the schedule's rule). Runs of a
    few groups of p micro-batches, extrapolated once one reaches a periodic state (_interleaved_steady, exact), else
    the whole order (O(p v m)); cached, each call charged its ops' work (work.ORDER_OP_WORK_S). The one home of
    interleaved's compute (stage_compute_time, iteration.compute_const) and its hops' charge
    (iteration.p2p_exposed_hops), which the closed forms missed where stages differ (-5 .. +9%) and where a hop
    outgrows the slack of a chunk's forward (the ramp-only charge: -14% on the iteration)."""
    p = len(fc)
    fc = tuple(tuple(map(float, x)) for x in fc)
    bc = tuple(tuple(map(float, x)) for x in bc)
    cs = tuple(map(float, c)) if np.ndim(c) else (float(c),) * p
    if len(cs) != p:
        raise ValueError(f"{len(cs)} hops for pp={p} (one per boundary and the wrap)")
    from planner.mapping import work  # here: planner.mapping imports this module

    # without hops a sender holds nothing: one key for compute_const's run and the hop charge's zero-hop one
    t, ops = _interleaved_time(fc, bc, int(m), cs, bool(blocking) and any(cs))
    work.charge(ops * work.ORDER_OP_WORK_S)  # every call, cached or not: the charge depends on the plan only
    return t


def v_half_p2p_s(f, b, w, m: int, c: float) -> float:
    """Seconds V-Half's hops of c (one way) add to its compute (stage_compute_time), per-rank times f, b (w
    included), w as stage_compute_time takes them. The seed's order (vblocks.py) is fixed, so a hop the order's slack
    cannot hide lengthens its cycles: micro-batch j's round trip (down the V and back: 4(p - 1) hops, four chunk ops a
    device, each at about the larger of F and B, plus two W's) gates micro-batch j + p, so the period is at least
    P_lat = 4 max(F, B) + (2W + 4(p - 1)c) / p, and the ramp carries (p - 2) of those hops' share,
    4(p - 1)(p - 2)c / p. With small hops the order hides them but 1.5 traversals a micro-batch (3(p - 1)c m / p, the
    old fit). Against the replay on uniform stages (F : B : W 1 : 1.3-3 : 0.13-1, p 4-16, hop 0.1-4 chunk F's):
    m >= 2p median +0.1%, p5 .. p95 -2.1 .. +4.8% (the old constant 1.5 traversals: -26.5 .. +4.4%, down to -50% at
    a hop of 4 F's); m = p -11 .. 0% (docs/notes/simulator.md, "V-Half's hops")."""
    p = len(f)
    if p < 2 or c <= 0:
        return 0.0
    f, b, w = (list(map(float, x)) for x in (f, b, w))
    F, B, W = _v_chunks(f, b, w)
    fd, bd, _wd = _v_devices(f, b, w)
    P0 = v_period("v-half", p, F, B, W, max(x + y for x, y in zip(fd, bd, strict=True)))
    P_lat = 4 * max(max(F), max(B)) + (2 * max(W) + 4 * (p - 1) * c) / p
    return max(3 * (p - 1) * m / p * c, m * max(P_lat - P0, 0.0) + 4 * (p - 1) * (p - 2) * c / p)


def pytorch_zbv_order(p: int, m: int) -> list:
    """PyTorch pipelining's ScheduleZBVZeroBubble order, which torchtitan runs for v-zb (ZeRO-3 plans): per rank a list
    of (kind 0 F / 1 B / 2 W, micro-batch, chunk), the paper's hand-made ZB-V (F = B = W), fixed whatever the real times
    (pytorch/pytorch@1fd7abc2 torch/distributed/pipelining/schedules.py, _calculate_single_rank_operations). Rank r:
    2(p - r) - 1 forwards of chunk 0, r pairs (F chunk 1, F chunk 0), p - r triples (F, B, W of chunk 1); then F0 B0
    W0 F1 B1 W1 per micro-batch; the cool-down r pairs (B0, B1), p - r pairs (B0, W0), the chunk-1 W's left, the
    chunk-0 W's left. Built for max(2p - 1, m) micro-batches, the ops of those beyond m dropped (as PyTorch replaces
    them by None): below 2p - 1 micro-batches the order keeps the holes. The replay (simulator/orders.py) and the
    estimate (pytorch_zbv_time) both run it."""
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


def pytorch_zbv_time(f, b, w, m: int, c: float = 0.0) -> float:
    """Makespan of PyTorch's V-ZB order (pytorch_zbv_order) with per-rank times f, b (w included), w and every hop c
    one way (sends overlapping compute, the replay's model): each op starts when its device's previous op and its data
    are done, c later where the data comes from another device (F of chunk 0 from the device before, F of
    chunk 1 from the device after or, at the turn, chunk 0 on the last device; B of chunk 1 from the device before or
    the forward at the loss on device 0, B of chunk 0 from the device after or the turn; W after its B, earlier in the
    same list). Exact against the replay at zero communication (the same order and times); O(p m), each op once
    (a device blocked on its data resumes when that op is done). Used where no closed form follows the order: fewer
    than 2p micro-batches, whose holes the closed form missed (-2 .. -14% on uniform stages; docs/notes/simulator.md,
    "torchtitan's V-ZB below 2p"), and with and without hops for their charge (pytorch_zbv_p2p_s): equal to the
    replay with hops too (docs/notes/simulator.md, "torchtitan's V-ZB hops")."""
    p, hop = len(f), float(c)
    # B per chunk = b's chunk less w's chunk, each split from its own lightest rank (the replay's _chunk_times):
    # splitting b - w instead differs wherever the lightest b and the lightest w are different ranks' (p = 2)
    cb, cw = v_chunk_times(b), v_chunk_times(w)
    ci = [[max(x - y, 0.0) for x, y in zip(bx, wx, strict=True)] for bx, wx in zip(cb, cw, strict=True)]
    ch = [v_chunk_times(f), ci, cw]
    lists = pytorch_zbv_order(p, m)
    end: dict = {}
    waiting: dict = {}              # an op not yet done -> the device blocked on it
    ptr, free = [0] * p, [0.0] * p
    ready = list(range(p - 1, -1, -1))
    while ready:
        d = ready.pop()
        ops = lists[d]
        while ptr[d] < len(ops):
            k, j, c = ops[ptr[d]]
            if k == 0:
                dep = (d - 1, 0, j, 0) if c == 0 and d > 0 else (d + 1, 0, j, 1) if c == 1 and d < p - 1 else \
                    (d, 0, j, 0) if c == 1 else None
            elif k == 1:
                dep = (d - 1, 1, j, 1) if c == 1 and d > 0 else (d, 0, j, 1) if c == 1 else \
                    (d + 1, 1, j, 0) if d < p - 1 else (d, 1, j, 1)
            else:
                dep = None          # its B: earlier on the same device
            if dep is not None and dep not in end:
                waiting[dep] = d
                break
            key = (d, k, j, c)
            ready_at = 0.0 if dep is None else end[dep] + (hop if dep[0] != d else 0.0)
            end[key] = free[d] = max(free[d], ready_at) + ch[k][d][c]
            ptr[d] += 1
            if key in waiting:
                ready.append(waiting.pop(key))
    if any(ptr[d] < len(lists[d]) for d in range(p)):
        raise ValueError(f"PyTorch's V-ZB order deadlocks at p={p}, m={m}")
    return max(free)


def pytorch_zbv_period(p: int, F: float, B: float, W: float, c: float) -> float:
    """Steady-state period per micro-batch of PyTorch's V-ZB order (pytorch_zbv_order) on per-chunk times F, B (input
    gradient), W with every hop c one way. Its steady loop is fixed (rank r: F chunk 0 of micro-batch k + 2p - r - 1,
    B chunk 0 of k, W, F chunk 1 of k + p, B chunk 1 of k + p - r, W), so one pass's trip through the V gates the
    same pass p micro-batches later: a cycle of 2(p - 1) hops over p micro-batches holding 2p of that pass's chunk
    ops and two each of the other two, max(work, 2B + (2F + 2W + 2(p - 1)c) / p, 2F + (2B + 2W + 2(p - 1)c) / p).
    Equal to the replay's growth per micro-batch on uniform stages (p 2-11, f : b : w 1 : 0.5-5 with w 2-80% of b,
    hops 0-4 chunk F's; docs/notes/simulator.md, "torchtitan's V-ZB hops"); at c = 0 the work, 2(F + B + W)."""
    hops = 2 * (p - 1) * c
    return max(2 * (F + B + W), 2 * B + (2 * F + 2 * W + hops) / p, 2 * F + (2 * B + 2 * W + hops) / p)


def pytorch_zbv_p2p_s(f, b, w, m: int, c: float) -> float:
    """Seconds hops of c (one way) add to the compute of PyTorch's V-ZB (torchtitan's, ZeRO-3 plans), per-rank times
    f, b (w included), w as stage_compute_time takes them. The order is fixed whatever the times (pytorch_zbv_order),
    so hops its slack cannot hide lengthen it, in the ramp and, once they outgrow the steady state's slack, every
    period (pytorch_zbv_period). The makespan with hops (pytorch_zbv_time) less the one without, run at m0
    micro-batches: m itself below 3p, else 2p + (m mod p), from where the order repeats with period p in m (the
    replay's difference to m0 is (m - m0) periods, exactly, on uniform stages); the m - m0 further micro-batches add
    the period's stretch at the chunks' largest times beyond the busiest device's work (as v_min_p2p_s). O(p^2) at
    most (p 8: 2 ms, p 16: 10 ms, p 32: 50 ms), cached. Replaces the seed's constant 2.5 traversals a micro-batch,
    which missed both (-26% at a hop of four chunk forwards; docs/notes/simulator.md, "torchtitan's V-ZB hops")."""
    p = len(f)
    if p < 2 or c <= 0:
        return 0.0
    f, b, w = (tuple(map(float, x)) for x in (f, b, w))
    m0 = m if m < 3 * p else 2 * p + (m - 2 * p) % p
    out = _pytorch_zbv_time(f, b, w, m0, float(c)) - _pytorch_zbv_time(f, b, w, m0, 0.0)
    if m > m0:
        F, B, W = (max(x) for x in _v_chunks(list(f), list(b), list(w)))
        fd, bd, _wd = _v_devices(f, b, w)
        work = max(x + y for x, y in zip(fd, bd, strict=True))
        stretch = max(work, pytorch_zbv_period(p, F, B, W, c)) - max(work, pytorch_zbv_period(p, F, B, W, 0.0))
        out += (m - m0) * stretch
    return out


@functools.lru_cache(maxsize=256)
def _pytorch_zbv_time(f: tuple, b: tuple, w: tuple, m: int, c: float) -> float:
    return pytorch_zbv_time(f, b, w, m, c)


def stable_pattern(name: str, p: int) -> list:
    """Slots of micro-batch 0's [F chunk 0, F chunk 1, B chunk 1, B chunk 0] per device in seed 001's V-Min / V-Half
    steady state, micro-batch j at + 6j (zbv_greedy.py stable_pattern_v_min / stable_pattern_v_half @39f2c186); the
    order's builder (simulator/vblocks.py) and V-Min's hop period (v_min_period) read it."""
    if name == "v-min":
        gap = 2 if p % 3 == 0 else 0
        return [[i, 2 * p - i - 1, 2 * p + gap + i, 4 * p + gap - i - 1] for i in range(p)]
    gap = 3 if p % 2 == 0 else 0
    return [[2 * i, 3 * p - i - 2, 3 * p + gap + 2 * i - 1, 6 * p + gap - i - 2] for i in range(p)]


@functools.lru_cache(maxsize=64)
def _v_min_slot_graph(p: int) -> tuple:
    """V-Min's steady state as a graph of its 6p slots (device d, slot s mod 6): (kind of each slot, 0 F / 1 B / 2 W;
    for each slot its device predecessor and its data predecessor, -1 where none). In the stable pattern every pass
    of a micro-batch sits one slot after the pass it waits for on the neighbour device (F chunk 0 at slot d, F chunk 1
    at 2p - 1 - d, B chunk 1 at 2p + gap + d, B chunk 0 at 4p + gap - 1 - d), and the two free slots of a period hold
    the W's (put_w), so every edge of the graph, on a device or across a hop, advances one slot."""
    kind = np.full((p, 6), 2)
    data = np.full((p, 6), -1)
    for d, slots in enumerate(stable_pattern("v-min", p)):
        for k, t in enumerate(slots):       # F0 and B1 run down the V (from d - 1), F1 and B0 up (from d + 1)
            kind[d, t % 6] = 0 if k < 2 else 1
            src = d - 1 if k in (0, 2) else d + 1
            if 0 <= src < p:
                data[d, t % 6] = src * 6 + (t - 1) % 6
    node = np.arange(6 * p).reshape(p, 6)
    return kind.ravel(), np.roll(node, 1, axis=1).ravel(), data.ravel()


@functools.lru_cache(maxsize=256)
def v_min_period(p: int, F: float, B: float, W: float, c: float) -> float:
    """V-Min's steady-state period per micro-batch on uniform per-chunk times F, B (input gradient), W with every hop c
    one way (sends overlapping compute): the order is fixed (seed 001 builds it at unit times), so a period is 6 times
    the maximum cycle mean of its slot graph (_v_min_slot_graph: a slot's op starts after its device's previous slot
    and, c later, its data's slot on the neighbour), Karp's algorithm over the 6p slots. Exact against the replay on
    uniform stages (p 2-24; docs/notes/simulator.md, "V-Min's hops"). At c = 0 it is v_period's max(work, 6F, 6B).
    The critical cycles with hops zigzag between two devices down one pass and up another: up to 6(p-1)/p hops a
    micro-batch where p % 3 == 0, fewer elsewhere (6L/(L + 1), L = p - 1 - p % 3, for the F and B zigzags)."""
    kind, dev_prev, data = _v_min_slot_graph(p)
    n = len(kind)
    dur = np.array([F, B, W])[kind]
    has = data >= 0
    src = np.where(has, data, 0)
    D = np.zeros((n + 1, n))
    for i in range(1, n + 1):
        x = D[i - 1]
        D[i] = np.maximum(x[dev_prev] + dur[dev_prev], np.where(has, x[src] + dur[src] + c, -np.inf))
    gap = (D[n] - D[:n]) / (n - np.arange(n))[:, None]
    return 6 * float(np.max(np.min(gap, axis=0)))


def v_min_p2p_s(f, b, w, m: int, c: float) -> float:
    """Seconds V-Min's hops of c (one way) add to its compute (stage_compute_time), per-rank times f, b (w included),
    w as stage_compute_time takes them. V-Min runs its fixed order in lock step, so the hops stretch every period:
    m (v_min_period(c) - v_min_period(0)) at the chunks' largest times, less what the busiest device's own work leaves
    of it, plus the ramp's hops, 4(p - 1) - 8 where p % 3 == 0 and 4(p - 1) - 6 elsewhere (2 at p <= 3): the first
    micro-batch's round trip less what the steady cycles already count, measured on uniform stages p 2-24 (exact at
    p % 3 == 0 from p = 6 and at p <= 5, within 2 hops elsewhere; fewer hops where W's slack hides them).
    Replaces the constant 3 traversals a micro-batch (6(p - 1) m c / p, fitted at hops of 0.05-0.3 of a chunk
    forward), which missed the ramp: against the replay on uniform stages (F : B : W 1 : 1.3-3 : 0.13-1, p 4-16,
    hop 0.1-4 chunk F's) docs/notes/simulator.md, "V-Min's hops"."""
    p = len(f)
    if p < 2 or c <= 0:
        return 0.0
    f, b, w = (list(map(float, x)) for x in (f, b, w))
    F, B, W = (max(x) for x in _v_chunks(f, b, w))
    fd, bd, _wd = _v_devices(f, b, w)
    work = max(x + y for x, y in zip(fd, bd, strict=True))
    stretch = max(work, v_min_period(p, F, B, W, c)) - max(work, v_min_period(p, F, B, W, 0.0))
    ramp = 2 if p <= 3 else 4 * (p - 1) - (8 if p % 3 == 0 else 6)
    return m * stretch + ramp * c


def zb_h1_time(f, b, w, m: int, c: float = 0.0) -> float:
    """ZB-H1's makespan with per-stage times f[i], b[i] (w included), w[i] when the last stage is the slowest
    (f + b at least every other stage's) and m >= pp, sends overlapping compute and every hop c one way (the
    zero-bubble code's own timing model: an op starts after its producer's end plus the hop,
    sail-sg/zero-bubble-pipeline-parallelism@39f2c186 megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py,
    the asserts `t[f_id] >= t[F of stage i - 1] + comm + f_cost`, `t[b_id] >= t[B of stage i + 1] + comm + b_cost`).

    The order (stage d runs W(j - d) after B(j), its last d W's at the end: simulator/orders.py _zb_h1): the last
    stage k = pp - 1 starts after the forward fill and then runs its m micro-batches back to back, except that its
    first pp - 1 (no W yet) wait for stage k - 1's round trip (B and F there, two hops) and, once W's run, each
    later one waits for half of what that round trip has beyond its own F B W W (two micro-batches in flight). Its
    last B ends pp W's before it ends; from there the last gradient runs down to stage d, which then has d + 1 W's
    left. The iteration ends with the latest stage. Exact against the replay at c = 0 (tests/test_sim_closed_forms.py);
    with hops the median error is 0 and the range -2 .. +7% at a hop of half a forward (docs/notes/simulator.md,
    "ZB-H1's ramp")."""
    p = len(f)
    k = p - 1
    t = [fi + bi for fi, bi in zip(f, b, strict=True)]
    if p == 1:
        return m * t[0]
    ramp = max(0.0, 2 * c + t[k - 1] - w[k - 1] - (t[k] - w[k]))
    steady = max(0.0, (t[k - 1] + 2 * c - t[k] - w[k]) / 2)
    end_k = sum(f[:k]) + k * c + m * t[k] + k * ramp + (m - p) * steady
    last_b = end_k - p * w[k]
    drain, ends = 0.0, [end_k]
    for d in range(k - 1, -1, -1):
        drain += b[d] - w[d] + c
        ends.append(last_b + drain + (d + 1) * w[d])
    return max(ends)


def zb_h1_p2p_s(f, b, w, m: int, c: float) -> float:
    """Seconds ZB-H1's hops of c (one way) add to its compute: zb_h1_time's where it applies (the last stage the
    slowest, m >= pp: the heavier last stage's slack hides part of the ramp's hops), else the uniform stages' two
    round trips of the path, 4 (pp - 1) c (exact there at m = pp .. 2pp and hops under half a W). Below pp
    micro-batches there is no steady state: the first forward down and the last backward up, 2 (pp - 1) hops, plus
    two for each micro-batch after the second, 2 (m - 2) (the replay on uniform stages, p 2-8, m < p, f : b : w
    1 : 2 : 0.66 / 1 : 2 : 1, hops 0.05-2 forwards; where W is heavy, 1 : 3 : 1.5, it hides down to 2 (pp - 1)).
    The round trips' count was up to twice the replay's there (m 1: the fuzz of valid plans, notes/simulator.md)."""
    p = len(f)
    if p < 2 or c <= 0:
        return 0.0
    t = [fi + bi for fi, bi in zip(f, b, strict=True)]
    if m >= p and t[-1] >= max(t):
        return zb_h1_time(f, b, w, m, c) - zb_h1_time(f, b, w, m)
    if m < p:
        return (2 * (p - 1) + 2 * max(0, m - 2)) * c
    return 4 * (p - 1) * c


def inflight_microbatches(schedule: str, pp: int, m: int, v: int, stage: int) -> float:
    """Activations a device holds at its peak, in micro-batches of its full layer set (a chunk = 1/v).

    Interleaved: Megatron-Core's warm-up of (v - 1) * pp + 2 * (pp - 1 - stage) chunk forwards capped at m * v, plus
    the one in flight (schedules.py, NVIDIA/Megatron-LM @ d98e8a64, microbatch_group_size_per_vp_stage = pp).
    At m == pp it no longer runs every forward first on every rank (dropped in 4295be1a, Nov 2024): only ranks
    stage <= (pp - 2) / 2 reach all-forwards-first, through the cap. PyTorch pipelining's ScheduleInterleaved1F1B
    (torchtitan, i.e. ZeRO-3 plans; get_rank_warmup_ops, torch 2.5/2.6) warms up the same count.

    V-Min / V-Half: the seed's targets, which the simulator's block search keeps as caps (V-Min's is
    exact for equal per-chunk F, B, W; V-Half takes the fastest block under its cap, often V-Min's).
    Where no block fits under the cap (V-Min with the compute model's uneven 1 : 1.1 : 0.7 ratio at
    pp >= 16), the simulator falls back to the tightly packed block, whose peak is higher (about 0.7
    of 1F1B's at pp = 16): simulate V-shape plans.
    """
    if schedule == "gpipe":
        return float(m)
    if schedule == "1f1b":
        return float(min(pp - stage, m))
    if schedule == "zb-h1":
        return float(min(pp, m))            # stage i defers i weight-gradients: every stage holds pp
    if schedule == "interleaved":
        chunks = (v - 1) * pp + 2 * (pp - stage - 1) + 1   # Megatron warm-up count, plus the one in flight
        return min(chunks, m * v) / v
    if schedule == "v-zb":
        # seed 001's order (simulator/zbv.py) keeps 2p chunk activations in its own memory model, where a pending W
        # holds only 32h of 34h + 5as; held until W (the simulator's model) that is 2p except for pp < m < 2pp,
        # where it starts one more micro-batch's forwards (seen up to a whole micro-batch at pp 7-8; notes)
        return float(min(pp + 1, m)) if pp < m < 2 * pp else float(min(pp, m))
    if schedule == "v-half":
        return float(min(m, math.ceil(pp / 2) + 1))
    if schedule == "v-min":
        return float(min(m, math.ceil((pp + 2) / 3)))
    raise ValueError(f"unknown schedule {schedule!r}")


def lock_step_p2p_s(t, c, m: int) -> float:
    """Seconds Megatron-Core's 1F1B adds to its compute (stage_compute_time) by waiting on every p2p call
    (the simulator's mcore.py): t[i] = stage i's forward + backward of one micro-batch, c a one-way hop, or one per
    boundary (c[j] between stages j and j + 1: NVLink inside a node, the network between nodes).

    Each call is a meeting with one neighbour, so a steady-state micro-batch holds stage i for t[i] + e[i] c (e: its
    neighbours, 1 at the ends and at pp 2, else 2) and the pace is P = max_i (t[i] + e[i] c); the slowest stage k's
    slack hides the others' exchanges. Over the steady state (m - 1)(P - t[k]), plus the first forward's and the last
    backward's crossings, 2 (pp - 1) c, less what k's own exchanges leave of P - t[k] once (the pipeline's end).
    Exact against the replay on uniform stages and with a heavier last stage (tests/test_mcore_p2p.py); with a
    heavier first stage never under it, and no further over than stage_compute_time is there. One boundary slower
    than the others (heterogeneous links) makes it approximate: -4.6 .. +8.5% of compute + p2p over 150 random
    draws (pp 2-12, hops up to a third of a stage's F + B, one boundary up to 4x); +3 .. +5% where the slowed stage
    paces from the pipeline's first half (its steady state is shorter than m - 1), +7.2% on fuzz seed 2's case 81
    (docs/notes/simulator.md, "The lock step's pace in the mapping objective"). The latency model
    charges it on each column's mapped hops (lock_step_pace: MappingProblem.pace, iteration.build_problem; one node
    row: typical_hop_traversals on NVLink). docs/notes/simulator.md"""
    p = len(t)
    cs = [float(c)] * (p - 1) if np.ndim(c) == 0 else [float(x) for x in c]
    if p < 2 or max(cs) <= 0:
        return 0.0
    # stage i's exchanges: its boundaries' hops (one at the ends); with one hop, e[i] c
    ex = [(cs[i - 1] if i > 0 else 0.0) + (cs[i] if i < p - 1 else 0.0) for i in range(p)]
    k, w, d = lock_step_pace(t, m)
    return w * max(d[i] + ex[i] for i in range(p)) + (ex[k] if m >= 2 else 0.0) + 2 * sum(cs)


def lock_step_pace(t, m: int) -> tuple[int, float, list[float]]:
    """(k, W, d): lock_step_p2p_s as a bottleneck plus a sum, W * max_i (d[i] + ex[i]) + [m >= 2] ex[k] + 2 sum(c),
    with k the slowest stage (the first of equals), d[i] = t[i] - t[k] <= 0 and W = max(m - 2, 0): the steady
    state's (m - 1)(P - t[k]) less the once P - t[k] - ex[k] of the pipeline's end. The mapping objective takes the
    pace term on its mapped hops (MappingProblem.pace, built by iteration.build_problem) from these numbers."""
    p = len(t)
    k = max(range(p), key=lambda i: t[i])
    return k, float(max(m - 2, 0)), [float(t[i] - t[k]) for i in range(p)]


def p2p_hops(schedule: str, pp: int, v: int, m: int | None = None,
             engine: str = "megatron") -> tuple[float, float]:
    """(traversals of the stage 0 -> pp-1 path, wrap-around hops pp-1 -> 0) per micro-batch, one direction.

    Without m: the hops each micro-batch makes (the latency model charges them m/pp times).
    With m: the hops whose time the schedule *exposes*, per micro-batch, as the simulator measures them:
    1F1B one traversal (Megatron-Core's, whose calls wait on their peers, is charged lock_step_p2p_s instead: on the
    mapped hops, MappingProblem.pace); with sends overlapping compute, GPipe, interleaved,
    ZB-H1 (two traversals on uniform stages; the latency model charges zb_h1_p2p_s, the same there) and V-ZB hide
    steady-state sends behind other work and expose only their ramp (a fixed number of traversals,
    hence the p/m factor; V-ZB 2.5, fitted to the simulator replaying seed 001's zbv.py order: 1.7-3.0, median 2.5,
    at p 4, 6, 8, m p..8p, f:b:w 1:2:0.66, 1:2:1, 1:2.3:0.13, 1:3:1.5, hop 0.05-0.3 of a device's forward on
    uniform stages; 2.1-3.0 from m = 4p; a hop near a chunk's forward with W small is no longer hidden and grows
    with m, not covered; torchtitan's V-ZB, ZeRO-3 plans, is charged pytorch_zbv_p2p_s instead, its fixed order's);
    V-Min and V-Half expose sends every micro-batch: 3 and 1.5 traversals (the latency model
    charges v_min_p2p_s, V-Min's lock step stretched by its hops plus the ramp's, and v_half_p2p_s, which grows past 1.5
    once the hops outgrow the order's slack), fitted
    to the simulator replaying seed 001's order (vblocks.py; 2.8-3.1 and 1.4-1.5 at pp 4-8 on uniform stages).
    engine="deepspeed" (its 1F1B only, simulate.deepspeed): every transfer is a rendezvous that holds
    sender and receiver, so a stage with two neighbours spends 4 one-way transfers per micro-batch (an end
    stage 2) and the busiest stage sets the pace, plus the ramp: 4m + 2(pp-4) one-way hops in all for
    pp >= 3 and 2m for pp = 2, charged at the path's mean hop (exact on uniform stages and links; a slow
    link counts at its share of the mean, as in Pipette's sum).
    """
    if engine == "deepspeed" and schedule != "1f1b":
        raise ValueError(f"DeepSpeed's pipeline engine runs only its 1F1B TrainSchedule, not {schedule}")
    if engine == "deepspeed" and m is not None and pp > 1:
        exposed = 2 * m if pp == 2 else 4 * m + 2 * (pp - 4)     # one-way hops on the critical path
        return exposed * pp / (2 * m * (pp - 1)), 0.0
    if m is None:
        if schedule == "interleaved":
            return v, v - 1
        if schedule in V_SHAPES:
            return 2, 0        # down the V and back up the same links, the turn is on one device
        return 1, 0
    r = pp / max(m, 1)
    if schedule == "1f1b" or pp == 1:
        return 1.0, 0.0
    if schedule == "gpipe":
        return r, 0.0
    if schedule == "interleaved":
        return v * r, (v - 1) * r
    if schedule == "zb-h1":
        return 2 * r, 0.0
    if schedule == "v-zb":
        return 2.5 * r, 0.0
    return (3.0 if schedule == "v-min" else 1.5), 0.0
