"""V-shapes' orders timed op by op for the estimate, where their closed forms (costs/pipeline.py v_period, v_ramp,
vzb_ramp, and the data-parallel leads of costs/iteration.py) cannot follow the fixed order: pp 2, m near pp, device 0's
heavier end chunks (docs/notes/simulator.md, "V-shapes timed op by op where small").

The same orders (orders.build: vblocks.py's V-Min / V-Half, zbv.py's seed V-ZB at the builder's times) and the same walk
(engine.run) as the replay, on the per-rank times the estimate has, placed on chunks as the replay places them
(costs.pipeline.v_chunk_times): the makespan equals simulate_stage_times' at zero communication, and with a uniform hop
simulate_uniform's. The estimate (costs/iteration.py compute_const, p2p_exposed_hops, dp_row_s) imports this module
inside its functions: the simulator imports the cost modules at load time.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from planner.costs.pipeline import v_chunk_times
from planner.simulator.engine import build_graph, run
from planner.simulator.orders import build

# V-Min / V-Half run seed 001's fixed order (vblocks.py): timed up to this many ops (6 a micro-batch and device),
# about 1 ms of walk, ~3 ms to build an order (cached per (schedule, pp, m)).
V_WALK_OPS = 6144
# Longer V-Min / V-Half runs: timed at V_SETTLED pp + 12 micro-batches (orders of up to 2 V_WALK_OPS ops, i.e. pp <= 16)
# and extended by the growth of the last six; the transient has settled there on random ratios (f : b : w per rank,
# heavier end ranks, pp 2-16: within 0.2% of the full walk, the slow modes at pp 16), not at 2 pp + 14 (-0.5%).
V_SETTLED = 6
# The seed's V-ZB order is built at the plan's own times (simulator/zbv.py, ~9 us an op, not cacheable across plans):
# timed only up to this many ops (pp 2 with m <= 8, pp 4 with m 4: under 1 ms), where vzb_ramp, fitted from m = pp, is
# loosest; at pp 8, m 8 (3.5 ms a plan) the search would pay ~0.4 s more on a spec listing v-zb (it stays +16% there).
VZB_WALK_OPS = 96


@dataclass(frozen=True)
class VTimeline:
    """A V-shape's order timed at zero communication, seconds from the start: the makespan, each device's last op's
    end, each device's chunks' last W's end (its gradients ready: the data-parallel sync's start), and the chunk times
    the sync hides behind (each chunk's W, each device's forward over both chunks)."""
    makespan: float
    device_end: tuple
    grad_ready: tuple          # [device][chunk]
    w_chunk: tuple             # [device][chunk]
    f_device: tuple


def _v_graph(schedule: str, p: int, m: int, times: tuple | None = None, model: tuple | None = None) -> tuple:
    """The engine's dependency graph of a V order (no recompute ops: a chunk's recompute runs right before its B,
    which waits for it, so it is timed as part of B) and, per (device, chunk), its last W's index. times, model:
    the seed's V-ZB builder's per-chunk (f, b, w) and (hidden, heads, sequence), as the replay passes them."""
    kw = {} if times is None else {"times": times} | ({} if model is None else {"model": model})
    g = build_graph(build(schedule, p, m, 2, **kw))
    last_w = np.zeros((p, 2), np.int64)
    isw = np.flatnonzero(g.kind == 2)
    last_w[g.dev[isw], g.chunk[isw]] = isw            # ops are device-major in order: the last write is the last W
    cross = (g.pred >= 0) & (g.dev[np.maximum(g.pred, 0)] != g.dev)      # data from the neighbour device: a hop
    return g.offs.tolist(), g.pred.tolist(), cross, g.dev, g.chunk, g.kind, last_w


_v_fixed_graph = functools.lru_cache(maxsize=64)(_v_graph)      # V-Min / V-Half: one order per (schedule, p, m)


def v_timeline(schedule: str, f, b, w, m: int, model: tuple | None = None, c: float = 0.0) -> VTimeline | None:
    """V-Min / V-Half, and the seed's V-ZB (ZeRO 0-2), timed op by op on per-rank times f, b (w and recompute
    included), w, placed on chunks as the replay places them (v_chunk_times; B = b's chunk less w's); V-ZB's order
    built at the replay's builder times (each rank's chunk mean, the upper median over ranks: replay._builder_times)
    and model (hidden, heads, sequence; its memory model). c: every hop between devices, one way (sends overlap
    compute, as the replay's). Longer V-Min / V-Half runs at c = 0 extended from V_SETTLED pp + 12 micro-batches
    (orders of up to 2 V_WALK_OPS ops there); None beyond or for another schedule. Equal to the replay
    (simulate_stage_times at c = 0; simulate_uniform with comm = c) where every rank's recompute is alike (a chunk's B
    and its recompute split from their own lightest ranks otherwise)."""
    p = len(f)
    cap = {"v-half": V_WALK_OPS, "v-min": V_WALK_OPS, "v-zb": VZB_WALK_OPS}.get(schedule, 0)
    key = (tuple(map(float, f)), tuple(map(float, b)), tuple(map(float, w)))
    if p < 2 or cap == 0:
        return None
    if v_walked(schedule, p, m):
        return _v_timeline(schedule, *key, m, None if model is None else tuple(model), float(c))
    m1 = V_SETTLED * p + 12
    if schedule == "v-zb" or c > 0 or 6 * p * m1 > 2 * cap:
        return None
    # the order's middle repeats the stable pattern, so past its transient the makespan grows by one period a
    # micro-batch (six: the pattern's cycles may span several), and the end's offsets stay
    t1 = _v_timeline(schedule, *key, m1, None, 0.0)
    shift = (m - m1) * (t1.makespan - _v_timeline(schedule, *key, m1 - 6, None, 0.0).makespan) / 6
    return VTimeline(t1.makespan + shift, tuple(x + shift for x in t1.device_end),
                     tuple(tuple(x + shift for x in row) for row in t1.grad_ready), t1.w_chunk, t1.f_device)


def v_walked(schedule: str, p: int, m: int) -> bool:
    """Whether v_timeline times the whole order (with any hop), not an extension of a shorter one."""
    cap = {"v-half": V_WALK_OPS, "v-min": V_WALK_OPS, "v-zb": VZB_WALK_OPS}.get(schedule, 0)
    return p >= 2 and 6 * p * m <= cap


@functools.lru_cache(maxsize=256)       # the estimate asks for the compute, the hops and each data-parallel row
def _v_timeline(schedule: str, f: tuple, b: tuple, w: tuple, m: int, model: tuple | None, c: float) -> VTimeline:
    p = len(f)
    if schedule == "v-zb":
        times = tuple(np.sort(np.array([f, b, w]).T, axis=0)[p // 2] / 2)
        offs, pred, cross, dev, chunk, kind, last_w = _v_graph(schedule, p, m, times, model)
    else:
        offs, pred, cross, dev, chunk, kind, last_w = _v_fixed_graph(schedule, p, m)
    cf, cb, cw = (np.array(v_chunk_times(x)) for x in (f, b, w))
    ch = np.stack([cf, np.maximum(cb - cw, 0.0), cw])       # (kind, device, chunk)
    _start, end = run(offs, pred, (cross * c).tolist(), ch[kind, dev, chunk].tolist())
    dev_end = tuple(end[offs[d + 1] - 1] for d in range(p))
    ready = tuple(tuple(end[i] for i in row) for row in last_w.tolist())
    return VTimeline(max(dev_end), dev_end, ready, tuple(map(tuple, cw.tolist())), tuple(cf.sum(axis=1).tolist()))


def v_timeline_p2p_s(schedule: str, f, b, w, m: int, c: float, model: tuple | None = None) -> float | None:
    """Seconds a V-shape's hops of c (one way) add to its compute, from its order timed with and without them
    (v_timeline); None where the whole order is not timed (v_walked; then v_half_p2p_s, v_min_p2p_s, p2p_hops'
    fitted counts). Exact against the replay on uniform links (the mapping's own hops scale it:
    costs.iteration.typical_hop_traversals)."""
    if not v_walked(schedule, len(f), m):
        return None
    if c <= 0:
        return 0.0
    return v_timeline(schedule, f, b, w, m, model, c).makespan - v_timeline(schedule, f, b, w, m, model).makespan
