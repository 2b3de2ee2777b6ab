"""Reference copy of planner/simulator/vblocks.py's order builder as it was before the fast squeeze (commit
7d79c44): a straight port of seed 001's zbv_greedy.py (sail-sg/zero-bubble-pipeline-parallelism @39f2c186) with the
per-candidate full memory re-scan. test_vblocks_fast.py checks that the fast builder gives the same slot lists."""
from __future__ import annotations

import heapq

PERIOD = 6          # slots per micro-batch and device: F, B, W of two chunks


def stable_pattern(name: str, p: int) -> list:
    """Slots of micro-batch 0's [F chunk 0, F chunk 1, B chunk 1, B chunk 0] per device (zbv_greedy.py
    stable_pattern_v_min / stable_pattern_v_half)."""
    if name == "v-min":
        gap = 2 if p % 3 == 0 else 0
        return [[i, 2 * p - i - 1, 2 * p + gap + i, 4 * p + gap - i - 1] for i in range(p)]
    gap = 3 if p % 2 == 0 else 0
    return [[2 * i, 3 * p - i - 2, 3 * p + gap + 2 * i - 1, 6 * p + gap - i - 2] for i in range(p)]


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


def _mem(sched: list) -> int:
    """zbv_greedy.mem_of_stage: peak live activations of one device (F +1; W -1, or without W lists each B's W
    in the next free slot)."""
    ev = []
    for k, lst in enumerate(sched):
        ev += [(t, k) for t in lst]
    ev.sort()
    has_w = len(sched) > 4
    cur = res = 0
    pending = 0
    last = -1
    for t, k in ev:
        if not has_w:           # free slots between the last op and this one each retire one pending W
            free = t - last - 1
            d = min(free, pending)
            if d:
                pending -= d     # the peak is not raised by a free (it only lowers cur)
                cur -= d
        if k < 2:
            cur += 1
        elif k < 4:
            pending += 1
        else:
            cur -= 1
        res = max(res, cur)
        last = t
    return res


def _reorder(result: list, consider_w: bool) -> list:
    """zbv_greedy.reorder: walk the ops in slot order; in warm-up (until device 0's first B of chunk 0) and
    cool-down (after the last micro-batch's first forward) move each to the earliest free slot after its
    dependencies that keeps the device's peak memory, else leave it (the steady state is never moved)."""
    if consider_w:
        result = [_put_w(s, split=False) for s in result]
    nt = len(result[0])
    p = len(result)
    cap = max(_mem(s) for s in result)
    occupied = [set() for _ in range(p)]      # slots of the ops walked so far (the rest lie later)
    nm = len(result[0][0])
    heap = [(result[d][k][0], d, k, 0) for d in range(p) for k in range(nt) if result[d][k]]
    heapq.heapify(heap)
    phase = 0
    while heap:
        t, d, k, j = heapq.heappop(heap)
        if j + 1 < len(result[d][k]):
            heapq.heappush(heap, (result[d][k][j + 1], d, k, j + 1))
        if k == 3 and d == 0 and phase == 0:
            phase = 1
        if phase == 1 or (phase == 0 and not consider_w):
            if phase == 1 and k == 0 and j == nm - 1:
                phase = 2
            occupied[d].add(t)
            continue
        dep = -1
        if k in (0, 2) and d > 0:
            dep = max(dep, result[d - 1][k][j])
        if k in (1, 3) and d + 1 < p:
            dep = max(dep, result[d + 1][k][j])
        if 0 < k < 4:
            dep = max(dep, result[d][k - 1][j])
        if k == 4:
            dep = max(dep, sorted(result[d][2] + result[d][3])[j])
        if j > 0:
            dep = max(dep, result[d][k][j - 1])
        dep += 1
        moved = False
        for x in range(dep, t):
            if x not in occupied[d]:
                result[d][k][j] = x
                if _mem(result[d]) <= cap:
                    moved = True
                    break
        if not moved:
            result[d][k][j] = t
        occupied[d].add(result[d][k][j])
    if not consider_w:
        result = [_put_w(s, split=False) for s in result]
    return _eager(result)


def _eager(result: list) -> list:
    """zbv_greedy.eager_execution_time at unit times, no communication: each op, in slot order, starts when its
    device's previous op, its own previous micro-batch and its data dependency are done; the start slots."""
    p, nt = len(result), len(result[0])
    end = {}
    last = [None] * p
    out = [[[0] * len(x) for x in dev] for dev in result]
    heap = [(result[d][k][0], d, k, 0) for d in range(p) for k in range(nt) if result[d][k]]
    heapq.heapify(heap)
    while heap:
        _, d, k, j = heapq.heappop(heap)
        if j + 1 < len(result[d][k]):
            heapq.heappush(heap, (result[d][k][j + 1], d, k, j + 1))
        dep = 0
        if k in (0, 2) and d > 0:
            dep = max(dep, end[(d - 1, k, j)])
        if k in (1, 3) and d + 1 < p:
            dep = max(dep, end[(d + 1, k, j)])
        if 0 < k < 4:
            dep = max(dep, end[(d, k - 1, j)])
        if j > 0:
            dep = max(dep, end[(d, k, j - 1)])
        if last[d] is not None:
            dep = max(dep, end[last[d]])
        end[(d, k, j)] = dep + 1
        last[d] = (d, k, j)
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
