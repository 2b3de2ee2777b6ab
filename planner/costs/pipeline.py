"""Closed-form facts about pipeline schedules, shared by the latency model and the memory model.

The op-level simulator (planner.simulate) is the judge of these formulas; tests/test_sim_closed_forms.py
checks them against it on uniform stages over a grid (tolerances stated there and in
docs/notes/simulator.md). Times are per micro-batch for *all* layers a device holds (all its chunks):
f = forward, b = backward (input grad + weight grad, recompute included), w = weight-grad part of b.

Exact (to rounding) against the simulator: gpipe, 1f1b, interleaved (m divisible by pp), zb-h1 (any m).
`stage_compute_time` takes per-stage times (stage 0 carries the embedding, the last stage the output
layer and the loss): gpipe steady state at the slowest stage, warm-up and cool-down at the others' own times,
exact whenever the last stage is the slowest (the usual case); 1f1b, zb-h1 and interleaved (m a multiple of pp)
their orders walked, exact; see its docstring.
V-Min / V-Half: the steady-state period of seed 001's order (v_period, exact on uniform stages) and a fitted
warm-up + cool-down (v_ramp). V-ZB: seed 001's order has no repeating bubble (period = the work), its ramp vzb_ramp.
These closed forms are compute_time's (uniform stages); the estimate walks the V-shapes' orders themselves
(vwalk.v_walk: V-Min, V-Half, PyTorch's V-ZB, the seed's V-ZB below 4pp micro-batches), exact at every m.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from planner.config import V_SHAPES, chunks_per_device  # noqa: F401  (chunks_per_device: re-exported)
from planner.costs.vwalk import STEADY_TOL, steady_shift, v_walk  # noqa: F401  (STEADY_TOL: re-exported)


def compute_time(schedule: str, pp: int, m: int, v: int, f: float, b: float, w: float) -> float:
    """Iteration compute time of the slowest device, pipeline bubbles included, no communication."""
    if pp == 1:
        return m * (f + b)
    if schedule in ("gpipe", "1f1b"):
        return (m + pp - 1) * (f + b)
    if schedule == "interleaved":
        return m * (f + b) + (pp - 1) * (f + b) / v
    if schedule == "zb-h1":
        # the zero-bubble paper's order (stage i runs W(j) after B(j+i)) walked: stage_compute_time's
        return stage_compute_time("zb-h1", pp, m, 1, [f] * pp, [b] * pp, [w] * pp)
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


def stage_compute_time(schedule: str, pp: int, m: int, v: int, f, b, w, pytorch: bool = False,
                       model: tuple | None = None) -> float:
    """Iteration compute time with per-stage (per-device) times f[i], b[i], w[i], bubbles included.

    GPipe: the slowest device k runs m micro-batches back to back (m * (f_k + b_k)); every other device adds its own
    share of the fill and drain, not the slowest one's: the uniform bubble term with (pp - 1) * x replaced by the sum
    over the other devices of their x. 1F1B, interleaved (m % pp == 0), ZB-H1 and the walked V-shapes run their
    orders instead (below). Equal stages give exactly `compute_time`.

    Against the simulator (zero communication; stage 0 and the last stage heavier than the rest;
    tests/test_sim_closed_forms.py, STAGE_TOL): gpipe exact; 1f1b its order walked (vwalk.v_walk on ZB-H1's order
    with no weight-gradient time: ZB-H1 is 1F1B with each W split off its B, the same F / B sequence on every device,
    tests/test_lock_step_walk.py; equal to lockstep.lock_step_time at zero hops and to the replay at every m; the
    closed form above was exact only with the last stage the slowest, else up to +12%, where a slowest stage 0 waits
    for each micro-batch's round trip between its backwards: +6.0% on the iteration, the fuzz of valid plans, seed 8
    case 592, pp 2, m 2); interleaved exact (its order
    run: interleaved_time; the closed form with (f_i + b_i) / v fill slots was -5% .. +9%),
    zb-h1 its order walked (vwalk.v_walk: the replay's at every m; the closed form it replaces, from the zero-bubble
    code's timing model, was exact only with the last stage the slowest and m >= pp, else 0 .. +15%),
    V-shapes: their orders walked (vwalk.v_walk: V-Min, V-Half, the seed's V-ZB below 4pp micro-batches, model its
    builder's (hidden, heads, sequence); pytorch: PyTorch pipelining's V-ZB, ZeRO-3 plans being torchtitan's), equal to
    the replay at every m; the seed's V-ZB beyond its walk by its closed form (vzb_ramp: under 3% from m = 2pp on
    uniform stages). The closed forms they replace were v-half -10 .. +10%, v-min -14 .. +2%, and PyTorch's V-ZB from
    2pp +0.4 .. +9.6% with heavier end ranks (docs/notes/simulator.md, "V-shapes: one walk").
    Mapping-independent, so a valid constant of the objective.
    """
    f, b, w = (list(map(float, x)) for x in (f, b, w))
    if len(f) != pp:
        raise ValueError(f"{len(f)} stage times for pp={pp}")
    if pp == 1:
        return m * (f[0] + b[0])
    if schedule in V_SHAPES:
        tl = v_walk(schedule, f, b, w, m, pytorch=pytorch, model=model)
        if tl is not None:
            return tl.makespan
        f, b, w = _v_devices(f, b, w)
    t = [fi + bi for fi, bi in zip(f, b, strict=True)]
    k = max(range(pp), key=lambda i: t[i])
    if schedule == "1f1b":      # its order walked: ZB-H1's, whose F / B sequence on every device is 1F1B's, with W = 0
        return v_walk("zb-h1", f, b, [0.0] * pp, m).makespan
    if schedule == "gpipe":
        x = t
    elif schedule == "interleaved" and m % pp == 0:    # Megatron-Core's order run on the chunks as the replay
        per = place_chunk_times(np.array([f, b]).T, v, (pp - 1, v - 1))     # places them
        return interleaved_time(per[..., 0], per[..., 1], m)
    elif schedule == "interleaved":      # m not a multiple of pp (Megatron-Core refuses it): the closed form
        x = [ti / v for ti in t]
    elif schedule == "zb-h1":         # its order walked (vwalk.v_walk), the replay's at every m
        return v_walk("zb-h1", f, b, w, m).makespan
    elif schedule == "v-zb":         # the seed's, beyond its walk
        return m * t[k] + vzb_ramp([(f[i], b[i], w[i]) for i in range(pp) if i != k], w[k])
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


def _interleaved_steady(fc: tuple, bc: tuple, n1: int, n: int, c: tuple, blocking: bool) -> tuple:
    """(the makespan of n groups of p micro-batches from the run of n1 (< n) groups, when that run reaches a periodic
    state, else None; the ops it timed; the groups of the run whose ops after the last cut are the long run's, shifted:
    n1 + (n - n1) mod q, else None). Max-plus argument: past the warm-ups (position w_0 + 2) the order is invariant
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
        return None, 0, None
    _, _, _, _, _, at, flat_cut = _interleaved_dag(p, n1 * p, v)
    if not flat_cut:
        return None, 0, None
    e = np.array(_interleaved_ends(fc, bc, n1 * p, c, blocking))
    pos = P0 - 2 + period * np.arange(steps + 1)[:, None] + np.array([0, 1])
    X = e[at[:, pos]].transpose(1, 0, 2).reshape(steps + 1, -1)      # (cuts, 2 p)
    for t in range(1, steps + 1):
        hit = steady_shift(X, t, (1, 2, 3))
        if hit is not None:
            q, D = hit
            r = (n - n1) % q
            base = e.max() if r == 0 else _interleaved_makespan(fc, bc, (n1 + r) * p, c, blocking)
            return float(base + (n - n1 - r) // q * D), (n1 + n1 + r) * 2 * p * v * p, n1 + r
    return None, n1 * 2 * p * v * p, None


INTERLEAVED_STEADY_CUTS = 3      # the first run of the steady-state test holds this many cuts (_interleaved_steady)


@functools.lru_cache(maxsize=4096)
def _interleaved_time(fc: tuple, bc: tuple, m: int, c: tuple, blocking: bool) -> tuple:
    """(interleaved_time's makespan, the ops its runs timed, the micro-batches of the shortest run whose ops from
    device 0's cool-down on are the whole order's, shifted: m itself where no periodic state was found)."""
    # runs of the fewest groups that hold INTERLEAVED_STEADY_CUTS cuts past device 0's warm-up, then twice as many
    # ..., until one reaches a periodic state, while at most 3/4 of the order; else the whole order
    p, v = len(fc), len(fc[0])
    n = m // p
    w0 = 2 * (p - 1) + (v - 1) * p
    n1 = INTERLEAVED_STEADY_CUTS + -(-(2 * w0 + 2) // (2 * p * v))
    ops = 0
    while 4 * n1 <= 3 * n:
        t, k, tail = _interleaved_steady(fc, bc, n1, n, c, blocking)
        ops += k
        if t is not None:
            return t, ops, tail * p
        n1 *= 2
    return _interleaved_makespan(fc, bc, m, c, blocking), ops + 2 * m * v * p, m


def _interleaved_key(fc, bc, m: int, c, blocking: bool) -> tuple:
    """The cached walks' arguments: chunk times as float tuples, one hop per boundary and the wrap; without hops a
    sender holds nothing (one key for compute_const's run and the hop charge's zero-hop one)."""
    p = len(fc)
    fc = tuple(tuple(map(float, x)) for x in fc)
    bc = tuple(tuple(map(float, x)) for x in bc)
    cs = tuple(map(float, c)) if np.ndim(c) else (float(c),) * p
    if len(cs) != p:
        raise ValueError(f"{len(cs)} hops for pp={p} (one per boundary and the wrap)")
    return fc, bc, int(m), cs, bool(blocking) and any(cs)


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
    from planner.mapping import work  # here: planner.mapping imports this module

    t, ops, _ = _interleaved_time(*_interleaved_key(fc, bc, m, c, blocking))
    work.charge(ops * work.ORDER_OP_WORK_S)  # every call, cached or not: the charge depends on the plan only
    return t


def aligned_sync_step(b_chunks, d: int, c: int) -> int:
    """Which of pipeline rank d's backward steps (b_chunks: each step's model chunk, in order) launches chunk c's
    gradient sync under Megatron-Core's --overlap-grad-reduce with --align-grad-reduce (both on by default):
    `pipeline_parallel_rank` steps after the chunk's last backward, and the chunks not launched by then after the
    device's last backward (NVIDIA/Megatron-LM@d98e8a64 megatron/core/pipeline_parallel/schedules.py,
    backward_step_helper_postprocess; "Launch any remaining grad reductions"). The one home of the rule: the replay's
    launch (simulator.replay._aligned_ready) and the estimate's leads (interleaved_sync_leads)."""
    b_chunks = np.asarray(b_chunks)
    return min(int(np.flatnonzero(b_chunks == c)[-1]) + d, len(b_chunks) - 1)


@functools.lru_cache(maxsize=1024)
def _interleaved_sync_leads(fc: tuple, bc: tuple, m: int, c: tuple, blocking: bool) -> tuple:
    p, v = len(fc), len(fc[0])
    _, ops, tail = _interleaved_time(fc, bc, m, c, blocking)
    # the leads are differences of end times from device 0's cool-down on: the short run's equal the whole order's
    e = _interleaved_ends(fc, bc, tail, c, blocking)
    at = _interleaved_dag(p, tail, v)[5]
    out = []
    for d, (kinds, _, chs) in enumerate(interleaved_order(p, tail, v)):
        steps = np.flatnonzero(kinds == 1)
        end = e[at[d, -1]]
        out.append(tuple(end - e[at[d, steps[aligned_sync_step(chs[steps], d, k)]]] for k in range(v)))
    return tuple(out), ops + 2 * tail * v * p


def interleaved_sync_leads(fc, bc, m: int, c=0.0, blocking: bool = False) -> np.ndarray:
    """(p, v) seconds from each chunk's gradient-sync launch (aligned_sync_step) to its device's last backward's end
    in Megatron-Core's interleaved order, walked as interleaved_time walks it (same arguments): what the estimate's
    overlapped data-parallel term (iteration.interleaved_dp_exposed_s) hides each chunk's sync behind. Longer with
    hops: the cool-down's backwards wait on their neighbours' across every boundary. Cached, charged as
    interleaved_time."""
    from planner.mapping import work  # here: planner.mapping imports this module

    leads, ops = _interleaved_sync_leads(*_interleaved_key(fc, bc, m, c, blocking))
    work.charge(ops * work.ORDER_OP_WORK_S)
    return np.array(leads)


def convex_pieces(f, hi: float, rel: float = 1e-9) -> list[tuple[float, float]]:
    """The affine pieces [(slope, intercept), ...] (slopes rising) of a convex piecewise-linear f on [0, hi], found
    from f's values alone (the sandwich method): the tangent lines at both ends of an interval meet at x*; f(x*) on
    them is one knee there, else x* splits the interval. A slope is a secant over a step of 1e-6 of the range, exact
    unless a knee lies that close (two near pieces then merge into one between them). Every evaluation is one call of
    f; `rel` (of the range of f) is where two values count equal."""
    d = hi * 1e-6
    cache: dict = {}

    def fv(x):
        if x not in cache:
            cache[x] = float(f(x))
        return cache[x]

    f0, f1 = fv(0.0), fv(hi)
    tol = rel * max(1.0, abs(f0), abs(f1))
    s0, s1 = (fv(d) - f0) / d, (f1 - fv(hi - d)) / d
    out = []

    def walk(a, fa, sa, b, fb, sb, depth):
        if sb - sa <= tol / (b - a) or depth > 24:
            out.append((sa, fa - sa * a))
            return
        x = (fb - sb * b - fa + sa * a) / (sa - sb)
        x = min(max(x, a), b)
        fx = fv(x)
        if fx <= fa + sa * (x - a) + tol or x - a <= 2 * d or b - x <= 2 * d:
            out.extend([(sa, fa - sa * a), (sb, fb - sb * b)])     # one knee at x
            return
        walk(a, fa, sa, x, fx, (fx - fv(x - d)) / d, depth + 1)
        walk(x, fx, (fv(x + d) - fx) / d, b, fb, sb, depth + 1)

    if hi <= 0:
        return [(0.0, f0)]
    walk(0.0, f0, s0, hi, f1, s1, 0)
    merged = []                          # equal slopes in a row: one piece
    for s, c in out:
        if merged and abs(s - merged[-1][0]) <= 1e-6 * max(1.0, abs(s)):
            continue
        merged.append((s, c))
    return merged


def pytorch_zbv_time(f, b, w, m: int, c: float = 0.0) -> float:
    """Makespan of PyTorch's V-ZB order (vorders.pytorch_zbv_order, torchtitan's for ZeRO-3 plans) with per-rank times
    f, b (w included), w and every hop c one way: its walk (vwalk.v_walk), equal to the replay."""
    return v_walk("v-zb", f, b, w, m, c, pytorch=True).makespan


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
    ZB-H1 (two traversals on uniform stages; the latency model charges its order walked with and without hops,
    vwalk.v_walk_p2p_s) and V-ZB hide
    steady-state sends behind other work and expose only their ramp (a fixed number of traversals,
    hence the p/m factor; V-ZB 2.5, fitted to the simulator replaying seed 001's zbv.py order: 1.7-3.0, median 2.5,
    at p 4, 6, 8, m p..8p, f:b:w 1:2:0.66, 1:2:1, 1:2.3:0.13, 1:3:1.5, hop 0.05-0.3 of a device's forward on
    uniform stages; 2.1-3.0 from m = 4p; a hop near a chunk's forward with W small is no longer hidden and grows
    with m, not covered; the latency model charges it only beyond the seed's V-ZB walk, and there walks the hops
    where they pass 0.3 of a device's forward: vwalk.vzb_hops_walked);
    V-Min and V-Half expose sends every micro-batch: 3 and 1.5 traversals (the latency model charges
    every walked V-shape its order walked with and without hops instead: vwalk.v_walk_p2p_s), fitted
    to the simulator replaying seed 001's order (vblocks.py; 2.8-3.1 and 1.4-1.5 at pp 4-8 on uniform stages).
    engine="deepspeed" (its 1F1B only, simulate.deepspeed): every transfer is a rendezvous that holds
    sender and receiver, so a stage with two neighbours spends 4 one-way transfers per micro-batch (an end
    stage 2) and the busiest stage sets the pace, plus the ramp: 4m + 2(pp-4) one-way hops in all for
    pp >= 3 and 2m for pp = 2, charged at the path's mean hop (exact on uniform stages and links; a slow
    link counts at its share of the mean, as in Pipette's sum; the latency model walks the engine with and
    without hops instead on the plan's stage times: lockstep.deepspeed_time, iteration.p2p_exposed_hops).
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

