"""V-Min and V-Half op orders: a repeating building block per micro-batch, placed with the real chunk times.

A block places micro-batch 0's ops on each device modulo a period T; micro-batch j repeats it j periods
later (_order). Candidate blocks (uniform offsets under the seed's memory target, and the tightly packed
block) are each timed by the engine on 3p micro-batches and the fastest within the target is kept
(_v_choice): choosing a block needs the engine, so this lives apart from orders.py, which only dispatches.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from planner.simulator.engine import build_graph, memory_deltas, peak_activation, run
from planner.simulator.ops import B, F, Schedule, W, stage_table


def _place(res: list, ready: float, dur: float, T: float) -> float | None:
    """Earliest start >= ready whose interval, taken modulo T, overlaps none of `res` (start mod T, length)."""
    x = ready
    for _ in range(4 * len(res) + 4):
        clash = None
        for a, ln in res:
            # circular overlap of [x, x+dur) and [a, a+ln) modulo T
            off = (a - x) % T                   # where a starts, seen from x
            if off < dur - 1e-12 or off + ln > T + 1e-12:
                clash = (a, ln)
                break
        if clash is None:
            return x
        a, ln = clash
        x += (a + ln - x) % T if (a + ln - x) % T > 1e-12 else T
        if x - ready > T:
            return None
    return None


def _put(res: list, times: dict, kind: int, s: int, ready: float, dur: float, T: float,
         exact: bool = False) -> float | None:
    """Place op (kind, s) of a periodic block on its device's reservations `res` (see _place);
    exact: only at `ready` itself. Records it and returns its start, or None when it does not fit."""
    x = _place(res, ready, dur, T)
    if x is None or (exact and x != ready):
        return None
    res.append((x % T, dur))
    times[(kind, s)] = x
    return x


def v_memory_cap(name: str, p: int) -> int:
    """The seed's activation targets for V-Min and V-Half, in micro-batches of a device's layers:
    ceil((p+2)/3) (about 1/3 of 1F1B's p) and ceil(p/2)+1 (about 1/2)."""
    return math.ceil((p + 2) / 3) if name == "v-min" else math.ceil(p / 2) + 1


def _order(p: int, m: int, T: float, times: dict) -> list:
    """Per-device op arrays: micro-batch j's block shifted by j*T, sorted by time."""
    st = stage_table("v-min", p, 2)
    out = []
    j = np.arange(m)
    for d in range(p):
        keys, kinds, mbs, chs = [], [], [], []
        for c in range(2):
            s = int(st[d, c])
            for kind in (F, B, W):
                keys.append(j * T + times[(kind, s)])
                kinds.append(np.full(m, kind))
                mbs.append(j)
                chs.append(np.full(m, c))
        order = np.argsort(np.concatenate(keys), kind="stable")
        out.append((np.concatenate(kinds)[order], np.concatenate(mbs)[order], np.concatenate(chs)[order]))
    return out


def _uniform_blocks(p: int, f: float, b: float, w: float, cap: float, limit: int = 6) -> list:
    """Blocks with uniform offsets between adjacent passes (seed 001, rebuttal): F(s) at s*dF, the
    backward chain `turn` after the last forward at offsets dB, each W in the first free gap after its B.
    Searches dF, dB (1x..2x the pass time) and turn for the shortest period T at which some block
    fits with at most `cap` live micro-batches (lifespans / T); returns up to `limit` (T, times)."""
    S2 = 2 * p
    st = stage_table("v-min", p, 2)
    dev_of = np.empty(S2, np.int64)
    for d in range(p):
        dev_of[st[d, 0]], dev_of[st[d, 1]] = d, d
    dev_of = dev_of.tolist()
    base = 2 * (f + b + w)
    grid = np.linspace(1.0, 2.0, 11)
    turns = [k * min(f, b, w) / 2 for k in range(0, 2 * p, max(1, p // 4))]
    found = []
    for k in range(50):
        T = base * (1 + 0.02 * k)
        for ga in grid:
            for gc in grid:
                for turn in turns:
                    res = [[] for _ in range(p)]
                    times = {}
                    ok = True
                    for s_ in range(S2):
                        if _put(res[dev_of[s_]], times, F, s_, s_ * f * ga, f, T, exact=True) is None:
                            ok = False
                            break
                    t0 = times[(F, S2 - 1)] + f + turn if ok else 0.0
                    for s_ in (range(S2 - 1, -1, -1) if ok else ()):
                        if _put(res[dev_of[s_]], times, B, s_, t0 + (S2 - 1 - s_) * b * gc, b, T, exact=True) is None:
                            ok = False
                            break
                    for s_ in (sorted(range(S2), key=lambda q: times[(B, q)]) if ok else ()):
                        if _put(res[dev_of[s_]], times, W, s_, times[(B, s_)] + b, w, T) is None:
                            ok = False
                            break
                    if not ok:
                        continue
                    live = max(sum(times[(W, int(st[d, c]))] + w - times[(F, int(st[d, c]))] for c in range(2))
                               for d in range(p)) / T / 2
                    if live <= cap:
                        found.append((live, T, times))
        if found:
            found.sort(key=lambda x: x[0])
            return [(T_, t_) for _, T_, t_ in found[:limit]]
    return []


@functools.lru_cache(maxsize=256)
def _v_choice(name: str, p: int, f: float, b: float, w: float) -> tuple[float, tuple]:
    """Pick V-Min's / V-Half's building block: the candidates (uniform-offset blocks under the memory
    target, and the tightly packed block) are each run by the engine on 3p micro-batches with these
    times; the fastest within the target wins, else the one with the least memory."""
    cap = v_memory_cap(name, p)
    cands = _uniform_blocks(p, f, b, w, cap)
    cands.append(_v_block_times(p, f, b, w, 0.0, 0.0))
    m = 3 * p
    scored = []
    for T, times in cands:
        lists = _order(p, m, T, times)
        sch = Schedule(name, p, 2, m, True, False, False, tuple(x[0] for x in lists), tuple(x[1] for x in lists),
                       tuple(x[2] for x in lists))
        g = build_graph(sch)
        dur = np.array([f, b, w, 0.0])[g.kind]
        _, end = run(g.offs.tolist(), g.pred.tolist(), [0.0] * len(dur), dur.tolist())
        alloc, free = memory_deltas(g, True, np.full((p, 2), 0.5), np.zeros((p, 2)))
        peak = float(peak_activation(g, alloc, free).max())
        scored.append((peak > cap + 1e-9, max(end) if peak <= cap + 1e-9 else peak, T, times))
    scored.sort(key=lambda x: (x[0], x[1]))
    _, _, T, times = scored[0]
    return T, tuple(sorted(times.items()))


def v_block_order(name: str, p: int, m: int, f: float, b: float, w: float) -> list:
    """V-Min / V-Half by a repeating building block placed with the real chunk times (see _v_choice)."""
    def key(x: float) -> float:            # cache on 3 significant digits of the times
        return float(f"{x:.3g}")
    T, times = _v_choice(name, p, key(f), key(b), key(w))
    return _order(p, m, T, dict(times))


def _v_block_times(p: int, f: float, b: float, w: float, turn: float, wdelay: float) -> tuple[float, dict]:
    """V-shape by a repeating building block placed with the real chunk times f, b (input grad), w.

    Micro-batch 0's ops are placed in dependency order (F down and up the V, the backward chain `turn`
    after the last forward, then each W at least `wdelay` after its B), each at the earliest time whose
    interval modulo the period does not overlap what its device already holds; micro-batch j repeats
    the block j periods later. The period starts at one micro-batch's work per device, 2(f+b+w), and
    grows by small steps until the block fits (uneven times can fragment a device's period). The order
    is the sort of these times; the engine compacts it.
    """
    S = 2 * p
    st = stage_table("v-min", p, 2)
    dev_of = np.empty(S, np.int64)
    for d in range(p):
        dev_of[st[d, 0]], dev_of[st[d, 1]] = d, d
    base = 2 * (f + b + w)
    for k in range(200):
        T = base * (1 + 0.01 * k)
        res = [[] for _ in range(p)]
        times = {}

        t, ok = 0.0, True
        for s in range(S):                       # forward chain down and up the V
            x = _put(res[dev_of[s]], times, F, s, t, f, T)
            if x is None:
                ok = False
                break
            t = x + f
        t += turn
        for s in (range(S - 1, -1, -1) if ok else ()):   # backward chain
            x = _put(res[dev_of[s]], times, B, s, t, b, T)
            if x is None:
                ok = False
                break
            t = x + b
        for s in (sorted(range(S), key=lambda s: times[(B, s)]) if ok else ()):
            if _put(res[dev_of[s]], times, W, s, times[(B, s)] + b + wdelay, w, T) is None:
                ok = False
                break
        if ok:
            return T, times
    raise RuntimeError(f"V block does not fit for p={p}")
