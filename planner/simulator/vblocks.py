"""V-Min and V-Half op orders as the seed's code builds them (sail-sg/zero-bubble-pipeline-parallelism).

Seed 001's runtime (megatron/core/pipeline_parallel/zerobubble/runtime.py @39f2c186, the `zero_bubble_v_schedule_
mem_setup` min / half branch) builds one fixed order per device with `zbv_greedy.PipelineGraph` at unit times
(F = B = W = 1000, comm 1) and runs it with whatever the real times are. This is a port of that builder
(scheduler/zbv_greedy.py @39f2c186): the stable pattern (each micro-batch's four F / B passes at fixed slots of a
6-slot period), `put_w` (each W in the first free slot after its B), `reorder` (the "squeeze" of warm-up and
cool-down into free slots without raising the peak memory), twice, then the W's placed again per chunk. The order
does not depend on the op times: the engine times it, so uneven F, B, W stretch the period as on the GPUs (V-Min's
repeating bubbles, seed 001: "V-Min is vulnerable").

Cost: the seed re-scans a device's memory for every candidate slot of the squeeze (2-5 s at p 64); here a candidate
is checked on the slots it changes, from per-device state kept across the walk, with the same slot lists (tests/
test_vblocks_fast.py against the straight port in tests/vblocks_ref.py): ~0.2 s at p 64, m 136. The order is built
once per (schedule, p) at m <= 2p + 8 and the steady state (the stable pattern, untouched by the squeeze) repeated
for larger m (_extend, checked).
"""
from __future__ import annotations

import bisect
import functools

import numpy as np

from planner.costs.vorders import stable_pattern
from planner.simulator.ops import B, F, W

PERIOD = 6          # slots per micro-batch and device: F, B, W of two chunks


def _put_w(sched: list, split: bool) -> list:
    """zbv_greedy.put_w: a W list (two with split, one per chunk) filled slot by slot, each W in the first free slot
    after its B, the rest after the last op."""
    sched = [list(x) for x in sched[:4]]
    bound = max(x[-1] for x in sched)
    sched += [[] for _ in range(2 if split else 1)]
    taken = sorted((t, k) for k in range(4) for t in sched[k])
    busy = {t for t, _ in taken}
    kind_at = dict(taken)
    cnt = [0, 0]
    i = 0
    for i in range(bound + 1):
        if i in busy:
            k = kind_at[i]
            if k >= 2:
                cnt[k - 2 if split else 0] += 1
        else:
            for c in range(2):
                if cnt[c]:
                    sched[4 + c].append(i)
                    cnt[c] -= 1
                    break
    for c in range(2):
        while cnt[c] > 0:
            i += 1
            sched[4 + c].append(i)
            cnt[c] -= 1
    return sched


