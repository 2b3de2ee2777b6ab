"""Every schedule is a valid, deadlock-free op order for every valid (p, m, v) in a grid."""
import numpy as np
import pytest

from planner.config import SCHEDULES, V_SHAPES
from planner.simulator import simulate_uniform
from planner.simulator.engine import DeadlockError, build_graph, run
from planner.simulator.ops import B, F, R, Schedule, W
from planner.simulator.orders import build


def _valid(s, p, m, v):
    if s == "interleaved":
        return v >= 2 and m % p == 0
    if s in V_SHAPES:
        return m >= p
    return True


@pytest.mark.parametrize("sched", SCHEDULES)
def test_deadlock_free_on_grid(sched):
    n = 0
    for p in (1, 2, 3, 4, 5, 7, 8):
        for m in (1, 2, 3, p, p + 1, 2 * p, 3 * p + 2):
            for v in ((2, 3) if sched == "interleaved" else (2,) if sched in V_SHAPES else (1,)):
                if not _valid(sched, p, m, v):
                    continue
                for rc, early in ((False, False), (True, False), (True, True)):
                    r = simulate_uniform(sched, p, m, v, f=1.0, b=2.5, w=0.7, recompute=0.8 if rc else 0.0,
                                         comm=0.1, recompute_in_bubbles=early)
                    work = m * 3.5
                    assert r.iteration_s >= work - 1e-9
                    assert r.busy_s == pytest.approx([work] * p)
                    n += 1
    assert n > 20


@pytest.mark.parametrize("sched", SCHEDULES)
def test_ops_respect_dependencies(sched):
    p, m, v = 4, 8, 2
    r = simulate_uniform(sched, p, m, v, f=1.0, b=2.0, w=0.5, comm=0.05)
    sch = r.schedule
    g = build_graph(sch)
    start, end = r.op_start, r.op_end
    has = g.pred >= 0
    assert np.all(start[has] >= end[g.pred[has]] - 1e-12)
    for d in range(p):       # device order, no overlap
        s, e = start[g.offs[d]:g.offs[d + 1]], end[g.offs[d]:g.offs[d + 1]]
        assert np.all(s[1:] >= e[:-1] - 1e-12)
    # each micro-batch goes forward through all stages in order, then backward in reverse
    S = sch.stages
    for j in range(m):
        fs = [end[(g.kind == F) & (g.mb == j) & (g.stage == s)][0] for s in range(S)]
        bs = [end[(g.kind == B) & (g.mb == j) & (g.stage == s)][0] for s in range(S)]
        assert fs == sorted(fs) and bs == sorted(bs, reverse=True) and bs[-1] > fs[-1]


def test_bad_order_is_reported_as_deadlock():
    s = build("1f1b", 2, 2)
    kinds = list(s.kinds)
    kinds[1] = kinds[1][::-1].copy()      # last stage runs its backwards before its forwards
    mbs = list(s.mbs)
    mbs[1] = mbs[1][::-1].copy()
    bad = Schedule(s.name, s.p, s.v, s.m, s.split, s.recompute, s.early_recompute, tuple(kinds), tuple(mbs), s.chunks)
    g = build_graph(bad)
    with pytest.raises(DeadlockError):
        run(g.offs.tolist(), g.pred.tolist(), [0.0] * len(g.pred), [1.0] * len(g.pred))


def test_missing_op_is_rejected():
    s = build("1f1b", 2, 2)
    bad = Schedule(s.name, s.p, s.v, s.m, s.split, s.recompute, s.early_recompute,
                   (s.kinds[0][:-1], s.kinds[1]), (s.mbs[0][:-1], s.mbs[1]), (s.chunks[0][:-1], s.chunks[1]))
    with pytest.raises(ValueError):
        build_graph(bad)


def test_invalid_configs_rejected():
    with pytest.raises(ValueError):
        build("interleaved", 4, 6, 2)
    with pytest.raises(ValueError):
        build("nope", 4, 8)


def test_recompute_ops_and_mario():
    """Recompute as ops; run early (Mario), it hides in the bubbles and the iteration gets shorter."""
    p, m = 4, 8
    std = simulate_uniform("1f1b", p, m, f=1.0, b=3.0, recompute=1.0)
    early = simulate_uniform("1f1b", p, m, f=1.0, b=3.0, recompute=1.0, recompute_in_bubbles=True)
    assert int(np.sum(std.op_kind == R)) == p * m
    assert std.iteration_s == pytest.approx((m + p - 1) * 4.0)
    assert early.iteration_s < std.iteration_s
    # the recomputed activations live longer when computed early: memory is the price
    assert max(early.activation_peak_GiB) >= max(std.activation_peak_GiB)


def test_split_schedules_have_w():
    for s in ("zb-h1", *V_SHAPES):
        sch = build(s, 4, 8, 2)
        assert sch.split and sum(int(np.sum(k == W)) for k in sch.kinds) == 8 * sch.stages
