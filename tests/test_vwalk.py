"""The one walk of the V-shapes' orders (costs/vwalk.py) against the replay, its steady state against the whole walk,
and its work charge. docs/notes/simulator.md, "V-shapes: one walk (branch `vwalk`)"."""
from __future__ import annotations

import dataclasses
import random

import pytest

from planner.costs import vwalk
from planner.costs.compute import StageTimes

# (schedule, pytorch): V-Min, V-Half, the seed's V-ZB (built at the plan's times), PyTorch's V-ZB (torchtitan's)
ORDERS = [("v-min", False), ("v-half", False), ("v-zb", False), ("v-zb", True)]


def _uneven(rng, p, rc):
    """Per-rank times with heavier end ranks (embedding on rank 0, output layer and loss on the last) and the same
    recompute on every rank (its layers': the walk times a chunk's recompute inside its B, which the replay's R op
    before it equals where each chunk's recompute is alike; the replay splits B and R from their own lightest
    ranks)."""
    out = []
    for d in range(p):
        f = rng.uniform(0.8, 1.2) * (rng.uniform(1.0, 1.4) if d == 0 else rng.uniform(1.0, 2.5) if d == p - 1 else 1)
        b = f * rng.uniform(1.0, 3.5)
        w = b * rng.uniform(0.05, 0.5)
        out.append(StageTimes(f, b + rc, w, rc, 0.0))
    return out


def _walk(name, pytorch, f, b, w, m, c=0.0, model=None):
    """The walk's timeline, the seed's V-ZB beyond vzb_walked included (v_walk returns None there)."""
    key = tuple(tuple(map(float, x)) for x in (f, b, w))
    return vwalk._v_walk.__wrapped__(name, *key, m, float(c), pytorch, model)[0]


@pytest.mark.parametrize("name,pytorch", ORDERS)
@pytest.mark.parametrize("uniform", [True, False])
def test_the_walk_is_the_replay(name, pytorch, uniform):
    """Compute alone: the makespan equals simulate_stage_times' on the same per-rank times, p 2-6, m p .. 4p + 3,
    uniform and uneven stages (random, seeded), with and without recompute."""
    from planner.simulator.replay import simulate_stage_times
    rng = random.Random(10 * ORDERS.index((name, pytorch)) + uniform)
    for p in range(2, 7):
        for m in range(p, 4 * p + 4):
            st = _uneven(rng, p, rng.choice([0.0, 1.0]))
            if uniform:
                st = [st[1]] * p
            fbw = ([s.forward for s in st], [s.backward for s in st], [s.weight_grad for s in st])
            sim = simulate_stage_times(name, p, m, 2, st, pytorch=pytorch).compute_s
            assert _walk(name, pytorch, *fbw, m).makespan == pytest.approx(sim, rel=1e-9), (p, m)


@pytest.mark.parametrize("name,pytorch", ORDERS)
def test_the_walk_with_hops_is_the_replay(name, pytorch):
    """With a hop of 0.1 .. 4 chunk forwards on every link (uniform stages: the replay's simulate_uniform), the walk's
    makespan is the replay's, p 2-6, m p .. 4p + 3 (every third)."""
    from planner.simulator.replay import simulate_uniform
    rng = random.Random(5)
    for p in range(2, 7):
        for m in range(p, 4 * p + 4, 3):
            f, b = 1.0, rng.uniform(1.0, 4.0)
            w = b * rng.uniform(0.05, 0.5)
            for hop in (0.1, 1.0, 4.0):
                c = hop * f / 2
                sim = simulate_uniform(name, p, m, 2, f=f, b=b, w=w, comm=c, pytorch=pytorch).compute_s
                assert _walk(name, pytorch, [f] * p, [b] * p, [w] * p, m, c).makespan == pytest.approx(sim, rel=1e-9)


@pytest.mark.parametrize("name,pytorch", [("v-min", False), ("v-half", False), ("v-zb", True)])
def test_the_steady_state_is_the_whole_walk(name, pytorch):
    """At m = 20p (and 20p + 5) the walk times the warm-up, the blocks until the state at a cut repeats and the
    cool-down: the same makespan, device ends and chunks' last W's as walking every op (to 1e-12), uneven stages, with
    and without hops; and it does skip the middle where the state repeats."""
    rng = random.Random(3)
    skipped = 0
    for p in (2, 3, 4, 6, 8):
        for m in (20 * p, 20 * p + 5):
            st = _uneven(rng, p, 0.0)
            fbw = tuple(tuple(getattr(s, k) for s in st) for k in ("forward", "backward", "weight_grad"))
            g = vwalk._dag_cached(name, p, m, pytorch, None)
            whole = dataclasses.replace(g, bounds=(), frontier=())
            for c in (0.0, 0.3, 2.0):
                dur = vwalk._durations(*fbw)
                e, ops = vwalk._ends(g, dur, c)
                ef, n = vwalk._ends(whole, dur, c)
                skipped += ops < n
                for a, b in ((g.dev_last, g.dev_last), (sum(g.last_w, ()), sum(g.last_w, ()))):
                    assert [e[i] for i in a] == pytest.approx([ef[i] for i in b], rel=1e-12), (p, m, c)
    assert skipped >= 20