def _reorder(result: list, consider_w: bool) -> list:
    """zbv_greedy.reorder: walk the ops in slot order; in warm-up (until device 0's first B of chunk 0) and
    cool-down (after the last micro-batch's first forward) move each to the earliest free slot after its
    dependencies that keeps the device's peak memory, else leave it (the steady state is never moved).

    The seed re-scans the device's memory for every candidate slot; this gives the same slots from per-device
    state kept across the walk (tests/vblocks_ref.py is the straight port, test_vblocks_fast.py checks equality).
    Every device's peak stays <= cap (cap is the largest at the start, a move is taken only if it keeps that), so
    a candidate is checked on the slots it changes only: moving an op from t to a free x < t changes the memory
    curve on [x, t) alone with W lists (a B not at all, a W lowers it, an F raises it by 1: the test is a suffix
    max, monotone in x), and from x until the curve rejoins the old one without (the pending W's retire in free
    slots, replayed slot by slot)."""
    if consider_w:
        result = [_put_w(s, split=False) for s in result]
    else:
        result = [[list(x) for x in s] for s in result]
    p = len(result)
    nm = len(result[0][0])
    span = max(x[-1] for s in result for x in s if x) + 1
    # the stable patterns, put_w and _eager give each op of a device its own slot; the checks below rely on it
    assert all(len({t for x in s for t in x}) == sum(map(len, s)) for s in result), "two ops share a slot"
    # next slot >= s not taken by a walked op (union-find with path halving; walked slots are only added)
    nxt = [list(range(span + 1)) for _ in range(p)]

    def first_free(d: int, s: int) -> int:
        a = nxt[d]
        while a[s] != s:
            a[s] = a[a[s]]
            s = a[s]
        return s

    if consider_w:
        # live[d][s + 1]: live activations after slot s (F +1, W -1) over all ops; below the walked slot it counts
        # the walked ops alone (the rest lie later). live[d][0] = 0 is slot -1.
        live = []
        for dev in result:
            delta = np.zeros(span + 1, np.int64)
            for k, v in ((0, 1), (1, 1), (4, -1)):
                np.add.at(delta, np.asarray(dev[k], np.int64) + 1, v)
            live.append(np.cumsum(delta))
        cap = max(int(x.max()) for x in live)
        b_sorted = [sorted(dev[2] + dev[3]) for dev in result]     # a W waits for the device's j-th B
    else:
        # per slot: 0 free, 1 F, 2 B; cur / pend: live activations and unretired W's after the slot
        occ, cur, pend = [], [], []
        for dev in result:
            o = [0] * span
            for k in range(4):
                for t in dev[k]:
                    o[t] = 1 if k < 2 else 2
            c, q, cs, qs = 0, 0, [0] * span, [0] * span
            for s in range(span):
                if o[s] == 0:
                    if q:
                        q -= 1
                        c -= 1
                elif o[s] == 1:
                    c += 1
                else:
                    q += 1
                cs[s], qs[s] = c, q
            occ.append(o)
            cur.append(cs)
            pend.append(qs)
        cap = max([0] + [max(cs) for cs in cur])     # the seed's peak starts at 0

    def replay(d: int, x: int, t: int, kind: int) -> list | None:
        """The states from slot x with the op at x instead of t until they rejoin the old ones; None when the
        peak would pass cap."""
        o, cs, qs = occ[d], cur[d], pend[d]
        c, q = (cs[x - 1], qs[x - 1]) if x else (0, 0)
        seg = []
        for s in range(x, span):
            v = kind if s == x else 0 if s == t else o[s]
            if v == 0:
                if q:
                    q -= 1
                    c -= 1
            else:
                if v == 1:
                    c += 1
                else:
                    q += 1
                if c > cap:
                    return None
            if s >= t and c == cs[s] and q == qs[s]:
                break
            seg.append((c, q))
        return seg

    phase = 0
    for t, d, k, j in _walk(result):
        if k == 3 and d == 0 and phase == 0:
            phase = 1
        if phase == 1 or (phase == 0 and not consider_w):
            if phase == 1 and k == 0 and j == nm - 1:
                phase = 2
            nxt[d][t] = t + 1
            continue
        dep = max([-1] + [result[a][b][c] for a, b, c in _deps(d, k, j, p)])
        if k == 4:
            dep = max(dep, b_sorted[d][j])
        dep += 1
        x = first_free(d, dep)
        if x < t:
            if consider_w:
                if k < 2:       # an F at x: the live count after slots x - 1 .. t - 1, plus one, within cap
                    hit = np.flatnonzero(live[d][dep:t + 1] >= cap)
                    if hit.size:
                        x = first_free(d, dep + int(hit[-1]) + 1)
                if x < t:
                    if k < 2:
                        live[d][x + 1:t + 1] += 1
                    elif k == 4:
                        live[d][x + 1:t + 1] -= 1
                    else:
                        bs = b_sorted[d]
                        del bs[bisect.bisect_left(bs, t)]
                        bisect.insort(bs, x)
            else:
                kind = 1 if k < 2 else 2
                while x < t:
                    seg = replay(d, x, t, kind)
                    if seg is not None:
                        occ[d][x], occ[d][t] = kind, 0
                        for i, (c, q) in enumerate(seg, x):
                            cur[d][i], pend[d][i] = c, q
                        break
                    x = first_free(d, x + 1)
        if x < t:
            result[d][k][j] = x
        nxt[d][result[d][k][j]] = result[d][k][j] + 1
    if not consider_w:
        result = [_put_w(s, split=False) for s in result]
    return _eager(result)


def _deps(d: int, k: int, j: int, p: int) -> list:
    """The ops (device, list, index) op j of list k on device d waits for, in the seed's reorder and
    eager_execution_time alike: the same pass of the previous stage (F0 and B1 from device d - 1, F1 and B0 from d + 1,
    down and back up the V), the previous pass of its micro-batch on the device (F0 -> F1 -> B1 -> B0), and its own
    previous micro-batch. (reorder adds a W's own B, by count: b_sorted.)"""
    out = []
    if k in (0, 2) and d > 0:
        out.append((d - 1, k, j))
    if k in (1, 3) and d + 1 < p:
        out.append((d + 1, k, j))
    if 0 < k < 4:
        out.append((d, k - 1, j))
    if j > 0:
        out.append((d, k, j - 1))
    return out


