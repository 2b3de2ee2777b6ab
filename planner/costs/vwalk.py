"""One dependency walk for every V-shape order and ZB-H1's, with an exact steady state (docs/notes/simulator.md,
"V-shapes: one walk", "ZB-H1: its order walked").

The orders: seed 001's V-Min / V-Half (simulator/vblocks.py, fixed, built at unit times), the seed's V-ZB
(simulator/zbv.py, built at the plan's profiled times), PyTorch's ScheduleZBVZeroBubble (torchtitan's V-ZB, ZeRO-3
plans: vorders.pytorch_zbv_order) and ZB-H1 (vorders.zb_h1_order: one stage a device, three ops a
micro-batch), exactly the lists the replay runs (simulator/orders.py build). Each op starts when
its device's previous op has ended and its data has arrived, a hop c later where the data comes from the other device
(sends overlapping compute: the replay's engine.run); per-rank times are placed on chunks as the replay places them
(vorders.v_chunk_times; a chunk's recompute inside its B). So the makespan is the replay's at zero communication
(simulate_stage_times) and, with one hop for every link, simulate_uniform's.

Steady state. Every V-shape runs six ops a micro-batch on every device (F, B, W of two chunks), and its order repeats
in the middle: the op six positions later on a device is the same pass of the next micro-batch, waiting on the ops six
positions later on theirs. _dag finds that stretch on the DAG itself (no assumption on the builder): a cut t at
position c_d + 6t of every device (c_d from one unit-time instant, so the cut is causal), blocks of ops between cuts
that map onto the next by that shift, and the ops before a cut that the rest reads (its frontier) mapped onto the next
cut's. Between two such cuts the order is one max-plus map, the same for every t; so when the frontier's ends X_t
equal X_(t-q) plus one constant D (relative STEADY_TOL), X_(t+kq) = X_t + kD up to the last cut, and the ops after it
are timed from there: the whole order's makespan, each device's end and each chunk's last W, without the middle.
Interleaved runs the same test on its own cuts (pipeline._interleaved_steady: steady_shift, one home).

Cost: the DAG is built once per shape (schedule, p, m; the seed's V-ZB per its builder's integer times) and cached;
a plan times the warm-up, the blocks until the state repeats and the cool-down. Each call is charged what it timed
(work.ORDER_OP_WORK_S an op) and, for the seed's V-ZB, what its builder took (work.VZB_BUILD_OP_WORK_S an op), cached
or not, so that the charge depends on the plan alone; every other order's DAG build once per solve
(work.V_DAG_BUILD_OP_WORK_S an op, work.charge_once), warm cache or not.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from planner.config import SPLIT_SCHEDULES
from planner.costs.vorders import pytorch_zbv_order, v_chunk_times, zb_h1_order

STEADY_TOL = 1e-9     # relative: two states of an order equal up to a shift (rounding of sums along its paths)
STEADY_MAX_Q = 8      # the most cuts a repeating state may span (V-Min's critical cycles may span several)
STEADY_EVERY_FROM = 32    # the state tested at every cut up to this one, then at every fourth
V_PERIOD = 6          # ops a device runs per micro-batch in every V-shape: F, B, W of its two chunks
# The seed's V-ZB order is built at the plan's own times (simulator/zbv.py, ~10 us an op, not shared between plans):
# walked where its closed form (pipeline.vzb_ramp, fitted from m = pp) is loose, fewer than 4p micro-batches (+17% at
# m = pp and +9.6% at m = 2pp with a heavy device 0), up to this many ops (p <= 11), and on small orders (p 2, m <= 8)
VZB_WALK_OPS = 3072
VZB_SMALL_OPS = 96
# Its p2p closed form (pipeline.p2p_hops, 2.5 traversals) was fitted at hops up to 0.3 of a device's forward; past that
# the order is latency-bound (a micro-batch's 2(2p - 2) hops against a cap of 2p chunks in flight: -38% at hops of 3
# forwards, the fuzz of valid plans' seed 9 case 821), so its hops are walked beyond VZB_WALK_OPS too, up to this many
VZB_HOP_FIT = 0.3
VZB_HOP_WALK_OPS = 49152


@dataclass(frozen=True)
class VTimeline:
    """A V-shape's order timed, seconds from the start: the makespan, each device's last op's end, each device's
    chunks' last W's end (its gradients ready: the data-parallel sync's start), and the chunk times the sync hides
    behind (each chunk's W, each device's forward over both chunks)."""
    makespan: float
    device_end: tuple
    grad_ready: tuple          # [device][chunk]
    w_chunk: tuple             # [device][chunk]
    f_device: tuple


def steady_shift(X, t: int, qs) -> tuple[int, float] | None:
    """(q, D) when state X[t] equals X[t - q] plus one constant D in every entry (relative STEADY_TOL), for the first q
    of qs that does, else None. X: the states of an order at successive cuts, each over the same frontier. Max-plus
    maps do not expand differences, so an error d in the states moves D by at most d."""
    qs = [q for q in qs if q <= t]
    xt = np.asarray(X[t], float)
    if not qs or not xt.size:
        return None
    d = xt - np.asarray([X[t - q] for q in qs], float)            # (q, entries): one numpy pass for every q
    hit = np.flatnonzero(d.max(axis=1) - d.min(axis=1) <= STEADY_TOL * max(1.0, float(np.abs(xt).max())))
    return (qs[hit[0]], float(d[hit[0]].mean())) if hit.size else None


def vzb_hops_walked(p: int, m: int, hop: float, forward: float) -> bool:
    """Whether the seed's V-ZB beyond its walk (vzb_walked) has its hops walked all the same (v_walk_p2p_s, beyond):
    a typical one-way hop past VZB_HOP_FIT of the fastest device's forward, up to VZB_HOP_WALK_OPS ops."""
    return (p >= 2 and not vzb_walked(p, m) and 6 * p * m <= VZB_HOP_WALK_OPS
            and hop > VZB_HOP_FIT * forward)


def vzb_walked(p: int, m: int) -> bool:
    """Whether the seed's V-ZB (ZeRO 0-2) is walked: below 4p micro-batches up to VZB_WALK_OPS ops, or a small order;
    beyond, its closed form (pipeline.stage_compute_time)."""
    ops = 6 * p * m
    return p >= 2 and (ops <= VZB_SMALL_OPS or (m < 4 * p and ops <= VZB_WALK_OPS))


def v_order(schedule: str, p: int, m: int, pytorch: bool = False, builder: tuple | None = None) -> list:
    """Per device (kind 0 F / 1 B / 2 W, micro-batch, chunk) arrays of a V-shape's order, the replay's
    (simulator/orders.py build): PyTorch's V-ZB where pytorch, else the seed's; builder: the seed's V-ZB builder's
    key (simulator/zbv.py builder_key: its integer per-chunk times and memory model)."""
    if schedule == "v-zb" and pytorch:
        out = []
        for ops in pytorch_zbv_order(p, m):
            a = np.array(ops, np.int64).reshape(-1, 3)
            out.append((a[:, 0], a[:, 1], a[:, 2]))
        return out
    if schedule == "v-zb":
        from planner.simulator.zbv import zbv_order_of  # here: the simulator imports the cost modules at load time
        return [tuple(np.asarray(x, np.int64) for x in o) for o in zbv_order_of(p, m, builder)]
    if schedule in ("v-min", "v-half"):
        from planner.simulator.vblocks import v_block_order  # here: as above
        return v_block_order(schedule, p, m)
    if schedule == "zb-h1":
        return zb_h1_order(p, m)
    raise ValueError(f"{schedule!r} is neither a V-shape nor ZB-H1")


def _shape(schedule: str) -> tuple[int, int]:
    """(model chunks a device holds, ops a device runs per micro-batch): a V's two chunks (F, B, W of each), ZB-H1's
    one stage a device (F, B, W)."""
    return (1, 3) if schedule == "zb-h1" else (2, V_PERIOD)


@dataclass(frozen=True)
class _Dag:
    """A V order's ops in one topological order, numbered 1.. (0: none, end 0): per op its device's previous op, the op
    whose data it waits for, whether that data crosses a hop and over which device boundary (bnd: j between devices j
    and j + 1), and its duration slot (kind, device, chunk). Buckets:
    bounds[i] = the ops numbered below it are those before cut t0 + i (bounds[-1]: all but the ops after the last cut);
    frontier[i] the op numbers whose ends make the state at cut t0 + i (frontier[i + 1] is frontier[i] shifted by one
    block). Empty bounds: no steady stretch found (the whole order is walked)."""
    prev: list
    dep: list
    hop: np.ndarray
    bnd: np.ndarray
    slot: np.ndarray
    dev_last: tuple             # op number of each device's last op
    last_w: tuple               # [device][chunk] op number of its last W
    bounds: tuple
    frontier: tuple


def _dag(schedule: str, p: int, m: int, pytorch: bool, builder: tuple | None) -> _Dag:
    lists = v_order(schedule, p, m, pytorch, builder)
    kind = np.concatenate([o[0] for o in lists]).astype(np.int64)
    mb = np.concatenate([o[1] for o in lists]).astype(np.int64)
    ch = np.concatenate([o[2] for o in lists]).astype(np.int64)
    lens = np.array([len(o[0]) for o in lists])
    offs = np.r_[0, np.cumsum(lens)]
    n = int(offs[-1])
    dev = np.repeat(np.arange(p), lens)
    pos = np.arange(n) - offs[dev]
    C, period = _shape(schedule)
    S = C * p
    stage = np.where(ch == 0, dev, S - 1 - dev)              # chunk 0 down the V, chunk 1 back up (ops.stage_table)
    idx = np.full((3, S, m), -1, np.int64)
    idx[kind, stage, mb] = np.arange(n)
    cnt = np.zeros((3, S, m), np.int64)
    np.add.at(cnt, (kind, stage, mb), 1)
    if not (cnt == 1).all():
        raise ValueError(f"{schedule} order at p={p}, m={m}: an F, B or W missing or repeated")
    dep = np.full(n, -1, np.int64)
    isf, isb, isw = kind == 0, kind == 1, kind == 2
    fm = isf & (stage > 0)
    dep[fm] = idx[0, stage[fm] - 1, mb[fm]]
    dep[isb] = np.where(stage[isb] < S - 1, idx[1, np.minimum(stage[isb] + 1, S - 1), mb[isb]],
                        idx[0, S - 1, mb[isb]])               # the gradient from the next stage, or the loss
    dep[isw] = idx[1, stage[isw], mb[isw]]
    prev = np.where(pos > 0, np.arange(n) - 1, -1)
    start = _unit_starts(offs.tolist(), dep.tolist(), schedule, p, m)
    # the steady stretch: shift = the op one period (six positions in a V, three in ZB-H1) later on the device
    sh = np.where(pos + period < lens[dev], np.arange(n) + period, -1)
    ok = (sh >= 0) & (pos > 0)
    j = np.where(ok, sh, 0)
    ok &= (kind[j] == kind) & (ch[j] == ch) & (mb[j] == mb + 1)
    dj = dep[j]
    ok &= np.where(dep < 0, dj < 0, (dep >= 0) & (sh[np.maximum(dep, 0)] == dj) & (dj >= 0))
    bounds, frontier, order = (), (), np.argsort(start, kind="stable")
    # one instant mid-way through the order's first half: every device's ops before it make the cut c_d
    tau = np.sort(start)[n // 4]
    c = np.array([int(np.sum(start[offs[d]:offs[d + 1]] < tau)) for d in range(p)])
    k = (pos - c[dev]) // period                             # the block of each op: between cuts k and k + 1
    kmin, kmax = int(k.min()), int(k.max())
    valid = np.ones(kmax - kmin + 1, bool)
    np.logical_and.at(valid, k - kmin, ok)
    # the longest run of blocks each mapped onto the next: cuts t0 .. t1
    best, run_start = (0, -1), None
    for t in range(kmin, kmax + 2):
        if t <= kmax and valid[t - kmin]:
            run_start = t if run_start is None else run_start
        elif run_start is not None:
            if t - run_start > best[1] - best[0]:
                best = (run_start, t)
            run_start = None
    t0, t1 = best
    if t1 - t0 >= 2:
        # each op's last successor's block: op j is in the frontier of cut t when k(j) < t <= ks(j)
        ks = np.full(n, -10 ** 9, np.int64)
        nxt = np.flatnonzero(pos + 1 < lens[dev])
        ks[nxt] = k[nxt + 1]
        hasd = dep >= 0
        np.maximum.at(ks, dep[hasd], k[hasd])
        fr = [np.flatnonzero((k < t) & (ks >= t)) for t in range(t0, t1 + 1)]
        last = 0
        while last < t1 - t0 and len(fr[last + 1]) == len(fr[last]) and (fr[last + 1] == fr[last] + period).all():
            last += 1
        t1 = t0 + last
        kd = k[np.maximum(dep, 0)]
        causal = not (hasd & (np.maximum(k + 1, t0) <= np.minimum(kd, t1))).any()
        outs = np.r_[offs[1:] - 1, [np.flatnonzero((dev == d) & (ch == cc) & isw).max() for d in range(p)
                                     for cc in range(C)]]
        if t1 - t0 >= 2 and causal and (k[outs] >= t1).all():
            bucket = np.clip(k, t0 - 1, t1)
            order = np.lexsort((start, bucket))
            num = np.empty(n, np.int64)
            num[order] = np.arange(1, n + 1)
            bounds = tuple(int(x) + 1 for x in np.searchsorted(bucket[order], np.arange(t0, t1 + 1)))
            frontier = tuple(tuple(num[f].tolist()) for f in fr[:t1 - t0 + 1])
    num = np.empty(n, np.int64)
    num[order] = np.arange(1, n + 1)
    numz = np.r_[0, num]                                     # -1 (none) -> 0
    cross = (dep >= 0) & (dev[np.maximum(dep, 0)] != dev)
    slot = (kind * p + dev) * C + ch
    last_w = tuple(tuple(int(num[np.flatnonzero((dev == d) & (ch == cc) & isw).max()]) for cc in range(C))
                   for d in range(p))
    bnd = np.minimum(dev, dev[np.maximum(dep, 0)])           # adjacent devices: the boundary between them
    return _Dag(numz[prev + 1][order].tolist(), numz[dep + 1][order].tolist(), cross[order], bnd[order], slot[order],
                tuple(int(num[offs[d + 1] - 1]) for d in range(p)), last_w, bounds, frontier)


def _unit_starts(offs: list, dep: list, schedule: str, p: int, m: int) -> np.ndarray:
    """Each op's start with every op one unit long and no hops (an op after its device's previous op and its data):
    sorting by it gives a topological order. The engine's walk (simulator/engine.py run): a device runs its list until
    an op's data is not there, and waits for it; ops left when no device can move are a deadlock."""
    n = offs[-1]
    end = [-1] * n
    start = [0] * n
    waiter = [-1] * n
    ptr, stop, free = offs[:-1], offs[1:], [0] * p
    stack = list(range(p - 1, -1, -1))
    while stack:
        d = stack.pop()
        i, e, t = ptr[d], stop[d], free[d]
        while i < e:
            a = dep[i]
            if a >= 0:
                if end[a] < 0:
                    waiter[a] = d
                    break
                if end[a] > t:
                    t = end[a]
            start[i] = t
            t += 1
            end[i] = t
            if waiter[i] >= 0:
                stack.append(waiter[i])
            i += 1
        ptr[d], free[d] = i, t
    if any(ptr[d] < stop[d] for d in range(p)):
        raise ValueError(f"the {schedule} order deadlocks at p={p}, m={m}")
    return np.array(start, np.int64)


_dag_cached = functools.lru_cache(maxsize=64)(_dag)


def _ends(g: _Dag, dur: np.ndarray, c: float | tuple) -> tuple[list, int]:
    """(end of every op by number, [0] = 0; ops timed): the whole order, or its warm-up, the blocks until the state at
    a cut repeats (steady_shift) and the ops after the last cut from that state moved on. c: one hop for every device
    boundary, or a tuple of each boundary's (p - 1; a pair's link is fixed, so the steady state still repeats)."""
    prev, dep, slot, hop = g.prev, g.dep, g.slot, g.hop
    n = len(prev)
    e = [0.0] * (n + 1)
    per_op = None
    if isinstance(c, tuple):
        per_op = np.where(hop, np.r_[np.asarray(c, float), 0.0][np.minimum(g.bnd, len(c))], 0.0)
        c = 1.0 if per_op.any() else 0.0

    def run(lo: int, hi: int) -> None:       # ops numbered lo .. hi - 1, in order
        times = dur[slot[lo - 1:hi - 1]].tolist()
        if per_op is not None:
            waits = per_op[lo - 1:hi - 1].tolist()
        else:
            waits = (hop[lo - 1:hi - 1] * c).tolist() if c else [0.0] * (hi - lo)
        for i, a, b, w, t in zip(range(lo, hi), prev[lo - 1:hi - 1], dep[lo - 1:hi - 1], waits, times):
            x, y = e[a], e[b] + w
            e[i] = (x if x > y else y) + t

    if not g.bounds:
        run(1, n + 1)
        return e, n
    b, fr = g.bounds, g.frontier
    last = len(b) - 1                        # cuts t0 .. t0 + last
    run(1, b[0])
    X = [[e[j] for j in fr[0]]]
    t = 0
    while t < last:
        run(b[t], b[t + 1])
        t += 1
        X.append([e[j] for j in fr[t]])
        if t > STEADY_EVERY_FROM and t % 4:
            continue                         # a long transient: the test every fourth cut (it costs ~a block)
        hit = steady_shift(X, t, range(1, STEADY_MAX_Q + 1))
        if hit is not None and t < last:
            q, D = hit
            r = (last - t) % q
            run(b[t], b[t + r])              # r more blocks, then whole repeats of q to the last cut
            jump = (last - t - r) // q * D
            for src, dst in zip(fr[t + r], fr[last], strict=True):
                e[dst] = e[src] + jump
            run(b[last], n + 1)
            return e, b[t + r] - 1 + n + 1 - b[last]
    run(b[last], n + 1)
    return e, n


def _durations(f: tuple, b: tuple, w: tuple, chunks: int = 2) -> np.ndarray:
    """Per (kind, device, chunk) op times, flat: F from f, B = b's chunk less w's (each from its own lightest rank, as
    the replay's _chunk_times: splitting b - w instead differs where those are different ranks'), W from w. One chunk
    a device (ZB-H1): each device's own times."""
    if chunks == 1:
        cf, cb, cw = (np.array(x, float)[:, None] for x in (f, b, w))
    else:
        cf, cb, cw = (np.array(v_chunk_times(x)) for x in (f, b, w))
    return np.stack([cf, np.maximum(cb - cw, 0.0), cw]).ravel()


def builder_times(f, b, w) -> tuple[float, float, float]:
    """The seed's V-ZB builder's per-chunk (f, b input gradient, w): each rank's chunk mean, the upper median over
    ranks (replay._builder_times), b less w as orders.build passes them."""
    tf, tb, tw = np.sort(np.array([f, b, w], float).T, axis=0)[len(f) // 2] / 2
    return float(tf), float(max(tb - tw, 0.0)), float(max(tw, 0.0))


@functools.lru_cache(maxsize=512)       # the estimate asks for the compute, the hops and each data-parallel row
def _v_walk(schedule: str, f: tuple, b: tuple, w: tuple, m: int, c: float | tuple, pytorch: bool,
            model: tuple | None) -> tuple[VTimeline, int, int]:
    p = len(f)
    builder = None
    built = 0
    if schedule == "v-zb" and not pytorch:
        from planner.simulator.zbv import DEFAULT_MODEL, builder_key  # here: the simulator imports the cost modules
        builder = builder_key(*builder_times(f, b, w), model=DEFAULT_MODEL if model is None else tuple(model))
        built = 6 * p * m
    g = _dag_cached(schedule, p, m, pytorch, builder)
    C = _shape(schedule)[0]
    dur = _durations(f, b, w, C)
    e, ops = _ends(g, dur, c)
    dev_end = tuple(e[i] for i in g.dev_last)
    ready = tuple(tuple(e[i] for i in row) for row in g.last_w)
    d3 = dur.reshape(3, p, C)
    tl = VTimeline(max(dev_end), dev_end, ready, tuple(map(tuple, d3[2].tolist())), tuple(d3[0].sum(axis=1).tolist()))
    return tl, ops, built


def v_walk(schedule: str, f, b, w, m: int, c: float = 0.0, pytorch: bool = False,
           model: tuple | None = None, beyond: bool = False) -> VTimeline | None:
    """A V-shape's order timed on per-rank times f, b (w and recompute included), w, every hop c one way (or, a
    sequence, each device boundary's: j between ranks j and j + 1, both directions): V-Min,
    V-Half, the seed's V-ZB (ZeRO 0-2, built at its builder's times from f, b, w and model: hidden, heads, sequence)
    or, pytorch, PyTorch's V-ZB (torchtitan's, ZeRO-3). The seed's V-ZB only where vzb_walked or beyond (the caller's
    vzb_hops_walked; None else). Equal to
    the replay (simulate_stage_times at c = 0, simulate_uniform with comm = c) where every rank's recompute is alike;
    large m exactly through the order's steady state (the module's docstring). Cached; each call charged."""
    p = len(f)
    if p < 2 or schedule not in SPLIT_SCHEDULES:
        return None
    if schedule == "v-zb" and not pytorch and not (beyond or vzb_walked(p, m)):
        return None
    key = tuple(tuple(map(float, x)) for x in (f, b, w))
    c = tuple(map(float, c)) if np.ndim(c) else float(c)
    if isinstance(c, tuple) and len(c) != p - 1:
        raise ValueError(f"{len(c)} boundary hops for {p} devices")
    tl, ops, built = _v_walk(schedule, *key, int(m), c, bool(pytorch and schedule == "v-zb"),
                             None if model is None else tuple(model))
    from planner.mapping import work  # here: planner.mapping imports the cost modules

    work.charge(ops * work.ORDER_OP_WORK_S + built * work.VZB_BUILD_OP_WORK_S)   # cached or not: the plan's charge
    if not built:       # its shape's DAG, cached per process: each solve pays its build once (the seed's V-ZB: above)
        work.charge_once(("v_dag", schedule, p, int(m), bool(pytorch and schedule == "v-zb")),
                         3 * _shape(schedule)[0] * p * m * work.V_DAG_BUILD_OP_WORK_S)
    return tl


def v_walk_p2p_s(schedule: str, f, b, w, m: int, c: float, pytorch: bool = False,
                 model: tuple | None = None, beyond: bool = False) -> float | None:
    """Seconds a V-shape's hops of c (one way; one for all boundaries or each one's, as v_walk) add to its compute: its
    order walked with and without them (v_walk);
    None where it is not walked. Exact against the replay on uniform links (the mapping's own hops scale it:
    costs.iteration.typical_hop_traversals)."""
    tl = v_walk(schedule, f, b, w, m, 0.0, pytorch, model, beyond)
    if tl is None:
        return None
    if not np.any(np.asarray(c, float) > 0):
        return 0.0
    return v_walk(schedule, f, b, w, m, c, pytorch, model, beyond).makespan - tl.makespan