def test_the_walk_is_charged():
    """Every call charges the ops it timed (work.ORDER_OP_WORK_S each), cached or not, so the charge depends on the
    plan alone; the seed's V-ZB also its order's build (work.VZB_BUILD_OP_WORK_S an op), the others their DAG's (work.
    V_DAG_BUILD_OP_WORK_S an op: once per solve, every call outside one)."""
    from planner.mapping import work
    f, b, w = [1.2, 1.0, 1.0, 1.8], [2.5, 2.0, 2.0, 3.5], [0.6, 0.5, 0.5, 0.7]
    for name, pytorch in ORDERS:
        charges = []
        for _ in range(2):
            with work.metered() as meter:
                tl = vwalk.v_walk(name, f, b, w, 4, pytorch=pytorch)
            charges.append(meter.used_s)
        assert tl is not None and charges[0] == charges[1] > 0, name
        built = 6 * 4 * 4 if name == "v-zb" and not pytorch else 0
        dag = 0 if built else 6 * 4 * 4        # outside a solve's once_scope its DAG's build is charged every call
        assert charges[0] >= built * work.VZB_BUILD_OP_WORK_S + dag * work.V_DAG_BUILD_OP_WORK_S + work.ORDER_OP_WORK_S
        assert charges[0] <= ((6 * 4 * 4) * work.ORDER_OP_WORK_S + built * work.VZB_BUILD_OP_WORK_S
                              + dag * work.V_DAG_BUILD_OP_WORK_S + 1e-12)


def test_each_solve_pays_each_dag_build_once():
    """The DAG of an order (its shape: schedule, p, m) is cached per process; each solve (work.once_scope) pays its
    build once, cold cache or warm, so a solve's work depends on its plan alone: 1F1B's compute (its order walked as
    ZB-H1's with W = 0, pipeline.stage_compute_time) walks one for every configuration's (pp, m)."""
    from planner.costs.pipeline import stage_compute_time
    from planner.mapping import work
    f, b = [1.2, 1.0, 1.0, 1.8], [2.5, 2.0, 2.0, 3.5]
    charged = []
    for _ in range(2):                              # the second pass finds the DAG cached
        with work.once_scope(), work.metered() as meter:
            stage_compute_time("1f1b", 4, 40, 1, f, b, [0.0] * 4)
            first = meter.used_s
            stage_compute_time("1f1b", 4, 40, 1, f, b, [0.0] * 4)    # the same plan again: its walk, not the build
            again = meter.used_s - first
        assert first - again == pytest.approx(3 * 4 * 40 * work.V_DAG_BUILD_OP_WORK_S)
        charged.append(meter.used_s)
    assert charged[0] == charged[1]
    for name, pytorch in ORDERS:                    # every walked order; the seed's V-ZB pays its build every call
        with work.once_scope(), work.metered() as meter:
            vwalk.v_walk(name, [1.0] * 4, [2.0] * 4, [0.5] * 4, 4, pytorch=pytorch)
            one = meter.used_s
            vwalk.v_walk(name, [1.0] * 4, [2.0] * 4, [0.5] * 4, 4, pytorch=pytorch)
        seed_vzb = name == "v-zb" and not pytorch
        assert (meter.used_s - one == pytest.approx(one)) if seed_vzb else (meter.used_s - one < 0.5 * one), name


def test_the_seed_vzb_is_walked_below_2p_only():
    """The seed's V-ZB order is built at each plan's times (~10 us an op): walked below 4p micro-batches (its closed
    form's loose range: +17% at m = p, +9.6% at m = 2p with a heavy device 0) up to VZB_WALK_OPS ops, and small
    orders."""
    assert vwalk.vzb_walked(8, 8) and vwalk.vzb_walked(8, 31) and not vwalk.vzb_walked(8, 32)
    assert vwalk.vzb_walked(2, 8) and not vwalk.vzb_walked(2, 9)
    assert vwalk.vzb_walked(16, 32) and not vwalk.vzb_walked(16, 33) and not vwalk.vzb_walked(32, 32)
    assert vwalk.v_walk("v-zb", [1.0] * 8, [2.0] * 8, [0.5] * 8, 32) is None
    assert vwalk.v_walk("v-zb", [1.0] * 8, [2.0] * 8, [0.5] * 8, 32, pytorch=True) is not None