def _walk(result: list):
    """(slot, device, list, index) of every op in slot order: the order the seed's heap pops them in (a list's next
    op is pushed at its first slot, unchanged until it is popped)."""
    p, nk = len(result), max(len(dev) for dev in result)
    nj = max(len(x) for dev in result for x in dev) + 1
    step = p * nk * nj                  # one sortable integer per op: slot, then device, list, index
    key = np.concatenate([np.asarray(x, np.int64) * step + (d * nk + k) * nj + np.arange(len(x))
                          for d, dev in enumerate(result) for k, x in enumerate(dev) if x])
    key.sort()
    t, rest = np.divmod(key, step)
    dk, j = np.divmod(rest, nj)
    d, k = np.divmod(dk, nk)
    return zip(t.tolist(), d.tolist(), k.tolist(), j.tolist())


def _eager(result: list) -> list:
    """zbv_greedy.eager_execution_time at unit times, no communication: each op, in slot order, starts when its
    device's previous op, its own previous micro-batch and its data dependency are done; the start slots."""
    p = len(result)
    end = [[[None] * len(x) for x in dev] for dev in result]    # None: max() fails on an op not yet timed
    out = [[[0] * len(x) for x in dev] for dev in result]
    last = [0] * p                 # end of the device's previous op
    for _, d, k, j in _walk(result):
        dep = max([last[d]] + [end[a][b][c] for a, b, c in _deps(d, k, j, p)])
        end[d][k][j] = last[d] = dep + 1
        out[d][k][j] = dep
    return out


def _slots(name: str, p: int, m: int) -> list:
    """Per device, the six slot lists [F0, F1, B1, B0, W1, W0] over m micro-batches (zbv_greedy.schedule_from_
    pattern with do_reorder)."""
    res = [[list(range(x, x + PERIOD * m, PERIOD)) for x in dev] for dev in stable_pattern(name, p)]
    r1 = _reorder(res, consider_w=True)
    r1 = [s[:4] for s in r1]
    r2 = _reorder(r1, consider_w=False)
    return [_put_w(s[:4], split=True) for s in r2]


def _extend(small: list, m0: int, m: int) -> list | None:
    """The slot lists for m micro-batches from those for m0 < m: the stable pattern (+PERIOD per micro-batch) runs
    through the middle, so m - m0 periods are inserted at a cut there. None when the middle is not periodic."""
    delta = m - m0
    cut = PERIOD * (m0 // 2)
    out = []
    for dev in small:
        lists = []
        for lst in dev:
            j = next((i for i, t in enumerate(lst) if t >= cut), None)
            if j is None or j == 0 or j + 1 >= len(lst) or lst[j] - lst[j - 1] != PERIOD or \
                    lst[j + 1] - lst[j] != PERIOD:
                return None
            mid = [lst[j] + PERIOD * k for k in range(delta)]
            lists.append(lst[:j] + mid + [t + PERIOD * delta for t in lst[j:]])
        out.append(lists)
    return out


@functools.lru_cache(maxsize=8)      # an entry at p 64, m 2048 holds ~30 MB of tuples
def _slots_cached(name: str, p: int, m: int) -> tuple:
    m0 = 2 * p + 8             # warm-up and cool-down each span under p micro-batches' periods
    if m <= m0:
        return tuple(tuple(tuple(x) for x in dev) for dev in _slots(name, p, m))
    small = _slots_cached(name, p, m0)
    ext = _extend([[list(x) for x in dev] for dev in small], m0, m)
    if ext is None:            # not seen: then build it in full
        ext = _slots(name, p, m)
    return tuple(tuple(tuple(x) for x in dev) for dev in ext)


# slot list index -> (op kind, chunk): F0, F1, B of chunk 1, B of chunk 0, W of chunk 1, W of chunk 0
_KIND = (F, F, B, B, W, W)
_CHUNK = (0, 1, 1, 0, 1, 0)


def v_block_order(name: str, p: int, m: int) -> list:
    """V-Min / V-Half per-device op arrays (kind, micro-batch, chunk) in slot order, the seed's runtime order."""
    out = []
    for dev in _slots_cached(name, p, m):
        slot = np.concatenate([np.asarray(x, np.int64) for x in dev])
        kind = np.concatenate([np.full(len(x), _KIND[k]) for k, x in enumerate(dev)])
        mb = np.concatenate([np.arange(len(x)) for x in dev])
        ch = np.concatenate([np.full(len(x), _CHUNK[k]) for k, x in enumerate(dev)])
        o = np.argsort(slot, kind="stable")
        out.append((kind[o].astype(np.int64), mb[o].astype(np.int64), ch[o].astype(np.int64)))
    return out
