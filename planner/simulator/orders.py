"""Pipeline schedules as per-device ordered operation lists.

A schedule over `p` devices with `v` model chunks per device has S = p*v virtual stages; micro-batch j
flows forward through stages 0..S-1 and backward through S-1..0. Operations are F (forward), B (backward;
input gradient only when the schedule splits off W), W (weight gradient) and R (recompute of a chunk's
activations before its backward). Each device's list is three int arrays (kind, micro-batch, chunk), so
that the engine can build its dependency arrays with numpy and never touches per-op Python objects.

Chunk placement: interleaved puts stage c*p + d on device d (chunk c); the V-shapes (seed 001) put stage d
(chunk 0) and stage 2p-1-d (chunk 1) on device d, so the turn of the V stays on the last device and both
ends (embedding, output layer) sit on device 0.

GPipe, 1F1B, interleaved (Megatron-LM's orders) and ZB-H1 (the zero-bubble paper's: 1F1B's F/B order,
stage i running W(j) after B(j+i)) have closed-form orders. V-Min and V-Half are the seed's own orders (its
runtime builds them at unit times and runs them at the real ones), see vblocks.py; so is V-ZB (built at the
profiled per-chunk times), see zbv.py. torchtitan's V-ZB (ZeRO-3 plans) is PyTorch's ScheduleZBVZeroBubble order
(_pytorch_zbv), the paper's hand-made ZB-V whatever the times.
"""
from __future__ import annotations

import numpy as np

from planner.config import SCHEDULES, SPLIT_SCHEDULES, V_SHAPES
from planner.costs.pipeline import chunks_per_device, interleaved_order
from planner.costs.vorders import one_f_one_b_order, pytorch_zbv_order, zb_h1_order
from planner.simulator.ops import B, F, R, Schedule, W
from planner.simulator.vblocks import v_block_order
from planner.simulator.zbv import DEFAULT_MODEL, zbv_order


def check(name: str, p: int, m: int, v: int) -> None:
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; one of {', '.join(SCHEDULES)}")
    if p < 1 or m < 1:
        raise ValueError("pp and the number of micro-batches must be >= 1")
    if name == "interleaved":
        if v < 2:
            raise ValueError("interleaved needs vpp >= 2")
        if m % p:
            raise ValueError(f"interleaved needs micro-batches ({m}) divisible by pp ({p})")


# ---------------------------------------------------------------- closed-form orders

def _gpipe(p: int, m: int) -> list:
    j = np.arange(m)
    out = []
    for _ in range(p):
        out.append((np.r_[np.full(m, F), np.full(m, B)], np.r_[j, j], np.zeros(2 * m, np.int64)))
    return out


def _interleaved(p: int, m: int, v: int) -> list:
    """Megatron-Core's interleaved 1F1B (costs.pipeline.interleaved_order, one home with the estimate's
    interleaved_time), as op arrays."""
    assert (F, B) == (0, 1)       # interleaved_order's kinds
    return interleaved_order(p, m, v)


# ---------------------------------------------------------------- PyTorch's ZB-V (torchtitan's v-zb)

def _pytorch_zbv(p: int, m: int) -> list:
    """PyTorch pipelining's ScheduleZBVZeroBubble order, which torchtitan runs for v-zb (ZeRO-3 plans):
    costs.vorders.pytorch_zbv_order (one home with the estimate's walk, costs/vwalk.py), as op arrays."""
    assert (F, B, W) == (0, 1, 2)       # pytorch_zbv_order's kinds
    out = []
    for ops in pytorch_zbv_order(p, m):
        a = np.array(ops, np.int64)
        out.append((a[:, 0], a[:, 1], a[:, 2]))
    return out


# ---------------------------------------------------------------- recompute ops

def _add_recompute(lists: list, split: bool, early: bool) -> list:
    """Insert R(j, c) before each B(j, c). Early (Mario): one slot earlier when that op is an F, so the
    recomputation runs before the forward that precedes the backward (unless that is its own forward),
    while the gradient is still on its way."""
    out = []
    for kinds, mbs, chs in lists:
        n = len(kinds)
        isb = kinds == B
        nk = np.empty(n + int(isb.sum()), np.int64)
        nm = np.empty_like(nk)
        nc = np.empty_like(nk)
        # position of each original op in the new array: shifted by the R ops inserted before it
        shift = np.cumsum(isb)                    # R inserted before each B (inclusive)
        pos = np.arange(n) + shift
        nk[pos], nm[pos], nc[pos] = kinds, mbs, chs
        rpos = pos[isb] - 1
        nk[rpos], nm[rpos], nc[rpos] = R, mbs[isb], chs[isb]
        if early:
            # swap R with the op before it when that is an F (not the first op, not another R/B)
            for r in rpos.tolist():
                if r > 0 and nk[r - 1] == F and (nm[r - 1], nc[r - 1]) != (nm[r], nc[r]):
                    nk[r - 1], nk[r] = nk[r], nk[r - 1]
                    nm[r - 1], nm[r] = nm[r], nm[r - 1]
                    nc[r - 1], nc[r] = nc[r], nc[r - 1]
        out.append((nk, nm, nc))
    return out


def build(name: str, p: int, m: int, vpp: int = 1, *, recompute: bool = False, early_recompute: bool = False,
          times: tuple[float, float, float] = (1.0, 1.0, 1.0), pytorch: bool = False,
          model: tuple[int, int, int] = DEFAULT_MODEL) -> Schedule:
    """The per-device op lists of schedule `name`. `times` = per-chunk (f, b, w) V-ZB's builder plans
    with, as the seed's profiler would report them (the engine re-times with the real costs); model = (hidden
    size, heads, sequence length) for the seed's V-ZB memory model. pytorch: PyTorch pipelining's variant where
    it differs (V-ZB; ZeRO-3 plans are torchtitan's)."""
    v = chunks_per_device(name, vpp)
    check(name, p, m, v)
    split = name in SPLIT_SCHEDULES and p > 1
    if p == 1 and name != "interleaved" and name not in V_SHAPES:
        lists = one_f_one_b_order(1, m)
    elif name == "gpipe":
        lists = _gpipe(p, m)
    elif name == "1f1b":
        lists = one_f_one_b_order(p, m)
    elif name == "interleaved":
        lists = _interleaved(p, m, v)
    elif name == "zb-h1":
        lists = zb_h1_order(p, m)
    elif name == "v-zb" and pytorch:     # torchtitan's: PyTorch's fixed ZB-V order, not built at the times
        lists = _pytorch_zbv(p, m)
    elif name == "v-zb":          # the seed's runtime order at the profiled times (zbv.py)
        f, b, w = times
        lists = zbv_order(p, m, f, max(b - w, 0.0), max(w, 0.0), model=model)
    else:           # v-min, v-half: the seed's runtime order, built at unit times (vblocks.py)
        lists = v_block_order(name, p, m)
    if not split:   # one device: no B/W split, drop W (its time stays in B)
        lists = [(k[k != W], j[k != W], c[k != W]) for k, j, c in lists]
    if recompute:
        lists = _add_recompute(lists, split, early_recompute)
    return Schedule(name, p, v, m, split, recompute, early_recompute and recompute,
                    tuple(x[0].astype(np.int8) for x in lists), tuple(x[1].astype(np.int32) for x in lists),
                    tuple(x[2].astype(np.int8) for x in lists))
